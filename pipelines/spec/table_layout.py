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

**Each field is declared once**, in :data:`LAYOUT_FIELDS`: its default, its ``load`` CLI
flag, its ``loads:`` config key, how a value is parsed and checked, and the table property
recording it with its conflict rule (:class:`pipelines.warehouse.properties.RecordedProperty`).
The ``load`` command's flags (:func:`add_layout_flags`), the config parser
(:meth:`pipelines.spec.load_spec.LoadSpec.from_entry`), the recorded load properties and
their settling against an existing table (``LoadSpec.load_properties`` / ``for_table``,
which reprocess uses too) and the table rewrite of ``kafkastore maintain``
(:meth:`TableLayout.of_properties`, :meth:`TableLayout.row_order`) all read the
declarations: a new layout field is a field of :class:`TableLayout`, its row in
:data:`LAYOUT_FIELDS`, a property name in ``LOAD_PROPERTIES``, and the code that lays
files out by it.

Also the names every table module shares: the dead-letter table's suffix and
table identifiers (``NAME`` / ``NAMESPACE.NAME``).

Stdlib only (no pyiceberg, no Spark): the DAG file parses config entries with it
at parse time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from kafkastore.errors import ConfigError

# The table properties a layout is recorded under (their one home is the warehouse's
# properties module, stdlib only like this one); the names stay importable from here.
from ..warehouse.properties import (FIXED, KEY_COLUMNS_PROPERTY, LOAD_PROPERTIES,  # noqa: F401
                                    LOAD_PROPERTY_PREFIX, MODE_PROPERTY, TABLE_MODE,
                                    RecordedProperty)

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

    def row_order(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The columns a rewrite of the table's files sorts rows by (``kafkastore
        maintain``): an upsert table by its key, so loads keep touching few files; an
        append table by topic, partition and offset (those of ``columns`` it has)."""
        if self.upsert:
            return self.upsert_keys
        return tuple(c for c in APPEND_ROW_ORDER if c in columns)

    def dead_letters(self) -> "TableLayout":
        """The layout of this table's dead-letter table: the same partitioning and
        Parquet files, an append table (a field about the decoded columns does not
        apply: the dead letters have the Kafka columns and the error only)."""
        return TableLayout(partition_by=self.partition_by,
                           max_rows_per_file=self.max_rows_per_file, compression=self.compression)

    @classmethod
    def of_properties(cls, properties: Mapping[str, str]) -> "TableLayout":
        """The layout a table's properties record, read through :data:`LAYOUT_FIELDS`
        (a field not recorded: its default). For jobs that rewrite an existing table without a spec (maintain)."""
        values: dict[str, Any] = {}
        for f in LAYOUT_FIELDS:
            if f.recorded is None or f.recorded.rule != FIXED:
                continue
            text = properties.get(f.recorded.name)
            if text is not None:
                values[f.name] = f.recorded.decode(text)
        mode = properties.get(MODE_PROPERTY, "append")
        keys = tuple(k for k in properties.get(KEY_COLUMNS_PROPERTY, "").split(",") if k)
        return cls(**values, mode=mode, key_columns=keys if mode == "upsert" else ())


#: The row order of a rewritten append table's files.
APPEND_ROW_ORDER = ("topic", "partition", "offset")


# ---------------------------------------------------------------------------
# The declarations: one row per TableLayout field


def _identity(value: Any) -> Any:
    return value


def parse_partition_by(value: Any) -> tuple[str, ...] | None:
    """A ``partition_by`` of the config (a list, or one field as a string) or of the
    repeated ``--partition-by`` flag: a tuple of partition fields (None: not given)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"partition_by must be a list like ['day(timestamp)'], got {value!r}")
    return tuple(str(x) for x in value)


def parse_mode(value: Any) -> str | None:
    """``append`` / ``upsert`` as given (checked by :class:`TableLayout`); empty: not given."""
    return str(value) if value else None


def parse_given_key_columns(value: Any) -> tuple[str, ...]:
    """Key columns as given (``"a,b"`` or a list); empty: () (the Kafka key)."""
    return parse_key_columns(value) if value else ()


