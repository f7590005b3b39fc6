"""Time travel into a period whose snapshots vacuum expired: a
one-line ExpiredSnapshotError naming the time and the oldest snapshot left, never an
empty result read as "the table held nothing then"."""
from __future__ import annotations

import time

import pytest

from kafkastore.errors import ExpiredSnapshotError
from pipelines.jobs.vacuum import MIN_GRACE_MS, vacuum
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import plan_scan
from pipelines.warehouse.snapshots import AsOf, iso, select_snapshot
from tests.helpers.iceberg_tables import SCHEMA, load


def _loaded(tmp_path):
    """A table of three loads (offsets 0-10, 10-20, 20-30) whose first two snapshots
    vacuum expired; returns (warehouse, the three snapshots as they were)."""
    wh = Warehouse(f"file://{tmp_path}/wh")
    created = int(time.time() * 1000)
    wh.create_table("t", SCHEMA)
    snaps = []
    for i in range(3):
        time.sleep(0.01)
        load(wh, wh.table("t"), "t", 0, 10 * i, 10 * i + 10)
        snaps.append(wh.table("t").current_snapshot())
    r = vacuum(wh.table("t"), now_ms=int(time.time() * 1000) + MIN_GRACE_MS + 60_000,
               grace_ms=MIN_GRACE_MS, expire_unvalidated=True)
    assert sorted(r.expired) == sorted(s.snapshot_id for s in snaps[:2])
    return wh, snaps, created


def test_time_travel_to_an_expired_snapshot_is_refused(tmp_path):
    wh, (s1, s2, s3), created = _loaded(tmp_path)
    t = wh.table("t")
    for when in (s1.timestamp_ms + 1, s2.timestamp_ms + 1, s3.timestamp_ms - 1):
        with pytest.raises(ExpiredSnapshotError) as exc:
            select_snapshot(t, AsOf(timestamp_ms=when))
        msg = str(exc.value)
        assert "\n" not in msg and "was expired" in msg and iso(when) in msg
        assert f"oldest snapshot still available is {s3.snapshot_id}" in msg
    with pytest.raises(ExpiredSnapshotError):
        plan_scan(t, as_of_ms=s2.timestamp_ms + 1)
    # Still answered: after the snapshot kept, and before the table had any snapshot.
    assert select_snapshot(t, AsOf(timestamp_ms=s3.timestamp_ms)).snapshot_id == s3.snapshot_id
    assert select_snapshot(t, AsOf(timestamp_ms=created - 60_000)) is None


def test_sql_as_of_an_expired_time_is_one_line(spark, tmp_path, capsys):
    from pipelines.cli import main

    wh, (s1, s2, s3), _ = _loaded(tmp_path)
    capsys.readouterr()
    rc = main(["sql", "SELECT count(*) AS n FROM t", "--warehouse", wh.url, "--format", "jsonl",
               "--as-of-timestamp", str(s2.timestamp_ms + 1)])
    out, err = capsys.readouterr()
    assert rc == 1 and out == "" and len(err.splitlines()) == 1, (out, err)
    assert "was expired" in err and str(s3.snapshot_id) in err
    assert main(["sql", "SELECT count(*) AS n FROM t", "--warehouse", wh.url, "--format",
                 "jsonl", "--as-of-timestamp", str(s3.timestamp_ms)]) == 0
    assert capsys.readouterr().out.strip() == '{"n":30}'
