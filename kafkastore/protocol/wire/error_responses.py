"""The error answer to any request: what a broker says when it cannot serve the request.

Kafka answers a request whose handling failed with that request's own response carrying
the error (``AbstractRequest.getErrorResponse``): every topic, partition, group or
transaction the request named comes back with the code, so the client retries exactly what
it asked for, on the same connection. Closing the connection instead costs a reconnect and
loses the error's meaning (some clients do not retry a request whose connection dropped).

The answer is built from the kio schemas, not written per API: a response field is filled
from the request entity at the same depth. An array of the response takes the request's
array whose entries are keyed the same way (topic name or id, partition index, group id,
transactional id), one answer entry per request entry; key fields are copied; every
``error_code`` gets the code and every ``error_message`` the message; anything else takes
its schema default, or -1 for offsets, ids and epochs, or the type's empty value.
"""
from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from functools import lru_cache

from kio.schema.errors import ErrorCode

from . import api_keys as K, codec

#: A request field that answers a response field of another name, both keys of an entry.
_SYNONYMS = {
    "partition_index": ("partition", "index", "partition_index"),
    "index": ("index", "partition_index", "partition"),
    "partition": ("partition", "partition_index", "index"),
    "name": ("name", "topic", "topic_name"),
    "topic": ("topic", "name", "topic_name"),
    "topic_name": ("topic_name", "name", "topic"),
    "group_id": ("group_id", "group"),
    "key": ("key",),
}

#: Fields that identify an entry (copied from the request, and used to pair arrays).
_KEYS = frozenset({"name", "topic", "topic_name", "topic_id", "partition_index", "partition",
                   "index", "group_id", "transactional_id", "resource_type", "resource_name",
                   "member_id", "key"})

# The group and transaction coordinators' APIs: a client that reads
# COORDINATOR_NOT_AVAILABLE looks the coordinator up again and retries, which is what a
# broker that cannot reach its store needs; KAFKA_STORAGE_ERROR there is fatal to them.
_COORDINATOR_APIS = frozenset({
    K.OFFSET_COMMIT, K.OFFSET_FETCH, K.FIND_COORDINATOR, K.JOIN_GROUP, K.HEARTBEAT,
    K.LEAVE_GROUP, K.SYNC_GROUP, K.DESCRIBE_GROUPS, K.LIST_GROUPS, K.INIT_PRODUCER_ID,
    K.ADD_PARTITIONS_TO_TXN, K.ADD_OFFSETS_TO_TXN, K.END_TXN, K.TXN_OFFSET_COMMIT,
    K.DELETE_GROUPS, K.OFFSET_DELETE})


def storage_error_code(api_key: int) -> ErrorCode:
    """The retriable code a request of ``api_key`` gets when the store failed under it:
    COORDINATOR_NOT_AVAILABLE for coordinator APIs, LEADER_NOT_AVAILABLE in Metadata's
    topics, else KAFKA_STORAGE_ERROR (Kafka's own answer when its log directory fails)."""
    if api_key in _COORDINATOR_APIS:
        return ErrorCode.coordinator_not_available
    if api_key == K.METADATA:
        return ErrorCode.leader_not_available
    return ErrorCode.kafka_storage_error


def error_response(api_key: int, api_version: int, request, code: int, message: str | None = None):
    """``request``'s response (API ``api_key`` at ``api_version``) with ``code`` in every
    error field and every entry of the request answered."""
    cls = codec.response_class(api_key, api_version)
    return _fill(cls, request, ErrorCode(code), message)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _entity_of(tp) -> type | None:
    """The entity class of a ``tuple[Entity, ...]`` type (or of one that may be None), else None."""
    args = typing.get_args(tp)
    if type(None) in args:   # Metadata's topics: None means all of them
        tp = next(a for a in args if a is not type(None))
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if args and dataclasses.is_dataclass(args[0]):
            return args[0]
    return None


def _arrays(src) -> dict[str, type]:
    if src is None or not dataclasses.is_dataclass(src):
        return {}
    hints = _hints(type(src))
    return {f.name: e for f in dataclasses.fields(src) if (e := _entity_of(hints[f.name])) is not None}


