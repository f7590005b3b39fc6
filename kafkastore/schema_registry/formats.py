"""The three schema types: parse (42201 on anything invalid), the form two schemas are compared
in, and the compatibility check between two parsed schemas. Pure.

A reference (``{"name", "subject", "version"}``) is resolved by the caller into the referenced
schema's text; Avro needs them to parse (named types defined elsewhere), Protobuf and JSON
Schema parse without them (imports and external ``$ref`` are kept by name).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import SchemaRegistryError
from . import avro_compat, json_compat, protobuf_compat, protobuf_schema

AVRO, PROTOBUF, JSON = "AVRO", "PROTOBUF", "JSON"
TYPES = (JSON, PROTOBUF, AVRO)   # the order Confluent's /schemas/types lists them in
#: Compatibility levels; ``_TRANSITIVE`` ones check every earlier version, others the latest.
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")


def invalid(msg: str) -> SchemaRegistryError:
    """Confluent's 42201 (invalid schema)."""
    return SchemaRegistryError(422, 42201, f"Invalid schema: {msg}")


@dataclass
class Parsed:
    """A parsed schema: ``canonical`` is what equality compares, ``obj`` what compatibility reads."""

    schema_type: str
    canonical: str
    obj: Any
    named: dict = field(default_factory=dict)


#: ``resolve(reference) -> (schema_type, schema_text, its references)``.
Resolver = Callable[[dict], "tuple[str, str, list]"]


def parse(schema_type: str, text: str, references: list, resolve: Resolver,
          normalize: bool = False) -> Parsed:
    """Parse ``text`` of ``schema_type``; :class:`SchemaRegistryError` 42201 if invalid."""
    if not isinstance(text, str) or not text.strip():
        raise invalid("empty schema")
    if schema_type == AVRO:
        return _avro(text, references, resolve, normalize)
    if schema_type == JSON:
        return _json(text, normalize)
    if schema_type == PROTOBUF:
        pf = protobuf_schema.parse(text)
        return Parsed(PROTOBUF, text.strip(), pf)
    raise SchemaRegistryError(422, 42201, f"Invalid schema: unknown schema type {schema_type!r}")


def _loads(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid(f"not JSON: {exc}") from None


def _compact(obj, sort: bool) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=sort, ensure_ascii=False)


def _avro(text: str, references: list, resolve: Resolver, normalize: bool) -> Parsed:
    from fastavro import parse_schema
    from fastavro.schema import SchemaParseException, UnknownType

    named: dict = {}

    def load_refs(refs, depth):
        if depth > 32:
            raise invalid("references nest too deep")
        for ref in refs or ():
            rtype, rtext, rrefs = resolve(ref)
            load_refs(rrefs, depth + 1)
            try:
                parse_schema(_loads(rtext), named_schemas=named)
            except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError,
                    AttributeError) as exc:
                raise invalid(f"reference {ref.get('name')!r}: {exc}") from None

    load_refs(references, 0)
    obj = _loads(text)
    try:
        parsed = parse_schema(obj, named_schemas=named)
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError, AttributeError,
            RecursionError) as exc:
        raise invalid(str(exc) or repr(exc)) from None
    _check_records(obj, 0)
    return Parsed(AVRO, _compact(obj, normalize), parsed, named)


def _check_records(schema, depth: int) -> None:
    """What Avro's Java parser refuses and fastavro lets by: a record without a fields list."""
    if depth > 200:
        raise invalid("schema nests too deep")
    if isinstance(schema, list):
        for s in schema:
            _check_records(s, depth + 1)
    elif isinstance(schema, dict):
        t = schema.get("type")
        if t in ("record", "error"):
            if not isinstance(schema.get("fields"), list):
                raise invalid(f"record {schema.get('name')!r} has no fields list")
            for f in schema["fields"]:
                _check_records(f.get("type"), depth + 1)
        elif t == "array":
            _check_records(schema.get("items"), depth + 1)
        elif t == "map":
            _check_records(schema.get("values"), depth + 1)
        elif isinstance(t, (dict, list)):
            _check_records(t, depth + 1)


def _json(text: str, normalize: bool) -> Parsed:
    import jsonschema
    from jsonschema.exceptions import SchemaError

    obj = _loads(text)
    if not isinstance(obj, (dict, bool)):
        raise invalid("a JSON Schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(obj, default=jsonschema.Draft7Validator).check_schema(obj)
    except SchemaError as exc:
        raise invalid(exc.message) from None
    except (RecursionError, TypeError, ValueError) as exc:
        raise invalid(str(exc)) from None
    return Parsed(JSON, _compact(obj, normalize), obj)


def incompatibilities(new: Parsed, old: Parsed, level: str) -> list[str]:
    """Why ``new`` cannot follow ``old`` under ``level`` (one comparison; the caller picks
    which earlier versions). Empty when compatible."""
    if level == "NONE" or new.schema_type != old.schema_type:
        return [] if level == "NONE" else [
            f"schema type changed from {old.schema_type} to {new.schema_type}"]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    out: list[str] = []
    try:
        if backward:
            out += _one(reader=new, writer=old)
        if forward:
            out += _one(reader=old, writer=new)
    except RecursionError:
        raise invalid("schema nests too deep to compare") from None
    return out


def _one(reader: Parsed, writer: Parsed) -> list[str]:
    if reader.schema_type == AVRO:
        return avro_compat.incompatibilities(reader.obj, writer.obj, reader.named, writer.named)
    if reader.schema_type == JSON:
        return json_compat.incompatibilities(reader.obj, writer.obj)
    return protobuf_compat.incompatibilities(writer.obj, reader.obj)  # original = the writer's schema, update = the reader's
