"""Kafka clients reading through ``serve`` (read_committed) never see part of a write job
into topics: a job whose driver died between two partitions' COMMIT markers is shown in
all of its partitions or in none, by Fetch and by ListOffsets' last stable offset; once
the job is rolled forward, all of it."""
from __future__ import annotations

import time

import pytest

from kafkastore.job_commits import PendingJobs, settle_pending
from kafkastore.manifest import ManifestStore
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from kafkastore.write.log_writer import LogWriter
from tests.helpers.sink_jobs import half_marked_job

pytest.importorskip("confluent_kafka")

READ_COMMITTED = {"isolation.level": "read_committed"}


def _read_until_idle(bootstrap: str, topic: str, idle_s: float = 4.0) -> list[str]:
    """Every value a read_committed consumer gets from both partitions until nothing new
    arrives for ``idle_s`` (the waits are the client's, not assertions on time)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100, **READ_COMMITTED})
    c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got: list[str] = []
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            continue
        got.append(m.value().decode())
        last = time.monotonic()
    c.close()
    return sorted(got)


def _stable_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """ListOffsets(latest, read_committed) per partition: the last stable offsets."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)}
    futures = admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED,
                                 request_timeout=30)
    return {tp.partition: f.result().offset for tp, f in futures.items()}


@pytest.fixture
def served(tmp_path):
    root = f"file://{tmp_path}/root"
    values = sorted(half_marked_job(root))
    b = BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=2)).start()
    yield root, b.bootstrap, values
    b.stop()


def test_a_kafka_client_sees_a_job_killed_between_partitions_markers_all_or_none(served):
    root, bootstrap, values = served
    first = _read_until_idle(bootstrap, "out")
    assert first in ([], values), f"{len(first)} of {len(values)} records of one job"
    ends = _stable_ends(bootstrap, "out")
    # The job's records start each partition: either both ends are past them or neither.
    assert (ends[0] == 0) == (ends[1] == 0), ends
    settle_pending(Storage(root))          # what the next planning reader or writer does
    assert _read_until_idle(bootstrap, "out") == values
    assert all(n > 0 for n in _stable_ends(bootstrap, "out").values())


def test_the_pending_jobs_view_lists_once_per_new_commit_not_per_fetch(tmp_path):
    """A broker's view: the half-marked job caps partition 0 at its first offset (its
    transaction is committed there); partition 1 needs no cap (its transaction is open,
    below the last stable offset). One listing decides both; asking again lists nothing;
    once the job is settled its transactions are known settled and cost no listing."""
    root = f"file://{tmp_path}/root"
    half_marked_job(root)
    storage = Storage(root)
    view = PendingJobs(storage, roll_forward_after_s=float("inf"))

    def manifests():
        return [ManifestStore(storage, "out", p).latest() for p in (0, 1)]

    for m in manifests():
        view.note(m)
    m0, m1 = manifests()
    assert view.cap(m0) == 0 and view.cap(m1) is None
    for _ in range(5):
        assert view.cap(m0) == 0
    assert view.listings == 1      # while the job is pending the listing is reused for ttl_s
    settle_pending(storage)
    view.ttl_s = 0.0               # (no waiting in a test: the next ask lists again)
    m0, m1 = manifests()
    assert view.cap(m0) is None and view.cap(m1) is None
    listed = view.listings
    for _ in range(5):
        assert view.cap(m0) is None and view.cap(m1) is None
    assert view.listings == listed


class _ListingCounter:
    """A real :class:`Storage` that counts its listings of the pending jobs' directory (the
    request a broker would pay per S3 LIST); everything else goes to the storage as is."""

    def __init__(self, storage: Storage):
        self._storage = storage
        self.pending_listings = 0

    def list(self, prefix: str = ""):
        if prefix.startswith("_sink/pending"):
            self.pending_listings += 1
        return self._storage.list(prefix)

    def __getattr__(self, name):
        return getattr(self._storage, name)


def _plain_transactions(storage: Storage, topic: str, n: int):
    """``n`` committed transactions in ``topic``-0, each by a producer of its own (as short-
    lived transactional clients write); yields the partition's manifest after each."""
    for i in range(n):
        w = LogWriter(storage, housekeeping=False)
        w.begin_transaction()
        w.send(topic, f"t{i}".encode(), partition=0)
        w.commit_transaction()
        yield ManifestStore(storage, topic, 0).latest()


def test_plain_transactions_cost_a_token_read_each_not_a_listing(tmp_path):
    """50 committed transactions of 50 producers, none of them part of a write job: the
    view decides each by one read of the settled token, listing ``_sink/pending/`` a few
    times at most (not once per transaction)."""
    storage = Storage(f"file://{tmp_path}/root")
    create_topic(storage, "plain", 1, {})
    counted = _ListingCounter(storage)
    view = PendingJobs(counted, roll_forward_after_s=float("inf"))
    for m in _plain_transactions(storage, "plain", 50):
        assert view.cap(m) is None
    assert counted.pending_listings <= 3, counted.pending_listings


def test_a_job_that_starts_after_the_views_listing_is_still_capped(tmp_path):
    """The view has listed (nothing pending) and decided plain transactions without
    listing again; then a job marks one partition of two and its driver dies. The job's
    committed transaction is new to the view: the token its pending object came with makes
    the view list again and cap the partition, until the job is settled."""
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, "plain", 1, {})
    counted = _ListingCounter(storage)
    view = PendingJobs(counted, roll_forward_after_s=float("inf"))
    for m in _plain_transactions(storage, "plain", 3):
        assert view.cap(m) is None
    half_marked_job(root)
    m0, m1 = (ManifestStore(storage, "out", p).latest() for p in (0, 1))
    assert view.cap(m0) == 0 and view.cap(m1) is None
    settle_pending(storage)
    view.ttl_s = 0.0
    m0 = ManifestStore(storage, "out", 0).latest()
    assert view.cap(m0) is None
