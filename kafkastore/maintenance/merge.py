"""Merging small segments (DESIGN.md section 3).

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

**First generation.** A run's cost is mostly fixed, whatever its size: it reads its
inputs, uploads three objects (three fsyncs on local files), and gc later deletes its
inputs' files; the runs of one job share one commit. The segments writers leave
(generation 0) are the smallest, one per produce commit, so with a fan-in of 4 most runs
are theirs (a third of a run and one upload per commit). ``first_fan_in`` ``F0`` lets
generation 0 alone merge in runs of up to ``F0`` members (the housekeeper uses
:data:`HOUSEKEEPING_FIRST_FAN_IN`, 16, in ``housekeeper_for``): four times fewer runs and uploads than at 4,
a fifth fewer reads and rewritten bytes (one generation less), about a third fewer
deletes (bench/merge_plan_cost.py counts them). The bounds above hold with the first
block's ``F`` replaced by ``F0``: ``live <= 2 * S / B + F0 + F * G + 1``; the rewrite bound
is unchanged (a run still has at least two members).

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
``.index`` / ``.timeindex`` with :func:`rebuild_indexes` from a walk that
frames and CRC-checks every batch of the result in steps of at most
:data:`SCAN_STEP_BYTES` (:func:`scan_steps`), handing the GIL over between
steps so a produce commit of the same process never waits behind a whole
segment's scan (tens of ms of Python per MiB of small batches), upload the three objects under a
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

The automatic housekeeping that runs merges beside the writers is
:mod:`kafkastore.maintenance.housekeeper`.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from .. import layout
from ..errors import ConfigError, RequirementFailedError, SegmentMismatchError, StaleUploadError
from ..format.crc import crc32c
from ..format.segment_build import rebuild_indexes
from ..format.segment_scan import iter_batches
from ..format.segment_stats import SegmentStats
from ..manifest import (NO_TIMESTAMP, AssertSegmentsPresent, Manifest, ManifestStore,
                        ReplaceSegments, SegmentEntry)
from ..write.segments import put_segment_objects, segment_entry
from ..storage import Storage
from ..topics.topic_config import TopicConfig
from ..topics.admin import load_topic
from ..threads import between_steps

#: Fan-in: how many segments of one generation merge into one.
DEFAULT_FAN_IN = 4
#: The process's housekeeper's fan-in of generation 0, the segments writers leave
#: (``housekeeper_for``; see "First generation" in the module docstring); ``plan_merge``,
#: a ``Housekeeper`` made directly and ``kafkastore merge`` keep ``fan_in`` unless told.
HOUSEKEEPING_FIRST_FAN_IN = 16
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
               exclude: Iterable[str] = (), pack: bool = False,
               first_fan_in: int | None = None) -> list[MergeRun]:
    """The runs to merge now, oldest first, non-overlapping (pure; see the module docstring).

    ``segments`` are a manifest's live segments in offset order; ``barriers``
    are offsets no merge may straddle (a segment starting there starts a new
    stretch); ``exclude`` are segment ids never merged (e.g. a range another
    job is rewriting). Applying every run and planning again converges.

    ``pack`` ignores generations and packs neighbours greedily up to the caps:
    the final pass of ``kafkastore merge`` on a log nobody writes any more (each
    pass rewrites at most the partly filled segment of each stretch again, so
    it is not for every commit).

    ``first_fan_in`` (default: ``fan_in``) is the fan-in of generation 0 alone: the
    segments writers leave are the smallest, and a run costs its reads, its uploads, a
    commit and gc's deletes of its inputs whatever its size, so packing more of them per
    run makes fewer runs (see "First generation" in the module docstring).
    """
    first = fan_in if first_fan_in is None else first_fan_in
    if fan_in < 2 or first < 2 or segment_bytes < 1:
        raise ConfigError(f"merge needs fan_in >= 2, first_fan_in >= 2 and segment_bytes >= 1, "
                          f"got {fan_in}, {first}, {segment_bytes}")
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
            f = first if g == 0 else fan_in
            total = 0
            lo = hi = NO_TIMESTAMP
            j = i
            capped = False
            while j < n and j - i < f and generation(stretch[j].segment_id) == g:
                seg = stretch[j]
                nlo, nhi = _span(lo, hi, seg)
                if total + seg.size > segment_bytes or (
                        span_limit is not None and nlo != NO_TIMESTAMP and nhi - nlo >= span_limit):
                    capped = True
                    break
                total += seg.size
                lo, hi = nlo, nhi
                j += 1
            if j - i == f or (j - i >= 2 and capped):
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


#: The most log bytes one step of a merge's batch walk covers (plus the batch that ends it):
#: about 3 ms of Python for one-record batches, the longest a merge keeps the GIL from a
#: produce commit of the same process.
SCAN_STEP_BYTES = 128 * 1024


def scan_steps(log_bytes, base_offset: int, segment: str,
               step_bytes: int = SCAN_STEP_BYTES) -> Iterator[list]:
    """The ``(position, header)`` of every batch of a merged log, as :func:`rebuild_indexes`
    walks them (framing, CRC, offsets in order from ``base_offset``), in steps: lists whose
    batches add up to at most ``step_bytes`` (a bigger batch is a step of its own). The walk
    is lazy, so each step's work is done when it is asked for; damage raises as in the
    whole walk, after the steps before it."""
    step: list = []
    size = 0
    for pos, header in iter_batches(log_bytes, verify_crc=True, base_offset=base_offset,
                                    check_order=True, segment=segment):
        if step and size + header.size > step_bytes:
            yield step
            step, size = [], 0
        step.append((pos, header))
        size += header.size
    if step:
        yield step


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
    # Walks every batch (framing, order, CRC) of the result in bounded steps, then builds the
    # indexes from the batches found (a few ms of Python per MiB).
    batches: list = []
    for step in scan_steps(log_bytes, base, layout.segment_stem(base, seg_id), SCAN_STEP_BYTES):
        batches.extend(step)
        between_steps()
    index, timeindex = rebuild_indexes(log_bytes, base, index_interval_bytes, batches=batches)
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
             min_segments: int = DEFAULT_MIN_SEGMENTS, pack: bool = False,
             first_fan_in: int | None = None) -> list[MergeRun]:
    """:func:`plan_merge` for a manifest under a topic's config (barrier: the cleaner offset of
    a compacted topic)."""
    if m is None:
        return []
    barriers = [m.cleaner_offset] if config.compact and m.cleaner_offset else []
    return plan_merge(m.segments, config.segment_bytes, segment_ms=config.segment_ms,
                      fan_in=fan_in, min_segments=min_segments, barriers=barriers, pack=pack,
                      first_fan_in=first_fan_in)


def merge_partition(storage: Storage, topic: str, partition: int, *,
                    config: TopicConfig | None = None, fan_in: int = DEFAULT_FAN_IN,
                    min_segments: int = DEFAULT_MIN_SEGMENTS, max_runs: int | None = None,
                    rounds: int = 1, writer: str = "merge", now_ms: int | None = None,
                    pack: bool = False, first_fan_in: int | None = None) -> MergeReport:
    """Plan on the latest manifest, merge the runs and commit them once (see the module docstring).

    ``rounds`` > 1 plans and merges again on the result (until nothing is
    planned), e.g. for the ``merge`` command on a log nobody served; with
    ``pack`` the last round packs what the tiered rounds left (see
    :func:`plan_merge`). ``max_runs`` caps the runs per round; ``first_fan_in`` is
    generation 0's fan-in (default ``fan_in``). Never deletes anything.
    """
    if config is None:
        config = load_topic(storage, topic).config
    store = ManifestStore(storage, topic, partition)
    report = MergeReport(topic, partition)
    packing = False
    for _ in range(max(1, rounds) + (1 if pack else 0)):
        m = store.latest()
        runs = plan_for(m, config, fan_in=fan_in, min_segments=min_segments, pack=packing,
                        first_fan_in=first_fan_in)
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
