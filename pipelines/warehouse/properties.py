"""Every Iceberg table property and snapshot summary key kafkastore writes or reads.

The one home of these names (DESIGN.md section 10): table creation, commits, loads,
upserts, registry loads, reprocess, maintain, vacuum, the quality gate and
``kafkastore sql`` import them from here; no other module of ``pipelines/`` spells a
``kafkastore.`` key (``tests/pipelines/test_warehouse_properties.py`` checks).

The values are stored in tables that exist: never change one. Adding a load property:
a name under :data:`LOAD_PROPERTY_PREFIX` in :data:`LOAD_PROPERTIES`, its default for
tables that lack it and its conflict rule (``pipelines.spec.load_spec``).

Stdlib only: the DAG file's job specs import it at parse time.
"""
from __future__ import annotations

# ---------------------------------------------------------------------------
# Table properties

#: pyiceberg's own commit retry re-applies a commit blindly: kafkastore turns it off
#: on every table it creates or commits to, and retries on its commit engine.
RETRY_PROPERTY = "commit.retry.num-retries"
FORMAT_VERSION_PROPERTY = "format-version"
PARQUET_CODEC_PROPERTY = "write.parquet.compression-codec"
NO_BLIND_RETRY = {RETRY_PROPERTY: "0"}
#: The properties of every table kafkastore creates.
TABLE_PROPERTIES = {**NO_BLIND_RETRY, FORMAT_VERSION_PROPERTY: "2",
                    PARQUET_CODEC_PROPERTY: "zstd"}

#: ``upsert`` for a table of the latest state per key; absent means append.
MODE_PROPERTY = "kafkastore.mode"
#: The upsert key columns, comma-separated (``key`` = the Kafka key).
KEY_COLUMNS_PROPERTY = "kafkastore.key-columns"
#: A table of a route-by-field load: JSON ``{"field", "template", "value"}`` (value null:
#: the route's default table); later runs of the route find its tables by it.
ROUTE_PROPERTY = "kafkastore.route"

#: How a table is loaded, remembered in its own Iceberg table properties so that
#: ``reprocess``, ``maintain``, the next ``load`` and the DAGs' reruns decode and lay
#: out its rows exactly as its first load did. The mode and key columns keep their
#: older names (:data:`MODE_PROPERTY`, :data:`KEY_COLUMNS_PROPERTY`); everything else
#: is under this one prefix. A table without ``kafkastore.load.value-format`` was
#: created before these existed: its loads take their flags as given.
LOAD_PROPERTY_PREFIX = "kafkastore.load."
#: The spec field each load property records (field name -> property name).
LOAD_PROPERTIES = {
    "value_format": LOAD_PROPERTY_PREFIX + "value-format",
    "value_schema": LOAD_PROPERTY_PREFIX + "value-schema",
    "value_schema_file": LOAD_PROPERTY_PREFIX + "value-schema-file",
    "decode": LOAD_PROPERTY_PREFIX + "decode",
    "cdc": LOAD_PROPERTY_PREFIX + "cdc",
    "partition_by": LOAD_PROPERTY_PREFIX + "partition-by",
}

# ---------------------------------------------------------------------------
# Snapshot summary keys (the commit protocol, DESIGN.md section 5)

#: JSON ``{"<topic>": {"<partition>": <next offset>}}``: the table's full committed map.
OFFSETS_KEY = "kafkastore.offsets"
#: The run that committed the snapshot (the read-back key of an unknown outcome).
RUN_ID_KEY = "kafkastore.run-id"
#: One of :data:`OPERATIONS` or :data:`CARRY_OPERATIONS`.
OPERATION_KEY = "kafkastore.operation"
#: JSON list of ``{"topic", "partition", "from", "until"}``: the ranges committed.
RANGES_KEY = "kafkastore.ranges"
#: Offsets skipped because retention deleted them before they were loaded.
GAPS_KEY = "kafkastore.gaps"
#: A reprocess's requested and effective offsets, user, reason, flags.
AUDIT_KEY = "kafkastore.audit"
#: Registry loads: the writer schema ids of the values and of the keys.
SCHEMA_IDS_KEY = "kafkastore.schema-ids"
KEY_SCHEMA_IDS_KEY = "kafkastore.key-schema-ids"

#: The operations that commit ranges of the log (the quality gate validates them).
OPERATIONS = ("load", "reprocess")
#: Snapshots that carry the committed offsets forward unchanged (no ranges): a
#: table rewrite by ``kafkastore maintain``. Not a load: never validated.
CARRY_OPERATIONS = ("maintain",)

# ---------------------------------------------------------------------------
# Refs

#: The tag the quality gate moves to the newest validated snapshot.
VALIDATED_TAG = "validated"
