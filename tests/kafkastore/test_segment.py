"""Segments: Kafka's index-entry rule, builder == rebuild, lookups, recovery.

The helpers at the top (``make_batch``, ``build_log``, ``log_strategy``) are
shared with test_verify.py and test_kafka_import.py.
"""
from __future__ import annotations

import os
import struct
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format import offset_index, time_index
from kafkastore.format.compression import Compression
from kafkastore.errors import CorruptRecordError, CrcMismatchError
from kafkastore.format.record_batch import decode_batch, parse_header
from kafkastore.errors import (OffsetOrderError, SegmentOffsetOverflowError, TruncatedBatchError,
                               UnsupportedFormatError)
from kafkastore.format.segment_build import (SegmentBuilder, index_batches, index_batch_arrays,
                                             rebuild_indexes)
from kafkastore.format.segment_indexes import check_indexes, load_indexes
from kafkastore.format.segment_scan import iter_batches, recover, scan_log
from kafkastore.format.segment_stats import batch_min_timestamp, segment_stats
from kafkastore.read.reader import segment_offset_for_timestamp
from kafkastore.storage import Storage
from tests.helpers.segments import TS0, build_log, make_batch, simple_batches


# ----------------------------------------------------------------- helpers

_LOOKUP_STORAGE = Storage("memory://test-segment-lookups")


def position_for_offset(log_bytes, index_bytes, base_offset: int, target_offset: int) -> int:
    """Where a reader starts for ``target_offset``: the offset index's position, then the
    walk to the first batch whose last offset >= target (``len(log)`` if none)."""
    start = offset_index.lookup(index_bytes, base_offset, target_offset) if index_bytes else 0
    return next((p for p, h in iter_batches(log_bytes, start) if h.last_offset >= target_offset),
                len(log_bytes))


def offset_for_timestamp(log_bytes, index_bytes, timeindex_bytes, base_offset: int,
                         target_timestamp: int, *, starting_offset: int | None = None):
    """The reader's per-segment timestamp lookup over ``log_bytes`` stored as an object."""
    _LOOKUP_STORAGE.put("seg.log", bytes(log_bytes))
    start = base_offset if starting_offset is None else max(starting_offset, base_offset)
    return segment_offset_for_timestamp(_LOOKUP_STORAGE, "seg.log", len(log_bytes),
                                        index_bytes or b"", timeindex_bytes or b"", base_offset,
                                        target_timestamp, start)


def all_records(log: bytes):
    """``[(offset, timestamp)]`` of every record, by decoding every batch."""
    out = []
    pos = 0
    while pos < len(log):
        header, records = decode_batch(log, pos)
        out.extend((r.offset, r.timestamp) for r in records)
        pos += header.size
    return out


def batch_list(log: bytes):
    scan = scan_log(log)
    assert scan.complete
    return scan.batches


_codec = st.sampled_from([Compression.NONE, Compression.NONE, Compression.ZSTD, Compression.GZIP])


@st.composite
def batch_specs(draw, min_size=1, max_size=12):
    """Random batch parameters: offset gaps, record timestamps (non-monotonic), sizes, codecs."""
    specs = []
    for _ in range(draw(st.integers(min_size, max_size))):
        n = draw(st.integers(0, 4)) if draw(st.integers(0, 9)) == 0 else draw(st.integers(1, 4))
        specs.append(dict(
            gap_before=draw(st.integers(0, 3)),
            timestamps=draw(st.lists(st.integers(TS0 - 5000, TS0 + 5000), min_size=n, max_size=n)),
            gaps=draw(st.lists(st.integers(0, 2), min_size=max(n - 1, 0), max_size=max(n - 1, 0))),
            value_size=draw(st.integers(0, 400)),
            codec=draw(_codec),
            extra_last=draw(st.integers(0, 2)),
            log_append=draw(st.integers(0, 7)) == 0,
        ))
    return specs


