"""The commands of the protocol server: ``serve``, ``users`` (SCRAM credentials) and
``quotas``. The only module of the log's command line that imports the protocol server
(inside the commands: the other commands do not pay for loading it).
"""
from __future__ import annotations

import sys

from ..clock import from_env
from ..errors import ConfigError
from .commands import _storage, print_json
from .log_config import Config


# -- SCRAM users ---------------------------------------------------------------------
def cmd_users(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..cluster.scram import ScramUsers

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
    # lazy: start-up: the CLI imports each command's code on use
    from ..protocol.quotas import CLIENT_ID, USER, validate_entity

    entity: dict = {}
    if args.user is not None or args.default_user:
        entity[USER] = None if args.default_user else args.user
    if args.client_id is not None or args.default_client_id:
        entity[CLIENT_ID] = None if args.default_client_id else args.client_id
    return validate_entity(entity)


def cmd_quotas(args, cfg: Config) -> int:
    # lazy: start-up: the CLI imports each command's code on use
    from ..cluster.documents import ClusterDocument
    from ..protocol import quotas as Q

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
    # lazy: start-up: the CLI imports each command's code on use
    from ..cluster.acls import validate_principal

    if not args.super_users:
        return ()
    if not args.authorizer:
        raise ConfigError("--super-users needs --authorizer")
    return tuple(validate_principal(p.strip()) for p in args.super_users.split(",") if p.strip())


def cmd_serve(args, cfg: Config) -> int:
    import logging
    import ssl

    # lazy: start-up: the CLI imports each command's code on use
    from ..protocol.apis.sasl import load_credentials
    from ..protocol.server import ServeOptions, run_server

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

    # lazy: start-up: the CLI imports each command's code on use
    from ..storage import Storage
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
    "heartbeat_ms":
        "how often the broker renews its registration; it holds its authority (groups, "
        "transactional ids) for 3 times this, at least 3 s, after its last renewal "
        "(broker.heartbeat.interval.ms; default 1000; on a slow store, e.g. 3000: Kafka's "
        "9 s session)",
}
