"""The Spark-free Iceberg table API (pipelines/warehouse/): catalogs, offsets in
snapshots, the exactly-once commit under conflicts and lost responses, planning."""
from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.spec.job_config import load_config
from kafkastore.errors import (ConfigError, OffsetGapError, OffsetOverlapError,
                               SchemaEvolutionError, TableChangedError, TableNotFoundError,
                               UnsupportedDeletesError)
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.spec.table_layout import TableLayout, table_identifier
from pipelines.warehouse import commit as commit_module
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import KafkaCommit, commit, data_file
from pipelines.warehouse.offsets import committed_offsets, next_offsets
from pipelines.warehouse.reads import ScanPlan, plan_scan, read_arrow
from pipelines.warehouse.snapshots import history
from tests.helpers.iceberg_tables import SCHEMA, load, rows, write
from tests.faults import lose_catalog_response


@pytest.fixture
def wh(tmp_path):
    return Warehouse(f"file://{tmp_path}/wh")


@pytest.fixture
def table(wh):
    return wh.create_table("t", SCHEMA)


# --- names, catalogs, read-only uses create nothing ---------------------------------------


def test_table_identifier():
    assert table_identifier("orders") == ("default", "orders")
    assert table_identifier("sales.orders") == ("sales", "orders")
    for bad in ("", "a.b.c", "1x", "a-b", "a/b"):
        with pytest.raises(ConfigError):
            table_identifier(bad)


def test_non_local_warehouse_needs_a_catalog():
    with pytest.raises(ConfigError, match="catalog"):
        Warehouse("s3://bucket/wh")
    w = Warehouse("s3://bucket/wh", catalog={"type": "sql", "uri": "sqlite:////tmp/x.db"})
    assert w.properties["warehouse"] == "s3://bucket/wh"


def test_config_catalog_section(tmp_path):
    conf = tmp_path / "k.yaml"
    conf.write_text("warehouse: s3://b/wh\ncatalog: {type: rest, uri: 'http://127.0.0.1:1'}\n"
                    "storage_options: {key: k, secret: s, client_kwargs: {endpoint_url: 'http://e'}}\n")
    cfg = load_config(str(conf))
    w = Warehouse.from_config(cfg)
    assert w.properties["type"] == "rest" and w.properties["s3.endpoint"] == "http://e"
    assert w.properties["s3.access-key-id"] == "k"
    conf.write_text("catalog: [1]\n")
    with pytest.raises(ConfigError, match="catalog"):
        load_config(str(conf))


def test_unreachable_catalog_is_a_warehouse_error():
    from kafkastore.errors import WarehouseError

    w = Warehouse("s3://b/wh", catalog={"type": "rest", "uri": "http://127.0.0.1:9"})
    with pytest.raises(WarehouseError, match="cannot open the Iceberg catalog"):
        w.list_tables()


def test_read_only_uses_create_nothing(tmp_path):
    w = Warehouse(f"file://{tmp_path}/none")
    assert w.list_tables() == []
    assert w.load_table("t") is None
    assert committed_offsets(w.load_table("t")) == {}
    with pytest.raises(TableNotFoundError):
        w.table("t")
    assert not (tmp_path / "none").exists()


def test_create_list_and_partition_spec(wh, table):
    assert os.path.exists(wh.url[len("file://"):] + "/catalog.db")
    assert wh.list_tables() == ["t"]
    wh.create_table("ns.other", SCHEMA, TableLayout(partition_by=("partition", "hour(timestamp)")))
    assert wh.list_tables() == ["ns.other", "t"]
    spec = wh.table("ns.other").spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("partition", "identity"),
                                                                  ("timestamp_hour", "hour")]
    assert [f.name for f in table.spec().fields] == ["timestamp_day"]
    assert table.metadata.properties["commit.retry.num-retries"] == "0"
    assert wh.create_table("t", SCHEMA).metadata.table_uuid == table.metadata.table_uuid
    with pytest.raises(ConfigError):
        wh.create_table("u", SCHEMA, TableLayout(partition_by=("bucket(4, offset)",)))
    with pytest.raises(ConfigError, match="no column"):
        wh.create_table("u", SCHEMA, TableLayout(partition_by=("day(nope)",)))


