"""The typed load spec: one ``loads:`` entry of the config, parsed once.

The CLI (``load``, ``reprocess``), the DAGs, :mod:`pipelines.jobs.load` and
:mod:`pipelines.jobs.reprocess` all take a :class:`LoadSpec` instead of re-reading
dictionaries. A config entry::

    loads:
      - topic: orders
        table: orders                 # default.orders; ns.orders accepted
        schedule: "@hourly"           # for the DAGs: LoadSpec.scheduling
        value_format: json            # raw (default) | json | avro | protobuf | json-schema
        schema_registry: null         # a registry URL: decode by the header's schema id and
        on_incompatible: dead-letter  # follow the writers' schemas (pipelines.jobs.registry_load)
        key_format: raw               # with schema_registry: raw | avro | protobuf | json-schema
        value_schema: "id long, name string"   # DDL (json) or Avro schema JSON
        value_schema_file: null
        confluent_wire_format: false  # more decoder options (pipelines.decoding)
        partition_by: ["day(timestamp)"]       # Iceberg hidden partitioning; [] = none
        on_data_loss: fail            # fail | skip (record the gap and go on)
        mode: upsert                  # append (every record) | upsert (latest state per key);
                                      # default: the table's (append for a new table)
        key_columns: null             # upsert: value columns "a,b" (default: the Kafka key)
        cdc: null                     # debezium: change events (implies mode: upsert;
                                      # value_schema: the source table's columns)
        start_date: "2024-01-01"      # more DAG keys (also catchup, retries, retry_delay_s,
                                      # max_retry_delay_s): LoadSpec.scheduling too
        maintain: true                # DAG: `kafkastore maintain` after each validated load
                                      # (default: true for mode upsert, else false)

The table's layout (partitioning, mode, keys, file size) is one typed value,
:attr:`LoadSpec.layout` (:class:`pipelines.spec.table_layout.TableLayout`), built with the
spec; the jobs pass it down instead of the loose fields. The layout's ``loads:`` keys,
their parsing, their recorded properties and the settling of those against a table come
from the layout's declarations (``table_layout.LAYOUT_FIELDS``): a layout field added there
needs no edit here (fields other than partition_by, mode and key_columns are kept in
:attr:`LoadSpec.layout_options`).

Spark-free and pyiceberg-free (stdlib only when parsing), so the CLI and Airflow's
DAG file can parse it cheaply at parse time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from kafkastore.errors import ConfigError

from .table_layout import (DEFAULT_COMPRESSION, DEFAULT_KEY_COLUMNS, DEFAULT_MAX_ROWS_PER_FILE,
                           FIXED_FIELDS, LAYOUT_CONFIG_KEYS, LAYOUT_FIELDS, LAYOUT_FIELDS_BY_NAME,
                           LOAD_PROPERTIES, TableLayout, dead_letter_table, table_identifier,
                           table_mode, table_name)

VALUE_FORMATS = ("raw", "json", "avro", "protobuf", "json-schema")
ON_DATA_LOSS = ("fail", "skip")
DECODE_EXTRA = ("confluent_wire_format", "value_schema_id", "flatten", "keep_raw_value",
                "schema_registry", "on_incompatible", "key_format")
#: Decoder options that are a run's policy, not how rows are decoded: a run may give
#: another than the table's recorded one (which it uses when none is given).
RUN_POLICIES = ("on_incompatible",)
#: The load properties a run that gives them anew records (a fixed decoder's schema).
REVISABLE = ("value_schema", "value_schema_file")
#: Keys only the DAGs read (kept in ``LoadSpec.scheduling`` as given; an absent
#: key and ``schedule: null``, a DAG run only by hand, differ).
SCHEDULING = ("schedule", "start_date", "catchup", "retries", "retry_delay_s",
              "max_retry_delay_s", "maintain")
#: The spec fields whose default a table's recorded value replaces when left out (the
#: value format, and each layout field recorded under the FIXED rule).
DEFAULTS = {"value_format": "raw", **{f.name: f.default for f in FIXED_FIELDS}}
KNOWN = {"topic", "table", "value_format", "value_schema", "value_schema_file",
         "on_data_loss", "cdc", *LAYOUT_CONFIG_KEYS, *DECODE_EXTRA, *SCHEDULING}
#: The layout fields that are attributes of :class:`LoadSpec` itself (the others are in
#: :attr:`LoadSpec.layout_options`).
SPEC_LAYOUT_FIELDS = ("partition_by", "mode", "key_columns", "max_rows_per_file", "compression")


@dataclass(frozen=True)
class LoadSpec:
    """How one topic loads into one table (see the module docstring)."""

    topic: str
    table: str
    #: None: not given (``raw``, or the table's recorded format; see :attr:`defaulted`)
    value_format: str | None = None
    value_schema: str | None = None
    value_schema_file: str | None = None
    decode: Mapping[str, Any] = field(default_factory=dict)
    #: None: not given (``day(timestamp)``, or the table's recorded partitioning)
    partition_by: tuple[str, ...] | None = None
    on_data_loss: str = "fail"
    scheduling: Mapping[str, Any] = field(default_factory=dict)
    #: ``upsert``: one row per key (pipelines.jobs.upsert); ``key_columns`` () = the Kafka key.
    #: ``None``: the existing table's mode (append for a new table); see :meth:`for_table`
    mode: str | None = None
    key_columns: tuple[str, ...] = ()
    #: ``debezium``: values are change events (pipelines.decoding.cdc); implies ``mode="upsert"``.
    cdc: str | None = None
    #: Parquet files: rows per file and codec (jobs' keywords; not config keys)
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    compression: str = DEFAULT_COMPRESSION
    #: The fields of :data:`DEFAULTS` left out (None) and set to their default: the
    #: table's recorded value wins over them, where a value given explicitly, even the
    #: default, must agree with it. Kept by ``replace`` while the value stays the
    #: default; :meth:`with_overrides` gives fields explicitly.
    defaulted: frozenset = field(default=frozenset(), repr=False, compare=False)
    #: A route-by-field load: which records this table takes
    #: (:class:`pipelines.spec.route_filter.RouteFilter`; None: every record).
    route: Any = field(default=None, compare=False)
    #: The given values of the layout fields declared in ``table_layout.LAYOUT_FIELDS``
    #: beyond :data:`SPEC_LAYOUT_FIELDS` (field name -> value; absent: not given).
    layout_options: Mapping[str, Any] = field(default_factory=dict)
    #: The table layout of the fields above, built (and validated) with the spec.
    layout: TableLayout = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self._resolve_defaults()
        if not self.topic:
            raise ConfigError("a load needs a topic")
        table_identifier(self.table)
        if self.value_format not in VALUE_FORMATS:
            raise ConfigError(f"value_format must be one of {VALUE_FORMATS}, got {self.value_format!r}")
        if self.on_data_loss not in ON_DATA_LOSS:
            raise ConfigError(f"on_data_loss must be one of {ON_DATA_LOSS}, got {self.on_data_loss!r}")
        if (self.cdc is not None or self.key_columns) and self.mode is None:
            object.__setattr__(self, "mode", "upsert")
        unknown = sorted(set(self.layout_options) - (set(LAYOUT_FIELDS_BY_NAME)
                                                     - set(SPEC_LAYOUT_FIELDS)))
        if unknown:
            raise ConfigError(f"unknown layout option(s) {unknown}")
        object.__setattr__(self, "layout", TableLayout(
            partition_by=tuple(self.partition_by), mode=self.mode,
            key_columns=tuple(self.key_columns), max_rows_per_file=int(self.max_rows_per_file),
            compression=str(self.compression), **self.layout_options))
        if self.cdc is not None:
            from ..decoding.cdc import check_spec  # lazy: the DAG file parses specs without the decoders

            check_spec(self)

    def _resolve_defaults(self) -> None:
        """Fill the fields of :data:`DEFAULTS` left at None, noting them in ``defaulted``."""
        defaulted = set(self.defaulted)
        options = dict(self.layout_options)
        for name, default in DEFAULTS.items():
            value = self.value_of(name)
            if value is None:
                value = default
                defaulted.add(name)
            else:
                if isinstance(value, list):
                    value = tuple(value)
                if value != default:
                    defaulted.discard(name)
            if name in options or not hasattr(self, name):
                options[name] = value
            else:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "layout_options", options)
        object.__setattr__(self, "defaulted", frozenset(defaulted))

    def value_of(self, name: str) -> Any:
        """A field's value: an attribute, or a layout option (None: not given)."""
        if name in LAYOUT_FIELDS_BY_NAME and name not in SPEC_LAYOUT_FIELDS:
            return self.layout_options.get(name)
        return getattr(self, name)

    def _with(self, changes: Mapping[str, Any], **kw: Any) -> "LoadSpec":
        """``replace`` that puts layout fields other than the spec's own into
        :attr:`layout_options`."""
        attrs = dict(changes)
        options = {k: attrs.pop(k) for k in list(attrs)
                   if k in LAYOUT_FIELDS_BY_NAME and k not in SPEC_LAYOUT_FIELDS}
        if options:
            attrs["layout_options"] = {**self.layout_options, **options}
        return replace(self, **attrs, **kw)

    def given(self, **changes: Any) -> "LoadSpec":
        """A copy with ``changes`` given explicitly (a default value included)."""
        return self._with(changes, defaulted=self.defaulted - set(changes))

    def for_table(self, table) -> "LoadSpec":
        """This spec settled against ``table`` (a pyiceberg table or None): what the
        table's load properties record (:func:`stored_load`) fills what the spec leaves
        at its default, a value that conflicts with them is a ConfigError naming the
        property and both values; a spec that names no mode takes the table's (an
        upsert table keeps loading as one). A new table, or one created before the load
        properties existed, keeps the spec as given."""
        changes = {} if table is None else self._stored_changes(
            table.metadata.properties, _display_name(table))
        if self.mode is None or (self.cdc is not None and not self.key_columns
                                 and table is not None):
            mode, keys = table_mode(table)
            changes.update(mode=mode, key_columns=() if tuple(keys) in ((), DEFAULT_KEY_COLUMNS)
                           else tuple(keys))
        return self._with(changes) if changes else self

    def _stored_changes(self, properties: Mapping[str, str], name: str) -> dict[str, Any]:
        """The fields to take from the table's load properties (see :meth:`for_table`)."""
        stored = stored_load(properties)
        if stored is None:
            return {}
        changes: dict[str, Any] = {}
        given_format = "value_format" not in self.defaulted
        given_decoder = (given_format or self.value_schema is not None
                         or self.value_schema_file is not None or bool(self.decode))
        if not given_decoder:
            changes.update(value_format=stored["value_format"],
                           value_schema=stored["value_schema"],
                           value_schema_file=stored["value_schema_file"],
                           decode=stored["decode"])
        else:
            if given_format:
                _agree(name, "value_format", self.value_format, stored["value_format"])
            else:   # decoder options alone (a run's policy, say): the table's format
                changes["value_format"] = stored["value_format"]
            for k in sorted(set(self.decode) | set(stored["decode"])):
                if k not in self.decode:
                    changes.setdefault("decode", dict(self.decode))[k] = stored["decode"][k]
                elif k not in RUN_POLICIES:
                    _agree(name, "decode", self.decode[k], stored["decode"].get(k), option=k)
            # A new value schema is how a reprocess fixes a decoder (a new column, a
            # corrected type): given, it wins and is recorded by the run's commit.
            if self.value_schema is None and self.value_schema_file is None:
                changes.update(value_schema=stored["value_schema"],
                               value_schema_file=stored["value_schema_file"])
        if self.cdc is None:
            if stored["cdc"] is not None:
                changes["cdc"] = stored["cdc"]
        else:
            _agree(name, "cdc", self.cdc, stored["cdc"])
        for f in FIXED_FIELDS:   # the layout's recorded fields, by their declared rule
            changes[f.name] = f.recorded.settle(self.value_of(f.name), stored[f.name],
                                                f.name in self.defaulted, table=name, flag=f.flag)
        return changes

    def load_properties(self) -> dict[str, str]:
        """The table properties recording how this spec loads (:data:`LOAD_PROPERTIES`),
        set when a load creates the table."""
        props = {LOAD_PROPERTIES["value_format"]: self.value_format,
                 LOAD_PROPERTIES["decode"]: json.dumps(dict(self.decode), sort_keys=True)}
        for f in FIXED_FIELDS:
            props[f.recorded.name] = f.recorded.encode(self.value_of(f.name))
        for name in ("value_schema", "value_schema_file", "cdc"):
            if getattr(self, name) is not None:
                props[LOAD_PROPERTIES[name]] = str(getattr(self, name))
        return props

    @property
    def maintain_after_load(self) -> bool:
        """Whether the load DAG runs ``kafkastore maintain`` on the table after each load."""
        value = self.scheduling.get("maintain")
        if value is None:
            return self.mode == "upsert"
        return str(value).strip().lower() not in ("false", "0", "no", "off")

    @property
    def upsert_keys(self) -> tuple[str, ...]:
        """The key columns of an upsert load (the Kafka ``key`` by default)."""
        return self.layout.upsert_keys

    @property
    def dead_letter_table(self) -> str:
        """``<table>_dead_letters``: where decode failures go."""
        return dead_letter_table(self.table)

    @property
    def decoded(self) -> bool:
        return self.value_format != "raw"

    @property
    def registry(self) -> bool:
        """Decoded by the writer schemas of a schema registry (pipelines.jobs.registry_load)."""
        return bool(self.decode.get("schema_registry"))

    def decode_options(self):
        """:class:`pipelines.decoding.DecodeOptions` (imports the decoder, not Spark)."""
        from ..decoding.values import DecodeOptions  # lazy: the DAG file parses specs without the decoders

        opts = {"value_format": self.value_format, "value_schema": self.value_schema,
                "value_schema_file": self.value_schema_file}
        opts.update({k: v for k, v in self.decode.items() if v is not None})
        return DecodeOptions.parse(opts)

    def with_overrides(self, **kw: Any) -> "LoadSpec":
        """A copy with the non-None keyword values replaced (CLI flags over the config)."""
        changes = {k: (LAYOUT_FIELDS_BY_NAME[k].parse(v) if k in LAYOUT_FIELDS_BY_NAME else v)
                   for k, v in kw.items() if v is not None}
        return self.given(**changes)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> "LoadSpec":
        """Parse one ``loads:`` entry; unknown keys and bad values are ConfigErrors."""
        if not isinstance(entry, Mapping):
            raise ConfigError(f"a 'loads' entry must be a mapping, got {entry!r}")
        unknown = sorted(set(entry) - KNOWN)
        if unknown:
            raise ConfigError(f"unknown key(s) {unknown} in the 'loads' entry for "
                              f"{entry.get('topic')!r}; expected some of {sorted(KNOWN)}")
        if not entry.get("table"):
            raise ConfigError(f"the 'loads' entry for topic {entry.get('topic')!r} needs a table")
        layout = {f.name: f.parse(entry.get(f.config_key)) for f in LAYOUT_FIELDS
                  if f.config_key}
        options = {k: v for k, v in layout.items() if k not in SPEC_LAYOUT_FIELDS and v is not None}
        return cls(topic=str(entry.get("topic") or ""), table=str(entry["table"]),
                   value_format=str(entry["value_format"]) if entry.get("value_format") else None,
                   value_schema=entry.get("value_schema"),
                   value_schema_file=entry.get("value_schema_file"),
                   decode={k: entry[k] for k in DECODE_EXTRA if entry.get(k) is not None},
                   on_data_loss=str(entry.get("on_data_loss") or "fail"),
                   scheduling={k: entry[k] for k in SCHEDULING if k in entry},
                   cdc=entry.get("cdc") or None, layout_options=options,
                   **{k: v for k, v in layout.items() if k in SPEC_LAYOUT_FIELDS})


