"""What a listing costs on S3, counted at the wire (the fault harness's proxy in front of
moto's server, no fault scheduled). A listing that finds nothing is common on the hot path:
a partition of ``__transaction_state`` no id has written yet (read by every refresh of the
transaction coordinator), a cluster document with no entries (read every couple of seconds).
s3fs answered it with three requests (the listing, then a HEAD and a one-key listing to see
whether the path itself is an object); each is paid under the store's latency."""
from __future__ import annotations

import uuid

import pytest

from kafkastore.storage import Storage
from tests.helpers.jepsen.s3_fault_proxy import FaultProxy


@pytest.fixture
def proxied(s3_endpoint):
    """A Storage on a fresh S3 root reached through a counting proxy."""
    proxy = FaultProxy(s3_endpoint).start()
    try:
        storage = Storage(f"s3://kafkastore-test/listing-{uuid.uuid4().hex[:8]}",
                          {"endpoint_url": proxy.endpoint, "key": "testing", "secret": "testing"})
        storage.list("warm")   # the bucket check, once per process
        yield storage, proxy
    finally:
        proxy.stop()


def _counted(proxy, call):
    proxy.trace = []
    try:
        return call(), list(proxy.trace)
    finally:
        proxy.trace = None


def test_an_empty_directory_is_listed_in_one_request(proxied):
    storage, proxy = proxied
    found, trace = _counted(proxy, lambda: storage.list("topics/t/0/_manifest"))
    assert found == []
    assert [method for method, _, _ in trace] == ["GET"]


def test_a_listing_holds_what_is_under_the_directory_and_nothing_beside_it(proxied):
    storage, proxy = proxied
    for rel in ("d/a.json", "d/sub/b.json", "d2/c.json", "d.json"):
        storage.put(rel, b"x")
    found, trace = _counted(proxy, lambda: storage.list("d"))
    assert [o.path for o in found] == ["d/a.json", "d/sub/b.json"]
    assert all(o.size == 1 and o.mtime > 0 for o in found)
    assert len(trace) == 1
    assert [o.path for o in storage.list("d/sub/")] == ["d/sub/b.json"]
    assert [o.path for o in storage.list("")] == ["d.json", "d/a.json", "d/sub/b.json", "d2/c.json"]
