"""Live brokers of one root: ``<root>/_brokers/<node id>.json`` with a heartbeat.

Each broker rewrites its object every ``heartbeat_ms`` with its address and
the time; a broker whose last heartbeat is older than three intervals (at
least three seconds) is not live. Metadata lists the live brokers and spreads
partition leadership over them (any broker accepts any partition: the
manifest orders the writers, so "leadership" only spreads client load).

Each registration names its listener's security protocol (Kafka's
``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``): Metadata only
advertises brokers a client can reach with the security it already uses
(a registration without one, from an older broker, counts as ``PLAINTEXT``).
"""
from __future__ import annotations

import json
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..clock import Clock, as_clock
from ..errors import ObjectNotFoundError, StorageError
from ..storage import Storage

log = logging.getLogger("kafkastore.serve.brokers")

BROKERS_DIR = "_brokers"
#: How long Metadata keeps listing a broker after it stopped being live: librdkafka's
#: coordinator cache entries live ``metadata.max.age.ms`` (15 minutes by default) after their
#: last use, and must not outlive the broker's listing (see :meth:`BrokerMembership.listed_cached`).
LISTED_AFTER_DEATH_MS = 16 * 60 * 1000


def _path(node_id: int) -> str:
    return f"{BROKERS_DIR}/{node_id}.json"