def _keys(cls: type) -> set[str]:
    names = {f.name for f in dataclasses.fields(cls)} & _KEYS
    return {alias for n in names for alias in _SYNONYMS.get(n, (n,))}


def _pair(name: str, entity: type, src) -> str | None:
    """The request array answered by response array ``name`` of ``entity`` entries."""
    candidates = _arrays(src)
    if name in candidates:
        return name
    # the most shared key fields; on a tie the request's first such array (Fetch's topics
    # before its forgotten_topics_data)
    want = _keys(entity)
    best, best_score = None, 0
    for n, e in candidates.items():
        score = len(want & _keys(e))
        if score > best_score:
            best, best_score = n, score
    return best


@dataclasses.dataclass(frozen=True)
class _Keyed:
    """One value of a request's plain list, standing in for an entry keyed by it."""
    field: str
    value: object


def _named_lists(entity: type, src) -> list[tuple[str, tuple]]:
    """``[(key field, values)]``: the request's one list of plain strings answered by entries
    of ``entity``, when ``entity`` has exactly one key field; else nothing."""
    keys = [f.name for f in dataclasses.fields(entity) if f.name in _KEYS]
    if len(keys) != 1 or src is None or not dataclasses.is_dataclass(src):
        return []
    hints = _hints(type(src))
    lists = [f.name for f in dataclasses.fields(src)
             if typing.get_origin(hints[f.name]) is tuple and _entity_of(hints[f.name]) is None
             and f.metadata.get("kafka_type") == "string"]
    return [(keys[0], getattr(src, lists[0]) or ())] if len(lists) == 1 else []


def _source_value(src, name: str):
    if isinstance(src, _Keyed):
        return src.value if name == src.field else dataclasses.MISSING
    if src is None or not dataclasses.is_dataclass(src):
        return dataclasses.MISSING
    have = {f.name for f in dataclasses.fields(src)}
    for alias in _SYNONYMS.get(name, (name,)):
        if alias in have:
            return getattr(src, alias)
    return dataclasses.MISSING


def _fill(cls: type, src, code: ErrorCode, message: str | None):
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        tp, kind = hints[f.name], f.metadata.get("kafka_type")
        entity = _entity_of(tp)
        if entity is not None:
            pair = _pair(f.name, entity, src)
            if pair is not None:
                items = getattr(src, pair) or ()
                values[f.name] = tuple(_fill(entity, item, code, message) for item in items)
            else:   # keyed by a plain list: FindCoordinator's keys, DescribeGroups' ids
                values[f.name] = tuple(_fill(entity, _Keyed(key, v), code, message)
                                       for key, names in _named_lists(entity, src) for v in names)
        elif typing.get_origin(tp) is tuple:    # an array of primitives: answered empty
            values[f.name] = ()
        elif dataclasses.is_dataclass(tp):      # a nested struct (not an array)
            nested = _source_value(src, f.name)
            values[f.name] = _fill(tp, None if nested is dataclasses.MISSING else nested,
                                   code, message)
        elif kind == "error_code":
            values[f.name] = code
        elif f.name == "error_message":
            values[f.name] = message
        elif f.name in _KEYS and (v := _source_value(src, f.name)) is not dataclasses.MISSING:
            values[f.name] = v
        else:
            values[f.name] = _default(f, tp, kind)
    return cls(**values)


def _default(f: dataclasses.Field, tp, kind: str | None):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    optional = type(None) in typing.get_args(tp)
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if optional:
        return None
    if kind in ("int64", "int32", "int16", "int8"):
        # offsets, ids, epochs, timestamps: -1 is Kafka's "none" for each of them
        return tp(-1) if kind in ("int64", "int32") else tp(0)
    if kind in ("uint16", "uint32", "uint64"):
        return tp(0)
    if kind == "float64":
        return tp(0.0)
    if kind == "bool":
        return False
    if kind == "string":
        return tp("")
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind == "bytes":
        return b""
    if kind == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, tz=datetime.timezone.utc)
    raise TypeError(f"no default for field {f.name} of kafka type {kind}")
