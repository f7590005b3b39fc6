"""DescribeTransactions with the authorizer on: as Kafka, a transaction's topics the caller may
not DESCRIBE are left out of the answer (the rest of the state still shows)."""
from __future__ import annotations

from confluent_kafka import Producer
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

from kafkastore.acls import Operation, ResourceType as R
from kafkastore.storage import Storage
from kafkastore.topics import create_topic

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
