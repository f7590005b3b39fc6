"""vacuum (pipelines/vacuum.py): expires old snapshots but never the one carrying the
current offsets, removes unreferenced files only after the grace period. Spark-free."""
from __future__ import annotations

import os
import time
import uuid

import pytest

from pipelines import iceberg as ice
from pipelines.offset_ranges import OffsetRange
from pipelines.vacuum import vacuum
from tests.pipelines.test_iceberg import SCHEMA, load, rows, write


@pytest.fixture
def wh(tmp_path):
    return ice.Warehouse(f"file://{tmp_path}/wh")


def _now():
    return int(time.time() * 1000)


def test_vacuum_expires_but_keeps_the_offsets_snapshot(wh):
    t = wh.create_table("t", SCHEMA)
    for i in range(3):
        load(wh, wh.table("t"), "t", 0, 10 * i, 10 * i + 10)
    carrier = wh.table("t").current_snapshot().snapshot_id
    # Another engine commits on top (no kafkastore offsets): the carrier is no
    # longer the head, yet vacuum must keep it.
    other = wh.table("t")
    other.add_files([write(wh, other, rows("x", 0, 0, 2))])
    orphan = write(wh, t, rows("t", 0, 99, 100))          # a killed load's file
    r = vacuum(wh.table("t"), now_ms=_now() + 60_000, grace_ms=0)
    t = wh.table("t")
    kept = {s.snapshot_id for s in t.metadata.snapshots}
    assert carrier in kept and t.current_snapshot().snapshot_id in kept
    assert len(r.expired) == 2 and len(kept) == 2
    assert ice.committed_offsets(t) == {("t", 0): 30}
    assert ice.read_arrow(t).num_rows == 32
    assert orphan.split("://", 1)[1] in r.deleted and not os.path.exists(orphan[len("file://"):])
    # Every remaining file is still readable; a new load continues from the offsets.
    load(wh, t, "t", 0, 30, 35)
    assert ice.read_arrow(wh.table("t")).num_rows == 37


def test_vacuum_respects_the_grace_period_and_dry_run(wh):
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 5)
    load(wh, wh.table("t"), "t", 0, 5, 10)
    young = write(wh, t, rows("t", 0, 50, 51))             # an in-flight load's file
    r = vacuum(wh.table("t"), now_ms=_now(), grace_ms=3_600_000)
    assert r.expired == [] and r.deleted == []
    assert os.path.exists(young[len("file://"):])
    dry = vacuum(wh.table("t"), now_ms=_now() + 60_000, grace_ms=0, dry_run=True)
    assert dry.expired and young.split("://", 1)[1] in dry.deleted
    assert os.path.exists(young[len("file://"):])
    assert len(wh.table("t").metadata.snapshots) == 2


def test_vacuum_after_reprocess_removes_replaced_files(wh):
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 10)
    old_files = set(ice.plan_scan(wh.table("t")).files)
    url = write(wh, t, rows("t", 0, 5, 10))
    ice.commit(wh.table("t"), ice.KafkaCommit(
        "rp", "reprocess", (OffsetRange("t", 0, 5, 10),), (url,),
        delete_from=(OffsetRange("t", 0, 5, 10),)))
    vacuum(wh.table("t"), now_ms=_now() + 60_000, grace_ms=0)
    t = wh.table("t")
    assert len(t.metadata.snapshots) == 1
    assert all(not os.path.exists(f[len("file://"):]) for f in old_files)
    assert sorted(ice.read_arrow(t)["offset"].to_pylist()) == list(range(10))


def test_vacuum_on_s3_with_local_catalog(tmp_path, s3_endpoint):
    w = ice.Warehouse(f"s3://kafkastore-test/wh-{uuid.uuid4().hex[:8]}",
                      catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"},
                      storage_options={"client_kwargs": {"endpoint_url": s3_endpoint}})
    t = w.create_table("t", SCHEMA)
    load(w, t, "t", 0, 0, 5)
    load(w, w.table("t"), "t", 0, 5, 9)
    orphan = write(w, t, rows("t", 0, 50, 51))
    r = vacuum(w.table("t"), now_ms=_now() + 60_000, grace_ms=0)
    assert len(r.expired) == 1 and orphan.split("://", 1)[1] in r.deleted
    t = w.table("t")
    assert ice.committed_offsets(t) == {("t", 0): 9}
    assert sorted(ice.read_arrow(t)["offset"].to_pylist()) == list(range(9))
