"""The log's commands that need only the log library: topics, produce, consume, offsets,
import, verify, gc, merge, delete-records, transactions, groups, acls (DESIGN.md section 7).

The command line is the package :mod:`kafkastore.cli`: the parser is
:mod:`kafkastore.cli.parser`, the entry point :mod:`kafkastore.cli.entry`, and the commands
that start or configure the protocol server (serve, users, quotas) :mod:`kafkastore.cli.serve`.
The commands here never touch Spark or the protocol server. The Spark jobs'
commands (load, reprocess, vacuum, compact, retention, sql, ``offsets
--warehouse``) live with the jobs in :mod:`pipelines.cli`, which extends this
parser; the ``kafkastore`` console script is ``pipelines.cli:main``. Nothing
here imports ``pipelines`` (DESIGN.md section 1).

Errors the user can act on are :class:`KafkaStoreError`: one line on stderr,
exit status 1. Usage errors exit with status 2 (argparse).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from ..errors import (ConfigError, InvalidRecordError, KafkaStoreError, ProduceStoppedError,
                      RecordTooLargeError, TopicExistsError, UnknownTopicError)
from .log_config import Config


def _storage(cfg: Config, *, read_only: bool = False):
    """The root's Storage; ``read_only`` commands create nothing (not even a local root)."""
    # lazy: start-up: the CLI imports each command's code on use
    from ..storage import Storage

    return Storage(cfg.root, cfg.storage_options, create=not read_only)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


