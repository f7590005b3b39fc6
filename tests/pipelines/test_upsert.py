"""Upsert tables: one row per key, exactly once (pipelines.upsert).

The merge logic is checked against a reference model (:func:`pipelines.upsert.apply_model`)
many times without Spark; the commit path (copy-on-write through
:func:`pipelines.iceberg.commit`) with crashes, reruns and races on real pyiceberg tables;
the load itself (Spark, ``kafkastore sql``) by a few end-to-end examples.
"""
from __future__ import annotations

import io
import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.errors import ConfigError, OffsetOverlapError
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import commit
from pipelines.warehouse.reads import read_arrow, plan_scan
from pipelines.warehouse.offsets import committed_offsets
from pipelines.warehouse.snapshots import history
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.spec.table_layout import TableLayout
from pipelines.jobs.upsert import (TOMBSTONE, apply_model, beats, merge, mode_properties,
                              reduce_batch, rows_commit)
from tests.faults import lose_catalog_response
from tests.helpers.upsert import SCHEMA, add_position_delete, produce_records
from tests.helpers.upsert import staged as _rows

KEYS = [f"k{i}".encode() for i in range(4)]
T_US = 1_700_000_000_000_000
def _as_dict(tbl) -> dict:
    return {r["key"]: r["value"] for r in tbl.select(["key", "value"]).to_pylist()}


def _model_dict(records) -> dict:
    return {k: r["value"] for k, r in apply_model({}, records).items()}


def _apply_pure(state, batch):
    """One load by the pure functions: ``state`` (an Arrow table) merged with ``batch``."""
    winners = reduce_batch(_rows(batch), ("key",))
    keep, insert = merge(state, winners, ("key",))
    new = winners.filter(pa.array(insert)).drop_columns([TOMBSTONE])
    return pa.concat_tables([state.filter(pa.array(keep)), new.select(state.column_names)])


@st.composite
def histories(draw, monotone_clock: bool):
    """Records over a few keys and partitions with offsets per partition. Timestamps:
    one increasing clock (``monotone_clock``), else increasing per partition only."""
    n = draw(st.integers(1, 30))
    next_offset = {0: 0, 1: 0, 2: 0}
    last_ts = {0: 0, 1: 0, 2: 0}
    clock = 0
    out = []
    for _ in range(n):
        p = draw(st.sampled_from([0, 1, 2]))
        if monotone_clock:
            clock += draw(st.integers(1, 3))
            ts = clock
        else:
            ts = last_ts[p] + draw(st.integers(0, 5))
        last_ts[p] = ts
        value = draw(st.one_of(st.none(), st.binary(min_size=1, max_size=3)))
        out.append({"key": draw(st.sampled_from(KEYS)), "value": value, "partition": p,
                    "offset": next_offset[p], "timestamp": ts})
        next_offset[p] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(histories(monotone_clock=False))
def test_one_batch_keeps_the_latest_record_per_key(records):
    state = _apply_pure(SCHEMA.empty_table(), records)
    assert state.num_rows == len(set(state.column("key").to_pylist()))
    assert _as_dict(state) == _model_dict(records)


@settings(max_examples=300, deadline=None)
@given(histories(monotone_clock=True), st.lists(st.integers(0, 30), max_size=5))
def test_any_split_into_runs_gives_the_model(records, cuts):
    state = SCHEMA.empty_table()
    bounds = sorted({0, len(records), *[c for c in cuts if c < len(records)]})
    for a, b in zip(bounds, bounds[1:]):
        state = _apply_pure(state, records[a:b])
    assert _as_dict(state) == _model_dict(records)


