"""Fetch v13-17 (topic ids, KIP-516; ReplicaState, KIP-903; NodeEndpoints, KIP-951;
ReplicaDirectoryId, KIP-853) over the raw wire and through real clients' consumers.

The raw tests build kio's request classes of each version; the client tests read
which Fetch version each client negotiated from the broker's own request metrics."""
from __future__ import annotations

import datetime
import importlib
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v12 import request as md_req

from kafkastore.protocol.wire import codec
from kafkastore.protocol.wire import error_codes as E
from kafkastore.protocol.placement import topic_id, topic_id_of
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.protocol.caches.metadata_cache import MetadataCache
from kafkastore.protocol.caches.topic_ids import TopicIdIndex
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic, delete_topic, load_topic
from tests.helpers.wire_requests import batch, produce
from tests.protocol.wire import Wire

VERSIONS = (13, 14, 15, 16, 17)


@pytest.fixture(scope="module")
def metered(module_root):
    """A broker with request metrics (requests per API and version: the negotiated version)."""
    b = BrokerThread(Storage(module_root), ServeOptions(port=0, commit_interval_ms=2, heartbeat_ms=500,
                                                        metrics_listen=("127.0.0.1", 0)))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def wire(metered):
    w = Wire(metered.bootstrap)
    yield w
    w.close()


@pytest.fixture
def topic(storage, request):
    name = "ti-" + request.node.name.replace("[", "-").replace("]", "")[:30] + "-" + uuid.uuid4().hex[:6]
    create_topic(storage, name, 2)
    return name


def _metadata_id(w, topic) -> uuid.UUID:
    resp = w.call(md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(name=topic, topic_id=None),),
                                         allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False))
    return resp.topics[0].topic_id


def fetch_v(w, version, topics, *, session_id=0, session_epoch=-1, isolation=0, forgotten=()):
    """A Fetch of ``version`` (13+): ``topics`` is ``[(topic_id, [(partition, offset), ...])]``."""
    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    req = m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, isolation_level=isolation,
        session_id=session_id, session_epoch=session_epoch,
        topics=tuple(m.FetchTopic(topic_id=tid, partitions=tuple(
            m.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in parts))
            for tid, parts in topics),
        forgotten_topics_data=tuple(m.ForgottenTopic(topic_id=tid, partitions=ps) for tid, ps in forgotten))
    return w.call(req)


def _values(records: bytes) -> list[bytes]:
    from kafkastore.format.record_batch import decode_batch
    from kafkastore.format.segment_scan import iter_batches
    out = []
    for pos, _h in iter_batches(records):
        out += [r.value for r in decode_batch(records, pos)[1]]
    return out


def test_api_versions_advertise_fetch_up_to_kafka_39s_17(metered):
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    w = Wire(metered.bootstrap)
    r = w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    w.close()
    served = {int(k.api_key): int(k.max_version) for k in r.api_keys}
    assert served[1] == 17


@pytest.mark.parametrize("version", VERSIONS)
def test_fetch_by_topic_id(wire, topic, version):
    assert produce(wire, topic, 1, batch([b"a", b"b"]))[0] == 0
    tid = _metadata_id(wire, topic)
    resp = fetch_v(wire, version, [(tid, [(1, 0), (0, 0)])])
    assert int(resp.error_code) == 0 and resp.session_id == 0
    (t,) = resp.responses
    assert t.topic_id == tid
    parts = {p.partition_index: p for p in t.partitions}
    assert int(parts[1].error_code) == 0 and parts[1].high_watermark == 2
    assert _values(parts[1].records) == [b"a", b"b"]
    assert int(parts[0].error_code) == 0 and parts[0].high_watermark == 0 and not parts[0].records
    if version >= 16:
        assert resp.node_endpoints == ()  # no NOT_LEADER_OR_FOLLOWER: every broker serves every partition


