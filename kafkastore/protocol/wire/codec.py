"""The Kafka wire codec: frames, request headers, request bodies and responses.

Pure functions over bytes (no sockets, no clocks). Message bodies are the
dataclasses that the ``kio`` package generates from Kafka's JSON message
schemas (``clients/src/main/resources/common/message/*.json``); this module
adds what kio leaves to the caller:

* framing: every request and response is ``int32 size`` + ``size`` bytes;
* the request header, parsed by hand because its version depends on the
  body's schema (v2, with tagged fields, exactly when the request version is
  "flexible") and because a server must read the correlation id of a request
  it cannot otherwise decode (unknown API key or version);
* the response header: v1 (correlation id + tagged fields) for flexible
  responses, v0 otherwise, and always v0 for ApiVersions (KIP-511), which kio
  encodes in each response class's ``__header_schema__``;
* :func:`make`, which builds a response entity of any version from keyword
  arguments, dropping fields that version does not have and converting plain
  ints to kio's error-code and duration types, so that one handler serves a
  whole range of versions.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any

from kio import index as kio_index
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from ...errors import ProtocolError
from . import frame_check

_HEADER = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")




@dataclass(frozen=True)
class RequestHeader:
    """What every request starts with."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def frame(payload: bytes) -> bytes:
    """``payload`` with its int32 size prefix."""
    return _SIZE.pack(len(payload)) + payload


