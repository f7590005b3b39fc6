"""The ``kafkastore`` console script: the log's commands (:mod:`kafkastore.cli`) plus
the Spark jobs' (DESIGN.md section 7).

``load``, ``reprocess``, ``vacuum``, ``compact``, ``retention``, ``sql`` and
``offsets --warehouse`` live here, with the jobs, so that :mod:`kafkastore`
never imports :mod:`pipelines` (DESIGN.md section 1). Job modules are imported
inside each command, so the log's commands start without loading Spark and work
when only the log library is installed (``pip install kafkastore``, without the
``spark`` extra); a job command then says in one line which extra to install
(:class:`~kafkastore.errors.MissingExtraError`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from kafkastore.cli import entry as log_entry, parser as log_parser
from kafkastore.cli.commands import offsets_of, print_json
from kafkastore.cli.parser import flag, non_negative
from pipelines.spec.job_config import Config, load_config
from pipelines.spec.table_layout import add_layout_flags
from kafkastore.errors import ConfigError, KafkaStoreError, LoadsFailedError, MissingExtraError


def cmd_offsets(args, cfg: Config) -> int:
    """``offsets``, and with ``--warehouse`` the committed offsets and lag of each table."""
    result = offsets_of(args, cfg)
    if args.warehouse:
        from pipelines.jobs.lag import table_lag  # lazy: job commands need the spark extra

        result["tables"] = table_lag(args.warehouse, args.topic, result["partitions"],
                                     cfg.storage_options, cfg.catalog)
    print_json(result)
    return 0


def _spark(cfg: Config):
    from pipelines.source.session import get_spark  # lazy: job commands need the spark extra

    return get_spark(master=cfg.spark_master, app_name="kafkastore-cli", extra_conf=cfg.spark_conf)


def _loads_many(args, cfg: Config) -> bool:
    """Whether ``load`` loads many tables: a pattern, a template or a route given, or the
    config's entry for the topic is one of those."""
    # lazy: start-up: the CLI imports each command's code on use
    from pipelines.spec.topic_routing import is_many_entry

    if any(getattr(args, k, None) is not None for k in
           ("topic_pattern", "table_template", "route_field", "route_values", "route_default")):
        return True
    return any(is_many_entry(e) and e.get("topic") == args.topic for e in cfg.loads)


def cmd_load_many(args, cfg: Config) -> int:
    """``load --topic-pattern`` / ``--route-field``: one line per table; a table whose
    load failed makes the command fail (one line) after the others committed."""
    from pipelines.jobs.load_many import ManyLoadRequest, load_many, load_many_options_from_args  # lazy: job commands need the spark extra

    request = ManyLoadRequest.build(**load_many_options_from_args(args, cfg))
    summary = load_many(_spark(cfg), request)
    print(summary.render(), file=sys.stderr)
    if summary.failed:
        raise LoadsFailedError(f"{len(summary.failed)} of {len(summary.failed) + len(summary.tables)} "
                               f"table(s) failed: " + "; ".join(
                                   f"{t}: {e}" for t, e in summary.failed.items()))
    return 0


def cmd_load(args, cfg: Config) -> int:
    from pipelines.jobs.load import LoadRequest, load, load_options_from_args  # lazy: job commands need the spark extra

    if args.topic is not None and getattr(args, "topic_pattern", None) is not None:
        raise ConfigError("give a topic or --topic-pattern, not both")
    if args.topic is None and getattr(args, "topic_pattern", None) is None:
        raise ConfigError("give a topic, or --topic-pattern REGEX")
    if _loads_many(args, cfg):
        return cmd_load_many(args, cfg)
    # Flags and config parsed once, mistakes fail before Spark starts.
    request = LoadRequest.build(**load_options_from_args(args, cfg))
    summary = load(_spark(cfg), request)
    print(summary.render(), file=sys.stderr)
    return 0


def cmd_reprocess(args, cfg: Config) -> int:
    from pipelines.warehouse.catalog import Warehouse  # lazy: job commands need the spark extra
    from pipelines.spec.load_spec import resolve_spec  # lazy: job commands need the spark extra
    from pipelines.jobs.reprocess import run_reprocess  # lazy: job commands need the spark extra

    summary = run_reprocess(
        _spark(cfg), root=cfg.root,
        warehouse=Warehouse(args.warehouse or cfg.warehouse, cfg.catalog or None,
                            cfg.storage_options or None),
        spec=resolve_spec(cfg, args.topic, args.table),
        partitions=None if args.partition is None else [args.partition],
        from_offset=args.from_offset, from_timestamp=args.from_timestamp,
        storage_options=cfg.storage_options or None, reason=args.reason,
        allow_compacted=args.allow_compacted, allow_below_log_start=args.allow_below_log_start,
        allow_expired=getattr(args, "allow_expired", False),
        register_existing=args.register_existing)
    print(summary.render(), file=sys.stderr)
    return 0


