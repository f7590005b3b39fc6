"""Reprocess: one audited Iceberg transaction replacing a table's rows at and after
an offset or time (delete + append), refused over compacted ranges unless allowed."""
from __future__ import annotations

import json
import os

import pytest

from kafkastore.errors import ConfigError, TableChangedError, WarehouseError
from kafkastore.maintenance.retention import delete_records
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.offsets import committed_offsets
from pipelines.warehouse.snapshots import history
from pipelines.warehouse.reads import plan_scan
from pipelines.warehouse import commit as warehouse_commit
from pipelines.jobs.load import run_load
from pipelines.jobs.reprocess import run_reprocess
from tests.helpers.loads import (T0, assert_exactly_once, committed, make_topic, produce,
                                 rows_by_offset, table_offsets)

JSON = {"value_format": "json", "value_schema": "id long"}


def _value(i):
    # Every 3rd record has a string id: a dead letter under "id long". Partition 0
    # holds them at offsets 1, 4, 7, 10, 13.
    return json.dumps({"id": f"x{i}" if i % 3 == 2 else i, "name": f"n{i}"}).encode()


@pytest.fixture
def loaded(spark, local_root):
    """A 2-partition topic (30 records) loaded as JSON with ``id long``, in two commits."""
    root = f"{local_root}/log"
    wh = Warehouse(f"{local_root}/wh")
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 20, value=_value)
    run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False, **JSON)
    produce(storage, "t", 10, start=20, value=_value)
    run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False, **JSON)
    return root, wh, storage


def test_reprocess_one_partition_from_an_offset(spark, loaded):
    root, wh, storage = loaded
    before = committed_offsets(wh.table("tbl"))
    p1_before = {k: v for k, v in rows_by_offset(wh).items() if k[0] == 1}
    dead_before = table_offsets(wh, kinds=("dead_letter",))
    snaps_before = len(wh.table("tbl").metadata.snapshots)
    # Offset 7 of partition 0 falls inside the first load's file [0, 10).
    # The fix being rolled out: the schema gains the name field.
    s = run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl", partitions=[0],
                      from_offset=7, reason="add name",
                      load_options={"value_format": "json", "value_schema": "id long, name string"},
                      progress=False)
    assert not s.noop and s.partitions[0]["requested_from"] == 7
    assert s.partitions[0]["until"] == 15
    tbl = wh.table("tbl")
    # One transaction: exactly one new snapshot (an overwrite), offsets unchanged.
    assert len(tbl.metadata.snapshots) == snaps_before + 1
    assert tbl.current_snapshot().summary.operation.value == "overwrite"
    assert committed_offsets(tbl) == before
    rows = rows_by_offset(wh)
    assert {k: v for k, v in rows.items() if k[0] == 1} == {
        k: {**v, "name": None} for k, v in p1_before.items()}
    # At and after 7 the rows are decoded with the new schema, rows below as they were.
    assert all(rows[(0, o)]["name"] == f"n{2 * o}" for o in (8, 9, 11, 12, 14))
    assert all(rows[(0, o)]["name"] is None for o in (0, 2, 3, 5, 6))
    assert rows[(0, 2)]["id"] == 4
    # Dead letters at and after 7 were re-derived by this run; the rest kept.
    assert table_offsets(wh, kinds=("dead_letter",)) == dead_before
    assert_exactly_once(storage, "t", wh)
    # Audited: who, why, from where.
    info = history(tbl)[-1]
    assert info.kafkastore_operation == "reprocess" and info.run_id == s.run_id
    assert info.audit["reason"] == "add name" and info.audit["from_offset"] == 7
    assert info.audit["requested"] == {"0": 7} and info.audit["user"] is not None
    assert info.ranges == [{"topic": "t", "partition": 0, "from": 7, "until": 15}]
    assert history(wh.table("tbl_dead_letters"))[-1].kafkastore_operation == "reprocess"
    assert "rewound to 7" in s.render()
    # No delete files: path readers (Spark) can read the snapshot.
    assert plan_scan(tbl).urls()


def test_reprocess_all_partitions_from_a_timestamp(spark, loaded):
    root, wh, storage = loaded
    # Records i >= 12 are at or after T0 + 12 s: offsets >= 6 in both partitions.
    s = run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl",
                      from_timestamp=T0 + 12_000, reason="replay", load_options=JSON,
                      progress=False)
    assert {p: d["requested_from"] for p, d in s.partitions.items()} == {0: 6, 1: 6}
    info = history(wh.table("tbl"))[-1]
    assert info.audit["from_timestamp"] == T0 + 12_000
    assert s.rows + s.dead_letters == 18      # offsets 6..14 of two partitions
    assert_exactly_once(storage, "t", wh)
    # A timestamp after everything loaded: nothing to do.
    late = run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl",
                         from_timestamp=T0 + 10 ** 9, load_options=JSON, progress=False)
    assert late.noop and wh.table("tbl").current_snapshot().snapshot_id == s.snapshot_id