def batches_from_specs(base_offset: int, specs):
    out = []
    offset = base_offset
    for spec in specs:
        offset += spec["gap_before"]
        ts = spec["timestamps"]
        if not ts:
            last = offset + spec["extra_last"]
            out.append(make_batch(offset, (), last_offset=last))
        else:
            span = len(ts) + sum(spec["gaps"])
            last = offset + span - 1 + spec["extra_last"]
            out.append(make_batch(
                offset, ts, value_size=spec["value_size"], gaps=spec["gaps"],
                compression=spec["codec"], last_offset=last,
                log_append_time=max(ts) + 7 if spec["log_append"] else None))
        offset = last + 1
    return out


# ----------------------------------------------------------------- the rule, by hand

def _one_record_batch(offset: int, ts: int) -> bytes:
    # 61-byte header + record: length(1) attributes(1) ts delta(1) offset delta(1)
    # key len(1) value len(1) value(42) header count(1) = 49 -> 110 bytes.
    batch = make_batch(offset, [ts], value_size=42)
    assert len(batch) == 110
    return batch


def test_index_entries_by_hand():
    """Kafka's LogSegment.append rule, worked by hand (interval 200, 110-byte batches).

    pos   offset  maxTs   bytes since last entry before the batch -> entry?
      0   1000    5000       0                                    no
    110   1001    4000     110                                    no
    220   1002    7000     220 > 200 -> .index (1002, 220), .timeindex (7000, 1002); reset
    330   1003    9000     110                                    no
    440   1004    6500     220 > 200 -> .index (1004, 440), .timeindex (9000, 1003); reset
    550   1005    9500     110                                    no
    close: .timeindex gets max so far (9500, 1005)
    """
    stamps = [5000, 4000, 7000, 9000, 6500, 9500]
    built = build_log(1000, [_one_record_batch(1000 + i, ts) for i, ts in enumerate(stamps)], 200)
    assert built.index == bytes.fromhex("00000002" "000000dc" "00000004" "000001b8")
    assert built.timeindex == (struct.pack(">qi", 7000, 2) + struct.pack(">qi", 9000, 3)
                               + struct.pack(">qi", 9500, 5))
    assert offset_index.parse(built.index, 1000) == [(1002, 220), (1004, 440)]
    assert time_index.parse(built.timeindex, 1000) == [(7000, 1002), (9000, 1003), (9500, 1005)]
    s = built.stats
    assert (s.base_offset, s.next_offset, s.record_count, s.batch_count, s.size) == (1000, 1006, 6, 6, 660)
    assert (s.min_timestamp, s.max_timestamp, s.offset_of_max_timestamp) == (4000, 9500, 1005)
    assert (s.first_offset, s.first_batch_timestamp) == (1000, 5000)
    assert rebuild_indexes(built.log, 1000, 200) == (built.index, built.timeindex)


def test_interval_is_strictly_greater():
    # 220 bytes since the last entry is not > 220: no entry at 220, one at 330.
    built = build_log(0, [_one_record_batch(i, TS0 + i) for i in range(4)], 220)
    assert offset_index.parse(built.index, 0) == [(3, 330)]
    assert time_index.parse(built.timeindex, 0) == [(TS0 + 3, 3)]


def test_first_batch_never_indexed_even_with_interval_zero():
    built = build_log(0, [_one_record_batch(i, TS0) for i in range(3)], 0)
    # Every batch after the first gets an entry; equal timestamps only once.
    assert offset_index.parse(built.index, 0) == [(1, 110), (2, 220)]
    assert time_index.parse(built.timeindex, 0) == [(TS0, 0)]


def test_entry_holds_last_offset_of_batch():
    batches = [make_batch(0, [TS0] * 5, value_size=100), make_batch(5, [TS0 + 1] * 4, value_size=100)]
    built = build_log(0, batches, 10)
    assert offset_index.parse(built.index, 0) == [(8, len(batches[0]))]


