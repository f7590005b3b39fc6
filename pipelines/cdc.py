"""Change data capture topics (``--cdc debezium``, issue 24): Debezium's change events
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
* anything else (not JSON, no ``op``, ``c``/``r``/``u`` without ``after``, ``d``
  without ``before``, ``t`` truncate and ``m`` messages) goes to the dead letters,
  with the reason.

Next to the row's columns the table keeps ``cdc_op``, ``cdc_ts_ms`` (when the
connector processed the change), ``cdc_position`` (the change's place in the source's
log: Postgres ``lsn``, MySQL ``file:pos``, SQL Server ``commit_lsn``/``change_lsn``,
Oracle ``scn``, MongoDB ``ord``) and ``cdc_source`` (the whole ``source`` block as JSON).

Debezium's AvroConverter (``--value-format avro --schema-registry URL``): the registry
load decodes each Envelope by its schema id (:mod:`pipelines.registry_load`) and
:func:`debezium_batch` applies the same rules to the decoded batches; the table's
columns are the ``after``/``before`` record's fields (no ``value_schema``), evolved in
the commit like any registry load's.

Which event wins for a key is the upsert rule (:mod:`pipelines.upsert`): within a Kafka
partition the higher offset. Debezium writes all events of one key to one partition in
the source's commit order, so a snapshot (``op=r``) followed by streaming changes ends
at the source table's state.
"""
from __future__ import annotations

from kafkastore.errors import ConfigError

CDC_FORMATS = ("debezium",)
CDC_COLUMNS = ("cdc_op", "cdc_ts_ms", "cdc_position", "cdc_source")
#: ``source`` fields holding the position in the source database's log, by connector.
POSITION_FIELDS = ("lsn", "commit_lsn", "change_lsn", "scn", "ord")


def check_spec(spec) -> None:
    """A CDC load is an upsert load, with its primary key columns given, of JSON
    envelopes whose row DDL is given or of Avro envelopes from a schema registry."""
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
    if not spec.key_columns:
        raise ConfigError("--cdc debezium needs --key-columns: the source table's primary key")
    clash = sorted(set(CDC_COLUMNS) & {c.strip().split(" ")[0].strip("`").lower()
                                       for c in (spec.value_schema or "").split(",")})
    if clash:
        raise ConfigError(f"the source table's columns {clash} clash with the CDC columns")


def debezium_frame(df, opts, raw_value: str, error: str):
    """``df`` (Spark's Kafka schema) as the frame the load's writer takes (see
    :func:`pipelines.load._decoded_frame`): the Kafka columns, the row's columns, the
    CDC columns, the raw value (``raw_value``; null for deletes, which makes them
    tombstones of their key) and the error (``error``; dead letters)."""
    from pyspark.sql import functions as F

    from .decoding import KAFKA_META_COLUMNS, parse_json_schema

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
    framed = (df.where(F.col("value").isNotNull())          # tombstones after deletes
              .withColumn("__row", F.from_json(row_json, row_type))
              .withColumn(error, why))
    fields = [f.name for f in row_type.fields]
    clash = sorted(set(fields) & set(keep))
    if clash:
        raise ConfigError(f"source columns {clash} clash with Kafka columns")
    return framed.select(
        *[F.col(c) for c in keep],
        *[F.col(f"__row.`{f}`").alias(f) for f in fields],
        op.alias("cdc_op"), F.get_json_object(env, "$.ts_ms").cast("bigint").alias("cdc_ts_ms"),
        position.alias("cdc_position"), src.alias("cdc_source"),
        # deletes: no raw value, so the writer marks them tombstones; dead letters keep it
        F.when(F.col(error).isNotNull() | (op != "d"), F.col("value")).alias(raw_value),
        F.col(error))


# ---------------------------------------------------------------------------
# Avro envelopes (Debezium's AvroConverter), decoded by the registry load


def registry_table_value(table_schema, kafka_columns):
    """The struct a Debezium Envelope's writer schema is checked against on the
    executors (:class:`pipelines.registry_load.RegistryPlan`): the table's row columns
    as the Envelope's ``before`` and ``after`` records, so that a source column whose
    type changes incompatibly is refused like any registry field; the Envelope's other
    fields (``op``, ``source``...) never reach the table as such."""
    import pyarrow as pa

    from .schema_evolution import normalize

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
