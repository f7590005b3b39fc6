"""Topics on every backend: create (put-if-absent), list, describe with manifest offsets, alter."""
from __future__ import annotations

import json
import threading

import pytest

from kafkastore import layout
from kafkastore.errors import ConfigError, TopicExistsError, UnknownTopicError
from kafkastore.manifest import (AdvanceLogStart, AppendSegments, CorruptMetadataError, ManifestStore,
                                 SegmentEntry)
from kafkastore.storage import Storage
from kafkastore.topics.topic_config import TopicConfig
from kafkastore.topics.admin import (alter_topic, create_topic, describe_topic, list_topics, load_topic,
                                     topic_exists)


@pytest.fixture
def storage(root_url):
    return Storage(root_url)


def test_create_load_list(storage):
    meta = create_topic(storage, "orders", 3, {"retention.ms": "1000", "cleanup.policy": "compact"}, now_ms=5)
    assert (meta.name, meta.partitions, meta.created_ms) == ("orders", 3, 5)
    stored = json.loads(storage.get(layout.topic_meta_path("orders")))
    assert stored == {"format": 2, "topic": "orders", "partitions": 3,
                      "config": {"cleanup.policy": "compact", "retention.ms": 1000},
                      "created_ms": 5, "updated_ms": 5, "id": meta.topic_id}
    assert len(meta.topic_id) == 32   # random (uuid4), stored with the topic
    assert load_topic(storage, "orders") == meta
    create_topic(storage, "a.b-c_d", 1)
    assert list_topics(storage) == ["a.b-c_d", "orders"]
    assert topic_exists(storage, "orders") and not topic_exists(storage, "nope")


def test_create_twice_is_topic_exists(storage):
    create_topic(storage, "t", 1)
    with pytest.raises(TopicExistsError, match="'t' already exists"):
        create_topic(storage, "t", 2)
    assert load_topic(storage, "t").partitions == 1


def test_racing_creates_one_wins(storage):
    results = []
    barrier = threading.Barrier(6)

    def go(i):
        barrier.wait()
        try:
            create_topic(storage, "race", i + 1)
            results.append(i + 1)
        except TopicExistsError:
            pass

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 1 and load_topic(storage, "race").partitions == results[0]


@pytest.mark.parametrize("name,partitions,configs", [
    ("bad name", 1, None), ("", 1, None), ("..", 1, None), ("x" * 250, 1, None),
    ("t", 0, None), ("t", -1, None), ("t", 1.5, None), ("t", True, None),
    ("t", 1, {"retention.ms": "soon"}), ("t", 1, {"no.such.config": 1}),
])
def test_create_rejects_bad_input(storage, name, partitions, configs):
    with pytest.raises(ConfigError):
        create_topic(storage, name, partitions, configs)
    assert list_topics(storage) == []


def test_unknown_topic(storage):
    with pytest.raises(UnknownTopicError, match="unknown topic 'ghost'.*no topics yet"):
        load_topic(storage, "ghost")
    create_topic(storage, "real", 1)
    with pytest.raises(UnknownTopicError, match="topics: real"):
        describe_topic(storage, "ghost")


def test_list_ignores_directories_without_metadata(storage):
    create_topic(storage, "kept", 1)
    storage.put("topics/orphan/0/00000000000000000000-x.log", b"")
    assert list_topics(storage) == ["kept"]


def _segment(base, nxt, sid):
    return SegmentEntry(base, nxt, nxt - base, 100, 1, 2, sid, writer_id=1, leader_epoch=0, checksum=0)


def test_describe_reports_offsets_from_manifests(storage, metadata_only_commits):
    create_topic(storage, "orders", 3, {"segment.bytes": 1024})
    store = ManifestStore(storage, "orders", 1)
    store.commit(lambda base: ([AppendSegments((_segment(0, 10, "a"), _segment(10, 25, "b")))], []))
    store.commit(lambda base: ([AdvanceLogStart(10)], []))
    info = describe_topic(storage, "orders")
    assert info.partitions == 3 and info.config == TopicConfig({"segment.bytes": 1024})
    assert [(o.partition, o.log_start_offset, o.high_watermark) for o in info.offsets] == [
        (0, 0, 0), (1, 10, 25), (2, 0, 0)]
    d = info.to_dict()
    assert d["offsets"]["1"] == {"log_start_offset": 10, "high_watermark": 25, "segments": 1, "size": 100}
    assert d["config"] == {"segment.bytes": 1024}
    assert info.to_dict(include_defaults=True)["config"]["retention.ms"] == 604_800_000


def test_alter_topic(storage):
    create_topic(storage, "t", 2, {"retention.ms": 1000, "segment.ms": 50}, now_ms=1)
    meta = alter_topic(storage, "t", set_configs={"cleanup.policy": "compact"},
                       delete_configs=["segment.ms"], partitions=4, now_ms=9)
    assert meta.partitions == 4 and meta.created_ms == 1 and meta.updated_ms == 9
    assert load_topic(storage, "t").config.to_dict() == {"cleanup.policy": "compact", "retention.ms": 1000}
    with pytest.raises(ConfigError, match="only grow"):
        alter_topic(storage, "t", partitions=3)
    with pytest.raises(ConfigError):
        alter_topic(storage, "t", set_configs={"retention.ms": "x"})
    with pytest.raises(UnknownTopicError):
        alter_topic(storage, "ghost", partitions=5)
    assert load_topic(storage, "t").partitions == 4


@pytest.mark.parametrize("payload", [b"not json", b"{}", b'{"format": 1, "topic": "t", "partitions": 0}',
                                     b'{"format": 1, "topic": "other", "partitions": 1}',
                                     b'{"format": 1, "topic": "t", "partitions": 1, "config": {"x": 1}}'])
def test_corrupt_metadata(storage, payload):
    storage.put(layout.topic_meta_path("t"), payload)
    with pytest.raises(CorruptMetadataError):
        load_topic(storage, "t")


def test_create_settles_a_lost_response_and_refuses_a_racing_create(root_url):
    from tests.faults import FaultyFS

    storage = Storage(root_url)
    fs = FaultyFS(storage.fs)
    faulty = Storage(root_url, fs=fs)
    fs.lose_response(match="_topic.json")
    meta = create_topic(faulty, "lost", 2, now_ms=7)       # read back: ours, created once
    assert load_topic(storage, "lost") == meta
    fs.on_write(lambda op, path: create_topic(storage, "raced", 1), match="_topic.json")
    with pytest.raises(TopicExistsError):
        create_topic(faulty, "raced", 3)
    assert load_topic(storage, "raced").partitions == 1
