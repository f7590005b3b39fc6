"""DescribeCluster, DescribeTopicPartitions, DescribeProducers and DescribeLogDirs: what
operators' tools ask a cluster about itself.

A kafkastore cluster is the set of live brokers of one root; every broker answers for every
partition (there is no leader to forward to), and the root is the one log dir.
"""
from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from ...cluster.acls import Operation, ResourceType
from ...errors import KafkaStoreError
from ...topics.admin import is_internal_topic
from ..wire import error_codes as E
from ..wire.api_keys import (DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS,
                             DESCRIBE_TOPIC_PARTITIONS)
from ..wire.codec import make
from ..placement import leader_for, topic_id_of
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve.admin")

_NO_AUTH_OPS = -2147483648  # Kafka's "not requested"
BROKERS_ENDPOINT = 1  # DescribeCluster's endpoint_type (2 asks for KRaft controllers)
#: The operations a cluster resource supports (Kafka's AclEntry.supportedOperations(CLUSTER)).
_CLUSTER_OPS = (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)
#: Most partitions one DescribeTopicPartitions response holds (Kafka's
#: ``max.request.partition.size.limit`` default).
MAX_RESPONSE_PARTITIONS = 2000


def cluster_authorized_operations(ctx: RequestContext) -> int:
    """The bit field of the cluster operations this principal may do (all without an authorizer)."""
    out = 0
    for op in _CLUSTER_OPS:
        if ctx.authorize(op, ResourceType.CLUSTER):
            out |= 1 << int(op)
    return out


# -- DescribeCluster ----------------------------------------------------------------------
async def handle_describe_cluster(ctx: RequestContext, request):
    broker = ctx.broker
    mod = ctx.response_module
    endpoint = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint != BROKERS_ENDPOINT:
        return make(ctx.response_class, error_code=E.UNSUPPORTED_ENDPOINT_TYPE,
                    error_message=f"endpoint type {endpoint}: a kafkastore broker only lists brokers",
                    endpoint_type=endpoint, cluster_id=broker.cluster_id, controller_id=-1,
                    brokers=(), cluster_authorized_operations=_NO_AUTH_OPS)
    brokers = broker.live_brokers(same_security=True)
    ops = cluster_authorized_operations(ctx) if request.include_cluster_authorized_operations else _NO_AUTH_OPS
    return make(ctx.response_class, error_code=E.NONE, error_message=None, endpoint_type=endpoint,
                cluster_id=broker.cluster_id, controller_id=brokers[0][0],
                brokers=tuple(make(mod, "DescribeClusterBroker", broker_id=n, host=h, port=p, rack=None)
                              for n, h, p in brokers),
                cluster_authorized_operations=ops)


# -- DescribeTopicPartitions (KIP-966) -------------------------------------------------------
def describe_topic_partitions(broker, mod, names: list[str] | None, cursor, limit: int,
                              brokers, may_describe=lambda name: True) -> tuple[list, object]:
    """``(topic entries, next cursor)``: topics by name from the cursor on, at most ``limit``
    partitions in all; topics the principal may not describe are refused when named, left
    out when listing all (as Metadata). Blocking."""
    requested = names is not None
    if not requested:
        names = [n for n in broker.meta.topic_names() if may_describe(n)]
    names = sorted(set(n for n in names if n is not None))
    start_topic, start_part = (cursor.topic_name, cursor.partition_index) if cursor else (None, 0)
    out, budget, next_cursor = [], limit, None
    for name in names:
        if start_topic is not None and name < start_topic:
            continue
        first = start_part if name == start_topic else 0
        if not may_describe(name):
            out.append(make(mod, "DescribeTopicPartitionsResponseTopic",
                            error_code=E.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=None,
                            is_internal=False, partitions=(), topic_authorized_operations=_NO_AUTH_OPS))
            continue
        try:
            meta = broker.meta.topic(name)
        except KafkaStoreError as exc:
            log.warning("metadata of topic %r: %s", name, exc)
            meta = None
        if meta is None:
            if requested:
                out.append(make(mod, "DescribeTopicPartitionsResponseTopic",
                                error_code=E.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=None,
                                is_internal=False, partitions=(),
                                topic_authorized_operations=_NO_AUTH_OPS))
            continue
        if budget <= 0:
            next_cursor = make(mod, "Cursor", topic_name=name, partition_index=first)
            break
        end = min(meta.partitions, first + budget)
        parts = []
        for p in range(first, end):
            leader = leader_for(name, p, brokers)
            parts.append(make(mod, "DescribeTopicPartitionsResponsePartition", error_code=E.NONE,
                              partition_index=p, leader_id=leader, leader_epoch=0,
                              replica_nodes=(leader,), isr_nodes=(leader,),
                              eligible_leader_replicas=(), last_known_elr=(), offline_replicas=()))
        budget -= end - first
        out.append(make(mod, "DescribeTopicPartitionsResponseTopic", error_code=E.NONE, name=name,
                        topic_id=topic_id_of(name, meta), is_internal=is_internal_topic(name),
                        partitions=tuple(parts), topic_authorized_operations=_NO_AUTH_OPS))
        if end < meta.partitions:
            next_cursor = make(mod, "Cursor", topic_name=name, partition_index=end)
            break
    return out, next_cursor


