"""Client quotas (KIP-13/124/257): precedence, Kafka's rate sensor, the two admin APIs,
throttling over the wire and of real clients, on two brokers sharing a root."""
from __future__ import annotations

import json
import time
import uuid

import pytest
from kio.schema.describe_client_quotas.v0 import request as describe_req_v0

from kafkastore.cluster.documents import ClusterDocument
from kafkastore.errors import ConfigError
from kafkastore.protocol import quotas as Q
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.quota_requests import alter_quotas as _alter
from tests.helpers.quota_requests import call_as as _call
from tests.helpers.quota_requests import describe_quotas as _describe
from tests.helpers.wire_requests import batch, produce
from tests.protocol.wire import Wire

INVALID_REQUEST = 42
# Short sensor windows so tests see rates settle in seconds (Kafka: 11 windows of 1 s).
QUOTA_OPTS = dict(quota_window_s=0.2, quota_samples=6, quota_refresh_s=0.2)


# -- pure: precedence and the rate sensor ------------------------------------------------

def _doc(*entries):
    doc = {}
    for entity, values in entries:
        doc = Q.alter(doc, entity, values)
    return doc


def test_precedence_most_specific_wins_per_key():
    levels = [  # Kafka's order, most specific first
        ({"user": "alice", "client-id": "app"}, 1),
        ({"user": "alice", "client-id": None}, 2),
        ({"user": "alice"}, 3),
        ({"user": None, "client-id": "app"}, 4),
        ({"user": None, "client-id": None}, 5),
        ({"user": None}, 6),
        ({"client-id": "app"}, 7),
        ({"client-id": None}, 8),
    ]
    for i in range(len(levels)):
        config = Q.QuotaConfig(_doc(*[(e, {Q.PRODUCER_BYTE_RATE: v}) for e, v in levels[i:]]))
        match = config.lookup(Q.PRODUCER_BYTE_RATE, "alice", "app")
        assert match.bound == levels[i][1], (i, match)
    # per key: a more specific entity without this key does not hide a less specific one
    config = Q.QuotaConfig(_doc(({"user": "alice"}, {Q.CONSUMER_BYTE_RATE: 10}),
                                ({"client-id": None}, {Q.PRODUCER_BYTE_RATE: 20})))
    assert config.lookup(Q.PRODUCER_BYTE_RATE, "alice", "app").bound == 20
    assert config.lookup(Q.CONSUMER_BYTE_RATE, "alice", "app").bound == 10
    assert config.lookup(Q.CONSUMER_BYTE_RATE, "bob", "app") is None


def test_sensor_sharing_follows_the_matched_entity():
    config = Q.QuotaConfig(_doc(({"user": "alice"}, {Q.PRODUCER_BYTE_RATE: 10}),
                                ({"client-id": None}, {Q.PRODUCER_BYTE_RATE: 20})))
    # /users/alice: all of alice's client ids share one sensor
    assert config.lookup(Q.PRODUCER_BYTE_RATE, "alice", "a").sensor == ("alice", "")
    assert config.lookup(Q.PRODUCER_BYTE_RATE, "alice", "b").sensor == ("alice", "")
    # /clients/<default>: one sensor per client id
    assert config.lookup(Q.PRODUCER_BYTE_RATE, "bob", "a").sensor == ("", "a")
    assert config.lookup(Q.PRODUCER_BYTE_RATE, "bob", "a").entity == "/clients/<default>"


def test_rate_and_throttle_follow_kafkas_formula():
    rate = Q.Rate(window_s=1.0, samples=11)
    rate.record(2000, now=0.0)
    # before 10 full windows the rate is measured over (samples - 1) windows
    assert rate.window_size(0.0) == pytest.approx(10.0)
    assert rate.value(0.0) == pytest.approx(200.0)
    # (observed - quota) / quota * window: (200 - 100) / 100 * 10 s
    assert rate.throttle_s(100.0, 0.0) == pytest.approx(10.0)
    assert rate.throttle_s(200.0, 0.0) == 0.0
    # old windows expire
    assert rate.value(12.5) == 0.0


