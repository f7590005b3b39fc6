"""CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs: topic
administration over the root.

:func:`register` also registers the other admin modules (:mod:`.apis.configs`,
:mod:`.apis.cluster`, :mod:`.apis.users`), so the server wires one module for all of them.
"""
from __future__ import annotations

import logging

from ... import layout
from ...errors import (ConfigError, InternalTopicError, KafkaStoreError, OffsetOutOfRangeError,
                       StorageError, TopicExistsError, UnknownTopicError)
from ...maintenance.retention import delete_records
from ...topics.admin import (alter_topic, create_topic, delete_topic as delete_topic_everywhere,
                             is_internal_topic)
from ...topics.topic_config import TopicConfig
from ..wire import error_codes as E
from ..wire.api_keys import (CREATE_PARTITIONS, CREATE_TOPICS, DELETE_RECORDS, DELETE_TOPICS,
                             DESCRIBE_CONFIGS)
from ..placement import topic_id_of
from ...cluster.acls import Operation as Op, ResourceType
from .. import authorizer as authz
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve.admin")

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
_DEFAULT_CONFIG, _TOPIC_CONFIG = 5, 1  # Kafka's ConfigSource: DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG
#: Most partitions one topic may have. Every partition is a manifest chain and a directory
#: of objects, and Metadata lists each one: a client asking for 2^31-1 froze every broker.
#: Kafka has no fixed limit; 10,000 is far above what one topic over object storage needs.
MAX_PARTITIONS = 10_000


def _change_topic(broker, name: str, change, errors) -> tuple[int, str | None, object]:
    """``(error code, message, result)`` of ``change()``, a change of topic ``name`` in the root:
    a failure answers the code paired with the first of ``errors`` ((exception class, code)
    pairs, in order) it is an instance of. The broker's cached metadata of the topic is dropped
    either way (it may have changed even when the call failed). Blocking."""
    try:
        result = change()
    except tuple(cls for cls, _ in errors) as exc:
        return next(code for cls, code in errors if isinstance(exc, cls)), str(exc), None
    finally:
        broker.meta.forget_topic(name)
    return E.NONE, None, result


