"""The transaction APIs request by request over the wire: KIP-360 epoch bumps and bad input
(Kafka's error codes, never a crash)."""
from __future__ import annotations

import uuid

import pytest

from kafkastore.topics.admin import create_topic

from tests.helpers.txn import add_partitions as _add, end_txn as _end, init_producer_id as _init
from tests.helpers.txn import produce_raw as _produce, txn_batch as _txn_batch
from .wire import Wire

pytest.importorskip("kio")

FENCED, BAD_EPOCH, BAD_TXN_STATE, BAD_MAPPING, INVALID_REQUEST = 90, 47, 48, 49, 42


@pytest.fixture
def wire(broker):
    w = Wire(broker.bootstrap)
    yield w
    w.close()


def test_kip360_init_producer_id_with_the_producers_own_id_and_epoch(broker, storage, wire):
    from tests.helpers.wire_requests import fetch

    topic = "kip360-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    tid = "tx-kip360-" + uuid.uuid4().hex[:6]
    err, pid, epoch = _init(wire, tid)
    assert (err, epoch) == (0, 0)
    assert _init(wire, tid, pid, 0) == (0, pid, 1)           # its own epoch: bumped
    assert _init(wire, tid, pid, 0) == (0, pid, 1)           # the retry of that bump: unchanged
    assert _init(wire, tid, pid, 7)[0] == FENCED             # an epoch it never had
    assert _init(wire, tid, pid + 1, 1)[0] == FENCED         # another producer's id
    assert _init(wire, tid, pid, 7, version=3)[0] == BAD_EPOCH  # v3 clients do not know PRODUCER_FENCED
    assert _init(wire, tid, pid, -1)[0] == INVALID_REQUEST   # id without epoch
    # With a transaction open: it is aborted with one bump, the producer continues at that epoch.
    assert _add(wire, tid, pid, 1, topic) == [0]
    assert _produce(wire, topic, 0, _txn_batch([b"doomed"], pid, 1, 0), tid)[0] == 0
    assert _init(wire, tid, pid, 1) == (0, pid, 2)
    f = fetch(wire, topic, 0, 0, isolation=1)
    assert f.last_stable_offset == 2 and [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)]
    assert _add(wire, tid, pid, 2, topic) == [0]
    assert _produce(wire, topic, 0, _txn_batch([b"kept"], pid, 2, 0), tid)[0] == 0
    assert _end(wire, tid, pid, 2) == 0
    assert fetch(wire, topic, 0, 0, isolation=1).last_stable_offset == 4
    # A new instance (no id given) bumps and fences the old one.
    assert _init(wire, tid) == (0, pid, 3)
    assert _end(wire, tid, pid, 2) == FENCED


def test_bad_transactional_input_gets_kafkas_error_codes(broker, storage, wire):
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    topic = "bad-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 2)
    tid = "tx-bad-" + uuid.uuid4().hex[:6]
    err, pid, epoch = _init(wire, tid)
    assert err == 0
    # Transactional ids are bounded like group ids (32,767 UTF-8 bytes), and never empty.
    too_long = "t" * 40_000
    for bad in ("", too_long):
        assert _init(wire, bad)[0] == INVALID_REQUEST
        assert _add(wire, bad, pid, epoch, topic) == [INVALID_REQUEST]
        assert _end(wire, bad, pid, epoch) == INVALID_REQUEST
        assert int(wire.call(AddOffsetsToTxnRequest(transactional_id=bad, producer_id=pid, producer_epoch=epoch,
                                                    group_id="g")).error_code) == INVALID_REQUEST
    fc = wire.call(FindCoordinatorRequest(key_type=1, coordinator_keys=(too_long, tid)))
    assert [int(c.error_code) for c in fc.coordinators] == [INVALID_REQUEST, 0]
    d = wire.call(DescribeTransactionsRequest(transactional_ids=(too_long,)))
    assert int(d.transaction_states[0].error_code) == 105
    # Unknown transactional id: a producer id the coordinator does not map.
    unknown = "tx-unknown-" + uuid.uuid4().hex[:6]
    assert _add(wire, unknown, pid, epoch, topic) == [BAD_MAPPING]
    assert _end(wire, unknown, pid, epoch) == BAD_MAPPING
    assert int(wire.call(AddOffsetsToTxnRequest(transactional_id=unknown, producer_id=pid, producer_epoch=epoch,
                                                group_id="g")).error_code) == BAD_MAPPING
    # Without a valid epoch (-1, newer, older): fenced, nothing changes.
    for bad_epoch in (-1, epoch + 1):
        assert _add(wire, tid, pid, bad_epoch, topic) == [FENCED]
        assert _end(wire, tid, pid, bad_epoch) == FENCED
    assert _add(wire, tid, pid + 1, epoch, topic) == [BAD_MAPPING]
    # A partition that does not exist: refused, the others not attempted; nothing added.
    assert _add(wire, tid, pid, epoch, topic, (0, 9)) == [55, 3]
    # EndTxn with nothing open; a batch for a partition not added.
    assert _end(wire, tid, pid, epoch) == BAD_TXN_STATE
    assert _add(wire, tid, pid, epoch, topic, (0,)) == [0]
    assert _produce(wire, topic, 1, _txn_batch([b"x"], pid, epoch, 0), tid)[0] == BAD_TXN_STATE
    assert _produce(wire, topic, 0, _txn_batch([b"y"], pid, epoch, 0), tid)[0] == 0
    assert _end(wire, tid, pid, epoch) == 0


