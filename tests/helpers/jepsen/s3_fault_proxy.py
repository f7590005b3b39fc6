"""An HTTP fault proxy on loopback between an S3 client (s3fs/boto3) and moto's server.

It forwards every request, and while a scheduled fault is active for a request that
matches it (method and a path substring, see :func:`request_targets`), it:

* ``lose`` -- forwards the request, lets moto apply it, then closes the client's
  connection without answering (a PUT that succeeded but whose response was lost);
* ``fail`` -- forwards the request, lets moto apply it, then answers ``status`` (500 or
  503): a 5xx for a write that landed (the S3 client's own retry then meets its own write);
* ``storm`` -- answers ``status`` (500 or 503) without forwarding;
* ``latency`` -- waits ``delay_s`` before forwarding.

Faults are added with :meth:`FaultProxy.add` and last ``duration_s`` from then (or
``count`` matching requests); ``header`` narrows one to requests carrying that header
(``If-None-Match``: conditional creates). ``counts`` records how many requests each fault kind hit,
so a harness can report faults by kind. Test code only (reads the system clock itself).
"""
from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

__all__ = ["Fault", "FaultProxy", "request_targets"]

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


def request_targets(raw: str) -> tuple:
    """What a request names, as the texts a fault's ``path_part`` is looked for in.

    A fault means a place in the store, but an S3 client spells that place two ways: an
    object request names its key in the (URL-encoded) path, and a listing names the
    directory as the ``prefix`` in its (URL-encoded) query, beside the bucket's path
    (``/bucket?list-type=2&prefix=a%2Fb%2F``). So the targets are the raw request, the
    unquoted path, the unquoted query, and the bucket's path joined with the listing's
    prefix (``/bucket/a/b/``): a fault on ``a/b/`` hits the GETs and PUTs of that
    directory's objects and its listings alike. The raw request stays a target, so no
    fault matches fewer requests than it did on the raw path alone."""
    path, _, query = raw.partition("?")
    targets = [raw, unquote(path)]
    if query:
        targets.append(unquote(query))
        prefix = dict(parse_qsl(query, keep_blank_values=True)).get("prefix")
        if prefix is not None:
            targets.append(unquote(path).rstrip("/") + "/" + prefix)
    return tuple(targets)


@dataclass
class Fault:
    """One scheduled fault: ``kind`` in lose/fail/storm/latency, for requests whose method
    is in ``methods`` (empty: any), one of whose targets (:func:`request_targets`: the
    unquoted path, the unquoted query, a listing's bucket path plus prefix) contains
    ``path_part``, and that carry ``header`` (empty: any). ``paths`` lists the requests it
    hit."""
    kind: str
    until: float
    methods: tuple = ()
    path_part: str = ""
    status: int = 503
    delay_s: float = 0.0
    count: int | None = None
    header: str = ""
    hits: int = field(default=0)
    paths: list = field(default_factory=list)

    def matches(self, method: str, path: str, now: float, headers=None) -> bool:
        if now >= self.until or (self.count is not None and self.hits >= self.count):
            return False
        if self.header and (headers is None or self.header not in headers):
            return False
        if self.methods and method not in self.methods:
            return False
        return any(self.path_part in target for target in request_targets(path))


class FaultProxy:
    """A threaded proxy on 127.0.0.1 forwarding to ``upstream`` (``http://host:port``)."""

    def __init__(self, upstream: str):
        host, port = upstream.removeprefix("http://").rstrip("/").split(":")
        self.upstream = (host, int(port))
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.counts = {"lose": 0, "fail": 0, "storm": 0, "latency": 0, "forwarded": 0}
        #: When a list: every request received, as ``(method, path, conditional)``
        #: (``conditional``: it carries If-None-Match), for benchmarks counting store requests.
        self.trace: list | None = None
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client gone mid-request: quiet
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> "FaultProxy":
        """Start serving; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def add(self, kind: str, *, duration_s: float = 3600.0, methods=(), path_part: str = "",
            status: int = 503, delay_s: float = 0.0, count: int | None = None,
            header: str = "") -> Fault:
        """Schedule a fault from now for ``duration_s`` (or ``count`` matching requests)."""
        if kind not in ("lose", "fail", "storm", "latency"):
            raise ValueError(f"unknown fault kind {kind!r}")
        fault = Fault(kind, time.monotonic() + duration_s, tuple(methods), path_part, status,
                      delay_s, count, header)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Drop every scheduled fault."""
        with self._lock:
            self._faults.clear()

    def _fault_for(self, method: str, path: str, headers=None) -> Fault | None:
        now = time.monotonic()
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path, now, headers):
                    fault.hits += 1
                    fault.paths.append(path)
                    self.counts[fault.kind] += 1
                    return fault
        return None

    def _handle(self, h) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        trace = self.trace
        if trace is not None:
            trace.append((h.command, h.path, "If-None-Match" in h.headers))
        fault = self._fault_for(h.command, h.path, h.headers)
        if fault is not None and fault.kind == "storm":
            self._answer_error(h, fault.status)
            return
        if fault is not None and fault.kind == "latency":
            time.sleep(fault.delay_s)
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if fault is not None and fault.kind == "fail":
            self._answer_error(h, fault.status)   # moto applied it; the client hears a 5xx
            return
        if fault is not None and fault.kind == "lose":
            # moto applied the request; the client never hears back.
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        with self._lock:
            self.counts["forwarded"] += 1
        h.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and k.lower() != "content-length":
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    @staticmethod
    def _answer_error(h, status: int) -> None:
        payload = (f"<Error><Code>{'SlowDown' if status == 503 else 'InternalError'}"
                   f"</Code><Message>injected</Message></Error>").encode()
        h.send_response(status)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if h.command != "HEAD":   # a HEAD answer has no body (it would read as the next answer)
            h.wfile.write(payload)
