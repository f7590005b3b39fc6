"""Merging small segments, and the automatic housekeeping that runs it (DESIGN.md section 3).

Frequent small commits leave many small segments; every fetch, load and
compaction then walks them. This module concatenates adjacent live segments
into ``segment.bytes``-sized ones, byte for byte, and swaps them in with one
manifest commit, continuously and without anyone running a command.

**Planning** (:func:`plan_merge`, pure) is tiered merging by *generation*,
the shape of an LSM tree's size-tiered compaction restricted to neighbours:

* A segment's generation is how many merges its bytes went through: 0 for
  a segment a writer, compaction or import wrote, ``g + 1`` for the output
  of a merge whose inputs were generation ``g``. It is carried in the
  segment id (:func:`merged_segment_id`: ``m<g>g<random hex>``), so the
  manifest needs no new field and every reader ignores it.
* The live segments are cut into *stretches*: maximal runs of neighbours
  with no offset gap between them and no barrier (compaction's
  ``cleaner_offset`` on compacted topics, so a merge never joins the clean
  and the dirty section; segment ids the caller excludes).
* Scanning a stretch from the oldest segment: at segment ``i`` of generation
  ``g``, the run grows over the following segments of generation ``g``
  while it has fewer than ``F`` (the fan-in) members, its total ``.log``
  size stays at most ``segment.bytes`` and its time span (largest minus
  smallest record timestamp) stays below ``segment.ms``. A run of ``F``
  members is merged; so is a run of at least 2 members stopped by the size
  or time cap (packing: the next one cannot join anyway). The output has
  generation ``g + 1``.

**Bounds.** Let ``B`` = ``segment.bytes``, ``c`` the smallest commit,
``S`` the partition's size, ``F`` the fan-in.

* *Rewrite amplification.* A merge raises the generation of every byte it
  rewrites by exactly one, so a byte is rewritten at most ``G`` times, ``G``
  the highest generation. A generation-``g`` segment is the concatenation of
  at least two generation-``g-1`` segments (``F`` of them unless the cap
  stopped the run), so it holds at least ``2^g * c`` bytes (``F^g * c``
  without capped runs) and at most ``B``: ``G <= log2(B / c)``, and
  ``G <= log_F(B / c) + 1`` when commits are of similar size (only the top
  generation packs). With ``B`` = 1 GiB and 100-byte commits, ``F`` = 4:
  about 12 rewrites per byte, amortised O(log) per append like any LSM.
* *Live segments.* When the plan is empty, within one stretch the segments
  of one generation that lie next to each other (a block) cannot hold ``F``
  neighbours that fit under the caps, and two neighbours of a block that are
  not among its last ``F - 1`` sum to more than ``B`` (else the run starting
  at the first would have been packed). So a block of ``n`` members holding
  ``S_b`` bytes has ``n <= 2 * S_b / B + F``. New segments arrive at the end
  of the log with generation 0 and a merge's output has a higher generation
  than the segments after it, so generations do not increase from old to
  new except where a capped pair (more than ``B`` together) sits: there are
  at most ``G + 1`` blocks plus one per such pair. Hence, for any number of
  small commits, ``live <= 2 * S / B + F * (G + 1) + 1`` segments (plus one
  per gap and barrier), which tests/kafkastore/test_merge_policy.py checks on
  simulated histories of 10,000 appends together with the rewrite bound. In
  practice the top generation packs two or more segments per output, so
  ``live`` is about ``1.3 * S / B`` plus a few dozen small segments.

``min_segments`` (default 32): a partition with fewer live segments is not
merged at all (rewriting a tiny log buys nothing), which adds that many to
the constant. ``segment.ms`` caps a run by its record timestamps (largest
minus smallest), as Kafka's time-based roll does: a segment whose own
records span ``segment.ms`` or more is never merged, so a producer that
writes timestamps spread over more than ``segment.ms`` per commit gets no
merging (and Kafka would roll at every such batch too).

**Execution** (:func:`merge_partition`). For each planned run: read the
inputs' ``.log`` objects, check each against its entry (size, CRC-32C),
concatenate them unchanged (offsets, timestamps, CRCs, producer ids and
sequences, transaction markers: batches are never re-encoded), build
``.index`` / ``.timeindex`` with :func:`rebuild_indexes` (which also walks
and CRC-checks every batch of the result), upload the three objects under a
new id, then commit once for all runs: a ``ReplaceSegments`` per run plus
``AssertSegmentsPresent`` on its inputs. A run whose inputs are no longer
live when the commit is (re)built (compaction, retention or another merger
got there first) is dropped; its uploads stay unlisted and :mod:`kafkastore.gc`
removes them after the grace period.

The merged entry: offsets ``[first.base, last.next)``, ``record_count`` the
sum, ``size`` and ``checksum`` of the new ``.log``, min / max timestamps over
the inputs, ``max_timestamp_offset`` of the first input that holds the
largest timestamp (Kafka's offset of the first batch reaching it), the union
of ``aborted_txns``, the smallest ``delete_horizon_ms`` (None when no input
has one), and ``leader_epoch`` / ``writer_id`` of the newest input (the
writer of its newest batches; the largest epoch, since epochs only grow along
the log).

**Crash safety.** Nothing is deleted here. A crash after some uploads and
before the commit leaves unlisted files (gc's business); a lost commit
response is settled by the manifest store's read-back (ours or not); a crash
after the commit leaves the inputs unlisted, readers that planned against an
older version keep reading them until gc's grace passes. The next run plans
from the latest manifest and finishes whatever is still worth merging.

**Housekeeping** (:class:`Housekeeper`): writers call
:meth:`Housekeeper.poke` after each commit with the manifest they committed;
it plans on that manifest (no I/O) and, when there is something to merge,
runs :func:`merge_partition` on a background thread; at most once per
``gc_interval_ms`` per partition it also runs :func:`kafkastore.gc.collect_garbage`
for the partition (which expires old manifest versions and deletes unlisted
files older than the grace) on a thread of its own, so a long gc never stalls
merging. The caller never waits and never sees its
errors (logged; the next poke tries again).
"""
from __future__ import annotations