class BrokerMembership:
    """This broker's registration plus a cached view of the live ones."""

    def __init__(self, storage: Storage, *, heartbeat_ms: int = 1000,
                 clock: Clock | None = None):
        self.storage = storage
        self.heartbeat_ms = heartbeat_ms
        # ``clock`` defaults to the storage's; an old bare callable is read as epoch seconds.
        self.clock = as_clock(clock, "s") if clock is not None else storage.clock
        self.instance = uuid.uuid4().hex
        self.node_id: int | None = None
        self.address: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._live: list[tuple[int, str, int]] = []
        self._security: dict[int, str] = {}
        # Brokers that stopped being live, listed in Metadata for LISTED_AFTER_DEATH_MS more:
        # {node_id: ((node_id, host, port), security, ms when last seen live)}.
        self._departed: dict[int, tuple[tuple[int, str, int], str, float]] = {}
        self._write_lock = threading.Lock()
        self._closed = False
        self.security = "PLAINTEXT"
        # Monotonic time when the last registration put that succeeded was sent: the start of
        # this broker's authority lease (see authority_valid).
        self._lease_from: float | None = None
        #: Bumped each time this broker fences itself (see :meth:`fence`): state derived under
        #: an older value was derived under an authority this broker may have lost.
        self.fence_epoch = 0
        self._fence_lock = threading.Lock()
        self._on_fence: list[Callable[[str], None]] = []

    @property
    def expiry_ms(self) -> int:
        """How old a heartbeat may be for its broker to count as live."""
        return max(3 * self.heartbeat_ms, 3000)

    def _read_all(self) -> dict[int, dict]:
        paths = [info.path for info in self.storage.list(BROKERS_DIR)
                 if info.path.rsplit("/", 1)[-1].endswith(".json")
                 and info.path.rsplit("/", 1)[-1][:-5].isdigit()]

        def one(path: str) -> dict | None:
            try:
                d = json.loads(self.storage.get(path))
                int(d["node_id"])
                return d
            except (ObjectNotFoundError, ValueError, KeyError, TypeError):
                return None  # deregistered meanwhile, or not ours to judge

        # Read at once, not one after the other: under a slow store each read is a round
        # trip, and the heartbeat's next registration put waits for this refresh.
        if len(paths) > 1:
            with ThreadPoolExecutor(max_workers=min(8, len(paths)),
                                    thread_name_prefix="kafkastore-brokers") as pool:
                docs = list(pool.map(one, paths))
        else:
            docs = [one(p) for p in paths]
        return {int(d["node_id"]): d for d in docs if d is not None}

    def refresh(self) -> list[tuple[int, str, int]]:
        """Re-read the registrations; returns the live ``(node_id, host, port)``, by id."""
        now = self.clock.wall_ms()
        stored = self._read_all()
        docs = {n: d for n, d in stored.items()
                if now - float(d.get("heartbeat_ms", 0)) <= self.expiry_ms}
        live = sorted((n, str(d["host"]), int(d["port"])) for n, d in docs.items())
        with self._lock:
            for b in self._live:
                # Only a broker that died (its registration left to expire) stays listed; one
                # that shut down cleanly removed its registration, and clients drop it at once.
                if b[0] not in docs and b[0] in stored:
                    self._departed[b[0]] = (b, self._security.get(b[0], "PLAINTEXT"), now)
            self._departed = {n: v for n, v in self._departed.items()
                              if n not in docs and n in stored and now - v[2] <= LISTED_AFTER_DEATH_MS}
            self._live = live
            mine = stored.get(self.node_id) if self.node_id is not None else None
            taken = mine is not None and mine.get("instance") not in (None, self.instance)
            self._security = {n: str(d.get("security", "PLAINTEXT")) for n, d in docs.items()}
        if taken:
            # Another process registered under this node id: it may coordinate what we did.
            self.fence(f"node id {self.node_id} was registered by another broker")
        return live

    def listed_cached(self, security: str | None = None) -> list[tuple[int, str, int]]:
        """What Metadata lists: the live brokers plus those that died (stopped heartbeating
        without deregistering) less than :data:`LISTED_AFTER_DEATH_MS` ago (by this broker's
        reading; they lead and coordinate nothing). librdkafka ends its handle of a broker missing from Metadata, and a
        coordinator lookup it had cached on that handle then waits for ever
        (confluentinc/librdkafka#5511, #5456: ``send_offsets_to_transaction`` hangs past its
        timeout); a handle kept alive fails to connect, which makes it look the coordinator up again."""
        with self._lock:
            out = [b for b in self._live if security is None or self._security.get(b[0], "PLAINTEXT") == security]
            out += [b for b, sec, _ in self._departed.values() if security is None or sec == security]
        return sorted(out)

    def live_cached(self, security: str | None = None) -> list[tuple[int, str, int]]:
        """The live brokers as of the last :meth:`refresh` / :meth:`heartbeat`; with ``security``
        only those whose listener uses that security protocol."""
        with self._lock:
            if security is None:
                return list(self._live)
            return [b for b in self._live if self._security.get(b[0], "PLAINTEXT") == security]

    def register(self, node_id: int | None, host: str, port: int, security: str = "PLAINTEXT") -> int:
        """Register this broker; with ``node_id`` None take the smallest id no live broker has."""
        live = self.refresh()
        if node_id is None:
            taken = {n for n, _, _ in live}
            node_id = next(i for i in range(len(taken) + 1) if i not in taken)
        self.node_id, self.address, self.security = node_id, (host, port), security
        self.heartbeat()
        return node_id

    def heartbeat(self) -> None:
        """Write this broker's registration with the current time, then refresh the live view.

        A heartbeat that finds the lease lapsed (this thread resumed after a pause at the same
        moment as the request handlers) fences the broker first, so the renewed lease never
        hides the pause from them (they compare :attr:`fence_epoch`)."""
        self._renew()
        self.refresh()
        # A refresh that took half an interval or more (a slow store: the list and the reads
        # are round trips) renews again now, rather than leaving the next put a whole
        # interval plus this refresh after the last one: the lease runs from the put's send.
        sent = self._lease_from
        if sent is not None and self.clock.monotonic_s() - sent >= self.heartbeat_ms / 2000:
            self._renew()

    def _renew(self) -> None:
        """Write the registration (fencing first if the lease lapsed meanwhile)."""
        with self._write_lock:
            if self.node_id is None or self.address is None or self._closed:
                return
            self.fence_if_lapsed()
            self._put_registration()

    def _put_registration(self) -> None:
        sent = self.clock.monotonic_s()
        doc = {"node_id": self.node_id, "host": self.address[0], "port": self.address[1],
               "heartbeat_ms": self.clock.wall_ms(), "instance": self.instance,
               "security": self.security}
        self.storage.put(_path(self.node_id), json.dumps(doc).encode())
        self._lease_from = sent

    def authority_valid(self) -> bool:
        """Whether no other broker can have taken this one for dead: the last registration
        this broker wrote was sent less than the liveness window (:attr:`expiry_ms`) ago, by
        its own monotonic clock. False after a pause (SIGSTOP, a GC or disk stall, a stalled
        store) longer than the window: other brokers may have taken over its groups and
        transactions meanwhile, so it must drop what it derived from that authority and
        renew (:meth:`heartbeat`) before acting as a coordinator again."""
        sent = self._lease_from
        return sent is not None and self.clock.monotonic_s() - sent < self.expiry_ms / 1000

    def authority(self) -> int | None:
        """The fencing token of this broker's coordinator state: :attr:`fence_epoch` while the
        lease is valid (:meth:`authority_valid`), else None. A writer records it when it
        reads the state it will act on and compares it again just before its conditional
        write: a different value means the broker fenced itself meanwhile."""
        epoch = self.fence_epoch
        return epoch if self.authority_valid() else None

    def on_fence(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` each time this broker fences itself (from whichever thread
        notices: a request handler on the event loop, or the heartbeat in the I/O pool). It
        must be quick and thread-safe, e.g. set a flag or drop a cache."""
        self._on_fence.append(callback)

    def fence(self, reason: str) -> None:
        """Give up every authority this broker held: bump :attr:`fence_epoch`, end the lease
        (so :meth:`authority_valid` is False until a registration put succeeds again) and
        call the :meth:`on_fence` callbacks. Coordinators drop their loaded state and
        delayed writes, and read the log again before serving."""
        with self._fence_lock:
            self.fence_epoch += 1
            self._lease_from = None
            epoch = self.fence_epoch
        log.warning("broker %s fences itself (epoch %d): %s", self.node_id, epoch, reason)
        for callback in list(self._on_fence):
            try:
                callback(reason)
            except Exception:  # noqa: BLE001 - one bad callback must not keep the others from fencing
                log.exception("an on-fence callback failed")

    def lease_lapsed(self) -> bool:
        """Whether the lease lapsed and this broker has not fenced itself for it yet (cheap:
        no I/O; the request path asks it before every request)."""
        sent = self._lease_from
        return sent is not None and self.clock.monotonic_s() - sent >= self.expiry_ms / 1000

    def fence_if_lapsed(self) -> bool:
        """:meth:`fence` when the lease lapsed (the last successful registration put was sent
        longer than the liveness window ago by the monotonic clock); whether it did."""
        with self._fence_lock:
            sent = self._lease_from
            lapsed = sent is not None and self.clock.monotonic_s() - sent >= self.expiry_ms / 1000
        if lapsed:
            self.fence(f"no successful heartbeat for longer than the liveness window "
                       f"({self.expiry_ms} ms)")
        return lapsed

    def deregister(self) -> None:
        """Remove this broker's registration if it is still ours (a heartbeat still running in
        another thread cannot write it back: both hold the write lock, and no heartbeat writes
        after this)."""
        with self._write_lock:
            self._closed = True
        if self.node_id is None:
            return
        try:
            d = json.loads(self.storage.get(_path(self.node_id)))
        except (ObjectNotFoundError, ValueError):
            return
        if d.get("instance") == self.instance:
            try:
                self.storage.delete([_path(self.node_id)])
            except StorageError:
                pass

