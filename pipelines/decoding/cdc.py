"""Change data capture topics (``--cdc debezium``): Debezium's change events
loaded as an upsert table holding the source table's current state.

A Debezium connector writes one event per row change, keyed by the row's primary key.
Its JSON value is the envelope, bare (``schemas.enable=false``) or wrapped as
``{"schema": ..., "payload": <envelope>}`` (``schemas.enable=true``)::

    {"before": {...} | null, "after": {...} | null, "op": "c" | "r" | "u" | "d" | "t",
     "ts_ms": 1700000000123, "source": {"connector": "postgresql", "lsn": 24023128, ...}}

How each record becomes an upsert row (:func:`debezium_frame`, in Spark SQL: no Python
per record):

* ``op`` ``c`` (insert), ``r`` (snapshot read), ``u`` (update): the ``after`` row,
  decoded with the spec's ``value_schema`` (the source table's columns, a DDL);
* ``d`` (delete): deletes the row whose key columns ``before`` holds;
* a null value (the tombstone Debezium sends after a delete, for log compaction) is
  skipped: the delete event before it already removed the row;
* a value that does not fit its column (an id beyond INT, a base64 decimal without
  the schema naming its scale, a Debezium date sent for a timestamp column, a decimal
  beyond its precision) makes the event a dead letter with the reason, worded as in a
  plain JSON load (``id: 3000000000 out of range for integer``): never nulled;
* under ``schemas.enable=true`` the envelope's schema names Debezium's encodings,
  which become the column's type (:func:`debezium_row`): ``io.debezium.time.Date`` and
  Connect ``Date`` (days) a DATE; ``Timestamp``/``MicroTimestamp``/``NanoTimestamp`` and
  Connect ``Timestamp`` (epoch units) a TIMESTAMP or TIMESTAMP_NTZ;
  ``ZonedTimestamp`` (ISO text) a TIMESTAMP; ``Time``/``MicroTime``/``NanoTime`` and
  Connect ``Time`` a TIME; Connect ``Decimal`` (base64, scale parameter) and
  ``VariableScaleDecimal`` (scale + base64) a DECIMAL, exactly or not at all;
* anything else (not JSON, no ``op``, ``c``/``r``/``u`` without ``after``, ``d``
  without ``before``, ``t`` truncate and ``m`` messages) goes to the dead letters,
  with the reason.

Next to the row's columns the table keeps ``cdc_op``, ``cdc_ts_ms`` (when the
connector processed the change), ``cdc_position`` (the change's place in the source's
log: Postgres ``lsn``, MySQL ``file:pos``, SQL Server ``commit_lsn``/``change_lsn``,
Oracle ``scn``, MongoDB ``ord``) and ``cdc_source`` (the whole ``source`` block as JSON).

Debezium's AvroConverter (``--value-format avro --schema-registry URL``): the registry
load decodes each Envelope by its schema id (:mod:`pipelines.jobs.registry_load`) and
:func:`debezium_batch` applies the same rules to the decoded batches; the table's
columns are the ``after``/``before`` record's fields (no ``value_schema``), evolved in
the commit like any registry load's. Debezium's encodings, named there only by each
field's ``connect.name``, become the same dates, times, timestamps and decimals as under
``schemas.enable=true`` (:mod:`pipelines.decoding.debezium_types`, shared by both paths; a value
that does not fit is a dead letter naming the column); a column a table already holds
as Avro stores it (an int of days, loaded before) keeps loading as it is.

Which event wins for a key is the upsert rule (:mod:`pipelines.jobs.upsert`): within a Kafka
partition the higher offset. Debezium writes all events of one key to one partition in
the source's commit order, so a snapshot (``op=r``) followed by streaming changes ends
at the source table's state.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json

from kafkastore.errors import ConfigError

from . import debezium_types as dbz

CDC_FORMATS = ("debezium",)
CDC_COLUMNS = ("cdc_op", "cdc_ts_ms", "cdc_position", "cdc_source")
#: ``source`` fields holding the position in the source database's log, by connector.
POSITION_FIELDS = ("lsn", "commit_lsn", "change_lsn", "scn", "ord")


def check_spec(spec) -> None:
    """A CDC load is an upsert load of JSON envelopes whose row DDL is given or of Avro
    envelopes from a schema registry; its key columns default to the Kafka key's fields."""
    if spec.cdc is None:
        return
    if spec.cdc not in CDC_FORMATS:
        raise ConfigError(f"cdc must be one of {CDC_FORMATS}, got {spec.cdc!r}")
    if spec.mode != "upsert":
        raise ConfigError("--cdc debezium loads are upsert loads (mode: upsert)")
    if spec.value_format == "avro" and spec.registry:
        # Debezium's AvroConverter: the Envelope's after/before record gives the columns.
        if str(spec.decode.get("flatten", True)).lower() in ("false", "0", "no"):
            raise ConfigError("--cdc debezium with Avro envelopes needs flatten=true")
    elif spec.value_format != "json" or not (spec.value_schema or spec.value_schema_file):
        raise ConfigError("--cdc debezium needs --value-format json and --value-schema with the "
                          "source table's columns (a DDL like 'id BIGINT, name STRING'), or "
                          "--value-format avro --schema-registry URL (Debezium's AvroConverter)")
    # No --key-columns: the load takes the Kafka key's fields (:func:`with_default_keys`).
    clash = sorted(set(CDC_COLUMNS) & {c.strip().split(" ")[0].strip("`").lower()
                                       for c in (spec.value_schema or "").split(",")})
    if clash:
        raise ConfigError(f"the source table's columns {clash} clash with the CDC columns")


