"""Produce v0-2 / Fetch v0-3 over raw requests: advertised, answered, sized and refused as Kafka does."""
from __future__ import annotations

import datetime
import struct
import time
import zlib

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.format import legacy_records as L
from kafkastore.format.record_batch import Record
from kafkastore.protocol.wire import codec
from kafkastore.protocol.wire import error_codes as E
from kafkastore.protocol.apis.legacy import UNSUPPORTED_COMPRESSION_TYPE
from kafkastore.topics.admin import create_topic
from tests.helpers.wire_requests import batch, produce

from .wire import Wire


@pytest.fixture
def wire(broker):
    w = Wire(broker.bootstrap)
    yield w
    w.close()


@pytest.fixture
def topic(storage, request):
    name = "lw-" + request.node.name.replace("[", "-").replace("]", "").replace("test_", "")[-40:]
    create_topic(storage, name, 1)
    return name


def old_produce(w, topic, data, version=2, acks=1, partition=0):
    cls = codec.request_class(0, version)
    mod = __import__("sys").modules[cls.__module__]
    req = cls(acks=acks, timeout=datetime.timedelta(seconds=5), topic_data=(mod.TopicProduceData(
        name=topic, partition_data=(mod.PartitionProduceData(index=partition, records=data),)),))
    if acks == 0:
        w.send(req)
        return None
    return w.call(req).responses[0].partition_responses[0]


def old_fetch(w, topic, offset, version, partition_max_bytes=1 << 20, max_bytes=1 << 20, partition=0):
    cls = codec.request_class(1, version)
    mod = __import__("sys").modules[cls.__module__]
    req = codec.make(cls, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=max_bytes, topics=(
        mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes),)),))
    return w.call(req).responses[0].partitions[0]


def recs(n, base=0, size=10):
    return [Record(base + i, 1_000 + i, b"k%d" % i, b"%d" % i * size) for i in range(n)]


def test_api_versions_advertise_the_oldest(broker, wire):
    resp = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got[0][0] == 0 and got[1][0] == 0  # Produce v0+, Fetch v0+, as Kafka 3.9
    assert got[0][1] >= 9 and got[1][1] >= 12


@pytest.mark.parametrize("version,magic,codec", [(0, 0, 0), (1, 0, 1), (2, 1, 0), (2, 1, 2)])
def test_produce_then_fetch_every_old_version(wire, topic, version, magic, codec):
    r = old_produce(wire, topic, L.encode_message_set(recs(3), magic, compression=codec), version)
    assert (int(r.error_code), r.base_offset) == (E.NONE, 0)
    r = old_produce(wire, topic, L.encode_message_set(recs(2), magic, compression=codec), version)
    assert (int(r.error_code), r.base_offset) == (E.NONE, 3)
    for fv, fmagic in ((0, 0), (1, 0), (2, 1), (3, 1)):
        p = old_fetch(wire, topic, 1, fv)
        assert (int(p.error_code), p.high_watermark) == (E.NONE, 5)
        got = [(m.key, m.value, m.magic) for m in L.decode_message_set(p.records) if m.offset >= 1]
        assert got == [(b"k%d" % i, b"%d" % i * 10, fmagic) for i in (1, 2, 0, 1)]


def test_acks_zero_gets_no_response(wire, topic):
    old_produce(wire, topic, L.encode_message_set(recs(1), 1), acks=0)
    deadline = time.monotonic() + 10
    while True:  # the next answer on the connection is the fetch's: the produce got none
        p = old_fetch(wire, topic, 0, 2)
        if p.records or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [m.value for m in L.decode_message_set(p.records)] == [b"0" * 10]


def test_fetch_sizes_v0_partial_v3_whole_and_max_bytes(wire, topic):
    old_produce(wire, topic, L.encode_message_set(recs(4, size=100), 1))  # ~150 bytes each
    one = len(L.encode_message_set(recs(1, size=100), 1))
    # v2: whole messages within the partition limit; when not even one fits, a partial message.
    p = old_fetch(wire, topic, 0, 2, partition_max_bytes=2 * one + 5)
    assert len(L.decode_message_set(p.records)) == 2 and len(p.records) == 2 * one
    p = old_fetch(wire, topic, 0, 2, partition_max_bytes=one - 1)
    assert len(p.records) == one - 1 and L.decode_message_set(p.records, allow_partial=True) == []
    # v3 (KIP-74): the first message whole even when larger; the response limit counts too.
    p = old_fetch(wire, topic, 0, 3, partition_max_bytes=one - 1)
    assert len(L.decode_message_set(p.records)) == 1
    p = old_fetch(wire, topic, 0, 3, max_bytes=3 * one)
    assert len(L.decode_message_set(p.records)) == 3


def test_old_fetch_errors(wire, topic):
    old_produce(wire, topic, L.encode_message_set(recs(1), 1))
    assert int(old_fetch(wire, topic, 5, 1).error_code) == E.OFFSET_OUT_OF_RANGE
    assert int(old_fetch(wire, topic, 0, 0, partition=7).error_code) == E.UNKNOWN_TOPIC_OR_PARTITION
    # zstd has no old-format codec: Kafka answers UNSUPPORTED_COMPRESSION_TYPE before Fetch v10.
    produce(wire, topic, 0, batch([b"z"], compression=4))
    p = old_fetch(wire, topic, 1, 2)
    assert int(p.error_code) == UNSUPPORTED_COMPRESSION_TYPE and not p.records
    p = old_fetch(wire, topic, 0, 2)  # what comes before it is still served
    assert int(p.error_code) == E.NONE and len(L.decode_message_set(p.records)) == 1


