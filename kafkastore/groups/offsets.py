"""Consumer groups' committed offsets and metadata in the compacted topic ``__consumer_offsets``.

The topic lives under the same root as every other topic and is written
through the same :class:`~kafkastore.write.log_writer.LogWriter` / manifest commit path, so
what a coordinator commits survives a broker restart and a coordinator move,
and ``kafkastore compact __consumer_offsets`` keeps only the latest record per
key (``cleanup.policy=compact``).

Records use Kafka's own schemas (``kafka.coordinator.group.GroupMetadataManager``),
so a ``__consumer_offsets`` partition imported from Apache Kafka reads here and
the other way round:

* offset commit: key ``OffsetCommitKey`` v1 (int16 version, string group,
  string topic, int32 partition); value ``OffsetCommitValue`` v3 (int16 version,
  int64 offset, int32 leader epoch, string metadata, int64 commit timestamp).
  Values v0-v3 are read.
* group metadata: key ``GroupMetadataKey`` v2 (int16 version, string group);
  value ``GroupMetadataValue`` v3 (protocol type, generation, protocol, leader,
  current state timestamp, members with instance id, client id and host,
  timeouts, subscription and assignment bytes). Values v0-v3 are read.
* a null value (tombstone) deletes the key: OffsetDelete, DeleteGroups.

A group lives in partition ``abs(javaHashCode(group)) % partitions`` as in
Kafka. :class:`OffsetsStore` keeps a cache of every group seen and advances it
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

Pure functions here (``encode_*`` / ``decode_*``, :func:`partition_for_group`)
do no I/O; :class:`OffsetsStore` does the reading and writing.
"""
from __future__ import annotations

import logging
import struct
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ..clock import Clock, as_clock
from ..errors import CorruptRecordError, FencedError, RequirementFailedError, TopicExistsError
from ..storage import Storage
from ..topics.admin import create_topic, load_topic, topic_exists
from ..read.reader import PartitionReader
from ..write.log_writer import LogWriter as Broker

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

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# -- values ---------------------------------------------------------------------------
@dataclass(frozen=True)
class OffsetAndMetadata:
    """One committed offset: the next offset to consume, as Kafka's OffsetAndMetadata."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0


@dataclass(frozen=True)
class MemberMetadata:
    """A member as the coordinator persists it (``GroupMetadataValue`` member)."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    session_timeout_ms: int = 45000
    subscription: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True)
class GroupMetadata:
    """A group's persisted state: generation, protocol, leader and members.

    ``state_timestamp`` is the coordinator's clock when it wrote the record; a
    coordinator rewrites the record of a group with members at least every
    half session timeout, so a reader without a coordinator (the CLI) knows the
    members are gone once ``state_timestamp`` is older than their session
    timeout (see docs/DECISIONS.md, "Consumer groups").
    """

    group_id: str
    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()

    def live_members(self, now_ms: int) -> tuple[MemberMetadata, ...]:
        """The members whose session can still be alive at ``now_ms``."""
        if self.state_timestamp < 0:
            return self.members
        return tuple(m for m in self.members
                     if now_ms - self.state_timestamp <= m.session_timeout_ms)


# -- Kafka's primitive types -------------------------------------------------------
def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode("utf-8")
    if len(b) > 32767:
        raise CorruptRecordError(f"string of {len(b)} bytes is too long for an int16 length")
    return _I16.pack(len(b)) + b


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


class _Cursor:
    """Reads Kafka's primitive types from a buffer; a short buffer is a CorruptRecordError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = memoryview(buf)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecordError(f"__consumer_offsets record truncated at byte {self.pos}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n == -1 and nullable:
            return None
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("__consumer_offsets string is not UTF-8") from None

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n == -1 else bytes(self._take(n))


# -- keys -------------------------------------------------------------------------------
@dataclass(frozen=True)
class OffsetKey:
    """Key of an offset commit record."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    """Key of a group metadata record."""

    group: str


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    """``OffsetCommitKey`` v1."""
    return _I16.pack(1) + _string(group) + _string(topic) + _I32.pack(partition)


def encode_group_key(group: str) -> bytes:
    """``GroupMetadataKey`` v2."""
    return _I16.pack(2) + _string(group)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for key versions this store does not
    use (Kafka's transaction and share-group records), which readers skip."""
    c = _Cursor(data)
    version = c.i16()
    if version in (0, 1):
        return OffsetKey(c.string(), c.string(), c.i32())
    if version == 2:
        return GroupKey(c.string())
    return None


