"""The broker over raw protocol requests: ApiVersions truth, produce/fetch semantics, idempotence,
group commit, long poll, offsets, topic configs, and bad input (garbage must never crash it)."""
from __future__ import annotations

import datetime
import socket
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v8 import request as lo_req
from kio.schema.metadata.v12 import request as md_req
from kio.schema.produce.v9 import request as prod_req

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.protocol.wire import codec
from kafkastore.protocol.wire import error_codes as E
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.format.record_batch import decode_batch, parse_header
from kafkastore.format.segment_scan import iter_batches
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

from .wire import Wire
from tests.helpers.wire_requests import batch, fetch, produce


def records_of(data):
    out = []
    for pos, _h in iter_batches(data):
        out += decode_batch(data, pos)[1]
    return out


def list_offset(w, topic, partition, ts, isolation=0):
    req = lo_req.ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=(
        lo_req.ListOffsetsTopic(name=topic, partitions=(
            lo_req.ListOffsetsPartition(partition_index=partition, timestamp=ts),)),))
    p = w.call(req).topics[0].partitions[0]
    return int(p.error_code), p.offset, p.timestamp


@pytest.fixture
def wire(broker):
    w = Wire(broker.bootstrap)
    yield w
    w.close()


@pytest.fixture
def topic(storage, request):
    name = "t-" + request.node.name.replace("[", "-").replace("]", "")[:40]
    create_topic(storage, name, 2)
    return name


def test_api_versions_tell_the_truth(broker, wire):
    resp = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert int(resp.error_code) == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == {k: (lo, hi) for k, lo, hi in broker.server.registry.api_versions()}
    assert got[0][1] == 11 and got[1][1] == 17 and got[11] == (0, 9)  # JoinGroup (api_groups)
    assert got[10] == (0, 6)  # FindCoordinator: Kafka 3.9's, v6 with the share key type


def test_unknown_api_versions_version_gets_v0_unsupported(wire):
    # ApiVersions v99: Kafka answers v0 with UNSUPPORTED_VERSION and its list.
    wire.send_raw(codec.frame(struct.pack(">hhi", 18, 99, 7) + b"\xff\xff"))
    frame = wire.recv_frame()
    cid, resp = codec.decode_response(frame, 18, 0)
    assert cid == 7 and int(resp.error_code) == E.UNSUPPORTED_VERSION and resp.api_keys


def test_metadata_lists_topic_and_leader(broker, wire, topic):
    resp = wire.call(md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(name=topic, topic_id=None),),
                                            allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))
    assert [b.node_id for b in resp.brokers] == [broker.server.node_id]
    t = resp.topics[0]
    assert int(t.error_code) == 0 and len(t.partitions) == 2
    assert {p.leader_id for p in t.partitions} == {broker.server.node_id}


def test_produce_assigns_offsets_and_stores_bytes_as_received(wire, topic, storage):
    data = batch([b"a", b"b", b"c"], compression=4)
    assert produce(wire, topic, 0, data) == (0, 0)
    assert produce(wire, topic, 0, batch([b"d"])) == (0, 3)
    m = ManifestStore(storage, topic, 0).latest()
    assert m.high_watermark == 4
    seg = m.segments[0]
    log = storage.get(seg.paths(topic, 0)[".log"])
    # Byte for byte what the producer sent, except the 8-byte base offset.
    assert log[8:len(data)] == data[8:]
    p = fetch(wire, topic, 0, 0)
    assert int(p.error_code) == 0 and p.high_watermark == 4
    assert [r.value for r in records_of(p.records)] == [b"a", b"b", b"c", b"d"]
    assert [r.offset for r in records_of(fetch(wire, topic, 0, 3).records)][-1] == 3


def test_bad_crc_and_magic_are_refused(wire, topic, storage):
    data = bytearray(batch([b"x"]))
    data[-1] ^= 0xFF
    assert produce(wire, topic, 0, bytes(data))[0] == E.CORRUPT_MESSAGE
    old = bytearray(batch([b"x"]))
    old[16] = 1
    assert produce(wire, topic, 0, bytes(old))[0] == E.UNSUPPORTED_FOR_MESSAGE_FORMAT
    two = batch([b"x"]) + batch([b"y"])
    assert produce(wire, topic, 0, two)[0] == E.INVALID_RECORD
    assert produce(wire, "no-such-topic", 0, batch([b"x"]))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(wire, topic, 7, batch([b"x"]))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert ManifestStore(storage, topic, 0).latest() is None  # nothing partial was written


