"""Writer schemas (Avro, Protobuf, JSON Schema) to Arrow types, once per format.

Each ``*_mapping`` function walks a writer schema and returns a :class:`Mapped`:
the Arrow type of the decoded value (Iceberg types follow from it: pyiceberg
converts Arrow types one to one) and, where the decoder's Python value does not
fit that type as is, a converter. The decoders in :mod:`pipelines.decoding.schema_decoding`
build Arrow arrays of whole groups of records from the converted values.

Every field is optional (nullable) in the table, whatever the writer says: old
rows of a column added later are null, and a load never tightens a column.
Schemas that cannot be mapped (recursive types, decimals wider than 38 digits)
raise :class:`UnmappableSchema`; the load sends that schema's records to the
dead letters with the reason. The full table is in docs/DECISIONS.md
("Registry loads: type mapping").
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kafkastore.errors import DebeziumValueError, UnmappableSchemaError

UnmappableSchema = UnmappableSchemaError


@dataclass(frozen=True)
class Mapped:
    """``arrow``: the Arrow type; ``convert``: Python value -> value for ``pa.array``
    (None: the decoder's value fits as is)."""

    arrow: Any
    convert: Callable[[Any], Any] | None = None


def _pa():
    import pyarrow as pa

    return pa


def _ts():
    return _pa().timestamp("us", tz="UTC")


def _list_of(item: Mapped) -> Mapped:
    pa = _pa()
    conv = item.convert
    if conv is None:
        return Mapped(pa.list_(pa.field("element", item.arrow)))
    return Mapped(pa.list_(pa.field("element", item.arrow)),
                  lambda v: None if v is None else [conv(x) for x in v])


def _map_of(key: Mapped, value: Mapped) -> Mapped:
    pa = _pa()
    kc, vc = key.convert or (lambda x: x), value.convert or (lambda x: x)
    t = pa.map_(pa.field("key", key.arrow, False), pa.field("value", value.arrow))

    def conv(v):
        if v is None:
            return None
        items = v.items() if hasattr(v, "items") else v
        return [(kc(k), vc(x)) for k, x in items]

    return Mapped(t, conv)


def _struct_of(fields: list[tuple[str, Mapped]]) -> Mapped:
    """A struct of named fields; the converter takes a dict (missing keys are null)."""
    pa = _pa()
    # A field that can only be null (Avro "null") has no Iceberg type: no column.
    fields = [(n, m) for n, m in fields if not pa.types.is_null(m.arrow)]
    seen = set()
    for name, _ in fields:
        if name in seen:
            raise UnmappableSchema(f"field {name!r} appears twice")
        seen.add(name)
    t = pa.struct([pa.field(n, m.arrow) for n, m in fields])
    convs = [(n, m.convert) for n, m in fields if m.convert is not None]
    if not convs:
        return Mapped(t)

    def conv(v):
        if v is None:
            return None
        out = dict(v)
        for n, c in convs:
            if n in out:
                try:
                    out[n] = c(out[n])
                except DebeziumValueError as exc:   # the reason names the column's path
                    raise DebeziumValueError(f"{n}: {exc}") from None
        return out

    return Mapped(t, conv)


# ---------------------------------------------------------------------------
# Avro

_AVRO_PRIMITIVE = {"boolean": "bool_", "int": "int32", "long": "int64", "float": "float32",
                   "double": "float64", "bytes": "binary", "string": "string"}


_RAW_TIME = "\x00raw-time"   # a key no Avro name can be: the mapping of raw_time=True
RAW_TIME_LOGICAL = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                    "local-timestamp-micros", "date", "time-millis", "time-micros")


_DEBEZIUM = "\x00debezium"   # likewise: the mapping of debezium=True


