"""Clients speaking the old message format (Produce v0-2, Fetch v0-3) through ``serve``.

kafka-python pinned with ``api_version`` sends exactly the versions of that broker
release (its static table, no ApiVersions): (0, 9) -> Produce v1 / Fetch v1 / magic 0,
(0, 10, 0) -> Produce v2 / Fetch v2 / magic 1. What they write is read back by a v2
consumer (confluent-kafka) and the other way round.
"""
from __future__ import annotations

import time

import pytest

from kafkastore.topics.admin import create_topic
from tests.helpers.kafka_clients import cli_consume, confluent_consume

pytest.importorskip("kafka")

N = 20
OLD = {"v0.9": (0, 9), "v0.10": (0, 10, 0)}


def _old_consume(bootstrap: str, topic: str, partitions: int, api_version, expected: int, **conf):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, api_version=api_version,
                      consumer_timeout_ms=3000, **conf)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning()  # ListOffsets v0 (earliest)
    got = []
    for m in c:
        got.append((m.partition, m.offset, m.key, m.value, m.timestamp))
        if len(got) >= expected:
            break
    c.close()
    return got


@pytest.mark.parametrize("release,codec", [(r, c) for r in sorted(OLD) for c in (None, "gzip")] + [
    # magic 1 only: kafka-python writes magic 0 lz4 only with the xxhash package.
    ("v0.10", "snappy"), ("v0.10", "lz4")])
def test_old_producer_round_trip(broker, storage, module_root, release, codec):
    from kafka import KafkaProducer

    api_version = OLD[release]
    topic = f"old-{release.replace('.', '')}-{codec or 'none'}"
    create_topic(storage, topic, 2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, api_version=api_version,
                      compression_type=codec, linger_ms=5)
    t0 = int(time.time() * 1000) - N  # recent: older records would fall to retention
    futures = [p.send(topic, key=(b"k%d" % i) if i % 3 else None, value=b"v-%d" % i,
                      timestamp_ms=t0 + i) for i in range(N)]
    p.flush(30)
    metas = [f.get(10) for f in futures]
    p.close()
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (pa, off) for pa in range(2) for off in range(sum(m.partition == pa for m in metas)))
    want = sorted((m.partition, m.offset, (b"k%d" % i) if i % 3 else None, b"v-%d" % i)
                  for i, m in enumerate(metas))

    old = _old_consume(broker.bootstrap, topic, 2, api_version, N)
    assert sorted(g[:4] for g in old) == want
    if api_version >= (0, 10, 0):  # magic 1 carries the producer's timestamps
        assert {g[4] for g in old} == {t0 + i for i in range(N)}

    new = confluent_consume(broker.bootstrap, topic, 2, N)
    assert sorted(new) == want
    rows = cli_consume(module_root, topic)
    assert len(rows) == N


@pytest.mark.parametrize("release", sorted(OLD))
def test_old_consumer_reads_v2_producer(broker, storage, release):
    """A v2 producer's batches (gzip, keyed, with headers) down-converted for an old consumer."""
    from confluent_kafka import Producer

    topic = f"new-to-{release.replace('.', '')}"
    create_topic(storage, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip",
                  "linger.ms": 5, "enable.idempotence": True})
    for i in range(N):
        p.produce(topic, key=b"key%d" % i, value=b"x" * i, partition=0, headers=[("h", b"1")])
    assert p.flush(30) == 0
    got = _old_consume(broker.bootstrap, topic, 1, OLD[release], N)
    assert [(g[1], g[2], g[3]) for g in got] == [(i, b"key%d" % i, b"x" * i) for i in range(N)]


def test_acks_zero_old_producer(broker, storage):
    from kafka import KafkaProducer

    create_topic(storage, "old-acks0", 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=0, api_version=(0, 10, 0))
    for i in range(5):
        p.send("old-acks0", value=b"a%d" % i, partition=0)
    p.flush(30)
    p.close()
    got = confluent_consume(broker.bootstrap, "old-acks0", 1, 5)
    assert [g[3] for g in got] == [b"a%d" % i for i in range(5)]


@pytest.mark.parametrize("release", sorted(OLD))
def test_old_consumer_group_resets_and_commits(broker, storage, release):
    """A pinned consumer in a group: no committed offset, so it resets (ListOffsets v0,
    latest), reads what comes after, commits, and a second one resumes from the commit."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    topic = f"grp-{release.replace('.', '')}"
    create_topic(storage, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, value=b"before", partition=0)
    assert p.flush(30) == 0

    def consumer():
        return KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"g-{topic}",
                             api_version=OLD[release], auto_offset_reset="latest",
                             enable_auto_commit=False, consumer_timeout_ms=4000)

    c = consumer()
    while not c.assignment():
        c.poll(200)
    from kafka import TopicPartition
    assert c.position(TopicPartition(topic, 0)) == 1  # reset to latest, past "before"
    for v in (b"a", b"b"):
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 2:
            break
    c.commit()
    c.close()
    assert got == [b"a", b"b"]
    p.produce(topic, value=b"c", partition=0)
    assert p.flush(30) == 0
    c = consumer()
    assert [m.value for m in c][:1] == [b"c"]
    c.close()
