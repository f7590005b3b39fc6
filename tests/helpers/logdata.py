"""Test data for retention and gc: real segment files plus manifest commits, with exact control
over offsets, sizes and timestamps (the broker decides those itself)."""
from __future__ import annotations

from kafkastore import layout
from kafkastore.format.crc import crc32c
from kafkastore.manifest import AppendSegments, ManifestStore, SegmentEntry
from kafkastore.format.record_batch import Record, encode_batch
from kafkastore.format.segment_build import SegmentBuilder
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter


def upload_segment(storage: Storage, topic: str, partition: int, base: int, timestamps,
                   *, value: bytes = b"v" * 50, segment_id: str | None = None) -> SegmentEntry:
    """Write one segment (one batch, a record per timestamp, offsets from ``base``); no commit."""
    records = [Record(base + i, ts, f"k{base + i}".encode(), value + b"%d" % (base + i))
               for i, ts in enumerate(timestamps)]
    builder = SegmentBuilder(base)
    builder.append(encode_batch(records))
    built = builder.build()
    sid = segment_id or layout.new_segment_id()
    for ext, data in ((".index", built.index), (".timeindex", built.timeindex), (".log", built.log)):
        storage.put(layout.segment_path(topic, partition, base, sid, ext), data)
    st = built.stats
    return SegmentEntry(
        base_offset=base, next_offset=st.next_offset, record_count=st.record_count,
        size=len(built.log), min_timestamp=st.min_timestamp, max_timestamp=st.max_timestamp,
        segment_id=sid, writer_id=1, leader_epoch=0, checksum=crc32c(built.log),
        index_size=len(built.index), timeindex_size=len(built.timeindex),
        max_timestamp_offset=st.offset_of_max_timestamp)


def append_segment(storage: Storage, topic: str, partition: int, timestamps, **kw) -> SegmentEntry:
    """Upload a segment at the partition's high watermark and commit it (as the broker does: after a
    conflict that moved the high watermark, upload again there; the first upload is an orphan)."""
    uploaded: dict[int, SegmentEntry] = {}

    def build(m):
        hw = m.high_watermark if m else 0
        if hw not in uploaded:
            uploaded[hw] = upload_segment(storage, topic, partition, hw, timestamps, **kw)
        landed["entry"] = uploaded[hw]
        return [AppendSegments((uploaded[hw],))], []

    landed: dict[str, SegmentEntry] = {}
    ManifestStore(storage, topic, partition).commit(build, operation="append", writer="test")
    return landed["entry"]


def segment_files(entry: SegmentEntry, topic: str, partition: int) -> list[str]:
    return sorted(entry.paths(topic, partition).values())


def flush_each_record(storage: Storage, topic: str, n: int) -> LogWriter:
    """Create ``topic`` with one partition and write ``n`` records to it through the log
    writer (no housekeeping), flushing after each: ``n`` small segments and ``n`` manifest
    versions, mostly deltas (replay, verify and merge tests). Returns the writer."""
    create_topic(storage, topic, 1)
    writer = LogWriter(storage, housekeeping=False)
    for i in range(n):
        writer.send(topic, b"v%d" % i, partition=0)
        writer.flush()
    return writer
