"""Transactions across broker deaths, KIP-360 and bad input, over the wire.

Two `kafkastore serve` processes share one root; the one coordinating the transactional id
SIGKILLs itself at an exact coordinator step (``KAFKASTORE_FAULT=txn:<step>``), and the
transaction is finished by the other broker from what ``__transaction_state`` holds.
"""
from __future__ import annotations

import time
import uuid

import pytest

from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.txn import consume_values as _consume, txn_producer as _producer
from tests.helpers.txn import stop_all as _stop_all, tid_owned_by as _tid_owned_by
from tests.helpers.txn import two_serves as _two_serves

ck = pytest.importorskip("confluent_kafka")


@pytest.mark.parametrize("step", ["after-add-partitions", "before-markers", "after-markers"])
def test_coordinator_killed_at_a_step_another_broker_finishes_the_transaction(tmp_path, monkeypatch, step):
    """The coordinator dies right after a state write (Ongoing; Prepare before any marker;
    every marker but before Complete); the producer's retries reach broker 1, which finishes
    from the stored state: read_committed sees every record of the transaction once, the
    aborted one before it never, and nothing while the transaction is unfinished."""
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    topic = "t-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 2)
    procs, ports = _two_serves(root, monkeypatch, "txn:" + step)
    try:
        tid = _tid_owned_by(0, "tx-fault")
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        p = _producer(bootstrap, tid, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        p.begin_transaction()
        p.produce(topic, b"k0", partition=0)
        p.flush(30)  # after-add-partitions: AddPartitions lands, the broker dies unanswered
        for i in range(1, 10):
            p.produce(topic, b"k%d" % i, partition=i % 2)
        p.flush(30)
        # Open: read_committed readers of the same root see none of it.
        assert _consume(f"127.0.0.1:{ports[1]}", topic, 2, "read_committed", expect=1, wait_s=1) == []
        p.commit_transaction(60)  # EndTxn retried at broker 1 once broker 0 is gone
        assert procs[0].wait(10) == -9  # the fault fired (at that step: the others never run)
        p.begin_transaction()
        p.produce(topic, b"aborted", partition=1)
        p.flush(10)
        p.abort_transaction(15)
        got = _consume(f"127.0.0.1:{ports[1]}", topic, 2, "read_committed", expect=10)
        assert sorted(got) == sorted(b"k%d" % i for i in range(10))
        from kafkastore.protocol.coordinators.txn_store import TxnStore
        from kafkastore.protocol.coordinators.txn import TxnState

        deadline = time.time() + 10  # Complete is stored lazily (txn_service.COMPLETE_DELAY_S)
        while time.time() < deadline and TxnStore(storage).get(tid).state is not TxnState.COMPLETE_ABORT:
            time.sleep(0.2)
        assert TxnStore(storage).get(tid).state is TxnState.COMPLETE_ABORT
    finally:
        _stop_all(procs)


def _rewind(consumer) -> None:
    """Back to the group's committed offsets (the documented loop, after an abort)."""
    committed = consumer.committed(consumer.assignment(), 10)
    for tp in committed:
        consumer.seek(ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def _coordinator_of(bootstrap: str, key: str) -> int:
    """The node id a broker names as ``key``'s group coordinator (FindCoordinator v4)."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    from .wire import Wire

    w = Wire(bootstrap)
    try:
        return int(w.call(FindCoordinatorRequest(key_type=0, coordinator_keys=(key,))).coordinators[0].node_id)
    finally:
        w.close()


def _bounded(seconds: float, call):
    """``call()``'s result (or its exception), failing the test if it has not returned within
    ``seconds``: librdkafka's blocking calls hold the thread in C, where pytest's timeout
    cannot interrupt them."""
    import threading

    out: list = []

    def run():
        try:
            out.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            out.append((False, exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"the call did not return within {seconds} s"
    ok, value = out[0]
    if not ok:
        raise value
    return value


@pytest.mark.timeout(120)
def test_send_offsets_after_the_group_coordinator_left_metadata(tmp_path):
    """librdkafka ends its handle of a broker missing from a Metadata answer, and a group
    coordinator it had cached on that handle then waits for ever: send_offsets_to_transaction
    hung past its own timeout (confluentinc/librdkafka#5511, #5456). A dead broker stays listed
    (leading and coordinating nothing) for a while, so the lookup fails over."""
    import signal

    from tests.helpers.serve_procs import free_port, start_serve, wait_until_listed

    root = f"file://{tmp_path}/root"
    src, dst = "in-" + uuid.uuid4().hex[:6], "out-" + uuid.uuid4().hex[:6]
    create_topic(Storage(root), src, 1)
    create_topic(Storage(root), dst, 1)
    ports = [free_port(), free_port()]
    procs = [start_serve(root, ports[0], 0), start_serve(root, ports[1], 1)]
    # Both brokers known to the client before one dies: a client that has seen one broker
    # only re-bootstraps when it dies, and librdkafka then drops the coordinator it cached.
    wait_until_listed([f"127.0.0.1:{p}" for p in ports])
    try:
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        tid, group = _tid_owned_by(0, "tx-md"), _tid_owned_by(0, "g-md")
        meta = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
        p = _producer(bootstrap, tid, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        p.begin_transaction()
        p.produce(dst, b"a", partition=0)
        p.send_offsets_to_transaction([ck.TopicPartition(src, 0, 1)], meta, 20)  # caches broker 0
        p.commit_transaction(20)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        deadline = time.time() + 30  # broker 1 takes over once broker 0's heartbeat is stale
        while time.time() < deadline and _coordinator_of(f"127.0.0.1:{ports[1]}", group) != 1:
            time.sleep(0.2)
        p.list_topics(timeout=10)  # a Metadata answer from broker 1, after broker 0 died
        p.begin_transaction()
        p.produce(dst, b"b", partition=0)
        _bounded(40, lambda: p.send_offsets_to_transaction([ck.TopicPartition(src, 0, 2)], meta, 20))
        p.commit_transaction(20)
        got = _consume(f"127.0.0.1:{ports[1]}", dst, 1, "read_committed", expect=2)
        assert sorted(got) == [b"a", b"b"]
    finally:
        _stop_all(procs)


# A hang inside librdkafka's C call cannot be interrupted by this marker (see _bounded); it
# bounds everything else.
@pytest.mark.timeout(240)
def test_consume_transform_produce_survives_a_broker_killed_midway(tmp_path):
    """confluent-kafka's exactly-once loop (send_offsets_to_transaction) between two topics;
    the broker coordinating the transactional id and the group is SIGKILLed after a few
    transactions: the output holds every input record exactly once."""
    import signal

    from tests.helpers.serve_procs import free_port, start_serve, wait_until_listed

    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    src, dst = "in-" + uuid.uuid4().hex[:6], "out-" + uuid.uuid4().hex[:6]
    create_topic(storage, src, 2)
    create_topic(storage, dst, 2)
    ports = [free_port(), free_port()]
    procs = [start_serve(root, ports[0], 0), start_serve(root, ports[1], 1)]
    # Both brokers known to the client before one dies: a client that has seen one broker
    # only re-bootstraps when it dies, and librdkafka then drops the coordinator it cached.
    wait_until_listed([f"127.0.0.1:{p}" for p in ports])
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    n = 300
    try:
        plain = ck.Producer({"bootstrap.servers": bootstrap})
        for i in range(n):
            plain.produce(src, b"%d" % i, partition=i % 2)
        plain.flush(10)
        tid, group = _tid_owned_by(0, "tx-ctp"), _tid_owned_by(0, "g-ctp")
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        consumer.subscribe([src])
        producer = _producer(bootstrap, tid, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        done = commits = 0
        deadline = time.time() + 90
        while done < n and time.time() < deadline:
            msgs = [m for m in consumer.consume(25, 0.5) if m.error() is None]
            if not msgs:
                continue
            try:
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(dst, b"t" + m.value(), partition=m.partition())
                # The next offset of each partition this batch read (positions of partitions
                # just reassigned by the rebalance after the kill may not be known yet).
                nxt = {}
                for m in msgs:
                    nxt[m.partition()] = max(nxt.get(m.partition(), 0), m.offset() + 1)
                _bounded(60, lambda: producer.send_offsets_to_transaction(
                    [ck.TopicPartition(src, q, o) for q, o in nxt.items()], consumer.consumer_group_metadata(), 30))
                producer.commit_transaction(60)
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    producer.abort_transaction(60)
                    _rewind(consumer)
                    continue
                raise
            done += len(msgs)
            commits += 1
            if commits == 3:
                procs[0].send_signal(signal.SIGKILL)  # midway: the coordinator of both
                procs[0].wait(10)
        consumer.close()
        assert done >= n
        out = _consume(f"127.0.0.1:{ports[1]}", dst, 2, "read_committed", expect=n)
        assert sorted(out) == sorted(b"t%d" % i for i in range(n))  # each once: no loss, no duplicate
    finally:
        _stop_all(procs)
