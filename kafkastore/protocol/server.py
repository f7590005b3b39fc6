"""The broker server: one asyncio event loop, storage I/O in a thread pool.

The server listens, admits connections (the limits below), registers the broker and runs
its background tasks (heartbeat, quota and ACL refresh); each accepted connection is a
:class:`~kafkastore.protocol.connection.Connection`, which reads frames (int32 size +
request), decodes them with :mod:`kafkastore.protocol.wire.codec`, runs the handler
registered for the API key and version (:mod:`kafkastore.protocol.handler_table`) and writes the
responses in request order. Requests of one connection are handled concurrently (clients
pipeline up to ``max.in.flight`` requests); a produce handler hands its
batches to the :class:`~kafkastore.protocol.appender.Appender` before its
first ``await``, and tasks start in creation order, so appends to a
partition keep the order in which they arrived.

Bad input never crashes the server: an oversized or malformed frame, an
unknown API key or version (except ApiVersions, which answers
UNSUPPORTED_VERSION as Kafka does) closes that connection; handler errors are
logged and close the connection; a response is written whole or not at all
(one ``write`` of the framed bytes). Every body is walked by its schema before
it is decoded (:mod:`~kafkastore.protocol.wire.frame_check`), so no length it
claims can make the decoder allocate more than the frame holds.

Resources a client can hold are bounded: requests before SASL authentication
are at most 512 KB (Kafka's limit), after it ``max_request_bytes``; the
request bytes a connection has read and not yet answered stay under
``max_request_bytes`` (the next request is read when room is made); new
connections beyond ``max_connections`` or ``max_connections_per_ip`` are
closed; a connection that sent nothing for ``connections_max_idle_ms`` while
none of its requests was being handled is closed.
"""
from __future__ import annotations

import asyncio
import logging
import ssl as ssl_lib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable

from ..clock import Clock
from ..errors import ListenError
from ..storage import Storage
from . import fencing, listeners
from .connection import (Connection, PreAuthBudget, close_quietly, current_request_time,
                         pre_auth_expired)
from .handler_table import HandlerTable
from .services import BrokerServices
from ..cluster.acls import acl_document
from ..cluster.documents import ClusterDocument
from ..format.record_batch import Record, encode_batch
from .apis.users import scram_users
from .authorizer import Authorizer
from .caches.data_watch import DataWatch
from .http_guard import BasicAuth, FailedLogins
from .quotas import QuotaManager
from ..maintenance.housekeeper import housekeeper_for

log = logging.getLogger("kafkastore.serve")

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_MAX_CONNECTIONS = 1000           # Kafka's max.connections (Kafka: unlimited)
DEFAULT_MAX_CONNECTIONS_PER_IP = 500     # Kafka's max.connections.per.ip (Kafka: unlimited)
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms (10 minutes)
#: Until a connection has authenticated (and finished its TLS handshake) it has its own budget,
#: so idle unauthenticated sockets can never take the slots authenticated clients need.
DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS = 200
DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS_PER_IP = 20
#: Time a connection has from accept to complete its TLS handshake and SASL authentication.
DEFAULT_SASL_AUTH_TIMEOUT_MS = 10_000
DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS = 10_000
DEFAULT_SASL_MAX_FAILED_LOGINS_PER_IP = 50
DEFAULT_SASL_FAILED_LOGIN_WINDOW_MS = 10_000


