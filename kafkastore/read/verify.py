"""Verification of one segment (framing, CRC, offsets, indexes, expected stats), of a
partition's stored manifest versions, and of a whole partition (:func:`verify_partition`).

Unlike :func:`kafkastore.format.segment_scan.recover`, which stops at the first problem,
:func:`verify_segment` keeps going where it can: past a batch with a bad CRC
(its length is still trusted), and past unframeable bytes by searching for
the next valid batch, so one report lists every problem with its offset and
byte position. Nothing here raises for bad data.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..format.crc import crc32c
from ..errors import CorruptRecordError, KafkaStoreError
from ..manifest import CorruptMetadataError, Manifest, ManifestStore, SegmentEntry, check_invariants
from ..storage import Storage
from ..format.record_batch import BatchHeader, decode_batch
from ..format.segment_indexes import check_indexes
from ..format.segment_scan import (OffsetOrderError, SegmentOffsetOverflowError, _find_valid_batch,
                                   _read_batch, _SearchGaveUp, iter_batches)
from ..format.segment_stats import SegmentStats, _StatsAccumulator, batch_min_timestamp

#: Keys of ``expected`` that :func:`verify_segment` compares with the log: the manifest entry's
#: keys whose ``Field.verify`` is set (:attr:`SegmentEntry.FIELDS`), and after
#: ``record_count`` the batch count, which a :class:`SegmentStats` holds but no entry does.
_ENTRY_KEYS = tuple(f.key for f in SegmentEntry.FIELDS if f.verify)
EXPECTED_KEYS = (_ENTRY_KEYS[:_ENTRY_KEYS.index("record_count") + 1] + ("batch_count",)
                 + _ENTRY_KEYS[_ENTRY_KEYS.index("record_count") + 1:])
#: What :func:`verify_partition` compares for every live segment: the entry's keys that hold
#: for any segment, compacted or not (a compacted segment's last offset or timestamps may not
#: be the range's).
_ALWAYS = tuple(f for f in SegmentEntry.FIELDS if f.verify == "always")


def entry_expectations(entry: SegmentEntry) -> dict[str, Any]:
    """What :func:`verify_partition` expects of the segment a manifest entry lists (its
    checksum as ``"crc32c:<hex>"``, the form :func:`checksum` returns)."""
    out = {f.key: getattr(entry, f.name) for f in _ALWAYS}
    if "checksum" in out:
        out["checksum"] = f"crc32c:{out['checksum']:08x}"
    return out


@dataclass
class SegmentReport:
    """What :func:`verify_segment` found. ``ok`` when ``problems`` is empty."""

    name: str
    base_offset: int
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: SegmentStats | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem (``name: problem``), or one ``name: ok ...`` line."""
        if self.problems:
            return [f"{self.name}: {p}" for p in self.problems]
        s = self.stats
        if s is None or s.is_empty:
            return [f"{self.name}: ok (empty)"]
        return [f"{self.name}: ok ({s.batch_count} batches, {s.record_count} records, "
                f"offsets {s.first_offset}..{s.last_offset}, {s.size} bytes)"]

    def render(self) -> str:
        return "\n".join(self.lines())


def checksum(log_bytes, algorithm: str = "crc32c") -> str:
    """``"<algorithm>:<hex>"`` of a whole log: ``crc32c`` (8 hex digits) or any hashlib name."""
    if algorithm == "crc32c":
        return f"crc32c:{crc32c(log_bytes):08x}"
    try:
        h = hashlib.new(algorithm)
    except ValueError:
        raise KafkaStoreError(f"unknown checksum algorithm {algorithm!r}") from None
    h.update(log_bytes)
    return f"{algorithm}:{h.hexdigest()}"


