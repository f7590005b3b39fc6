"""Automatic housekeeping: merging and gc beside the writers of a process (DESIGN.md
section 3).

**Housekeeping** (:class:`Housekeeper`): writers call
:meth:`Housekeeper.poke` after each commit with the manifest they committed;
it plans on that manifest (no I/O) and, when there is something to merge,
runs :func:`kafkastore.maintenance.merge.merge_partition` on a background thread; at most once per
``gc_interval_ms`` per partition it also runs :func:`kafkastore.maintenance.gc.collect_garbage`
for the partition (which expires old manifest versions and deletes unlisted
files older than the grace) on a thread of its own, so a long gc never stalls
merging. Version expiry alone is also due every ``expire_every_versions`` commits of a
partition, so it keeps pace with a busy partition whose writers restart more often than
the interval; a backlog goes in bounded steps, back to back; and on a clock that disagrees
with the store's, versions still expire (by the store's times) while no file is deleted.
The caller never waits and never sees its errors (logged; the next poke tries again). A
job that meets the process's thread pools shut (a clean stop) is a stop, not a failure.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from typing import Callable

from ..clock import SYSTEM
from ..errors import ClockSkewError, UnknownTopicError
from ..manifest import Manifest, ManifestStore
from ..storage import Storage
from ..threads import HOUSEKEEPING, in_lane, shared_pool
from ..topics.admin import load_topic
from ..topics.topic_config import TopicConfig
# gc and merge are called through their modules (a profiler's wrapper of a function there is
# seen, as when the housekeeper lived in merge.py)
from . import gc, merge
from .merge import (DEFAULT_FAN_IN, DEFAULT_GC_INTERVAL_MS, DEFAULT_MIN_SEGMENTS,
                    HOUSEKEEPING_FIRST_FAN_IN)

log = logging.getLogger("kafkastore.merge")  # the housekeeper's log name before the move (log filters use it)


class Housekeeper:
    """Merging, gc and version expiry for the partitions a process writes, in the background.

    ``clock`` gives epoch ms for gc's age checks and the rate limit; by
    default the storage's own clock (the one object times come from).
    Merges run on the process's ``housekeeping`` pool (:func:`kafkastore.threads.shared_pool`,
    ``workers`` threads, remade in a forked child), gc on its own ``housekeeping-gc`` pool
    (``gc_workers`` threads), so a long gc never holds merging up; a partition never has
    two merge jobs, nor two gc runs, at once (a merge and a gc of one partition may run
    side by side: gc is safe next to any writer). :meth:`poke` is cheap and never blocks on I/O.

    Every job runs in the housekeeping lane (:mod:`kafkastore.threads`) and through
    :attr:`io_storage` (:meth:`Storage.for_housekeeping`): the pools its uploads and fsyncs
    use, and on S3 its clients, connections and event-loop thread, are not the ones a
    produce commit waits on, so housekeeping stays off the ack path. Its commits are
    conditional creates through the same commit engine as every writer's.
    """

    #: Runs one merge job takes at most. A job's uploads must commit within half the gc
    #: floor and its commit must be quick next to a busy writer's, so a job never grows with
    #: a backlog: the housekeeper runs bounded jobs one after another until it is gone.
    max_runs_per_job: int = 32
    #: Version expiry of a partition is due after this many of its commits (beside gc's
    #: interval; see :meth:`poke`).
    expire_every_versions: int = 256
    #: Versions one expiry step deletes at most (whole groups): a backlog goes in bounded
    #: steps, each submitted again at once while it leaves some (:meth:`_run_gc`).
    max_versions_per_step: int = 1024

    def __init__(self, storage: Storage, *, clock: Callable[[], int] | None = None,
                 gc_interval_ms: int = DEFAULT_GC_INTERVAL_MS, fan_in: int = DEFAULT_FAN_IN,
                 min_segments: int = DEFAULT_MIN_SEGMENTS, workers: int = 1,
                 gc_workers: int = 1, writer: str = "housekeeping",
                 first_fan_in: int | None = None):
        self.storage = storage
        #: What the jobs read, upload, delete and commit through (see the class docstring).
        self.io_storage = storage.for_housekeeping()
        self.clock = clock or storage.clock.wall_ms
        self.gc_interval_ms = gc_interval_ms
        self.fan_in = fan_in
        #: Generation 0's fan-in (:func:`kafkastore.maintenance.merge.plan_merge`; None:
        #: ``fan_in``). The process's housekeeper (:func:`housekeeper_for`) packs the
        #: writers' small segments in bigger runs, so fewer runs (uploads, fsyncs, deletes)
        #: per commit.
        self.first_fan_in = first_fan_in
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
        # Per partition, its manifest version when its last expiry was scheduled here (or when
        # this process first saw it): the count behind `expire_every_versions`.
        self._expired_at: dict[tuple[str, int], int] = {}
        self._sweeper: threading.Thread | None = None
        self._configs: dict[str, tuple[int, TopicConfig]] = {}  # topic -> (read at ms, config)
        self.errors: list[str] = []
        self.merges = 0
        self.gc_runs = 0
        #: Manifest versions this housekeeper's gc and expiry steps deleted.
        self.versions_expired = 0

    def _config(self, topic: str, *, refresh: bool = True) -> TopicConfig:
        # Re-read once per gc interval: a long-running serve must see `alter` (segment.bytes,
        # segment.ms, cleanup.policy: the cleaner-offset barrier) and a re-created topic's
        # config, not the one it first read. On the ack path (poke, ``refresh=False``) a
        # config once read is used as it is: the read is a store round trip, and the jobs,
        # which plan again on a fresh one, do the re-reading.
        now = self.clock()
        hit = self._configs.get(topic)
        if hit is None or (refresh and now - hit[0] >= self.gc_interval_ms):
            hit = self._configs[topic] = (now, load_topic(self.io_storage, topic).config)
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
            self._expired_at = {}
        now = self.clock()
        self._owe_gc(tp, now)
        with self._lock:
            merging = tp in self._busy
            if merging and manifest is not None:
                self._again.add(tp)  # the running merge job plans once more when it is done
            due_gc = (tp not in self._gc_busy
                      and now - self._last_gc.get(tp, self._started_ms) >= self.gc_interval_ms)
            # Version expiry is due every `expire_every_versions` commits of the partition as
            # well, also in a process's first interval: a busy partition's writers may restart
            # more often than the interval (and then never reach their first gc).
            if manifest is not None and manifest.version < self._expired_at.get(tp, 0):
                self._expired_at[tp] = manifest.version   # the topic was made again
            due_expiry = manifest is not None and tp not in self._gc_busy and (
                manifest.version - self._expired_at.setdefault(tp, manifest.version)
                >= self.expire_every_versions)
        want_merge = not merging and manifest is not None and bool(
            merge.plan_for(manifest, self._config(topic, refresh=False), fan_in=self.fan_in,
                           min_segments=self.min_segments, first_fan_in=self.first_fan_in))
        scheduled = False
        if want_merge:
            with self._lock:
                claimed = tp not in self._busy
                if claimed:
                    self._busy.add(tp)
            if claimed:
                scheduled |= self._submit("housekeeping", self.workers, self._run_merge, tp,
                                          self._busy)
        if due_gc or due_expiry:
            with self._lock:
                claimed = tp not in self._gc_busy
                if claimed:
                    self._gc_busy.add(tp)
                    if due_gc:
                        self._last_gc[tp] = now
                    if manifest is not None:
                        self._expired_at[tp] = manifest.version
            if claimed:
                job = self._run_gc if due_gc else self._run_expiry
                scheduled |= self._submit("housekeeping-gc", self.gc_workers, job, tp,
                                          self._gc_busy)
        return scheduled

    def _stopping(self, exc: BaseException) -> bool:
        """Whether a job's failure is the process stopping: this housekeeper closed, or a
        thread pool the job needed already shut (``concurrent.futures`` refuses new work
        with a RuntimeError then, the interpreter's exit included)."""
        return self._closed or (isinstance(exc, RuntimeError)
                                and "cannot schedule new futures" in str(exc))

    def _submit(self, pool: str, workers: int, job, tp: tuple[str, int], busy: set) -> bool:
        try:
            with in_lane(None):   # the pool itself, also when a step submits the next one
                shared_pool(pool, workers).submit(_in_housekeeping_lane, job, tp)
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
                report = merge.merge_partition(self.io_storage, topic, partition,
                                         config=self._config(topic), fan_in=self.fan_in,
                                         min_segments=self.min_segments, writer=self.writer,
                                         max_runs=self.max_runs_per_job,
                                         first_fan_in=self.first_fan_in)
                self.merges += len(report.merged)
                # A capped job left work behind (a backlog): go on, one bounded job at a
                # time, rather than letting one job grow with the backlog.
                more = report.planned >= self.max_runs_per_job and bool(report.merged)
            except Exception as exc:  # noqa: BLE001 -- background work: logged, retried later
                # After close(), or when the process's pools are shut (a clean stop: the
                # interpreter exiting, a broker's pools closed), an abandoned merge loses
                # nothing (its uploads are unreferenced, gc removes them, the next writer or
                # `kafkastore merge` plans it again): a stop, not a failure, so no warning.
                if self._stopping(exc):
                    log.info("housekeeping of %s/%d stopped: %s", topic, partition, exc)
                else:
                    self.errors.append(f"{topic}/{partition}: {type(exc).__name__}: {exc}")
                    log.warning("housekeeping of %s/%d failed: %s", topic, partition, exc)
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
        self._gc_step(tp, files=True)

    def _run_expiry(self, tp: tuple[str, int]) -> None:
        """Version expiry of ``tp`` alone (due by its commit count), on the gc pool."""
        self._gc_step(tp, files=False)

    def _gc_step(self, tp: tuple[str, int], *, files: bool) -> None:
        """One bounded step of gc (``files``) or expiry alone. A step that left a backlog of
        old versions is submitted again at once, as the next step (the partition stays
        claimed, and other partitions' steps queued meanwhile run in between); the files go
        in the step that finishes the backlog."""
        topic, partition = tp
        again = False
        try:
            with contextlib.suppress(Exception):   # gc reads the config itself; this is for poke
                self._config(topic)   # re-read here, off the ack path, once per gc interval
            trusted = self._clock_trusted(tp, files)
            now = self.clock()
            gc_report = gc.collect_garbage(self.io_storage, topic, partition, now_ms=now,
                                           files=files, max_versions=self.max_versions_per_step,
                                           clock_trusted=trusted)
            self.versions_expired += len(gc_report.versions_expired.get(partition, ()))
            again = bool(gc_report.expiry_left.get(partition)) and not self._closed
            if files and not again:
                self.gc_runs += 1   # a whole gc: its last step swept the files
                self._after_gc(tp, now, bool(gc_report.deleted or gc_report.young
                                             or any(gc_report.versions_expired.values())))
        except UnknownTopicError as exc:
            # The topic (or the whole root) was deleted: nothing is owed any more.
            log.info("gc of %s/%d: %s; dropped", topic, partition, exc)
            with self._lock:
                self._quiet.pop(tp, None)
                self._idle_runs.pop(tp, None)
        except Exception as exc:  # noqa: BLE001 -- background work: logged, retried later
            if self._stopping(exc):   # a clean stop: what gc did so far stands, the rest waits
                log.info("gc of %s/%d stopped: %s", topic, partition, exc)
                return
            self.errors.append(f"{topic}/{partition}: {type(exc).__name__}: {exc}")
            log.warning("gc of %s/%d failed: %s", topic, partition, exc)
            # A failed gc counts as one that found nothing: the sweeper tries again one
            # interval and one grace later, and gives up after two (a deleted topic, a
            # removed root), instead of retrying at every sweep.
            if files:
                self._after_gc(tp, self.clock(), False)
        finally:
            job = self._run_gc if files else self._run_expiry
            if not (again and self._submit("housekeeping-gc", self.gc_workers, job, tp,
                                           self._gc_busy)):
                with self._lock:
                    self._gc_busy.discard(tp)

    def _clock_trusted(self, tp: tuple[str, int], files: bool) -> bool:
        """Whether this process's clock agrees with the store's. When it does not, gc deletes
        no file (a clock ahead would delete live ones) but still expires old versions, by the
        store's own object times (:meth:`ManifestStore.expire_step`), so a broker with a
        skewed clock never lets a busy partition's versions pile up."""
        try:
            gc.require_clock_agreement(self.io_storage)
        except ClockSkewError as exc:
            if files:   # the file sweep is skipped: an operator's problem, kept in `errors`
                self.errors.append(f"{tp[0]}/{tp[1]}: {type(exc).__name__}: {exc}")
            (log.warning if files else log.info)(
                "gc of %s/%d deletes no file: %s; old manifest versions are expired by the "
                "store's object times", tp[0], tp[1], exc)
            return False
        return True

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
        try:   # called on the ack path (poke): no re-read there
            return max(int(self._config(topic, refresh=False).file_delete_delay_ms),
                       int(ManifestStore.min_keep_ms))
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

        # SYSTEM, not the housekeeper's clock: real time on purpose, it waits for real threads
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


def _in_housekeeping_lane(job, tp: tuple[str, int]) -> None:
    """Run ``job(tp)`` in the housekeeping lane: the pools it asks for are housekeeping's."""
    with in_lane(HOUSEKEEPING):
        job(tp)


_SHARED: "weakref.WeakKeyDictionary[Storage, Housekeeper]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def housekeeper_for(storage: Storage) -> Housekeeper:
    """The process's one :class:`Housekeeper` for ``storage`` (made on first use), which
    merges generation 0 in runs of up to :data:`~kafkastore.maintenance.merge.HOUSEKEEPING_FIRST_FAN_IN`."""
    with _SHARED_LOCK:
        hk = _SHARED.get(storage)
        if hk is None:
            hk = _SHARED[storage] = Housekeeper(storage, first_fan_in=HOUSEKEEPING_FIRST_FAN_IN)
        return hk