def test_idempotent_retry_gets_original_offset_also_after_restart(broker, wire, topic, storage,
                                                                   module_root):
    init = wire.call(InitProducerIdRequest(transactional_id=None,
                                           transaction_timeout=datetime.timedelta(seconds=60),
                                           producer_id=-1, producer_epoch=-1))
    pid, epoch = init.producer_id, init.producer_epoch
    assert int(init.error_code) == 0 and pid > 0 and epoch == 0
    first = batch([b"1", b"2"], pid=pid, epoch=epoch, seq=0)
    assert produce(wire, topic, 1, first) == (0, 0)
    assert produce(wire, topic, 1, batch([b"3"], pid=pid, epoch=epoch, seq=2)) == (0, 2)
    assert produce(wire, topic, 1, first) == (0, 0)          # a retry: original offset
    assert produce(wire, topic, 1, batch([b"9"], pid=pid, epoch=epoch, seq=9))[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A second broker on the same root (as after a restart) knows the producer from the manifest.
    with BrokerThread(Storage(module_root), ServeOptions(port=0, commit_interval_ms=1)) as b2:
        w2 = Wire(b2.bootstrap)
        assert produce(w2, topic, 1, first) == (0, 0)
        assert produce(w2, topic, 1, batch([b"4"], pid=pid, epoch=epoch, seq=3)) == (0, 3)
        w2.close()
    assert produce(wire, topic, 1, batch([b"x"], pid=pid, epoch=epoch, seq=4)) == (0, 4)
    bumped = wire.call(InitProducerIdRequest(transactional_id=None,
                                             transaction_timeout=datetime.timedelta(seconds=60),
                                             producer_id=pid, producer_epoch=epoch))
    assert bumped.producer_id == pid and bumped.producer_epoch == epoch + 1
    assert produce(wire, topic, 1, batch([b"5"], pid=pid, epoch=epoch + 1, seq=0))[0] == 0
    assert produce(wire, topic, 1, batch([b"6"], pid=pid, epoch=epoch, seq=6))[0] == E.INVALID_PRODUCER_EPOCH
    values = [r.value for r in records_of(fetch(wire, topic, 1, 0).records)]
    assert values == [b"1", b"2", b"3", b"4", b"x", b"5"]  # nothing doubled


def test_producer_ids_are_unique_across_brokers(broker, wire, module_root):
    with BrokerThread(Storage(module_root), ServeOptions(port=0)) as b2:
        w2 = Wire(b2.bootstrap)
        ids = []
        for w in (wire, w2, wire, w2):
            r = w.call(InitProducerIdRequest(transactional_id=None,
                                             transaction_timeout=datetime.timedelta(seconds=60),
                                             producer_id=-1, producer_epoch=-1))
            ids.append(r.producer_id)
        w2.close()
    assert len(set(ids)) == 4


def test_pipelined_appends_share_one_commit_in_order(broker, topic, storage):
    w = Wire(broker.bootstrap)
    before = broker.server.appender.commits
    # Pipeline 20 requests on one connection without reading responses.
    cids = [w.send(prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        prod_req.TopicProduceData(name=topic, partition_data=(
            prod_req.PartitionProduceData(index=0, records=batch([b"%d" % i])),)),)))
        for i in range(20)]
    offsets = []
    for cid in cids:
        got, resp = codec.decode_response(w.recv_frame(), 0, 9)
        assert got == cid
        offsets.append(resp.responses[0].partition_responses[0].base_offset)
    w.close()
    assert offsets == list(range(20))  # answered in order, offsets in arrival order
    commits = broker.server.appender.commits - before
    assert commits < 20  # group commit: fewer manifest versions than appends
    assert len(ManifestStore(storage, topic, 0).versions()) == commits


def test_acks_zero_gets_no_response(wire, topic):
    produce(wire, topic, 0, batch([b"fire"]), acks=0)
    # The next request's response comes first: there was no response to acks=0.
    deadline = time.time() + 5
    while fetch(wire, topic, 0, 0).high_watermark < 1 and time.time() < deadline:
        time.sleep(0.05)
    assert fetch(wire, topic, 0, 0).high_watermark == 1


