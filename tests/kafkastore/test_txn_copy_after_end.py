"""A transactional batch that repeats the sequence numbers of a batch whose transaction
already ended is refused by the shared sequence rule, not answered as a duplicate.

A retry is answered before its transaction ends (a client ends a transaction only once
every batch of it is answered), so such a copy is a client that purged a batch as unsent
and reused its numbers (librdkafka did, behind a paused broker). Answered as a duplicate,
its records would be acknowledged with the ended batch's offsets and never written. The
rule lives in :func:`kafkastore.write.segments.check_sequence`; serve's appender answers
INVALID_TXN_STATE (tests/protocol/test_txn_dup_after_marker.py), the library's
:class:`LogWriter` raises. A retry inside the open transaction is still a duplicate.
"""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.errors import CommitUnknownError, OutOfOrderSequenceError
from kafkastore.format.record_batch import Record
from kafkastore.manifest import BatchMetadata, ManifestStore, ProducerState
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write import segments
from kafkastore.write.log_writer import LogWriter
from kafkastore.write.transactions import abort_transaction
from tests.faults import faulty_storage

T = "t"
PID = 4242


def _recent(*values) -> list[Record]:
    now = int(time.time() * 1000)   # recent: an idle producer's state may be dropped
    return [Record(i, now + i, b"k", v) for i, v in enumerate(values)]


def _committed(storage) -> list:
    return PartitionReader(storage, T, 0).read(0, isolation="read_committed") \
        .column("value").to_pylist()


def _end(storage, *, commit: bool) -> None:
    LogWriter(storage, producer_id=PID, housekeeping=False).write_marker(T, 0, commit=commit)


def _storage(url: str) -> Storage:
    storage = Storage(url)
    create_topic(storage, T, 1)
    return storage


# -- the rule ------------------------------------------------------------------

def _state(txn_first_offset, batches=((0, 1), (2, 4))):
    return ProducerState(epoch=0, txn_first_offset=txn_first_offset,
                         batches=tuple(BatchMetadata(f, l, 100 + f, 100 + l, -1)
                                       for f, l in batches))


@pytest.mark.parametrize("txn_first_offset, transactional, verdict", [
    (None, True, "ended"),     # no transaction open: the batch's transaction ended
    (105, True, "ended"),      # a later transaction is open: the batch was of an earlier one
    (100, True, "dup"),        # a retry inside the open transaction
    (102, True, "dup"),        # the retained batch starts the open transaction
    (103, True, "dup"),        # (a library flush: plain records, then the transaction's)
    (None, False, "dup"),      # not transactional: Kafka's duplicate
])
def test_a_transactional_copy_of_a_batch_whose_transaction_ended_has_a_verdict_of_its_own(
        txn_first_offset, transactional, verdict):
    got, value = segments.check_sequence(_state(txn_first_offset), 7, 0, 2, 4,
                                         transactional=transactional)
    if verdict == "dup":
        assert got == segments.DUPLICATE and (value.first_offset, value.last_offset) == (102, 104)
    else:
        assert got == segments.TXN_ENDED
        assert "already ended" in value and "producer 7" in value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=8), st.data())
def test_no_retained_batch_before_the_open_transaction_is_a_transactional_duplicate(counts, data):
    state, seq, offset = ProducerState(epoch=0), 0, 0
    for n in counts:
        state = state.with_batch(BatchMetadata(seq, seq + n - 1, offset, offset + n - 1, -1))
        seq, offset = seq + n, offset + n + 1        # a marker after each batch
    retained = data.draw(st.sampled_from(state.batches))
    opened = data.draw(st.sampled_from([None] + [b.first_offset for b in state.batches]))
    state = ProducerState(epoch=0, txn_first_offset=opened, batches=state.batches)
    got, _ = segments.check_sequence(state, 1, 0, retained.first_sequence,
                                     retained.last_sequence, transactional=True)
    inside = opened is not None and retained.first_offset >= opened
    assert got == (segments.DUPLICATE if inside else segments.TXN_ENDED)


# -- the library's writer -------------------------------------------------------

