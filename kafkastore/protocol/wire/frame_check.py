"""A pure-Python pre-scan of a request body: every length is bounded by the bytes received.

kio's native reader trusts the lengths a request claims: a 13-byte flexible
request whose array claims 2^31 elements made it allocate tens of gigabytes
and abort the process. :func:`check_body` walks the body by the message
schema (the same kio dataclasses the decoder uses) before kio sees it and
refuses, with :class:`ProtocolError`, any array, string or bytes length
larger than what is left of the frame, and any tagged field that runs past
it. Only what passes is handed to kio, so the decoder's allocations are
bounded by the frame size (itself bounded by the listener's request limit).

A request may also hold at most :data:`MAX_REQUEST_ELEMENTS` array elements in all
(partitions of a Fetch, Produce or OffsetFetch, topics of a Metadata...): the handlers
build a per-element answer on the event loop, so a request naming hundreds of thousands
of partitions held every other client for seconds. Kafka has no such count limit (only
the request size); 50,000 is far above what a client sends (a topic has at most 10,000
partitions here) and keeps the worst request's answer well under a second.

The walk returns where the body ends; bytes after it are tolerated, as
Kafka's own parser does (librdkafka's Metadata v12 for all topics carries
three padding bytes after its tagged fields).
"""
from __future__ import annotations

import dataclasses
import struct
import threading
from functools import lru_cache
from typing import Callable

from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveTupleField, classify_field,
                                    get_field_tag, is_optional)

from ...errors import ProtocolError

#: Array elements one request may hold in all (see the module docstring).
MAX_REQUEST_ELEMENTS = 50_000

# Elements left to the request being walked on this thread (check_body sets it).
_budget = threading.local()

# skip(buf, pos, end) -> new pos; raises ProtocolError when the value does not fit in [pos, end).
Skip = Callable[[memoryview, int, int], int]

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
          "uint64": 8, "float64": 8, "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8,
          "error_code": 2, "datetime_i64": 8}
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def _short(what: str, pos: int, need: int, end: int) -> ProtocolError:
    return ProtocolError(f"{what} at byte {pos} needs {need} bytes, {max(end - pos, 0)} left")


def uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's 32-bit lengths and counts)."""
    value = shift = 0
    while True:
        if pos >= end:
            raise ProtocolError(f"varint runs past the request at byte {pos}")
        if shift > 28:
            raise ProtocolError(f"varint longer than 5 bytes at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _fixed(n: int) -> Skip:
    def skip(buf, pos, end):
        if pos + n > end:
            raise _short("field", pos, n, end)
        return pos + n
    return skip


def _sized(kind: str, flexible: bool) -> Skip:
    """string / bytes / records: compact (uvarint length + 1, 0 = null) or int16 / int32 length."""
    if flexible:
        def skip(buf, pos, end):
            n, p = uvarint(buf, pos, end)
            n -= 1
            if n > end - p:
                raise _short(kind, pos, n, end - p + pos)
            return p + max(n, 0)
        return skip
    head = _I16 if kind == "string" else _I32

    def skip(buf, pos, end):
        if pos + head.size > end:
            raise _short(kind + " length", pos, head.size, end)
        (n,) = head.unpack_from(buf, pos)
        p = pos + head.size
        if n < -1:
            raise ProtocolError(f"{kind} length {n} at byte {pos}")
        if n > end - p:
            raise _short(kind, pos, n, end - p + pos)
        return p + max(n, 0)
    return skip


def _array(element: Skip, min_size: int, flexible: bool) -> Skip:
    """An array whose count is checked against the bytes left before any element is walked."""
    per = max(min_size, 1)

    def skip(buf, pos, end):
        if flexible:
            n, p = uvarint(buf, pos, end)
            n -= 1
        else:
            if pos + 4 > end:
                raise _short("array length", pos, 4, end)
            (n,) = _I32.unpack_from(buf, pos)
            p = pos + 4
            if n < -1:
                raise ProtocolError(f"array length {n} at byte {pos}")
        if n * per > end - p:
            raise ProtocolError(f"array at byte {pos} claims {n} elements, {end - p} bytes left")
        left = getattr(_budget, "left", MAX_REQUEST_ELEMENTS) - max(n, 0)
        if left < 0:
            raise ProtocolError(f"request holds more than {MAX_REQUEST_ELEMENTS} array elements "
                                f"(partitions, topics...) in all")
        _budget.left = left
        for _ in range(n):
            p = element(buf, p, end)
        return p
    return skip


def _tagged(tags: dict[int, Skip]) -> Skip:
    """The tagged-field section: count, then (tag, size, value); known tags walked inside their size."""
    def skip(buf, pos, end):
        count, p = uvarint(buf, pos, end)
        if count > end - p:
            raise ProtocolError(f"{count} tagged fields at byte {pos}, {end - p} bytes left")
        for _ in range(count):
            tag, p = uvarint(buf, p, end)
            size, p = uvarint(buf, p, end)
            if size > end - p:
                raise _short(f"tagged field {tag}", p, size, end)
            inner = tags.get(tag)
            if inner is not None:
                inner(buf, p, p + size)
            p += size
        return p
    return skip


@lru_cache(maxsize=None)
def _plan(cls: type) -> tuple[Skip, int]:
    """``(skip, minimum size)`` of one entity class."""
    flexible = bool(cls.__flexible__)
    steps: list[Skip] = []
    tags: dict[int, Skip] = {}
    min_size = 1 if flexible else 0
    for f in dataclasses.fields(cls):
        step, size = _field(f, flexible)
        tag = get_field_tag(f)
        if tag is not None:
            tags[int(tag)] = step
            continue
        steps.append(step)
        min_size += size
    if flexible:
        steps.append(_tagged(tags))
    steps_t = tuple(steps)

    def skip(buf, pos, end):
        for step in steps_t:
            pos = step(buf, pos, end)
        return pos
    return skip, min_size


def _field(f: dataclasses.Field, flexible: bool) -> tuple[Skip, int]:
    kind = classify_field(f)
    if isinstance(kind, (EntityField, EntityTupleField)):
        inner, size = _plan(kind.type_)
        if isinstance(kind, EntityTupleField):
            return _array(inner, size, flexible), 1
        if is_optional(f):  # nullable struct: int8 marker (-1 null) before the value
            def skip(buf, pos, end):
                if pos >= end:
                    raise _short("struct marker", pos, 1, end)
                return pos + 1 if buf[pos] == 0xFF else inner(buf, pos + 1, end)
            return skip, 1
        return inner, size
    kafka_type = f.metadata.get("kafka_type")
    if kafka_type in _FIXED:
        step, size = _fixed(_FIXED[kafka_type]), _FIXED[kafka_type]
    elif kafka_type in ("string", "bytes", "records"):
        step, size = _sized(kafka_type, flexible), 1
    else:
        raise ProtocolError(f"field {f.name} of unknown type {kafka_type!r}")
    if isinstance(kind, PrimitiveTupleField):
        return _array(step, size, flexible), 1
    return step, size


def check_body(cls: type, buf, offset: int) -> int:
    """Walk a request body of kio class ``cls`` at ``offset``; where it ends.

    Raises :class:`ProtocolError` when any length, count or tagged field runs
    past the end of ``buf``, or when the request holds more than
    :data:`MAX_REQUEST_ELEMENTS` array elements in all.
    """
    view = memoryview(buf)
    skip, _ = _plan(cls)
    _budget.left = MAX_REQUEST_ELEMENTS
    return skip(view, offset, len(view))