@pytest.mark.parametrize("version", [13, 17])
def test_unknown_topic_id_gets_unknown_topic_id_per_partition(wire, topic, version):
    produce(wire, topic, 0, batch([b"x"]))
    tid = _metadata_id(wire, topic)
    made_up = uuid.uuid4()
    resp = fetch_v(wire, version, [(made_up, [(0, 0), (3, 5)]), (tid, [(0, 0)])])
    assert int(resp.error_code) == 0
    by_id = {t.topic_id: t for t in resp.responses}
    bad = by_id[made_up]
    assert [(p.partition_index, int(p.error_code), p.high_watermark) for p in bad.partitions] == \
        [(0, E.UNKNOWN_TOPIC_ID, -1), (3, E.UNKNOWN_TOPIC_ID, -1)]
    assert _values(by_id[tid].partitions[0].records) == [b"x"]  # the known topic is served alongside


def test_null_topic_id_is_unknown(wire):
    resp = fetch_v(wire, 17, [(None, [(0, 0)])])
    assert [int(p.error_code) for p in resp.responses[0].partitions] == [E.UNKNOWN_TOPIC_ID]


def test_recreated_topics_old_id_is_unknown(metered, wire, storage, topic):
    old = _metadata_id(wire, topic)
    delete_topic(storage, topic)
    create_topic(storage, topic, 2)
    metered.server.meta.forget_topic(topic)  # as the broker's own DeleteTopics / CreateTopics do
    new = _metadata_id(wire, topic)
    assert new != old
    resp = fetch_v(wire, 17, [(old, [(0, 0)]), (new, [(0, 0)])])
    codes = {t.topic_id: int(t.partitions[0].error_code) for t in resp.responses}
    assert codes == {old: E.UNKNOWN_TOPIC_ID, new: E.NONE}


def test_id_known_only_to_another_broker_is_found(module_root, storage, topic):
    """A client may learn ids from one broker's Metadata and fetch from another that never loaded
    the topic: the miss triggers one rescan, and the id resolves."""
    other = BrokerThread(Storage(module_root), ServeOptions(port=0, commit_interval_ms=2)).start()
    try:
        w = Wire(other.bootstrap)
        produce(w, topic, 0, batch([b"q"]))  # loads the topic: forget it again for this test
        other.server.meta.topic_ids._ids.clear()
        tid = topic_id_of(topic, load_topic(storage, topic))
        resp = fetch_v(w, 17, [(tid, [(0, 0)])])
        assert _values(resp.responses[0].partitions[0].records) == [b"q"]
        w.close()
    finally:
        other.stop()


def test_incremental_fetch_without_a_session_is_session_not_found(wire, topic):
    produce(wire, topic, 0, batch([b"s"]))
    tid = _metadata_id(wire, topic)
    # Asking for a new session (epoch 0): declined (session 0), data served as a full fetch.
    first = fetch_v(wire, 17, [(tid, [(0, 0)])], session_id=0, session_epoch=0)
    assert int(first.error_code) == 0 and first.session_id == 0
    assert _values(first.responses[0].partitions[0].records) == [b"s"]
    # An incremental fetch (epoch > 0) of a session that was never created: Kafka's answer.
    inc = fetch_v(wire, 17, [], session_id=12345, session_epoch=1, forgotten=[(tid, (0,))])
    assert int(inc.error_code) == E.FETCH_SESSION_ID_NOT_FOUND and inc.responses == ()


def test_consumer_replica_state_and_directory_id_are_accepted(wire, topic):
    from kio.schema.fetch.v17 import request as m
    produce(wire, topic, 0, batch([b"r"]))
    tid = _metadata_id(wire, topic)
    req = m.FetchRequest(
        replica_state=m.ReplicaState(replica_id=-1, replica_epoch=-1), cluster_id=None,
        max_wait=datetime.timedelta(0), min_bytes=1, isolation_level=1, session_id=0, session_epoch=-1,
        topics=(m.FetchTopic(topic_id=tid, partitions=(m.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=0,
            last_fetched_epoch=-1, replica_directory_id=uuid.uuid4()),)),),
        forgotten_topics_data=(), rack_id="r1")
    p = wire.call(req).responses[0].partitions[0]
    assert int(p.error_code) == 0 and _values(p.records) == [b"r"] and p.last_stable_offset == 1


