"""Iceberg tables of log-shaped rows committed with the Spark-free table API (the tests
of pipelines/iceberg.py and of vacuum)."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.warehouse.commit import KafkaCommit, commit
from pipelines.spec.offset_ranges import OffsetRange

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC")), ("value", pa.binary())])
DAY = 86_400_000_000


def rows(topic, partition, start, stop, day=0, extra=None):
    cols = {"topic": [topic] * (stop - start), "partition": [partition] * (stop - start),
            "offset": list(range(start, stop)),
            "timestamp": [day * DAY + i for i in range(start, stop)],
            "value": [b"v%d" % i for i in range(start, stop)]}
    schema = SCHEMA
    if extra:
        cols.update(extra)
        schema = pa.schema(list(SCHEMA) + [pa.field(k, pa.string()) for k in extra])
    return pa.table(cols, schema=schema)


def write(wh, table, data) -> str:
    """Write ``data`` as one Parquet file under the table location; return its URL."""
    import fsspec

    url = f"{table.location()}/data/{uuid.uuid4().hex}.parquet"
    with fsspec.open(url, "wb", **wh.storage_options) as f:
        pq.write_table(data, f)
    return url


def load(wh, table, topic, p, start, stop, run_id=None, **kw):
    url = write(wh, table, rows(topic, p, start, stop))
    c = KafkaCommit(run_id or f"run-{uuid.uuid4().hex[:8]}", "load",
                        (OffsetRange(topic, p, start, stop),), files=(url,), **kw)
    return commit(table, c)