#: The CLI flag of each recorded field (decoder options: ``--`` + the option's name; the
#: layout's fields: their declarations).
_FLAGS = {"value_format": "--value-format", "cdc": "--cdc"}


def stored_load(properties: Mapping[str, str]) -> dict[str, Any] | None:
    """The spec fields a table's load properties record, or None for a table created
    before they existed (no ``kafkastore.load.value-format``)."""
    if LOAD_PROPERTIES["value_format"] not in properties:
        return None
    get = properties.get
    return {"value_format": get(LOAD_PROPERTIES["value_format"]),
            "value_schema": get(LOAD_PROPERTIES["value_schema"]),
            "value_schema_file": get(LOAD_PROPERTIES["value_schema_file"]),
            "decode": json.loads(get(LOAD_PROPERTIES["decode"]) or "{}"),
            "cdc": get(LOAD_PROPERTIES["cdc"]),
            **{f.name: f.recorded.decode(get(f.recorded.name)) for f in FIXED_FIELDS}}


def _agree(table: str, name: str, given: Any, stored: Any, option: str | None = None) -> None:
    """ConfigError (one line) when a given value differs from the table's recorded one."""
    if given == stored or (option is not None and str(given) == str(stored)):
        return
    flag = ("--" + option.replace("_", "-")) if option else _FLAGS[name]
    where = LOAD_PROPERTIES[name] + (f"[{option}]" if option else "")
    raise ConfigError(f"table {table} is loaded with {where}={json.dumps(stored)}; "
                      f"{flag} {json.dumps(given)} conflicts with it (drop the flag to use "
                      f"the table's, or load into another table)")


