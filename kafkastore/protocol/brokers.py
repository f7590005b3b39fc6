"""Live brokers of one root: ``<root>/_brokers/<node id>.json`` with a heartbeat.

Each broker rewrites its object every ``heartbeat_ms`` with its address and
the time; a broker whose last heartbeat is older than three intervals (at
least three seconds) is not live. Metadata lists the live brokers and spreads
partition leadership over them (any broker accepts any partition: the
manifest orders the writers, so "leadership" only spreads client load).
"""
from __future__ import annotations

import json
import threading
import time
import uuid

from ..errors import ObjectNotFoundError, StorageError
from ..storage import Storage

BROKERS_DIR = "_brokers"


def _path(node_id: int) -> str:
    return f"{BROKERS_DIR}/{node_id}.json"


class BrokerRegistry:
    """This broker's registration plus a cached view of the live ones."""

    def __init__(self, storage: Storage, *, heartbeat_ms: int = 1000, clock=time.time):
        self.storage = storage
        self.heartbeat_ms = heartbeat_ms
        self.clock = clock
        self.instance = uuid.uuid4().hex
        self.node_id: int | None = None
        self.address: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._live: list[tuple[int, str, int]] = []

    @property
    def expiry_ms(self) -> int:
        """How old a heartbeat may be for its broker to count as live."""
        return max(3 * self.heartbeat_ms, 3000)

    def _read_all(self) -> dict[int, dict]:
        out = {}
        for info in self.storage.list(BROKERS_DIR):
            name = info.path.rsplit("/", 1)[-1]
            if not name.endswith(".json") or not name[:-5].isdigit():
                continue
            try:
                d = json.loads(self.storage.get(info.path))
                out[int(d["node_id"])] = d
            except (ObjectNotFoundError, ValueError, KeyError, TypeError):
                continue  # deregistered meanwhile, or not ours to judge
        return out

    def refresh(self) -> list[tuple[int, str, int]]:
        """Re-read the registrations; returns the live ``(node_id, host, port)``, by id."""
        now = self.clock() * 1000
        live = sorted((n, str(d["host"]), int(d["port"])) for n, d in self._read_all().items()
                      if now - float(d.get("heartbeat_ms", 0)) <= self.expiry_ms)
        with self._lock:
            self._live = live
        return live

    def live_cached(self) -> list[tuple[int, str, int]]:
        """The live brokers as of the last :meth:`refresh` / :meth:`heartbeat`."""
        with self._lock:
            return list(self._live)

    def register(self, node_id: int | None, host: str, port: int) -> int:
        """Register this broker; with ``node_id`` None take the smallest id no live broker has."""
        live = self.refresh()
        if node_id is None:
            taken = {n for n, _, _ in live}
            node_id = next(i for i in range(len(taken) + 1) if i not in taken)
        self.node_id, self.address = node_id, (host, port)
        self.heartbeat()
        return node_id

    def heartbeat(self) -> None:
        """Write this broker's registration with the current time, then refresh the live view."""
        if self.node_id is None or self.address is None:
            return
        doc = {"node_id": self.node_id, "host": self.address[0], "port": self.address[1],
               "heartbeat_ms": int(self.clock() * 1000), "instance": self.instance}
        self.storage.put(_path(self.node_id), json.dumps(doc).encode())
        self.refresh()

    def deregister(self) -> None:
        """Remove this broker's registration if it is still ours."""
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
