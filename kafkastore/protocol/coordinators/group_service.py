"""The group service of one broker: which broker coordinates a group, and the coordinator
with its offsets store and background tasks (the store side of the group APIs, whose
handlers are :mod:`kafkastore.protocol.apis.groups`).

Which broker coordinates a group: rendezvous hashing of the group id over the
live brokers of the listener's security protocol (:func:`coordinator_candidates`;
the highest ``crc32(group, node id)`` wins), so every broker
computes the same answer from the live brokers, and when a broker dies
only its groups move.

State: one :class:`~kafkastore.protocol.coordinators.group.GroupCoordinator`
per broker (pure, on the event loop) and one
:class:`~kafkastore.groups.offsets.OffsetsStore` (``__consumer_offsets``,
written in the I/O pool). A group is loaded from the store the first time
this broker serves it, and dropped when it moves to another broker, so a
coordinator move or a restart continues from what the topic holds. Offset
commits are answered after their manifest commit lands; group metadata is
written in the background, in order, by one writer task (LeaveGroup waits for it).

Fencing: a group is loaded under a :class:`~kafkastore.groups.offsets.GroupClaim`
and every write derived from it (offsets, metadata, deletes) is conditional on it
(refused as NOT_COORDINATOR, and the group dropped, when another coordinator wrote
the group meanwhile or this broker's authority changed). A broker whose lease
lapsed (:meth:`~kafkastore.protocol.membership.BrokerMembership.fence_if_lapsed`) drops
every loaded group and queued metadata write before it serves a group request, and
renews its registration; OffsetFetch checks the claim against the log before it
answers, so it never serves offsets older than a commit another broker acknowledged.

What an offset commit is conditional on (as Kafka's GroupCoordinator): the member,
generation and instance id of the group's current state (OffsetCommit and
TxnOffsetCommit alike; generation -1 without a member only for a group without members);
for a generation >= 0, that generation's metadata being in the log under the claim (SyncGroup
hands out a generation's assignments only then, as Kafka answers it after its append); and
the claim itself at the conditional append.
OffsetFetch answers the offsets the log holds (a transaction's offsets are written by its
coordinator without the group's claim), only from the group as loaded under the claim its
waits ended with (a group dropped meanwhile is read again, never answered as "no offset"),
answers UNSTABLE_OFFSET_COMMIT under require_stable for partitions with a commit being
written, and first seals the group under its claim (:meth:`OffsetsStore.seal`), so a
coordinator that loaded the group before can no longer append behind the answer.
"""
from __future__ import annotations

import asyncio
import logging
import zlib
from collections import Counter
from contextlib import contextmanager

from ...errors import FencedError, KafkaStoreError
from ...groups.offsets import GroupClaim, OffsetsStore
from ...groups.records import GroupMetadata
from . import group as G

log = logging.getLogger("kafkastore.serve.groups")

TICK_S = 0.1
#: Longest string (UTF-8 bytes) a group's records can hold: Kafka's int16-length strings,
#: which __consumer_offsets records use for group ids, member ids, protocols and hosts.
MAX_STRING_BYTES = 32767


def too_long(value: str | None, reserve: int = 0) -> bool:
    """Whether a client's string cannot be stored in a group's records (more than
    :data:`MAX_STRING_BYTES` bytes once ``reserve`` more are added)."""
    if value is None or len(value) * 4 + reserve <= MAX_STRING_BYTES:  # UTF-8: <= 4 bytes a char
        return False
    return len(value.encode("utf-8", "surrogatepass")) + reserve > MAX_STRING_BYTES


def invalid_group_id(group: str | None) -> bool:
    """Kafka's INVALID_GROUP_ID: empty, missing, or longer than a record can hold."""
    return not group or too_long(group)


def coordinator_node(group: str, brokers: list[tuple[int, str, int]]) -> tuple[int, str, int]:
    """The live broker that coordinates ``group`` (rendezvous hashing; same answer everywhere)."""
    key = group.encode("utf-8")
    return max(brokers, key=lambda b: (zlib.crc32(key + b"\x00" + str(b[0]).encode()), -b[0]))


def coordinates(broker, key: str) -> bool:
    """Whether ``broker`` coordinates ``key``, a group id or a transactional id (both use
    :func:`coordinator_node` over the live brokers of ``broker``'s security protocol, as
    FindCoordinator does, so the answer and the owner agree)."""
    return coordinator_node(key, coordinator_candidates(broker))[0] == broker.node_id


def coordinator_candidates(broker) -> list[tuple[int, str, int]]:
    """The brokers a coordinator is chosen among: the live ones whose listener has the security
    protocol of ``broker``'s, i.e. of the listener a client's request came in on (Kafka
    answers FindCoordinator with that listener; a client cannot use another one, and
    Metadata through it lists only these)."""
    return broker.live_brokers(same_security=True)


