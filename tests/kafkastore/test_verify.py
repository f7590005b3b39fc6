"""verify_segment: every problem reported with offset and position, walking on where possible."""
from __future__ import annotations

import dataclasses
import hashlib
import os

from kafkastore.format import offset_index, time_index
from kafkastore.format.crc import crc32c
from kafkastore.read.verify import SegmentReport, checksum, verify_segment

from tests.helpers.segments import TS0, build_log, make_batch, simple_batches


def _seg(n=8, base=1000):
    batches = simple_batches(base, n, value_size=40)
    return batches, build_log(base, batches, 100)


def test_clean_segment_is_ok():
    batches, built = _seg()
    report = verify_segment(built.log, built.index, built.timeindex, base_offset=1000, name="t/0/a")
    assert report.ok and report.problems == [] and report.notes == []
    assert report.stats == dataclasses.replace(built.stats)
    assert report.render() == (f"t/0/a: ok (8 batches, 24 records, offsets 1000..1023, "
                               f"{len(built.log)} bytes)")
    assert verify_segment(b"", b"", b"", base_offset=5, name="e").render() == "e: ok (empty)"


def test_missing_indexes_are_notes_not_problems():
    _, built = _seg()
    report = verify_segment(built.log, None, None, base_offset=1000, name="s")
    assert report.ok and len(report.notes) == 2


def test_crc_mismatch_reported_and_walk_continues():
    batches, built = _seg()
    log = bytearray(built.log)
    pos = len(batches[0]) * 2
    log[pos + 80] ^= 0x10
    pos5 = len(batches[0]) * 5
    log[pos5 + 80] ^= 0x10
    report = verify_segment(bytes(log), built.index, built.timeindex, base_offset=1000, name="s")
    assert not report.ok
    crc = [p for p in report.problems if "CRC" in p]
    assert crc == [f"CRC mismatch: stored 0x{int.from_bytes(log[pos + 17:pos + 21], 'big'):08x}, "
                   f"computed 0x{crc32c(bytes(log[pos + 21:pos + len(batches[0])])):08x} "
                   f"(offset 1006, position {pos})",
                   crc[1]]
    assert "(offset 1015, position %d)" % pos5 in crc[1]
    assert report.stats.batch_count == 8        # walked past both
    assert report.lines() == [f"s: {p}" for p in report.problems]


def test_garbage_in_the_middle_skipped_to_next_batch():
    batches, _ = _seg()
    junk = os.urandom(37).replace(b"\x02", b"\x03")
    log = b"".join(batches[:3]) + junk + b"".join(batches[3:])
    report = verify_segment(log, None, None, base_offset=1000, name="s")
    where = len(b"".join(batches[:3]))
    assert any(f"position {where}" in p for p in report.problems)
    assert any("skipped 37 bytes" in p and f"position {where + 37}" in p for p in report.problems)
    assert report.stats.batch_count == 8


def test_torn_tail_reported():
    batches, _ = _seg()
    log = b"".join(batches) + batches[0][:20]
    report = verify_segment(log, None, None, base_offset=1000, name="s")
    assert not report.ok
    assert any("to the end are not valid batches" in p for p in report.problems)


def test_offsets_backwards_and_below_base():
    a, b, c = simple_batches(10, 3)
    report = verify_segment(a + c + b, None, None, base_offset=10, name="s")
    assert any("does not follow" in p and "offset 13" in p for p in report.problems)
    report = verify_segment(a, None, None, base_offset=11, name="s")
    assert any("below the segment's base offset" in p for p in report.problems)


def test_bad_indexes_reported():
    batches, built = _seg()
    entries = offset_index.parse(built.index, 1000)
    wrong = offset_index.encode([(o, p + 1) for o, p in entries], 1000)
    report = verify_segment(built.log, wrong, built.timeindex, base_offset=1000, name="s")
    assert len(report.problems) == len(entries)
    assert all("does not point at a batch start" in p for p in report.problems)
    bad_time = time_index.encode([(TS0 + 10**9, 1000)], 1000)
    report = verify_segment(built.log, built.index, bad_time, base_offset=1000, name="s")
    assert report.problems == [
        f"time index entry (timestamp {TS0 + 10**9}, offset 1000) is above the log's max "
        f"timestamp {built.stats.max_timestamp}"]
    report = verify_segment(built.log, built.index[:-1], built.timeindex, base_offset=1000, name="s")
    assert report.problems == ["offset index: offset index size %d is not a multiple of 8"
                               % (len(built.index) - 1)]


def test_undecodable_records_reported_even_with_good_crc():
    # A writer bug: the CRC covers the bytes, but the records inside do not parse.
    from kafkastore.format.record_batch import HEADER_SIZE
    import struct

    good = make_batch(0, [TS0, TS0 + 1], value_size=20)
    body = bytearray(good[HEADER_SIZE:])
    body[0] = 0x7E                               # first record's length varint: 63
    raw = bytearray(good[:HEADER_SIZE]) + body
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    report = verify_segment(bytes(raw), None, None, base_offset=0, name="s")
    assert any("records do not decode" in p for p in report.problems)


def test_expected_stats_compared():
    _, built = _seg()
    s = built.stats
    good = {"next_offset": s.next_offset, "record_count": s.record_count, "size": s.size,
            "min_timestamp": s.min_timestamp, "max_timestamp": s.max_timestamp,
            "checksum": checksum(built.log), "batch_count": None}
    assert verify_segment(built.log, built.index, built.timeindex, base_offset=1000, name="s",
                          expected=good).ok
    assert verify_segment(built.log, built.index, built.timeindex, base_offset=1000, name="s",
                          expected=s).ok
    sha = "sha256:" + hashlib.sha256(built.log).hexdigest()
    assert verify_segment(built.log, None, None, base_offset=1000, name="s",
                          expected={"checksum": sha}).ok
    bad = dict(good, next_offset=s.next_offset + 1, record_count=1, checksum="crc32c:00000000")
    report = verify_segment(built.log, None, None, base_offset=1000, name="s", expected=bad)
    assert report.problems == [
        f"next offset is {s.next_offset}, expected {s.next_offset + 1}",
        f"record count is {s.record_count}, expected 1",
        f"checksum is {checksum(built.log)}, expected crc32c:00000000",
    ]
    report = verify_segment(built.log, None, None, base_offset=1000, name="s",
                            expected={"checksum": "whirl:00"})
    assert report.problems == ["checksum: unknown checksum algorithm 'whirl'"]


def test_report_type():
    r = SegmentReport("n", 0, problems=["a", "b"])
    assert not r.ok and r.render() == "n: a\nn: b"
