"""The store of ``__transaction_state``: where a transactional id's state lives (the
coordinator service that acts on it is :mod:`.txn_service`).

The latest record per id is its state (Kafka's record schemas from :mod:`.txn`). A write is
conditional on the state its step was planned on and on the partition's end as that step read
it (the fencing token); writes of many ids that queue behind one go together in the
partition's next commit, each checked on its own.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Callable

from ...clock import Clock, as_clock
from ...errors import CorruptRecordError, RequirementFailedError, TopicExistsError, TxnStateFencedError
from ...storage import Storage
from ...groups.offsets import partition_for_group
from ...manifest import Manifest, ManifestStore
from ...read.reader import PartitionReader
from ...topics.admin import create_topic, load_topic, topic_exists
from ...threads import shared_pool
from ...write.log_writer import LogWriter as Broker
from . import txn as T

log = logging.getLogger("kafkastore.serve.txn")


def same_transaction(stored: T.TxnMetadata | None, prepared: T.TxnMetadata) -> bool:
    """Whether ``stored`` is the Prepare state ``prepared`` of the same transaction: producer
    id, epoch, start and partitions (its last update time may differ)."""
    return (stored is not None and stored.state is prepared.state
            and replace(stored, last_update_ms=prepared.last_update_ms) == prepared)


class _TxnPartitionReader(PartitionReader):
    """A reader of one partition of ``__transaction_state`` at its latest version, without
    reading the topic's metadata first: the store knows the partition count (it read it
    once), and the topic is internal, never deleted or re-created. One store request less
    on every read of an id's state, each paid under the store's latency on S3."""

    def __init__(self, storage: Storage, partition: int):   # noqa: super() reads _topic.json
        self.storage, self.topic, self.partition = storage, T.TXN_TOPIC, partition
        self.manifest = (ManifestStore(storage, T.TXN_TOPIC, partition).latest()
                         or Manifest.empty(T.TXN_TOPIC, partition))


class TxnStore:
    """Reads and writes ``__transaction_state`` under ``storage``'s root (thread-safe, blocking).

    The latest record per transactional id is its state; reads advance a cache from the last
    offset read, so a get costs one manifest read plus the new records.
    """

    def __init__(self, storage: Storage, *, broker_id: int = 0,
                 clock: Clock | Callable[[], int] | None = None,
                 partitions: int = T.DEFAULT_TXN_PARTITIONS):
        self.storage = storage
        self.broker_id = broker_id
        # Default: the storage's clock; an old bare callable returns epoch ms.
        self.clock = as_clock(clock, "ms") if clock is not None else storage.clock
        self._want = partitions
        self._partitions: int | None = None
        # Guards the cached states (no I/O under it). Reading a partition's new records is
        # serialised per partition (_partition_lock), so a step on one id never waits
        # behind the reads of the other partitions (the periodic full refresh reads them
        # all, each several store round trips on S3).
        self._lock = threading.RLock()
        self._partition_locks: dict[int, threading.RLock] = {}
        self._generation = 0   # bumped by forget(): a read begun before it is not applied
        # Per partition: reads begun, and the number of the last one applied (shared reads).
        self._reads_begun: dict[int, int] = {}
        self._reads_done: dict[int, int] = {}
        self._next: dict[int, int] = {}
        self._state: dict[str, T.TxnMetadata] = {}
        # Transactions whose markers are all written but whose Complete state is not stored
        # yet (see mark_complete): read as complete here, stored lazily or never.
        self._complete: dict[str, T.TxnMetadata] = {}
        self._broker = None
        # Puts waiting for the next group commit, by partition, and whether one is writing.
        self._queue_cv = threading.Condition()
        self._queued: dict[int, list[_Put]] = {}
        self._writing = False

    def _topic_partitions(self, create: bool) -> int | None:
        if self._partitions is None:
            if topic_exists(self.storage, T.TXN_TOPIC):
                self._partitions = load_topic(self.storage, T.TXN_TOPIC).partitions
            elif create:
                try:
                    create_topic(self.storage, T.TXN_TOPIC, self._want, T.TXN_TOPIC_CONFIG)
                except TopicExistsError:
                    pass
                self._partitions = load_topic(self.storage, T.TXN_TOPIC).partitions
        return self._partitions

    def partition_for(self, tid: str) -> int | None:
        """The id's partition (Kafka's ``abs(hashCode) % partitions``), None before the topic exists."""
        n = self._topic_partitions(create=False)
        return None if n is None else partition_for_group(tid, n)

    def _has_read(self, p: int) -> bool:
        with self._lock:
            return p in self._next

    def _partition_lock(self, p: int) -> threading.RLock:
        with self._lock:
            return self._partition_locks.setdefault(p, threading.RLock())

    def refresh(self, partitions=None) -> None:
        """Read what was appended since the last refresh (all partitions, or ``partitions``).

        Several partitions are read side by side (each read is a few store round trips on
        S3), and a partition's read holds only that partition's lock: a coordinator step
        on an id of another partition goes on meanwhile."""
        n = self._topic_partitions(create=False)
        if n is None:
            return
        parts = list(range(n) if partitions is None else partitions)
        if len(parts) <= 1:
            for p in parts:
                self._refresh_partition(p)
            return
        pool = shared_pool("txn-state-reads", 8)
        for fut in [pool.submit(self._refresh_partition, p) for p in parts]:
            fut.result()

    def _refresh_partition(self, p: int, then: "Callable[[], object] | None" = None):
        """Read partition ``p``'s records since the last read and apply them (blocking);
        returns ``then()``, called under the cache's lock with the cache as read.

        The store is read outside the cache's lock; the records are applied only if the
        cache did not move meanwhile (a :meth:`forget`, or one of our own writes landing),
        else the read starts again from where the cache now is. Reads of one partition
        that wait for each other share: a caller that waited while another read began
        and finished after its own call takes that read's result (as new as one of its
        own), so concurrent steps on one partition cost one read, not one each."""
        with self._lock:
            called_at = self._reads_begun.get(p, 0)
        with self._partition_lock(p):
            while True:
                with self._lock:
                    if self._reads_done.get(p, 0) > called_at:
                        return then() if then is not None else None
                    generation, known = self._generation, self._next.get(p, 0)
                    self._reads_begun[p] = ticket = self._reads_begun.get(p, 0) + 1
                reader = _TxnPartitionReader(self.storage, p)
                start = max(known, reader.log_start_offset)
                records = []
                if start < reader.high_watermark:
                    table = reader.read(start, include_headers=False)
                    records = list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                                       table.column("offset").to_pylist()))
                with self._lock:
                    if self._generation == generation and self._next.get(p, 0) == known:
                        self._apply(p, records)
                        self._next[p] = max(start, reader.high_watermark)
                        self._reads_done[p] = ticket
                        return then() if then is not None else None

    def _apply(self, p: int, records) -> None:
        """Apply ``[(key, value, offset)]`` read from partition ``p``, in log order (under the lock)."""
        for k, v, o in records:
            try:
                tid = T.decode_key(k) if k is not None else None
                if tid is None:
                    continue
                if v is None:
                    self._state.pop(tid, None)
                else:
                    self._state[tid] = T.decode_value(tid, v)
            except CorruptRecordError as exc:
                log.warning("%s/%d offset %d: skipped a record: %s", T.TXN_TOPIC, p, o, exc)

    def get(self, tid: str) -> T.TxnMetadata | None:
        """The state of ``tid`` (None if never written): the stored one, or the completed one
        of :meth:`mark_complete` while the stored one is still its Prepare state."""
        p = self.partition_for(tid)
        if p is not None:
            return self._refresh_partition(p, lambda: self._overlay(tid))
        with self._lock:
            return self._overlay(tid)

    def peek(self, tid: str) -> T.TxnMetadata | None:
        """The state of ``tid`` as last read (no I/O; may be stale)."""
        with self._lock:
            return self._overlay(tid)

    def cached(self) -> list[T.TxnMetadata]:
        """Every state read so far (no I/O)."""
        with self._lock:
            return [self._overlay(tid) for tid in list(self._state)]

    def mark_complete(self, meta: T.TxnMetadata) -> None:
        """Every marker of the prepared transaction ``meta`` is written: read it as complete
        from now on without storing that yet. The next state this broker writes for the id
        (the next AddPartitions, mostly) supersedes it, so a transaction costs two commits to
        ``__transaction_state`` (Ongoing, Prepare) instead of three; a broker that dies first
        leaves the Prepare state, and whoever finishes it writes the markers again, which
        changes nothing (Kafka's coordinator also completes after the markers, asynchronously)."""
        with self._lock:
            self._complete[meta.transactional_id] = (meta, T.complete(meta, meta.last_update_ms))

    def unstored_complete(self, tid: str) -> T.TxnMetadata | None:
        """The complete state :meth:`mark_complete` holds for ``tid`` and nothing stored since."""
        with self._lock:
            entry = self._complete.get(tid)
            done = entry[1] if entry is not None else None
            return done if done is not None and self._overlay(tid) is done else None

    def _overlay(self, tid: str) -> T.TxnMetadata | None:
        cur = self._state.get(tid)
        entry = self._complete.get(tid)
        if entry is None:
            return cur
        prepared, done = entry
        if same_transaction(cur, prepared):
            return done
        del self._complete[tid]  # the stored state moved on (another broker, a later step)
        return cur

    def forget(self) -> None:
        """Drop every cached state and unstored completion (after this broker lost its
        authority, e.g. a pause past the liveness window): the next read starts over."""
        with self._lock:
            self._state.clear()
            self._complete.clear()
            self._next.clear()
            self._reads_done.clear()
            self._generation += 1

    def _applies(self, stored: T.TxnMetadata | None, based_on: T.TxnMetadata | None) -> bool:
        """Whether ``stored`` (the id's latest record) is the state a step was planned on:
        the same state, or the very Prepare state whose completion :meth:`mark_complete`
        holds (the same transaction: a producer keeps its id and epoch across transactions,
        so those alone would let an old completion stand for a later Prepare)."""
        if stored == based_on:
            return True
        entry = self._complete.get(based_on.transactional_id) if based_on is not None else None
        return (entry is not None and based_on.state.complete and entry[1] == based_on
                and same_transaction(stored, entry[0]))

    def put(self, meta: T.TxnMetadata, based_on: "T.TxnMetadata | None | object" = ...,
            guard: "Callable[[], bool] | None" = None) -> None:
        """Write ``meta`` (one manifest commit); visible to every broker once this returns.

        ``based_on`` is the state the step was planned on (what :meth:`get` returned). The
        write is conditional on it: it lands only while the id's latest record is still that
        state and nothing was appended to its partition since it was read (the partition's
        high watermark is the fencing token, checked by the manifest commit itself), else
        :class:`TxnStateFencedError` and nothing is written. Leaving it out writes
        unconditionally (tests and tools that seed state). ``guard`` is the writer's own
        authority (:meth:`TxnService.still_holds`), asked again just before each attempt:
        a coordinator that fenced itself since it read the state writes nothing.

        Puts of other ids that arrive while one is being written wait and go together in
        the next commit of their partition (many producers' steps share one fsync'd commit
        of ``__transaction_state``). Each keeps its own conditions: its state and guard are
        checked at that commit's attempt, one that fails them is refused alone, and the
        commit itself is conditional on the partition's high watermark."""
        with self._lock:
            n = self._topic_partitions(create=True)
        mine = _Put(meta, based_on, guard)
        with self._queue_cv:
            self._queued.setdefault(partition_for_group(meta.transactional_id, n), []).append(mine)
            while not mine.done and self._writing:
                self._queue_cv.wait()
            lead = not mine.done
            if lead:   # nobody is writing: this thread writes everything queued
                self._writing, queued, self._queued = True, self._queued, {}
        if lead:
            try:
                for p, puts in queued.items():
                    for group in _one_per_id(puts):
                        self._write_group(p, group)
            finally:
                with self._queue_cv:
                    self._writing = False
                    self._queue_cv.notify_all()
        if mine.error is not None:
            raise mine.error

    def _write_group(self, p: int, puts: "list[_Put]") -> None:
        """Write ``puts`` (distinct ids of partition ``p``) in one conditional commit, each
        checked as :meth:`put` says; sets each one's ``done`` and ``error``."""
        pending = list(puts)
        try:
            self._attempt_group(p, pending)
        except BaseException as exc:  # noqa: BLE001 - each waiting put raises it: none is lost
            for x in puts:
                if x.error is None and not x.landed:
                    x.error = exc
        finally:
            for x in puts:
                x.done = True

    def _attempt_group(self, p: int, pending: "list[_Put]") -> None:
        """The attempts of :meth:`_write_group` (raises what the store raises)."""
        conditional = any(x.based_on is not ... for x in pending)
        for attempt in range(20):
            # The first attempt checks against the cache as the step's own read left it (a
            # step reads the id just before it writes): the commit is conditional on the
            # partition's end as that read saw it, so anything landed since refuses it and
            # the next attempt reads again. Re-reading first cost two store round trips more
            # per state write, each paid under S3's latency.
            if conditional and (attempt > 0 or not self._has_read(p)):
                self.refresh([p])
            with self._lock:
                live = []
                for x in pending:
                    tid = x.meta.transactional_id
                    if x.based_on is not ... and not self._applies(self._state.get(tid), x.based_on):
                        self._complete.pop(tid, None)   # the stored state is newer: no overlay
                        x.error = TxnStateFencedError(
                            f"transaction state of {tid!r} changed since it was read (another "
                            f"coordinator wrote it): not written")
                    elif x.guard is not None and not x.guard():
                        x.error = TxnStateFencedError(
                            f"transaction state of {tid!r}: this coordinator fenced itself "
                            f"since it read it; not written")
                    else:
                        live.append(x)
                # The fencing token: the partition's end as this attempt's checks read it.
                expect = {(T.TXN_TOPIC, p): self._next.get(p, 0)} if conditional else None
            pending = live
            if not pending:
                return
            if self._broker is None:
                self._broker = Broker(self.storage, broker_id=self.broker_id,
                                      clock=self.clock.wall_ms)
                self._broker.allow_internal = True  # the owner of __transaction_state
            self._broker.expect_high_watermark = expect
            try:
                for x in pending:
                    self._broker.send(T.TXN_TOPIC, T.encode_value(x.meta),
                                      key=T.encode_key(x.meta.transactional_id), partition=p)
                results = self._broker.flush()
            except RequirementFailedError:
                self._broker = None  # another record landed first: read it, check again
                continue
            except BaseException as exc:
                self._broker = None  # whatever it buffered is retried by nobody: start clean
                for x in pending:
                    x.error = exc
                return
            # Landed: the latest states. When nothing was appended since the last read,
            # the next read starts after them (no re-read of our own records); else a
            # later refresh reads them again, in log order.
            with self._lock:
                for x in pending:
                    x.landed = True
                    self._state[x.meta.transactional_id] = x.meta
                    self._complete.pop(x.meta.transactional_id, None)
                if len(results) == 1 and p in self._next and results[0].base_offset == self._next[p]:
                    self._next[p] = results[0].next_offset
            return
        for x in pending:
            x.error = TxnStateFencedError(
                f"transaction state of {x.meta.transactional_id!r}: the partition kept "
                f"moving; not written")


class _Put:
    """One :meth:`TxnStore.put` waiting for, or written by, a group commit."""

    __slots__ = ("meta", "based_on", "guard", "done", "landed", "error")

    def __init__(self, meta: T.TxnMetadata, based_on, guard):
        self.meta, self.based_on, self.guard = meta, based_on, guard
        self.done = self.landed = False
        self.error: BaseException | None = None


def _one_per_id(puts: "list[_Put]") -> "list[list[_Put]]":
    """``puts`` in groups that hold each id once, in arrival order (a second put of an id
    is checked against the first one's result, in the next commit)."""
    groups: list[list[_Put]] = []
    for x in puts:
        tid = x.meta.transactional_id
        for group in groups:
            if all(y.meta.transactional_id != tid for y in group):
                group.append(x)
                break
        else:
            groups.append([x])
    return groups
