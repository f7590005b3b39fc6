"""The ``.timeindex`` format: exact bytes, Kafka's maybeAppend rule, lookups."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.format import time_index
from kafkastore.errors import CorruptRecordError
from kafkastore.format.time_index import CorruptIndexError, TimeIndexWriter

TS = 1_700_000_000_000  # 0x0000018bcfe56800


def test_bytes_by_hand():
    # base 100: (TS, offset 103) -> int64 BE 0x0000018bcfe56800, int32 BE relative 3.
    data = time_index.encode([(TS, 103), (TS + 1, 107)], 100)
    assert data == bytes.fromhex("0000018bcfe56800" "00000003" "0000018bcfe56801" "00000007")
    assert time_index.parse(data, 100) == [(TS, 103), (TS + 1, 107)]
    assert time_index.last_entry(data, 100) == (TS + 1, 107)
    assert time_index.last_entry(b"", 100) == (-1, 100)


def test_maybe_append_rule():
    w = TimeIndexWriter(10)
    assert w.last_entry == (-1, 10)
    assert not w.maybe_append(-1, 10)          # NO_TIMESTAMP is never indexed
    assert w.maybe_append(500, 12)
    assert not w.maybe_append(500, 12)         # same entry again (segment closed twice)
    assert not w.maybe_append(500, 15)         # not a larger timestamp
    assert w.maybe_append(501, 15)
    assert w.maybe_append(502, 15)             # equal offset allowed, as in Kafka
    with pytest.raises(ValueError):
        w.maybe_append(600, 14)                # offset going back
    with pytest.raises(ValueError):
        w.maybe_append(400, 20)                # timestamp going back
    with pytest.raises(ValueError):
        TimeIndexWriter(10).maybe_append(5, 9)  # below the base offset
    assert time_index.parse(w.to_bytes(), 10) == [(500, 12), (501, 15), (502, 15)]


def test_encode_refuses_entries_maybe_append_would_skip():
    with pytest.raises(ValueError):
        time_index.encode([(5, 1), (5, 2)], 0)
    with pytest.raises(ValueError):
        time_index.encode([(-1, 0)], 0)


@pytest.mark.parametrize("entries_bytes, what", [
    (bytes(13), "multiple of 12"),
    (time_index.encode([(5, 1)], 0) + time_index.encode([(5, 2)], 0), "does not increase"),
    (time_index.encode([(5, 3)], 0) + time_index.encode([(6, 2)], 0), "does not increase"),
    ((-7).to_bytes(8, "big", signed=True) + (1).to_bytes(4, "big"), "does not increase"),
    ((7).to_bytes(8, "big") + (-1).to_bytes(4, "big", signed=True), "negative"),
])
def test_parse_rejects(entries_bytes, what):
    with pytest.raises(CorruptIndexError) as e:
        time_index.parse(entries_bytes, 0)
    assert isinstance(e.value, CorruptRecordError) and what in str(e.value)


def test_lookup_edges():
    data = time_index.encode([(1000, 5), (2000, 9), (3000, 20)], 0)
    assert time_index.lookup_entry(b"", 7, 10) == (-1, 7)
    assert time_index.lookup(data, 0, 999) == 0             # before every entry: base offset
    assert time_index.lookup(data, 0, 1000) == 5
    assert time_index.lookup(data, 0, 2999) == 9
    assert time_index.lookup_entry(data, 0, 10**15) == (3000, 20)


@st.composite
def time_indexes(draw):
    base = draw(st.sampled_from([0, 42, 10**12]))
    stamps = sorted(set(draw(st.lists(st.integers(0, 2**45), max_size=200))))
    rels = sorted(draw(st.lists(st.integers(0, 2**31 - 1), min_size=len(stamps), max_size=len(stamps))))
    return base, [(t, base + r) for t, r in zip(stamps, rels)]


@settings(max_examples=200, deadline=None)
@given(idx=time_indexes(), data=st.data())
def test_lookup_matches_brute_force(idx, data):
    base, entries = idx
    raw = time_index.encode(entries, base)
    assert time_index.parse(raw, base) == entries
    probes = [t for t, _ in entries[:4]] + [t - 1 for t, _ in entries[-2:]] + [-1, 0]
    probes += data.draw(st.lists(st.integers(-10, 2**45 + 10), max_size=20))
    for target in probes:
        below = [e for e in entries if e[0] <= target]
        expected = below[-1] if below else (-1, base)
        assert time_index.lookup_entry(raw, base, target) == expected
        assert time_index.lookup(raw, base, target) == expected[1]


@settings(max_examples=100, deadline=None)
@given(stamps=st.lists(st.integers(-1, 10_000), max_size=60))
def test_writer_fed_max_so_far_is_always_parseable(stamps):
    # How LogSegment drives it: maxTimestampSoFar, offset of the batch reaching it.
    w = TimeIndexWriter(0)
    max_so_far, at = -1, 0
    for offset, ts in enumerate(stamps):
        if ts > max_so_far:
            max_so_far, at = ts, offset
        w.maybe_append(max_so_far, at)
    entries = time_index.parse(w.to_bytes(), 0)
    records_so_far = [max(stamps[:i + 1]) for i in range(len(stamps))]
    assert [t for t, _ in entries] == sorted(set(t for t in records_so_far if t >= 0))


def test_trim_preallocated():
    data = time_index.encode([(TS, 3), (TS + 256, 9)], 0)
    assert time_index.trim_preallocated(data + bytes(12 * 100_000)) == data
    assert time_index.trim_preallocated(bytes(120)) == b""
