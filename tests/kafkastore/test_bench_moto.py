"""The benches' S3 decides conditional PUTs as S3 does: the moto server bench/produce.py
starts for itself (and for bench/soak.py, soak_serve.py, trickle.py) is
tests/helpers/atomic_moto's, as the tests' and the fault harness's are."""
from __future__ import annotations

import importlib.util
import os

import boto3
import pytest
from botocore.exceptions import ClientError

_BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "produce.py")


def _bench_produce():
    spec = importlib.util.spec_from_file_location("bench_produce_for_moto", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benches_own_process_moto_is_the_atomic_one():
    server = _bench_produce()._MotoProcess()
    try:
        assert "tests.helpers.atomic_moto" in server.proc.args
        s3 = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id="bench",
                          aws_secret_access_key="bench", region_name="us-east-1")
        s3.create_bucket(Bucket="atomic")
        s3.put_object(Bucket="atomic", Key="v1", Body=b"a", IfNoneMatch="*")
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket="atomic", Key="v1", Body=b"b", IfNoneMatch="*")
        assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    finally:
        server.stop()