import logging
import os
import re
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .. import layout
from ..errors import (ConfigError, RequirementFailedError, SegmentMismatchError, StaleUploadError,
                      UnknownTopicError)
from ..format.crc import crc32c
from ..format.segment import SegmentStats, rebuild_indexes
from ..manifest import (NO_TIMESTAMP, AssertSegmentsPresent, Manifest, ManifestStore,
                        ReplaceSegments, SegmentEntry)
from ..write.segments import put_segment_objects, segment_entry
from ..storage import Storage
from ..threads import shared_pool
from ..topics.topic_config import TopicConfig
from ..topics.admin import load_topic

log = logging.getLogger("kafkastore.merge")  # its name before the move (log filters use it)

#: Fan-in: how many segments of one generation merge into one.
DEFAULT_FAN_IN = 4
#: A partition with fewer live segments is left alone.
DEFAULT_MIN_SEGMENTS = 32
#: How often (at most) housekeeping runs gc and version expiry for one partition.
DEFAULT_GC_INTERVAL_MS = 60_000
_GEN_RE = re.compile(r"^m(\d+)g[0-9a-f]+$")


def generation(segment_id: str) -> int:
    """How many merges the segment's bytes went through (0 unless a merge wrote it)."""
    m = _GEN_RE.match(segment_id)
    return int(m.group(1)) if m else 0


def merged_segment_id(gen: int) -> str:
    """A unique segment id that records the merge generation ``gen``."""
    return f"m{int(gen)}g{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class MergeRun:
    """Adjacent live segments to concatenate into one of generation ``generation``."""

    segments: tuple[SegmentEntry, ...]
    generation: int

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def segment_ids(self) -> tuple[str, ...]:
        return tuple(s.segment_id for s in self.segments)


def _span(min_ts: int, max_ts: int, seg: SegmentEntry) -> tuple[int, int]:
    if seg.min_timestamp == NO_TIMESTAMP:
        return min_ts, max_ts
    lo = seg.min_timestamp if min_ts == NO_TIMESTAMP else min(min_ts, seg.min_timestamp)
    return lo, max(max_ts, seg.max_timestamp)


