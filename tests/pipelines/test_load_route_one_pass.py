"""A route-by-field load reads its offset range once: each task splits its decoded batch by
route value and writes every route table's files from it; each table still commits its own
offsets (exactly once per table), and together the tables hold every record once."""
from __future__ import annotations

import json

import pytest

from kafkastore.write.log_writer import LogWriter
from pipelines.jobs.load_many import ManyLoadRequest, load_many
from pipelines.warehouse import commit as warehouse_commit
from pipelines.warehouse.catalog import Warehouse
from tests.helpers.loads import committed, count_split_reads, log_records, make_topic, table_offsets

ROUTE = {"topic": "events", "route_field": "region", "table_template": "ev_{field}",
         "value_format": "json", "value_schema": "id long, region string"}
TABLES = ["ev_apac", "ev_eu", "ev_other", "ev_us"]


def _send(storage, events):
    """``events``: ``(id, region, partition)``; a region of ``"?"`` sends a value that
    does not decode."""
    writer = LogWriter(storage)
    for i, region, partition in events:
        value = b"not json" if region == "?" else json.dumps({"id": i, "region": region}).encode()
        writer.send("events", value, key=str(i).encode(), partition=partition)
    writer.flush()


def _run(spark, root, wh, **entry):
    return load_many(spark, ManyLoadRequest.build(root=root, warehouse=wh,
                                                  spec={**ROUTE, **entry}, progress=False))


@pytest.fixture
def counted_reads(monkeypatch, tmp_path):
    """The number of records the jobs' tasks read from the log: each read of a split
    appends its record count to a file (the tasks run in Spark's Python workers)."""
    return count_split_reads(monkeypatch, tmp_path / "reads")


def _ids(wh, table):
    from pipelines.warehouse.reads import read_arrow

    return sorted(r["id"] for r in read_arrow(wh.table(table), columns=["id"]).to_pylist())


def _every_record_once(storage, wh, tables):
    """Every log record below the tables' (common) committed offsets is in exactly one
    route table or its dead letters, and no table holds an offset twice."""
    ends = [committed(wh, t, "events") for t in tables]
    assert all(e == ends[0] for e in ends), ends
    held: dict[int, list[int]] = {}
    for t in tables:
        for p, offsets in table_offsets(wh, t).items():
            assert len(offsets) == len(set(offsets)), f"{t} p{p}: an offset twice"
            held.setdefault(p, []).extend(offsets)
    for p, records in log_records(storage, "events").items():
        want = [o for o, _ in records if o < ends[0].get(p, 0)]
        assert sorted(held.get(p, [])) == want, f"p{p}"


def test_a_routed_load_of_four_tables_reads_its_range_once(spark, local_root, tmp_path,
                                                           counted_reads):
    storage = make_topic(local_root, "events", partitions=2)
    regions = ["eu", "us", "apac", None, "eu", "?"]
    _send(storage, [(i, regions[i % len(regions)], i % 2) for i in range(36)])
    wh = Warehouse(f"file://{tmp_path}/wh")

    summary = _run(spark, local_root, wh, route_default="ev_other")
    assert not summary.failed
    assert sorted(s.table for s in summary.tables) == TABLES
    # Once: not once per table plus once for the value counts (5 x 36 before).
    assert counted_reads() == 36
    assert _ids(wh, "ev_eu") == [i for i in range(36) if i % 6 in (0, 4)]
    assert _ids(wh, "ev_us") == [i for i in range(36) if i % 6 == 1]
    assert _ids(wh, "ev_apac") == [i for i in range(36) if i % 6 == 2]
    assert _ids(wh, "ev_other") == [i for i in range(36) if i % 6 == 3]
    assert sum(len(v) for v in table_offsets(wh, "ev_other", ("dead_letter",)).values()) == 6
    for table in TABLES:
        assert committed(wh, table, "events") == {0: 18, 1: 18}
    _every_record_once(storage, wh, TABLES)

    # The next run reads only what came since.
    _send(storage, [(36, "eu", 0), (37, "apac", 1)])
    summary = _run(spark, local_root, wh, route_default="ev_other")
    assert not summary.failed and counted_reads() == 2
    by_table = {s.table: s for s in summary.tables}
    assert by_table["ev_eu"].ranges == {0: (18, 19), 1: (18, 19)} and by_table["ev_eu"].rows == 1
    assert by_table["ev_us"].rows == 0 and by_table["ev_other"].rows == 0
    _every_record_once(storage, wh, TABLES)


def test_a_table_behind_the_others_takes_only_its_own_range(spark, local_root, tmp_path,
                                                             monkeypatch, counted_reads):
    """The pass reads from the least committed offset of the route's tables; a table
    further on (here on both partitions) takes only the rows of its own range from it."""
    storage = make_topic(local_root, "events", partitions=2)
    _send(storage, [(i, ("eu", "us")[i % 2], i % 2) for i in range(4)])
    wh = Warehouse(f"file://{tmp_path}/wh")
    _run(spark, local_root, wh)
    _send(storage, [(4, "eu", 1), (5, "zz", 1)])
    real = warehouse_commit.commit

    def crash_at_zz(tbl, kc, **kw):
        if tbl.name()[-1] == "ev_zz":
            raise KeyboardInterrupt("killed between two tables' commits")
        return real(tbl, kc, **kw)

    monkeypatch.setattr(warehouse_commit, "commit", crash_at_zz)
    with pytest.raises(KeyboardInterrupt):
        _run(spark, local_root, wh)
    monkeypatch.setattr(warehouse_commit, "commit", real)
    assert committed(wh, "ev_eu", "events") == {0: 2, 1: 4}
    _send(storage, [(6, "eu", 1)])
    counted_reads()

    summary = _run(spark, local_root, wh)
    by_table = {s.table: s for s in summary.tables}
    assert not summary.failed
    assert by_table["ev_zz"].ranges == {0: (0, 2), 1: (0, 5)}
    assert by_table["ev_eu"].ranges == {1: (4, 5)}   # p0: nothing new for it
    assert counted_reads() == 7   # one pass from the empty table's start
    assert _ids(wh, "ev_eu") == [0, 2, 4, 6] and _ids(wh, "ev_us") == [1, 3]
    assert _ids(wh, "ev_zz") == [5]
    _every_record_once(storage, wh, ["ev_eu", "ev_us", "ev_zz"])