def create_topic_safely(broker, name: str, partitions: int, configs: dict,
                        validate_only: bool = False) -> tuple[int, str | None, object]:
    """``(error code, message, metadata)`` of creating one topic. Blocking."""
    try:
        layout.validate_topic_name(name)
    except ConfigError as exc:
        return E.INVALID_TOPIC_EXCEPTION, str(exc), None
    if is_internal_topic(name):
        return E.INVALID_TOPIC_EXCEPTION, f"cannot create internal topic {name!r}: only kafkastore does", None
    if partitions == -1:
        partitions = broker.options.default_partitions
    if not 1 <= partitions <= MAX_PARTITIONS:
        return (E.INVALID_PARTITIONS,
                f"partition count must be between 1 and {MAX_PARTITIONS}, got {partitions}", None)
    try:
        config = TopicConfig.from_dict(configs)
    except ConfigError as exc:
        return E.INVALID_CONFIG, str(exc), None
    if validate_only:
        exists = broker.meta.topic(name) is not None
        return (E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", None) if exists else (E.NONE, None, None)
    return _change_topic(broker, name, lambda: create_topic(broker.storage, name, partitions, config),
                         ((TopicExistsError, E.TOPIC_ALREADY_EXISTS), (StorageError, E.KAFKA_STORAGE_ERROR)))


async def handle_create_topics(ctx: RequestContext, request):
    mod = ctx.response_module
    results = []
    may_create_any = ctx.authorize(Op.CREATE, ResourceType.CLUSTER)  # else CREATE on each topic
    for t in request.topics:
        if not may_create_any and authz.topic_error(ctx, Op.CREATE, t.name):
            err, msg, meta = E.TOPIC_AUTHORIZATION_FAILED, None, None
        elif t.replication_factor not in (-1, 1) and t.replication_factor < 1:
            err, msg, meta = E.INVALID_REPLICATION_FACTOR, "replication factor must be >= 1 or -1", None
        elif t.assignments:
            err, msg, meta = E.INVALID_REQUEST, "manual replica assignment is not supported", None
        else:
            configs = {c.name: c.value for c in t.configs}
            err, msg, meta = await ctx.run(create_topic_safely, ctx.broker, t.name, t.num_partitions,
                                           configs, bool(getattr(request, "validate_only", False)))
        results.append(make(mod, "CreatableTopicResult", name=t.name,
                            topic_id=topic_id_of(t.name, meta) if meta else None,
                            error_code=err, error_message=msg, topic_config_error_code=0,
                            num_partitions=meta.partitions if meta else -1,
                            replication_factor=1 if meta else -1, configs=None))
    return make(ctx.response_class, topics=tuple(results))


def delete_topic(broker, name: str) -> tuple[int, str | None]:
    """Delete a topic for every broker (:func:`kafkastore.topics.delete_topic`: partitions are
    tombstoned, so writes racing the delete are refused). Internal topics are refused. Blocking."""
    def delete():
        layout.validate_topic_name(name)
        delete_topic_everywhere(broker.storage, name)
    return _change_topic(broker, name, delete, (
        (InternalTopicError, E.INVALID_TOPIC_EXCEPTION), (ConfigError, E.UNKNOWN_TOPIC_OR_PARTITION),
        (UnknownTopicError, E.UNKNOWN_TOPIC_OR_PARTITION), (StorageError, E.KAFKA_STORAGE_ERROR)))[:2]


async def handle_delete_topics(ctx: RequestContext, request):
    mod = ctx.response_module
    names = getattr(request, "topic_names", None)
    if names is None:
        names = tuple(t.name for t in request.topics if t.name is not None)
    results = []
    for name in names:
        err, msg = (authz.topic_error(ctx, Op.DELETE, name), None)
        if not err:
            err, msg = await ctx.run(delete_topic, ctx.broker, name)
        results.append(make(mod, "DeletableTopicResult", name=name, error_code=err, error_message=msg))
    return make(ctx.response_class, responses=tuple(results))


def describe_topic_configs(broker, name: str, keys) -> tuple[int, str | None, list[tuple[str, str, bool]]]:
    """``(error, message, [(key, value, is_default)])``. Blocking."""
    meta = broker.meta.topic(name)
    if meta is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}", []
    values = meta.config.describe(include_defaults=True)
    wanted = set(keys) if keys is not None else None
    return E.NONE, None, [(k, v, meta.config.is_default(k)) for k, v in sorted(values.items())
                          if wanted is None or k in wanted]


async def handle_describe_configs(ctx: RequestContext, request):
    mod = ctx.response_module
    results = []
    for r in request.resources:
        entries: list = []
        denied = authz.topic_error(ctx, Op.DESCRIBE_CONFIGS, r.resource_name) \
            if r.resource_type == TOPIC_RESOURCE else authz.cluster_error(ctx, Op.DESCRIBE_CONFIGS) \
            if r.resource_type == BROKER_RESOURCE else 0
        if denied:
            err, msg = denied, None
        elif r.resource_type == TOPIC_RESOURCE:
            err, msg, entries = await ctx.run(describe_topic_configs, ctx.broker, r.resource_name,
                                              r.configuration_keys)
        elif r.resource_type == BROKER_RESOURCE:
            err, msg = E.NONE, None
        else:
            err, msg = E.INVALID_REQUEST, f"resource type {r.resource_type} is not supported"
        configs = tuple(
            make(mod, "DescribeConfigsResourceResult", name=k, value=v, read_only=False,
                 is_default=default, config_source=_DEFAULT_CONFIG if default else _TOPIC_CONFIG,
                 is_sensitive=False, synonyms=(), config_type=0, documentation=None)
            for k, v, default in entries)
        results.append(make(mod, "DescribeConfigsResult", error_code=err, error_message=msg,
                            resource_type=r.resource_type, resource_name=r.resource_name,
                            configs=configs))
    return make(ctx.response_class, results=tuple(results))


