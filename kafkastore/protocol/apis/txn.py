"""The transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn (FindCoordinator key type 1 is in
:mod:`~kafkastore.protocol.apis.groups`), DescribeTransactions, ListTransactions and
WriteTxnMarkers; and the Produce check of transactional batches.

Which broker coordinates a transactional id: the same rendezvous hash as groups
(:func:`~kafkastore.protocol.apis.groups.coordinator_node`). The coordinator itself (the
store of ``__transaction_state``, the steps, markers, completion, timeouts and fencing) is
:mod:`kafkastore.protocol.coordinators.txn_service`; the handlers here check a request
(:func:`_coordinator_gate`: authorization, the id, this broker's authority, ownership),
ask the pure state machine of :mod:`kafkastore.protocol.coordinators.txn` for the step,
and have the service write it.
"""
from __future__ import annotations

import logging
import struct

from ...errors import KafkaStoreError
from ...cluster.acls import Operation as Op
from .. import authorizer as authz
from ..wire import error_codes as E
from ..coordinators import txn as T
from ..coordinators.pending_offsets import add_pending_offsets
from ..coordinators.txn_service import (OFFSETS_TOPIC, TxnService, append_guard, fault_point,
                                        verify_state)
from ..wire.api_keys import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, DESCRIBE_TRANSACTIONS,
                             END_TXN, INIT_PRODUCER_ID, LIST_TRANSACTIONS, TXN_OFFSET_COMMIT,
                             WRITE_TXN_MARKERS)
from ..wire.error_codes import (COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NOT_COORDINATOR,
                                OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION)
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext
from ...format.record_batch import ATTRIBUTES_OFFSET, HEADER_SIZE, TRANSACTIONAL_MASK
from ...groups.offsets import OffsetAndMetadata, partition_for_group
from ...topics.admin import is_internal_topic
from ..placement import leader_for
from ..coordinators.group_service import coordinates, too_long
from . import meta as api_meta
from .groups import service as groups

log = logging.getLogger("kafkastore.serve.txn")

TRANSACTIONAL_ID_NOT_FOUND_ERR = T.TRANSACTIONAL_ID_NOT_FOUND



_PRODUCER = struct.Struct(">qh")
_PRODUCER_POS = 43  # producer id (int64) and epoch (int16) in a record batch v2 header