def _display_name(table) -> str:
    return table_name(table.name())


#: The keys of a ``loads:`` entry of many tables (pipelines.spec.topic_routing).
MANY_TABLE_KEYS = ("topic_pattern", "table_template", "route_field", "route_values",
                   "route_default")


def _one_table(entry: Mapping[str, Any]) -> bool:
    return not any(entry.get(k) is not None for k in MANY_TABLE_KEYS)


def load_specs(cfg) -> list[LoadSpec]:
    """Every one-table ``loads:`` entry of a :class:`pipelines.spec.job_config.Config`, parsed
    (entries of many tables: :class:`pipelines.spec.topic_routing.ManyLoadSpec`)."""
    return [LoadSpec.from_entry(e) for e in cfg.loads if _one_table(e)]


def resolve_spec(cfg, topic: str, table: str | None = None, **overrides: Any) -> LoadSpec:
    """The spec for ``topic`` (and ``table``): the config entry if there is one,
    with ``overrides`` (CLI flags; None = not given) on top. Without an entry a
    table must be given."""
    for entry in cfg.loads:
        if (entry.get("topic") == topic and (table is None or entry.get("table") == table)
                and _one_table(entry)):
            return LoadSpec.from_entry(entry).with_overrides(**overrides)
    if not table:
        raise ConfigError(f"give --table, or add a 'loads' entry for topic {topic!r} with a "
                          f"table to the config file")
    return LoadSpec(topic=topic, table=table).with_overrides(**overrides)
