"""Turn the Kafka ``value`` bytes into columns, with dead letters for what fails.

Options (Spark-style camelCase; snake_case such as ``value_format`` is accepted
too, which is how ``loads`` entries in the config file spell them):

``valueFormat``
    ``raw`` (default: nothing decoded), ``json``, ``avro``; with ``schemaRegistry``
    also ``protobuf`` and ``json-schema``.
``schemaRegistry``
    The URL of a Confluent-compatible schema registry (``http://user:pass@host:port``
    for basic auth). Values are then decoded by the schema id in their header with
    that id's writer schema, and the table follows the writers' schemas
    (:mod:`pipelines.jobs.registry_load`); ``valueSchema`` is not used.
``keyFormat``
    With ``schemaRegistry``: ``raw`` (default) keeps the key bytes; ``avro``,
    ``protobuf`` or ``json-schema`` decodes keys by their header's schema id into a
    struct column ``key`` (dead letters keep the raw key).
``onIncompatible``
    With ``schemaRegistry``: ``dead-letter`` (default) sends records of a writer
    schema the table cannot take to the dead letters with the reason; ``fail``
    stops the load, before committing anything, with a one-line error.
``valueSchema``
    json: a Spark DDL string (``"id long, name string, tags array<string>"``) or
    a Spark JSON schema; avro: the Avro schema as JSON text.
``valueSchemaFile``
    The same, read from a file (any fsspec URL or local path).
``confluentWireFormat``
    avro only. ``auto`` (default): values starting with the Confluent header
    (magic byte 0 + 4-byte big-endian schema id) are decoded after it, and if
    that fails the whole value is tried as plain Avro; ``true``: the header is
    required; ``false``: values are plain Avro bodies.
``valueSchemaId``
    avro only, optional: with a Confluent header, only this schema id is accepted.
``flatten``
    ``true`` (default): decoded fields become top-level columns next to the
    Kafka columns (``key``, ``topic``, ``partition``, ``offset``, ``timestamp``,
    ``timestampType``, ``headers``); a field named like one of them is a
    ConfigError (use ``flatten=false``). ``false``: the decoded struct replaces
    the ``value`` column.
``keepRawValue``
    ``false`` (default): the raw bytes are dropped from good rows; ``true``:
    kept as ``value_raw``.

A null value (a tombstone) is a good row whose decoded fields are all null.
Everything else that does not decode goes to the dead letters, keyed by
(topic, partition, offset) with the raw key/value and the error text; nothing is
dropped. How each format decodes:

* json: Spark's ``from_json`` (in the JVM: no Python per record) in PERMISSIVE
  mode with a corrupt-record column, plus checks for invalid UTF-8 and empty
  values. Spark's semantics apply: missing fields are null, unknown fields are
  ignored, a number is accepted for a string field, trailing text after the
  first JSON value is ignored. The error text of a dead letter is worked out in
  Python for the failed rows only.
* avro: fastavro on the executors (``mapInArrow``; Spark's own ``from_avro``
  needs the external spark-avro package). A value must be consumed exactly.
  Types map as spark-avro maps them; unions other than ``[null, T]`` are not
  supported, ``time-*`` logical types stay integers, ``uuid`` stays a string.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from kafkastore.errors import ConfigError

FORMATS = ("raw", "json", "avro", "protobuf", "json-schema")
REGISTRY_FORMATS = ("avro", "protobuf", "json-schema")
ON_INCOMPATIBLE = ("dead-letter", "fail")
WIRE_MODES = ("auto", "true", "false")
KAFKA_META_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType",
                      "headers")
DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key",
                       "value", "headers", "error")
_DECODED = "__decoded"
ERROR_COLUMN = "__error"
_OPTION_NAMES = {
    "valueformat": "value_format", "valueschema": "value_schema",
    "valueschemafile": "value_schema_file", "confluentwireformat": "confluent_wire_format",
    "valueschemaid": "value_schema_id", "flatten": "flatten", "keeprawvalue": "keep_raw_value",
    "schemaregistry": "schema_registry", "onincompatible": "on_incompatible",
    "keyformat": "key_format",
}


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name} must be true or false, got {value!r}")


@dataclass(frozen=True)
class DecodeOptions:
    """Parsed decoder options (see the module docstring for their meaning)."""

    value_format: str = "raw"
    value_schema: str | None = None
    value_schema_file: str | None = None
    confluent_wire_format: str = "auto"
    value_schema_id: int | None = None
    flatten: bool = True
    keep_raw_value: bool = False
    schema_registry: str | None = None
    on_incompatible: str = "dead-letter"
    key_format: str = "raw"

    @classmethod
    def parse(cls, options: Mapping[str, Any] | "DecodeOptions" | None = None,
              **more: Any) -> "DecodeOptions":
        """From a mapping of options (camelCase or snake_case) plus keyword overrides."""
        if isinstance(options, DecodeOptions):
            base = {k: getattr(options, k) for k in cls.__dataclass_fields__}
            options = {}
        else:
            base = {}
        merged = dict(options or {})
        merged.update(more)
        for key, value in merged.items():
            norm = _OPTION_NAMES.get(str(key).replace("_", "").lower())
            if norm is None:
                raise ConfigError(f"unknown decoder option {key!r}; expected some of "
                                  f"valueFormat, valueSchema, valueSchemaFile, "
                                  f"confluentWireFormat, valueSchemaId, flatten, keepRawValue, "
                                  f"schemaRegistry, onIncompatible, keyFormat")
            base[norm] = value
        fmt = str(base.get("value_format") or "raw").lower()
        if fmt not in FORMATS:
            raise ConfigError(f"valueFormat must be one of {FORMATS}, got {fmt!r}")
        wire = str(base.get("confluent_wire_format", "auto")).lower()
        if wire not in WIRE_MODES:
            raise ConfigError(f"confluentWireFormat must be one of {WIRE_MODES}, got {wire!r}")
        sid = base.get("value_schema_id")
        try:
            sid = None if sid in (None, "") else int(sid)
        except (TypeError, ValueError):
            raise ConfigError(f"valueSchemaId must be an integer, got {sid!r}") from None
        opts = cls(value_format=fmt, value_schema=base.get("value_schema") or None,
                   value_schema_file=base.get("value_schema_file") or None,
                   confluent_wire_format=wire, value_schema_id=sid,
                   flatten=_bool("flatten", base.get("flatten", True)),
                   keep_raw_value=_bool("keepRawValue", base.get("keep_raw_value", False)),
                   schema_registry=str(base.get("schema_registry") or "") or None,
                   on_incompatible=str(base.get("on_incompatible") or "dead-letter").lower(),
                   key_format=str(base.get("key_format") or "raw").lower())
        if opts.key_format not in ("raw",) + REGISTRY_FORMATS:
            raise ConfigError(f"keyFormat must be one of {('raw',) + REGISTRY_FORMATS}, got "
                              f"{opts.key_format!r}")
        if opts.key_format != "raw" and not opts.schema_registry:
            raise ConfigError(f"keyFormat={opts.key_format} needs schemaRegistry")
        if opts.on_incompatible not in ON_INCOMPATIBLE:
            raise ConfigError(f"onIncompatible must be one of {ON_INCOMPATIBLE}, got "
                              f"{opts.on_incompatible!r}")
        if opts.schema_registry:
            if fmt not in REGISTRY_FORMATS:
                raise ConfigError(f"schemaRegistry needs valueFormat one of {REGISTRY_FORMATS}, "
                                  f"got {fmt!r}")
            if opts.value_schema or opts.value_schema_file:
                raise ConfigError("give schemaRegistry or valueSchema/valueSchemaFile, not both")
            return opts
        if fmt in REGISTRY_FORMATS and fmt != "avro":
            raise ConfigError(f"valueFormat={fmt} needs schemaRegistry (the URL of a schema "
                              f"registry)")
        if fmt != "raw" and not (opts.value_schema or opts.value_schema_file):
            raise ConfigError(f"valueFormat={fmt} needs valueSchema or valueSchemaFile, or "
                              f"schemaRegistry")
        if opts.value_schema and opts.value_schema_file:
            raise ConfigError("give valueSchema or valueSchemaFile, not both")
        return opts

    def schema_text(self) -> str | None:
        """The schema text, read from ``value_schema_file`` if that is set."""
        if self.value_schema_file:
            import fsspec

            try:
                with fsspec.open(self.value_schema_file, "rt", encoding="utf-8") as f:
                    return f.read()
            except (OSError, ValueError) as exc:
                raise ConfigError(f"cannot read valueSchemaFile {self.value_schema_file!r}: "
                                  f"{exc}") from None
        return self.value_schema


@dataclass
class Decoded:
    """Result of :func:`decode_value`.

    ``good`` and ``dead_letters`` are projections of ``combined`` (the input
    columns plus the decoded struct and the error). To produce both from one
    pass over the input, ``combined.persist()`` before using them.
    """

    good: Any
    dead_letters: Any
    combined: Any


def decode_value(df, options: Mapping[str, Any] | DecodeOptions | None = None,
                 **more: Any) -> Decoded:
    """Decode ``df``'s ``value`` column (a DataFrame with the Kafka schema).

    Returns :class:`Decoded` with ``good`` (Kafka columns + decoded columns) and
    ``dead_letters`` (topic, partition, offset, timestamp, timestampType, key,
    value, headers, error: whichever of them the input has, plus ``error``).
    """
    from pyspark.sql import functions as F

    opts = DecodeOptions.parse(options, **more)
    if opts.schema_registry:
        raise ConfigError("schemaRegistry decoding runs in loads (kafkastore load), not in "
                          "decode_value")
    missing = [c for c in ("value", "topic", "partition", "offset") if c not in df.columns]
    if missing:
        raise ConfigError(f"cannot decode: the input lacks column(s) {missing}; expected the "
                          f"Kafka schema")
    if opts.value_format == "raw":
        combined = df.withColumn(ERROR_COLUMN, F.lit(None).cast("string"))
        dead = combined.where(F.lit(False)).select(*_dead_columns(df), F.col(ERROR_COLUMN).alias("error"))
        return Decoded(df, dead, combined)
    if opts.value_format == "json":
        combined, detail = _json_combined(df, opts)
    else:
        combined, detail = _avro_combined(df, opts), None
    good = combined.where(F.col(ERROR_COLUMN).isNull()).select(*good_columns(df, combined, opts))
    dead = combined.where(F.col(ERROR_COLUMN).isNotNull())
    error = F.col(ERROR_COLUMN) if detail is None else F.coalesce(detail(F.col("value")), F.col(ERROR_COLUMN))
    dead = dead.select(*_dead_columns(df), error.alias("error"))
    return Decoded(good, dead, combined)


def count_dead_letters(dead_letters) -> dict[tuple[str, int], int]:
    """``{(topic, partition): number of dead letters}`` (runs a Spark job)."""
    rows = dead_letters.groupBy("topic", "partition").count().collect()
    return {(r["topic"], r["partition"]): r["count"] for r in rows}


def _dead_columns(df) -> list[str]:
    return [c for c in DEAD_LETTER_COLUMNS if c in df.columns and c != "error"]


def good_columns(df, combined, opts: DecodeOptions) -> list:
    """The columns of decoded rows: the Kafka columns and the decoded value (flattened
    into top-level columns unless ``flatten`` is false)."""
    from pyspark.sql import functions as F

    keep = [c for c in df.columns if c != "value"]
    cols = [F.col(c) for c in keep]
    if opts.keep_raw_value:
        keep.append("value_raw")
        cols.append(F.col("value").alias("value_raw"))
    if not opts.flatten:
        return cols + [F.col(_DECODED).alias("value")]
    fields = combined.schema[_DECODED].dataType.fieldNames()
    clash = sorted(set(fields) & set(keep))
    if clash:
        raise ConfigError(f"decoded field(s) {clash} clash with Kafka columns; set flatten=false "
                          f"to get the decoded value as a struct column 'value'")
    return cols + [F.col(f"{_DECODED}.`{f}`").alias(f) for f in fields]


# ---------------------------------------------------------------------------
# json


def parse_json_schema(text: str, spark=None):
    """A Spark StructType from a DDL string or a Spark JSON schema (ConfigError if bad)."""
    from pyspark.sql.types import DataType, StructType

    text = (text or "").strip()
    try:
        if text.startswith("{"):
            schema = StructType.fromJson(json.loads(text))
        else:
            schema = DataType.fromDDL(text)
    except Exception as exc:  # Spark raises ParseException, a JVM-backed error, or ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"bad valueSchema for json {text[:80]!r}: {first}") from None
    if not isinstance(schema, StructType):
        raise ConfigError(f"valueSchema for json must describe fields (a struct), got "
                          f"{schema.simpleString()}")
    return schema


def _json_combined(df, opts: DecodeOptions):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    schema = parse_json_schema(opts.schema_text())
    corrupt = "_corrupt_record"
    while corrupt in schema.fieldNames():
        corrupt = "_" + corrupt
    parse_schema = StructType(list(schema.fields) + [StructField(corrupt, StringType())])
    text = F.col("value").cast("string")
    parsed = df.withColumn("__parsed", F.from_json(
        text, parse_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt}))
    p = F.col("__parsed")
    error = (F.when(F.col("value").isNull(), F.lit(None))
             .when(~F.is_valid_utf8(text), F.lit("value is not valid UTF-8"))
             .when(p.isNull(), F.lit("empty value: expected a JSON object"))
             .when(p[corrupt].isNotNull(),
                   F.lit(f"not a JSON object matching schema {schema.simpleString()}"))
             .otherwise(F.lit(None)).cast("string"))
    decoded = F.when(error.isNull() & F.col("value").isNotNull(),
                     F.struct(*[p[f.name].alias(f.name) for f in schema.fields]))
    combined = parsed.select(*df.columns, decoded.alias(_DECODED), error.alias(ERROR_COLUMN))
    schema_json = schema.json()

    @F.udf(returnType="string", useArrow=True)
    def detail(value):
        return json_error_detail(value, schema_json)

    return combined, detail


_INT_RANGES = {"byte": 8, "short": 16, "integer": 32, "long": 64}


def json_error_detail(value: bytes | None, schema_json: str) -> str | None:
    """Best-effort reason why ``value`` does not decode as JSON of ``schema_json``
    (a Spark JSON schema). Runs for dead letters only."""
    if value is None:
        return None
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"value is not valid UTF-8: {exc}"
    if not text.strip():
        return "empty value: expected a JSON object"
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return f"malformed JSON: {exc}"
    schema = json.loads(schema_json)
    problem = json_mismatch(doc, schema, "")
    if problem:
        return problem
    return f"rejected by Spark's JSON parser for schema {_simple(schema)}"


def _simple(t) -> str:
    if isinstance(t, str):
        return t
    kind = t.get("type")
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{_simple(f['type'])}" for f in t["fields"]) + ">"
    if kind == "array":
        return f"array<{_simple(t['elementType'])}>"
    if kind == "map":
        return f"map<{_simple(t['keyType'])},{_simple(t['valueType'])}>"
    return str(kind)


def json_mismatch(doc, t, where: str) -> str | None:
    """The first place where ``doc`` cannot fit Spark type ``t`` (JSON form), or None."""
    here = where or "value"
    if doc is None:
        return None if where else "expected a JSON object, got null"
    if isinstance(t, dict):
        kind = t["type"]
        if kind == "struct":
            if not isinstance(doc, dict):
                return f"{here}: expected a JSON object, got {type(doc).__name__} {doc!r:.40}"
            for f in t["fields"]:
                if f["name"] in doc:
                    problem = json_mismatch(doc[f["name"]], f["type"],
                                             f"{where}.{f['name']}" if where else f["name"])
                    if problem:
                        return problem
            return None
        if kind == "array":
            if not isinstance(doc, list):
                return f"{here}: expected an array, got {type(doc).__name__} {doc!r:.40}"
            for i, item in enumerate(doc):
                problem = json_mismatch(item, t["elementType"], f"{here}[{i}]")
                if problem:
                    return problem
            return None
        if kind == "map":
            if not isinstance(doc, dict):
                return f"{here}: expected an object (map), got {type(doc).__name__}"
            for k, item in doc.items():
                problem = json_mismatch(item, t["valueType"], f"{here}[{k!r}]")
                if problem:
                    return problem
            return None
        return None
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        if isinstance(doc, bool) or not isinstance(doc, int):
            return f"{here}: expected {t}, got {type(doc).__name__} {doc!r:.40}"
        if not -(1 << (bits - 1)) <= doc < (1 << (bits - 1)):
            return f"{here}: {doc} out of range for {t}"
        return None
    if t in ("float", "double") or t.startswith("decimal"):
        if isinstance(doc, bool) or not isinstance(doc, (int, float)):
            return f"{here}: expected {t}, got {type(doc).__name__} {doc!r:.40}"
        return None
    if t == "boolean" and not isinstance(doc, bool):
        return f"{here}: expected boolean, got {type(doc).__name__} {doc!r:.40}"
    if t in ("date", "timestamp", "timestamp_ntz", "binary") and not isinstance(doc, (str, int)):
        return f"{here}: expected {t} as a string, got {type(doc).__name__}"
    return None


# ---------------------------------------------------------------------------
# avro

_AVRO_PRIMITIVES = {"boolean": "boolean", "int": "integer", "long": "long", "float": "float",
                    "double": "double", "bytes": "binary", "string": "string"}
_KEPT_LOGICAL = {"timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                 "local-timestamp-micros", "date", "decimal"}


def parse_avro_schema(text: str):
    """``(parsed fastavro schema, Spark StructType)`` for an Avro schema in JSON text.

    A record schema gives one struct field per Avro field; any other top-level
    type gives a single field ``value``. Logical types other than timestamps,
    dates and decimals are read as their underlying type.
    """
    import fastavro
    from pyspark.sql.types import StructField, StructType

    try:
        raw = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"valueSchema for avro is not JSON: {exc}") from None
    raw = _strip_logical(raw)
    try:
        parsed = fastavro.parse_schema(raw)
    except Exception as exc:  # fastavro raises SchemaParseException, ValueError, KeyError...
        raise ConfigError(f"bad Avro schema: {exc}") from None
    try:
        spark_type = _avro_to_spark(raw, {}, ())
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"bad Avro schema: missing or malformed {exc}") from None
    if isinstance(raw, dict) and raw.get("type") == "record":
        return parsed, spark_type
    return parsed, StructType([StructField("value", spark_type, True)])


def _strip_logical(t):
    """Drop logical types we do not map, so fastavro returns the plain value."""
    if isinstance(t, list):
        return [_strip_logical(x) for x in t]
    if not isinstance(t, dict):
        return t
    t = dict(t)
    if "logicalType" in t and t["logicalType"] not in _KEPT_LOGICAL:
        del t["logicalType"]
    if "fields" in t:
        t["fields"] = [dict(f, type=_strip_logical(f["type"])) for f in t["fields"]]
    for key in ("items", "values"):
        if key in t:
            t[key] = _strip_logical(t[key])
    if isinstance(t.get("type"), (dict, list)):
        t["type"] = _strip_logical(t["type"])
    return t


def _full_name(t: dict, namespace: str | None) -> str:
    name = t["name"]
    ns = t.get("namespace", namespace)
    return name if "." in name or not ns else f"{ns}.{name}"


def _avro_to_spark(t, names: dict, stack: tuple, namespace: str | None = None):
    from pyspark.sql import types as T

    if isinstance(t, str):
        if t in _AVRO_PRIMITIVES:
            return getattr(T, {"boolean": "BooleanType", "integer": "IntegerType",
                               "long": "LongType", "float": "FloatType", "double": "DoubleType",
                               "binary": "BinaryType", "string": "StringType"}[
                _AVRO_PRIMITIVES[t]])()
        if t == "null":
            raise ConfigError("an Avro field of type null alone is not supported")
        key = t if t in names else (f"{namespace}.{t}" if namespace else t)
        if key in stack or t in stack:
            raise ConfigError(f"recursive Avro type {t!r} is not supported")
        if key not in names and t not in names:
            raise ConfigError(f"unknown Avro type {t!r}")
        return names.get(key, names.get(t))
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) != 1:
            raise ConfigError(f"Avro union {json.dumps(t)} is not supported: only [\"null\", T] "
                              f"or a single type")
        return _avro_to_spark(branches[0], names, stack, namespace)
    kind = t.get("type")
    logical = t.get("logicalType")
    if logical == "decimal":
        precision, scale = int(t.get("precision", 0)), int(t.get("scale", 0))
        if not 0 < precision <= 38:
            raise ConfigError(f"Avro decimal precision {precision} is outside 1..38")
        return T.DecimalType(precision, scale)
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType()
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType()
    if logical == "date":
        return T.DateType()
    if kind == "record":
        full = _full_name(t, namespace)
        ns = full.rsplit(".", 1)[0] if "." in full else None
        fields = [T.StructField(f["name"], _avro_to_spark(f["type"], names, stack + (full,), ns),
                                True) for f in t["fields"]]
        result = T.StructType(fields)
        names[full] = result
        return result
    if kind == "enum":
        names[_full_name(t, namespace)] = T.StringType()
        return T.StringType()
    if kind == "fixed":
        names[_full_name(t, namespace)] = T.BinaryType()
        return T.BinaryType()
    if kind == "array":
        return T.ArrayType(_avro_to_spark(t["items"], names, stack, namespace), True)
    if kind == "map":
        return T.MapType(T.StringType(), _avro_to_spark(t["values"], names, stack, namespace), True)
    if isinstance(kind, (str, list, dict)):
        return _avro_to_spark(kind, names, stack, namespace)
    raise ConfigError(f"unsupported Avro type {json.dumps(t)[:80]}")


class AvroDecoder:
    """Decodes Kafka values with fastavro; picklable, built on the driver, run on executors."""

    def __init__(self, schema_text: str, wire: str = "auto", schema_id: int | None = None):
        self.schema_text = schema_text
        self.wire = wire
        self.schema_id = schema_id
        self.parsed, self.spark_type = parse_avro_schema(schema_text)
        self.is_record = _is_record(schema_text)

    def __getstate__(self):
        return {"schema_text": self.schema_text, "wire": self.wire, "schema_id": self.schema_id}

    def __setstate__(self, state):
        self.__init__(state["schema_text"], state["wire"], state["schema_id"])

    def _body(self, body: bytes):
        import fastavro

        bio = io.BytesIO(body)
        rec = fastavro.schemaless_reader(bio, self.parsed, None)
        left = len(body) - bio.tell()
        if left:
            raise ValueError(f"{left} byte(s) left after the Avro datum")
        return rec if self.is_record else {"value": rec}

    def _wire(self, value: bytes):
        if len(value) < 5 or value[0] != 0:
            raise ValueError("no Confluent wire-format header (magic byte 0 + 4-byte schema id)")
        sid = int.from_bytes(value[1:5], "big")
        if self.schema_id is not None and sid != self.schema_id:
            raise ValueError(f"schema id {sid}, expected {self.schema_id}")
        return self._body(value[5:])

    def decode(self, value: bytes):
        """The decoded record (a dict) or raises with the reason."""
        if self.wire == "true":
            return self._wire(value)
        if self.wire == "false":
            return self._body(value)
        if len(value) >= 5 and value[0] == 0:
            try:
                return self._wire(value)
            except Exception as wire_exc:  # data errors of any kind: fall back to plain Avro
                try:
                    return self._body(value)
                except Exception:
                    raise wire_exc from None
        return self._body(value)

    def decode_batch(self, values, arrow_type):
        """``(struct array, error array)`` for an Arrow binary array of values."""
        import pyarrow as pa

        records: list = []
        errors: list = []
        for v in values.to_pylist():
            if v is None:
                records.append(None)
                errors.append(None)
                continue
            try:
                records.append(self.decode(v))
                errors.append(None)
            except Exception as exc:  # any decode failure is a dead letter, never a crash
                records.append(None)
                reason = str(exc) or ("value ends before the Avro datum does"
                                      if isinstance(exc, EOFError) else "")
                errors.append(f"Avro decode failed: {type(exc).__name__}: {reason}")
        try:
            arr = pa.array(records, type=arrow_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # One bad record spoils the batch conversion: find it record by record.
            arrays = []
            for i, rec in enumerate(records):
                try:
                    arrays.append(pa.array([rec], type=arrow_type))
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    errors[i] = f"Avro value does not fit {arrow_type}: {exc}"
                    arrays.append(pa.array([None], type=arrow_type))
            arr = pa.concat_arrays(arrays) if arrays else pa.array([], type=arrow_type)
        return arr, pa.array(errors, type=pa.string())


def _is_record(schema_text: str) -> bool:
    try:
        t = json.loads(schema_text)
    except ValueError:
        return False
    return isinstance(t, dict) and t.get("type") == "record"


def _avro_combined(df, opts: DecodeOptions):
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StringType, StructField, StructType

    decoder = AvroDecoder(opts.schema_text(), opts.confluent_wire_format, opts.value_schema_id)
    tz = df.sparkSession.conf.get("spark.sql.session.timeZone")
    arrow_type = to_arrow_type(decoder.spark_type, timezone=tz)
    out_schema = StructType(list(df.schema.fields) + [
        StructField(_DECODED, decoder.spark_type, True), StructField(ERROR_COLUMN, StringType(), True)])

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            decoded, errors = decoder.decode_batch(batch.column("value"), arrow_type)
            yield pa.RecordBatch.from_arrays(
                list(batch.columns) + [decoded, errors],
                names=list(batch.schema.names) + [_DECODED, ERROR_COLUMN])

    return df.mapInArrow(run, out_schema)