def peek_header(buf) -> RequestHeader:
    """API key, version and correlation id of a request (the fixed part of every header version)."""
    if len(buf) < _HEADER.size:
        raise ProtocolError(f"request of {len(buf)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEADER.unpack_from(buf, 0)
    return RequestHeader(api_key, api_version, correlation_id, None)


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("bad unsigned varint in request header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def parse_header(buf, flexible: bool) -> tuple[RequestHeader, int]:
    """Parse a request header (v1, or v2 when ``flexible``); returns it and where the body starts.

    The client id is a non-compact nullable string even in v2 (Kafka kept it
    so that every broker can read it).
    """
    head = peek_header(buf)
    pos = _HEADER.size
    if len(buf) < pos + 2:
        raise ProtocolError("request header ends before its client id")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    client_id = None
    if n >= 0:
        if len(buf) < pos + n:
            raise ProtocolError("request header ends inside its client id")
        try:
            client_id = bytes(buf[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("client id is not UTF-8") from None
        pos += n
    elif n != -1:
        raise ProtocolError(f"bad client id length {n}")
    if flexible:
        count, pos = _read_uvarint(buf, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(buf, pos)
            size, pos = _read_uvarint(buf, pos)
            pos += size
            if pos > len(buf):
                raise ProtocolError("request header's tagged fields run past the request")
    return RequestHeader(head.api_key, head.api_version, head.correlation_id, client_id), pos


@lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    """kio's (or :mod:`.legacy_messages`') request class for an API key and version (KeyError if none)."""
    try:
        return kio_index.load_request_schema(api_key, version)
    except (kio_index.KioIndexError, ImportError, AttributeError, ValueError):
        pass
    # lazy: start-up time: building the legacy classes is ~55 ms of import, and only
    # Produce v0-2 / Fetch v0-3 (which kio lacks) need them
    from . import legacy_messages
    return legacy_messages.request_class(api_key, version)


@lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    """kio's (or :mod:`.legacy_messages`') response class for an API key and version (KeyError if none)."""
    try:
        return kio_index.load_response_schema(api_key, version)
    except (kio_index.KioIndexError, ImportError, AttributeError, ValueError):
        pass
    # lazy: start-up time: building the legacy classes is ~55 ms of import, and only
    # Produce v0-2 / Fetch v0-3 (which kio lacks) need them
    from . import legacy_messages
    return legacy_messages.response_class(api_key, version)


def response_module(api_key: int, version: int) -> ModuleType:
    """The module holding a response version's nested classes (for :func:`make`)."""
    import sys
    return sys.modules[response_class(api_key, version).__module__]


@lru_cache(maxsize=None)
def _reader(cls: type):
    return entity_reader(cls)


@lru_cache(maxsize=None)
def _writer(cls: type):
    return entity_writer(cls)


def is_flexible(api_key: int, version: int) -> bool:
    """Whether this request version uses the v2 header (tagged fields)."""
    return bool(request_class(api_key, version).__flexible__)


def decode_request(api_key: int, version: int, buf, offset: int):
    """Decode the body of a request at ``offset`` of ``buf``; :class:`ProtocolError` if it is malformed.

    The body is first walked by :func:`frame_check.check_body`, so no length it
    claims can exceed the bytes received; trailing bytes after it are ignored.
    """
    cls = request_class(api_key, version)
    try:
        # Bound every length by the bytes received before kio allocates what they claim.
        end = frame_check.check_body(cls, buf, offset)
    except ProtocolError as exc:
        raise ProtocolError(f"malformed {cls.__name__} v{version}: {exc}") from None
    try:
        entity, size = _reader(cls)(bytes(buf[:end]) if end != len(buf) else buf, offset)
    except ProtocolError:
        raise
    except Exception as exc:  # kio raises assorted errors (ValueError, IndexError, its own) on bad bytes
        raise ProtocolError(f"cannot decode {cls.__name__} v{version}: {exc!r}") from None
    if offset + size != end:
        raise ProtocolError(f"{cls.__name__} v{version}: decoded {size} bytes, the schema walk {end - offset}")
    # Bytes after the body are ignored, as Kafka's parser does (librdkafka pads Metadata v12).
    return entity


def encode_request(entity, correlation_id: int, client_id: str | None = "kafkastore") -> bytes:
    """A framed request (header + body): for tests and tools that talk to a broker."""
    cls = type(entity)
    out = io.BytesIO()
    cid = (client_id or "").encode()
    out.write(_HEADER.pack(cls.__api_key__, cls.__version__, correlation_id))
    if client_id is None:
        out.write(_I16.pack(-1))
    else:
        out.write(_I16.pack(len(cid)) + cid)
    if cls.__flexible__:
        out.write(b"\x00")
    _writer(cls)(out, entity)
    return frame(out.getvalue())


def encode_response(correlation_id: int, entity) -> bytes:
    """A framed response: header (v0 or v1, as the response class says) + body."""
    cls = type(entity)
    out = io.BytesIO()
    out.write(_SIZE.pack(0))
    out.write(_SIZE.pack(correlation_id))
    if cls.__header_schema__.__version__ >= 1:
        out.write(b"\x00")  # no tagged fields
    _writer(cls)(out, entity)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(buf, api_key: int, version: int):
    """Decode an unframed response (correlation id, entity): for tests and tools."""
    cls = response_class(api_key, version)
    (correlation_id,) = _SIZE.unpack_from(buf, 0)
    pos = 4
    if cls.__header_schema__.__version__ >= 1:
        count, pos = _read_uvarint(buf, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(buf, pos)
            size, pos = _read_uvarint(buf, pos)
            pos += size
    entity, _ = _reader(cls)(buf, pos)
    return correlation_id, entity


@lru_cache(maxsize=None)
def _fields(cls: type) -> dict[str, str | None]:
    return {f.name: f.metadata.get("kafka_type") for f in dataclasses.fields(cls)}


def _convert(kind: str | None, value: Any) -> Any:
    if kind == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kind == "datetime_i64" and isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.timezone.utc)
    return value


def make(cls_or_module, name: str | None = None, /, **kwargs):
    """Build a kio entity from keyword arguments that may be a superset of its fields.

    ``make(cls, **kw)`` or ``make(module, "ClassName", **kw)``. Fields the
    class does not have (those of other versions) are dropped; ints become
    :class:`ErrorCode` / ``timedelta`` where the schema says so;
    ``throttle_time`` defaults to 0.
    """
    cls = getattr(cls_or_module, name) if name is not None else cls_or_module
    fields = _fields(cls)
    if "throttle_time" in fields and "throttle_time" not in kwargs:
        kwargs["throttle_time"] = 0
    return cls(**{k: _convert(fields[k], v) for k, v in kwargs.items() if k in fields})
