"""Every Iceberg table property and snapshot summary key kafkastore writes or reads.

The one home of these names (DESIGN.md section 10): table creation, commits, loads,
upserts, registry loads, reprocess, maintain, vacuum, the quality gate and
``kafkastore sql`` import them from here; no other module of ``pipelines/`` spells a
``kafkastore.`` key (``tests/pipelines/test_warehouse_properties.py`` checks).

The values are stored in tables that exist: never change one. Adding a load property:
a name under :data:`LOAD_PROPERTY_PREFIX` in :data:`LOAD_PROPERTIES`; a field of a table's
layout then declares it with its conflict rule (a :class:`RecordedProperty` in
``pipelines.spec.table_layout.LAYOUT_FIELDS``), and the loads, reprocess and maintain
record, read and settle it through :class:`RecordedProperty` without further edits.

Stdlib only: the DAG file's job specs import it at parse time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kafkastore.errors import ConfigError

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
# How a recorded layout property is kept

#: A load property recorded when a load creates the table: a run that leaves the field
#: out takes the table's value; a run that gives it (even the default) must give the
#: table's, or it is refused in one line naming the property and the flag. Tables created
#: before the load properties existed keep what the run gives.
FIXED = "fixed"
#: The mode and key columns (:data:`MODE_PROPERTY`, :data:`KEY_COLUMNS_PROPERTY`, older
#: than the load properties): a run that names no mode takes the table's, another mode or
#: other keys are refused (``pipelines.spec.table_layout.check_mode``).
TABLE_MODE = "table-mode"
RULES = (FIXED, TABLE_MODE)


@dataclass(frozen=True)
class RecordedProperty:
    """A table property recording one field of a table's layout, and its conflict rule.

    Values are stored as JSON (a tuple as a list, read back as a tuple); ``absent`` is the
    value of a table that has the load properties but not this one (created before the
    field existed)."""

    name: str
    rule: str = FIXED
    absent: Any = None

    def __post_init__(self):
        if self.rule not in RULES:
            raise ConfigError(f"unknown conflict rule {self.rule!r}; expected one of {RULES}")

    def encode(self, value: Any) -> str:
        """The property's text for ``value``."""
        return json.dumps(list(value) if isinstance(value, tuple) else value)

    def decode(self, text: str | None) -> Any:
        """The value a property's text records (``absent`` for no text)."""
        if text is None:
            return self.absent
        value = json.loads(text)
        return tuple(value) if isinstance(value, list) else value

    def settle(self, given: Any, stored: Any, left_out: bool, *, table: str, flag: str) -> Any:
        """The value a run of ``table`` uses under rule :data:`FIXED`: the table's when the
        run left the field out or gave the same; otherwise a ConfigError (one line)."""
        if left_out or given == stored:
            return stored
        shown = (lambda v: list(v) if isinstance(v, tuple) else v)
        raise ConfigError(f"table {table} is loaded with {self.name}={json.dumps(shown(stored))}; "
                          f"{flag} {json.dumps(shown(given))} conflicts with it (drop the flag to "
                          f"use the table's, or load into another table)")


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