# -- topics -------------------------------------------------------------------
def cmd_topics(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..topics.topic_config import parse_assignments
    from ..topics.admin import check_not_internal, create_topic, describe_topic, list_topics

    storage = _storage(cfg, read_only=args.topics_cmd in ("list", "describe"))
    if args.topics_cmd == "create":
        # Internal topics are made by their owner with its partitions and config (a
        # __consumer_offsets made here with cleanup.policy=delete would lose every group's offsets).
        check_not_internal(args.topic, "create")
        configs = parse_assignments(args.config or [])
        create_topic(storage, args.topic, args.partitions, configs)
        print(f"created topic {args.topic} with {args.partitions} partition(s)", file=sys.stderr)
    elif args.topics_cmd == "apply":
        if not cfg.topics:
            raise ConfigError("the config file lists no topics (give --conf FILE with a 'topics:' mapping)")
        for name in cfg.topics:
            check_not_internal(name, "create")
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
        print_json(describe_topic(storage, args.topic).to_dict(include_defaults=args.all))
    return 0


# -- produce / consume ----------------------------------------------------------
#: How long (seconds) `produce` waits at exit for the merge its last commits started.
PRODUCE_HOUSEKEEPING_WAIT_S = 120.0


def cmd_produce(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..maintenance.housekeeper import Housekeeper

    storage = _storage(cfg)
    # This run's own housekeeper (merging what it writes, in the background), finished before
    # the command returns: a merge still running while the interpreter exits would find the
    # upload pools shut and fail half way, so short runs would only ever add segments.
    housekeeper = Housekeeper(storage)
    try:
        return _produce(args, storage, housekeeper)
    finally:
        if not housekeeper.close(wait=True, timeout_s=PRODUCE_HOUSEKEEPING_WAIT_S):
            import logging

            logging.getLogger("kafkastore.cli").info(
                "merge still running after %.0f s at exit; `kafkastore merge` finishes it",
                PRODUCE_HOUSEKEEPING_WAIT_S)


def _produce(args, storage, housekeeper) -> int:
    import numpy as np

    # lazy: start-up: the CLI imports each command's code on use
    from ..write.log_writer import LogWriter as Broker
    from ..write.jsonl_bulk import parse_ahead

    # Without --flush-every the input is one unit: nothing is committed before the end (no
    # commit when a segment rolls), and a bad line anywhere is reported before any refused
    # record (as when every line was parsed first), so the log stays as it was.
    atomic = not args.flush_every
    broker = Broker(storage, compression=args.compression, batch_size=args.batch_size,
                    linger_ms=args.linger_ms, commit_on_roll=not atomic,
                    housekeeping=housekeeper)
    broker.topic(args.topic)  # fail fast on an unknown topic, before reading input
    refusals = (ConfigError, InvalidRecordError, RecordTooLargeError, UnknownTopicError)
    sent = 0
    results = []
    # Line numbers of the rows sent to each partition, oldest first, and how many of those
    # rows are committed: a partition's commits land in order, so a commit of N records
    # settles its N oldest rows. Only read when a run stops part way.
    pending_lines: dict[int, list] = {}
    committed: dict[int, int] = {}
    refused = None  # atomic mode: the first refused record, reported unless a line is bad

    def settled(result):
        results.append(result)
        committed[result.partition] = committed.get(result.partition, 0) + result.record_count

    def remember(parts, lines) -> None:
        for p in np.unique(parts):
            pending_lines.setdefault(int(p), []).append(lines[parts == p])

    def send(table, lines) -> None:
        nonlocal sent
        i, n = 0, table.num_rows
        while i < n:
            j = min(n, i + args.flush_every - sent % args.flush_every) if args.flush_every else n
            try:
                parts = broker.send_arrow(args.topic, table.slice(i, j - i), partition=args.partition)
            except refusals as exc:
                row = getattr(exc, "row", 0)
                # The rows before the refused one are buffered (and may commit on a roll).
                remember(getattr(exc, "partitions", np.zeros(0, np.int32)), lines[i:i + row])
                raise type(exc)(f"line {int(lines[i + row])}: {exc}") from None
            remember(parts, lines[i:j])
            sent += j - i
            if args.flush_every and sent % args.flush_every == 0:
                broker.flush()
            i = j

    broker.on_commit = settled
    try:
        # Chunks of whole lines, parsed in bulk (C or pyarrow) or line by line where that
        # decides, on a thread one chunk ahead.
        with contextlib.closing(parse_ahead(_binary_stdin())) as parsed_chunks:
            for parsed in parsed_chunks:
                if refused is None and parsed.table.num_rows:
                    try:
                        send(parsed.table, parsed.lines)
                    except refusals as exc:
                        if not atomic:
                            raise
                        refused = exc
                if parsed.error is not None:
                    raise parsed.error
        if refused is not None:
            raise refused
        broker.flush()
    except KafkaStoreError as exc:
        if not results:
            raise
        done = [int(n) for p, chunks in pending_lines.items()
                for n in np.concatenate(chunks)[:committed.get(p, 0)]]
        raise ProduceStoppedError(
            f"{exc} -- stopped after committing {len(done)} record(s) to "
            f"{args.topic}: {_offset_ranges(results)} (input lines "
            f"{_line_ranges(done)}); no other line was committed") from exc
    where = _offset_ranges(results)
    print(f"produced {sent} record(s) to {args.topic}" + (f": {where}" if where else ""),
          file=sys.stderr)
    return 0


class _TextAsBinary:
    """A text stream without bytes underneath (tests, embedding) read as UTF-8 bytes."""

    def __init__(self, stream):
        self._stream = stream

    def read(self, n: int) -> bytes:
        return self._stream.read(n).encode("utf-8", "surrogatepass")


def _binary_stdin():
    raw = getattr(sys.stdin, "buffer", None)
    return raw if raw is not None else _TextAsBinary(sys.stdin)


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

    # lazy: start-up: the CLI imports each command's code on use
    from ..write.jsonl import format_consume_record
    from ..job_commits import consistent
    from ..read.reader import EARLIEST, PartitionReader
    from ..topics.admin import load_topic

    storage = _storage(cfg, read_only=True)
    meta = load_topic(storage, args.topic)
    partitions = [args.partition] if args.partition is not None else range(meta.partitions)
    remaining = args.limit
    out = sys.stdout

    def snapshot() -> dict:
        return {p: PartitionReader(storage, args.topic, p) for p in partitions}

    # One snapshot of every partition first, holding a job that wrote into several of them
    # (a Spark write) in all or in none (read_committed; rolling one forward writes markers).
    many = args.isolation_level == "read_committed" and len(partitions) > 1
    readers = consistent(storage, snapshot) if many else snapshot()
    for p in partitions:
        if remaining is not None and remaining <= 0:
            break
        reader = readers[p]
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


def offsets_of(args, cfg: Config) -> dict[str, Any]:
    """``offsets``' JSON: log start and high watermark per partition."""
    # lazy: start-up: the CLI imports each command's code on use
    from ..topics.admin import describe_topic

    info = describe_topic(_storage(cfg, read_only=True), args.topic)
    return {"topic": args.topic, "partitions": {
        str(o.partition): {"log_start_offset": o.log_start_offset, "high_watermark": o.high_watermark}
        for o in info.offsets}}


def cmd_offsets(args, cfg: Config) -> int:
    print_json(offsets_of(args, cfg))
    return 0


# -- import / verify / gc -----------------------------------------------------------
def cmd_import(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..write.kafka_import import import_kafka_dir
    from ..write.kafka_import import parse_kafka_dir_name

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
    # lazy: start-up: the CLI imports each command's code on use
    from ..read.verify import verify_partition
    from ..topics.admin import load_topic

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
    # lazy: start-up: the CLI imports each command's code on use
    from ..maintenance.gc import collect_garbage, require_clock_agreement

    storage = _storage(cfg)
    if not args.dry_run:
        require_clock_agreement(storage)   # a clock ahead of the store's would delete live files
    now = storage.clock.wall_ms()
    try:
        reports = [collect_garbage(storage, args.topic, None, now_ms=now, grace_ms=args.grace_ms,
                                   dry_run=args.dry_run)]
    except UnknownTopicError:
        # A deleted topic: its tombstoned partitions still hold the files the delete left
        # to gc (its config went with _topic.json: the default grace, at least the floor).
        # lazy: start-up: the CLI imports each command's code on use
        from ..manifest import ManifestStore
        from ..topics.topic_config import TopicConfig
        from ..topics.admin import deleted_partitions

        parts = deleted_partitions(storage, args.topic)
        if not parts:
            raise
        grace = args.grace_ms if args.grace_ms is not None else max(
            TopicConfig().file_delete_delay_ms, int(ManifestStore.min_keep_ms))
        reports = [collect_garbage(storage, args.topic, p, now_ms=now, grace_ms=grace,
                                   dry_run=args.dry_run) for p in parts]
    for report in reports:
        print(report)
    return 0


def cmd_merge(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..write.log_writer import unique_writer_id
    from ..maintenance.merge import merge_partition
    from ..topics.admin import load_topic

    storage = _storage(cfg)
    meta = load_topic(storage, args.topic)
    parts = [args.partition] if args.partition is not None else list(range(meta.partitions))
    for p in parts:
        if not 0 <= p < meta.partitions:
            raise UnknownTopicError(
                f"topic {args.topic!r} has partitions 0..{meta.partitions - 1}, not {p}")
    for p in parts:
        # Until nothing is left to merge, then one packing pass: a log nobody serves gets
        # segment.bytes-sized segments at once.
        report = merge_partition(storage, args.topic, p, config=meta.config, min_segments=0,
                                 rounds=64, pack=True, writer=f"cli-merge-{unique_writer_id()}")
        print(report)
    return 0


def cmd_delete_records(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..maintenance.retention import delete_records

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
# -- consumer groups -------------------------------------------------------------------
def cmd_transactions(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..write.transactions import abort_transaction, open_transactions

    storage = _storage(cfg)
    args.topic = args.topic or args.topic_flag   # TOPIC or --topic T (kafka-transactions.sh's form)
    if not args.topic:
        raise ConfigError("transactions: name the topic (TOPIC or --topic T)")
    if args.txn_cmd == "list":
        for txn in open_transactions(storage, args.topic, args.partition):
            print(json.dumps(txn.to_dict()))
        return 0
    txn = abort_transaction(storage, args.topic, args.partition, args.producer_id,
                            args.producer_epoch)
    print(json.dumps({"aborted": txn.to_dict()}))
    return 0


def cmd_groups(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..groups import admin as group_admin

    storage = _storage(cfg)
    if args.groups_cmd == "list":
        for name in group_admin.list_groups(storage):
            print(name)
    elif args.groups_cmd == "describe":
        print_json(group_admin.describe_group(storage, args.group))
    elif args.groups_cmd == "delete":
        group_admin.delete_group(storage, args.group)
        print(f"deleted consumer group {args.group}", file=sys.stderr)
    elif args.groups_cmd == "reset-offsets":
        if args.to_earliest:
            target = group_admin.ResetTarget("earliest")
        elif args.to_latest:
            target = group_admin.ResetTarget("latest")
        elif args.to_offset is not None:
            target = group_admin.ResetTarget("offset", args.to_offset)
        else:
            target = group_admin.ResetTarget("datetime", group_admin.parse_datetime_ms(args.to_datetime))
        plan = group_admin.reset_offsets(storage, args.group, args.topic, target, execute=args.execute)
        print_json(plan)
        if not args.execute:
            print("dry run: nothing changed (add --execute to commit these offsets)", file=sys.stderr)
    return 0


# -- ACLs ----------------------------------------------------------------------------
def _acl_resource(args, required: bool):
    """``(resource type, name)`` of --topic / --group / --cluster / --transactional-id."""
    # lazy: start-up: the CLI imports each command's code on use
    from ..cluster.acls import CLUSTER_NAME, ResourceType

    given = [(t, n) for t, n in ((ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
                                 (ResourceType.CLUSTER, CLUSTER_NAME if args.cluster else None),
                                 (ResourceType.TRANSACTIONAL_ID, args.transactional_id))
             if n is not None]
    if len(given) > 1:
        raise ConfigError("name one resource: --topic, --group, --cluster or --transactional-id")
    if not given and required:
        raise ConfigError("name the resource: --topic, --group, --cluster or --transactional-id")
    return given[0] if given else (ResourceType.ANY, None)


def cmd_acls(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..cluster.acls import (AclBinding, AclFilter, Operation, PatternType, Permission, acl_document,
                                add_acls, list_acls, parse_operation, remove_acls, validate_host,
                                validate_principal)

    document = acl_document(_storage(cfg, read_only=args.acls_cmd == "list"))
    ops = [parse_operation(o) for o in (args.operation or ())]
    principals = [validate_principal(p) for p in (args.principal or ())]
    host = validate_host(args.host) if args.host is not None else None
    if args.acls_cmd == "list":
        rtype, name = _acl_resource(args, required=False)
        pattern = PatternType[args.pattern_type.upper()]
        found = list_acls(document, AclFilter(rtype, name, pattern, None, host))
        found = [b for b in found if (not principals or b.principal in principals)
                 and (not ops or b.operation in ops)]
        print_json([b.to_json() for b in found])
        return 0
    rtype, name = _acl_resource(args, required=True)
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    if args.acls_cmd == "add":
        if not principals or not ops:
            raise ConfigError("acls add needs --principal and --operation")
        permission = Permission.DENY if args.deny else Permission.ALLOW
        new = [AclBinding(rtype, name, pattern, p, host or "*", o, permission)
               for p in principals for o in ops]
        add_acls(document, new)
        for b in new:
            print(f"added: {b.describe()}", file=sys.stderr)
    else:
        permission = Permission.DENY if args.deny else Permission.ALLOW if args.allow else Permission.ANY
        filters = [AclFilter(rtype, name, pattern, p, host, o, permission)
                   for p in (principals or [None]) for o in (ops or [Operation.ANY])]
        removed = sorted({b for group in remove_acls(document, filters) for b in group})
        for b in removed:
            print(f"removed: {b.describe()}", file=sys.stderr)
        if not removed:
            print("no ACL matched: nothing removed", file=sys.stderr)
    return 0
