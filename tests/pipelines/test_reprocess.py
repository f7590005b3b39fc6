"""Reprocess: an audited commit replacing a table's rows at and after an offset or time."""
from __future__ import annotations

import json

import pytest

from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.retention import delete_records
from pipelines import warehouse as wh
from pipelines.load import run_load
from pipelines.reprocess import run_reprocess
from tests.pipelines.test_load import (T0, assert_exactly_once, make_topic, produce,
                                       rows_by_offset, table_offsets)


def _value(i):
    # Every 3rd record has a string id: a dead letter under "id long". Partition 0
    # holds them at offsets 1, 4, 7, 10, 13.
    return json.dumps({"id": f"x{i}" if i % 3 == 2 else i, "name": f"n{i}"}).encode()


@pytest.fixture
def loaded(spark, local_root):
    """A 2-partition topic (30 records) loaded as JSON with ``id long``, in two commits."""
    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 20, value=_value)
    opts = {"value_format": "json", "value_schema": "id long"}
    run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl", progress=False, **opts)
    produce(storage, "t", 10, start=20, value=_value)
    run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl", progress=False, **opts)
    return root, warehouse, storage


def test_reprocess_one_partition_from_an_offset(spark, loaded):
    root, warehouse, storage = loaded
    table = wh.Table(warehouse, "tbl")
    before = table.state()
    p1_files = {f.path for f in before.files_of("t", 1)}
    dead_before = table_offsets(table, kinds=("dead_letter",))
    # Offset 7 of partition 0 falls inside the first load's file [0, 10).
    # The fix being rolled out: the schema gains the name field.
    s = run_reprocess(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                      partitions=[0], from_offset=7, reason="add name",
                      load_options={"value_format": "json", "value_schema": "id long, name string"},
                      progress=False)
    assert s.version == 3 and not s.noop
    assert s.partitions[0]["requested_from"] == 7 and s.partitions[0]["effective_from"] == 0
    assert s.partitions[0]["until"] == 15 and s.copied_rows > 0
    state = table.state()
    # Nothing else moved: same committed ranges, partition 1 untouched.
    assert state.offsets == before.offsets
    assert {f.path for f in state.files_of("t", 1)} == p1_files
    # At and after 7 the rows are decoded with the new schema, rows below are as they were.
    rows = rows_by_offset(table)
    assert all(rows[(0, o)]["name"] == f"n{2 * o}" for o in (8, 9, 11, 12, 14))
    assert all(rows[(0, o)]["name"] is None for o in (0, 2, 3, 5, 6))
    assert all(rows[(p, o)]["name"] is None for (p, o) in rows if p == 1)
    assert rows[(0, 2)]["id"] == 4
    # Dead letters at and after 7 were re-derived by this run; the rest kept.
    assert table_offsets(table, kinds=("dead_letter",)) == dead_before
    redone = [f for f in state.files_of("t", 0) if f.version == 3]
    assert {f.kind for f in redone} == {"data", "dead_letter"}
    assert_exactly_once(storage, "t", table)
    # Audited: who, why, from where.
    version, commit = table.history()[-1]
    assert version == 3 and commit.operation == "reprocess" and commit.run_id == s.run_id
    assert commit.info["reason"] == "add name" and commit.info["from_offset"] == 7
    assert commit.info["requested_from"] == {"0": 7}
    assert commit.user is not None
    assert [(r.partition, r.from_offset, r.until) for r in commit.ranges] == [(0, 0, 15)]
    assert "rewound to 7" in s.render()


def test_reprocess_all_partitions_from_a_timestamp(spark, loaded):
    root, warehouse, storage = loaded
    table = wh.Table(warehouse, "tbl")
    # Records i >= 12 are at or after T0 + 12 s: offsets >= 6 in both partitions.
    s = run_reprocess(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                      from_timestamp=T0 + 12_000, reason="replay",
                      load_options={"value_format": "json", "value_schema": "id long"},
                      progress=False)
    assert {p: d["requested_from"] for p, d in s.partitions.items()} == {0: 6, 1: 6}
    commit = table.read_commit(s.version)
    assert commit.info["from_timestamp"] == T0 + 12_000
    assert {r.partition for r in commit.ranges} == {0, 1}
    assert s.rows + s.dead_letters == 18      # offsets 6..14 of two partitions
    assert_exactly_once(storage, "t", table)
    # A timestamp after everything loaded: nothing to do.
    late = run_reprocess(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                         from_timestamp=T0 + 10 ** 9, progress=False)
    assert late.noop and table.state().version == s.version


def test_reprocess_refusals(spark, loaded):
    root, warehouse, storage = loaded
    kw = dict(spark=spark, root=root, topic="t", warehouse=warehouse, table="tbl", progress=False)
    with pytest.raises(WarehouseError, match="loaded .0, 15. only"):
        run_reprocess(partitions=[0], from_offset=16, **kw)
    with pytest.raises(ConfigError, match="exactly one"):
        run_reprocess(from_offset=1, from_timestamp=1, **kw)
    with pytest.raises(WarehouseError, match="nothing to reprocess"):
        run_reprocess(**{**kw, "topic": "other"}, from_offset=0)
    delete_records(storage, "t", 0, 5)
    with pytest.raises(WarehouseError, match="log now starts at 5"):
        run_reprocess(partitions=[0], from_offset=3, **kw)
    assert wh.Table(warehouse, "tbl").state().version == 2


def test_reprocess_refused_when_a_load_commits_meanwhile(spark, loaded):
    from tests.faults import faulty_storage

    root, warehouse, storage = loaded
    produce(storage, "t", 4, start=30, value=_value)
    wh_storage, fs = faulty_storage(warehouse)

    def load_first(op, path):
        run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                 value_format="json", value_schema="id long", progress=False)

    fs.on_write(load_first, match="_commits/", count=1)
    with pytest.raises(WarehouseError, match="table changed while reprocessing"):
        run_reprocess(spark, root=root, topic="t", warehouse=wh_storage, table="tbl",
                      from_offset=10, progress=False)
    table = wh.Table(warehouse, "tbl")
    assert table.state().version == 3 and table.history()[-1][1].operation == "load"
    assert_exactly_once(storage, "t", table)
