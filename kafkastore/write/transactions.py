"""Open transactions seen from the log: find a hanging one and abort it offline.

A transaction is open at a partition from its producer's first transactional batch until
a COMMIT or ABORT marker; the partition's manifest keeps where (``txn_first_offset`` of the
producer's state), and read_committed readers stop at the first open one (the last stable
offset). A coordinator normally writes the markers; when it cannot (a producer whose
coordinator lost the transaction, a restored log), an operator lists the open
transactions and aborts one, as Kafka's ``kafka-transactions.sh find-hanging`` and
``abort`` do. The abort writes an ABORT marker with the producer's id and epoch, so a
newer epoch of the producer is never touched (it fences the marker).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..manifest import ManifestStore
from ..storage import Storage
from ..topics.admin import load_topic
from .log_writer import LogWriter


@dataclass(frozen=True)
class OpenTransaction:
    """One producer's open transaction at one partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int

    def to_dict(self) -> dict:
        """JSON-ready form (``kafkastore transactions list``)."""
        return {"topic": self.topic, "partition": self.partition, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "first_offset": self.first_offset,
                "last_timestamp": self.last_timestamp}


def open_transactions(storage: Storage, topic: str, partition: int | None = None) -> list[OpenTransaction]:
    """The open transactions of ``topic`` (one partition, or all), oldest first per partition."""
    meta = load_topic(storage, topic)
    parts = range(meta.partitions) if partition is None else [partition]
    out = []
    for p in parts:
        if not 0 <= p < meta.partitions:
            raise ConfigError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {p}")
        m = ManifestStore(storage, topic, p).latest()
        if m is None:
            continue
        out += sorted((OpenTransaction(topic, p, pid, st.epoch, st.txn_first_offset, st.last_timestamp)
                       for pid, st in m.producers.items() if st.txn_first_offset is not None),
                      key=lambda t: t.first_offset)
    return out


def abort_transaction(storage: Storage, topic: str, partition: int, producer_id: int,
                      producer_epoch: int) -> OpenTransaction:
    """Write an ABORT marker ending ``producer_id``'s open transaction at the partition; the
    transaction it ended. :class:`ConfigError` when that producer has none open there, or
    its epoch differs (a newer producer instance owns the id: its coordinator ends it)."""
    found = [t for t in open_transactions(storage, topic, partition) if t.producer_id == producer_id]
    if not found:
        raise ConfigError(f"producer {producer_id} has no open transaction on {topic}/{partition}")
    txn = found[0]
    if txn.producer_epoch != producer_epoch:
        raise ConfigError(f"producer {producer_id}'s open transaction on {topic}/{partition} has "
                          f"epoch {txn.producer_epoch}, not {producer_epoch}")
    writer = LogWriter(storage, producer_id=producer_id, producer_epoch=producer_epoch,
                       housekeeping=False)
    writer.write_marker(topic, partition, commit=False)
    return txn
