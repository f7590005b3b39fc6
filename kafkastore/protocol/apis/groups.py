"""The consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups.

Which broker coordinates a group: rendezvous hashing of the group id over the
live brokers of the listener's security protocol (:func:`coordinator_candidates`;
the highest ``crc32(group, node id)`` wins), so every broker
computes the same answer from the broker registry, and when a broker dies
only its groups move. A request for a group this broker does not coordinate
gets NOT_COORDINATOR and the client asks FindCoordinator again.

State: one :class:`~kafkastore.protocol.coordinators.group.GroupCoordinator`
per broker (pure, on the event loop) and one
:class:`~kafkastore.group_offsets.OffsetsStore` (``__consumer_offsets``,
written in the I/O pool). A group is loaded from the store the first time
this broker serves it, and dropped when it moves to another broker, so a
coordinator move or a restart continues from what the topic holds. Offset
commits are answered after their manifest commit lands; group metadata is
written in the background, in order, by one writer task (LeaveGroup waits for it).

Fencing: a group is loaded under a :class:`~kafkastore.group_offsets.GroupClaim`
and every write derived from it (offsets, metadata, deletes) is conditional on it
(refused as NOT_COORDINATOR, and the group dropped, when another coordinator wrote
the group meanwhile or this broker's authority changed). A broker whose lease
lapsed (:meth:`~kafkastore.protocol.membership.BrokerRegistry.fence_if_lapsed`) drops
every loaded group and queued metadata write before it serves a group request, and
renews its registration; OffsetFetch checks the claim against the log before it
answers, so it never serves offsets older than a commit another broker acknowledged.

What an offset commit is conditional on (as Kafka's GroupCoordinator): the member,
generation and instance id of the group's current state (OffsetCommit and
TxnOffsetCommit alike; generation -1 without a member only for a group without members);
for a generation >= 0, that generation's metadata being in the log under the claim (SyncGroup
is answered before it is written); and the claim itself at the conditional append.
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

from ...errors import KafkaStoreError
from ...errors import FencedError
from ...groups.offsets import GroupClaim, GroupMetadata, OffsetAndMetadata, OffsetsStore
from ...cluster.acls import Operation as Op, ResourceType
from .. import authorizer as authz
from ..coordinators import group as G
from ..wire.api_keys import (DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT,
                             JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, OFFSET_COMMIT, OFFSET_DELETE,
                             OFFSET_FETCH, SYNC_GROUP)
from ..wire.error_codes import INVALID_REQUEST, KAFKA_STORAGE_ERROR, UNSTABLE_OFFSET_COMMIT
from ..coordinators.pending_offsets import unstable_partitions
from ..wire.codec import make
from ..registry import Registry, RequestContext

log = logging.getLogger("kafkastore.serve.groups")

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1
COORDINATOR_KEY_SHARE = 2  # KIP-932, FindCoordinator v6+
TICK_S = 0.1
#: Longest string (UTF-8 bytes) a group's records can hold: Kafka's int16-length strings,
#: which __consumer_offsets records use for group ids, member ids, protocols and hosts.
MAX_STRING_BYTES = 32767
_MEMBER_ID_SUFFIX = 37  # "-" + a UUID, appended to the client id to make a member id


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
        the queued metadata writes if it is not yet), else the error for an offset commit of
        that generation: NOT_COORDINATOR if the group was dropped meanwhile,
        COORDINATOR_NOT_AVAILABLE (retriable) if the write failed.

        SyncGroup is answered before its generation's metadata is written (a client that
        gives up on a late answer never rejoins), so a commit of the new generation could
        otherwise reach the log first: a coordinator that loads the group then would see the
        older generation and take commits from its zombies."""
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


def service(broker) -> GroupService:
    """The broker's group service (created on first use, on the event loop)."""
    services = broker.services
    if services.group_service is None:
        services.group_service = GroupService(broker)
    return services.group_service


def _future():
    fut = asyncio.get_running_loop().create_future()

    def respond(result):
        if not fut.done():
            fut.set_result(result)
    return fut, respond