@dataclass(frozen=True)
class LayoutField:
    """One field of :class:`TableLayout`, declared once (see the module docstring).

    ``flag``: the ``load`` command's flag (None: none), with ``flag_options`` for argparse
    (``choices``, ``metavar``, ``action``) and ``help``; ``config_key``: the ``loads:``
    entry's key (None: none); ``parse``: a flag's or the config's value to the field's
    value (None: not given), refusing bad values with a ConfigError; ``recorded``: the
    table property and conflict rule (None: not recorded)."""

    name: str
    default: Any
    help: str = ""
    flag: str | None = None
    flag_options: Mapping[str, Any] = field(default_factory=dict)
    config_key: str | None = None
    parse: Callable[[Any], Any] = _identity
    recorded: RecordedProperty | None = None

    @property
    def dest(self) -> str:
        """The attribute argparse stores the flag's value under."""
        return (self.flag or "").lstrip("-").replace("-", "_")


#: Every field of :class:`TableLayout` (a test checks none is missing), in the order the
#: ``load`` command lists their flags.
LAYOUT_FIELDS: tuple[LayoutField, ...] = (
    LayoutField("partition_by", DEFAULT_PARTITION_BY,
                help="Iceberg partition field of a new table, e.g. 'day(timestamp)' "
                     "(repeatable; default: the config's, else day(timestamp))",
                flag="--partition-by", flag_options={"action": "append", "metavar": "FIELD"},
                config_key="partition_by", parse=parse_partition_by,
                recorded=RecordedProperty(LOAD_PROPERTIES["partition_by"], FIXED, absent=())),
    LayoutField("mode", None,
                help="append (default): every record a row; upsert: one row per key, "
                     "the latest record wins, a tombstone deletes the key",
                flag="--mode", flag_options={"choices": MODES}, config_key="mode",
                parse=parse_mode, recorded=RecordedProperty(MODE_PROPERTY, TABLE_MODE)),
    LayoutField("key_columns", (),
                help="upsert: key by these decoded value columns (default: the Kafka key)",
                flag="--key-columns", flag_options={"metavar": "A,B"}, config_key="key_columns",
                parse=parse_given_key_columns,
                recorded=RecordedProperty(KEY_COLUMNS_PROPERTY, TABLE_MODE)),
    # Parquet files: rows per file and codec are the jobs' keywords, not flags or config keys.
    LayoutField("max_rows_per_file", DEFAULT_MAX_ROWS_PER_FILE, parse=int),
    LayoutField("compression", DEFAULT_COMPRESSION, parse=str),
)
LAYOUT_FIELDS_BY_NAME = {f.name: f for f in LAYOUT_FIELDS}
#: The layout fields a run settles against the table's record under rule FIXED.
FIXED_FIELDS = tuple(f for f in LAYOUT_FIELDS if f.recorded is not None and f.recorded.rule == FIXED)
#: The ``loads:`` keys of the layout.
LAYOUT_CONFIG_KEYS = tuple(f.config_key for f in LAYOUT_FIELDS if f.config_key)


def undeclared_layout_fields() -> list[str]:
    """The fields of :class:`TableLayout` without a row in :data:`LAYOUT_FIELDS` (a
    test keeps this empty)."""
    return [f.name for f in fields(TableLayout) if f.name not in LAYOUT_FIELDS_BY_NAME]


def add_layout_flags(parser) -> None:
    """Add each declared field's flag to the ``load`` command's argparse parser."""
    for f in LAYOUT_FIELDS:
        if f.flag:
            parser.add_argument(f.flag, help=f.help, **dict(f.flag_options))


def layout_flags(args) -> dict[str, Any]:
    """The layout fields given as flags in parsed ``load`` arguments: field name ->
    value as given (None: not given)."""
    return {f.name: getattr(args, f.dest, None) for f in LAYOUT_FIELDS if f.flag}


def layout_entry_from_flags(args) -> dict[str, Any]:
    """The same, as ``loads:`` entry keys (for entries of many tables); given only."""
    return {f.config_key: getattr(args, f.dest) for f in LAYOUT_FIELDS
            if f.flag and f.config_key and getattr(args, f.dest, None) is not None}
