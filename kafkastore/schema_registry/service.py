"""The Confluent Schema Registry API as methods (no HTTP here): each takes the request's
parsed parts, returns the JSON to answer, and raises :class:`SchemaRegistryError` with
Confluent's status and code for anything refused. Writes go through
:meth:`SchemaStore.write`, so their checks run on the head of ``_schemas``.
"""
from __future__ import annotations

from ..errors import SchemaRegistryError
from . import formats as F
from . import protobuf_schema
from .state import (RegistryState, SchemaVersion, config_key, config_value, mode_key, mode_value,
                    schema_key, schema_value)
from .store import SchemaStore

DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = 2 ** 31 - 1


def _err(status: int, code: int, message: str) -> SchemaRegistryError:
    return SchemaRegistryError(status, code, message)


def subject_not_found(subject: str) -> SchemaRegistryError:
    """40401."""
    return _err(404, 40401, f"Subject '{subject}' not found.")


def _version_not_found(version) -> SchemaRegistryError:
    return _err(404, 40402, f"Version {version} not found.")


def _schema_not_found(schema_id=None) -> SchemaRegistryError:
    return _err(404, 40403, f"Schema {schema_id} not found" if schema_id is not None else "Schema not found")


def parse_version(text) -> int | str:
    """``latest`` (or -1) or a version number; 42202 otherwise."""
    if isinstance(text, str) and text.strip().lower() == "latest":
        return "latest"
    try:
        n = int(text)
    except (TypeError, ValueError):
        n = 0
    if n == -1:
        return "latest"
    if not 1 <= n <= MAX_VERSION:
        raise _err(422, 42202, f"The specified version '{text}' is not a valid version id. Allowed "
                               f"values are between [1, 2^31-1] and the string \"latest\"")
    return n


def _references(body: dict) -> tuple:
    refs = body.get("references") or []
    if not isinstance(refs, list):
        raise _err(422, 42201, "Invalid schema: references must be a list")
    out = []
    for r in refs:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) \
                or not isinstance(r.get("subject"), str) or not isinstance(r.get("version"), int) \
                or isinstance(r.get("version"), bool):
            raise _err(422, 42201, "Invalid schema: a reference is {name, subject, version}")
        out.append({"name": r["name"], "subject": r["subject"], "version": r["version"]})
    return tuple(out)


def _schema_type(body: dict) -> str:
    t = body.get("schemaType") or F.AVRO
    if not isinstance(t, str) or t.upper() not in F.TYPES:
        raise _err(422, 42201, f"Invalid schema: unknown schema type {t!r}")
    return t.upper()


def version_json(v: SchemaVersion, fmt: str | None = None) -> dict:
    """A version as GET /subjects/{s}/versions/{v} shows it."""
    return {"subject": v.subject, "version": v.version, "id": v.id, **schema_json(v, fmt)}


def schema_json(v: SchemaVersion, fmt: str | None = None) -> dict:
    """A version's schema as GET /schemas/ids/{id} shows it (type only when not Avro)."""
    out: dict = {}
    if v.schema_type != F.AVRO:
        out["schemaType"] = v.schema_type
    if v.references:
        out["references"] = [dict(r) for r in v.references]
    out["schema"] = render(v, fmt)
    return out


def render(v: SchemaVersion, fmt: str | None = None) -> str:
    """The schema text to answer. Protobuf is stored as registered; it is shown as ``.proto``
    text (a serialized descriptor is printed as text, as Confluent does) unless
    ``format=serialized`` asks for the base64 descriptor (a text registration is compiled)."""
    if v.schema_type != F.PROTOBUF:
        return v.schema
    fd = protobuf_schema.decode_descriptor(v.schema)
    if fmt == "serialized":
        return v.schema if fd is not None else protobuf_schema.to_serialized(v.schema)
    return protobuf_schema.to_text(fd) if fd is not None else v.schema


