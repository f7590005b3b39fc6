"""Rows, records and foreign-engine deletes for the upsert, maintain, CDC and upsert
reprocess tests."""
from __future__ import annotations

import os
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.jobs.upsert import TOMBSTONE

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                    ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC"))])


def staged(records, tombstones=True):
    """Staged upsert rows (pipelines.upsert) from dicts with key, value (None: a
    tombstone), partition, offset and timestamp (µs)."""
    cols = {n: [r[n] for r in records] for n in ("key", "value", "partition", "offset",
                                                 "timestamp")}
    t = pa.table({"key": pa.array(cols["key"], pa.binary()),
                  "value": pa.array(cols["value"], pa.binary()),
                  "topic": pa.array(["t"] * len(records), pa.string()),
                  "partition": pa.array(cols["partition"], pa.int32()),
                  "offset": pa.array(cols["offset"], pa.int64()),
                  "timestamp": pa.array(cols["timestamp"], pa.timestamp("us", tz="UTC"))})
    if tombstones:
        t = t.append_column(TOMBSTONE, pa.array([v is None for v in cols["value"]]))
    return t


def produce_records(storage, records, topic: str = "t"):
    """Send dicts with key, value, partition (optional) and timestamp (ms) with the Broker."""
    from kafkastore.write.log_writer import LogWriter as Broker

    broker = Broker(storage, batch_size=256)
    for r in records:
        broker.send(topic, r["value"], key=r["key"], timestamp=r["timestamp"],
                    partition=r.get("partition"))
    broker.flush()


def add_position_delete(table, task, position):
    """A position delete file for row ``position`` of ``task``'s file, committed as a
    merge-on-read engine (Spark, Trino) would."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    url = f"{table.location()}/data/delete-{uuid.uuid4().hex}.parquet"
    deletes = pa.table({"file_path": [task.file.file_path],
                        "pos": pa.array([position], pa.int64())})
    with fsspec.open(url, "wb") as f:
        pq.write_table(deletes, f)
    df = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=url,
                            file_format=FileFormat.PARQUET, partition=task.file.partition,
                            record_count=1, file_size_in_bytes=os.path.getsize(url[7:]),
                            spec_id=task.file.spec_id)
    with table.transaction() as txn:
        with txn.update_snapshot().fast_append() as app:
            app.append_data_file(df)