def cmd_vacuum(args, cfg: Config) -> int:
    from pipelines.warehouse.catalog import Warehouse  # lazy: job commands need the spark extra
    from pipelines.jobs.vacuum import DEFAULT_GRACE_MS, check_grace, vacuum  # lazy: job commands need the spark extra

    grace = check_grace(DEFAULT_GRACE_MS if args.grace_ms is None else args.grace_ms)
    wh = Warehouse(args.warehouse or cfg.warehouse, cfg.catalog or None,
                   cfg.storage_options or None)
    names = [args.table] if args.table else wh.list_tables()
    if not names:
        print(f"vacuum: warehouse {wh.url} has no tables", file=sys.stderr)
    now = int(time.time() * 1000)
    for name in names:
        result = vacuum(wh.table(name), now_ms=now,
                        grace_ms=grace,
                        retain_last=args.retain_last, dry_run=args.dry_run,
                        expire_unvalidated=args.expire_unvalidated)
        print(result.render(), file=sys.stderr)
    return 0


def cmd_maintain(args, cfg: Config) -> int:
    from pipelines.warehouse.catalog import Warehouse  # lazy: job commands need the spark extra
    from pipelines.jobs.maintain import maintain  # lazy: job commands need the spark extra

    wh = Warehouse(args.warehouse or cfg.warehouse, cfg.catalog or None,
                   cfg.storage_options or None)
    names = [args.table] if args.table else wh.list_tables()
    for name in names:
        kw = {"run_id": args.run_id} if args.run_id else {}
        if args.target_file_mb is not None:
            kw["target_bytes"] = int(args.target_file_mb * (1 << 20))
        print(maintain(wh.table(name), **kw).render(), file=sys.stderr)
    return 0


def cmd_compact(args, cfg: Config) -> int:
    from pipelines.jobs.log_compaction import compact_topic  # lazy: job commands need the spark extra

    report = compact_topic(_spark(cfg), cfg.root, args.topic, storage_options=cfg.storage_options,
                           force=args.force)
    failed = [r for r in report.partitions if r.status == "error"]
    if failed:
        # One line (the report's table would bury the cause); the reasons name the segment
        # and the log file with the full trace.
        others = len(report.partitions) - len(failed)
        raise KafkaStoreError(
            f"compaction of {args.topic} failed for partition(s) "
            + "; ".join(f"{r.partition}: {r.reason}" for r in failed)
            + (f" ({others} other partition(s) done)" if others else ""))
    print(report.render(), file=sys.stderr)
    return 0 if report.ok else 1


def cmd_retention(args, cfg: Config) -> int:
    from pipelines.jobs.log_retention import run_retention  # lazy: job commands need the spark extra

    report = run_retention(cfg.root, args.topic, warehouse=args.warehouse or cfg.warehouse,
                           storage_options=cfg.storage_options, catalog=cfg.catalog)
    print(report.render(), file=sys.stderr)
    return 0


def cmd_sql(args, cfg: Config) -> int:
    from pipelines.sql import run_sql  # lazy: job commands need the spark extra

    query = args.query
    if args.file:
        query = _read_sql_file(args.file)
    if not query:
        raise ConfigError('give a query ("SELECT ...") or --file FILE')
    run_sql(_spark(cfg), query, root=cfg.root, warehouse=args.warehouse or cfg.warehouse,
            storage_options=cfg.storage_options, fmt=args.format, out=sys.stdout,
            catalog=getattr(cfg, "catalog", None) or None, as_of_snapshot=args.as_of_snapshot,
            as_of_timestamp=args.as_of_timestamp)
    return 0