def test_reprocess_refusals(spark, loaded):
    root, wh, storage = loaded
    kw = dict(spark=spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False,
              load_options=JSON)
    head = wh.table("tbl").current_snapshot().snapshot_id
    with pytest.raises(WarehouseError, match="loaded up to 15 only"):
        run_reprocess(partitions=[0], from_offset=16, **kw)
    with pytest.raises(ConfigError, match="exactly one"):
        run_reprocess(from_offset=1, from_timestamp=1, **kw)
    with pytest.raises(WarehouseError, match="nothing to reprocess"):
        run_reprocess(**{**kw, "topic": "other"}, from_offset=0)
    delete_records(storage, "t", 0, 5)
    with pytest.raises(WarehouseError, match="log now starts at 5"):
        run_reprocess(partitions=[0], from_offset=3, **kw)
    assert wh.table("tbl").current_snapshot().snapshot_id == head
    # Explicitly allowed: rows below the log start leave the table, recorded.
    s = run_reprocess(partitions=[0], from_offset=3, allow_below_log_start=True, **kw)
    assert s.partitions[0]["below_log_start"] and s.partitions[0]["effective_from"] == 5
    assert table_offsets(wh)[0] == [0, 1, 2] + list(range(5, 15))
    assert history(wh.table("tbl"))[-1].audit["below_log_start"] == [0]


def test_reprocess_over_compacted_range_is_refused_unless_allowed(spark, local_root):
    from pipelines.jobs.log_compaction import compact_topic

    root = f"{local_root}/log"
    wh = Warehouse(f"{local_root}/wh")
    storage = make_topic(root, partitions=1, **{"cleanup.policy": "compact",
                                                "min.cleanable.dirty.ratio": "0.01",
                                                "segment.ms": "1"})
    # 40 records over 4 keys: compaction keeps the last per key.
    from kafkastore.write.log_writer import LogWriter as Broker

    broker = Broker(storage, batch_size=256)
    for i in range(40):
        broker.send("t", f"v{i}".encode(), key=f"k{i % 4}".encode(), timestamp=T0 + i)
        if i % 5 == 4:
            broker.flush()
    broker.flush()
    run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False)
    assert len(table_offsets(wh)[0]) == 40
    report = compact_topic(spark, root, "t", force=True)
    assert report.ok
    with pytest.raises(WarehouseError, match="compacted since the table loaded.*--allow-compacted"):
        run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl", from_offset=0,
                      progress=False)
    assert len(table_offsets(wh)[0]) == 40
    s = run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl", from_offset=0,
                      allow_compacted=True, reason="accept compaction", progress=False)
    assert s.partitions[0]["compacted"]
    audit = history(wh.table("tbl"))[-1].audit
    assert audit["allow_compacted"] and audit["compacted"] == [0]
    assert len(table_offsets(wh)[0]) < 40
    # Now the table holds what the compacted log holds: no longer refused.
    again = run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl", from_offset=0,
                          progress=False)
    assert not again.partitions[0]["compacted"]
    assert table_offsets(wh)[0] == log_offsets(storage)


def log_offsets(storage, topic="t", partition=0):
    from kafkastore.read.reader import PartitionReader

    return PartitionReader(storage, topic, partition).read(0).column("offset").to_pylist()


def test_reprocess_refused_when_a_load_commits_meanwhile(spark, loaded, monkeypatch):
    root, wh, storage = loaded
    produce(storage, "t", 4, start=30, value=_value)
    real = warehouse_commit._build
    fired = []

    def load_first(table, c, branch):
        if c.operation == "reprocess" and not fired and table.name()[-1] == "tbl":
            fired.append(1)
            monkeypatch.setattr("pipelines.warehouse.commit._build", real)
            run_load(spark, root=root, topic="t", warehouse=wh, table="tbl", progress=False,
                     **JSON)
        return real(table, c, branch)

    monkeypatch.setattr("pipelines.warehouse.commit._build", load_first)
    with pytest.raises(TableChangedError, match="moved from 15 to 17"):
        run_reprocess(spark, root=root, topic="t", warehouse=wh, table="tbl", from_offset=10,
                      load_options=JSON, progress=False)
    assert history(wh.table("tbl"))[-1].kafkastore_operation == "load"
    assert committed(wh) == {0: 17, 1: 17}
    assert_exactly_once(storage, "t", wh)


def test_reprocess_with_a_data_file_deleted_outside_iceberg_is_one_line(spark, loaded, capsys,
                                                                        tmp_path):
    """A 46-line traceback; now the one-line error ``sql`` gives,
    exit 1, nothing committed."""
    from pipelines.cli import main

    root, wh, _ = loaded
    tbl = wh.table("tbl")
    snaps = len(tbl.metadata.snapshots)
    dl_snaps = len(wh.table("tbl_dead_letters").metadata.snapshots)
    victim = sorted(plan_scan(tbl).files)[0]
    os.remove(victim[len("file://"):])
    conf = tmp_path / "k.yaml"
    conf.write_text("loads: [{topic: t, table: tbl, value_format: json, "
                    "value_schema: 'id long'}]\n")
    capsys.readouterr()
    rc = main(["--root", root, "--conf", str(conf), "reprocess", "t", "--warehouse", wh.url,
               "--table", "tbl", "--from-offset", "3"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert "is missing" in err and "removed outside Iceberg" in err and "tbl" in err
    assert len(wh.table("tbl").metadata.snapshots) == snaps
    assert len(wh.table("tbl_dead_letters").metadata.snapshots) == dl_snaps
