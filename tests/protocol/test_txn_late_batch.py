"""A transactional batch that reaches the log after its transaction ended is refused.

A broker checks a transactional Produce against the coordinator's stored state, then
queues the batch for the partition's commit. A broker paused between the two (GC, a
stalled disk, SIGSTOP), or a slow commit, lets the transaction end meanwhile: the
coordinator writes its ABORT marker at the partition first, and the late batch then lands
after it, opening a transaction of the same producer epoch that no coordinator knows. The
producer's next marker at that partition (a COMMIT after an epoch bump, say) then ends it:
records of a transaction the client saw aborted are read as committed (the harness's
``aborted-read``, with an exactly-once pipeline's input processed twice). As Kafka's
KIP-890 verification guard, the check holds at the commit itself: a batch that would open
a transaction at the partition is appended only while the coordinator's stored state still
has that very transaction Ongoing with the partition.
"""
from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from kafkastore.manifest import ManifestStore
from kafkastore.protocol.apis import txn as api_txn
from kafkastore.topics.admin import create_topic

from tests.helpers.txn import produce_raw as _produce, txn_batch as _txn_batch
from tests.helpers.txn import add_partitions as _add, end_txn as _end, init_producer_id as _init
from .wire import Wire

pytest.importorskip("kio")


def test_a_batch_verified_before_an_abort_and_appended_after_it_is_refused(broker, storage,
                                                                         monkeypatch):
    topic = "late-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    tid = "tx-late-" + uuid.uuid4().hex[:6]
    control, producer = Wire(broker.bootstrap), Wire(broker.bootstrap)
    try:
        err, pid, epoch = _init(control, tid)
        assert err == 0
        assert _add(control, tid, pid, epoch, topic) == [0]

        verified, release = threading.Event(), threading.Event()
        original = api_txn.verify_produce

        async def verify_then_stall(ctx, t, batches, *rest):
            out = await original(ctx, t, batches, *rest)
            if batches:   # the broker "pauses" between its check and the append
                verified.set()
                await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
            return out

        monkeypatch.setattr(api_txn, "verify_produce", verify_then_stall)
        result: list = []
        late = threading.Thread(target=lambda: result.append(
            _produce(producer, topic, 0, _txn_batch([b"late"], pid, epoch, 0), tid)))
        late.start()
        assert verified.wait(30)
        assert _end(control, tid, pid, epoch, commit=False) == 0   # the client's abort
        release.set()
        late.join(30)
        monkeypatch.setattr(api_txn, "verify_produce", original)

        code, _ = result[0]
        assert code != 0, "a batch of an aborted transaction was appended after its marker"
        m = ManifestStore(storage, topic, 0).latest()
        st = m.producers.get(pid) if m is not None else None
        assert st is None or st.txn_first_offset is None, "the partition holds an open transaction"

        # The producer's next transaction (epoch bumped, as a client does after an abort
        # it cannot trust) commits only its own records.
        err, pid2, epoch2 = _init(control, tid, pid, epoch)
        assert err == 0
        assert _add(control, tid, pid2, epoch2, topic) == [0]
        assert _produce(control, topic, 0, _txn_batch([b"next"], pid2, epoch2, 0), tid)[0] == 0
        assert _end(control, tid, pid2, epoch2, commit=True) == 0
        from kafkastore.read.reader import PartitionReader

        values = PartitionReader(storage, topic, 0).read(0, isolation="read_committed") \
            .column("value").to_pylist()
        assert values == [b"next"]
    finally:
        control.close()
        producer.close()
