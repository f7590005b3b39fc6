"""The registry's state and its records in ``_schemas``, in Confluent's JSON shapes. Pure.

Keys (JSON, Confluent's field order)::

    {"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}
    {"keytype":"CONFIG","subject":null,"magic":0}          (subject null: the global config)
    {"keytype":"MODE","subject":null,"magic":0}

Values::

    {"subject":"orders-value","version":1,"id":1,"schemaType":"PROTOBUF",
     "references":[{"name":..,"subject":..,"version":..}],"schema":"...","deleted":false}
    {"compatibilityLevel":"BACKWARD"}
    {"mode":"READWRITE"}

``schemaType`` is left out for Avro, as Confluent does. A soft delete rewrites the version with
``"deleted":true``; a hard delete is a tombstone (null value) of its key. Replaying the log in
order (:meth:`RegistryState.apply`) gives every broker the same state.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .formats import AVRO


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a subject."""

    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple = ()
    deleted: bool = False

    def identity(self) -> tuple:
        """What two registrations share when they share an id."""
        return (self.schema_type, self.schema, _refs_key(self.references))


def _refs_key(refs) -> tuple:
    return tuple((r.get("name"), r.get("subject"), r.get("version")) for r in refs or ())


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def schema_key(subject: str, version: int) -> bytes:
    """The key of one version."""
    return _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    """The key of a compatibility config (None: global)."""
    return _dumps({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    """The key of a mode (None: global)."""
    return _dumps({"keytype": "MODE", "subject": subject, "magic": 0})


def schema_value(v: SchemaVersion) -> bytes:
    """The value of one version."""
    out: dict = {"subject": v.subject, "version": v.version, "id": v.id}
    if v.schema_type != AVRO:
        out["schemaType"] = v.schema_type
    if v.references:
        out["references"] = [dict(r) for r in v.references]
    out["schema"] = v.schema
    out["deleted"] = v.deleted
    return _dumps(out)


def config_value(level: str) -> bytes:
    """The value of a compatibility config."""
    return _dumps({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    """The value of a mode."""
    return _dumps({"mode": mode})


@dataclass
class RegistryState:
    """Everything the log says, replayed in order."""

    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    #: id -> the first version registered with it (what GET /schemas/ids/{id} shows).
    by_id: dict[int, SchemaVersion] = field(default_factory=dict)
    #: identity -> id, so the same schema in another subject gets the same id.
    ids: dict[tuple, int] = field(default_factory=dict)
    max_id: int = 0

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """Apply one record; False (and no change) for a record this code does not know
        (other key types Confluent writes, e.g. NOOP, or garbage)."""
        try:
            k = json.loads(key) if key is not None else None
            v = json.loads(value) if value is not None else None
        except (ValueError, UnicodeDecodeError):
            return False
        if not isinstance(k, dict):
            return False
        kt, subject = k.get("keytype"), k.get("subject")
        if kt == "SCHEMA" and isinstance(subject, str) and isinstance(k.get("version"), int):
            if v is None:
                versions = self.subjects.get(subject, {})
                versions.pop(k["version"], None)
                if not versions:
                    self.subjects.pop(subject, None)
                return True
            if not isinstance(v, dict) or not isinstance(v.get("id"), int) \
                    or not isinstance(v.get("schema"), str):
                return False
            versions = self.subjects.setdefault(subject, {})
            sv = SchemaVersion(subject, k["version"], v["id"], v.get("schemaType") or AVRO,
                               v["schema"], tuple(v.get("references") or ()), bool(v.get("deleted")))
            versions[sv.version] = sv
            self.by_id.setdefault(sv.id, sv)
            self.ids.setdefault(sv.identity(), sv.id)
            self.max_id = max(self.max_id, sv.id)
            return True
        if kt in ("CONFIG", "MODE") and (subject is None or isinstance(subject, str)):
            settings, field = (self.configs, "compatibilityLevel") if kt == "CONFIG" else (self.modes, "mode")
            value = v.get(field) if isinstance(v, dict) else None
            if isinstance(value, str):
                settings[subject] = value
            else:  # a tombstone (or a value not understood) unsets it
                settings.pop(subject, None)
            return True
        return False

    # -- queries -------------------------------------------------------------------------------
    def versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        """A subject's versions in order (soft-deleted ones only with ``deleted``)."""
        vs = self.subjects.get(subject) or {}
        return [vs[n] for n in sorted(vs) if deleted or not vs[n].deleted]

    def live_subjects(self, deleted: bool = False) -> list[str]:
        """Subjects with at least one version (soft-deleted ones only with ``deleted``)."""
        return sorted(s for s in self.subjects if self.versions(s, deleted))

    def uses_of(self, schema_id: int, deleted: bool = False) -> list[SchemaVersion]:
        """Every (subject, version) registered with this id."""
        return [v for s in sorted(self.subjects) for v in self.versions(s, deleted) if v.id == schema_id]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas whose references name this version."""
        return sorted({v.id for s in self.subjects for v in self.versions(s)
                       for r in v.references
                       if r.get("subject") == subject and r.get("version") == version})