def test_a_transaction_costs_two_state_commits_and_complete_is_stored_later(broker, storage, wire):
    """Ongoing and Prepare are stored before their answers; Complete is read at once but stored
    lazily, and the producer's next AddPartitions supersedes it (never stored then)."""
    import time

    from kafkastore.protocol.coordinators import txn as T
    from kafkastore.protocol.coordinators.txn_service import COMPLETE_DELAY_S
    from kafkastore.protocol.coordinators.txn_store import TxnStore

    topic = "lazy-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    tid = "tx-lazy-" + uuid.uuid4().hex[:6]
    err, pid, epoch = _init(wire, tid)

    def states():
        store = TxnStore(storage)
        p = store.partition_for(tid)
        from kafkastore.read.reader import PartitionReader

        t = PartitionReader(storage, T.TXN_TOPIC, p).read(0, include_headers=False)
        return [T.decode_value(tid, v).state.name for k, v in zip(t.column("key").to_pylist(),
                                                                  t.column("value").to_pylist())
                if T.decode_key(k) == tid]

    for _ in range(2):
        assert _add(wire, tid, pid, epoch, topic) == [0]
        assert _produce(wire, topic, 0, _txn_batch([b"x"], pid, epoch, 0 if _ == 0 else 1), tid)[0] == 0
        assert _end(wire, tid, pid, epoch) == 0
        assert _end(wire, tid, pid, epoch) == 0          # a retry reads it complete: nothing redone
    assert states() == ["EMPTY", "ONGOING", "PREPARE_COMMIT", "ONGOING", "PREPARE_COMMIT"]
    time.sleep(COMPLETE_DELAY_S + 1.5)
    assert states()[-1] == "COMPLETE_COMMIT"


#: Apache Kafka 3.9's ranges of the transaction APIs and FindCoordinator (served in full).
KAFKA_39 = {10: (0, 6), 22: (0, 5), 24: (0, 5), 25: (0, 4), 26: (0, 4), 28: (0, 4), 65: (0, 0), 66: (0, 1)}


def test_api_versions_advertises_kafka_39s_ranges_of_the_transaction_apis(wire):
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    r = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
    assert {k: served.get(k) for k in KAFKA_39} == KAFKA_39


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_v4_v5_batches_transactions_and_verifies(broker, storage, wire, version):
    """Kafka's broker-to-broker form (KIP-890): several transactions in one request, each added
    or only checked (verify_only: in the transaction or INVALID_TXN_STATE, nothing added)."""
    import importlib

    from kio.schema.find_coordinator.v5.request import FindCoordinatorRequest

    ap = importlib.import_module(f"kio.schema.add_partitions_to_txn.v{version}.request")
    topic = "apv%d-" % version + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 2)
    a, b = ("tx-ap%d-%s-%s" % (version, x, uuid.uuid4().hex[:6]) for x in "ab")
    fc = wire.call(FindCoordinatorRequest(key_type=1, coordinator_keys=(a, b)))
    assert [int(c.error_code) for c in fc.coordinators] == [0, 0]
    (_, pa, ea), (_, pb, eb) = _init(wire, a), _init(wire, b)

    def txn(tid, pid, epoch, parts, verify):
        return ap.AddPartitionsToTxnTransaction(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                verify_only=verify, topics=(
                                                    ap.AddPartitionsToTxnTopic(name=topic, partitions=parts),))

    def call(*txns):
        r = wire.call(ap.AddPartitionsToTxnRequest(transactions=txns))
        assert int(r.error_code) == 0
        return {t.transactional_id: [int(p.partition_error_code) for x in t.topic_results
                                     for p in x.results_by_partition] for t in r.results_by_transaction}

    assert call(txn(a, pa, ea, (0,), False), txn(b, pb, eb, (0, 1), True)) == {a: [0], b: [48, 48]}
    assert call(txn(a, pa, ea, (0, 1), True), txn(b, pb, eb + 1, (0,), True)) == {a: [0, 48], b: [FENCED]}
    assert _produce(wire, topic, 0, _txn_batch([b"v"], pa, ea, 0), a)[0] == 0
    assert _produce(wire, topic, 0, _txn_batch([b"w"], pb, eb, 0), b)[0] == BAD_TXN_STATE  # b added nothing
    assert _end(wire, a, pa, ea) == 0
