"""Transactions over the wire with confluent-kafka's (librdkafka) transactional producer.

The broker fixture (tests/protocol/conftest.py) serves a file root; each test uses its own
topic and transactional id.
"""
from __future__ import annotations

import time
import uuid

import pytest

from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.txn import (consume_values as _consume, produce_raw as _produce, txn_producer as _producer,
                               txn_batch as _txn_batch)

ck = pytest.importorskip("confluent_kafka")


def _topic(storage: Storage, partitions: int = 2) -> str:
    name = "txn-" + uuid.uuid4().hex[:8]
    create_topic(storage, name, partitions)
    return name


def test_commit_over_two_partitions_is_visible_to_read_committed(broker, storage):
    topic = _topic(storage)
    p = _producer(broker.bootstrap, "tx-commit-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"c%d" % i, partition=i % 2)
    p.commit_transaction(15)
    got = _consume(broker.bootstrap, topic, 2, "read_committed", expect=10)
    assert sorted(got) == sorted(b"c%d" % i for i in range(10))


def test_abort_is_invisible_to_read_committed_and_visible_to_read_uncommitted(broker, storage):
    topic = _topic(storage)
    p = _producer(broker.bootstrap, "tx-abort-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, b"a%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"kept", partition=0)
    p.commit_transaction(15)
    committed = _consume(broker.bootstrap, topic, 2, "read_committed", expect=1)
    assert committed == [b"kept"]
    everything = _consume(broker.bootstrap, topic, 2, "read_uncommitted", expect=7)
    assert sorted(everything) == sorted([b"kept"] + [b"a%d" % i for i in range(6)])


def test_open_transaction_holds_back_read_committed(broker, storage):
    topic = _topic(storage, 1)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    p = _producer(broker.bootstrap, "tx-open-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(10)
    plain.produce(topic, b"after", partition=0)
    plain.flush(10)
    # Read_uncommitted sees both; read_committed stops at the open transaction's first offset.
    assert sorted(_consume(broker.bootstrap, topic, 1, "read_uncommitted", expect=2)) == [b"after", b"open"]
    assert _consume(broker.bootstrap, topic, 1, "read_committed", expect=1, wait_s=2) == []
    p.commit_transaction(15)
    assert _consume(broker.bootstrap, topic, 1, "read_committed", expect=2) == [b"open", b"after"]


def test_zombie_is_fenced_and_its_records_never_visible(broker, storage):
    topic = _topic(storage)
    tid = "tx-zombie-" + uuid.uuid4().hex[:6]
    zombie = _producer(broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(10)
    fresh = _producer(broker.bootstrap, tid)  # bumps the epoch: the zombie's transaction aborts
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=1)
    fresh.commit_transaction(15)
    with pytest.raises(ck.KafkaException) as info:
        zombie.produce(topic, b"late", partition=0)
        zombie.commit_transaction(10)
    assert info.value.args[0].fatal() or info.value.args[0].code() in (
        ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert _consume(broker.bootstrap, topic, 2, "read_committed", expect=1) == [b"fresh"]


def test_send_offsets_to_transaction_commits_group_offsets_only_on_commit(broker, storage):
    topic = _topic(storage, 1)
    group = "eos-" + uuid.uuid4().hex[:6]
    # read_uncommitted: it asks for the offsets as stored. A read_committed consumer asks
    # for stable ones and waits while the transaction is open (test_unstable_offsets.py).
    admin_consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_uncommitted"})
    p = _producer(broker.bootstrap, "tx-offsets-" + uuid.uuid4().hex[:6])
    meta = admin_consumer.consumer_group_metadata()

    def committed() -> int:
        return admin_consumer.committed([ck.TopicPartition(topic, 0)], 10)[0].offset

    p.begin_transaction()
    p.produce(topic, b"x", partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 5)], meta, 10)
    assert committed() < 0  # pending: not visible before the commit
    p.abort_transaction(15)
    assert committed() < 0
    p.begin_transaction()
    p.produce(topic, b"y", partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 7)], meta, 10)
    assert committed() < 0
    p.commit_transaction(15)
    assert committed() == 7
    admin_consumer.close()


