"""Access control lists as Kafka defines them: bindings, filters, validation, storage.

An ACL binding says that a principal (``User:alice``, or ``User:*`` for every
user) connecting from a host (an IP address, or ``*``) is allowed or denied
one operation on the resources a pattern names: one resource (LITERAL, the
name ``*`` meaning every resource of the type) or every resource whose name
starts with a prefix (PREFIXED). The numbers are Kafka's (``ResourceType``,
``PatternType``, ``AclOperation``, ``AclPermissionType``), so the wire format
of CreateAcls / DescribeAcls / DeleteAcls maps onto this module one to one.

The bindings of a root are one :class:`~kafkastore.cluster.documents.ClusterDocument`
named ``acls`` (``{"acls": [binding, ...]}``), so every broker of the root
enforces the same list within a few seconds of a change.
(:mod:`kafkastore.protocol.authorizer` decides requests against it.)
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable

from ..errors import InvalidAclError
from .documents import ClusterDocument

DOCUMENT = "acls"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource (Kafka's)
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"
#: Longest resource name or principal accepted (Kafka's int16-length strings).
MAX_NAME_CHARS = 32767
_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Resource types ACLs may name here (Kafka's DELEGATION_TOKEN and USER have no API in kafkastore).
SUPPORTED_RESOURCES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                       ResourceType.TRANSACTIONAL_ID)


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is ``permission`` (ALLOW/DENY) to ``operation``
    the resources of ``resource_type`` that ``pattern`` (LITERAL/PREFIXED) ``name`` names."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_json(self) -> dict:
        """The stored form (names, not numbers: the document stays readable)."""
        return {"resource_type": self.resource_type.name.lower(), "name": self.name,
                "pattern": self.pattern.name.lower(), "principal": self.principal,
                "host": self.host, "operation": self.operation.name.lower(),
                "permission": self.permission.name.lower()}

    @classmethod
    def from_json(cls, d: dict) -> "AclBinding":
        """Read a stored binding (validated: a damaged document is refused, not half-used)."""
        try:
            return validate_binding(cls(
                ResourceType[d["resource_type"].upper()], d["name"], PatternType[d["pattern"].upper()],
                d["principal"], d["host"], Operation[d["operation"].upper()],
                Permission[d["permission"].upper()]))
        except (KeyError, AttributeError, TypeError) as exc:
            raise InvalidAclError(f"stored ACL {d!r} is damaged: {exc!r}") from None

    def describe(self) -> str:
        """One line, as ``kafkastore acls list`` prints it."""
        return (f"{self.permission.name} {self.principal} from {self.host} "
                f"{self.operation.name} {self.resource_type.name} {self.pattern.name} {self.name!r}")


@dataclass(frozen=True)
class AclFilter:
    """Which bindings DescribeAcls / DeleteAcls / ``acls list|remove`` mean: None or ANY
    matches everything; pattern MATCH matches the bindings that would apply to ``name``."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        """Whether ``b`` is one of the bindings this filter means (Kafka's AclBindingFilter)."""
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.pattern == PatternType.MATCH:
            if self.name is not None and not pattern_matches(b.pattern, b.name, self.name):
                return False
        else:
            if self.pattern != PatternType.ANY and b.pattern != self.pattern:
                return False
            if self.name is not None and b.name != self.name:
                return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == Operation.ANY or b.operation == self.operation)
                and (self.permission == Permission.ANY or b.permission == self.permission))


def pattern_matches(pattern: PatternType, pattern_name: str, name: str) -> bool:
    """Whether a resource pattern applies to the resource ``name``."""
    if pattern == PatternType.LITERAL:
        return pattern_name == name or pattern_name == WILDCARD
    if pattern == PatternType.PREFIXED:
        return name.startswith(pattern_name)
    return False


# -- validation ----------------------------------------------------------------------------
def _enum(enum, value, what: str):
    try:
        return enum(value)
    except ValueError:
        raise InvalidAclError(f"unknown {what} {value!r}") from None


def validate_principal(principal) -> str:
    """``Type:name`` (Kafka's KafkaPrincipal string); ``User:*`` is every user."""
    if not isinstance(principal, str) or ":" not in principal:
        raise InvalidAclError(f"invalid principal {principal!r}: expected Type:name, "
                              "e.g. User:alice or User:*")
    kind, _, name = principal.partition(":")
    if not kind or not name or len(principal) > MAX_NAME_CHARS or not principal.isprintable():
        raise InvalidAclError(f"invalid principal {principal!r}: expected Type:name, "
                              "e.g. User:alice or User:*")
    return principal


def validate_host(host) -> str:
    """``*`` or an IP address (ACLs match the client's address, never a host name)."""
    if host == WILDCARD:
        return host
    try:
        return str(ipaddress.ip_address(host))
    except (ValueError, TypeError):
        raise InvalidAclError(f"invalid host {host!r}: expected * or an IP address") from None