def test_append_batch_refuses_a_transactional_copy_of_an_aborted_transactions_batch(local_root):
    storage = _storage(local_root)
    w = LogWriter(storage, housekeeping=False)
    kw = dict(producer_id=PID, producer_epoch=0, transactional=True)
    w.append_batch(T, 0, _recent(b"a1", b"a2"), base_sequence=0, **kw)
    _end(storage, commit=False)
    hw = ManifestStore(storage, T, 0).latest().high_watermark
    with pytest.raises(OutOfOrderSequenceError, match="already ended"):
        w.append_batch(T, 0, _recent(b"b1", b"b2"), base_sequence=0, **kw)
    assert ManifestStore(storage, T, 0).latest().high_watermark == hw   # nothing written
    # Not transactional, the same copy is Kafka's duplicate (its offsets, nothing written).
    r = w.append_batch(T, 0, _recent(b"b1", b"b2"), base_sequence=0, producer_id=PID,
                       producer_epoch=0)
    assert (r.duplicate, r.base_offset, r.next_offset) == (True, 0, 2)
    assert _committed(storage) == []


def test_append_batch_retry_inside_the_open_transaction_is_a_duplicate(local_root):
    storage = _storage(local_root)
    w = LogWriter(storage, housekeeping=False)
    kw = dict(producer_id=PID, producer_epoch=0, transactional=True)
    first = w.append_batch(T, 0, _recent(b"x1", b"x2"), base_sequence=0, **kw)
    again = w.append_batch(T, 0, _recent(b"x1", b"x2"), base_sequence=0, **kw)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert (again.base_offset, again.next_offset) == (first.base_offset, first.next_offset)
    assert _committed(storage) == []                 # open: read_committed stops before it
    _end(storage, commit=True)
    assert _committed(storage) == [b"x1", b"x2"]


def _in_doubt(local_root, *, plain_first: bool = False, end=LogWriter.flush):
    """A transactional writer whose ``end`` (a flush, or the commit) landed with an unknown
    outcome (the put made, its answer and the read-back lost): its batches stay buffered."""
    _storage(local_root)
    storage, fs = faulty_storage(local_root)
    w = LogWriter(storage, producer_id=PID, housekeeping=False)
    if plain_first:
        w.send(T, b"plain", partition=0)
    w.begin_transaction()
    w.send(T, b"in-txn", partition=0)
    fs.lose_response(match="_manifest/", count=None)
    fs.fail_reads_from_write("_manifest/")
    with pytest.raises(CommitUnknownError):
        end(w)
    fs.clear()
    return storage, w


def test_a_flush_in_doubt_is_refused_once_an_operator_aborted_its_transaction(local_root):
    """The writer's own retry of batches whose commit outcome was unknown: if the commit
    landed and the transaction was aborted since (``kafkastore transactions abort``), the
    batches are not the open transaction's; answered as duplicates, the writer's COMMIT
    would report records that were aborted."""
    storage, w = _in_doubt(local_root)
    abort_transaction(storage, T, 0, PID, 0)
    with pytest.raises(OutOfOrderSequenceError, match="already ended"):
        w.flush()
    assert _committed(storage) == []


def test_a_flush_in_doubt_holding_its_own_marker_is_still_a_duplicate(local_root):
    """A commit whose data and COMMIT marker landed together with an unknown outcome: its
    retry finds the transaction ended by that very marker, and is a duplicate."""
    storage, w = _in_doubt(local_root, end=LogWriter.commit_transaction)
    [r] = w.flush()
    assert r.duplicate
    assert _committed(storage) == [b"in-txn"]


def test_a_flush_in_doubt_of_plain_records_then_its_transactions_is_still_a_duplicate(local_root):
    """One flush holding records sent before the transaction and the transaction's first:
    its retained batch reaches into the open transaction, so its retry is a duplicate."""
    storage, w = _in_doubt(local_root, plain_first=True)
    [r] = w.flush()
    assert (r.duplicate, r.base_offset, r.next_offset) == (True, 0, 2)
    w.commit_transaction()
    assert _committed(storage) == [b"plain", b"in-txn"]