def avro_mapping(schema: Any, named: Mapping[str, Any] | None = None,
                 raw_time: bool = False, debezium: bool = False) -> Mapped:
    """The mapping of an Avro schema (parsed JSON). A record gives a struct of its
    fields; any other type a struct with one field ``value``. ``named``: named types
    from referenced schemas (full name -> schema JSON). ``raw_time``: the types that
    hold dates, times and timestamps as the integers Avro stores (``timestamp[ms]``
    for timestamp-millis...), for a decoder reading them without their logical type;
    an Arrow cast to the plain mapping's type then gives the table's units.
    ``debezium``: Debezium's encodings Avro has no logical type for (nanoseconds, zoned
    text, variable-scale decimals; :mod:`pipelines.decoding.debezium_types`) are converted value
    by value (the others are logical types after
    :func:`pipelines.decoding.debezium_types.avro_schema`)."""
    names: dict[str, Any] = dict(named or {})
    if raw_time:
        names[_RAW_TIME] = True
    if debezium:
        names[_DEBEZIUM] = True
    m = _avro(schema, names, (), None)
    if isinstance(schema, dict) and schema.get("type") == "record":
        return m
    return _struct_of([("value", m)])


def avro_named_types(schemas: list) -> dict[str, Any]:
    """Named types (full name -> schema JSON) defined by referenced Avro schemas."""
    names: dict[str, Any] = {}
    for s in schemas:
        try:
            _avro(s, names, (), None)
        except UnmappableSchema:
            pass   # the referencing schema's mapping names the problem if it uses the type
    return names


def _avro_name(t: dict, ns: str | None) -> str:
    name = t["name"]
    ns = t.get("namespace", ns)
    return name if "." in name or not ns else f"{ns}.{name}"


def _avro(t: Any, names: dict, stack: tuple, ns: str | None) -> Mapped:
    pa = _pa()
    if isinstance(t, str):
        if t in _AVRO_PRIMITIVE:
            return Mapped(getattr(pa, _AVRO_PRIMITIVE[t])())
        if t == "null":
            return Mapped(pa.null())
        full = t if (t in names or not ns or "." in t) else f"{ns}.{t}"
        if full not in names:
            full = t
        if full in stack:
            raise UnmappableSchema(f"recursive Avro type {t!r} has no Iceberg type")
        if full not in names:
            raise UnmappableSchema(f"unknown Avro type {t!r}")
        named_ns = full.rsplit(".", 1)[0] if "." in full else None
        return _avro(names[full], names, stack, named_ns)
    if isinstance(t, list):
        return _avro_union(t, names, stack, ns)
    if not isinstance(t, dict):
        raise UnmappableSchema(f"malformed Avro schema {t!r:.60}")
    kind = t.get("type")
    logical = t.get("logicalType")
    if names.get(_DEBEZIUM) and t.get("connect.name"):
        from .debezium_types import AVRO_CONVERTED, avro_converter  # lazy: Debezium's Avro types only when asked

        if t["connect.name"] in AVRO_CONVERTED:
            if kind == "record":
                names[_avro_name(t, ns)] = t
            return Mapped(*avro_converter(t["connect.name"]))
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(t.get("precision", 0)), int(t.get("scale", 0))
        if not 0 < precision <= 38:
            raise UnmappableSchema(f"Avro decimal precision {precision} is outside 1..38")
        if kind == "fixed":
            names[_avro_name(t, ns)] = t
        return Mapped(pa.decimal128(precision, scale))
    raw = names.get(_RAW_TIME, False)
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return Mapped(pa.timestamp("ms", tz="UTC") if raw and logical == "timestamp-millis"
                      else _ts())
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return Mapped(pa.timestamp("ms") if raw and logical == "local-timestamp-millis"
                      else pa.timestamp("us"))
    if logical == "date" and kind == "int":
        return Mapped(pa.date32())
    if logical == "time-millis" and kind == "int" or logical == "time-micros" and kind == "long":
        return Mapped(pa.time32("ms") if raw and logical == "time-millis" else pa.time64("us"))
    if logical == "uuid" and kind == "string":
        return Mapped(pa.string(), lambda v: None if v is None else str(v))
    if kind == "record":
        full = _avro_name(t, ns)
        names[full] = t
        inner = full.rsplit(".", 1)[0] if "." in full else None
        fields = [(f["name"], _avro(f["type"], names, stack + (full,), inner))
                  for f in t.get("fields", ())]
        if not fields:
            raise UnmappableSchema(f"Avro record {full!r} has no fields")
        return _struct_of(fields)
    if kind == "enum":
        names[_avro_name(t, ns)] = t
        return Mapped(pa.string())
    if kind == "fixed":
        names[_avro_name(t, ns)] = t
        return Mapped(pa.binary())
    if kind == "array":
        return _list_of(_avro(t["items"], names, stack, ns))
    if kind == "map":
        return _map_of(Mapped(pa.string()), _avro(t["values"], names, stack, ns))
    if isinstance(kind, (str, list, dict)):
        return _avro(kind, names, stack, ns)
    raise UnmappableSchema(f"unsupported Avro type {json.dumps(t)[:80]}")


