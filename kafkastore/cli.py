"""The ``kafkastore`` command line (DESIGN.md section 7).

Log commands (topics, produce, consume, offsets, import, verify, gc) run in
this process without Spark. Job commands (load, reprocess, compact,
retention, sql) import :mod:`pipelines` lazily, so the log commands stay fast.

Errors the user can act on are :class:`KafkaStoreError`: one line on stderr,
exit status 1. Usage errors exit with status 2 (argparse).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from typing import Any

from .config import Config, load_config
from .errors import ConfigError, KafkaStoreError, ProduceStoppedError, UnknownTopicError


def _storage(cfg: Config, *, read_only: bool = False):
    """The root's Storage; ``read_only`` commands create nothing (not even a local root)."""
    from .storage import Storage

    return Storage(cfg.root, cfg.storage_options, create=not read_only)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


# -- topics -------------------------------------------------------------------
def cmd_topics(args, cfg: Config) -> int:
    from .topic_config import parse_assignments
    from .topics import create_topic, describe_topic, list_topics

    storage = _storage(cfg, read_only=args.topics_cmd in ("list", "describe"))
    if args.topics_cmd == "create":
        configs = parse_assignments(args.config or [])
        create_topic(storage, args.topic, args.partitions, configs)
        print(f"created topic {args.topic} with {args.partitions} partition(s)", file=sys.stderr)
    elif args.topics_cmd == "apply":
        from .errors import TopicExistsError

        if not cfg.topics:
            raise ConfigError("the config file lists no topics (give --conf FILE with a 'topics:' mapping)")
        for name, spec in cfg.topics.items():
            try:
                create_topic(storage, name, int(spec.get("partitions", 1)), spec.get("config") or {})
                print(f"created topic {name}", file=sys.stderr)
            except TopicExistsError:
                print(f"topic {name} exists", file=sys.stderr)
    elif args.topics_cmd == "list":
        storage.require_root()
        for name in list_topics(storage):
            print(name)
    elif args.topics_cmd == "describe":
        _print_json(describe_topic(storage, args.topic).to_dict(include_defaults=args.all))
    return 0


# -- produce / consume ----------------------------------------------------------
def _input_lines(stream):
    """``(line number, text)`` of the input; a line that is not UTF-8 is a ConfigError."""
    raw = getattr(stream, "buffer", None)
    if raw is None:  # a text stream without bytes underneath (tests, embedding)
        yield from enumerate(stream, 1)
        return
    for lineno, line in enumerate(raw, 1):
        try:
            yield lineno, line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"line {lineno}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def cmd_produce(args, cfg: Config) -> int:
    from .broker import Broker
    from .errors import InvalidRecordError, RecordTooLargeError, UnknownTopicError
    from .jsonl import parse_produce_line

    storage = _storage(cfg)
    # Without --flush-every the input is one unit: every line is parsed before the first
    # record is sent, and nothing is committed before the end (no commit when a segment
    # rolls), so a bad line or a refused record leaves the log as it was.
    atomic = not args.flush_every
    broker = Broker(storage, compression=args.compression, batch_size=args.batch_size,
                    linger_ms=args.linger_ms, commit_on_roll=not atomic)
    broker.topic(args.topic)  # fail fast on an unknown topic, before reading input
    lines = ((lineno, line) for lineno, line in _input_lines(sys.stdin) if line.strip())
    if atomic:
        records = [(lineno, parse_produce_line(line, lineno)) for lineno, line in lines]
    else:
        records = ((lineno, parse_produce_line(line, lineno)) for lineno, line in lines)
    sent = 0
    results = []
    # Line numbers sent to each partition and not yet committed, oldest first: a partition's
    # commits land in order, so each commit settles the oldest of them.
    pending_lines: dict[int, deque] = {}
    committed_lines: list[int] = []

    def settled(result):
        results.append(result)
        lines = pending_lines.get(result.partition, deque())
        for _ in range(min(result.record_count, len(lines))):
            committed_lines.append(lines.popleft())

    broker.on_commit = settled
    try:
        for lineno, rec in records:
            partition = rec.partition if rec.partition is not None else args.partition
            try:
                p = broker.send(args.topic, rec.value, key=rec.key, headers=rec.headers,
                                timestamp=rec.timestamp, partition=partition)
            except (ConfigError, InvalidRecordError, RecordTooLargeError, UnknownTopicError) as exc:
                raise type(exc)(f"line {lineno}: {exc}") from None
            pending_lines.setdefault(p, deque()).append(lineno)
            sent += 1
            if args.flush_every and sent % args.flush_every == 0:
                broker.flush()
        broker.flush()
    except KafkaStoreError as exc:
        if not results:
            raise
        raise ProduceStoppedError(
            f"{exc} -- stopped after committing {len(committed_lines)} record(s) to "
            f"{args.topic}: {_offset_ranges(results)} (input lines "
            f"{_line_ranges(committed_lines)}); no other line was committed") from exc
    where = _offset_ranges(results)
    print(f"produced {sent} record(s) to {args.topic}" + (f": {where}" if where else ""),
          file=sys.stderr)
    return 0