@dataclass(frozen=True)
class ServeOptions:
    """How a broker listens and commits (``kafkastore serve`` flags)."""

    host: str = "127.0.0.1"
    port: int = 9092
    advertise_host: str | None = None
    advertise_port: int | None = None
    node_id: int | None = None
    commit_interval_ms: float = 5.0
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    heartbeat_ms: int = 1000
    ssl_context: ssl_lib.SSLContext | None = None
    credentials: dict | None = None   # SASL users: {user: password}
    #: Require SASL even without ``credentials``: SCRAM users stored under the root
    #: (``kafkastore users``) log in (``--sasl``).
    sasl: bool = False
    insecure: bool = False
    auto_create_topics: bool = False
    default_partitions: int = 1
    io_threads: int = 8
    fetch_cache_bytes: int = 64 << 20
    #: How often a partition that fetches wait on is checked for other brokers' commits
    #: (one manifest-head read per partition, shared by all its waiting fetches).
    fetch_poll_ms: float = 250.0
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    connections_max_idle_ms: float = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    max_unauthenticated_connections: int = DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS
    max_unauthenticated_connections_per_ip: int = DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS_PER_IP
    sasl_auth_timeout_ms: float = DEFAULT_SASL_AUTH_TIMEOUT_MS
    tls_handshake_timeout_ms: float = DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS
    #: Failed SASL logins one address may make in ``sasl_failed_login_window_ms``; past them
    #: its new connections are closed at accept and its logins refused unchecked until the
    #: oldest failure leaves the window (guessing costs the broker next to nothing).
    sasl_max_failed_logins_per_ip: int = DEFAULT_SASL_MAX_FAILED_LOGINS_PER_IP
    sasl_failed_login_window_ms: float = DEFAULT_SASL_FAILED_LOGIN_WINDOW_MS
    #: Longest ``transaction.timeout.ms`` a transactional producer may ask for (Kafka's
    #: ``transaction.max.timeout.ms``); more is INVALID_TRANSACTION_TIMEOUT.
    transaction_max_timeout_ms: int = 900_000
    #: Client quotas' rate sensors: Kafka's quota.window.size.seconds and quota.window.num.
    quota_window_s: float = 1.0
    quota_samples: int = 11
    #: How often the root's shared quotas are re-read: a change made on any broker applies
    #: on this one within about this long.
    quota_refresh_s: float = 1.0
    #: ``(host, port)`` of the Prometheus metrics listener (``--metrics-listen``); None: off.
    metrics_listen: tuple[str, int] | None = None
    #: The metrics listener's connections in all and per address (counted at accept, TLS
    #: handshakes included), the time a request's headers (and a TLS handshake) may take, and
    #: how long a kept-alive scrape connection may idle.
    metrics_max_connections: int = 64
    metrics_max_connections_per_ip: int = 16
    metrics_header_timeout_ms: float = 10_000
    metrics_idle_timeout_ms: float = 30_000
    #: ``(host, port)`` of the schema registry's HTTP listener (``--schema-registry-listen``,
    #: :mod:`kafkastore.schema_registry`); None: off. Same TLS, credentials and loopback rule.
    schema_registry_listen: tuple[str, int] | None = None
    #: Check every request against the root's ACLs (``--authorizer``; Kafka's StandardAuthorizer).
    authorizer: bool = False
    #: Principals allowed everything (``--super-users User:admin,...``).
    super_users: tuple = ()
    #: How soon an ACL change made on another broker of the root applies here.
    acl_max_age_s: float = 2.0


def check_listener_security(opts: ServeOptions) -> None:
    """The listener rules of :mod:`~kafkastore.protocol.listeners` applied to a broker's
    options: its Kafka listener and, when on, its metrics listener."""
    listeners.check_listener_security(
        opts.host, tls=opts.ssl_context is not None, sasl=sasl_enabled(opts),
        insecure=opts.insecure,
        metrics_host=opts.metrics_listen[0] if opts.metrics_listen is not None else None)


def sasl_enabled(opts: ServeOptions) -> bool:
    """Whether clients must authenticate with SASL (``--sasl`` or ``--sasl-credentials``)."""
    return listeners.sasl_enabled(opts.sasl, opts.credentials)