def test_read_committed_by_topic_id_stops_at_lso_and_lists_aborted(wire, storage, topic):
    from kafkastore.write.log_writer import LogWriter as Broker
    b = Broker(storage, producer_id=4343)
    b.send(topic, b"plain", partition=0)
    b.flush()
    b.begin_transaction()
    b.send(topic, b"aborted", partition=0)
    b.abort_transaction()
    b.begin_transaction()
    b.send(topic, b"open", partition=0)
    b.flush()
    tid = _metadata_id(wire, topic)
    p = fetch_v(wire, 17, [(tid, [(0, 0)])], isolation=1).responses[0].partitions[0]
    assert p.last_stable_offset == 3 and p.high_watermark == 4
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(4343, 1)]
    assert b"open" not in _values(p.records)


def test_long_poll_by_topic_id_wakes_on_produce(wire, metered, topic):
    import threading
    import time
    from kio.schema.fetch.v17 import request as m
    tid = _metadata_id(wire, topic)
    poller = Wire(metered.bootstrap)
    result = {}

    def poll():
        result["r"] = poller.call(m.FetchRequest(
            max_wait=datetime.timedelta(seconds=60), min_bytes=1, topics=(m.FetchTopic(
                topic_id=tid, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                           partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()))

    th = threading.Thread(target=poll)
    th.start()
    time.sleep(0.3)
    assert "r" not in result  # parked: nothing to return yet
    produce(wire, topic, 0, batch([b"late"]))
    th.join(30)
    assert not th.is_alive()
    assert _values(result["r"].responses[0].partitions[0].records) == [b"late"]
    poller.close()


@pytest.mark.parametrize("version", [13, 17])
def test_malformed_fetch_closes_only_that_connection(metered, wire, topic, version):
    tid = _metadata_id(wire, topic)
    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    req = m.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, topics=(
        m.FetchTopic(topic_id=tid, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                                partition_max_bytes=100),)),),
        forgotten_topics_data=())
    frame = codec.encode_request(req, 9)
    (size,) = struct.unpack(">i", frame[:4])
    for cut in (size - 3, size - 20, 30):  # truncated inside the topics, the uuid, the header
        body = frame[4:4 + cut]
        bad = Wire(metered.bootstrap, timeout=5)
        bad.send_raw(struct.pack(">i", len(body)) + body)
        assert bad.closed() or int(codec.decode_response(bad.recv_frame(), 1, version)[1].error_code) != 0
        bad.close()
    # A topic array claiming a billion entries.
    head = frame[4:]
    bad = Wire(metered.bootstrap, timeout=5)
    bad.send_raw(codec.frame(head[:-60] + b"\x7f\xff\xff\xff"))
    assert bad.closed() or bad.recv_frame() is not None
    bad.close()
    # The broker still serves everyone else.
    assert int(fetch_v(wire, version, [(tid, [(0, 0)])]).error_code) == 0


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(version=st.sampled_from(VERSIONS), flips=st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 40))
def test_damaged_fetch_frames_get_an_answer_or_a_close_never_a_handler_crash(metered, version, flips,
                                                                             cut, caplog):
    """Bytes of a valid Fetch flipped or cut off: the broker answers (a decodable response) or
    closes that connection at decoding; no handler ever fails on what decoded."""
    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    req = m.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, isolation_level=1, topics=(
        m.FetchTopic(topic_id=uuid.UUID(int=7), partitions=(
            m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=100),
            m.FetchPartition(partition=1, fetch_offset=3, partition_max_bytes=100))),),
        forgotten_topics_data=(m.ForgottenTopic(topic_id=uuid.UUID(int=8), partitions=(1,)),))
    body = bytearray(codec.encode_request(req, 5)[4:])
    for pos, xor in flips:
        i = 8 + pos % (len(body) - 8)  # after api key, version and correlation id
        body[i] ^= xor
    body = bytes(body[:len(body) - cut])
    caplog.clear()
    w = Wire(metered.bootstrap, timeout=5)
    try:
        w.send_raw(struct.pack(">i", len(body)) + body)
        frame = w.recv_frame()
        if frame is not None:
            cid, resp = codec.decode_response(frame, 1, version)
            assert cid == 5
    except (ConnectionError, OSError):
        pass
    finally:
        w.close()
    assert not [r for r in caplog.records if "handler failed" in r.getMessage()]
    ok = Wire(metered.bootstrap)
    assert int(fetch_v(ok, version, []).error_code) == 0
    ok.close()


