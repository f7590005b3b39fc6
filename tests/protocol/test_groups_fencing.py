"""Group writes are fenced on the wire: a coordinator whose view of a group is older than what
another coordinator wrote (it was paused, or its view of the live brokers lagged) never
commits on top of it, and OffsetFetch never answers offsets older than the log's."""
from __future__ import annotations

import sys

import pytest

from kafkastore.group_offsets import OffsetAndMetadata, OffsetsStore
from kafkastore.protocol import codec
from kafkastore.protocol import group_coordinator as G
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics import create_topic

from .wire import Wire


def _req(api: int, version: int, /, **kw):
    return codec.make(codec.request_class(api, version), **kw)


def _part(api: int, version: int, cls: str, /, **kw):
    return codec.make(sys.modules[codec.request_class(api, version).__module__], cls, **kw)


def _code(x) -> int:
    return int(getattr(x, "value", x))


def commit(w: Wire, group: str, gen: int, member: str, offsets: dict[int, int]) -> dict[int, int]:
    """OffsetCommit v6 of ``gt``'s partitions; the error code per partition."""
    r = w.call(_req(8, 6, group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                    topics=(_part(8, 6, "OffsetCommitRequestTopic", name="gt", partitions=tuple(
                        _part(8, 6, "OffsetCommitRequestPartition", partition_index=p,
                              committed_offset=o, committed_leader_epoch=-1, committed_metadata="m")
                        for p, o in offsets.items())),)))
    return {p.partition_index: _code(p.error_code) for t in r.topics for p in t.partitions}


def fetch(w: Wire, group: str, partitions=(0, 1)) -> tuple[int, dict[int, int]]:
    """OffsetFetch v5 of ``gt``'s partitions: the top-level error and the offsets."""
    r = w.call(_req(9, 5, group_id=group, require_stable=False, topics=(
        _part(9, 5, "OffsetFetchRequestTopic", name="gt", partition_indexes=tuple(partitions)),)))
    return _code(r.error_code), {p.partition_index: p.committed_offset
                                 for t in r.topics for p in t.partitions}


@pytest.fixture
def root(tmp_path):
    root = f"file://{tmp_path}"
    create_topic(Storage(root), "gt", 2)
    return root


@pytest.fixture
def broker(root):
    with BrokerThread(Storage(root), ServeOptions(port=0, heartbeat_ms=300)) as b:
        yield b


def _other_coordinator_commits(root: str, group: str, offsets: dict[int, int]) -> None:
    """What another broker that took the group over does: load it, commit as its coordinator."""
    store = OffsetsStore(Storage(root), broker_id=7)
    _, claim = store.claim(group)
    store.commit_offsets(group, {("gt", p): OffsetAndMetadata(o) for p, o in offsets.items()}, claim)


def test_a_commit_derived_from_a_stale_view_is_refused_not_written_over_newer(broker, root):
    w = Wire(broker.bootstrap)
    assert commit(w, "fg", -1, "", {0: 10}) == {0: 0}            # loaded here, at 10
    _other_coordinator_commits(root, "fg", {0: 20})               # acknowledged elsewhere
    assert commit(w, "fg", -1, "", {0: 15}) == {0: G.NOT_COORDINATOR}
    assert OffsetsStore(Storage(root)).group("fg").offsets[("gt", 0)].offset == 20
    assert fetch(w, "fg") == (0, {0: 20, 1: -1})                  # read again from the log
    assert commit(w, "fg", -1, "", {0: 25}) == {0: 0}             # the retry, on the fresh claim
    assert fetch(w, "fg") == (0, {0: 25, 1: -1})


def test_offset_fetch_never_answers_older_than_the_log(broker, root):
    w = Wire(broker.bootstrap)
    assert commit(w, "ff", -1, "", {0: 3, 1: 4}) == {0: 0, 1: 0}
    assert fetch(w, "ff") == (0, {0: 3, 1: 4})
    _other_coordinator_commits(root, "ff", {1: 9})
    assert fetch(w, "ff") == (0, {0: 3, 1: 9})


def test_queued_group_metadata_of_a_dropped_group_is_not_written(broker, root):
    """A fence drops the loaded groups and their queued metadata writes: nothing derived
    from the old authority is written afterwards."""
    from kafkastore.protocol.api_groups import service
    w = Wire(broker.bootstrap)
    assert commit(w, "fm", -1, "", {0: 1}) == {0: 0}
    registry = broker.server.brokers
    before = registry.fence_epoch
    registry.fence("test: as after a pause")
    assert registry.fence_epoch == before + 1 and not registry.authority_valid()
    assert fetch(w, "fm") == (0, {0: 1, 1: -1})                   # renewed, read again
    assert registry.authority_valid()
    svc = service(broker.server)
    assert svc.claim("fm") is not None and svc.claim("fm").authority == registry.fence_epoch