# -- the protocol, request by request ------------------------------------------------------------
def test_wire_refusals_markers_and_aborted_list(broker, storage):
    import datetime

    from kio.schema.add_partitions_to_txn.v3 import request as ap
    from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1
    from kio.schema.end_txn.v3.request import EndTxnRequest
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    from tests.helpers.wire_requests import fetch

    from .wire import Wire

    topic = _topic(storage, 1)
    tid = "tx-wire-" + uuid.uuid4().hex[:6]
    w = Wire(broker.bootstrap)
    try:
        init = w.call(InitProducerIdRequest(transactional_id=tid,
                                            transaction_timeout=datetime.timedelta(seconds=60),
                                            producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch
        assert int(init.error_code) == 0 and pid > 0
        # Not added to the transaction yet / no transactional id / unknown id: refused, nothing stored.
        assert _produce(w, topic, 0, _txn_batch([b"x"], pid, epoch, 0), tid)[0] == 48
        assert _produce(w, topic, 0, _txn_batch([b"x"], pid, epoch, 0), None)[0] == 48
        assert _produce(w, topic, 0, _txn_batch([b"x"], pid, epoch, 0), "tx-nobody")[0] == 48

        def add(e):
            r = w.call(ap.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=e,
                v3_and_below_topics=(ap.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)))
            return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

        assert add(epoch) == 0
        assert _produce(w, topic, 0, _txn_batch([b"a", b"b"], pid, epoch, 0), tid) == (0, 0)
        assert _produce(w, topic, 0, _txn_batch([b"c"], pid, epoch - 1 if epoch else 7, 2), tid)[0] == 47
        # Read_committed stops at the open transaction; read_uncommitted sees it.
        rc = fetch(w, topic, 0, 0, isolation=1)
        assert rc.last_stable_offset == 0 and rc.high_watermark == 2 and not rc.records
        assert fetch(w, topic, 0, 0).records
        end = lambda commit, e=epoch: int(w.call(EndTxnRequest(  # noqa: E731
            transactional_id=tid, producer_id=pid, producer_epoch=e, committed=commit)).error_code)
        assert end(False) == 0
        assert end(False) == 0          # a retry after completion
        assert end(True) == 48          # the other way: INVALID_TXN_STATE
        rc = fetch(w, topic, 0, 0, isolation=1)
        assert rc.last_stable_offset == 3 and rc.high_watermark == 3  # data + ABORT marker
        assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [(pid, 0)]
        # Any epoch but the current one is fenced, as Kafka's coordinator (old EndTxn versions
        # get INVALID_PRODUCER_EPOCH); unknown ids.
        assert end(True, epoch + 1) == 90
        w.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60),
                                     producer_id=-1, producer_epoch=-1))
        assert end(True) == 90
        assert int(w.call(EndTxnV1(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=True)).error_code) == 47
        assert add(epoch) == 90
        assert int(w.call(EndTxnRequest(transactional_id="tx-unknown-" + tid, producer_id=pid,
                                        producer_epoch=0, committed=True)).error_code) == 49
    finally:
        w.close()


def test_a_transaction_open_past_its_timeout_is_aborted_and_the_producer_fenced(broker, storage):
    topic = _topic(storage, 1)
    p = _producer(broker.bootstrap, "tx-timeout-" + uuid.uuid4().hex[:6],
                  **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce(topic, b"late", partition=0)
    p.flush(10)
    time.sleep(3.5)  # the coordinator checks every second
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(10)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after", partition=0)
    plain.flush(10)
    # The LSO moved past the aborted transaction: only the later record is visible.
    assert _consume(broker.bootstrap, topic, 1, "read_committed", expect=1) == [b"after"]


# -- two brokers on one root: coordinators on different brokers, a step finished by another ------
def _two_brokers(tmp_path):
    from kafkastore.protocol.server import BrokerThread, ServeOptions

    root = "file://" + str(tmp_path)
    brokers = [BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=300))
               for _ in range(2)]
    for b in brokers:
        b.start()
    deadline = time.time() + 10
    while time.time() < deadline and not all(len(b.server.live_brokers()) == 2 for b in brokers):
        time.sleep(0.1)
    assert all(len(b.server.live_brokers()) == 2 for b in brokers)
    return root, brokers


