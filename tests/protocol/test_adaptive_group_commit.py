"""The partition's group commit is adaptive, as a database's is: an append that finds nothing
else queued commits at once (it does not wait ``commit_interval_ms``), appends queued together
share one commit, and appends that arrive while a commit runs share the next one. Counted,
never timed: commits per append, and whether a lone append is acknowledged at all under a
ten-minute linger."""
from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from kafkastore.format.record_batch import Record, encode_batch
from kafkastore.protocol.appender import check_batch
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

ck = pytest.importorskip("confluent_kafka")

#: Long enough that an append which waited it would never be acknowledged within a test.
TEN_MINUTES_MS = 600_000


def _batch(i: int) -> bytes:
    return encode_batch([Record(0, 1_700_000_000_000 + i, None, b"v%d" % i, ())])


def _submit(b: BrokerThread, topic: str, values: range):
    """Queue one batch per value on partition 0, all in one turn of the broker's loop (so they
    are queued together); a future of their outcomes once all are committed."""
    appender = b.server.appender

    async def submit():
        futs = [appender.submit(topic, 0, data, check_batch(data))
                for data in (_batch(i) for i in values)]
        return await asyncio.gather(*futs)

    return asyncio.run_coroutine_threadsafe(submit(), b.server.loop)


def _after_queued(b: BrokerThread) -> None:
    """Return once what was handed to the broker's loop before is queued: its coroutines' first
    steps run in the order they were handed over, and queueing is their first step."""
    async def nothing():
        return None

    asyncio.run_coroutine_threadsafe(nothing(), b.server.loop).result(60)


def _hold_commits(appender):
    """Make the appender's next commit wait for the returned gate; the returned event is set
    once it waits. Records how many batches each commit carried."""
    gate, entered = threading.Event(), threading.Event()
    sizes: list[int] = []
    commit = appender.commit

    def held(tp, items):
        sizes.append(len(items))
        if len(sizes) == 1:
            entered.set()
            assert gate.wait(60), "the test never released the commit"
        return commit(tp, items)

    appender.commit = held
    return gate, entered, sizes


def test_a_lone_append_does_not_wait_the_linger(tmp_path):
    """One idempotent record with nothing else queued for its partition is committed at once:
    with a ten-minute ``commit_interval_ms`` the old rule never acknowledged it."""
    root = f"file://{tmp_path}/root"
    topic = "lone-" + uuid.uuid4().hex[:6]
    create_topic(Storage(root), topic, 1)
    with BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=TEN_MINUTES_MS,
                                                  heartbeat_ms=500)) as b:
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all",
                         "enable.idempotence": True})
        for i in range(3):   # one at a time: each finds its partition's queue empty
            p.produce(topic, b"x%d" % i, partition=0)
            assert p.flush(30) == 0, "a lone append waited the group-commit linger"
        assert b.server.appender.commits == 3
        del p


def test_appends_queued_together_share_one_commit(tmp_path):
    """Twenty appends queued in one turn of the loop go up as one commit (one segment, one
    manifest version), whatever the linger."""
    root = f"file://{tmp_path}/root"
    topic = "together-" + uuid.uuid4().hex[:6]
    create_topic(Storage(root), topic, 1)
    with BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=20,
                                                  heartbeat_ms=500)) as b:
        before = b.server.appender.commits
        outcomes = _submit(b, topic, range(20)).result(60)
        assert [o.error for o in outcomes] == [0] * 20
        assert sorted(o.base_offset for o in outcomes) == list(range(20))
        assert b.server.appender.commits - before == 1


def test_appends_arriving_during_a_commit_share_the_next_one(tmp_path):
    """A lone append commits at once; the twenty that arrive while its commit runs are queued
    and all go in the next commit (two commits for 21 appends, not 21)."""
    root = f"file://{tmp_path}/root"
    topic = "during-" + uuid.uuid4().hex[:6]
    create_topic(Storage(root), topic, 1)
    with BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=20,
                                                  heartbeat_ms=500)) as b:
        gate, entered, sizes = _hold_commits(b.server.appender)
        first = _submit(b, topic, range(1))
        assert entered.wait(60)
        rest = _submit(b, topic, range(1, 21))
        _after_queued(b)
        gate.set()
        outcomes = first.result(60) + rest.result(60)
        assert sorted(o.base_offset for o in outcomes) == list(range(21))
        assert sizes == [1, 20]