def transactional_batches(request) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (producer id, epoch)}`` of a Produce request's transactional
    batches, read from their headers (checked in full later by ``check_batch``)."""
    out = {}
    for t in request.topic_data:
        for pd in t.partition_data:
            data = pd.records
            if data and len(data) >= HEADER_SIZE and data[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK:
                out[(t.name, pd.index)] = _PRODUCER.unpack_from(data, _PRODUCER_POS)
    return out



async def verify_produce(ctx: RequestContext, tid: str | None,
                         batches: dict[tuple[str, int], tuple[int, int]],
                         guards: dict | None = None) -> dict:
    """Transactional batches are accepted only from the id's current producer and epoch, for
    partitions added to its open transaction (else a producer could leave a transaction no
    coordinator knows, holding back read_committed for ever). ``{(topic, partition): (error
    code, message)}`` of the refused ones.

    ``guards``, when given, receives for each accepted partition the condition its append
    must still meet at the commit itself (:func:`append_guard`): the check here and the
    append are apart in time (a paused broker, a slow commit), and the transaction may end
    in between."""
    if not batches:
        return {}
    if tid is None or _bad_tid(tid):
        return dict.fromkeys(batches, (T.INVALID_TXN_STATE, "transactional batches need a transactional id"))
    svc = service(ctx.broker)
    # Always the stored state, never a cached one: a cache that still says Ongoing would
    # let a late batch of a transaction that ended (or of a fenced producer) in, and that
    # batch would hold the partition's last stable offset back for good.
    try:
        cur = await ctx.run(svc.store.get, tid)
    except KafkaStoreError as exc:
        return dict.fromkeys(batches, (56, f"cannot read the transaction's state: {exc}"))
    refused = {tp: e for tp, (pid, ep) in batches.items() if (e := verify_state(cur, tp, pid, ep))}
    if guards is not None:
        for tp, (pid, ep) in batches.items():
            if tp not in refused:
                guards[tp] = append_guard(svc.store, tid, tp, pid, ep, cur.txn_start_ms)
    return refused



def service(broker) -> TxnService:
    """The broker's transaction service (created on first use, on the event loop), with what
    it needs of the group coordinator and of leader placement."""
    services = broker.services
    if services.txn_service is None:
        async def apply_offsets(pending) -> None:
            await _apply_group_offsets(broker, pending)

        services.txn_service = TxnService(broker, owns=lambda tid: coordinates(broker, tid),
                                          apply_offsets=apply_offsets, leader_of=leader_for)
    return services.txn_service


async def _apply_group_offsets(broker, pending) -> None:
    """Write a committed transaction's offsets (``[(group, {(topic, partition): (offset,
    leader epoch, metadata)})]``) to ``__consumer_offsets``, and to the loaded group when
    this broker coordinates it."""
    svc = groups(broker)
    now = broker.clock.wall_ms()
    # Under the authority the markers were written under (the running request's): a
    # coordinator paused between reading the offsets and writing them must not write them
    # after the coordinator that took over finished the transaction and newer ones landed.
    txn, token = broker.services.txn_service, broker.services.txn_service.held()

    def guard() -> bool:
        return txn.still_holds(token)

    for group, offsets in pending:
        oms = {tp: OffsetAndMetadata(o, e, md or "", now) for tp, (o, e, md) in offsets.items()}
        await broker.run(svc.store.commit_offsets, group, oms, None, guard)
        if svc.owns(group) and svc.coordinator.is_loaded(group):
            svc.coordinator.record_commit(group, oms)


def transactional_groups(broker) -> set:
    """Groups this broker coordinates that took offsets in a transaction (bounded: cleared
    when it grows past 10,000; a cleared group is re-read no more, as before any transaction)."""
    services = broker.services
    if len(services.txn_groups) > 10_000:
        services.txn_groups = set()
    return services.txn_groups


def _bad_tid(tid: str | None) -> bool:
    return not tid or too_long(tid)


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


async def _coordinator_gate(ctx: RequestContext, tid: str | None, denied: int = 0, *,
                            invalid: bool = False) -> tuple[int, TxnService | None]:
    """The checks every coordinator request of ``tid`` starts with, in Kafka's order:
    ``denied`` (the handler's own authorization answer, 0 if allowed), INVALID_REQUEST for a
    missing or too long id (or when the handler found the request ``invalid``), this broker's
    coordinator authority (taken for the request: every write it makes is conditional on it),
    and that this broker coordinates the id. ``(0, the service)`` or ``(error code, None)``."""
    if denied:
        return denied, None
    if invalid or _bad_tid(tid):
        return INVALID_REQUEST, None
    svc = service(ctx.broker)
    if err := await svc.authority_error():
        return err, None
    if not svc.owns(tid):
        return NOT_COORDINATOR, None
    return T.NONE, svc


# -- handlers ---------------------------------------------------------------------------------
async def handle_init_producer_id(ctx: RequestContext, request):
    """Without a transactional id: the idempotent producer's answer (api_meta). With one: the
    coordinator bumps the id's epoch (fencing older instances), aborting or finishing a
    transaction left in flight first."""
    tid = request.transactional_id
    denied = authz.init_producer_id_error(ctx, tid)
    if denied:
        return make(ctx.response_class, error_code=denied, producer_id=-1, producer_epoch=-1)
    if tid is None:
        return await api_meta.handle_init_producer_id(ctx, request)

    def answer(err, pid=-1, epoch=-1):
        return make(ctx.response_class, error_code=err, producer_id=pid, producer_epoch=epoch)

    err, svc = await _coordinator_gate(ctx, tid)
    if err:
        return answer(err)
    timeout_ms = _ms(request.transaction_timeout)
    try:
        async with svc.lock(tid):
            cur = await ctx.run(svc.store.get, tid)
            expected = T.check_expected(cur, getattr(request, "producer_id", -1),
                                        getattr(request, "producer_epoch", -1))
            if expected is not None and expected.error:
                code = expected.error
                # Clients before v4 do not know PRODUCER_FENCED (as Kafka's KafkaApis).
                return answer(T.INVALID_PRODUCER_EPOCH if code == T.PRODUCER_FENCED and ctx.api_version < 4
                              else code)
            if expected is not None:
                return answer(T.NONE, expected.meta.producer_id, expected.meta.producer_epoch)
            # KIP-360: a producer that names its own epoch and had a transaction open gets
            # the epoch its abort bumped to (one bump, as Kafka), not a second one.
            own_abort = getattr(request, "producer_epoch", -1) >= 0 and cur is not None \
                and cur.state is T.TxnState.ONGOING
            if cur is not None and not cur.state.complete:
                err, cur = await svc.abort_in_flight(cur)
                if err:
                    return answer(err)
            new_pid = -1
            if cur is None or cur.producer_epoch + 1 >= T.MAX_EPOCH:
                new_pid = await ctx.run(ctx.broker.producer_ids.allocate)
            step = T.init_producer_id(cur, tid, timeout_ms, svc.store.clock.wall_ms(), new_pid,
                                      max_timeout_ms=svc.max_timeout_ms, bump=not own_abort)
            if step.error:
                return answer(step.error)
            await svc.write(step.meta, cur)
            return answer(T.NONE, step.meta.producer_id, step.meta.producer_epoch)
    except KafkaStoreError:
        log.warning("InitProducerId of %s failed", tid, exc_info=True)
        return answer(COORDINATOR_NOT_AVAILABLE)


async def handle_add_partitions(ctx: RequestContext, request):
    """Versions 0-3 (clients): one transaction. Versions 4-5 (Kafka's brokers verifying a
    transactional produce, KIP-890): a batch of transactions, each added or only checked
    (``verify_only``), for a principal with CLUSTER_ACTION."""
    if ctx.api_version >= 4:
        return await _add_partitions_batch(ctx, request)
    tid = request.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]

    def answer(codes: dict):
        return make(ctx.response_class, results_by_topic_v3_and_below=_topic_results(ctx, wanted, codes))

    denied = authz.txn_partitions_errors(ctx, tid, wanted)
    if denied:
        return answer(denied)
    codes = await _add_for(ctx, tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                           wanted, verify_only=False)
    return answer(codes)


def _topic_results(ctx, wanted, codes: dict) -> tuple:
    mod = ctx.response_module
    by_topic: dict[str, list] = {}
    for (t, p) in wanted:
        by_topic.setdefault(t, []).append(make(mod, "AddPartitionsToTxnPartitionResult",
                                               partition_index=p, partition_error_code=codes[(t, p)]))
    return tuple(make(mod, "AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(ps))
                 for t, ps in by_topic.items())


async def _add_partitions_batch(ctx: RequestContext, request):
    mod = ctx.response_module
    err = authz.cluster_error(ctx, Op.CLUSTER_ACTION)
    if err:
        return make(ctx.response_class, error_code=err, results_by_transaction=())
    out = []
    for txn in request.transactions:
        wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
        codes = await _add_for(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted,
                               verify_only=txn.verify_only)
        out.append(make(mod, "AddPartitionsToTxnResult", transactional_id=txn.transactional_id,
                        topic_results=_topic_results(ctx, wanted, codes)))
    return make(ctx.response_class, error_code=T.NONE, results_by_transaction=tuple(out))


async def _add_for(ctx, tid, pid: int, epoch: int, wanted, *, verify_only: bool) -> dict:
    """``{(topic, partition): error code}`` of adding (or, ``verify_only``, checking) ``wanted``."""
    err, svc = await _coordinator_gate(ctx, tid)
    if err:
        return dict.fromkeys(wanted, err)
    if verify_only:  # Kafka's handleVerifyPartitionsInTransaction
        try:
            cur = await ctx.run(svc.store.get, tid)
        except KafkaStoreError:
            return dict.fromkeys(wanted, COORDINATOR_NOT_AVAILABLE)
        err = T.check_producer(cur, pid, epoch) or (T.CONCURRENT_TRANSACTIONS if cur.state.prepared else 0)
        if err:
            return dict.fromkeys(wanted, err)
        return {tp: T.NONE if cur.state is T.TxnState.ONGOING and tp in cur.partitions else T.INVALID_TXN_STATE
                for tp in wanted}
    codes = {}
    for t in {t for t, _ in wanted}:
        meta = await ctx.run(ctx.broker.meta.topic, t)
        for tp in wanted:
            if tp[0] == t and (meta is None or is_internal_topic(t) or not 0 <= tp[1] < meta.partitions):
                codes[tp] = UNKNOWN_TOPIC_OR_PARTITION
    if codes:
        return {tp: codes.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
    err = await _add(ctx, svc, tid, pid, epoch, wanted)
    return dict.fromkeys(wanted, T.compat_error(err, ctx.api_version))


async def _add(ctx, svc: TxnService, tid: str, pid: int, epoch: int, parts) -> int:
    try:
        async with svc.lock(tid):
            cur = await ctx.run(svc.store.get, tid)
            if cur is not None and cur.state.prepared and (cur.producer_id, cur.producer_epoch) == (pid, epoch):
                # The producer's previous transaction, ended (its EndTxn answered) by a broker
                # that died before storing Complete: finish it here (its markers again) rather
                # than answer CONCURRENT_TRANSACTIONS until the timeout check does.
                err, cur = await svc.abort_in_flight(cur)
                if err:
                    return err
            step = T.add_partitions(cur, pid, epoch, parts, svc.store.clock.wall_ms())
            if step.error:
                return step.error
            if step.meta is not None:
                await svc.write(step.meta, cur)
                fault_point("after-add-partitions")
            return T.NONE
    except KafkaStoreError:
        log.warning("AddPartitionsToTxn of %s failed", tid, exc_info=True)
        return COORDINATOR_NOT_AVAILABLE


async def handle_add_offsets(ctx: RequestContext, request):
    """The group's ``__consumer_offsets`` partition joins the transaction (as in Kafka)."""
    tid = request.transactional_id
    denied = authz.txn_error(ctx, Op.WRITE, tid) or authz.group_error(ctx, Op.READ, request.group_id)
    err, svc = await _coordinator_gate(ctx, tid, denied, invalid=not request.group_id)
    if err:
        return make(ctx.response_class, error_code=err)
    try:
        n = await ctx.run(groups(ctx.broker).store._topic_partitions, True)
    except KafkaStoreError:
        return make(ctx.response_class, error_code=COORDINATOR_NOT_AVAILABLE)
    err = await _add(ctx, svc, tid, request.producer_id, request.producer_epoch,
                     [(OFFSETS_TOPIC, partition_for_group(request.group_id, n))])
    return make(ctx.response_class, error_code=T.compat_error(err, ctx.api_version))


async def handle_txn_offset_commit(ctx: RequestContext, request):
    """Answered by the group's coordinator: the offsets wait until the transaction ends."""
    mod = ctx.response_module
    gsvc = groups(ctx.broker)
    err = authz.txn_error(ctx, Op.WRITE, request.transactional_id) or \
        authz.group_error(ctx, Op.READ, request.group_id) or await gsvc.ensure(request.group_id)
    if not err:   # the member and generation of the group's current state (KIP-447)
        err = gsvc.coordinator.validate_commit(
            request.group_id, getattr(request, "generation_id", -1),
            getattr(request, "member_id", "") or "", getattr(request, "group_instance_id", None),
            transactional=True)
    txn_start_ms = -1
    if not err:
        err, txn_start_ms = await _check_txn_offsets(ctx, request)
        err = T.compat_error(err, ctx.api_version)
    offsets = {}
    codes = {}
    for t in request.topics:
        if not err and authz.topic_error(ctx, Op.READ, t.name):
            codes.update(((t.name, p.partition_index), E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions)
            continue
        known = None if err else await ctx.run(ctx.broker.meta.topic, t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if err:
                codes[tp] = err
            elif known is None or not 0 <= p.partition_index < known.partitions:
                codes[tp] = UNKNOWN_TOPIC_OR_PARTITION
            else:
                codes[tp] = T.NONE
                offsets[tp] = (p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                               p.committed_metadata or "")
    if offsets:
        try:
            await ctx.run(add_pending_offsets, ctx.broker.storage, request.producer_id,
                          request.producer_epoch, request.group_id, offsets, txn_start_ms,
                          request.transactional_id)
            # The transaction's coordinator (maybe another broker) writes them on commit:
            # this group's OffsetFetch re-reads the stored offsets from now on.
            transactional_groups(ctx.broker).add(request.group_id)
        except KafkaStoreError:
            codes.update(dict.fromkeys(offsets, COORDINATOR_NOT_AVAILABLE))
    return make(ctx.response_class, topics=tuple(
        make(mod, "TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
            make(mod, "TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                 error_code=codes[(t.name, p.partition_index)]) for p in t.partitions))
        for t in request.topics))


async def _check_txn_offsets(ctx, request) -> tuple[int, int]:
    """The producer must hold the id's current epoch and have added the group (AddOffsetsToTxn):
    ``(error code, the open transaction's start time)``."""
    if _bad_tid(request.transactional_id):
        return INVALID_REQUEST, -1
    try:
        cur = await ctx.run(service(ctx.broker).store.get, request.transactional_id)
    except KafkaStoreError:
        return COORDINATOR_NOT_AVAILABLE, -1
    if cur is None or cur.producer_id != request.producer_id:
        return T.INVALID_PRODUCER_ID_MAPPING, -1
    if request.producer_epoch != cur.producer_epoch:
        return (T.PRODUCER_FENCED if request.producer_epoch < cur.producer_epoch
                else T.INVALID_PRODUCER_EPOCH), -1
    try:
        n = await ctx.run(groups(ctx.broker).store._topic_partitions, True)
    except KafkaStoreError:
        return COORDINATOR_NOT_AVAILABLE, -1
    # This group's partition of the offsets topic, as AddOffsetsToTxn added it: another
    # group's does not let this group's offsets into the transaction.
    if cur.state is not T.TxnState.ONGOING or \
            (OFFSETS_TOPIC, partition_for_group(request.group_id, n)) not in cur.partitions:
        return T.INVALID_TXN_STATE, -1
    return T.NONE, cur.txn_start_ms


async def handle_end_txn(ctx: RequestContext, request):
    tid = request.transactional_id
    denied = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if authz.txn_error(ctx, Op.WRITE, tid) else 0
    err, svc = await _coordinator_gate(ctx, tid, denied)
    if err:
        return make(ctx.response_class, error_code=err)
    try:
        async with svc.lock(tid):
            cur = await ctx.run(svc.store.get, tid)
            step = T.end_txn(cur, request.producer_id, request.producer_epoch, request.committed,
                             svc.store.clock.wall_ms())
            if step.error or step.meta is None:
                return make(ctx.response_class, error_code=T.compat_error(step.error, ctx.api_version))
            if step.meta != cur:
                await svc.write(step.meta, cur)
            fault_point("before-markers")
            err = await svc.finish(step.meta)
            return make(ctx.response_class, error_code=err)
    except KafkaStoreError:
        log.warning("EndTxn of %s failed", tid, exc_info=True)
        return make(ctx.response_class, error_code=COORDINATOR_NOT_AVAILABLE)


STATE_NAMES = {T.TxnState.EMPTY: "Empty", T.TxnState.ONGOING: "Ongoing",
               T.TxnState.PREPARE_COMMIT: "PrepareCommit", T.TxnState.PREPARE_ABORT: "PrepareAbort",
               T.TxnState.COMPLETE_COMMIT: "CompleteCommit", T.TxnState.COMPLETE_ABORT: "CompleteAbort",
               T.TxnState.DEAD: "Dead", T.TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}


async def handle_describe_transactions(ctx: RequestContext, request):
    import datetime

    mod = ctx.response_module
    svc = service(ctx.broker)
    out = []
    for tid in request.transactional_ids:
        m = None
        if _bad_tid(tid):
            err = TRANSACTIONAL_ID_NOT_FOUND_ERR
        elif authz.txn_error(ctx, Op.DESCRIBE, tid):
            err = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not svc.owns(tid):
            err = NOT_COORDINATOR
        else:
            try:
                m = await ctx.run(svc.store.get, tid)
                err = T.NONE if m is not None else TRANSACTIONAL_ID_NOT_FOUND_ERR
            except KafkaStoreError:
                err = COORDINATOR_NOT_AVAILABLE
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions if m is not None else ()):
            by_topic.setdefault(t, []).append(p)
        # Kafka lists only the topics the caller may DESCRIBE (the rest of the state shows).
        by_topic = {t: ps for t, ps in by_topic.items() if not authz.topic_error(ctx, Op.DESCRIBE, t)}
        start_ms = 0 if m is None else m.txn_start_ms  # Kafka's: the schema default, else as stored
        start = datetime.datetime.fromtimestamp(start_ms / 1000, tz=datetime.timezone.utc)
        out.append(make(mod, "TransactionState", error_code=err, transactional_id=tid,
                        transaction_state=STATE_NAMES[m.state] if m is not None else "",
                        transaction_timeout=datetime.timedelta(milliseconds=m.timeout_ms if m else 0),
                        transaction_start_time=start,
                        producer_id=m.producer_id if m else -1, producer_epoch=m.producer_epoch if m else -1,
                        topics=tuple(make(mod, "TopicData", topic=t, partitions=tuple(ps))
                                     for t, ps in by_topic.items())))
    return make(ctx.response_class, transaction_states=tuple(out))


async def handle_list_transactions(ctx: RequestContext, request):
    """The transactions this broker coordinates (as Kafka: an admin client asks every broker)."""
    mod = ctx.response_module
    svc = service(ctx.broker)
    names = {v: k for k, v in STATE_NAMES.items()}
    states = set(request.state_filters or ())
    unknown = tuple(sorted(s for s in states if s not in names))
    pids = set(request.producer_id_filters or ())
    min_ms = getattr(request, "duration_filter", -1)
    try:
        await ctx.run(svc.store.refresh)
    except KafkaStoreError:
        return make(ctx.response_class, error_code=COORDINATOR_NOT_AVAILABLE, unknown_state_filters=unknown,
                    transaction_states=())
    now = svc.store.clock.wall_ms()
    out = []
    for m in sorted(svc.store.cached(), key=lambda m: m.transactional_id):
        if not svc.owns(m.transactional_id) or authz.txn_error(ctx, Op.DESCRIBE, m.transactional_id):
            continue
        if states and STATE_NAMES[m.state] not in states or pids and m.producer_id not in pids:
            continue
        if min_ms >= 0 and (m.txn_start_ms < 0 or now - m.txn_start_ms < min_ms):
            continue
        out.append(make(mod, "TransactionState", transactional_id=m.transactional_id,
                        producer_id=m.producer_id, transaction_state=STATE_NAMES[m.state]))
    return make(ctx.response_class, error_code=T.NONE, unknown_state_filters=unknown,
                transaction_states=tuple(out))


async def handle_write_txn_markers(ctx: RequestContext, request):
    """WriteTxnMarkers (Kafka's coordinator-to-leader API, which ``kafka-transactions.sh
    abort`` and the admin clients' ``abortTransaction`` use to clear a hanging transaction):
    write each COMMIT/ABORT marker through the appender, as the coordinator's own markers
    are. Needs ClusterAction, as in Kafka. A marker whose epoch is older than the
    partition's producer state is fenced (INVALID_PRODUCER_EPOCH)."""
    mod = ctx.response_module
    denied = authz.cluster_error(ctx, Op.CLUSTER_ACTION)
    results = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            codes = {}
            meta = None if denied else await ctx.run(ctx.broker.meta.topic, t.name)
            futs = {}
            for p in t.partition_indexes:
                if denied:
                    codes[p] = denied
                elif meta is None or not 0 <= p < meta.partitions:
                    codes[p] = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    futs[p] = ctx.broker.appender.submit_marker(
                        t.name, p, marker.producer_id, marker.producer_epoch,
                        bool(marker.transaction_result), ctx.broker.clock.wall_ms(),
                        coordinator_epoch=max(int(marker.coordinator_epoch), 0))
            for p, fut in futs.items():
                codes[p] = (await fut).error
            topics.append(make(mod, "WritableTxnMarkerTopicResult", name=t.name, partitions=tuple(
                make(mod, "WritableTxnMarkerPartitionResult", partition_index=p, error_code=codes[p])
                for p in t.partition_indexes)))
        results.append(make(mod, "WritableTxnMarkerResult", producer_id=marker.producer_id,
                            topics=tuple(topics)))
    return make(ctx.response_class, markers=tuple(results))


def register(registry: HandlerTable) -> None:
    # Kafka 3.9's ranges. AddPartitionsToTxn v4-5 is Kafka's broker-to-broker batch (clients
    # send v0-v3; CLUSTER_ACTION needed); v4 of EndTxn / AddOffsetsToTxn / TxnOffsetCommit,
    # v5 of InitProducerId and AddPartitionsToTxn only allow TRANSACTION_ABORTABLE in answers,
    # which this coordinator never gives.
    registry.serve(INIT_PRODUCER_ID, handle_init_producer_id)
    registry.serve(ADD_PARTITIONS_TO_TXN, handle_add_partitions)
    registry.serve(ADD_OFFSETS_TO_TXN, handle_add_offsets)
    registry.serve(END_TXN, handle_end_txn)
    registry.serve(TXN_OFFSET_COMMIT, handle_txn_offset_commit)
    registry.serve(DESCRIBE_TRANSACTIONS, handle_describe_transactions)
    registry.serve(LIST_TRANSACTIONS, handle_list_transactions)
    registry.serve(WRITE_TXN_MARKERS, handle_write_txn_markers)  # kio has v1 only
