"""Transaction markers and the aborted-transaction scan."""
from __future__ import annotations

import pytest

from kafkastore.format.control import (
    ControlType, encode_marker_batch, marker_key, marker_value, parse_control_record,
    parse_marker_value)
from kafkastore.errors import CorruptRecordError
from kafkastore.format.record_batch import (
    BatchHeader, Record, decode_batch, encode_batch, parse_header)
from kafkastore.format.transactions import (
    AbortedTxn, control_type_of, is_aborted, iter_control_types, scan_transactions)


# ------------------------------------------------------------------ markers

@pytest.mark.parametrize("commit,key_hex", [(True, "00000001"), (False, "00000000")])
def test_marker_batch(commit, key_hex):
    batch = encode_marker_batch(offset=42, timestamp=1_700_000_000_000, producer_id=9,
                                producer_epoch=4, commit=commit, coordinator_epoch=7,
                                partition_leader_epoch=3)
    h, records = decode_batch(batch)
    assert h.is_control and h.is_transactional
    assert (h.base_offset, h.last_offset, h.record_count) == (42, 42, 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 4, -1)
    assert h.partition_leader_epoch == 3
    assert h.compression == 0 and h.timestamp_type == 0
    assert h.base_timestamp == h.max_timestamp == 1_700_000_000_000
    (rec,) = records
    assert rec.key.hex() == key_hex
    assert rec.value.hex() == "0000" + "00000007"
    assert rec.headers == ()
    assert parse_control_record(rec.key, rec.value) is (
        ControlType.COMMIT if commit else ControlType.ABORT)
    assert parse_marker_value(rec.value) == 7


def test_control_type_values_are_kafkas():
    assert (ControlType.ABORT, ControlType.COMMIT) == (0, 1)
    assert marker_key(True) == b"\x00\x00\x00\x01"
    assert marker_value(5) == b"\x00\x00\x00\x00\x00\x05"


def test_unknown_and_kraft_types():
    assert parse_control_record(b"\x00\x00\x00\x63") is ControlType.UNKNOWN
    assert parse_control_record(b"\x00\x00\x00\x02") is ControlType.LEADER_CHANGE
    # A newer key version is read (Kafka logs and goes on), extra bytes ignored.
    assert parse_control_record(b"\x00\x01\x00\x01\xff") is ControlType.COMMIT


def test_newer_marker_value_version_is_read():
    assert parse_marker_value(b"\x00\x01\x00\x00\x00\x09\x00\x01") == 9


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", b"\xff\xff\x00\x01"])
def test_bad_control_keys(key):
    with pytest.raises(CorruptRecordError):
        parse_control_record(key)


@pytest.mark.parametrize("value", [None, b"", b"\x00\x00\x00\x00\x00", b"\xff\xff\x00\x00\x00\x00"])
def test_bad_marker_values(value):
    with pytest.raises(CorruptRecordError):
        parse_marker_value(value)
    with pytest.raises(CorruptRecordError):
        parse_control_record(marker_key(False), value if value is not None else b"")


# --------------------------------------------------------------- scanning

def data(offset, pid=-1, txn=False, n=1):
    return encode_batch([Record(offset + i, 1, b"k", b"v") for i in range(n)],
                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=0 if pid >= 0 else -1, transactional=txn)


def marker(offset, pid, commit):
    return encode_marker_batch(offset=offset, timestamp=1, producer_id=pid,
                               producer_epoch=0, commit=commit)


def scan(*batches):
    return scan_transactions(iter_control_types(b"".join(batches)))


def test_commit_and_abort():
    aborted, open_txns = scan(
        data(0, pid=1, txn=True, n=3),      # 0-2  pid 1
        data(3, pid=2, txn=True),           # 3    pid 2
        data(4),                            # 4    plain
        marker(5, 1, commit=False),         # 5    abort pid 1
        data(6, pid=2, txn=True, n=2),      # 6-7  pid 2 again, same txn
        marker(8, 2, commit=True),          # 8    commit pid 2
    )
    assert aborted == [AbortedTxn(1, 0, 5)]
    assert open_txns == {}