def test_multi_batch_append_is_one_kafka_append():
    a, b, c = (make_batch(i * 2, [TS0 + i, TS0 + i], value_size=200) for i in range(3))
    builder = SegmentBuilder(0, index_interval_bytes=100)
    builder.append(a)
    assert builder.append(b + c) == len(a)
    built = builder.build()
    # one entry for the group: its largest offset, at the position where it starts
    assert offset_index.parse(built.index, 0) == [(5, len(a))]
    # the max timestamp's offset is the last offset of the batch that reached it
    assert time_index.parse(built.timeindex, 0) == [(TS0 + 2, 5)]
    assert built.stats.batch_count == 3


def test_no_timestamps_means_empty_time_index():
    batches = [make_batch(i, [-1], value_size=300) for i in range(4)]
    built = build_log(0, batches, 100)
    assert built.timeindex == b""
    assert len(built.index) == 3 * 8
    assert built.stats.max_timestamp == -1 and built.stats.min_timestamp == -1


def test_build_does_not_seal():
    builder = SegmentBuilder(10, index_interval_bytes=50)
    batches = simple_batches(10, 4)
    builder.append(batches[0])
    first = builder.build()
    for b in batches[1:]:
        builder.append(b)
    assert builder.build() == build_log(10, batches, 50)
    assert first.stats.next_offset == 13


def test_kafka_python_batches_are_accepted():
    # Bytes from kafka-python's DefaultRecordBatchBuilder (a real client encoder).
    from kafka.record.default_records import DefaultRecordBatchBuilder

    logs = []
    for base, codec in ((0, 0), (3, 2), (6, 4)):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=1 << 20)
        for i in range(3):
            b.append(i, timestamp=TS0 + base + i, key=b"k%d" % i, value=b"v" * 50, headers=[])
        raw = bytearray(b.build())
        struct.pack_into(">q", raw, 0, base)  # base offset is outside the CRC
        logs.append(bytes(raw))
    built = build_log(0, logs, 100)
    assert built.stats.next_offset == 9 and built.stats.record_count == 9
    assert built.stats.min_timestamp == TS0 and built.stats.max_timestamp == TS0 + 8
    assert rebuild_indexes(built.log, 0, 100) == (built.index, built.timeindex)


# ----------------------------------------------------------------- builder errors

def test_builder_rejects_out_of_order_and_bad_batches():
    builder = SegmentBuilder(100, name="t/0/seg")
    with pytest.raises(OffsetOrderError) as e:
        builder.append(make_batch(99))
    assert e.value.offset == 99 and e.value.position == 0 and e.value.segment == "t/0/seg"
    builder.append(make_batch(100, [TS0, TS0]))
    with pytest.raises(OffsetOrderError):
        builder.append(make_batch(101))
    bad = bytearray(make_batch(102))
    bad[-1] ^= 0xFF
    with pytest.raises(CrcMismatchError) as e:
        builder.append(bytes(bad))
    assert e.value.position == builder.size and e.value.offset == 102
    with pytest.raises(CorruptRecordError):
        builder.append(make_batch(102)[:-3])
    # a batch that fails leaves nothing behind, even inside a multi-batch append
    with pytest.raises(OffsetOrderError):
        builder.append(make_batch(102) + make_batch(102))
    assert builder.next_offset == 102 and builder.batch_count == 1
    builder.append(make_batch(102))
    assert builder.next_offset == 103


def test_builder_offset_overflow():
    builder = SegmentBuilder(0)
    assert builder.can_append(2**31 - 1) and not builder.can_append(2**31)
    with pytest.raises(SegmentOffsetOverflowError):
        builder.append(make_batch(2**31))
    assert builder.is_empty


def test_builder_trusts_given_min_timestamp():
    builder = SegmentBuilder(0)
    builder.append(make_batch(0, [TS0 + 5, TS0 + 1]), min_timestamp=TS0 + 1)
    assert builder.stats().min_timestamp == TS0 + 1


# ----------------------------------------------------------------- builder == rebuild, lookups

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs(), base=st.sampled_from([0, 7, 10**12]),
       interval=st.sampled_from([0, 1, 100, 300, 1000, 4096]))
