"""The registry's HTTP listener: Confluent's REST paths over :class:`SchemaRegistryService`.

A stdlib ``ThreadingHTTPServer`` on its own thread (:class:`SchemaRegistryThread`), one
thread per connection up to ``max_connections`` (``max_connections_per_ip`` from one address),
counted at accept, before a TLS handshake; when full, the oldest connection that has not yet
sent complete headers is dropped for the newcomer. A request's headers must arrive within
``header_timeout_s`` of its first byte, its body within ``body_timeout_s`` (deadlines, not
per-read timeouts). Authentication and the ACL check come before any body is read; with
``--authorizer`` every request of an authenticated user is checked against the root's ACLs
(:mod:`.access` maps them). Security is the Kafka listener's: loopback by
default; any other address needs TLS and credentials (HTTP basic auth against the same
``user:password`` file as SASL) unless ``insecure``. Bad input never crashes it: bodies are
capped at ``max_body_bytes`` (413), malformed JSON is a 400, a body of the wrong shape a 422,
each with Confluent's ``{"error_code", "message"}``; an unexpected failure is a 500 / 50001
and is logged.
"""
from __future__ import annotations

import json
import logging
import socket
import ssl as ssl_lib
import threading
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import ConfigError, KafkaStoreError, ListenError, SchemaRegistryError
from ..protocol.http_guard import (HEADER_TIMEOUT_S, IDLE_TIMEOUT_S, BasicAuth,  # noqa: F401 - BasicAuth is part of this module's API
                                   GuardedHandler, GuardedHTTPServer, basic_credentials)
from ..protocol.listeners import check_listener_security, sasl_enabled
from ..storage import Storage
from . import access as A
from . import formats as F
from ..cluster.acls import ANONYMOUS
from ..cluster.scram import ScramUsers
from .service import SchemaRegistryService
from .store import SCHEMAS_TOPIC, SchemaStore

