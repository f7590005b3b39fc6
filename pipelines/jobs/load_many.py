"""Load many topics into many tables in one job (``kafkastore load --topic-pattern`` or
``--route-field``, ``loads:`` entries with ``topic_pattern`` / ``route``; the naming and
routing rules are :mod:`pipelines.spec.topic_routing`).

Each table is one exactly-once load of :mod:`pipelines.jobs.load` with its own offsets in its
own snapshots, so a crash between two tables' commits re-runs only the table that is behind;
route tables are created before any commit; one table's failure does not stop the others.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from kafkastore.clock import SYSTEM, Clock
from kafkastore.errors import (ConfigError, KafkaStoreError, LoadsFailedError, TableNameCollisionError,
                               UnroutableRecordsError)
from kafkastore.storage import Storage
from kafkastore.topics.admin import list_topics, load_topic

from ..source.planning import plan_load, until_limit
from ..source.session import get_spark
from ..spec.load_spec import LoadSpec
from ..spec.offset_ranges import OffsetLimit
from ..spec.route_filter import RouteFilter
from ..spec.table_layout import layout_entry_from_flags
from ..spec.topic_routing import ROUTE_PROPERTY, ManyLoadSpec, is_many_entry, tables_by_source
from ..warehouse.catalog import Warehouse
from ..warehouse.offsets import committed_offsets
from .load import (LoadRequest, LoadSummary, TableWrite, commit_written, ensure_tables, load,
                   plan_table_load, prepare_write, write_and_commit)
from .routing import matching_topics, route_value_counts
from .write_engine import Written, routed_frame, write_routes

log = logging.getLogger(__name__)


@dataclass
class ManyLoadSummary:
    """What a load of many tables did: one :class:`LoadSummary` per table committed or
    found up to date, and ``failed``: ``{table: error}`` of the tables whose load failed
    (the others committed all the same: each table carries its own offsets)."""
    name: str
    tables: list[LoadSummary] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    topics: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (XCom, ``--json``)."""
        return {"name": self.name, "topics": list(self.topics),
                "tables": [s.to_dict() for s in self.tables], "failed": dict(self.failed)}

    def lines(self) -> list[str]:
        """One line per table: committed (rows, dead letters, ranges), up to date, or failed."""
        out = []
        for s in self.tables:
            ranges = " ".join(f"p{p}[{a},{b})" for p, (a, b) in sorted(s.ranges.items()))
            if s.noop:
                out.append(f"{s.table} <- {s.topic}: nothing to do: {s.reason}")
            else:
                out.append(f"{s.table} <- {s.topic}: committed snapshot {s.snapshot_id}: "
                           f"{s.rows} rows, {s.dead_letters} dead letters {ranges}".rstrip())
        out += [f"{table}: FAILED: {error}" for table, error in self.failed.items()]
        return out

    def render(self) -> str:
        """A head line, then one line per table."""
        head = (f"load {self.name}: {len(self.topics)} topic(s), {len(self.tables)} table(s) "
                f"loaded, {len(self.failed)} failed")
        return "\n".join([head, *self.lines()])


@dataclass(frozen=True)
class ManyLoadRequest:
    """A load of many tables, parsed once: the :class:`ManyLoadSpec`, where the log and
    the warehouse are, and where the load ends (``until_offsets``: Spark Kafka JSON by
    topic, topics it does not name load to the latest; or ``until_timestamp``)."""
    root: str
    warehouse: Warehouse
    spec: Any   # pipelines.spec.topic_routing.ManyLoadSpec
    until_offsets: Mapping[str, Any] | None = None
    until_timestamp: int | None = None
    run_id: str | None = None
    storage_options: Mapping[str, Any] | None = None
    register_existing: bool = False
    progress: bool = True
    clock: Clock = SYSTEM

    @classmethod
    def build(cls, *, root: str, warehouse, spec, until_offsets=None, until_timestamp=None,
              run_id: str | None = None, catalog: Mapping[str, Any] | None = None,
              storage_options: dict | None = None, register_existing: bool = False,
              progress: bool = True) -> "ManyLoadRequest":
        """The request of these keywords (``spec``: a ManyLoadSpec or its ``loads:`` entry)."""
        if not isinstance(spec, ManyLoadSpec):
            spec = ManyLoadSpec.from_entry(spec)
        if until_offsets is not None and until_timestamp is not None:
            raise ConfigError("give until_offsets or until_timestamp, not both")
        if isinstance(until_offsets, str):

            try:
                until_offsets = json.loads(until_offsets)
            except ValueError as exc:
                raise ConfigError(f'--until-offsets must be JSON like {{"t": {{"0": 100}}}}: '
                                  f'{exc}') from None
        if until_offsets is not None and not (
                isinstance(until_offsets, Mapping)
                and all(isinstance(v, Mapping) for v in until_offsets.values())):
            raise ConfigError('a load of many topics takes --until-offsets by topic: '
                              '{"t": {"0": 100}, ...}')
        return cls(root=root, warehouse=Warehouse.of(warehouse, catalog, storage_options),
                   spec=spec, until_offsets=until_offsets, until_timestamp=until_timestamp,
                   run_id=run_id, storage_options=dict(storage_options or {}) or None,
                   register_existing=register_existing, progress=progress)

    def until_for(self, topic: str) -> OffsetLimit:
        """Where ``topic``'s loads end."""
        named = (self.until_offsets or {}).get(topic)
        return until_limit(topic, None if named is None else {topic: named},
                           self.until_timestamp)

    def table_request(self, spec: LoadSpec, until: OffsetLimit) -> LoadRequest:
        """The one-table request of ``spec`` (its run id: the request's, by table)."""
        run_id = None if self.run_id is None else f"{self.run_id}-{spec.table}"
        return LoadRequest(root=self.root, warehouse=self.warehouse, spec=spec, until=until,
                           run_id=run_id, storage_options=self.storage_options,
                           register_existing=self.register_existing, progress=self.progress,
                           clock=self.clock)


