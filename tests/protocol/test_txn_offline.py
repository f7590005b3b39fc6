"""The offline side over logs a real transactional producer wrote through `kafkastore serve`:
`consume --isolation`, `groups describe`, compaction keeping the markers."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from kafkastore.topics.admin import create_topic

from tests.helpers.txn import txn_producer as _producer

ck = pytest.importorskip("confluent_kafka")


def _cli(root: str, *argv) -> str:
    r = subprocess.run([sys.executable, "-m", "kafkastore.cli", "--root", root, *argv],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _mixed_log(bootstrap: str, topic: str, tid: str):
    """committed (c1, c2), aborted (a1), committed (c3), then an open transaction (open):
    the producer is returned with it still open."""
    p = _producer(bootstrap, tid)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, v, key=v, partition=0)
        p.flush(10)
        p.commit_transaction(15) if commit else p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"open", key=b"open", partition=0)
    p.flush(10)
    return p


def test_consume_isolation_option(broker, storage, module_root):
    topic = "iso-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    p = _mixed_log(broker.bootstrap, topic, "tx-iso-" + uuid.uuid4().hex[:6])

    def values(*opt):
        return [json.loads(line)["value"] for line in _cli(module_root, "consume", topic, *opt).splitlines()]

    assert values() == ["c1", "c2", "c3"]                       # default: read_committed
    assert values("--isolation", "read_committed") == ["c1", "c2", "c3"]
    assert values("--isolation", "read_uncommitted") == ["c1", "c2", "a1", "c3", "open"]
    p.commit_transaction(15)
    assert values("--isolation", "read_committed") == ["c1", "c2", "c3", "open"]


def test_groups_describe_shows_transactional_offsets_only_once_committed(broker, storage, module_root):
    topic = "gd-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1)
    group = "eos-gd-" + uuid.uuid4().hex[:6]
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[ck.TopicPartition(topic, 0, 1)], asynchronous=False)

    def described() -> int:
        doc = json.loads(_cli(module_root, "groups", "describe", group))
        return next(r["current_offset"] for r in doc["offsets"] if r["topic"] == topic)

    assert described() == 1
    p = _producer(broker.bootstrap, "tx-gd-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    p.produce(topic, b"x", partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 5)], c.consumer_group_metadata(), 10)
    assert described() == 1                                      # open: not yet
    p.abort_transaction(15)
    assert described() == 1                                      # aborted: never
    p.begin_transaction()
    p.produce(topic, b"y", partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 7)], c.consumer_group_metadata(), 10)
    assert described() == 1
    p.commit_transaction(15)
    assert described() == 7                                      # committed: now
    c.close()


def test_compaction_keeps_markers_of_a_real_producers_transactions(broker, storage):
    """Kafka's cleaner rules on a log serve's coordinator wrote: aborted data goes, its marker
    stays while the aborted range may still be read; a commit marker stays while its data
    does; an open transaction is never cleaned past; read_committed reads are unchanged."""
    from kafkastore.maintenance.compaction_rewrite import compact_partition_local
    from kafkastore.format.segment_scan import iter_batches
    from kafkastore.manifest import ManifestStore
    from kafkastore.read.reader import PartitionReader

    topic = "cmp-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1, {"cleanup.policy": "compact", "delete.retention.ms": 60000,
                                     "min.cleanable.dirty.ratio": 0.01})
    p = _mixed_log(broker.bootstrap, topic, "tx-cmp-" + uuid.uuid4().hex[:6])
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"c1-new", key=b"c1", partition=0)      # supersedes c1 (behind the open txn)
    plain.flush(10)
    p.commit_transaction(15)
    plain.produce(topic, b"tail", key=b"tail", partition=0)
    plain.flush(10)

    def read(isolation):
        t = PartitionReader(storage, topic, 0).read(0, isolation=isolation, include_headers=False)
        return list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))

    def markers():
        m = ManifestStore(storage, topic, 0).latest()
        out = []
        for s in m.segments:
            log = storage.get(s.paths(topic, 0)[".log"])
            out += [h.base_offset for _, h in iter_batches(log) if h.is_control]
        return out

    before = read("read_committed")
    marks = markers()
    assert len(marks) == 4                                       # 3 ended transactions + the late commit
    compact_partition_local(storage, topic, 0, int(time.time() * 1000), force=True)
    after = read("read_committed")
    assert [v for _, v in after] == [b"c2", b"c3", b"open", b"c1-new", b"tail"]
    assert set(after) <= set(before)
    assert b"a1" not in [v for _, v in read("read_uncommitted")]  # aborted data removed
    assert markers() == marks                                    # every marker kept (inside the horizon)


def test_retention_keeps_aborted_ranges_and_markers_of_a_real_producers_log(broker, storage):
    """Time retention drops whole segments (markers go with their segments, as Kafka's); a log
    start moved into an aborted transaction (DeleteRecords) still hides the rest of it, and an
    open transaction still holds read_committed back."""
    from kafkastore.read.reader import PartitionReader
    from kafkastore.maintenance.retention import apply_retention, delete_records

    topic = "ret-" + uuid.uuid4().hex[:6]
    create_topic(storage, topic, 1, {"retention.ms": 3_600_000})
    p = _mixed_log(broker.bootstrap, topic, "tx-ret-" + uuid.uuid4().hex[:6])
    # c1 0, c2 1, COMMIT 2, a1 3, ABORT 4, c3 5, COMMIT 6, open 7

    def values(t, isolation="read_committed"):
        reader = PartitionReader(storage, t, 0)
        return reader.read(reader.log_start_offset, isolation=isolation, include_headers=False) \
            .column("value").to_pylist()

    apply_retention(storage, topic, 0, int(time.time() * 1000) + 7_200_000)  # all but the head expire
    assert PartitionReader(storage, topic, 0).log_start_offset == 7
    assert values(topic) == []  # the open transaction still holds read_committed back
    p.commit_transaction(15)
    assert values(topic) == [b"open"]

    other = "ret2-" + uuid.uuid4().hex[:6]
    create_topic(storage, other, 1)
    q = _mixed_log(broker.bootstrap, other, "tx-ret2-" + uuid.uuid4().hex[:6])
    q.commit_transaction(15)
    delete_records(storage, other, 0, 3)  # the log starts at the aborted record
    assert values(other) == [b"c3", b"open"]
    assert values(other, "read_uncommitted") == [b"a1", b"c3", b"open"]