def test_long_poll_waits_for_data(broker, topic):
    w, w2 = Wire(broker.bootstrap), Wire(broker.bootstrap)
    result = {}

    def poll():
        result["p"] = fetch(w, topic, 0, 0, max_wait_ms=120_000, min_bytes=1)

    th = threading.Thread(target=poll)
    th.start()
    time.sleep(0.3)
    assert "p" not in result  # nothing to return yet: the fetch waits
    produce(w2, topic, 0, batch([b"late"]))
    th.join(60)  # far below max.wait.ms: the append ends the wait
    assert not th.is_alive()
    assert [r.value for r in records_of(result["p"].records)] == [b"late"]
    empty = fetch(w, topic, 0, 1, max_wait_ms=200, min_bytes=1)
    assert empty.records in (b"", None) and int(empty.error_code) == 0
    w.close()
    w2.close()


def test_offset_out_of_range(wire, topic):
    produce(wire, topic, 0, batch([b"a"]))
    assert int(fetch(wire, topic, 0, 5).error_code) == E.OFFSET_OUT_OF_RANGE
    assert int(fetch(wire, topic, 0, 1).error_code) == 0


def test_fetch_limits_and_first_batch_rule(wire, topic):
    for i in range(5):
        produce(wire, topic, 0, batch([b"x" * 300]))
    small = fetch(wire, topic, 0, 0, max_bytes=10)
    assert len(records_of(small.records)) == 1  # the first batch even though larger than the limit
    two = fetch(wire, topic, 0, 1, max_bytes=2 * len(batch([b"x" * 300])))
    assert [r.offset for r in records_of(two.records)] == [1, 2]


def test_list_offsets(wire, topic):
    produce(wire, topic, 0, batch([b"a", b"b"], ts=1_000_000))
    produce(wire, topic, 0, batch([b"c"], ts=2_000_000))
    assert list_offset(wire, topic, 0, -2)[:2] == (0, 0)
    assert list_offset(wire, topic, 0, -1)[:2] == (0, 3)
    assert list_offset(wire, topic, 0, 1_500_000) == (0, 2, 2_000_000)
    assert list_offset(wire, topic, 0, 9_000_000)[1] == -1


def test_read_committed_stops_at_lso_and_lists_aborted(wire, storage, topic):
    b = Broker(storage, producer_id=4242)
    b.send(topic, b"plain", partition=0)
    b.flush()
    b.begin_transaction()
    b.send(topic, b"aborted", partition=0)
    b.abort_transaction()
    b.begin_transaction()
    b.send(topic, b"open", partition=0)
    b.flush()  # the transaction stays open: LSO stops before it
    committed = fetch(wire, topic, 0, 0, isolation=1)
    assert committed.last_stable_offset == 3
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(4242, 1)]
    offsets = [r.offset for r in records_of(committed.records)]
    assert max(offsets) < 3
    uncommitted = fetch(wire, topic, 0, 0, isolation=0)
    assert uncommitted.aborted_transactions is None
    assert [r.value for r in records_of(uncommitted.records)][-1] == b"open"


def test_topic_configs_apply(wire, storage):
    create_topic(storage, "cfg-small", 1, {"max.message.bytes": 200})
    assert produce(wire, "cfg-small", 0, batch([b"x" * 500]))[0] == E.MESSAGE_TOO_LARGE
    create_topic(storage, "cfg-append", 1, {"message.timestamp.type": "LogAppendTime"})
    assert produce(wire, "cfg-append", 0, batch([b"x"], ts=1000))[0] == 0
    data = fetch(wire, "cfg-append", 0, 0).records
    h = parse_header(data)
    assert h.timestamp_type == 1 and h.max_timestamp > 1_600_000_000_000
    create_topic(storage, "cfg-zstd", 1, {"compression.type": "zstd"})
    assert produce(wire, "cfg-zstd", 0, batch([b"y" * 100], compression=1))[0] == 0
    data = fetch(wire, "cfg-zstd", 0, 0).records
    assert int(parse_header(data).compression) == 4
    assert [r.value for r in records_of(data)] == [b"y" * 100]


# -- bad input: never a crash, a hang or a partial write ---------------------------

