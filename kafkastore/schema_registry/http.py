"""The registry's HTTP listener: Confluent's REST paths over :class:`SchemaRegistryService`.

A stdlib ``ThreadingHTTPServer`` on its own thread (:class:`SchemaRegistryThread`), one
thread per connection up to ``max_connections``. Security is the Kafka listener's: loopback by
default; any other address needs TLS and credentials (HTTP basic auth against the same
``user:password`` file as SASL) unless ``insecure``. Bad input never crashes it: bodies are
capped at ``max_body_bytes`` (413), malformed JSON is a 400, a body of the wrong shape a 422,
each with Confluent's ``{"error_code", "message"}``; an unexpected failure is a 500 / 50001
and is logged.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import socket
import ssl as ssl_lib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import ConfigError, KafkaStoreError, ListenError, SchemaRegistryError
from ..storage import Storage
from . import formats as F
from .service import SchemaRegistryService
from .store import SchemaStore

log = logging.getLogger("kafkastore.schema_registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
DEFAULT_MAX_BODY_BYTES = 8 << 20
DEFAULT_MAX_CONNECTIONS = 256
#: Seconds a connection may stay silent (also bounds a TLS handshake).
SOCKET_TIMEOUT_S = 30.0


def _flag(query: dict, name: str) -> bool:
    return (query.get(name) or [""])[-1].lower() == "true"


def _arg(query: dict, name: str) -> str | None:
    vals = query.get(name)
    return vals[-1] if vals else None


def _int_id(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0 or n > 2 ** 31 - 1:
        raise SchemaRegistryError(404, 40403, f"Schema {text} not found")
    return n


def _page(items: list, query: dict) -> list:
    """``offset`` / ``limit`` (-1: all) of a list answer, as Confluent pages them."""
    try:
        offset = max(0, int(_arg(query, "offset") or 0))
        limit = int(_arg(query, "limit") or -1)
    except ValueError:
        raise SchemaRegistryError(422, 422, "offset and limit are integers") from None
    return items[offset:] if limit < 0 else items[offset:offset + limit]


class BasicAuth:
    """HTTP basic auth against the broker's SASL users: the ``user:password`` file
    (``credentials``) and, with ``scram_users``, the root's SCRAM users (``kafkastore users``),
    whose stored keys a password is checked against (RFC 5802). A checked password is
    remembered (by its hash, with the credential it matched) so PBKDF2 runs once per
    credential, not per request."""

    _MAX_REMEMBERED = 1024

    def __init__(self, credentials: dict | None = None, scram_users=None):
        self.credentials = credentials or {}
        self.scram_users = scram_users
        self._ok: dict[tuple, bool] = {}
        self._lock = threading.Lock()

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s."""
        want = self.credentials.get(user)
        if want is not None and hmac.compare_digest(want.encode(), password.encode()):
            return True
        if self.scram_users is None:
            return False
        from ..scram_users import MECHANISMS, credential_from_salted, salted_password

        digest = hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()
        for mech in MECHANISMS:
            try:
                cred = self.scram_users.lookup(user, mech)
            except KafkaStoreError as exc:   # the root unreadable: the file's users still log in
                log.warning("cannot read SCRAM users: %s", exc)
                return False
            if cred is None:
                continue
            key = (user, mech, cred.salt, cred.iterations, cred.stored_key, digest)
            with self._lock:
                known = self._ok.get(key)
            if known is None:
                salted = salted_password(mech, password, cred.salt, cred.iterations)
                known = hmac.compare_digest(
                    credential_from_salted(mech, cred.salt, cred.iterations, salted).stored_key,
                    cred.stored_key)
                with self._lock:
                    if len(self._ok) >= self._MAX_REMEMBERED:
                        self._ok.clear()
                    self._ok[key] = known
            if known:
                return True
        return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, *, service, ssl_context, auth, max_body_bytes,
                 max_connections):
        self.service = service
        self.ssl_context = ssl_context
        self.auth = auth
        self.max_body_bytes = max_body_bytes
        self._slots = threading.BoundedSemaphore(max_connections)
        host = addr[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over max_connections: refused at once
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request, client_address):
        request.settimeout(SOCKET_TIMEOUT_S)
        # Headers and body go out in two writes: without NODELAY, Nagle holds the body until
        # the client's delayed ACK (40 ms per request on a keep-alive connection).
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.ssl_context is not None:
            # The handshake runs on the connection's thread, not the accepting one.
            try:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (ssl_lib.SSLError, OSError) as exc:
                log.debug("TLS handshake with %s failed: %s", client_address, exc)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "kafkastore-schema-registry"
    timeout = SOCKET_TIMEOUT_S

    def log_message(self, fmt, *args):  # noqa: D401 - quiet: requests go to debug logging
        log.debug("%s %s", self.address_string(), fmt % args)

    def do_GET(self):  # noqa: N802 - http.server's names
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_PUT(self):  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    def _not_allowed(self):
        self.close_connection = True   # any body is left unread
        self._error(405, 405, "HTTP 405 Method Not Allowed")

    do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    # -- plumbing ------------------------------------------------------------------------------
    def _send(self, status: int, payload, raw: bool = False) -> None:
        # raw: a schema's own text (GET .../schema), sent as is, as Confluent does.
        body = payload.encode("utf-8") if raw else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="kafkastore"')
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: int, message: str) -> None:
        self._send(status, {"error_code": code, "message": message})

    def _authorized(self) -> bool:
        auth = self.server.auth
        if auth is None:
            return True
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return bool(sep) and auth.check(user, password)

    def _body(self):
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise SchemaRegistryError(411, 411, "a Content-Length is required")
        try:
            n = int(length) if length is not None else 0
        except ValueError:
            raise SchemaRegistryError(400, 400, "bad Content-Length") from None
        if n < 0:
            raise SchemaRegistryError(400, 400, "bad Content-Length")
        if n > self.server.max_body_bytes:
            self.close_connection = True
            raise SchemaRegistryError(413, 413, f"request body of {n} bytes is over the limit of "
                                                f"{self.server.max_body_bytes}")
        raw = self.rfile.read(n) if n else b""
        if len(raw) < n:
            self.close_connection = True
            raise SchemaRegistryError(400, 400, "request body shorter than its Content-Length")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise SchemaRegistryError(400, 400, f"Unrecognized JSON: {exc}") from None

    def _handle(self, method: str) -> None:
        try:
            if not self._authorized():
                # Read (and drop) a body so the connection stays in step.
                self._error(401, 401, "Unauthorized")
                self.close_connection = True
                return
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            parts = [unquote(p) for p in url.path.split("/") if p]
            body = self._body() if method in ("POST", "PUT") else None
            if method == "DELETE" and self.headers.get("Content-Length") not in (None, "0"):
                self._body()
            status, payload, raw = self._route(method, parts, query, body)
            if isinstance(payload, list):
                payload = _page(payload, query)
            self._send(status, payload, raw)
        except SchemaRegistryError as exc:
            self._error(exc.status, exc.error_code, exc.message)
        except KafkaStoreError as exc:
            log.warning("schema registry: %s %s failed: %s", method, self.path, exc)
            self._error(500, 50001, f"Error in the backend data store: {exc}")
        except (ConnectionError, socket.timeout):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a request never takes the server down
            log.exception("schema registry: %s %s failed", method, self.path)
            self._error(500, 50001, f"Error in the backend data store: {type(exc).__name__}")

    # -- routes --------------------------------------------------------------------------------
    def _route(self, method: str, p: list[str], q: dict, body):
        svc: SchemaRegistryService = self.server.service
        n = len(p)
        ok = lambda payload: (200, payload, False)  # noqa: E731
        deleted_only = _flag(q, "deleted_only")
        deleted, normalize = _flag(q, "deleted") or deleted_only, _flag(q, "normalize")
        if n == 0 and method == "GET":
            return ok({})
        head = p[0] if n else ""
        if head == "subjects":
            if n == 1 and method == "GET":
                return ok(svc.subjects(deleted, _arg(q, "subjectPrefix"), deleted_only))
            if n == 2:
                if method == "POST":
                    return ok(svc.lookup(p[1], body, deleted, normalize))
                if method == "DELETE":
                    return ok(svc.delete_subject(p[1], _flag(q, "permanent")))
            if n == 3 and p[2] == "versions":
                if method == "GET":
                    return ok(svc.versions(p[1], deleted, deleted_only))
                if method == "POST":
                    return ok(svc.register(p[1], body, normalize))
            if n == 4 and p[2] == "versions":
                if method == "GET":
                    return ok(svc.get_version(p[1], p[3], deleted, _arg(q, "format")))
                if method == "DELETE":
                    return ok(svc.delete_version(p[1], p[3], _flag(q, "permanent")))
            if n == 5 and p[2] == "versions" and method == "GET":
                if p[4] == "schema":
                    return 200, svc.get_version_schema(p[1], p[3], deleted), True
                if p[4] == "referencedby":
                    return ok(svc.referenced_by(p[1], p[3]))
        elif head == "schemas":
            if n == 1 and method == "GET":
                return ok(svc.all_schemas(deleted, _arg(q, "subjectPrefix"), _flag(q, "latestOnly")))
            if n == 2 and p[1] == "types" and method == "GET":
                return ok(list(F.TYPES))
            if n >= 3 and p[1] == "ids" and method == "GET":
                sid = _int_id(p[2])
                if n == 3:
                    return ok(svc.schema_by_id(sid, _arg(q, "format")))
                if n == 4 and p[3] == "schema":
                    return 200, svc.schema_text_by_id(sid), True
                if n == 4 and p[3] == "versions":
                    return ok(svc.id_versions(sid, deleted, _arg(q, "subject")))
                if n == 4 and p[3] == "subjects":
                    return ok(svc.id_subjects(sid, deleted, _arg(q, "subject")))
        elif head == "contexts" and n == 1 and method == "GET":
            return ok(["."])   # one (the default) context
        elif head == "config" and n in (1, 2):
            subject = p[1] if n == 2 else None
            if method == "GET":
                return ok(svc.get_config(subject, _flag(q, "defaultToGlobal")))
            if method == "PUT":
                return ok(svc.put_config(subject, body))
            if method == "DELETE":
                return ok(svc.delete_config(subject))
        elif head == "mode" and n in (1, 2):
            subject = p[1] if n == 2 else None
            if method == "GET":
                return ok(svc.get_mode(subject, _flag(q, "defaultToGlobal")))
            if method == "PUT":
                return ok(svc.put_mode(subject, body, _flag(q, "force")))
            if method == "DELETE" and subject is not None:
                return ok(svc.delete_mode(subject))
        elif head == "compatibility" and method == "POST" and n in (4, 5) \
                and p[1] == "subjects" and p[3] == "versions":
            return ok(svc.check_compatibility(p[2], p[4] if n == 5 else None, body,
                                              _flag(q, "verbose"), normalize))
        raise SchemaRegistryError(404, 404, "HTTP 404 Not Found")


