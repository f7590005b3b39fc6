"""Internal topics: clients may read them, never delete, create or produce to them."""
from __future__ import annotations

from kio.schema.metadata.v12 import request as md_req

from kafkastore.groups.offsets import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG
from kafkastore.manifest import ManifestStore
from kafkastore.topics.admin import create_topic, topic_exists

from .wire import Wire
from tests.helpers.wire_requests import batch, produce

INVALID_TOPIC_EXCEPTION = 17


def _offsets_topic(storage):
    if not topic_exists(storage, OFFSETS_TOPIC):
        create_topic(storage, OFFSETS_TOPIC, 2, OFFSETS_TOPIC_CONFIG)


def test_admin_client_cannot_delete_or_create_internal_topics(broker, storage):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    _offsets_topic(storage)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.delete_topics([OFFSETS_TOPIC], operation_timeout=10)[OFFSETS_TOPIC]
    try:
        fut.result(10)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.TOPIC_EXCEPTION
    else:
        raise AssertionError("deleting __consumer_offsets succeeded")
    assert topic_exists(storage, OFFSETS_TOPIC)
    fut = admin.create_topics([NewTopic("__transaction_state", 1, 1)])["__transaction_state"]
    try:
        fut.result(10)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.TOPIC_EXCEPTION
    else:
        raise AssertionError("creating __transaction_state succeeded")
    assert not topic_exists(storage, "__transaction_state")


def test_producer_cannot_write_internal_topics(broker, storage):
    from confluent_kafka import KafkaError, Producer

    _offsets_topic(storage)
    before = ManifestStore(storage, OFFSETS_TOPIC, 0).latest()
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000})
    p.produce(OFFSETS_TOPIC, b"junk", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]
    after = ManifestStore(storage, OFFSETS_TOPIC, 0).latest()
    assert (after.version if after else 0) == (before.version if before else 0)
    w = Wire(broker.bootstrap)
    assert produce(w, OFFSETS_TOPIC, 1, batch([b"x"]))[0] == INVALID_TOPIC_EXCEPTION
    w.close()


def test_metadata_marks_internal_topics(broker, storage):
    _offsets_topic(storage)
    create_topic(storage, "__not_ours", 1)
    w = Wire(broker.bootstrap)
    r = w.call(md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
    w.close()
    internal = {t.name: t.is_internal for t in r.topics}
    assert internal[OFFSETS_TOPIC] is True
    assert internal["__not_ours"] is False  # only the names kafkastore owns
