"""Writes of a transaction's coordinator state are conditional on the state they were
planned on: a coordinator that read the state, lost its authority (paused, or the id moved)
and writes afterwards writes nothing, instead of landing its stale step on top of newer
state (an epoch going backwards, a commit discarded later by an abort)."""
from __future__ import annotations

import pytest

from kafkastore.errors import TxnStateFencedError
from kafkastore.protocol.coordinators import txn as T
from kafkastore.protocol.coordinators.txn_store import TxnStore
from kafkastore.storage import Storage


def _meta(epoch: int, state=T.TxnState.ONGOING, parts=(("t", 0),), now=1_000):
    return T.TxnMetadata("tx", 7, epoch, 60_000, state, frozenset(parts), now, now)


def test_a_stale_coordinator_writes_nothing(local_root):
    a, b = TxnStore(Storage(local_root)), TxnStore(Storage(local_root), broker_id=1)
    a.put(_meta(0))                          # seeded
    seen_by_a = a.get("tx")
    assert seen_by_a == _meta(0)
    # b takes the id over (a was paused) and fences the producer: epoch 1.
    b.put(_meta(1, T.TxnState.PREPARE_ABORT), b.get("tx"))
    # a resumes and completes what it had read: refused, nothing written.
    with pytest.raises(TxnStateFencedError):
        a.put(_meta(0, T.TxnState.PREPARE_COMMIT), seen_by_a)
    assert TxnStore(Storage(local_root)).get("tx") == _meta(1, T.TxnState.PREPARE_ABORT)


def test_the_deferred_completion_never_lands_on_a_newer_state(local_root):
    a, b = TxnStore(Storage(local_root)), TxnStore(Storage(local_root), broker_id=1)
    prepared = _meta(0, T.TxnState.PREPARE_COMMIT)
    a.put(prepared)
    a.get("tx")
    a.mark_complete(prepared)                # markers written; Complete stored later
    done = a.unstored_complete("tx")
    assert done is not None and done.state is T.TxnState.COMPLETE_COMMIT
    newer = _meta(0, T.TxnState.ONGOING, parts=(("t", 1),), now=2_000)   # the next transaction
    b.put(newer, b.get("tx"))
    with pytest.raises(TxnStateFencedError):
        a.put(done, done)
    assert TxnStore(Storage(local_root)).get("tx") == newer


def test_writers_of_other_ids_in_the_same_partition_do_not_fence(local_root):
    a, b = TxnStore(Storage(local_root)), TxnStore(Storage(local_root), broker_id=1)
    a.put(_meta(0))
    seen = a.get("tx")
    other = T.TxnMetadata("other-id", 8, 0, 60_000, T.TxnState.ONGOING, frozenset(), 1, 1)
    b.put(other, None)                       # lands first in the same partition, maybe
    a.put(_meta(0, T.TxnState.PREPARE_COMMIT), seen)
    assert TxnStore(Storage(local_root)).get("tx").state is T.TxnState.PREPARE_COMMIT
