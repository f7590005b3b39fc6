"""A transaction coordinator paused (SIGSTOP) past the liveness window, while the producer
goes on through the other broker, acts on nothing it held before the pause when it resumes:
its delayed Complete write does not land over newer state, no acknowledged commit is later
discarded, no aborted transaction is read, and the producer is never fenced by it.

Two ``kafkastore serve`` processes over one root, a confluent-kafka transactional producer.
"""
from __future__ import annotations

import signal
import time
import uuid

import pytest

from kafkastore.protocol.coordinators.txn_store import TxnStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.txn import consume_values, txn_producer

ck = pytest.importorskip("confluent_kafka")


@pytest.mark.slow
def test_a_paused_coordinator_resumes_without_undoing_newer_transactions(tmp_path, monkeypatch):
    from tests.helpers.txn import stop_all as _stop_all, tid_owned_by as _tid_owned_by
    from tests.helpers.txn import two_serves as _two_serves

    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    topic = "t-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 2)
    procs, ports = _two_serves(root, monkeypatch, None)
    try:
        tid = _tid_owned_by(0, "tx-pause")
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        p = txn_producer(bootstrap, tid, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                                            "socket.timeout.ms": 3000, "transaction.timeout.ms": 20000})
        epochs = [TxnStore(storage).get(tid).producer_epoch]

        def run(values, commit: bool):
            p.begin_transaction()
            for i, v in enumerate(values):
                p.produce(topic, v, partition=i % 2)
            p.flush(60)
            (p.commit_transaction if commit else p.abort_transaction)(60)
            epochs.append(TxnStore(storage).get(tid).producer_epoch)

        run([b"t1-a", b"t1-b"], True)           # coordinated by broker 0; Complete not stored yet
        procs[0].send_signal(signal.SIGSTOP)
        try:
            run([b"t2-a", b"t2-b"], True)       # through broker 1 once broker 0 looks dead
            run([b"t3-a", b"t3-b"], False)
        finally:
            procs[0].send_signal(signal.SIGCONT)
        time.sleep(4)                           # broker 0's delayed writes would land now
        run([b"t4-a", b"t4-b"], True)
        got = consume_values(f"127.0.0.1:{ports[1]}", topic, 2, "read_committed", expect=6)
        assert sorted(got) == sorted([b"t1-a", b"t1-b", b"t2-a", b"t2-b", b"t4-a", b"t4-b"])
        assert epochs == sorted(epochs), f"the producer epoch went backwards: {epochs}"
        p.close() if hasattr(p, "close") else None
    finally:
        _stop_all(procs)
