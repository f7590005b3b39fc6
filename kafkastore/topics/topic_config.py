"""Per-topic configuration with Kafka's names, types, defaults and validators.

The keys, defaults and ranges are those of Kafka 3.9's ``LogConfig`` (the
topic-level configs). Two deliberate differences:

* ``segment.bytes`` keeps Kafka 3.x's minimum of 14 bytes
  (``LegacyRecord.RECORD_OVERHEAD_V0``) rather than Kafka 4's 1 MiB, so tests
  and small deployments can roll segments often.
* ``compression.type`` also accepts ``none`` as an alias of Kafka's
  ``uncompressed``; enumerated values are matched case-insensitively and
  stored in Kafka's spelling.

Configs that only matter to a real broker cluster (``min.insync.replicas``,
``unclean.leader.election.enable``, ``preallocate``, ``flush.*``) are
accepted and validated so that exported Kafka configs load, but have no effect.
The partition count is topic metadata, not a config: see :mod:`kafkastore.topics`.

Values come from strings (``--config key=value`` on the command line) or
from YAML / JSON values (int, float, bool, str, list). A bad key or value
raises :class:`ConfigError` naming the key and the expected shape.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import ConfigError

INT_MAX = 2 ** 31 - 1
INT_MIN = -2 ** 31
LONG_MAX = 2 ** 63 - 1
LONG_MIN = -2 ** 63
_INTEGER_RE = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class ConfigKey:
    """Definition of one topic config: Kafka type, default, validator and what it means."""

    name: str
    type: str  # int | long | double | boolean | string | list
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    used: bool = True

    def expected(self) -> str:
        """The expected shape and range, for error messages."""
        if self.type == "boolean":
            return "true or false"
        if self.type == "list":
            return "a comma-separated list of " + " / ".join(self.choices)
        if self.choices:
            return "one of " + ", ".join(self.choices)
        noun = {"int": "an integer", "long": "an integer", "double": "a number"}.get(self.type, "a string")
        if self.minimum is not None and self.maximum is not None:
            return f"{noun} between {_fmt(self.minimum)} and {_fmt(self.maximum)}"
        if self.minimum is not None:
            return f"{noun} >= {_fmt(self.minimum)}"
        return noun


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_DAY_MS = 24 * 60 * 60 * 1000
_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("cleanup.policy", "list", ("delete",),
              "delete old segments (retention), compact by key, or both",
              choices=("compact", "delete")),
    ConfigKey("compression.type", "string", "producer",
              "codec of stored batches; 'producer' keeps the producer's",
              choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigKey("compression.gzip.level", "int", -1, "gzip level (-1 default, 1-9)", -1, 9),
    ConfigKey("compression.lz4.level", "int", 9, "lz4 level", 1, 17),
    ConfigKey("compression.zstd.level", "int", 3, "zstd level", -131072, 22),
    ConfigKey("delete.retention.ms", "long", _DAY_MS,
              "how long tombstones and transaction markers survive compaction", 0),
    ConfigKey("file.delete.delay.ms", "long", 60_000,
              "grace period before unlisted files and old manifest versions are deleted", 0),
    ConfigKey("index.interval.bytes", "int", 4096, "bytes between offset index entries", 0),
    ConfigKey("max.compaction.lag.ms", "long", LONG_MAX,
              "longest time a record may stay uncompacted", 1),
    ConfigKey("max.message.bytes", "int", 1024 * 1024 + 12, "largest record batch accepted", 0),
    ConfigKey("message.timestamp.type", "string", "CreateTime",
              "record timestamps from the producer or the append time",
              choices=("CreateTime", "LogAppendTime")),
    ConfigKey("message.timestamp.before.max.ms", "long", LONG_MAX,
              "how far in the past a CreateTime timestamp may be", 0),
    ConfigKey("message.timestamp.after.max.ms", "long", LONG_MAX,
              "how far in the future a CreateTime timestamp may be", 0),
    ConfigKey("min.cleanable.dirty.ratio", "double", 0.5,
              "dirty / total bytes above which compaction runs", 0, 1),
    ConfigKey("min.compaction.lag.ms", "long", 0, "shortest time a record stays uncompacted", 0),
    ConfigKey("retention.bytes", "long", -1, "partition size kept by retention; negative: no limit",
              LONG_MIN),
    ConfigKey("retention.ms", "long", 7 * _DAY_MS, "age kept by retention; -1: forever", -1),
    ConfigKey("segment.bytes", "int", 1024 ** 3, "segment size at which a new segment is rolled", 14),
    ConfigKey("segment.index.bytes", "int", 10 * 1024 * 1024, "largest offset index", 4),
    ConfigKey("segment.jitter.ms", "long", 0, "random jitter subtracted from segment.ms", 0),
    ConfigKey("segment.ms", "long", 7 * _DAY_MS, "segment age at which a new segment is rolled", 1),
    # Accepted for compatibility with exported Kafka configs; no effect here.
    ConfigKey("flush.messages", "long", LONG_MAX, "(no effect)", 1, used=False),
    ConfigKey("flush.ms", "long", LONG_MAX, "(no effect)", 0, used=False),
    ConfigKey("min.insync.replicas", "int", 1, "(no effect)", 1, used=False),
    ConfigKey("preallocate", "boolean", False, "(no effect)", used=False),
    ConfigKey("unclean.leader.election.enable", "boolean", False, "(no effect)", used=False),
)
CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}
_ALIASES = {("compression.type", "none"): "uncompressed"}


def _bad(key: ConfigKey, raw: Any, why: str = "") -> ConfigError:
    extra = f" ({why})" if why else ""
    return ConfigError(f"invalid value {raw!r} for topic config {key.name!r}: expected {key.expected()}{extra}")


def _parse_value(key: ConfigKey, raw: Any) -> Any:
    """Canonical value of ``raw`` (a string or a YAML/JSON value) for ``key``."""
    t = key.type
    if t in ("int", "long"):
        if isinstance(raw, bool):
            raise _bad(key, raw)
        if isinstance(raw, str) and _INTEGER_RE.match(raw.strip()):
            value = int(raw.strip())
        elif isinstance(raw, int):
            value = raw
        else:
            raise _bad(key, raw)
        lo, hi = (INT_MIN, INT_MAX) if t == "int" else (LONG_MIN, LONG_MAX)
        if not lo <= value <= hi:
            raise _bad(key, raw, f"out of range for a Kafka {t}")
    elif t == "double":
        if isinstance(raw, bool):
            raise _bad(key, raw)
        try:
            value = float(raw.strip() if isinstance(raw, str) else raw)
        except (TypeError, ValueError):
            raise _bad(key, raw) from None
        if not math.isfinite(value):
            raise _bad(key, raw)
    elif t == "boolean":
        if isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            value = raw.strip().lower() == "true"
        else:
            raise _bad(key, raw)
    elif t == "list":
        if isinstance(raw, str):
            items = [x.strip() for x in raw.split(",")]
        elif isinstance(raw, (list, tuple)) and all(isinstance(x, str) for x in raw):
            items = [x.strip() for x in raw]
        else:
            raise _bad(key, raw)
        items = [x.lower() for x in items if x]
        if not items or any(x not in key.choices for x in items):
            raise _bad(key, raw)
        return tuple(sorted(set(items)))
    else:
        if not isinstance(raw, str):
            raise _bad(key, raw)
        value = raw.strip()
        if key.choices:
            value = _ALIASES.get((key.name, value.lower()), value)
            match = [c for c in key.choices if c.lower() == value.lower()]
            if not match:
                raise _bad(key, raw)
            value = match[0]
        return value
    if key.minimum is not None and value < key.minimum:
        raise _bad(key, raw)
    if key.maximum is not None and value > key.maximum:
        raise _bad(key, raw)
    return value


def _lookup(name: Any) -> ConfigKey:
    if not isinstance(name, str) or name not in CONFIG_KEYS:
        close = difflib.get_close_matches(str(name), CONFIG_KEYS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown topic config {name!r}{hint} (known: {', '.join(sorted(CONFIG_KEYS))})")
    return CONFIG_KEYS[name]


def _render(key: ConfigKey, value: Any) -> Any:
    """JSON / describe form of a canonical value (lists as Kafka's comma-separated string)."""
    return ",".join(value) if key.type == "list" else value


@dataclass(frozen=True, init=False)
class TopicConfig:
    """A topic's config overrides; everything else is Kafka's default.

    Construct from a mapping of key -> value (strings or typed values);
    values are validated and stored canonically. Read with ``cfg["retention.ms"]``
    or the typed properties.
    """

    overrides: Mapping[str, Any]

    def __init__(self, overrides: Mapping[str, Any] | None = None):
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ConfigError(f"topic configs must be a mapping of key -> value, got {type(overrides).__name__}")
        parsed = {}
        for name, raw in (overrides or {}).items():
            key = _lookup(name)
            if raw is None:
                raise _bad(key, raw)
            parsed[name] = _parse_value(key, raw)
        object.__setattr__(self, "overrides", dict(sorted(parsed.items())))
        lo, hi = self["min.compaction.lag.ms"], self["max.compaction.lag.ms"]
        if lo > hi:  # Kafka's LogConfig.validateValues
            raise ConfigError(f"topic config min.compaction.lag.ms ({lo}) must not exceed "
                              f"max.compaction.lag.ms ({hi})")

    def __hash__(self):
        return hash(tuple(self.overrides.items()))

    # -- construction ----------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "TopicConfig":
        """From a mapping (YAML / JSON / ``to_dict`` output)."""
        return cls(d)

    @classmethod
    def from_strings(cls, items: Iterable[str]) -> "TopicConfig":
        """From ``key=value`` strings, as given to ``--config``."""
        return cls(parse_assignments(items))

    def with_updates(self, set_configs: Mapping[str, Any] | None = None,
                     delete: Iterable[str] = ()) -> "TopicConfig":
        """A copy with ``set_configs`` overridden and ``delete`` keys back to their defaults."""
        merged = dict(self.overrides)
        for name in delete:
            _lookup(name)
            merged.pop(name, None)
        merged.update(set_configs or {})
        return TopicConfig(merged)

    # -- reading ---------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        key = _lookup(name)
        return self.overrides.get(name, key.default)

    def get(self, name: str) -> Any:
        """Effective value of ``name`` (the override or Kafka's default)."""
        return self[name]

    def is_default(self, name: str) -> bool:
        """Whether ``name`` is not overridden."""
        _lookup(name)
        return name not in self.overrides

    def to_dict(self, include_defaults: bool = False) -> dict[str, Any]:
        """JSON-ready values: only overrides (as stored and described), or every key."""
        names = sorted(CONFIG_KEYS) if include_defaults else list(self.overrides)
        return {n: _render(CONFIG_KEYS[n], self[n]) for n in names}

    def describe(self, include_defaults: bool = False) -> dict[str, str]:
        """Values as Kafka's ``kafka-configs --describe`` prints them (strings)."""
        out = {}
        for name, value in self.to_dict(include_defaults).items():
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    # -- typed accessors ---------------------------------------------------------
    @property
    def cleanup_policy(self) -> tuple[str, ...]:
        return self["cleanup.policy"]

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compression_type(self) -> str:
        return self["compression.type"]

    @property
    def compression_codec(self) -> str | None:
        """Codec to store with (``none``, ``gzip``, ...), or None to keep the producer's."""
        value = self.compression_type
        if value == "producer":
            return None
        return "none" if value == "uncompressed" else value

    @property
    def segment_bytes(self) -> int:
        return self["segment.bytes"]

    @property
    def segment_ms(self) -> int:
        return self["segment.ms"]

    @property
    def segment_index_bytes(self) -> int:
        return self["segment.index.bytes"]

    @property
    def index_interval_bytes(self) -> int:
        return self["index.interval.bytes"]

    @property
    def retention_ms(self) -> int:
        """-1 (or any negative): keep forever."""
        return self["retention.ms"]

    @property
    def retention_bytes(self) -> int:
        """Negative: no size limit."""
        return self["retention.bytes"]

    @property
    def min_compaction_lag_ms(self) -> int:
        return self["min.compaction.lag.ms"]

    @property
    def max_compaction_lag_ms(self) -> int:
        return self["max.compaction.lag.ms"]

    @property
    def delete_retention_ms(self) -> int:
        return self["delete.retention.ms"]

    @property
    def min_cleanable_dirty_ratio(self) -> float:
        return self["min.cleanable.dirty.ratio"]

    @property
    def max_message_bytes(self) -> int:
        return self["max.message.bytes"]

    @property
    def message_timestamp_type(self) -> str:
        return self["message.timestamp.type"]

    @property
    def file_delete_delay_ms(self) -> int:
        """Our grace period for garbage collection and manifest expiry."""
        return self["file.delete.delay.ms"]


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; ConfigError on an item without ``=`` or a repeated key."""
    out: dict[str, str] = {}
    if isinstance(items, str):
        items = [items]
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"bad topic config {item!r}: expected key=value, e.g. retention.ms=86400000")
        name, value = item.split("=", 1)
        name = name.strip()
        if name in out:
            raise ConfigError(f"topic config {name!r} given twice")
        out[name] = value
    return out