def _offset_ranges(results) -> str:
    """``p0 [0, 10), p1 [4, 9)``: the offsets the commits in ``results`` took, per partition."""
    ranges: dict[int, list[list[int]]] = {}
    for r in sorted(results, key=lambda r: (r.partition, r.base_offset)):
        spans = ranges.setdefault(r.partition, [])
        if spans and spans[-1][1] == r.base_offset:
            spans[-1][1] = r.next_offset
        else:
            spans.append([r.base_offset, r.next_offset])
    return ", ".join(f"p{p} " + " ".join(f"[{lo}, {hi})" for lo, hi in spans)
                     for p, spans in sorted(ranges.items()))


def _line_ranges(lines: list[int]) -> str:
    """``1-5, 8, 10-12`` of a list of line numbers."""
    out: list[list[int]] = []
    for n in sorted(lines):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in out) or "none"


def cmd_consume(args, cfg: Config) -> int:
    import pyarrow as pa

    from .jsonl import format_consume_record
    from .reader import EARLIEST, PartitionReader
    from .topics import load_topic

    storage = _storage(cfg, read_only=True)
    meta = load_topic(storage, args.topic)
    partitions = [args.partition] if args.partition is not None else range(meta.partitions)
    remaining = args.limit
    out = sys.stdout
    for p in partitions:
        if remaining is not None and remaining <= 0:
            break
        reader = PartitionReader(storage, args.topic, p)
        if args.from_timestamp is not None:
            start = reader.offset_for_timestamp(args.from_timestamp)
        elif args.from_offset is not None:
            start = args.from_offset
        else:
            start = EARLIEST
        table = reader.read(start, max_records=remaining, isolation=args.isolation_level,
                            include_headers=True)
        cols = {name: table.column(name).to_pylist() for name in
                ("partition", "offset", "key", "value", "headers")}
        # Epoch ms straight from the int64 microseconds: no float rounding, no datetime range.
        micros = table.column("timestamp").cast(pa.int64()).to_pylist()
        for i in range(table.num_rows):
            ms = micros[i] // 1000 if micros[i] is not None else -1
            headers = [(h["key"], h["value"]) for h in (cols["headers"][i] or [])]
            out.write(format_consume_record(args.topic, cols["partition"][i], cols["offset"][i], ms,
                                            cols["key"][i], cols["value"][i], headers) + "\n")
        if remaining is not None:
            remaining -= table.num_rows
    out.flush()
    return 0


def cmd_offsets(args, cfg: Config) -> int:
    from .topics import describe_topic

    info = describe_topic(_storage(cfg, read_only=True), args.topic)
    result: dict[str, Any] = {"topic": args.topic, "partitions": {
        str(o.partition): {"log_start_offset": o.log_start_offset, "high_watermark": o.high_watermark}
        for o in info.offsets}}
    warehouse = args.warehouse
    if warehouse:
        from pipelines.lag import table_lag

        result["tables"] = table_lag(warehouse, args.topic, result["partitions"], cfg.storage_options)
    _print_json(result)
    return 0


