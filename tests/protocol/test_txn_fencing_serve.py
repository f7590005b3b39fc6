"""A transaction coordinator acts only under the authority it read its state under, and no
open transaction can hold a partition's last stable offset back for ever.

* Markers of a coordinator that fenced itself between reading a Prepare state and writing
  them (a pause past the liveness window, after which its heartbeat renewed the lease) are
  not written: the producer may already run its next transaction at the same epoch, whose
  records those markers would commit.
* An open transaction at a partition that no coordinator state holds open (a late batch
  of a transaction that ended, a fenced producer's, a coordinator that lost its state) is
  aborted by the partition's broker once older than twice ``transaction.max.timeout.ms``;
  one its coordinator holds open is left to the coordinator.
"""
from __future__ import annotations

import asyncio
import time

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.protocol.apis import txn as api_txn
from kafkastore.protocol.coordinators import txn as T
from kafkastore.protocol.coordinators.txn_store import TxnStore
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

TOPIC = "fenced"
LOAD_IN_PROGRESS = 14   # Kafka's COORDINATOR_LOAD_IN_PROGRESS


def _committed(root: str, partition: int = 0) -> list[bytes]:
    return PartitionReader(Storage(root), TOPIC, partition).read(-2).column("value").to_pylist()


def _open_txn(root: str, pid: int, epoch: int, value: bytes, partition: int = 0) -> None:
    """A transactional batch of ``pid`` at ``epoch`` left open at the partition, then a plain
    record after it (read_committed stops before both until the transaction ends)."""
    zombie = Broker(Storage(root), producer_id=pid, producer_epoch=epoch, housekeeping=False)
    zombie.begin_transaction()
    zombie.send(TOPIC, value, partition=partition)
    zombie.flush()
    plain = Broker(Storage(root), housekeeping=False)
    plain.send(TOPIC, b"after-" + value, partition=partition)
    plain.flush()


def _on_loop(broker: BrokerThread, coro, timeout: float = 30):
    return asyncio.run_coroutine_threadsafe(coro, broker.server.loop).result(timeout)


def test_a_fenced_coordinator_writes_no_markers_even_after_renewing_its_lease(local_root):
    create_topic(Storage(local_root), TOPIC, 1)
    # The producer's next transaction (same id and epoch) is open at the partition: a newer
    # coordinator finished the one below and the producer went on.
    _open_txn(local_root, 7, 0, b"next-transaction")
    prepared = T.TxnMetadata("tx", 7, 0, 60_000, T.TxnState.PREPARE_COMMIT,
                             frozenset({(TOPIC, 0)}), 1_000, 1_000)
    with BrokerThread(Storage(local_root), ServeOptions(port=0)) as broker:
        svc = api_txn.service(broker.server)
        registry = broker.server.brokers

        async def resumed_after_a_pause():
            assert await svc.ensure_authority()       # the Prepare state was read under this
            await broker.server.run(registry.fence, "paused past the liveness window")
            await broker.server.run(registry.heartbeat)   # resumed: the lease is renewed
            assert registry.authority_valid()
            return await svc.finish(prepared)

        err = _on_loop(broker, resumed_after_a_pause())
    assert err == api_txn.COORDINATOR_NOT_AVAILABLE
    assert _committed(local_root) == []          # the open transaction was not committed
    st = ManifestStore(Storage(local_root), TOPIC, 0).latest().producers[7]
    assert st.txn_first_offset == 0


def test_a_fenced_coordinator_drops_its_unstored_completions(local_root):
    create_topic(Storage(local_root), TOPIC, 1)
    prepared = T.TxnMetadata("tx", 7, 0, 60_000, T.TxnState.PREPARE_COMMIT,
                             frozenset({(TOPIC, 0)}), 1_000, 1_000)
    with BrokerThread(Storage(local_root), ServeOptions(port=0)) as broker:
        svc = api_txn.service(broker.server)
        registry = broker.server.brokers
        svc.store.put(prepared)
        svc.store.mark_complete(prepared)
        assert svc.store.unstored_complete("tx") is not None

        async def resumed_after_a_pause():
            await broker.server.run(registry.fence, "paused past the liveness window")
            await broker.server.run(registry.heartbeat)
            return await svc.ensure_authority()

        assert _on_loop(broker, resumed_after_a_pause())
        # Read again from the store: the Prepare state, not the completion held before.
        assert svc.store.peek("tx") is None
        assert svc.store.get("tx").state is T.TxnState.PREPARE_COMMIT


