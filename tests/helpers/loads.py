"""Topics and warehouse tables for the load, reprocess and failure tests: produce, inspect
a table's offsets and rows, check exactly-once."""
from __future__ import annotations

import os

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic, load_topic
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.warehouse.offsets import committed_offsets
from tests.helpers.roots import make_root_url

DAY = 86_400_000
T0 = 1_700_000_000_000 - (1_700_000_000_000 % DAY) + DAY - 30_000   # 30 s before midnight UTC


def storage_options_for(url: str) -> dict | None:
    """Explicit S3 options for moto (Python workers may predate the moto env)."""
    if url.startswith("s3://"):
        return {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing",
                "secret": "testing"}
    return None


def make_topic(root: str, topic: str = "t", partitions: int = 2, options=None, **configs) -> Storage:
    storage = Storage(root, options)
    create_topic(storage, topic, partitions, {"segment.bytes": "2048", **configs})
    return storage


def produce(storage: Storage, topic: str, count: int, *, start: int = 0, value=None,
            ts=None, flush_every: int = 7) -> None:
    """``count`` records numbered ``start..``, round-robin over partitions, with a
    header, a key, and timestamps one second apart from T0 (crossing midnight)."""
    broker = Broker(storage, batch_size=256)
    parts = load_topic(storage, topic).partitions
    for i in range(start, start + count):
        v = value(i) if value else f"value-{i}".encode()
        broker.send(topic, v, key=f"k{i}".encode(), headers=[("h", str(i).encode())],
                    timestamp=ts(i) if ts else T0 + i * 1000, partition=i % parts)
        if (i + 1) % flush_every == 0:
            broker.flush()
    broker.flush()


def log_records(storage: Storage, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """``{partition: [(offset, value), ...]}`` of the whole readable log."""
    out = {}
    for p in range(load_topic(storage, topic).partitions):
        t = PartitionReader(storage, topic, p).read(-2)
        out[p] = list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))
    return out


def warehouse_for(url: str, tmp_path=None, options=None) -> Warehouse:
    """The Warehouse of ``url``: embedded catalog for file://, else SQLite on local disk."""
    catalog = None
    if not url.startswith("file://"):
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog-{abs(hash(url))}.db"}
    return Warehouse(url, catalog, options)


def _tables(wh: Warehouse, table: str, kinds):
    names = {"data": table, "dead_letter": table + "_dead_letters"}
    return [t for t in (wh.load_table(names[k]) for k in kinds) if t is not None]


def table_offsets(wh: Warehouse, table: str = "tbl",
                  kinds=("data", "dead_letter")) -> dict[int, list[int]]:
    """``{partition: sorted offsets}`` over the current snapshot of the tables of ``kinds``."""
    out: dict[int, list[int]] = {}
    for t in _tables(wh, table, kinds):
        rows = read_arrow(t, columns=["partition", "offset"])
        for p, o in zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist()):
            out.setdefault(p, []).append(o)
    return {p: sorted(v) for p, v in out.items()}


def committed(wh: Warehouse, table: str = "tbl", topic: str = "t") -> dict[int, int]:
    return {p: n for (t, p), n in committed_offsets(wh.load_table(table)).items() if t == topic}


def assert_exactly_once(storage: Storage, topic: str, wh: Warehouse, table: str = "tbl") -> None:
    """Every log offset below the committed one is in the table (or its dead
    letters) exactly once, and nothing else is; the dead-letter table never
    claims less than the table. Dead letters are committed first, so after a
    crash between the two commits they may run ahead of the table: rows at or
    past the table's offsets are left out here (the next load does not write
    them again, which the rerun checks)."""
    log = log_records(storage, topic)
    done = committed(wh, table, topic)
    data = table_offsets(wh, table, kinds=("data",))
    dead = table_offsets(wh, table, kinds=("dead_letter",))
    for p, records in log.items():
        end = done.get(p, 0)
        want = [o for o, _ in records if o < end]
        have = sorted(data.get(p, []) + [o for o in dead.get(p, []) if o < end])
        assert len(have) == len(set(have)), f"p{p}: duplicate offsets in the table"
        assert have == want, f"p{p}: table offsets differ from the log"
        assert done.get(p, 0) <= PartitionReader(storage, topic, p).high_watermark
    dl = wh.load_table(table + "_dead_letters")
    if dl is not None:
        for (t, p), n in committed_offsets(dl).items():
            assert n >= done.get(p, 0) or t != topic


def rows_by_offset(wh: Warehouse, table: str = "tbl", columns=None) -> dict[tuple[int, int], dict]:
    back = read_arrow(wh.table(table), columns=columns)
    return {(r["partition"], r["offset"]): r for r in back.to_pylist()}


def log_and_warehouse(backend: str, tmp_path, request, *, partitions: int = 2):
    """A fresh log root and warehouse side by side on ``backend`` with topic ``t`` of
    ``partitions`` partitions: ``(root, warehouse, storage, storage_options)``."""
    base = make_root_url(backend, tmp_path, request)
    options = storage_options_for(base)
    root = f"{base}/log"
    wh = warehouse_for(f"{base}/warehouse", tmp_path, options)
    return root, wh, make_topic(root, partitions=partitions, options=options), options


def local_log_and_warehouse(local_root: str, *, partitions: int, records: int):
    """A log root and warehouse side by side under ``local_root`` (a local URL), with topic
    ``t`` of ``partitions`` partitions holding ``records`` records (:func:`produce`):
    ``(root, warehouse, storage)``."""
    root = f"{local_root}/log"
    wh = warehouse_for(f"{local_root}/warehouse")
    storage = make_topic(root, partitions=partitions)
    produce(storage, "t", records)
    return root, wh, storage


def count_split_reads(monkeypatch, path):
    """Count the records a load's tasks read from the log: each read of a split appends its
    record count to ``path`` (the tasks run in Spark's Python workers, so a file, not a
    variable). Returns ``records_read()``: the total since the last call."""
    # lazy: the write engine loads the Spark side; most users of these helpers do not need it
    from pipelines.jobs import write_engine

    path.write_text("")
    real = write_engine.split_reader
    out = str(path)

    def counting_reader(root, storage_options, splits, include_headers=True):
        read = real(root, storage_options, splits, include_headers)

        def run(batches):
            for rb in read(batches):
                with open(out, "a") as f:
                    f.write(f"{rb.num_rows}\n")
                yield rb

        return run

    monkeypatch.setattr(write_engine, "split_reader", counting_reader)

    def records_read() -> int:
        total = sum(int(n) for n in path.read_text().split())
        path.write_text("")
        return total

    return records_read
