"""Group writes are fenced on the wire: a coordinator whose view of a group is older than what
another coordinator wrote (it was paused, or its view of the live brokers lagged) never
commits on top of it, and OffsetFetch never answers offsets older than the log's."""
from __future__ import annotations

import pytest

from kafkastore.groups.offsets import OffsetAndMetadata, OffsetsStore
from kafkastore.protocol.coordinators import group as G
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.group_requests import code as _code, offset_commit as commit, offset_fetch as fetch
from tests.helpers.group_requests import part as _part, req as _req
from .wire import Wire


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
    from kafkastore.protocol.apis.groups import service
    w = Wire(broker.bootstrap)
    assert commit(w, "fm", -1, "", {0: 1}) == {0: 0}
    registry = broker.server.brokers
    before = registry.fence_epoch
    registry.fence("test: as after a pause")
    assert registry.fence_epoch == before + 1 and not registry.authority_valid()
    with pytest.raises(ConnectionError):   # a connection from before the fence is not served
        fetch(w, "fm")
    w = Wire(broker.bootstrap)                                    # the client reconnects
    assert fetch(w, "fm") == (0, {0: 1, 1: -1})                   # renewed, read again
    assert registry.authority_valid()
    svc = service(broker.server)
    assert svc.claim("fm") is not None and svc.claim("fm").authority == registry.fence_epoch
