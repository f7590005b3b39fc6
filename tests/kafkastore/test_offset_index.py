"""The ``.index`` format: exact bytes, validation, lookups against brute force."""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.format import offset_index
from kafkastore.errors import CorruptRecordError
from kafkastore.format.offset_index import CorruptIndexError


def test_bytes_by_hand():
    # base 100: offset 105 at byte 4150 -> relative 5 = 0x00000005, 4150 = 0x00001036;
    # offset 230 at 8300 -> 130 = 0x00000082, 8300 = 0x0000206c. Big-endian int32 pairs.
    data = offset_index.encode([(105, 4150), (230, 8300)], 100)
    assert data == bytes.fromhex("00000005" "00001036" "00000082" "0000206c")
    assert offset_index.parse(data, 100) == [(105, 4150), (230, 8300)]
    assert offset_index.entry_count(data) == 2
    assert offset_index.entry(data, 100, 1) == (230, 8300)


def test_encode_refuses_what_kafka_would_not_append():
    for bad in ([(5, 10), (5, 20)], [(5, 10), (6, 10)], [(5, 10), (4, 20)],
                [(99, 0)], [(100 + 2**31, 0)], [(101, -1)]):
        with pytest.raises(ValueError):
            offset_index.encode(bad, 100)


@pytest.mark.parametrize("data, what", [
    (bytes(7), "multiple of 8"),
    (struct.pack(">ii", 5, 10) + struct.pack(">ii", 5, 20), "does not increase"),
    (struct.pack(">ii", 5, 10) + struct.pack(">ii", 6, 10), "does not increase"),
    (struct.pack(">ii", 5, 10) + struct.pack(">ii", 4, 20), "does not increase"),
    (struct.pack(">ii", -1, 10), "negative"),
    (struct.pack(">ii", 1, -10), "negative"),
])
def test_parse_rejects(data, what):
    with pytest.raises(CorruptIndexError) as e:
        offset_index.parse(data, 0, segment="seg")
    assert isinstance(e.value, CorruptRecordError)
    assert what in str(e.value) and "seg" in str(e.value)


def test_lookup_edges():
    data = offset_index.encode([(110, 500), (120, 900), (130, 1500)], 100)
    assert offset_index.lookup(b"", 100, 105) == 0
    assert offset_index.lookup_entry(b"", 100, 105) == (100, 0)
    assert offset_index.lookup(data, 100, 50) == 0          # below the base offset
    assert offset_index.lookup(data, 100, 109) == 0         # below the first entry
    assert offset_index.lookup(data, 100, 110) == 500       # exact
    assert offset_index.lookup(data, 100, 119) == 500
    assert offset_index.lookup(data, 100, 125) == 900
    assert offset_index.lookup_entry(data, 100, 10**9) == (130, 1500)
    assert offset_index.lookup(memoryview(data), 100, 131) == 1500


@st.composite
def indexes(draw):
    base = draw(st.sampled_from([0, 1, 10**12]))
    n = draw(st.integers(0, 300))
    rels = sorted(set(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n))))
    positions = sorted(set(draw(st.lists(st.integers(1, 2**31 - 1), min_size=len(rels),
                                         max_size=len(rels)))))
    entries = [(base + r, p) for r, p in zip(rels, positions)]
    return base, entries


@settings(max_examples=200, deadline=None)
@given(idx=indexes(), data=st.data())
def test_lookup_matches_brute_force(idx, data):
    base, entries = idx
    raw = offset_index.encode(entries, base)
    assert offset_index.parse(raw, base) == entries
    probes = [o for o, _ in entries[:5]] + [o + 1 for o, _ in entries[-3:]] + [base - 1, base]
    probes += data.draw(st.lists(st.integers(base - 10, base + 2**31 + 10), max_size=20))
    for target in probes:
        below = [e for e in entries if e[0] <= target]
        expected = below[-1] if below else (base, 0)
        assert offset_index.lookup_entry(raw, base, target) == expected
        assert offset_index.lookup(raw, base, target) == expected[1]


@settings(max_examples=100, deadline=None)
@given(junk=st.binary(max_size=200), target=st.integers(-5, 2**40))
def test_lookup_on_garbage_returns(junk, target):
    # Unvalidated bytes: any answer, but an answer (no hang, no exception).
    assert isinstance(offset_index.lookup(junk, 0, target), int)


def test_trim_preallocated():
    data = offset_index.encode([(3, 256), (9, 512)], 0)   # positions end in a 0x00 byte
    assert offset_index.trim_preallocated(data + bytes(10 * 1024 * 1024)) == data
    assert offset_index.trim_preallocated(data) == data
    assert offset_index.trim_preallocated(bytes(4096)) == b""
    assert offset_index.trim_preallocated(b"") == b""
    # a non-zero partial entry is kept, so parse() reports the bad size
    odd = data + b"\x01"
    assert offset_index.trim_preallocated(odd) == odd
    with pytest.raises(CorruptIndexError):
        offset_index.parse(offset_index.trim_preallocated(odd + bytes(16)), 0)


def test_trim_then_parse_real_looking_file():
    entries = [(1000 + 40 * i, 4200 * i + 4111) for i in range(1, 50)]
    raw = offset_index.encode(entries, 1000)
    padded = raw + bytes(1 << 20)
    assert offset_index.parse(offset_index.trim_preallocated(padded), 1000) == entries
    with pytest.raises(CorruptIndexError):
        offset_index.parse(raw + os.urandom(8) + bytes(8), 1000)