def test_garbage_closes_only_that_connection(broker, topic):
    for junk in (b"\x7f\xff\xff\xff", struct.pack(">i", 3) + b"abc",
                 codec.frame(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00"),   # unknown API key
                 codec.frame(struct.pack(">hhi", 0, 99, 1) + b"\x00\x00"),    # unknown version
                 codec.frame(struct.pack(">hhi", 3, 12, 1) + b"\x00\x00\x00\xff\xff")):  # bad body
        w = Wire(broker.bootstrap, timeout=5)
        w.send_raw(junk)
        assert w.closed()
        w.close()
    w = Wire(broker.bootstrap)
    assert int(w.call(ApiVersionsRequest(client_software_name="t",
                                         client_software_version="1")).error_code) == 0
    w.close()


def test_oversized_request_is_refused_before_reading_it(module_root):
    opts = ServeOptions(port=0, max_request_bytes=1024)
    with BrokerThread(Storage(module_root), opts) as b:
        w = Wire(b.bootstrap, timeout=5)
        w.send_raw(struct.pack(">i", 4096) + b"\x00" * 100)
        assert w.closed()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=st.binary(min_size=0, max_size=200), key=st.sampled_from([0, 1, 2, 3, 18, 22, 19]),
       version=st.integers(-2, 14))
def test_fuzzed_frames_never_kill_the_broker(broker, payload, key, version):
    s = socket.create_connection(tuple(broker.bootstrap.rsplit(":", 1)[0:1]) + (int(broker.bootstrap.rsplit(":", 1)[1]),),
                                 timeout=5)
    try:
        s.sendall(codec.frame(struct.pack(">hhi", key, version, 1) + payload))
        s.settimeout(2)
        try:
            s.recv(1 << 16)
        except (socket.timeout, ConnectionError):
            pass
    finally:
        s.close()
    w = Wire(broker.bootstrap)
    assert int(w.call(ApiVersionsRequest(client_software_name="t",
                                         client_software_version="1")).error_code) == 0
    w.close()


def test_fetch_refuses_batches_that_disagree_with_the_manifest(wire, storage, topic):
    produce(wire, topic, 1, batch([b"a", b"b"]))
    seg = ManifestStore(storage, topic, 1).latest().segments[0]
    path = seg.paths(topic, 1)[".log"]
    log = bytearray(storage.get(path))
    struct.pack_into(">q", log, 0, 5)  # offsets outside the entry's [0, 2): never served
    storage.put(path, bytes(log))
    assert int(fetch(wire, topic, 1, 0).error_code) == E.KAFKA_STORAGE_ERROR


def test_invalid_topic_names_are_unknown(wire):
    assert produce(wire, "bad/name", 0, batch([b"x"]))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert int(fetch(wire, "bad/name", 0, 0).error_code) == E.UNKNOWN_TOPIC_OR_PARTITION


def test_auto_create_topics(module_root):
    opts = ServeOptions(port=0, auto_create_topics=True, default_partitions=3)
    with BrokerThread(Storage(module_root), opts) as b:
        w = Wire(b.bootstrap)
        resp = w.call(md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(name="auto-made", topic_id=None),),
                                             allow_auto_topic_creation=True,
                                             include_topic_authorized_operations=False))
        assert int(resp.topics[0].error_code) == 0 and len(resp.topics[0].partitions) == 3
        resp = w.call(md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(name="not-made", topic_id=None),),
                                             allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        assert int(resp.topics[0].error_code) == E.UNKNOWN_TOPIC_OR_PARTITION
        w.close()


def test_idle_producer_state_expires(broker, wire, topic, storage):
    old = int(time.time() * 1000) - 2 * 86_400_000
    assert produce(wire, topic, 0, batch([b"old"], pid=777, epoch=0, seq=0, ts=old))[0] == 0
    assert 777 in ManifestStore(storage, topic, 0).latest().producers
    assert produce(wire, topic, 0, batch([b"new"], pid=778, epoch=0, seq=0))[0] == 0
    producers = ManifestStore(storage, topic, 0).latest().producers
    assert 777 not in producers and 778 in producers