def test_a_hanging_transaction_is_aborted_and_a_held_one_is_left_to_its_coordinator(local_root):
    create_topic(Storage(local_root), TOPIC, 2)
    _open_txn(local_root, 41, 3, b"orphan", partition=0)      # no coordinator state at all
    _open_txn(local_root, 42, 0, b"held", partition=1)
    held = T.TxnMetadata("held-tx", 42, 0, 60_000, T.TxnState.ONGOING,
                         frozenset({(TOPIC, 1)}), int(time.time() * 1000), int(time.time() * 1000))
    TxnStore(Storage(local_root)).put(held)
    assert _committed(local_root, 0) == [] and _committed(local_root, 1) == []
    # Hanging after 2 x 1 s without a coordinator holding it; checked every second.
    with BrokerThread(Storage(local_root), ServeOptions(port=0, transaction_max_timeout_ms=1000)) as broker:
        deadline = time.monotonic() + 60
        while _committed(local_root, 0) != [b"after-orphan"]:
            assert time.monotonic() < deadline, "the hanging transaction was never aborted"
            time.sleep(0.2)
        assert api_txn.service(broker.server).hanging_aborted == 1
    # The scan that aborted partition 0's looked at partition 1 too: still open.
    assert _committed(local_root, 1) == []
    st = ManifestStore(Storage(local_root), TOPIC, 1).latest().producers[42]
    assert st.txn_first_offset == 0


def test_produce_verification_reads_the_coordinator_state_not_a_stale_cache(local_root):
    """A broker that cached the id's state as Ongoing refuses a late batch of the transaction
    once the coordinator completed it, and a batch of the fenced epoch once it was bumped."""
    from tests.helpers.txn import produce_raw, txn_batch
    from tests.protocol.wire import Wire

    create_topic(Storage(local_root), TOPIC, 1)
    coordinator = TxnStore(Storage(local_root), broker_id=1)
    ongoing = T.TxnMetadata("late", 9, 0, 60_000, T.TxnState.ONGOING,
                            frozenset({(TOPIC, 0)}), 1_000, 1_000)
    coordinator.put(ongoing)
    with BrokerThread(Storage(local_root), ServeOptions(port=0)) as broker:
        svc = api_txn.service(broker.server)
        w = Wire(broker.bootstrap, timeout=10)
        try:
            assert produce_raw(w, TOPIC, 0, txn_batch([b"in"], 9, 0, 0), "late")[0] == 0
            assert svc.store.peek("late") == ongoing            # cached as Ongoing
            done = T.TxnMetadata("late", 9, 0, 60_000, T.TxnState.COMPLETE_COMMIT, frozenset(),
                                 2_000, 1_000)
            coordinator.put(done)                              # the coordinator finished it
            err, _ = produce_raw(w, TOPIC, 0, txn_batch([b"late"], 9, 0, 1), "late")
            assert err == T.INVALID_TXN_STATE
            bumped = T.TxnMetadata("late", 9, 1, 60_000, T.TxnState.ONGOING,
                                   frozenset({(TOPIC, 0)}), 3_000, 3_000)
            coordinator.put(bumped)                            # a new producer instance
            err, _ = produce_raw(w, TOPIC, 0, txn_batch([b"zombie"], 9, 0, 1), "late")
            assert err == T.INVALID_PRODUCER_EPOCH
        finally:
            w.close()
    assert ManifestStore(Storage(local_root), TOPIC, 0).latest().high_watermark == 1  # b"in" only