def test_rebuild_equals_builder(specs, base, interval):
    batches = batches_from_specs(base, specs)
    built = build_log(base, batches, interval)
    assert rebuild_indexes(built.log, base, interval) == (built.index, built.timeindex)
    assert check_indexes(batch_list(built.log), built.index, built.timeindex, base) == []
    assert load_indexes(built.log, built.index, built.timeindex, base) == (
        built.index, built.timeindex, False)
    # stats against a brute-force decode
    recs = all_records(built.log)
    stamps = [ts for _, ts in recs if ts >= 0]
    s = built.stats
    assert s.record_count == len(recs)
    assert s.min_timestamp == (min(stamps) if stamps else -1)
    assert s.next_offset == parse_header(batches[-1]).next_offset
    assert s.size == len(built.log) == sum(map(len, batches))
    assert segment_stats(built.log, base) == s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs(), base=st.sampled_from([0, 7, 10**12]),
       interval=st.sampled_from([0, 1, 100, 300, 1000, 4096]))
def test_index_batches_equals_builder(specs, base, interval):
    """The writer's shortcut (indexes from header fields, nothing parsed) gives the builder's
    indexes and stats byte for byte."""
    batches = batches_from_specs(base, specs)
    built = build_log(base, batches, interval)
    headers = [parse_header(b) for b in batches]
    got = index_batches(base, [len(b) for b in batches], headers[0].base_offset,
                        [h.last_offset for h in headers], [h.record_count for h in headers],
                        [h.max_timestamp for h in headers],
                        [batch_min_timestamp(b, 0, h) for b, h in zip(batches, headers)],
                        index_interval_bytes=interval)
    assert (got.index, got.timeindex, got.stats) == (built.index, built.timeindex, built.stats)
    sizes = [len(b) for b in batches]
    assert got.positions == tuple(sum(sizes[:i]) for i in range(len(sizes)))


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(61, 6000), st.integers(1, 40),
                                  st.integers(-1, 50), st.integers(-1, 50)), min_size=1,
                        max_size=40),
       base=st.sampled_from([0, 7, 10**12]),
       interval=st.sampled_from([0, 1, 100, 300, 1000, 4096, 10**6]))
def test_index_batch_arrays_equals_index_batches(batches, base, interval):
    """The vectorised index builder (Broker.send_arrow's) is byte for byte index_batches,
    whatever the sizes, intervals and (unordered, missing) timestamps."""
    import numpy as np

    sizes = [b[0] for b in batches]
    counts = [b[1] for b in batches]
    lasts = list(np.cumsum(counts) + base - 1)
    max_ts = [b[2] for b in batches]
    min_ts = [b[3] for b in batches]
    ref = index_batches(base, sizes, base, [int(x) for x in lasts], counts, max_ts, min_ts,
                        index_interval_bytes=interval)
    got = index_batch_arrays(base, np.array(sizes), base, np.array(lasts), np.array(counts),
                             np.array(max_ts), np.array(min_ts), index_interval_bytes=interval)
    assert (got.index, got.timeindex, got.stats) == (ref.index, ref.timeindex, ref.stats)
    assert tuple(got.positions.tolist()) == ref.positions


@given(specs=batch_specs(), base=st.sampled_from([0, 1000]),
       interval=st.sampled_from([0, 50, 200, 4096]), data=st.data())
def test_indexed_position_matches_brute_force(specs, base, interval, data):
    built = build_log(base, batches_from_specs(base, specs), interval)
    batches = batch_list(built.log)
    targets = data.draw(st.lists(st.integers(base - 3, built.stats.next_offset + 3), max_size=15))
    for target in targets + [base, built.stats.next_offset - 1, built.stats.next_offset]:
        expected = next((p for p, h in batches if h.last_offset >= target), len(built.log))
        assert position_for_offset(built.log, built.index, base, target) == expected
        assert position_for_offset(built.log, None, base, target) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs(), interval=st.sampled_from([0, 50, 200, 4096]), data=st.data())