def _avro_branch_name(b: Any, ns: str | None) -> str:
    if isinstance(b, str):
        return b.rsplit(".", 1)[-1]
    kind = b.get("type")
    if kind in ("record", "enum", "fixed"):
        return b["name"].rsplit(".", 1)[-1]
    if b.get("logicalType"):
        return str(b["logicalType"]).replace("-", "_")
    return str(kind)


def _avro_union(t: list, names: dict, stack: tuple, ns: str | None) -> Mapped:
    """``[null, T]`` is T (nullable); other unions a struct with one field per
    non-null branch, named by the branch's type (``string``, ``long``, a record's
    short name), of which the decoded value sets the one it used."""
    branches = [b for b in t if b != "null"]
    if not branches:
        return Mapped(_pa().null())
    if len(branches) == 1:
        return _avro(branches[0], names, stack, ns)
    mapped = [(_avro_branch_name(b, ns), _avro(b, names, stack, ns), b) for b in branches]
    struct = _struct_of([(n, m) for n, m, _ in mapped])
    tests = [(n, m.convert or (lambda x: x), _avro_test(b, names, ns)) for n, m, b in mapped]

    def conv(v):
        if v is None:
            return None
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            # fastavro's return_record_name: (record name, record)
            short = v[0].rsplit(".", 1)[-1]
            for n, c, _ in tests:
                if n == short:
                    return {n: c(v[1])}
        for n, c, test in tests:
            if test(v):
                return {n: c(v)}
        raise ValueError(f"value {v!r:.40} matches no branch of union {json.dumps(t)[:80]}")

    return Mapped(struct.arrow, conv)


def _avro_test(b: Any, names: dict, ns: str | None) -> Callable[[Any], bool]:
    import datetime as dt
    import decimal

    if isinstance(b, str) and b not in _AVRO_PRIMITIVE:
        full = b if b in names else (f"{ns}.{b}" if ns else b)
        b = names.get(full, names.get(b, b))
    kind = b if isinstance(b, str) else b.get("type")
    logical = None if isinstance(b, str) else b.get("logicalType")
    if logical == "decimal":
        return lambda v: isinstance(v, decimal.Decimal)
    if logical in RAW_TIME_LOGICAL and names.get(_RAW_TIME):
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if logical and "timestamp" in logical:
        return lambda v: isinstance(v, dt.datetime)
    if logical == "date":
        return lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime)
    if logical and logical.startswith("time-"):
        return lambda v: isinstance(v, dt.time)
    return {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "bytes": lambda v: isinstance(v, (bytes, bytearray)),
        "fixed": lambda v: isinstance(v, (bytes, bytearray)),
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "record": lambda v: isinstance(v, dict),
        "map": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }.get(kind, lambda v: False)


# ---------------------------------------------------------------------------
# Protobuf

_WRAPPERS = {"google.protobuf.DoubleValue": "float64", "google.protobuf.FloatValue": "float32",
             "google.protobuf.Int64Value": "int64", "google.protobuf.UInt64Value": "int64",
             "google.protobuf.Int32Value": "int32", "google.protobuf.UInt32Value": "int64",
             "google.protobuf.BoolValue": "bool_", "google.protobuf.StringValue": "string",
             "google.protobuf.BytesValue": "binary"}