def test_old_fetch_sees_aborted_data_without_markers(broker, storage, wire):
    """Old fetchers have no isolation level: everything up to the high watermark, aborted
    transactions included, and never a control batch."""
    from confluent_kafka import Producer

    create_topic(storage, "lw-txn", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "lw-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    for v in (b"a1", b"a2"):
        p.produce("lw-txn", value=v, partition=0)
    p.flush(30)  # sent before the abort (librdkafka purges what is still queued)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("lw-txn", value=b"c1", partition=0)
    p.commit_transaction(30)
    for version in (0, 3):
        got = L.decode_message_set(old_fetch(wire, "lw-txn", 0, version).records)
        assert [m.value for m in got] == [b"a1", b"a2", b"c1"]
        assert [m.offset for m in got] == [0, 1, 3]  # 2 and 4 are the markers
    # From the abort marker on: nothing is served empty in front of the committed record.
    got = L.decode_message_set(old_fetch(wire, "lw-txn", 2, 1, partition_max_bytes=80).records)
    assert [m.value for m in got] == [b"c1"]


def _entry(magic, attrs, key, value, offset=0, crc=None):
    body = struct.pack(">bb", magic, attrs) + (struct.pack(">q", 0) if magic else b"")
    for f in (key, value):
        body += struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
    c = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, len(body) + 4, c) + body


@pytest.mark.parametrize("data", [
    _entry(1, 0, None, b"v", crc=1),                 # bad CRC
    _entry(1, 1, None, b"not gzip"),                 # a gzip wrapper that is not gzip
    _entry(1, 2, None, b"\x82SNAPPY\x00junk"),        # broken xerial snappy
    _entry(0, 3, None, b"\x04\x22\x4d\x18junk"),      # broken lz4
    _entry(1, 4, None, b"zstd?"),                     # no zstd in the old format
    _entry(1, 0, None, b"v")[:-3],                   # truncated
    _entry(1, 0, None, b"v") + b"\x00\x00\x00",      # trailing bytes
    _entry(0, 0, None, b"v") + _entry(1, 0, None, b"v"),  # mixed magic
    _entry(1, 1, None, None),                        # compressed without a value
    _entry(7, 0, None, b"v"),                        # magic 7 (neither old nor v2)
    batch([b"v"]),                                   # a v2 batch: Kafka refuses magic 2 before Produce v3
], ids=["crc", "gzip", "snappy", "lz4", "zstd", "truncated", "trailing", "mixed", "null-wrapper", "magic7",
        "magic2"])
def test_malformed_message_sets_get_corrupt_message(broker, wire, topic, data):
    for version in (0, 2):
        r = old_produce(wire, topic, data, version)
        assert int(r.error_code) == E.CORRUPT_MESSAGE, (version, r)
    # The broker is fine and the partition untouched.
    r = old_produce(wire, topic, L.encode_message_set(recs(1), 1))
    assert (int(r.error_code), r.base_offset) == (E.NONE, 0)


def old_list_offsets(w, topic, timestamp, max_num=1, partition=0):
    cls = codec.request_class(2, 0)
    mod = __import__("sys").modules[cls.__module__]
    req = cls(replica_id=-1, topics=(mod.ListOffsetsTopic(name=topic, partitions=(mod.ListOffsetsPartition(
        partition_index=partition, timestamp=timestamp, max_num_offsets=max_num),)),))
    p = w.call(req).topics[0].partitions[0]
    return int(p.error_code), tuple(p.old_style_offsets)


def test_list_offsets_v0_old_style(wire, topic):
    old_produce(wire, topic, L.encode_message_set(recs(3), 1))
    assert old_list_offsets(wire, topic, -2) == (E.NONE, (0,))
    assert old_list_offsets(wire, topic, -1) == (E.NONE, (3,))
    assert old_list_offsets(wire, topic, -1, max_num=5) == (E.NONE, (3, 0))  # then segment bases
    assert old_list_offsets(wire, topic, 500) == (E.NONE, ())            # before every segment
    assert old_list_offsets(wire, topic, 2**62, max_num=5) == (E.NONE, (0,))
    assert old_list_offsets(wire, topic, -1, partition=9)[0] == E.UNKNOWN_TOPIC_OR_PARTITION


def test_old_fetch_long_polls_until_data(broker, wire, topic):
    import threading

    cls = codec.request_class(1, 2)
    mod = __import__("sys").modules[cls.__module__]
    req = cls(replica_id=-1, max_wait=datetime.timedelta(seconds=8), min_bytes=1, topics=(mod.FetchTopic(
        topic=topic, partitions=(mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),))
    out = {}
    t = threading.Thread(target=lambda: out.update(r=wire.call(req)))
    started = time.monotonic()
    t.start()
    time.sleep(0.5)
    assert t.is_alive()  # parked: nothing to read yet
    w2 = Wire(broker.bootstrap)
    old_produce(w2, topic, L.encode_message_set(recs(1), 1))
    w2.close()
    t.join(10)
    assert time.monotonic() - started < 6  # woken by the commit, not the 8 s wait
    p = out["r"].responses[0].partitions[0]
    assert [m.value for m in L.decode_message_set(p.records)] == [b"0" * 10]