@settings(max_examples=200, deadline=None)
@given(histories(monotone_clock=False), st.lists(st.integers(0, 30), max_size=4))
def test_staging_only_the_last_record_per_key_and_partition_changes_nothing(records, cuts):
    """What each Spark task stages (pipelines.upsert.last_per_partition over any cut of
    the records) reduces to the same winners as all the records."""
    from pipelines.jobs.upsert import last_per_partition

    bounds = sorted({0, len(records), *[c for c in cuts if c < len(records)]})
    staged = pa.concat_tables([last_per_partition(_rows(records[a:b]), ("key",))
                               for a, b in zip(bounds, bounds[1:])])
    assert staged.num_rows <= len(records)
    assert reduce_batch(staged, ("key",)).sort_by("key").to_pylist() == \
        reduce_batch(_rows(records), ("key",)).sort_by("key").to_pylist()


def test_rule_for_keys_moving_between_partitions():
    """Same partition: the higher offset wins even with an older timestamp. Between
    partitions: the later timestamp, then the higher partition, then the offset."""
    assert beats((0, 5, 10), (0, 4, 99))          # same partition: offset
    assert not beats((0, 3, 99), (0, 4, 10))
    assert beats((1, 0, 11), (0, 9, 10))          # moved: the later timestamp
    assert not beats((1, 0, 9), (0, 9, 10))
    assert beats((1, 0, 10), (0, 9, 10))          # tie: the higher partition
    # Loaded in two runs: the older record of the other partition does not win.
    old = [{"key": b"a", "value": b"new", "partition": 0, "offset": 0, "timestamp": 50}]
    late = [{"key": b"a", "value": b"stale", "partition": 1, "offset": 0, "timestamp": 20}]
    state = _apply_pure(_apply_pure(SCHEMA.empty_table(), old), late)
    assert _as_dict(state) == {b"a": b"new"}
    # A tombstone of the newer partition deletes the row of the old one.
    gone = [{"key": b"a", "value": None, "partition": 1, "offset": 1, "timestamp": 60}]
    assert _as_dict(_apply_pure(state, gone)) == {}


# ---------------------------------------------------------------------------
# the commit path: copy-on-write on real pyiceberg tables


def _table(tmp_path, name="up", target=None):
    wh = Warehouse(f"file://{tmp_path}/wh")
    return wh, wh.create_table(name, SCHEMA, TableLayout(partition_by=()), properties=mode_properties("upsert", ("key",)))


def _ranges(batch):
    by_p: dict[int, list[int]] = {}
    for r in batch:
        by_p.setdefault(r["partition"], []).append(r["offset"])
    return [OffsetRange("t", p, min(v), max(v) + 1) for p, v in sorted(by_p.items())]


def _commit(table, batch, run_id, target_rows=2):
    c = rows_commit(run_id, ("key",), (), _ranges(batch), (), _rows(batch),
                    target_rows=target_rows)
    return commit(table, c), c


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories(monotone_clock=True), st.lists(st.integers(0, 30), max_size=4),
       st.lists(st.sampled_from(["ok", "lost-landed", "lost-not-landed", "rerun"]),
                min_size=5, max_size=5))
def test_commits_with_crashes_and_reruns_give_the_model(tmp_path_factory, records, cuts,
                                                         faults):
    """Every run either commits once or not at all, whatever fails: a lost catalog
    response (applied or not) is settled by reading back, a rerun of a committed run id
    is a no-op; pyiceberg's scan gives exactly the model's dict with one row per key."""
    import uuid

    tmp = tmp_path_factory.mktemp("up")
    wh, table = _table(tmp, f"up_{uuid.uuid4().hex[:8]}")
    bounds = sorted({0, len(records), *[c for c in cuts if c < len(records)]})
    with pytest.MonkeyPatch.context() as mp:
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            fault = faults[i % len(faults)]
            if fault.startswith("lost"):
                lose_catalog_response(mp, table.catalog, landed=fault == "lost-landed")
            _commit(table, records[a:b], f"run-{a}-{b}")
            mp.undo()
            if fault == "rerun":
                assert _commit(table, records[a:b], f"run-{a}-{b}")[0].noop
            table = table.refresh()
    state = read_arrow(table)
    assert state.num_rows == len(set(state.column("key").to_pylist()))
    assert _as_dict(state) == _model_dict(records)
    assert {p: n for (_, p), n in committed_offsets(table).items()} == {
        p: max(r["offset"] for r in records if r["partition"] == p) + 1
        for p in {r["partition"] for r in records}}