# -- import / verify / gc -----------------------------------------------------------
def cmd_import(args, cfg: Config) -> int:
    from .admin import import_kafka_dir
    from .kafka_import import parse_kafka_dir_name

    topic, partition = args.topic, args.partition
    if topic is None or partition is None:
        parsed = parse_kafka_dir_name(os.path.basename(os.path.normpath(args.dir)))
        if parsed is None:
            raise ConfigError("give --topic and --partition, or a directory named <topic>-<partition>")
        topic = topic if topic is not None else parsed[0]
        partition = partition if partition is not None else parsed[1]
    result = import_kafka_dir(_storage(cfg), args.dir, topic, partition)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"imported {result.segments} segment(s), {result.records} record(s) into "
          f"{topic}/{partition}: offsets [{result.log_start_offset}, {result.high_watermark})",
          file=sys.stderr)
    return 0


def cmd_verify(args, cfg: Config) -> int:
    from .admin import verify_partition
    from .topics import load_topic

    storage = _storage(cfg, read_only=True)
    meta = load_topic(storage, args.topic)
    if args.partition is not None and args.partition >= meta.partitions:
        raise UnknownTopicError(
            f"topic {args.topic!r} has partitions 0..{meta.partitions - 1}, not {args.partition}")
    partitions = [args.partition] if args.partition is not None else range(meta.partitions)
    ok = True
    for p in partitions:
        report = verify_partition(storage, args.topic, p)
        for line in report.lines():
            print(line)
        ok &= report.ok
    if not ok:
        print(f"kafkastore: verify found problems in {args.topic}", file=sys.stderr)
    return 0 if ok else 1


def cmd_gc(args, cfg: Config) -> int:
    from .gc import collect_garbage

    now = int(time.time() * 1000)
    report = collect_garbage(_storage(cfg), args.topic, None, now_ms=now, grace_ms=args.grace_ms,
                             dry_run=args.dry_run)
    print(report)
    return 0


def cmd_delete_records(args, cfg: Config) -> int:
    from .retention import delete_records

    r = delete_records(_storage(cfg), args.topic, args.partition, args.before_offset)
    if r.changed:
        print(f"{args.topic}/{args.partition}: log start offset {r.previous_log_start_offset} -> "
              f"{r.log_start_offset} (high watermark {r.high_watermark}), "
              f"{len(r.dropped)} segment(s) dropped", file=sys.stderr)
    else:
        print(f"{args.topic}/{args.partition}: nothing to delete (log start offset "
              f"{r.log_start_offset})", file=sys.stderr)
    return 0


# -- Spark jobs ---------------------------------------------------------------------
def _spark(cfg: Config):
    from pipelines.session import get_spark

    return get_spark(master=cfg.spark_master, app_name="kafkastore-cli", extra_conf=cfg.spark_conf)


def cmd_load(args, cfg: Config) -> int:
    from pipelines.load import load_options_from_args, run_load

    summary = run_load(_spark(cfg), **load_options_from_args(args, cfg))
    print(summary.render(), file=sys.stderr)
    return 0


def cmd_reprocess(args, cfg: Config) -> int:
    from pipelines.reprocess import run_reprocess

    summary = run_reprocess(
        _spark(cfg), root=cfg.root, topic=args.topic, warehouse=args.warehouse or cfg.warehouse,
        table=args.table, partitions=None if args.partition is None else [args.partition],
        from_offset=args.from_offset, from_timestamp=args.from_timestamp,
        storage_options=cfg.storage_options, reason=args.reason,
        load_options=cfg.load_for(args.topic, args.table))
    print(summary.render(), file=sys.stderr)
    return 0


