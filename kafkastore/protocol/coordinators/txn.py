"""The transaction coordinator's state machine and its records in ``__transaction_state``.

Pure: no I/O and no clock of its own (every transition takes ``now_ms``).
:mod:`.txn_service` reads the stored state, asks these
functions what the next state is, writes it through the manifest, and only
then acts on it (markers, answers), so a broker that dies between two steps
leaves a state another broker can finish from.

States and transitions are Kafka's (``TransactionState``, KIP-98)::

    Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, fencing InitProducerId--> PrepareAbort --markers--> CompleteAbort

Records use Kafka's schemas (``TransactionLogKey`` v0, ``TransactionLogValue``
v0 written, v0 and v1 read), so the topic reads the same as Apache Kafka's.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, replace
from typing import Iterable

from ...errors import CorruptRecordError

TXN_TOPIC = "__transaction_state"
#: Kafka's ``transaction.state.log.num.partitions`` is 50; eight as for ``__consumer_offsets``.
DEFAULT_TXN_PARTITIONS = 8
TXN_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104857600}
#: Kafka's ``transaction.max.timeout.ms`` default (15 minutes).
DEFAULT_MAX_TIMEOUT_MS = 900_000
MAX_EPOCH = 32767

# Kafka error codes of the transaction APIs (importers read them here as T.<code>).
from ..wire.error_codes import (CONCURRENT_TRANSACTIONS, INVALID_PRODUCER_EPOCH,  # noqa: E402,F401
                                INVALID_PRODUCER_ID_MAPPING, INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT,
                                INVALID_TXN_STATE, NONE, PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids, as stored in ``TransactionLogValue.TransactionStatus``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state (the fields of ``TransactionLogValue``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset = frozenset()   # {(topic, partition)}
    last_update_ms: int = -1
    txn_start_ms: int = -1

    def expired(self, now_ms: int) -> bool:
        """An Ongoing transaction open for longer than its timeout (the coordinator aborts it)."""
        return self.state is TxnState.ONGOING and now_ms - self.txn_start_ms > self.timeout_ms


@dataclass(frozen=True)
class Step:
    """What a request does: an error code, or the state to write (``meta``, None: nothing to
    write) and whether markers must follow (the written state is then Prepare*)."""

    error: int = NONE
    meta: TxnMetadata | None = None


# -- transitions ---------------------------------------------------------------------------
def check_expected(cur: TxnMetadata | None, pid: int, epoch: int) -> Step | None:
    """KIP-360: the producer id and epoch an InitProducerId (v3+) names, checked against the
    stored state before anything changes. None: go on (the epoch is bumped); a Step with an
    error: refused; a Step with ``meta``: the retry of a bump whose answer was lost, answered
    with the current id and epoch, unchanged (Kafka's ``lastProducerEpoch`` retry)."""
    if pid < 0 and epoch < 0:
        return None
    if pid < 0 or epoch < 0:  # Kafka: both set or both -1
        return Step(INVALID_REQUEST)
    if cur is None or cur.producer_epoch < 0:
        return None  # a producer moving to transactions: a new id, as Kafka
    if pid == cur.producer_id:
        if epoch == cur.producer_epoch:
            return None
        if epoch == cur.producer_epoch - 1 and cur.state.complete:
            return Step(meta=cur)
    return Step(PRODUCER_FENCED)


def init_producer_id(cur: TxnMetadata | None, tid: str, timeout_ms: int, now_ms: int, new_pid: int,
                     *, max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS, bump: bool = True) -> Step:
    """InitProducerId with a transactional id, for a state with no transaction in flight.

    ``new_pid`` is used for a new id, or when the epoch is exhausted. A state with a
    transaction in flight (Ongoing, Prepare*) must first be aborted or completed: see
    :func:`fence` and :func:`complete`; here it is CONCURRENT_TRANSACTIONS. ``bump=False``:
    the epoch stays (the abort of the producer's own transaction already bumped it, KIP-360).
    """
    if not 0 < timeout_ms <= max_timeout_ms:
        return Step(INVALID_TRANSACTION_TIMEOUT)
    if cur is None:
        return Step(meta=TxnMetadata(tid, new_pid, 0, timeout_ms, TxnState.EMPTY, frozenset(),
                                     now_ms, -1))
    if not cur.state.complete:
        return Step(CONCURRENT_TRANSACTIONS)
    if not bump:
        pid, epoch = cur.producer_id, cur.producer_epoch
    elif cur.producer_epoch + 1 >= MAX_EPOCH:
        pid, epoch = new_pid, 0
    else:
        pid, epoch = cur.producer_id, cur.producer_epoch + 1
    return Step(meta=replace(cur, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                             state=TxnState.EMPTY, partitions=frozenset(), last_update_ms=now_ms,
                             txn_start_ms=-1))


def fence(cur: TxnMetadata, now_ms: int) -> Step:
    """Abort an Ongoing transaction with the epoch bumped (a new producer instance, or the
    timeout): the ABORT markers carry the new epoch, so the old instance's next write at any
    partition of the transaction is refused."""
    if cur.state is not TxnState.ONGOING:
        return Step(INVALID_TXN_STATE)
    epoch = min(cur.producer_epoch + 1, MAX_EPOCH - 1)
    return Step(meta=replace(cur, producer_epoch=epoch, state=TxnState.PREPARE_ABORT,
                             last_update_ms=now_ms))


def check_producer(cur: TxnMetadata | None, pid: int, epoch: int) -> int:
    """NONE if ``pid`` at ``epoch`` holds the id's state, else Kafka's coordinator error."""
    if cur is None:  # as Kafka: an unknown id is a producer id it does not map
        return INVALID_PRODUCER_ID_MAPPING
    if cur.producer_id != pid:
        return INVALID_PRODUCER_ID_MAPPING
    if epoch != cur.producer_epoch:
        # Kafka's coordinator: a client's epoch must equal the current one; any other
        # (older: a zombie; newer or -1: a bad client) is PRODUCER_FENCED.
        return PRODUCER_FENCED
    return NONE


def compat_error(code: int, api_version: int) -> int:
    """PRODUCER_FENCED for clients that know it (version 2 and later of AddPartitionsToTxn,
    AddOffsetsToTxn, EndTxn, TxnOffsetCommit), else INVALID_PRODUCER_EPOCH, as Kafka answers."""
    return INVALID_PRODUCER_EPOCH if code == PRODUCER_FENCED and api_version < 2 else code


def add_partitions(cur: TxnMetadata | None, pid: int, epoch: int,
                   partitions: Iterable[tuple[str, int]], now_ms: int) -> Step:
    """AddPartitionsToTxn (and AddOffsetsToTxn, whose partition is the group's
    ``__consumer_offsets`` one): the transaction becomes Ongoing with these partitions."""
    err = check_producer(cur, pid, epoch)
    if err:
        return Step(err)
    if cur.state.prepared:
        return Step(CONCURRENT_TRANSACTIONS)
    if cur.state not in (TxnState.ONGOING,) and not cur.state.complete:
        return Step(INVALID_TXN_STATE)
    new = frozenset(partitions)
    if cur.state is TxnState.ONGOING and new <= cur.partitions:
        return Step()  # nothing new: no write
    # A new transaction's start names it (pending offsets, the partitions' open
    # transactions): later than the id's previous one's, whatever the clock of the broker
    # that coordinates it now.
    start = cur.txn_start_ms if cur.state is TxnState.ONGOING else max(now_ms, cur.txn_start_ms + 1)
    base = cur.partitions if cur.state is TxnState.ONGOING else frozenset()
    return Step(meta=replace(cur, state=TxnState.ONGOING, partitions=base | new,
                             last_update_ms=now_ms, txn_start_ms=start))


def end_txn(cur: TxnMetadata | None, pid: int, epoch: int, commit: bool, now_ms: int) -> Step:
    """EndTxn: Ongoing goes to PrepareCommit / PrepareAbort (markers follow). A retry of an
    EndTxn already prepared or completed the same way answers NONE (a prepared one returns
    its state, so the caller finishes the markers); the other way is INVALID_TXN_STATE."""
    err = check_producer(cur, pid, epoch)
    if err:
        return Step(err)
    want_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    want_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if cur.state is TxnState.ONGOING:
        return Step(meta=replace(cur, state=want_prepare, last_update_ms=now_ms))
    if cur.state is want_prepare:
        return Step(meta=cur)
    if cur.state is want_complete:
        return Step()
    return Step(INVALID_TXN_STATE)


def complete(cur: TxnMetadata, now_ms: int) -> TxnMetadata:
    """The state after every marker of a prepared transaction is written."""
    state = TxnState.COMPLETE_COMMIT if cur.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return replace(cur, state=state, partitions=frozenset(), last_update_ms=now_ms)


# -- records ----------------------------------------------------------------------------------
def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 32767:
        raise CorruptRecordError(f"string of {len(b)} bytes is too long for an int16 length")
    return _I16.pack(len(b)) + b


def encode_key(tid: str) -> bytes:
    """``TransactionLogKey`` v0: int16 version, string transactional id."""
    return _I16.pack(0) + _string(tid)


def encode_value(m: TxnMetadata) -> bytes:
    """``TransactionLogValue`` v0 (producer id, epoch, timeout, status, partitions by topic,
    last update and start timestamps)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(m.partitions):
        by_topic.setdefault(t, []).append(p)
    out = [_I16.pack(0), _I64.pack(m.producer_id), _I16.pack(m.producer_epoch),
           _I32.pack(m.timeout_ms), _I8.pack(int(m.state)), _I32.pack(len(by_topic))]
    for t, ps in by_topic.items():
        out += [_string(t), _I32.pack(len(ps))] + [_I32.pack(p) for p in ps]
    out += [_I64.pack(m.last_update_ms), _I64.pack(m.txn_start_ms)]
    return b"".join(out)


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = memoryview(buf), 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecordError(f"{TXN_TOPIC} record truncated at byte {self.pos}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> int:
        return s.unpack(self.take(s.size))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise CorruptRecordError(f"{TXN_TOPIC} varint too long")

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.unpack(_I16)
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{TXN_TOPIC} string is not UTF-8") from None

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def decode_key(data: bytes) -> str | None:
    """The transactional id of a ``TransactionLogKey`` v0; None for other versions."""
    r = _Reader(data)
    if r.unpack(_I16) != 0:
        return None
    return r.string(False)


def decode_value(tid: str, data: bytes) -> TxnMetadata:
    """``TransactionLogValue`` v0 or v1 (v1 is flexible: compact strings and tagged fields)."""
    r = _Reader(data)
    version = r.unpack(_I16)
    if version not in (0, 1):
        raise CorruptRecordError(f"unsupported TransactionLogValue version {version}")
    flexible = version >= 1
    pid, epoch, timeout = r.unpack(_I64), r.unpack(_I16), r.unpack(_I32)
    try:
        state = TxnState(r.unpack(_I8))
    except ValueError as exc:
        raise CorruptRecordError(f"unknown transaction status: {exc}") from None
    n = r.uvarint() - 1 if flexible else r.unpack(_I32)
    parts = set()
    for _ in range(max(n, 0)):
        topic = r.string(flexible)
        m = r.uvarint() - 1 if flexible else r.unpack(_I32)
        for _ in range(max(m, 0)):
            parts.add((topic, r.unpack(_I32)))
        if flexible:
            r.skip_tags()
    last_update, start = r.unpack(_I64), r.unpack(_I64)
    if flexible:
        r.skip_tags()
    return TxnMetadata(tid, pid, epoch, timeout, state, frozenset(parts), last_update, start)