def test_a_load_rewrites_only_the_files_holding_its_keys(tmp_path):
    """Files are written sorted by key and cut small: changing one key rewrites one file."""
    _, table = _table(tmp_path)
    first = [{"key": k, "value": b"v0", "partition": 0, "offset": i, "timestamp": i}
             for i, k in enumerate([f"k{i:02d}".encode() for i in range(20)])]
    _, c = _commit(table, first, "r1", target_rows=4)
    assert c.rewrite.stats.files_written == 5
    table = table.refresh()
    change = [{"key": b"k13", "value": b"v1", "partition": 0, "offset": 20, "timestamp": 20}]
    _, c = _commit(table, change, "r2", target_rows=4)
    assert (c.rewrite.stats.files_touched, c.rewrite.stats.rows_read) == (1, 4)
    table = table.refresh()
    assert len(plan_scan(table).files) == 5
    assert _as_dict(read_arrow(table))[b"k13"] == b"v1"
    summary = table.current_snapshot().summary
    assert summary["kafkastore.offsets"] == json.dumps({"t": {"0": 21}})
    assert summary.operation.value == "overwrite"


def test_racing_upserts_replan_and_never_lose_a_commit(tmp_path):
    """Another commit lands between this one's plan and its catalog swap: the conflict
    re-plans against the new files (the racer's rows survive)."""
    wh, table = _table(tmp_path)
    _commit(table, [{"key": b"a", "value": b"1", "partition": 0, "offset": 0, "timestamp": 1},
                    {"key": b"b", "value": b"1", "partition": 1, "offset": 0, "timestamp": 1}],
            "r1")
    table = table.refresh()
    racer = wh.table("up")
    real = type(table.catalog).commit_table
    fired = []

    def race(self, tbl, requirements, updates):
        if not fired:
            fired.append(1)
            _commit(racer, [{"key": b"b", "value": b"racer", "partition": 1, "offset": 1,
                             "timestamp": 2}], "racer")
        return real(self, tbl, requirements, updates)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(table.catalog), "commit_table", race)
        result, _ = _commit(table, [{"key": b"a", "value": b"2", "partition": 0, "offset": 1,
                                     "timestamp": 3}], "r2")
    assert result.attempts == 2
    table = table.refresh()
    assert _as_dict(read_arrow(table)) == {b"a": b"2", b"b": b"racer"}
    # The racer's range again: refused, not applied twice.
    with pytest.raises(OffsetOverlapError):
        _commit(table, [{"key": b"b", "value": b"x", "partition": 1, "offset": 1,
                         "timestamp": 4}], "racer-again")


def test_modes_do_not_mix(tmp_path):
    from pipelines.jobs.upsert import check_mode

    wh, table = _table(tmp_path)
    with pytest.raises(ConfigError, match="upsert table"):
        check_mode(table, "up", "append", ())
    with pytest.raises(ConfigError, match="keyed by key"):
        check_mode(table, "up", "upsert", ("id",))
    plain = wh.create_table("plain", SCHEMA, TableLayout(partition_by=()))
    with pytest.raises(ConfigError, match="append table"):
        check_mode(plain, "plain", "upsert", ("key",))
    with pytest.raises(ConfigError, match="key_columns"):
        LoadSpec(topic="t", table="x", mode="append", key_columns=("a",))
    # No mode given: the table's; key columns or --cdc imply upsert.
    assert LoadSpec(topic="t", table="x", key_columns=("a",)).mode == "upsert"
    assert LoadSpec(topic="t", table="up").for_table(table).mode == "upsert"
    assert LoadSpec(topic="t", table="plain").for_table(plain).mode == "append"
    assert LoadSpec(topic="t", table="new").for_table(None).mode == "append"
    spec = LoadSpec.from_entry({"topic": "t", "table": "x", "mode": "upsert",
                                "key_columns": "id, region"})
    assert spec.upsert_keys == ("id", "region")
    assert LoadSpec(topic="t", table="x", mode="upsert").upsert_keys == ("key",)


