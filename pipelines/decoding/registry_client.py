"""A small client of any Confluent-compatible schema registry (plain REST, stdlib only).

Loads need one thing from a registry: the writer schema of an id found in a
record's header, with the schemas it references. That is
``GET /schemas/ids/{id}`` (Confluent, Karapace, Apicurio's compatibility API,
Redpanda and kafkastore's own registry all serve it) and, for each reference,
``GET /subjects/{subject}/versions/{version}``. Schemas never change under an
id, so they are cached for the life of the client (one per executor process).

Protobuf schemas are asked for with ``?format=serialized`` (a base64
FileDescriptorProto, which Confluent's registry returns and the Python
serializer registers); a registry that ignores the parameter answers with the
``.proto`` text, which :mod:`pipelines.decoding.schema_decoding` parses too.
"""
from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from kafkastore.errors import RegistryFetchError

SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")


@dataclass(frozen=True)
class Reference:
    """A named reference of a schema: ``name`` (how the schema imports it), and the
    referenced schema, resolved."""

    name: str
    subject: str
    version: int
    schema: "WriterSchema"


@dataclass(frozen=True)
class WriterSchema:
    """One registered schema: ``schema_type`` AVRO, PROTOBUF or JSON; ``text`` as
    the registry returned it; ``references`` resolved (recursively)."""

    schema_id: int | None
    schema_type: str
    text: str
    references: tuple[Reference, ...] = field(default_factory=tuple)

    def all_references(self) -> dict[str, "WriterSchema"]:
        """Every schema this one references, directly or not, by reference name."""
        out: dict[str, WriterSchema] = {}
        stack = list(self.references)
        while stack:
            ref = stack.pop()
            if ref.name not in out:
                out[ref.name] = ref.schema
                stack.extend(ref.schema.references)
        return out


class RegistryClient:
    """Fetch and cache writer schemas from the registry at ``url``.

    ``auth``: ``(user, password)`` for basic auth; ``timeout_s`` per request.
    Picklable (the cache starts empty in each process). Raises
    :class:`RegistryFetchError` for an id the registry does not know (with its
    error code) or a registry that cannot be reached."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None, timeout_s: float = 10.0):
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None and auth is None:
            # http://user:pass@host: basic auth, the credentials kept out of the URL
            auth = (urllib.parse.unquote(parts.username),
                    urllib.parse.unquote(parts.password or ""))
            host = parts.hostname + (f":{parts.port}" if parts.port else "")
            url = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
        self.url = url.rstrip("/")
        self.auth = tuple(auth) if auth else None
        self.timeout_s = timeout_s
        self._cache: dict[int, WriterSchema] = {}
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"url": self.url, "auth": self.auth, "timeout_s": self.timeout_s}

    def __setstate__(self, state):
        self.__init__(state["url"], state["auth"], state["timeout_s"])

    def _get(self, path: str) -> Any:
        req = urllib.request.Request(self.url + path, headers={
            "Accept": "application/vnd.schemaregistry.v1+json, application/json"})
        if self.auth:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read().decode("utf-8"))
                detail = f"error {body.get('error_code')}: {body.get('message')}"
            except (ValueError, AttributeError):
                detail = f"HTTP {exc.code}"
            raise RegistryFetchError(f"schema registry {self.url}{path}: {detail}",
                                      status=exc.code) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RegistryFetchError(f"schema registry {self.url} unreachable: {exc}") from None

    def schema(self, schema_id: int) -> WriterSchema:
        """The writer schema registered under ``schema_id``, references resolved."""
        with self._lock:
            hit = self._cache.get(schema_id)
        if hit is not None:
            return hit
        doc = self._get(f"/schemas/ids/{int(schema_id)}?format=serialized")
        ws = self._resolve(doc, schema_id, ())
        with self._lock:
            self._cache[schema_id] = ws
        return ws

    def _resolve(self, doc: dict, schema_id: int | None, seen: tuple) -> WriterSchema:
        stype = str(doc.get("schemaType") or "AVRO").upper()
        refs = []
        for r in doc.get("references") or ():
            key = (r["subject"], int(r["version"]))
            if key in seen:
                raise RegistryFetchError(f"schema reference cycle through {key}")
            sub = urllib.parse.quote(str(r["subject"]), safe="")
            fmt = "?format=serialized" if stype == "PROTOBUF" else ""
            ref_doc = self._get(f"/subjects/{sub}/versions/{int(r['version'])}{fmt}")
            refs.append(Reference(str(r["name"]), str(r["subject"]), int(r["version"]),
                                  self._resolve(ref_doc, ref_doc.get("id"), seen + (key,))))
        return WriterSchema(schema_id, stype, str(doc["schema"]), tuple(refs))