def _stretches(segments: Sequence[SegmentEntry], barriers: Iterable[int],
               exclude: frozenset[str]) -> list[list[SegmentEntry]]:
    cuts = set(barriers)
    out: list[list[SegmentEntry]] = []
    cur: list[SegmentEntry] = []
    for seg in segments:
        if seg.segment_id in exclude:
            if cur:
                out.append(cur)
            cur = []
            continue
        if cur and (cur[-1].next_offset != seg.base_offset or seg.base_offset in cuts):
            out.append(cur)
            cur = []
        cur.append(seg)
    if cur:
        out.append(cur)
    return out


def plan_merge(segments: Sequence[SegmentEntry], segment_bytes: int, *,
               segment_ms: int | None = None, fan_in: int = DEFAULT_FAN_IN,
               min_segments: int = DEFAULT_MIN_SEGMENTS, barriers: Iterable[int] = (),
               exclude: Iterable[str] = (), pack: bool = False) -> list[MergeRun]:
    """The runs to merge now, oldest first, non-overlapping (pure; see the module docstring).

    ``segments`` are a manifest's live segments in offset order; ``barriers``
    are offsets no merge may straddle (a segment starting there starts a new
    stretch); ``exclude`` are segment ids never merged (e.g. a range another
    job is rewriting). Applying every run and planning again converges.

    ``pack`` ignores generations and packs neighbours greedily up to the caps:
    the final pass of ``kafkastore merge`` on a log nobody writes any more (each
    pass rewrites at most the partly filled segment of each stretch again, so
    it is not for every commit).
    """
    if fan_in < 2 or segment_bytes < 1:
        raise ConfigError(f"merge needs fan_in >= 2 and segment_bytes >= 1, got {fan_in}, {segment_bytes}")
    if len(segments) < max(min_segments, 2):
        return []
    span_limit = segment_ms if segment_ms is not None and segment_ms > 0 else None
    runs: list[MergeRun] = []
    for stretch in _stretches(segments, barriers, frozenset(exclude)):
        i, n = 0, len(stretch)
        while i < n:
            g = generation(stretch[i].segment_id)
            if pack:
                i = _pack_from(stretch, i, segment_bytes, span_limit, runs)
                continue
            total = 0
            lo = hi = NO_TIMESTAMP
            j = i
            capped = False
            while j < n and j - i < fan_in and generation(stretch[j].segment_id) == g:
                seg = stretch[j]
                nlo, nhi = _span(lo, hi, seg)
                if total + seg.size > segment_bytes or (
                        span_limit is not None and nlo != NO_TIMESTAMP and nhi - nlo >= span_limit):
                    capped = True
                    break
                total += seg.size
                lo, hi = nlo, nhi
                j += 1
            if j - i == fan_in or (j - i >= 2 and capped):
                runs.append(MergeRun(tuple(stretch[i:j]), g + 1))
                i = j
            else:
                # A shorter run starting inside i..j would stop at the same place; a capped
                # segment may still start a run with the ones after it.
                i = j if (j > i and not capped) else i + 1
    return runs


def _pack_from(stretch: list[SegmentEntry], i: int, segment_bytes: int, span_limit: int | None,
               runs: list[MergeRun]) -> int:
    """Greedy packing from ``i``: append a run if at least two fit; the next start."""
    total = 0
    lo = hi = NO_TIMESTAMP
    j = i
    while j < len(stretch):
        seg = stretch[j]
        nlo, nhi = _span(lo, hi, seg)
        if total + seg.size > segment_bytes or (
                span_limit is not None and nlo != NO_TIMESTAMP and nhi - nlo >= span_limit):
            break
        total += seg.size
        lo, hi = nlo, nhi
        j += 1
    if j - i >= 2:
        gen = max(generation(s.segment_id) for s in stretch[i:j]) + 1
        runs.append(MergeRun(tuple(stretch[i:j]), gen))
        return j
    return i + 1