def test_id_index_resolves_in_one_lookup_and_rescans_at_most_once_per_interval(storage):
    """Known ids: a dict lookup, no listing of topics. Unknown ids: one shared rescan per interval
    however many requests carry them (made-up ids cannot make every request scan the root)."""
    name = "ti-index-" + uuid.uuid4().hex[:6]
    create_topic(storage, name, 1)
    now = [0.0]
    meta = MetadataCache(storage, ttl_s=60)
    index = TopicIdIndex(meta, rescan_interval_s=1.0, clock=lambda: now[0])
    meta.topic_ids = index
    tid = topic_id_of(name, meta.topic(name))   # loading the topic remembers its id
    listed = []
    real = meta.topic_names
    meta.topic_names = lambda: listed.append(1) or real()
    assert index.resolve(tid)[0] == name and index.scans == 0 and not listed
    for _ in range(50):
        assert index.resolve(uuid.uuid4()) is None
    assert index.scans == 1
    now[0] += 1.5
    assert index.resolve(uuid.uuid4()) is None and index.scans == 2
    assert index.resolve_cached(tid)[0] == name


@pytest.mark.parametrize("version", [10, 11])
def test_produce_v10_v11_kafka_39s_highest(wire, topic, version):
    """Produce v10/v11 (KIP-951's CurrentLeader / NodeEndpoints, only for NOT_LEADER_OR_FOLLOWER,
    which a broker serving every partition never answers) append as earlier versions."""
    m = importlib.import_module(f"kio.schema.produce.v{version}.request")
    resp = wire.call(m.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=0, records=batch([b"p%d" % version])),)),)))
    r = resp.responses[0].partition_responses[0]
    assert int(r.error_code) == 0 and r.base_offset == 0 and resp.node_endpoints == ()
    tid = _metadata_id(wire, topic)
    assert _values(fetch_v(wire, 17, [(tid, [(0, 0)])]).responses[0].partitions[0].records) == \
        [b"p%d" % version]


# -- real clients ------------------------------------------------------------------------------

def _fetch_versions(broker, metric="kafkastore_requests_total") -> dict[int, float]:
    """Fetch requests this broker answered (or answered with an error code), per version."""
    reg = broker.server.metrics.registry
    out = {}
    for v in range(0, 18):
        n = reg.get_sample_value(metric, {"api": "Fetch", "version": str(v)})
        if n:
            out[v] = n
    return out


def _fetch_errors(broker) -> float:
    return sum(_fetch_versions(broker, "kafkastore_request_errors_total").values())


def _records_out(broker, topic) -> float:
    return broker.server.metrics.registry.get_sample_value("kafkastore_records_out_total",
                                                           {"topic": topic}) or 0


def _fill(w, topic, n=5):
    for i in range(n):
        assert produce(w, topic, i % 2, batch([b"v%d" % i]))[0] == 0


def _new_versions(before, after):
    return {v for v, n in after.items() if n > before.get(v, 0)}


