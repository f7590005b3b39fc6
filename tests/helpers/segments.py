"""Record batches and segment logs built with the library's own encoder (the segment,
verify and import tests)."""
from __future__ import annotations

from kafkastore.format.compression import Compression
from kafkastore.format.record_batch import Record, encode_batch
from kafkastore.format.segment_build import BuiltSegment, SegmentBuilder

TS0 = 1_700_000_000_000


def make_batch(base_offset: int, timestamps=(TS0,), *, value_size: int = 10, gaps=None,
               compression=Compression.NONE, log_append_time: int | None = None,
               last_offset: int | None = None) -> bytes:
    """One v2 batch: a record per timestamp, offsets from ``base_offset`` (plus ``gaps``)."""
    records = []
    offset = base_offset
    for i, ts in enumerate(timestamps):
        if gaps and i:
            offset += gaps[i - 1]
        records.append(Record(offset, ts, None, bytes([65 + i % 26]) * value_size, ()))
        offset += 1
    if not records:
        return encode_batch([], base_offset=base_offset,
                            last_offset=base_offset if last_offset is None else last_offset)
    kwargs = {}
    if log_append_time is not None:
        kwargs = {"timestamp_type": 1, "max_timestamp": log_append_time}
    return encode_batch(records, compression=compression, base_offset=base_offset,
                        last_offset=last_offset, **kwargs)


def build_log(base_offset: int, batches, index_interval_bytes: int = 4096) -> BuiltSegment:
    """Append each batch separately to a SegmentBuilder and build."""
    builder = SegmentBuilder(base_offset, index_interval_bytes=index_interval_bytes)
    for batch in batches:
        builder.append(batch)
    return builder.build()


def simple_batches(base_offset: int, n: int, *, per_batch: int = 3, value_size: int = 30,
                   ts0: int = TS0):
    """``n`` batches of ``per_batch`` records, increasing timestamps."""
    out = []
    offset = base_offset
    for i in range(n):
        out.append(make_batch(offset, [ts0 + 10 * (offset + j) for j in range(per_batch)],
                              value_size=value_size))
        offset += per_batch
    return out


def append_at_the_head(store, sid: str):
    """Commit one 10-record segment entry (no file behind it) at the high watermark, as a
    batch without a producer id is placed: the plan reads only the high watermark, so a
    re-plan after a commit that landed unseen would append it again."""
    from kafkastore.manifest import AppendSegments, SegmentEntry

    def build(base):
        at = base.high_watermark if base is not None else 0
        return [AppendSegments((SegmentEntry(
            base_offset=at, next_offset=at + 10, record_count=10, size=100, min_timestamp=1,
            max_timestamp=2, segment_id=sid, writer_id=1, leader_epoch=0, checksum=1),))], []
    return store.commit(build, operation="append")
