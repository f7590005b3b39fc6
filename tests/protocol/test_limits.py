"""Bounded work and state for client-chosen numbers."""
from __future__ import annotations

import datetime
import threading
import time

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.metadata.v12 import request as md_req
from kio.schema.produce.v9 import request as prod_req

from kafkastore.protocol.apis.admin import MAX_PARTITIONS
from kafkastore.topics.admin import create_topic, topic_exists

from .wire import Wire
from tests.helpers.wire_requests import batch, produce

INVALID_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION = 37, 3


def _api_versions_ok(bootstrap) -> float:
    """Seconds an ApiVersions round trip takes on a new connection."""
    started = time.monotonic()
    w = Wire(bootstrap, timeout=5)
    assert int(w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
               .error_code) == 0
    w.close()
    return time.monotonic() - started


def test_create_topics_partition_count_is_bounded(broker, storage):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics([NewTopic("huge", MAX_PARTITIONS + 1, 1)])["huge"]
    try:
        fut.result(10)
    except KafkaException as exc:
        err = exc.args[0]
        assert err.code() == KafkaError.INVALID_PARTITIONS and str(MAX_PARTITIONS) in err.str()
    else:
        raise AssertionError("accepted")
    # librdkafka stops at 100,000: 2^31-1 (the count that froze every broker) over the wire.
    w = Wire(broker.bootstrap, timeout=10)
    r = w.call(ct_req.CreateTopicsRequest(topics=(ct_req.CreatableTopic(
        name="huger", num_partitions=2**31 - 1, replication_factor=-1, assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=10), validate_only=False))
    w.close()
    assert int(r.topics[0].error_code) == INVALID_PARTITIONS
    assert not topic_exists(storage, "huge") and not topic_exists(storage, "huger")
    assert _api_versions_ok(broker.bootstrap) < 2


def test_metadata_of_an_oversized_topic_never_blocks_the_event_loop(broker, storage):
    """A topic made before the limit (2^31-1 partitions in _topic.json): Metadata refuses it and
    the broker keeps answering everyone meanwhile."""
    create_topic(storage, "made-before-the-limit", 2**31 - 1)
    w = Wire(broker.bootstrap, timeout=10)
    r = w.call(md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(topic_id=None,
                                                                          name="made-before-the-limit"),),
                                      allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
    w.close()
    assert int(r.topics[0].error_code) == INVALID_PARTITIONS and r.topics[0].partitions == ()
    assert _api_versions_ok(broker.bootstrap) < 2


def test_produce_to_unknown_partitions_leaves_no_state(broker, storage):
    create_topic(storage, "few-parts", 2)
    appender = broker.server.appender
    data = batch([b"v"])
    req = prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        prod_req.TopicProduceData(name="few-parts", partition_data=tuple(
            prod_req.PartitionProduceData(index=i, records=data) for i in range(2, 20_002))),
        prod_req.TopicProduceData(name="no-such-topic", partition_data=tuple(
            prod_req.PartitionProduceData(index=i, records=data) for i in range(100))),))
    before = set(appender._workers)
    w = Wire(broker.bootstrap, timeout=30)
    r = w.call(req)
    codes = {int(p.error_code) for t in r.responses for p in t.partition_responses}
    assert codes == {UNKNOWN_TOPIC_OR_PARTITION}
    assert set(appender._workers) <= before and len(appender._queues) <= len(before)
    w.close()


def test_idle_partition_workers_go_away(broker, storage):
    create_topic(storage, "idle-parts", 3)
    appender = broker.server.appender
    old = appender.idle_s
    appender.idle_s = 0.2
    try:
        w = Wire(broker.bootstrap)
        for p in range(3):
            assert produce(w, "idle-parts", p, batch([b"v"]))[0] == 0
        w.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(tp[0] == "idle-parts" for tp in appender._workers):
            time.sleep(0.05)
        assert not any(tp[0] == "idle-parts" for tp in list(appender._workers) + list(appender._queues))
        # A partition whose worker went away takes appends again.
        w = Wire(broker.bootstrap)
        assert produce(w, "idle-parts", 0, batch([b"again"])) == (0, 1)
        w.close()
    finally:
        appender.idle_s = old