def load_many(spark, request: ManyLoadRequest) -> ManyLoadSummary:
    """Load every topic of ``request.spec`` (a pattern: the topics matching it now; new
    ones are found by the next run and loaded from their log start) into its table(s),
    one exactly-once :func:`load` per table, each with its own committed offsets.

    A table whose load fails with a :class:`~kafkastore.errors.KafkaStoreError` is
    reported in ``failed`` and the others go on; a crash stops the job, and a re-run
    commits only the tables that are behind. Refusals that concern the whole job
    (a bad pattern, a name collision, records nothing routes) come before any commit.
    """
    many = request.spec
    storage = Storage(request.root, request.storage_options)
    topics = ([many.topic] if many.topic is not None
              else matching_topics(many.topic_pattern, list_topics(storage)))
    summary = ManyLoadSummary(many.name, topics=topics)
    if many.routed:
        for topic in topics:
            _load_route(spark, request, storage, topic, summary)
        return summary
    for spec in (many.spec_for(t, table) for t, table in many.tables_for_topics(topics).items()):
        _each_table(summary, spec.table,
                    lambda: load(spark, request.table_request(spec, request.until_for(spec.topic))))
    return summary


def _each_table(summary: ManyLoadSummary, table: str, step):
    """``step()`` for one table: a :class:`LoadSummary` goes to ``summary.tables``; a
    :class:`KafkaStoreError` fails that table alone (``summary.failed``); else its value."""
    try:
        out = step()
    except KafkaStoreError as exc:
        summary.failed[table] = f"{type(exc).__name__}: {exc}"
        return None
    if isinstance(out, LoadSummary):
        summary.tables.append(out)
        return None
    return out


def _load_route(spark, request: ManyLoadRequest, storage: Storage, topic: str,
                summary: ManyLoadSummary) -> None:
    """A route-by-field load of ``topic`` in one pass over its offsets.

    The range every route table still needs is read and decoded once, kept by Spark
    (:func:`routed_frame`), and its route values are counted: records no table takes
    are refused (:class:`UnroutableRecordsError`) before any table is made. The route's
    tables (those its values name, those earlier runs created, the default) are then
    created, all before any commit and all ending at one set of offsets, so that a record
    goes to exactly one table whatever order they commit in. Each task splits its decoded
    batch by route value and writes every table's files (:func:`routed_writer`, a table
    taking its rows from where its own range starts); then each table commits its files
    with its own offsets, dead letters first (:func:`commit_written`), exactly once per
    table as a load of one table is."""
    many = request.spec
    probe = many.spec_for(topic, many.route_default or "route_probe")
    until, ranges = _route_range(request, storage, topic, probe)
    routed = routed_frame(spark, request.root, request.storage_options, probe,
                          many.route_field, ranges) if ranges else None
    try:
        counts = route_value_counts(routed)
        specs = _route_tables_for(request, topic, probe, counts)
        runs = [run for run in (_each_table(summary, spec.table, lambda: plan_table_load(
            spark, request.table_request(spec, until))) for spec in specs) if run is not None]
        alone = [run for run in runs if not _decodes_as(run.spec, probe)]
        for run in alone:   # the table records another decoding: its own read (rare)
            _each_table(summary, run.spec.table, lambda: write_and_commit(spark, run))
        prepared = [p for p in (_each_table(summary, run.spec.table, lambda: prepare_write(run))
                                for run in runs if run not in alone) if p is not None]
        for p, files in zip(prepared, _write_route_tables(spark, routed, prepared, probe,
                                                          request, topic)):
            _each_table(summary, p.run.spec.table, lambda: commit_written(p, files))
    finally:
        if routed is not None:
            routed[0].unpersist()


