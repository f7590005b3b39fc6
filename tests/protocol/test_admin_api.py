"""The admin API operators' tools use, each driven by a real admin client:
confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient."""
from __future__ import annotations


import pytest
from confluent_kafka import (ConsumerGroupState, ConsumerGroupType, IsolationLevel, KafkaError,
                             KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic, OffsetSpec, ResourceType)

from kafkastore.topics.admin import load_topic


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def kp_admin(broker):
    from kafka.admin import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield a
    a.close()


def _create(admin, name, partitions=1, config=None):
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(10)


def _produce(bootstrap, topic, n, *, partition=0, timestamps=None, **conf):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=partition,
                  timestamp=timestamps[i] if timestamps else 0)
        p.flush(10)  # one batch each: offsets and timestamps line up with i
    assert p.flush(10) == 0


def _code(fut) -> int:
    with pytest.raises(KafkaException) as info:
        fut.result(10)
    return info.value.args[0].code()


# -- DescribeCluster --------------------------------------------------------------------
def test_describe_cluster(admin, kp_admin, broker):
    d = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert d.cluster_id == "kafkastore"
    assert [n.id for n in d.nodes] == [broker.server.node_id] and d.controller.id == broker.server.node_id
    # librdkafka asks with Metadata; kafka-python with DescribeCluster (API 60).
    kp = kp_admin.describe_cluster()
    assert kp["cluster_id"] == "kafkastore" and kp["controller_id"] == broker.server.node_id
    assert [b["broker_id"] for b in kp["brokers"]] == [broker.server.node_id]
    assert "ALTER_CONFIGS" in repr(kp["authorized_operations"])  # no authorizer: all a cluster has


# -- CreatePartitions -------------------------------------------------------------------
def test_create_partitions(admin, kp_admin, storage):
    _create(admin, "cp-t", 1)
    admin.create_partitions([NewPartitions("cp-t", 3)], validate_only=True)["cp-t"].result(10)
    assert load_topic(storage, "cp-t").partitions == 1
    admin.create_partitions([NewPartitions("cp-t", 3)])["cp-t"].result(10)
    assert load_topic(storage, "cp-t").partitions == 3
    assert _code(admin.create_partitions([NewPartitions("cp-t", 2)])["cp-t"]) == KafkaError.INVALID_PARTITIONS
    assert _code(admin.create_partitions([NewPartitions("cp-nope", 2)])["cp-nope"]) == \
        KafkaError.UNKNOWN_TOPIC_OR_PART
    assigned = admin.create_partitions([NewPartitions("cp-t", 4, replica_assignment=[[0]])])["cp-t"]
    assert _code(assigned) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    kp_admin.create_partitions({"cp-t": 5})
    assert load_topic(storage, "cp-t").partitions == 5
    assert len(admin.list_topics("cp-t", timeout=10).topics["cp-t"].partitions) == 5


# -- DeleteRecords and ListOffsets ---------------------------------------------------------
def test_delete_records_and_list_offsets_by_every_spec(admin, kp_admin, broker):
    from kafka import TopicPartition as KpTP
    from kafka.admin import OffsetSpec as KpSpec

    _create(admin, "dr-t")
    base = 1_700_000_000_000
    stamps = [base + 1000 * i for i in range(6)]
    stamps[3] = base + 99_000  # the largest timestamp is not the last record's
    _produce(broker.bootstrap, "dr-t", 6, timestamps=stamps)
    tp = TopicPartition("dr-t", 0)

    def offsets(spec):
        futures = admin.list_offsets({tp: spec}, isolation_level=IsolationLevel.READ_COMMITTED)
        r = futures[tp].result(10)
        return r.offset, r.timestamp

    assert offsets(OffsetSpec.earliest())[0] == 0
    assert offsets(OffsetSpec.latest())[0] == 6
    assert offsets(OffsetSpec.max_timestamp()) == (3, base + 99_000)
    assert offsets(OffsetSpec.for_timestamp(base + 1500))[0] == 2
    assert offsets(OffsetSpec.for_timestamp(base + 500_000))[0] == -1  # after every record

    low = admin.delete_records([TopicPartition("dr-t", 0, 4)])
    assert low[TopicPartition("dr-t", 0, 4)].result(10).low_watermark == 4
    assert offsets(OffsetSpec.earliest())[0] == 4
    bad = admin.delete_records([TopicPartition("dr-t", 0, 100)])
    assert _code(list(bad.values())[0]) == KafkaError.OFFSET_OUT_OF_RANGE

    kp_admin.delete_records({KpTP("dr-t", 0): 5})
    got = kp_admin.list_partition_offsets({KpTP("dr-t", 0): KpSpec.EARLIEST})
    assert list(got.values())[0].offset == 5
    got = kp_admin.list_partition_offsets({KpTP("dr-t", 0): KpSpec.MAX_TIMESTAMP})
    assert list(got.values())[0].offset == 5  # the max-timestamp record is deleted: the log start


