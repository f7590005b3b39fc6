"""The fault harness's parts against real moto: the S3 fault proxy loses responses after
moto applied the request, answers 5xx storms without forwarding, and adds latency."""
from __future__ import annotations

import boto3
import botocore.config
import botocore.exceptions
import pytest

from tests.helpers.jepsen.s3_fault_proxy import FaultProxy


@pytest.fixture
def proxy(s3_endpoint):
    p = FaultProxy(s3_endpoint).start()
    try:
        yield p
    finally:
        p.stop()


def _client(endpoint):
    cfg = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                 connect_timeout=5, read_timeout=10)
    return boto3.client("s3", endpoint_url=endpoint, config=cfg)


def test_a_lost_response_was_applied_by_the_store(proxy, s3_endpoint):
    s3 = _client(proxy.endpoint)
    # Every attempt loses its answer (the S3 client may retry a dropped connection itself).
    fault = proxy.add("lose", methods=("PUT",), path_part="/lost-key")
    with pytest.raises((botocore.exceptions.ConnectionClosedError,
                        botocore.exceptions.EndpointConnectionError,
                        botocore.exceptions.ReadTimeoutError)):
        s3.put_object(Bucket="kafkastore-test", Key="jepsen/lost-key", Body=b"applied")
    assert proxy.counts["lose"] == fault.hits >= 1
    proxy.clear()
    # Straight to moto: the PUT whose answer was lost is there.
    direct = _client(s3_endpoint)
    got = direct.get_object(Bucket="kafkastore-test", Key="jepsen/lost-key")["Body"].read()
    assert got == b"applied"


def test_a_storm_answers_503_without_forwarding(proxy, s3_endpoint):
    s3 = _client(proxy.endpoint)
    fault = proxy.add("storm", methods=("PUT",), path_part="/stormy", status=503)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3.put_object(Bucket="kafkastore-test", Key="jepsen/stormy", Body=b"x")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    with pytest.raises(botocore.exceptions.ClientError):
        _client(s3_endpoint).head_object(Bucket="kafkastore-test", Key="jepsen/stormy")
    storm_hits = fault.hits
    assert storm_hits >= 1
    proxy.clear()   # the storm is over: the next PUT goes through
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/stormy", Body=b"y")
    assert s3.get_object(Bucket="kafkastore-test", Key="jepsen/stormy")["Body"].read() == b"y"
    assert proxy.counts["storm"] == storm_hits and proxy.counts["forwarded"] >= 2


def test_latency_forwards_after_the_delay(proxy):
    s3 = _client(proxy.endpoint)
    proxy.add("latency", methods=("GET",), path_part="/slow", delay_s=0.2, count=1)
    s3.put_object(Bucket="kafkastore-test", Key="jepsen/slow", Body=b"z")
    assert s3.get_object(Bucket="kafkastore-test", Key="jepsen/slow")["Body"].read() == b"z"
    assert proxy.counts["latency"] == 1