def test_an_end_txn_read_before_a_pause_does_not_act_on_resume(local_root):
    """Requests read before the pause would be handled the moment the process resumes: the
    broker closes the connections opened before it fenced itself without handling them, and
    the coordinator answers COORDINATOR_LOAD_IN_PROGRESS (retriable) for a moment after
    fencing, so a commit its client gave up on (and followed with an abort and a new
    transaction) never lands; a client still waiting reconnects, retries and is served."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.end_txn.v3.request import EndTxnRequest

    from tests.protocol.wire import Wire

    create_topic(Storage(local_root), TOPIC, 1)
    _open_txn(local_root, 11, 0, b"undecided")
    now = int(time.time() * 1000)
    TxnStore(Storage(local_root)).put(T.TxnMetadata(
        "undecided", 11, 0, 60_000, T.TxnState.ONGOING, frozenset({(TOPIC, 0)}), now, now))
    with BrokerThread(Storage(local_root), ServeOptions(port=0)) as broker:
        registry = broker.server.brokers
        w = Wire(broker.bootstrap, timeout=10)
        try:
            def end() -> int:
                return int(w.call(EndTxnRequest(transactional_id="undecided", producer_id=11,
                                                producer_epoch=0, committed=True)).error_code)

            # The connection is open on the broker's side before the pause (a first request).
            assert int(w.call(ApiVersionsRequest(client_software_name="t",
                                                 client_software_version="1")).error_code) == 0
            # Paused and resumed: the heartbeat renewed the lease before the request ran.
            _on_loop(broker, broker.server.run(registry.fence, "paused past the liveness window"))
            _on_loop(broker, broker.server.run(registry.heartbeat))
            with pytest.raises(ConnectionError):   # read on a connection from before the fence
                end()
            assert _committed(local_root) == []
            assert TxnStore(Storage(local_root)).get("undecided").state is T.TxnState.ONGOING
            w.close()
            w = Wire(broker.bootstrap, timeout=10)   # the client reconnects
            deadline = time.monotonic() + 30
            while (err := end()) == LOAD_IN_PROGRESS:   # the client's retry
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert err == 0
        finally:
            w.close()
    assert _committed(local_root) == [b"undecided", b"after-undecided"]


def test_a_late_finish_of_the_previous_transaction_writes_no_marker_into_the_next(local_root):
    """A coordinator that still holds its authority but acts on the previous transaction's
    Prepare state (it read it before the id's next transaction began elsewhere: a retried
    EndTxn, the timeout loop, a membership change seen late) must not end the next
    transaction of the same producer id and epoch at a partition: the marker names the
    transaction it ends (its start), and the partition refuses it when a newer one is open
    there. Otherwise the stray COMMIT commits the next transaction's records at the
    partitions the two share, and that transaction's abort later leaves it torn."""
    from tests.helpers.txn import produce_raw, txn_batch
    from tests.protocol.wire import Wire

    create_topic(Storage(local_root), TOPIC, 1)
    previous = T.TxnMetadata("next", 9, 0, 60_000, T.TxnState.PREPARE_COMMIT,
                             frozenset({(TOPIC, 0)}), 1_000, 1_000)
    ongoing = T.TxnMetadata("next", 9, 0, 60_000, T.TxnState.ONGOING,
                            frozenset({(TOPIC, 0)}), 2_000, 2_000)
    TxnStore(Storage(local_root), broker_id=1).put(ongoing)   # the next transaction, elsewhere
    with BrokerThread(Storage(local_root), ServeOptions(port=0)) as broker:
        svc = api_txn.service(broker.server)
        w = Wire(broker.bootstrap, timeout=10)
        try:
            assert produce_raw(w, TOPIC, 0, txn_batch([b"next"], 9, 0, 0), "next")[0] == 0
        finally:
            w.close()
        st = ManifestStore(Storage(local_root), TOPIC, 0).latest().producers[9]
        assert st.txn_first_offset == 0 and st.txn_start_ms == 2_000

        async def late_finish(meta):
            assert await svc.ensure_authority()
            return await svc.finish(meta)

        assert _on_loop(broker, late_finish(previous)) == api_txn.COORDINATOR_NOT_AVAILABLE
        assert _committed(local_root) == []                # the next transaction is still open
        assert ManifestStore(Storage(local_root), TOPIC, 0).latest().producers[9].txn_first_offset == 0
        # Its own coordinator's marker (same start) ends it.
        prepared = T.TxnMetadata("next", 9, 0, 60_000, T.TxnState.PREPARE_COMMIT,
                                 frozenset({(TOPIC, 0)}), 3_000, 2_000)
        assert _on_loop(broker, late_finish(prepared)) == 0
    assert _committed(local_root) == [b"next"]
