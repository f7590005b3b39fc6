"""Airflow DAGs for kafkastore, generated from the config file (conf/kafkastore.yaml).

The config file is ``KAFKASTORE_CONF`` or this repository's
``conf/kafkastore.yaml``; relative ``file://`` URLs in it resolve against
``KAFKASTORE_HOME`` (default: this repository), whatever the working directory
of the Airflow process. DAGs (see docs/airflow.md):

* ``kafkastore_load_<table>``, one per ``loads`` entry, on the entry's
  ``schedule``: ``load`` (records with timestamp before the data interval's
  end, exactly once, as one Iceberg snapshot of the table's ``main``) then
  ``validate`` (Great Expectations checks of that snapshot's rows; a pass
  moves the table's ``validated`` tag over them, a failure fails the run and
  leaves the tag where it was), then, for upsert tables or entries with
  ``maintain: true``, ``maintain`` (``kafkastore maintain``: small files into
  target-sized ones, one snapshot carrying the offsets; nothing if none is small).
* ``kafkastore_load_<template>``, one per ``loads`` entry of many tables (a
  ``topic_pattern`` or a ``route_field`` with a ``table_template``): one ``load`` of
  every table (each its own exactly-once commit; new matching topics load on the next
  run), then ``validate`` mapped over the tables, one result per table.
* ``kafkastore_compaction`` on ``compaction.schedule``: one mapped task per
  compacted topic under the root.
* ``kafkastore_retention`` on ``retention.schedule``: one mapped task per topic.
* ``kafkastore_reprocess``, triggered by hand with params: rewind a table to
  an offset or a time and reload (one Iceberg snapshot), then validate.

This file stays thin: it reads the config (YAML) at parse time and parses each
``loads`` entry into a typed :class:`pipelines.load_spec.LoadSpec` (stdlib only: no
pyiceberg, pyarrow or Spark; tests/test_layers.py checks), and imports the jobs and
pyspark only inside the task functions, where
Spark runs (local by default, the master from the config file). The entry keys
``schedule``, ``start_date``, ``catchup``, ``retries``, ``retry_delay_s`` and
``max_retry_delay_s`` are the DAG's: the DAG reads them from ``spec.scheduling``.
"""
from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone

from airflow.sdk import CronDataIntervalTimetable, Param, dag, get_current_context, task

HOME = os.environ.get("KAFKASTORE_HOME") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
CONF = os.environ.get("KAFKASTORE_CONF") or os.path.join(HOME, "conf", "kafkastore.yaml")
DEFAULT_START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _absolute(url: str | None) -> str | None:
    """Resolve a relative local path or ``file://`` URL against ``HOME``."""
    if not url:
        return None
    if "://" not in url:
        return "file://" + os.path.normpath(os.path.join(HOME, url))
    scheme, rest = url.split("://", 1)
    if scheme == "file" and not rest.startswith("/"):
        return "file://" + os.path.normpath(os.path.join(HOME, rest))
    return url


def _config():
    """The resolved config (pipelines.config is light: stdlib and yaml only)."""
    import yaml
    from pipelines.spec.job_config import load_config

    with open(CONF, encoding="utf-8") as f:
        raw = yaml.safe_load(f) or {}
    return load_config(
        CONF,
        root=_absolute(os.environ.get("KAFKASTORE_ROOT") or raw.get("root")),
        warehouse=_absolute(os.environ.get("KAFKASTORE_WAREHOUSE") or raw.get("warehouse")))


CFG = _config()


def _schedule(value):
    """A cron expression or preset as data intervals (a run covers [previous tick,
    tick)); None, ``@once`` and ``@continuous`` pass through."""
    if value in (None, "", "None", "null", "@once", "@continuous"):
        return None if value in ("", "None", "null") else value
    return CronDataIntervalTimetable(str(value), timezone="UTC")


def _start_date(value) -> datetime:
    if value is None:
        return DEFAULT_START
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _retry_args(section: dict) -> dict:
    """Retries with exponential back-off (retry_delay doubles up to max_retry_delay)."""
    return {
        "retries": int(section.get("retries", 3)),
        "retry_delay": timedelta(seconds=int(section.get("retry_delay_s", 60))),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(seconds=int(section.get("max_retry_delay_s", 1800))),
    }