def test_reader_offset_for_timestamp_matches_brute_force(specs, interval, data):
    base = 500
    built = build_log(base, batches_from_specs(base, specs), interval)
    recs = all_records(built.log)
    targets = data.draw(st.lists(st.integers(TS0 - 5100, TS0 + 5100), max_size=10))
    for target in targets + [ts for _, ts in recs[:3]] + [-1]:
        for start in (None, data.draw(st.integers(base, built.stats.next_offset + 1))):
            lo = base if start is None else start
            expected = next((o for o, ts in recs if ts >= target and o >= lo), None)
            got = offset_for_timestamp(built.log, built.index, built.timeindex, base, target,
                                            starting_offset=start)
            assert got == expected, (target, start)
            assert offset_for_timestamp(built.log, None, None, base, target,
                                             starting_offset=start) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs(min_size=2), groups=st.lists(st.integers(1, 4), min_size=1, max_size=12),
       interval=st.sampled_from([0, 100, 500]), data=st.data())
def test_grouped_appends_give_other_valid_indexes(specs, groups, interval, data):
    """A follower appends several batches at once (one entry per group): the indexes
    differ from a rebuild but are accepted as they are and answer lookups correctly."""
    base = 0
    batches = batches_from_specs(base, specs)
    builder = SegmentBuilder(base, index_interval_bytes=interval)
    i = 0
    for g in groups * len(batches):
        if i >= len(batches):
            break
        builder.append(b"".join(batches[i:i + g]))
        i += g
    built = builder.build()
    listing = batch_list(built.log)
    assert check_indexes(listing, built.index, built.timeindex, base) == []
    assert load_indexes(built.log, built.index, built.timeindex, base)[2] is False
    recs = all_records(built.log)
    for target in data.draw(st.lists(st.integers(base, built.stats.next_offset), max_size=8)):
        expected = next((p for p, h in listing if h.last_offset >= target), len(built.log))
        assert position_for_offset(built.log, built.index, base, target) == expected
    for ts in data.draw(st.lists(st.integers(TS0 - 5100, TS0 + 5100), max_size=8)):
        expected = next((o for o, t in recs if t >= ts), None)
        assert offset_for_timestamp(built.log, built.index, built.timeindex, base, ts) == expected


def test_timestamp_lookup_in_small_windows(monkeypatch):
    """Windows smaller than a batch: the walk stops at the cut batch, the window widens, and
    every answer is still the brute-force one."""
    from kafkastore.read import reader
    monkeypatch.setattr(reader, "_SCAN_WINDOW", 40)
    monkeypatch.setattr(reader, "_MAX_SCAN_WINDOW", 300)
    batches = [make_batch(10 + 4 * i, [TS0 + 7 * i + j for j in range(4)], value_size=5 + 40 * (i % 3))
               for i in range(12)]
    built = build_log(10, batches, 100)
    recs = all_records(built.log)
    for target in range(TS0 - 1, TS0 + 7 * 12 + 5, 3):
        expected = next((o for o, ts in recs if ts >= target), None)
        assert offset_for_timestamp(built.log, built.index, built.timeindex, 10, target) == expected
        assert offset_for_timestamp(built.log, None, None, 10, target) == expected


def test_timestamp_lookup_on_a_short_object_raises(monkeypatch):
    """An object shorter than its manifest size: the last window is not a partial one, the
    cut batch is named (not fetched again and again)."""
    from kafkastore.read import reader
    monkeypatch.setattr(reader, "_SCAN_WINDOW", 40)
    log = b"".join(simple_batches(0, 3))
    _LOOKUP_STORAGE.put("short.log", log[:-10])
    with pytest.raises(TruncatedBatchError) as e:
        segment_offset_for_timestamp(_LOOKUP_STORAGE, "short.log", len(log), b"", b"", 0,
                                     TS0 + 10**6, 0)
    assert e.value.segment == "short.log" and e.value.position == 2 * len(log) // 3