async def handle_describe_topic_partitions(ctx: RequestContext, request):
    mod = ctx.response_module
    names = [t.name for t in request.topics] if request.topics else None
    cursor = request.cursor
    if cursor is not None and (cursor.partition_index < 0
                               or (names is not None and cursor.topic_name not in names)):
        # Kafka refuses the whole request (InvalidRequestException): every topic gets the error.
        return make(ctx.response_class, next_cursor=None, topics=tuple(
            make(mod, "DescribeTopicPartitionsResponseTopic", error_code=E.INVALID_REQUEST, name=n,
                 topic_id=None, is_internal=False, partitions=(), topic_authorized_operations=_NO_AUTH_OPS)
            for n in (names or ())))
    limit = max(1, min(request.response_partition_limit, MAX_RESPONSE_PARTITIONS))
    brokers = ctx.broker.live_brokers(same_security=True)
    topics, next_cursor = await ctx.run(
        describe_topic_partitions, ctx.broker, mod, names, cursor, limit, brokers,
        lambda name: ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name))
    return make(ctx.response_class, topics=tuple(topics), next_cursor=next_cursor)


# -- DescribeProducers (KIP-664) ------------------------------------------------------------
def describe_producers(broker, mod, topic: str, partition: int):
    """One partition's active idempotent / transactional producers, from its manifest. Blocking."""
    meta = broker.meta.topic(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        return make(mod, "PartitionResponse", partition_index=partition,
                    error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message=None, active_producers=())
    try:
        m = broker.meta.manifest(topic, partition, 0)
    except KafkaStoreError as exc:
        return make(mod, "PartitionResponse", partition_index=partition, error_code=E.KAFKA_STORAGE_ERROR,
                    error_message=str(exc), active_producers=())
    states = tuple(
        make(mod, "ProducerState", producer_id=pid, producer_epoch=st.epoch, last_sequence=st.last_sequence,
             last_timestamp=st.last_timestamp, coordinator_epoch=-1,
             current_txn_start_offset=-1 if st.txn_first_offset is None else st.txn_first_offset)
        for pid, st in sorted(m.producers.items()))
    return make(mod, "PartitionResponse", partition_index=partition, error_code=E.NONE,
                error_message=None, active_producers=states)


async def handle_describe_producers(ctx: RequestContext, request):
    mod = ctx.response_module
    topics = []
    for t in request.topics:
        if not ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name):  # as Kafka: READ
            parts = [make(mod, "PartitionResponse", partition_index=p, error_code=E.TOPIC_AUTHORIZATION_FAILED,
                          error_message=None, active_producers=()) for p in t.partition_indexes]
            topics.append(make(mod, "TopicResponse", name=t.name, partitions=tuple(parts)))
            continue
        parts = [await ctx.run(describe_producers, ctx.broker, mod, t.name, p) for p in t.partition_indexes]
        topics.append(make(mod, "TopicResponse", name=t.name, partitions=tuple(parts)))
    return make(ctx.response_class, topics=tuple(topics))


# -- DescribeLogDirs -------------------------------------------------------------------------
def log_dir_name(url: str) -> str:
    """The root's URL without user info or query (no secret ends up in a response)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def describe_log_dir(broker, mod, wanted) -> list:
    """The topics of the root with each partition's stored bytes (its live segments). Blocking."""
    if wanted is None:
        wanted = [(name, None) for name in broker.meta.topic_names()]
    out = []
    for name, partitions in wanted:
        meta = broker.meta.topic(name)
        if meta is None:
            continue  # as Kafka: partitions this log dir does not hold are left out
        parts = []
        for p in (range(meta.partitions) if partitions is None else partitions):
            if not 0 <= p < meta.partitions:
                continue
            m = broker.meta.manifest(name, p, 0)
            parts.append(make(mod, "DescribeLogDirsPartition", partition_index=p,
                              partition_size=sum(s.size for s in m.segments), offset_lag=0,
                              is_future_key=False))
        out.append(make(mod, "DescribeLogDirsTopic", name=name, partitions=tuple(parts)))
    return out


async def handle_describe_log_dirs(ctx: RequestContext, request):
    mod = ctx.response_module
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER):  # as Kafka: DESCRIBE on the cluster
        return make(ctx.response_class, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results=())
    wanted = None if request.topics is None else [(t.topic, list(t.partitions)) for t in request.topics]
    try:
        topics = await ctx.run(describe_log_dir, ctx.broker, mod, wanted)
        err = E.NONE
    except KafkaStoreError as exc:
        log.warning("describe log dirs failed: %s", exc)
        topics, err = [], E.KAFKA_STORAGE_ERROR
    result = make(mod, "DescribeLogDirsResult", error_code=err, log_dir=log_dir_name(ctx.broker.storage.url),
                  topics=tuple(topics), total_bytes=-1, usable_bytes=-1)  # object storage: no size
    return make(ctx.response_class, error_code=E.NONE, results=(result,))


def register(registry: HandlerTable) -> None:
    registry.serve(DESCRIBE_CLUSTER, handle_describe_cluster)
    registry.serve(DESCRIBE_TOPIC_PARTITIONS, handle_describe_topic_partitions)
    registry.serve(DESCRIBE_PRODUCERS, handle_describe_producers)
    registry.serve(DESCRIBE_LOG_DIRS, handle_describe_log_dirs)