_JSON_WKT = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def protobuf_mapping(descriptor) -> Mapped:
    """The mapping of a protobuf message ``descriptor`` (a struct of its fields);
    the converter takes a message object and returns a dict."""
    return _proto_message(descriptor, ())


def _proto_scalar(fd) -> Mapped:
    pa = _pa()
    T = fd.__class__
    t = fd.type
    if t in (T.TYPE_DOUBLE,):
        return Mapped(pa.float64())
    if t == T.TYPE_FLOAT:
        return Mapped(pa.float32())
    if t in (T.TYPE_INT32, T.TYPE_SINT32, T.TYPE_SFIXED32):
        return Mapped(pa.int32())
    if t in (T.TYPE_INT64, T.TYPE_SINT64, T.TYPE_SFIXED64, T.TYPE_UINT32, T.TYPE_FIXED32,
             T.TYPE_UINT64, T.TYPE_FIXED64):
        return Mapped(pa.int64())
    if t == T.TYPE_BOOL:
        return Mapped(pa.bool_())
    if t == T.TYPE_STRING:
        return Mapped(pa.string())
    if t == T.TYPE_BYTES:
        return Mapped(pa.binary())
    if t == T.TYPE_ENUM:
        by_number = {v.number: v.name for v in fd.enum_type.values}
        return Mapped(pa.string(), lambda v: None if v is None else by_number.get(v, str(v)))
    raise UnmappableSchema(f"protobuf field {fd.full_name}: unsupported type {t}")


def _proto_value(fd, stack: tuple) -> Mapped:
    """The mapping of one (non-repeated) value of field ``fd``."""
    if fd.message_type is None:
        return _proto_scalar(fd)
    return _proto_message(fd.message_type, stack)