def test_walker_modes():
    batches = simple_batches(0, 4)
    log = b"".join(batches)
    ends = [sum(map(len, batches[:i + 1])) for i in range(4)]
    assert [p for p, _ in iter_batches(log)] == [0] + ends[:3]
    # stop_offset: the walk ends before the first batch at or past it, CRC unchecked
    damaged = bytearray(log)
    damaged[-1] ^= 1
    assert [h.base_offset for _, h in iter_batches(bytes(damaged), stop_offset=7)] == [0, 3, 6]
    with pytest.raises(CrcMismatchError):
        list(iter_batches(bytes(damaged), stop_offset=10))
    # partial: a window cutting a batch ends quietly; without it the cut is an error
    window = log[:ends[1] + 20]
    assert [p for p, _ in iter_batches(window, partial=True)] == [0, ends[0]]
    with pytest.raises(TruncatedBatchError, match="past the end"):
        list(iter_batches(window))
    # start/end: a slice of the log, positions in ``buf``'s coordinates
    assert [p for p, _ in iter_batches(log, ends[0], ends[2])] == ends[:2]
    # offset order only when asked for
    twice = batches[1] + batches[0]
    assert len(list(iter_batches(twice))) == 2
    with pytest.raises(OffsetOrderError) as e:
        list(iter_batches(twice, check_order=True, segment="s"))
    assert (e.value.offset, e.value.position, e.value.segment) == (0, len(batches[1]), "s")


# ----------------------------------------------------------------- scanning and recovery

def test_scan_log_clean():
    batches = simple_batches(40, 5)
    log = b"".join(batches)
    scan = scan_log(log, base_offset=40)
    assert scan.complete and scan.valid_bytes == len(log) and scan.next_offset == 55
    positions = [0]
    for b in batches[:-1]:
        positions.append(positions[-1] + len(b))
    assert [p for p, _ in scan.batches] == positions
    assert scan_log(b"", base_offset=7).next_offset == 7


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs(min_size=2, max_size=6), data=st.data())
def test_torn_last_batch_cut_at_every_length(specs, data):
    batches = batches_from_specs(0, specs)
    full = b"".join(batches)
    good = full[:-len(batches[-1])]
    cuts = data.draw(st.lists(st.integers(1, len(batches[-1]) - 1), min_size=1, max_size=8))
    for cut in cuts:
        torn = good + batches[-1][:cut]
        result = recover(torn, base_offset=0, segment="s")
        assert result.log == good
        assert result.truncated_bytes == cut
        assert len(result.batches) == len(batches) - 1
        assert result.note and f"position {len(good)}" in result.note
        with pytest.raises(CorruptRecordError) as e:
            recover(torn, base_offset=0, segment="s", allow_torn_tail=False)
        assert e.value.segment == "s" and e.value.position == len(good)


def test_torn_at_every_byte_of_one_log():
    batches = simple_batches(0, 3, value_size=20)
    good = b"".join(batches[:-1])
    last = batches[-1]
    for cut in range(1, len(last)):
        assert recover(good + last[:cut]).log == good


@settings(max_examples=80, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=300))
def test_trailing_garbage_cut(garbage):
    log = b"".join(simple_batches(0, 3))
    result = recover(log + garbage, base_offset=0)
    assert result.log == log and result.truncated_bytes == len(garbage)


@pytest.mark.parametrize("zeros", [1, 11, 12, 61, 4096, 1 << 20])
def test_trailing_zeros_cut(zeros):
    log = b"".join(simple_batches(0, 3))
    result = recover(log + bytes(zeros), base_offset=0)
    assert result.log == log and result.truncated_bytes == zeros
    assert "zero" in result.note or "too short" in result.note


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_damage_inside_last_batch_is_torn_tail(data):
    batches = simple_batches(0, 3, value_size=40)
    good = b"".join(batches[:-1])
    last = bytearray(batches[-1])
    # bytes from the CRC on are what a torn write can garble and the CRC catches;
    # the base offset and leader epoch (0..16) are outside the CRC, as in Kafka.
    i = data.draw(st.integers(17, len(last) - 1))
    last[i] ^= data.draw(st.integers(1, 255))
    result = recover(good + bytes(last), base_offset=0)
    assert result.log == good and result.truncated_bytes == len(last)