def _ms(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _interval(context) -> tuple[datetime, datetime]:
    """The run's data interval; runs without one (manual, no schedule) use run_after."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if end is None:
        end = context["dag_run"].run_after
    return (start or end), end


def warehouse_run_id(dag_id: str, table: str, start: datetime, end: datetime) -> str:
    """The warehouse run id of a scheduled load: the same for every attempt, rerun
    or backfill of one data interval, so a committed interval is a no-op."""
    fmt = "%Y%m%dT%H%M%SZ"
    return (f"airflow-{dag_id}-{table}-{start.astimezone(timezone.utc).strftime(fmt)}-"
            f"{end.astimezone(timezone.utc).strftime(fmt)}")


def _spark_args() -> dict:
    return {"master": CFG.spark_master, "spark_conf": CFG.spark_conf or None, "conf_file": CONF}


def _get_spark(app: str):
    from pipelines.source.session import get_spark

    return get_spark(master=CFG.spark_master, app_name=app, extra_conf=CFG.spark_conf or None,
                     conf_file=CONF)


def _validate(table: str, snapshot_id, interval_ms):
    """Quality checks of a load's snapshot; a pass moves the ``validated`` tag. A
    failed check fails the task without retrying (the verdict would not change)."""
    from airflow.sdk.exceptions import AirflowFailException
    from pipelines.quality import QualityCheckFailed, validate_for_airflow

    try:
        return validate_for_airflow(CFG.warehouse, table, snapshot_id,
                                    catalog=CFG.catalog or None, root=CFG.root,
                                    interval=interval_ms, thresholds=CFG.quality,
                                    storage_options=CFG.storage_options or None)
    except QualityCheckFailed as exc:
        raise AirflowFailException(str(exc)) from None


# ---------------------------------------------------------------------------
# loads: one DAG per `loads` entry


def _dag_id(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def make_load_dag(entry: dict, shared_table: bool = False):
    """``kafkastore_load_<table>`` (``..._<table>__<topic>`` when several entries load
    one table): load the run's data interval, then validate it."""
    from pipelines.spec.load_spec import LoadSpec

    spec = LoadSpec.from_entry(entry)
    topic, table, when = spec.topic, spec.table, spec.scheduling
    dag_id = _dag_id("kafkastore_load_", f"{table}__{topic}" if shared_table else table)

    @dag(dag_id=dag_id, schedule=_schedule(when.get("schedule", "@hourly")),
         start_date=_start_date(when.get("start_date")), catchup=bool(when.get("catchup", False)),
         max_active_runs=1, default_args=_retry_args(when), tags=["kafkastore", "load"],
         doc_md=f"Load topic `{topic}` into warehouse table `{table}` (records with timestamp "
                f"before the end of the data interval), then validate the commit.")
    def load_dag():
        @task(task_id="load")
        def load(**context):
            from pipelines.jobs.load import load_for_interval

            start, end = _interval(context)
            return load_for_interval(
                CFG.root, CFG.warehouse, spec, _ms(end),
                warehouse_run_id(dag_id, table, start, end), catalog=CFG.catalog or None,
                storage_options=CFG.storage_options or None, **_spark_args())

        @task(task_id="validate", retries=1)
        def validate(summary: dict, **context):
            start, end = _interval(context)
            return _validate(table, summary.get("snapshot_id"), (_ms(start), _ms(end)))

        checked = validate(load())
        if spec.maintain_after_load:
            @task(task_id="maintain")
            def maintain(_checked):
                from pipelines.warehouse.catalog import Warehouse
                from pipelines.jobs.maintain import maintain_tables

                wh = Warehouse(CFG.warehouse, CFG.catalog or None, CFG.storage_options or None)
                return maintain_tables(wh, [table])

            maintain(checked)

    return load_dag()


def make_many_load_dag(entry: dict):
    """``kafkastore_load_<template>`` for a ``loads`` entry of many tables (a
    ``topic_pattern`` or a ``route_field``): one load task for every table (each its own
    exactly-once commit), then one mapped ``validate`` per table it loaded."""
    from pipelines.spec.topic_routing import ManyLoadSpec

    many = ManyLoadSpec.from_entry(entry)
    when = many.base
    dag_id = _dag_id("kafkastore_load_", many.name)
    source = (f"topics matching `{many.topic_pattern}`" if many.topic_pattern
              else f"topic `{many.topic}`")
    route = f", routed by `{many.route_field}`" if many.route_field else ""

    @dag(dag_id=dag_id, schedule=_schedule(when.get("schedule", "@hourly")),
         start_date=_start_date(when.get("start_date")), catchup=bool(when.get("catchup", False)),
         max_active_runs=1, default_args=_retry_args(when), tags=["kafkastore", "load"],
         doc_md=f"Load {source} into the tables `{many.table_template}` names{route} (records "
                f"with timestamp before the end of the data interval), then validate each.")
    def load_many_dag():
        @task(task_id="load")
        def load(**context) -> list[dict]:
            from pipelines.jobs.load_many import load_many_for_interval

            start, end = _interval(context)
            result = load_many_for_interval(
                CFG.root, CFG.warehouse, entry, _ms(end),
                warehouse_run_id(dag_id, "many", start, end), catalog=CFG.catalog or None,
                storage_options=CFG.storage_options or None, **_spark_args())
            return result["tables"]

        @task(task_id="validate", retries=1, map_index_template="{{ kafkastore_table }}")
        def validate(summary: dict, **context):
            get_current_context()["kafkastore_table"] = summary["table"]   # names the task
            start, end = _interval(context)
            return _validate(summary["table"], summary.get("snapshot_id"), (_ms(start), _ms(end)))

        validate.expand(summary=load())

    return load_many_dag()


def _many(entry: dict) -> bool:
    from pipelines.spec.topic_routing import is_many_entry

    return is_many_entry(entry)


_TABLES = [e.get("table") for e in CFG.loads]
for _entry, _table in zip(CFG.loads, _TABLES):
    if _many(_entry):
        _d = make_many_load_dag(_entry)
    else:
        _d = make_load_dag(_entry, shared_table=_TABLES.count(_table) > 1)
    globals()[_d.dag_id] = _d


# ---------------------------------------------------------------------------
# compaction and retention


@dag(dag_id="kafkastore_compaction", schedule=_schedule(CFG.compaction.get("schedule", "@daily")),
     start_date=_start_date(CFG.compaction.get("start_date")), catchup=False, max_active_runs=1,
     default_args=_retry_args(CFG.compaction), tags=["kafkastore", "maintenance"],
     doc_md="Compact every topic whose cleanup.policy includes compact (one task per topic).")
def kafkastore_compaction():
    @task
    def compacted_topics() -> list[str]:
        from kafkastore.storage import Storage
        from kafkastore.topics.admin import list_topics, load_topic

        storage = Storage(CFG.root, CFG.storage_options or None)
        return [t for t in list_topics(storage) if load_topic(storage, t).config.compact]

    @task(map_index_template="{{ kafkastore_topic }}")
    def compact(topic: str, **context) -> str:
        from pipelines.jobs.log_compaction import compact_topic

        get_current_context()["kafkastore_topic"] = topic   # names the mapped task in the UI
        _start, end = _interval(context)
        now = min(_ms(end), _ms(datetime.now(timezone.utc)))
        report = compact_topic(_get_spark(f"kafkastore-compact-{topic}"), CFG.root, topic,
                               storage_options=CFG.storage_options or None, now_ms=now)
        text = report.render()
        print(text)
        if not report.ok:
            raise RuntimeError(f"compaction of {topic} failed for some partitions:\n{text}")
        return text

    compact.expand(topic=compacted_topics())


@dag(dag_id="kafkastore_retention", schedule=_schedule(CFG.retention.get("schedule", "@hourly")),
     start_date=_start_date(CFG.retention.get("start_date")), catchup=False, max_active_runs=1,
     default_args=_retry_args(CFG.retention), tags=["kafkastore", "maintenance"],
     doc_md="Apply retention.ms / retention.bytes to every topic (one task per topic) and "
            "report warehouse tables that lose data they never loaded.")
def kafkastore_retention():
    @task
    def all_topics() -> list[str]:
        from kafkastore.storage import Storage
        from kafkastore.topics.admin import list_topics

        return list_topics(Storage(CFG.root, CFG.storage_options or None))

    @task(map_index_template="{{ kafkastore_topic }}")
    def retention(topic: str, **context) -> dict:
        from pipelines.jobs.log_retention import run_retention

        get_current_context()["kafkastore_topic"] = topic   # names the mapped task in the UI
        _start, end = _interval(context)
        now = min(_ms(end), _ms(datetime.now(timezone.utc)))
        report = run_retention(CFG.root, topic, warehouse=CFG.warehouse,
                               storage_options=CFG.storage_options or None,
                               protect_unloaded=bool(CFG.retention.get("protect_unloaded", False)),
                               now_ms=now)
        print(report.render())
        return report.to_dict()

    retention.expand(topic=all_topics())


kafkastore_compaction()
kafkastore_retention()


# ---------------------------------------------------------------------------
# reprocess, by hand


@dag(dag_id="kafkastore_reprocess", schedule=None, start_date=DEFAULT_START, catchup=False,
     max_active_runs=1, default_args=_retry_args({"retries": 1}), tags=["kafkastore", "reprocess"],
     params={
         "topic": Param("", type="string", minLength=1, description="topic to reload"),
         "table": Param(None, type=["null", "string"],
                        description="warehouse table (default: the loads entry of the topic)"),
         "partition": Param(None, type=["null", "integer"], minimum=0,
                            description="one partition (default: all the table loaded)"),
         "from_offset": Param(None, type=["null", "integer"], minimum=0,
                              description="rewind to this offset (or give from_timestamp)"),
         "from_timestamp": Param(None, type=["null", "integer"], minimum=0,
                                 description="rewind to the first record at/after this ms"),
         "reason": Param("", type="string", minLength=1, description="why (kept in the commit)"),
     },
     doc_md="Rewind a table to an offset or a time and reload it from the log in one audited "
            "commit, then validate that commit. Trigger with params.")
def kafkastore_reprocess():
    @task(task_id="reprocess")
    def reprocess(**context) -> dict:
        from airflow.sdk.exceptions import AirflowFailException
        from kafkastore.errors import ConfigError
        from pipelines.jobs.reprocess import run_reprocess

        p = context["params"]
        topic = p["topic"]
        if (p.get("from_offset") is None) == (p.get("from_timestamp") is None):
            raise AirflowFailException("give exactly one of the params from_offset and "
                                       "from_timestamp")
        try:
            from dataclasses import replace

            from pipelines.spec.load_spec import LoadSpec

            entry = CFG.load_for(topic, p.get("table")) or CFG.load_for(topic)
            spec = LoadSpec.from_entry(entry) if entry else None
            if spec is not None and p.get("table") and spec.table != p["table"]:
                spec = replace(spec, table=p["table"])   # the topic's decoding, another table
            table = p.get("table") or (spec.table if spec else topic)
            summary = run_reprocess(
                _get_spark(f"kafkastore-reprocess-{table}"), root=CFG.root,
                warehouse=CFG.warehouse, spec=spec, topic=topic, table=table,
                partitions=None if p.get("partition") is None else [int(p["partition"])],
                from_offset=p.get("from_offset"), from_timestamp=p.get("from_timestamp"),
                catalog=CFG.catalog or None, storage_options=CFG.storage_options or None,
                reason=p["reason"], run_id=f"airflow-{context['dag_run'].run_id}",
                progress=False)
        except ConfigError as exc:   # bad params: retrying cannot help
            raise AirflowFailException(str(exc)) from None
        print(summary.render())
        return summary.to_dict()

    @task(task_id="validate", retries=1)
    def validate(summary: dict):
        return _validate(summary["table"], summary.get("snapshot_id"), None)

    validate(reprocess())


kafkastore_reprocess()
