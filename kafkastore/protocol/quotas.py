"""Client quotas as Kafka's (KIP-13, KIP-124, KIP-257): byte rates and request time.

Quotas are stored in the root's shared :class:`~kafkastore.cluster_config.ClusterDocument`
``quotas`` (``{"entries": {key: {"entity": {...}, "values": {...}}}}``), so every
broker of the root enforces the same configuration; each broker measures and
enforces on its own (a client spread over N brokers may get up to N times its
quota in total, as with Kafka, where quotas are per broker too).

An *entity* is a dict with a ``user`` and/or ``client-id`` component; a component
whose value is None is that type's default (``<default>`` in Kafka's config
paths). For one quota key, the first entity in Kafka's precedence order that sets
it wins (:data:`PRECEDENCE`)::

    /users/<user>/clients/<client-id>      /users/<default>/clients/<client-id>
    /users/<user>/clients/<default>        /users/<default>/clients/<default>
    /users/<user>                          /users/<default>
                                           /clients/<client-id>
                                           /clients/<default>

The matched entity also decides which clients share a rate sensor (Kafka's
quota metric tags): a quota set for ``/users/alice`` is shared by all of alice's
client ids; one set for ``/clients/<default>`` applies to each client id
separately.

Rates are measured as Kafka's ``Rate`` sensor: ``samples`` windows of
``window_s`` seconds, the rate being the total over the retained windows divided
by the elapsed time (at least ``samples - 1`` full windows). A client over its
quota is throttled for ``(observed - quota) / quota * window`` (Kafka's
``QuotaUtils.throttleTime``), the time it takes the rate to fall back to the quota
if nothing more is recorded.
"""
from __future__ import annotations

import json
import math
import re
import threading
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..errors import ConfigError

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
#: Keys whose values must be whole numbers (Kafka declares them LONG).
_INTEGRAL_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
#: Kafka's defaults: quota.window.num and quota.window.size.seconds.
DEFAULT_SAMPLES = 11
DEFAULT_WINDOW_S = 1.0
#: The user of an unauthenticated connection (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = "ANONYMOUS"
_DEFAULT = object()  # a component present in the pattern as "<default>"

#: Kafka's order, most specific first: (user component, client-id component), where a name
#: stands for the client's own, _DEFAULT for the type's default and None for absent.
PRECEDENCE = (
    ("name", "name"), ("name", _DEFAULT), ("name", None),
    (_DEFAULT, "name"), (_DEFAULT, _DEFAULT), (_DEFAULT, None),
    (None, "name"), (None, _DEFAULT),
)

# Kafka's entity names are free strings; we refuse what cannot be a SASL user or a client id
# an operator meant: control characters and overlong names.
_NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,255}$")


def validate_entity(entity: Mapping[str, str | None]) -> dict:
    """``entity`` checked: one or both of ``user`` / ``client-id``, each a name or None
    (the default). Raises :class:`ConfigError` naming what is wrong."""
    if not entity:
        raise ConfigError("a quota entity needs a user, a client id or a default of either")
    out = {}
    for etype, name in entity.items():
        if etype not in ENTITY_TYPES:
            raise ConfigError(f"unknown quota entity type {etype!r}: expected one of "
                              f"{', '.join(ENTITY_TYPES)}")
        if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
            raise ConfigError(f"invalid {etype} name {name!r}: expected 1-255 printable characters")
        if name == "<default>":
            # Kafka's config paths spell the default so: a literal name would read as it.
            raise ConfigError(f"{etype} name '<default>' is reserved: use the default "
                              f"{etype} option instead")
        out[etype] = name
    return out


def validate_value(key: str, value) -> float:
    """A quota value checked: a known key, a positive number, whole for byte rates."""
    if key not in QUOTA_KEYS:
        raise ConfigError(f"unknown quota {key!r}: expected one of {', '.join(QUOTA_KEYS)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key} must be a number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{key} must be > 0, got {value:g} (delete the quota to remove a limit)")
    if key in _INTEGRAL_KEYS and value != int(value):
        raise ConfigError(f"{key} must be a whole number of bytes per second, got {value!r}")
    return float(value)


def entity_key(entity: Mapping[str, str | None]) -> str:
    """The stable key of an entity in the stored document."""
    return json.dumps(sorted(entity.items()), separators=(",", ":"))


