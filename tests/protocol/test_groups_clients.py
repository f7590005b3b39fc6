"""Consumer groups with real clients: kafka-python, aiokafka and librdkafka (confluent-kafka).

Short session / heartbeat / poll-interval settings keep each test to seconds.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
from dataclasses import replace

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.groups.offsets import OffsetsStore
from kafkastore.protocol.apis.groups import service
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.counting import counting_fs

logging.getLogger("kafka").setLevel(logging.ERROR)
logging.getLogger("aiokafka").setLevel(logging.ERROR)

PARTITIONS = 4
KP_FAST = dict(session_timeout_ms=3000, heartbeat_interval_ms=200, max_poll_interval_ms=5000,
               enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=5000,
               retry_backoff_ms=50, metadata_max_age_ms=1000)


def fill(root: str, topic: str, per_partition: int = 5) -> None:
    s = Storage(root)
    create_topic(s, topic, PARTITIONS)
    b = Broker(s)
    for p in range(PARTITIONS):
        for i in range(per_partition):
            b.send(topic, b"%d-%d" % (p, i), partition=p)
    b.flush()


def opts() -> ServeOptions:
    return ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=300)


def kp_consumer(bootstrap: str, topic: str, group: str, **kw):
    """A kafka-python group member that knows the topic's partitions before it first joins
    (else a leader that races its first metadata response assigns nothing until the next
    metadata refresh: a client-side race, seen against Apache Kafka too)."""
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **dict(KP_FAST, **kw))
    assert c.partitions_for_topic(topic)
    c.subscribe([topic])
    return c


def generation_of(consumer) -> int:
    """The generation whose assignment the member holds (-1 while it is rebalancing: kafka-python
    sets the new generation at the JoinGroup answer, before SyncGroup hands out partitions)."""
    from kafka.coordinator.base import MemberState

    coord = consumer._coordinator
    if coord.state != MemberState.STABLE:
        return -1
    return getattr(getattr(coord, "_generation", None), "generation_id", -1)


class PollingMember(threading.Thread):
    """A kafka-python group member with its own poll loop (as applications run them); after
    every poll it records which partitions it holds in which generation."""

    def __init__(self, bootstrap: str, index: int, ledger: "Ledger"):
        super().__init__(daemon=True)
        self.consumer = kp_consumer(bootstrap, "kp", "kpg", client_id=f"kp-{index}")
        self.index, self.ledger = index, ledger
        self.stop = threading.Event()
        self.view: tuple[int, frozenset] = (-1, frozenset())

    def run(self):
        while not self.stop.is_set():
            self.consumer.poll(timeout_ms=100)
            gen = generation_of(self.consumer)
            parts = frozenset(tp.partition for tp in self.consumer.assignment()) if gen >= 0 else frozenset()
            self.ledger.record(gen, parts, self.index)
            self.view = (gen, parts)
        self.consumer.close()   # LeaveGroup

    def leave(self):
        self.stop.set()
        self.join(20)


class Ledger:
    """(generation, partition) -> member: a second owner in one generation is a violation."""

    def __init__(self):
        self.lock = threading.Lock()
        self.owner: dict[tuple[int, int], int] = {}
        self.violations: list[str] = []

    def record(self, gen: int, parts, index: int) -> None:
        with self.lock:
            for p in parts:
                prev = self.owner.setdefault((gen, p), index)
                if prev != index:
                    self.violations.append(f"partition {p} owned by {prev} and {index} in generation {gen}")


def test_kafka_python_members_join_and_leave_without_double_ownership(local_root):
    fill(local_root, "kp")
    # A 6 s lease (heartbeat 2 s) instead of 3 s: on a loaded machine a registration write
    # to the local disk was seen taking 4.65 s, which lapsed the lease and fenced the broker
    # mid-test (the group then settles only after the clients reconnect). The assertions are
    # about ownership, not about riding out a fence; the fence cases have their own tests.
    with BrokerThread(Storage(local_root), replace(opts(), heartbeat_ms=2000)) as broker:
        ledger = Ledger()
        members: list[PollingMember] = []

        def settle(timeout: float = 30.0) -> list[frozenset]:
            deadline = time.time() + timeout
            while time.time() < deadline:
                views = [m.view for m in members]
                parts = [p for _, ps in views for p in ps]
                if (len({g for g, _ in views}) == 1 and views[0][0] >= 0 and all(ps for _, ps in views)
                        and sorted(parts) == list(range(PARTITIONS))):
                    return [ps for _, ps in views]
                time.sleep(0.05)
            d = service(broker.server).coordinator.describe_group("kpg")
            raise AssertionError(f"group did not settle: {[m.view for m in members]}, "
                                 f"coordinator: {d.state} {[m.member_id for m in d.members]}")

        try:
            for n in range(3):
                members.append(PollingMember(broker.bootstrap, n, ledger))
                members[-1].start()
                views = settle()
            assert sorted(len(ps) for ps in views) == [1, 1, 2]
            coord = service(broker.server).coordinator
            assert len(coord.describe_group("kpg").members) == 3
            # one leaves (LeaveGroup), its partitions move to the others
            members.pop(0).leave()
            views = settle()
            assert sorted(len(ps) for ps in views) == [2, 2]
        finally:
            for m in members:
                m.leave()
        assert ledger.violations == []
        assert len({g for g, _ in ledger.owner}) >= 4   # several generations were observed
        assert coord.describe_group("kpg").state == "Empty"


def test_commit_survives_broker_restart_and_a_new_member_resumes(local_root):
    from confluent_kafka import Consumer
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata as KPOffset

    fill(local_root, "rs")
    with BrokerThread(Storage(local_root), opts()) as broker:
        c = kp_consumer(broker.bootstrap, "rs", "rsg")
        got = 0
        deadline = time.time() + 20
        while got < PARTITIONS * 5 and time.time() < deadline:
            got += sum(len(v) for v in c.poll(timeout_ms=100).values())
        assert got == PARTITIONS * 5
        c.commit({TopicPartition("rs", p): KPOffset(1 + p, "", -1) for p in range(PARTITIONS)})
        c.close()
    # a new broker process over the same root (the old one is gone), a librdkafka member
    with BrokerThread(Storage(local_root), opts()) as broker:
        rc = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rsg",
                       "enable.auto.commit": False, "auto.offset.reset": "latest",
                       "session.timeout.ms": 2000, "heartbeat.interval.ms": 200,
                       "topic.metadata.refresh.interval.ms": 1000})
        rc.subscribe(["rs"])
        first: dict[int, int] = {}
        deadline = time.time() + 20
        while len(first) < PARTITIONS and time.time() < deadline:
            m = rc.poll(0.2)
            if m is not None and not m.error():
                first.setdefault(m.partition(), m.offset())
        rc.close()
        assert first == {p: 1 + p for p in range(PARTITIONS)}   # resumed at the committed offsets


def test_aiokafka_group_shares_partitions_and_a_stale_member_is_fenced(local_root):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import CommitFailedError, IllegalGenerationError, RebalanceInProgressError
    from aiokafka.structs import OffsetAndMetadata as AIOOffset

    fill(local_root, "ak")

    async def run(bootstrap: str):
        def make():
            return AIOKafkaConsumer("ak", bootstrap_servers=bootstrap, group_id="akg",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    session_timeout_ms=2000, heartbeat_interval_ms=200,
                                    max_poll_interval_ms=2000, rebalance_timeout_ms=2000,
                                    metadata_max_age_ms=1000)

        a, b = make(), make()
        await a.start()
        await b.start()
        try:
            deadline = time.time() + 20
            while time.time() < deadline:
                await a.getmany(timeout_ms=50)
                await b.getmany(timeout_ms=50)
                pa = {tp.partition for tp in a.assignment()}
                pb = {tp.partition for tp in b.assignment()}
                if pa and pb and not pa & pb and pa | pb == set(range(PARTITIONS)):
                    break
            assert pa and pb and not pa & pb and pa | pb == set(range(PARTITIONS))
            tp = next(iter(a.assignment()))
            await a.commit({tp: AIOOffset(1, "")})
            # b stops polling: after max.poll.interval.ms it leaves, a takes everything
            deadline = time.time() + 20
            while time.time() < deadline:
                await a.getmany(timeout_ms=100)
                if {t.partition for t in a.assignment()} == set(range(PARTITIONS)):
                    break
            assert {t.partition for t in a.assignment()} == set(range(PARTITIONS))
            # b's commit for its old generation is refused and does not land
            tpb = TopicPartition("ak", min(pb))
            with pytest.raises((CommitFailedError, IllegalGenerationError, RebalanceInProgressError)):
                await b.commit({tpb: AIOOffset(4, "")})
        finally:
            await a.stop()
            await b.stop()

    with BrokerThread(Storage(local_root), opts()) as broker:
        asyncio.run(run(broker.bootstrap))
        offsets = OffsetsStore(Storage(local_root)).group("akg").offsets
        assert offsets[("ak", tp_partition(offsets))].offset == 1
        assert all(om.offset != 4 for om in offsets.values())


def tp_partition(offsets) -> int:
    (topic, p), = offsets.keys()
    return p


def test_librdkafka_group_rebalances_between_members(local_root):
    from confluent_kafka import Consumer

    fill(local_root, "rk")
    with BrokerThread(Storage(local_root), opts()) as broker:
        conf = {"bootstrap.servers": broker.bootstrap, "group.id": "rkg", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": 2000,
                "heartbeat.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000}
        cs = [Consumer(dict(conf, **{"client.id": f"rk-{i}"})) for i in range(2)]
        for c in cs:
            c.subscribe(["rk"])
        deadline = time.time() + 30
        while time.time() < deadline:
            for c in cs:
                c.poll(0.05)
            parts = [{tp.partition for tp in c.assignment()} for c in cs]
            if all(parts) and not parts[0] & parts[1] and parts[0] | parts[1] == set(range(PARTITIONS)):
                break
        assert all(parts) and not parts[0] & parts[1] and parts[0] | parts[1] == set(range(PARTITIONS))
        d = service(broker.server).coordinator.describe_group("rkg")
        assert d.state == "Stable" and len(d.members) == 2
        # the offline CLI view (from what the coordinator persisted) sees the live members
        from kafkastore.errors import GroupNotEmptyError
        from kafkastore.groups.admin import delete_group, describe_group

        offline = describe_group(Storage(local_root), "rkg")
        assert offline["state"] == "Stable" and len(offline["members"]) == 2
        assert sorted(p for m in offline["members"] for p in m["assignment"]["rk"]) == list(range(PARTITIONS))
        with pytest.raises(GroupNotEmptyError):
            delete_group(Storage(local_root), "rkg")
        cs[1].close()
        deadline = time.time() + 20
        while time.time() < deadline:
            cs[0].poll(0.05)
            if {tp.partition for tp in cs[0].assignment()} == set(range(PARTITIONS)):
                break
        assert {tp.partition for tp in cs[0].assignment()} == set(range(PARTITIONS))
        cs[0].close()


def _rk_settle(consumers, timeout: float = 30.0) -> list[set[int]]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for c in consumers:
            c.poll(0.05)
        parts = [{tp.partition for tp in c.assignment()} for c in consumers]
        if all(parts) and sum(map(len, parts)) == PARTITIONS and set().union(*parts) == set(range(PARTITIONS)):
            return parts
    raise AssertionError(f"group did not settle: {parts}")


def test_librdkafka_cooperative_sticky_and_static_membership(local_root):
    from confluent_kafka import Consumer

    fill(local_root, "cs")
    with BrokerThread(Storage(local_root), opts()) as broker:
        base = {"bootstrap.servers": broker.bootstrap, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": 3000,
                "heartbeat.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000}
        # cooperative-sticky: incremental rebalances over the classic protocol
        coop = [Consumer(dict(base, **{"group.id": "coop", "client.id": f"co-{i}",
                                       "partition.assignment.strategy": "cooperative-sticky"}))
                for i in range(2)]
        coop[0].subscribe(["cs"])
        assert _rk_settle(coop[:1]) == [set(range(PARTITIONS))]
        coop[1].subscribe(["cs"])
        parts = _rk_settle(coop)
        assert not parts[0] & parts[1] and all(parts)
        d = service(broker.server).coordinator.describe_group("coop")
        assert d.protocol == "cooperative-sticky"
        for c in coop:
            c.close()

        # static membership: a restarted instance gets its partitions back, no rebalance
        static = [Consumer(dict(base, **{"group.id": "static", "client.id": f"st-{i}",
                                         "group.instance.id": f"inst-{i}"})) for i in range(2)]
        for c in static:
            c.subscribe(["cs"])
        parts = _rk_settle(static)
        coord = service(broker.server).coordinator
        group = coord._groups["static"]
        generation = group.generation
        # restart the follower (a restarted leader triggers a rebalance below JoinGroup v9,
        # as in Kafka: it must see the members' metadata to assign)
        follower = 0 if group.members[group.leader].instance_id == "inst-1" else 1
        keeper = static[1 - follower]
        static[follower].close()          # a static member does not leave the group on close
        assert coord.describe_group("static").state == "Stable"
        again = Consumer(dict(base, **{"group.id": "static", "client.id": "st-again",
                                       "group.instance.id": f"inst-{follower}"}))
        again.subscribe(["cs"])
        back = _rk_settle([keeper, again] if follower == 1 else [again, keeper])
        assert back == parts and coord._groups["static"].generation == generation
        for c in (keeper, again):
            c.close()


def _join_request(group: str, member_id: str):
    from kafkastore.groups.offsets import encode_consumer_subscription
    from tests.helpers.group_requests import part, req

    return req(11, 5, group_id=group, session_timeout=datetime.timedelta(seconds=30),
               rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id,
               group_instance_id=None, protocol_type="consumer", protocols=(
                   part(11, 5, "JoinGroupRequestProtocol", name="range",
                        metadata=encode_consumer_subscription(["kp"])),))


def _sync_request(group: str, generation: int, member_id: str, assignments: dict[str, bytes]):
    from tests.helpers.group_requests import part, req

    return req(14, 3, group_id=group, generation_id=generation, member_id=member_id,
               group_instance_id=None, assignments=tuple(
                   part(14, 3, "SyncGroupRequestAssignment", member_id=m, assignment=a)
                   for m, a in assignments.items()))


def _answer(w, api: int, version: int):
    """The next response on ``w`` (None: the broker closed the connection)."""
    from kafkastore.protocol.wire import codec

    frame = w.recv_frame()
    return None if frame is None else codec.decode_response(frame, api, version)[1]


def _written_generation(root: str, group: str) -> int:
    meta = OffsetsStore(Storage(root)).group(group).metadata
    return -1 if meta is None else meta.generation


def test_an_assignment_is_answered_only_once_its_generation_is_in_the_log(local_root):
    """SyncGroup hands out a generation's assignments once its metadata is in
    ``__consumer_offsets`` (as Kafka answers it after its append). Answered before, a broker
    that fenced itself before the write landed (a pause, a stalled store) reloaded the group
    at the older generation and handed the same generation number out again with other
    assignments: two owners of a partition in one generation, and the first one's commits
    accepted under it. Raw requests: the test holds the metadata write and fences the broker
    at the moment it matters."""
    from tests.protocol.wire import Wire
    from kafkastore.protocol.coordinators import group as G

    fs = counting_fs(Storage(local_root).fs)
    hold, release = threading.Event(), threading.Event()
    count = fs._count

    def held(op, nbytes=0, path=""):
        if hold.is_set() and "__consumer_offsets" in str(path):
            release.wait(60)   # the group's metadata write waits here
        return count(op, nbytes, path)

    fs._count = held
    with BrokerThread(Storage(local_root, fs=fs), opts()) as broker:
        wa, wb = Wire(broker.bootstrap, timeout=60), Wire(broker.bootstrap, timeout=60)
        a = wa.call(_join_request("sg", "")).member_id           # MEMBER_ID_REQUIRED: the id
        first = wa.call(_join_request("sg", a))
        assert int(wa.call(_sync_request("sg", first.generation_id, a, {a: b"all"})).error_code) == 0
        deadline = time.monotonic() + 60   # a liveness guard, not a bound
        while _written_generation(local_root, "sg") != first.generation_id:
            assert time.monotonic() < deadline, "the first generation was never written"
            time.sleep(0.05)
        coordinator = service(broker.server).coordinator
        hold.set()                                              # the next metadata write waits
        b = wb.call(_join_request("sg", "")).member_id
        wb.send(_join_request("sg", b))
        wa.send(_join_request("sg", a))                          # the rebalance: both rejoin
        ja, jb = _answer(wa, 11, 5), _answer(wb, 11, 5)
        assert int(ja.error_code) == int(jb.error_code) == 0
        generation = ja.generation_id
        leader = {a: b"a-first", b: b"b-first"}
        wa.send(_sync_request("sg", generation, a, leader if ja.leader == a else {}))
        wb.send(_sync_request("sg", generation, b, leader if ja.leader == b else {}))
        while not (coordinator.describe_group("sg").state == "Stable"
                   and len(coordinator.describe_group("sg").members) == 2):
            assert time.monotonic() < deadline, "the second generation was never settled"
            time.sleep(0.01)
        # The assignment is settled in memory and its metadata write is held: the broker
        # fences itself now (its write is then refused), as after a pause.
        broker.server.brokers.fence("the test: a pause before the generation's metadata lands")
        release.set()
        handed = [r for r in (_answer(wa, 14, 3), _answer(wb, 14, 3))
                  if r is not None and int(r.error_code) == G.NONE]
        if handed:
            assert _written_generation(local_root, "sg") >= generation, (
                f"generation {generation} handed out ({[bytes(r.assignment) for r in handed]}) "
                f"but the log holds generation {_written_generation(local_root, 'sg')}")
        wa.close()
        wb.close()
