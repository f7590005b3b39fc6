"""The records of ``__consumer_offsets`` and the consumer protocol's bytes, in Kafka's own
schemas (``kafka.coordinator.group.GroupMetadataManager``, ``ConsumerProtocol``), so a
``__consumer_offsets`` partition imported from Apache Kafka reads here and the other way
round:

* offset commit: key ``OffsetCommitKey`` v1 (int16 version, string group,
  string topic, int32 partition); value ``OffsetCommitValue`` v3 (int16 version,
  int64 offset, int32 leader epoch, string metadata, int64 commit timestamp).
  Values v0-v3 are read.
* group metadata: key ``GroupMetadataKey`` v2 (int16 version, string group);
  value ``GroupMetadataValue`` v3 (protocol type, generation, protocol, leader,
  current state timestamp, members with instance id, client id and host,
  timeouts, subscription and assignment bytes). Values v0-v3 are read.
* a null value (tombstone) deletes the key: OffsetDelete, DeleteGroups.

A group lives in partition ``abs(javaHashCode(group)) % partitions`` as in Kafka
(:func:`partition_for_group`). The consumer protocol's subscription and assignment are the
bytes JoinGroup and SyncGroup carry for the ``consumer`` protocol type.

Pure functions: no I/O (the store is :mod:`kafkastore.groups.offsets`).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..errors import CorruptRecordError

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
