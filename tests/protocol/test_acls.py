"""Authorization with ACLs, with real clients over SASL PLAIN on loopback:
the ACL admin APIs (confluent-kafka and kafka-python admin clients), enforcement of produce,
fetch, groups, offsets, topic create and delete, transactional ids and Metadata, super users,
a change on one broker applying on another of the same root, and Kafka's error codes."""
from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ConfigResource, NewTopic, OffsetSpec,
                                   ResourcePatternType, ResourceType)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v8 import request as lo

from kafkastore.cluster.acls import Operation, PatternType, Permission, ResourceType as R
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.acl_broker import (  # noqa: F401 - fixtures
    CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED, TOPIC_AUTHORIZATION_FAILED,
    USERS, acl_options as _options, allow, broker, conf, produce, root, sasl_wire, unique, wait_for)


# -- the ACL admin APIs ------------------------------------------------------------------------
def test_confluent_admin_creates_describes_and_deletes_acls(broker):
    admin = AdminClient(conf(broker, "admin"))
    name = unique("conf-")
    good = [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, name, ResourcePatternType.PREFIXED, "User:bob", "127.0.0.1",
                       AclOperation.ALL, AclPermissionType.DENY)]
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:bob",
                     "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    results = admin.create_acls(good + [bad], request_timeout=10)
    for b in good:
        assert results[b].result() is None
    with pytest.raises(KafkaException) as refused:
        results[bad].result()
    assert refused.value.args[0].code() == INVALID_REQUEST
    assert "kafka-cluster" in refused.value.args[0].str()

    mine = AclBindingFilter(ResourceType.ANY, name, ResourcePatternType.ANY, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)
    assert sorted(map(str, admin.describe_acls(mine, request_timeout=10).result())) == sorted(map(str, good))
    # MATCH: the bindings that apply to a group named name + "x" (the prefixed one).
    match = AclBindingFilter(ResourceType.GROUP, name + "x", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match, request_timeout=10).result() == [good[1]]
    deleted = admin.delete_acls([mine], request_timeout=10)[mine].result()
    assert sorted(map(str, deleted)) == sorted(map(str, good))
    assert admin.describe_acls(mine, request_timeout=10).result() == []


def test_kafka_python_admin_acls(broker):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient,
                             ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ACLResourcePatternType, ResourceType as KR

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="admin",
                             sasl_plain_password=USERS["admin"], request_timeout_ms=10000)
    try:
        name = unique("kp-")
        acl = ACL(principal="User:bob", host="*", operation=ACLOperation.WRITE,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KR.TOPIC, name, ACLResourcePatternType.PREFIXED))
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        flt = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(KR.TOPIC, name, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(flt)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name,
                 a.resource_pattern.pattern_type) for a in found] == [
            ("User:bob", ACLOperation.WRITE, name, ACLResourcePatternType.PREFIXED)]
        deleted = admin.delete_acls([flt])
        assert len(deleted[0][1]) == 1 and admin.describe_acls(flt)[0] == []
    finally:
        admin.close()


def test_only_who_may_alter_the_cluster_manages_acls(broker, root):
    w = sasl_wire(broker, "alice")
    creation = AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                           principal="User:alice", host="*", operation=2, permission_type=3)
    assert int(w.call(CreateAclsRequest(creations=(creation,))).results[0].error_code) == \
        CLUSTER_AUTHORIZATION_FAILED
    describe = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                   pattern_type_filter=1, principal_filter=None, host_filter=None,
                                   operation=1, permission_type=1)
    assert int(w.call(describe).error_code) == CLUSTER_AUTHORIZATION_FAILED
    delete = DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1),))
    assert int(w.call(delete).filter_results[0].error_code) == CLUSTER_AUTHORIZATION_FAILED
    w.close()
    # DESCRIBE on the cluster (here implied by ALTER) lets bob list them.
    allow(root, R.CLUSTER, "kafka-cluster", Operation.ALTER, "User:bob")
    w = sasl_wire(broker, "bob")
    assert wait_for(lambda: int(w.call(describe).error_code) == 0)
    w.close()


