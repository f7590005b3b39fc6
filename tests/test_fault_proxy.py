"""The fault harness's S3 proxy matches what a request means, not how it is spelled.

An S3 client names a directory two ways: its objects' keys sit in the request path, and a
listing of it puts the directory as a URL-encoded ``prefix`` in the query string
(``/bucket?list-type=2&prefix=a%2Fb%2F``). A fault scheduled for a directory must reach
both, or an outage of that directory leaves its listings served (a cluster document is read
by one listing of its directory). Real parts: moto's server on loopback, the proxy in front
of it, s3fs as the client."""
from __future__ import annotations

import uuid

import pytest
import s3fs

from tests.helpers.jepsen.s3_fault_proxy import FaultProxy

BUCKET = "kafkastore-test"


@pytest.fixture
def store(s3_endpoint):
    """An s3fs filesystem reaching moto through the proxy, and a fresh root with two
    directories: ``<root>/_cluster/quotas/`` and ``<root>/_cluster/acls/``."""
    proxy = FaultProxy(s3_endpoint).start()
    root = f"{BUCKET}/proxy-{uuid.uuid4().hex[:8]}"
    # No listing cache (every ls is a request) and no retries (a storm answers at once).
    fs = s3fs.S3FileSystem(key="testing", secret="testing", skip_instance_cache=True,
                           use_listings_cache=False,
                           client_kwargs={"endpoint_url": proxy.endpoint},
                           config_kwargs={"retries": {"max_attempts": 1, "mode": "standard"}})
    fs.retries = 1   # s3fs's own retry loop (a class attribute, not an argument)
    fs.pipe({f"{root}/_cluster/quotas/00000001.json": b'{"quotas": 1}',
             f"{root}/_cluster/acls/00000001.json": b'{"acls": 1}'})
    try:
        yield fs, proxy, root
    finally:
        proxy.stop()


def _list_and_get(fs, directory: str) -> tuple:
    """One listing of ``directory`` and one GET of its first object, as a document read does."""
    names = fs.ls(directory, detail=False)
    return names, fs.cat_file(names[0])


def test_a_fault_on_a_directory_hits_its_listing_and_its_objects(store):
    fs, proxy, root = store
    # A zero-latency fault changes nothing but records every GET it matched (s3fs also
    # sends a HEAD before reading a file).
    quotas = proxy.add("latency", methods=("GET",), path_part="_cluster/quotas/", delay_s=0.0)
    names, body = _list_and_get(fs, f"{root}/_cluster/quotas")
    assert names == [f"{root}/_cluster/quotas/00000001.json"] and body == b'{"quotas": 1}'
    listings = [p for p in quotas.paths if "list-type=2" in p]
    objects = [p for p in quotas.paths if p.endswith("/_cluster/quotas/00000001.json")]
    assert len(listings) == 1, quotas.paths
    assert len(objects) == 1, quotas.paths
    assert quotas.hits == len(quotas.paths) == 2


def test_a_fault_on_another_directory_hits_neither(store):
    fs, proxy, root = store
    acls = proxy.add("storm", path_part="_cluster/acls/", status=503)
    names, body = _list_and_get(fs, f"{root}/_cluster/quotas")
    assert body == b'{"quotas": 1}'
    assert acls.hits == 0 and acls.paths == []
    with pytest.raises(OSError):   # the faulted directory's listing fails, not served
        fs.ls(f"{root}/_cluster/acls")
    assert acls.hits >= 1 and all("list-type=2" in p for p in acls.paths)


def test_a_storm_on_a_directory_fails_its_listing_and_its_object_reads(store):
    fs, proxy, root = store
    proxy.add("storm", methods=("GET", "HEAD"), path_part="_cluster/quotas/", status=503)
    with pytest.raises(OSError):
        fs.ls(f"{root}/_cluster/quotas")
    with pytest.raises(OSError):
        fs.cat_file(f"{root}/_cluster/quotas/00000001.json")
    proxy.clear()
    assert _list_and_get(fs, f"{root}/_cluster/quotas")[1] == b'{"quotas": 1}'