# -- CreatePartitions ------------------------------------------------------------------
def create_partitions(broker, name: str, count: int, validate_only: bool) -> tuple[int, str | None]:
    """Grow a topic to ``count`` partitions (:func:`kafkastore.topics.alter_topic`). Blocking."""
    try:
        layout.validate_topic_name(name)
        meta = broker.meta.topic(name)
    except ConfigError as exc:
        return E.INVALID_TOPIC_EXCEPTION, str(exc)
    if is_internal_topic(name):  # their keys are hashed over the partition count: fixed
        return E.INVALID_REQUEST, f"cannot add partitions to internal topic {name!r}"
    if meta is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}"
    if count <= meta.partitions:  # Kafka's wording and code for both "fewer" and "same"
        return (E.INVALID_PARTITIONS, f"topic currently has {meta.partitions} partitions, "
                f"which is higher than or equal to the requested {count}")
    if count > MAX_PARTITIONS:
        return E.INVALID_PARTITIONS, f"partition count must be at most {MAX_PARTITIONS}, got {count}"
    if validate_only:
        return E.NONE, None
    # Conditional: racing the same growth on another broker gives INVALID_PARTITIONS.
    return _change_topic(
        broker, name, lambda: alter_topic(broker.storage, name, partitions=count, require_growth=True),
        ((UnknownTopicError, E.UNKNOWN_TOPIC_OR_PARTITION), (ConfigError, E.INVALID_PARTITIONS),
         (StorageError, E.KAFKA_STORAGE_ERROR)))[:2]


async def handle_create_partitions(ctx: RequestContext, request):
    mod = ctx.response_module
    names = [t.name for t in request.topics]
    results = []
    for t in request.topics:
        if names.count(t.name) > 1:
            err, msg = E.INVALID_REQUEST, "duplicate topic in request"
        elif authz.topic_error(ctx, Op.ALTER, t.name):
            err, msg = E.TOPIC_AUTHORIZATION_FAILED, None
        elif t.assignments is not None:
            # One copy on object storage: there are no replicas to place.
            err, msg = E.INVALID_REPLICA_ASSIGNMENT, "manual replica assignment is not supported"
        else:
            err, msg = await ctx.run(create_partitions, ctx.broker, t.name, t.count,
                                     bool(request.validate_only))
        results.append(make(mod, "CreatePartitionsTopicResult", name=t.name, error_code=err,
                            error_message=msg))
    return make(ctx.response_class, results=tuple(results))


# -- DeleteRecords ----------------------------------------------------------------------
def delete_records_before(broker, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """``(error, low watermark)`` of Kafka's DeleteRecords on one partition
    (:func:`kafkastore.retention.delete_records`; -1 is the high watermark). Blocking."""
    if is_internal_topic(topic):  # Kafka's ReplicaManager refuses internal topics too
        return E.INVALID_TOPIC_EXCEPTION, -1
    meta = broker.meta.topic(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        return E.UNKNOWN_TOPIC_OR_PARTITION, -1
    if offset < -1:
        return E.OFFSET_OUT_OF_RANGE, -1
    try:
        result = delete_records(broker.storage, topic, partition, offset, writer="serve-delete-records")
    except OffsetOutOfRangeError:
        return E.OFFSET_OUT_OF_RANGE, -1
    except (UnknownTopicError, ConfigError):
        return E.UNKNOWN_TOPIC_OR_PARTITION, -1
    except KafkaStoreError as exc:  # storage trouble, too many commit conflicts: the client retries
        log.warning("delete records of %s/%d failed: %s", topic, partition, exc)
        return E.KAFKA_STORAGE_ERROR, -1
    finally:
        broker.meta.forget_topic(topic)
    return E.NONE, result.log_start_offset


async def handle_delete_records(ctx: RequestContext, request):
    mod = ctx.response_module
    topics = []
    for t in request.topics:
        parts = []
        denied = authz.topic_error(ctx, Op.DELETE, t.name)
        for p in t.partitions:
            err, low = (denied, -1) if denied else \
                await ctx.run(delete_records_before, ctx.broker, t.name, p.partition_index, p.offset)
            parts.append(make(mod, "DeleteRecordsPartitionResult", partition_index=p.partition_index,
                              low_watermark=low, error_code=err))
        topics.append(make(mod, "DeleteRecordsTopicResult", name=t.name, partitions=tuple(parts)))
    return make(ctx.response_class, topics=tuple(topics))


def register(registry: HandlerTable) -> None:
    registry.serve(CREATE_TOPICS, handle_create_topics)
    registry.serve(DELETE_TOPICS, handle_delete_topics)
    registry.serve(DESCRIBE_CONFIGS, handle_describe_configs)
    registry.serve(DELETE_RECORDS, handle_delete_records)
    registry.serve(CREATE_PARTITIONS, handle_create_partitions)
