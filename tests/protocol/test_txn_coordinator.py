"""The transaction coordinator's pure state machine and its ``__transaction_state`` records."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.errors import CorruptRecordError
from kafkastore.protocol.coordinators import txn as T
from kafkastore.protocol.coordinators.txn import TxnMetadata, TxnState

NOW = 1_700_000_000_000


def _init(cur=None, timeout=60_000, now=NOW, pid=1000):
    step = T.init_producer_id(cur, "tid", timeout, now, pid)
    assert step.error == T.NONE
    return step.meta


def test_init_gives_a_new_id_then_bumps_the_epoch():
    m = _init()
    assert (m.producer_id, m.producer_epoch, m.state) == (1000, 0, TxnState.EMPTY)
    m2 = _init(m, pid=-1)
    assert (m2.producer_id, m2.producer_epoch) == (1000, 1)
    # An exhausted epoch moves to the new producer id given.
    worn = TxnMetadata("tid", 1000, T.MAX_EPOCH - 1, 60_000)
    fresh = _init(worn, pid=2000)
    assert (fresh.producer_id, fresh.producer_epoch) == (2000, 0)


def test_timeout_is_bounded_by_the_broker_maximum():
    assert T.init_producer_id(None, "tid", 0, NOW, 1).error == T.INVALID_TRANSACTION_TIMEOUT
    assert T.init_producer_id(None, "tid", T.DEFAULT_MAX_TIMEOUT_MS + 1, NOW, 1).error == \
        T.INVALID_TRANSACTION_TIMEOUT
    assert T.init_producer_id(None, "tid", 5000, NOW, 1, max_timeout_ms=4000).error == \
        T.INVALID_TRANSACTION_TIMEOUT


def test_commit_walks_ongoing_prepare_complete():
    m = _init()
    on = T.add_partitions(m, 1000, 0, [("t", 0), ("t", 1)], NOW + 1).meta
    assert on.state is TxnState.ONGOING and on.partitions == {("t", 0), ("t", 1)}
    assert on.txn_start_ms == NOW + 1
    assert T.add_partitions(on, 1000, 0, [("t", 1)], NOW + 2) == T.Step()  # nothing new: no write
    more = T.add_partitions(on, 1000, 0, [("u", 0)], NOW + 3).meta
    assert more.txn_start_ms == NOW + 1 and len(more.partitions) == 3
    prep = T.end_txn(more, 1000, 0, True, NOW + 4).meta
    assert prep.state is TxnState.PREPARE_COMMIT
    # Prepared: a retry returns the same state (markers again), adding partitions must wait.
    assert T.end_txn(prep, 1000, 0, True, NOW + 5).meta == prep
    assert T.end_txn(prep, 1000, 0, False, NOW + 5).error == T.INVALID_TXN_STATE
    assert T.add_partitions(prep, 1000, 0, [("t", 0)], NOW + 5).error == T.CONCURRENT_TRANSACTIONS
    assert T.init_producer_id(prep, "tid", 60_000, NOW, 1).error == T.CONCURRENT_TRANSACTIONS
    done = T.complete(prep, NOW + 6)
    assert done.state is TxnState.COMPLETE_COMMIT and done.partitions == frozenset()
    assert T.end_txn(done, 1000, 0, True, NOW + 7) == T.Step()  # retried after completion
    assert T.end_txn(done, 1000, 0, False, NOW + 7).error == T.INVALID_TXN_STATE
    # The next transaction starts afresh.
    nxt = T.add_partitions(done, 1000, 0, [("t", 0)], NOW + 8).meta
    assert nxt.partitions == {("t", 0)} and nxt.txn_start_ms == NOW + 8


@given(first=st.integers(0, 2**40), behind=st.integers(0, 10**6))
def test_each_transaction_of_an_id_starts_after_the_previous_one_whatever_the_clock(first, behind):
    """The start names a transaction (pending offsets, the partitions' open transactions): a
    coordinator whose clock is behind the previous one's still starts a later one."""
    done = T.complete(T.end_txn(T.add_partitions(_init(now=first), 1000, 0, [("t", 0)], first).meta,
                                1000, 0, True, first).meta, first)
    nxt = T.add_partitions(done, 1000, 0, [("t", 0)], first - behind).meta
    assert nxt.txn_start_ms > done.txn_start_ms


def test_abort_and_end_without_transaction():
    m = _init()
    assert T.end_txn(m, 1000, 0, True, NOW).error == T.INVALID_TXN_STATE
    on = T.add_partitions(m, 1000, 0, [("t", 0)], NOW).meta
    ab = T.end_txn(on, 1000, 0, False, NOW).meta
    assert ab.state is TxnState.PREPARE_ABORT
    assert T.complete(ab, NOW).state is TxnState.COMPLETE_ABORT


def test_fencing_and_wrong_producers():
    m = _init()
    on = T.add_partitions(m, 1000, 0, [("t", 0)], NOW).meta
    fenced = T.fence(on, NOW + 1).meta
    assert fenced.state is TxnState.PREPARE_ABORT and fenced.producer_epoch == 1
    assert T.fence(m, NOW).error == T.INVALID_TXN_STATE
    # The old epoch is fenced everywhere; a wrong id is a mapping error; unknown ids not found.
    assert T.add_partitions(fenced, 1000, 0, [("t", 0)], NOW).error == T.PRODUCER_FENCED
    assert T.end_txn(fenced, 1000, 0, True, NOW).error == T.PRODUCER_FENCED
    # Kafka's coordinator: any epoch but the current one (newer, -1) is PRODUCER_FENCED too.
    assert T.end_txn(fenced, 1000, 5, True, NOW).error == T.PRODUCER_FENCED
    assert T.add_partitions(fenced, 1000, -1, [("t", 0)], NOW).error == T.PRODUCER_FENCED
    assert T.end_txn(fenced, 999, 1, True, NOW).error == T.INVALID_PRODUCER_ID_MAPPING
    assert T.add_partitions(None, 1000, 0, [("t", 0)], NOW).error == T.INVALID_PRODUCER_ID_MAPPING
    assert T.end_txn(None, 1000, 0, True, NOW).error == T.INVALID_PRODUCER_ID_MAPPING
    assert T.compat_error(T.PRODUCER_FENCED, 1) == T.INVALID_PRODUCER_EPOCH
    assert T.compat_error(T.PRODUCER_FENCED, 2) == T.PRODUCER_FENCED


def test_kip360_expected_producer_id_and_epoch():
    m = _init()  # producer 1000, epoch 0, Empty
    assert T.check_expected(m, -1, -1) is None                        # a new instance: bump
    assert T.check_expected(m, 1000, 0) is None                       # its own epoch: bump
    bumped = T.init_producer_id(m, "tx", 60000, NOW, -1).meta
    assert (bumped.producer_id, bumped.producer_epoch) == (1000, 1)
    assert T.check_expected(bumped, 1000, 0).meta == bumped           # retry: unchanged
    assert T.check_expected(bumped, 1000, 3).error == T.PRODUCER_FENCED
    assert T.check_expected(bumped, 999, 1).error == T.PRODUCER_FENCED
    assert T.check_expected(bumped, 1000, -1).error == T.INVALID_REQUEST
    assert T.check_expected(None, 1000, 4) is None                    # unknown id: a new one
    ongoing = T.add_partitions(bumped, 1000, 1, [("t", 0)], NOW).meta
    assert T.check_expected(ongoing, 1000, 0).error == T.PRODUCER_FENCED  # no retry mid-transaction
    assert T.init_producer_id(bumped, "tx", 60000, NOW, -1, bump=False).meta.producer_epoch == 1


def test_expiry_uses_the_injected_time():
    on = T.add_partitions(_init(timeout=1000), 1000, 0, [("t", 0)], NOW).meta
    assert not on.expired(NOW + 1000)
    assert on.expired(NOW + 1001)
    assert not _init(timeout=1000).expired(NOW + 10_000)  # nothing open: nothing to abort


def test_records_are_kafkas_schemas():
    m = TxnMetadata("my-id", 42, 3, 60_000, TxnState.ONGOING, frozenset({("t", 1), ("t", 0), ("u", 2)}),
                    NOW + 5, NOW)
    assert T.encode_key("my-id") == b"\x00\x00\x00\x05my-id"
    value = T.encode_value(m)
    # version 0, pid, epoch, timeout, status, 2 topics: t [0, 1], u [2], last update, start.
    assert value == (struct.pack(">hqhib", 0, 42, 3, 60_000, 1) + struct.pack(">i", 2)
                     + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 1)
                     + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 2)
                     + struct.pack(">qq", NOW + 5, NOW))
    assert T.decode_key(T.encode_key("my-id")) == "my-id"
    assert T.decode_value("my-id", value) == m