def _owner(key: str, brokers) -> int:
    from kafkastore.protocol.apis.groups import coordinator_node

    node = coordinator_node(key, brokers[0].server.live_brokers())[0]
    return next(i for i, b in enumerate(brokers) if b.server.node_id == node)


def test_offsets_committed_by_another_brokers_transaction_reach_the_group(tmp_path):
    root, brokers = _two_brokers(tmp_path)
    try:
        storage = Storage(root)
        topic = _topic(storage, 1)
        # A group and a transactional id coordinated by different brokers.
        group = next(g for g in ("g-%d" % i for i in range(100)) if _owner(g, brokers) == 0)
        tid = next(t for t in ("t-%d" % i for i in range(100)) if _owner(t, brokers) == 1)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[ck.TopicPartition(topic, 0, 1)], asynchronous=False)  # the group is loaded
        assert c.committed([ck.TopicPartition(topic, 0)], 10)[0].offset == 1
        p = _producer(bootstrap, tid)
        p.begin_transaction()
        p.produce(topic, b"v", partition=0)
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 3)], c.consumer_group_metadata(), 10)
        p.commit_transaction(15)
        assert c.committed([ck.TopicPartition(topic, 0)], 10)[0].offset == 3
        c.close()
    finally:
        for b in brokers:
            b.stop()


def test_a_prepared_commit_left_by_a_dead_coordinator_is_finished_by_the_next(tmp_path):
    """The coordinator died after writing PrepareCommit (before any marker): the producer's
    retried EndTxn at the broker now coordinating the id writes the markers and completes."""
    import datetime

    from kio.schema.add_partitions_to_txn.v3 import request as ap
    from kio.schema.end_txn.v3.request import EndTxnRequest
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    from kafkastore.protocol.coordinators import txn as T
    from kafkastore.protocol.coordinators.txn_store import TxnStore
    from tests.helpers.wire_requests import fetch

    from .wire import Wire

    root, brokers = _two_brokers(tmp_path)
    try:
        storage = Storage(root)
        topic = _topic(storage, 2)
        tid = "t-prepared"
        owner = brokers[_owner(tid, brokers)]
        w = Wire(owner.bootstrap)
        init = w.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60),
                                            producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch
        r = w.call(ap.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(ap.AddPartitionsToTxnTopic(name=topic, partitions=(0, 1)),)))
        assert {int(x.partition_error_code) for x in r.results_by_topic_v3_and_below[0].results_by_partition} == {0}
        for part in (0, 1):
            assert _produce(w, topic, part, _txn_batch([b"p%d" % part], pid, epoch, 0), tid)[0] == 0
        w.close()
        # What a coordinator that died right after step 1 of EndTxn leaves behind.
        store = TxnStore(storage)
        cur = store.get(tid)
        store.put(T.end_txn(cur, pid, epoch, True, int(time.time() * 1000)).meta)
        owner.stop()
        brokers.remove(owner)
        survivor = next(b for b in brokers if b is not owner)
        deadline = time.time() + 15
        while time.time() < deadline and len(survivor.server.live_brokers()) != 1:
            time.sleep(0.2)
        w = Wire(survivor.bootstrap)
        assert fetch(w, topic, 0, 0, isolation=1).last_stable_offset == 0  # still held back
        assert int(w.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                        committed=True)).error_code) == 0
        for part in (0, 1):
            f = fetch(w, topic, part, 0, isolation=1)
            assert f.last_stable_offset == 2 and f.records and not f.aborted_transactions
        # Complete is stored lazily (txn_service.COMPLETE_DELAY_S after the markers).
        deadline = time.time() + 10
        while time.time() < deadline and TxnStore(storage).get(tid).state is not T.TxnState.COMPLETE_COMMIT:
            time.sleep(0.2)
        assert TxnStore(storage).get(tid).state is T.TxnState.COMPLETE_COMMIT
        w.close()
    finally:
        for b in brokers:
            b.stop()