# ---------------------------------------------------------------------------
# end to end: Spark loads, pyiceberg and kafkastore sql agree


def _sql_dict(spark, warehouse, table="up"):
    from pipelines.sql import run_sql

    out = io.StringIO()
    run_sql(spark, f"SELECT key, value FROM {table}", root=None, warehouse=warehouse,
            fmt="jsonl", out=out)
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    return {r["key"]: r["value"] for r in rows}


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(["k0", "k1", "k2"]), st.sampled_from([0, 1]),
                          st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))),
                min_size=1, max_size=12),
       st.lists(st.integers(1, 11), min_size=1, max_size=2))
def test_spark_upsert_loads_match_the_model_and_sql(spark, tmp_path_factory, ops, cuts):
    """Records produced and loaded in several runs (one crashing at the catalog), each a
    Spark load with --mode upsert: pyiceberg and kafkastore sql both give the model."""
    from tests.helpers.loads import make_topic

    tmp = tmp_path_factory.mktemp("sp")
    root, warehouse = f"file://{tmp}/log", f"file://{tmp}/wh"
    storage = make_topic(root, partitions=2)
    wh = Warehouse(warehouse)
    spec = LoadSpec(topic="t", table="up", mode="upsert", partition_by=())
    offsets = {0: 0, 1: 0}
    records = []
    for i, (k, p, v) in enumerate(ops):
        records.append({"key": k.encode(), "value": None if v is None else v.encode(),
                        "partition": p, "offset": offsets[p], "timestamp": 1_700_000_000_000 + i})
        offsets[p] += 1
    bounds = sorted({0, len(records), *[c for c in cuts if c < len(records)]})
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        produce_records(storage, records[a:b])
        with pytest.MonkeyPatch.context() as mp:
            existing = wh.load_table("up")
            fired = (lose_catalog_response(mp, existing.catalog, landed=i % 2 == 1)
                     if existing is not None else [])
            s = run_load(spark, root=root, warehouse=wh, spec=spec, progress=False)
            assert bool(fired) == (existing is not None) and not s.noop
        assert run_load(spark, root=root, warehouse=wh, spec=spec, progress=False).noop
    # Staging files are removed once committed: only the table's files remain.
    assert not list((tmp / "wh" / "default" / "up").glob("upsert-staging/**/*.parquet"))
    want = {k.decode(): v.decode() for k, v in _model_dict(records).items()}
    got = {k.decode(): v.decode() for k, v in _as_dict(read_arrow(wh.table("up"))).items()}
    assert got == want
    assert _sql_dict(spark, warehouse) == want


def test_spark_upsert_by_value_columns_with_tombstones(spark, tmp_path):
    """--key-columns of a JSON value; a tombstone's key columns come from its JSON key."""
    from tests.helpers.loads import make_topic

    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=1)
    rows = [({"id": 1}, {"id": 1, "name": "a"}), ({"id": 2}, {"id": 2, "name": "b"}),
            ({"id": 1}, {"id": 1, "name": "a2"}), ({"id": 2}, None)]
    produce_records(storage, [{"key": json.dumps(k).encode(),
                        "value": None if v is None else json.dumps(v).encode(),
                        "partition": 0, "timestamp": 1_700_000_000_000 + i}
                       for i, (k, v) in enumerate(rows)])
    spec = LoadSpec(topic="t", table="people", mode="upsert", key_columns=("id",),
                    value_format="json", value_schema="id long, name string", partition_by=())
    summary = run_load(spark, root=root, warehouse=Warehouse(warehouse), spec=spec,
                       progress=False)
    assert summary.upsert["keys"] == 2
    got = read_arrow(Warehouse(warehouse).table("people")).to_pylist()
    assert [(r["id"], r["name"]) for r in got] == [(1, "a2")]


