"""AlterConfigs and IncrementalAlterConfigs: topic config overrides, validated as
``kafkastore topics create`` validates them (:mod:`kafkastore.topic_config`).

Only topic resources are alterable: a kafkastore broker takes its own settings from the
``kafkastore serve`` command line, so broker resources are refused with INVALID_REQUEST.
"""
from __future__ import annotations

import logging
from typing import Mapping

from ... import layout
from ...cluster.acls import Operation, ResourceType
from ...errors import ConfigError, KafkaStoreError, UnknownTopicError
from ...topics.topic_config import CONFIG_KEYS, TopicConfig
from ...topics.admin import alter_topic, is_internal_topic
from ..wire import error_codes as E
from ..wire.api_keys import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

log = logging.getLogger("kafkastore.serve.admin")

TOPIC_RESOURCE = 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # Kafka's AlterConfigOp.OpType


def _split_list(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def incremental_overrides(current: TopicConfig, ops: list[tuple[str, int, str | None]]
                          ) -> tuple[dict | None, tuple[int, str] | None]:
    """``(overrides, None)`` after Kafka's incremental ``ops`` ``(name, op, value)``: SET a
    value, DELETE back to the default, APPEND to / SUBTRACT from a list config; or
    ``(None, (error code, message))`` for a bad operation. Pure; :class:`ConfigError` on an
    unknown key."""
    merged = dict(current.to_dict())
    for name, op, value in ops:
        key = CONFIG_KEYS.get(name)
        if key is None:
            TopicConfig({name: value})  # raises the standard "unknown topic config" error
        if op == SET:
            if value is None:
                return None, (E.INVALID_REQUEST, f"null value not supported for {name}")
            merged[name] = value
        elif op == DELETE:
            merged.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if key.type != "list":
                return None, (E.INVALID_CONFIG, f"config value {'append' if op == APPEND else 'subtract'}"
                                                f" is not allowed for config key {name}")
            items = list(current[name])
            for v in _split_list(value):
                if op == APPEND and v not in items:
                    items.append(v)
                elif op == SUBTRACT and v in items:
                    items.remove(v)
            merged[name] = ",".join(items)
        else:
            return None, (E.INVALID_REQUEST, f"unknown config operation {op} for {name}")
    return merged, None


def apply_topic_configs(broker, name: str, overrides: Mapping, validate_only: bool,
                        ops: list | None = None) -> tuple[int, str | None]:
    """Make ``overrides`` the topic's config overrides (everything else back to defaults),
    or with incremental ``ops`` (``(name, op, value)``), apply them to the config as committed
    when the change lands (``overrides``: their result on the cached config, for validation).
    A conditional commit (:func:`kafkastore.topics.alter_topic`): a racing change of the
    partition count or of other configs on any broker is kept. Blocking."""
    try:
        layout.validate_topic_name(name)
    except ConfigError as exc:
        return E.INVALID_TOPIC_EXCEPTION, str(exc)
    meta = broker.meta.topic(name)
    if meta is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}"
    try:
        new = TopicConfig.from_dict(overrides)
    except ConfigError as exc:
        return E.INVALID_CONFIG, str(exc)
    if validate_only:
        return E.NONE, None
    try:
        if ops is None:
            alter_topic(broker.storage, name, replace_configs=new.overrides)
        else:
            alter_topic(broker.storage, name, configs_from=lambda config: _incremental(config, ops))
    except UnknownTopicError as exc:
        return E.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
    except ConfigError as exc:
        return E.INVALID_CONFIG, str(exc)
    except KafkaStoreError as exc:
        log.warning("altering configs of topic %r failed: %s", name, exc)
        return E.KAFKA_STORAGE_ERROR, str(exc)
    finally:
        broker.meta.forget_topic(name)
    return E.NONE, None


def _incremental(config: TopicConfig, ops: list) -> dict:
    """:func:`incremental_overrides` for a commit: a refusal raises (it does not depend on the
    current values, so the validation on the cached config already answered it)."""
    overrides, refused = incremental_overrides(config, ops)
    if refused is not None:
        raise ConfigError(refused[1])
    return overrides


def _alter_one(broker, resource, incremental: bool, validate_only: bool) -> tuple[int, str | None]:
    """One resource of either request. Blocking."""
    if resource.resource_type != TOPIC_RESOURCE:
        return (E.INVALID_REQUEST, f"resource type {resource.resource_type} is not alterable: only topic "
                "configs are (a kafkastore broker takes its settings from its command line)")
    name = resource.resource_name
    if is_internal_topic(name):
        return E.INVALID_REQUEST, f"the configs of internal topic {name!r} are kafkastore's"
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        return E.INVALID_REQUEST, f"duplicate config keys in the request for {name!r}"
    if incremental:
        meta = broker.meta.topic(name)
        if meta is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}"
        ops = [(c.name, c.config_operation, c.value) for c in resource.configs]
        try:
            overrides, refused = incremental_overrides(meta.config, ops)
        except ConfigError as exc:
            return E.INVALID_CONFIG, str(exc)
        if refused is not None:
            return refused
    else:
        nulls = [c.name for c in resource.configs if c.value is None]
        if nulls:
            return E.INVALID_REQUEST, f"null value not supported for {', '.join(nulls)}"
        overrides, ops = {c.name: c.value for c in resource.configs}, None
    return apply_topic_configs(broker, name, overrides, validate_only, ops)


async def _handle(ctx: RequestContext, request, incremental: bool):
    mod = ctx.response_module
    keys = [(r.resource_type, r.resource_name) for r in request.resources]
    out = []
    for r in request.resources:
        if keys.count((r.resource_type, r.resource_name)) > 1:  # as Kafka: every copy is refused
            err, msg = E.INVALID_REQUEST, "duplicate resource in request"
        elif r.resource_type == TOPIC_RESOURCE and not ctx.authorize(
                Operation.ALTER_CONFIGS, ResourceType.TOPIC, r.resource_name):
            err, msg = E.TOPIC_AUTHORIZATION_FAILED, None
        elif r.resource_type != TOPIC_RESOURCE and not ctx.authorize(
                Operation.ALTER_CONFIGS, ResourceType.CLUSTER):
            err, msg = E.CLUSTER_AUTHORIZATION_FAILED, None
        else:
            err, msg = await ctx.run(_alter_one, ctx.broker, r, incremental, bool(request.validate_only))
        out.append(make(mod, "AlterConfigsResourceResponse", error_code=err, error_message=msg,
                        resource_type=r.resource_type, resource_name=r.resource_name))
    return make(ctx.response_class, responses=tuple(out))


async def handle_alter_configs(ctx: RequestContext, request):
    """Kafka's (deprecated but still used) AlterConfigs: the given configs replace every override."""
    return await _handle(ctx, request, incremental=False)


async def handle_incremental_alter_configs(ctx: RequestContext, request):
    """KIP-339: SET / DELETE / APPEND / SUBTRACT single configs."""
    return await _handle(ctx, request, incremental=True)


def register(registry: HandlerTable) -> None:
    registry.serve(ALTER_CONFIGS, handle_alter_configs)
    registry.serve(INCREMENTAL_ALTER_CONFIGS, handle_incremental_alter_configs)