def security_protocol(opts: ServeOptions) -> str:
    """Kafka's name for a broker's listener security (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
    return listeners.security_protocol(sasl=sasl_enabled(opts), tls=opts.ssl_context is not None)


class BrokerServer:
    """A Kafka-protocol broker over one kafkastore root."""

    def __init__(self, storage: Storage, options: ServeOptions | None = None, *,
                 extensions: Iterable[Callable[[HandlerTable], None]] = (), clock: Clock | None = None):
        # lazy: the API families import the whole protocol; importing the server module
        # (ServeOptions, the listener rules) must not
        from . import families
        from .appender import Appender
        from .membership import BrokerMembership
        from .caches.fetch_cache import RangeCache
        from .coordinators.producer_ids import ProducerIdAllocator
        from .caches.metadata_cache import MetadataCache

        self.options = opts = options or ServeOptions()
        check_listener_security(opts)
        self.storage = storage
        #: The one clock every part of this broker reads (default: the storage's).
        self.clock: Clock = clock or storage.clock
        self.services = BrokerServices(spawn=self._spawn)
        self.registry = HandlerTable()
        families.register_families(self.registry, sasl_enabled=sasl_enabled(opts),
                                   extensions=extensions)
        self.pool = ThreadPoolExecutor(max_workers=opts.io_threads, thread_name_prefix="kafkastore-io")
        # The lease's own thread: a heartbeat queued behind commits that a slow store holds
        # in every I/O thread would lapse the lease of a broker that was never paused.
        self._lease_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkastore-lease")
        # The shared documents' reads (ACLs, quotas) likewise: a request that finds them past
        # their freshness bound waits for a re-read, which must not queue behind commits.
        self._documents_pool = ThreadPoolExecutor(max_workers=2,
                                                  thread_name_prefix="kafkastore-documents")
        self.authorizer = None
        if opts.authorizer:
            self.authorizer = Authorizer(acl_document(storage, max_age_s=opts.acl_max_age_s),
                                         opts.super_users, submit=self._documents_pool.submit,
                                         max_age_s=opts.acl_max_age_s, clock=self.clock)
        self.meta = MetadataCache(storage)
        self.appender = Appender(self)
        self.range_cache = RangeCache(storage, opts.fetch_cache_bytes)
        self.brokers = BrokerMembership(storage, heartbeat_ms=opts.heartbeat_ms, clock=self.clock)
        self.producer_ids = ProducerIdAllocator(storage, owner=self.brokers.instance,
                                                clock=self.clock)
        #: The root's shared client quotas and this broker's enforcement of them.
        self.quota_document = ClusterDocument(storage, "quotas", max_age_s=opts.quota_refresh_s)
        self.quotas = QuotaManager(window_s=opts.quota_window_s, samples=opts.quota_samples)
        self._refreshers: list = []   # the shared documents' refreshers (started in start())
        self.commit_failures = 0
        self.metrics = None
        self.metrics_port: int | None = None
        #: Failed SASL logins per client address (apis/sasl.py counts them, accept refuses past them).
        self.failed_logins = FailedLogins(opts.sasl_max_failed_logins_per_ip,
                                          opts.sasl_failed_login_window_ms / 1000, clock=self.clock)
        if opts.metrics_listen is not None:
            # lazy: only --metrics-listen loads prometheus_client and the metrics listener
            from .metrics import BrokerMetrics
            self.metrics = BrokerMetrics(self)
            self._time_commits()
        self.node_id: int = -1
        self.cluster_id = "kafkastore"
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._conns: set[asyncio.StreamWriter] = set()
        self._per_ip: dict[str, int] = {}
        #: Unauthenticated connections, in all, per address and in accept order.
        self.pre_auth = PreAuthBudget()
        self.refused_connections = 0
        #: Most request bytes one connection has had in flight (read, not yet answered).
        self.peak_connection_bytes = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port: int = opts.port
        self.data_watch = DataWatch(self._read_versions,
                                    lambda tp: self.meta.cached_version(tp[0], tp[1]),
                                    poll_s=opts.fetch_poll_ms / 1000)
        self.schema_registry = None
        if opts.schema_registry_listen is not None:
            # lazy: `serve` without the schema registry loads no Avro/Protobuf (test_layers)
            from ..schema_registry import SchemaRegistryThread
            self.schema_registry = SchemaRegistryThread(
                storage, *opts.schema_registry_listen, ssl_context=opts.ssl_context,
                credentials=opts.credentials, insecure=opts.insecure, root_users=opts.sasl,
                authorizer=self.authorizer)

    # -- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        """Listen, register under ``_brokers/`` and start heartbeating."""
        opts = self.options
        self.loop = asyncio.get_running_loop()
        try:
            self._server = await asyncio.start_server(
                self._serve_connection, opts.host, opts.port,
                # TLS is started per connection after the caps are checked (at accept, so a
                # stalled handshake holds a counted slot), not by the listener.
                limit=1 << 16, start_serving=False)   # accept only once ready (below)
        except OSError as exc:
            self.pool.shutdown(wait=False)
            raise ListenError(f"cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        host = opts.advertise_host or (opts.host if opts.host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        port = opts.advertise_port or self.port
        self.node_id = await self.run(self.brokers.register, opts.node_id, host, port,
                                      security_protocol(opts))
        await self.run(_warm_up)
        if self.authorizer is not None:
            await self.run(self.authorizer.load)  # before the first request: deny by default
        self.advertised = (host, port)
        self._spawn(self._heartbeat())
        try:
            await self.run(fencing.read_quotas, self)
        except Exception:  # noqa: BLE001 - served without quotas until the next refresh
            log.warning("cannot read the client quotas", exc_info=True)
        self._spawn(self._expire_quota_sensors())
        if self.metrics is not None:
            mhost, mport = opts.metrics_listen
            self.metrics_port = self.metrics.serve(
                mhost, mport, opts.ssl_context, auth=self._metrics_auth(),
                max_connections=opts.metrics_max_connections,
                max_connections_per_ip=opts.metrics_max_connections_per_ip,
                header_timeout_s=opts.metrics_header_timeout_ms / 1000,
                idle_timeout_s=opts.metrics_idle_timeout_ms / 1000)
            log.info("metrics on %s:%d", mhost, self.metrics_port)
        if self.schema_registry is not None:
            self.schema_registry.store.broker_id = self.node_id
            await self.run(self.schema_registry.start)
        # lazy: an API family (imports the coordinators); importing the server module must not
        from .apis import txn as api_txn
        api_txn.service(self)  # from the start: it aborts timed-out transactions dead brokers left
        # ACLs, quotas and SCRAM credentials kept younger than their bound (fencing.py); last,
        # so a start that fails earlier leaves no refresher threads behind.
        self._refreshers = fencing.start_refreshers(
            self, scram_users(self) if sasl_enabled(opts) else None)
        # Registered, ACLs and quotas loaded, services up: only now accept connections (a
        # client connecting earlier waits in the listen backlog, never reaches a half-built
        # broker).
        await self._server.start_serving()
        log.info("broker %d listening on %s:%d (advertised %s:%d)", self.node_id, opts.host,
                 self.port, host, port)

    async def serve_forever(self) -> None:
        """Run until cancelled."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop listening, flush pending appends, deregister."""
        if self._server is not None:
            self._server.close()
        for w in list(self._conns):
            w.close()
        await self.appender.close()
        self.data_watch.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.schema_registry is not None:
            await self.run(self.schema_registry.stop)
        for t in list(self._tasks):
            t.cancel()
        try:
            await self.run(self.brokers.deregister)
        except Exception:  # noqa: BLE001 - best effort: the heartbeat expires anyway
            log.warning("could not deregister broker %d", self.node_id, exc_info=True)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self._lease_pool.shutdown(wait=False, cancel_futures=True)
        self._documents_pool.shutdown(wait=False, cancel_futures=True)
        fencing.stop_refreshers(self._refreshers)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _metrics_auth(self):
        """Basic auth for the metrics listener when clients must authenticate (the SASL users,
        checked as the schema registry checks them); None when the broker has no SASL."""
        if not sasl_enabled(self.options):
            return None
        return BasicAuth(self.options.credentials, scram_users(self), clock=self.clock)

    async def _heartbeat(self) -> None:
        interval = self.options.heartbeat_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.get_running_loop().run_in_executor(self._lease_pool,
                                                                 self.brokers.heartbeat)
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried next interval
                log.warning("broker heartbeat failed", exc_info=True)

    async def _expire_quota_sensors(self) -> None:
        """Forget idle clients' rate sensors now and then (on the event loop, which records
        into them; the quotas themselves are re-read by a refresher, fencing.py)."""
        while True:
            await asyncio.sleep(self.options.quota_refresh_s)
            self.quotas.expire_idle(self.clock.monotonic_s())

    async def fresh_acls(self) -> None:
        """Wait until the ACLs in hand are at most ``acl_max_age_s`` old (after an idle spell,
        a pause or a slow store the background refresh may be behind)."""
        authorizer = self.authorizer
        if authorizer is not None and authorizer.stale():
            await self.run(authorizer.load_if_stale)

    def _time_commits(self) -> None:
        """Observe every produce commit's latency (the metrics' commit histogram)."""
        commit, histogram = self.appender.commit, self.metrics.commit_latency

        def timed(tp, items):
            started = time.perf_counter()
            try:
                return commit(tp, items)
            except BaseException:
                self.commit_failures += 1
                raise
            finally:
                histogram.observe(time.perf_counter() - started)
        self.appender.commit = timed

    async def run(self, fn, *args):
        """Run a blocking function in the I/O thread pool. Its time counts towards the
        request-time quota of the request whose handler called it."""
        loop = asyncio.get_running_loop()
        acc = current_request_time()
        if acc is None:
            return await loop.run_in_executor(self.pool, fn, *args)

        def timed():
            started = time.perf_counter()
            try:
                return fn(*args)
            finally:
                acc.busy += time.perf_counter() - started
        return await loop.run_in_executor(self.pool, timed)

    async def read_document(self, fn, *args):
        """Run a blocking read of a shared document (the ACLs, the client quotas) on the
        documents' own threads, never queued behind the I/O pool's commits: decisions wait
        for these reads when their copies pass the freshness bound."""
        return await asyncio.get_running_loop().run_in_executor(self._documents_pool, fn, *args)

    def live_brokers(self, same_security: bool = False) -> list[tuple[int, str, int]]:
        """``(node_id, host, port)`` of the live brokers (this one always included); with
        ``same_security`` only those whose listener has this one's security protocol (what
        Metadata advertises: a client can only use those)."""
        live = self.brokers.live_cached(security_protocol(self.options) if same_security else None)
        if not any(n == self.node_id for n, _, _ in live):
            live = sorted(live + [(self.node_id, *self.advertised)])
        return live

    def listed_brokers(self, same_security: bool = False) -> list[tuple[int, str, int]]:
        """The brokers Metadata lists: :meth:`live_brokers` plus the recently departed ones
        (:meth:`~kafkastore.protocol.membership.BrokerMembership.listed_cached`)."""
        listed = self.brokers.listed_cached(security_protocol(self.options) if same_security else None)
        live = self.live_brokers(same_security)
        return sorted(set(listed) | set(live))

    # -- data notifications (long poll) ------------------------------------------
    def notify_data(self, tp: tuple[str, int]) -> None:
        """Wake the fetches waiting on partition ``tp`` (called after an append to it commits)."""
        self.data_watch.notify(tp)

    async def _read_versions(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        def read() -> dict[tuple[str, int], int]:
            out = {}
            for topic, partition in tps:
                try:
                    out[(topic, partition)] = self.meta.manifest(topic, partition, 0).version
                except Exception:  # noqa: BLE001 - a deleted or unreadable partition: skip it
                    continue
            return out
        return await self.run(read)

    # -- connections -------------------------------------------------------------
    async def _start_tls(self, writer: asyncio.StreamWriter, peer):
        """A new ``(reader, writer)`` over TLS on an accepted connection, None when the handshake
        fails, times out or the peer goes away (loop.start_tls with fresh streams: the streams'
        own start_tls leaves a writer without a transport when the peer vanishes mid-handshake)."""
        opts = self.options
        reader = asyncio.StreamReader(limit=1 << 16, loop=self.loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=self.loop)
        try:
            transport = await self.loop.start_tls(
                writer.transport, protocol, opts.ssl_context, server_side=True,
                ssl_handshake_timeout=opts.tls_handshake_timeout_ms / 1000)
        except (OSError, asyncio.TimeoutError, ConnectionError, ssl_lib.SSLError) as exc:
            log.info("closing %s: TLS handshake failed: %s", peer, exc)
            return None
        if transport is None:
            return None
        return reader, asyncio.StreamWriter(transport, protocol, reader, self.loop)

    def note_connection_bytes(self, in_flight: int) -> None:
        """Keep the most request bytes one connection has had in flight (``peak_connection_bytes``)."""
        if in_flight > self.peak_connection_bytes:
            self.peak_connection_bytes = in_flight

    def unauthenticated_count(self) -> int:
        """Open connections that have not authenticated yet (TLS handshakes included)."""
        return self.pre_auth.total

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, (tuple, list)) and peer else str(peer)
        opts = self.options
        if len(self._conns) >= opts.max_connections or \
                self._per_ip.get(ip, 0) >= opts.max_connections_per_ip:
            # Kafka's max.connections / max.connections.per.ip: the new connection is closed.
            self.refused_connections += 1
            log.warning("closing %s: %d connections (%d from %s), limits %d and %d per address",
                        peer, len(self._conns), self._per_ip.get(ip, 0), ip, opts.max_connections,
                        opts.max_connections_per_ip)
            writer.close()
            return
        if sasl_enabled(opts) and self.failed_logins.retry_after(ip):
            # Too many failed logins from this address: closed before any work (no TLS, no
            # SASL exchange), so guessing costs an accept and a close.
            self.refused_connections += 1
            log.info("closing %s: too many failed logins from %s", peer, ip)
            writer.close()
            return
        budget = self.pre_auth
        if budget.total >= opts.max_unauthenticated_connections:
            budget.evict_for(ip)
        if budget.total >= opts.max_unauthenticated_connections or \
                budget.held_by(ip) >= opts.max_unauthenticated_connections_per_ip:
            self.refused_connections += 1
            log.warning("closing %s: %d unauthenticated connections (%d from %s), limits %d and "
                        "%d per address", peer, budget.total, budget.held_by(ip),
                        ip, opts.max_unauthenticated_connections,
                        opts.max_unauthenticated_connections_per_ip)
            writer.close()
            return
        self._conns.add(writer)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        pre_auth = budget.take(ip, writer)
        conn = None
        try:
            deadline = self.loop.call_later(opts.sasl_auth_timeout_ms / 1000, pre_auth_expired,
                                            pre_auth, writer, peer)
            streams = reader, writer
            if opts.ssl_context is not None:
                streams = await self._start_tls(writer, peer)
                if streams is None:
                    return
            conn = Connection(self, streams[0], streams[1], pre_auth)
            if conn.authenticated:
                deadline.cancel()
            await conn.run()
        except asyncio.CancelledError:
            pass  # broker shutting down
        except Exception:  # noqa: BLE001 - one connection's failure must not stop the broker
            log.exception("connection from %s failed", peer)
        finally:
            deadline.cancel()
            pre_auth.release()
            if conn is not None and conn.writer is not writer:
                close_quietly(conn.writer)
            self._conns.discard(writer)
            left = self._per_ip.get(ip, 1) - 1
            if left > 0:
                self._per_ip[ip] = left
            else:
                self._per_ip.pop(ip, None)
            writer.close()


