"""Transactions across broker deaths, KIP-360 and bad input, over the wire.

Two `kafkastore serve` processes share one root; the one coordinating the transactional id
SIGKILLs itself at an exact coordinator step (``KAFKASTORE_FAULT=txn:<step>``), and the
transaction is finished by the other broker from what ``__transaction_state`` holds.
"""
from __future__ import annotations

import datetime
import time
import uuid

import pytest

from kafkastore.storage import Storage
from kafkastore.topics import create_topic

from .test_transactions import _consume, _produce, _producer, _txn_batch

ck = pytest.importorskip("confluent_kafka")


def _tid_owned_by(node: int, prefix: str) -> str:
    from kafkastore.protocol.api_groups import coordinator_node

    return next(t for t in ("%s-%d" % (prefix, i) for i in range(1000))
                if coordinator_node(t, [(0, "", 0), (1, "", 0)])[0] == node)


def _two_serves(root: str, monkeypatch, fault: str | None):
    """Broker 0 (with the fault, if any) and broker 1; their processes and ports."""
    from tests.helpers.serve_procs import free_port, start_serve

    ports = [free_port(), free_port()]
    if fault:
        monkeypatch.setenv("KAFKASTORE_FAULT", fault)
    first = start_serve(root, ports[0], 0)
    monkeypatch.delenv("KAFKASTORE_FAULT", raising=False)
    second = start_serve(root, ports[1], 1)
    return [first, second], ports


def _stop_all(procs) -> None:
    from tests.helpers.serve_procs import stop_serve

    for proc in procs:
        if proc.poll() is None:
            stop_serve(proc)


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
        from kafkastore.protocol.api_txn import TxnStore
        from kafkastore.protocol.txn_coordinator import TxnState

        assert TxnStore(storage).get(tid).state is TxnState.COMPLETE_ABORT
    finally:
        _stop_all(procs)
