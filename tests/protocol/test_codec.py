"""The wire codec: headers, round trips through kio, and garbage that must fail cleanly."""
from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.produce.v9 import request as prod_req

from kafkastore.protocol.wire import codec


@given(client_id=st.one_of(st.none(), st.text(max_size=50)), correlation=st.integers(-2**31, 2**31 - 1))
def test_request_round_trip(client_id, correlation):
    req = prod_req.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=(
        prod_req.TopicProduceData(name="t", partition_data=(
            prod_req.PartitionProduceData(index=3, records=b"\x00" * 70),)),))
    framed = codec.encode_request(req, correlation, client_id)
    (size,) = struct.unpack_from(">i", framed)
    body = framed[4:]
    assert size == len(body)
    header, pos = codec.parse_header(body, codec.is_flexible(0, 9))
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 9, correlation)
    assert header.client_id == client_id
    assert codec.decode_request(0, 9, body, pos) == req


@settings(max_examples=300)
@given(st.binary(max_size=120), st.booleans())
def test_garbage_fails_with_protocol_error_only(data, flexible):
    try:
        _, pos = codec.parse_header(data, flexible)
        codec.decode_request(3, 12, data, pos)
    except codec.ProtocolError:
        pass


def test_trailing_bytes_are_ignored_as_kafka_does():
    """Kafka's parser reads the schema and ignores what follows (librdkafka's Metadata v12 for
    all topics carries three padding bytes)."""
    req = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False)
    body = codec.encode_request(req, 1)[4:] + b"\x00\x01\x00"
    _, pos = codec.parse_header(body, True)
    assert codec.decode_request(3, 12, body, pos) == req


def test_make_drops_fields_of_other_versions_and_converts():
    v0 = codec.response_class(18, 0)
    r = codec.make(v0, error_code=35, api_keys=(), throttle_time=5, supported_features=())
    assert r.error_code == ErrorCode.unsupported_version and not hasattr(r, "throttle_time")
    v3 = codec.response_class(18, 3)
    assert codec.make(v3, error_code=0, api_keys=()).throttle_time == datetime.timedelta(0)
    framed = codec.encode_response(9, r)
    cid, back = codec.decode_response(framed[4:], 18, 0)
    assert cid == 9 and back == r
