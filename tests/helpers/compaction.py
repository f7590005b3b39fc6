"""Compacted topics for the compaction tests (tests/kafkastore/test_compaction.py,
tests/pipelines/test_compaction*.py): make, produce, read back, check."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.maintenance import compaction_rewrite
from kafkastore.maintenance.compaction import KIND_RECORD, KIND_TXN, SCAN_SCHEMA
from kafkastore.manifest import Manifest, ManifestStore
from kafkastore.read.reader import EARLIEST, PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

T0 = 1_700_000_000_000
DAY = 24 * 3600 * 1000
TOPIC = "t"


def make_topic(storage: Storage, name: str = TOPIC, partitions: int = 1, **config) -> None:
    """A compacted topic; ``config`` keys use underscores for dots (segment_bytes=...)."""
    conf = {"cleanup.policy": "compact"}
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    create_topic(storage, name, partitions, conf, now_ms=T0)


def produce(storage: Storage, items, *, ts: int = T0, topic: str = TOPIC, partition: int = 0,
            broker: Broker | None = None, flush: bool = True) -> Broker:
    """Send ``(key, value)`` pairs (str or None) with timestamp ``ts``; one flush = one commit."""
    broker = broker or Broker(storage, clock=lambda: ts, producer_id=1)
    for key, value in items:
        broker.send(topic, None if value is None else value.encode(),
                    key=None if key is None else key.encode(), timestamp=ts, partition=partition)
    if flush:
        broker.flush()
    return broker


def produce_segments(storage: Storage, rounds, *, ts: int = T0, step: int = 0, **kw) -> None:
    """One flush (hence at least one segment) per list of ``(key, value)`` in ``rounds``."""
    for i, items in enumerate(rounds):
        produce(storage, items, ts=ts + i * step, **kw)


def produce_rounds(storage: Storage, rounds) -> None:
    """Each ``(items, kind)`` of ``rounds`` as one flush: plain, or one transaction of its
    own producer (``100 + i``) committed or aborted; then a plain head record, so every
    round lies below the partition's head."""
    for i, (items, kind) in enumerate(rounds):
        if kind == "plain":
            produce(storage, items)
            continue
        txn = Broker(storage, clock=lambda: T0, producer_id=100 + i)
        txn.begin_transaction()
        produce(storage, items, broker=txn)
        (txn.commit_transaction if kind == "commit" else txn.abort_transaction)()
    produce(storage, [("z", "head")])


def read_all(storage: Storage, topic: str = TOPIC, partition: int = 0,
             manifest: Manifest | None = None) -> list[tuple[int, str, str | None]]:
    """Every committed record as ``(offset, key, value)`` (read_committed)."""
    reader = PartitionReader(storage, topic, partition, manifest=manifest)
    t = reader.read(EARLIEST)
    return [(o, k.decode() if k is not None else None, v.decode() if v is not None else None)
            for o, k, v in zip(t["offset"].to_pylist(), t["key"].to_pylist(), t["value"].to_pylist())]


def latest_per_key(records) -> dict[str, tuple[int, str | None]]:
    """key -> (offset, value) of its last record."""
    out = {}
    for o, k, v in records:
        out[k] = (o, v)
    return out


def latest_manifest(storage: Storage, topic: str = TOPIC, partition: int = 0) -> Manifest:
    return ManifestStore(storage, topic, partition).latest()


def check_compacted(before, after, cleaned_below: int) -> None:
    """Kafka's guarantees between two reads of a partition (a compaction in between):
    offsets and values never change, order never changes, nothing at or above
    ``cleaned_below`` is removed, and the last record of every key survives
    (tombstones aside: callers check those)."""
    original = {o: (k, v) for o, k, v in before}
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for o, k, v in after:
        assert original[o] == (k, v)
    kept = set(offsets)
    assert [o for o, _, _ in before if o >= cleaned_below] == [o for o in offsets if o >= cleaned_below]
    for k, (o, v) in latest_per_key(before).items():
        if v is not None:
            assert o in kept, f"last value of key {k!r} (offset {o}) was removed"


def scan_rows(keys, max_size: int = 60):
    """A Hypothesis strategy of a compaction scan's rows, as tuples ``(plan, group, kind, key,
    dirty, producer id, last data, last marker)``: records of ``keys`` and transaction rows,
    over two partition plans and four groups (for :func:`scan_table`)."""
    return st.lists(st.tuples(
        st.integers(0, 1),                                     # plan (partition)
        st.integers(0, 3),                                     # group
        st.sampled_from([KIND_RECORD, KIND_RECORD, KIND_TXN]),
        st.sampled_from(keys),                                 # key (records)
        st.booleans(),                                         # dirty
        st.integers(1, 3),                                     # producer id (transaction rows)
        st.integers(-1, 60), st.integers(-1, 60)),             # last data / last marker
        max_size=max_size)


def scan_table(rows, shuffle) -> pa.Table:
    """The scan table (``SCAN_SCHEMA``) of :func:`scan_rows`' ``rows`` in an order drawn by
    ``shuffle`` (a ``random.Random``): a record's offset is its row number; a transaction row
    is keyed by its producer id at its group's base offset, as ``scan_task`` makes them."""
    dicts = []
    for i, (plan, grp, kind, key, dirty, pid, ld, lm) in enumerate(rows):
        if kind == KIND_RECORD:
            dicts.append({"plan": plan, "grp": grp, "kind": kind, "key": key, "offset": i,
                          "dirty": dirty, "pid": -1, "last_data": -1, "last_marker": -1})
        else:
            dicts.append({"plan": plan, "grp": grp, "kind": kind, "key": pid.to_bytes(8, "big"),
                          "offset": 100 * grp, "dirty": False, "pid": pid, "last_data": ld,
                          "last_marker": lm})
    shuffle.shuffle(dicts)
    return pa.Table.from_pylist(dicts, schema=SCAN_SCHEMA)


def counting_decoder(monkeypatch, skip_bytes: int | None = None) -> list[int]:
    """Rows of every decode compaction's rewrite makes (the wrapped decoder is the real
    one). With ``skip_bytes``, stretches of that many bytes or more of batches without
    survivors are skipped (the rewrite's ``REWRITE_SKIP_BYTES``)."""
    if skip_bytes is not None:
        monkeypatch.setattr(compaction_rewrite, "REWRITE_SKIP_BYTES", skip_bytes)
    rows: list[int] = []
    real = compaction_rewrite.decode_to_arrow

    def counting(*args, **kwargs):
        rb = real(*args, **kwargs)
        rows.append(rb.num_rows)
        return rb

    monkeypatch.setattr(compaction_rewrite, "decode_to_arrow", counting)
    return rows