@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), "10", True])
def test_zero_negative_and_non_numbers_are_refused(value):
    with pytest.raises(ConfigError):
        Q.validate_value(Q.PRODUCER_BYTE_RATE, value)


def test_entities_and_keys_are_validated():
    with pytest.raises(ConfigError, match="whole number"):
        Q.validate_value(Q.CONSUMER_BYTE_RATE, 10.5)
    assert Q.validate_value(Q.REQUEST_PERCENTAGE, 12.5) == 12.5
    with pytest.raises(ConfigError, match="unknown quota"):
        Q.validate_value("bytes_per_year", 1)
    with pytest.raises(ConfigError):
        Q.validate_entity({})
    with pytest.raises(ConfigError):
        Q.validate_entity({"ip": "1.2.3.4"})
    with pytest.raises(ConfigError):
        Q.validate_entity({"user": "bad\nname"})


# -- over the wire ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return "file://" + str(tmp_path_factory.mktemp("quota-root"))


@pytest.fixture(scope="module")
def brokers(root):
    """Two brokers sharing one root."""
    bs = [BrokerThread(Storage(root), ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500,
                                                    **QUOTA_OPTS)).start() for _ in range(2)]
    create_topic(Storage(root), "qt", 1)
    yield bs
    for b in bs:
        b.stop()


def _in_effect(brokers, client: str, key: str = Q.PRODUCER_BYTE_RATE) -> None:
    """Wait until every broker applies ``client``'s quota: a broker other than the one that
    stored it learns it from its refresher, within the documents' freshness bound."""
    deadline = time.monotonic() + 10
    for b in brokers:
        while b.server.quotas.config.lookup(key, Q.ANONYMOUS, client) is None:
            assert time.monotonic() < deadline, f"broker {b.bootstrap} never applied the quota"
            time.sleep(0.05)


def test_alter_and_describe_client_quotas(brokers):
    w = Wire(brokers[0].bootstrap)
    u = f"u-{uuid.uuid4().hex[:6]}"
    assert _alter(w, {"user": u, "client-id": "c1"}, {Q.PRODUCER_BYTE_RATE: 1000,
                                                      Q.REQUEST_PERCENTAGE: 50}) == (0, None)
    assert _alter(w, {"user": u}, {Q.CONSUMER_BYTE_RATE: 2000}) == (0, None)
    assert _alter(w, {"user": u, "client-id": None}, {Q.CONSUMER_BYTE_RATE: 3000}) == (0, None)
    # validate_only checks and stores nothing
    assert _alter(w, {"user": u + "x"}, {Q.CONSUMER_BYTE_RATE: 5}, validate_only=True) == (0, None)

    code, found = _describe(w, [("user", 0, u)])
    assert code == 0
    assert found == {
        (("client-id", "c1"), ("user", u)): {Q.PRODUCER_BYTE_RATE: 1000.0, Q.REQUEST_PERCENTAGE: 50.0},
        (("user", u),): {Q.CONSUMER_BYTE_RATE: 2000.0},
        (("client-id", None), ("user", u)): {Q.CONSUMER_BYTE_RATE: 3000.0},
    }
    assert list(_describe(w, [("user", 0, u)], strict=True)[1]) == [(("user", u),)]
    assert list(_describe(w, [("user", 0, u), ("client-id", 1, None)])[1]) == [
        (("client-id", None), ("user", u))]
    assert list(_describe(w, [("user", 0, u), ("client-id", 2, None)])[1]) == [
        (("client-id", "c1"), ("user", u)), (("client-id", None), ("user", u))]
    assert _describe(w, [("user", 0, u + "x")]) == (0, {})
    # v0 too, and the other broker of the root sees the same document
    assert _describe(Wire(brokers[1].bootstrap), [("user", 0, u)], strict=True,
                     req=describe_req_v0)[1] == {(("user", u),): {Q.CONSUMER_BYTE_RATE: 2000.0}}

    # removal: an entity left without values disappears
    assert _alter(w, {"user": u}, {Q.CONSUMER_BYTE_RATE: None}) == (0, None)
    assert list(_describe(w, [("user", 0, u)], strict=True)[1]) == []


