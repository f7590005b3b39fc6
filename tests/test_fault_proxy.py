"""The fault harness's S3 proxy matches what a request means, not how it is spelled.

An S3 client names a directory two ways: its objects' keys sit in the request path, and a
listing of it puts the directory as a URL-encoded ``prefix`` in the query string
(``/bucket?list-type=2&prefix=a%2Fb%2F``). A fault scheduled for a directory must reach
both, or an outage of that directory leaves its listings served (a cluster document is read
by one listing of its directory). Real parts: moto's server on loopback, the proxy in front
of it, s3fs as the client."""
from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest
import s3fs
from hypothesis import given, strategies as st

from tests.helpers.jepsen.s3_fault_proxy import Fault, FaultProxy

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


_segment = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"),
                   min_size=1, max_size=8)
# A plain directory name for the fault beside: no URL or query syntax (``%``, ``&``, ``=``),
# which a fault's part could match in the raw request or across the query's parameters.
_plain = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_.~ "),
                 min_size=1, max_size=8)


@given(directory=st.lists(_segment, min_size=1, max_size=3), name=_segment, other=_plain)
def test_a_directory_is_matched_however_the_client_encodes_it(directory, name, other):
    """As botocore spells them: an object's key quoted in the path (``/`` kept), a listing's
    prefix quoted in the query (``/`` too). A fault on the directory matches both; a fault
    on a directory named ``other`` beside it matches neither, unless one name holds the
    other."""
    prefix = "/".join(directory) + "/"
    get = f"/{BUCKET}/" + quote(prefix + name, safe="/~")
    listing = f"/{BUCKET}?list-type=2&prefix={quote(prefix, safe='~')}&delimiter=%2F"
    fault = Fault("storm", until=1.0, path_part=prefix)
    assert fault.matches("GET", get, 0.0) and fault.matches("GET", listing, 0.0)
    beside = Fault("storm", until=1.0, path_part=f"/{other}/")
    if f"/{other}/" not in f"/{BUCKET}/{prefix}{name}":
        assert not beside.matches("GET", get, 0.0)
        assert not beside.matches("GET", listing, 0.0)
