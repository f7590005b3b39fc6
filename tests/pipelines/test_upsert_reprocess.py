"""Reprocess of an upsert table: the state rebuilt from the newest snapshot
at or before the rewind point plus a replay, in one audited snapshot; refused in one
line when vacuum expired that snapshot."""
from __future__ import annotations

import json

import pytest

from kafkastore.errors import ExpiredSnapshotError
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import committed_offsets
from pipelines.warehouse.reads import read_arrow
from pipelines.warehouse.snapshots import history
from pipelines.jobs.load import run_load
from pipelines.spec.load_spec import LoadSpec
from pipelines.jobs.reprocess import run_reprocess
from tests.helpers.loads import make_topic
from tests.helpers.upsert import produce_records as _produce

T0 = 1_700_000_000_000


def _state(wh, table="acc"):
    return {r["id"]: (r["balance"], r.get("owner"))
            for r in read_arrow(wh.table(table)).to_pylist()}


@pytest.fixture
def upsert_table(spark, tmp_path):
    """Three upsert loads of account changes over two partitions (a tombstone in the
    second), decoded without the ``owner`` field."""
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    storage = make_topic(root, partitions=2)
    wh = Warehouse(warehouse)
    spec = LoadSpec(topic="t", table="acc", mode="upsert", key_columns=("id",),
                    value_format="json", value_schema="id STRING, balance BIGINT",
                    partition_by=())
    n = 0
    for run in range(3):
        batch = []
        for j in range(4):
            acc = f"a{(n + j) % 3}"
            value = None if (run, j) == (1, 2) else json.dumps(
                {"id": acc, "balance": n + j, "owner": f"o{n + j}"}).encode()
            batch.append({"key": json.dumps({"id": acc}).encode(), "value": value,
                          "partition": (n + j) % 2, "timestamp": T0 + n + j})
        n += 4
        _produce(storage, batch)
        run_load(spark, root=root, warehouse=wh, spec=spec, progress=False)
    return {"root": root, "wh": wh, "spec": spec, "storage": storage}


def test_reprocess_rebuilds_the_state_with_the_new_decoder(spark, upsert_table):
    wh, spec = upsert_table["wh"], upsert_table["spec"]
    before = _state(wh)
    offsets = committed_offsets(wh.table("acc"))
    assert all(owner is None for _, owner in before.values())
    fixed = LoadSpec(topic="t", table="acc", mode="upsert", key_columns=("id",),
                     value_format="json", value_schema="id STRING, balance BIGINT, owner STRING",
                     partition_by=())
    summary = run_reprocess(spark, root=upsert_table["root"], warehouse=wh, spec=fixed,
                            partitions=[0], from_offset=3, reason="owner column",
                            progress=False)
    table = wh.table("acc")
    after = _state(wh)
    # The same keys and balances (same records), now with the owner decoded for every
    # row the replay touched; offsets unchanged; one reprocess snapshot with its audit.
    assert {k: b for k, (b, _) in after.items()} == {k: b for k, (b, _) in before.items()}
    assert all(owner == f"o{b}" for b, owner in after.values())
    assert committed_offsets(table) == offsets
    snap = table.current_snapshot()
    audit = json.loads(snap.summary["kafkastore.audit"])
    assert snap.summary["kafkastore.operation"] == "reprocess"
    assert audit["mode"] == "upsert" and audit["reason"] == "owner column"
    assert audit["base_snapshot"] == history(table)[0].snapshot_id   # the first load
    assert summary.snapshot_id == snap.snapshot_id
    # The table records the new decoder: the next run without decoder flags uses it.
    from pipelines.spec.load_spec import stored_load

    assert stored_load(table.metadata.properties)["value_schema"] == fixed.value_schema
    # The next load goes on from the same offsets.
    _produce(upsert_table["storage"], [{"key": b'{"id": "a0"}', "value": None, "partition": 0,
                                        "timestamp": T0 + 99}])
    run_load(spark, root=upsert_table["root"], warehouse=wh, spec=fixed, progress=False)
    assert "a0" not in _state(wh)


def test_reprocess_refuses_when_the_base_snapshot_was_expired(spark, upsert_table, capsys):
    from pipelines.cli import main as cli_main
    from pipelines.jobs.vacuum import vacuum

    wh = upsert_table["wh"]
    table = wh.table("acc")
    vacuum(table, now_ms=table.current_snapshot().timestamp_ms + 10 * 3_600_000,
           grace_ms=3_600_000, expire_unvalidated=True)
    before = wh.table("acc").current_snapshot().snapshot_id
    with pytest.raises(ExpiredSnapshotError, match="expired by kafkastore vacuum"):
        run_reprocess(spark, root=upsert_table["root"], warehouse=wh, spec=upsert_table["spec"],
                      from_offset=1, reason="r", progress=False)
    assert wh.table("acc").current_snapshot().snapshot_id == before
    state = _state(wh)
    summary = run_reprocess(spark, root=upsert_table["root"], warehouse=wh,
                            spec=upsert_table["spec"], from_offset=1, reason="r",
                            allow_expired=True, progress=False)
    assert summary.snapshot_id != before and _state(wh) == state
