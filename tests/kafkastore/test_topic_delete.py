"""Deleting a topic is a tombstone commit on every partition's manifest before ``_topic.json``
goes: a writer racing the delete lands before it (and goes with the topic) or is refused, a
re-created topic starts empty and readable, and a delete or create that stopped part way is
finished by the next one."""
from __future__ import annotations

import threading

import pytest

from kafkastore import layout
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.cli.entry import main
from kafkastore.errors import TopicDeletedError, TopicExistsError, UnknownTopicError
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import (_tombstone, _tombstone_mark, create_topic, delete_topic, list_topics,
                                     load_topic, topic_exists)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("KAFKASTORE_ROOT", "KAFKASTORE_CONF", "KAFKASTORE_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)


def _produce(s: Storage, topic: str, n: int, partitions: int = 1) -> Broker:
    b = Broker(s)
    for i in range(n):
        b.send(topic, b"v%d" % i, partition=i % partitions)
    b.flush()
    return b


def _rows(s: Storage, topic: str, p: int = 0) -> list:
    r = PartitionReader(s, topic, p)
    return r.read(r.log_start_offset).column("value").to_pylist()


def _verify(root: str, topic: str) -> int:
    return main(["--root", root, "verify", topic])


def test_delete_tombstones_then_recreate_starts_empty(root_url):
    s = Storage(root_url)
    create_topic(s, "dt", 2)
    stale = _produce(s, "dt", 10, partitions=2)  # a writer that keeps the old topic cached
    assert delete_topic(s, "dt") == [0, 1]
    assert not topic_exists(s, "dt") and list_topics(s) == []
    for p in (0, 1):
        m = ManifestStore(s, "dt", p).latest()
        assert m.segments == () and m.log_start_offset == m.high_watermark == 5
        assert m.extra["deleted"]["id"] and m.producers == {}
    # a writer that looked the topic up before the delete is refused, never acknowledged
    stale.send("dt", b"late", partition=0)
    with pytest.raises(TopicDeletedError, match="'dt' was deleted"):
        stale.flush()
    with pytest.raises(UnknownTopicError):
        delete_topic(s, "dt")

    create_topic(s, "dt", 1)
    # offsets continue from the old high watermark (a manifest's never moves back); empty
    r = PartitionReader(s, "dt", 0)
    assert (r.log_start_offset, r.high_watermark) == (5, 5) and _rows(s, "dt") == []
    _produce(s, "dt", 3)
    assert _rows(s, "dt") == [b"v0", b"v1", b"v2"]
    assert "deleted" not in ManifestStore(s, "dt", 0).latest().extra
    # partition 1 of the old topic stays tombstoned until the topic grows again
    with pytest.raises(TopicDeletedError):
        ManifestStore(s, "dt", 1).commit(lambda m: ([], []))
    from kafkastore.topics.admin import alter_topic
    alter_topic(s, "dt", partitions=2)
    _produce(s, "dt", 2, partitions=1)
    b = Broker(s)
    b.send("dt", b"p1", partition=1)
    b.flush()
    assert _rows(s, "dt", 1) == [b"p1"]


def test_produce_racing_a_delete_loses_no_acknowledged_write(local_root, capsys):
    """Two brokers on one root: A deletes while B keeps producing. Every write B had
    acknowledged before the tombstone is below the tombstone's log start (gone with the
    topic); B gets no acknowledgement after it; the re-created topic is empty and verifies."""
    s = Storage(local_root)
    create_topic(s, "dt", 3)
    writer = Broker(Storage(local_root), broker_id=2)
    acked: list[tuple[int, int]] = []     # (partition, next offset) of every acknowledged flush
    refused: list[BaseException] = []
    stop = threading.Event()
    some_acks = threading.Event()

    writer.on_commit = lambda r: acked.append((r.partition, r.next_offset))

    def produce():
        i = 0
        while not stop.is_set():
            p = i % 3
            writer.send("dt", b"x%d" % i, partition=p)
            try:
                writer.flush()
            except TopicDeletedError as exc:
                refused.append(exc)
                return
            if len(acked) >= 10:
                some_acks.set()
            i += 1

    t = threading.Thread(target=produce)
    t.start()
    assert some_acks.wait(60)
    delete_topic(Storage(local_root), "dt")     # broker A
    t.join(60)
    stop.set()
    assert not t.is_alive()
    assert refused, "the writer was never refused after the delete"
    tomb = {p: ManifestStore(s, "dt", p).latest() for p in range(3)}
    for p, next_offset in acked:
        # acknowledged before the tombstone: at or below where the tombstone cut the log
        assert next_offset <= tomb[p].log_start_offset
    assert all(m.extra.get("deleted") and not m.segments for m in tomb.values())

    create_topic(s, "dt", 3)
    assert all(_rows(s, "dt", p) == [] for p in range(3))
    assert _verify(local_root, "dt") == 0
    capsys.readouterr()
    assert main(["--root", local_root, "consume", "dt"]) == 0
    assert capsys.readouterr().out == ""


def test_a_delete_that_stopped_part_way_is_finished(local_root):
    s = Storage(local_root)
    create_topic(s, "dt", 2)
    _produce(s, "dt", 4, partitions=2)
    # crashed after the tombstones, before _topic.json went: the re-run finishes
    _tombstone(s, "dt", 0, _tombstone_mark(1, of=load_topic(s, "dt").created_ms))
    _tombstone(s, "dt", 1, _tombstone_mark(1, of=load_topic(s, "dt").created_ms))
    assert topic_exists(s, "dt")
    assert delete_topic(s, "dt") == [0, 1] and not topic_exists(s, "dt")

    # crashed after one tombstone and the removal (_topic.json gone, partition 1 still live)
    create_topic(s, "dt", 2)
    _produce(s, "dt", 4, partitions=2)
    _tombstone(s, "dt", 0, _tombstone_mark(1, of=load_topic(s, "dt").created_ms))
    s.delete([layout.topic_meta_path("dt")])
    assert delete_topic(s, "dt") == [1]          # the next delete finishes it
    assert ManifestStore(s, "dt", 1).latest().extra["deleted"]


def test_create_finishes_an_interrupted_delete(local_root):
    s = Storage(local_root)
    create_topic(s, "dt", 2)
    _produce(s, "dt", 6, partitions=2)
    _tombstone(s, "dt", 0, _tombstone_mark(1, of=load_topic(s, "dt").created_ms))
    s.delete([layout.topic_meta_path("dt")])   # partition 1 keeps its 3 records
    create_topic(s, "dt", 2)
    assert _rows(s, "dt", 0) == [] and _rows(s, "dt", 1) == []
    _produce(s, "dt", 2, partitions=2)
    assert _rows(s, "dt", 1) == [b"v1"]
    assert _verify(local_root, "dt") == 0


def test_a_create_that_stopped_before_clearing_tombstones_is_finished_by_a_rerun(local_root):
    s = Storage(local_root)
    create_topic(s, "dt", 1, now_ms=1000)
    _produce(s, "dt", 2)
    delete_topic(s, "dt", now_ms=2000)
    # the create wrote _topic.json, then stopped before clearing the tombstone
    s.put(layout.topic_meta_path("dt"), b'{"format": 1, "topic": "dt", "partitions": 1, '
                                          b'"config": {}, "created_ms": 3000, "updated_ms": 3000}')
    with pytest.raises(TopicDeletedError):
        _produce(s, "dt", 1)
    with pytest.raises(TopicExistsError):
        create_topic(s, "dt", 1)
    _produce(s, "dt", 1)
    assert _rows(s, "dt") == [b"v0"]
    assert load_topic(s, "dt").created_ms == 3000


def test_a_create_racing_an_unfinished_delete_leaves_its_tombstones(local_root):
    """A delete under way (tombstones written, _topic.json still there): a create of the
    same name says it exists and does not clear the newer tombstones."""
    s = Storage(local_root)
    create_topic(s, "dt", 1, now_ms=1000)
    _tombstone(s, "dt", 0, _tombstone_mark(2000, of=1000))
    with pytest.raises(TopicExistsError):
        create_topic(s, "dt", 1)
    assert ManifestStore(s, "dt", 0).latest().extra["deleted"]


def test_gc_collects_the_files_a_delete_left(local_root, monkeypatch, capsys):
    """The delete leaves segment files to gc; ``kafkastore gc`` finds a deleted topic's
    tombstoned partitions (there is no _topic.json to name them any more)."""
    import time as time_mod

    s = Storage(local_root)
    create_topic(s, "dt", 2)
    _produce(s, "dt", 6, partitions=2)
    delete_topic(s, "dt")
    logs = [i.path for i in s.list("topics/dt") if i.path.endswith(".log")]
    assert len(logs) == 2
    assert main(["--root", local_root, "gc", "dt"]) == 0   # within the grace period: kept
    assert [i.path for i in s.list("topics/dt") if i.path.endswith(".log")] == logs
    later = time_mod.time() + 3600
    monkeypatch.setattr(time_mod, "time", lambda: later)
    capsys.readouterr()
    assert main(["--root", local_root, "gc", "dt"]) == 0
    assert [i.path for i in s.list("topics/dt") if i.path.endswith(".log")] == []
    with pytest.raises(UnknownTopicError):
        from kafkastore.maintenance.gc import collect_garbage
        collect_garbage(s, "never-was", now_ms=0)
    assert main(["--root", local_root, "gc", "never-was"]) == 1


# ---------------------------------------------------------------------------
# delete and re-create decide by what the store holds, never by two machines' clocks

def _ahead(ms: int):
    from kafkastore.clock import SYSTEM, Clock

    return Clock(wall_ms=lambda: SYSTEM.wall_ms() + ms)


def test_a_delete_by_a_machine_whose_clock_is_ahead_does_not_block_a_re_create(local_root):
    """The delete's tombstones were kept by a create whose clock read earlier than the
    deleting machine's: the re-created topic refused every write for good."""
    s = Storage(local_root)
    create_topic(s, "dt", 2)
    _produce(s, "dt", 4, partitions=2)
    delete_topic(Storage(local_root, clock=_ahead(600_000)), "dt")   # 10 minutes ahead
    create_topic(s, "dt", 2)
    _produce(s, "dt", 2, partitions=2)
    assert _rows(s, "dt", 0) == [b"v0"] and _rows(s, "dt", 1) == [b"v1"]
    assert _verify(local_root, "dt") == 0


def test_topics_create_repairs_a_re_create_left_unwritable(local_root):
    """A create that wrote _topic.json but left the skewed delete's tombstones (a create
    that stopped, or one by an older kafkastore) is finished by ``topics create``."""
    s = Storage(local_root)
    create_topic(s, "dt", 1)
    _produce(s, "dt", 2)
    delete_topic(Storage(local_root, clock=_ahead(600_000)), "dt")
    s.put(layout.topic_meta_path("dt"), b'{"format": 2, "topic": "dt", "partitions": 1, '
                                          b'"config": {}, "created_ms": 3000, "updated_ms": 3000}')
    with pytest.raises(TopicDeletedError):
        _produce(s, "dt", 1)
    with pytest.raises(TopicExistsError):
        create_topic(s, "dt", 1)
    _produce(s, "dt", 1)
    assert _rows(s, "dt") == [b"v0"]


def test_a_delete_of_the_new_topic_by_a_machine_whose_clock_is_behind_is_kept(local_root):
    """The other way round: a create that clears tombstones must leave those of a delete of
    its own incarnation, however far behind the deleting machine's clock is."""
    s = Storage(local_root)
    created = create_topic(s, "dt", 1)
    _tombstone(s, "dt", 0, _tombstone_mark(created.created_ms - 600_000, of=created.created_ms))
    with pytest.raises(TopicExistsError):
        create_topic(s, "dt", 1)
    assert ManifestStore(s, "dt", 0).latest().extra["deleted"]


def test_topics_create_repairs_a_topic_left_unwritable_by_an_older_delete(local_root):
    """Tombstones written before they named their incarnation carry only the deleting
    machine's time: ordered by the store's own object times instead, a re-create clears
    one stored before its _topic.json."""
    import os
    import time as time_mod

    s = Storage(local_root)
    create_topic(s, "dt", 1)
    _produce(s, "dt", 2)
    legacy = {"id": "old", "deleted_ms": s.clock.wall_ms() + 600_000}   # a clock 10 min ahead
    _tombstone(s, "dt", 0, legacy)
    s.delete([layout.topic_meta_path("dt")])
    tomb = ManifestStore(Storage(local_root), "dt", 0)
    path = tomb.path(tomb.latest().version)
    past = time_mod.time() - 30   # the store stamped the tombstone before the re-create
    os.utime(local_root[len("file://"):] + "/" + path, (past, past))
    create_topic(Storage(local_root), "dt", 1)
    _produce(Storage(local_root), "dt", 1)
    assert _rows(Storage(local_root), "dt") == [b"v0"]
