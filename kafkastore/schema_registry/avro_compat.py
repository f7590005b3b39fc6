"""Avro reader/writer compatibility, as Avro's ``SchemaCompatibility`` (which Confluent uses) decides it.

Schemas are fastavro's parsed form (:func:`fastavro.parse_schema`: full names, named types
referenced by name) plus each side's map of its named types (``named_schemas``), so recursive
and referenced types work; reader and writer resolve names in their own map.
:func:`incompatibilities` returns messages (empty: the reader can read everything the writer
wrote). Pure.
"""
from __future__ import annotations

#: Writer type -> reader types it promotes to (Avro spec, "Schema Resolution").
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _resolve(schema, named: dict):
    """The schema a name stands for; dicts of primitives (logical types) are their primitive."""
    while isinstance(schema, str) and schema not in PRIMITIVES:
        if schema not in named:
            return schema
        schema = named[schema]
    return schema


def _kind(schema) -> str:
    """``union``, ``record``, ``enum``, ``fixed``, ``array``, ``map`` or a primitive name."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        t = schema.get("type")
        if isinstance(t, (dict, list)):
            return _kind(t)
        return t
    return schema


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(reader: dict, writer: dict) -> bool:
    """Avro compares unqualified names, and accepts a reader alias naming the writer."""
    if _short(reader["name"]) == _short(writer["name"]):
        return True
    return any(_short(a) == _short(writer["name"]) for a in reader.get("aliases", ()))


def incompatibilities(reader, writer, reader_named: dict | None = None,
                      writer_named: dict | None = None) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    return _check(reader, writer, (reader_named or {}, writer_named or {}), "/", set())


def _check(reader, writer, named, path, seen) -> list[str]:
    reader, writer = _resolve(reader, named[0]), _resolve(writer, named[1])
    if isinstance(reader, dict) and isinstance(reader.get("type"), (dict, list)):
        reader = reader["type"]
    if isinstance(writer, dict) and isinstance(writer.get("type"), (dict, list)):
        writer = writer["type"]
    rk, wk = _kind(reader), _kind(writer)
    if wk == "union":
        out = []
        for branch in writer:
            out += _check(reader, branch, named, path, seen)
        return out
    if rk == "union":
        for branch in reader:
            if not _check(branch, writer, named, path, seen):
                return []
        return [f"{path}: reader union {_describe(reader)} has no branch for writer type {_describe(writer)}"]
    if rk != wk:
        if rk in PROMOTIONS.get(wk, ()):
            return []
        return [f"{path}: reader type {rk} does not match writer type {wk}"]
    if rk in PRIMITIVES:
        return []
    key = (id(reader), id(writer))
    if key in seen:  # recursive types: assume compatible on the second visit (as Avro does)
        return []
    seen.add(key)
    if rk == "record":
        if not _names_match(reader, writer):
            return [f"{path}: reader record name {reader['name']} does not match writer {writer['name']}"]
        wfields = {f["name"]: f for f in writer.get("fields", ())}
        out = []
        for f in reader.get("fields", ()):
            wf = wfields.get(f["name"])
            if wf is None:
                wf = next((wfields[a] for a in f.get("aliases", ()) if a in wfields), None)
            if wf is None:
                if "default" not in f:
                    out.append(f"{path}{f['name']}: reader field {f['name']!r} has no default "
                               f"and is missing from the writer")
                continue
            out += _check(f["type"], wf["type"], named, f"{path}{f['name']}/", seen)
        return out
    if rk == "enum":
        if not _names_match(reader, writer):
            return [f"{path}: reader enum name {reader['name']} does not match writer {writer['name']}"]
        missing = [s for s in writer.get("symbols", ()) if s not in reader.get("symbols", ())]
        if missing and "default" not in reader:
            return [f"{path}: reader enum {reader['name']} lacks writer symbols {missing}"]
        return []
    if rk == "fixed":
        if not _names_match(reader, writer):
            return [f"{path}: reader fixed name {reader['name']} does not match writer {writer['name']}"]
        if reader.get("size") != writer.get("size"):
            return [f"{path}: fixed size {writer.get('size')} changed to {reader.get('size')}"]
        return []
    if rk == "array":
        return _check(reader["items"], writer["items"], named, f"{path}items/", seen)
    if rk == "map":
        return _check(reader["values"], writer["values"], named, f"{path}values/", seen)
    return [f"{path}: unknown type {rk}"]


def _describe(schema) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(s) for s in schema) + "]"
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)
