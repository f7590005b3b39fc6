"""HTTP listeners that nothing unauthenticated can exhaust: the schema registry's and the
metrics listener's (:class:`GuardedHTTPServer`, :class:`GuardedHandler`), and HTTP basic auth
against the broker's SASL users whose guessing is bounded (:class:`BasicAuth`).

One thread per connection, but connections are capped at accept (in all and per address),
a request's headers have a deadline from their first byte (not a per-read timeout a byte
every few seconds renews), an idle keep-alive connection is closed, a TLS handshake runs on
the connection's thread under the header deadline, and a full listener drops the oldest
connection that never sent complete headers for a newcomer.
"""
from __future__ import annotations

import hashlib
import hmac
import io
import logging
import math
import os
import socket
import ssl as ssl_lib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..clock import SYSTEM
from ..cluster import scram  # scram.salted_password read at call time (tests count the KDF runs)
from ..cluster.scram import DEFAULT_ITERATIONS, MECHANISMS, credential_from_salted
from ..errors import KafkaStoreError

log = logging.getLogger("kafkastore.http")

#: Seconds a request's line and headers may take once its first byte arrived (also bounds a
#: TLS handshake): a client dribbling bytes is cut off, not renewed by each byte.
HEADER_TIMEOUT_S = 10.0
#: A connection that has not completed a request's headers after this many seconds may be
#: dropped to make room for a new one when the listener is full.
EVICTABLE_AFTER_S = 0.02
#: Seconds a keep-alive connection may wait for its next request.
IDLE_TIMEOUT_S = 30.0


class FailedLogins:
    """Failed logins per client address in a sliding window: past ``max_failures`` within
    ``window_s`` an address is refused (:meth:`retry_after`) before any credential is checked,
    so guessing from one address costs the broker next to nothing. Shared by the registry's
    and the metrics listener's basic auth and by SASL on the Kafka listener. Thread-safe; at
    most ``max_addresses`` addresses are remembered (the oldest is forgotten first)."""

    def __init__(self, max_failures: int = 10, window_s: float = 10.0, *, clock=None,
                 max_addresses: int = 10_000):
        self.max_failures, self.window_s = max_failures, window_s
        self.max_addresses = max_addresses
        self._clock = clock or SYSTEM
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, address: str) -> int:
        """Seconds ``address`` must wait before its next try (0: it may try now)."""
        now = self._clock.monotonic_s()
        with self._lock:
            recent = [t for t in self._failures.get(address, ()) if now - t < self.window_s]
            if recent:
                self._failures[address] = recent
            else:
                self._failures.pop(address, None)
            if len(recent) >= self.max_failures:
                return max(1, math.ceil(self.window_s - (now - recent[0])))
            return 0

    def failed(self, address: str) -> None:
        """Count one failed login of ``address``."""
        now = self._clock.monotonic_s()
        with self._lock:
            if address not in self._failures and len(self._failures) >= self.max_addresses:
                self._failures.pop(next(iter(self._failures)))   # the oldest address
            self._failures.setdefault(address, []).append(now)


