"""Adopt a Kafka partition directory (``<topic>-<partition>/`` as a broker leaves it).

A broker's partition directory holds, per segment, ``<20-digit base
offset>.log`` with ``.index`` and ``.timeindex`` (either may be missing), and
other files this reader ignores: ``.txnindex`` (kafkastore finds aborted
transactions from the log itself), ``.snapshot`` (producer state),
``leader-epoch-checkpoint``, ``partition.metadata``, and leftovers of
interrupted operations, which Kafka itself deletes or completes on start:
``*.deleted``, ``*.cleaned``, ``*.swap``. Ignoring a ``.swap`` file keeps the
uncompacted original segments it was meant to replace (same offsets, more
records: still a correct log); if the originals are gone already the offset
check below fails loudly instead.

:func:`read_kafka_partition_dir` reads a local directory and validates every batch;
:func:`import_kafka_dir` uploads the result and commits it to a partition's manifest in one
commit (Kafka's file set kept, empty indexes included).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from ..errors import ConfigError, CorruptRecordError, KafkaStoreError
from ..format.transactions import iter_control_types, scan_transactions
from ..layout import validate_topic_name
from ..manifest import AppendSegments, Manifest, ManifestStore, ProducerState, SegmentEntry, UpdateProducerState
from ..storage import Storage
from ..topics.admin import load_topic
from .segments import Uploads, commit_appending, write_segment
from ..format.segment_build import DEFAULT_INDEX_INTERVAL_BYTES
from ..format.segment_indexes import load_indexes
from ..format.segment_scan import recover
from ..format.segment_stats import SegmentStats, segment_stats

_LOG_RE = re.compile(r"^(\d{20})\.log$")


@dataclass
class ImportedSegment:
    """One segment read from a Kafka partition directory, ready to upload."""

    base_offset: int
    log: bytes
    index: bytes
    timeindex: bytes
    stats: SegmentStats
    path: str
    index_rebuilt: bool = False
    truncated_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def parse_kafka_dir_name(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a Kafka partition directory name like ``orders-3``.

    The last ``-`` separates the partition number (topics may contain
    ``-``). None for anything else, including the directories Kafka renames
    partitions to while deleting or moving them
    (``<topic>-<p>.<id>-delete``, ``-future``, ``-stray``).
    """
    base = os.path.basename(os.path.normpath(name)) if name else ""
    topic, sep, partition = base.rpartition("-")
    if not sep or not partition.isascii() or not partition.isdigit():
        return None
    try:
        validate_topic_name(topic)
    except ConfigError:
        return None
    return topic, int(partition)


def read_kafka_partition_dir(path, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
                             ) -> list[ImportedSegment]:
    """Read every segment of a Kafka partition directory, validated and with usable indexes.

    Per segment: every batch is checked (framing, CRC-32C, offsets at or
    after the file name's base offset and increasing); the last segment's
    torn tail, if any, is cut (Kafka's recovery after a crash) and noted;
    damage anywhere else raises CorruptRecordError / CrcMismatchError with
    the file, offset and position. Indexes are trimmed of preallocation
    padding and checked against the log, and rebuilt when missing or wrong.
    Segments must not overlap (each ends before the next one's base offset);
    an offset gap between segments (normal after compaction) is noted.
    Raises ConfigError when ``path`` is not a directory with segments.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: not a directory")
    bases = sorted(int(m.group(1)) for m in map(_LOG_RE.match, os.listdir(path))
                   if m and os.path.isfile(os.path.join(path, m.group(0))))
    if not bases:
        raise ConfigError(f"{path}: no Kafka segment files (<20-digit base offset>.log)")
    segments: list[ImportedSegment] = []
    for i, base in enumerate(bases):
        seg = _read_segment(path, base, last=i == len(bases) - 1,
                            index_interval_bytes=index_interval_bytes)
        if segments:
            prev = segments[-1]
            if prev.stats.next_offset > base:
                raise CorruptRecordError(
                    f"segment {os.path.basename(prev.path)} ends at offset "
                    f"{prev.stats.last_offset}, past the next segment's base offset {base}: "
                    f"segments overlap", segment=seg.path, offset=base, position=0)
            if prev.stats.next_offset < base:
                prev.notes.append(f"no offsets in [{prev.stats.next_offset}, {base}) before the "
                                  f"next segment (compacted away or never written)")
        segments.append(seg)
    last = segments[-1]
    if last.stats.is_empty and last.truncated_bytes:
        # Recovery cut the whole last segment. A batch being written when the broker stopped
        # (it starts like one) is Kafka's torn tail, and the segment stays, empty, fixing the
        # log end offset; anything else is not a Kafka segment at all.
        raw = _read_file(last.path) or b""
        if not _looks_like_batch_start(raw, last.base_offset):
            raise CorruptRecordError(
                f"{last.path}: not a Kafka log segment (no record batch v2 at the start: "
                f"{(last.notes or ['empty'])[0]})", segment=last.path, offset=last.base_offset,
                position=0)
    return segments


def _looks_like_batch_start(raw: bytes, base_offset: int) -> bool:
    """Whether ``raw`` starts like a record batch v2 at ``base_offset`` (base offset field equal
    to the file name's, magic 2): a torn batch rather than foreign bytes."""
    if len(raw) < 17:
        return len(raw) < 8 or int.from_bytes(raw[:8], "big", signed=True) == base_offset
    return int.from_bytes(raw[:8], "big", signed=True) == base_offset and raw[16] == 2


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KafkaStoreError(f"cannot read {path}: {e}") from None


def _read_segment(directory: str, base: int, *, last: bool,
                  index_interval_bytes: int) -> ImportedSegment:
    stem = os.path.join(directory, f"{base:020d}")
    log_path = stem + ".log"
    name = log_path
    raw = _read_file(log_path)
    if raw is None:
        raise KafkaStoreError(f"{log_path} disappeared while importing")
    rec = recover(raw, base_offset=base, segment=name, allow_torn_tail=last)
    notes = [rec.note] if rec.note else []
    index = _read_file(stem + ".index")
    timeindex = _read_file(stem + ".timeindex")
    index_out, timeindex_out, rebuilt = load_indexes(
        rec.log, index, timeindex, base, index_interval_bytes=index_interval_bytes,
        batches=rec.batches, segment=name)
    if rebuilt:
        missing = [ext for ext, data in ((".index", index), (".timeindex", timeindex)) if data is None]
        notes.append(f"indexes rebuilt ({'missing ' + ', '.join(missing) if missing else 'not valid for the log'})")
    stats = segment_stats(rec.log, base, batches=rec.batches, segment=name)
    return ImportedSegment(base_offset=base, log=rec.log, index=index_out, timeindex=timeindex_out,
                           stats=stats, path=log_path, index_rebuilt=rebuilt,
                           truncated_bytes=rec.truncated_bytes, notes=notes)


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
