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
    """A CDC load is an upsert load of JSON envelopes whose row DDL and primary key
    columns are given."""
    if spec.cdc is None:
        return
    if spec.cdc not in CDC_FORMATS:
        raise ConfigError(f"cdc must be one of {CDC_FORMATS}, got {spec.cdc!r}")
    if spec.mode != "upsert":
        raise ConfigError("--cdc debezium loads are upsert loads (mode: upsert)")
    if spec.value_format != "json" or not (spec.value_schema or spec.value_schema_file):
        raise ConfigError("--cdc debezium needs --value-format json and --value-schema with the "
                          "source table's columns (a DDL like 'id BIGINT, name STRING')")
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
