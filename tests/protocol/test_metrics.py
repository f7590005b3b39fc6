"""``serve --metrics-listen``: Prometheus metrics read back with prometheus-client's own parser
after real produce, fetch and consumer-group traffic."""
from __future__ import annotations

import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kafkastore.errors import ConfigError
from kafkastore.protocol.server import BrokerServer, BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.quota_requests import alter_quotas as _alter
from tests.helpers.quota_requests import call_as as _call
from tests.protocol.wire import Wire


def _scrape(broker) -> dict:
    """``{(sample name, sorted labels): value}`` of everything the broker serves."""
    port = broker.server.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples, name, **labels):
    want = tuple(sorted(labels.items()))
    return samples.get((name, want))


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    root = "file://" + str(tmp_path_factory.mktemp("metrics-root"))
    opts = ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500,
                        metrics_listen=("127.0.0.1", 0), quota_window_s=0.2, quota_samples=6,
                        quota_refresh_s=0.2)
    brokers = [BrokerThread(Storage(root), opts).start() for _ in range(2)]
    yield root, brokers
    for b in brokers:
        b.stop()


def test_metrics_after_produce_fetch_and_group_traffic(metered):
    from confluent_kafka import Consumer, Producer

    root, (broker, other) = metered
    topic = f"m-{uuid.uuid4().hex[:6]}"
    create_topic(Storage(root), topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        p.produce(topic, b"v" * 100, key=b"k%d" % i)
    assert p.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    # Both brokers: the group's coordinator is one of them; both brokers answer fetches.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    for _ in range(60):
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
            if got == 15:
                c.commit(asynchronous=False)   # lag 5 from here
        if got == 20:
            break
    assert got == 20

    samples = {}
    for b in (broker, other):
        for k, v in _scrape(b).items():
            samples[k] = samples.get(k, 0) + v
    assert _value(samples, "kafkastore_records_in_total", topic=topic) == 20
    assert _value(samples, "kafkastore_bytes_in_total", topic=topic) > 2000
    assert _value(samples, "kafkastore_records_out_total", topic=topic) >= 20
    assert _value(samples, "kafkastore_bytes_out_total", topic=topic) > 2000
    produce_requests = sum(v for (n, l), v in samples.items()
                           if n == "kafkastore_requests_total" and ("api", "Produce") in l)
    assert produce_requests >= 1
    assert _value(samples, "kafkastore_request_latency_seconds_count", api="Produce") == produce_requests
    assert _value(samples, "kafkastore_request_latency_seconds_count", api="JoinGroup") >= 1
    assert _value(samples, "kafkastore_commit_latency_seconds_count", ) >= 1
    assert _value(samples, "kafkastore_commits_total") >= 1
    assert _value(samples, "kafkastore_commit_conflicts_total") is not None
    assert _value(samples, "kafkastore_connections") >= 1
    assert _value(samples, "kafkastore_group_state", group=group, state="Stable") == 1
    assert _value(samples, "kafkastore_group_lag", group=group, topic=topic, partition="0") == 5
    assert _value(samples, "process_resident_memory_bytes") > 10_000_000
    c.close()


def test_errors_and_throttle_time_are_counted(metered):
    from kio.schema.metadata.v9 import request as meta_req

    _root, (broker, _other) = metered
    w = Wire(broker.bootstrap)
    client = f"slow-{uuid.uuid4().hex[:6]}"
    assert _alter(w, {"client-id": client}, {"request_percentage": 0.01}) == (0, None)
    for _ in range(3):
        _call(w, meta_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False), client)
    # an AlterClientQuotas with a zero rate: answered with an error code
    assert _alter(w, {"client-id": client}, {"producer_byte_rate": 0})[0] == 42
    samples = _scrape(broker)
    assert _value(samples, "kafkastore_throttle_time_seconds_total", quota="request_percentage",
                  entity=f"/clients/{client}", user="", client_id=client) > 0
    assert _value(samples, "kafkastore_request_errors_total", api="AlterClientQuotas",
                  version="1") >= 1


def test_each_broker_has_its_own_registry(metered):
    _root, (broker, other) = metered
    assert broker.server.metrics.registry is not other.server.metrics.registry
    assert broker.server.metrics_port != other.server.metrics_port


def test_non_loopback_metrics_need_tls_or_insecure(tmp_path):
    with pytest.raises(ConfigError, match="metrics on 0.0.0.0"):
        BrokerServer(Storage(f"file://{tmp_path}"), ServeOptions(metrics_listen=("0.0.0.0", 0)))
    # --insecure allows it (constructing the server checks; nothing listens yet)
    BrokerServer(Storage(f"file://{tmp_path}"),
                 ServeOptions(metrics_listen=("0.0.0.0", 0), insecure=True)).pool.shutdown()


def test_metrics_over_tls(tmp_path):
    import ssl

    from kafkastore.protocol.server import check_listener_security
    from tests.helpers.tls import self_signed

    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    # with TLS a non-loopback metrics address is allowed (as the Kafka listener's rule)
    check_listener_security(ServeOptions(metrics_listen=("0.0.0.0", 0), ssl_context=ctx))
    opts = ServeOptions(port=0, ssl_context=ctx, metrics_listen=("127.0.0.1", 0))
    with BrokerThread(Storage(f"file://{tmp_path}/root"), opts) as b:
        client = ssl.create_default_context(cafile=cert)
        url = f"https://127.0.0.1:{b.server.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10, context=client).read().decode()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert "kafkastore_connections" in names
        with pytest.raises(Exception):   # plain HTTP is not served
            urllib.request.urlopen(f"http://127.0.0.1:{b.server.metrics_port}/metrics", timeout=5)


def test_serve_command_serves_metrics_and_quotas_cli_applies(tmp_path):
    """`kafkastore serve --metrics-listen` as in production, and a quota set with the CLI
    while it runs reaches it (DescribeClientQuotas through the broker shows it)."""
    from kafkastore.cli.entry import main as cli
    from tests.helpers.quota_requests import describe_quotas
    from tests.helpers.serve_procs import start_serve, stop_serve

    root = f"file://{tmp_path}/root"
    proc = start_serve(root, extra=["--metrics-listen", "127.0.0.1:0"])
    try:
        line = proc.stdout.readline()
        assert line.startswith("kafkastore: metrics on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert "kafkastore_connections" in {f.name for f in
                                            text_string_to_metric_families(text.decode())}
        assert cli(["--root", root, "quotas", "set", "--client-id", "cli",
                    "--producer-byte-rate", "1000"]) == 0
        found = describe_quotas(Wire(proc.bootstrap), [("client-id", 0, "cli")])
        assert found == (0, {(("client-id", "cli"),): {"producer_byte_rate": 1000.0}})
    finally:
        stop_serve(proc)