@pytest.mark.parametrize("entity, ops, why", [
    ({"user": "a"}, {Q.PRODUCER_BYTE_RATE: 0}, "must be > 0"),
    ({"user": "a"}, {Q.PRODUCER_BYTE_RATE: -5}, "must be > 0"),
    ({"user": "a"}, {Q.PRODUCER_BYTE_RATE: 10.5}, "whole number"),
    ({"user": "a"}, {"bogus_rate": 5}, "unknown quota"),
    ({"ip": "1.2.3.4"}, {Q.PRODUCER_BYTE_RATE: 5}, "unknown quota entity type"),
    ({}, {Q.PRODUCER_BYTE_RATE: 5}, "needs a user"),
])
def test_malformed_alter_is_invalid_request(brokers, entity, ops, why):
    code, message = _alter(Wire(brokers[0].bootstrap), entity, ops)
    assert code == INVALID_REQUEST and why in message


@pytest.mark.parametrize("components", [
    [("ip", 2, None)],
    [("user", 0, None)],
    [("user", 7, None)],
    [("user", 2, None), ("user", 1, None)],
])
def test_malformed_describe_is_invalid_request(brokers, components):
    assert _describe(Wire(brokers[0].bootstrap), components)[0] == INVALID_REQUEST


def test_produce_over_quota_is_throttled_on_every_broker(brokers):
    """KIP-219 clients (Produce v9) get the response at once with throttle_time_ms and the
    channel muted: their next request waits. Older ones (v3) get the response held back."""
    import datetime

    from kio.schema.produce.v3 import request as prod_v3
    from kio.schema.produce.v9 import request as prod_v9

    client = f"heavy-{uuid.uuid4().hex[:6]}"
    assert _alter(Wire(brokers[0].bootstrap), {"client-id": client},
                  {Q.PRODUCER_BYTE_RATE: 20_000}) == (0, None)
    _in_effect(brokers, client)
    big = batch([b"x" * 10_000] * 3)   # 30 KB, over what 20 KB/s allows over a 1 s span

    def send(w, req_mod):
        req = req_mod.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
            req_mod.TopicProduceData(name="qt", partition_data=(
                req_mod.PartitionProduceData(index=0, records=big),)),), transactional_id=None)
        started = time.monotonic()
        r = _call(w, req, client)
        assert int(r.responses[0].partition_responses[0].error_code) == 0
        return r.throttle_time.total_seconds(), time.monotonic() - started

    for b in brokers:   # the quota stored through broker 0 applies on both
        w = Wire(b.bootstrap)
        throttle, elapsed = send(w, prod_v9)
        assert throttle > 0.1
        assert elapsed < throttle                 # answered at once...
        _, elapsed = send(w, prod_v9)
        assert elapsed >= throttle * 0.8          # ...and the channel stayed muted
    time.sleep(3)  # let the rate fall back
    w = Wire(brokers[0].bootstrap)
    throttle = 0.0
    while throttle == 0.0:
        throttle, elapsed = send(w, prod_v3)
    assert elapsed >= throttle * 0.8              # before KIP-219: the response is held back
    # another client id is not affected
    assert produce(Wire(brokers[0].bootstrap), "qt", 0, batch([b"small"]))[0] == 0


def test_well_behaved_client_sees_no_throttle(brokers):
    client = f"light-{uuid.uuid4().hex[:6]}"
    w = Wire(brokers[0].bootstrap)
    assert _alter(w, {"client-id": client}, {Q.PRODUCER_BYTE_RATE: 1_000_000,
                                             Q.CONSUMER_BYTE_RATE: 1_000_000}) == (0, None)
    from kio.schema.produce.v9 import request as prod_req
    from kio.schema.fetch.v12 import request as fetch_req
    import datetime

    for _ in range(5):
        r = _call(w, prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
            prod_req.TopicProduceData(name="qt", partition_data=(
                prod_req.PartitionProduceData(index=0, records=batch([b"v" * 100])),)),)), client)
        assert r.throttle_time.total_seconds() == 0
        f = _call(w, fetch_req.FetchRequest(
            max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, isolation_level=0,
            topics=(fetch_req.FetchTopic(topic="qt", partitions=(fetch_req.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1000),)),),
            forgotten_topics_data=()), client)
        assert f.throttle_time.total_seconds() == 0


