"""An OffsetFetch the coordinator cannot answer (the group's load from ``__consumer_offsets``
failed: a store error, a 503 storm, a timeout) is a retriable error on every requested
partition, never a partial answer.

From version 2 on, OffsetFetch has a top-level error code, and Kafka answers such an error
there with no partitions. aiokafka (0.14) never reads that code: it takes every partition
missing from the answer as "no committed offset" and restarts from ``auto.offset.reset``, so
one failed load made the fault harness's aiokafka consumer start over at offset 0 (a
committed-offset regression on S3). The requested partitions are listed too, each with a
retriable error it acts on (COORDINATOR_LOAD_IN_PROGRESS: retry; NOT_COORDINATOR: find the
coordinator again); the top-level code stays for the clients that read it.
"""
from __future__ import annotations

import asyncio

import pytest

from kafkastore.errors import StorageError
from kafkastore.protocol.apis.groups import service
from kafkastore.protocol.coordinators import group as G
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.protocol.wire.error_codes import COORDINATOR_LOAD_IN_PROGRESS
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter

from tests.helpers.group_requests import code, offset_commit, part, req
from .wire import Wire

RECORDS = 20
COMMITTED = 13


@pytest.fixture
def root(tmp_path):
    root = f"file://{tmp_path}"
    s = Storage(root)
    create_topic(s, "gt", 2)
    w = LogWriter(s)
    for p in range(2):
        for i in range(RECORDS):
            w.send("gt", b"%d-%d" % (p, i), partition=p)
    w.flush()
    return root


@pytest.fixture
def broker(root):
    with BrokerThread(Storage(root), ServeOptions(port=0, heartbeat_ms=300)) as b:
        yield b


def _fail_loads(broker, monkeypatch, times: int) -> list[int]:
    """The next ``times`` loads of a group (the store's claim: its read of the group's
    ``__consumer_offsets`` partition) fail as a store error would; the list counts them."""
    svc = service(broker.server)
    svc.unload("lg")   # loaded by the commit: the next request reads the log again
    original = svc.store.claim
    failed: list[int] = []

    def claim(group):
        if len(failed) < times:
            failed.append(1)
            raise StorageError("test: the store answered 503 while the group was read")
        return original(group)

    monkeypatch.setattr(svc.store, "claim", claim)
    return failed


def _fetch_v(w: Wire, version: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """OffsetFetch of ``gt``'s two partitions at ``version``: the top-level error (none before
    v2) and ``{partition: (offset, error)}``."""
    kw = {"require_stable": False} if version >= 7 else {}
    r = w.call(req(9, version, group_id="lg", topics=(
        part(9, version, "OffsetFetchRequestTopic", name="gt", partition_indexes=(0, 1)),), **kw))
    top = code(getattr(r, "error_code", 0))
    return top, {p.partition_index: (p.committed_offset, code(p.error_code))
                 for t in r.topics for p in t.partitions}


@pytest.mark.parametrize("version", [1, 3, 5, 7])
def test_an_offset_fetch_whose_group_load_fails_answers_every_partition_a_retriable_error(
        broker, monkeypatch, version):
    w = Wire(broker.bootstrap)
    try:
        assert offset_commit(w, "lg", -1, "", {0: COMMITTED, 1: COMMITTED}) == {0: 0, 1: 0}
        failed = _fail_loads(broker, monkeypatch, 1)
        top, parts = _fetch_v(w, version)
        assert failed == [1]
        assert set(parts) == {0, 1}, "every requested partition is answered"
        for offset, err in parts.values():
            # Never "no offset" without an error: a consumer would start over.
            assert err in (COORDINATOR_LOAD_IN_PROGRESS, G.COORDINATOR_NOT_AVAILABLE,
                           G.NOT_COORDINATOR)
        if version >= 2:
            assert top != 0
        # The load works again: the committed offsets.
        assert _fetch_v(w, version) == (0, {0: (COMMITTED, 0), 1: (COMMITTED, 0)})
    finally:
        w.close()


def test_aiokafka_resumes_at_the_committed_offset_when_the_first_load_of_its_group_fails(
        broker, monkeypatch):
    """A real aiokafka consumer (manual assignment, manual commits) whose first OffsetFetch
    meets a failed load: it asks again and starts at the committed offset, not at 0."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    w = Wire(broker.bootstrap)
    try:
        assert offset_commit(w, "lg", -1, "", {0: COMMITTED, 1: COMMITTED}) == {0: 0, 1: 0}
    finally:
        w.close()
    failed = _fail_loads(broker, monkeypatch, 2)

    async def first_offsets() -> dict[int, int]:
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="lg",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             retry_backoff_ms=50)
        await c.start()
        try:
            c.assign([TopicPartition("gt", 0), TopicPartition("gt", 1)])
            got: dict[int, int] = {}
            for _ in range(200):
                for tp, recs in (await c.getmany(timeout_ms=100)).items():
                    if recs:
                        got.setdefault(tp.partition, recs[0].offset)
                if len(got) == 2:
                    break
            return got
        finally:
            await c.stop()

    got = asyncio.run(first_offsets())
    assert failed == [1, 1]
    assert got == {0: COMMITTED, 1: COMMITTED}


def test_an_offset_fetch_to_a_broker_that_no_longer_coordinates_the_group_lists_not_coordinator(
        broker, monkeypatch):
    """A coordinator move (a broker paused or restarted, the live view changed): the client
    asked the old coordinator. Every partition says NOT_COORDINATOR, so aiokafka looks for
    the coordinator again instead of starting over."""
    w = Wire(broker.bootstrap)
    try:
        assert offset_commit(w, "lg", -1, "", {0: COMMITTED, 1: COMMITTED}) == {0: 0, 1: 0}
        svc = service(broker.server)
        monkeypatch.setattr(svc, "owns", lambda group: False)
        top, parts = _fetch_v(w, 3)
        assert top == G.NOT_COORDINATOR
        assert parts == {0: (-1, G.NOT_COORDINATOR), 1: (-1, G.NOT_COORDINATOR)}
        monkeypatch.undo()
        assert _fetch_v(w, 3) == (0, {0: (COMMITTED, 0), 1: (COMMITTED, 0)})
    finally:
        w.close()