def test_reads_flexible_v1_values_with_tagged_fields():
    # TransactionLogValue v1: compact array / strings (length + 1), tagged fields per struct and
    # at the end (here PreviousProducerId, tag 0).
    body = (struct.pack(">hqhib", 1, 7, 2, 30_000, 4) + bytes([2]) + bytes([2]) + b"t"
            + bytes([3]) + struct.pack(">ii", 0, 4) + bytes([0]) + struct.pack(">qq", NOW, NOW - 1)
            + bytes([1, 0, 8]) + struct.pack(">q", 6))
    m = T.decode_value("x", body)
    assert (m.producer_id, m.producer_epoch, m.timeout_ms, m.state) == (7, 2, 30_000, TxnState.COMPLETE_COMMIT)
    assert m.partitions == {("t", 0), ("t", 4)} and (m.last_update_ms, m.txn_start_ms) == (NOW, NOW - 1)
    # Null partitions (v0 length -1) read as none.
    v0 = struct.pack(">hqhibi", 0, 7, 2, 30_000, 0, -1) + struct.pack(">qq", NOW, -1)
    assert T.decode_value("x", v0).partitions == frozenset()


def test_bad_records_are_corrupt_not_crashes():
    with pytest.raises(CorruptRecordError):
        T.decode_value("x", b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError):
        T.decode_value("x", struct.pack(">h", 9))
    with pytest.raises(CorruptRecordError):
        T.decode_value("x", struct.pack(">hqhibi", 0, 7, 2, 30_000, 99, 0) + struct.pack(">qq", 0, 0))
    assert T.decode_key(struct.pack(">h", 1) + b"\x00\x01x") is None  # other key versions: skipped


_parts = st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=8)


@given(tid=st.text(max_size=50), pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, T.MAX_EPOCH - 1),
       timeout=st.integers(1, 2**31 - 1), state=st.sampled_from(list(TxnState)), parts=_parts,
       last=st.integers(-1, 2**62), start=st.integers(-1, 2**62))
@settings(suppress_health_check=[HealthCheck.too_slow])  # a loaded CI machine draws slowly
def test_value_roundtrip(tid, pid, epoch, timeout, state, parts, last, start):
    m = TxnMetadata(tid, pid, epoch, timeout, state, parts, last, start)
    assert T.decode_value(tid, T.encode_value(m)) == m
    assert T.decode_key(T.encode_key(tid)) == tid
