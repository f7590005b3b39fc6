"""Debezium's encodings of dates, times, timestamps and decimals (Spark-free).

A Debezium connector names the encoding of a column by its Connect schema name: in
the JsonConverter's ``schema`` (``schemas.enable=true``, read by :mod:`pipelines.decoding.cdc`)
and as ``connect.name`` in the AvroConverter's Avro schema (read by the registry load
through :func:`avro_schema`). One set of conversions serves both:

==========================================  ===========================  ==================
encoding                                    stored as                    column
==========================================  ===========================  ==================
``io.debezium.time.Date``, Connect Date     int days since 1970-01-01    date
``io.debezium.time.Timestamp``              long epoch ms (no zone)      timestamp
``MicroTimestamp`` / ``NanoTimestamp``      long epoch µs / ns           timestamp (µs)
``Time`` / ``MicroTime`` / ``NanoTime``     ms / µs / ns of the day      time (µs)
``io.debezium.time.ZonedTimestamp``         ISO-8601 text with offset    timestamptz (UTC)
Connect ``Decimal``                         two's complement, ``scale``  decimal(p, scale)
``io.debezium.data.VariableScaleDecimal``   ``{scale, value}``           decimal
==========================================  ===========================  ==================

A value the column cannot hold (outside years 1..9999, a time past midnight, text
without a zone, a decimal losing digits) is a :class:`DebeziumValueError`: the load
makes the event a dead letter with the reason, never a null.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
from typing import Any

from kafkastore.errors import DebeziumValueError

DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
#: epoch timestamps: schema name -> units per second
TIMESTAMPS = {"io.debezium.time.Timestamp": 1_000,
              "org.apache.kafka.connect.data.Timestamp": 1_000,
              "io.debezium.time.MicroTimestamp": 1_000_000,
              "io.debezium.time.NanoTimestamp": 1_000_000_000}
#: times of day: schema name -> units per second
TIMES = {"io.debezium.time.Time": 1_000, "org.apache.kafka.connect.data.Time": 1_000,
         "io.debezium.time.MicroTime": 1_000_000, "io.debezium.time.NanoTime": 1_000_000_000}
ZONED = "io.debezium.time.ZonedTimestamp"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
#: The decimal type of a VariableScaleDecimal column (its scale varies by value; the
#: table's is fixed): 20 digits before the point, 18 after.
VARIABLE_DECIMAL_TYPE = (38, 18)
_EPOCH = _dt.datetime(1970, 1, 1)

#: Avro logical types standing for an encoding (the Avro decoders read them column by
#: column); the other encodings are converted value by value (:func:`avro_converter`).
_AVRO_LOGICAL = {"io.debezium.time.Date": ("int", "date"),
                 "io.debezium.time.Timestamp": ("long", "local-timestamp-millis"),
                 "io.debezium.time.MicroTimestamp": ("long", "local-timestamp-micros"),
                 "io.debezium.time.Time": ("int", "time-millis"),
                 "io.debezium.time.MicroTime": ("long", "time-micros")}
AVRO_CONVERTED = ("io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime", ZONED,
                  VARIABLE_DECIMAL)


def is_encoding(name: str) -> bool:
    """Whether ``name`` (a Connect schema name) is one of the encodings above."""
    return (name in DATES or name in TIMESTAMPS or name in TIMES
            or name in (ZONED, DECIMAL, VARIABLE_DECIMAL))


def epoch_date(days: int) -> _dt.date:
    """The date ``days`` after 1970-01-01 (OverflowError outside years 1..9999)."""
    return _dt.date(1970, 1, 1) + _dt.timedelta(days=days)


def epoch_timestamp(name: str, value: int) -> _dt.datetime:
    """The wall-clock time (naive, UTC) of ``value`` epoch units of encoding ``name``,
    truncated to microseconds (OverflowError outside years 1..9999)."""
    return _EPOCH + _dt.timedelta(microseconds=value * 1_000_000 // TIMESTAMPS[name])


def time_of_day(name: str, value: int) -> _dt.time:
    """The time of day ``value`` units of encoding ``name`` after midnight (ValueError
    outside the day)."""
    per_second = TIMES[name]
    if not 0 <= value < 86_400 * per_second:
        raise ValueError(f"{value} is not a time of day in units of 1/{per_second} s")
    return (_EPOCH + _dt.timedelta(microseconds=value * 1_000_000 // per_second)).time()


def zoned_timestamp(text: str) -> _dt.datetime:
    """ISO-8601 text with an offset as a UTC datetime (ValueError without an offset)."""
    ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError(f"{text!r:.40} has no zone offset")
    return ts.astimezone(_dt.timezone.utc)


def unscaled_decimal(data: bytes | str, scale: int) -> decimal.Decimal:
    """A Connect decimal: big-endian two's complement bytes (base64 text in JSON)."""
    if isinstance(data, str):
        data = base64.b64decode(data, validate=True)
    return decimal.Decimal(int.from_bytes(data, "big", signed=True)).scaleb(-int(scale))