class GroupService:
    """The coordinator, the offsets store and the background tasks of one broker."""

    def __init__(self, broker):
        self.broker = broker
        self.registry = broker.brokers
        self.store = OffsetsStore(broker.storage, broker_id=max(broker.node_id, 0),
                                  clock=broker.clock, authority=self.registry.authority)
        self.coordinator = G.GroupCoordinator(clock=broker.clock, on_persist=self._persist)
        self._writes: asyncio.Queue = asyncio.Queue()
        self._live: tuple[int, ...] = ()
        self._claims: dict[str, GroupClaim] = {}
        #: group -> partitions with an OffsetCommit being written now (Kafka's
        #: ``pendingOffsetCommits``): OffsetFetch with require_stable answers them
        #: UNSTABLE_OFFSET_COMMIT until the write is done, so a consumer that takes a
        #: partition over never starts from the offset before a commit about to be acked.
        self.pending_commits: dict[str, Counter] = {}
        #: group -> the newest generation whose metadata is in the log under the group's
        #: current claim (an offset commit of a newer one waits for it, see
        #: :meth:`generation_written`).
        self._written: dict[str, int] = {}
        self._fence_seen = self.registry.fence_epoch
        broker.services.spawn(self._tick_loop())
        broker.services.spawn(self._writer())

    # -- ownership -----------------------------------------------------------
    def owns(self, group: str) -> bool:
        return coordinates(self.broker, group)

    def _check_moves(self) -> None:
        live = tuple(n for n, _, _ in coordinator_candidates(self.broker))
        if live != self._live:
            self._live = live
            for g in self.coordinator.loaded_groups():
                if not self.owns(g):
                    log.info("group %s moved away from broker %d", g, self.broker.node_id)
                    self.unload(g)

    def unload(self, group: str) -> None:
        """Stop coordinating ``group`` here: its pending requests get NOT_COORDINATOR and
        writes derived from its state (queued metadata included) are refused."""
        self.coordinator.unload(group)
        self.store.release(group)
        self._claims.pop(group, None)
        self._written.pop(group, None)

    def claim(self, group: str) -> GroupClaim | None:
        """The claim the loaded ``group`` is written under (None: not loaded here)."""
        return self._claims.get(group)

    def drop_if_fenced(self) -> None:
        """If this broker's lease lapsed or it fenced itself since the last look, drop every
        loaded group and claim (they were derived under an authority it may have lost):
        the next request reads them from the log again. Runs on the event loop, first thing
        in every group request and tick."""
        registry = self.registry
        registry.fence_if_lapsed()
        if registry.fence_epoch == self._fence_seen:
            return
        self._fence_seen = registry.fence_epoch
        dropped = self.coordinator.loaded_groups()
        for g in dropped:
            self.unload(g)
        self.store.release()
        self._claims.clear()
        log.warning("broker %d fenced itself: dropped %d loaded group(s); they are read again",
                    self.broker.node_id, len(dropped))

    async def _renew_authority(self) -> bool:
        """After a pause past the liveness window another broker may have coordinated this
        broker's groups and acknowledged commits: drop every loaded group (pending joins
        get NOT_COORDINATOR), then renew the registration and the live view. False when
        the renewal fails (the caller answers COORDINATOR_NOT_AVAILABLE)."""
        self.drop_if_fenced()
        registry = self.registry
        if registry.authority_valid():
            return True
        try:
            await self.broker.run(registry.heartbeat)
        except Exception:  # noqa: BLE001 - answered as unavailable; the client retries
            log.warning("cannot renew broker %d's registration", self.broker.node_id, exc_info=True)
            return False
        self.drop_if_fenced()
        self._live = ()   # the next _check_moves compares against the fresh view
        return registry.authority_valid()

    async def ensure(self, group: str) -> int:
        """NONE when this broker coordinates ``group`` (loading it if needed), else an error."""
        if invalid_group_id(group):
            return G.INVALID_GROUP_ID
        if not await self._renew_authority():
            return G.COORDINATOR_NOT_AVAILABLE
        self._check_moves()
        if not self.owns(group):
            return G.NOT_COORDINATOR
        if not self.coordinator.is_loaded(group) or group not in self._claims:
            try:
                state, claim = await self.broker.run(self.store.claim, group)
            except KafkaStoreError:
                log.warning("cannot load group %s", group, exc_info=True)
                return G.COORDINATOR_NOT_AVAILABLE
            if self.coordinator.is_loaded(group):   # loaded meanwhile: start from the log
                self.coordinator.unload(group)
            self.coordinator.load_group(state)
            self._claims[group] = claim
            self._written[group] = state.metadata.generation if state.metadata else -1
        return G.NONE

    async def ensure_current(self, group: str) -> int:
        """:meth:`ensure`, then check the group's claim against the log (one read of its
        ``__consumer_offsets`` partition): if another coordinator wrote the group meanwhile,
        drop it and load it again, so what is answered is never older than what the log
        holds (OffsetFetch). The claim is then sealed (:meth:`OffsetsStore.seal`): a
        coordinator that loaded the group earlier can no longer append a commit after
        this answer."""
        err = await self.ensure(group)
        if err:
            return err
        claim = self._claims.get(group)
        try:
            current = claim is not None and await self.broker.run(self.store.claim_current, claim)
            if not current:
                log.info("group %s was written by another coordinator: read again", group)
                self.unload(group)
                err = await self.ensure(group)
                if err:
                    return err
                claim = self._claims.get(group)
            if claim is None:
                return G.COORDINATOR_NOT_AVAILABLE
            await self.broker.run(self.store.seal, claim)
            # Offsets written without the group's claim (a transaction's, by its coordinator,
            # maybe another broker) do not move the claim: answer the log's offsets, just
            # read (in the I/O pool: the store's lock may be held by a flush).
            stored = await self.broker.run(lambda: self.store.group(group, refresh=False))
        except FencedError as exc:
            log.info("group %s: %s; read again", group, exc)
            if self._claims.get(group) is claim:
                self.unload(group)
            return G.COORDINATOR_NOT_AVAILABLE
        except KafkaStoreError:
            log.warning("cannot read group %s", group, exc_info=True)
            return G.COORDINATOR_NOT_AVAILABLE
        self.coordinator.set_offsets(group, stored.offsets)
        return G.NONE

    @contextmanager
    def committing(self, group: str, partitions):
        """Mark ``partitions`` of ``group`` as having an offset commit in flight while the
        block runs (see :attr:`pending_commits`)."""
        pending = self.pending_commits.setdefault(group, Counter())
        pending.update(partitions)
        try:
            yield
        finally:
            pending.subtract(partitions)
            for tp in [tp for tp, n in pending.items() if n <= 0]:
                del pending[tp]
            if not pending and self.pending_commits.get(group) is pending:
                del self.pending_commits[group]

    def committing_now(self, group: str) -> set:
        """Partitions of ``group`` with an offset commit in flight on this broker."""
        return set(self.pending_commits.get(group, ()))

    # -- background ----------------------------------------------------------
    def _persist(self, meta: GroupMetadata) -> None:
        # Queued with the claim it was derived under: a fence or a move in between refuses it.
        self._writes.put_nowait((meta, self._claims.get(meta.group_id)))

    async def _writer(self) -> None:
        while True:
            meta, claim = await self._writes.get()
            try:
                if claim is not None and claim.valid:
                    await self.broker.run(self.store.store_group, meta, claim)
                    if self._claims.get(meta.group_id) is claim:
                        self._written[meta.group_id] = max(
                            self._written.get(meta.group_id, -1), meta.generation)
            except FencedError as exc:
                log.warning("metadata of group %s not written: %s", meta.group_id, exc)
                if self._claims.get(meta.group_id) is claim:
                    self.unload(meta.group_id)
            except Exception:  # noqa: BLE001 - metadata is advisory; offsets are answered synchronously
                log.warning("could not persist metadata of group %s", meta.group_id, exc_info=True)
            finally:
                self._writes.task_done()

    async def generation_written(self, group: str, generation: int,
                                 claim: GroupClaim | None) -> int:
        """NONE once the metadata of ``generation`` is in the log under ``claim`` (waiting for
        the queued metadata writes if it is not yet), else the error for a SyncGroup answer or
        an offset commit of that generation: NOT_COORDINATOR if the group was dropped
        meanwhile, COORDINATOR_NOT_AVAILABLE (retriable) if the write failed.

        SyncGroup waits for it before handing out assignments (as Kafka answers it after its
        append): a generation answered but not written would be loaded, after a fence or a
        move, as the older one, and its number handed out again with other assignments. An
        offset commit of the generation checks it too, so no commit reaches the log before
        its generation: a coordinator that loads the group then would see the older
        generation and take commits from its zombies."""
        if generation < 0 or self._written.get(group, -1) >= generation:
            return G.NONE
        await self.flush()
        if claim is None or not claim.valid or self._claims.get(group) is not claim:
            return G.NOT_COORDINATOR
        return G.NONE if self._written.get(group, -1) >= generation else G.COORDINATOR_NOT_AVAILABLE

    async def flush(self) -> None:
        """Wait until the group metadata queued so far is written (LeaveGroup answers after it,
        so a consumer that closed is gone from the offline view)."""
        await self._writes.join()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.drop_if_fenced()   # before tick(): no session expiry judged across a pause
                self._check_moves()
                self.coordinator.tick()
            except Exception:  # noqa: BLE001 - keep ticking; a bug here is logged, not fatal
                log.exception("group coordinator tick failed")