def validate_resource_name(resource_type: ResourceType, name, pattern: PatternType) -> str:
    """A name a pattern of this type may hold (Kafka's rules: not empty, the cluster is
    ``kafka-cluster``; topic names use Kafka's topic characters)."""
    if not isinstance(name, str) or not name:
        raise InvalidAclError("resource name must not be empty")
    if len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise InvalidAclError(f"invalid resource name {name[:80]!r}: at most {MAX_NAME_CHARS} "
                              "printable characters")
    if resource_type == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidAclError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if resource_type == ResourceType.TOPIC and name != WILDCARD:
        if not _TOPIC_CHARS.match(name) or len(name) > 249 or \
                (pattern == PatternType.LITERAL and name in (".", "..")):
            raise InvalidAclError(f"invalid topic name {name!r}: expected 1-249 characters of "
                                  "[a-zA-Z0-9._-] (or * for every topic)")
    if pattern == PatternType.PREFIXED and name == WILDCARD:
        raise InvalidAclError("a PREFIXED pattern of '*' means nothing: use the LITERAL '*'")
    return name


def validate_binding(b: AclBinding) -> AclBinding:
    """``b`` with its enums and host normalised, or :class:`InvalidAclError` saying what is
    wrong (Kafka answers those with INVALID_REQUEST)."""
    rtype = _enum(ResourceType, b.resource_type, "resource type")
    if rtype not in SUPPORTED_RESOURCES:
        raise InvalidAclError(f"invalid resource type {rtype.name}: expected one of "
                              f"{', '.join(r.name for r in SUPPORTED_RESOURCES)}")
    pattern = _enum(PatternType, b.pattern, "pattern type")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"invalid pattern type {pattern.name}: expected LITERAL or PREFIXED")
    op = _enum(Operation, b.operation, "operation")
    if op in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAclError(f"invalid operation {op.name}")
    perm = _enum(Permission, b.permission, "permission type")
    if perm not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAclError(f"invalid permission type {perm.name}: expected ALLOW or DENY")
    name = validate_resource_name(rtype, b.name, pattern)
    return AclBinding(rtype, name, pattern, validate_principal(b.principal), validate_host(b.host),
                      op, perm)


def validate_filter(f: AclFilter) -> AclFilter:
    """``f`` with its enums checked: UNKNOWN anywhere is :class:`InvalidAclError`."""
    rtype = _enum(ResourceType, f.resource_type, "resource type")
    pattern = _enum(PatternType, f.pattern, "pattern type")
    op = _enum(Operation, f.operation, "operation")
    perm = _enum(Permission, f.permission, "permission type")
    for value, what in ((rtype, "resource type"), (pattern, "pattern type"), (op, "operation"),
                        (perm, "permission type")):
        if value.name == "UNKNOWN":
            raise InvalidAclError(f"invalid filter: {what} UNKNOWN")
    return AclFilter(rtype, f.name, pattern, f.principal, f.host, op, perm)


def parse_operation(text: str) -> Operation:
    """``Read``, ``read``, ``DescribeConfigs``, ``describe-configs``, ``IDEMPOTENT_WRITE``... ."""
    key = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()).replace("-", "_").upper()
    try:
        op = Operation[key]
    except KeyError:
        op = None
    if op is None or op in (Operation.UNKNOWN, Operation.ANY, Operation.CREATE_TOKENS,
                            Operation.DESCRIBE_TOKENS):
        names = ", ".join(_camel(o.name) for o in Operation if o.value >= 2 and o.value <= 12)
        raise InvalidAclError(f"unknown operation {text!r}: expected one of {names}")
    return op


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


# -- storage ---------------------------------------------------------------------------------
def bindings_of(doc: dict) -> list[AclBinding]:
    """The bindings an ``acls`` document holds."""
    items = doc.get("acls", [])
    if not isinstance(items, list):
        raise InvalidAclError("the acls document is damaged: 'acls' is not a list")
    return [AclBinding.from_json(d) for d in items]


def _store(bindings: Iterable[AclBinding]) -> dict:
    return {"acls": [b.to_json() for b in sorted(set(bindings))]}


def add_acls(document, bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """Add bindings (validated; adding one already there changes nothing, as Kafka).
    ``document`` is the root's :class:`~kafkastore.cluster.documents.ClusterDocument`; returns
    every binding after the change. Blocking."""
    new = [validate_binding(b) for b in bindings]
    doc = document.update(lambda d: _store(bindings_of(d) + new) if new else d)
    return bindings_of(doc)


def remove_acls(document, filters: list[AclFilter]) -> list[list[AclBinding]]:
    """Remove the bindings each filter matches; per filter, the bindings it removed. Blocking."""
    filters = [validate_filter(f) for f in filters]
    removed: list[list[AclBinding]] = []

    def change(d: dict) -> dict:
        current = bindings_of(d)
        removed[:] = [[b for b in current if f.matches(b)] for f in filters]
        doomed = {b for group in removed for b in group}
        return _store(b for b in current if b not in doomed) if doomed else d

    document.update(change)
    return removed


def list_acls(document, flt: AclFilter = AclFilter(), *, fresh: bool = True) -> list[AclBinding]:
    """The bindings ``flt`` matches, sorted. Blocking."""
    flt = validate_filter(flt)
    doc = document.refresh() if fresh else document.get()
    return [b for b in bindings_of(doc) if flt.matches(b)]


def acl_document(storage, *, max_age_s: float = 2.0):
    """The root's ``acls`` :class:`~kafkastore.cluster.documents.ClusterDocument`."""
    return ClusterDocument(storage, DOCUMENT, max_age_s=max_age_s)
