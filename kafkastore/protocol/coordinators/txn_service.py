"""The transaction coordinator's service: how a broker acts on a transactional id's state
(the state's store is :mod:`.txn_store`; the API handlers that call the service are in
:mod:`kafkastore.protocol.apis.txn`).

Brokers stay stateless: a transaction's state lives in ``__transaction_state``
(:class:`.txn_store.TxnStore`, Kafka's record schemas from :mod:`.txn`), re-read before every step,
and every step writes its new state before acting on it:

1. EndTxn writes PrepareCommit / PrepareAbort;
2. then the COMMIT / ABORT markers go to every partition of the transaction
   through the broker's appender (one manifest commit per partition, as any produce),
   and beside them, on commit, the offsets sent with TxnOffsetCommit are written to
   ``__consumer_offsets`` (the outcome is decided once Prepare is stored);
3. then CompleteCommit / CompleteAbort, stored lazily: the producer's next
   AddPartitions (its next state) usually supersedes it, so a transaction costs
   two ``__transaction_state`` commits, Ongoing and Prepare (see
   :meth:`TxnStore.mark_complete`).

A broker dying after 1 or 2 leaves a Prepare state: the client's retried EndTxn,
a new InitProducerId of the same id, or the timeout check of whichever broker
coordinates the id next, writes the markers again (a second marker for a
closed transaction changes nothing) and completes it.

Offsets of a transaction (TxnOffsetCommit, answered by the group's
coordinator) wait in ``_txn_offsets/<producer id>/<group>.json`` until the
transaction ends: applied on commit, dropped on abort.

This package imports only ``wire/`` of the protocol: what the service needs of the group
coordinator and of leader placement (whether this broker coordinates an id, applying a
committed transaction's offsets to its group, which broker leads a partition) is handed to
:class:`TxnService` by :func:`kafkastore.protocol.apis.txn.service`.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import signal
from dataclasses import dataclass, replace
from typing import Awaitable, Callable

from ...errors import KafkaStoreError
from ...manifest import ManifestStore
from . import txn as T
from .pending_offsets import take_pending_offsets
from .txn_store import TxnStore, same_transaction
from ..wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                                UNKNOWN_TOPIC_OR_PARTITION)

log = logging.getLogger("kafkastore.serve.txn")

#: The topic of group offsets: a transaction that took offsets lists its partition there.
OFFSETS_TOPIC = "__consumer_offsets"
#: Seconds between two checks of the transactions this broker coordinates for timeouts.
TIMEOUT_CHECK_S = 1.0
#: Every this many checks, the whole of ``__transaction_state`` is read again.
FULL_REFRESH_ROUNDS = 10
#: Seconds after its markers that a transaction's Complete state is stored, unless the
#: producer's next transaction (its AddPartitions) has written a newer state by then.
COMPLETE_DELAY_S = 2.0
#: The coordinator authority a request (or a delayed write it spawned) acts under: the
#: broker's fence epoch while its lease was valid, taken by :meth:`TxnService.ensure_authority`.
#: A context variable, so a task spawned by a handler inherits its token.
_AUTHORITY: contextvars.ContextVar = contextvars.ContextVar("txn_authority", default=None)
#: An open transaction at a partition is hanging once its last batch is this many times
#: ``transaction.max.timeout.ms`` old and its coordinator does not hold it open there.
HANGING_AFTER_MAX_TIMEOUTS = 2
#: Seconds a coordinator that fenced itself answers COORDINATOR_LOAD_IN_PROGRESS (retriable)
#: before serving again: requests read before the pause (an EndTxn its client has since given
#: up on and followed with an abort and a new transaction) are processed at once on resume,
#: and must not act; a client still waiting retries and is served from the state read again.
FENCE_QUARANTINE_S = 1.0


# -- fault injection (tests) ------------------------------------------------------------------
#: ``KAFKASTORE_FAULT=txn:<step>`` makes the broker SIGKILL itself at that coordinator step,
#: so a test can stop it at an exact point: ``after-add-partitions`` (the Ongoing state
#: landed, not answered), ``before-markers`` (Prepare* landed, no marker written),
#: ``after-markers`` (every marker and offset written, Complete* not).
FAULT_ENV = "KAFKASTORE_FAULT"


def fault_point(step: str) -> None:
    """Die here, as a SIGKILL would, if the environment asks for it (never set in production)."""
    if os.environ.get(FAULT_ENV) == "txn:" + step:
        log.warning("%s=txn:%s: killing this broker", FAULT_ENV, step)
        os.kill(os.getpid(), signal.SIGKILL)


# -- the service ------------------------------------------------------------------------------
class TxnService:
    """One broker's transaction coordinator: the store, one lock per transactional id, the
    timeout check."""

    def __init__(self, broker, *, owns: Callable[[str], bool],
                 apply_offsets: Callable[[list], Awaitable[None]],
                 leader_of: Callable[[str, int, list], int]):
        """``owns(tid)``: whether this broker coordinates ``tid`` now; ``apply_offsets(
        [(group, {(topic, partition): (offset, leader epoch, metadata)})])``: write a
        committed transaction's offsets to their groups; ``leader_of(topic, partition, live
        brokers)``: the node that leads a partition (the hanging-transaction check aborts only
        at the partitions this broker leads)."""
        self.broker = broker
        self._owns = owns
        self._apply_offsets = apply_offsets
        self._leader_of = leader_of
        self.store = TxnStore(broker.storage, broker_id=max(broker.node_id, 0),
                              clock=broker.clock)
        self.max_timeout_ms = getattr(broker.options, "transaction_max_timeout_ms", T.DEFAULT_MAX_TIMEOUT_MS)
        self._locks: dict[str, asyncio.Lock] = {}
        # The broker's fence epoch when this coordinator last dropped its state for a fence.
        self._fence_seen = getattr(broker.brokers, "fence_epoch", 0)
        self._quarantine_until = 0.0   # monotonic s (see FENCE_QUARANTINE_S)
        #: Hanging transactions this broker aborted at partitions (metrics, tests).
        self.hanging_aborted = 0
        self._hanging_due = 0.0
        broker.services.spawn(self._timeout_loop())

    def owns(self, tid: str) -> bool:
        """Whether this broker coordinates ``tid`` (the live brokers' rendezvous hash)."""
        return self._owns(tid)

    def lock(self, tid: str) -> asyncio.Lock:
        if len(self._locks) > 10_000:
            self._locks = {k: v for k, v in self._locks.items() if v.locked()}
        return self._locks.setdefault(tid, asyncio.Lock())

    async def write(self, meta: T.TxnMetadata, based_on: "T.TxnMetadata | None") -> None:
        """Store ``meta``, conditional on the id's state still being ``based_on`` and on this
        coordinator still holding the authority the calling request acts under."""
        token = self.held()
        await self.broker.run(self.store.put, meta, based_on, lambda: self.still_holds(token))

    def authority(self) -> int | None:
        """This broker's coordinator authority now: its fence epoch while its lease is valid
        (:meth:`~kafkastore.protocol.membership.BrokerMembership.authority`), else None."""
        registry = self.broker.brokers
        current = getattr(registry, "authority", None)
        if current is not None:
            return current()
        return 0 if registry.authority_valid() else None

    def held(self) -> int | None:
        """The authority the running request acts under (taken when it started), else now's."""
        token = _AUTHORITY.get()
        return token if token is not None else self.authority()

    def still_holds(self, token: int | None) -> bool:
        """Whether ``token`` is still this broker's authority: no fence since it was taken
        and the lease still valid. Cheap and thread-safe (asked in the I/O pool just before
        a conditional write)."""
        return token is not None and self.authority() == token

    async def authority_error(self) -> int:
        """:meth:`ensure_authority` as the error code a coordinator request answers: 0, or
        COORDINATOR_LOAD_IN_PROGRESS right after a fence, or COORDINATOR_NOT_AVAILABLE."""
        if not await self.ensure_authority():
            return COORDINATOR_NOT_AVAILABLE
        if self.broker.clock.monotonic_s() < self._quarantine_until:
            return COORDINATOR_LOAD_IN_PROGRESS
        return 0

    async def ensure_authority(self) -> bool:
        """Take the authority the calling request acts under. A broker that fenced itself
        since the last look (a pause past the liveness window, measured on its monotonic
        clock against its last successful heartbeat; its node id taken over) drops every
        cached state and unstored completion first, and renews its registration: another
        broker may have coordinated its ids meanwhile, so it reads them again before
        serving. False when renewal fails (the caller answers COORDINATOR_NOT_AVAILABLE)."""
        registry = self.broker.brokers
        lapsed = getattr(registry, "fence_if_lapsed", None)
        if lapsed is not None:
            lapsed()
        epoch = getattr(registry, "fence_epoch", 0)
        if epoch != self._fence_seen or not registry.authority_valid():
            log.warning("broker %d lost its authority (paused past the liveness window, or "
                        "fenced): dropping its cached transaction states", self.broker.node_id)
            self._fence_seen = epoch
            self._quarantine_until = self.broker.clock.monotonic_s() + FENCE_QUARANTINE_S
            await self.broker.run(self.store.forget)
        if not registry.authority_valid():
            try:
                await self.broker.run(registry.heartbeat)
            except Exception:  # noqa: BLE001 - answered as unavailable; the client retries
                log.warning("cannot renew broker %d's registration", self.broker.node_id, exc_info=True)
                return False
            if getattr(registry, "fence_epoch", 0) != self._fence_seen:  # fenced while renewing
                self._fence_seen = registry.fence_epoch
                self._quarantine_until = self.broker.clock.monotonic_s() + FENCE_QUARANTINE_S
                await self.broker.run(self.store.forget)
        token = self.authority()
        _AUTHORITY.set(token)
        return token is not None

    async def finish(self, meta: T.TxnMetadata) -> int:
        """Markers, offsets and the Complete state of a prepared transaction; an error code."""
        commit = meta.state is T.TxnState.PREPARE_COMMIT
        token = self.held()
        if not self.still_holds(token):
            # Fenced since the Prepare state was read: another coordinator may own the id;
            # markers written now could end a newer transaction of the same producer epoch.
            return COORDINATOR_NOT_AVAILABLE
        now = self.store.clock.wall_ms()

        def guard(state) -> bool:   # asked at each attempt of each partition's commit
            return self.still_holds(token) and ends_this_transaction(state, meta)

        futs = [self.broker.appender.submit_marker(t, p, meta.producer_id, meta.producer_epoch,
                                                   commit, now, guard=guard)
                for t, p in sorted(meta.partitions) if t != OFFSETS_TOPIC]
        # The transaction's offsets are settled beside its markers, not after them (as Kafka
        # writes the __consumer_offsets partition's marker beside the others): its outcome is
        # decided once its Prepare state is stored, so they are applied (on commit) and their
        # documents deleted while the markers commit. Their documents hold the group's offsets
        # unstable until then, and a finish that runs again finds none left to apply twice.
        offsets = None
        if any(t == OFFSETS_TOPIC for t, _ in meta.partitions):  # AddOffsetsToTxn was called
            offsets = asyncio.ensure_future(self._settle_offsets(meta, commit, token))
        failed = False
        for fut in futs:
            outcome = await fut
            # An older epoch than the partition's: a newer instance already fenced it there.
            # A partition deleted since it joined has nothing left to close (as Kafka drops its
            # markers); retrying could never finish the transaction.
            if outcome.error not in (0, T.INVALID_PRODUCER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION):
                log.warning("marker of %s failed: %s", meta.transactional_id, outcome.message)
                failed = True
        try:
            if offsets is not None:
                await offsets
            if failed or not self.still_holds(token):
                return COORDINATOR_NOT_AVAILABLE   # whoever finishes it next writes the rest
            fault_point("after-markers")
            self.store.mark_complete(replace(meta, last_update_ms=self.store.clock.wall_ms()))
            self._store_complete_later(meta.transactional_id)
        except KafkaStoreError:
            log.warning("could not complete transaction %s", meta.transactional_id, exc_info=True)
            return COORDINATOR_NOT_AVAILABLE
        return T.NONE

    async def _settle_offsets(self, meta: T.TxnMetadata, commit: bool, token: int | None) -> None:
        """Apply a prepared transaction's pending offsets to their groups (on commit) and
        delete their documents, under the authority ``token`` its markers are written under:
        after a fence nothing is applied or deleted, and whoever finishes it next does it.
        A failure to delete leaves documents a later finish applies again (the same offsets)."""
        pending = await self.broker.run(take_pending_offsets, self.broker.storage,
                                        meta.producer_id, meta.producer_epoch, meta.txn_start_ms)
        if not pending or not self.still_holds(token):
            return
        # Only while the id's stored state is still this Prepare state: a finish that runs
        # late (the id moved on and a later transaction committed its own offsets) must not
        # put this one's back over them. Its markers no longer stand in front of this check.
        stored = await self.broker.run(self.store.get, meta.transactional_id)
        if not same_transaction(stored, meta):
            return
        if commit:
            await self._apply_offsets([(g, o) for _, g, o in pending if o])
        if self.still_holds(token):
            await self.broker.run(self.broker.storage.delete, [path for path, _, _ in pending])

    def _store_complete_later(self, tid: str) -> None:
        """Store the Complete state unless the id's next step (written sooner) supersedes it."""
        async def later():
            await asyncio.sleep(COMPLETE_DELAY_S)
            try:
                async with self.lock(tid):
                    done = self.store.unstored_complete(tid)
                    # Only under the authority the markers were written under (inherited from
                    # the request that spawned this task): a fence in between drops it.
                    if done is not None and self.still_holds(self.held()):
                        # Conditional on the Prepare state it completes: if another
                        # coordinator moved the id on meanwhile, this is not written.
                        await self.write(done, done)
            except Exception:  # noqa: BLE001 - whoever reads the Prepare state finishes it again
                log.warning("could not store the completion of transaction %s", tid, exc_info=True)

        self.broker.services.spawn(later())

    async def abort_in_flight(self, cur: T.TxnMetadata) -> tuple[int, T.TxnMetadata]:
        """Finish a prepared transaction, or abort an Ongoing one with the epoch bumped."""
        if cur.state is T.TxnState.ONGOING:
            fenced = T.fence(cur, self.store.clock.wall_ms()).meta
            await self.write(fenced, cur)
            cur = fenced
        if cur.state.prepared:
            err = await self.finish(cur)
            if err:
                return err, cur
            cur = await self.broker.run(self.store.get, cur.transactional_id)
        return T.NONE, cur

    async def _check_hanging(self) -> None:
        """Abort the hanging transactions at the partitions this broker leads, every
        ``transaction.max.timeout.ms`` / 2 (1 to 60 s).

        A transaction is open at a partition from its producer's first transactional batch
        to a marker. The coordinator writes the marker when the transaction ends or times
        out, but only at the partitions its state lists: a batch it never knew of (a late
        batch of a transaction that ended, a fenced producer's, one left by a coordinator that
        lost its state) would hold the partition's last stable offset back for ever. So an
        open transaction whose last batch is older than :data:`HANGING_AFTER_MAX_TIMEOUTS`
        times the longest transaction timeout, and that no stored coordinator state holds
        open at that partition (Ongoing or Prepare*, at its epoch or a newer one), is ended
        with an ABORT marker of its producer id and epoch, conditional on the producer's state
        at the partition being exactly what was read (a batch appended meanwhile refuses it)."""
        now = self.broker.clock.monotonic_s()
        if now < self._hanging_due:
            return
        self._hanging_due = now + min(60.0, max(1.0, self.max_timeout_ms / 2000))
        try:
            found = await self.broker.run(self._find_hanging)
        except Exception:  # noqa: BLE001 - the next round tries again
            log.warning("hanging transaction check failed", exc_info=True)
            return
        for topic, partition, pid, seen in found:
            outcome = await self.broker.appender.submit_marker(
                topic, partition, pid, seen.epoch, False, self.store.clock.wall_ms(),
                guard=lambda st, seen=seen: st == seen)
            if outcome.error == 0:
                self.hanging_aborted += 1
                log.warning("aborted a hanging transaction of producer %d epoch %d at %s/%d "
                            "(open since offset %d; no coordinator holds it open)", pid,
                            seen.epoch, topic, partition, seen.txn_first_offset)

    def _find_hanging(self) -> list[tuple[str, int, int, object]]:
        """``(topic, partition, producer id, its state there)`` of the hanging transactions
        at the partitions this broker leads (blocking; see :meth:`_check_hanging`)."""
        older_than = HANGING_AFTER_MAX_TIMEOUTS * self.max_timeout_ms
        self.store.refresh()   # every id's state, whichever broker wrote it
        held: dict[tuple[int, tuple[str, int]], int] = {}
        for meta in self.store.cached():
            if meta.state is T.TxnState.ONGOING or meta.state.prepared:
                for tp in meta.partitions:
                    key = (meta.producer_id, tp)
                    held[key] = max(held.get(key, -1), meta.producer_epoch)
        live = self.broker.live_brokers()
        wall = self.store.clock.wall_ms()
        out = []
        for topic in self.broker.meta.topic_names():
            meta = self.broker.meta.topic(topic)
            if meta is None or topic in (T.TXN_TOPIC, OFFSETS_TOPIC):
                continue
            for p in range(meta.partitions):
                if self._leader_of(topic, p, live) != self.broker.node_id:
                    continue
                try:
                    m = ManifestStore(self.broker.storage, topic, p).latest()
                except KafkaStoreError as exc:   # deleted meanwhile, damaged: the others still
                    log.warning("hanging transaction check of %s/%d: %s", topic, p, exc)
                    continue
                for pid, st in (m.producers.items() if m is not None else ()):
                    if st.txn_first_offset is None or wall - st.last_timestamp < older_than:
                        continue
                    if held.get((pid, (topic, p)), -1) >= st.epoch:
                        continue   # its coordinator ends it (its own timeout aborts it)
                    out.append((topic, p, pid, st))
        return out

    async def _timeout_loop(self) -> None:
        rounds = 0
        while True:
            await asyncio.sleep(TIMEOUT_CHECK_S)
            rounds += 1
            if not await self.ensure_authority():
                continue   # out of touch: another broker may coordinate these ids now
            await self._check_hanging()
            if rounds % FULL_REFRESH_ROUNDS == 1:  # the first round too: after a (re)start
                # States written by other brokers (one that died, say) are learnt here too,
                # so their timed-out transactions are aborted by whichever broker owns them.
                try:
                    await self.broker.run(self.store.refresh)
                except Exception:  # noqa: BLE001 - the next round tries again
                    log.warning("could not read %s", T.TXN_TOPIC, exc_info=True)
            now = self.store.clock.wall_ms()
            for meta in self.store.cached():
                if not (meta.expired(now) or (meta.state.prepared and now - meta.last_update_ms > 10_000)):
                    continue
                try:
                    if not self.owns(meta.transactional_id):
                        continue
                    async with self.lock(meta.transactional_id):
                        cur = await self.broker.run(self.store.get, meta.transactional_id)
                        if cur is not None and (cur.expired(now) or cur.state.prepared):
                            log.info("aborting transaction %s: open longer than %d ms",
                                     cur.transactional_id, cur.timeout_ms)
                            await self.abort_in_flight(cur)
                except Exception:  # noqa: BLE001 - the next round tries again
                    log.warning("timeout check of %s failed", meta.transactional_id, exc_info=True)



# -- the produce-side check (the KIP-890 verification guard) ---------------------------------
def verify_state(cur: T.TxnMetadata | None, tp, pid: int, epoch: int) -> tuple[int, str] | None:
    """Why a transactional batch of producer ``pid`` at ``epoch`` for ``tp`` does not belong to
    the open transaction ``cur`` (``(error code, message)``), or None when it does."""
    if cur is None:
        return T.INVALID_TXN_STATE, "unknown transactional id"
    if cur.producer_id != pid:
        return T.INVALID_PRODUCER_ID_MAPPING, f"producer {pid} does not hold this transactional id"
    if epoch != cur.producer_epoch:
        return T.INVALID_PRODUCER_EPOCH, f"producer epoch {epoch}, the coordinator has {cur.producer_epoch}"
    if cur.state is not T.TxnState.ONGOING or tp not in cur.partitions:
        return T.INVALID_TXN_STATE, f"{tp[0]}/{tp[1]} was not added to the transaction"
    return None



def append_guard(store: TxnStore, tid: str, tp: tuple[str, int], pid: int, epoch: int,
                 txn_start_ms: int) -> "AppendGuard":
    """The condition a verified transactional batch must meet when its append would open a
    transaction at ``tp`` (Kafka's KIP-890 verification guard): the coordinator's stored
    state is still the transaction that was verified (Ongoing, same producer id, epoch and
    start, with ``tp``). Asked by the appender at each attempt of the partition's
    conditional commit (blocking: one read of the id's state), so a marker that ended the
    transaction first makes the next attempt see the ended state and refuse the batch: it
    would otherwise open a transaction of that epoch no coordinator knows, which the
    producer's next marker there would end, committing records the client saw aborted.
    Its ``txn_start_ms`` names the transaction; the partition keeps it with the open
    transaction (see :func:`ends_this_transaction`)."""
    return AppendGuard(store, tid, tp, pid, epoch, txn_start_ms)


@dataclass(frozen=True)
class AppendGuard:
    """:func:`append_guard`'s condition, with the transaction it was verified for."""

    store: TxnStore
    tid: str
    tp: tuple[str, int]
    pid: int
    epoch: int
    txn_start_ms: int

    def __call__(self, _partition_state) -> bool:
        try:
            cur = self.store.get(self.tid)
        except KafkaStoreError:
            return False   # unknown: refused (the client retries; nothing is torn)
        return (verify_state(cur, self.tp, self.pid, self.epoch) is None
                and cur.txn_start_ms == self.txn_start_ms)


def ends_this_transaction(state, meta: T.TxnMetadata) -> bool:
    """Whether a marker of the prepared transaction ``meta`` may be written on a partition
    whose state of the producer is ``state``: nothing open there, or the open transaction
    is ``meta``'s (the same start; unknown for a transaction opened by a writer that did not
    record it). A producer keeps its id and epoch from one transaction to the next, so a
    late marker of the previous one (a coordinator that read its Prepare state before the
    id moved on) would otherwise end the next one, committing or aborting its records at
    the partitions the two share."""
    return (state is None or state.txn_first_offset is None or state.txn_start_ms is None
            or state.txn_start_ms == meta.txn_start_ms)
