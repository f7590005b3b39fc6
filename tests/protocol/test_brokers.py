"""Many brokers on one root, and a broker killed under an idempotent producer."""
from __future__ import annotations

import signal
import threading
import time

import pytest
from kio.schema.metadata.v12 import request as md_req

from kafkastore.manifest import ManifestStore
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from tests.helpers.kafka_clients import cli_consume, confluent_consume
from tests.helpers.serve_procs import free_port, start_serve, stop_serve
from tests.helpers.wire_requests import batch, produce
from .wire import Wire


def test_brokers_register_and_spread_leadership(module_root, storage):
    create_topic(storage, "spread", 4)
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=200)
    with BrokerThread(Storage(module_root), opts) as a, BrokerThread(Storage(module_root), opts) as b:
        assert a.server.node_id != b.server.node_id
        both = sorted([a.server.node_id, b.server.node_id])
        deadline = time.time() + 30  # a heartbeat or two: each sees the other
        while time.time() < deadline and not all(
                [n for n, _, _ in br.server.live_brokers()] == both for br in (a, b)):
            time.sleep(0.05)
        for br in (a, b):
            w = Wire(br.bootstrap)
            resp = w.call(md_req.MetadataRequest(
                topics=(md_req.MetadataRequestTopic(name="spread", topic_id=None),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            w.close()
            assert sorted(x.node_id for x in resp.brokers) == sorted([a.server.node_id, b.server.node_id])
            leaders = {p.partition_index: p.leader_id for p in resp.topics[0].partitions}
            assert set(leaders.values()) == {a.server.node_id, b.server.node_id}
        # Both accept any partition; the manifest orders them: no offset twice, no gap.
        results = []

        def hammer(br, tag):
            w = Wire(br.bootstrap)
            for i in range(30):
                results.append((produce(w, "spread", 0, batch([b"%s-%d" % (tag, i)])), tag))
            w.close()

        threads = [threading.Thread(target=hammer, args=(br, t)) for br, t in ((a, b"a"), (b, b"b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        offsets = sorted(off for (err, off), _ in results)
        assert all(err == 0 for (err, _), _ in results)
        assert offsets == list(range(60))
        gone = b.server.node_id
    # A stopped broker deregisters: the survivor no longer lists it.
    with BrokerThread(Storage(module_root), opts) as c:
        c.server.brokers.refresh()
        assert gone not in [n for n, _, _ in c.server.live_brokers()]
    assert ManifestStore(storage, "spread", 0).latest().high_watermark == 60


@pytest.mark.parametrize("after_kill", ["restart", "failover"])
def test_killed_broker_loses_and_doubles_nothing(tmp_path, after_kill):
    """SIGKILL a broker with produce requests in flight under an idempotent producer; then
    either restart it on the same port, or let the producer fail over to a second broker."""
    from confluent_kafka import Producer

    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "crash", 2)
    port = free_port()
    procs = [start_serve(root, port, 0)]
    bootstrap = f"127.0.0.1:{port}"
    if after_kill == "failover":
        other = free_port()
        procs.append(start_serve(root, other, 1))
        bootstrap += f",127.0.0.1:{other}"
    n = 3000
    delivered, errors = [], []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "acks": "all", "linger.ms": 2, "batch.num.messages": 50,
                  "message.timeout.ms": 60000, "reconnect.backoff.ms": 50,
                  "topic.metadata.refresh.interval.ms": 1000})
    try:
        for i in range(n):
            p.produce("crash", key=b"k%d" % (i % 7), value=b"m-%d" % i,
                      on_delivery=lambda e, m: (errors if e else delivered).append(e or m.value()))
            p.poll(0)
            if i == n // 3:
                p.flush(30)
            if i == n // 3 + 200:
                procs[0].send_signal(signal.SIGKILL)  # mid-stream: requests in flight
                procs[0].wait(10)
                if after_kill == "restart":
                    procs[0] = start_serve(root, port, 0)
            if i % 100 == 0:
                time.sleep(0.01)
        assert p.flush(60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_serve(proc)
    assert errors == []
    values = sorted(r["value"] for r in cli_consume(root, "crash"))
    assert values == sorted("m-%d" % i for i in range(n))  # nothing lost, nothing doubled

def test_two_brokers_on_s3_and_a_client(s3_endpoint):
    """The same leaderless append path on S3 (moto): both brokers write one partition."""
    from confluent_kafka import Producer
    import uuid

    root = f"s3://kafkastore-test/serve-{uuid.uuid4().hex[:8]}"
    create_topic(Storage(root), "s3t", 1)
    opts = ServeOptions(port=0, commit_interval_ms=2)
    with BrokerThread(Storage(root), opts) as a, BrokerThread(Storage(root), opts) as b:
        wa, wb = Wire(a.bootstrap), Wire(b.bootstrap)
        got = [produce(w, "s3t", 0, batch([b"%d" % i])) for i, w in enumerate([wa, wb] * 5)]
        wa.close()
        wb.close()
        assert sorted(off for _, off in got) == list(range(10)) and all(e == 0 for e, _ in got)
        p = Producer({"bootstrap.servers": f"{a.bootstrap},{b.bootstrap}", "enable.idempotence": True})
        for i in range(20):
            p.produce("s3t", value=b"c-%d" % i)
        assert p.flush(30) == 0
        values = [v for *_, v in confluent_consume(b.bootstrap, "s3t", 1, 30)]
    assert sorted(values) == sorted([b"%d" % i for i in range(10)] + [b"c-%d" % i for i in range(20)])


def test_fetch_beyond_a_stale_cache_is_not_out_of_range(module_root, storage):
    """A consumer that read offset N from one broker may ask another whose cached manifest is
    older: that broker must re-read, not answer OFFSET_OUT_OF_RANGE (a consumer would reset)."""
    from tests.helpers.wire_requests import fetch

    create_topic(storage, "stale", 1)
    opts = ServeOptions(port=0, commit_interval_ms=1)
    with BrokerThread(Storage(module_root), opts) as a, BrokerThread(Storage(module_root), opts) as b:
        b.server.meta.manifest_ttl_s = 3600  # b's cache would stay stale for an hour
        wa, wb = Wire(a.bootstrap), Wire(b.bootstrap)
        assert fetch(wb, "stale", 0, 0).high_watermark == 0  # cached: empty
        assert produce(wa, "stale", 0, batch([b"x", b"y"])) == (0, 0)
        p = fetch(wb, "stale", 0, 2)
        assert int(p.error_code) == 0 and p.high_watermark == 2
        wa.close()
        wb.close()