def fit_decimal(d: decimal.Decimal, precision: int, scale: int) -> decimal.Decimal:
    """``d`` at ``scale``; ValueError when that loses digits or exceeds ``precision``."""
    q = d.quantize(decimal.Decimal(1).scaleb(-scale), context=decimal.Context(prec=80))
    if q != d or len(q.as_tuple().digits) > precision and q != 0:
        raise ValueError(f"{d} does not fit decimal({precision},{scale})")
    return q


# ---------------------------------------------------------------------------
# Avro (Debezium's AvroConverter)


def avro_schema(schema: Any, kept: frozenset = frozenset()) -> Any:
    """An Avro schema (parsed JSON) with each encoding that has an Avro logical type
    given it (``io.debezium.time.Date`` an int ``date``, Connect ``Decimal`` a bytes
    ``decimal`` of its ``scale`` parameter...); the schema's binary encoding is unchanged.
    The other encodings keep their ``connect.name`` for :func:`avro_converter`.

    ``kept``: field names whose encoding stays as stored (its ``connect.name`` dropped):
    the columns a table loaded before these encodings were read holds as integers,
    text or records, which keep loading as they are."""
    if isinstance(schema, list):
        return [avro_schema(x, kept) for x in schema]
    if not isinstance(schema, dict):
        return schema
    t = dict(schema)
    if "fields" in t:
        t["fields"] = [dict(f, type=_as_stored(f["type"]) if f.get("name") in kept
                            else avro_schema(f["type"], kept)) for f in t["fields"]]
    name = t.get("connect.name")
    if name in _AVRO_LOGICAL and t.get("type") == _AVRO_LOGICAL[name][0]:
        t["logicalType"] = _AVRO_LOGICAL[name][1]
    elif name == DECIMAL and t.get("type") == "bytes" and t.get("logicalType") != "decimal":
        params = t.get("connect.parameters") or {}
        t.update(logicalType="decimal", scale=int(params.get("scale", 0)),
                 precision=int(params.get("connect.decimal.precision", 38)))
    for key in ("items", "values", "type"):
        if isinstance(t.get(key), (dict, list)):
            t[key] = avro_schema(t[key], kept)
    return t


def _as_stored(t: Any) -> Any:
    """A field's type with its encoding's name dropped (read as Avro stores it)."""
    if isinstance(t, list):
        return [_as_stored(x) for x in t]
    if isinstance(t, dict) and is_encoding(str(t.get("connect.name"))):
        return {k: v for k, v in t.items() if k != "connect.name"}
    return t


def stored_columns(table_schema) -> frozenset:
    """The columns of a table (a pyarrow schema, or None) that hold an encoding as Avro
    stores it (integers, text, records: loaded before the encodings were read), which
    :func:`avro_schema` keeps so that the table keeps loading."""
    import pyarrow as pa

    if table_schema is None:
        return frozenset()
    return frozenset(f.name for f in table_schema
                     if pa.types.is_integer(f.type) or pa.types.is_string(f.type)
                     or pa.types.is_large_string(f.type) or pa.types.is_struct(f.type)
                     or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))


def avro_converted(schema: Any) -> bool:
    """Whether ``schema`` holds an encoding converted value by value."""
    if isinstance(schema, list):
        return any(avro_converted(x) for x in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("connect.name") in AVRO_CONVERTED:
        return True
    return any(avro_converted(f["type"]) for f in schema.get("fields") or ()) or any(
        avro_converted(schema[k]) for k in ("items", "values", "type")
        if isinstance(schema.get(k), (dict, list)))


def avro_converter(name: str):
    """``(arrow type, convert)`` of an encoding of :data:`AVRO_CONVERTED`: ``convert``
    takes fastavro's value (an int, text, a ``{scale, value}`` record) and gives the
    column's, or raises :class:`DebeziumValueError`."""
    import pyarrow as pa

    if name in TIMESTAMPS:
        arrow, make = pa.timestamp("us"), lambda v: epoch_timestamp(name, v)
    elif name in TIMES:
        arrow, make = pa.time64("us"), lambda v: time_of_day(name, v)
    elif name == ZONED:
        arrow, make = pa.timestamp("us", tz="UTC"), zoned_timestamp
    else:
        p, s = VARIABLE_DECIMAL_TYPE
        arrow = pa.decimal128(p, s)

        def make(v):
            return fit_decimal(unscaled_decimal(v["value"], v["scale"]), p, s)

    def convert(v):
        if v is None:
            return None
        try:
            return make(v)
        except (ValueError, TypeError, KeyError, OverflowError, ArithmeticError) as exc:
            raise DebeziumValueError(f"{name} value {v!r:.40} does not fit {arrow}: "
                                     f"{exc}") from None

    return arrow, convert