def _locked(method):
    """Run under the store's lock: the state's dicts change while a refresh or write applies
    records, and a request reads several of them."""
    import functools

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.store.lock:
            return method(self, *args, **kwargs)
    return run


class SchemaRegistryService:
    """The registry over one root's ``_schemas`` (see the module docstring)."""

    def __init__(self, store: SchemaStore):
        self.store = store

    # -- helpers -------------------------------------------------------------------------------
    def _state(self, force: bool = False) -> RegistryState:
        return self.store.refresh(force=force)

    def _find(self, fn, *args):
        """Run a lookup; on a miss, read the log to its head and try once more (another broker
        may have just written it)."""
        try:
            return fn(self._state(), *args)
        except SchemaRegistryError as exc:
            if exc.status != 404:
                raise
            return fn(self._state(force=True), *args)

    def _resolver(self, state: RegistryState):
        def resolve(ref: dict):
            vs = {v.version: v for v in state.versions(ref["subject"], deleted=True)}
            v = vs.get(ref["version"])
            if v is None:
                raise _err(422, 42201, f"Invalid schema: reference {ref['name']!r} names "
                                       f"{ref['subject']!r} version {ref['version']}, not found")
            return v.schema_type, v.schema, list(v.references)
        return resolve

    def _parse(self, state: RegistryState, body, normalize: bool):
        text, stype, refs = _schema_request(body)
        return F.parse(stype, text, list(refs), self._resolver(state), normalize), refs

    def _preparse(self, body, normalize: bool):
        """Parse a request's schema without holding the store's lock (a big schema parses
        for a while; other requests go on meanwhile): ``(parsed, refs, resolved)``, where
        ``resolved`` is what each reference resolved to, for :meth:`_still_resolves`."""
        resolved: dict = {}

        def resolve(ref: dict):
            with self.store.lock:
                out = self._resolver(self._state())(ref)
            resolved[(ref["subject"], ref["version"])] = out
            return out

        text, stype, refs = _schema_request(body)
        return F.parse(stype, text, list(refs), resolve, normalize), refs, resolved

    def _still_resolves(self, state: RegistryState, resolved: dict) -> bool:
        """Whether every reference resolves on ``state`` as it did when parsed (a version
        hard-deleted and registered anew in between needs a fresh parse)."""
        resolve = self._resolver(state)
        try:
            return all(resolve({"name": "", "subject": s, "version": v}) == out
                       for (s, v), out in resolved.items())
        except SchemaRegistryError:
            return False

    def _parsed_on(self, state: RegistryState, pre, body, normalize: bool):
        """The pre-parsed schema if still valid on ``state``, else parsed again (locked)."""
        parsed, refs, resolved = pre
        if self._still_resolves(state, resolved):
            return parsed, refs
        return self._parse(state, body, normalize)

    def _parse_version(self, state: RegistryState, v: SchemaVersion) -> F.Parsed:
        return F.parse(v.schema_type, v.schema, list(v.references), self._resolver(state))

    @staticmethod
    def level(state: RegistryState, subject: str | None) -> str:
        """The subject's compatibility level, else the global one, else BACKWARD."""
        return state.configs.get(subject) or state.configs.get(None) or DEFAULT_LEVEL

    @staticmethod
    def mode(state: RegistryState, subject: str | None) -> str:
        """The subject's mode, else the global one, else READWRITE."""
        return state.modes.get(subject) or state.modes.get(None) or DEFAULT_MODE

    @staticmethod
    def _resolve_version(state: RegistryState, subject: str, version, deleted: bool) -> SchemaVersion:
        all_vs = state.versions(subject, deleted=True)
        if not all_vs:
            raise subject_not_found(subject)
        vs = all_vs if deleted else [v for v in all_vs if not v.deleted]
        if version == "latest":
            if not vs:
                raise subject_not_found(subject)
            return vs[-1]
        for v in vs:
            if v.version == version:
                return v
        raise _version_not_found(version)

    def _incompatible(self, state, subject, parsed: F.Parsed, against: list[SchemaVersion],
                      level: str) -> list[str]:
        out = []
        for prev in against:
            for m in F.incompatibilities(parsed, self._parse_version(state, prev), level):
                out.append(f"version {prev.version}: {m}")
        return out

    def _against(self, state: RegistryState, subject: str, level: str) -> list[SchemaVersion]:
        live = state.versions(subject)
        if level == "NONE" or not live:
            return []
        return live if level.endswith("_TRANSITIVE") else live[-1:]

    # -- subjects ------------------------------------------------------------------------------
    @_locked
    def subjects(self, deleted: bool = False, prefix: str | None = None,
                 deleted_only: bool = False) -> list[str]:
        """GET /subjects (``deleted_only``: subjects whose every version is soft-deleted)."""
        state = self._state()
        live = set(state.live_subjects(False))
        return [s for s in state.live_subjects(deleted or deleted_only)
                if (not prefix or s.startswith(prefix)) and (not deleted_only or s not in live)]

    @_locked
    def versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        """GET /subjects/{s}/versions."""
        def find(state):
            vs = state.versions(subject, deleted or deleted_only)
            if not vs:
                raise subject_not_found(subject)
            return [v.version for v in vs if not deleted_only or v.deleted]
        return self._find(find)

    @_locked
    def get_version(self, subject: str, version, deleted: bool = False,
                    fmt: str | None = None) -> dict:
        """GET /subjects/{s}/versions/{v}."""
        version = parse_version(version)
        return version_json(self._find(self._resolve_version, subject, version, deleted), fmt)

    @_locked
    def get_version_schema(self, subject: str, version, deleted: bool = False) -> str:
        """GET /subjects/{s}/versions/{v}/schema: the schema text alone."""
        version = parse_version(version)
        return render(self._find(self._resolve_version, subject, version, deleted))

    @_locked
    def referenced_by(self, subject: str, version) -> list[int]:
        """GET /subjects/{s}/versions/{v}/referencedby."""
        v = self._find(self._resolve_version, subject, parse_version(version), False)
        return self._state().referenced_by(subject, v.version)

    def register(self, subject: str, body, normalize: bool = False) -> dict:
        """POST /subjects/{s}/versions: the id (the existing one if this schema is already a
        version of the subject, or registered under another subject). The schema is parsed
        before the store's lock is taken; only the plan and the append hold it."""
        _check_subject(subject)
        pre = self._preparse(body, normalize)
        limit = self.store.max_record_bytes()

        def plan(state: RegistryState):
            parsed, refs = self._parsed_on(state, pre, body, normalize)
            mode = self.mode(state, subject)
            if mode in ("READONLY", "READONLY_OVERRIDE"):
                raise _err(422, 42205, f"Subject {subject} is in read-only mode")
            ident = (parsed.schema_type, parsed.canonical,
                     tuple((r["name"], r["subject"], r["version"]) for r in refs))
            for v in state.versions(subject):
                if v.identity() == ident:
                    return [], {"id": v.id}
            want_id, want_version = body.get("id"), body.get("version")
            if want_id is not None and mode != "IMPORT" and state.ids.get(ident) != want_id:
                raise _err(422, 42205, "Subject is not in import mode: an id cannot be given")
            level = self.level(state, subject)
            if mode != "IMPORT":
                problems = self._incompatible(state, subject, parsed,
                                              self._against(state, subject, level), level)
                if problems:
                    raise _err(409, 409, f"Schema being registered is incompatible with an earlier "
                                         f"schema for subject \"{subject}\", details: {problems}")
            schema_id = state.ids.get(ident)
            if mode == "IMPORT" and isinstance(want_id, int) and not isinstance(want_id, bool):
                owner = state.by_id.get(want_id)
                if owner is not None and owner.identity() != ident:
                    raise _err(422, 42205, f"Overwrite new schema with id {want_id} is not permitted.")
                schema_id = want_id
            if schema_id is None:
                schema_id = state.max_id + 1
            existing = state.versions(subject, deleted=True)
            version = existing[-1].version + 1 if existing else 1
            if mode == "IMPORT" and isinstance(want_version, int) and not isinstance(want_version, bool):
                if not 1 <= want_version <= MAX_VERSION:
                    raise _err(422, 42202, f"The specified version '{want_version}' is not a valid "
                                           f"version id.")
                if any(v.version == want_version for v in existing):
                    raise _err(422, 42205, f"Version {want_version} of subject {subject} already "
                                           f"exists: an import does not overwrite it")
                version = want_version
            sv = SchemaVersion(subject, version, schema_id, parsed.schema_type, parsed.canonical,
                               refs, False)
            key, value = schema_key(subject, version), schema_value(sv)
            if len(key) + len(value) > limit:
                raise _err(413, 413, f"the schema's record of {len(key) + len(value)} bytes is over "
                                     f"the max.message.bytes of _schemas ({limit})")
            return [(key, value)], {"id": schema_id}

        with self.store.lock:
            return self.store.write(plan)

    def lookup(self, subject: str, body, deleted: bool = False, normalize: bool = False) -> dict:
        """POST /subjects/{s}: the version of the subject that is this schema (parsed outside
        the store's lock)."""
        pre = self._preparse(body, normalize)

        def find(state):
            parsed, refs = self._parsed_on(state, pre, body, normalize)
            ident = (parsed.schema_type, parsed.canonical,
                     tuple((r["name"], r["subject"], r["version"]) for r in refs))
            vs = state.versions(subject, deleted)
            if not state.versions(subject, True):
                raise subject_not_found(subject)
            for v in vs:
                if v.identity() == ident:
                    return version_json(v)
            raise _schema_not_found()
        with self.store.lock:
            return self._find(find)

    @_locked
    def delete_version(self, subject: str, version, permanent: bool = False) -> int:
        """DELETE /subjects/{s}/versions/{v}[?permanent=true]."""
        version = parse_version(version)

        def plan(state: RegistryState):
            if self.mode(state, subject) in ("READONLY", "READONLY_OVERRIDE"):
                raise _err(422, 42205, f"Subject {subject} is in read-only mode")
            v = self._resolve_version(state, subject, version,
                                      deleted=permanent or version != "latest")
            if permanent:
                if not v.deleted:
                    raise _err(404, 40407, f"Subject '{subject}' Version {v.version} was not deleted "
                                           f"first before being permanently deleted")
                return [(schema_key(subject, v.version), None)], v.version
            if v.deleted:
                raise _err(404, 40406, f"Subject '{subject}' Version {v.version} was soft deleted."
                                       f"Set permanent=true to delete permanently")
            if state.referenced_by(subject, v.version):
                raise _err(422, 42206, f"One or more references exist to the schema "
                                       f"{{magic=1,keytype=SCHEMA,subject={subject},version={v.version}}}.")
            dv = SchemaVersion(v.subject, v.version, v.id, v.schema_type, v.schema, v.references, True)
            return [(schema_key(subject, v.version), schema_value(dv))], v.version

        return self.store.write(plan)

    @_locked
    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """DELETE /subjects/{s}[?permanent=true]: the versions deleted."""
        def plan(state: RegistryState):
            if self.mode(state, subject) in ("READONLY", "READONLY_OVERRIDE"):
                raise _err(422, 42205, f"Subject {subject} is in read-only mode")
            all_vs = state.versions(subject, deleted=True)
            if not all_vs:
                raise subject_not_found(subject)
            live = [v for v in all_vs if not v.deleted]
            if permanent:
                if live:
                    raise _err(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                           f"permanently deleted")
                records = [(schema_key(subject, v.version), None) for v in all_vs]
                if subject in state.configs:
                    records.append((config_key(subject), None))
                if subject in state.modes:
                    records.append((mode_key(subject), None))
                return records, [v.version for v in all_vs]
            if not live:
                raise _err(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to "
                                       f"delete permanently")
            for v in live:
                if state.referenced_by(subject, v.version):
                    raise _err(422, 42206, f"One or more references exist to the schema "
                                           f"{{magic=1,keytype=SCHEMA,subject={subject},version={v.version}}}.")
            return ([(schema_key(subject, v.version),
                      schema_value(SchemaVersion(v.subject, v.version, v.id, v.schema_type, v.schema,
                                                 v.references, True))) for v in live],
                    [v.version for v in live])

        return self.store.write(plan)

    # -- schemas by id -------------------------------------------------------------------------
    def _by_id(self, state: RegistryState, schema_id: int) -> SchemaVersion:
        uses = state.uses_of(schema_id, deleted=True)
        if not uses:
            raise _schema_not_found(schema_id)
        first = state.by_id.get(schema_id)
        return first if first is not None else uses[0]

    @_locked
    def subjects_of_id(self, schema_id: int) -> list[str]:
        """The subjects with a version (soft-deleted ones too) whose id is ``schema_id``;
        [] if none (after reading the log to its head)."""
        uses = self._state().uses_of(schema_id, deleted=True) or \
            self._state(force=True).uses_of(schema_id, deleted=True)
        return sorted({v.subject for v in uses})

    @_locked
    def schema_by_id(self, schema_id: int, fmt: str | None = None) -> dict:
        """GET /schemas/ids/{id}."""
        return schema_json(self._find(self._by_id, schema_id), fmt)

    @_locked
    def schema_text_by_id(self, schema_id: int) -> str:
        """GET /schemas/ids/{id}/schema."""
        return render(self._find(self._by_id, schema_id))

    @_locked
    def id_versions(self, schema_id: int, deleted: bool = False,
                    subject: str | None = None) -> list[dict]:
        """GET /schemas/ids/{id}/versions (``subject``: only that subject's)."""
        self._find(self._by_id, schema_id)
        return [{"subject": v.subject, "version": v.version}
                for v in self._state().uses_of(schema_id, deleted)
                if subject is None or v.subject == subject]

    @_locked
    def id_subjects(self, schema_id: int, deleted: bool = False,
                    subject: str | None = None) -> list[str]:
        """GET /schemas/ids/{id}/subjects."""
        return sorted({u["subject"] for u in self.id_versions(schema_id, deleted, subject)})

    @_locked
    def all_schemas(self, deleted: bool = False, prefix: str | None = None,
                    latest_only: bool = False) -> list[dict]:
        """GET /schemas."""
        state = self._state()
        out = []
        for s in state.live_subjects(deleted):
            if prefix and not s.startswith(prefix):
                continue
            vs = state.versions(s, deleted)
            out += [version_json(v) for v in (vs[-1:] if latest_only else vs)]
        return out

    # -- config and mode -----------------------------------------------------------------------
    def _get_setting(self, subject: str | None, default_to_global: bool, own, inherited,
                     missing_code: int, what: str) -> str:
        """A subject's (None: the global) compatibility level or mode: ``own(state)`` is the
        dict of those set (``configs`` or ``modes``), ``inherited(state, None)`` the global
        one, answered for a subject without its own only with ``default_to_global`` (else 404
        ``missing_code``). A miss reads the log to its head first (another broker may have
        just written it)."""
        state = self._state()
        if subject is None:
            return inherited(state, None)
        value = own(state).get(subject)
        if value is None:
            state = self._state(force=True)
            value = own(state).get(subject)
        if value is None:
            if not default_to_global:
                raise _err(404, missing_code, f"Subject '{subject}' does not have subject-level "
                                              f"{what} configured")
            value = inherited(state, None)
        return value

    @_locked
    def get_config(self, subject: str | None, default_to_global: bool = False) -> dict:
        """GET /config[/{s}]."""
        return {"compatibilityLevel": self._get_setting(subject, default_to_global, lambda s: s.configs,
                                                        self.level, 40408, "compatibility")}

    @_locked
    def put_config(self, subject: str | None, body) -> dict:
        """PUT /config[/{s}]."""
        level = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in F.LEVELS:
            raise _err(422, 42203, "Invalid compatibility level. Valid values are none, backward, "
                                   "forward, full, backward_transitive, forward_transitive, and "
                                   "full_transitive")
        level = level.upper()
        if subject is not None:
            _check_subject(subject)

        def plan(state):
            unchanged = state.configs.get(subject) == level
            return [] if unchanged else [(config_key(subject), config_value(level))], {"compatibility": level}
        return self.store.write(plan)

    @_locked
    def delete_config(self, subject: str | None) -> dict:
        """DELETE /config[/{s}]: the level it had."""
        def plan(state):
            if subject is not None and not state.versions(subject, True) and subject not in state.configs:
                raise subject_not_found(subject)
            before = {"compatibilityLevel": self.level(state, subject)}
            return [(config_key(subject), None)] if subject in state.configs else [], before
        return self.store.write(plan)

    @_locked
    def get_mode(self, subject: str | None, default_to_global: bool = False) -> dict:
        """GET /mode[/{s}]."""
        return {"mode": self._get_setting(subject, default_to_global, lambda s: s.modes, self.mode,
                                          40409, "mode")}

    @_locked
    def put_mode(self, subject: str | None, body, force: bool = False) -> dict:
        """PUT /mode[/{s}]. IMPORT on a registry (or subject) holding schemas needs ``force``."""
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise _err(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, "
                                   "READONLY_OVERRIDE, IMPORT")
        mode = mode.upper()

        def plan(state):
            if mode == "IMPORT" and not force and (
                    state.live_subjects(True) if subject is None else state.versions(subject, True)):
                raise _err(422, 42205, "Cannot import since found existing subjects")
            unchanged = state.modes.get(subject) == mode
            return [] if unchanged else [(mode_key(subject), mode_value(mode))], {"mode": mode}
        return self.store.write(plan)

    @_locked
    def delete_mode(self, subject: str) -> dict:
        """DELETE /mode/{s}: the mode it had."""
        def plan(state):
            before = {"mode": self.mode(state, subject)}
            return [(mode_key(subject), None)] if subject in state.modes else [], before
        return self.store.write(plan)

    # -- compatibility -------------------------------------------------------------------------
    def check_compatibility(self, subject: str, version, body, verbose: bool = False,
                            normalize: bool = False) -> dict:
        """POST /compatibility/subjects/{s}/versions[/{v}]: ``version`` None checks against
        what registering would (the level's versions), else against that one version. The
        schema is parsed outside the store's lock."""
        pre = self._preparse(body, normalize)

        def find(state):
            parsed, _ = self._parsed_on(state, pre, body, normalize)
            level = self.level(state, subject)
            if version is None:
                against = self._against(state, subject, level)
            else:
                v = parse_version(version)
                if v == "latest" and not state.versions(subject):
                    against = []
                else:
                    against = [self._resolve_version(state, subject, v, False)]
            msgs = self._incompatible(state, subject, parsed, against, level)
            out: dict = {"is_compatible": not msgs}
            if verbose:
                out["messages"] = msgs
            return out
        with self.store.lock:
            return self._find(find)


def _check_subject(subject: str) -> None:
    if not subject or len(subject) > 4096 or any(ord(c) < 32 for c in subject):
        raise _err(422, 42201, "Invalid subject name")


def _schema_request(body) -> tuple[str, str, list]:
    """``(schema text, schema type, references)`` of a request body that carries a schema;
    422 (42201) when it has none."""
    if not isinstance(body, dict):
        raise _err(422, 42201, "Invalid schema: the body is a JSON object with a \"schema\"")
    text = body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise _err(422, 42201, "Empty schema")
    return text, _schema_type(body), _references(body)
