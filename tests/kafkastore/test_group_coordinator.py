"""The classic group protocol state machine (pure: injected clock, no I/O)."""
from __future__ import annotations

import itertools

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kafkastore.groups.offsets import (GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata,
                                       decode_consumer_assignment, encode_consumer_assignment,
                                       encode_consumer_subscription)
from kafkastore.protocol.coordinators import group as gc
from kafkastore.protocol.coordinators.group import CoordinatorConfig, GroupCoordinator

SUB = encode_consumer_subscription(["t"])
PROTOS = [("range", SUB), ("roundrobin", SUB)]


class Clock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


class Box:
    """Collects a callback's answer."""

    def __init__(self):
        self.results = []

    def __call__(self, result):
        self.results.append(result)

    @property
    def value(self):
        assert len(self.results) == 1, self.results
        return self.results[0]

    @property
    def done(self) -> bool:
        return bool(self.results)


def make(**kw):
    clock = Clock()
    persisted = []
    ids = itertools.count(1)
    coord = GroupCoordinator(clock=clock, on_persist=persisted.append, new_id=lambda: str(next(ids)),
                             config=CoordinatorConfig(**kw))
    return coord, clock, persisted


def join(coord, member_id="", instance=None, protos=PROTOS, session=1000, rebalance=2000,
         group="g", require=False):
    box = Box()
    coord.join_group(group, member_id, instance, "consumer", protos, session, rebalance, box,
                     client_id="c", client_host="/127.0.0.1", require_known_member_id=require)
    return box


def sync(coord, gen, member, assignments=None, group="g", instance=None):
    box = Box()
    coord.sync_group(group, gen, member, instance, assignments or {}, box)
    return box


def test_first_member_becomes_leader_and_gets_members():
    coord, clock, persisted = make()
    b = join(coord)
    r = b.value
    assert r.error == gc.NONE and r.generation == 1 and r.leader == r.member_id
    assert r.protocol_name == "range"
    assert r.members == ((r.member_id, None, SUB),)
    assert coord.state("g") == gc.COMPLETING_REBALANCE
    s = sync(coord, 1, r.member_id, {r.member_id: b"A"})
    assert s.value.assignment == b"A" and coord.state("g") == gc.STABLE
    assert persisted[-1].generation == 1 and persisted[-1].members[0].assignment == b"A"


def test_member_id_required_then_join():
    coord, _, _ = make()
    b = join(coord, require=True)
    assert b.value.error == gc.MEMBER_ID_REQUIRED and b.value.member_id
    b2 = join(coord, member_id=b.value.member_id, require=True)
    assert b2.value.error == gc.NONE and b2.value.member_id == b.value.member_id


def test_second_member_triggers_rebalance_and_fences_old_generation():
    coord, clock, _ = make()
    a = join(coord).value
    sync(coord, 1, a.member_id, {a.member_id: b"all"})
    b_box = join(coord)
    assert not b_box.done and coord.state("g") == gc.PREPARING_REBALANCE
    assert coord.heartbeat("g", 1, a.member_id) == gc.REBALANCE_IN_PROGRESS
    # the old generation may still commit while preparing (onPartitionsRevoked)
    assert coord.validate_commit("g", 1, a.member_id) == gc.NONE
    a_box = join(coord, member_id=a.member_id)
    a2, b2 = a_box.value, b_box.value
    assert a2.generation == b2.generation == 2
    assert a2.leader == a.member_id and len(a2.members) == 2 and b2.members == ()
    # stale generation is fenced everywhere
    assert coord.heartbeat("g", 1, a.member_id) == gc.ILLEGAL_GENERATION
    assert coord.validate_commit("g", 1, a.member_id) == gc.ILLEGAL_GENERATION
    assert sync(coord, 1, a.member_id).value.error == gc.ILLEGAL_GENERATION
    # follower's sync waits for the leader
    fb = sync(coord, 2, b2.member_id)
    assert not fb.done
    assert coord.validate_commit("g", 2, b2.member_id) == gc.REBALANCE_IN_PROGRESS
    la = sync(coord, 2, a.member_id, {a.member_id: b"x", b2.member_id: b"y"})
    assert la.value.assignment == b"x" and fb.value.assignment == b"y"
    assert coord.validate_commit("g", 2, b2.member_id) == gc.NONE
    assert coord.validate_commit("g", -1, "") == gc.UNKNOWN_MEMBER_ID  # admin commit refused


