"""How a warehouse table is laid out: one typed value, built once and passed down.

A :class:`TableLayout` says how rows become files of one table: the Iceberg
partition spec (hidden partitioning, ``partition_by``), the write mode
(``append``: every record is a row; ``upsert``: one row per key, the record with
the highest (partition, offset) winning, see :mod:`pipelines.jobs.upsert`), the key
columns of an upsert table, and the file size and compression of the Parquet
files. The CLI flags and the config's ``loads:`` entry are parsed into it once
(:attr:`pipelines.spec.load_spec.LoadSpec.layout`); the load, the reprocess, the
executors' file writer (:class:`pipelines.jobs.executor_io.WriteTarget`) and table creation
(:func:`pipelines.jobs.load.ensure_tables`) read it, nothing re-parses strings.

Also the names every table module shares: the dead-letter table's suffix and
table identifiers (``NAME`` / ``NAMESPACE.NAME``).

Stdlib only (no pyiceberg, no Spark): the DAG file parses config entries with it
at parse time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from kafkastore.errors import ConfigError

# The table properties a layout is recorded under (their one home is the warehouse's
# properties module, stdlib only like this one); the names stay importable from here.
from ..warehouse.properties import (KEY_COLUMNS_PROPERTY, LOAD_PROPERTIES,  # noqa: F401
                                    LOAD_PROPERTY_PREFIX, MODE_PROPERTY)

#: Hidden partitioning of a new table when neither flags nor config say.
DEFAULT_PARTITION_BY = ("day(timestamp)",)
MODES = ("append", "upsert")
#: Upsert tables without key columns key by the Kafka record key.
DEFAULT_KEY_COLUMNS = ("key",)
DEFAULT_MAX_ROWS_PER_FILE = 1_000_000
DEFAULT_COMPRESSION = "zstd"
#: ``<table>_dead_letters``: decode failures of loads into ``<table>`` (DESIGN.md section 5).
DEAD_LETTERS_SUFFIX = "_dead_letters"
DEFAULT_NAMESPACE = "default"

#: Staging column: True for a record that deletes its key.
TOMBSTONE = "__kafkastore_tombstone"


def table_mode(table) -> tuple[str, tuple[str, ...]]:
    """(mode, key columns) recorded in ``table``'s properties (append when absent)."""
    if table is None:
        return "append", ()
    props = table.metadata.properties
    mode = props.get(MODE_PROPERTY, "append")
    keys = tuple(k for k in props.get(KEY_COLUMNS_PROPERTY, "").split(",") if k)
    return mode, keys


def check_mode(table, name: str, mode: str, key_columns: Sequence[str]) -> None:
    """Refuse loading ``table`` in another mode, or with other key columns, than it was
    created with (a table of every change and a table of the latest state do not mix)."""
    if table is None:
        return
    have, keys = table_mode(table)
    if have != mode:
        raise ConfigError(f"table {name} is an {have} table; it cannot be loaded with "
                          f"--mode {mode} (load into another table)")
    if mode == "upsert" and tuple(keys) != tuple(key_columns):
        raise ConfigError(f"upsert table {name} is keyed by {','.join(keys)}, not by "
                          f"{','.join(key_columns)}")


def mode_properties(mode: str, key_columns: Sequence[str]) -> dict[str, str]:
    """The table properties recording an upsert table's mode and key."""
    if mode != "upsert":
        return {}
    return {MODE_PROPERTY: "upsert", KEY_COLUMNS_PROPERTY: ",".join(key_columns)}


NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_TRANSFORM_RE = re.compile(r"^\s*(identity|year|month|day|hour)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
_COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def table_identifier(name: str) -> tuple[str, str]:
    """``NAME`` -> ``("default", NAME)``; ``ns.NAME`` -> ``(ns, NAME)``."""
    parts = str(name).split(".")
    if len(parts) == 1:
        parts = [DEFAULT_NAMESPACE, parts[0]]
    if len(parts) != 2 or not all(NAME_RE.match(p) for p in parts):
        raise ConfigError(f"bad table name {name!r}: expected NAME or NAMESPACE.NAME (letters, "
                          f"digits and underscores, not starting with a digit)")
    return parts[0], parts[1]


def table_name(identifier: Sequence[str]) -> str:
    """The display name: ``NAME`` in the default namespace, else ``ns.NAME``."""
    ns, name = identifier[-2], identifier[-1]
    return name if ns == DEFAULT_NAMESPACE else f"{ns}.{name}"


def dead_letter_table(table: str) -> str:
    """The dead-letter table of ``table``."""
    return table + DEAD_LETTERS_SUFFIX


def parse_partition_field(text: str) -> tuple[str, str]:
    """``"day(timestamp)"`` -> ``("day", "timestamp")``; a bare column is identity.

    Only order-preserving transforms: the driver adds Parquet files whose
    partition value is read from their column bounds, which needs one value per
    file under a monotone transform (bucket/truncate are refused)."""
    m = _TRANSFORM_RE.match(str(text))
    if m:
        return m.group(1), m.group(2)
    if NAME_RE.match(str(text).strip()):
        return "identity", str(text).strip()
    raise ConfigError(f"bad partition field {text!r}: expected COLUMN, identity(COLUMN), "
                      f"year(COLUMN), month(COLUMN), day(COLUMN) or hour(COLUMN)")


def parse_key_columns(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"a,b"`` or ``["a", "b"]`` -> ``("a", "b")``; None or empty: the Kafka key."""
    if text is None:
        return DEFAULT_KEY_COLUMNS
    items = text.split(",") if isinstance(text, str) else list(text)
    cols = tuple(str(c).strip() for c in items if str(c).strip())
    if not cols:
        return DEFAULT_KEY_COLUMNS
    for c in cols:
        if not _COLUMN_RE.match(c):
            raise ConfigError(f"bad key column {c!r}: expected column names like a,b")
    if len(set(cols)) != len(cols):
        raise ConfigError(f"key columns {list(cols)} repeat a column")
    return cols


@dataclass(frozen=True)
class TableLayout:
    """The layout of one table (see the module docstring); validated on construction.

    ``mode`` None: the existing table's (append for a new table), settled by
    :meth:`pipelines.spec.load_spec.LoadSpec.for_table` before anything is written.
    ``key_columns`` () with mode upsert: the Kafka key.
    """

    partition_by: tuple[str, ...] = DEFAULT_PARTITION_BY
    mode: str | None = None
    key_columns: tuple[str, ...] = ()
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    compression: str = DEFAULT_COMPRESSION

    def __post_init__(self):
        for p in self.partition_by:
            parse_partition_field(p)
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.key_columns and self.mode != "upsert":
            raise ConfigError("key_columns only apply to mode: upsert")
        if int(self.max_rows_per_file) < 1:
            raise ConfigError(f"max_rows_per_file must be positive, got {self.max_rows_per_file}")

    @property
    def upsert(self) -> bool:
        """One row per key (pipelines.jobs.upsert)."""
        return self.mode == "upsert"

    @property
    def upsert_keys(self) -> tuple[str, ...]:
        """The key columns of an upsert table (the Kafka ``key`` by default)."""
        return parse_key_columns(self.key_columns or None)
