"""The ``kafkastore`` command line (DESIGN.md section 7).

The log's commands (topics, produce, consume, offsets, import, verify, gc,
delete-records, groups, serve) live here and never touch Spark. The Spark jobs'
commands (load, reprocess, vacuum, compact, retention, sql, ``offsets
--warehouse``) live with the jobs in :mod:`pipelines.cli`, which extends this
parser; the ``kafkastore`` console script is ``pipelines.cli:main``. Nothing
here imports ``pipelines`` (DESIGN.md section 1).

Errors the user can act on are :class:`KafkaStoreError`: one line on stderr,
exit status 1. Usage errors exit with status 2 (argparse).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any, Callable

from .config import Config, load_config
from .errors import ConfigError, KafkaStoreError, ProduceStoppedError, UnknownTopicError


def _storage(cfg: Config, *, read_only: bool = False):
    """The root's Storage; ``read_only`` commands create nothing (not even a local root)."""
    from .storage import Storage

    return Storage(cfg.root, cfg.storage_options, create=not read_only)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


# -- topics -------------------------------------------------------------------
def cmd_topics(args, cfg: Config) -> int:
    from .topic_config import parse_assignments
    from .topics import check_not_internal, create_topic, describe_topic, list_topics

    storage = _storage(cfg, read_only=args.topics_cmd in ("list", "describe"))
    if args.topics_cmd == "create":
        # Internal topics are made by their owner with its partitions and config (a
        # __consumer_offsets made here with cleanup.policy=delete would lose every group's offsets).
        check_not_internal(args.topic, "create")
        configs = parse_assignments(args.config or [])
        create_topic(storage, args.topic, args.partitions, configs)
        print(f"created topic {args.topic} with {args.partitions} partition(s)", file=sys.stderr)
    elif args.topics_cmd == "apply":
        from .errors import TopicExistsError

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
    from .merge import Housekeeper

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

            logging.getLogger(__name__).info(
                "merge still running after %.0f s at exit; `kafkastore merge` finishes it",
                PRODUCE_HOUSEKEEPING_WAIT_S)


def _produce(args, storage, housekeeper) -> int:
    from .broker import Broker
    from .errors import InvalidRecordError, RecordTooLargeError, UnknownTopicError
    import numpy as np

    from .jsonl_bulk import parse_ahead

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


def offsets_of(args, cfg: Config) -> dict[str, Any]:
    """``offsets``' JSON: log start and high watermark per partition."""
    from .topics import describe_topic

    info = describe_topic(_storage(cfg, read_only=True), args.topic)
    return {"topic": args.topic, "partitions": {
        str(o.partition): {"log_start_offset": o.log_start_offset, "high_watermark": o.high_watermark}
        for o in info.offsets}}


def cmd_offsets(args, cfg: Config) -> int:
    print_json(offsets_of(args, cfg))
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
    from .gc import collect_garbage, require_clock_agreement

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
        from .manifest import ManifestStore
        from .topic_config import TopicConfig
        from .topics import deleted_partitions

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
    from .broker import unique_writer_id
    from .merge import merge_partition
    from .topics import load_topic

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
# -- consumer groups -------------------------------------------------------------------
def cmd_transactions(args, cfg: Config) -> int:
    from .transactions import abort_transaction, open_transactions

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
    from . import group_admin

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


# -- SCRAM users ---------------------------------------------------------------------
def cmd_users(args, cfg: Config) -> int:
    from .scram_users import ScramUsers

    users = ScramUsers(_storage(cfg, read_only=args.users_cmd == "list"))
    if args.users_cmd == "list":
        print_json(users.describe(fresh=True))
    elif args.users_cmd == "add":
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        else:
            password = args.password
        if not password:
            raise ConfigError("the password must not be empty")
        users.add(args.name, args.mechanism, password, iterations=args.iterations)
        print(f"user {args.name}: {args.mechanism} credential set ({args.iterations} iterations)",
              file=sys.stderr)
    elif args.users_cmd == "remove":
        removed = users.remove(args.name, args.mechanism)
        print(f"user {args.name}: removed {', '.join(removed)}", file=sys.stderr)
    return 0


