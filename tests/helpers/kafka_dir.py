"""Kafka partition directories built with kafka-python's batch builder (the tests of
import and of upload freshness)."""
from __future__ import annotations

import struct

import pytest

kp_records = pytest.importorskip("kafka.record.default_records")


def kafka_batch(base: int, values, *, ts=1_700_000_000_000, pid=-1, epoch=-1, seq=-1,
                txn=False, codec=0, keys=None) -> bytes:
    """A v2 batch as a Kafka producer builds it, with the base offset a broker assigns."""
    b = kp_records.DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=txn,
                                             producer_id=pid, producer_epoch=epoch,
                                             base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        key = None if keys is None else keys[i]
        b.append(i, timestamp=ts + i, key=key, value=v, headers=[("src", b"kafka")])
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base)          # outside the CRC, as a broker does
    return bytes(buf)


def write_kafka_dir(parent, name, segments, *, leftovers=True):
    """``segments``: {base offset: [batch bytes]}; writes ``<base>.log`` files and what else a
    broker leaves in a partition directory."""
    d = parent / name
    d.mkdir()
    for base, batches in segments.items():
        (d / f"{base:020d}.log").write_bytes(b"".join(batches))
    if leftovers:
        (d / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        (d / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
        (d / f"{0:020d}.snapshot").write_bytes(b"\x00\x01")
        (d / f"{0:020d}.txnindex").write_bytes(b"")
        (d / f"{0:020d}.log.deleted").write_bytes(b"junk")
    return d