# --- offsets in snapshots ----------------------------------------------------------------


def test_load_commit_records_offsets_and_summary(wh, table):
    r = load(wh, table, "orders", 0, 0, 10, run_id="r1")
    assert not r.noop
    table = table.refresh()
    assert committed_offsets(table) == {("orders", 0): 10}
    snap = table.current_snapshot()
    props = snap.summary.additional_properties
    assert json.loads(props["kafkastore.offsets"]) == {"orders": {"0": 10}}
    assert props["kafkastore.run-id"] == "r1" and props["kafkastore.operation"] == "load"
    assert json.loads(props["kafkastore.ranges"]) == [
        {"topic": "orders", "partition": 0, "from": 0, "until": 10}]
    load(wh, table, "orders", 1, 5, 8)      # first load of partition 1 may start anywhere
    load(wh, table, "orders", 0, 10, 12)
    table = table.refresh()
    assert committed_offsets(table) == {("orders", 0): 12, ("orders", 1): 8}
    assert read_arrow(table).num_rows == 15
    # the data file's partition value came from its timestamps
    plan = plan_scan(table)
    assert len(plan.urls()) == 3 and plan.records == 15


def test_overlap_gap_and_same_run_id(wh, table):
    load(wh, table, "t", 0, 0, 10, run_id="a")
    before = table.refresh().current_snapshot().snapshot_id
    with pytest.raises(OffsetOverlapError):
        load(wh, table, "t", 0, 5, 15)
    with pytest.raises(OffsetGapError):
        load(wh, table, "t", 0, 11, 15)
    again = load(wh, table, "t", 0, 0, 10, run_id="a")
    assert again.noop and again.snapshot_id == before
    assert table.refresh().current_snapshot().snapshot_id == before
    # an explicit gap (retention deleted [10, 20) first) is accepted and recorded
    load(wh, table, "t", 0, 20, 25, gaps=(OffsetRange("t", 0, 10, 20),))
    props = table.refresh().current_snapshot().summary.additional_properties
    assert json.loads(props["kafkastore.gaps"])[0]["from"] == 10
    assert committed_offsets(table.refresh()) == {("t", 0): 25}


def test_empty_commit_advances_offsets(wh, table):
    commit(table, KafkaCommit("e", "load", (OffsetRange("t", 0, 0, 7),)))
    table = table.refresh()
    assert committed_offsets(table) == {("t", 0): 7}
    assert read_arrow(table).num_rows == 0


def test_snapshots_of_other_engines_are_skipped(wh, table):
    load(wh, table, "t", 0, 0, 10)
    # another engine appends (no kafkastore summary) and changes a property
    table.refresh().add_files([write(wh, table, rows("t", 9, 0, 3))])
    with table.refresh().transaction() as txn:
        txn.set_properties(owner="someone")
    table = table.refresh()
    assert table.current_snapshot().summary.additional_properties.get("kafkastore.offsets") is None
    assert committed_offsets(table) == {("t", 0): 10}
    load(wh, table, "t", 0, 10, 12)
    assert committed_offsets(table.refresh()) == {("t", 0): 12}
    kinds = [h.kafkastore_operation for h in history(table.refresh())]
    assert kinds == ["load", None, "load"]


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 3), st.integers(0, 5)),
                max_size=20))