def _quota_entity(args) -> dict:
    """The entity the quotas options name (``--user``/``--default-user``, ``--client-id``/
    ``--default-client-id``), validated."""
    from .protocol.quotas import CLIENT_ID, USER, validate_entity

    entity: dict = {}
    if args.user is not None or args.default_user:
        entity[USER] = None if args.default_user else args.user
    if args.client_id is not None or args.default_client_id:
        entity[CLIENT_ID] = None if args.default_client_id else args.client_id
    return validate_entity(entity)


def cmd_quotas(args, cfg: Config) -> int:
    from .cluster_config import ClusterDocument
    from .protocol import quotas as Q

    document = ClusterDocument(_storage(cfg, read_only=args.quotas_cmd == "list"), "quotas")
    if args.quotas_cmd == "list":
        print_json([{"entity": e, "path": Q.describe_entity(e), "values": v}
                    for e, v in Q.entries(document.refresh())])
        return 0
    entity = _quota_entity(args)
    if args.quotas_cmd == "set":
        values = {k: getattr(args, k) for k in Q.QUOTA_KEYS if getattr(args, k) is not None}
        if not values:
            raise ConfigError("quotas set needs at least one of --producer-byte-rate, "
                              "--consumer-byte-rate, --request-percentage")
        for k, v in values.items():
            Q.validate_value(k, v)
        values = {k: (int(v) if k != Q.REQUEST_PERCENTAGE else v) for k, v in values.items()}
        document.update(lambda doc: Q.alter(doc, entity, values))
        print(f"quotas of {Q.describe_entity(entity)}: "
              f"{', '.join(f'{k}={v:g}' for k, v in values.items())}", file=sys.stderr)
    elif args.quotas_cmd == "delete":
        keys = args.quota or list(Q.QUOTA_KEYS)
        document.update(lambda doc: Q.alter(doc, entity, {}, keys))
        print(f"quotas of {Q.describe_entity(entity)}: removed {', '.join(keys)}", file=sys.stderr)
    return 0