# -- other clients ------------------------------------------------------------------------------
def test_aiokafka_transactions_commit_abort_and_offsets(broker, storage):
    """aiokafka speaks older versions (InitProducerId, AddPartitionsToTxn, EndTxn v0...)."""
    import asyncio

    from aiokafka import AIOKafkaProducer, TopicPartition

    topic = _topic(storage)
    group = "aio-eos-" + uuid.uuid4().hex[:6]

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id="aio-" + uuid.uuid4().hex[:6])
        await p.start()
        try:
            async with p.transaction():
                for i in range(4):
                    await p.send(topic, b"aio-c%d" % i, partition=i % 2)
                await p.send_offsets_to_transaction({TopicPartition(topic, 0): 4}, group)
            await p.begin_transaction()
            await p.send(topic, b"aio-aborted", partition=1)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    got = _consume(broker.bootstrap, topic, 2, "read_committed", expect=4)
    assert sorted(got) == sorted(b"aio-c%d" % i for i in range(4))
    assert len(_consume(broker.bootstrap, topic, 2, "read_uncommitted", expect=5)) == 5
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    assert c.committed([ck.TopicPartition(topic, 0)], 10)[0].offset == 4
    c.close()


def test_kafka_python_transactions_commit_and_abort(broker, storage):
    from kafka import KafkaProducer

    topic = _topic(storage)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-" + uuid.uuid4().hex[:6])
    p.init_transactions()
    p.begin_transaction()
    for i in range(4):
        p.send(topic, b"kp-c%d" % i, partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, b"kp-aborted", partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    got = _consume(broker.bootstrap, topic, 2, "read_committed", expect=4)
    assert sorted(got) == sorted(b"kp-c%d" % i for i in range(4))
    assert len(_consume(broker.bootstrap, topic, 2, "read_uncommitted", expect=5)) == 5


@pytest.mark.parametrize("v", range(6))
def test_every_served_version_runs_a_transaction(broker, storage, v):
    """InitProducerId v0-v5, AddPartitionsToTxn v0-v3, AddOffsetsToTxn, TxnOffsetCommit and
    EndTxn v0-v4 (Kafka 3.9's ranges), FindCoordinator v0-v4 for key type 1."""
    import dataclasses
    import datetime
    import importlib

    from kafkastore.protocol.wire import codec

    from .wire import Wire

    def req(api, version, **fields):
        cls = codec.request_class(api, version)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: val for k, val in fields.items() if k in names})

    def nested(api, version, cls_name, **fields):
        mod = importlib.import_module(codec.request_class(api, version).__module__)
        cls = getattr(mod, cls_name)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: val for k, val in fields.items() if k in names})

    topic = _topic(storage, 1)
    tid = "tx-v%d-%s" % (v, uuid.uuid4().hex[:6])
    group = "g-" + tid
    w = Wire(broker.bootstrap)
    try:
        fc = w.call(req(10, min(v, 4), key=tid, key_type=1, coordinator_keys=(tid,)))
        assert int(fc.coordinators[0].error_code if min(v, 4) >= 4 else fc.error_code) == 0
        init = w.call(req(22, v, transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=30),
                          producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch
        assert int(init.error_code) == 0
        ap_v = min(v, 3)
        r = w.call(req(24, ap_v, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                       v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                           nested(24, ap_v, "AddPartitionsToTxnTopic", name=topic, partitions=(0,)),)))
        assert int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code) == 0
        assert _produce(w, topic, 0, _txn_batch([b"v%d" % v], pid, epoch, 0), tid)[0] == 0
        ev = min(v, 4)
        assert int(w.call(req(25, ev, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                              group_id=group)).error_code) == 0
        t = w.call(req(28, ev, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                       generation_id=-1, member_id="", group_instance_id=None, topics=(
                           nested(28, ev, "TxnOffsetCommitRequestTopic", name=topic, partitions=(
                               nested(28, ev, "TxnOffsetCommitRequestPartition", partition_index=0,
                                      committed_offset=1, committed_leader_epoch=-1,
                                      committed_metadata=""),)),)))
        assert int(t.topics[0].partitions[0].error_code) == 0
        assert int(w.call(req(26, ev, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                              committed=True)).error_code) == 0
        from tests.helpers.wire_requests import fetch

        assert fetch(w, topic, 0, 0, isolation=1).last_stable_offset == 2
    finally:
        w.close()