# ---------------------------------------------------------------------------
# execution
# ---------------------------------------------------------------------------

def merged_entry(run: MergeRun, segment_id: str, size: int, checksum: int, index_size: int,
                 timeindex_size: int) -> SegmentEntry:
    """The manifest entry of ``run``'s concatenation (see the module docstring for each field)."""
    segs = run.segments
    stamped = [s for s in segs if s.min_timestamp != NO_TIMESTAMP]
    max_ts = max((s.max_timestamp for s in segs), default=NO_TIMESTAMP)
    max_ts_offset = -1
    if max_ts != NO_TIMESTAMP:
        first = next(s for s in segs if s.max_timestamp == max_ts)
        max_ts_offset = first.max_timestamp_offset
    horizons = [s.delete_horizon_ms for s in segs if s.delete_horizon_ms is not None]
    stats = SegmentStats(
        base_offset=segs[0].base_offset, next_offset=segs[-1].next_offset,
        record_count=sum(s.record_count for s in segs), batch_count=len(segs), size=size,
        min_timestamp=min((s.min_timestamp for s in stamped), default=NO_TIMESTAMP),
        max_timestamp=max_ts, offset_of_max_timestamp=max_ts_offset)
    return segment_entry(
        stats, segment_id=segment_id, size=size, checksum=checksum, index_size=index_size,
        timeindex_size=timeindex_size, writer_id=segs[-1].writer_id,
        leader_epoch=max(s.leader_epoch for s in segs),
        aborted_txns=tuple(dict.fromkeys(t for s in segs for t in s.aborted_txns)),
        delete_horizon_ms=min(horizons) if horizons else None)


def build_merged(storage: Storage, topic: str, partition: int, run: MergeRun,
                 index_interval_bytes: int) -> SegmentEntry:
    """Read, check, concatenate and upload one run; its new entry (not committed yet)."""
    parts = []
    for seg in run.segments:
        data = storage.get(layout.segment_path(topic, partition, seg.base_offset,
                                               seg.segment_id, ".log"))
        if len(data) != seg.size or crc32c(data) != seg.checksum:
            raise SegmentMismatchError(
                f"{topic}/{partition} segment {seg.stem}: the .log does not match its manifest "
                f"entry (size {len(data)} vs {seg.size} or CRC-32C differs); not merging it")
        parts.append(data)
    log_bytes = b"".join(parts)
    base = run.segments[0].base_offset
    seg_id = merged_segment_id(run.generation)
    # Walks every batch (framing, order, CRC) of the result while building the indexes.
    index, timeindex = rebuild_indexes(log_bytes, base, index_interval_bytes,
                                       segment=layout.segment_stem(base, seg_id))
    entry = merged_entry(run, seg_id, len(log_bytes), crc32c(log_bytes), len(index),
                         len(timeindex))
    put_segment_objects(storage, topic, partition, base, seg_id, log_bytes, index, timeindex)
    return entry


@dataclass
class MergeReport:
    """What one :func:`merge_partition` run did."""

    topic: str
    partition: int
    planned: int = 0
    merged: list[tuple[tuple[str, ...], str]] = field(default_factory=list)  # (inputs, output)
    dropped: list[str] = field(default_factory=list)
    bytes_rewritten: int = 0
    manifest: Manifest | None = None

    def __str__(self) -> str:
        lines = [f"merge {self.topic}/{self.partition}: {len(self.merged)} of {self.planned} "
                 f"planned run(s) merged, {sum(len(i) for i, _ in self.merged)} segment(s) into "
                 f"{len(self.merged)}, {self.bytes_rewritten} bytes rewritten"]
        lines += [f"  dropped: {d}" for d in self.dropped]
        return "\n".join(lines)


def plan_for(m: Manifest | None, config: TopicConfig, *, fan_in: int = DEFAULT_FAN_IN,
             min_segments: int = DEFAULT_MIN_SEGMENTS, pack: bool = False) -> list[MergeRun]:
    """:func:`plan_merge` for a manifest under a topic's config (barrier: the cleaner offset of
    a compacted topic)."""
    if m is None:
        return []
    barriers = [m.cleaner_offset] if config.compact and m.cleaner_offset else []
    return plan_merge(m.segments, config.segment_bytes, segment_ms=config.segment_ms,
                      fan_in=fan_in, min_segments=min_segments, barriers=barriers, pack=pack)


