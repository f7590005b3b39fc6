"""A coordinator's unstored completion of a transaction never stands for a later one.

A coordinator that wrote every marker of a prepared transaction reads it as complete
without storing that (one commit less per transaction). A transactional producer keeps its
id and epoch from one transaction to the next, so that completion must be tied to the
transaction it completed, not to the producer: when the id moved to another coordinator
meanwhile, ran its next transaction there up to PrepareCommit and came back, the first
coordinator must read that PrepareCommit (and finish its markers), not its old completion
(which would answer a retried EndTxn as done and let the next transaction's Ongoing state
overwrite a transaction committed at only some of its partitions: the harness's torn
transaction)."""
from __future__ import annotations

from dataclasses import replace

from kafkastore.protocol.coordinators import txn as T
from kafkastore.protocol.coordinators.txn_store import TxnStore
from kafkastore.storage import Storage

TID = "t-overlay"


def _txn(start_ms: int, parts) -> T.TxnMetadata:
    return T.TxnMetadata(TID, 1000, 3, 60_000, T.TxnState.ONGOING, frozenset(parts),
                         start_ms, start_ms)


def test_an_old_completion_does_not_hide_the_next_transactions_prepare(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    a, b = TxnStore(storage, broker_id=0), TxnStore(storage, broker_id=1)
    first = _txn(1_000, {("x", 0)})
    a.put(first)
    prepared = replace(first, state=T.TxnState.PREPARE_COMMIT)
    a.put(prepared, based_on=first)
    a.mark_complete(prepared)                      # markers written; Complete not stored
    assert a.get(TID).state is T.TxnState.COMPLETE_COMMIT

    # The id moves to coordinator b: it finishes the first transaction again (markers are
    # idempotent), runs the next one and prepares its commit.
    assert b.get(TID) == prepared
    b.mark_complete(prepared)
    second = _txn(2_000, {("x", 0), ("y", 1)})
    b.put(second, based_on=b.get(TID))
    prepared2 = replace(second, state=T.TxnState.PREPARE_COMMIT)
    b.put(prepared2, based_on=second)

    # Back at a: the stored PrepareCommit of the second transaction, not the first's completion.
    assert a.get(TID) == prepared2
    # and a step planned on the old completion is refused, not written over it
    from kafkastore.errors import TxnStateFencedError
    import pytest
    with pytest.raises(TxnStateFencedError):
        a.put(_txn(3_000, {("x", 0)}), based_on=T.complete(prepared, 1_500))