def test_list_offsets_earliest_local_and_latest_tiered_on_the_wire(broker, admin):
    from kio.schema.list_offsets.v9.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from kio.static.primitive import i8, i32, i64
    from kio.schema.types import BrokerId, TopicName

    from .wire import Wire

    _create(admin, "lo-t")
    _produce(broker.bootstrap, "lo-t", 3)
    admin.delete_records([TopicPartition("lo-t", 0, 1)])[TopicPartition("lo-t", 0, 1)].result(10)
    w = Wire(broker.bootstrap)
    try:
        r = w.call(ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
            ListOffsetsTopic(name=TopicName("lo-t"), partitions=tuple(
                ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(ts))
                for ts in (-4, -5, -7))),)))
    finally:
        w.close()
    got = [(int(p.error_code), int(p.offset)) for p in r.topics[0].partitions]
    assert got == [(0, 1), (0, -1), (42, -1)]  # earliest-local, latest-tiered, no such spec


# -- configs --------------------------------------------------------------------------------
def _configs(admin, topic) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result(10).items() if not v.is_default}


def test_incremental_alter_configs(admin, storage):
    _create(admin, "iac-t", config={"retention.ms": "60000"})

    def alter(*entries, validate_only=False):
        res = ConfigResource(ResourceType.TOPIC, "iac-t", incremental_configs=list(entries))
        return admin.incremental_alter_configs([res], validate_only=validate_only)[res]

    alter(ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)).result(10)
    assert _configs(admin, "iac-t") == {"retention.ms": "60000", "segment.bytes": "1048576"}
    alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
          ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)).result(10)
    assert set(load_topic(storage, "iac-t").config.cleanup_policy) == {"delete", "compact"}
    assert "retention.ms" not in _configs(admin, "iac-t")
    alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)).result(10)
    assert load_topic(storage, "iac-t").config.cleanup_policy == ("compact",)
    # Validated as `topics create` validates: bad values, unknown keys, list ops on scalars.
    for entry in (ConfigEntry("segment.bytes", "tiny", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("retention.msec", "1", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.APPEND),
                  ConfigEntry("max.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)):
        assert _code(alter(entry)) == KafkaError.INVALID_CONFIG
    alter(ConfigEntry("segment.ms", "5000", incremental_operation=AlterConfigOpType.SET),
          validate_only=True).result(10)
    assert "segment.ms" not in _configs(admin, "iac-t")
    res = ConfigResource(ResourceType.TOPIC, "iac-nope", incremental_configs=[
        ConfigEntry("segment.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    assert _code(admin.incremental_alter_configs([res])[res]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_alter_configs_replaces_every_override(admin, kp_admin, storage):
    from kafka.admin import ConfigResource as KpRes, ConfigResourceType as KpType

    _create(admin, "ac-t", config={"retention.ms": "60000", "segment.ms": "70000"})
    res = ConfigResource(ResourceType.TOPIC, "ac-t", set_config={"segment.bytes": "2097152"})
    admin.alter_configs([res])[res].result(10)
    assert _configs(admin, "ac-t") == {"segment.bytes": "2097152"}  # the others back to defaults
    bad = ConfigResource(ResourceType.TOPIC, "ac-t", set_config={"retention.ms": "-7"})
    assert _code(admin.alter_configs([bad])[bad]) == KafkaError.INVALID_CONFIG
    out = kp_admin.alter_configs([KpRes(KpType.TOPIC, "ac-t", configs={"retention.ms": "120000"})],
                                 incremental=False, raise_on_unknown=False)
    assert "ac-t" in repr(out)
    # (kafka-python re-sends the other overrides it read: AlterConfigs drops what is not sent.)
    assert load_topic(storage, "ac-t").config.overrides == {"retention.ms": 120000, "segment.bytes": 2097152}
    broker_res = ConfigResource(ResourceType.BROKER, "0", set_config={"log.retention.ms": "1"})
    assert _code(admin.alter_configs([broker_res])[broker_res]) == KafkaError.INVALID_REQUEST


# -- DescribeTopicPartitions ------------------------------------------------------------------
def test_describe_topic_partitions_pages_with_a_cursor(admin, kp_admin, broker):
    _create(admin, "dtp-a", 3)
    _create(admin, "dtp-b", 2)
    got = kp_admin.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-nope"])
    text = repr(got)
    assert "dtp-a" in text and "dtp-b" in text

    from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest, TopicRequest
    from kio.static.primitive import i32
    from kio.schema.types import TopicName

    from .wire import Wire

    w = Wire(broker.bootstrap)
    seen, cursor = [], None
    try:
        for _ in range(5):
            r = w.call(DescribeTopicPartitionsRequest(
                topics=tuple(TopicRequest(name=TopicName(n)) for n in ("dtp-b", "dtp-a", "dtp-nope")),
                response_partition_limit=i32(2), cursor=cursor))
            for t in r.topics:
                seen += [(t.name, int(t.error_code), int(p.partition_index)) for p in t.partitions] or \
                    [(t.name, int(t.error_code), None)]
            if r.next_cursor is None:
                break
            from kio.schema.describe_topic_partitions.v0.request import Cursor
            cursor = Cursor(topic_name=r.next_cursor.topic_name, partition_index=r.next_cursor.partition_index)
    finally:
        w.close()
    assert [s for s in seen if s[1] == 0] == [("dtp-a", 0, 0), ("dtp-a", 0, 1), ("dtp-a", 0, 2),
                                              ("dtp-b", 0, 0), ("dtp-b", 0, 1)]
    assert ("dtp-nope", 3, None) in seen


# -- DescribeProducers and DescribeLogDirs --------------------------------------------------------
def test_describe_producers_lists_an_idempotent_producer(admin, kp_admin, broker):
    from kafka import TopicPartition as KpTP

    _create(admin, "dp-t")
    _produce(broker.bootstrap, "dp-t", 3, **{"enable.idempotence": True})
    got = kp_admin.describe_producers([KpTP("dp-t", 0)])
    state = got[KpTP("dp-t", 0)]
    text = repr(state)
    producers = getattr(state, "active_producers", None) or getattr(state, "producers", None)
    assert producers is not None, text
    assert len(producers) == 1, text
    p = producers[0]
    last_seq = p["last_sequence"] if isinstance(p, dict) else p.last_sequence
    assert last_seq == 2


def test_describe_log_dirs_reports_the_root(admin, kp_admin, broker, module_root):
    _create(admin, "ld-t", 2)
    _produce(broker.bootstrap, "ld-t", 4)
    out = kp_admin.describe_log_dirs({"ld-t": [0, 1]})
    text = repr(out)
    assert module_root in text and "ld-t" in text


# -- OffsetDelete and ListGroups filters ------------------------------------------------------------
def test_offset_delete_and_list_groups_filters(admin, kp_admin, broker):
    from confluent_kafka import Consumer
    from kafka import TopicPartition as KpTP

    _create(admin, "od-t", 2)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "od-g", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("od-t", 0, 1), TopicPartition("od-t", 1, 1)], asynchronous=False)
    c.close()

    def listed(**kw):
        return {g.group_id for g in admin.list_consumer_groups(**kw).result(10).valid}

    assert "od-g" in listed(states={ConsumerGroupState.EMPTY})
    assert "od-g" not in listed(states={ConsumerGroupState.STABLE})
    assert "od-g" in listed(types={ConsumerGroupType.CLASSIC})
    assert "od-g" not in listed(types={ConsumerGroupType.CONSUMER})
    kp_listed = kp_admin.list_groups(states_filter=["Empty"], types_filter=["classic"])
    assert "od-g" in repr(kp_listed)
    assert "od-g" not in repr(kp_admin.list_groups(types_filter=["consumer"]))

    out = kp_admin.delete_group_offsets("od-g", [KpTP("od-t", 0)])
    from kafka.errors import NoError
    assert out == {KpTP("od-t", 0): NoError}
    left = kp_admin.list_group_offsets("od-g")
    assert {tp.partition for tp in left["od-g"]} == {1}
    from kafka.errors import GroupIdNotFoundError
    with pytest.raises(GroupIdNotFoundError):
        kp_admin.delete_group_offsets("od-nope", [KpTP("od-t", 0)])


def test_list_offsets_read_committed_stops_at_an_open_transaction(admin, broker):
    """As Kafka: a read_committed lookup (latest, max timestamp, by time) answers nothing a
    read_committed consumer could not fetch: the open transaction's records are past the LSO."""
    _create(admin, "lo-txn")
    base = 1_700_000_000_000
    _produce(broker.bootstrap, "lo-txn", 2, timestamps=[base, base + 1000])
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "lo-txn-p", "linger.ms": 0})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("lo-txn", b"open", partition=0, timestamp=base + 50_000)
    assert p.flush(10) == 0
    tp = TopicPartition("lo-txn", 0)

    def offset(spec, isolation):
        futures = admin.list_offsets({tp: spec}, isolation_level=isolation)
        return futures[tp].result(10).offset

    committed, uncommitted = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
    assert offset(OffsetSpec.latest(), committed) == 2 and offset(OffsetSpec.latest(), uncommitted) == 3
    assert offset(OffsetSpec.max_timestamp(), committed) == -1
    assert offset(OffsetSpec.max_timestamp(), uncommitted) == 2
    assert offset(OffsetSpec.for_timestamp(base + 20_000), committed) == -1
    assert offset(OffsetSpec.for_timestamp(base + 20_000), uncommitted) == 2
    assert offset(OffsetSpec.for_timestamp(base + 500), committed) == 1
    p.abort_transaction(10)