def test_quality_gate_validates_upsert_snapshots(tmp_path):
    """The checks see the rows an upsert snapshot wrote (not every offset of its ranges:
    superseded records and tombstones leave holes) and the tag moves over maintenance."""
    from pipelines.jobs.maintain import maintain
    from pipelines.quality import validate_snapshot

    wh, table = _table(tmp_path)
    batch = [{"key": b"a", "value": b"1", "partition": 0, "offset": 0, "timestamp": T_US + 1000},
             {"key": b"a", "value": b"2", "partition": 0, "offset": 1, "timestamp": T_US + 2000},
             {"key": b"b", "value": None, "partition": 0, "offset": 2, "timestamp": T_US + 3000}]
    _commit(table, batch, "r1")
    _commit(table.refresh(), [{"key": b"c", "value": b"1", "partition": 0, "offset": 3,
                               "timestamp": T_US + 4000}], "r2")
    assert validate_snapshot(wh.url, "up", compacted=False, docs=False).success
    maintain(table.refresh())
    _commit(table.refresh(), [{"key": b"a", "value": None, "partition": 0, "offset": 4,
                               "timestamp": T_US + 5000}], "r3")
    result = validate_snapshot(wh.url, "up", compacted=False, docs=False)
    assert result.success, result.checks
    table = table.refresh()
    assert table.snapshot_by_name("validated").snapshot_id == table.current_snapshot().snapshot_id
    assert [h.kafkastore_operation for h in history(table)] == ["load", "load", "maintain",
                                                                    "load"]
    # Without the upsert rule the holes of r1's range (a superseded record, a tombstone)
    # would fail rows_cover_range.
    first = history(table)[0].snapshot_id
    assert validate_snapshot(wh.url, "up", first, compacted=False, docs=False,
                             publish_tag=False).rows == 1


def test_a_foreign_engines_position_delete_is_applied_and_folded(tmp_path):
    """Another engine deleted a row with a position delete file (merge-on-read): the next
    upsert reads the touched file through pyiceberg with the delete applied, and the file
    it writes instead has no delete file planned against it (Spark reads files again)."""
    _, table = _table(tmp_path)
    _commit(table, [{"key": k, "value": b"1", "partition": 0, "offset": i, "timestamp": i}
                    for i, k in enumerate([b"a", b"b", b"c"])], "r1", target_rows=10)
    table = table.refresh()
    (task,) = list(table.scan().plan_files())
    add_position_delete(table, task, position=1)          # b goes
    table = table.refresh()
    assert _as_dict(read_arrow(table)) == {b"a": b"1", b"c": b"1"}
    _commit(table, [{"key": b"c", "value": b"2", "partition": 0, "offset": 3, "timestamp": 3}],
            "r2", target_rows=10)
    table = table.refresh()
    assert _as_dict(read_arrow(table)) == {b"a": b"1", b"c": b"2"}
    assert not plan_scan(table).delete_files
    assert committed_offsets(table) == {("t", 0): 4}   # the foreign snapshot is skipped


@pytest.mark.parametrize("backend", ["s3"])
def test_upsert_commits_on_an_object_store(backend, tmp_path, request):
    """The copy-on-write commit reads and writes through the table's FileIO (moto S3)."""
    from tests.helpers.loads import log_and_warehouse

    _, wh, _, _ = log_and_warehouse(backend, tmp_path, request)
    table = wh.create_table("up", SCHEMA, TableLayout(partition_by=()), properties=mode_properties("upsert", ("key",)))
    _commit(table, [{"key": b"a", "value": b"1", "partition": 0, "offset": 0, "timestamp": 1},
                    {"key": b"b", "value": b"1", "partition": 0, "offset": 1, "timestamp": 2}],
            "r1")
    _commit(table.refresh(), [{"key": b"a", "value": None, "partition": 0, "offset": 2,
                               "timestamp": 3}], "r2")
    table = table.refresh()
    assert table.location().startswith("s3://")
    assert _as_dict(read_arrow(table)) == {b"b": b"1"}
