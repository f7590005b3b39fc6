"""Loaded tables (rows, dead letters, the validated tag) committed directly with the
Iceberg table API: the quality-gate and vacuum tests."""
from __future__ import annotations

import uuid

import pyarrow as pa

from pipelines.warehouse.commit import commit as iceberg_commit, KafkaCommit
from pipelines.warehouse.properties import VALIDATED_TAG
from pipelines.spec.offset_ranges import OffsetRange
from tests.helpers.iceberg_tables import write


T0 = 1_704_067_200_000        # 2024-01-01T00:00Z
SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                    ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC"))])
DL_SCHEMA = pa.schema(list(SCHEMA) + [pa.field("error", pa.string())])


def rows(topic, partition, offsets, *, ts=None, keys=None, error=None):
    """Kafka-schema rows: one per offset, timestamps T0 + offset seconds unless given."""
    n = len(offsets)
    ts = ts if ts is not None else [T0 + o * 1000 for o in offsets]
    cols = {"key": keys if keys is not None else [b"k%d" % o for o in offsets],
            "value": [b"{}"] * n, "topic": [topic] * n, "partition": [partition] * n,
            "offset": list(offsets), "timestamp": [t * 1000 for t in ts]}
    if error is not None:
        cols["error"] = [error] * n
        return pa.table(cols, schema=DL_SCHEMA)
    return pa.table(cols, schema=SCHEMA)



def commit(wh, name, ranges, data=(), dead=(), *, operation="load", delete_from=()):
    """Commit ``data`` (and ``dead`` to ``<name>_dead_letters``) as one run;
    ``ranges``: ``{(topic, partition): (from, until)}``. Returns the snapshot id."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    rs = tuple(OffsetRange(t, p, a, b) for (t, p), (a, b) in sorted(ranges.items()))
    if dead:
        dl = wh.create_table(name + "_dead_letters", DL_SCHEMA)
        iceberg_commit(dl, KafkaCommit(run, operation, rs,
                                       files=tuple(write(wh, dl, d) for d in dead)))
    table = wh.create_table(name, SCHEMA)
    deletes = tuple(OffsetRange(t, p, a, b) for (t, p), (a, b) in sorted(ranges.items())
                    ) if operation == "reprocess" else ()
    return iceberg_commit(table, KafkaCommit(
        run, operation, rs, files=tuple(write(wh, table, d) for d in data),
        delete_from=delete_from or deletes)).snapshot_id


def tag(wh, name):
    snap = wh.table(name).snapshot_by_name(VALIDATED_TAG)
    return None if snap is None else snap.snapshot_id


def validated_offsets(wh, name):
    t = wh.table(name)
    snap = t.snapshot_by_name(VALIDATED_TAG)
    if snap is None:
        return []
    return sorted(t.scan(snapshot_id=snap.snapshot_id).to_arrow()["offset"].to_pylist())