# -- values -----------------------------------------------------------------------------
def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    """``OffsetCommitValue`` v3."""
    return (_I16.pack(3) + _I64.pack(om.offset) + _I32.pack(om.leader_epoch)
            + _string(om.metadata or "") + _I64.pack(om.commit_timestamp))


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    """``OffsetCommitValue`` v0-v3."""
    c = _Cursor(data)
    version = c.i16()
    if version not in (0, 1, 2, 3):
        raise CorruptRecordError(f"unsupported OffsetCommitValue version {version}")
    offset = c.i64()
    epoch = c.i32() if version >= 3 else -1
    metadata = c.string() or ""
    ts = c.i64()
    return OffsetAndMetadata(offset, epoch, metadata, ts)


def encode_group_value(g: GroupMetadata) -> bytes:
    """``GroupMetadataValue`` v3."""
    out = [_I16.pack(3), _string(g.protocol_type), _I32.pack(g.generation), _string(g.protocol),
           _string(g.leader), _I64.pack(g.state_timestamp), _I32.pack(len(g.members))]
    for m in g.members:
        out += [_string(m.member_id), _string(m.group_instance_id), _string(m.client_id),
                _string(m.client_host), _I32.pack(m.rebalance_timeout_ms),
                _I32.pack(m.session_timeout_ms), _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(out)


def decode_group_value(group: str, data: bytes) -> GroupMetadata:
    """``GroupMetadataValue`` v0-v3."""
    c = _Cursor(data)
    version = c.i16()
    if version not in (0, 1, 2, 3):
        raise CorruptRecordError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = c.string()
    generation = c.i32()
    protocol = c.string(nullable=True)
    leader = c.string(nullable=True)
    state_ts = c.i64() if version >= 2 else -1
    members = []
    for _ in range(c.i32()):
        member_id = c.string()
        instance = c.string(nullable=True) if version >= 3 else None
        client_id = c.string()
        host = c.string()
        rebalance = c.i32() if version >= 1 else 0
        session = c.i32()
        if version == 0:
            rebalance = session
        members.append(MemberMetadata(member_id, instance, client_id, host, rebalance, session,
                                      c.bytes_(), c.bytes_()))
    return GroupMetadata(group, protocol_type, generation, protocol, leader, state_ts,
                         tuple(members))


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``: Kafka's
    ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- consumer protocol (embedded in JoinGroup / SyncGroup) --------------------------------
def decode_consumer_assignment(data: bytes) -> dict[str, list[int]]:
    """Topic -> partitions of a ``ConsumerProtocolAssignment`` (the ``consumer`` protocol type);
    empty for empty bytes."""
    if not data:
        return {}
    c = _Cursor(data)
    c.i16()  # version; v0-v3 start alike
    out: dict[str, list[int]] = {}
    for _ in range(c.i32()):
        topic = c.string()
        out[topic] = [c.i32() for _ in range(c.i32())]
    return out


def decode_consumer_subscription(data: bytes) -> list[str]:
    """Topics of a ``ConsumerProtocolSubscription``; empty for empty bytes."""
    if not data:
        return []
    c = _Cursor(data)
    c.i16()
    return [c.string() for _ in range(c.i32())]


def encode_consumer_assignment(assignment: Mapping[str, Iterable[int]], user_data: bytes = b"") -> bytes:
    """A ``ConsumerProtocolAssignment`` v0 (tests and tools that act as a group leader)."""
    out = [_I16.pack(0), _I32.pack(len(assignment))]
    for topic, parts in assignment.items():
        parts = list(parts)
        out += [_string(topic), _I32.pack(len(parts))] + [_I32.pack(p) for p in parts]
    out.append(_bytes(user_data))
    return b"".join(out)


def encode_consumer_subscription(topics: Iterable[str], user_data: bytes = b"") -> bytes:
    """A ``ConsumerProtocolSubscription`` v0."""
    topics = list(topics)
    return b"".join([_I16.pack(0), _I32.pack(len(topics))] + [_string(t) for t in topics]
                    + [_bytes(user_data)])


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
