"""Which Kafka ACL a registry request needs, as Confluent's ACL authorizer for Schema Registry
maps them. Pure.

A subject ``<topic>-key`` or ``<topic>-value`` is guarded by the ACLs of ``<topic>``, so the
users who may read or write a topic may read or write its schemas; any other subject
(record-name strategies, ``<topic>-<record>``) is guarded by the ACLs of the TOPIC resource
named like the subject itself (a PREFIXED topic ACL such as ``com.acme.`` covers them). The
operations map one to one: reading a subject (its versions, lookups, compatibility checks,
its config and mode) is READ, registering and changing its config or mode is WRITE, deleting
a subject or a version (soft or hard) is DELETE. The global config and mode are the
cluster's: DESCRIBE_CONFIGS to read them, ALTER_CONFIGS to change them. A schema by id needs
READ on at least one subject that uses it; listings show only what the caller may read.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cluster.acls import CLUSTER_NAME, Operation, ResourceType

#: Confluent's error code for a request the caller is not authorized to make.
FORBIDDEN_CODE = 40301


@dataclass(frozen=True)
class Need:
    """One ACL a request needs: ``operation`` on ``resource_type`` ``name``."""

    operation: Operation
    resource_type: ResourceType
    name: str


#: Nothing to check beyond authentication (/, /schemas/types).
OPEN = "open"
#: Answered filtered to the subjects the caller may READ (/subjects, /schemas, /contexts).
FILTERED = "filtered"
#: GET /schemas/ids/{id}...: READ on at least one subject that uses the id.
BY_ID = "by_id"


def subject_resource(subject: str) -> tuple[ResourceType, str]:
    """The resource whose ACLs guard ``subject``: the topic of a ``-key``/``-value`` subject,
    else the TOPIC named like the subject."""
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return ResourceType.TOPIC, subject[: -len(suffix)]
    return ResourceType.TOPIC, subject


def subject_need(op: Operation, subject: str) -> Need:
    """``op`` on the resource guarding ``subject``."""
    rt, name = subject_resource(subject)
    return Need(op, rt, name)


def cluster_need(op: Operation) -> Need:
    """``op`` on the cluster (the global config and mode)."""
    return Need(op, ResourceType.CLUSTER, CLUSTER_NAME)


_SUBJECT_OP = {"GET": Operation.READ, "POST": Operation.WRITE, "PUT": Operation.WRITE,
               "DELETE": Operation.DELETE}


def requirement(method: str, parts: list[str]):
    """What a request (``parts``: the decoded path segments) needs: a :class:`Need`,
    :data:`OPEN`, :data:`FILTERED` or :data:`BY_ID`; None for a path the router does not
    serve (it answers 404 after authentication, naming nothing)."""
    n = len(parts)
    head = parts[0] if n else ""
    if n == 0:
        return OPEN
    if head == "subjects":
        if n == 1:
            return FILTERED
        if n == 2 and method == "POST":                 # lookup
            return subject_need(Operation.READ, parts[1])
        op = _SUBJECT_OP.get(method)
        return subject_need(op, parts[1]) if op is not None else None
    if head == "schemas":
        if n == 1:
            return FILTERED
        if n == 2 and parts[1] == "types":
            return OPEN
        if parts[1] == "ids":
            return BY_ID
        return None
    if head == "contexts":
        return FILTERED
    if head in ("config", "mode") and n in (1, 2):
        if n == 1:
            return cluster_need(Operation.DESCRIBE_CONFIGS if method == "GET" else Operation.ALTER_CONFIGS)
        # A subject's own config or mode: reading it is reading the subject, changing or
        # removing it is writing the subject (Confluent's SUBJECT_WRITE).
        return subject_need(Operation.READ if method == "GET" else Operation.WRITE, parts[1])
    if head == "compatibility" and n >= 3 and parts[1] == "subjects":
        return subject_need(Operation.READ, parts[2])
    return None
