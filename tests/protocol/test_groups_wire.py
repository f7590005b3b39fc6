"""The group APIs on the wire (raw kio requests): error codes, fencing, coordinator moves."""
from __future__ import annotations

import sys
import time

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.groups.offsets import (OffsetsStore, encode_consumer_assignment,
                                       encode_consumer_subscription)
from kafkastore.protocol.wire import codec
from kafkastore.protocol.coordinators import group as G
from kafkastore.protocol.apis.groups import coordinator_node
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from .wire import Wire


def req(api: int, version: int, /, **kw):
    return codec.make(codec.request_class(api, version), **kw)


def part(api: int, version: int, cls: str, /, **kw):
    mod = sys.modules[codec.request_class(api, version).__module__]
    return codec.make(mod, cls, **kw)


def code(x) -> int:
    return int(getattr(x, "value", x))


SUB = encode_consumer_subscription(["gt"])


def join(w: Wire, group: str, member_id: str = "", instance=None, v: int = 5, session: int = 6000):
    return w.call(req(11, v, group_id=group, session_timeout=session, rebalance_timeout=3000,
                      member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                      protocols=(part(11, v, "JoinGroupRequestProtocol", name="range", metadata=SUB),)))


def sync(w: Wire, group: str, gen: int, member: str, assignments=()):
    return w.call(req(14, 3, group_id=group, generation_id=gen, member_id=member, group_instance_id=None,
                      assignments=tuple(part(14, 3, "SyncGroupRequestAssignment", member_id=m, assignment=a)
                                        for m, a in assignments)))


def commit(w: Wire, group: str, gen: int, member: str, offsets: dict[int, int]):
    r = w.call(req(8, 6, group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                   topics=(part(8, 6, "OffsetCommitRequestTopic", name="gt", partitions=tuple(
                       part(8, 6, "OffsetCommitRequestPartition", partition_index=p, committed_offset=o,
                            committed_leader_epoch=-1, committed_metadata="m") for p, o in offsets.items())),)))
    return {p.partition_index: code(p.error_code) for t in r.topics for p in t.partitions}


def fetch(w: Wire, group: str, partitions=(0, 1)):
    r = w.call(req(9, 5, group_id=group, topics=(part(9, 5, "OffsetFetchRequestTopic", name="gt",
                                                      partition_indexes=tuple(partitions)),),
                   require_stable=False))
    return code(r.error_code), {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = "file://" + str(tmp_path_factory.mktemp("groups-root"))
    s = Storage(root)
    create_topic(s, "gt", 2)
    b = Broker(s)
    for i in range(10):
        b.send("gt", b"x", partition=i % 2)
    b.flush()
    return root


@pytest.fixture(scope="module")
def broker(root):
    with BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=300)) as b:
        yield b


