"""A manifest commit on real S3 (moto on loopback) whose response the network loses.

A small HTTP proxy sits between the S3 client and moto. For the first conditional PUT of a
manifest version it forwards the request (moto applies it), then answers 503 or drops the
connection instead of moto's 200. The S3 client (botocore) retries by itself and the
retry's ``If-None-Match: *`` gets 412: what reaches kafkastore is a plain conflict on a
version that is its own. Read as a lost race, the batch was appended a second time.
"""
from __future__ import annotations

import http.client
import socketserver
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest

from kafkastore.broker import Broker
from kafkastore.manifest import ManifestStore
from kafkastore.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics import create_topic
from tests.helpers.segments import append_at_the_head

T = "t"


class _FaultProxy:
    """Forwards every request to ``upstream``; the first ``count`` PUTs whose path contains
    ``match`` and that carry ``If-None-Match`` are applied upstream, then answered with
    ``fault``: ``"503"`` (a 5xx after the store applied the write) or ``"drop"`` (the
    connection closes without a response)."""

    def __init__(self, upstream: str, *, match: str, fault: str, count: int = 1):
        self.upstream = urlsplit(upstream)
        self.match, self.fault, self.left = match, fault, count
        self.fired: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # quiet
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port,
                                                  timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if proxy._fires(self.command, self.path, self.headers):
                    if proxy.fault == "drop":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self.send_response(503, "Slow Down")
                    payload = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown"
                               b"</Code><Message>injected</Message></Error>")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _fires(self, method: str, path: str, headers) -> bool:
        if method != "PUT" or self.match not in path or "If-None-Match" not in headers:
            return False
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            self.fired.append(path)
            return True

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _values(storage):
    return PartitionReader(storage, T, 0).read(-2).column("value").to_pylist()


@pytest.mark.parametrize("fault", ["503", "drop"])
def test_a_manifest_put_applied_then_retried_by_the_s3_client_is_not_appended_twice(
        s3_endpoint, fault, metadata_only_commits):
    """The commit engine's read-back on a conflict tells our own landed put (the client's
    retry answered 412) from another writer's: the partition holds the batch once."""
    url = f"s3://kafkastore-test/root-{uuid.uuid4().hex[:12]}"
    append_at_the_head(ManifestStore(Storage(url), T, 0), "first")
    proxy = _FaultProxy(s3_endpoint, match="/_manifest/", fault=fault)
    try:
        storage = Storage(url, {"client_kwargs": {"endpoint_url": proxy.url}})
        landed = append_at_the_head(ManifestStore(storage, T, 0), "second")
        assert proxy.fired, "the fault did not fire"
    finally:
        proxy.close()
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

    proxy = _FaultProxy(s3_endpoint, match="/_manifest/", fault=fault)
    try:
        storage = Storage(url, {"client_kwargs": {"endpoint_url": proxy.url}})
        broker = Broker(storage, housekeeping=False)
        for i in range(5):
            broker.send(T, b"b%d" % i, partition=0)
        broker.flush()
        assert proxy.fired, "the fault did not fire"
    finally:
        proxy.close()
    fresh = Storage(url)
    assert _values(fresh) == [b"a", b"b0", b"b1", b"b2", b"b3", b"b4"]
    assert ManifestStore(fresh, T, 0).latest().high_watermark == 6


def test_every_attempt_lost_is_settled_by_reading_back(s3_endpoint):
    """The client's retries exhausted, each applied-or-refused then answered 503: the engine
    reads the version back and finds its own bytes (the first attempt landed)."""
    url = f"s3://kafkastore-test/root-{uuid.uuid4().hex[:12]}"
    create_topic(Storage(url), T, 1)
    proxy = _FaultProxy(s3_endpoint, match="/_manifest/", fault="503", count=2)
    try:
        broker = Broker(Storage(url, {"client_kwargs": {"endpoint_url": proxy.url}}),
                        housekeeping=False)
        broker.send(T, b"once", partition=0)
        broker.flush()
        assert len(proxy.fired) == 2, proxy.fired
    finally:
        proxy.close()
    assert _values(Storage(url)) == [b"once"]
