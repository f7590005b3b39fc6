"""Prometheus metrics of one broker (``kafkastore serve --metrics-listen HOST:PORT``).

Each :class:`BrokerMetrics` has its own ``CollectorRegistry`` (several brokers
may run in one process, as in the tests). What is counted as it happens:
bytes and records in (Produce) and out (Fetch) per topic, requests and
requests answered with an error per API and version, request latency per API,
throttle time per quota and entity, commit latency. What is read at scrape
time (on the metrics server's thread, never on the event loop): live
connections, commit attempts and lost races, consumer-group states and the lag
of every committed offset of the groups this broker coordinates, and the
process's memory (prometheus-client's process collector).
"""
from __future__ import annotations

import dataclasses
import logging
import struct
import threading
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from ..errors import ListenError
from .wire.api_keys import FETCH, PRODUCE, api_name
from .http_guard import (HEADER_TIMEOUT_S, IDLE_TIMEOUT_S, GuardedHandler, GuardedHTTPServer,
                         basic_credentials)

log = logging.getLogger("kafkastore.serve.metrics")

_I32 = struct.Struct(">i")
#: The metrics listener's connection caps (a scraper needs one or two).
DEFAULT_METRICS_MAX_CONNECTIONS = 64
DEFAULT_METRICS_MAX_CONNECTIONS_PER_IP = 16
_LATENCY_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)


def batch_records(data) -> int:
    """Records in a concatenation of record batches (the count field of each v2 header)."""
    total, pos, n = 0, 0, len(data)
    while pos + 61 <= n:
        length = _I32.unpack_from(data, pos + 8)[0]
        if length < 49:
            break
        total += max(_I32.unpack_from(data, pos + 57)[0], 0)
        pos += 12 + length
    return total


def _records_of(partitions) -> tuple[int, int]:
    """(bytes, records) of the record sets of a topic's partitions (Produce's or Fetch's)."""
    nbytes = nrecords = 0
    for p in partitions:
        if p.records:
            nbytes += len(p.records)
            nrecords += batch_records(p.records)
    return nbytes, nrecords