@settings(max_examples=200, deadline=None)
def test_next_offsets_property(steps):
    """Committed ends only move by accepted contiguous ranges: the map after a
    sequence of loads equals the sum of the accepted ranges per partition."""
    committed: dict = {}
    covered: dict = {}
    for p, delta, n in steps:
        start = committed.get(("t", p), 0) + delta
        r = OffsetRange("t", p, max(0, start), max(0, start) + n)
        try:
            committed = next_offsets(committed, "load", [r])
        except (OffsetOverlapError, OffsetGapError):
            assert ("t", p) in committed and r.from_offset != committed[("t", p)]
            continue
        covered.setdefault(p, []).append((r.from_offset, r.until_offset))
    for p, spans in covered.items():
        for (a, b), (c, _) in zip(spans, spans[1:]):
            assert b == c   # contiguous: no overlap, no gap
        assert committed[("t", p)] == spans[-1][1]


def test_reprocess_validation():
    committed = {("t", 0): 10}
    assert next_offsets(committed, "reprocess", [OffsetRange("t", 0, 4, 10)],
                            expected=committed) == {("t", 0): 10}
    with pytest.raises(OffsetGapError):
        next_offsets(committed, "reprocess", [OffsetRange("t", 0, 11, 12)])
    with pytest.raises(TableChangedError):
        next_offsets(committed, "reprocess", [OffsetRange("t", 0, 4, 10)],
                         expected={("t", 0): 8})


# --- conflicts and lost responses -------------------------------------------------------


def test_blind_retry_is_off_and_conflict_reaches_our_code(wh, table):
    """Two writers from the same base: the loser's CommitFailedException reaches
    kafkastore (pyiceberg does not re-apply it), which reloads and re-validates."""
    from pyiceberg.exceptions import CommitFailedException

    stale = wh.table("t")
    load(wh, table, "t", 0, 0, 10)
    txn = stale.transaction()
    txn.set_properties(x="1")
    txn.add_files([write(wh, stale, rows("t", 5, 0, 1))])
    with pytest.raises(CommitFailedException):
        txn.commit_transaction()
    # the stale writer's kafkastore commit of the same range is re-validated: overlap
    with pytest.raises(OffsetOverlapError):
        load(wh, stale, "t", 0, 0, 10, run_id="other")
    # a non-overlapping range commits after the reload
    load(wh, stale, "t", 0, 10, 20)
    assert committed_offsets(wh.table("t")) == {("t", 0): 20}


def test_table_without_the_property_gets_it(wh):
    cat = wh.catalog(create=True)
    cat.create_namespace_if_not_exists("default")
    t = cat.create_table(("default", "plain"), schema=SCHEMA)
    assert t.metadata.properties.get("commit.retry.num-retries") is None
    load(wh, t, "t", 0, 0, 3)
    assert wh.table("plain").metadata.properties["commit.retry.num-retries"] == "0"


def test_racing_load_same_base_loses_then_noop_or_refused(wh, table, monkeypatch):
    """A racing writer commits between our build and our commit: we get the
    conflict, reload and find the range taken (overlap) or our run (no-op)."""
    real = commit_module._build
    calls = []

    def racing(tbl, c, branch):
        out = real(tbl, c, branch)
        if not calls:
            calls.append(1)
            load(wh, wh.table("t"), "t", 0, 0, 10, run_id="winner")
        return out

    monkeypatch.setattr(commit_module, "_build", racing)
    url = write(wh, table, rows("t", 0, 0, 10))
    with pytest.raises(OffsetOverlapError):
        commit(table, KafkaCommit("loser", "load", (OffsetRange("t", 0, 0, 10),), (url,)))
    assert read_arrow(wh.table("t")).num_rows == 10
    calls.clear()
    # the same run id racing itself (a retried driver): the second sees a no-op
    url = write(wh, table, rows("t", 0, 10, 12))

    def same(tbl, c, branch):
        out = real(tbl, c, branch)
        if not calls:
            calls.append(1)
            commit(wh.table("t"), c)
        return out

    monkeypatch.setattr(commit_module, "_build", same)
    r = commit(wh.table("t"), KafkaCommit("dup", "load", (OffsetRange("t", 0, 10, 12),),
                                                  (url,)))
    assert r.noop and read_arrow(wh.table("t")).num_rows == 12


