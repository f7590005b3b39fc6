"""A manifest commit on real S3 (moto on loopback) whose response the network loses.

The harness's fault proxy (tests/helpers/jepsen) sits between the S3 client and moto. For the first conditional PUT of a
manifest version it forwards the request (moto applies it), then answers 503 or drops the
connection instead of moto's 200. The S3 client (botocore) retries by itself and the
retry's ``If-None-Match: *`` gets 412: what reaches kafkastore is a plain conflict on a
version that is its own. Read as a lost race, the batch was appended a second time.
"""
from __future__ import annotations

import uuid

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.jepsen.s3_fault_proxy import FaultProxy
from tests.helpers.segments import append_at_the_head

T = "t"


def _fault_proxy(upstream: str, fault: str, count: int = 1):
    """The harness's fault proxy in front of ``upstream``: the first ``count`` conditional
    PUTs (``If-None-Match``) of manifest versions are applied by moto, then answered with
    ``fault``: ``"503"`` (a 5xx after the store applied the write) or ``"drop"`` (the
    connection closes without a response). Returns (proxy, fault)."""
    proxy = FaultProxy(upstream).start()
    scheduled = proxy.add("fail" if fault == "503" else "lose", methods=("PUT",),
                          path_part="/_manifest/", header="If-None-Match", status=503,
                          count=count)
    return proxy, scheduled


def _values(storage):
    return PartitionReader(storage, T, 0).read(-2).column("value").to_pylist()


@pytest.mark.parametrize("fault", ["503", "drop"])
def test_a_manifest_put_applied_then_retried_by_the_s3_client_is_not_appended_twice(
        s3_endpoint, fault, metadata_only_commits):
    """The commit engine's read-back on a conflict tells our own landed put (the client's
    retry answered 412) from another writer's: the partition holds the batch once."""
    url = f"s3://kafkastore-test/root-{uuid.uuid4().hex[:12]}"
    append_at_the_head(ManifestStore(Storage(url), T, 0), "first")
    proxy, scheduled = _fault_proxy(s3_endpoint, fault)
    try:
        storage = Storage(url, {"client_kwargs": {"endpoint_url": proxy.endpoint}})
        landed = append_at_the_head(ManifestStore(storage, T, 0), "second")
        assert scheduled.paths, "the fault did not fire"
    finally:
        proxy.stop()
    head = ManifestStore(Storage(url), T, 0).latest()
    assert landed.version == head.version == 2
    assert [s.segment_id for s in head.segments] == ["first", "second"]
    assert head.high_watermark == 20


@pytest.mark.parametrize("fault", ["503", "drop"])
def test_records_produced_through_a_lossy_s3_link_are_stored_once(s3_endpoint, fault):
    """The same through the broker, records without a producer id (librdkafka's default)."""
    url = f"s3://kafkastore-test/root-{uuid.uuid4().hex[:12]}"
    create_topic(Storage(url), T, 1)
    first = Broker(Storage(url), housekeeping=False)
    first.send(T, b"a", partition=0)
    first.flush()

    proxy, scheduled = _fault_proxy(s3_endpoint, fault)
    try:
        storage = Storage(url, {"client_kwargs": {"endpoint_url": proxy.endpoint}})
        broker = Broker(storage, housekeeping=False)
        for i in range(5):
            broker.send(T, b"b%d" % i, partition=0)
        broker.flush()
        assert scheduled.paths, "the fault did not fire"
    finally:
        proxy.stop()
    fresh = Storage(url)
    assert _values(fresh) == [b"a", b"b0", b"b1", b"b2", b"b3", b"b4"]
    assert ManifestStore(fresh, T, 0).latest().high_watermark == 6


def test_every_attempt_lost_is_settled_by_reading_back(s3_endpoint):
    """The client's retries exhausted, each applied-or-refused then answered 503: the engine
    reads the version back and finds its own bytes (the first attempt landed)."""
    url = f"s3://kafkastore-test/root-{uuid.uuid4().hex[:12]}"
    create_topic(Storage(url), T, 1)
    proxy, scheduled = _fault_proxy(s3_endpoint, "503", count=2)
    try:
        broker = Broker(Storage(url, {"client_kwargs": {"endpoint_url": proxy.endpoint}}),
                        housekeeping=False)
        broker.send(T, b"once", partition=0)
        broker.flush()
        assert len(scheduled.paths) == 2, scheduled.paths
    finally:
        proxy.stop()
    assert _values(Storage(url)) == [b"once"]