def _read_sql_file(path: str) -> str:
    """The text of ``--file``; a missing, unreadable or non-UTF-8 file is a ConfigError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"--file {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--file {path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


REGISTER_HELP = ("when the catalog lost the table (e.g. an emptied catalog.db) but its location "
                 "still holds it: register its newest metadata file again and carry on from "
                 "its committed offsets (without it such a table is refused)")


def build_parser() -> argparse.ArgumentParser:
    """The log's parser with the jobs' commands added."""
    p = log_parser.build_parser()
    sub = p.commands
    of = sub.choices["offsets"]
    of.add_argument("--warehouse", help="also committed offsets and lag of the tables loading it")
    of.set_defaults(func=cmd_offsets)

    lo = sub.add_parser("load", help="load a topic into a warehouse table, exactly once (Spark)")
    lo.add_argument("topic", nargs="?")
    lo.add_argument("--topic-pattern", metavar="REGEX",
                    help="load every topic whose whole name matches REGEX (Java syntax, as "
                         "Spark's subscribePattern; internal topics left out), each into the "
                         "table --table-template names; new matching topics load on the "
                         "next run")
    lo.add_argument("--table-template", metavar="TEMPLATE",
                    help="table per topic or route value: {topic} and {field} are replaced, "
                         "lower case with other characters than letters, digits and _ "
                         "(dots too) as _, e.g. 'db.{topic}'")
    lo.add_argument("--route-field", metavar="FIELD",
                    help="route each record by this decoded value column into the table "
                         "--table-template names with {field}")
    lo.add_argument("--route-values", metavar="A,B",
                    help="with --route-field: the values that get a table (default: every "
                         "value seen)")
    lo.add_argument("--route-default", metavar="TABLE",
                    help="with --route-field: the table of records whose value is null, not "
                         "decodable or not in --route-values (default: such records fail "
                         "the load before any commit)")
    lo.add_argument("--warehouse")
    lo.add_argument("--table")
    lo.add_argument("--run-id", help="idempotency key: a rerun of a committed run id is a no-op")
    lo.add_argument("--until-offsets", metavar="JSON",
                    help='end offsets, Spark Kafka-source JSON: {"t":{"0":100}} (default: latest at start)')
    lo.add_argument("--until-timestamp", type=non_negative, metavar="MS",
                    help="load records before this time (first offset at or after it, per partition)")
    lo.add_argument("--value-format", choices=("raw", "json", "avro", "protobuf", "json-schema"))
    lo.add_argument("--value-schema", help="DDL (json) or Avro schema JSON")
    lo.add_argument("--value-schema-file")
    lo.add_argument("--schema-registry", metavar="URL",
                    help="decode by the schema id in each value's header, with the writer "
                         "schemas of this Confluent-compatible registry; the table follows them")
    lo.add_argument("--key-format", choices=("raw", "avro", "protobuf", "json-schema"),
                    help="with --schema-registry, decode keys too (into a struct column key)")
    lo.add_argument("--on-incompatible", choices=("dead-letter", "fail"),
                    help="with --schema-registry, records of a writer schema the table cannot "
                         "take: dead-letter (default) or fail the load")
    lo.add_argument("--on-data-loss", choices=("fail", "skip"),
                    help="when retention deleted offsets the table never loaded: fail (default) "
                         "or skip them and record the gap in the snapshot")
    flag(lo, "--register-existing", REGISTER_HELP)
    # --partition-by, --mode, --key-columns, ...: one flag per field the table layout declares.
    add_layout_flags(lo)
    lo.add_argument("--cdc", choices=("debezium",),
                    help="values are Debezium change events (JSON, with or without the "
                         "schema/payload wrapper, or Avro with --value-format avro "
                         "--schema-registry URL): the table holds the source table's rows "
                         "(implies --mode upsert; JSON: --value-schema gives the source "
                         "columns, Avro: the Envelope's after record does)")
    lo.set_defaults(func=cmd_load)

    rp = sub.add_parser("reprocess", help="rewind a table to an offset or time and reload (Spark)")
    rp.add_argument("topic")
    rp.add_argument("--warehouse")
    rp.add_argument("--table", required=True)
    rp.add_argument("--partition", type=non_negative, help="default: every partition")
    g = rp.add_mutually_exclusive_group(required=True)
    g.add_argument("--from-offset", type=non_negative)
    g.add_argument("--from-timestamp", type=non_negative, metavar="MS")
    rp.add_argument("--reason", default="", help="recorded in the snapshot's audit")
    flag(rp, "--allow-expired",
         "upsert tables: when vacuum expired the snapshot to rebuild from, "
         "rebuild from the log start instead")
    flag(rp, "--allow-compacted",
         "reprocess even where compaction rewrote the log since (records only "
         "the table holds are dropped); recorded in the audit")
    flag(rp, "--allow-below-log-start",
         "rewind below the log start: rows the log no longer holds leave the "
         "table; recorded in the audit")
    flag(rp, "--register-existing", REGISTER_HELP)
    rp.set_defaults(func=cmd_reprocess)

    va = sub.add_parser("vacuum", help="expire old snapshots of warehouse tables and remove "
                                       "unreferenced files after the grace period")
    va.add_argument("--warehouse")
    va.add_argument("--table", help="default: every table of the warehouse")
    va.add_argument("--grace-ms", type=non_negative,
                    help="keep unreferenced files and snapshots younger than this (default: 7 "
                         "days; at least 3600000, 1 hour: files of loads still running must "
                         "survive)")
    va.add_argument("--retain-last", type=int, default=1,
                    help="snapshots of main always kept (default 1)")
    flag(va, "--dry-run")
    flag(va, "--expire-unvalidated",
         "also expire old snapshots the quality gate has not validated yet "
         "(for tables nobody validates; the validated tag can then no longer "
         "move past them)")
    va.set_defaults(func=cmd_vacuum)

    mt = sub.add_parser("maintain", help="rewrite a warehouse table's small files into target-"
                        "sized ones and fold its delete files (one snapshot, offsets unchanged)")
    mt.add_argument("--warehouse")
    mt.add_argument("--table", help="default: every table of the warehouse")
    mt.add_argument("--target-file-mb", type=float, metavar="MB",
                    help="target data file size (default 128)")
    mt.add_argument("--run-id", help="idempotency key: a rerun of a committed run id is a no-op")
    mt.set_defaults(func=cmd_maintain)

    cp = sub.add_parser("compact", help="log compaction of a topic (Spark)")
    cp.add_argument("topic")
    flag(cp, "--force", "ignore min.cleanable.dirty.ratio")
    cp.set_defaults(func=cmd_compact)

    rt = sub.add_parser("retention", help="apply retention.ms / retention.bytes to a topic")
    rt.add_argument("topic")
    rt.add_argument("--warehouse", help="report tables whose unloaded data retention would drop")
    rt.set_defaults(func=cmd_retention)

    sq = sub.add_parser("sql", help="Spark SQL over every topic and warehouse table")
    sq.add_argument("query", nargs="?")
    sq.add_argument("--file", help="read the query from a file")
    sq.add_argument("--warehouse")
    sq.add_argument("--format", choices=("table", "jsonl"), default="table")
    tt = sq.add_mutually_exclusive_group()
    tt.add_argument("--as-of-snapshot", metavar="ID",
                    help="time travel: read the table holding this snapshot id as of it")
    tt.add_argument("--as-of-timestamp", metavar="MS|ISO",
                    help="time travel: read every table as of this time (epoch ms or ISO 8601)")
    sq.set_defaults(func=cmd_sql)
    return p


#: Commands that run Spark jobs: their Spark and py4j failures become one line (see below).
SPARK_COMMANDS = frozenset({"load", "reprocess", "compact", "retention", "sql", "vacuum"})

#: The packages only the jobs need, by the extra that installs them (setup.cfg).
EXTRAS = {"pyspark": "spark", "py4j": "spark", "pyiceberg": "spark", "pandas": "spark",
          "fastavro": "spark", "great_expectations": "airflow", "airflow": "airflow"}


def missing_extra(exc: ModuleNotFoundError, command: str) -> MissingExtraError | None:
    """The one-line error for a job command whose extra is not installed (None: another
    missing module, a bug that keeps its traceback)."""
    extra = EXTRAS.get((exc.name or "").split(".")[0])
    if extra is None:
        return None
    return MissingExtraError(
        f"`kafkastore {command}` needs the {extra} extra ({exc.name} is not installed): "
        f"pip install 'kafkastore[{extra}]'")


def _run(args, cfg: Config) -> int:
    """Run a Spark command so that a Spark failure (a worker's error wrapped in a
    PythonException, a py4j error) is one line naming table, partition, segment and cause,
    with the full trace in a log file (:mod:`pipelines.spark_errors`). The Spark commands
    import :mod:`pipelines` modules lazily, so the log's commands start without Spark."""
    from pipelines.spark_errors import spark_errors  # lazy: only a failing job command reads Spark's errors

    # Spark's own console log (executor errors with JVM stack traces, ~150 lines for one bad
    # segment) would bury the one-line error; the full trace goes to the log file instead.
    os.environ.setdefault("KAFKASTORE_SPARK_LOG_LEVEL", "OFF")
    try:
        if args.command not in SPARK_COMMANDS:
            return args.func(args, cfg)
        with spark_errors(args.command, table=getattr(args, "table", None),
                          topic=getattr(args, "topic", None)):
            return args.func(args, cfg)
    except ModuleNotFoundError as exc:
        # Installed without the jobs' extra: the log's commands work, a job's says what to add.
        error = missing_extra(exc, args.command)
        if error is None:
            raise
        raise error from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kafkastore`` console script."""
    return log_entry.main(argv, parser=build_parser(), run=_run, load=load_config)


if __name__ == "__main__":
    sys.exit(main())