@pytest.mark.parametrize("landed", [True, False])
def test_lost_catalog_response_is_read_back(wh, table, monkeypatch, landed):
    """The catalog call fails with an unknown outcome after (or before) applying
    the commit: the run id decides; files are never deleted."""
    lose_catalog_response(monkeypatch, wh.catalog(), landed=landed)
    url = write(wh, table, rows("t", 0, 0, 10))
    r = commit(table, KafkaCommit("lost", "load", (OffsetRange("t", 0, 0, 10),), (url,)))
    assert r.read_back is landed and r.attempts == (1 if landed else 2)
    t = wh.table("t")
    assert len(t.metadata.snapshots) == 1          # exactly once
    assert read_arrow(t).num_rows == 10
    assert os.path.exists(url[len("file://"):])


def test_losing_every_race_gives_up_with_the_one_error(wh, table, monkeypatch):
    """A catalog that always reports another writer's win: after ``max_attempts`` the
    commit gives up with CommitGaveUpError (backing off in between), nothing committed."""
    from pyiceberg.exceptions import CommitFailedException

    from kafkastore.commit import Clock
    from kafkastore.errors import CommitGaveUpError

    def always_lost(self, tbl, requirements, updates):
        raise CommitFailedException("requirement failed: branch main has changed")

    monkeypatch.setattr(type(wh.catalog()), "commit_table", always_lost)
    url = write(wh, table, rows("t", 0, 0, 10))
    slept = []
    with pytest.raises(CommitGaveUpError, match="run busy after 3 conflicting attempts"):
        commit(table, KafkaCommit("busy", "load", (OffsetRange("t", 0, 0, 10),), (url,)),
                   max_attempts=3, clock=Clock(sleep=slept.append))
    assert len(slept) == 2 and all(0 <= s <= 0.1 for s in slept)
    assert wh.table("t").metadata.snapshots == [] and os.path.exists(url[len("file://"):])


def test_schema_union_and_incompatible_change(wh, table):
    load(wh, table, "t", 0, 0, 2)
    url = write(wh, table, rows("t", 0, 2, 4, extra={"color": ["red", "blue"]}))
    commit(table, KafkaCommit("s", "load", (OffsetRange("t", 0, 2, 4),), (url,),
                                      schema=rows("t", 0, 2, 4, extra={"color": ["a", "b"]}).schema))
    out = read_arrow(wh.table("t")).sort_by("offset")
    assert out.column("color").to_pylist() == [None, None, "red", "blue"]
    bad = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.string())])
    with pytest.raises(SchemaEvolutionError):
        commit(wh.table("t"), KafkaCommit("b", "load", (OffsetRange("t", 0, 4, 5),),
                                                  schema=bad))
    assert committed_offsets(wh.table("t")) == {("t", 0): 4}


# --- reprocess transaction, planning and time travel ----------------------------------


def test_reprocess_is_one_transaction_with_audit(wh, table):
    load(wh, table, "t", 0, 0, 10)
    load(wh, table, "t", 1, 0, 5)
    first = wh.table("t").current_snapshot().snapshot_id
    url = write(wh, table, rows("t", 0, 6, 10))
    audit = {"requested": {"0": 6}, "effective": {"0": 6}, "user": "me", "reason": "bug 12"}
    r = commit(wh.table("t"), KafkaCommit(
        "rp", "reprocess", (OffsetRange("t", 0, 6, 10),), (url,),
        delete_from=(OffsetRange("t", 0, 6, 10),), audit=audit,
        expected={("t", 0): 10}))
    t = wh.table("t")
    out = read_arrow(t)
    assert sorted(out.filter(pa.compute.equal(out["partition"], 0))["offset"].to_pylist()) == list(range(10))
    assert out.num_rows == 15
    h = history(t)
    assert h[-1].kafkastore_operation == "reprocess" and h[-1].audit["reason"] == "bug 12"
    assert h[-1].snapshot_id == r.snapshot_id
    assert committed_offsets(t) == {("t", 0): 10, ("t", 1): 5}
    # time travel: the snapshot before the reprocess, by id and by timestamp
    assert read_arrow(t, snapshot_id=first).num_rows == 15
    ts = t.snapshot_by_id(first).timestamp_ms
    assert plan_scan(t, as_of_ms=ts).snapshot_id == first
    with pytest.raises(TableNotFoundError):
        plan_scan(t, as_of_ms=0)
    t.manage_snapshots().create_tag(first, "before").commit()
    assert plan_scan(wh.table("t"), ref="before").snapshot_id == first
    with pytest.raises(TableNotFoundError):
        plan_scan(t, ref="nope")


