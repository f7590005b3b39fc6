"""DescribeTransactions with the authorizer on: as Kafka, a transaction's topics the caller may
not DESCRIBE are left out of the answer (the rest of the state still shows)."""
from __future__ import annotations

from confluent_kafka import Producer
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

from kafkastore.cluster.acls import Operation, ResourceType as R
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.acl_broker import allow, broker, conf, root, sasl_wire, unique  # noqa: F401 - fixtures

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def _describe(broker, user: str, tid: str):
    w = sasl_wire(broker, user)
    try:
        return w.call(DescribeTransactionsRequest(transactional_ids=(tid,))).transaction_states[0]
    finally:
        w.close()


def test_describe_transactions_lists_only_topics_the_caller_may_describe(broker, root):
    seen, hidden, tid = unique("txn-seen-"), unique("txn-hidden-"), unique("txn-desc-")
    for t in (seen, hidden):
        create_topic(Storage(root), t, 2)
    p = Producer(conf(broker, "admin", **{"transactional.id": tid, "transaction.timeout.ms": 60000}))
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(seen, b"a", partition=1)
    p.produce(hidden, b"b", partition=0)
    p.flush(15)  # both partitions added: the transaction is Ongoing over both topics
    try:
        assert int(_describe(broker, "bob", tid).error_code) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        allow(root, R.TRANSACTIONAL_ID, tid, Operation.DESCRIBE, who="User:bob")
        allow(root, R.TOPIC, seen, Operation.DESCRIBE, who="User:bob")

        def bob_sees():
            st = _describe(broker, "bob", tid)
            return st if int(st.error_code) == 0 and st.topics else None

        import time

        deadline = time.monotonic() + 10  # the broker re-reads the ACLs within acl_max_age_s
        while (st := bob_sees()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert st is not None
        assert st.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in st.topics] == [(seen, [1])]
        full = _describe(broker, "admin", tid)  # a super user sees every topic
        assert sorted((t.topic, list(t.partitions)) for t in full.topics) == sorted([(seen, [1]), (hidden, [0])])
    finally:
        p.abort_transaction(15)


CLUSTER_AUTHORIZATION_FAILED = 31


def test_write_txn_markers_needs_cluster_action(broker, root):
    """kafka-transactions.sh abort's WriteTxnMarkers: refused without ClusterAction on the
    cluster (the hanging transaction stays), accepted with it (read_committed moves past)."""
    import sys

    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.protocol.wire import codec
    from kafkastore.read.reader import PartitionReader

    topic = unique("txn-hang-")
    create_topic(Storage(root), topic, 1)
    zombie = Broker(Storage(root), producer_id=913, producer_epoch=2, housekeeping=False)
    zombie.begin_transaction()
    zombie.send(topic, b"hanging", partition=0)
    zombie.flush()
    plain = Broker(Storage(root), housekeeping=False)
    plain.send(topic, b"after", partition=0)
    plain.flush()

    def abort_as(user: str) -> int:
        req_cls = codec.request_class(27, 1)
        mod = sys.modules[req_cls.__module__]
        w = sasl_wire(broker, user)
        try:
            r = w.call(codec.make(req_cls, markers=(codec.make(
                mod, "WritableTxnMarker", producer_id=913, producer_epoch=2, transaction_result=False,
                coordinator_epoch=0, topics=(codec.make(mod, "WritableTxnMarkerTopic", name=topic,
                                                        partition_indexes=(0,)),)),)))
        finally:
            w.close()
        return int(getattr(r.markers[0].topics[0].partitions[0].error_code, "value",
                           r.markers[0].topics[0].partitions[0].error_code))

    def committed():
        return PartitionReader(Storage(root), topic, 0).read(-2).column("value").to_pylist()

    assert abort_as("bob") == CLUSTER_AUTHORIZATION_FAILED
    assert committed() == []
    assert abort_as("admin") == 0
    assert committed() == [b"after"]