def debezium_frame(df, opts, raw_value: str, error: str):
    """``df`` (Spark's Kafka schema) as the frame the load's writer takes (see
    :func:`pipelines.jobs.write_engine.decoded_frame`): the Kafka columns, the row's columns, the
    CDC columns, the raw value (``raw_value``; null for deletes, which makes them
    tombstones of their key) and the error (``error``; dead letters)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from .values import KAFKA_META_COLUMNS, parse_json_schema  # lazy: load specs import cdc at DAG parse time

    row_type = parse_json_schema(opts.schema_text())
    text = F.col("value").cast("string")
    wrapped = F.get_json_object(text, "$.payload")
    has_schema = F.get_json_object(text, "$.schema").isNotNull()
    env = F.when(has_schema & wrapped.isNotNull(), wrapped).otherwise(text)
    op = F.get_json_object(env, "$.op")
    after = F.get_json_object(env, "$.after")
    before = F.get_json_object(env, "$.before")
    src = F.get_json_object(env, "$.source")
    position = F.coalesce(
        *[F.get_json_object(env, f"$.source.{f}") for f in POSITION_FIELDS],
        F.when(F.get_json_object(env, "$.source.file").isNotNull(),
               F.concat_ws(":", F.get_json_object(env, "$.source.file"),
                           F.get_json_object(env, "$.source.pos"))))
    upsert = op.isin("c", "r", "u")
    row_json = F.when(upsert, after).when(op == "d", before)
    why = (F.when(op.isNull(), F.lit("not a Debezium change event (no op field)"))
           .when(upsert & after.isNull(), F.concat(F.lit("op "), op, F.lit(" without after")))
           .when((op == "d") & before.isNull(), F.lit("op d without before"))
           .when(~(upsert | (op == "d")),
                 F.concat(F.lit("Debezium op "), op, F.lit(" is not a row change"))))
    keep = [c for c in df.columns if c in KAFKA_META_COLUMNS]
    fields = [f.name for f in row_type.fields]
    corrupt = "__cdc_corrupt"
    parse_type = T.StructType(list(row_type.fields) + [T.StructField(corrupt, T.StringType())])
    # A row Spark's parser refuses (a value that does not fit its column) or whose
    # envelope schema names one of Debezium's encodings (days, epoch units, base64
    # decimals: Spark would refuse or misread them) goes to Python (:func:`debezium_row`),
    # which converts it or says why it is a dead letter. Other rows stay in the JVM.
    encoded = F.coalesce(has_schema & F.get_json_object(text, "$.schema").rlike(_ENCODED_RE),
                         F.lit(False))
    framed = (df.where(F.col("value").isNotNull())          # tombstones after deletes
              .withColumn("__row", F.from_json(row_json, parse_type, {
                  "mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt}))
              .withColumn(error, why))
    fix = (F.col(error).isNull() & row_json.isNotNull()
           & (encoded | F.col(f"__row.{corrupt}").isNotNull()))
    clash = sorted(set(fields) & set(keep))
    if clash:
        raise ConfigError(f"source columns {clash} clash with Kafka columns")
    framed = framed.select(
        *[F.col(c) for c in keep],
        *[F.col(f"__row.`{f}`").alias(f) for f in fields],
        op.alias("cdc_op"), F.get_json_object(env, "$.ts_ms").cast("bigint").alias("cdc_ts_ms"),
        position.alias("cdc_position"), src.alias("cdc_source"),
        # deletes: no raw value, so the writer marks them tombstones; dead letters keep it
        F.when(F.col(error).isNotNull() | (op != "d"), F.col("value")).alias(raw_value),
        F.col(error), fix.alias(_FIX), F.when(fix, F.col("value")).alias(_FIX_VALUE))
    out_schema = framed.drop(_FIX, _FIX_VALUE).schema
    return framed.mapInArrow(_row_fixer(row_type.json(), fields, raw_value, error), out_schema)


_FIX, _FIX_VALUE = "__cdc_fix", "__cdc_fix_value"
_ENCODED_RE = (r"io\.debezium\.time\.|io\.debezium\.data\.VariableScaleDecimal|"
               r"org\.apache\.kafka\.connect\.data\.")


def _row_fixer(row_type_json: str, fields: list[str], raw_value: str, error: str):
    """The Arrow function that converts the rows marked for Python (see
    :func:`debezium_frame`) and passes every other row through untouched."""
    def run(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.types import StructType

        row_type = StructType.fromJson(json.loads(row_type_json))
        for b in batches:
            fix = b.column(_FIX)
            names = [n for n in b.schema.names if n not in (_FIX, _FIX_VALUE)]
            if not pc.any(fix).as_py():
                yield pa.RecordBatch.from_arrays([b.column(n) for n in names], names=names)
                continue
            fix = pc.fill_null(fix, False)
            values = b.column(_FIX_VALUE).to_pylist()
            # Only the marked rows are converted to Python: Spark may have misread the
            # others' neighbours' columns into values Python cannot hold.
            n_rows = b.num_rows
            cols = {n: [None] * n_rows for n in fields}
            errors = b.column(error).to_pylist()
            raws = [None] * n_rows
            for i in pc.indices_nonzero(fix).to_pylist():
                row, why = debezium_row(values[i], row_type)
                if why is not None:
                    errors[i] = why
                    raws[i] = values[i]      # a dead letter keeps its value
                    row = dict.fromkeys(fields)
                for n in fields:
                    cols[n][i] = row[n]
            out = []
            for n in names:
                col = b.column(n)
                if n in cols:
                    col = pc.if_else(fix, pa.array(cols[n], col.type), col)
                elif n == raw_value:
                    col = pc.if_else(pc.and_(fix, pc.is_valid(pa.array(raws, col.type))),
                                     pa.array(raws, col.type), col)
                elif n == error:
                    col = pa.array(errors, col.type)
                out.append(col)
            yield pa.RecordBatch.from_arrays(out, names=names)

    return run


# ---------------------------------------------------------------------------
# Debezium's value encodings (the JsonConverter's schema names)

_DATES, _TIMESTAMPS, _TIMES = dbz.DATES, dbz.TIMESTAMPS, dbz.TIMES
_ZONED, _DECIMAL, _VARIABLE_DECIMAL = dbz.ZONED, dbz.DECIMAL, dbz.VARIABLE_DECIMAL


class _Misfit(Exception):
    """A value that does not fit its column (internal: becomes a dead letter's reason)."""


def debezium_row(value, row_type):
    """``(row, None)``: the row of one Debezium JSON event (bytes or text) converted to
    ``row_type`` (a Spark struct of the source table's columns) as Python values, with
    Debezium's encodings named by the envelope's schema understood; or ``(None, reason)``
    when a value does not fit its column (the reason names the column, as a plain JSON
    load's dead letters do)."""
    from .values import json_mismatch  # lazy: load specs import cdc at DAG parse time

    try:
        doc = json.loads(value)
        if isinstance(doc, dict) and isinstance(doc.get("payload"), dict) and "schema" in doc:
            env, schema = doc["payload"], doc.get("schema")
        else:
            env, schema = doc, None
        part = "before" if env.get("op") == "d" else "after"
        row = env.get(part)
        if not isinstance(row, dict):
            return None, f"{part}: expected a JSON object, got {type(row).__name__}"
        named = _field_schemas(schema, part)
        out = {}
        for f in row_type.fields:
            v = row.get(f.name)
            fs = named.get(f.name) or {}
            if v is None:
                out[f.name] = None
            elif fs.get("name") and _is_encoding(fs["name"]):
                out[f.name] = _decode_encoded(v, fs, f.dataType, f.name)
            else:
                problem = json_mismatch(v, f.dataType.jsonValue(), f.name)
                if problem:
                    return None, problem
                out[f.name] = _plain(v, f.dataType, f.name)
        return out, None
    except _Misfit as exc:
        return None, str(exc)
    except (ValueError, TypeError, AttributeError, OverflowError, ArithmeticError) as exc:
        return None, f"Debezium event does not decode: {type(exc).__name__}: {exc}"


def _field_schemas(schema, part: str) -> dict:
    """The Connect field schemas of the envelope's ``part`` record, by field name."""
    if not isinstance(schema, dict):
        return {}
    for f in schema.get("fields") or ():
        if isinstance(f, dict) and f.get("field") == part:
            return {g.get("field"): g for g in f.get("fields") or () if isinstance(g, dict)}
    return {}


_is_encoding = dbz.is_encoding


def _misfit(column: str, name: str, v, t) -> _Misfit:
    return _Misfit(f"{column}: {name} value {v!r:.40} does not fit {t.simpleString()}")


def _decode_encoded(v, fs: dict, t, column: str):
    from pyspark.sql import types as T

    name = fs["name"]
    if name in _DATES:
        if not isinstance(t, T.DateType) or isinstance(v, bool) or not isinstance(v, int):
            raise _misfit(column, name, v, t)
        return _checked(column, name, v, t, lambda: dbz.epoch_date(v))
    if name in _TIMESTAMPS:
        if isinstance(v, bool) or not isinstance(v, int) or not isinstance(
                t, (T.TimestampType, T.TimestampNTZType)):
            raise _misfit(column, name, v, t)
        ts = _checked(column, name, v, t, lambda: dbz.epoch_timestamp(name, v))
        return ts if isinstance(t, T.TimestampNTZType) else ts.replace(tzinfo=_dt.timezone.utc)
    if name in _TIMES:
        if isinstance(v, bool) or not isinstance(v, int) or not isinstance(t, T.TimeType):
            raise _misfit(column, name, v, t)
        try:
            return dbz.time_of_day(name, v)
        except ValueError:
            raise _misfit(column, name, v, t) from None
    if name == _ZONED:
        if not isinstance(v, str) or not isinstance(t, T.TimestampType):
            raise _misfit(column, name, v, t)
        try:
            return dbz.zoned_timestamp(v)
        except ValueError:
            raise _misfit(column, name, v, t) from None
    # decimals: base64 two's complement big-endian, the scale in the schema or the value
    if not isinstance(t, T.DecimalType):
        raise _misfit(column, name, v, t)
    if name == _DECIMAL:
        scale, data = (fs.get("parameters") or {}).get("scale", 0), v
    else:
        scale, data = (v.get("scale"), v.get("value")) if isinstance(v, dict) else (None, None)
    if not isinstance(data, str) or scale is None:
        raise _misfit(column, name, v, t)
    return _fit_decimal(dbz.unscaled_decimal(data, int(scale)), t, column, name)


def _checked(column, name, v, t, make):
    try:
        return make()
    except (OverflowError, ValueError) as exc:
        raise _Misfit(f"{column}: {name} value {v!r:.40} does not fit {t.simpleString()}: "
                      f"{exc}") from None


def _fit_decimal(d, t, column: str, name: str):
    """``d`` at ``t``'s scale, or a misfit when that loses digits or exceeds the precision."""
    try:
        return dbz.fit_decimal(d, t.precision, t.scale)
    except ValueError:
        raise _Misfit(f"{column}: {name} value {d} does not fit {t.simpleString()}") from None


def _plain(v, t, column: str):
    """A JSON value (already checked by the plain JSON rule) as ``t``'s Python value, the
    way Spark's JSON parser reads it."""
    from pyspark.sql import types as T

    if isinstance(t, T.StringType):
        return v if isinstance(v, str) else json.dumps(v)
    if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType)):
        return v
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return float(v)
    if isinstance(t, T.DecimalType):
        return _fit_decimal(decimal.Decimal(str(v)), t, column, "value")
    if isinstance(t, T.DateType):
        if not isinstance(v, str):
            raise _Misfit(f"{column}: expected date as a string, got {type(v).__name__} {v!r:.40}")
        return _checked(column, "value", v, t, lambda: _dt.date.fromisoformat(v))
    if isinstance(t, (T.TimestampType, T.TimestampNTZType)):
        if not isinstance(v, str):
            raise _Misfit(f"{column}: expected {t.simpleString()} as a string, got "
                          f"{type(v).__name__} {v!r:.40}")
        ts = _checked(column, "value", v, t, lambda: _dt.datetime.fromisoformat(
            v.replace("Z", "+00:00")))
        if isinstance(t, T.TimestampNTZType):
            return ts.replace(tzinfo=None)
        return (ts if ts.tzinfo else ts.replace(tzinfo=_dt.timezone.utc)).astimezone(
            _dt.timezone.utc)
    if isinstance(t, T.BinaryType):
        if not isinstance(v, str):
            raise _misfit(column, "value", v, t)
        return base64.b64decode(v, validate=True)
    if isinstance(t, T.StructType):
        return {f.name: None if v.get(f.name) is None else _plain(v[f.name], f.dataType,
                                                                   f"{column}.{f.name}")
                for f in t.fields}
    if isinstance(t, T.ArrayType):
        return [None if x is None else _plain(x, t.elementType, column) for x in v]
    if isinstance(t, T.MapType):
        return [(k, None if x is None else _plain(x, t.valueType, column)) for k, x in v.items()]
    raise _Misfit(f"{column}: {t.simpleString()} values are not read from Debezium JSON")