def describe_entity(entity: Mapping[str, str | None]) -> str:
    """Kafka's config path of an entity, e.g. ``/users/alice/clients/<default>``."""
    parts = []
    if USER in entity:
        parts.append(f"users/{entity[USER] if entity[USER] is not None else '<default>'}")
    if CLIENT_ID in entity:
        parts.append(f"clients/{entity[CLIENT_ID] if entity[CLIENT_ID] is not None else '<default>'}")
    return "/" + "/".join(parts)


def entries(doc: Mapping) -> list[tuple[dict, dict]]:
    """``(entity, values)`` of every stored quota entry, in a stable order."""
    out = []
    for _key, entry in sorted((doc.get("entries") or {}).items()):
        out.append((dict(entry["entity"]), dict(entry["values"])))
    return out


def alter(doc: Mapping, entity: Mapping[str, str | None], set_values: Mapping[str, float],
          remove: Iterable[str] = ()) -> dict:
    """The quotas document with ``entity``'s ``set_values`` set and ``remove`` keys removed
    (pure; an entity left without values is dropped). Validates everything first."""
    entity = validate_entity(entity)
    set_values = {k: validate_value(k, v) for k, v in set_values.items()}
    remove = list(remove)
    for k in remove:
        if k not in QUOTA_KEYS:
            raise ConfigError(f"unknown quota {k!r}: expected one of {', '.join(QUOTA_KEYS)}")
    all_entries = {k: {"entity": dict(e["entity"]), "values": dict(e["values"])}
                   for k, e in (doc.get("entries") or {}).items()}
    key = entity_key(entity)
    values = all_entries.get(key, {"values": {}})["values"]
    for k in remove:
        values.pop(k, None)
    values.update(set_values)
    if values:
        all_entries[key] = {"entity": entity, "values": values}
    else:
        all_entries.pop(key, None)
    return {**doc, "entries": all_entries}


@dataclass(frozen=True)
class Match:
    """A resolved quota: its bound and the sensor key (who shares the measured rate)."""

    bound: float
    sensor: tuple[str, str]   # (user tag, client-id tag), "" where the match has no component
    entity: str               # Kafka's config path of the matched entity


class QuotaConfig:
    """The quotas of one document version, indexed for the precedence walk."""

    def __init__(self, doc: Mapping):
        self._by_pattern: dict[tuple, dict] = {}
        for entity, values in entries(doc):
            u = entity.get(USER, None) if USER in entity else None
            c = entity.get(CLIENT_ID, None) if CLIENT_ID in entity else None
            upat = (_DEFAULT if u is None else u) if USER in entity else None
            cpat = (_DEFAULT if c is None else c) if CLIENT_ID in entity else None
            self._by_pattern[(upat, cpat)] = values
        self.keys = frozenset(k for values in self._by_pattern.values() for k in values)
        self._cache: dict[tuple, Match | None] = {}

    def __bool__(self) -> bool:
        return bool(self._by_pattern)

    def lookup(self, key: str, user: str, client_id: str) -> Match | None:
        """The most specific quota ``key`` for this user and client id, or None."""
        if key not in self.keys:
            return None
        cache_key = (key, user, client_id)
        if cache_key in self._cache:
            return self._cache[cache_key]
        found = None
        for upat, cpat in PRECEDENCE:
            u = user if upat == "name" else upat
            c = client_id if cpat == "name" else cpat
            values = self._by_pattern.get((u, c))
            if values is not None and key in values:
                entity = {}
                if u is not None:
                    entity[USER] = None if u is _DEFAULT else u
                if c is not None:
                    entity[CLIENT_ID] = None if c is _DEFAULT else c
                found = Match(values[key], (user if u is not None else "",
                                            client_id if c is not None else ""),
                              describe_entity(entity))
                break
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[cache_key] = found
        return found