def test_session_expiry_removes_member_and_rebalances():
    coord, clock, persisted = make()
    a = join(coord).value
    sync(coord, 1, a.member_id)
    b_box = join(coord, session=5000)
    join(coord, member_id=a.member_id, session=1000)
    b = b_box.value
    sync(coord, 2, a.member_id)
    sync(coord, 2, b.member_id)
    clock.now += 900
    assert coord.heartbeat("g", 2, b.member_id) == gc.NONE
    clock.now += 200
    coord.tick()  # a missed its session
    assert coord.state("g") == gc.PREPARING_REBALANCE
    assert coord.heartbeat("g", 2, a.member_id) == gc.UNKNOWN_MEMBER_ID
    b3 = join(coord, member_id=b.member_id, session=5000).value
    assert b3.generation == 3 and b3.leader == b.member_id and [m[0] for m in b3.members] == [b.member_id]


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    coord, clock, _ = make()
    a = join(coord, rebalance=2000).value
    sync(coord, 1, a.member_id)
    b_box = join(coord, rebalance=2000)
    clock.now += 500
    assert coord.heartbeat("g", 1, a.member_id) == gc.REBALANCE_IN_PROGRESS
    clock.now += 1600
    coord.tick()
    b = b_box.value
    assert b.generation == 2 and b.leader == b.member_id and len(b.members) == 1
    assert coord.heartbeat("g", 1, a.member_id) == gc.UNKNOWN_MEMBER_ID


def test_leave_group_empties_and_persists():
    coord, clock, persisted = make()
    a = join(coord).value
    sync(coord, 1, a.member_id)
    assert coord.leave_group("g", [(a.member_id, None)]) == (gc.NONE, [gc.NONE])
    assert coord.state("g") == gc.EMPTY
    assert persisted[-1].members == () and persisted[-1].generation == 2
    assert coord.leave_group("g", [("nobody", None)]) == (gc.NONE, [gc.UNKNOWN_MEMBER_ID])
    assert coord.validate_commit("g", -1, "") == gc.NONE  # admin commits to an empty group


def test_static_member_rejoin_fences_old_instance_without_rebalance():
    coord, clock, _ = make()
    a = join(coord, instance="i1").value
    b_box = join(coord, instance="i2")
    a2 = join(coord, member_id=a.member_id, instance="i1").value
    b = b_box.value
    sync(coord, 2, a2.member_id, {a.member_id: b"A", b.member_id: b"B"})
    sync(coord, 2, b.member_id)
    # i2 restarts: new member id, same generation, no rebalance
    b_new = join(coord, instance="i2").value
    assert b_new.error == gc.NONE and b_new.generation == 2 and b_new.member_id != b.member_id
    assert coord.state("g") == gc.STABLE
    assert sync(coord, 2, b_new.member_id, instance="i2").value.assignment == b"B"
    assert coord.heartbeat("g", 2, b.member_id, "i2") == gc.FENCED_INSTANCE_ID
    assert coord.validate_commit("g", 2, b.member_id, "i2") == gc.FENCED_INSTANCE_ID
    assert join(coord, member_id=b.member_id, instance="i2").value.error == gc.FENCED_INSTANCE_ID
    # a static member may leave by instance id
    assert coord.leave_group("g", [("", "i2")]) == (gc.NONE, [gc.NONE])
    assert coord.state("g") == gc.PREPARING_REBALANCE


def test_protocol_selection_and_inconsistent_protocols():
    coord, _, _ = make()
    a_box = join(coord, protos=[("roundrobin", SUB), ("range", SUB)])
    a = a_box.value
    sync(coord, 1, a.member_id)
    b_box = join(coord, protos=[("range", SUB)])
    a2 = join(coord, member_id=a.member_id, protos=[("roundrobin", SUB), ("range", SUB)]).value
    assert a2.protocol_name == "range" and b_box.value.protocol_name == "range"
    bad = join(coord, protos=[("sticky", SUB)])
    assert bad.value.error == gc.INCONSISTENT_GROUP_PROTOCOL
    box = Box()
    coord.join_group("g", "", None, "connect", [("range", SUB)], 1000, 1000, box)
    assert box.value.error == gc.INCONSISTENT_GROUP_PROTOCOL


