"""Produce: check each partition's batch where it arrives, queue it, answer after the commit.

Produce v0-2 (magic 0/1 message sets) are up-converted to v2 batches first (:mod:`.apis.legacy`)."""
from __future__ import annotations

import asyncio

from ...cluster.acls import Operation, ResourceType
from ...errors import KafkaStoreError
from ...topics.admin import is_internal_topic
from . import legacy as api_legacy, txn as api_txn
from ..wire import error_codes as E
from ..wire.api_keys import PRODUCE
from ..appender import BatchRejected, Outcome, check_batch
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext
from ..caches.metadata_cache import MISSING

#: Produce v0-2 carry the old message format (magic 0/1), up-converted by :mod:`.apis.legacy`.
FIRST_V2_PRODUCE = 3


async def handle_produce(ctx: RequestContext, request):
    """Every partition's batch is checked (topic and partition exist, not internal, a valid
    batch) and queued; acks=0 gets no response at all, acks=1 / -1 the outcome after the
    manifest version lands.

    Partitions that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION before anything is
    queued for them, so a client naming made-up partitions leaves no state behind. Looking a
    topic up may need storage (an ``await``); batches of one connection still queue in the
    order their requests arrived: each produce request of a connection queues only after the
    previous one has."""
    broker = ctx.broker
    conn = ctx.connection
    denied = _denied(ctx, request)
    names = {t.name for t in request.topic_data if t.name not in denied}
    metas = {n: broker.meta.topic_if_fresh(n) for n in names}
    prev = mine = None
    if conn is not None:
        prev, mine = conn.produce_gate, asyncio.get_running_loop().create_future()
        conn.produce_gate = mine
    try:
        old_format = None
        if ctx.api_version < FIRST_V2_PRODUCE:
            # Produce v0-2: magic 0/1 message sets become v2 batches (after the gate is set,
            # so batches of one connection still queue in request order).
            request, old_format = await ctx.run(api_legacy.up_convert_request, request)
        missing = [n for n, m in metas.items() if m is MISSING]
        if missing:
            metas.update(await ctx.run(_lookup, broker, missing))
        guards: dict = {}   # the verified batches' conditions at their commit (api_txn.append_guard)
        refused = await api_txn.verify_produce(ctx, getattr(request, "transactional_id", None),
                                               api_txn.transactional_batches(request), guards)
        if old_format:
            refused = {**(refused or {}), **old_format}
        if prev is not None and not prev.done():
            await prev
        pending = _submit(broker.appender, request, metas, refused, denied, guards)
    finally:
        if mine is not None:
            mine.set_result(None)
    if request.acks == 0:
        return None
    mod = ctx.response_module
    responses = []
    for name, parts in pending:
        out = []
        for index, fut in parts:
            outcome = fut if isinstance(fut, Outcome) else await fut
            out.append(make(mod, "PartitionProduceResponse", index=index, error_code=outcome.error,
                            base_offset=outcome.base_offset,
                            log_append_time=outcome.log_append_time,
                            log_start_offset=outcome.log_start_offset, record_errors=(),
                            error_message=outcome.message))
        responses.append(make(mod, "TopicProduceResponse", name=name, partition_responses=tuple(out)))
    return make(ctx.response_class, responses=tuple(responses))


def _denied(ctx: RequestContext, request) -> dict[str, int]:
    """Topics this request may not write, with the error their partitions get (Kafka: WRITE on
    the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for all; WRITE on each topic,
    else TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists)."""
    if ctx.broker.authorizer is None:
        return {}
    tid = getattr(request, "transactional_id", None)
    if tid is not None and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return {t.name: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t in request.topic_data}
    return {t.name: E.TOPIC_AUTHORIZATION_FAILED for t in request.topic_data
            if not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, t.name)}


def _lookup(broker, names: list[str]) -> dict:
    """Topic metadata by name (None: no such topic; a KafkaStoreError: could not be read)."""
    out: dict = {}
    for name in names:
        try:
            out[name] = broker.meta.topic(name)
        except KafkaStoreError as exc:
            out[name] = exc
    return out


def _submit(appender, request, metas, refused=None, denied=None, guards=None) -> list:
    """Queue every acceptable batch (synchronous: no await between them); outcomes or futures."""
    acks = request.acks
    pending: list[tuple[str, list[tuple[int, asyncio.Future | Outcome]]]] = []
    for topic in request.topic_data:
        meta = metas.get(topic.name)
        internal = is_internal_topic(topic.name)
        parts = []
        deny = denied.get(topic.name) if denied else None
        for pd in topic.partition_data:
            if deny:
                parts.append((pd.index, Outcome(deny)))
                continue
            if acks not in (-1, 0, 1):
                parts.append((pd.index, Outcome(E.INVALID_REQUIRED_ACKS)))
                continue
            if internal:  # as Kafka: clients never append to internal topics
                parts.append((pd.index, Outcome(E.INVALID_TOPIC_EXCEPTION,
                                                message=f"cannot produce to internal topic {topic.name!r}")))
                continue
            if isinstance(meta, KafkaStoreError):
                parts.append((pd.index, Outcome(E.KAFKA_STORAGE_ERROR, message=str(meta))))
                continue
            if meta is None or not 0 <= pd.index < meta.partitions:
                parts.append((pd.index, Outcome(E.UNKNOWN_TOPIC_OR_PARTITION,
                                                message=f"unknown partition {topic.name}/{pd.index}")))
                continue
            if refused and (topic.name, pd.index) in refused:  # see api_txn.verify_produce
                code, message = refused[(topic.name, pd.index)]
                parts.append((pd.index, Outcome(code, message=message)))
                continue
            data = pd.records
            try:
                if not data:
                    raise BatchRejected(E.CORRUPT_MESSAGE, "empty record set")
                header = check_batch(data)
            except BatchRejected as exc:
                parts.append((pd.index, Outcome(exc.code, message=str(exc))))
                continue
            guard = (guards or {}).get((topic.name, pd.index))
            parts.append((pd.index, appender.submit(
                topic.name, pd.index, bytes(data), header, guard=guard,
                txn_start_ms=guard.txn_start_ms if guard is not None else None)))
        pending.append((topic.name, parts))
    return pending


def register(registry: HandlerTable) -> None:
    registry.serve(PRODUCE, handle_produce)