def test_crc_mismatch_in_the_middle_raises():
    batches = simple_batches(0, 4)
    log = bytearray(b"".join(batches))
    pos = len(batches[0]) + len(batches[1])
    log[pos + 70] ^= 0x01
    with pytest.raises(CrcMismatchError) as e:
        recover(bytes(log), base_offset=0, segment="orders/0/00000000000000000000-x.log")
    err = e.value
    assert (err.segment, err.offset, err.position) == ("orders/0/00000000000000000000-x.log", 6, pos)
    assert "valid batch follows" in str(err)
    assert "offset 6" in str(err) and f"position {pos}" in str(err)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_damage_before_the_last_batch_raises(data):
    batches = simple_batches(0, 4, value_size=25)
    log = bytearray(b"".join(batches))
    end_of_third = sum(map(len, batches[:3]))
    i = data.draw(st.integers(17, end_of_third - 1))
    if i >= len(batches[0]) and (i - len(batches[0])) % len(batches[1]) < 17:
        i = i - (i - len(batches[0])) % len(batches[1]) + 17  # stay inside the CRC's coverage
    log[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError) as e:
        recover(bytes(log), base_offset=0, segment="s")
    assert e.value.segment == "s" and e.value.position is not None and e.value.offset is not None


def test_bytes_missing_from_the_middle_raise():
    batches = simple_batches(0, 4)
    log = b"".join(batches)
    cut_at = len(batches[0]) + 30
    damaged = log[:cut_at] + log[cut_at + 20:]
    with pytest.raises(CorruptRecordError) as e:
        recover(damaged, base_offset=0, segment="s")
    assert e.value.position == len(batches[0]) and "not a torn tail" in str(e.value)


def test_garbage_between_batches_raises():
    batches = simple_batches(0, 3)
    damaged = batches[0] + os.urandom(50) + batches[1] + batches[2]
    with pytest.raises(CorruptRecordError) as e:
        recover(damaged)
    assert e.value.position == len(batches[0])


def test_offsets_going_backwards_raise_even_at_the_end():
    a, b, c = simple_batches(0, 3)
    with pytest.raises(OffsetOrderError) as e:
        recover(a + c + b, base_offset=0, segment="s")
    assert e.value.position == len(a) + len(c) and e.value.offset == 3
    with pytest.raises(OffsetOrderError):
        recover(a, base_offset=5)


def test_legacy_message_format_is_refused_not_cut():
    # A Kafka < 0.11 (magic 1) message: offset, size, CRC-32 (zlib), magic,
    # attributes, timestamp, key (null), value.
    body = struct.pack(">bbqi", 1, 0, TS0, -1) + struct.pack(">i", 5) + b"hello"
    legacy = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(UnsupportedFormatError) as e:
        recover(legacy, base_offset=0, segment="s")
    assert "magic 1" in str(e.value)


