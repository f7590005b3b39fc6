"""Consumer groups' committed offsets and metadata in the compacted topic ``__consumer_offsets``.

The topic lives under the same root as every other topic and is written
through the same :class:`~kafkastore.write.log_writer.LogWriter` / manifest commit path, so
what a coordinator commits survives a broker restart and a coordinator move,
and ``kafkastore compact __consumer_offsets`` keeps only the latest record per
key (``cleanup.policy=compact``). The records are Kafka's own
(:mod:`kafkastore.groups.records`; their names stay importable from here).

:class:`OffsetsStore` keeps a cache of every group seen and advances it
from the last offset it read, so repeated reads cost one manifest GET per
partition plus the new records.

Fencing: a group coordinator writes under a :class:`GroupClaim` taken when it
loaded the group. Its records carry the :data:`COORDINATOR_HEADER` header (Kafka's
readers ignore headers), so the store knows the offset of the last record a
coordinator wrote for each group, the group's *coordinator version*. A claimed write
is refused (:class:`~kafkastore.errors.FencedError`) unless the group's coordinator
version is still the claim's and the broker's authority token is the one the claim
was taken under; it is appended only if the partition's high watermark is still the
one the check read (a conditional manifest commit), and checked again when another
writer got in first. So a coordinator that lost the group (paused past the liveness
window, or a stale view of the live brokers) never writes on top of what the new
coordinator wrote. Writes without a claim (a transaction's offsets, written by its
own coordinator under the transaction's tokens; the CLI's reset, refused while the
group has members) are appended as before and do not move the coordinator version.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ..clock import Clock, as_clock
from ..errors import CorruptRecordError, FencedError, RequirementFailedError, TopicExistsError
from ..storage import Storage
from ..topics.admin import create_topic, load_topic, topic_exists
from ..write.log_writer import LogWriter as Broker
# The records' names stay importable from this module, where they lived before.
from .records import (GroupKey, GroupMetadata, MemberMetadata, OffsetAndMetadata,  # noqa: F401
                      OffsetKey, decode_consumer_assignment, decode_consumer_subscription,
                      decode_group_value, decode_key, decode_offset_value,
                      encode_consumer_assignment, encode_consumer_subscription,
                      encode_group_key, encode_group_value, encode_offset_key,
                      encode_offset_value, java_string_hash, partition_for_group)

OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's ``offsets.topic.num.partitions`` is 50; eight keeps offline listings cheap
#: while still spreading commits of different groups over separate manifests.
DEFAULT_OFFSETS_PARTITIONS = 8
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104857600}
#: Header on every record a group coordinator writes under a claim (value: its node id).
COORDINATOR_HEADER = "kafkastore.coordinator"
#: A claimed write that keeps losing the race to unrelated writers of its partition gives up.
_MAX_CONDITIONAL_ATTEMPTS = 50

log = logging.getLogger("kafkastore.group_offsets")


# -- the store ----------------------------------------------------------------------------
@dataclass
class GroupState:
    """What the topic says about one group: its metadata (None if never written or deleted)
    and its committed offsets."""

    group_id: str
    metadata: GroupMetadata | None = None
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.metadata is None and not self.offsets


@dataclass(eq=False)
class GroupClaim:
    """A coordinator's right to write one group: the group's coordinator version (offset of
    the last record a coordinator wrote for it, -1: none) and the broker's authority token
    when the coordinator loaded it. Valid until released or until another coordinator
    writes the group."""

    group: str
    version: int
    authority: int | None
    valid: bool = True
    #: Whether this coordinator has written the group under this claim (by
    #: :meth:`OffsetsStore.seal` or any claimed write): from then on, a write under an
    #: earlier coordinator's claim is refused.
    sealed: bool = False


#: The records of a :meth:`OffsetsStore.seal`, chosen when the write is flushed.
_SEAL: list = []


@dataclass(eq=False)
class _WriteRequest:
    group: str
    records: list[tuple[bytes, bytes | None]]
    claim: GroupClaim | None = None
    sealing: bool = False      # a seal: its records are chosen again at each attempt
    #: Asked at each attempt, just before the append: False refuses the write (a writer
    #: without the group's claim whose own authority may have ended, e.g. a transaction's
    #: coordinator that was paused: its offsets would land after newer ones).
    guard: "Callable[[], bool] | None" = None
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class OffsetsStore:
    """Reads and writes ``__consumer_offsets`` under ``storage``'s root (thread-safe).

    ``partitions`` is used when the topic is created (on the first write); an
    existing topic's partition count always wins. ``clock`` is a
    :class:`~kafkastore.clock.Clock` (default: the storage's) or an old callable returning epoch ms.
    """

    def __init__(self, storage: Storage, *, partitions: int = DEFAULT_OFFSETS_PARTITIONS,
                 broker_id: int = 0, clock: Clock | Callable[[], int] | None = None,
                 authority: Callable[[], int | None] | None = None):
        self.storage = storage
        self.broker_id = broker_id
        #: The broker's current authority token (None: it holds none now), checked just
        #: before every claimed write; default: always 0 (a process without a lease).
        self.authority = authority or (lambda: 0)
        self._claims: dict[str, GroupClaim] = {}
        self._versions: dict[str, int] = {}        # group -> its coordinator version
        self.clock = as_clock(clock, "ms") if clock is not None else storage.clock
        self._want_partitions = partitions
        self._partitions: int | None = None
        self._lock = threading.RLock()
        self._broker = None
        self._queue_lock = threading.Lock()
        self._queue: list[_WriteRequest] = []
        self._flushing = False
        self._next: dict[int, int] = {}            # partition -> next offset to read
        #: Records skipped because they do not decode (each logged with its partition and offset).
        self.skipped_records = 0
        self._groups: dict[str, GroupState] = {}

    # -- topic ---------------------------------------------------------------
    def _topic_partitions(self, create: bool) -> int | None:

        if self._partitions is None:
            if topic_exists(self.storage, OFFSETS_TOPIC):
                self._partitions = load_topic(self.storage, OFFSETS_TOPIC).partitions
            elif create:
                try:
                    create_topic(self.storage, OFFSETS_TOPIC, self._want_partitions,
                                 OFFSETS_TOPIC_CONFIG)
                except TopicExistsError:
                    pass
                self._partitions = load_topic(self.storage, OFFSETS_TOPIC).partitions
        return self._partitions

    def partition_for(self, group: str) -> int | None:
        """The group's partition, or None while the topic does not exist."""
        n = self._topic_partitions(create=False)
        return None if n is None else partition_for_group(group, n)

    # -- reading -------------------------------------------------------------
    def refresh(self, partitions: Iterable[int] | None = None) -> None:
        """Read what was appended since the last refresh (every partition by default)."""

        # lazy: the reader loads pyarrow (~0.4 s); the groups' admin commands and the
        # coordinator import this module long before (or without) reading a partition.
        from ..read.reader import PartitionReader

        with self._lock:
            n = self._topic_partitions(create=False)
            if n is None:
                return
            for p in (range(n) if partitions is None else partitions):
                reader = PartitionReader(self.storage, OFFSETS_TOPIC, p)
                start = max(self._next.get(p, 0), reader.log_start_offset)
                if start >= reader.high_watermark:
                    self._next[p] = max(start, self._next.get(p, 0))
                    continue
                table = reader.read(start, include_headers=True)
                keys = table.column("key").to_pylist()
                values = table.column("value").to_pylist()
                offsets = table.column("offset").to_pylist()
                headers = table.column("headers").to_pylist()
                for k, v, o, h in zip(keys, values, offsets, headers):
                    try:
                        self._apply(k, v, o if _by_coordinator(h) else None)
                    except CorruptRecordError as exc:
                        # Only the coordinator writes this topic, but an imported log or an
                        # older broker's junk must not make a group unavailable: skip it.
                        self.skipped_records += 1
                        log.warning("%s/%d offset %d: skipped a record that is not a consumer "
                                    "group record: %s", OFFSETS_TOPIC, p, o, exc.reason)
                self._next[p] = reader.high_watermark

    def _apply(self, key: bytes | None, value: bytes | None, coordinator_offset: int | None = None) -> None:
        """Apply one record to the cache; a record that does not decode raises
        :class:`CorruptRecordError` and leaves the cache as it was. ``coordinator_offset``:
        the record's offset when a coordinator wrote it (it moves the group's version)."""
        if key is None:
            raise CorruptRecordError("record without a key")
        k = decode_key(key)
        if k is None:
            return
        if coordinator_offset is not None:
            self._versions[k.group] = coordinator_offset
        # Decode before touching the cache, so a bad value changes nothing.
        if isinstance(k, OffsetKey):
            decoded = None if value is None else decode_offset_value(value)
        else:
            decoded = None if value is None else decode_group_value(k.group, value)
        st = self._groups.get(k.group)
        if st is None:
            st = self._groups[k.group] = GroupState(k.group)
        if isinstance(k, OffsetKey):
            if decoded is None:
                st.offsets.pop((k.topic, k.partition), None)
            else:
                st.offsets[(k.topic, k.partition)] = decoded
        else:
            st.metadata = decoded
        if st.empty:
            del self._groups[k.group]

    def group(self, group: str, *, refresh: bool = True) -> GroupState:
        """The stored state of ``group`` (an empty state if the topic knows nothing of it)."""
        with self._lock:
            if refresh:
                p = self.partition_for(group)
                if p is not None:
                    self.refresh([p])
            st = self._groups.get(group)
            if st is None:
                return GroupState(group)
            return GroupState(group, st.metadata, dict(st.offsets))

    def claim(self, group: str) -> tuple[GroupState, GroupClaim]:
        """Read ``group`` now and take the right to write it as its coordinator: its stored
        state and the :class:`GroupClaim` to pass to the writes derived from that state
        (replaces any earlier claim of the group, which is no longer valid)."""
        with self._lock:
            token = self.authority()
            state = self.group(group)
            self.release(group)
            claim = self._claims[group] = GroupClaim(group, self._versions.get(group, -1), token)
            return state, claim

    def release(self, group: str | None = None) -> None:
        """Give up the claim of ``group`` (every claim with None): writes under it are refused."""
        with self._lock:
            doomed = list(self._claims.values()) if group is None else [self._claims.get(group)]
            for c in doomed:
                if c is not None:
                    c.valid = False
                    self._claims.pop(c.group, None)

    def claim_current(self, claim: GroupClaim) -> bool:
        """Whether ``claim`` still holds after reading the group's partition now: nobody else
        wrote the group as its coordinator and the broker's authority is unchanged."""
        with self._lock:
            p = self.partition_for(claim.group)
            if p is not None:
                self.refresh([p])
            return self._fence_reason(claim) is None

    def _fence_reason(self, claim: GroupClaim) -> str | None:
        """Why a write under ``claim`` must be refused (None: it may go ahead). Under the lock,
        after a refresh of the group's partition."""
        if not claim.valid or self._claims.get(claim.group) is not claim:
            return "this broker gave the group up"
        token = self.authority()
        if token is None or token != claim.authority:
            return "this broker's authority lapsed since it loaded the group"
        if self._versions.get(claim.group, -1) != claim.version:
            return (f"another coordinator wrote the group at offset "
                    f"{self._versions.get(claim.group)} of {OFFSETS_TOPIC}")
        return None

    def seal(self, claim: GroupClaim) -> bool:
        """Make ``claim`` the only one a write of the group is accepted under, by writing the
        group under it once (its metadata record again, or else one of its committed offsets
        again: the same values, so readers and compaction see nothing new). Loading a group
        only reads it; a coordinator that loaded it before (paused between its check and its
        append) could still append a commit after this one answered OffsetFetch. Kafka's
        new coordinator has a newer leader epoch of the offsets partition; this is the same
        fence. True when the claim holds (sealed now or before); a group with nothing stored
        has nothing to seal. :class:`FencedError` when the claim no longer holds."""
        if not claim.sealed:
            # The record is chosen when the partition is read for the conditional append
            # (:meth:`_seal_records`): a write landing in between is never undone.
            self._write(claim.group, _SEAL, claim)
        return True

    def _seal_records(self, group: str) -> list[tuple[bytes, bytes | None]]:
        """The records that seal ``group`` as the cache holds it now (under the lock, just
        after the refresh the conditional append is based on)."""
        st = self._groups.get(group)
        if st is None:
            return []
        if st.metadata is not None:
            return [(encode_group_key(group), encode_group_value(st.metadata))]
        if st.offsets:
            (t, p), om = sorted(st.offsets.items())[0]
            return [(encode_offset_key(group, t, p), encode_offset_value(om))]
        return []

    def groups(self, *, refresh: bool = True) -> list[str]:
        """Every group with metadata or committed offsets, sorted."""
        with self._lock:
            if refresh:
                self.refresh()
            return sorted(self._groups)

    # -- writing -------------------------------------------------------------
    def _write(self, group: str, records: list[tuple[bytes, bytes | None]],
               claim: GroupClaim | None = None, guard: "Callable[[], bool] | None" = None
               ) -> None:
        """Append ``records`` to the group's partition; returns once their manifest commit landed.

        Group commit: writers that arrive while a flush is under way queue up, and the
        thread that flushes takes the whole queue into its next flush (one manifest
        commit per partition for all of them). If that flush fails, every writer in it
        gets the error (none of them counts its records as written; clients retry).
        With ``claim`` the write is conditional (see the module's "Fencing"):
        :class:`~kafkastore.errors.FencedError` when the claim no longer holds.
        """
        if not records and records is not _SEAL:
            return
        req = _WriteRequest(group, records, claim, guard=guard)
        with self._queue_lock:
            self._queue.append(req)
            leader = not self._flushing
            self._flushing = True
        if leader:
            while True:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                    if not batch:
                        self._flushing = False
                        break
                self._flush_batch(batch)
        req.done.wait()
        if req.error is not None:
            raise req.error

    def _flush_batch(self, batch: list["_WriteRequest"]) -> None:
        try:
            with self._lock:
                n = self._topic_partitions(create=True)
                by_partition: dict[int, list[_WriteRequest]] = {}
                for req in batch:
                    by_partition.setdefault(partition_for_group(req.group, n), []).append(req)
                for p, reqs in sorted(by_partition.items()):
                    self._flush_partition(p, reqs)
        except BaseException as exc:  # noqa: BLE001 - handed to every writer not yet answered
            for req in batch:
                if not req.done.is_set():
                    req.error = exc
        for req in batch:
            req.done.set()

    def _flush_partition(self, p: int, reqs: list["_WriteRequest"]) -> None:
        """One partition's share of a batch: claimed writes are checked against the partition
        read now and appended only at the high watermark that read found (retried when an
        unrelated writer got in first); each request's outcome is set here."""

        for _ in range(_MAX_CONDITIONAL_ATTEMPTS):
            self.refresh([p])
            live = []
            for req in reqs:
                why = None if req.claim is None else self._fence_reason(req.claim)
                if why is None and req.guard is not None and not req.guard():
                    why = "the writer no longer holds the authority it wrote under"
                if why is not None:
                    req.error = FencedError(f"write to group {req.group!r} refused: {why}")
                    req.done.set()
                    continue
                if req.records is _SEAL or req.sealing:
                    # Sealed by another write meanwhile, or nothing stored to seal: done.
                    req.sealing = True
                    req.records = [] if req.claim.sealed else self._seal_records(req.group)
                    if not req.records:
                        req.done.set()
                        continue
                live.append(req)
            # A seal beside another write under its claim is that write; the others go
            # first, so nothing written in this flush is followed by an older value.
            writing = {id(r.claim) for r in live if not r.sealing and r.claim is not None}
            for req in [r for r in live if r.sealing and id(r.claim) in writing]:
                live.remove(req)
                req.done.set()
            reqs = sorted(live, key=lambda r: not r.sealing)
            if not reqs:
                return
            if self._broker is None:
                self._broker = Broker(self.storage, broker_id=self.broker_id,
                                      clock=self.clock.wall_ms)
                self._broker.allow_internal = True  # the owner of __consumer_offsets
            conditional = any(req.claim is not None for req in reqs)
            self._broker.expect_high_watermark = (
                {(OFFSETS_TOPIC, p): self._next.get(p, 0)} if conditional else None)
            header = ((COORDINATOR_HEADER, str(self.broker_id).encode()),)
            last: dict[int, int] = {}   # request index -> index of its last record
            count = 0
            for i, req in enumerate(reqs):
                for key, value in req.records:
                    self._broker.send(OFFSETS_TOPIC, value, key=key, partition=p,
                                      headers=header if req.claim is not None else ())
                    last[i] = count
                    count += 1
            try:
                results = self._broker.flush()
            except RequirementFailedError:
                # Another writer appended to the partition first: read it and check again.
                self._broker = None
                continue
            except BaseException:
                # Whatever was buffered is retried by nobody: start clean next time.
                self._broker = None
                raise
            base = results[-1].base_offset if results else self._next.get(p, 0)
            for i, req in enumerate(reqs):
                if req.claim is not None:
                    # Our own record is the group's version now; what others wrote after it
                    # is found by the next check.
                    req.claim.version = base + last[i]
                    req.claim.sealed = True
                    self._versions[req.group] = max(self._versions.get(req.group, -1), base + last[i])
                req.done.set()
            # Catch up (our own records included) so the cache matches the log order.
            self.refresh([p])
            return
        raise FencedError(f"{OFFSETS_TOPIC}/{p}: gave up after {_MAX_CONDITIONAL_ATTEMPTS} "
                          f"lost races with other writers")

    def commit_offsets(self, group: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata],
                       claim: GroupClaim | None = None,
                       guard: "Callable[[], bool] | None" = None) -> None:
        """Commit ``offsets`` of ``group`` (one manifest commit); visible once this returns.
        With ``claim``, only as the group's coordinator (:class:`FencedError` otherwise).
        With ``guard``, only while it answers True, asked at each attempt just before the
        append (:class:`FencedError` otherwise): a transaction's coordinator writes its
        offsets under its own authority, not the group's claim."""
        self._write(group, [(encode_offset_key(group, t, p), encode_offset_value(om))
                            for (t, p), om in offsets.items()], claim, guard)

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]],
                       claim: GroupClaim | None = None) -> None:
        """Tombstones for the committed offsets of ``partitions`` (OffsetDelete)."""
        self._write(group, [(encode_offset_key(group, t, p), None) for t, p in partitions], claim)

    def store_group(self, meta: GroupMetadata, claim: GroupClaim | None = None) -> None:
        """Persist a group's metadata (generation, members, assignment)."""
        self._write(meta.group_id, [(encode_group_key(meta.group_id), encode_group_value(meta))],
                    claim)

    def delete_group(self, group: str, claim: GroupClaim | None = None) -> None:
        """Tombstones for the group's metadata and every committed offset (DeleteGroups)."""
        st = self.group(group)
        records = [(encode_offset_key(group, t, p), None) for t, p in sorted(st.offsets)]
        records.append((encode_group_key(group), None))
        self._write(group, records, claim)


def _by_coordinator(headers) -> bool:
    """Whether a record's headers (as the reader gives them) mark a coordinator's write."""
    return bool(headers) and any(h.get("key") == COORDINATOR_HEADER for h in headers)