def cmd_compact(args, cfg: Config) -> int:
    from pipelines.compaction import compact_topic

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
    from pipelines.retention_job import run_retention

    report = run_retention(cfg.root, args.topic, warehouse=args.warehouse or cfg.warehouse,
                           storage_options=cfg.storage_options)
    print(report.render(), file=sys.stderr)
    return 0


def cmd_sql(args, cfg: Config) -> int:
    from pipelines.sql import run_sql

    query = args.query
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            query = f.read()
    if not query:
        raise ConfigError('give a query ("SELECT ...") or --file FILE')
    run_sql(_spark(cfg), query, root=cfg.root, warehouse=args.warehouse or cfg.warehouse,
            storage_options=cfg.storage_options, fmt=args.format, out=sys.stdout)
    return 0


# -- parser -------------------------------------------------------------------------
def _non_negative(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}")
    return n


def _positive(value: str) -> int:
    n = _non_negative(value)
    if n == 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got 0")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kafkastore",
        description="Kafka-format logs on object storage, loaded exactly-once by Spark batch jobs.")
    p.add_argument("--root", help="log root URL (file://, memory://, s3://); env KAFKASTORE_ROOT")
    p.add_argument("--conf", help="config file (YAML); env KAFKASTORE_CONF")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser("topics", help="create, list or describe topics")
    tsub = t.add_subparsers(dest="topics_cmd", required=True, metavar="ACTION")
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("topic")
    c.add_argument("--partitions", type=_positive, default=1)
    c.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="topic config, Kafka's names (repeatable)")
    tsub.add_parser("list", help="list topics")
    tsub.add_parser("apply", help="create the topics the config file lists that do not exist yet")
    d = tsub.add_parser("describe", help="partitions, configs and offsets of a topic (JSON)")
    d.add_argument("topic")
    d.add_argument("--all", action="store_true", help="include configs left at their defaults")
    t.set_defaults(func=cmd_topics)

    pr = sub.add_parser("produce", help="append JSON lines from stdin to a topic")
    pr.add_argument("topic")
    pr.add_argument("--compression", default="none",
                    help="producer codec: none, gzip, snappy, lz4, zstd (the topic's compression.type wins unless 'producer')")
    pr.add_argument("--partition", type=_non_negative, help="send every record to this partition")
    pr.add_argument("--batch-size", type=_positive, default=16384, help="batch.size in bytes")
    pr.add_argument("--linger-ms", type=_non_negative, default=0, help="linger.ms")
    pr.add_argument("--flush-every", type=_non_negative, default=0,
                    help="commit every N records (default: once at the end of input)")
    pr.set_defaults(func=cmd_produce)

    co = sub.add_parser("consume", help="print records as JSON lines")
    co.add_argument("topic")
    co.add_argument("--partition", type=_non_negative)
    g = co.add_mutually_exclusive_group()
    g.add_argument("--from-offset", type=_non_negative)
    g.add_argument("--from-timestamp", type=_non_negative, metavar="MS")
    co.add_argument("--limit", type=_non_negative)
    co.add_argument("--isolation-level", default="read_committed",
                    choices=("read_committed", "read_uncommitted"))
    co.set_defaults(func=cmd_consume)

    of = sub.add_parser("offsets", help="log start offset and high watermark per partition (JSON)")
    of.add_argument("topic")
    of.add_argument("--warehouse", help="also committed offsets and lag of the tables loading it")
    of.set_defaults(func=cmd_offsets)

    im = sub.add_parser("import", help="adopt a Kafka partition directory's segments")
    im.add_argument("dir")
    im.add_argument("--topic")
    im.add_argument("--partition", type=_non_negative)
    im.set_defaults(func=cmd_import)

    ve = sub.add_parser("verify", help="check CRCs, indexes and manifests of a topic")
    ve.add_argument("topic")
    ve.add_argument("--partition", type=_non_negative)
    ve.set_defaults(func=cmd_verify)

    gc = sub.add_parser("gc", help="delete files no manifest references, after the grace period")
    gc.add_argument("topic")
    gc.add_argument("--grace-ms", type=_non_negative, help="default: the topic's file.delete.delay.ms")
    gc.add_argument("--dry-run", action="store_true")
    gc.set_defaults(func=cmd_gc)

    dr = sub.add_parser("delete-records",
                        help="make offsets below N unreadable (Kafka's DeleteRecords)")
    dr.add_argument("topic")
    dr.add_argument("--partition", type=_non_negative, required=True)
    dr.add_argument("--before-offset", type=int, required=True,
                    help="new log start offset; -1 = the high watermark")
    dr.set_defaults(func=cmd_delete_records)

    lo = sub.add_parser("load", help="load a topic into a warehouse table, exactly once (Spark)")
    lo.add_argument("topic")
    lo.add_argument("--warehouse")
    lo.add_argument("--table")
    lo.add_argument("--run-id", help="idempotency key: a rerun of a committed run id is a no-op")
    lo.add_argument("--until-offsets", metavar="JSON",
                    help='end offsets, Spark Kafka-source JSON: {"t":{"0":100}} (default: latest at start)')
    lo.add_argument("--until-timestamp", type=_non_negative, metavar="MS",
                    help="load records before this time (first offset at or after it, per partition)")
    lo.add_argument("--value-format", choices=("raw", "json", "avro"))
    lo.add_argument("--value-schema", help="DDL (json) or Avro schema JSON")
    lo.add_argument("--value-schema-file")
    lo.add_argument("--on-data-loss", choices=("fail", "skip"),
                    help="when offsets were deleted before they were loaded: fail (default) or "
                         "skip them, recording the gap")
    lo.set_defaults(func=cmd_load)

    rp = sub.add_parser("reprocess", help="rewind a table to an offset or time and reload (Spark)")
    rp.add_argument("topic")
    rp.add_argument("--warehouse")
    rp.add_argument("--table", required=True)
    rp.add_argument("--partition", type=_non_negative, help="default: every partition")
    g = rp.add_mutually_exclusive_group(required=True)
    g.add_argument("--from-offset", type=_non_negative)
    g.add_argument("--from-timestamp", type=_non_negative, metavar="MS")
    rp.add_argument("--reason", default="", help="recorded in the audit commit")
    rp.set_defaults(func=cmd_reprocess)

    cp = sub.add_parser("compact", help="log compaction of a topic (Spark)")
    cp.add_argument("topic")
    cp.add_argument("--force", action="store_true", help="ignore min.cleanable.dirty.ratio")
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
    sq.set_defaults(func=cmd_sql)
    return p


