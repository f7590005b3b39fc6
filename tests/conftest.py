"""Shared fixtures: storage roots on every backend (S3 is moto's server on
loopback, started here) and one SparkSession for the whole test session."""
from __future__ import annotations

import os
import sys

import pytest

from tests.helpers.cli import CONFIG_ENV
from tests.helpers.roots import BACKENDS, make_root_url


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1, with the AWS environment pointed at it."""
    from moto.server import ThreadedMotoServer

    from tests.helpers.atomic_moto import make_conditional_puts_atomic

    make_conditional_puts_atomic()   # as S3's: one of two racing conditional PUTs wins
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in _AWS_ENV}
    os.environ.update({
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT_URL_S3": endpoint,
    })
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="kafkastore-test")
    try:
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@pytest.fixture(params=BACKENDS)
def root_url(request, tmp_path):
    """A fresh root URL, once per storage backend (file, memory, moto-backed s3)."""
    url = make_root_url(request.param, tmp_path, request)
    yield url
    if request.param == "memory":
        import fsspec

        fs = fsspec.filesystem("memory")
        path = url.split("://", 1)[1]
        for _ in range(3):  # a writer's background merge may still be adding to the root
            try:
                if fs.exists(path):
                    fs.rm(path, recursive=True)
                break
            except FileNotFoundError:
                continue


@pytest.fixture
def local_root(tmp_path):
    """A fresh file:// root URL."""
    return f"file://{tmp_path}/root"


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test session (local[2])."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pipelines.source.session import get_spark

    session = get_spark(master="local[2]", app_name="kafkastore-tests",
                        extra_conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture
def metadata_only_commits(monkeypatch):
    """For tests of the commit protocol on synthetic segment entries (no files behind them):
    skip the check that newly listed files exist and are fresh. That check has its own tests
    (tests/kafkastore/test_upload_freshness.py)."""
    from kafkastore.manifest import ManifestStore

    monkeypatch.setattr(ManifestStore, "stale_uploads", lambda self, segments: [])


@pytest.fixture
def clean_config_env(monkeypatch):
    """No config from the environment (KAFKASTORE_ROOT, _CONF, _WAREHOUSE, _SPARK_MASTER)."""
    for name in CONFIG_ENV:
        monkeypatch.delenv(name, raising=False)
