"""JSON Schema compatibility for the common cases, after Confluent's ``JsonSchemaDiff``. Pure.

:func:`incompatibilities` asks whether every document valid under ``writer`` is valid under
``reader`` (BACKWARD: the old schema writes, the new one reads; FORWARD: the other way), and
names what breaks it with Confluent's difference names:

- ``TYPE_NARROWED`` / ``TYPE_CHANGED``: the reader accepts fewer types (``integer`` widening to
  ``number`` is fine, the reverse is not);
- ``PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL``: the reader constrains a property the writer left
  open (its documents may hold anything there); adding one to a closed writer is fine;
- ``PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL``: the writer's property is gone and the reader
  allows no additional properties; removing from an open reader is fine;
- ``ADDITIONAL_PROPERTIES_NARROWED``: the writer allowed extra properties, the reader does not;
- ``REQUIRED_ATTRIBUTE_ADDED``: the reader requires a property the writer did not;
- ``ENUM_ARRAY_NARROWED``, ``MAXIMUM_DECREASED``, ``MINIMUM_INCREASED`` (and the length, items
  and properties counterparts), ``PATTERN_CHANGED``;
- ``COMBINED_TYPE_SUBSCHEMAS_CHANGED``: a ``oneOf``/``anyOf`` branch of the writer that no
  reader branch accepts.

Local ``$ref`` (``#/definitions/..``, ``#/$defs/..``) are followed; other references compare by
their text.
"""
from __future__ import annotations

_VALIDATION = {"type", "properties", "required", "additionalProperties", "items", "enum", "const",
               "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
               "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "pattern",
               "oneOf", "anyOf", "allOf", "not", "$ref", "patternProperties"}
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")


def incompatibilities(reader, writer) -> list[str]:
    """Why documents valid under ``writer`` may be invalid under ``reader`` (empty: none)."""
    return _Check(reader, writer).run()


class _Check:
    def __init__(self, reader_root, writer_root):
        self.rroot, self.wroot = reader_root, writer_root
        self.seen: set = set()

    def run(self) -> list[str]:
        return self.check(self.rroot, self.wroot, "#")

    def _deref(self, schema, root):
        hops = 0
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) \
                and schema["$ref"].startswith("#") and hops < 32:
            node = root
            for part in schema["$ref"][1:].split("/"):
                if not part:
                    continue
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and part in node:
                    node = node[part]
                else:
                    return schema
            schema, hops = node, hops + 1
        return schema

    def check(self, r, w, path: str) -> list[str]:
        r, w = self._deref(r, self.rroot), self._deref(w, self.wroot)
        if w is False or r is True or (isinstance(r, dict) and not (_VALIDATION & r.keys())):
            return []
        if r is False:
            return [f"{path}: SCHEMA_NARROWED: the reader accepts nothing"]
        if w is True or not isinstance(w, dict):
            w = {}
        if not isinstance(r, dict):
            return []
        key = (id(r), id(w))
        if key in self.seen:
            return []
        self.seen.add(key)
        for comb in ("oneOf", "anyOf"):
            if isinstance(w.get(comb), list):
                rest = {k: v for k, v in w.items() if k != comb}
                out = []
                for branch in w[comb]:
                    merged = {**rest, **branch} if isinstance(branch, dict) else branch
                    out += self.check(r, merged, path)
                return out
        for comb in ("oneOf", "anyOf"):
            if isinstance(r.get(comb), list):
                rest = {k: v for k, v in r.items() if k != comb}
                for branch in r[comb]:
                    merged = {**rest, **branch} if isinstance(branch, dict) else branch
                    if not self.check(merged, w, path):
                        return []
                return [f"{path}: COMBINED_TYPE_SUBSCHEMAS_CHANGED: no reader branch accepts "
                        f"the writer's documents"]
        out = []
        rtypes, wtypes = _types(r), _types(w)
        if rtypes is not None:
            if wtypes is None:
                out.append(f"{path}: TYPE_NARROWED: reader type {sorted(rtypes)} from any")
            else:
                lost = {t for t in wtypes if t not in rtypes
                        and not (t == "integer" and "number" in rtypes)}
                if lost:
                    overlap = wtypes & rtypes or ("number" in wtypes and "integer" in rtypes)
                    kind = "TYPE_NARROWED" if overlap else "TYPE_CHANGED"
                    out.append(f"{path}: {kind}: {sorted(wtypes)} -> {sorted(rtypes)}")
        if "enum" in r:
            wenum = w.get("enum")
            if not isinstance(wenum, list) or any(v not in r["enum"] for v in wenum):
                out.append(f"{path}: ENUM_ARRAY_NARROWED")
        for k in _UPPER:
            if k in r and not (k in w and _num(w[k]) <= _num(r[k])):
                out.append(f"{path}: {k.upper()}_DECREASED" if k in w else f"{path}: {k.upper()}_ADDED")
        for k in _LOWER:
            if k in r and not (k in w and _num(w[k]) >= _num(r[k])):
                out.append(f"{path}: {k.upper()}_INCREASED" if k in w else f"{path}: {k.upper()}_ADDED")
        if "pattern" in r and r["pattern"] != w.get("pattern"):
            out.append(f"{path}: PATTERN_CHANGED")
        if wtypes is None or "object" in wtypes:
            out += self._object(r, w, path)
        if (wtypes is None or "array" in wtypes) and isinstance(r.get("items"), (dict, bool)):
            out += self.check(r["items"], w.get("items", True), f"{path}/items")
        return out

    def _object(self, r, w, path) -> list[str]:
        out = []
        rprops, wprops = r.get("properties") or {}, w.get("properties") or {}
        radd, wadd = r.get("additionalProperties", True), w.get("additionalProperties", True)
        for name, rp in rprops.items():
            p = f"{path}/properties/{name}"
            if name in wprops:
                out += self.check(rp, wprops[name], p)
            elif wadd is not False and self.check(rp, wadd, p):
                out.append(f"{p}: PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        for name, wp in wprops.items():
            if name not in rprops:
                p = f"{path}/properties/{name}"
                if radd is False:
                    out.append(f"{p}: PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
                elif isinstance(radd, dict):
                    out += self.check(radd, wp, p)
        if wadd is not False and radd is not True:
            if radd is False:
                out.append(f"{path}: ADDITIONAL_PROPERTIES_NARROWED")
            else:
                out += self.check(radd, wadd, f"{path}/additionalProperties")
        added = set(r.get("required") or ()) - set(w.get("required") or ())
        for name in sorted(added):
            out.append(f"{path}/properties/{name}: REQUIRED_ATTRIBUTE_ADDED")
        return out


def _types(s: dict) -> set | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0
