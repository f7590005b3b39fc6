"""Spark's option strings, as the data source, the streaming source and the sink read them:
names matched case-insensitively to their spelling, values typed, and every refusal naming
the option and showing the shape it expects.

Stdlib only (and the log's errors): nothing here needs Spark, and the options are checked
on the driver before Spark plans anything.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Sequence

from kafkastore.errors import ConfigError

#: ``storage.<key>`` options are fsspec storage options (see :func:`storage_value`).
STORAGE_PREFIX = "storage."

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)


def pick_options(options: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Split Spark's ``options`` into the ones ``names`` lists (matched case-insensitively,
    keyed by their spelling in ``names``, values as strings) and the rest, as given.
    Unset options (None: Spark passes them so) are in neither."""
    canonical = {name.lower(): name for name in names}
    picked: dict[str, str] = {}
    rest: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        name = canonical.get(str(key).lower())
        if name is None:
            rest[key] = value
        else:
            picked[name] = str(value)
    return picked, rest


def gather_options(options: Mapping[str, Any], known: Sequence[str], *, owner: str,
                   ignored: Iterable[str] = (), shown: str = "storage.<key>"
                   ) -> tuple[dict[str, str], dict[str, Any]]:
    """The ``known`` options (as :func:`pick_options` picks them) and the ``storage.<key>``
    ones, typed by :func:`storage_value`. A name in ``ignored``, or under an ignored prefix
    (an entry ending in ``.``, like ``kafka.``), is accepted and dropped; any other name is a
    :class:`ConfigError` naming it, ``owner`` (what reads the options) and the known options
    (then ``shown``)."""
    given, rest = pick_options(options, known)
    skip = tuple(name.lower() for name in ignored)
    storage: dict[str, Any] = {}
    for key, value in rest.items():
        low = str(key).lower()
        if low.startswith(STORAGE_PREFIX):
            storage[low[len(STORAGE_PREFIX):]] = storage_value(str(value))
        elif not any(low == s or (s.endswith(".") and low.startswith(s)) for s in skip):
            raise ConfigError(f"unknown option {key!r} for {owner}; known options: "
                              f"{', '.join(known)}, {shown}")
    return given, storage


def storage_value(text: str) -> Any:
    """A ``storage.<key>`` option's string as fsspec wants it: bool, int, JSON, or the text."""
    # Spark options are strings; fsspec wants typed keyword arguments.
    stripped = text.strip()
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if re.fullmatch(r"-?\d+", stripped):
        return int(stripped)
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except ValueError:
            raise ConfigError(f"storage option value {text!r} looks like JSON but does not parse") from None
    return text


def integer(text: str, name: str, what: str) -> int:
    """Option ``name``'s integer; else a :class:`ConfigError` saying it expects ``what``."""
    try:
        return int(str(text).strip())
    except ValueError:
        raise ConfigError(f"option {name}: expected {what}, got {text!r}") from None


def positive_integer(text: str, name: str) -> int:
    """Option ``name``'s integer, at least 1."""
    value = integer(text, name, "a positive integer")
    if value < 1:
        raise ConfigError(f"option {name} must be a positive integer, got {text!r}")
    return value


def byte_count(text: str, name: str) -> int:
    """Option ``name``'s positive byte count: digits with an optional ``k``/``m``/``g``
    (binary units; ``128m``, ``1kib`` and ``64 MB`` alike)."""
    m = _SIZE_RE.match(str(text))
    value = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()] if m else 0
    if value < 1:
        raise ConfigError(f"option {name}: expected a positive byte count like 134217728 or "
                          f"128m, got {text!r}")
    return value
