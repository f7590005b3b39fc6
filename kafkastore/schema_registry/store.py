"""``_schemas`` under a root: replay it into a :class:`~.state.RegistryState`, append to it
conditionally (thread-safe, blocking I/O).

Every broker of a root reads the same log, so all serve the same ids. A write is optimistic:
read to the head, plan the records on that state (e.g. allocate ``max id + 1``), and commit
them only if the partition's high watermark is still the offset read to
(:attr:`kafkastore.write.log_writer.LogWriter.expect_high_watermark`); if another broker's record landed
first, read it and plan again. So two brokers never hand out one id to two schemas, and a
schema another broker just registered is found (same id) instead of registered twice.

Reads catch up from the last offset read (bounded cost per refresh: one manifest read plus
the new records); :meth:`SchemaStore.refresh` is rate-limited to ``refresh_interval_s`` unless
forced, and the HTTP layer forces one when a lookup misses.
"""
from __future__ import annotations

import logging
import random
import threading
from typing import Callable

from ..clock import Clock, as_clock
from ..commit import Backoff
from ..errors import RequirementFailedError, SchemaRegistryError, StorageError, TopicExistsError
from ..read.reader import PartitionReader
from ..storage import Storage
from ..topics.admin import create_topic, load_topic, topic_exists
from ..topics.topic_config import TopicConfig
from ..write.log_writer import LogWriter as Broker
from .state import RegistryState

log = logging.getLogger("kafkastore.schema_registry")

SCHEMAS_TOPIC = "_schemas"
#: As Confluent creates it: one partition, compacted.
SCHEMAS_TOPIC_CONFIG = {"cleanup.policy": "compact"}
#: Conditional appends retried this many times against other brokers' writes.
MAX_WRITE_ATTEMPTS = 20
#: Bytes a record batch adds around one record (the broker's ``_BATCH_OVERHEAD``, rounded up).
BATCH_OVERHEAD = 128
_BACKOFF = Backoff(initial_s=0.005, max_s=0.2)

#: ``plan(state) -> (records, result)``: records to append (key, value) and what the write
#: returns; no records means nothing to write.
Plan = Callable[[RegistryState], "tuple[list[tuple[bytes, bytes | None]], object]"]


class SchemaStore:
    """The registry's state over ``storage``'s ``_schemas`` topic."""

    def __init__(self, storage: Storage, *, broker_id: int = 0,
                 clock: Clock | Callable[[], int] | None = None,
                 monotonic: Callable[[], float] | None = None, refresh_interval_s: float = 0.5,
                 sleep: Callable[[float], object] | None = None, rng: random.Random | None = None):
        self.storage = storage
        self._rng = rng or random.Random()
        self.broker_id = broker_id
        # One clock (default: the storage's); ``monotonic``/``sleep`` replace just that part.
        clock = as_clock(clock, "ms") if clock is not None else storage.clock
        if monotonic is not None or sleep is not None:
            clock = Clock(wall_ms=clock.wall_ms, monotonic_s=monotonic or clock.monotonic_s,
                          sleep=sleep or clock.sleep)
        self.clock = clock
        self.sleep = clock.sleep
        self.monotonic = clock.monotonic_s
        self.refresh_interval_s = refresh_interval_s
        self.state = RegistryState()
        self._next = 0
        self._last_refresh: float | None = None
        #: Held while the state changes (refresh, write); readers of several of its parts hold it.
        self.lock = self._lock = threading.RLock()
        self._broker = None
        self._exists = False
        self._max_record: int | None = None

    def _topic_exists(self, create: bool) -> bool:
        if not self._exists:
            if topic_exists(self.storage, SCHEMAS_TOPIC):
                self._exists = True
            elif create:
                try:
                    create_topic(self.storage, SCHEMAS_TOPIC, 1, SCHEMAS_TOPIC_CONFIG,
                                 now_ms=self.clock.wall_ms())
                except TopicExistsError:
                    pass
                self._exists = True
        return self._exists

    def max_record_bytes(self) -> int:
        """The largest record ``_schemas`` takes: its ``max.message.bytes`` less a batch's
        overhead (read once the topic exists; the default before)."""
        if self._max_record is not None:
            return self._max_record
        if self._topic_exists(create=False):
            self._max_record = load_topic(self.storage, SCHEMAS_TOPIC).config.max_message_bytes \
                - BATCH_OVERHEAD
            return self._max_record
        return TopicConfig().max_message_bytes - BATCH_OVERHEAD

    def refresh(self, force: bool = False) -> RegistryState:
        """Read the records appended since the last refresh (at most every
        ``refresh_interval_s`` unless ``force``); returns the state."""
        with self._lock:
            now = self.monotonic()
            if (not force and self._last_refresh is not None
                    and now - self._last_refresh < self.refresh_interval_s):
                return self.state
            if not self._topic_exists(create=False):
                self._last_refresh = now
                return self.state
            reader = PartitionReader(self.storage, SCHEMAS_TOPIC, 0)
            if reader.log_start_offset > self._next and self._next > 0:
                # Compaction or retention moved the start past what we read: replay from scratch.
                self.state, self._next = RegistryState(), 0
            start = max(self._next, reader.log_start_offset)
            if start < reader.high_watermark:
                table = reader.read(start, include_headers=False)
                for k, v, o in zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                                   table.column("offset").to_pylist()):
                    if not self.state.apply(k, v):
                        log.debug("%s offset %d: skipped a record", SCHEMAS_TOPIC, o)
            self._next = max(start, reader.high_watermark)
            self._last_refresh = now
            return self.state

    def write(self, plan: Plan):
        """Run ``plan`` on the head of the log and append its records if nothing landed
        meanwhile (else read the new records and plan again); returns the plan's result."""
        with self._lock:
            self._topic_exists(create=True)
            for attempt in range(MAX_WRITE_ATTEMPTS):
                if attempt:
                    # Brokers that lost a race do not all come back at once (the commit
                    # engine's full-jitter back-off).
                    self.sleep(_BACKOFF.delay(attempt, self._rng))
                state = self.refresh(force=True)
                records, result = plan(state)
                if not records:
                    return result
                if self._broker is None:
                    self._broker = Broker(self.storage, broker_id=self.broker_id, clock=self.clock.wall_ms,
                                          commit_on_roll=False)
                    self._broker.allow_internal = True  # the owner of _schemas
                self._broker.expect_high_watermark = {(SCHEMAS_TOPIC, 0): self._next}
                try:
                    for key, value in records:
                        self._broker.send(SCHEMAS_TOPIC, value, key=key, partition=0)
                    results = self._broker.flush()
                except RequirementFailedError:
                    self._broker = None  # nothing landed; plan again on the new head
                    continue
                except StorageError as exc:
                    self._broker = None  # its buffer is retried by nobody: start clean
                    raise SchemaRegistryError(500, 50001, f"Error while storing the schema: {exc}") \
                        from None
                except BaseException:
                    self._broker = None
                    raise
                # Landed at exactly the offset read to: these records follow the state read.
                for key, value in records:
                    self.state.apply(key, value)
                self._next = max(r.next_offset for r in results) if results else self._next
                return result
            raise SchemaRegistryError(500, 50001, f"Error while storing the schema: {SCHEMAS_TOPIC} "
                                      f"kept changing under {MAX_WRITE_ATTEMPTS} attempts")