class SchemaRegistryThread:
    """The registry over ``storage`` on ``host:port`` in a background thread.

    ``with SchemaRegistryThread(storage, port=0) as sr: ... sr.url ...``; ``port=0`` picks a
    free port. ``ssl_context``, ``credentials`` (``{user: password}``) and ``root_users`` (the
    root's SCRAM users log in too: ``serve --sasl``) are the broker's TLS and SASL settings,
    checked as HTTP basic auth; a non-loopback ``host`` needs TLS and users unless ``insecure``.
    """

    def __init__(self, storage: Storage, host: str = "127.0.0.1", port: int = 8081, *,
                 ssl_context: ssl_lib.SSLContext | None = None, credentials: dict | None = None,
                 insecure: bool = False, root_users: bool = False, broker_id: int = 0,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 refresh_interval_s: float = 0.5):
        from ..protocol.server import ServeOptions, check_listener_security

        try:
            check_listener_security(ServeOptions(host=host, ssl_context=ssl_context,
                                                 credentials=credentials, insecure=insecure,
                                                 sasl=root_users))
        except ConfigError as exc:
            raise ConfigError(f"schema registry: {exc}") from None
        self.host, self.port = host, port
        self.store = SchemaStore(storage, broker_id=broker_id, refresh_interval_s=refresh_interval_s)
        self.service = SchemaRegistryService(self.store)
        self._ssl = ssl_context
        self._auth = None
        if credentials or root_users:
            from ..scram_users import ScramUsers

            self._auth = BasicAuth(credentials, ScramUsers(storage) if root_users else None)
        self._max_body, self._max_conns = max_body_bytes, max_connections
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "SchemaRegistryThread":
        """Listen and serve; :class:`ListenError` if the address cannot be bound."""
        try:
            self._server = _Server((self.host, self.port), _Handler, service=self.service,
                                   ssl_context=self._ssl, auth=self._auth,
                                   max_body_bytes=self._max_body, max_connections=self._max_conns)
        except OSError as exc:
            raise ListenError(f"schema registry cannot listen on {self.host}:{self.port}: "
                              f"{exc.strerror or exc}") from None
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="kafkastore-schema-registry", daemon=True)
        self._thread.start()
        log.info("schema registry listening on %s", self.url)
        return self

    @property
    def url(self) -> str:
        """``http(s)://host:port`` for clients (a wildcard host is given as 127.0.0.1)."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self._ssl else 'http'}://{host}:{self.port}"

    def stop(self) -> None:
        """Stop listening and join the thread."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> "SchemaRegistryThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