def _write_route_tables(spark, routed, prepared: list[TableWrite], probe: LoadSpec,
                        request: ManyLoadRequest, topic: str) -> list[Written]:
    """Every prepared route table's files from the one pass (each table's rows from where
    its own range starts); with no records to read, none."""
    if routed is None or not prepared:
        return [Written([]) for _ in prepared]
    targets = [(replace(p.target, route=p.run.spec.route,
                        rows_from={r.partition: r.from_offset for r in p.run.ranges}),
                p.run.run_id) for p in prepared]
    return write_routes(spark, routed, targets, probe,
                        label=f"load {topic} -> {len(targets)} route tables",
                        progress=request.progress, clock=request.clock)


def _route_range(request: ManyLoadRequest, storage: Storage, topic: str, probe: LoadSpec):
    """Where every table of the route ends (one set of offsets) and the ranges some table
    still needs: from the least committed offset of the route's tables (an empty one,
    created by a run that crashed before its commit, reads from the start)."""
    known = _route_tables(request.warehouse, request.spec)
    committed: dict[int, int] = {}
    if known:
        done = [{p: n for (t, p), n in committed_offsets(tbl).items() if t == topic}
                for tbl in known.values()]
        for p in range(_partitions(storage, topic)):
            if all(p in d for d in done):   # else some table reads p from its log start
                committed[p] = min(d[p] for d in done)
    plans = plan_load(storage, topic, committed, until=request.until_for(topic),
                      on_data_loss=probe.on_data_loss)
    until = until_limit(topic, {pl.partition: pl.range.until_offset for pl in plans})
    return until, [pl.range for pl in plans if not pl.empty]


def _route_tables_for(request: ManyLoadRequest, topic: str, probe: LoadSpec,
                      counts: Mapping[Any, int]) -> list[LoadSpec]:
    """The specs of the route's tables (one per value, and the default), each table
    created (and marked) before any commit; records no table takes refused first."""
    many, wh = request.spec, request.warehouse
    known = _route_tables(wh, many)
    seen = {v for v in counts if v is not None}
    if many.route_values is not None:
        values = set(many.route_values)
    else:
        values = seen | {v for v in known if v is not None}
    unrouted = {v: n for v, n in counts.items() if v is None or v not in values}
    if unrouted and many.route_default is None:
        shown = ", ".join(f"{'null or undecodable' if v is None else repr(v)}: {n}"
                          for v, n in sorted(unrouted.items(), key=lambda x: str(x[0]))[:5])
        raise UnroutableRecordsError(
            f"{topic}: records whose {many.route_field} has no table ({shown}); give "
            f"--route-default TABLE for them, or --route-values with their values")
    tables = tables_by_source(many.table_template, sorted(values), topic=topic,
                              what=f"{many.route_field} values")
    specs = [replace(many.spec_for(topic, table), route=RouteFilter(many.route_field, (v,)))
             for v, table in sorted(tables.items())]
    if many.route_default is not None:
        if many.route_default in tables.values():
            raise TableNameCollisionError(f"--route-default {many.route_default} is also the "
                                          f"table of a {many.route_field} value")
        specs.append(replace(probe, route=RouteFilter(many.route_field, tuple(sorted(values)),
                                                      others=True)))
    for spec, value in zip(specs, [*sorted(tables), None]):
        _create_route_table(wh, spec, many, value)
    return specs


def _decodes_as(spec: LoadSpec, other: LoadSpec) -> bool:
    """Whether ``spec`` (settled against its table) decodes records as ``other``."""
    def key(s: LoadSpec):
        return (s.value_format, s.value_schema, s.value_schema_file,
                sorted((k, repr(v)) for k, v in s.decode.items() if v is not None))
    return key(spec) == key(other)


def _partitions(storage: Storage, topic: str) -> int:

    return load_topic(storage, topic).partitions


