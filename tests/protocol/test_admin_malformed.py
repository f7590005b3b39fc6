"""Bad input to the admin APIs gets Kafka's error codes on a connection that
stays open, never a crash."""
from __future__ import annotations

import datetime

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.delete_records.v2 import request as dr
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_log_dirs.v4 import request as dld
from kio.schema.describe_producers.v0 import request as dp
from kio.schema.describe_topic_partitions.v0 import request as dtp
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from .wire import Wire

(UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_CONFIG, INVALID_REQUEST,
 OFFSET_OUT_OF_RANGE, UNSUPPORTED_ENDPOINT_TYPE) = 3, 17, 37, 40, 42, 1, 115
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


@pytest.fixture(scope="module")
def wire(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("bad-t", 2, 1)])["bad-t"].result(10)
    w = Wire(broker.bootstrap)
    yield w
    w.close()


def test_create_partitions(wire):
    def topic(name, count):
        return cp.CreatePartitionsTopic(name=TopicName(name), count=i32(count), assignments=None)

    def codes(*topics):
        r = wire.call(cp.CreatePartitionsRequest(topics=topics, timeout=TIMEOUT, validate_only=False))
        return [(x.name, int(x.error_code)) for x in r.results]

    for count in (-5, 0, 2, 2**31 - 1):
        assert codes(topic("bad-t", count)) == [("bad-t", INVALID_PARTITIONS)]
    assert codes(topic("../x", 3), topic("nope", 3), topic("__consumer_offsets", 99), topic("dup", 3),
                 topic("dup", 4)) == [
        ("../x", INVALID_TOPIC_EXCEPTION), ("nope", UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", INVALID_REQUEST), ("dup", INVALID_REQUEST), ("dup", INVALID_REQUEST)]


def test_delete_records(wire):
    def part(p, offset):
        return dr.DeleteRecordsPartition(partition_index=i32(p), offset=i64(offset))

    r = wire.call(dr.DeleteRecordsRequest(topics=(
        dr.DeleteRecordsTopic(name=TopicName("bad-t"), partitions=(part(0, -7), part(9, 0), part(-1, 0),
                                                                   part(1, 5), part(1, -1))),
        dr.DeleteRecordsTopic(name=TopicName("__consumer_offsets"), partitions=(part(0, 0),)),
        dr.DeleteRecordsTopic(name=TopicName(""), partitions=(part(0, 0),))), timeout=TIMEOUT))
    got = [(t.name, int(p.partition_index), int(p.error_code), int(p.low_watermark))
           for t in r.topics for p in t.partitions]
    assert got == [("bad-t", 0, OFFSET_OUT_OF_RANGE, -1), ("bad-t", 9, UNKNOWN_TOPIC_OR_PARTITION, -1),
                   ("bad-t", -1, UNKNOWN_TOPIC_OR_PARTITION, -1), ("bad-t", 1, OFFSET_OUT_OF_RANGE, -1),
                   ("bad-t", 1, 0, 0),  # -1: up to the high watermark (0 in an empty partition)
                   ("__consumer_offsets", 0, INVALID_TOPIC_EXCEPTION, -1), ("", 0, UNKNOWN_TOPIC_OR_PARTITION, -1)]


def test_incremental_alter_configs(wire):
    def res(name, *configs, rtype=2):
        return iac.AlterConfigsResource(resource_type=i8(rtype), resource_name=name, configs=tuple(
            iac.AlterableConfig(name=k, config_operation=i8(op), value=v) for k, op, v in configs))

    def codes(*resources):
        r = wire.call(iac.IncrementalAlterConfigsRequest(resources=resources, validate_only=False))
        return [(x.resource_name, int(x.error_code)) for x in r.responses]

    for bad, code in [((("retention.ms", 7, "1"),), INVALID_REQUEST),          # no such operation
                      ((("retention.ms", 0, None),), INVALID_REQUEST),         # SET to null
                      ((("retention.ms", 0, "1"), ("retention.ms", 1, None)), INVALID_REQUEST),  # a key twice
                      ((("", 0, "1"),), INVALID_CONFIG),                       # unknown key
                      ((("retention.ms", 0, "x" * 100_000),), INVALID_CONFIG)]:  # not a number
        assert codes(res("bad-t", *bad)) == [("bad-t", code)], bad
    assert codes(res("bad-t", ("retention.ms", 0, "1"), rtype=99), res("", ("retention.ms", 0, "1")),
                 res("__consumer_offsets", ("retention.ms", 0, "1")),
                 res("dup", ("retention.ms", 0, "1")), res("dup", ("retention.ms", 0, "2"))) == [
        ("bad-t", INVALID_REQUEST), ("", UNKNOWN_TOPIC_OR_PARTITION), ("__consumer_offsets", INVALID_REQUEST),
        ("dup", INVALID_REQUEST), ("dup", INVALID_REQUEST)]


def test_describe_apis(wire):
    r = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(2)))
    assert int(r.error_code) == UNSUPPORTED_ENDPOINT_TYPE
    r = wire.call(dtp.DescribeTopicPartitionsRequest(topics=(dtp.TopicRequest(name=TopicName("bad-t")),),
                                                     response_partition_limit=i32(-3), cursor=None))
    assert [(t.name, int(t.error_code), len(t.partitions)) for t in r.topics] == [("bad-t", 0, 1)]
    assert r.next_cursor.topic_name == "bad-t" and r.next_cursor.partition_index == 1
    r = wire.call(dtp.DescribeTopicPartitionsRequest(
        topics=(dtp.TopicRequest(name=TopicName("bad-t")),), response_partition_limit=i32(10),
        cursor=dtp.Cursor(topic_name=TopicName("other"), partition_index=i32(0))))
    assert [int(t.error_code) for t in r.topics] == [INVALID_REQUEST]
    r = wire.call(dp.DescribeProducersRequest(topics=(
        dp.TopicRequest(name=TopicName("bad-t"), partition_indexes=(i32(-1), i32(7), i32(0))),
        dp.TopicRequest(name=TopicName("nope"), partition_indexes=(i32(0),)))))
    assert [(t.name, int(p.partition_index), int(p.error_code)) for t in r.topics for p in t.partitions] == [
        ("bad-t", -1, UNKNOWN_TOPIC_OR_PARTITION), ("bad-t", 7, UNKNOWN_TOPIC_OR_PARTITION), ("bad-t", 0, 0),
        ("nope", 0, UNKNOWN_TOPIC_OR_PARTITION)]
    r = wire.call(dld.DescribeLogDirsRequest(topics=(
        dld.DescribableLogDirTopic(topic=TopicName("nope"), partitions=(i32(0),)),
        dld.DescribableLogDirTopic(topic=TopicName("bad-t"), partitions=(i32(-1), i32(1), i32(5))))))
    (result,) = r.results
    assert [(t.name, [int(p.partition_index) for p in t.partitions]) for t in result.topics] == [("bad-t", [1])]


def test_alter_configs(wire):
    from kio.schema.alter_configs.v2 import request as ac

    def res(name, *configs):
        return ac.AlterConfigsResource(resource_type=i8(2), resource_name=name, configs=tuple(
            ac.AlterableConfig(name=k, value=v) for k, v in configs))

    def codes(*resources, validate_only=False):
        r = wire.call(ac.AlterConfigsRequest(resources=resources, validate_only=validate_only))
        return [(x.resource_name, int(x.error_code)) for x in r.responses]

    assert codes(res("bad-t", ("retention.ms", None))) == [("bad-t", INVALID_REQUEST)]
    assert codes(res("bad-t", ("retention.ms", "-9"))) == [("bad-t", INVALID_CONFIG)]
    assert codes(res("bad-t", ("cleanup.policy", "compact,shred"))) == [("bad-t", INVALID_CONFIG)]
    assert codes(res("nope", ("retention.ms", "1"))) == [("nope", UNKNOWN_TOPIC_OR_PARTITION)]
    assert codes(res("bad-t", ("retention.ms", "1")), validate_only=True) == [("bad-t", 0)]