def test_open_transactions_and_sequential_transactions():
    aborted, open_txns = scan(
        data(0, pid=1, txn=True),
        marker(1, 1, commit=False),
        data(2, pid=1, txn=True),            # a second transaction of pid 1
        marker(3, 1, commit=False),
        data(4, pid=1, txn=True),            # a third, still open
        data(5, pid=3, txn=True, n=2),       # another producer, open
        data(7, pid=3, txn=True),
    )
    assert aborted == [AbortedTxn(1, 0, 1), AbortedTxn(1, 2, 3)]
    assert open_txns == {1: 4, 3: 5}


def test_marker_without_open_transaction_is_ignored():
    aborted, open_txns = scan(marker(0, 5, commit=False), data(1), marker(2, 5, commit=True))
    assert (aborted, open_txns) == ([], {})


def test_idempotent_non_transactional_batches_do_not_open_transactions():
    aborted, open_txns = scan(data(0, pid=4, txn=False), marker(1, 4, commit=False))
    assert (aborted, open_txns) == ([], {})


def test_unknown_and_empty_control_batches_are_ignored():
    pid = 6
    odd = encode_batch([Record(1, 1, b"\x00\x00\x00\x07", b"")], control=True,
                       transactional=True, producer_id=pid, producer_epoch=0)
    empty = encode_batch([], base_offset=2, last_offset=2, control=True, transactional=True,
                         producer_id=pid, producer_epoch=0)
    types = [t for _, t in iter_control_types(data(0, pid=pid, txn=True) + odd + empty)]
    assert types == [None, ControlType.UNKNOWN, None]
    aborted, open_txns = scan(data(0, pid=pid, txn=True), odd, empty)
    assert (aborted, open_txns) == ([], {pid: 0})


def test_scan_from_headers_only():
    # scan_transactions needs only headers and types, not bytes.
    def header(base, pid, txn=True, control=False, n=1):
        return BatchHeader(base, 49, 0, 2, 0, (0x10 if txn else 0) | (0x20 if control else 0),
                           n - 1, 0, 0, pid, 0, 0, n)
    aborted, open_txns = scan_transactions([
        (header(10, 1, n=5), None), (header(15, 2), None),
        (header(16, 1, control=True), ControlType.ABORT),
        (header(17, 2, control=True), ControlType.COMMIT),
    ])
    assert aborted == [AbortedTxn(1, 10, 16)] and open_txns == {}


def test_is_aborted():
    txns = [AbortedTxn(1, 10, 20), AbortedTxn(2, 30, 31)]

    def h(offset, pid, txn=True, control=False):
        return parse_header(marker(offset, pid, False) if control else data(offset, pid, txn))

    assert is_aborted(h(10, 1), txns)
    assert is_aborted(h(19, 1), txns)
    assert not is_aborted(h(9, 1), txns)         # before the transaction
    assert not is_aborted(h(21, 1), txns)        # after its marker
    assert not is_aborted(h(15, 2), txns)        # another producer
    assert not is_aborted(h(15, 1, txn=False), txns)   # not transactional
    assert not is_aborted(h(20, 1, control=True), txns)  # the marker itself
    assert is_aborted(h(30, 2), txns)
    assert not is_aborted(h(30, 2), [])


def test_control_type_of_and_corrupt_control_record_location():
    log = data(0) + marker(1, 1, commit=True)
    assert control_type_of(log, len(data(0)), parse_header(log, len(data(0)))) is (
        ControlType.COMMIT)
    bad = encode_batch([Record(5, 1, b"\x00", b"")], control=True, transactional=True,
                       producer_id=1, producer_epoch=0)
    with pytest.raises(CorruptRecordError) as info:
        list(iter_control_types(data(0) + bad, segment="s.log"))
    assert (info.value.segment, info.value.offset, info.value.position) == (
        "s.log", 5, len(data(0)))