def _route_tables(wh: Warehouse, many) -> dict[Any, Any]:
    """``{value: table}`` of the tables earlier runs of this route created (the default
    under None), by the route property they carry."""
    out = {}
    for name in wh.list_tables():
        tbl = wh.load_table(name)
        mark = tbl.metadata.properties.get(ROUTE_PROPERTY) if tbl is not None else None
        if not mark:
            continue
        mark = json.loads(mark)
        if mark.get("field") == many.route_field and mark.get("template") == many.table_template:
            out[mark.get("value")] = tbl
    return out


def _create_route_table(wh: Warehouse, spec: LoadSpec, many, value) -> None:
    """Create (if missing) a route's table, marked with the route property so later runs
    find it (and read from where it stands even if it never committed)."""
    tbl, _dl = ensure_tables(wh, spec)
    mark = json.dumps({"field": many.route_field, "template": many.table_template,
                       "value": value}, sort_keys=True)
    if tbl.metadata.properties.get(ROUTE_PROPERTY) != mark:
        with tbl.transaction() as txn:
            txn.set_properties(**{ROUTE_PROPERTY: mark})


def load_many_options_from_args(args, cfg) -> dict[str, Any]:
    """``ManyLoadRequest.build`` keywords from the CLI's ``load`` arguments for a pattern or
    a route (the config's ``loads`` entry of the same pattern, or topic and template,
    fills what flags leave out)."""
    pattern, topic = getattr(args, "topic_pattern", None), getattr(args, "topic", None)
    unsupported = [f"--{k.replace('_', '-')}" for k in
                   ("schema_registry", "key_format", "on_incompatible", "cdc", "table")
                   if getattr(args, k, None) is not None]
    if unsupported:   # never silently dropped: say where they go instead
        raise ConfigError(f"{', '.join(unsupported)} cannot be given with --topic-pattern, "
                          f"--table-template or --route-field; put them in the config's "
                          f"'loads' entry (table: use --table-template)")
    entry: dict[str, Any] = {}
    for e in cfg.loads:
        if is_many_entry(e) and ((pattern is not None and e.get("topic_pattern") == pattern)
                                 or (topic is not None and e.get("topic") == topic)):
            entry = dict(e)
            break
    entry.update({k: v for k, v in {
        "topic_pattern": pattern, "topic": topic,
        "table_template": getattr(args, "table_template", None),
        "route_field": getattr(args, "route_field", None),
        "route_values": getattr(args, "route_values", None),
        "route_default": getattr(args, "route_default", None),
        "value_format": getattr(args, "value_format", None),
        "value_schema": getattr(args, "value_schema", None),
        "value_schema_file": getattr(args, "value_schema_file", None),
        "on_data_loss": getattr(args, "on_data_loss", None)}.items() if v is not None})
    entry.update(layout_entry_from_flags(args))
    if pattern is not None:
        entry.pop("topic", None)
    wh = Warehouse(getattr(args, "warehouse", None) or cfg.warehouse, cfg.catalog or None,
                       dict(cfg.storage_options or {}) or None)
    return {"root": cfg.root, "warehouse": wh, "spec": ManyLoadSpec.from_entry(entry),
            "run_id": getattr(args, "run_id", None),
            "until_offsets": getattr(args, "until_offsets", None),
            "until_timestamp": getattr(args, "until_timestamp", None),
            "register_existing": bool(getattr(args, "register_existing", False)),
            "storage_options": dict(cfg.storage_options or {}) or None}


def load_many_for_interval(root: str, warehouse: str, entry: Mapping[str, Any],
                           data_interval_end_ms: int, run_id: str | None = None, *,
                           catalog: Mapping[str, Any] | None = None,
                           storage_options: dict | None = None, master: str | None = None,
                           spark_conf: Mapping[str, Any] | None = None,
                           conf_file: str | None = None) -> dict[str, Any]:
    """For Airflow: :func:`load_many` of a ``loads:`` entry with a pattern or a route,
    records with timestamp < ``data_interval_end_ms``. A plain dict out
    (:meth:`ManyLoadSummary.to_dict`: one result per table); a table that failed fails
    the task after the others committed (a retry commits only what is behind)."""
    spark = get_spark(master=master, app_name="kafkastore-load-many", extra_conf=spark_conf,
                      conf_file=conf_file)
    request = ManyLoadRequest.build(root=root, warehouse=warehouse, spec=entry,
                                    until_timestamp=int(data_interval_end_ms), run_id=run_id,
                                    catalog=catalog, storage_options=storage_options,
                                    progress=False)
    summary = load_many(spark, request)
    log.info("%s", summary.render())
    if summary.failed:
        raise LoadsFailedError("; ".join(f"{t}: {e}" for t, e in summary.failed.items()))
    return summary.to_dict()