def test_delete_files_are_refused_for_path_readers(wh, table):
    plan = ScanPlan("t", 1, ("file:///a.parquet",), ("file:///d.parquet",), 3)
    with pytest.raises(UnsupportedDeletesError):
        plan.urls()


def test_s3_warehouse_with_local_sqlite_catalog(tmp_path, s3_endpoint):
    w = Warehouse(f"s3://kafkastore-test/wh-{uuid.uuid4().hex[:8]}",
                      catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"},
                      storage_options={"client_kwargs": {"endpoint_url": s3_endpoint}})
    t = w.create_table("t", SCHEMA)
    load(w, t, "t", 0, 0, 5, run_id="s3")
    t = w.table("t")
    assert committed_offsets(t) == {("t", 0): 5}
    assert all(u.startswith("s3://") for u in plan_scan(t).urls())
    assert read_arrow(t).num_rows == 5
    assert load(w, t, "t", 0, 0, 5, run_id="s3").noop


# --- data file entries from the writers' footers ----------------------------------------


def test_data_file_from_a_writers_footer_equals_reading_the_file(wh):
    """A load's commit builds each data file entry from the footer its writer kept
    (write_files' descriptor): the same entry pyiceberg builds by reading the file's
    footer back, for partitioned tables and nulls; a file that does not fit is refused
    alike; a commit with footers adds the files as readable rows."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from pipelines.warehouse.files import write_files

    table = wh.create_table("f", SCHEMA, TableLayout(partition_by=("partition", "day(timestamp)")))
    data = pa.concat_tables([rows("orders", p, 0, 30, day=d) for p in (0, 1) for d in (0, 3)])
    data = data.set_column(4, "value", pa.array([None if i % 7 == 0 else b"v"
                                                 for i in range(data.num_rows)], pa.binary()))
    files = write_files(table.location(), data, run_id="r", layout=TableLayout(
        partition_by=("partition", "day(timestamp)")))
    assert len(files) == 4
    md = table.metadata
    for f in files:
        mine = data_file(md, f["url"], f["bytes"], f["footer"])
        theirs = parquet_file_to_data_file(table.io, md, f["url"])
        # every field (DataFile's own == compares paths only)
        assert [mine[i] for i in range(len(mine))] == [theirs[i] for i in range(len(theirs))]
        assert mine.record_count == 30 and mine.file_size_in_bytes == f["bytes"]
    c = KafkaCommit("r", "load", (OffsetRange("orders", 0, 0, 60), OffsetRange("orders", 1, 0, 60)),
                        files=tuple(f["url"] for f in files),
                        footers={f["url"]: (f["bytes"], f["footer"]) for f in files})
    commit(table, c)
    assert read_arrow(table.refresh()).num_rows == 120
    other = write_files(table.location(), pa.table({"topic": ["t"], "partition": pa.array([0], pa.int32()),
                                                    "offset": [0], "extra": [1.5]}),
                        run_id="x", layout=TableLayout(partition_by=()))
    with pytest.raises(ValueError):
        parquet_file_to_data_file(table.io, md, other[0]["url"])
    with pytest.raises(ValueError):
        data_file(md, other[0]["url"], other[0]["bytes"], other[0]["footer"])