def merge_partition(storage: Storage, topic: str, partition: int, *,
                    config: TopicConfig | None = None, fan_in: int = DEFAULT_FAN_IN,
                    min_segments: int = DEFAULT_MIN_SEGMENTS, max_runs: int | None = None,
                    rounds: int = 1, writer: str = "merge", now_ms: int | None = None,
                    pack: bool = False) -> MergeReport:
    """Plan on the latest manifest, merge the runs and commit them once (see the module docstring).

    ``rounds`` > 1 plans and merges again on the result (until nothing is
    planned), e.g. for the ``merge`` command on a log nobody served; with
    ``pack`` the last round packs what the tiered rounds left (see
    :func:`plan_merge`). ``max_runs`` caps the runs per round. Never deletes anything.
    """
    if config is None:
        config = load_topic(storage, topic).config
    store = ManifestStore(storage, topic, partition)
    report = MergeReport(topic, partition)
    packing = False
    for _ in range(max(1, rounds) + (1 if pack else 0)):
        m = store.latest()
        runs = plan_for(m, config, fan_in=fan_in, min_segments=min_segments, pack=packing)
        if not runs and pack and not packing:
            packing = True
            runs = plan_for(m, config, fan_in=fan_in, min_segments=min_segments, pack=True)
        if max_runs is not None:
            runs = runs[:max_runs]
        if not runs:
            report.manifest = report.manifest or m
            break
        report.planned += len(runs)
        built: list[tuple[MergeRun, SegmentEntry]] = []
        # The commit refuses uploads older than max_upload_age_ms, and the first run's are the
        # oldest: on a slow store, stop building once half of that has gone and commit what is
        # built (the rest is planned again), else every job of a backlog fails (livelock).
        started = storage.clock.monotonic_s()
        for run in runs:
            if built and storage.clock.monotonic_s() - started > store.max_upload_age_ms / 2000:
                break
            built.append((run, build_merged(storage, topic, partition, run,
                                            config.index_interval_bytes)))
        landed: list[tuple[MergeRun, SegmentEntry]] = []

        def build(base: Manifest | None):
            live = set(base.segment_ids()) if base is not None else set()
            landed.clear()
            landed.extend((r, e) for r, e in built if set(r.segment_ids) <= live)
            if not landed:
                return None
            ids = tuple(i for r, _ in landed for i in r.segment_ids)
            return ([ReplaceSegments(r.segment_ids, (e,)) for r, e in landed],
                    [AssertSegmentsPresent(ids)])

        try:
            new = store.commit(build, operation="merge", writer=writer, now_ms=now_ms)
        except (StaleUploadError, RequirementFailedError) as exc:
            # Too slow (gc may take the uploads) or raced: drop the plan, files left to gc.
            report.dropped.append(f"{len(built)} run(s): {exc}")
            break
        kept = {e.segment_id for _, e in landed}
        for run, entry in built:
            if entry.segment_id in kept:
                report.merged.append((run.segment_ids, entry.segment_id))
                report.bytes_rewritten += entry.size
            else:
                report.dropped.append(f"{', '.join(run.segment_ids)}: no longer live")
        report.manifest = new
        if len(kept) < len(built):
            break
    return report


# ---------------------------------------------------------------------------
# automatic housekeeping
# ---------------------------------------------------------------------------

