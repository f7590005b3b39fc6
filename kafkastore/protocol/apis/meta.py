"""ApiVersions, Metadata and InitProducerId."""
from __future__ import annotations

import dataclasses
import logging

from ...cluster.acls import Operation, ResourceType
from ..authorizer import authorized_operations
from ...errors import KafkaStoreError
from ...topics.admin import is_internal_topic

from ..wire import codec
from ..wire import error_codes as E
from ..wire.api_keys import API_VERSIONS, METADATA
from .admin import MAX_PARTITIONS, create_topic_safely
from ..wire.codec import make
from ..placement import leader_for, topic_id, topic_id_of  # noqa: F401 - re-exported (handler table docs, handlers)
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve")

_NO_AUTH_OPS = -2147483648  # "not requested"


def _api_keys(ctx_module_or_cls, table: HandlerTable):
    return tuple(make(ctx_module_or_cls, "ApiVersion", api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in table.api_versions())


async def handle_api_versions(ctx: RequestContext, request):
    """The truth about this broker's APIs: exactly what the handler table holds."""
    return make(ctx.response_class, error_code=E.NONE,
                api_keys=_api_keys(ctx.response_module, ctx.broker.registry))


def unsupported_api_versions(table: HandlerTable, correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know: v0, UNSUPPORTED_VERSION, the list
    (the client then retries with the highest version it finds there)."""
    mod = codec.response_module(API_VERSIONS, 0)
    resp = make(codec.response_class(API_VERSIONS, 0), error_code=E.UNSUPPORTED_VERSION,
                api_keys=_api_keys(mod, table))
    return codec.encode_response(correlation_id, resp)


async def handle_metadata(ctx: RequestContext, request):
    """Topics and the live brokers a client of this listener can use (same security protocol).

    The per-partition entries are built in the thread pool: their number comes from the
    topics' metadata, never worked through on the event loop."""
    broker = ctx.broker
    v = ctx.api_version
    brokers = broker.live_brokers(same_security=True)
    wanted = request.topics
    if wanted is None or (v == 0 and not wanted):
        names = await ctx.run(broker.meta.topic_names)
        requested = False
    else:
        names = [t.name for t in wanted]
        requested = True
    auto_create = getattr(request, "allow_auto_topic_creation", True) and broker.options.auto_create_topics
    names, denied, no_create = _authorize_topics(ctx, names, requested, requested and auto_create)
    topics = await ctx.run(describe_topics, broker, ctx.response_module, names, requested and auto_create,
                           brokers)
    mod = ctx.response_module
    if denied or no_create:  # Kafka: DESCRIBE to see a topic, CREATE (cluster or topic) to auto-create it
        topics += [dataclasses.replace(t, error_code=E.code(E.TOPIC_AUTHORIZATION_FAILED))
                   if t.error_code == E.UNKNOWN_TOPIC_OR_PARTITION else t
                   for t in await ctx.run(describe_topics, broker, mod, no_create, False, brokers)]
        topics += [make(mod, "MetadataResponseTopic", error_code=E.TOPIC_AUTHORIZATION_FAILED, name=n,
                        topic_id=None, is_internal=is_internal_topic(n), partitions=(),
                        topic_authorized_operations=_NO_AUTH_OPS) for n in denied]
    if getattr(request, "include_topic_authorized_operations", False):
        topics = [dataclasses.replace(t, topic_authorized_operations=authorized_operations(
            ctx, ResourceType.TOPIC, t.name)) if t.error_code == E.NONE else t for t in topics]
    return make(ctx.response_class,
                brokers=tuple(make(mod, "MetadataResponseBroker", node_id=n, host=h, port=p, rack=None)
                              for n, h, p in broker.listed_brokers(same_security=True)),
                cluster_id=broker.cluster_id, controller_id=brokers[0][0], topics=tuple(topics),
                cluster_authorized_operations=_NO_AUTH_OPS)


def _authorize_topics(ctx: RequestContext, names, requested: bool, auto_create: bool):
    """``(names to describe, names refused TOPIC_AUTHORIZATION_FAILED, names to describe that
    may not be auto-created)``: every topic the principal may not DESCRIBE is left out of an
    all-topics answer (Kafka hides it) and refused when asked for by name."""
    if ctx.broker.authorizer is None:
        return names, [], []
    seen = [n for n in names if n is not None and ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, n)]
    if not requested:
        return seen, [], []
    visible = set(seen)
    denied = [n for n in names if n is not None and n not in visible]
    if not auto_create or ctx.authorize(Operation.CREATE, ResourceType.CLUSTER):
        return seen, denied, []
    no_create = [n for n in seen if not ctx.authorize(Operation.CREATE, ResourceType.TOPIC, n)]
    creatable = seen if not no_create else [n for n in seen if n not in frozenset(no_create)]
    return creatable, denied, no_create


def describe_topics(broker, mod, names, auto_create: bool, brokers) -> list:
    """Metadata's topic entries (blocking: reads topic metadata, may auto-create)."""
    def failed(name, code):
        return make(mod, "MetadataResponseTopic", error_code=code, name=name, topic_id=None,
                    is_internal=is_internal_topic(name), partitions=(),
                    topic_authorized_operations=_NO_AUTH_OPS)

    topics = []
    for name in names:
        if name is None:
            continue
        try:
            meta = broker.meta.topic(name)
        except KafkaStoreError as exc:  # a damaged _topic.json: report it, keep serving the rest
            log.warning("metadata of topic %r: %s", name, exc)
            topics.append(failed(name, E.UNKNOWN_SERVER_ERROR))
            continue
        if meta is None and auto_create and not is_internal_topic(name):
            create_topic_safely(broker, name, broker.options.default_partitions, {})
            meta = broker.meta.topic(name)
        if meta is None:
            topics.append(failed(name, E.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if meta.partitions > MAX_PARTITIONS:  # made before the limit existed: not served
            log.warning("topic %r has %d partitions, more than the %d served", name, meta.partitions,
                        MAX_PARTITIONS)
            topics.append(failed(name, E.INVALID_PARTITIONS))
            continue
        parts = []
        for p in range(meta.partitions):
            leader = leader_for(name, p, brokers)
            parts.append(make(mod, "MetadataResponsePartition", error_code=E.NONE,
                              partition_index=p, leader_id=leader, leader_epoch=0,
                              replica_nodes=(leader,), isr_nodes=(leader,), offline_replicas=()))
        topics.append(make(mod, "MetadataResponseTopic", error_code=E.NONE, name=name,
                           topic_id=topic_id_of(name, meta), is_internal=is_internal_topic(name),
                           partitions=tuple(parts), topic_authorized_operations=_NO_AUTH_OPS))
    return topics


async def handle_init_producer_id(ctx: RequestContext, request):
    """Idempotent producers get a fresh id from the root-wide allocator (or, re-initialising
    with their id and epoch, the same id with the epoch bumped, as KIP-360)."""
    if request.transactional_id is not None:
        return make(ctx.response_class, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    producer_id=-1, producer_epoch=-1)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < 32766:
        return make(ctx.response_class, error_code=E.NONE, producer_id=pid, producer_epoch=epoch + 1)
    try:
        pid = await ctx.run(ctx.broker.producer_ids.allocate)
    except Exception:  # noqa: BLE001 - storage trouble: the client retries
        return make(ctx.response_class, error_code=E.KAFKA_STORAGE_ERROR, producer_id=-1,
                    producer_epoch=-1)
    return make(ctx.response_class, error_code=E.NONE, producer_id=pid, producer_epoch=0)


def register(registry: HandlerTable) -> None:
    registry.serve(API_VERSIONS, handle_api_versions)
    registry.serve(METADATA, handle_metadata)
