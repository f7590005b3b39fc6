"""Real Kafka clients against the broker: confluent-kafka (librdkafka), kafka-python, aiokafka.

Each produces into and fetches from a broker over a file root; what they write
is read back record for record by ``kafkastore consume`` (and by the Spark
load); what ``kafkastore produce`` wrote is fetched by them. The protocol
versions each client negotiated are logged by the broker (``-v``) and listed
in docs/serve.md.
"""
from __future__ import annotations

import asyncio
import io
import json
from contextlib import redirect_stdout

import pytest

from kafkastore.cli.entry import main as cli
from kafkastore.format.partitioner import partition_for_key
from kafkastore.topics.admin import create_topic
from tests.helpers.kafka_clients import cli_consume, confluent_consume

confluent_kafka = pytest.importorskip("confluent_kafka")
N = 200


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_idempotent_every_codec(broker, storage, module_root, codec):
    from confluent_kafka import Producer

    topic = f"ck-{codec}"
    create_topic(storage, topic, 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "compression.codec": codec, "linger.ms": 5, "partitioner": "murmur2_random"})
    errors = []
    for i in range(N):
        p.produce(topic, key=b"key-%d" % i, value=b"value-%d" % i, headers=[("h", b"%d" % i)],
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and errors == []
    got = confluent_consume(broker.bootstrap, topic, 3, N)
    assert sorted(v for *_, v in got) == sorted(b"value-%d" % i for i in range(N))
    parts = {}
    for part, off, k, v in got:
        parts.setdefault(part, []).append(off)
        assert partition_for_key(k, 3) == part  # as Kafka's Java partitioner (murmur2)
    for offs in parts.values():
        assert sorted(offs) == list(range(len(offs)))
    # kafkastore consume reads the same records, record for record.
    rows = cli_consume(module_root, topic)
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows) == \
        sorted((pa, off, k.decode(), v.decode()) for pa, off, k, v in got)
    assert all(r["headers"] for r in rows)


def test_kafka_python_produce_and_fetch(broker, storage, module_root):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(storage, "kp", 2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                      compression_type="gzip")
    futures = [p.send("kp", key=b"k%d" % i, value=b"kp-%d" % i) for i in range(N)]
    p.flush(30)
    metas = [f.get(10) for f in futures]
    p.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    c.assign([TopicPartition("kp", 0), TopicPartition("kp", 1)])
    c.seek_to_beginning()
    got = [(m.partition, m.offset, m.value) for m in c]
    c.close()
    assert sorted(got) == sorted((m.partition, m.offset, b"kp-%d" % i) for i, m in enumerate(metas))
    rows = cli_consume(module_root, "kp")
    assert sorted((r["partition"], r["offset"], r["value"]) for r in rows) == \
        sorted((pa, off, v.decode()) for pa, off, v in got)


def test_aiokafka_produce_and_fetch(broker, storage, module_root):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    create_topic(storage, "ak", 2)

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                             compression_type="lz4")
        await p.start()
        try:
            batch = [await p.send("ak", b"ak-%d" % i, key=b"k%d" % i) for i in range(N)]
            metas = [await f for f in batch]
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        got = []
        try:
            c.assign([TopicPartition("ak", 0), TopicPartition("ak", 1)])
            await c.seek_to_beginning()
            while len(got) < N:
                res = await c.getmany(timeout_ms=3000)
                if not res:
                    break
                got += [(m.partition, m.offset, m.value) for msgs in res.values() for m in msgs]
        finally:
            await c.stop()
        return metas, got

    metas, got = asyncio.run(run())
    assert sorted(got) == sorted((m.partition, m.offset, b"ak-%d" % i) for i, m in enumerate(metas))
    rows = cli_consume(module_root, "ak")
    assert sorted((r["partition"], r["offset"], r["value"]) for r in rows) == \
        sorted((pa, off, v.decode()) for pa, off, v in got)


def test_cli_produce_is_fetched_by_clients(broker, storage, module_root, tmp_path, monkeypatch):
    create_topic(storage, "cli", 2)
    lines = "".join(json.dumps({"key": f"k{i}", "value": f"cli-{i}", "timestamp": 1_700_000_000_000 + i})
                    + "\n" for i in range(50))
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    with redirect_stdout(io.StringIO()):
        assert cli(["--root", module_root, "produce", "cli"]) == 0
    got = confluent_consume(broker.bootstrap, "cli", 2, 50)
    assert sorted(v for *_, v in got) == sorted(b"cli-%d" % i for i in range(50))
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    c.assign([TopicPartition("cli", 0), TopicPartition("cli", 1)])
    c.seek_to_beginning()
    assert sorted(m.value for m in c) == sorted(b"cli-%d" % i for i in range(50))
    c.close()
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def fetch_all():
        ac = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await ac.start()
        got = []
        try:
            ac.assign([ATP("cli", 0), ATP("cli", 1)])
            await ac.seek_to_beginning()
            while len(got) < 50:
                res = await ac.getmany(timeout_ms=3000)
                if not res:
                    break
                got += [m.value for msgs in res.values() for m in msgs]
        finally:
            await ac.stop()
        return got

    assert sorted(asyncio.run(fetch_all())) == sorted(b"cli-%d" % i for i in range(50))


def test_admin_create_describe_delete(broker, storage):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([NewTopic("adm", 3, 1, config={"retention.ms": "1000"})])
    fs["adm"].result(10)
    again = admin.create_topics([NewTopic("adm", 3, 1)])
    with pytest.raises(Exception) as exc:
        again["adm"].result(10)
    assert "TOPIC_ALREADY_EXISTS" in str(exc.value) or "already exists" in str(exc.value)
    res = admin.describe_configs([ConfigResource("topic", "adm")])
    configs = list(res.values())[0].result(10)
    assert configs["retention.ms"].value == "1000"
    assert not configs["retention.ms"].is_default and configs["segment.bytes"].is_default
    admin.delete_topics(["adm"])["adm"].result(10)
    from kafkastore.topics.admin import list_topics
    assert "adm" not in list_topics(storage)


def test_spark_loads_what_a_client_produced(broker, storage, module_root, spark, tmp_path):
    from confluent_kafka import Producer

    from pipelines.jobs.load import run_load

    create_topic(storage, "to-spark", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(30):
        p.produce("to-spark", key=b"k%d" % i, value=b"s-%d" % i)
    assert p.flush(30) == 0
    summary = run_load(spark, root=module_root, topic="to-spark", warehouse=f"file://{tmp_path}/wh",
                       table="events", progress=False)
    assert summary.rows == 30 and sum(u - f for f, u in summary.ranges.values()) == 30


def test_confluent_list_topics(broker, storage):
    """AdminClient.list_topics(): Metadata v12 for all topics (librdkafka pads it)."""
    from confluent_kafka.admin import AdminClient

    from kafkastore.topics.admin import create_topic

    create_topic(storage, "listed", 2)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert "listed" in md.topics and len(md.topics["listed"].partitions) == 2