class Rate:
    """Kafka's sampled ``Rate``: ``samples`` windows of ``window_s``; value per second."""

    __slots__ = ("window_s", "samples", "_windows", "last_used")

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, samples: int = DEFAULT_SAMPLES):
        if window_s <= 0 or samples < 2:
            raise ConfigError(f"quota windows: need window_s > 0 and samples >= 2, got "
                              f"{window_s} and {samples}")
        self.window_s = window_s
        self.samples = samples
        self._windows: deque[list[float]] = deque()   # [start, total]
        self.last_used = 0.0

    def _purge(self, now: float) -> None:
        expire = self.samples * self.window_s
        while self._windows and now - self._windows[0][0] > expire:
            self._windows.popleft()

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at time ``now`` (seconds, any monotonic origin)."""
        self._purge(now)
        self.last_used = now
        if not self._windows or now >= self._windows[-1][0] + self.window_s:
            self._windows.append([now, 0.0])
            while len(self._windows) > self.samples:
                self._windows.popleft()
        self._windows[-1][1] += value

    def window_size(self, now: float) -> float:
        """The time the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._purge(now)
        elapsed = now - self._windows[0][0] if self._windows else 0.0
        full = int(elapsed / self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return max(elapsed, 0.001)

    def value(self, now: float) -> float:
        """The measured rate per second."""
        size = self.window_size(now)
        return sum(w[1] for w in self._windows) / size

    def throttle_s(self, bound: float, now: float) -> float:
        """How long to hold a client so the rate falls back to ``bound`` (0 when within)."""
        observed = self.value(now)
        if observed <= bound:
            return 0.0
        return (observed - bound) / bound * self.window_size(now)


class QuotaManager:
    """One broker's enforcement: the configuration (replaced when the shared document
    changes) and a rate sensor per (quota key, matched entity) in use."""

    def __init__(self, *, window_s: float = DEFAULT_WINDOW_S, samples: int = DEFAULT_SAMPLES):
        Rate(window_s, samples)  # validates
        self.window_s = window_s
        self.samples = samples
        self.config = QuotaConfig({})
        self._sensors: dict[tuple, Rate] = {}
        #: Longest throttle a request quota gives (Kafka's ClientRequestQuotaManager: one
        #: quota window). Byte-rate throttles are not capped, as Kafka's are not: a capped
        #: throttle would let one huge request per cap through, over the quota.
        self.max_request_throttle_s = window_s
        #: The version of the quotas document in use (-1: none read) and when (monotonic
        #: seconds) the read that vouches for it started (None: never read: no bound yet).
        self.version = -1
        self.read_at: float | None = None
        self._apply_lock = threading.Lock()

    def set_config(self, doc: Mapping) -> None:
        """Apply a new quotas document (sensors of matches that changed start afresh)."""
        self.config = QuotaConfig(doc)

    def apply(self, version: int, doc: Mapping, read_at: float) -> None:
        """Apply what a read of the quotas document that started at ``read_at`` found
        (``version``, ``doc``) unless a newer version is in use; the quotas in hand are
        then at least as new as the document was at ``read_at``. Reads may overlap."""
        with self._apply_lock:
            if version > self.version:
                self.set_config(doc)
                self.version = version
            if self.read_at is None or read_at > self.read_at:
                self.read_at = read_at

    @property
    def active(self) -> bool:
        """Whether any quota is configured (no sensor work at all otherwise)."""
        return bool(self.config)

    def record(self, key: str, user: str, client_id: str, value: float,
               now: float) -> tuple[float, Match | None]:
        """Record ``value`` (bytes, or request-time percent-seconds) against ``key``'s quota
        for this client; returns ``(throttle seconds, match)``."""
        match = self.config.lookup(key, user, client_id)
        if match is None:
            return 0.0, None
        skey = (key, match.sensor, match.bound)
        sensor = self._sensors.get(skey)
        if sensor is None:
            sensor = self._sensors[skey] = Rate(self.window_s, self.samples)
        sensor.record(value, now)
        throttle = sensor.throttle_s(match.bound, now)
        if key == REQUEST_PERCENTAGE:
            throttle = min(throttle, self.max_request_throttle_s)
        return throttle, match

    def expire_idle(self, now: float) -> None:
        """Forget sensors unused for longer than they remember (their rate is 0 anyway)."""
        horizon = 2 * self.samples * self.window_s
        for k in [k for k, s in self._sensors.items() if now - s.last_used > horizon]:
            del self._sensors[k]

    def sensor_count(self) -> int:
        """How many rate sensors are live (bounded by the clients active recently)."""
        return len(self._sensors)
