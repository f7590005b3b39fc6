"""A broker that cannot serve a request answers it with an error code, not a closed connection.

Unit part: for every API key and version the broker registers, a request naming one entry
in each of its arrays gets a response that encodes and decodes, carries the code in every
error field, and answers the request's topics and partitions. Fault part: with the store
failing (an S3 storm through the fault proxy, GETs of the cluster documents answered 503)
and the quotas therefore too old to decide on, requests are answered with retriable codes
on a connection that stays open, and served again once the store is back.
"""
from __future__ import annotations

import dataclasses
import datetime
import time
import typing
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kafkastore.protocol.wire import codec
from kafkastore.protocol.wire.error_responses import error_response, storage_error_code
from kafkastore.protocol.server import BrokerServer, ServeOptions
from kafkastore.storage import Storage


def _sample(cls: type, depth: int = 0):
    """A request of ``cls`` with one entry in every array (nested ones too)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        tp, kind = hints[f.name], f.metadata.get("kafka_type")
        args = typing.get_args(tp)
        if type(None) in args and any(typing.get_origin(a) is tuple for a in args):
            tp = next(a for a in args if typing.get_origin(a) is tuple)   # an array that may be None
            args = typing.get_args(tp)
        if typing.get_origin(tp) is tuple:
            inner = args[0]
            if dataclasses.is_dataclass(inner):
                values[f.name] = (_sample(inner, depth + 1),)
            else:
                values[f.name] = (_scalar(inner, codec._fields(cls).get(f.name), f.name),)
            continue
        if dataclasses.is_dataclass(tp):
            values[f.name] = _sample(tp, depth + 1)
            continue
        optional = type(None) in args
        base = next((a for a in args if a is not type(None)), tp) if optional else tp
        values[f.name] = (_sample(base, depth + 1) if dataclasses.is_dataclass(base)
                          else _scalar(base, kind, f.name))
    return cls(**values)


def _scalar(tp, kind, name):
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"):
        return tp(7 if "partition" in name or name == "index" else 3)
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=100)
    if kind == "datetime_i64":
        return datetime.datetime.fromtimestamp(1, tz=datetime.timezone.utc)
    if kind == "string":
        return tp(f"s-{name}")
    if kind == "bool":
        return False
    if kind == "uuid":
        return uuid.UUID(int=5)
    if kind in ("bytes", "records"):
        return None if kind == "records" else b"x"
    if kind == "float64":
        return tp(1.0)
    if kind == "error_code":
        return ErrorCode.none
    return tp()


def _registered():
    server = BrokerServer(Storage("memory://error-responses"), ServeOptions(port=0))
    try:
        return [(k, v) for k, lo, hi in server.registry.api_versions() for v in range(lo, hi + 1)]
    finally:
        server.pool.shutdown(wait=False)


REGISTERED = _registered()


def _error_codes(entity) -> list:
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, ErrorCode):
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    found += _error_codes(item)
        elif dataclasses.is_dataclass(value):
            found += _error_codes(value)
    return found


@pytest.mark.parametrize("key,version", REGISTERED, ids=lambda x: str(x))
def test_every_registered_request_gets_an_error_response_that_encodes(key, version):
    request = _sample(codec.request_class(key, version))
    code = storage_error_code(key)
    response = error_response(key, version, request, code, "the store failed")
    decoded = codec.decode_response(codec.encode_response(9, response)[4:], key, version)
    codes = _error_codes(decoded[1] if isinstance(decoded, tuple) else decoded)
    # an API whose response has an error field anywhere answers the code there
    if codes:
        assert set(codes) == {code}, (key, version, codes)


def _v(mod_path: str, version: int):
    import importlib
    return importlib.import_module(f"kio.schema.{mod_path}.v{version}.request")


def test_produce_answers_each_partition_it_was_sent():
    req = _sample(codec.request_class(0, 9))
    resp = error_response(0, 9, req, ErrorCode.kafka_storage_error)
    (topic,) = resp.responses
    assert topic.name == req.topic_data[0].name
    (part,) = topic.partition_responses
    assert part.index == req.topic_data[0].partition_data[0].index == 7
    assert part.error_code is ErrorCode.kafka_storage_error and part.base_offset == -1


def test_fetch_answers_each_partition_it_was_asked_for():
    req = _sample(codec.request_class(1, 12))
    resp = error_response(1, 12, req, ErrorCode.kafka_storage_error)
    (topic,) = resp.responses
    assert topic.topic == req.topics[0].topic
    (part,) = topic.partitions
    assert part.partition_index == 7 and part.high_watermark == -1
    assert part.error_code is ErrorCode.kafka_storage_error and part.records is None


def test_metadata_and_coordinator_apis_get_codes_their_clients_retry():
    md = error_response(3, 12, _sample(codec.request_class(3, 12)), storage_error_code(3))
    assert [t.error_code for t in md.topics] == [ErrorCode.leader_not_available]
    assert md.brokers == ()
    for key in (10, 11, 12, 14, 22, 26):   # FindCoordinator .. EndTxn
        assert storage_error_code(key) is ErrorCode.coordinator_not_available


def test_apis_keyed_by_a_plain_list_answer_each_name():
    fc = error_response(10, 4, _sample(codec.request_class(10, 4)), storage_error_code(10))
    assert [(c.key, c.error_code) for c in fc.coordinators] == [
        ("s-coordinator_keys", ErrorCode.coordinator_not_available)]
    dg = error_response(15, 5, _sample(codec.request_class(15, 5)), storage_error_code(15))
    assert [(g.group_id, g.error_code) for g in dg.groups] == [
        ("s-groups", ErrorCode.coordinator_not_available)]


# -- the fault: the store fails under the broker ----------------------------------------------
from tests.helpers.jepsen.s3_fault_proxy import FaultProxy  # noqa: E402
from tests.helpers.serve_procs import start_serve, stop_serve  # noqa: E402
from tests.protocol.wire import Wire  # noqa: E402


def test_requests_during_a_store_outage_get_retriable_codes_on_an_open_connection(
        s3_endpoint, monkeypatch):
    from kio.schema.api_versions.v3 import request as av_req
    from kio.schema.find_coordinator.v4 import request as fc_req
    from kio.schema.metadata.v12 import request as md_req
    from kio.schema.produce.v9 import request as pr_req

    from kafkastore.format.record_batch import Record, encode_batch
    from kafkastore.topics.admin import create_topic

    proxy = FaultProxy(s3_endpoint).start()
    root = f"s3://kafkastore-test/outage-{uuid.uuid4().hex[:8]}"
    create_topic(Storage(root), "t", 1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    proc = start_serve(root)
    wire = Wire(proc.bootstrap, timeout=60)
    try:
        def metadata():
            return wire.call(md_req.MetadataRequest(
                topics=(md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="t"),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))

        def produce():
            batch = encode_batch([Record(0, 0, None, b"v", ())])
            return wire.call(pr_req.ProduceRequest(
                transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                topic_data=(pr_req.TopicProduceData(name="t", partition_data=(
                    pr_req.PartitionProduceData(index=0, records=batch),)),)))

        def find_coordinator():
            return wire.call(fc_req.FindCoordinatorRequest(key_type=0, coordinator_keys=("g",)))

        assert metadata().topics[0].error_code is ErrorCode.none
        # Every read of the cluster's shared documents fails from now on (their objects and
        # the listings of their directory); after the quota bound (2 s) no request may be
        # decided on the quotas in hand.
        proxy.add("storm", methods=("GET", "HEAD"), path_part="_cluster/quotas", status=503)
        time.sleep(3.0)
        # ApiVersions decides nothing on ACLs or quotas: answered as ever (a client that
        # reads an error here takes the broker for an incompatible one)
        versions = wire.call(av_req.ApiVersionsRequest(client_software_name="t",
                                                       client_software_version="1"))
        assert versions.error_code is ErrorCode.none and versions.api_keys
        answered = {"metadata": metadata().topics[0].error_code,
                    "produce": produce().responses[0].partition_responses[0].error_code,
                    "find-coordinator": find_coordinator().coordinators[0].error_code}
        assert answered == {"metadata": ErrorCode.leader_not_available,
                            "produce": ErrorCode.kafka_storage_error,
                            "find-coordinator": ErrorCode.coordinator_not_available}
        # the store is back: the same connection (never closed) is served again
        proxy.clear()
        deadline = time.monotonic() + 60
        while produce().responses[0].partition_responses[0].error_code is not ErrorCode.none:
            assert time.monotonic() < deadline, "not served again after the store came back"
            time.sleep(0.5)
    finally:
        wire.close()
        stop_serve(proc)
        proxy.stop()