def test_confluent_consumer_fetches_by_topic_id(metered, wire, topic):
    """librdkafka negotiates the highest Fetch version both sides serve (v16 in librdkafka 2.4+,
    topic ids from Metadata v12) and reads everything."""
    from confluent_kafka import Consumer, TopicPartition, libversion
    _fill(wire, topic)
    before, errors = _fetch_versions(metered), _fetch_errors(metered)
    logs = []
    c = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": "ti", "enable.auto.commit": False,
                  "debug": "protocol", "logger": _Collect(logs)})
    c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got = []
    for _ in range(60):
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
        if len(got) == 5:
            break
    c.close()
    assert sorted(got) == [b"v%d" % i for i in range(5)]
    versions = _new_versions(before, _fetch_versions(metered))
    sent = {int(line.split("Sent FetchRequest (v")[1].split(",")[0]) for line in logs
            if "Sent FetchRequest (v" in line}
    assert sent == versions and max(versions) >= 13, (libversion(), sent, versions)
    assert _fetch_errors(metered) == errors
    assert _records_out(metered, topic) >= 5  # v13+ responses are counted by topic name


def test_kafka_python_consumer_negotiates_its_highest_fetch(metered, wire, topic):
    """kafka-python caps Fetch at v12 (its fetcher names topics, no ids yet) and asks for fetch
    sessions (epoch 0): declined with session 0, it keeps sending full fetches."""
    from kafka import KafkaConsumer, TopicPartition
    _fill(wire, topic)
    before, errors = _fetch_versions(metered), _fetch_errors(metered)
    c = KafkaConsumer(bootstrap_servers=metered.bootstrap, enable_auto_commit=False, group_id=None,
                      consumer_timeout_ms=10_000)
    c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    c.seek_to_beginning()
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 5:
            break
    c.close()
    assert sorted(got) == [b"v%d" % i for i in range(5)]
    assert _new_versions(before, _fetch_versions(metered)) == {12}
    assert _fetch_errors(metered) == errors  # its session requests were declined, not refused


def test_aiokafka_consumer_negotiates_its_highest_fetch(metered, wire, topic):
    """aiokafka's fetcher serves Fetch v4-v11 and picks the highest the broker advertises."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    _fill(wire, topic)
    before, errors = _fetch_versions(metered), _fetch_errors(metered)

    async def consume():
        c = AIOKafkaConsumer(bootstrap_servers=metered.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            await c.seek_to_beginning()
            got = []
            while len(got) < 5:
                batch_ = await asyncio.wait_for(c.getmany(timeout_ms=500), 30)
                got += [m.value for msgs in batch_.values() for m in msgs]
            return got
        finally:
            await c.stop()

    got = asyncio.run(consume())
    assert sorted(got) == [b"v%d" % i for i in range(5)]
    assert _new_versions(before, _fetch_versions(metered)) == {11}
    assert _fetch_errors(metered) == errors


class _Collect:
    """A ``logging.Logger`` stand-in for confluent-kafka's ``logger`` option."""

    def __init__(self, lines):
        self.lines = lines

    def log(self, _level, fmt, *args):
        self.lines.append(fmt % args if args else fmt)


def test_topic_ids_are_random_not_derived_from_name_and_time(tmp_path):
    """A user without ACLs could confirm a hidden topic and its creation time to the
    millisecond by guessing derived ids with Fetch v13: ids are random, stored with the
    topic, and the same on every broker."""
    storage = Storage(f"file://{tmp_path}/root")
    created = [create_topic(storage, n, 1, now_ms=1_700_000_000_000) for n in ("hidden-a", "hidden-b")]
    for meta in created:
        tid = topic_id_of(meta.name, load_topic(storage, meta.name))
        assert tid != topic_id(meta.name, meta.created_ms)
        assert tid.version == 4
        assert tid == topic_id_of(meta.name, load_topic(Storage(f"file://{tmp_path}/root"), meta.name))
    ids = {topic_id_of(m.name, load_topic(storage, m.name)) for m in created}
    assert len(ids) == 2