def test_describe_and_list_transactions(broker, storage):
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    from .wire import Wire

    topic = _topic(storage)
    tid = "tx-describe-" + uuid.uuid4().hex[:6]
    p = _producer(broker.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, b"x", partition=1)
    p.flush(10)
    w = Wire(broker.bootstrap)
    try:
        d = w.call(DescribeTransactionsRequest(transactional_ids=(tid, "tx-never-seen")))
        ours, unknown = d.transaction_states
        assert int(ours.error_code) == 0 and ours.transaction_state == "Ongoing"
        assert [(t.topic, t.partitions) for t in ours.topics] == [(topic, (1,))]
        assert ours.producer_id >= 0 and ours.transaction_start_time is not None
        assert int(unknown.error_code) == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = w.call(ListTransactionsRequest(state_filters=("Ongoing", "Bogus"), producer_id_filters=(),
                                                duration_filter=-1))
        assert tid in [t.transactional_id for t in listed.transaction_states]
        assert listed.unknown_state_filters == ("Bogus",)
        p.commit_transaction(15)
        d = w.call(DescribeTransactionsRequest(transactional_ids=(tid,)))
        assert d.transaction_states[0].transaction_state == "CompleteCommit"
        listed = w.call(ListTransactionsRequest(state_filters=("Ongoing",), producer_id_filters=(),
                                                duration_filter=-1))
        assert tid not in [t.transactional_id for t in listed.transaction_states]
    finally:
        w.close()


def test_transaction_timeout_is_bounded_by_the_broker_maximum(tmp_path):
    import datetime

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    from kafkastore.protocol.server import BrokerThread, ServeOptions

    from .wire import Wire

    opts = ServeOptions(port=0, commit_interval_ms=2, transaction_max_timeout_ms=5000)
    with BrokerThread(Storage("file://" + str(tmp_path)), opts) as b:
        w = Wire(b.bootstrap)

        def init(ms):
            return int(w.call(InitProducerIdRequest(
                transactional_id="tx-max", transaction_timeout=datetime.timedelta(milliseconds=ms),
                producer_id=-1, producer_epoch=-1)).error_code)

        assert init(60_000) == 50  # INVALID_TRANSACTION_TIMEOUT
        assert init(5000) == 0
        w.close()


def test_offline_reader_sees_what_read_committed_consumers_see(broker, storage):
    """The offline side (PartitionReader, used by consume, loads and the Spark source) reads a
    log written by serve's coordinator: committed records only, stopping at an open transaction."""
    from kafkastore.read.reader import PartitionReader

    topic = _topic(storage, 1)
    p = _producer(broker.bootstrap, "tx-offline-" + uuid.uuid4().hex[:6])
    for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, v, partition=0)
        p.flush(10)
        p.commit_transaction(15) if commit else p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(10)

    def values(isolation):
        table = PartitionReader(storage, topic, 0).read(0, isolation=isolation, include_headers=False)
        return table.column("value").to_pylist()

    assert values("read_committed") == [b"c1", b"c2", b"c3"]
    assert values("read_uncommitted") == [b"c1", b"c2", b"a1", b"c3", b"open"]
    p.abort_transaction(15)
    assert values("read_committed") == [b"c1", b"c2", b"c3"]