class BrokerMetrics:
    """The metrics of one :class:`~kafkastore.protocol.server.BrokerServer`."""

    def __init__(self, server):
        self.server = server
        self.registry = reg = CollectorRegistry(auto_describe=True)
        self.bytes_in = Counter("kafkastore_bytes_in", "Record-batch bytes produced, per topic",
                                ["topic"], registry=reg)
        self.records_in = Counter("kafkastore_records_in", "Records produced, per topic",
                                  ["topic"], registry=reg)
        self.bytes_out = Counter("kafkastore_bytes_out", "Record-batch bytes fetched, per topic",
                                 ["topic"], registry=reg)
        self.records_out = Counter("kafkastore_records_out", "Records fetched, per topic",
                                   ["topic"], registry=reg)
        self.requests = Counter("kafkastore_requests", "Requests answered, per API and version",
                                ["api", "version"], registry=reg)
        self.errors = Counter("kafkastore_request_errors",
                              "Requests whose response holds an error code, per API and version",
                              ["api", "version"], registry=reg)
        self.latency = Histogram("kafkastore_request_latency_seconds",
                                 "Time from a request's decoding to its response, per API",
                                 ["api"], buckets=_LATENCY_BUCKETS, registry=reg)
        self.throttle = Counter("kafkastore_throttle_time_seconds",
                                "Time clients were throttled, per quota and matched entity",
                                ["quota", "entity", "user", "client_id"], registry=reg)
        self.commit_latency = Histogram("kafkastore_commit_latency_seconds",
                                        "Time of one produce commit (upload + manifest version)",
                                        buckets=_LATENCY_BUCKETS, registry=reg)
        self.refused_produce = Counter("kafkastore_refused_produce_partitions",
                                       "Produce partitions refused (unknown or unauthorized "
                                       "topic, or any error); their bytes are not bytes in",
                                       registry=reg)
        reg.register(_LiveCollector(server))
        ProcessCollector(registry=reg)
        self._httpd = None
        self._thread: threading.Thread | None = None

    # -- recording (event loop) ---------------------------------------------------
    def observe_request(self, api_key: int, version: int, seconds: float, request, response) -> None:
        """Count one answered request (``response`` None: none was sent, Produce acks=0)."""
        name = api_name(api_key)
        self.requests.labels(name, str(version)).inc()
        self.latency.labels(name).observe(seconds)
        if response is not None and _has_error(response):
            self.errors.labels(name, str(version)).inc()
        if api_key == PRODUCE:
            self._observe_produce(request, response)
        elif api_key == FETCH and response is not None:
            for t in getattr(response, "responses", ()) or ():
                nbytes, nrecords = _records_of(t.partitions)
                if nbytes:
                    topic = getattr(t, "topic", None) or self._topic_of_id(getattr(t, "topic_id", None))
                    self.bytes_out.labels(topic).inc(nbytes)
                    self.records_out.labels(topic).inc(nrecords)

    def _observe_produce(self, request, response) -> None:
        """Bytes in per topic, only for partitions the broker accepted: a refused partition (an
        unknown or unauthorized topic) is counted apart without its name, so made-up names never
        become label sets."""
        accepted = _accepted_partitions(response)
        for t in getattr(request, "topic_data", ()) or ():
            topic = t.name or self._topic_of_id(getattr(t, "topic_id", None))
            for pd in t.partition_data:
                nbytes, nrecords = _records_of((pd,))
                if accepted is None:   # acks=0: no answer; label only topics the broker knows
                    known = self.server.meta.topic_if_fresh(topic)
                    ok = known is not None and hasattr(known, "partitions")
                else:
                    ok = (topic, int(pd.index)) in accepted
                if ok:
                    self.bytes_in.labels(topic).inc(nbytes)
                    self.records_in.labels(topic).inc(nrecords)
                else:
                    self.refused_produce.inc()

    def _topic_of_id(self, topic_id) -> str:
        if topic_id is None:
            return "unknown"
        find = getattr(self.server.meta, "topic_name_for_id", None)
        name = find(topic_id) if find is not None else None
        return name or str(topic_id)

    def observe_throttle(self, quota: str, match, user: str, client_id: str, seconds: float) -> None:
        """Count throttle time given for ``quota`` to a client matched by ``match``."""
        self.throttle.labels(quota, match.entity, match.sensor[0], match.sensor[1]).inc(seconds)

    # -- serving -----------------------------------------------------------------
    def serve(self, host: str, port: int, ssl_context=None, *, auth=None,
              max_connections: int = DEFAULT_METRICS_MAX_CONNECTIONS,
              max_connections_per_ip: int = DEFAULT_METRICS_MAX_CONNECTIONS_PER_IP,
              header_timeout_s: float = HEADER_TIMEOUT_S,
              idle_timeout_s: float = IDLE_TIMEOUT_S) -> int:
        """Serve ``/metrics`` on ``host:port`` (TLS with ``ssl_context``) from a thread; the port.

        Connections are capped at accept (``max_connections``, ``max_connections_per_ip``;
        when full, the oldest one that never sent complete headers makes room), a request's
        headers are due within ``header_timeout_s`` (which bounds a TLS handshake too) and an
        idle connection is closed after ``idle_timeout_s``. With ``auth`` (a
        :class:`~kafkastore.protocol.http_guard.BasicAuth`: the broker requires SASL) a
        scrape needs HTTP basic auth as a SASL user, checked before any metric is read."""
        try:
            httpd = _MetricsServer((host, port), _MetricsHandler, registry=self.registry, auth=auth,
                                   ssl_context=ssl_context, max_connections=max_connections,
                                   max_connections_per_ip=max_connections_per_ip,
                                   header_timeout_s=header_timeout_s, idle_timeout_s=idle_timeout_s,
                                   clock=self.server.clock)
        except OSError as exc:
            raise ListenError(f"cannot listen for metrics on {host}:{port}: "
                              f"{exc.strerror or exc}") from None
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="kafkastore-metrics", daemon=True)
        self._thread.start()
        return httpd.server_address[1]

    @property
    def listener(self) -> "_MetricsServer | None":
        """The metrics HTTP server (its connection counters), None when not serving."""
        return self._httpd

    def close(self) -> None:
        """Stop serving."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class _MetricsServer(GuardedHTTPServer):
    def __init__(self, addr, handler, *, registry, auth, **limits):
        self.registry, self.auth = registry, auth
        super().__init__(addr, handler, **limits)


class _MetricsHandler(GuardedHandler):
    server: _MetricsServer
    server_version = "kafkastore-metrics"

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        log.debug("metrics: " + format, *args)

    def do_GET(self):  # noqa: N802 - http.server's names
        if not self._authenticated():
            return
        if urlsplit(self.path).path == "/favicon.ico":
            self._reply(404, "text/plain", b"Not Found")
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept"))
        self._reply(200, content_type, encoder(self.server.registry))

    def _authenticated(self) -> bool:
        """Basic auth before any work (no metric is read for an unauthenticated caller); a
        failed or over-budget try closes the connection."""
        auth = self.server.auth
        if auth is None:
            return True
        user, password = basic_credentials(self.headers.get("Authorization")) or (None, "")
        if user is not None and auth.cached(user, password):
            return True
        self.close_connection = True
        ip = str(self.client_address[0])
        wait = auth.retry_after(ip)
        if wait:
            self._reply(429, "text/plain", b"Too many failed logins from this address",
                        {"Retry-After": str(wait)})
            return False
        if user is not None and auth.check(user, password, ip):
            self.close_connection = False
            return True
        if user is None:
            auth.check("", "\0", ip)   # a missing or malformed header is a failure too
        self._reply(401, "text/plain", b"Unauthorized",
                    {"WWW-Authenticate": 'Basic realm="kafkastore"'})
        return False

    def _reply(self, status: int, content_type: str, body: bytes, headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


def _has_error(entity, depth: int = 0) -> bool:
    """Whether any ``error_code`` in a response (to three levels down) is not NONE."""
    if depth > 3 or not dataclasses.is_dataclass(entity):
        return False
    code = getattr(entity, "error_code", None)
    if code is not None and int(code) != 0:
        return True
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            if any(_has_error(v, depth + 1) for v in value):
                return True
    return False


class _LiveCollector:
    """What is read at scrape time: connections, commits, groups and their lag."""

    def __init__(self, server):
        self.server = server

    def describe(self):
        return []

    def collect(self):
        server = self.server
        yield GaugeMetricFamily("kafkastore_connections", "Live client connections",
                                value=len(server._conns))
        appender = server.appender
        yield CounterMetricFamily("kafkastore_commits", "Produce commits that landed",
                                  value=appender.commits)
        conflicts = max(getattr(appender, "commit_attempts", 0) - appender.commits
                        - server.commit_failures, 0)
        yield CounterMetricFamily("kafkastore_commit_conflicts",
                                  "Produce commit attempts that lost a race and were planned again",
                                  value=conflicts)
        states = GaugeMetricFamily("kafkastore_group_state",
                                   "1 for the state each group this broker coordinates is in",
                                   labels=["group", "state"])
        lag = GaugeMetricFamily("kafkastore_group_lag",
                                "High watermark minus the committed offset, per group and partition",
                                labels=["group", "topic", "partition"])
        svc = server.services.group_service
        if svc is not None:
            coordinator = svc.coordinator
            for group, _ptype, state in coordinator.list_groups():
                states.add_metric([group, state], 1)
                for (topic, partition), om in sorted(coordinator.fetch_offsets(group).items()):
                    offset = getattr(om, "offset", None)
                    if offset is None or offset < 0:
                        continue
                    try:
                        hw = server.meta.manifest(topic, partition, 5.0).high_watermark
                    except Exception:  # noqa: BLE001 - a deleted or unreadable partition: no lag
                        continue
                    lag.add_metric([group, topic, str(partition)], max(hw - offset, 0))
        yield states
        yield lag


def _accepted_partitions(response) -> set | None:
    """``{(topic, partition)}`` a Produce response answered without error; None for acks=0."""
    if response is None:
        return None
    return {(t.name, int(p.index)) for t in getattr(response, "responses", ()) or ()
            for p in t.partition_responses if int(p.error_code) == 0}
