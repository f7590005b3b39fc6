"""Transactional clients for the transaction tests: confluent-kafka producers and consumers,
raw transactional batches and Produce requests over :class:`tests.protocol.wire.Wire`."""
from __future__ import annotations

import datetime
import time
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")


def txn_producer(bootstrap: str, tid: str, **conf):
    """A confluent-kafka transactional producer, its transactions initialised."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 60000, "linger.ms": 5, **conf})
    p.init_transactions(15)
    return p


def consume_values(bootstrap: str, topic: str, partitions: int, isolation: str, *, expect: int,
             wait_s: float = 10.0) -> list[bytes]:
    """Values read from offset 0 of every partition (waits for ``expect`` or ``wait_s``)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader-" + uuid.uuid4().hex[:6],
                     "enable.auto.commit": False, "isolation.level": isolation,
                     "enable.partition.eof": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.time() + wait_s
    while time.time() < deadline and len(got) < expect:
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append(m.value())
    # A little longer, to see nothing extra arrives.
    end = time.time() + 1.0
    while time.time() < end:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def txn_batch(values, pid, epoch, seq):
    """A transactional record batch of ``values`` (bytes) from producer ``pid`` at ``epoch``."""
    from kafkastore.format.record_batch import Record, encode_batch

    now = int(time.time() * 1000)
    return encode_batch([Record(i, now, None, v, ()) for i, v in enumerate(values)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, transactional=True)


def produce_raw(w, topic, partition, data, tid):
    """One Produce v9 of ``data`` through ``w``; ``(error code, base offset)``."""
    import datetime

    from kio.schema.produce.v9 import request as prod_req

    req = prod_req.ProduceRequest(transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=10),
                                  topic_data=(prod_req.TopicProduceData(name=topic, partition_data=(
                                      prod_req.PartitionProduceData(index=partition, records=data),)),))
    r = w.call(req).responses[0].partition_responses[0]
    return int(r.error_code), r.base_offset


# -- two `serve` processes over one root (failover and pause tests) ----------------------
def tid_owned_by(node: int, prefix: str) -> str:
    from kafkastore.protocol.apis.groups import coordinator_node

    return next(t for t in ("%s-%d" % (prefix, i) for i in range(1000))
                if coordinator_node(t, [(0, "", 0), (1, "", 0)])[0] == node)


def two_serves(root: str, monkeypatch, fault: str | None):
    """Broker 0 (with the fault, if any) and broker 1; their processes and ports."""
    from tests.helpers.serve_procs import free_port, start_serve, wait_until_listed

    ports = [free_port(), free_port()]
    if fault:
        monkeypatch.setenv("KAFKASTORE_FAULT", fault)
    first = start_serve(root, ports[0], 0)
    monkeypatch.delenv("KAFKASTORE_FAULT", raising=False)
    second = start_serve(root, ports[1], 1)
    wait_until_listed([f"127.0.0.1:{p}" for p in ports])
    return [first, second], ports


def stop_all(procs) -> None:
    from tests.helpers.serve_procs import stop_serve

    for proc in procs:
        if proc.poll() is None:
            stop_serve(proc)


def init_producer_id(w, tid, pid=-1, epoch=-1, version=4, timeout_ms=60000):
    """InitProducerId over a raw wire: (error code, producer id, epoch)."""
    import importlib

    mod = importlib.import_module(f"kio.schema.init_producer_id.v{version}.request")
    fields = dict(transactional_id=tid, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms))
    if version >= 3:
        fields.update(producer_id=pid, producer_epoch=epoch)
    r = w.call(mod.InitProducerIdRequest(**fields))
    return int(r.error_code), r.producer_id, r.producer_epoch


def add_partitions(w, tid, pid, epoch, topic, partitions=(0,)):
    """AddPartitionsToTxn v3 over a raw wire: the error code of each partition."""
    from kio.schema.add_partitions_to_txn.v3 import request as ap

    r = w.call(ap.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(ap.AddPartitionsToTxnTopic(name=topic, partitions=tuple(partitions)),)))
    return [int(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def end_txn(w, tid, pid, epoch, commit=True):
    """EndTxn v3 over a raw wire: its error code."""
    from kio.schema.end_txn.v3.request import EndTxnRequest

    return int(w.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                    committed=commit)).error_code)
