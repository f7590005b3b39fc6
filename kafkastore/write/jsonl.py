"""JSON lines in and out of the CLI (DESIGN.md section 7).

In (``produce``)::

    {"key": str|null, "value": str|object|null, "headers": [[k, v], ...],
     "timestamp": ms, "partition": int}

``value`` is required; a string is sent as its UTF-8 bytes, any other JSON value
as its compact JSON text. The other fields ``consume`` writes (``topic``,
``offset``) are accepted and ignored; any other field is an error. A key, value or header value may also be
``{"base64": "..."}`` (what ``consume`` prints for bytes that are not UTF-8), so
``consume | produce`` copies a topic faithfully.

Out (``consume``)::

    {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}

with key, value and header values as UTF-8 text, ``{"base64": ...}`` when not
UTF-8, null when null.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from ..errors import ConfigError

_FIELDS = {"key", "value", "headers", "timestamp", "partition"}
# What ``consume`` writes besides those: accepted and ignored, so ``consume | produce`` works.
_IGNORED = {"topic", "offset"}
# Readers hold timestamps as int64 microseconds.
MAX_TIMESTAMP_MS = (2 ** 63 - 1) // 1000


@dataclass(frozen=True)
class ProduceRecord:
    """One parsed input line."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int | None
    partition: int | None


def _utf8(text: str, what: str, lineno: int) -> bytes:
    """``text`` as UTF-8; a lone surrogate (``"\\ud800"`` in JSON) is a ConfigError, not a crash."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"line {lineno}: {what} holds a lone surrogate (\\u{ord(text[exc.start]):04x}), "
            f"which is not Unicode text; send bytes as {{\"base64\": ...}}") from None


def _reject_constant(name: str):
    raise ConfigError(f"{name} is not JSON (JSON has no NaN or Infinity)")


def _bytes_field(value, what: str, lineno: int) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _utf8(value, what, lineno)
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except ValueError:
            raise ConfigError(f"line {lineno}: {what} has invalid base64") from None
    if what == "value":
        return _utf8(json.dumps(value, separators=(",", ":"), ensure_ascii=False), what, lineno)
    raise ConfigError(f"line {lineno}: {what} must be a string, null or {{\"base64\": ...}}, "
                      f"got {type(value).__name__}")


def parse_produce_line(line: str, lineno: int) -> ProduceRecord:
    """Parse one ``produce`` input line; ConfigError names the line and the problem."""
    try:
        obj = json.loads(line, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ConfigError as exc:
        raise ConfigError(f"line {lineno}: not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"line {lineno}: expected a JSON object like {{\"key\": ..., \"value\": ...}}")
    extra = set(obj) - _FIELDS - _IGNORED
    if extra:
        raise ConfigError(f"line {lineno}: unknown field(s) {sorted(extra)}; expected {sorted(_FIELDS)}")
    if "value" not in obj:
        raise ConfigError(f"line {lineno}: missing \"value\" (use null for a tombstone)")
    headers_in = obj.get("headers") or []
    if not isinstance(headers_in, list):
        raise ConfigError(f"line {lineno}: headers must be a list of [key, value] pairs")
    headers = []
    for h in headers_in:
        if not (isinstance(h, list) and len(h) == 2 and isinstance(h[0], str)):
            raise ConfigError(f"line {lineno}: each header must be [\"key\", value], got {h!r}")
        _utf8(h[0], "header key", lineno)
        headers.append((h[0], _bytes_field(h[1], "header value", lineno)))
    ts = obj.get("timestamp")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int)
                           or not 0 <= ts <= MAX_TIMESTAMP_MS):
        raise ConfigError(f"line {lineno}: timestamp must be an integer between 0 and "
                          f"{MAX_TIMESTAMP_MS} (epoch ms)")
    partition = obj.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                  or partition < 0):
        raise ConfigError(f"line {lineno}: partition must be a non-negative integer")
    return ProduceRecord(_bytes_field(obj.get("key"), "key", lineno),
                         _bytes_field(obj["value"], "value", lineno),
                         tuple(headers), ts, partition)


def text_or_base64(data: bytes | None):
    """UTF-8 text, ``{"base64": ...}`` for other bytes, None for None."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def format_consume_record(topic: str, partition: int, offset: int, timestamp: int,
                          key: bytes | None, value: bytes | None,
                          headers) -> str:
    """One ``consume`` output line."""
    return json.dumps({
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        "key": text_or_base64(key),
        "value": text_or_base64(value),
        "headers": [[k, text_or_base64(v)] for k, v in (headers or ())],
    }, ensure_ascii=False, separators=(",", ":"))