class BasicAuth:
    """HTTP basic auth against the broker's SASL users: the ``user:password`` file
    (``credentials``) and, with ``scram_users``, the root's SCRAM users (``kafkastore users``),
    whose stored keys a password is checked against (RFC 5802).

    Guessing is bounded and tells nothing: a name without a SCRAM credential is checked
    against a made-up one with the default iteration count, so an unknown name costs the same
    PBKDF2 work (and time) as a known name with a wrong password; at most ``kdf_slots``
    PBKDF2 runs at once; a verified password is remembered ``cache_ttl_s`` (keyed by a keyed
    hash of user and password, together with the credential it matched, so a changed or
    removed SCRAM user stops matching as soon as :class:`ScramUsers` re-reads it); an
    address whose failures exceed ``max_failures`` in ``failure_window_s`` is answered 429
    (:meth:`retry_after`) before any PBKDF2 runs, and so is any unverified try past
    ``max_checks_per_s`` over all addresses (guesses from many addresses cost the broker at
    most that many PBKDF2 checks a second; credentials already verified are not counted)."""

    _MAX_REMEMBERED = 1024
    _MAX_ADDRESSES = 10_000

    def __init__(self, credentials: dict | None = None, scram_users=None, *,
                 cache_ttl_s: float = 60.0, max_failures: int = 10, failure_window_s: float = 10.0,
                 kdf_slots: int = 2, max_checks_per_s: float = 50.0, clock=None):
        self.credentials = credentials or {}
        self.scram_users = scram_users
        self.cache_ttl_s = cache_ttl_s
        self.max_failures, self.failure_window_s = max_failures, failure_window_s
        self._clock = clock or SYSTEM
        self._secret = os.urandom(32)
        self._ok: dict[bytes, tuple[float, tuple]] = {}
        self.failures = FailedLogins(max_failures, failure_window_s, clock=self._clock,
                                     max_addresses=self._MAX_ADDRESSES)
        self._lock = threading.Lock()
        self._kdf = threading.BoundedSemaphore(kdf_slots)
        self.max_checks_per_s = max_checks_per_s
        self._tokens, self._tokens_at = max_checks_per_s, self._clock.monotonic_s()

    # -- the per-address failure budget ----------------------------------------------------
    def retry_after(self, address: str) -> int:
        """Seconds ``address`` must wait before its next unverified try (0: it may try now,
        and one check of the budget is taken)."""
        wait = self.failures.retry_after(address)
        if wait:
            return wait
        now = self._clock.monotonic_s()
        with self._lock:
            # The budget of unverified checks over all addresses (a token bucket).
            self._tokens = min(self.max_checks_per_s,
                               self._tokens + (now - self._tokens_at) * self.max_checks_per_s)
            self._tokens_at = now
            if self._tokens < 1:
                return 1
            self._tokens -= 1
            return 0

    def _failed(self, address: str) -> None:
        self.failures.failed(address)

    # -- checking --------------------------------------------------------------------------
    def _cache_key(self, user: str, password: str) -> bytes:
        text = (user + "\0" + password).encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, text, hashlib.sha256).digest()

    def _dummy(self, mech: str, user: str):
        salt = hmac.new(self._secret, b"salt:" + user.encode("utf-8", "surrogatepass"),
                        hashlib.sha256).digest()[:16]
        return credential_from_salted(mech, salt, DEFAULT_ITERATIONS, b"\0" * 64)

    def cached(self, user: str, password: str) -> bool:
        """Whether this user and password were verified within ``cache_ttl_s`` against the
        credentials in hand now (no PBKDF2)."""
        if self.credentials.get(user) is not None and \
                hmac.compare_digest(self.credentials[user].encode(), password.encode()):
            return True
        if self.scram_users is None:
            return False
        hit = self._ok.get(self._cache_key(user, password))
        if hit is None or self._clock.monotonic_s() - hit[0] >= self.cache_ttl_s:
            return False
        return self._current(user) == hit[1]

    def _current(self, user: str) -> tuple:
        """The user's SCRAM credentials now (re-read when older than ScramUsers' bound)."""
        return tuple(self.scram_users.lookup(user, mech) for mech in MECHANISMS)

    def check(self, user: str, password: str, address: str = "") -> bool:
        """Whether ``password`` is ``user``'s; a failure counts against ``address``."""
        ok = self._check(user, password)
        if not ok:
            self._failed(address)
        return ok

    def _check(self, user: str, password: str) -> bool:
        if self.cached(user, password):
            return True
        if self.scram_users is None:
            # No SCRAM: the file's comparison above is all there is (no PBKDF2 to equalize).
            return False
        try:
            creds = self._current(user)
        except KafkaStoreError as exc:   # the root unreadable: the file's users still log in
            log.warning("cannot read SCRAM users: %s", exc)
            return False
        matched = False
        # The same work whether or not the user exists: every mechanism is checked, a
        # missing credential against a made-up one with the default iteration count.
        with self._kdf:
            for mech, cred in zip(MECHANISMS, creds):
                target = cred if cred is not None else self._dummy(mech, user)
                salted = scram.salted_password(mech, password, target.salt, target.iterations)
                good = hmac.compare_digest(
                    credential_from_salted(mech, target.salt, target.iterations, salted).stored_key,
                    target.stored_key)
                matched = matched or (good and cred is not None)
        if matched:
            with self._lock:
                if len(self._ok) >= self._MAX_REMEMBERED:
                    self._ok.clear()
                self._ok[self._cache_key(user, password)] = (self._clock.monotonic_s(), creds)
        return matched



class DeadlineReader(io.RawIOBase):
    """A connection's reads, each bounded by the handler's current deadline (a total for the
    request's headers or body, not a per-read timeout a byte every few seconds renews)."""

    def __init__(self, sock, handler: "GuardedHandler"):
        self._sock, self._handler = sock, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        remaining = self._handler.deadline - self._handler.server.clock.monotonic_s()
        if remaining <= 0:
            raise socket.timeout("request read deadline passed")
        self._sock.settimeout(remaining)
        n = self._sock.recv_into(buf)
        self._handler.got_bytes()
        return n



class GuardedHTTPServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` whose connections are bounded: counted at accept (before any
    TLS handshake or read) against ``max_connections`` in all and ``max_connections_per_ip``
    from one address; when full, the oldest connection that never completed a request's
    headers is dropped for the newcomer; TLS handshakes run on the connection's own thread
    under the header deadline. With :class:`GuardedHandler` a request's headers are due
    within ``header_timeout_s`` of its first byte and a kept-alive connection may idle
    ``idle_timeout_s`` between requests, so a thread is never held longer than that by a
    client that sends nothing or dribbles."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, *, ssl_context, max_connections, max_connections_per_ip,
                 header_timeout_s=HEADER_TIMEOUT_S, idle_timeout_s=IDLE_TIMEOUT_S, clock=None):
        self.ssl_context = ssl_context
        self.max_connections, self.max_connections_per_ip = max_connections, max_connections_per_ip
        self.header_timeout_s, self.idle_timeout_s = header_timeout_s, idle_timeout_s
        self.clock = clock or SYSTEM
        #: Open connections: socket -> [address, accepted at, still reading its first request].
        self._conns: dict = {}
        self._per_ip: dict[str, int] = {}
        self._conn_lock = threading.Lock()
        self.refused_connections = self.accepted_connections = self.evicted_connections = 0
        host = addr[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    # -- connection budget: counted at accept, before any TLS handshake or read -------------
    def _admit(self, request, ip: str) -> bool:
        with self._conn_lock:
            if self._per_ip.get(ip, 0) >= self.max_connections_per_ip:
                return False
            if len(self._conns) >= self.max_connections and not self._evict_unproven():
                return False
            # The descriptor, not the socket object: a TLS wrap detaches the object from it.
            self._conns[request] = [ip, self.clock.monotonic_s(), True, request.fileno()]
            self.accepted_connections += 1
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
            return True

    def _evict_unproven(self) -> bool:
        """Make room by dropping the oldest connection that never completed an authenticated
        request and has been at it over :data:`EVICTABLE_AFTER_S` (a legitimate client sends
        its headers at once; a slow one is what a slowloris holds). Caller holds
        ``_conn_lock``."""
        now = self.clock.monotonic_s()
        oldest = None
        for sock, (_ip, since, unproven, _fd) in self._conns.items():
            if unproven and now - since > EVICTABLE_AFTER_S and (oldest is None or since < self._conns[oldest][1]):
                oldest = sock
        if oldest is None:
            return False
        fd = self._conns[oldest][3]
        self._forget(oldest)
        self.evicted_connections += 1
        # Shut down through the descriptor (still open: a connection's thread forgets it
        # under this lock before closing it), so a socket wrapped for TLS, or in the middle of
        # its handshake, is cut off too: its thread sees EOF and ends.
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.detach()
        return True

    def _forget(self, request) -> None:
        entry = self._conns.pop(request, None)
        if entry is not None:
            left = self._per_ip.get(entry[0], 1) - 1
            if left:
                self._per_ip[entry[0]] = left
            else:
                self._per_ip.pop(entry[0], None)

    def proven(self, request) -> None:
        """``request``'s connection made an authenticated request: never evicted."""
        with self._conn_lock:
            entry = self._conns.get(request)
            if entry is not None:
                entry[2] = False

    def open_connections(self) -> int:
        """Connections held now."""
        with self._conn_lock:
            return len(self._conns)

    def process_request(self, request, client_address):
        if not self._admit(request, str(client_address[0])):
            self.refused_connections += 1
            self.shutdown_request(request)  # over a cap: refused at once
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._conn_lock:
                self._forget(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._conn_lock:
                self._forget(request)

    def finish_request(self, request, client_address):
        raw = request
        request.settimeout(self.header_timeout_s)   # also bounds a TLS handshake
        # Headers and body go out in two writes: without NODELAY, Nagle holds the body until
        # the client's delayed ACK (40 ms per request on a keep-alive connection).
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        try:
            if self.ssl_context is not None:
                # The handshake runs on the connection's thread, not the accepting one.
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True)
                except (ssl_lib.SSLError, OSError) as exc:
                    log.debug("TLS handshake with %s failed: %s", client_address, exc)
                    with self._conn_lock:   # before the failed wrap (in exc) closes the descriptor
                        self._forget(raw)
                    return
            self.RequestHandlerClass(request, client_address, self, raw)
        finally:
            # Forgotten before its descriptor is closed (an eviction shuts down by descriptor).
            with self._conn_lock:
                self._forget(raw)
            if request is not raw:
                request.close()

    def handle_error(self, request, client_address):
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class GuardedHandler(BaseHTTPRequestHandler):
    """A request handler for :class:`GuardedHTTPServer`: reads bounded by deadlines (idle
    between requests, headers once the first byte arrived); a request whose headers are in
    is no longer a candidate for eviction."""

    server: GuardedHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = None   # reads are bounded by deadlines (DeadlineReader)

    def __init__(self, request, client_address, server, raw=None):
        self._raw = raw if raw is not None else request
        self.deadline = server.clock.monotonic_s() + server.header_timeout_s
        self._phase = "idle"
        super().__init__(request, client_address, server)

    def setup(self):
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self), 1 << 16)

    def got_bytes(self) -> None:
        """The first bytes of a request arrived: its headers are due within the header
        deadline (a keep-alive connection may idle longer between requests)."""
        if self._phase == "idle":
            self._phase = "headers"
            self.deadline = self.server.clock.monotonic_s() + self.server.header_timeout_s

    def handle_one_request(self):
        self._phase = "idle"
        self.deadline = self.server.clock.monotonic_s() + self.server.idle_timeout_s
        try:
            super().handle_one_request()
        except (ConnectionError, socket.timeout, ssl_lib.SSLError):
            self.close_connection = True

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            # Its headers are in: no longer a candidate for eviction while it is handled.
            self.server.proven(self._raw)
        return ok


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` of an ``Authorization: Basic`` header, None if absent or malformed."""
    import base64

    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if sep else None
