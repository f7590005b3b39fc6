"""A group coordinator writes ``__consumer_offsets`` only under the claim it loaded the group
with: a coordinator that lost the group (another coordinator wrote it since, or its broker's
authority changed) is refused, never writes on top of newer offsets."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from kafkastore.errors import FencedError
from kafkastore.groups.offsets import OffsetAndMetadata, OffsetsStore
from kafkastore.storage import Storage

TP = ("t", 0)


def _om(offset: int) -> dict:
    return {TP: OffsetAndMetadata(offset)}


def _stored(root: str, group: str) -> int | None:
    om = OffsetsStore(Storage(root)).group(group).offsets.get(TP)
    return None if om is None else om.offset


def test_a_stale_coordinator_cannot_commit_over_the_new_one(tmp_path):
    root = f"file://{tmp_path}"
    a, b = OffsetsStore(Storage(root), broker_id=0), OffsetsStore(Storage(root), broker_id=1)
    _, ca = a.claim("g")
    a.commit_offsets("g", _om(10), ca)
    _, cb = b.claim("g")                       # the group moved to b, which reads 10
    b.commit_offsets("g", _om(20), cb)         # and acknowledges 20
    with pytest.raises(FencedError, match="another coordinator"):
        a.commit_offsets("g", _om(10), ca)    # a, back from a pause, still holds its old claim
    assert _stored(root, "g") == 20
    b.commit_offsets("g", _om(30), cb)         # b's claim still holds
    state, ca = a.claim("g")                   # a reads the group again: it sees 30
    assert state.offsets[TP].offset == 30
    a.commit_offsets("g", _om(40), ca)
    with pytest.raises(FencedError):
        b.commit_offsets("g", _om(35), cb)
    assert _stored(root, "g") == 40


def test_other_groups_and_unclaimed_writes_do_not_fence(tmp_path):
    root = f"file://{tmp_path}"
    a, b = OffsetsStore(Storage(root), partitions=1), OffsetsStore(Storage(root), partitions=1)
    _, ca = a.claim("g")
    _, cb = b.claim("h")                       # same partition, another group, another broker
    b.commit_offsets("h", _om(5), cb)
    b.commit_offsets("g", _om(7))              # a transaction's offsets: written under its own tokens
    a.commit_offsets("g", _om(8), ca)          # the partition moved on: retried at its new end
    assert _stored(root, "g") == 8 and _stored(root, "h") == 5


def test_a_lapsed_authority_or_a_released_claim_writes_nothing(tmp_path):
    root = f"file://{tmp_path}"
    token = [3]
    a = OffsetsStore(Storage(root), authority=lambda: token[0])
    _, claim = a.claim("g")
    a.commit_offsets("g", _om(1), claim)
    token[0] = None                            # lease lapsed (paused past the liveness window)
    with pytest.raises(FencedError, match="authority"):
        a.commit_offsets("g", _om(2), claim)
    token[0] = 4                               # fenced and renewed: the old claim stays dead
    with pytest.raises(FencedError, match="authority"):
        a.commit_offsets("g", _om(2), claim)
    _, claim = a.claim("g")
    a.release("g")
    with pytest.raises(FencedError, match="gave the group up"):
        a.commit_offsets("g", _om(2), claim)
    assert _stored(root, "g") == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["claim", "commit"]), st.integers(0, 2)), max_size=25))
def test_only_writes_under_a_current_claim_land(tmp_path_factory, ops):
    """Model: a claimed write lands iff no other coordinator's write landed since its claim;
    the stored offset is always the last write that landed."""
    root = f"file://{tmp_path_factory.mktemp('fence')}"
    stores = [OffsetsStore(Storage(root), partitions=1, broker_id=i) for i in range(3)]
    claims, claimed_at, landed = [None] * 3, [0] * 3, []
    for step, (op, i) in enumerate(ops):
        if op == "claim" or claims[i] is None:
            claims[i] = stores[i].claim("g")[1]
            claimed_at[i] = len(landed)
            continue
        current = all(w == i for w in landed[claimed_at[i]:])
        try:
            stores[i].commit_offsets("g", _om(step), claims[i])
        except FencedError:
            assert not current
            continue
        assert current
        landed.append(i)
        claimed_at[i] = len(landed)
        assert _stored(root, "g") == step
