"""A transactional batch whose sequence numbers match a batch of an ENDED transaction is
refused, never answered as a duplicate.

Kafka answers a retried batch (same producer, epoch and sequence numbers as one still
retained) with success and the first copy's offset: the client's retry of a request whose
answer it lost. For a transactional producer that is only sound inside the transaction the
first copy belongs to: a client sends EndTxn only once every batch of its transaction is
answered. The fault harness found librdkafka reusing the sequence numbers of an aborted
transaction's batch for its next transaction (it purged the messages as never sent while
the broker had appended them: a produce caught behind a paused broker). Answered as a
duplicate, the new transaction's records were acknowledged with the aborted batch's offset
and never written; its COMMIT then committed nothing there, and an acknowledged,
committed transaction lost its records. The batch is now refused (INVALID_TXN_STATE:
librdkafka aborts the transaction and bumps its epoch, so nothing is lost).
"""
from __future__ import annotations

import uuid

import pytest

from kafkastore.read.reader import PartitionReader
from kafkastore.topics.admin import create_topic

from tests.helpers.txn import add_partitions as _add, end_txn as _end, init_producer_id as _init
from tests.helpers.txn import produce_raw as _produce, txn_batch as _txn_batch
from .wire import Wire

pytest.importorskip("kio")


def _committed(storage, topic) -> list:
    return PartitionReader(storage, topic, 0).read(0, isolation="read_committed") \
        .column("value").to_pylist()


def test_a_batch_reusing_an_aborted_transactions_sequence_is_not_answered_as_a_duplicate(
        broker, storage):
    topic = "dupend-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    tid = "tx-dupend-" + uuid.uuid4().hex[:6]
    w = Wire(broker.bootstrap)
    try:
        err, pid, epoch = _init(w, tid)
        assert err == 0
        # Transaction 1: one batch at sequence 0, then aborted.
        assert _add(w, tid, pid, epoch, topic) == [0]
        assert _produce(w, topic, 0, _txn_batch([b"a1", b"a2"], pid, epoch, 0), tid)[0] == 0
        assert _end(w, tid, pid, epoch, commit=False) == 0
        # Transaction 2 sends other records under the same sequence numbers.
        assert _add(w, tid, pid, epoch, topic) == [0]
        code, _ = _produce(w, topic, 0, _txn_batch([b"b1", b"b2"], pid, epoch, 0), tid)
        if code == 0:
            # Acknowledged: committing must make the acknowledged records readable.
            assert _end(w, tid, pid, epoch, commit=True) == 0
            assert _committed(storage, topic) == [b"b1", b"b2"], \
                "records acknowledged in a committed transaction are not in the log"
        else:
            assert _end(w, tid, pid, epoch, commit=False) == 0
            assert _committed(storage, topic) == []
    finally:
        w.close()


def test_a_retry_inside_the_open_transaction_is_still_a_duplicate(broker, storage):
    topic = "dupin-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    tid = "tx-dupin-" + uuid.uuid4().hex[:6]
    w = Wire(broker.bootstrap)
    try:
        err, pid, epoch = _init(w, tid)
        assert err == 0
        assert _add(w, tid, pid, epoch, topic) == [0]
        batch = _txn_batch([b"x1", b"x2"], pid, epoch, 0)
        first = _produce(w, topic, 0, batch, tid)
        again = _produce(w, topic, 0, batch, tid)   # the client's retry of a lost answer
        assert first[0] == 0 and again == first
        assert _end(w, tid, pid, epoch, commit=True) == 0
        assert _committed(storage, topic) == [b"x1", b"x2"]
    finally:
        w.close()
