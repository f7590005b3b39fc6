"""Transactions: which transactional batches were aborted.

A transaction of producer P starts at P's first transactional data batch and
ends at P's next control batch, a COMMIT or ABORT marker. Under
read_committed, data batches of an aborted transaction are dropped, as are
all control batches; data of a transaction still open (no marker yet) must
not be read at all (the last stable offset stops before its first offset).

This is what Kafka's broker keeps in its ``.txnindex`` (AbortedTxn: producer
id, first offset, last offset = the abort marker's offset); here it is
computed by scanning the batch headers, in offset order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from .control import ControlType, parse_control_record
from ..errors import CorruptRecordError
from .record_batch import BatchHeader, decode_batch
from .segment_scan import iter_batches


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: ``[first_offset, last_offset]``, last = the ABORT marker."""

    producer_id: int
    first_offset: int
    last_offset: int


def scan_transactions(
        batches: Iterable[tuple[BatchHeader, ControlType | None]],
) -> tuple[list[AbortedTxn], dict[int, int]]:
    """Replay batches (in offset order) into aborted and still-open transactions.

    ``batches`` yields ``(header, control type)`` with the type None for data
    batches (see :func:`iter_control_types`). Returns the aborted
    transactions in marker order and ``{producer_id: first offset}`` of the
    transactions with no marker yet. Markers without an open transaction (its
    data is before the scanned range, or it had none) are ignored.
    """
    aborted: list[AbortedTxn] = []
    open_txns: dict[int, int] = {}
    for header, ctype in batches:
        pid = header.producer_id
        if header.is_control:
            if ctype is ControlType.ABORT:
                first = open_txns.pop(pid, None)
                if first is not None:
                    aborted.append(AbortedTxn(pid, first, header.last_offset))
            elif ctype is ControlType.COMMIT:
                open_txns.pop(pid, None)
        elif header.is_transactional and pid not in open_txns:
            open_txns[pid] = header.base_offset
    return aborted, open_txns


def is_aborted(header: BatchHeader, aborted: Iterable[AbortedTxn]) -> bool:
    """True if ``header`` is a data batch of one of the ``aborted`` transactions.

    Control batches and non-transactional batches are never "aborted" (control
    batches are skipped by readers anyway).
    """
    if header.is_control or not header.is_transactional:
        return False
    pid, offset = header.producer_id, header.base_offset
    for txn in aborted:
        if txn.producer_id == pid and txn.first_offset <= offset <= txn.last_offset:
            return True
    return False


def control_type_of(buf, pos: int, header: BatchHeader, *,
                    verify_crc: bool = True) -> ControlType | None:
    """The marker type of the control batch at ``buf[pos]`` (None if it holds no record)."""
    _, records = decode_batch(buf, pos, verify_crc=verify_crc)
    if not records:
        return None
    first = records[0]
    return parse_control_record(first.key, first.value)


def iter_control_types(buf, *, verify_crc: bool = True, segment: str | None = None
                       ) -> Iterator[tuple[BatchHeader, ControlType | None]]:
    """For raw log bytes: ``(header, control type or None)`` per batch, for scan_transactions.

    Only control batches are decoded (they hold one small record); data
    batches are read from their headers alone.
    """
    for pos, header in iter_batches(buf, verify_crc=verify_crc, segment=segment):
        if header.is_control:
            try:
                ctype = control_type_of(buf, pos, header, verify_crc=False)
            except CorruptRecordError as e:
                raise e.located(segment=segment, offset=header.base_offset,
                                position=pos) from None
            yield header, ctype
        else:
            yield header, None