# -- ACLs ----------------------------------------------------------------------------
def _acl_resource(args, required: bool):
    """``(resource type, name)`` of --topic / --group / --cluster / --transactional-id."""
    from .acls import CLUSTER_NAME, ResourceType

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
    from .acls import (AclBinding, AclFilter, Operation, PatternType, Permission, acl_document,
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


# -- parser -------------------------------------------------------------------------
def non_negative(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}")
    return n


def positive(value: str) -> int:
    n = non_negative(value)
    if n == 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got 0")
    return n


def flag(parser, name: str, help: str | None = None) -> None:
    """An on/off option ``name`` of ``parser`` (or of a group of it): off unless given."""
    parser.add_argument(name, action="store_true", help=help)


# -- serve --------------------------------------------------------------------
def _host_port(value: str, default_port: int | None = None) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, str(default_port) if default_port is not None else ""
    try:
        n = int(port)
    except ValueError:
        raise ConfigError(f"expected HOST:PORT, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise ConfigError(f"port must be 0..65535, got {n}")
    return host.strip("[]") or "127.0.0.1", n


def _super_users(args) -> tuple:
    """``--super-users User:a,User:b`` validated (only with ``--authorizer``)."""
    from .acls import validate_principal

    if not args.super_users:
        return ()
    if not args.authorizer:
        raise ConfigError("--super-users needs --authorizer")
    return tuple(validate_principal(p.strip()) for p in args.super_users.split(",") if p.strip())


def cmd_serve(args, cfg: Config) -> int:
    import logging
    import ssl

    from .protocol.sasl import load_credentials
    from .protocol.server import ServeOptions, run_server

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafkastore").setLevel(
        {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG))
    host, port = _host_port(args.listen)
    adv_host, adv_port = _host_port(args.advertise, port) if args.advertise else (None, None)
    ctx = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise ConfigError("TLS needs both --tls-cert and --tls-key")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load TLS certificate/key: {exc}") from None
    creds = load_credentials(args.sasl_credentials) if args.sasl_credentials else None
    super_users = _super_users(args)
    opts = ServeOptions(host=host, port=port, advertise_host=adv_host, advertise_port=adv_port,
                        node_id=args.node_id, commit_interval_ms=args.commit_interval_ms,
                        ssl_context=ctx, credentials=creds, sasl=args.sasl, insecure=args.insecure,
                        auto_create_topics=args.auto_create_topics,
                        authorizer=args.authorizer, super_users=super_users,
                        default_partitions=args.default_partitions,
                        schema_registry_listen=(_host_port(args.schema_registry_listen)
                                                if args.schema_registry_listen else None),
                        metrics_listen=(_host_port(args.metrics_listen)
                                        if args.metrics_listen else None),
                        **{name: getattr(args, name) for name in (
                            "max_connections", "max_connections_per_ip", "connections_max_idle_ms",
                            *_SERVE_LIMIT_FLAGS)
                           if getattr(args, name) is not None})

    def ready(server):
        print(f"kafkastore: broker {server.node_id} serving {cfg.root} on "
              f"{server.options.host}:{server.port} (advertised {server.advertised[0]}:"
              f"{server.advertised[1]})", flush=True)
        if server.schema_registry is not None:
            print(f"kafkastore: schema registry on {server.schema_registry.url}", flush=True)
        if server.metrics_port is not None:
            print(f"kafkastore: metrics on {server.options.metrics_listen[0]}:{server.metrics_port}",
                  flush=True)

    from .clock import from_env
    from .storage import Storage
    # from_env: SYSTEM, or the fault harness's skewed clock (KAFKASTORE_CLOCK_SKEW_MS).
    run_server(Storage(cfg.root, cfg.storage_options, clock=from_env()), opts, ready=ready)
    return 0


#: serve's limits before authentication and on the metrics listener: ServeOptions field ->
#: help (the defaults live in ServeOptions; docs/serve.md "Limits before authentication").
_SERVE_LIMIT_FLAGS = {
    "max_unauthenticated_connections":
        "connections not yet authenticated, in all (TLS handshakes included; default 200)",
    "max_unauthenticated_connections_per_ip":
        "connections not yet authenticated, per client address (default 20)",
    "sasl_auth_timeout_ms":
        "time from accept to complete TLS and SASL authentication (default 10000)",
    "tls_handshake_timeout_ms": "time a TLS handshake may take (default 10000)",
    "sasl_max_failed_logins_per_ip":
        "failed SASL logins per client address in --sasl-failed-login-window-ms before its "
        "logins are refused unchecked (default 50)",
    "sasl_failed_login_window_ms": "the failed-login window (default 10000)",
    "metrics_max_connections": "metrics listener connections in all (default 64)",
    "metrics_max_connections_per_ip": "metrics listener connections per address (default 16)",
    "metrics_header_timeout_ms":
        "time a metrics request's headers (and a TLS handshake) may take (default 10000)",
    "metrics_idle_timeout_ms": "close a metrics connection idle this long (default 30000)",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kafkastore",
        description="Kafka-format logs on object storage, loaded exactly-once by Spark batch jobs.")
    p.add_argument("--root", help="log root URL (file://, memory://, s3://); env KAFKASTORE_ROOT")
    p.add_argument("--conf", help="config file (YAML); env KAFKASTORE_CONF")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p.commands = sub  # the jobs' command line (pipelines/cli.py) adds its commands here

    t = sub.add_parser("topics", help="create, list or describe topics")
    tsub = t.add_subparsers(dest="topics_cmd", required=True, metavar="ACTION")
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("topic")
    c.add_argument("--partitions", type=positive, default=1)
    c.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="topic config, Kafka's names (repeatable)")
    tsub.add_parser("list", help="list topics")
    tsub.add_parser("apply", help="create the topics the config file lists that do not exist yet")
    d = tsub.add_parser("describe", help="partitions, configs and offsets of a topic (JSON)")
    d.add_argument("topic")
    flag(d, "--all", "include configs left at their defaults")
    t.set_defaults(func=cmd_topics)

    pr = sub.add_parser("produce", help="append JSON lines from stdin to a topic")
    pr.add_argument("topic")
    pr.add_argument("--compression", default="none",
                    help="producer codec: none, gzip, snappy, lz4, zstd (the topic's compression.type wins unless 'producer')")
    pr.add_argument("--partition", type=non_negative, help="send every record to this partition")
    pr.add_argument("--batch-size", type=positive, default=16384, help="batch.size in bytes")
    pr.add_argument("--linger-ms", type=non_negative, default=0, help="linger.ms")
    pr.add_argument("--flush-every", type=non_negative, default=0,
                    help="commit every N records (default: once at the end of input)")
    pr.set_defaults(func=cmd_produce)

    co = sub.add_parser("consume", help="print records as JSON lines")
    co.add_argument("topic")
    co.add_argument("--partition", type=non_negative)
    g = co.add_mutually_exclusive_group()
    g.add_argument("--from-offset", type=non_negative)
    g.add_argument("--from-timestamp", type=non_negative, metavar="MS")
    co.add_argument("--limit", type=non_negative)
    co.add_argument("--isolation", "--isolation-level", dest="isolation_level", default="read_committed",
                    choices=("read_committed", "read_uncommitted"),
                    help="read_committed (default, as the Spark source): stop at the first open "
                         "transaction and skip aborted records")
    co.set_defaults(func=cmd_consume)

    of = sub.add_parser("offsets", help="log start offset and high watermark per partition (JSON)")
    of.add_argument("topic")
    of.set_defaults(func=cmd_offsets)

    im = sub.add_parser("import", help="adopt a Kafka partition directory's segments")
    im.add_argument("dir")
    im.add_argument("--topic")
    im.add_argument("--partition", type=non_negative)
    im.set_defaults(func=cmd_import)

    ve = sub.add_parser("verify", help="check CRCs, indexes and manifests of a topic")
    ve.add_argument("topic")
    ve.add_argument("--partition", type=non_negative)
    ve.set_defaults(func=cmd_verify)

    gc = sub.add_parser("gc", help="delete files no manifest references, after the grace period")
    gc.add_argument("topic")
    gc.add_argument("--grace-ms", type=non_negative, help="default: the topic's file.delete.delay.ms")
    flag(gc, "--dry-run")
    gc.set_defaults(func=cmd_gc)

    mg = sub.add_parser("merge", help="merge small adjacent segments into segment.bytes-sized ones "
                                      "(serve and long-running producers do it themselves)")
    mg.add_argument("topic")
    mg.add_argument("--partition", type=non_negative)
    mg.set_defaults(func=cmd_merge)

    dr = sub.add_parser("delete-records",
                        help="make offsets below N unreadable (Kafka's DeleteRecords)")
    dr.add_argument("topic")
    dr.add_argument("--partition", type=non_negative, required=True)
    dr.add_argument("--before-offset", type=int, required=True,
                    help="new log start offset; -1 = the high watermark")
    dr.set_defaults(func=cmd_delete_records)

    gr = sub.add_parser("groups", help="list, describe, delete consumer groups; reset their offsets")
    gsub = gr.add_subparsers(dest="groups_cmd", required=True, metavar="ACTION")
    gsub.add_parser("list", help="groups with metadata or committed offsets")
    gd = gsub.add_parser("describe", help="members, assignment, committed offset, log end, lag (JSON)")
    gd.add_argument("group")
    gx = gsub.add_parser("delete", help="delete a group without live members")
    gx.add_argument("group")
    gre = gsub.add_parser("reset-offsets", help="move a group's committed offsets (dry run without --execute)")
    gre.add_argument("group")
    gre.add_argument("--topic", required=True, metavar="TOPIC[:P1,P2]")
    gt = gre.add_mutually_exclusive_group(required=True)
    flag(gt, "--to-earliest")
    flag(gt, "--to-latest")
    gt.add_argument("--to-offset", type=non_negative, metavar="N")
    gt.add_argument("--to-datetime", metavar="ISO", help="e.g. 2024-01-02T03:04:05.000 (UTC unless a zone is given)")
    flag(gre, "--execute", "commit the new offsets")
    gr.set_defaults(func=cmd_groups)

    tx = sub.add_parser("transactions", help="open transactions in the log; abort a hanging one")
    txsub = tx.add_subparsers(dest="txn_cmd", required=True, metavar="ACTION")
    txl = txsub.add_parser("list", help="open transactions of a topic (JSON lines), oldest first")
    txl.add_argument("topic", nargs="?")
    txl.add_argument("--topic", dest="topic_flag", metavar="T", help="the topic (instead of TOPIC)")
    txl.add_argument("--partition", type=non_negative, metavar="P")
    txa = txsub.add_parser("abort", help="write an ABORT marker ending one producer's open "
                                         "transaction at one partition")
    txa.add_argument("topic", nargs="?")
    txa.add_argument("--topic", dest="topic_flag", metavar="T", help="the topic (instead of TOPIC)")
    txa.add_argument("--partition", type=non_negative, required=True, metavar="P")
    txa.add_argument("--producer-id", type=non_negative, required=True, metavar="ID")
    txa.add_argument("--producer-epoch", type=non_negative, required=True, metavar="E")
    tx.set_defaults(func=cmd_transactions)

    us = sub.add_parser("users", help="SCRAM users every broker of the root accepts")
    usub = us.add_subparsers(dest="users_cmd", required=True, metavar="ACTION")
    ua = usub.add_parser("add", help="create a user or replace its credential for one mechanism")
    ua.add_argument("name")
    ua.add_argument("--mechanism", required=True, choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
    ua.add_argument("--iterations", type=positive, default=4096,
                    help="PBKDF2 iterations, 4096..16384 (default 4096)")
    upw = ua.add_mutually_exclusive_group(required=True)
    flag(upw, "--password-stdin", "read the password from stdin's first line")
    upw.add_argument("--password", metavar="P", help="the password (visible to other local users: "
                                                     "prefer --password-stdin)")
    usub.add_parser("list", help="users with their mechanisms and iterations (JSON; never secrets)")
    ur = usub.add_parser("remove", help="remove a user's credentials (every mechanism unless --mechanism)")
    ur.add_argument("name")
    ur.add_argument("--mechanism", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
    us.set_defaults(func=cmd_users)

    qu = sub.add_parser("quotas", help="client quotas (byte rates, request time) every broker of "
                                       "the root enforces")
    qsub = qu.add_subparsers(dest="quotas_cmd", required=True, metavar="ACTION")
    qsub.add_parser("list", help="every quota entity and its values (JSON)")
    for name, helptext in (("set", "set quota values of a (user, client-id), user or client-id "
                                   "entity, or of their defaults"),
                           ("delete", "remove quota values of an entity (all unless --quota)")):
        qp = qsub.add_parser(name, help=helptext)
        qu_user = qp.add_mutually_exclusive_group()
        qu_user.add_argument("--user", metavar="U")
        flag(qu_user, "--default-user",
             "the default of every user without its own quota")
        qu_client = qp.add_mutually_exclusive_group()
        qu_client.add_argument("--client-id", metavar="C")
        flag(qu_client, "--default-client-id",
             "the default of every client id without its own quota")
        if name == "set":
            qp.add_argument("--producer-byte-rate", dest="producer_byte_rate", type=float,
                            metavar="N", help="bytes per second produced, per broker")
            qp.add_argument("--consumer-byte-rate", dest="consumer_byte_rate", type=float,
                            metavar="N", help="bytes per second fetched, per broker")
            qp.add_argument("--request-percentage", dest="request_percentage", type=float,
                            metavar="P", help="percent of one broker thread's time")
        else:
            qp.add_argument("--quota", action="append",
                            choices=("producer_byte_rate", "consumer_byte_rate", "request_percentage"),
                            help="remove only this quota (repeatable)")
    qu.set_defaults(func=cmd_quotas)

    ac = sub.add_parser("acls", help="ACLs every broker of the root enforces with serve --authorizer")
    asub = ac.add_subparsers(dest="acls_cmd", required=True, metavar="ACTION")
    for name, helptext in (("add", "allow (or --deny) principals operations on a resource"),
                           ("list", "the ACLs the options match (JSON; all without options)"),
                           ("remove", "remove the ACLs the options match (on the named resource)")):
        ap = asub.add_parser(name, help=helptext)
        ap.add_argument("--principal", action="append", metavar="User:NAME",
                        help="User:alice, or User:* for every user (repeatable)")
        ap.add_argument("--operation", action="append", metavar="OP",
                        help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, ClusterAction or All (repeatable)")
        ap.add_argument("--host", metavar="IP", help="client address the ACL is for (default *)")
        ap_res = ap.add_mutually_exclusive_group()
        ap_res.add_argument("--topic", metavar="T", help="a topic (* for every topic)")
        ap_res.add_argument("--group", metavar="G", help="a consumer group (* for every group)")
        flag(ap_res, "--cluster", "the cluster")
        ap_res.add_argument("--transactional-id", metavar="X", help="a transactional id")
        if name == "list":
            ap.add_argument("--pattern-type", default="any",
                            choices=("any", "match", "literal", "prefixed"),
                            help="match: the ACLs that apply to the named resource (default any)")
        else:
            flag(ap, "--prefixed",
                 "the name is a prefix: every resource whose name starts with it")
            ap_perm = ap.add_mutually_exclusive_group()
            flag(ap_perm, "--deny", "a DENY ACL (deny wins)")
            if name == "remove":
                flag(ap_perm, "--allow", "only ALLOW ACLs")
    ac.set_defaults(func=cmd_acls)

    sv = sub.add_parser("serve", help="a Kafka-protocol broker over the root (DESIGN.md section 8)")
    sv.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT",
                    help="listen address (default 127.0.0.1:9092; port 0 picks a free one)")
    sv.add_argument("--advertise", metavar="HOST:PORT", help="address clients are told to use")
    sv.add_argument("--node-id", type=non_negative, help="broker id (default: smallest free one)")
    sv.add_argument("--commit-interval-ms", type=float, default=5.0,
                    help="group commit: wait this long after a partition's first append (default 5)")
    sv.add_argument("--tls-cert", help="TLS certificate chain (PEM)")
    sv.add_argument("--tls-key", help="TLS private key (PEM)")
    sv.add_argument("--sasl-credentials", metavar="FILE",
                    help="user:password lines; enables SASL PLAIN and SCRAM-SHA-256/512")
    flag(sv, "--sasl",
         "require SASL: the root's SCRAM users (kafkastore users) log in, and those "
         "of --sasl-credentials")
    flag(sv, "--insecure",
         "allow a non-loopback listener without TLS and SASL")
    sv.add_argument("--schema-registry-listen", metavar="HOST:PORT",
                    help="also serve a Confluent-compatible schema registry (REST) here, stored "
                         "in the root's _schemas topic; TLS and basic auth as the Kafka listener")
    sv.add_argument("--metrics-listen", metavar="HOST:PORT",
                    help="serve Prometheus metrics over HTTP here (loopback unless TLS or "
                         "--insecure, as the Kafka listener)")
    flag(sv, "--authorizer",
         "check every request against the root's ACLs (kafkastore acls); deny "
         "what no ACL allows")
    sv.add_argument("--super-users", metavar="User:A,User:B",
                    help="principals allowed everything (with --authorizer)")
    flag(sv, "--auto-create-topics",
         "create unknown topics on Metadata requests (Kafka's auto.create.topics.enable)")
    sv.add_argument("--default-partitions", type=positive, default=1,
                    help="partitions of auto-created topics (default 1)")
    # Defaults live in ServeOptions (not imported here: every command would pay for it).
    sv.add_argument("--max-connections", type=positive,
                    help="connections accepted in all (Kafka's max.connections; default 1000)")
    sv.add_argument("--max-connections-per-ip", type=positive,
                    help="connections accepted per client address (max.connections.per.ip; default 500)")
    sv.add_argument("--connections-max-idle-ms", type=positive,
                    help="close a connection idle this long (connections.max.idle.ms; default 600000)")
    for name, text in _SERVE_LIMIT_FLAGS.items():
        sv.add_argument("--" + name.replace("_", "-"), type=positive, help=text)
    sv.add_argument("-v", "--verbose", action="count", default=0,
                    help="-v: log clients and the API versions they use; -vv: every commit too")
    sv.set_defaults(func=cmd_serve)
    return p


def _run(args, cfg: Config) -> int:
    return args.func(args, cfg)


def main(argv: list[str] | None = None, *, parser: argparse.ArgumentParser | None = None,
         run: Callable[[argparse.Namespace, Config], int] | None = None,
         load: Callable[..., Config] = load_config) -> int:
    """Run one command: the log's commands (:func:`build_parser`), or those of ``parser`` with
    ``run`` and the config ``load``-er (the ``kafkastore`` console script passes the jobs'
    ones: :mod:`pipelines.cli`, :mod:`pipelines.config`)."""
    args = (parser or build_parser()).parse_args(argv)
    try:
        cfg = load(args.conf, root=args.root)
        return (run or _run)(args, cfg)
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