def test_request_percentage_counts_handler_time(brokers):
    client = f"busy-{uuid.uuid4().hex[:6]}"
    w = Wire(brokers[0].bootstrap)
    # 0.01 % of a thread is 0.1 ms per second: any real request exceeds it
    assert _alter(w, {"client-id": client}, {Q.REQUEST_PERCENTAGE: 0.01}) == (0, None)
    from kio.schema.metadata.v9 import request as meta_req
    throttles = []
    for _ in range(3):
        r = _call(w, meta_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                              include_cluster_authorized_operations=False,
                                              include_topic_authorized_operations=False), client)
        throttles.append(r.throttle_time.total_seconds())
    assert max(throttles) > 0
    assert max(throttles) <= QUOTA_OPTS["quota_window_s"] + 0.01   # capped at one window


# -- real clients: measured rate against the quota ----------------------------------------

def _throttle_seen(stats: list) -> int:
    """The largest throttle time (ms) librdkafka's statistics report for any broker."""
    return max((b.get("throttle", {}).get("max", 0) for s in stats
                for b in json.loads(s).get("brokers", {}).values()), default=0)


def test_real_producer_and_consumer_are_throttled_by_their_quota(brokers, root):
    """A real producer and consumer over their byte-rate quota are told to back off
    (librdkafka's own throttle statistics). Their rates against the quota are printed, not
    asserted: `bench/quotas.py` measures them (a timed assertion belongs in a bench)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    client = f"real-{uuid.uuid4().hex[:6]}"
    quota = 500_000  # bytes per second
    w = Wire(brokers[0].bootstrap)
    assert _alter(w, {"client-id": client}, {Q.PRODUCER_BYTE_RATE: quota,
                                             Q.CONSUMER_BYTE_RATE: quota}) == (0, None)
    topic = f"rq-{uuid.uuid4().hex[:6]}"
    create_topic(Storage(root), topic, 1)
    producer_stats: list = []
    consumer_stats: list = []
    # One request in flight: the pipelined requests of one throttle period would otherwise
    # add up to max.in.flight batches to the burst this short run measures.
    p = Producer({"bootstrap.servers": brokers[0].bootstrap, "client.id": client,
                  "linger.ms": 5, "batch.size": 64_000, "compression.type": "none",
                  "queue.buffering.max.kbytes": 256,
                  "max.in.flight.requests.per.connection": 1,
                  "statistics.interval.ms": 200, "stats_cb": producer_stats.append})
    payload = b"p" * 10_000
    delivered = [0]

    def on_delivery(err, msg):
        if err is None:
            delivered[0] += len(msg.value())

    started = time.monotonic()
    while time.monotonic() - started < 3.0:
        try:
            p.produce(topic, payload, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    produce_rate = delivered[0] / (time.monotonic() - started)
    p.purge()
    p.flush(10)
    sent = delivered[0]

    c = Consumer({"bootstrap.servers": brokers[0].bootstrap, "client.id": client,
                  "group.id": "unused", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 100_000,
                  "statistics.interval.ms": 200, "stats_cb": consumer_stats.append})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.monotonic()
    while time.monotonic() - started < 3.0 and got < sent:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += len(m.value())
    consume_rate = got / (time.monotonic() - started)
    c.close()
    print(f"producer {produce_rate / quota:.2f}x quota, consumer {consume_rate / quota:.2f}x quota")
    assert got > 0
    assert _throttle_seen(producer_stats) > 0
    assert _throttle_seen(consumer_stats) > 0


def test_quota_apis_need_cluster_config_permissions_with_the_authorizer(tmp_path):
    storage = Storage(f"file://{tmp_path}/acl-root")
    with BrokerThread(storage, ServeOptions(port=0, authorizer=True)) as denied:
        w = Wire(denied.bootstrap)
        assert _describe(w, [])[0] == 31                 # CLUSTER_AUTHORIZATION_FAILED
        assert _alter(w, {"user": "a"}, {Q.PRODUCER_BYTE_RATE: 10})[0] == 31
    assert ClusterDocument(storage, "quotas").refresh() == {}
    with BrokerThread(storage, ServeOptions(port=0, authorizer=True,
                                            super_users=("User:ANONYMOUS",))) as admin:
        w = Wire(admin.bootstrap)
        assert _alter(w, {"user": "a"}, {Q.PRODUCER_BYTE_RATE: 10}) == (0, None)
        assert _describe(w, [])[1] == {(("user", "a"),): {Q.PRODUCER_BYTE_RATE: 10.0}}


def test_throttled_fetch_is_answered_empty_and_capped_to_the_quota(brokers, root):
    import datetime

    from kio.schema.fetch.v12 import request as fetch_req

    topic = f"qf-{uuid.uuid4().hex[:6]}"
    create_topic(Storage(root), topic, 1)
    w = Wire(brokers[0].bootstrap)
    for _ in range(20):
        assert produce(w, topic, 0, batch([b"f" * 2000]))[0] == 0
    client = f"reader-{uuid.uuid4().hex[:6]}"
    assert _alter(w, {"client-id": client}, {Q.CONSUMER_BYTE_RATE: 10_000}) == (0, None)

    def fetch(offset):
        r = _call(w, fetch_req.FetchRequest(
            max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, isolation_level=0,
            max_bytes=1 << 20, topics=(fetch_req.FetchTopic(topic=topic, partitions=(
                fetch_req.FetchPartition(partition=0, fetch_offset=offset,
                                         partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()), client)
        records = r.responses[0].partitions[0].records if r.responses else None
        return r.throttle_time.total_seconds(), records

    throttle, records = fetch(0)
    assert throttle == 0
    # max_bytes capped to what the quota allows over the measured span (10 KB), not 1 MB
    assert 2000 < len(records) <= 10_000 + 2100
    throttle, records = fetch(0)
    assert throttle > 0 and records is None        # throttled: answered without data
    for _ in range(10):   # served again once the rate is back under the quota (no livelock)
        time.sleep(throttle)
        throttle, records = fetch(0)
        if records:
            break
    assert records and throttle == 0


def test_throttled_idempotent_producer_keeps_order(brokers, root):
    """Pipelined requests of a muted channel are handled in arrival order: an idempotent
    producer with 5 requests in flight, throttled throughout, gets no sequence errors and
    its records land in order."""
    from confluent_kafka import Producer

    from tests.helpers.kafka_clients import confluent_consume

    client = f"ordered-{uuid.uuid4().hex[:6]}"
    assert _alter(Wire(brokers[0].bootstrap), {"client-id": client},
                  {Q.PRODUCER_BYTE_RATE: 100_000}) == (0, None)
    _in_effect(brokers, client)   # the partition's leader may be the other broker
    topic = f"qo-{uuid.uuid4().hex[:6]}"
    create_topic(Storage(root), topic, 1)
    p = Producer({"bootstrap.servers": brokers[0].bootstrap, "client.id": client,
                  "enable.idempotence": True, "linger.ms": 2, "batch.size": 20_000,
                  "max.in.flight.requests.per.connection": 5})
    errors, n = [], 150   # 300 KB: about 2 s at the quota
    started = time.monotonic()
    for i in range(n):
        p.produce(topic, b"%08d" % i + b"." * 2000,
                  on_delivery=lambda err, msg: err is not None and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0
    assert errors == []
    assert time.monotonic() - started > 1.0   # it was throttled
    got = confluent_consume(brokers[0].bootstrap, topic, 1, n)
    assert [v[:8] for _, _, _, v in got] == [b"%08d" % i for i in range(n)]
