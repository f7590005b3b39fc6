"""The log's command-line parser (:func:`build_parser`) and its argument types. The jobs'
command line (:mod:`pipelines.cli`) extends it with its commands.
"""
from __future__ import annotations

import argparse

from .commands import (cmd_acls, cmd_consume, cmd_delete_records, cmd_gc, cmd_groups, cmd_import,
                       cmd_merge, cmd_offsets, cmd_produce, cmd_topics, cmd_transactions,
                       cmd_verify)
from .serve import _SERVE_LIMIT_FLAGS, cmd_quotas, cmd_serve, cmd_users


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
                    help="group commit: the most a partition's commit waits for more appends, only when several are queued (default 5)")
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
