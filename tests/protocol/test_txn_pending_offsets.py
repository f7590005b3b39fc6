"""Offsets sent with a transaction (TxnOffsetCommit) wait under ``_txn_offsets/`` until the
transaction ends. They belong to that one transaction: a completion of the previous
transaction of the same producer epoch that runs again late (a retried EndTxn, the timeout
check of another broker, a paused coordinator resuming) must neither apply the next
transaction's offsets nor drop them. The fault harness's exactly-once pipeline saw the
first: an aborted transaction's offsets committed, its inputs never output."""
from __future__ import annotations

from kafkastore.protocol.coordinators.pending_offsets import add_pending_offsets, take_pending_offsets
from kafkastore.storage import Storage

PID, EPOCH, GROUP = 7, 3, "eos-g"


def _offsets(taken):
    return {group: offsets for _path, group, offsets in taken}


def test_a_late_completion_of_the_previous_transaction_takes_nothing_of_the_next(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    add_pending_offsets(storage, PID, EPOCH, GROUP, {("in", 0): (1100, -1, "")}, txn_start_ms=1000)
    first = take_pending_offsets(storage, PID, EPOCH, 1000)
    assert _offsets(first) == {GROUP: {("in", 0): (1100, -1, "")}}
    storage.delete([p for p, _, _ in first])

    # The next transaction of the same epoch sends its offsets, then the first one's
    # completion runs again: it finds nothing of its own.
    add_pending_offsets(storage, PID, EPOCH, GROUP, {("in", 0): (1150, -1, "")}, txn_start_ms=2000)
    assert take_pending_offsets(storage, PID, EPOCH, 1000) == []
    # The next one's own end still sees its offsets (applied on commit, dropped on abort).
    assert _offsets(take_pending_offsets(storage, PID, EPOCH, 2000)) == {
        GROUP: {("in", 0): (1150, -1, "")}}


def test_offsets_left_by_an_earlier_transaction_are_not_merged_into_the_next(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    # A TxnOffsetCommit that lands after its transaction ended (a paused group coordinator).
    add_pending_offsets(storage, PID, EPOCH, GROUP, {("in", 1): (500, -1, "")}, txn_start_ms=1000)
    add_pending_offsets(storage, PID, EPOCH, GROUP, {("in", 0): (40, -1, "")}, txn_start_ms=2000)
    assert _offsets(take_pending_offsets(storage, PID, EPOCH, 2000)) == {
        GROUP: {("in", 0): (40, -1, "")}}


def test_older_epochs_are_dropped_and_newer_ones_kept(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    add_pending_offsets(storage, PID, EPOCH + 1, GROUP, {("in", 0): (9, -1, "")}, txn_start_ms=5)
    # A completion at an older epoch (a zombie) leaves the newer epoch's offsets alone.
    assert take_pending_offsets(storage, PID, EPOCH, 1000) == []
    # A completion at a newer epoch settles the older document with no offsets.
    taken = take_pending_offsets(storage, PID, EPOCH + 2, 7)
    assert _offsets(taken) == {GROUP: {}} and len(taken) == 1


def test_a_late_completion_keeps_the_next_transactions_offsets_whatever_the_clocks():
    """The previous transaction was begun by a coordinator whose clock ran 72 s ahead (the
    fault harness's skewed broker), the next one by a coordinator on time. Were the next
    start read from the clock alone it would be the earlier one, and a late completion of
    the previous transaction would settle the next one's offsets as left over (deleted,
    never applied): a committed transaction's offsets lost, its consumer restarted from
    before it (the harness's committed-offset regression of a transactional group)."""
    import tempfile

    from kafkastore.protocol.coordinators import txn as T

    skewed_now = 1_700_000_072_600
    on_time_now = skewed_now - 72_600
    meta = T.init_producer_id(None, "tid", 60_000, skewed_now, PID).meta
    meta = T.add_partitions(meta, PID, 0, [("in", 0)], skewed_now).meta
    previous = T.end_txn(meta, PID, 0, True, skewed_now).meta
    # The next transaction begins on the on-time coordinator (from the completed state).
    nxt = T.add_partitions(T.complete(previous, on_time_now), PID, 0, [("in", 0)], on_time_now).meta
    with tempfile.TemporaryDirectory() as tmp:
        storage = Storage(f"file://{tmp}/root")
        add_pending_offsets(storage, PID, 0, GROUP, {("in", 0): (77, -1, "")},
                            txn_start_ms=nxt.txn_start_ms)
        assert take_pending_offsets(storage, PID, 0, previous.txn_start_ms) == []   # late, skewed
        assert _offsets(take_pending_offsets(storage, PID, 0, nxt.txn_start_ms)) == {
            GROUP: {("in", 0): (77, -1, "")}}
