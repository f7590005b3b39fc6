"""Operations over a whole partition that combine the format layer with storage:
adopting a Kafka partition directory, and verifying what the manifest lists."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from .errors import ConfigError
from .kafka_import import read_kafka_partition_dir
from .manifest import AppendSegments, CorruptMetadataError, Manifest, ManifestStore, ProducerState, \
    SegmentEntry, UpdateProducerState, check_invariants
from .segment_writer import Uploads, commit_appending, write_segment
from .storage import Storage
from .topics import load_topic
from .format.transactions import iter_control_types, scan_transactions
from .verify import SegmentReport, verify_manifest_versions, verify_segment


@dataclass(frozen=True)
class ImportResult:
    topic: str
    partition: int
    segments: int
    records: int
    log_start_offset: int
    high_watermark: int
    notes: tuple[str, ...] = ()


def import_kafka_dir(storage: Storage, path: str, topic: str, partition: int, *,
                     writer: str = "import", now_ms: int | None = None) -> ImportResult:
    """Adopt a Kafka partition directory into ``topic``/``partition`` in one manifest commit.

    Every batch is validated first (see :func:`read_kafka_partition_dir`);
    nothing is uploaded if any is bad. The partition must be empty or end
    exactly where the imported log starts. Gaps between Kafka's segments
    (left by compaction) are absorbed by the preceding segment's range, so
    the manifest's ranges tile. Aborted transactions are found from the
    markers in the log.
    """
    meta = load_topic(storage, topic)
    if not 0 <= partition < meta.partitions:
        raise ConfigError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}")
    segments = read_kafka_partition_dir(path, index_interval_bytes=meta.config.index_interval_bytes)
    if not segments:
        raise ConfigError(f"{path!r} holds no Kafka log segments (<20-digit offset>.log)")
    end_offset = None
    if segments[-1].stats.is_empty:
        # An empty active segment (rolled just before the copy, or its only batch torn and
        # cut): no object of its own; its base offset is the log end, absorbed by the
        # previous segment's range as gaps are. Kafka's recovery adopts the same records.
        empty = segments.pop()
        if not segments:
            raise ConfigError(f"{empty.path}: no complete record batch to import "
                              f"({'; '.join(empty.notes) or 'empty'})")
        end_offset = empty.base_offset
        segments[-1].notes.append(f"log ends at offset {end_offset}: the last segment "
                                  f"{os.path.basename(empty.path)} holds no complete batch"
                                  + (f" ({'; '.join(empty.notes)})" if empty.notes else ""))
    batches = [hc for seg in segments for hc in iter_control_types(seg.log, verify_crc=False)]
    aborted, open_txns = scan_transactions(batches)
    store = ManifestStore(storage, topic, partition)
    uploads = Uploads(store)

    def upload(i: int) -> SegmentEntry:
        seg = segments[i]
        # Gaps compaction left between Kafka's segments go to the preceding segment.
        next_offset = (segments[i + 1].base_offset if i + 1 < len(segments)
                       else max(seg.stats.next_offset, end_offset or 0))
        txns = tuple((a.producer_id, a.first_offset, a.last_offset) for a in aborted
                     if seg.base_offset <= a.last_offset < next_offset)
        return write_segment(storage, topic, partition, seg.stats, seg.log, seg.index,
                             seg.timeindex, writer_id=-1, leader_epoch=0,
                             next_offset=next_offset, aborted_txns=txns, empty_indexes=True)

    uploads.get(None, len(segments), upload)  # before the first attempt: nothing is read first

    def build(m: Manifest | None):
        entries = uploads.get(None, len(segments), upload)  # too old for gc's grace: again
        updates = [AppendSegments(tuple(entries))]
        for pid, first in open_txns.items():
            state = (m.producers.get(pid) if m else None) or ProducerState(epoch=0)
            updates.append(UpdateProducerState(pid, replace(state, txn_first_offset=first)))
        return updates, []

    m = commit_appending(store, build, operation="import", writer=writer, now_ms=now_ms,
                         uploaded=f"the {len(segments)} segment(s) of {path!r}",
                         consequence="nothing was imported")
    entries = m.segments[-len(segments):]
    notes = tuple(f"{os.path.basename(seg.path)}: {n}" for seg in segments for n in seg.notes)
    return ImportResult(topic, partition, len(entries), sum(e.record_count for e in entries),
                        m.log_start_offset, m.high_watermark, notes)


@dataclass
class PartitionReport:
    topic: str
    partition: int
    manifest_version: int
    segments: list[SegmentReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(s.ok for s in self.segments)

    def lines(self) -> list[str]:
        head = f"{self.topic}/{self.partition} (manifest v{self.manifest_version})"
        out = [f"{head}: {p}" for p in self.problems]
        out += [f"{head} {line}" for s in self.segments for line in s.lines()]
        return out or [f"{head}: ok (empty)"]


def verify_partition(storage: Storage, topic: str, partition: int) -> PartitionReport:
    """Check every segment the latest manifest lists: objects present, sizes and checksums as
    recorded, CRC of every batch, indexes consistent, and the manifest's own invariants."""
    store = ManifestStore(storage, topic, partition)
    store.forget_cached()  # read what is stored, not what this process remembers
    # Every stored version (full ones, and deltas rebuilt in order) and the hint: readers of
    # an older snapshot use them, and GC skips damaged ones.
    problems = verify_manifest_versions(store)
    try:
        m = store.latest() or Manifest.empty(topic, partition)
    except CorruptMetadataError:
        m = Manifest.empty(topic, partition)  # the damage is among the problems
    report = PartitionReport(topic, partition, m.version)
    report.problems.extend(problems)
    try:
        check_invariants(m)
    except Exception as exc:  # noqa: BLE001 - any invariant failure is a finding
        report.problems.append(f"manifest invariant broken: {exc}")
    for entry in m.segments:
        paths = entry.paths(topic, partition)
        name = paths[".log"].rsplit("/", 1)[-1]
        try:
            log = storage.get(paths[".log"])
            index = storage.get(paths[".index"]) if entry.index_size or storage.exists(paths[".index"]) else None
            tindex = storage.get(paths[".timeindex"]) if entry.timeindex_size or storage.exists(paths[".timeindex"]) else None
        except Exception as exc:  # noqa: BLE001 - a missing object is a finding
            report.segments.append(SegmentReport(name, entry.base_offset, problems=[str(exc)]))
            continue
        expected = {"size": entry.size, "record_count": entry.record_count,
                    "checksum": f"crc32c:{entry.checksum:08x}"}
        seg_report = verify_segment(log, index, tindex, base_offset=entry.base_offset,
                                    name=name, expected=expected)
        if seg_report.stats is not None and seg_report.stats.next_offset > entry.next_offset:
            seg_report.problems.append(
                f"log runs to offset {seg_report.stats.next_offset}, past the manifest's "
                f"range end {entry.next_offset}")
        report.segments.append(seg_report)
    return report
