"""Authorization as Kafka's StandardAuthorizer decides it, over the root's ACLs.

:class:`AclIndex` is the pure part: built once per version of the ``acls``
document, it finds the bindings that apply to a resource without scanning the
rest (literal bindings by ``(type, name)``, the ``*`` wildcard by type,
prefixed ones by ``(type, prefix)`` probed at each prefix length some binding
of the type has), and remembers its answers. The rules are Kafka's:

* a super user may do anything; with no binding that allows it, a request is
  denied (``allow.everyone.if.no.acl.found=false``);
* a binding applies when its principal is the caller's or ``User:*``, its host
  the caller's address or ``*``, and its pattern matches the resource;
* any applying DENY of the operation (or ALL) denies, whatever allows it;
* otherwise an applying ALLOW of the operation (or ALL) allows; READ, WRITE,
  DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS
  (for ALLOW only: denying READ does not deny DESCRIBE).

:class:`Authorizer` is the broker's. A change made through this broker applies to it
at once, on the others within ``max_age_s``, whatever the traffic: the server keeps the
index warm in the background (:class:`kafkastore.cluster.refresher.Refresher`: reads
started often enough, overlapping on a slow store, that the index never reaches the
bound while the store answers) and, before it hands a request
to its handler, waits for a fresh read when the index in hand is older than
``max_age_s`` (after an idle spell, a pause, a stalled store), so no decision is ever
made on ACLs older than the bound. Handlers ask through
``ctx.authorize(op, resource_type, name)``, which never blocks.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from ..cluster.acls import (ANONYMOUS, CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL, AclBinding,
                            Operation, PatternType, Permission, ResourceType, bindings_of)
from ..clock import Clock, as_clock
from .wire import error_codes as E

log = logging.getLogger("kafkastore.serve.authorizer")

__all__ = ["AclIndex", "Authorizer", "CLUSTER_NAME", "Operation", "ResourceType", "principal_of"]

#: ALLOW bindings of these operations also allow the key (Kafka's implied operations).
_ALLOWED_BY: dict[Operation, frozenset] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER, Operation.ALL}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                                           Operation.ALL}),
}
#: Most remembered decisions per index (the key holds client-chosen names).
MAX_CACHED_DECISIONS = 100_000


class AclIndex:
    """The bindings of one document version, indexed for :meth:`authorize`. Pure."""

    def __init__(self, bindings: Iterable[AclBinding], super_users: Iterable[str] = ()):
        self.super_users = frozenset(super_users)
        self.bindings = tuple(bindings)
        self._literal: dict[tuple[int, str], list[tuple]] = {}
        self._prefixed: dict[tuple[int, str], list[tuple]] = {}
        lengths: dict[int, set[int]] = {}
        for b in self.bindings:
            entry = (b.principal, b.host, b.operation, b.permission)
            if b.pattern == PatternType.LITERAL:
                self._literal.setdefault((b.resource_type, b.name), []).append(entry)
            else:
                self._prefixed.setdefault((b.resource_type, b.name), []).append(entry)
                lengths.setdefault(b.resource_type, set()).add(len(b.name))
        self._lengths = {t: tuple(sorted(ls)) for t, ls in lengths.items()}
        self._decisions: dict[tuple, bool] = {}

    def applying(self, resource_type: ResourceType, name: str) -> list[tuple]:
        """``(principal, host, operation, permission)`` of every binding whose pattern
        matches the resource (whoever it is for)."""
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out.extend(self._literal.get((resource_type, WILDCARD), ()))
        for n in self._lengths.get(resource_type, ()):
            if n > len(name):
                break
            out.extend(self._prefixed.get((resource_type, name[:n]), ()))
        return out

    def authorize(self, principal: str, host: str, op: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``principal`` connecting from ``host`` may ``op`` the resource."""
        key = (principal, host, op, resource_type, name)
        hit = self._decisions.get(key)
        if hit is not None:
            return hit
        decision = self._decide(principal, host, op, resource_type, name)
        if len(self._decisions) >= MAX_CACHED_DECISIONS:
            self._decisions.clear()
        self._decisions[key] = decision
        return decision

    def _decide(self, principal, host, op, resource_type, name) -> bool:
        if principal in self.super_users:
            return True
        allowed_by = _ALLOWED_BY.get(op)
        allowed = False
        user_wildcard = WILDCARD_PRINCIPAL if principal.startswith("User:") else None
        for who, where, bop, perm in self.applying(resource_type, name):
            if (who != principal and who != user_wildcard) or (where != WILDCARD and where != host):
                continue
            if perm == Permission.DENY:
                if bop == op or bop == Operation.ALL:
                    return False
            elif not allowed:
                allowed = (bop == op or bop == Operation.ALL) if allowed_by is None else bop in allowed_by
        return allowed

    def authorize_any(self, principal: str, host: str, op: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether ``principal`` may ``op`` at least one resource of the type (Kafka's
        authorizeByResourceType: an ALLOW not covered by a DENY of the same literal name,
        a DENY prefix of it, or a DENY of every resource). Scans the type's bindings."""
        if principal in self.super_users:
            return True
        user_wildcard = WILDCARD_PRINCIPAL if principal.startswith("User:") else None
        deny_literal, deny_prefix, allows = set(), set(), []
        for b in self.bindings:
            if b.resource_type != resource_type or (b.operation != op and b.operation != Operation.ALL):
                continue
            if (b.principal != principal and b.principal != user_wildcard) or \
                    (b.host != WILDCARD and b.host != host):
                continue
            if b.permission == Permission.DENY:
                (deny_literal if b.pattern == PatternType.LITERAL else deny_prefix).add(b.name)
            else:
                allows.append(b)
        if WILDCARD in deny_literal:
            return False
        for b in allows:
            if b.pattern == PatternType.LITERAL and b.name in deny_literal:
                continue
            if not any(b.name[:n] in deny_prefix for n in range(1, len(b.name) + 1)):
                return True
        return False


def principal_of(connection) -> tuple[str, str]:
    """``(principal, host)`` of a client connection: ``User:<SASL user>`` or ``User:ANONYMOUS``,
    and its IP address."""
    user = getattr(connection, "principal", None)
    peer = getattr(connection, "peer", None)
    host = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else ""
    return (f"User:{user}" if user else ANONYMOUS), host


class Authorizer:
    """The broker's authorizer: the index of the newest ``acls`` version it has read.

    ``document`` is the root's :class:`~kafkastore.cluster_config.ClusterDocument` ``acls``;
    ``submit`` runs a blocking function in the background (the broker's thread pool's
    ``submit``); ``clock`` is injected for tests.
    """

    def __init__(self, document, super_users: Iterable[str] = (), *,
                 submit: Callable | None = None, max_age_s: float = 2.0,
                 clock: Clock | Callable[[], float] | None = None):
        self.document = document
        self.super_users = frozenset(super_users)
        self.max_age_s = max_age_s
        self._submit = submit
        # An old bare callable is a monotonic clock in seconds.
        self._clock = as_clock(clock, "monotonic_s")
        self._index = AclIndex((), self.super_users)
        self._version = -1
        self._loaded_at: float | None = None
        self._refreshing = False
        self._retry_at = float("-inf")   # a failed background load is not retried before this
        self._lock = threading.Lock()  # use(): a background load and a change made here may race
        self._load_lock = threading.Lock()  # requests that find the index stale share one read

    @property
    def index(self) -> AclIndex:
        """The index in use (refreshed in the background when older than ``max_age_s``)."""
        now = self._clock.monotonic_s()
        if (self._loaded_at is None or now - self._loaded_at >= self.max_age_s) and \
                not self._refreshing and self._submit is not None and now >= self._retry_at:
            self._refreshing = True
            try:
                self._submit(self._background_load)
            except RuntimeError:  # the pool is shutting down
                self._refreshing = False
        return self._index

    def stale(self) -> bool:
        """Whether the index in hand is older than ``max_age_s`` (or none was loaded)."""
        loaded = self._loaded_at
        return loaded is None or self._clock.monotonic_s() - loaded >= self.max_age_s

    def load_if_stale(self) -> None:
        """:meth:`load` unless another caller refreshed the index meanwhile. Blocking."""
        with self._load_lock:
            if self.stale():
                self.load()

    def load(self) -> None:
        """Read the document now and use it. Blocking. Loads may overlap (a refresher starts
        the next before a slow one ends): each is as fresh as the moment it started."""
        asked = self._clock.monotonic_s()
        version, doc, _ = self.document.read()
        self.use(version, doc, asked)

    def use(self, version: int, doc: dict, at: float | None = None) -> None:
        """Use ``doc`` (version ``version``) from now on, unless a newer version is in use;
        the index in hand is then at least as new as the ACLs were at ``at`` (default: now)."""
        index = AclIndex(bindings_of(doc), self.super_users) if version != self._version else None
        at = self._clock.monotonic_s() if at is None else at
        with self._lock:
            if version > self._version:
                self._index, self._version = index, version
            # An older version read at ``at`` proves the newer one in hand was not stale then.
            if self._loaded_at is None or at > self._loaded_at:
                self._loaded_at = at

    def _background_load(self) -> None:
        try:
            self.load()
        except Exception:  # noqa: BLE001 - the ACLs in hand keep ageing: decisions wait, fail closed
            log.warning("cannot re-read the ACLs; version %d in hand keeps ageing", self._version,
                        exc_info=True)
            self._retry_at = self._clock.monotonic_s() + self.max_age_s / 4
        finally:
            self._refreshing = False

    def authorize(self, principal: str, host: str, op: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``principal`` from ``host`` may ``op`` the resource (never blocks)."""
        return self.index.authorize(principal, host, op, resource_type, name)

    def authorize_any(self, principal: str, host: str, op: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether ``principal`` may ``op`` some resource of the type (never blocks)."""
        return self.index.authorize_any(principal, host, op, resource_type)


# -- what handlers call: 0 when allowed, else Kafka's error code for the resource type ----------
def topic_error(ctx, op: Operation, topic: str) -> int:
    """0, or TOPIC_AUTHORIZATION_FAILED when the principal may not ``op`` the topic."""
    return 0 if ctx.authorize(op, ResourceType.TOPIC, topic) else E.TOPIC_AUTHORIZATION_FAILED


def group_error(ctx, op: Operation, group: str) -> int:
    """0, or GROUP_AUTHORIZATION_FAILED when the principal may not ``op`` the group."""
    if group is None:  # the handler refuses it as Kafka does (INVALID_GROUP_ID / INVALID_REQUEST)
        return 0
    return 0 if ctx.authorize(op, ResourceType.GROUP, group) else E.GROUP_AUTHORIZATION_FAILED


def txn_error(ctx, op: Operation, transactional_id: str) -> int:
    """0, or TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the principal may not ``op`` the id."""
    if transactional_id is None:
        return 0
    return 0 if ctx.authorize(op, ResourceType.TRANSACTIONAL_ID, transactional_id) \
        else E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def cluster_error(ctx, op: Operation) -> int:
    """0, or CLUSTER_AUTHORIZATION_FAILED when the principal may not ``op`` the cluster."""
    return 0 if ctx.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME) else E.CLUSTER_AUTHORIZATION_FAILED


def init_producer_id_error(ctx, transactional_id: str | None) -> int:
    """Kafka's InitProducerId check: WRITE on the transactional id; without one (an idempotent
    producer) IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return 0
    if transactional_id is not None:
        return txn_error(ctx, Operation.WRITE, transactional_id)
    if ctx.authorize(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    principal, host = principal_of(ctx.connection)
    if authorizer.authorize_any(principal, host, Operation.WRITE, ResourceType.TOPIC):
        return 0
    return E.CLUSTER_AUTHORIZATION_FAILED


def txn_partitions_errors(ctx, transactional_id: str, partitions) -> dict:
    """AddPartitionsToTxn's check: ``{}`` when allowed, else the code of every partition
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for all without WRITE on the id; else
    TOPIC_AUTHORIZATION_FAILED for those of topics without WRITE, OPERATION_NOT_ATTEMPTED
    for the rest, as Kafka)."""
    if ctx.broker.authorizer is None:
        return {}
    err = txn_error(ctx, Operation.WRITE, transactional_id)
    if err:
        return dict.fromkeys(partitions, err)
    denied = {t for t, _ in partitions if topic_error(ctx, Operation.WRITE, t)}
    if not denied:
        return {}
    return {tp: E.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else E.OPERATION_NOT_ATTEMPTED
            for tp in partitions}


#: The operations each resource type supports (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
}


def authorized_operations(ctx, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bit field (bit ``op`` set when allowed) of a topic or group,
    as Metadata and DescribeGroups answer when asked (every supported one without an authorizer)."""
    out = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if ctx.authorize(op, resource_type, name):
            out |= 1 << int(op)
    return out
