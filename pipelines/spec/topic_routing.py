"""Many topics into many tables: a topic pattern, a table name template, and routing
by a field of the records (DESIGN.md, "Many topics into many tables").

A ``loads:`` entry (or ``kafkastore load`` flags) of this kind::

    loads:
      - topic_pattern: "orders\\..*"        # full match, Java regex (Spark's subscribePattern)
        table_template: "sales.{topic}"    # {topic}: orders.eu -> sales.orders_eu
        value_format: json                 # the rest: as a one-topic entry, for every table
        value_schema: "id long, region string"
      - topic: events
        route_field: region                # route by a decoded value column...
        table_template: "events_{field}"   # ...into events_eu, events_us, ...
        route_values: [eu, us]             # optional: the allowed values
        route_default: events_other        # optional: where the others go (else: refused)

Names: ``{topic}`` and ``{field}`` are replaced by the topic name / the field's value
mapped to an Iceberg identifier part: lower case, every character other than a
letter, digit or underscore (dots included) becomes ``_``, and ``_`` is put in front
of a leading digit. Two topics (or values) whose names map to one table are refused
with :class:`~kafkastore.errors.TableNameCollisionError` naming both.

Stdlib only (the DAG file parses entries at parse time).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kafkastore.errors import ConfigError, TableNameCollisionError

from ..warehouse.properties import ROUTE_PROPERTY  # noqa: F401  (re-exported)
from .load_spec import MANY_TABLE_KEYS, LoadSpec
from .table_layout import table_identifier

#: The keys of a ``loads:`` entry that make it a load of many tables.
MANY_KEYS = MANY_TABLE_KEYS
_JAVA_NAMED_GROUP = re.compile(r"\(\?<(?![=!])")


def compile_topic_pattern(pattern: str) -> re.Pattern:
    """``pattern`` as a Python regex with Java's syntax for named groups (``(?<name>``)
    accepted; a bad pattern is a one-line ConfigError."""
    if not pattern:
        raise ConfigError("--topic-pattern needs a regular expression")
    try:
        return re.compile(_JAVA_NAMED_GROUP.sub("(?P<", pattern))
    except re.error as exc:
        raise ConfigError(f"bad --topic-pattern {pattern!r}: {exc}") from None


def identifier_part(value: Any) -> str:
    """``value`` (a topic name, a field value) as part of an Iceberg identifier (the
    module docstring's rule)."""
    text = re.sub(r"[^a-z0-9_]", "_", str(value).lower())
    return "_" + text if text[:1].isdigit() else text


def render_table(template: str, *, topic: str | None = None, field: Any = None) -> str:
    """The table name ``template`` gives for ``topic`` and a route ``field`` value."""
    values = {"topic": topic, "field": field}

    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            raise ConfigError(f"--table-template {template!r}: unknown placeholder {{{name}}}; "
                              f"use {{topic}} and {{field}}")
        if values[name] is None:
            raise ConfigError(f"--table-template {template!r}: {{{name}}} has no value here "
                              f"({'give --route-field' if name == 'field' else 'no topic'})")
        return identifier_part(values[name])

    name = re.sub(r"\{([^{}]*)\}", sub, template)
    try:
        table_identifier(name)
    except ConfigError:
        raise ConfigError(f"--table-template {template!r} gives {name!r}, not a table name: "
                          f"expected NAME or NAMESPACE.NAME (letters, digits and "
                          f"underscores, not starting with a digit, at most 128)") from None
    return name


def tables_by_source(template: str, sources: Iterable[Any], *, topic: str | None = None,
                     what: str = "topics") -> dict[Any, str]:
    """``{source: table}`` for each topic (``topic`` None) or route value; two sources
    giving one table: :class:`TableNameCollisionError` naming both."""
    out: dict[Any, str] = {}
    owner: dict[str, Any] = {}
    for s in sources:
        table = (render_table(template, topic=s) if topic is None
                 else render_table(template, topic=topic, field=s))
        key = ".".join(table_identifier(table))
        if key in owner:
            raise TableNameCollisionError(
                f"{what} {owner[key]!r} and {s!r} both map to table {table} (by "
                f"{template!r}); use a template that keeps them apart, or load them with "
                f"separate entries")
        owner[key] = s
        out[s] = table
    return out


@dataclass(frozen=True)
class ManyLoadSpec:
    """A load of many tables: a pattern of topics and/or a route field, the table name
    template, and the one-topic entry every table's :class:`LoadSpec` is made from."""

    table_template: str
    topic: str | None = None
    topic_pattern: str | None = None
    route_field: str | None = None
    #: None: every value gets a table; else only these (the rest: route_default)
    route_values: tuple[str, ...] | None = None
    route_default: str | None = None
    #: the entry's other keys (decoding, layout, scheduling), as for one topic
    base: Mapping[str, Any] = None

    def __post_init__(self):
        if (self.topic is None) == (self.topic_pattern is None):
            raise ConfigError("give a topic or --topic-pattern, not both")
        if self.topic_pattern is not None:
            compile_topic_pattern(self.topic_pattern)
        if not self.table_template:
            raise ConfigError("a load of a topic pattern or by a route field needs "
                              "--table-template (e.g. 'db.{topic}')")
        uses_field = "{field}" in self.table_template
        if self.route_field is None:
            if uses_field or self.route_values is not None or self.route_default is not None:
                raise ConfigError("{field}, --route-values and --route-default need "
                                  "--route-field")
        elif not uses_field:
            raise ConfigError(f"--table-template {self.table_template!r} must use {{field}} "
                              f"with --route-field")
        if self.route_default is not None:
            table_identifier(self.route_default)
        base = dict(self.base or {})
        object.__setattr__(self, "base", base)
        if self.route_field is not None and ((base.get("value_format") or "raw") == "raw"
                                             or base.get("schema_registry") or base.get("cdc")):
            raise ConfigError("--route-field routes by a decoded value column: give "
                              "--value-format (json, avro, ...) and its schema (not with "
                              "--schema-registry or --cdc)")
        self.spec_for("t", "t")   # the shared keys are checked once, here

    @property
    def routed(self) -> bool:
        return self.route_field is not None

    @property
    def name(self) -> str:
        """How logs and DAG ids name this load."""
        return self.table_template

    def spec_for(self, topic: str, table: str) -> LoadSpec:
        """The one-topic spec of ``topic`` into ``table``."""
        return LoadSpec.from_entry({**self.base, "topic": topic, "table": table})

    def tables_for_topics(self, topics: Iterable[str]) -> dict[str, str]:
        """``{topic: table}`` of a pattern load without routing (collisions refused)."""
        return tables_by_source(self.table_template, topics)

    def with_overrides(self, **kw: Any) -> "ManyLoadSpec":
        """A copy whose base entry has the non-None keyword values (CLI flags)."""
        changes = {k: v for k, v in kw.items() if v is not None}
        if not changes:
            return self
        return ManyLoadSpec(self.table_template, self.topic, self.topic_pattern,
                            self.route_field, self.route_values, self.route_default,
                            {**self.base, **changes})

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> "ManyLoadSpec":
        """Parse a ``loads:`` entry of many tables (:func:`is_many_entry`)."""
        if entry.get("table"):
            raise ConfigError(f"the 'loads' entry for {entry.get('topic_pattern') or entry.get('topic')!r} "
                              f"gives table and table_template: give one")
        values = entry.get("route_values")
        if isinstance(values, str):
            values = [v.strip() for v in values.split(",") if v.strip()]
        if values is not None and not isinstance(values, (list, tuple)):
            raise ConfigError(f"route_values must be a list like [eu, us], got {values!r}")
        base = {k: v for k, v in entry.items() if k not in MANY_KEYS and k != "topic"}
        return cls(table_template=str(entry.get("table_template") or ""),
                   topic=entry.get("topic") or None,
                   topic_pattern=entry.get("topic_pattern") or None,
                   route_field=entry.get("route_field") or None,
                   route_values=None if values is None else tuple(str(v) for v in values),
                   route_default=entry.get("route_default") or None, base=base)


def is_many_entry(entry: Mapping[str, Any]) -> bool:
    """Whether a ``loads:`` entry loads many tables (a pattern, a template or a route)."""
    return any(entry.get(k) is not None for k in MANY_KEYS)