log = logging.getLogger("kafkastore.schema_registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
DEFAULT_MAX_BODY_BYTES = 8 << 20
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_MAX_CONNECTIONS_PER_IP = 64
#: Seconds a request's body may take.
BODY_TIMEOUT_S = 30.0
#: Room for the JSON around a schema in a request body over the record limit of ``_schemas``.
SCHEMA_BODY_SLACK = 64 << 10


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


class _Server(GuardedHTTPServer):
    """The registry's listener: the connection budget and deadlines of
    :class:`~kafkastore.protocol.http_guard.GuardedHTTPServer`, with the service, its
    basic auth and ACLs, and the body limits."""

    def __init__(self, addr, handler, *, service, ssl_context, auth, authorizer, max_body_bytes,
                 max_connections, max_connections_per_ip, header_timeout_s, idle_timeout_s,
                 body_timeout_s, clock):
        self.service = service
        self.auth = auth
        self.authorizer = authorizer
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        super().__init__(addr, handler, ssl_context=ssl_context, max_connections=max_connections,
                         max_connections_per_ip=max_connections_per_ip,
                         header_timeout_s=header_timeout_s, idle_timeout_s=idle_timeout_s,
                         clock=clock)


class _Handler(GuardedHandler):
    server: _Server
    server_version = "kafkastore-schema-registry"

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
    def _send(self, status: int, payload, raw: bool = False, extra_headers: dict | None = None) -> None:
        # raw: a schema's own text (GET .../schema), sent as is, as Confluent does.
        body = payload.encode("utf-8") if raw else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="kafkastore"')
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: int, message: str) -> None:
        self._send(status, {"error_code": code, "message": message})

    # -- authentication and authorization -------------------------------------------------
    def _authenticate(self):
        """The caller's principal (``User:name``; ``User:ANONYMOUS`` without auth), or None
        once a 401 or 429 was answered."""
        auth = self.server.auth
        if auth is None:
            return ANONYMOUS
        user, password = basic_credentials(self.headers.get("Authorization")) or (None, None)
        ip = str(self.client_address[0])
        if user is not None and auth.cached(user, password):
            return f"User:{user}"
        wait = auth.retry_after(ip)
        if wait:
            # Refused before any PBKDF2: guessing costs the broker nothing past the budget.
            self.close_connection = True
            self._send(429, {"error_code": 429, "message": f"Too many failed logins from this "
                                                           f"address; retry in {wait} s"},
                       extra_headers={"Retry-After": str(wait)})
            return None
        if user is not None and auth.check(user, password, ip):
            return f"User:{user}"
        if user is None:
            auth.check("", "\0", ip)   # a malformed header is a failure too (same cost)
        self._error(401, 401, "Unauthorized")
        self.close_connection = True
        return None

    def _checks(self) -> bool:
        """Whether ACLs apply (an authorizer and authenticated callers; without
        authentication the registry stays open as the Kafka listener's ANONYMOUS is)."""
        return self.server.authorizer is not None and self.server.auth is not None

    def _allowed(self, need: A.Need) -> bool:
        if not self._checks():
            return True
        self.server.authorizer.load_if_stale()   # never decide on ACLs older than the bound
        return self.server.authorizer.authorize(self._principal, str(self.client_address[0]),
                                                need.operation, need.resource_type, need.name)

    def _may_read(self, subject: str) -> bool:
        return self._allowed(A.subject_need(A.Operation.READ, subject))

    def _unrestricted(self) -> bool:
        return not self._checks() or self._principal in self.server.authorizer.super_users

    def _forbid(self, need: A.Need):
        return SchemaRegistryError(403, A.FORBIDDEN_CODE,
                                   f"User {self._principal} is denied operation "
                                   f"{need.operation.name} on {need.resource_type.name} {need.name!r}")

    def _body(self, limit: int | None = None):
        lengths = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") is not None:
            self.close_connection = True
            raise SchemaRegistryError(411, 411, "a Content-Length is required (no Transfer-Encoding)")
        if len({v.strip() for v in lengths}) > 1:
            self.close_connection = True
            raise SchemaRegistryError(400, 400, "conflicting Content-Length headers")
        length = lengths[0].strip() if lengths else "0"
        if not length.isdigit() or not length.isascii():
            self.close_connection = True
            raise SchemaRegistryError(400, 400, "bad Content-Length")
        n = int(length)
        if limit is not None and n > limit:
            # Refused on its Content-Length alone: nothing is read or parsed.
            self.close_connection = True
            raise SchemaRegistryError(413, 413, f"request body of {n} bytes is over the limit of "
                                                f"{limit}: a schema is stored as one record of "
                                                f"{SCHEMAS_TOPIC}, whose max.message.bytes is "
                                                f"{self.server.service.store.max_record_bytes()}")
        if n > self.server.max_body_bytes:
            self.close_connection = True
            raise SchemaRegistryError(413, 413, f"request body of {n} bytes is over the limit of "
                                                f"{self.server.max_body_bytes}")
        self.deadline = self.server.clock.monotonic_s() + self.server.body_timeout_s
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

    def _check_references(self, body) -> None:
        """A schema may reference only subjects the caller may read (else resolving it would
        tell whether another tenant's version exists, and what it holds)."""
        refs = body.get("references") if isinstance(body, dict) else None
        for ref in refs if isinstance(refs, list) else ():
            subject = ref.get("subject") if isinstance(ref, dict) else None
            if isinstance(subject, str) and not self._may_read(subject):
                raise self._forbid(A.subject_need(A.Operation.READ, subject))

    def _schema_body_limit(self, parts: list[str]) -> int | None:
        """A body carrying a schema (register, lookup, compatibility) is capped at what one
        ``_schemas`` record can hold (plus room for the JSON around the schema)."""
        head = parts[0] if parts else ""
        if head in ("subjects", "compatibility"):
            return self.server.service.store.max_record_bytes() + SCHEMA_BODY_SLACK
        return None

    def _handle(self, method: str) -> None:
        self._principal = None
        try:
            principal = self._authenticate()
            if principal is None:
                return
            self._principal = principal
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            parts = [unquote(p) for p in url.path.split("/") if p]
            need = A.requirement(method, parts)
            if isinstance(need, A.Need) and not self._allowed(need):
                self.close_connection = self.close_connection or \
                    self.headers.get("Content-Length") not in (None, "0")
                raise self._forbid(need)
            self.server.proven(self._raw)
            body = None
            if method in ("POST", "PUT"):
                body = self._body(self._schema_body_limit(parts) if method == "POST" else None)
            elif method == "DELETE" and self.headers.get("Content-Length") not in (None, "0"):
                self._body()
            self._check_references(body)
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
                return ok([x for x in svc.subjects(deleted, _arg(q, "subjectPrefix"), deleted_only)
                           if self._may_read(x)])
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
                return ok([x for x in svc.all_schemas(deleted, _arg(q, "subjectPrefix"),
                                                      _flag(q, "latestOnly"))
                           if self._may_read(x["subject"])])
            if n == 2 and p[1] == "types" and method == "GET":
                return ok(list(F.TYPES))
            if n >= 3 and p[1] == "ids" and method == "GET":
                sid = _int_id(p[2])
                users = svc.subjects_of_id(sid)
                readable = [x for x in users if self._may_read(x)]
                if not readable and not self._unrestricted():
                    # Whether the id exists or not: nothing tells a caller what it may not read.
                    raise SchemaRegistryError(403, A.FORBIDDEN_CODE, f"User {self._principal} "
                                              f"is denied operation READ on the subjects of schema {sid}")
                if n == 3:
                    return ok(svc.schema_by_id(sid, _arg(q, "format")))
                if n == 4 and p[3] == "schema":
                    return 200, svc.schema_text_by_id(sid), True
                if n == 4 and p[3] == "versions":
                    return ok([x for x in svc.id_versions(sid, deleted, _arg(q, "subject"))
                               if self._may_read(x["subject"])])
                if n == 4 and p[3] == "subjects":
                    return ok([x for x in svc.id_subjects(sid, deleted, _arg(q, "subject"))
                               if self._may_read(x)])
        elif head == "contexts" and n == 1 and method == "GET":
            # One (the default) context, shown to a caller who may read some subject.
            return ok(["."] if self._unrestricted() or self.server.authorizer.authorize_any(
                self._principal, str(self.client_address[0]), A.Operation.READ,
                A.ResourceType.TOPIC) else [])
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
                 max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
                 header_timeout_s: float = HEADER_TIMEOUT_S, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 body_timeout_s: float = BODY_TIMEOUT_S,
                 refresh_interval_s: float = 0.5, authorizer=None, auth_options: dict | None = None):
        try:
            check_listener_security(host, tls=ssl_context is not None,
                                    sasl=sasl_enabled(root_users, credentials), insecure=insecure)
        except ConfigError as exc:
            raise ConfigError(f"schema registry: {exc}") from None
        self.host, self.port = host, port
        self.store = SchemaStore(storage, broker_id=broker_id, refresh_interval_s=refresh_interval_s)
        self.service = SchemaRegistryService(self.store)
        self._ssl = ssl_context
        self._auth = None
        if credentials or root_users:
            # A credentials file implies the root's SCRAM users, as it does for the Kafka
            # listener (serve --sasl-credentials implies --sasl).
            self._auth = BasicAuth(credentials, ScramUsers(storage), **(auth_options or {}))
        #: The broker's :class:`~kafkastore.protocol.authorizer.Authorizer` (serve
        #: --authorizer): requests of authenticated users are checked against the root's ACLs.
        self.authorizer = authorizer
        self._max_body, self._max_conns = max_body_bytes, max_connections
        self._limits = dict(max_connections_per_ip=max_connections_per_ip,
                            header_timeout_s=header_timeout_s, idle_timeout_s=idle_timeout_s,
                            body_timeout_s=body_timeout_s)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "SchemaRegistryThread":
        """Listen and serve; :class:`ListenError` if the address cannot be bound."""
        try:
            self._server = _Server((self.host, self.port), _Handler, service=self.service,
                                   ssl_context=self._ssl, auth=self._auth, authorizer=self.authorizer,
                                   max_body_bytes=self._max_body, max_connections=self._max_conns,
                                   clock=self.store.clock, **self._limits)
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
