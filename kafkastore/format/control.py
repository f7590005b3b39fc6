"""Control records: the transaction markers Kafka writes in control batches.

A control batch has the control and transactional attribute bits set and
holds one record, whose key and value are (Kafka's ControlRecordType and
EndTransactionMarker)::

    key   => Version int16 (0), Type int16 (0 = ABORT, 1 = COMMIT, others: KRaft)
    value => Version int16 (0), CoordinatorEpoch int32

Control records are never user data: readers skip them; their only use here
is to tell committed from aborted transactions.
"""
from __future__ import annotations

import enum
import struct

from ..errors import CorruptRecordError
from .record_batch import Record, encode_batch

CONTROL_KEY = struct.Struct(">hh")            # version, type
MARKER_VALUE = struct.Struct(">hi")           # version, coordinator epoch
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0


class ControlType(enum.IntEnum):
    """Control record types (Kafka's ControlRecordType). Only ABORT and COMMIT
    appear in data topics; the others belong to KRaft's metadata log."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def _missing_(cls, value):
        # Types from a newer Kafka are not an error (Kafka maps them to UNKNOWN).
        return cls.UNKNOWN


def marker_key(commit: bool) -> bytes:
    """The control record key of a COMMIT (``commit=True``) or ABORT marker."""
    return CONTROL_KEY.pack(CONTROL_KEY_VERSION, ControlType.COMMIT if commit else ControlType.ABORT)


def marker_value(coordinator_epoch: int = 0) -> bytes:
    """The value of a transaction marker (version 0, coordinator epoch)."""
    return MARKER_VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def encode_marker_batch(*, offset: int, timestamp: int, producer_id: int,
                        producer_epoch: int, commit: bool, coordinator_epoch: int = 0,
                        partition_leader_epoch: int = -1) -> bytes:
    """A control batch holding one COMMIT or ABORT marker at ``offset``.

    As Kafka's ``MemoryRecords.withEndTransactionMarker``: transactional +
    control, create time, no sequence, uncompressed.
    """
    record = Record(offset, timestamp, marker_key(commit), marker_value(coordinator_epoch))
    return encode_batch([record], producer_id=producer_id, producer_epoch=producer_epoch,
                        partition_leader_epoch=partition_leader_epoch,
                        transactional=True, control=True)


def parse_control_record(key, value=None) -> ControlType:
    """The type of a control record from its key; checks the value too if given.

    Unknown (newer) types give ``ControlType.UNKNOWN``; a key or marker value
    that is too short or has a negative version raises CorruptRecordError.
    """
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(
            f"control record key too short: {None if key is None else len(key)} bytes, "
            f"need {CONTROL_KEY.size}")
    version, type_id = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    ctype = ControlType(type_id)
    if value is not None and ctype in (ControlType.ABORT, ControlType.COMMIT):
        parse_marker_value(value)
    return ctype


def parse_marker_value(value) -> int:
    """The coordinator epoch of a transaction marker's value.

    Later value versions may append fields; they are ignored, as Kafka does.
    """
    if value is None or len(value) < MARKER_VALUE.size:
        raise CorruptRecordError(
            f"transaction marker value too short: "
            f"{None if value is None else len(value)} bytes, need {MARKER_VALUE.size}")
    version, coordinator_epoch = MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"invalid transaction marker version {version}")
    return coordinator_epoch
