"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), versions 0-1.

Both work on the root's shared ``quotas`` document (:mod:`kafkastore.protocol.quotas`).
Errors are Kafka's: a malformed filter or entry is INVALID_REQUEST with a message, a
principal the authorizer refuses (DescribeConfigs / AlterConfigs on the cluster)
CLUSTER_AUTHORIZATION_FAILED. ``validate_only`` checks and answers without storing.
"""
from __future__ import annotations

import logging

from ...errors import ConfigError, KafkaStoreError
from ...cluster.acls import Operation, ResourceType
from ..wire import error_codes as E
from ..wire.api_keys import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from .. import quotas as Q
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger(__name__)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _allowed(ctx: RequestContext, alter: bool) -> bool:
    authorize = getattr(ctx, "authorize", None)
    if authorize is None or ctx.broker.authorizer is None:
        return True

    op = Operation.ALTER_CONFIGS if alter else Operation.DESCRIBE_CONFIGS
    return authorize(op, ResourceType.CLUSTER)


def _filter(components) -> list[tuple[str, int, str | None]]:
    """The request's filter checked (ConfigError says what is wrong)."""
    seen = set()
    out = []
    for c in components:
        if c.entity_type not in Q.ENTITY_TYPES:
            raise ConfigError(f"unknown entity type {c.entity_type!r} in the filter")
        if c.entity_type in seen:
            raise ConfigError(f"duplicate filter component for entity type {c.entity_type!r}")
        seen.add(c.entity_type)
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise ConfigError(f"unknown match type {c.match_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise ConfigError(f"an exact match on {c.entity_type} needs a name")
        out.append((c.entity_type, int(c.match_type), c.match))
    return out


def matches(entity: dict, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    """Whether a stored entity passes a DescribeClientQuotas filter."""
    for etype, match_type, name in components:
        if etype not in entity:
            return False
        if match_type == MATCH_EXACT and entity[etype] != name:
            return False
        if match_type == MATCH_DEFAULT and entity[etype] is not None:
            return False
    if strict and set(entity) != {etype for etype, _, _ in components}:
        return False
    return True


async def handle_describe(ctx: RequestContext, request):
    """DescribeClientQuotas: the stored entries the filter matches."""
    if not _allowed(ctx, alter=False):
        return make(ctx.response_class, error_code=E.CLUSTER_AUTHORIZATION_FAILED,
                    error_message="not authorized to describe client quotas", entries=None)
    try:
        components = _filter(request.components)
    except ConfigError as exc:
        return make(ctx.response_class, error_code=E.INVALID_REQUEST, error_message=str(exc),
                    entries=None)
    try:
        doc = await ctx.run(ctx.broker.quota_document.refresh)
    except KafkaStoreError as exc:
        log.warning("DescribeClientQuotas: cannot read the quotas: %s", exc)
        return make(ctx.response_class, error_code=E.UNKNOWN_SERVER_ERROR, error_message=str(exc),
                    entries=None)
    mod = ctx.response_module
    out = []
    for entity, values in Q.entries(doc):
        if not matches(entity, components, request.strict):
            continue
        out.append(make(mod, "EntryData",
                        entity=tuple(make(mod, "EntityData", entity_type=t, entity_name=n)
                                     for t, n in sorted(entity.items())),
                        values=tuple(make(mod, "ValueData", key=k, value=float(v))
                                     for k, v in sorted(values.items()))))
    return make(ctx.response_class, error_code=0, error_message=None, entries=tuple(out))


def _entry_change(entry) -> tuple[dict, dict, list]:
    """``(entity, values to set, keys to remove)`` of one AlterClientQuotas entry (checked)."""
    entity = {}
    for e in entry.entity:
        if e.entity_type in entity:
            raise ConfigError(f"duplicate entity type {e.entity_type!r}")
        entity[e.entity_type] = e.entity_name
    entity = Q.validate_entity(entity)
    set_values, remove, seen = {}, [], set()
    for op in entry.ops:
        if op.key in seen:
            raise ConfigError(f"duplicate quota key {op.key!r}")
        seen.add(op.key)
        if op.remove:
            if op.key not in Q.QUOTA_KEYS:
                raise ConfigError(f"unknown quota {op.key!r}")
            remove.append(op.key)
        else:
            set_values[op.key] = Q.validate_value(op.key, op.value)
    return entity, set_values, remove


async def handle_alter(ctx: RequestContext, request):
    """AlterClientQuotas: set or remove quota values per entity, all valid entries in one
    document update (``validate_only``: none)."""
    mod = ctx.response_module
    allowed = _allowed(ctx, alter=True)
    results = []   # (entity data, error code, message)
    changes = []
    for entry in request.entries:
        entity_data = tuple(make(mod, "EntityData", entity_type=e.entity_type,
                                 entity_name=e.entity_name) for e in entry.entity)
        if not allowed:
            results.append((entity_data, E.CLUSTER_AUTHORIZATION_FAILED,
                            "not authorized to alter client quotas"))
            continue
        try:
            changes.append(_entry_change(entry))
        except ConfigError as exc:
            results.append((entity_data, E.INVALID_REQUEST, str(exc)))
            continue
        results.append((entity_data, 0, None))
    if changes and not request.validate_only:
        def change(doc):
            for entity, set_values, remove in changes:
                doc = Q.alter(doc, entity, set_values, remove)
            return doc
        try:
            doc = await ctx.run(ctx.broker.quota_document.update, change)
            ctx.broker.quotas.set_config(doc)
        except KafkaStoreError as exc:
            log.warning("AlterClientQuotas: cannot store the quotas: %s", exc)
            results = [(ed, code or E.UNKNOWN_SERVER_ERROR, msg if code else str(exc))
                       for ed, code, msg in results]
    return make(ctx.response_class, entries=tuple(
        make(mod, "EntryData", error_code=code, error_message=msg, entity=ed)
        for ed, code, msg in results))


def register(registry: HandlerTable) -> None:
    """Serve the two client-quota APIs."""
    registry.serve(DESCRIBE_CLIENT_QUOTAS, handle_describe)
    registry.serve(ALTER_CLIENT_QUOTAS, handle_alter)