def test_malformed_acl_requests_get_kafkas_error_codes(broker):
    w = sasl_wire(broker, "admin")

    def creation(**kw):
        fields = dict(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:x",
                      host="*", operation=3, permission_type=3)
        return AclCreation(**{**fields, **kw})

    bad = [creation(resource_type=9), creation(resource_type=1), creation(resource_pattern_type=2),
           creation(resource_pattern_type=0), creation(operation=1), creation(operation=99),
           creation(permission_type=1), creation(principal="alice"), creation(resource_name=""),
           creation(host="not-an-ip")]
    results = w.call(CreateAclsRequest(creations=tuple(bad) + (creation(),))).results
    assert [int(r.error_code) for r in results] == [INVALID_REQUEST] * len(bad) + [0]
    assert all(r.error_message for r in results[:-1])
    describe = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                   pattern_type_filter=0, principal_filter=None, host_filter=None,
                                   operation=1, permission_type=1)
    assert int(w.call(describe).error_code) == INVALID_REQUEST
    filters = (DeleteAclsFilter(resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
                                principal_filter=None, host_filter=None, operation=1, permission_type=1),
               DeleteAclsFilter(resource_type_filter=2, resource_name_filter="t", pattern_type_filter=3,
                                principal_filter="User:x", host_filter=None, operation=1, permission_type=1))
    out = w.call(DeleteAclsRequest(filters=filters)).filter_results
    assert int(out[0].error_code) == INVALID_REQUEST and int(out[1].error_code) == 0
    assert [a.resource_name for a in out[1].matching_acls] == ["t"]
    w.close()


def test_acl_apis_without_the_authorizer_answer_security_disabled(tmp_path):
    with BrokerThread(Storage("file://" + str(tmp_path)), ServeOptions(port=0)) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        acl = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
        with pytest.raises(KafkaException) as refused:
            admin.create_acls([acl], request_timeout=10)[acl].result()
        assert refused.value.args[0].code() == SECURITY_DISABLED