def test_crafted_tail_cannot_make_recovery_hang():
    # After one good batch: many candidate "batches" with magic 2 and a length
    # that fits, each of which would need a CRC over most of the tail.
    good = simple_batches(0, 1)[0]
    unit = struct.pack(">qii", 5, 3_000_000, 0) + b"\x02" + bytes(3)
    tail = unit * ((4 << 20) // len(unit))
    start = time.monotonic()
    with pytest.raises(CorruptRecordError) as e:
        recover(good + tail, base_offset=0)
    assert time.monotonic() - start < 10
    assert "cannot tell" in str(e.value)


@settings(max_examples=150, deadline=None)
@given(junk=st.binary(max_size=400))
def test_garbage_logs_never_hang(junk):
    scan = scan_log(junk, base_offset=0)
    assert scan.valid_bytes <= len(junk)
    try:
        result = recover(junk, base_offset=0)
    except CorruptRecordError:
        return
    assert len(result.log) + result.truncated_bytes == len(junk)


def test_truncated_error_type():
    log = simple_batches(0, 1)[0]
    scan = scan_log(log[:-1])
    assert isinstance(scan.error, TruncatedBatchError) and scan.valid_bytes == 0


# ----------------------------------------------------------------- index loading

def _built(interval=100):
    return build_log(100, simple_batches(100, 12, value_size=40), interval)


def test_load_indexes_keeps_valid_ones():
    built = _built()
    assert built.index and built.timeindex
    assert load_indexes(built.log, built.index, built.timeindex, 100) == (built.index, built.timeindex, False)


def test_load_indexes_accepts_index_written_with_another_interval():
    built = _built(100)
    other = build_log(100, simple_batches(100, 12, value_size=40), 400)
    assert other.index != built.index
    assert load_indexes(built.log, other.index, other.timeindex, 100,
                        index_interval_bytes=100) == (other.index, other.timeindex, False)


def test_load_indexes_trims_preallocated_padding():
    built = _built()
    padded_index = built.index + bytes(10 * 1024 * 1024 - len(built.index))
    padded_time = built.timeindex + bytes(12 * 1000)
    assert load_indexes(built.log, padded_index, padded_time, 100) == (built.index, built.timeindex, False)


@pytest.mark.parametrize("which", ["index", "timeindex", "both"])
def test_load_indexes_rebuilds_missing(which):
    built = _built()
    index = None if which in ("index", "both") else built.index
    timeindex = None if which in ("timeindex", "both") else built.timeindex
    assert load_indexes(built.log, index, timeindex, 100, index_interval_bytes=100) == (
        built.index, built.timeindex, True)


def _corruptions(built):
    idx, tidx = built.index, built.timeindex
    entries = offset_index.parse(idx, 100)
    tentries = time_index.parse(tidx, 100)
    yield "odd size", idx[:-3], tidx
    yield "random bytes", os.urandom(len(idx)), tidx
    yield "mid-batch position", offset_index.encode([(o, p + 5) for o, p in entries], 100), tidx
    yield "offset before its batch", offset_index.encode([(entries[0][0] - 3, entries[0][1])], 100), tidx
    yield "past the log", idx + offset_index.encode([(10**6, len(built.log) + 100)], 100)[0:8], tidx
    yield "decreasing", idx[8:16] + idx[0:8], tidx
    yield "time odd size", idx, tidx + b"\x01"
    yield "time too early", idx, time_index.encode([(TS0 + 10**6, 100)], 100)
    yield "time offset past log", idx, time_index.encode(tentries + [(TS0 * 2, 10**6)], 100)
    yield "time decreasing", idx, tidx[12:24] + tidx[0:12]


def test_load_indexes_rebuilds_corrupt():
    built = _built()
    batches = batch_list(built.log)
    for label, idx, tidx in _corruptions(built):
        assert check_indexes(batches, idx, tidx, 100), label
        assert load_indexes(built.log, idx, tidx, 100, index_interval_bytes=100) == (
            built.index, built.timeindex, True), label


def test_indexes_of_truncated_log_are_rebuilt():
    built = _built()
    torn = built.log + simple_batches(112, 1)[0][:30]
    result = recover(torn, base_offset=100)
    assert result.log == built.log
    # indexes written for a longer log than survived recovery
    longer = build_log(100, simple_batches(100, 20, value_size=40), 100)
    rec = recover(longer.log[:len(built.log) + 10], base_offset=100)
    assert rec.log == built.log
    assert load_indexes(rec.log, longer.index, longer.timeindex, 100, batches=rec.batches,
                        index_interval_bytes=100) == (built.index, built.timeindex, True)


def test_time_index_entry_semantics_checked():
    # (T, O) is wrong when an earlier batch already reached T: a lookup for T
    # would start after that batch and miss its records.
    batches = [make_batch(0, [TS0 + 50]), make_batch(1, [TS0 + 10]), make_batch(2, [TS0 + 60])]
    log = b"".join(batches)
    listing = batch_list(log)
    assert check_indexes(listing, b"", time_index.encode([(TS0 + 50, 0), (TS0 + 60, 2)], 0), 0) == []
    problems = check_indexes(listing, b"", time_index.encode([(TS0 + 50, 1)], 0), 0)
    assert problems and "earlier batch" in problems[0]