def test_a_topic_deleted_during_the_transaction_does_not_block_its_end(broker, storage):
    from kafkastore.topics.admin import delete_topic

    kept, doomed = _topic(storage, 1), _topic(storage, 1)
    p = _producer(broker.bootstrap, "tx-deleted-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    p.produce(kept, b"kept", partition=0)
    p.produce(doomed, b"gone", partition=0)
    p.flush(10)
    delete_topic(storage, doomed)
    p.commit_transaction(15)
    assert _consume(broker.bootstrap, kept, 1, "read_committed", expect=1) == [b"kept"]


def test_coordinator_sigkilled_after_add_partitions_another_broker_commits(tmp_path):
    """Two `kafkastore serve` processes; the one coordinating the transactional id is SIGKILLed
    once the transaction has partitions and data; the producer's commit goes to the other
    broker, which finishes the transaction from the stored state."""
    import signal

    from kafkastore.protocol.apis.groups import coordinator_node

    from tests.helpers.serve_procs import free_port, start_serve, stop_serve

    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    topic = _topic(storage, 2)
    ports = [free_port(), free_port()]
    procs = [start_serve(root, ports[0], 0), start_serve(root, ports[1], 1)]
    try:
        tid = next(t for t in ("tx-kill-%d" % i for i in range(100))
                   if coordinator_node(t, [(0, "", 0), (1, "", 0)])[0] == 0)
        p = _producer(",".join(f"127.0.0.1:{port}" for port in ports), tid,
                      **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, b"k%d" % i, partition=i % 2)
        p.flush(10)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        p.commit_transaction(30)  # retried until broker 1 sees broker 0 gone and coordinates
        got = _consume(f"127.0.0.1:{ports[1]}", topic, 2, "read_committed", expect=10)
        assert sorted(got) == sorted(b"k%d" % i for i in range(10))
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_serve(proc)


def test_a_fresh_broker_aborts_a_timed_out_transaction_a_dead_one_left(tmp_path):
    """The producer and its coordinator are gone; a broker that never hears of the transactional
    id finds the transaction in __transaction_state and aborts it once it times out."""
    import datetime

    from kio.schema.add_partitions_to_txn.v3 import request as ap
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    from kafkastore.protocol.server import BrokerThread, ServeOptions
    from tests.helpers.wire_requests import fetch

    from .wire import Wire

    root = "file://" + str(tmp_path)
    storage = Storage(root)
    topic = _topic(storage, 1)
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=300)
    with BrokerThread(Storage(root), opts) as a:
        w = Wire(a.bootstrap)
        # Longer than this broker lives: it stops before the timeout, never aborting it itself.
        init = w.call(InitProducerIdRequest(transactional_id="tx-orphan",
                                            transaction_timeout=datetime.timedelta(milliseconds=3000),
                                            producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch
        w.call(ap.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx-orphan", v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(ap.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)))
        assert _produce(w, topic, 0, _txn_batch([b"orphan"], pid, epoch, 0), "tx-orphan")[0] == 0
        w.close()
    with BrokerThread(Storage(root), opts) as b:
        w = Wire(b.bootstrap)
        deadline = time.time() + 15
        while time.time() < deadline and fetch(w, topic, 0, 0, isolation=1).last_stable_offset < 2:
            time.sleep(0.2)
        f = fetch(w, topic, 0, 0, isolation=1)
        assert f.last_stable_offset == 2  # the data and the ABORT marker
        assert [(t.producer_id, t.first_offset) for t in f.aborted_transactions] == [(pid, 0)]
        w.close()