def test_unknown_commit_outcome_then_retry_is_not_doubled(tmp_path):
    """The manifest put lands but its response is lost and cannot be read back: the producer
    gets REQUEST_TIMED_OUT, Kafka's "possibly persisted" (librdkafka takes KAFKA_STORAGE_ERROR
    as "not persisted", and an idempotent producer may then renumber the records under a new
    epoch and store them twice); its retry is recognised from the manifest, not written twice.
    A failed upload, which commits nothing, is KAFKA_STORAGE_ERROR."""
    from tests.faults import faulty_storage

    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "faulty", 1)
    storage, fs = faulty_storage(root)
    with BrokerThread(storage, ServeOptions(port=0, commit_interval_ms=1)) as b:
        w = Wire(b.bootstrap)
        data = batch([b"once", b"only"], pid=99, epoch=0, seq=0)
        fs.on_write(lambda op, path: fs.fail_reads(match="_manifest/", count=None), match="_manifest/")
        fs.lose_response(match="_manifest/")
        assert produce(w, "faulty", 0, data)[0] == E.REQUEST_TIMED_OUT
        fs.clear()
        assert ManifestStore(Storage(root), "faulty", 0).latest().high_watermark == 2  # it landed
        assert produce(w, "faulty", 0, data) == (0, 0)  # the retry: original offset
        # A failed segment upload: nothing is committed, the retry writes it once.
        second = batch([b"next"], pid=99, epoch=0, seq=2)
        fs.fail_before_write(match=".log")
        assert produce(w, "faulty", 0, second)[0] == E.KAFKA_STORAGE_ERROR
        assert produce(w, "faulty", 0, second) == (0, 2)
        w.close()
    values = [r.value for r in records_of(fetch_all(root, "faulty"))]
    assert values == [b"once", b"only", b"next"]


def test_a_sequence_whose_predecessor_lands_through_another_broker_is_appended(tmp_path,
                                                                               monkeypatch):
    """Any broker may append to a partition: after a leader move a client's batch N may still
    be landing through the old broker when batch N+1 reaches the new one. The new broker
    reads a head without N; answering OUT_OF_ORDER there is fatal for librdkafka (N is
    acknowledged by the time the answer arrives). It decides again on a fresh head."""
    from kafkastore.protocol import appender

    monkeypatch.setattr(appender, "OUT_OF_ORDER_RECHECKS_S", (0.5, 2.0, 5.0))  # a loaded CI box
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "moved", 1)
    opts = ServeOptions(port=0, commit_interval_ms=1)
    with BrokerThread(Storage(root), opts) as old, BrokerThread(Storage(root), opts) as new:
        w_old, w_new = Wire(old.bootstrap), Wire(new.bootstrap)
        first = batch([b"n"], pid=4242, epoch=0, seq=0)
        assert produce(w_old, "moved", 0, first) == (0, 0)
        late = threading.Timer(0.2, lambda: produce(w_old, "moved", 0,
                                                    batch([b"n+1"], pid=4242, epoch=0, seq=1)))
        late.start()   # lands through the old broker while the new one decides on seq 2
        assert produce(w_new, "moved", 0, batch([b"n+2"], pid=4242, epoch=0, seq=2)) == (0, 2)
        late.join()
        w_old.close()
        w_new.close()
    assert [r.value for r in records_of(fetch_all(root, "moved"))] == [b"n", b"n+1", b"n+2"]


def fetch_all(root, topic):
    m = ManifestStore(Storage(root), topic, 0).latest()
    return b"".join(Storage(root).get(s.paths(topic, 0)[".log"]) for s in m.segments)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(pos=st.integers(0, 10_000), xor=st.integers(1, 255), cut=st.booleans())
def test_damaged_batches_are_refused_whole(broker, storage, pos, xor, cut):
    """A byte flipped (or the tail cut) anywhere in a batch: the broker either refuses the batch
    or (a flip outside the CRC: base offset, leader epoch) stores it whole; never a partial write."""
    name = "damaged"
    if broker.server.meta.topic(name) is None:
        create_topic(storage, name, 1)
        broker.server.meta.forget_topic(name)
    data = bytearray(batch([b"v" * 50, b"w" * 50], compression=0))
    pos %= len(data)
    if cut:
        data = data[:pos]
    else:
        data[pos] ^= xor
    w = Wire(broker.bootstrap)
    try:
        hw = ManifestStore(storage, name, 0).latest()
        before = hw.high_watermark if hw else 0
        err, _ = produce(w, name, 0, bytes(data))
        after = ManifestStore(storage, name, 0).latest()
        grown = (after.high_watermark if after else 0) - before
        assert (err == 0 and grown == 2) or (err != 0 and grown == 0)
        if err == 0:
            assert pos < 21 and not cut  # only header bytes outside the CRC may change
    finally:
        w.close()