class Housekeeper:
    """Merging, gc and version expiry for the partitions a process writes, in the background.

    ``clock`` gives epoch ms for gc's age checks and the rate limit; by
    default the storage's own clock (the one object times come from).
    Merges run on the process's ``housekeeping`` pool (:func:`kafkastore.threads.shared_pool`,
    ``workers`` threads, remade in a forked child), gc on its own ``housekeeping-gc`` pool
    (``gc_workers`` threads), so a long gc never holds merging up; a partition never has
    two merge jobs, nor two gc runs, at once (a merge and a gc of one partition may run
    side by side: gc is safe next to any writer). :meth:`poke` is cheap and never blocks on I/O.
    """

    #: Runs one merge job takes at most. A job's uploads must commit within half the gc
    #: floor and its commit must be quick next to a busy writer's, so a job never grows with
    #: a backlog: the housekeeper runs bounded jobs one after another until it is gone.
    max_runs_per_job: int = 32

    def __init__(self, storage: Storage, *, clock: Callable[[], int] | None = None,
                 gc_interval_ms: int = DEFAULT_GC_INTERVAL_MS, fan_in: int = DEFAULT_FAN_IN,
                 min_segments: int = DEFAULT_MIN_SEGMENTS, workers: int = 1,
                 gc_workers: int = 1, writer: str = "housekeeping"):
        self.storage = storage
        self.clock = clock or storage.clock.wall_ms
        self.gc_interval_ms = gc_interval_ms
        self.fan_in = fan_in
        self.min_segments = min_segments
        self.writer = writer
        self.workers = workers
        self.gc_workers = gc_workers
        self._closed = False
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._busy: set[tuple[str, int]] = set()       # merge job running or queued
        self._gc_busy: set[tuple[str, int]] = set()    # gc running or queued
        self._again: set[tuple[str, int]] = set()  # poked while busy: merge again after
        # The first gc of a partition is due one interval after this housekeeper started: a
        # short-lived writer (one CLI produce) does not pay for gc; `kafkastore gc` and the
        # retention job cover the logs only such writers touch.
        self._started_ms = self.clock()
        self._last_gc: dict[tuple[str, int], int] = {}
        # Partitions that owe a gc although no commit may come to trigger one (a partition
        # that went quiet): due time (ms) and how many gc runs in a row found nothing.
        self._quiet: dict[tuple[str, int], int] = {}
        self._idle_runs: dict[tuple[str, int], int] = {}
        self._sweeper: threading.Thread | None = None
        self._configs: dict[str, tuple[int, TopicConfig]] = {}  # topic -> (read at ms, config)
        self.errors: list[str] = []
        self.merges = 0
        self.gc_runs = 0

    def _config(self, topic: str) -> TopicConfig:
        # Re-read once per gc interval: a long-running serve must see `alter` (segment.bytes,
        # segment.ms, cleanup.policy: the cleaner-offset barrier) and a re-created topic's
        # config, not the one it first read.
        now = self.clock()
        hit = self._configs.get(topic)
        if hit is None or now - hit[0] >= self.gc_interval_ms:
            hit = self._configs[topic] = (now, load_topic(self.storage, topic).config)
        return hit[1]

    def poke(self, topic: str, partition: int, manifest: Manifest | None = None) -> bool:
        """A commit landed on ``topic/partition`` (``manifest``: the version it made, if known).

        Schedules a merge when :func:`plan_merge` finds work in ``manifest``
        (none without one), and gc when the partition's last gc is
        ``gc_interval_ms`` old. Returns whether a job was scheduled; never
        raises (a failure is logged and kept in :attr:`errors`).
        """
        try:
            return self._poke(topic, partition, manifest)
        except Exception as exc:  # noqa: BLE001 -- the writer's commit landed; never fail it here
            self.errors.append(f"{topic}/{partition}: {type(exc).__name__}: {exc}")
            log.warning("housekeeping of %s/%d not scheduled: %s", topic, partition, exc)
            return False

    def _poke(self, topic: str, partition: int, manifest: Manifest | None) -> bool:
        tp = (topic, partition)
        if self._closed:
            return False
        if self._pid != os.getpid():
            # A forked child: the parent's jobs and sweeper do not run here, and its lock may
            # be held.
            self._pid, self._lock = os.getpid(), threading.Lock()
            self._busy, self._again, self._gc_busy = set(), set(), set()
            self._quiet, self._idle_runs, self._sweeper = {}, {}, None
        now = self.clock()
        self._owe_gc(tp, now)
        with self._lock:
            merging = tp in self._busy
            if merging and manifest is not None:
                self._again.add(tp)  # the running merge job plans once more when it is done
            due_gc = (tp not in self._gc_busy
                      and now - self._last_gc.get(tp, self._started_ms) >= self.gc_interval_ms)
        want_merge = not merging and manifest is not None and bool(
            plan_for(manifest, self._config(topic), fan_in=self.fan_in,
                     min_segments=self.min_segments))
        scheduled = False
        if want_merge:
            with self._lock:
                claimed = tp not in self._busy
                if claimed:
                    self._busy.add(tp)
            if claimed:
                scheduled |= self._submit("housekeeping", self.workers, self._run_merge, tp,
                                          self._busy)
        if due_gc:
            with self._lock:
                claimed = tp not in self._gc_busy
                if claimed:
                    self._gc_busy.add(tp)
                    self._last_gc[tp] = now
            if claimed:
                scheduled |= self._submit("housekeeping-gc", self.gc_workers, self._run_gc, tp,
                                          self._gc_busy)
        return scheduled

    def _submit(self, pool: str, workers: int, job, tp: tuple[str, int], busy: set) -> bool:
        try:
            shared_pool(pool, workers).submit(job, tp)
        except RuntimeError:  # interpreter shutting down
            with self._lock:
                busy.discard(tp)
            return False
        return True

    def _run_merge(self, tp: tuple[str, int]) -> None:
        """Merge jobs for ``tp``, one bounded job after another while a backlog or new commits
        leave work (on the ``housekeeping`` pool; gc runs on its own, see :meth:`_run_gc`)."""
        topic, partition = tp
        while True:
            try:
                report = merge_partition(self.storage, topic, partition,
                                         config=self._config(topic), fan_in=self.fan_in,
                                         min_segments=self.min_segments, writer=self.writer,
                                         max_runs=self.max_runs_per_job)
                self.merges += len(report.merged)
                # A capped job left work behind (a backlog): go on, one bounded job at a
                # time, rather than letting one job grow with the backlog.
                more = report.planned >= self.max_runs_per_job and bool(report.merged)
            except Exception as exc:  # noqa: BLE001 -- background work: logged, retried later
                self.errors.append(f"{topic}/{partition}: {type(exc).__name__}: {exc}")
                # After close() the process may be exiting past close's bound: an abandoned
                # merge loses nothing (its uploads are unreferenced, gc removes them, the next
                # writer or `kafkastore merge` plans it again), so it is no warning then.
                (log.info if self._closed else log.warning)(
                    "housekeeping of %s/%d failed: %s", topic, partition, exc)
                with self._lock:
                    self._again.discard(tp)
                    self._busy.discard(tp)
                return
            with self._lock:
                # Commits that landed meanwhile were not planned: plan once more on the latest.
                if (tp not in self._again and not more) or self._closed:
                    self._again.discard(tp)
                    self._busy.discard(tp)
                    return
                self._again.discard(tp)

    def _run_gc(self, tp: tuple[str, int]) -> None:
        """One gc of ``tp`` (version expiry and unlisted files), on the ``housekeeping-gc``
        pool: a gc that takes long (many versions within the grace) never holds merging up,
        and at most :attr:`gc_workers` gc runs at once in the process."""
        from .gc import collect_garbage, require_clock_agreement  # gc imports topics and
        # manifest only; no cycle, kept lazy

        topic, partition = tp
        try:
            require_clock_agreement(self.storage)   # a clock ahead would delete live files
            now = self.clock()
            gc_report = collect_garbage(self.storage, topic, partition, now_ms=now)
            self.gc_runs += 1
            self._after_gc(tp, now, bool(gc_report.deleted or gc_report.young
                                         or any(gc_report.versions_expired.values())))
        except UnknownTopicError as exc:
            # The topic (or the whole root) was deleted: nothing is owed any more.
            log.info("gc of %s/%d: %s; dropped", topic, partition, exc)
            with self._lock:
                self._quiet.pop(tp, None)
                self._idle_runs.pop(tp, None)
        except Exception as exc:  # noqa: BLE001 -- background work: logged, retried later
            self.errors.append(f"{topic}/{partition}: {type(exc).__name__}: {exc}")
            log.warning("gc of %s/%d failed: %s", topic, partition, exc)
            # A failed gc counts as one that found nothing: the sweeper tries again one
            # interval and one grace later, and gives up after two (a deleted topic, a
            # removed root), instead of retrying at every sweep.
            self._after_gc(tp, self.clock(), False)
        finally:
            with self._lock:
                self._gc_busy.discard(tp)

    #: How often (seconds) the sweeper looks for quiet partitions whose gc is due.
    sweep_s: float = 15.0

    def _owe_gc(self, tp: tuple[str, int], now: int) -> None:
        """``tp`` had a commit: it owes a gc once the interval and the grace have passed, even
        if no later commit pokes it (the sweeper runs it)."""
        due = now + self.gc_interval_ms + self._grace_ms(tp[0])
        with self._lock:
            self._quiet[tp] = due
            self._idle_runs[tp] = 0
            if self._sweeper is None and not self._closed:
                self._sweeper = threading.Thread(target=self._sweep, name="kafkastore-housekeeping-sweep",
                                                 daemon=True)
                self._sweeper.start()

    def _grace_ms(self, topic: str) -> int:
        try:
            return max(int(self._config(topic).file_delete_delay_ms), int(ManifestStore.min_keep_ms))
        except Exception:  # noqa: BLE001 -- a deleted topic: the floor is a fine guess
            return int(ManifestStore.min_keep_ms)

    def _after_gc(self, tp: tuple[str, int], now: int, did_something: bool) -> None:
        # A gc that deleted or expired something, or kept files too young to go, leaves work
        # for one grace later; two runs in a row that find nothing end the partition's debt.
        due = now + self.gc_interval_ms + self._grace_ms(tp[0])
        with self._lock:
            idle = 0 if did_something else self._idle_runs.get(tp, 0) + 1
            if idle >= 2:
                self._quiet.pop(tp, None)
                self._idle_runs.pop(tp, None)
            else:
                self._idle_runs[tp] = idle
                self._quiet[tp] = due

    def _sweep(self) -> None:
        """Run the gc quiet partitions owe (one daemon thread per housekeeper)."""
        import time as _time

        while not self._closed and self._pid == os.getpid():
            _time.sleep(self.sweep_s)
            now = self.clock()
            with self._lock:
                due = [tp for tp, at in self._quiet.items() if at <= now and tp not in self._gc_busy]
                for tp in due:
                    self._gc_busy.add(tp)
                    self._last_gc[tp] = now
            for tp in due:
                if not self._submit("housekeeping-gc", self.gc_workers, self._run_gc, tp,
                                    self._gc_busy):
                    return

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Block until no job is running or queued (tests, shutdown), at most ``timeout_s``;
        returns whether that happened."""
        import time as _time

        from ..clock import SYSTEM  # real time on purpose: it waits for real threads
        deadline = SYSTEM.monotonic_s() + timeout_s
        while True:
            with self._lock:
                if not self._busy and not self._gc_busy:
                    return True
            if SYSTEM.monotonic_s() >= deadline:
                return False
            _time.sleep(0.01)

    def close(self, wait: bool = True, timeout_s: float = 30.0) -> bool:
        """Stop accepting work; with ``wait``, let what is queued or running finish first (at
        most ``timeout_s``: a merge job loops no more once closed, so this is one bounded job).
        Returns whether no job is left.

        A process that exits must call this before its main thread returns: a job still running
        while the interpreter shuts down finds the thread pools it uploads on closed and fails
        half way."""
        self._closed = True
        return self.wait(timeout_s) if wait else self.wait(0)


_SHARED: "weakref.WeakKeyDictionary[Storage, Housekeeper]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def housekeeper_for(storage: Storage) -> Housekeeper:
    """The process's one :class:`Housekeeper` for ``storage`` (made on first use)."""
    with _SHARED_LOCK:
        hk = _SHARED.get(storage)
        if hk is None:
            hk = _SHARED[storage] = Housekeeper(storage)
        return hk