def test_join_sync_commit_and_fencing(broker):
    w = Wire(broker.bootstrap)
    fc = w.call(req(10, 3, key="wg", key_type=0))
    assert code(fc.error_code) == 0 and fc.port == broker.server.port
    r = join(w, "wg")
    assert code(r.error_code) == G.MEMBER_ID_REQUIRED and r.member_id   # JoinGroup v4+
    a = join(w, "wg", r.member_id)
    assert code(a.error_code) == 0 and a.generation_id == 1 and a.leader == a.member_id
    assert [m.metadata for m in a.members] == [SUB]
    s = sync(w, "wg", 1, a.member_id, [(a.member_id, encode_consumer_assignment({"gt": [0, 1]}))])
    assert code(s.error_code) == 0 and s.assignment == encode_consumer_assignment({"gt": [0, 1]})
    assert commit(w, "wg", 1, a.member_id, {0: 3, 1: 4}) == {0: 0, 1: 0}
    assert fetch(w, "wg") == (0, {0: 3, 1: 4})

    # a second member: the first learns of the rebalance from its heartbeat, rejoins
    w2 = Wire(broker.bootstrap)
    b_id = join(w2, "wg").member_id
    w2.send(req(11, 5, group_id="wg", session_timeout=6000, rebalance_timeout=3000, member_id=b_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=(part(11, 5, "JoinGroupRequestProtocol", name="range", metadata=SUB),)))
    hb = w.call(req(12, 3, group_id="wg", generation_id=1, member_id=a.member_id, group_instance_id=None))
    assert code(hb.error_code) == G.REBALANCE_IN_PROGRESS
    a2 = join(w, "wg", a.member_id)
    assert a2.generation_id == 2 and len(a2.members) == 2
    _, b2 = codec.decode_response(w2.recv_frame(), 11, 5)
    assert b2.generation_id == 2 and b2.members == ()
    # the stale generation is fenced: its commit does not land
    assert commit(w, "wg", 1, a.member_id, {0: 9}) == {0: G.ILLEGAL_GENERATION}
    assert commit(w, "wg", 2, "ghost", {0: 9}) == {0: G.UNKNOWN_MEMBER_ID}
    assert commit(w, "wg", -1, "", {0: 9}) == {0: G.UNKNOWN_MEMBER_ID}   # admin commit to a live group
    assert fetch(w, "wg")[1] == {0: 3, 1: 4}
    plan = [(a.member_id, encode_consumer_assignment({"gt": [0]})),
            (b_id, encode_consumer_assignment({"gt": [1]}))]
    w2.send(req(14, 3, group_id="wg", generation_id=2, member_id=b_id, group_instance_id=None, assignments=()))
    assert code(sync(w, "wg", 2, a.member_id, plan).error_code) == 0
    _, sb = codec.decode_response(w2.recv_frame(), 14, 3)
    assert sb.assignment == encode_consumer_assignment({"gt": [1]})
    assert commit(w2, "wg", 2, b_id, {1: 7}) == {1: 0}

    # describe, list; delete refused while members are there
    d = w.call(req(15, 5, groups=("wg",), include_authorized_operations=False)).groups[0]
    assert d.group_state == "Stable" and d.protocol_data == "range" and len(d.members) == 2
    listed = w.call(req(16, 4, states_filter=()))
    assert ("wg", "Stable") in [(g.group_id, g.group_state) for g in listed.groups]
    dg = w.call(req(42, 2, groups_names=("wg",)))
    assert code(dg.results[0].error_code) == G.NON_EMPTY_GROUP
    od = w.call(req(47, 0, group_id="wg", topics=(part(47, 0, "OffsetDeleteRequestTopic", name="gt", partitions=(
        part(47, 0, "OffsetDeleteRequestPartition", partition_index=0),)),)))
    assert code(od.topics[0].partitions[0].error_code) == G.GROUP_SUBSCRIBED_TO_TOPIC

    # both leave (v3+ batch form); then the group can be deleted
    lv = w.call(req(13, 4, group_id="wg", members=(
        part(13, 4, "MemberIdentity", member_id=a.member_id, group_instance_id=None),
        part(13, 4, "MemberIdentity", member_id=b_id, group_instance_id=None))))
    assert [code(m.error_code) for m in lv.members] == [0, 0]
    assert OffsetsStore(broker.server.storage).group("wg").metadata.members == ()
    dg = w.call(req(42, 2, groups_names=("wg", "never-was")))
    assert [code(r.error_code) for r in dg.results] == [0, G.GROUP_ID_NOT_FOUND]
    assert OffsetsStore(broker.server.storage).group("wg").empty


def test_session_timeout_expires_a_silent_member(broker):
    w = Wire(broker.bootstrap)
    a = join(w, "quiet", join(w, "quiet", session=1000).member_id, session=1000)
    sync(w, "quiet", 1, a.member_id)
    time.sleep(1.5)
    hb = w.call(req(12, 3, group_id="quiet", generation_id=1, member_id=a.member_id, group_instance_id=None))
    assert code(hb.error_code) == G.UNKNOWN_MEMBER_ID


def test_coordinator_is_stable_and_moves_when_its_broker_dies(root):
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=300)
    b1 = BrokerThread(Storage(root), opts).start()
    b2 = BrokerThread(Storage(root), opts).start()
    try:
        deadline = time.time() + 10
        nodes = {b.server.node_id: b for b in (b1, b2)}

        def views():
            return [b.server.live_brokers() for b in (b1, b2)]

        while time.time() < deadline and not (
                all(set(nodes) <= {n for n, _, _ in v} for v in views()) and views()[0] == views()[1]):
            time.sleep(0.1)
        live = b1.server.live_brokers()
        # a group that b1 or b2 coordinates and that moves to the other one (live may include
        # the module's broker too)

        def moves_within(g):
            first = coordinator_node(g, live)[0]
            rest = [b for b in live if b[0] != first]
            return first in nodes and coordinator_node(g, rest)[0] in nodes

        group = next(g for g in (f"move-{i}" for i in range(200)) if moves_within(g))
        owner = nodes[coordinator_node(group, live)[0]]
        other = b2 if owner is b1 else b1
        for b in (b1, b2):
            fc = Wire(b.bootstrap).call(req(10, 3, key=group, key_type=0))
            assert fc.node_id == owner.server.node_id
        assert code(join(Wire(other.bootstrap), group).error_code) == G.NOT_COORDINATOR
        w = Wire(owner.bootstrap)
        assert commit(w, group, -1, "", {0: 5}) == {0: 0}
        owner.stop()
        deadline = time.time() + 15
        while time.time() < deadline:
            fc = Wire(other.bootstrap).call(req(10, 3, key=group, key_type=0))
            if fc.node_id != owner.server.node_id:
                break
            time.sleep(0.2)
        assert fc.node_id == other.server.node_id
        # the new coordinator continues from what __consumer_offsets holds
        assert fetch(Wire(other.bootstrap), group, (0,)) == (0, {0: 5})
    finally:
        for b in (b1, b2):
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - already stopped
                pass
