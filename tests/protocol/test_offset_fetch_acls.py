"""OffsetFetch tells nothing about partitions whose topic the caller may not describe:
offset -1, empty metadata and TOPIC_AUTHORIZATION_FAILED, as Kafka answers."""
from __future__ import annotations

import sys
import time

from kafkastore.cluster.acls import Operation, ResourceType as R
from kafkastore.protocol.wire import codec
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.acl_broker import (  # noqa: F401 - fixtures
    TOPIC_AUTHORIZATION_FAILED, allow, broker, root, sasl_wire, unique)


def _req(api, version, /, **kw):
    return codec.make(codec.request_class(api, version), **kw)


def _part(api, version, cls, /, **kw):
    return codec.make(sys.modules[codec.request_class(api, version).__module__], cls, **kw)


def _code(x) -> int:
    return int(getattr(x, "value", x))


def test_offset_fetch_hides_offsets_of_topics_the_caller_may_not_describe(broker, root):
    secret, group = unique("secret-"), unique("g-")
    create_topic(Storage(root), secret, 1)
    admin = sasl_wire(broker, "admin")
    r = admin.call(_req(8, 6, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        topics=(_part(8, 6, "OffsetCommitRequestTopic", name=secret, partitions=(
                            _part(8, 6, "OffsetCommitRequestPartition", partition_index=0,
                                  committed_offset=4242, committed_leader_epoch=7,
                                  committed_metadata="payroll run 17"),)),)))
    assert _code(r.topics[0].partitions[0].error_code) == 0
    allow(root, R.GROUP, group, Operation.DESCRIBE, who="User:bob")
    bob = sasl_wire(broker, "bob")
    for _ in range(50):   # the grant reaches the broker within its acl_max_age_s
        r = bob.call(_req(9, 5, group_id=group, require_stable=False, topics=(
            _part(9, 5, "OffsetFetchRequestTopic", name=secret, partition_indexes=(0,)),)))
        if _code(r.error_code) == 0:
            break
        time.sleep(0.1)
    assert _code(r.error_code) == 0
    p = r.topics[0].partitions[0]
    assert _code(p.error_code) == TOPIC_AUTHORIZATION_FAILED
    assert (p.committed_offset, p.committed_leader_epoch, p.metadata) == (-1, -1, "")


def _commit_as_admin(broker, group: str, offsets: dict[str, int]) -> None:
    admin = sasl_wire(broker, "admin")
    r = admin.call(_req(8, 6, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        topics=tuple(_part(8, 6, "OffsetCommitRequestTopic", name=t, partitions=(
                            _part(8, 6, "OffsetCommitRequestPartition", partition_index=0,
                                  committed_offset=o, committed_leader_epoch=-1,
                                  committed_metadata=f"md-{t}"),)) for t, o in offsets.items())))
    assert all(_code(p.error_code) == 0 for t in r.topics for p in t.partitions)
    admin.close()


def _grant_bob(root, group: str, visible: str) -> None:
    allow(root, R.GROUP, group, Operation.DESCRIBE, who="User:bob")
    allow(root, R.TOPIC, visible, Operation.DESCRIBE, who="User:bob")


def test_offset_fetch_of_all_topics_lists_only_describable_ones(broker, root):
    secret, visible, group = unique("secret-"), unique("open-"), unique("g-")
    for t in (secret, visible):
        create_topic(Storage(root), t, 1)
    _commit_as_admin(broker, group, {secret: 11, visible: 22})
    _grant_bob(root, group, visible)
    bob = sasl_wire(broker, "bob")
    for version in (2, 5, 7):   # topics=None: every topic of the group (v2+)
        def listed():
            kw = {"require_stable": False} if version >= 7 else {}
            r = bob.call(_req(9, version, group_id=group, topics=None, **kw))
            return {t.name: [(p.committed_offset, p.metadata) for p in t.partitions] for t in r.topics}
        deadline = time.monotonic() + 10
        while listed() != {visible: [(22, f"md-{visible}")]}:
            assert time.monotonic() < deadline, (version, listed())
            time.sleep(0.1)


def _sized(metadata: str | None, topic: str) -> str:
    """The metadata as committed by _commit_as_admin, cut to its known length."""
    md = metadata or ""
    return md[:len(f"md-{topic}")] if md.startswith(f"md-{topic}") else md


def test_admin_clients_see_no_offsets_of_topics_they_may_not_describe(broker, root):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import ConsumerGroupTopicPartitions
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP

    from tests.helpers.acl_broker import USERS, conf, wait_for

    secret, visible, group = unique("secret-"), unique("open-"), unique("g-")
    for t in (secret, visible):
        create_topic(Storage(root), t, 1)
    _commit_as_admin(broker, group, {secret: 11, visible: 22})
    _grant_bob(root, group, visible)
    bob = AdminClient(conf(broker, "bob"))

    def offsets(parts=None):
        # confluent-kafka builds TopicPartition.metadata with a C-string read of librdkafka's
        # buffer, which is sized, not NUL-terminated: now and then a stray byte follows
        # (CI saw 'md-x '), and a stray byte that is not UTF-8 raises UnicodeDecodeError in
        # the client itself: asked again then. The broker's bytes are checked exactly by the
        # wire tests above.
        for attempt in range(5):
            req = ConsumerGroupTopicPartitions(group, parts)
            try:
                got = bob.list_consumer_group_offsets([req], request_timeout=10)[group].result()
                return {(tp.topic, tp.offset, _sized(tp.metadata, tp.topic), tp.error is not None)
                        for tp in got.topic_partitions}
            except UnicodeDecodeError:
                if attempt == 4:
                    raise

    def sees_visible_only():
        try:
            return offsets() == {(visible, 22, f"md-{visible}", False)}
        except Exception:  # noqa: BLE001 - GROUP_AUTHORIZATION_FAILED until the grant is read
            return False

    assert wait_for(sees_visible_only), offsets()
    named = offsets([TopicPartition(secret, 0), TopicPartition(visible, 0)])
    assert (visible, 22, f"md-{visible}", False) in named
    assert not any(t == secret and (o >= 0 or md) for t, o, md, _ in named), named

    kbob = KafkaAdminClient(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="bob",
                            sasl_plain_password=USERS["bob"], request_timeout_ms=10000)
    try:
        every = kbob.list_group_offsets({group: None})[group]
        assert {tp.topic: om.offset for tp, om in every.items()} == {visible: 22}
        try:
            named = kbob.list_group_offsets({group: [KTP(secret, 0), KTP(visible, 0)]})[group]
        except Exception as exc:  # noqa: BLE001 - kafka-python may raise the partition's error
            assert "TopicAuthorization" in type(exc).__name__ + str(exc), exc
        else:
            assert {tp.topic: (om.offset, om.metadata or "") for tp, om in named.items()
                    if tp.topic == secret} in ({}, {secret: (-1, "")}), named
    finally:
        kbob.close()
