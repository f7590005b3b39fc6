"""The consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups.

Which broker coordinates a group is the group service's rendezvous hashing over the live
brokers (:func:`~kafkastore.protocol.coordinators.group_service.coordinator_node`). A request
for a group this broker does not coordinate gets NOT_COORDINATOR and the client asks
FindCoordinator again.

The coordinator, its offsets store, fencing and what an offset commit is conditional on
are the group service's (:mod:`kafkastore.protocol.coordinators.group_service`); this
module answers the requests with it.
"""
from __future__ import annotations

import asyncio
import logging

from ...errors import FencedError, KafkaStoreError
from ...groups.offsets import GroupClaim
from ...groups.records import OffsetAndMetadata
from ...cluster.acls import Operation as Op, ResourceType
from .. import authorizer as authz
from ..coordinators import group as G
from ..coordinators.group_service import (MAX_STRING_BYTES, GroupService, coordinator_candidates,
                                          coordinator_node, invalid_group_id, too_long)
from ..wire.api_keys import (DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT,
                             JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, OFFSET_COMMIT, OFFSET_DELETE,
                             OFFSET_FETCH, SYNC_GROUP)
from ..wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, INVALID_REQUEST, KAFKA_STORAGE_ERROR,
                               UNSTABLE_OFFSET_COMMIT)
from ..coordinators.pending_offsets import unstable_partitions
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve.groups")

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1
COORDINATOR_KEY_SHARE = 2  # KIP-932, FindCoordinator v6+
_MEMBER_ID_SUFFIX = 37  # "-" + a UUID, appended to the client id to make a member id


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
    claim = svc.claim(request.group_id)
    fut, respond = _future()
    svc.coordinator.sync_group(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None),
        {a.member_id: a.assignment for a in request.assignments}, respond,
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None))
    r = await fut
    if r.error == G.NONE:
        # As Kafka: an assignment is handed out once its generation is in the log under the
        # claim. Answered before, a fence (or a move) before the write landed let the next
        # load start from the older generation and hand this generation's number out again
        # with other assignments, and a zombie of the first one commit under it.
        err = await svc.generation_written(request.group_id, request.generation_id, claim)
        if err:
            return make(ctx.response_class, error_code=err, protocol_type=None,
                        protocol_name=None, assignment=b"")
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
    per_partition = err
    if err and requested is not None:
        # Every requested partition carries the error, at every version. From v2 on Kafka
        # answers the top-level code alone, but aiokafka never reads it: a partition left
        # out is "no committed offset" to it, and the consumer starts over from
        # auto.offset.reset. So v2+ lists them too, with the retriable code aiokafka retries
        # on (it takes COORDINATOR_NOT_AVAILABLE on a partition as fatal).
        found = {tp: None for tp in requested}
        if ctx.api_version >= 2:
            per_partition = _PARTITION_RETRY.get(err, err)
        # A coordinator move (NOT_COORDINATOR) is routine; a group that could not be read is not.
        log.log(logging.INFO if err == G.NOT_COORDINATOR else logging.WARNING,
                "OffsetFetch of group %s answered error %d on broker %d (v%d)", group, err,
                ctx.broker.node_id, ctx.api_version)
    if not err and requested is not None and any(om is None for om in found.values()):
        _log_missing_offsets(ctx, svc, group, found, unstable)
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
            # An unstable partition carries its last stable offset, not Kafka's -1: clients
            # ignore the offset beside an error, except librdkafka when the answer arrives after
            # its assignment changed (it starts the partition at the offset given, and -1 means
            # auto.offset.reset: a consumer sent back to the start of the log).
            committed_offset=-1 if om is None else om.offset,
            committed_leader_epoch=-1 if om is None else om.leader_epoch,
            metadata="" if om is None else om.metadata,
            error_code=authz.E.TOPIC_AUTHORIZATION_FAILED if (topic, p) in hidden
            else UNSTABLE_OFFSET_COMMIT if (topic, p) in unstable
            else per_partition))
    topics = tuple(make(mod, "OffsetFetchResponseTopic", name=t, partitions=tuple(ps))
                   for t, ps in by_topic.items())
    return make(ctx.response_class, topics=topics, error_code=err)


def _log_missing_offsets(ctx: RequestContext, svc: GroupService, group: str, found: dict,
                         unstable) -> None:
    """A group with committed offsets answered "none" for some partitions: the consumer
    starts those from auto.offset.reset. Rare and worth a line (a new partition of the
    topic, or offsets lost): what the coordinator held and which claim it answered under."""
    held = svc.coordinator.fetch_offsets(group)
    if not held:
        return   # a new group: nothing committed anywhere
    missing = sorted(tp for tp, om in found.items() if om is None and tp not in (unstable or ()))
    if missing:
        claim = svc.claim(group)
        log.warning("OffsetFetch of group %s on broker %d: no committed offset for %s (the group "
                    "holds %d partition(s); claim version %s)", group, ctx.broker.node_id,
                    ", ".join(f"{t}/{p}" for t, p in missing), len(held),
                    None if claim is None else claim.version)


#: The error a partition of an OffsetFetch answer (v2+) carries for a top-level error: one
#: every client retries on (see :func:`handle_offset_fetch`).
_PARTITION_RETRY = {G.COORDINATOR_NOT_AVAILABLE: COORDINATOR_LOAD_IN_PROGRESS}


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


def register(registry: HandlerTable) -> None:
    # Kafka 3.9's 0-6: v5 = v4 (KIP-890), v6 adds the share key type (KIP-932).
    registry.serve(FIND_COORDINATOR, handle_find_coordinator)
    registry.serve(JOIN_GROUP, handle_join_group)
    registry.serve(SYNC_GROUP, handle_sync_group)
    registry.serve(HEARTBEAT, handle_heartbeat)
    registry.serve(LEAVE_GROUP, handle_leave_group)
    registry.serve(OFFSET_COMMIT, handle_offset_commit)
    registry.serve(OFFSET_FETCH, handle_offset_fetch)
    registry.serve(OFFSET_DELETE, handle_offset_delete)
    registry.serve(LIST_GROUPS, handle_list_groups)
    registry.serve(DESCRIBE_GROUPS, handle_describe_groups)
    registry.serve(DELETE_GROUPS, handle_delete_groups)