def _proto_message(desc, stack: tuple) -> Mapped:
    pa = _pa()
    name = desc.full_name
    if name == "google.protobuf.Timestamp":
        return Mapped(_ts(), lambda m: None if m is None else m.seconds * 1_000_000 + m.nanos // 1000)
    if name == "google.protobuf.Duration":
        return Mapped(pa.int64(), lambda m: None if m is None else m.seconds * 1_000_000 + m.nanos // 1000)
    if name in _WRAPPERS:
        return Mapped(getattr(pa, _WRAPPERS[name])(), lambda m: None if m is None else m.value)
    if name in _JSON_WKT:
        from google.protobuf import json_format

        return Mapped(pa.string(), lambda m: None if m is None else json_format.MessageToJson(
            m, indent=None))
    if name == "google.protobuf.Any":
        return Mapped(pa.struct([("type_url", pa.string()), ("value", pa.binary())]),
                      lambda m: None if m is None else {"type_url": m.type_url, "value": m.value})
    if name in stack:
        raise UnmappableSchema(f"recursive protobuf message {name!r} has no Iceberg type")
    inner = stack + (name,)
    fields: list[tuple[str, Mapped]] = []
    getters = []
    for fd in desc.fields:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            kfd, vfd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
            km, vm = _proto_value(kfd, inner), _proto_value(vfd, inner)
            m = _map_of(km, vm)
            getters.append(_map_getter(fd.name, km, vm))
        elif _repeated(fd):
            item = _proto_value(fd, inner)
            m = Mapped(pa.list_(pa.field("element", item.arrow)))
            getters.append(_list_getter(fd.name, item))
        else:
            m = _proto_value(fd, inner)
            getters.append(_single_getter(fd, m))
        if pa.types.is_struct(m.arrow) and m.arrow.num_fields == 0:
            getters.pop()   # google.protobuf.Empty and the like: no column
            continue
        fields.append((fd.name, m))
    if not fields:
        return Mapped(pa.struct([]), lambda m: None)
    struct = _struct_of(fields)

    def conv(msg):
        if msg is None:
            return None
        return {n: g(msg) for n, g in getters}

    return Mapped(struct.arrow, conv)


def _repeated(fd) -> bool:
    is_rep = getattr(fd, "is_repeated", None)
    if is_rep is not None:
        return bool(is_rep)
    return fd.label == fd.LABEL_REPEATED


def _has_presence(fd) -> bool:
    has = getattr(fd, "has_presence", None)
    if has is not None:
        return bool(has)
    return fd.message_type is not None or fd.containing_oneof is not None


def _single_getter(fd, m: Mapped):
    name = fd.name
    conv = m.convert
    if _has_presence(fd):
        if conv is None:
            return name, lambda msg: getattr(msg, name) if msg.HasField(name) else None
        return name, lambda msg: conv(getattr(msg, name)) if msg.HasField(name) else None
    if conv is None:
        return name, lambda msg: getattr(msg, name)
    return name, lambda msg: conv(getattr(msg, name))


def _list_getter(name: str, item: Mapped):
    conv = item.convert
    if conv is None:
        return name, lambda msg: list(getattr(msg, name))
    return name, lambda msg: [conv(x) for x in getattr(msg, name)]


def _map_getter(name: str, km: Mapped, vm: Mapped):
    kc, vc = km.convert or (lambda x: x), vm.convert or (lambda x: x)
    return name, lambda msg: [(kc(k), vc(v)) for k, v in getattr(msg, name).items()]


# ---------------------------------------------------------------------------
# JSON Schema


def json_schema_mapping(schema: Any, references: Mapping[str, Any] | None = None) -> Mapped:
    """The mapping of a JSON Schema (parsed). An object schema gives a struct of
    its properties; anything else a struct with one field ``value``.
    ``references``: referenced schemas by reference name (for ``$ref`` to them)."""
    ctx = _JsonCtx(schema, dict(references or {}))
    m = ctx.map(schema, ())
    if ctx.kind(schema) == "object" and schema.get("properties") is not None:
        return m
    return _struct_of([("value", m)])


def _json_text(v):
    return None if v is None else json.dumps(v, separators=(",", ":"), sort_keys=True)


def _strict_int(v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise ValueError(f"expected an integer, got {v!r:.40}")
    return v


def _strict(pytypes, what):
    def conv(v):
        if v is None or (isinstance(v, pytypes) and not (isinstance(v, bool) and bool not in pytypes)):
            return v
        raise ValueError(f"expected {what}, got {v!r:.40}")
    return conv


class _JsonCtx:
    def __init__(self, root: Any, refs: dict):
        self.root = root
        self.refs = refs

    def resolve(self, ref: str, doc_root: Any) -> tuple[Any, Any]:
        target, _, frag = ref.partition("#")
        root = doc_root
        if target:
            if target not in self.refs:
                raise UnmappableSchema(f"JSON Schema $ref {ref!r}: no such reference")
            root = self.refs[target]
        node = root
        for part in [p for p in frag.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise UnmappableSchema(f"JSON Schema $ref {ref!r} points nowhere")
            node = node[part]
        return node, root

    @staticmethod
    def kind(s: Any) -> str | None:
        if not isinstance(s, dict):
            return None
        t = s.get("type")
        if isinstance(t, list):
            rest = [x for x in t if x != "null"]
            t = rest[0] if len(rest) == 1 else None
        if t is None and "properties" in s:
            return "object"
        return t

    def map(self, s: Any, stack: tuple, root: Any = None) -> Mapped:
        pa = _pa()
        root = self.root if root is None else root
        if s is True or s == {} or s is None:
            return Mapped(pa.string(), _json_text)
        if not isinstance(s, dict):
            raise UnmappableSchema(f"malformed JSON Schema {s!r:.60}")
        if "$ref" in s:
            key = (id(root), s["$ref"])
            if key in stack:
                raise UnmappableSchema(f"recursive JSON Schema $ref {s['$ref']!r} has no Iceberg type")
            node, node_root = self.resolve(s["$ref"], root)
            return self.map(node, stack + (key,), node_root)
        for comb in ("oneOf", "anyOf"):
            if comb in s:
                return self.combined(s[comb], stack, root, comb)
        if "allOf" in s:
            merged: dict = {"type": "object", "properties": {}}
            for part in s["allOf"]:
                if isinstance(part, dict) and "$ref" in part:
                    part, _ = self.resolve(part["$ref"], root)
                if self.kind(part) != "object":
                    return Mapped(pa.string(), _json_text)
                merged["properties"].update(part.get("properties") or {})
            return self.map(merged, stack, root)
        t = s.get("type")
        if isinstance(t, list):
            rest = [x for x in t if x != "null"]
            if len(rest) != 1:
                return Mapped(pa.string(), _json_text)
            t = rest[0]
        if t is None and "properties" in s:
            t = "object"
        if t == "string":
            fmt = s.get("format")
            if fmt == "date-time":
                return Mapped(_ts(), _parse_datetime)
            if fmt == "date":
                return Mapped(pa.date32(), _parse_date)
            return Mapped(pa.string(), _strict(str, "a string"))
        if t == "integer":
            return Mapped(pa.int64(), _strict_int)
        if t == "number":
            return Mapped(pa.float64(), _strict((int, float), "a number"))
        if t == "boolean":
            return Mapped(pa.bool_(), _strict((bool,), "a boolean"))
        if t == "array":
            items = s.get("items")
            if isinstance(items, list):   # tuple validation: no single element type
                return Mapped(pa.string(), _json_text)
            return _list_of(self.map(items, stack, root))
        if t == "object":
            props = s.get("properties")
            if props:
                return _struct_of([(k, self.map(v, stack, root)) for k, v in props.items()])
            extra = s.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return _map_of(Mapped(pa.string()), self.map(extra, stack, root))
            return Mapped(pa.string(), _json_text)
        return Mapped(pa.string(), _json_text)

    def combined(self, branches: list, stack: tuple, root: Any, comb: str) -> Mapped:
        """``oneOf``/``anyOf``: without its null branch, one branch is that branch;
        branches of one type are that type; object branches merge into one struct
        (their properties' union, each property's types merged); anything else is
        the value as JSON text."""
        pa = _pa()
        rest = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        resolved = []
        for b in rest:
            r = root
            while isinstance(b, dict) and "$ref" in b:
                b, r = self.resolve(b["$ref"], r)
            resolved.append((b, r))
        if len(resolved) == 1:
            return self.map(resolved[0][0], stack, resolved[0][1])
        mapped = [self.map(b, stack, r) for b, r in resolved]
        if mapped and all(m.arrow == mapped[0].arrow for m in mapped) and not pa.types.is_struct(
                mapped[0].arrow):
            return mapped[0]
        if resolved and all(self.kind(b) == "object" and b.get("properties") for b, _ in resolved):
            from .schema_evolution import IncompatibleChange, merge_types  # lazy: pyarrow start-up (schema merges)

            props: dict[str, Any] = {}
            for b, r in resolved:
                for k, v in b["properties"].items():
                    props.setdefault(k, []).append((v, r))
            fields = []
            for k, options in props.items():
                ms = [self.map(v, stack, r) for v, r in options]
                t = ms[0].arrow
                try:
                    for m in ms[1:]:
                        t = _json_number(t, m.arrow) or merge_types(t, m.arrow, k)
                except IncompatibleChange:
                    fields.append((k, Mapped(pa.string(), _json_text)))
                    continue
                conv = next((m.convert for m in ms if m.arrow == t and m.convert), None)
                fields.append((k, Mapped(t, conv)))
            return _struct_of(fields)
        return Mapped(pa.string(), _json_text)


def _json_number(a, b):
    """integer and number branches: a JSON number is a double."""
    pa = _pa()
    if {a, b} == {pa.int64(), pa.float64()}:
        return pa.float64()
    return None


def _parse_datetime(v):
    import datetime as dt

    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"expected a date-time string, got {v!r:.40}")
    d = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    return d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)


def _parse_date(v):
    import datetime as dt

    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"expected a date string, got {v!r:.40}")
    return dt.date.fromisoformat(v)