#: Commands that run Spark jobs: their Spark and py4j failures become one line (see below).
SPARK_COMMANDS = frozenset({"load", "reprocess", "compact", "retention", "sql", "vacuum"})


def _run_spark_command(args, cfg: Config) -> int:
    """Run a Spark command so that a Spark failure (a worker's error wrapped in a
    PythonException, a py4j error) is one line naming table, partition, segment and cause,
    with the full trace in a log file (:mod:`pipelines.spark_errors`). The Spark commands
    live in ``pipelines`` and are imported lazily, as each ``cmd_*`` above does."""
    from pipelines.spark_errors import spark_errors

    # Spark's own console log (executor errors with JVM stack traces, ~150 lines for one bad
    # segment) would bury the one-line error; the full trace goes to the log file instead.
    os.environ.setdefault("KAFKASTORE_SPARK_LOG_LEVEL", "OFF")
    with spark_errors(args.command, table=getattr(args, "table", None),
                      topic=getattr(args, "topic", None)):
        return args.func(args, cfg)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kafkastore`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.conf, root=args.root)
        if args.command in SPARK_COMMANDS:
            return _run_spark_command(args, cfg)
        return args.func(args, cfg)
    except KafkaStoreError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"kafkastore: error: {message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `kafkastore consume ... | head`: the reader went away; not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print("kafkastore: interrupted; nothing uncommitted is visible", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