# ---------------------------------------------------------------------------
# Avro envelopes (Debezium's AvroConverter), decoded by the registry load


def registry_table_value(table_schema, kafka_columns):
    """The struct a Debezium Envelope's writer schema is checked against on the
    executors (:class:`pipelines.jobs.registry_load.RegistryPlan`): the table's row columns
    as the Envelope's ``before`` and ``after`` records, so that a source column whose
    type changes incompatibly is refused like any registry field; the Envelope's other
    fields (``op``, ``source``...) never reach the table as such."""
    import pyarrow as pa

    from .schema_evolution import normalize  # lazy: load specs import cdc at DAG parse time

    if table_schema is None:
        return pa.struct([])
    skip = set(kafka_columns) | set(CDC_COLUMNS)
    row = [pa.field(f.name, normalize(f.type)) for f in table_schema if f.name not in skip]
    if not row:
        return pa.struct([])
    return pa.struct([pa.field("before", pa.struct(row)), pa.field("after", pa.struct(row))])


def _column(batch, name: str):
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i)


def _position(source) -> list:
    """``cdc_position`` of each row from the decoded ``source`` struct (as the JSON path)."""
    out = []
    for src in source.to_pylist():
        pos = None
        if src:
            for f in POSITION_FIELDS:
                if src.get(f) is not None:
                    pos = str(src[f])
                    break
            if pos is None and src.get("file") is not None:
                pos = ":".join(str(src[k]) for k in ("file", "pos") if src.get(k) is not None)
        out.append(pos)
    return out