def verify_segment(log_bytes, index_bytes=None, timeindex_bytes=None, *, base_offset: int,
                   name: str, expected: Mapping[str, Any] | Any | None = None,
                   decode_records: bool = True, max_problems: int = 100) -> SegmentReport:
    """Check a segment's log and indexes; return a report listing every problem found.

    * every batch: framing, header, CRC-32C, and (``decode_records``) that
      its records decode (catches writer bugs the CRC cannot);
    * offsets: first batch at or after ``base_offset``, every batch after the
      previous one, all within ``base_offset + 2^31-1``;
    * ``.index`` / ``.timeindex`` (when given): as
      :func:`kafkastore.format.segment_indexes.check_indexes` (entries at batch starts,
      lookups land at or before their answer); missing indexes are a note;
    * ``expected`` (a mapping, or any object with those attributes such as
      :class:`SegmentStats` or a manifest's segment entry): any of
      ``base_offset``, ``next_offset``,
      ``record_count``, ``batch_count``, ``size``, ``min_timestamp``,
      ``max_timestamp`` and ``checksum`` (``"<algorithm>:<hex>"``, see
      :func:`checksum`) present and not None is compared.
    """
    report = SegmentReport(name, base_offset)
    problems = report.problems

    def problem(msg: str, *, offset: int | None = None, position: int | None = None) -> bool:
        where = []
        if offset is not None:
            where.append(f"offset {offset}")
        if position is not None:
            where.append(f"position {position}")
        problems.append(f"{msg} ({', '.join(where)})" if where else msg)
        return len(problems) < max_problems

    end = len(log_bytes)
    batches: list[tuple[int, BatchHeader]] = []
    acc = _StatsAccumulator(base_offset)
    pos = 0
    expected_offset = None
    while pos < end and len(problems) < max_problems:
        try:
            # Framing only: a bad CRC or offset is reported below and the walk goes on.
            for pos, header in iter_batches(log_bytes, pos, verify_crc=False, check_order=False):
                if len(problems) >= max_problems:
                    break
                _check_batch(log_bytes, pos, header, base_offset, expected_offset,
                             decode_records, problem, batches, acc)
                expected_offset = max(expected_offset or 0, header.next_offset)
            break
        except CorruptRecordError as e:
            pos = e.position
            problem(e.reason, offset=e.offset, position=pos)
        try:
            found = _find_valid_batch(log_bytes, pos + 1, None, None)
        except _SearchGaveUp:
            found = None
        if found is None:
            problem(f"{end - pos} bytes from position {pos} to the end are not valid batches")
            break
        problem(f"skipped {found[0] - pos} bytes up to the next valid batch", position=found[0])
        pos = found[0]
    acc.size = end
    report.stats = acc.stats()

    if index_bytes is None:
        report.notes.append("no offset index given: not checked")
    if timeindex_bytes is None:
        report.notes.append("no time index given: not checked")
    for msg in check_indexes(batches, index_bytes, timeindex_bytes, base_offset,
                             max_problems=max(max_problems - len(problems), 1)):
        problems.append(msg)

    if expected is not None:
        _compare_expected(report, log_bytes, expected)
    return report


def _check_batch(log_bytes, pos: int, header: BatchHeader, base_offset: int,
                 expected_offset: int | None, decode_records: bool, problem, batches: list,
                 acc: _StatsAccumulator) -> None:
    """CRC, offsets and (``decode_records``) records of one framed batch, reported to
    ``problem``; the batch joins ``batches`` and the stats either way."""
    crc_ok = True
    try:
        _read_batch(log_bytes, pos, pos + header.size, base_offset, expected_offset, True)
    except (OffsetOrderError, SegmentOffsetOverflowError) as e:
        problem(e.reason, offset=e.offset, position=pos)
    except CorruptRecordError as e:  # CRC mismatch: framing is fine, keep walking
        crc_ok = False
        problem(e.reason, offset=e.offset, position=pos)
    min_ts = None
    if crc_ok:
        try:
            if decode_records:
                decode_batch(log_bytes, pos, verify_crc=False)
            min_ts = batch_min_timestamp(log_bytes, pos, header)
        except KafkaStoreError as e:  # CorruptRecordError or CompressionError
            problem(f"records do not decode: {getattr(e, 'reason', e)}",
                    offset=header.base_offset, position=pos)
    batches.append((pos, header))
    acc.add(header, min_ts)


def mismatch(what: str, got, want) -> str:
    """How a value that disagrees with the manifest is reported, by ``verify`` and by readers
    (:class:`kafkastore.errors.SegmentMismatchError`) alike."""
    return f"{what} is {got}, expected {want}"


def _compare_expected(report: SegmentReport, log_bytes, expected) -> None:
    if not isinstance(expected, Mapping):  # SegmentStats, a manifest entry, ...
        expected = {k: getattr(expected, k, None) for k in EXPECTED_KEYS}
    actual = report.stats
    for key in EXPECTED_KEYS:
        want = expected.get(key)
        if want is None:
            continue
        if key == "checksum":
            algorithm = str(want).split(":", 1)[0] if ":" in str(want) else "crc32c"
            try:
                got = checksum(log_bytes, algorithm)
            except KafkaStoreError as e:
                report.problems.append(f"checksum: {e}")
                continue
            if got.lower() != str(want).lower():
                report.problems.append(mismatch("checksum", got, want))
            continue
        got = report.base_offset if key == "base_offset" else getattr(actual, key)
        if got != want:
            report.problems.append(mismatch(key.replace('_', ' '), got, want))


def verify_manifest_versions(store) -> list[str]:
    """One line per damaged manifest object of a partition (a
    :class:`kafkastore.manifest.ManifestStore`), each naming topic, partition and version:
    every stored version is rebuilt (full versions parsed and checked, deltas applied in
    order and compared with their recorded result), and the hint is checked. A delta after
    a damaged version cannot be rebuilt and is reported too."""
    # Holes first (one line each, from the listing): the deltas behind a hole cannot be
    # rebuilt either and are reported below, but the hole is the damage to repair.
    versions = store.versions()
    problems = [str(store._gap(v, min(u for u in versions if u > v))) for v in store.gaps(versions)]
    problems += [str(err) for _v, _m, err in store.replay() if err is not None]
    hint = store.hint_problem()
    if hint is not None:
        problems.append(hint)
    return problems


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
        expected = entry_expectations(entry)
        seg_report = verify_segment(log, index, tindex, base_offset=entry.base_offset,
                                    name=name, expected=expected)
        if seg_report.stats is not None and seg_report.stats.next_offset > entry.next_offset:
            seg_report.problems.append(
                f"log runs to offset {seg_report.stats.next_offset}, past the manifest's "
                f"range end {entry.next_offset}")
        report.segments.append(seg_report)
    return report
