"""``kafkastore maintain`` (pipelines.maintain): small files into target-sized
ones and delete files folded, one snapshot carrying the offsets forward, safe beside loads."""
from __future__ import annotations


import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import KafkaCommit, commit, committed_offsets
from pipelines.warehouse.reads import plan_scan, read_arrow
from pipelines.cli import main as cli_main
from pipelines.jobs.maintain import maintain
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.spec.table_layout import TableLayout
from pipelines.warehouse.files import write_files
from pipelines.jobs.upsert import mode_properties, rows_commit
from tests.helpers.upsert import SCHEMA, add_position_delete
from tests.helpers.upsert import staged as _rows

T0_US = 1_700_000_000_000_000


def _append(table, partition, start, count, run_id):
    rows = pa.table({"key": pa.array([f"k{i}".encode() for i in range(start, start + count)]),
                     "value": pa.array([b"v"] * count),
                     "topic": ["t"] * count, "partition": pa.array([partition] * count, pa.int32()),
                     "offset": pa.array(range(start, start + count), pa.int64()),
                     "timestamp": pa.array([T0_US] * count, pa.timestamp("us", tz="UTC"))})
    files = write_files(table.location(), rows, run_id=run_id,
                        layout=TableLayout(partition_by=()))
    return commit(table, KafkaCommit(
        run_id, "load", (OffsetRange("t", partition, start, start + count),),
        tuple(f["url"] for f in files), footers={f["url"]: (f["bytes"], f["footer"])
                                                 for f in files}))


@pytest.fixture
def table(tmp_path):
    wh = Warehouse(f"file://{tmp_path}/wh")
    tbl = wh.create_table("events", SCHEMA, TableLayout(partition_by=()))
    for i in range(4):
        _append(tbl, 0, i * 10, 10, f"r{i}")
    return tbl.refresh()


def _offsets(table):
    return committed_offsets(table.refresh())


def _sorted_rows(table, **kw):
    return sorted(read_arrow(table.refresh(), **kw).select(["partition", "offset"])
                  .to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def test_small_files_become_one_snapshot_with_the_offsets_carried(table):
    before = table.current_snapshot().snapshot_id
    rows = _sorted_rows(table)
    result = maintain(table)
    table = table.refresh()
    assert (result.stats.files_rewritten, result.stats.files_written) == (4, 1)
    assert len(plan_scan(table).files) == 1
    assert _sorted_rows(table) == rows
    snap = table.current_snapshot()
    assert snap.parent_snapshot_id == before
    assert snap.summary["kafkastore.operation"] == "maintain"
    assert committed_offsets(table) == {("t", 0): 40}
    # The replaced files stay for readers of the older snapshot (vacuum's job to expire).
    assert _sorted_rows(table, snapshot_id=before) == rows
    # Nothing left to do: no snapshot.
    assert maintain(table).snapshot_id is None
    # A load after maintenance starts from the carried offsets.
    _append(table, 0, 40, 5, "r4")
    assert _offsets(table) == {("t", 0): 45}


def test_maintain_racing_a_load_replans_and_keeps_the_load(table):
    """A load commits between maintenance's plan and its catalog swap: maintenance
    re-plans against the new head (the load's file is rewritten too, its offsets
    carried); the load is never lost."""
    racer = Warehouse(table.io.properties.get("warehouse") or
                          table.location().rsplit("/default/", 1)[0]).table("events")
    real = type(table.catalog).commit_table
    fired = []

    def race(self, tbl, requirements, updates):
        if not fired:
            fired.append(1)
            _append(racer, 1, 0, 7, "racing-load")
        return real(self, tbl, requirements, updates)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(table.catalog), "commit_table", race)
        result = maintain(table)
    table = table.refresh()
    assert fired and result.snapshot_id == table.current_snapshot().snapshot_id
    assert committed_offsets(table) == {("t", 0): 40, ("t", 1): 7}
    assert len(_sorted_rows(table)) == 47
    assert table.current_snapshot().summary["kafkastore.operation"] == "maintain"
    assert result.stats.files_rewritten == 5


def test_position_deletes_are_folded_into_the_data(table):
    maintain(table)
    table = table.refresh()
    (task,) = list(table.scan().plan_files())
    add_position_delete(table, task, position=3)
    table = table.refresh()
    assert plan_scan(table).delete_files
    want = [r for r in _sorted_rows(table)]
    assert len(want) == 39
    result = maintain(table)
    table = table.refresh()
    assert result.stats.delete_files_folded == 1
    assert not plan_scan(table).delete_files
    assert plan_scan(table).urls()      # Spark may read the files directly again
    assert _sorted_rows(table) == want


def test_upsert_tables_are_rewritten_sorted_by_key_and_loads_go_on(tmp_path):
    wh = Warehouse(f"file://{tmp_path}/wh")
    tbl = wh.create_table("up", SCHEMA, TableLayout(partition_by=()), properties=mode_properties("upsert", ("key",)))
    for i in range(3):
        batch = [{"key": f"k{j}".encode(), "value": f"{i}".encode(), "partition": 0,
                  "offset": i * 10 + j, "timestamp": i * 10 + j} for j in range(i, 10, 3)]
        commit(tbl, rows_commit(f"u{i}", ("key",), (), [OffsetRange("t", 0, i * 10, i * 10 + 10)],
                                    (), _rows(batch)))
        tbl = tbl.refresh()
    state = {r["key"]: r["value"] for r in read_arrow(tbl).to_pylist()}
    maintain(tbl)
    tbl = tbl.refresh()
    (task,) = list(tbl.scan().plan_files())
    keys = pq.read_table(task.file.file_path[len("file://"):]).column("key").to_pylist()
    assert keys == sorted(keys)
    assert {r["key"]: r["value"] for r in read_arrow(tbl).to_pylist()} == state


def test_cli(table, capsys):
    wh = table.location().rsplit("/default/", 1)[0]
    assert cli_main(["maintain", "--warehouse", wh, "--table", "events", "--run-id", "m1"]) == 0
    assert "rewritten into 1" in capsys.readouterr().err
    assert cli_main(["maintain", "--warehouse", wh, "--table", "events"]) == 0
    assert "nothing to do" in capsys.readouterr().err