def _source_json(source) -> list:
    import json

    return [None if src is None else json.dumps(src, default=str, sort_keys=True)
            for src in source.to_pylist()]


def debezium_batch(batch, kafka_columns, raw_value: str, error: str):
    """One batch of a registry load (the Kafka columns, the flattened Envelope's fields,
    ``raw_value`` and ``error``) as the rows the upsert writer stages: the Kafka
    columns, the ``after`` (c/r/u) or ``before`` (d) record's fields, the CDC columns,
    the raw value (null for deletes: tombstones of their key) and the error. The
    tombstones Debezium sends after a delete are dropped; events that are not row
    changes get the same reasons as in :func:`debezium_frame`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = batch.column(raw_value)
    batch = batch.filter(pc.is_valid(raw))           # tombstones after deletes
    n = batch.num_rows
    raw = batch.column(raw_value)
    err = batch.column(error).to_pylist()
    op_col = _column(batch, "op")
    ops = [None] * n if op_col is None else pc.cast(op_col, pa.string()).to_pylist()
    after, before = _column(batch, "after"), _column(batch, "before")
    row_type = (after if after is not None else before)
    fields = [] if row_type is None or not pa.types.is_struct(row_type.type) else \
        [row_type.type.field(i) for i in range(row_type.type.num_fields)]
    clash = sorted({f.name for f in fields} & set(kafka_columns))
    is_delete = np.zeros(n, dtype=bool)
    for i, op in enumerate(ops):
        if err[i] is not None:
            continue
        if clash:
            err[i] = f"source columns {clash} clash with Kafka columns"
        elif op is None:
            err[i] = "not a Debezium change event (no op field)"
        elif op in ("c", "r", "u"):
            if after is None or not after[i].is_valid:
                err[i] = f"op {op} without after"
        elif op == "d":
            if before is None or not before[i].is_valid:
                err[i] = "op d without before"
            else:
                is_delete[i] = True
        else:
            err[i] = f"Debezium op {op} is not a row change"
    take_before = pa.array(is_delete)
    cols, names = [], []
    for name in kafka_columns:
        c = _column(batch, name)
        if c is not None:
            cols.append(c)
            names.append(name)
    a_children = after.flatten() if after is not None else None
    b_children = before.flatten() if before is not None else None
    for i, f in enumerate(fields):
        a = a_children[i] if a_children is not None else pa.nulls(n, f.type)
        if b_children is not None and before.type.get_field_index(f.name) >= 0:
            b = b_children[before.type.get_field_index(f.name)]
            b = b.cast(f.type) if b.type != f.type else b
        else:
            b = pa.nulls(n, f.type)
        cols.append(pc.if_else(take_before, b, a))
        names.append(f.name)
    source = _column(batch, "source")
    ts = _column(batch, "ts_ms")
    cols += [pa.array(ops, pa.string()),
             pc.cast(ts, pa.int64()) if ts is not None else pa.nulls(n, pa.int64()),
             pa.array(_position(source) if source is not None else [None] * n, pa.string()),
             pa.array(_source_json(source) if source is not None else [None] * n, pa.string())]
    names += list(CDC_COLUMNS)
    # deletes: no raw value, so the writer marks them tombstones; dead letters keep it
    errors = pa.array(err, pa.string())
    keep_raw = pc.or_(pc.is_valid(errors), pc.invert(take_before))
    cols += [pc.if_else(keep_raw, raw, pa.nulls(n, raw.type)), errors]
    names += [raw_value, error]
    return pa.RecordBatch.from_arrays(cols, names=names)


def debezium_writer(write, kafka_columns, raw_value: str, error: str):
    """``write`` (a load's file writer) fed the registry load's batches as CDC rows
    (:func:`debezium_batch`)."""
    def run(batches):
        return write(debezium_batch(b, kafka_columns, raw_value, error) for b in batches)

    return run


# ---------------------------------------------------------------------------
# the primary key: Debezium's Kafka key

#: how many records per partition are looked at for a key that names the columns
KEY_SAMPLE = 20


def key_fields(key: bytes | None, registry=None) -> tuple[str, ...] | None:
    """The column names one Debezium Kafka key holds (its primary key): the fields of a
    JSON object, bare or wrapped as ``{"schema": ..., "payload": {...}}`` by the
    JsonConverter's ``schemas.enable=true``, or of an Avro record framed with a schema id
    (``registry``: a :class:`~pipelines.decoding.registry_client.RegistryClient`). None when the
    key names no columns (null, not JSON, not a record)."""
    if not key:
        return None
    if key[0] == 0 and len(key) >= 5 and registry is not None:
        schema = json.loads(registry.schema(int.from_bytes(key[1:5], "big")).text)
        if isinstance(schema, dict) and schema.get("type") == "record":
            return tuple(f["name"] for f in schema.get("fields") or ()) or None
        return None
    try:
        doc = json.loads(key)
    except ValueError:
        return None
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"} and isinstance(
            doc["payload"], dict):
        doc = doc["payload"]
    if isinstance(doc, dict) and doc:
        return tuple(doc)
    return None


def default_key_columns(storage, topic: str, ranges, registry_url: str | None = None
                        ) -> tuple[str, ...]:
    """The key columns of a ``--cdc debezium`` load given none: the fields of the Kafka
    key of the first records of ``ranges`` (Debezium keys each change event by the
    source row's primary key). A ConfigError, asking for ``--key-columns``, when no
    key among them names columns."""
    # lazy: load specs import cdc at DAG parse time
    from kafkastore.read.reader import PartitionReader

    registry = None
    if registry_url:
        from .registry_client import RegistryClient  # lazy: load specs import cdc at DAG parse time

        registry = RegistryClient(registry_url)
    for r in ranges:
        keys = PartitionReader(storage, topic, r.partition).read(
            r.from_offset, r.until_offset, max_records=KEY_SAMPLE,
            include_headers=False).column("key").to_pylist()
        for key in keys:
            try:
                found = key_fields(key, registry)
            except (ValueError, KeyError, TypeError):
                found = None
            if found:
                return found
    raise ConfigError(f"--cdc debezium: the Kafka keys of {topic} name no primary key columns "
                      f"(not JSON objects or Avro records); give --key-columns")


def with_default_keys(spec, storage, ranges):
    """``spec`` with its key columns defaulted, for a ``--cdc debezium`` load that names
    none, to the fields of the topic's Kafka keys (:func:`default_key_columns`);
    ``spec`` itself when it names them (explicit key columns win) or is not CDC."""
    from dataclasses import replace

    if spec.cdc is None or spec.key_columns:
        return spec
    url = spec.decode.get("schema_registry") if spec.registry else None
    return replace(spec, key_columns=default_key_columns(storage, spec.topic, ranges, url))