def test_invalid_requests():
    coord, _, _ = make()
    assert join(coord, group="").value.error == gc.INVALID_GROUP_ID
    assert join(coord, session=10).value.error == gc.INVALID_SESSION_TIMEOUT
    assert join(coord, member_id="ghost").value.error == gc.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("nope", 1, "x") == gc.UNKNOWN_MEMBER_ID
    assert coord.validate_commit("nope", 3, "x") == gc.ILLEGAL_GENERATION


def test_load_group_restores_members_and_offsets():
    coord, clock, _ = make()
    meta = GroupMetadata("g", "consumer", 7, "range", "m1", clock.now - 100,
                         (MemberMetadata("m1", None, "c", "h", 2000, 1000, SUB, b"A"),))
    coord.load_group(GroupState("g", meta, {("t", 0): OffsetAndMetadata(5)}))
    assert coord.state("g") == gc.STABLE
    assert coord.heartbeat("g", 7, "m1") == gc.NONE
    assert coord.fetch_offsets("g", [("t", 0), ("t", 1)]) == {("t", 0): OffsetAndMetadata(5), ("t", 1): None}
    # members whose session lapsed while no coordinator ran are not restored
    coord2, clock2, _ = make()
    old = GroupMetadata("g", "consumer", 7, "range", "m1", clock2.now - 5000, meta.members)
    coord2.load_group(GroupState("g", old))
    assert coord2.state("g") == gc.EMPTY and coord2.validate_commit("g", -1, "") == gc.NONE


def test_offset_delete_and_group_delete_rules():
    coord, clock, _ = make()
    a = join(coord).value
    sync(coord, 1, a.member_id)
    coord.record_commit("g", {("t", 0): OffsetAndMetadata(1), ("u", 0): OffsetAndMetadata(2)})
    err, per = coord.validate_offset_delete("g", [("t", 0), ("u", 0)])
    assert err == gc.NONE and per == {("t", 0): gc.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): gc.NONE}
    assert coord.validate_delete_group("g") == gc.NON_EMPTY_GROUP
    coord.leave_group("g", [(a.member_id, None)])
    assert coord.validate_delete_group("g") == gc.NONE
    coord.record_delete_group("g")
    assert coord.describe_group("g").state == gc.DEAD
    assert coord.validate_delete_group("g") == gc.GROUP_ID_NOT_FOUND


def test_persist_refresh_keeps_offline_view_alive():
    coord, clock, persisted = make()
    a = join(coord, session=1000).value
    sync(coord, 1, a.member_id)
    n = len(persisted)
    clock.now += 400
    coord.heartbeat("g", 1, a.member_id)
    coord.tick()
    assert len(persisted) == n
    clock.now += 200
    coord.heartbeat("g", 1, a.member_id)
    coord.tick()
    assert len(persisted) == n + 1 and persisted[-1].state_timestamp == clock.now


def test_describe_and_list():
    coord, _, _ = make()
    a = join(coord).value
    sync(coord, 1, a.member_id, {a.member_id: encode_consumer_assignment({"t": [0]})})
    d = coord.describe_group("g")
    assert d.state == gc.STABLE and d.protocol == "range"
    assert decode_consumer_assignment(d.members[0].assignment) == {"t": [0]}
    assert coord.list_groups() == [("g", "consumer", gc.STABLE)]
    assert coord.list_groups(["empty"]) == []


# -- the property: no partition owned twice in a generation; stale generations fenced --------
PARTITIONS = 4


class Client:
    def __init__(self, name: str, static: bool):
        self.name = name
        self.instance = name if static else None
        self.member_id = ""
        self.generation = -1
        self.join_box: Box | None = None
        self.sync_box: Box | None = None
        self.owned: tuple[int, ...] = ()


class GroupMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.coord, self.clock, _ = make()
        self.clients = [Client(f"c{i}", static=i % 2 == 1) for i in range(4)]
        self.owners: dict[tuple[int, int], str] = {}   # (generation, partition) -> member id
        self.max_generation_seen = 0

    def _collect(self, c: Client) -> None:
        if c.join_box is not None and c.join_box.done:
            r = c.join_box.results[0]
            c.join_box = None
            if r.error == gc.NONE:
                c.member_id, c.generation = r.member_id, r.generation
                self.max_generation_seen = max(self.max_generation_seen, r.generation)
                if r.members:  # leader: round-robin
                    ids = [m[0] for m in r.members]
                    plan = {i: encode_consumer_assignment({"t": [p for p in range(PARTITIONS)
                                                                 if p % len(ids) == k]})
                            for k, i in enumerate(ids)}
                    c.sync_box = Box()
                    self.coord.sync_group("g", c.generation, c.member_id, c.instance, plan, c.sync_box)
                else:
                    c.sync_box = Box()
                    self.coord.sync_group("g", c.generation, c.member_id, c.instance, {}, c.sync_box)
            elif r.error == gc.MEMBER_ID_REQUIRED:
                c.member_id = r.member_id
            else:
                c.member_id = "" if r.error in (gc.UNKNOWN_MEMBER_ID, gc.FENCED_INSTANCE_ID) else c.member_id
        if c.sync_box is not None and c.sync_box.done:
            r = c.sync_box.results[0]
            c.sync_box = None
            if r.error == gc.NONE:
                c.owned = tuple(decode_consumer_assignment(r.assignment).get("t", []))
                for p in c.owned:
                    prev = self.owners.setdefault((c.generation, p), c.member_id)
                    assert prev == c.member_id, f"partition {p} owned twice in generation {c.generation}"

    def _collect_all(self):
        for _ in range(3):
            for c in self.clients:
                self._collect(c)

    @rule(i=st.integers(0, 3), require=st.booleans())
    def join(self, i, require):
        c = self.clients[i]
        if c.join_box is not None:
            return
        c.join_box = Box()
        self.coord.join_group("g", c.member_id, c.instance, "consumer", PROTOS, 1000, 1500,
                              c.join_box, client_id=c.name, require_known_member_id=require)
        self._collect_all()

    @rule(i=st.integers(0, 3))
    def heartbeat(self, i):
        c = self.clients[i]
        if not c.member_id:
            return
        err = self.coord.heartbeat("g", c.generation, c.member_id, c.instance)
        if err in (gc.UNKNOWN_MEMBER_ID, gc.FENCED_INSTANCE_ID):
            c.member_id, c.owned = "", ()

    @rule(i=st.integers(0, 3))
    def leave(self, i):
        c = self.clients[i]
        if c.member_id:
            self.coord.leave_group("g", [(c.member_id, c.instance)])
            c.member_id, c.generation, c.owned = "", -1, ()
        self._collect_all()

    @rule(i=st.integers(0, 3), stale=st.integers(1, 3))
    def stale_generation_is_fenced(self, i, stale):
        c = self.clients[i]
        current = self.coord._groups.get("g")
        if current is None or current.generation < stale:
            return
        gen = current.generation - stale
        member = c.member_id or "ghost"
        assert self.coord.validate_commit("g", gen, member, c.instance) != gc.NONE or gen < 0
        assert self.coord.heartbeat("g", gen, member, c.instance) != gc.NONE
        box = Box()
        self.coord.sync_group("g", gen, member, c.instance, {}, box)
        assert box.value.error != gc.NONE

    @rule(ms=st.integers(0, 1200))
    def advance(self, ms):
        self.clock.now += ms
        self.coord.tick()
        self._collect_all()

    @invariant()
    def commits_only_for_current_generation(self):
        g = self.coord._groups.get("g")
        for c in self.clients:
            if c.member_id and g is not None and c.generation != g.generation and c.generation >= 0:
                assert self.coord.validate_commit("g", c.generation, c.member_id, c.instance) != gc.NONE

    @invariant()
    def generations_never_go_back(self):
        g = self.coord._groups.get("g")
        if g is not None:
            assert g.generation >= self.max_generation_seen


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