# -- enforcement -------------------------------------------------------------------------------
def test_produce_needs_write_and_fetch_needs_read(broker, root):
    topic = unique("data-")
    create_topic(Storage(root), topic, 1)
    err = produce(broker, "alice", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(root, R.TOPIC, topic, Operation.WRITE)
    assert wait_for(lambda: produce(broker, "alice", topic, b"hello") is None)

    def consume(user):
        c = Consumer(conf(broker, user, **{"group.id": "unused", "enable.auto.commit": False}))
        c.assign([TopicPartition(topic, 0, 0)])
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                # (the consumer also looks up its group's coordinator: alice may not, ignored)
                if m is not None and (m.error() is None or
                                      m.error().code() != KafkaError.GROUP_AUTHORIZATION_FAILED):
                    return m.error() or m.value()
            return None
        finally:
            c.close()

    got = consume("alice")
    assert isinstance(got, KafkaError) and got.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(root, R.TOPIC, topic, Operation.READ)
    # (KafkaError's == with bytes raises: compare the type first)
    assert wait_for(lambda: isinstance(got := consume("alice"), bytes) and got == b"hello")
    got = consume("admin")
    assert isinstance(got, bytes) and got == b"hello"  # super user: no ACL needed


def test_deny_wins_over_a_prefixed_allow(broker, root):
    prefix = unique("pre-")
    open_topic, closed_topic = prefix + ".open", prefix + ".closed"
    for t in (open_topic, closed_topic):
        create_topic(Storage(root), t, 1)
    allow(root, R.TOPIC, prefix, Operation.WRITE, "User:*", PatternType.PREFIXED)
    allow(root, R.TOPIC, closed_topic, Operation.WRITE, "User:bob", perm=Permission.DENY)
    assert wait_for(lambda: produce(broker, "bob", open_topic) is None)
    err = produce(broker, "bob", closed_topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(broker, "alice", closed_topic) is None


def test_group_join_and_offset_commit_need_group_and_topic_read(broker, root):
    topic, group = unique("grp-topic-"), unique("grp-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.TOPIC, topic, Operation.READ)

    def join_and_commit():
        c = Consumer(conf(broker, "alice", **{"group.id": group, "enable.auto.commit": False,
                                               "auto.offset.reset": "earliest",
                                               "session.timeout.ms": 6000}))
        errors = []
        try:
            c.subscribe([topic], on_assign=lambda *_: errors.append("assigned"))
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and not errors:
                m = c.poll(0.5)
                if m is not None and m.error():
                    errors.append(m.error().code())
            if errors == ["assigned"]:
                c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                return "committed"
            return errors[0] if errors else None
        except KafkaException as exc:
            return exc.args[0].code()
        finally:
            c.close()

    assert join_and_commit() == KafkaError.GROUP_AUTHORIZATION_FAILED
    allow(root, R.GROUP, group, Operation.READ)
    assert wait_for(lambda: join_and_commit() == "committed", 20)


def test_offset_commit_needs_topic_read(broker, root):
    topic, group = unique("oc-topic-"), unique("oc-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.GROUP, group, Operation.READ)
    c = Consumer(conf(broker, "alice", **{"group.id": group, "enable.auto.commit": False}))
    try:
        def commit():
            try:
                return c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)[0].error
            except KafkaException as exc:
                return exc.args[0]
        assert wait_for(lambda: (e := commit()) is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    finally:
        c.close()


def test_create_and_delete_topics_need_create_and_delete(broker, root):
    admin = AdminClient(conf(broker, "alice"))
    topic = unique("alice.")

    def create():
        fut = admin.create_topics([NewTopic(topic, 1)], request_timeout=10)[topic]
        try:
            fut.result()
            return None
        except KafkaException as exc:
            return exc.args[0].code()

    assert create() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(root, R.TOPIC, "alice.", Operation.CREATE, pattern=PatternType.PREFIXED)
    assert wait_for(lambda: create() is None)

    def delete():
        try:
            admin.delete_topics([topic], request_timeout=10)[topic].result()
            return None
        except KafkaException as exc:
            return exc.args[0].code()

    assert delete() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(root, R.TOPIC, topic, Operation.DELETE)
    assert wait_for(lambda: delete() is None)
    # Creating needs CREATE on the cluster or on the topic: bob has neither.
    bob = AdminClient(conf(broker, "bob"))
    with pytest.raises(KafkaException) as refused:
        bob.create_topics([NewTopic("alice.other", 1)], request_timeout=10)["alice.other"].result()
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_topics_the_principal_may_not_describe(broker, root):
    seen, hidden = unique("seen-"), unique("hidden-")
    for t in (seen, hidden):
        create_topic(Storage(root), t, 1)
    allow(root, R.TOPIC, seen, Operation.READ, "User:bob")  # READ implies DESCRIBE
    bob = AdminClient(conf(broker, "bob"))
    assert wait_for(lambda: seen in bob.list_topics(timeout=10).topics)
    listed = bob.list_topics(timeout=10).topics
    assert hidden not in listed
    assert all(not t.startswith("hidden-") for t in listed)
    # Asked for by name: TOPIC_AUTHORIZATION_FAILED, as Kafka answers.
    one = bob.list_topics(hidden, timeout=10).topics[hidden]
    assert one.error is not None and one.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert hidden in AdminClient(conf(broker, "admin")).list_topics(timeout=10).topics


def test_transactional_ids_need_write(broker, root):
    topic, tid = unique("txn-topic-"), unique("txn-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.TOPIC, topic, Operation.WRITE)

    def init():
        p = Producer(conf(broker, "alice", **{"transactional.id": tid, "transaction.timeout.ms": 10000}))
        try:
            p.init_transactions(10)
        except KafkaException as exc:
            return exc.args[0].code(), None
        return None, p

    code, _ = init()
    assert code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    allow(root, R.TRANSACTIONAL_ID, tid, Operation.WRITE)
    got = wait_for(lambda: (r := init())[0] is None and r)
    assert got, "init_transactions never succeeded"
    p = got[1]
    p.begin_transaction()
    p.produce(topic, b"in-txn")
    p.commit_transaction(10)
    c = Consumer(conf(broker, "admin", **{"group.id": "unused", "isolation.level": "read_committed"}))
    c.assign([TopicPartition(topic, 0, 0)])
    m = c.poll(10)
    c.close()
    assert m is not None and m.error() is None and m.value() == b"in-txn"


def test_a_change_on_one_broker_applies_on_another_within_seconds(root):
    topic = unique("shared-")
    create_topic(Storage(root), topic, 1)
    with BrokerThread(Storage(root), _options(acl_max_age_s=1.0)) as a, \
            BrokerThread(Storage(root), _options(acl_max_age_s=1.0)) as b:
        err = produce(b, "bob", topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # (raw: an admin client sends CreateAcls to the broker Metadata names as controller)
        w = sasl_wire(a, "admin")
        creation = AclCreation(resource_type=2, resource_name=topic, resource_pattern_type=3,
                               principal="User:bob", host="*", operation=4, permission_type=3)
        assert int(w.call(CreateAclsRequest(creations=(creation,))).results[0].error_code) == 0
        w.close()
        # The broker that took the change applies it at once...
        assert a.server.authorizer.authorize("User:bob", "127.0.0.1", Operation.WRITE, R.TOPIC, topic)
        # ...the other within its acl_max_age_s (clients write through whichever broker Metadata
        # names as the partition's leader: three brokers share this root).
        started = time.monotonic()
        assert wait_for(lambda: b.server.authorizer.authorize("User:bob", "127.0.0.1", Operation.WRITE,
                                                              R.TOPIC, topic), 10)
        assert time.monotonic() - started < 5
        # (the partition's leader may be the module's broker, with its own acl_max_age_s)
        assert wait_for(lambda: produce(a, "bob", topic) is None and produce(b, "bob", topic) is None)


def test_admin_apis_answer_kafkas_authorization_errors(broker, root):
    topic, group = unique("adm-topic-"), unique("adm-group-")
    create_topic(Storage(root), topic, 1)
    admin = AdminClient(conf(broker, "admin"))
    bob = AdminClient(conf(broker, "bob"))

    def code(future):
        try:
            future.result()
            return None
        except KafkaException as exc:
            return exc.args[0].code()

    # (raw: librdkafka looks the topic up in Metadata first, where bob does not see it)
    w = sasl_wire(broker, "bob")

    def list_offsets():
        return int(w.call(lo.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            lo.ListOffsetsTopic(name=topic, partitions=(
                lo.ListOffsetsPartition(partition_index=0, timestamp=-1),)),))).topics[0].partitions[0].error_code)

    assert list_offsets() == TOPIC_AUTHORIZATION_FAILED
    tp = TopicPartition(topic, 0)
    assert code(admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)[tp]) is None
    res = ConfigResource("topic", topic)
    assert code(bob.describe_configs([res], request_timeout=10)[res]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert code(bob.describe_consumer_groups([group], request_timeout=10)[group]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    assert code(bob.delete_consumer_groups([group], request_timeout=10)[group]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    request = ConsumerGroupTopicPartitions(group, [tp])
    assert code(bob.list_consumer_group_offsets([request], request_timeout=10)[group]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    # DESCRIBE on the topic and group: the same calls get past the authorizer.
    allow(root, R.TOPIC, topic, Operation.DESCRIBE_CONFIGS, "User:bob")
    allow(root, R.TOPIC, topic, Operation.DESCRIBE, "User:bob")
    allow(root, R.GROUP, group, Operation.DESCRIBE, "User:bob")
    assert wait_for(lambda: list_offsets() == 0)
    w.close()
    assert wait_for(lambda: code(bob.describe_configs([res], request_timeout=10)[res]) is None)
    assert code(bob.describe_consumer_groups([group], request_timeout=10)[group]) is None


def test_idempotent_producer_needs_idempotent_write_or_some_topic_write(tmp_path):
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE on any
    topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED, a fatal error for the producer."""
    root = "file://" + str(tmp_path)  # its own root: no other test's ACLs
    with BrokerThread(Storage(root), _options(acl_max_age_s=0.5)) as broker:
        _idempotent_init(broker, root)


def _idempotent_init(broker, root):
    user_topic = unique("idem-")
    w = sasl_wire(broker, "bob")

    def init():
        return int(w.call(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1)).error_code)

    allow(root, R.TOPIC, user_topic, Operation.READ, "User:bob")  # READ is not enough
    time.sleep(1.5)  # past the broker's acl_max_age_s: it has seen the READ
    assert init() == CLUSTER_AUTHORIZATION_FAILED
    allow(root, R.TOPIC, user_topic, Operation.WRITE, "User:bob")
    assert wait_for(lambda: init() == 0)
    w.close()
    # IDEMPOTENT_WRITE on the cluster is the other way (alice has no topic WRITE here).
    w = sasl_wire(broker, "alice")
    assert init() == CLUSTER_AUTHORIZATION_FAILED
    allow(root, R.CLUSTER, "kafka-cluster", Operation.IDEMPOTENT_WRITE, "User:alice")
    assert wait_for(lambda: init() == 0)
    w.close()


def test_authorized_operations_of_topics_and_groups(broker, root):
    from confluent_kafka import TopicCollection

    topic, group = unique("ops-topic-"), unique("ops-group-")
    create_topic(Storage(root), topic, 1)
    allow(root, R.TOPIC, topic, Operation.READ, "User:bob")
    allow(root, R.TOPIC, topic, Operation.ALTER_CONFIGS, "User:bob")
    allow(root, R.GROUP, group, Operation.DELETE, "User:bob")
    bob = AdminClient(conf(broker, "bob"))

    def topic_ops():
        try:
            d = bob.describe_topics(TopicCollection([topic]), request_timeout=10,
                                    include_authorized_operations=True)[topic].result()
        except KafkaException:
            return None
        return sorted(op.name for op in d.authorized_operations)

    # READ and ALTER_CONFIGS imply DESCRIBE and DESCRIBE_CONFIGS.
    assert wait_for(lambda: topic_ops() == ["ALTER_CONFIGS", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"])
    d = bob.describe_consumer_groups([group], request_timeout=10,
                                     include_authorized_operations=True)[group].result()
    assert sorted(op.name for op in d.authorized_operations) == ["DELETE", "DESCRIBE"]


def test_list_groups_shows_only_the_groups_the_principal_may_describe(broker, root):
    topic, seen, hidden = unique("lg-topic-"), unique("lg-seen-"), unique("lg-hidden-")
    create_topic(Storage(root), topic, 1)
    admin = AdminClient(conf(broker, "admin"))
    for group in (seen, hidden):  # groups with committed offsets (the super user may)
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])
        admin.alter_consumer_group_offsets([request], request_timeout=10)[group].result()
    allow(root, R.GROUP, seen, Operation.DESCRIBE)  # alice: no ACL on the cluster in this module
    alice = AdminClient(conf(broker, "alice"))

    def listed(client):
        return {g.group_id for g in client.list_consumer_groups(request_timeout=10).result().valid}

    assert wait_for(lambda: seen in listed(alice))
    assert hidden not in listed(alice)
    assert {seen, hidden} <= listed(admin)  # DESCRIBE on the cluster: every group


def test_scram_users_are_principals_too(broker, root):
    topic, other = unique("scram-"), unique("scram-other-")
    for t in (topic, other):
        create_topic(Storage(root), t, 1)
    allow(root, R.TOPIC, topic, Operation.WRITE, "User:bob")
    scram = {"sasl.mechanism": "SCRAM-SHA-256"}
    assert wait_for(lambda: produce(broker, "bob", topic, **scram) is None)
    err = produce(broker, "bob", other, **scram)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