# -- FindCoordinator ---------------------------------------------------------------
async def handle_find_coordinator(ctx: RequestContext, request):
    mod = ctx.response_module
    brokers = coordinator_candidates(ctx.broker)
    key_type = getattr(request, "key_type", COORDINATOR_KEY_GROUP)
    keys = list(getattr(request, "coordinator_keys", None) or ()) if ctx.api_version >= 4 else [request.key]

    def answer(key: str):
        if key_type == COORDINATOR_KEY_TRANSACTION:  # same hash; api_txn serves the id
            if invalid_group_id(key):
                return INVALID_REQUEST, "bad transactional id", (-1, "", -1)
            if authz.txn_error(ctx, Op.DESCRIBE, key):
                return authz.E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, (-1, "", -1)
            return G.NONE, None, coordinator_node(key, brokers)
        if key_type == COORDINATOR_KEY_SHARE:  # as Kafka 3.9's KafkaApis.getCoordinator
            if ctx.api_version < 6:
                return INVALID_REQUEST, "share coordinator keys need FindCoordinator v6", (-1, "", -1)
            if authz.cluster_error(ctx, Op.CLUSTER_ACTION):  # brokers ask for share coordinators
                return authz.E.CLUSTER_AUTHORIZATION_FAILED, None, (-1, "", -1)
            # 3.9 serves the key type but has no share coordinator (nor do we): no node, ever.
            return G.COORDINATOR_NOT_AVAILABLE, None, (-1, "", -1)
        if key_type != COORDINATOR_KEY_GROUP:
            return INVALID_REQUEST, f"unknown coordinator key type {key_type}", (-1, "", -1)
        if invalid_group_id(key):
            return G.INVALID_GROUP_ID, ("empty group id" if not key else
                                        f"group id longer than {MAX_STRING_BYTES} bytes"), (-1, "", -1)
        if authz.group_error(ctx, Op.DESCRIBE, key):
            return authz.E.GROUP_AUTHORIZATION_FAILED, None, (-1, "", -1)
        return G.NONE, None, coordinator_node(key, brokers)

    if ctx.api_version >= 4:
        out = []
        for key in keys:
            err, msg, (n, h, p) = answer(key)
            out.append(make(mod, "Coordinator", key=key, node_id=n, host=h, port=p,
                            error_code=err, error_message=msg))
        return make(ctx.response_class, coordinators=tuple(out))
    err, msg, (n, h, p) = answer(keys[0])
    return make(ctx.response_class, error_code=err, error_message=msg, node_id=n, host=h, port=p)


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------
def _join_response(ctx, r: G.JoinResult):
    mod = ctx.response_module
    members = tuple(make(mod, "JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=md)
                    for m, i, md in r.members)
    return make(ctx.response_class, error_code=r.error, generation_id=r.generation,
                protocol_type=r.protocol_type, protocol_name=r.protocol_name or ("" if ctx.api_version < 7 else None),
                leader=r.leader, skip_assignment=False, member_id=r.member_id, members=members)


async def handle_join_group(ctx: RequestContext, request):
    svc = service(ctx.broker)
    err = authz.group_error(ctx, Op.READ, request.group_id) or await svc.ensure(request.group_id)
    if err:
        return _join_response(ctx, G.JoinResult(err, request.member_id))
    if (any(too_long(x) for x in (request.member_id, getattr(request, "group_instance_id", None),
                                  request.protocol_type))
            or any(too_long(p.name) for p in request.protocols)
            or too_long(ctx.client_id, _MEMBER_ID_SUFFIX)):
        # Strings a group record must hold: refused at once, never a failed write later.
        return _join_response(ctx, G.JoinResult(INVALID_REQUEST, ""))
    fut, respond = _future()
    host = ctx.connection.peer if ctx.connection is not None and hasattr(ctx.connection, "peer") else ""
    svc.coordinator.join_group(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.protocol_type, [(p.name, p.metadata) for p in request.protocols],
        _ms(request.session_timeout), _ms(getattr(request, "rebalance_timeout", -1)), respond,
        client_id=ctx.client_id or "", client_host=f"/{_host(host)}",
        require_known_member_id=ctx.api_version >= 4)
    return _join_response(ctx, await fut)


async def handle_sync_group(ctx: RequestContext, request):
    svc = service(ctx.broker)
    err = authz.group_error(ctx, Op.READ, request.group_id) or await svc.ensure(request.group_id)
    if err:
        return make(ctx.response_class, error_code=err, protocol_type=None, protocol_name=None,
                    assignment=b"")
    fut, respond = _future()
    svc.coordinator.sync_group(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None),
        {a.member_id: a.assignment for a in request.assignments}, respond,
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None))
    # Answered before the metadata write lands (unlike Kafka): kafka-python 3.0 drops a
    # SyncGroup answer that arrives after its poll() timed out, and then never rejoins.
    r = await fut
    return make(ctx.response_class, error_code=r.error, protocol_type=r.protocol_type,
                protocol_name=r.protocol_name, assignment=r.assignment)


