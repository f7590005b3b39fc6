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

This reads a local directory (the only I/O in the format layer); the caller
uploads the result and commits a manifest.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .errors import ConfigError, CorruptRecordError, KafkaStoreError
from .layout import validate_topic_name
from .format.segment import (DEFAULT_INDEX_INTERVAL_BYTES, SegmentStats, load_indexes, recover,
                      segment_stats)

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