def _warm_up() -> None:
    """Load the decoder and Arrow compute kernels now, not in the first client's commit."""
    # lazy: the appender, like the API families, is imported only by a running broker
    from .appender import decoded_min_timestamp

    decoded_min_timestamp(encode_batch([Record(0, 0, None, b"", ())]), "warm-up", 0)


#: How long a clean stop of ``serve`` waits for the housekeeper's step in flight (seconds).
STOP_HOUSEKEEPING_WAIT_S = 10.0


def run_server(storage: Storage, options: ServeOptions, *, ready: Callable[[BrokerServer], None] | None = None,
               extensions: Iterable[Callable[[HandlerTable], None]] = ()) -> None:
    """Run a broker in this thread until interrupted (the CLI's ``serve``)."""
    async def main():
        import signal

        server = BrokerServer(storage, options, extensions=extensions)
        await server.start()
        stop = asyncio.Event()
        # SIGTERM stops gracefully: queued appends are committed and answered first.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        if ready is not None:
            ready(server)
        try:
            await stop.wait()
        finally:
            await server.close()
            # Then the process's housekeeper: its step in flight ends before the interpreter
            # shuts the pools it works on (a clean stop is not a failed merge). Bounded: an
            # unfinished step loses nothing and is planned again by the next writer.
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: housekeeper_for(storage).close(wait=True, timeout_s=STOP_HOUSEKEEPING_WAIT_S))

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass


class BrokerThread:
    """A broker running on its own event loop in a background thread (tests, demo, benchmark).

    ``with BrokerThread(storage, options) as b: ... b.bootstrap ...``
    """

    def __init__(self, storage: Storage, options: ServeOptions | None = None, *,
                 extensions: Iterable[Callable[[HandlerTable], None]] = ()):
        import threading

        self._storage, self._options, self._extensions = storage, options or ServeOptions(port=0), extensions
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kafkastore-broker", daemon=True)
        self._stop: asyncio.Event | None = None
        self.server: BrokerServer | None = None

    def _run(self) -> None:
        async def main():
            try:
                self.server = BrokerServer(self._storage, self._options, extensions=self._extensions)
                await self.server.start()
                self._stop = asyncio.Event()
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.server.close()

        asyncio.run(main())

    def start(self) -> "BrokerThread":
        """Start and wait until the broker listens; re-raises a startup error."""
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        host, port = self.server.advertised
        return f"{host}:{port}"

    def stop(self) -> None:
        """Flush pending appends, stop the broker and join its thread."""
        if self.server is not None and self.server.loop is not None and self._stop is not None:
            self.server.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> "BrokerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