async def handle_heartbeat(ctx: RequestContext, request):
    svc = service(ctx.broker)
    err = authz.group_error(ctx, Op.READ, request.group_id) or await svc.ensure(request.group_id)
    if not err:
        err = svc.coordinator.heartbeat(request.group_id, request.generation_id, request.member_id,
                                        getattr(request, "group_instance_id", None))
    return make(ctx.response_class, error_code=err)


async def handle_leave_group(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    err = authz.group_error(ctx, Op.READ, request.group_id) or await svc.ensure(request.group_id)
    if err:
        per = [err] * len(members)
    else:
        err, per = svc.coordinator.leave_group(request.group_id, members)
        await svc.flush()
    if ctx.api_version >= 3:
        return make(ctx.response_class, error_code=err, members=tuple(
            make(mod, "MemberResponse", member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(members, per)))
    return make(ctx.response_class, error_code=err or (per[0] if per else G.NONE))


# -- offsets -------------------------------------------------------------------------
async def handle_offset_commit(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    group = request.group_id
    err = authz.group_error(ctx, Op.READ, group) or await svc.ensure(group)
    claim = svc.claim(group)   # the commit is written only if it still holds then
    generation = request.generation_id_or_member_epoch
    instance = getattr(request, "group_instance_id", None)
    if not err:
        err = svc.coordinator.validate_commit(group, generation, request.member_id, instance)
    if not err and generation >= 0:
        err = await svc.generation_written(group, generation, claim)
        if not err:   # the group may have moved on while the metadata was written
            err = svc.coordinator.validate_commit(group, generation, request.member_id, instance)
    now = svc.coordinator.clock.wall_ms()
    codes: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in request.topics:
        if not err and authz.topic_error(ctx, Op.READ, t.name):
            codes.update(((t.name, p.partition_index), authz.E.TOPIC_AUTHORIZATION_FAILED)
                         for p in t.partitions)
            continue
        known = err or await ctx.run(ctx.broker.meta.topic, t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if err:
                codes[tp] = err
            elif known is None or not 0 <= p.partition_index < known.partitions:
                codes[tp] = G.UNKNOWN_TOPIC_OR_PARTITION
            elif svc.coordinator.metadata_error(p.committed_metadata):
                codes[tp] = G.OFFSET_METADATA_TOO_LARGE
            else:
                codes[tp] = G.NONE
                offsets[tp] = OffsetAndMetadata(p.committed_offset,
                                                getattr(p, "committed_leader_epoch", -1),
                                                p.committed_metadata or "", now)
    if offsets:
        with svc.committing(group, list(offsets)):
            err = await _write(ctx, "offset commit", group, claim, svc.store.commit_offsets, offsets)
            if not err:
                svc.coordinator.record_commit(group, offsets)
        if err:
            codes.update(dict.fromkeys(offsets, err))  # retriable: the client commits again
    return make(ctx.response_class, topics=tuple(
        make(mod, "OffsetCommitResponseTopic", name=t.name, partitions=tuple(
            make(mod, "OffsetCommitResponsePartition", partition_index=p.partition_index,
                 error_code=codes[(t.name, p.partition_index)]) for p in t.partitions))
        for t in request.topics))


async def handle_offset_fetch(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    group = request.group_id
    requested = None if request.topics is None else [
        (t.name, p) for t in request.topics for p in t.partition_indexes]
    err, unstable = await _read_for_fetch(ctx, svc, group,
                                          getattr(request, "require_stable", False))
    # Read after the last wait (a commit acknowledged meanwhile is answered), from the group
    # as loaded under the claim the wait ended with.
    found = {} if err else svc.coordinator.fetch_offsets(group, requested)
    if err and requested is not None and ctx.api_version < 2:
        found = {tp: None for tp in requested}   # v2+: the top-level error alone, as Kafka
    hidden = {tp for tp in found if authz.topic_error(ctx, Op.DESCRIBE, tp[0])}
    if hidden and requested is None:  # Kafka leaves out the topics the principal may not see
        found = {tp: om for tp, om in found.items() if tp not in hidden}
    # A partition whose topic the principal may not describe tells nothing: no offset, no
    # metadata (Kafka answers -1, "" and TOPIC_AUTHORIZATION_FAILED).
    found = {tp: (None if tp in hidden else om) for tp, om in found.items()}
    if unstable is None:   # the pending transactions could not be read: none is answered
        unstable = set(found)
    by_topic: dict[str, list] = {}
    for (topic, p), om in sorted(found.items()):
        by_topic.setdefault(topic, []).append(make(
            mod, "OffsetFetchResponsePartition", partition_index=p,
            committed_offset=-1 if om is None or (topic, p) in unstable else om.offset,
            committed_leader_epoch=-1 if om is None else om.leader_epoch,
            metadata="" if om is None else om.metadata,
            error_code=authz.E.TOPIC_AUTHORIZATION_FAILED if (topic, p) in hidden
            else UNSTABLE_OFFSET_COMMIT if (topic, p) in unstable
            else err if ctx.api_version < 2 else G.NONE))
    topics = tuple(make(mod, "OffsetFetchResponseTopic", name=t, partitions=tuple(ps))
                   for t, ps in by_topic.items())
    return make(ctx.response_class, topics=topics, error_code=err)


async def _read_for_fetch(ctx: RequestContext, svc: GroupService, group: str,
                          require_stable: bool) -> tuple[int, set | None]:
    """What OffsetFetch needs before it answers: the group loaded and checked against the
    log, and (``require_stable``) the partitions whose offsets are not stable yet (None when
    they cannot be read). ``(error, unstable)``.

    The group must still be loaded under the same claim once every wait is over: a fence or
    a coordinator move drops the loaded groups from the event loop while a request waits for
    the store, and a group no longer loaded holds no offsets, which would be answered -1
    without an error (the consumer would start over from auto.offset.reset). It is read
    again then; COORDINATOR_NOT_AVAILABLE (retriable) if it keeps being dropped."""
    for _ in range(3):
        err = authz.group_error(ctx, Op.DESCRIBE, group)
        if err:
            return err, set()
        unstable: set | None = set()
        if require_stable:
            # Offsets of a transaction not ended yet, or of an OffsetCommit being written:
            # the consumer asks again (KIP-447; Kafka's hasPendingOffsetCommitsForTopicPartition).
            # Looked for BEFORE the log is read: a transaction's coordinator writes its
            # offsets, then deletes its document. Seen here: unstable. Not seen: deleted
            # after its offsets landed, so the read below finds them. (Looked for after the
            # read, a transaction ending in between was answered from before it, as stable.)
            try:
                unstable = await ctx.run(
                    unstable_partitions, ctx.broker.storage, group, ctx.broker.clock.wall_ms(),
                    2 * getattr(ctx.broker.options, "transaction_max_timeout_ms", 900_000))
            except KafkaStoreError:
                unstable = None
        err = await svc.ensure_current(group)
        if err:
            return err, set()
        claim = svc.claim(group)
        if unstable is not None and require_stable:
            unstable |= svc.committing_now(group)
        if claim is not None and claim.valid and svc.claim(group) is claim:
            return G.NONE, unstable
        log.info("group %s was dropped while an OffsetFetch waited: read again", group)
    return G.COORDINATOR_NOT_AVAILABLE, set()


async def handle_offset_delete(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    group = request.group_id
    parts = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    err = authz.group_error(ctx, Op.DELETE, group) or await svc.ensure(group)
    claim = svc.claim(group)
    per: dict[tuple[str, int], int] = {}
    if not err:
        err, per = svc.coordinator.validate_offset_delete(group, parts)
        per.update({tp: authz.E.TOPIC_AUTHORIZATION_FAILED for tp in parts
                    if authz.topic_error(ctx, Op.READ, tp[0])})
    if not err:
        doomed = [tp for tp, e in per.items() if e == G.NONE]
        if doomed:
            err = await _write(ctx, "offset delete", group, claim, svc.store.delete_offsets, doomed)
            if not err:
                svc.coordinator.record_offset_delete(group, doomed)
    topics = tuple(make(mod, "OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
        make(mod, "OffsetDeleteResponsePartition", partition_index=p.partition_index,
             error_code=per.get((t.name, p.partition_index), G.NONE)) for p in t.partitions))
        for t in request.topics) if not err else ()
    return make(ctx.response_class, error_code=err, topics=topics)


# -- admin -----------------------------------------------------------------------------
async def handle_list_groups(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    try:
        names = await ctx.run(svc.store.groups)
    except KafkaStoreError:
        return make(ctx.response_class, error_code=G.COORDINATOR_NOT_AVAILABLE, groups=())
    for name in names:
        if svc.owns(name):
            await svc.ensure(name)
    states = getattr(request, "states_filter", None) or ()
    see_all = ctx.authorize(Op.DESCRIBE, ResourceType.CLUSTER)  # else the groups it may DESCRIBE
    groups = [g for g in svc.coordinator.list_groups(states) if svc.owns(g[0])
              and (see_all or not authz.group_error(ctx, Op.DESCRIBE, g[0]))]
    # KIP-848's types filter (v5): every group here is a classic one.
    types = {t.lower() for t in (getattr(request, "types_filter", None) or ())}
    if types and "classic" not in types:
        groups = []
    return make(ctx.response_class, error_code=G.NONE, groups=tuple(
        make(mod, "ListedGroup", group_id=g, protocol_type=t, group_state=s, group_type="classic")
        for g, t, s in groups))


async def handle_describe_groups(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    out = []
    for group in request.groups:
        err = authz.group_error(ctx, Op.DESCRIBE, group) or await svc.ensure(group)
        d = G.GroupDescription(group, err, G.DEAD, "", "") if err else svc.coordinator.describe_group(group)
        out.append(make(mod, "DescribedGroup", error_code=d.error, error_message=None, group_id=group,
                        group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol,
                        members=tuple(make(mod, "DescribedGroupMember", member_id=m.member_id,
                                           group_instance_id=m.group_instance_id, client_id=m.client_id,
                                           client_host=m.client_host, member_metadata=m.metadata,
                                           member_assignment=m.assignment) for m in d.members),
                        authorized_operations=authz.authorized_operations(ctx, ResourceType.GROUP, group)
                        if getattr(request, "include_authorized_operations", False) and not err
                        else -2147483648))
    return make(ctx.response_class, groups=tuple(out))


async def handle_delete_groups(ctx: RequestContext, request):
    svc = service(ctx.broker)
    mod = ctx.response_module
    results = []
    for group in request.groups_names:
        err = authz.group_error(ctx, Op.DELETE, group) or await svc.ensure(group)
        if not err:
            err = svc.coordinator.validate_delete_group(group)
        if not err:
            err = await _write(ctx, "delete", group, svc.claim(group), svc.store.delete_group)
            if not err:
                svc.coordinator.record_delete_group(group)
        results.append(make(mod, "DeletableGroupResult", group_id=group, error_code=err))
    return make(ctx.response_class, results=tuple(results))


async def _write(ctx: RequestContext, what: str, group: str, claim: GroupClaim | None, fn,
                 *args) -> int:
    """Write to ``__consumer_offsets`` in the I/O pool: NONE; NOT_COORDINATOR when the claim
    it was derived under no longer holds (the group is dropped: the client finds the
    coordinator again, which reads the log); COORDINATOR_NOT_AVAILABLE (retriable) when
    storage failed."""
    if claim is None:   # dropped since the request loaded it: nothing derived from it is written
        return G.NOT_COORDINATOR
    try:
        await ctx.run(fn, group, *args, claim)
        return G.NONE
    except FencedError as exc:
        log.warning("%s of group %s refused: %s", what, group, exc)
        svc = service(ctx.broker)
        if svc.claim(group) is claim:
            svc.unload(group)
        return G.NOT_COORDINATOR
    except KafkaStoreError:
        log.warning("%s of group %s failed", what, group, exc_info=True)
        return G.COORDINATOR_NOT_AVAILABLE


def _ms(value) -> int:
    """kio gives durations as timedelta (or int for some versions)."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def _host(peer) -> str:
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return str(peer or "")


def register(registry: Registry) -> None:
    # Kafka 3.9's 0-6: v5 = v4 (KIP-890), v6 adds the share key type (KIP-932).
    registry.register(FIND_COORDINATOR, 0, 6, handle_find_coordinator)
    registry.register(JOIN_GROUP, 0, 9, handle_join_group)
    registry.register(SYNC_GROUP, 0, 5, handle_sync_group)
    registry.register(HEARTBEAT, 0, 4, handle_heartbeat)
    registry.register(LEAVE_GROUP, 0, 5, handle_leave_group)
    registry.register(OFFSET_COMMIT, 2, 8, handle_offset_commit)
    registry.register(OFFSET_FETCH, 1, 7, handle_offset_fetch)
    registry.register(OFFSET_DELETE, 0, 0, handle_offset_delete)
    registry.register(LIST_GROUPS, 0, 5, handle_list_groups)
    registry.register(DESCRIBE_GROUPS, 0, 5, handle_describe_groups)
    registry.register(DELETE_GROUPS, 0, 2, handle_delete_groups)
