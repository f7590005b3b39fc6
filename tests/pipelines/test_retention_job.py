"""pipelines.retention_job: retention of a topic checked against the warehouse tables
that load it (report, and protection of data not loaded yet)."""
from __future__ import annotations

from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.warehouse.catalog import Warehouse
from pipelines.jobs.log_retention import run_retention
from tests.helpers.iceberg_tables import SCHEMA, load
from tests.helpers.logdata import append_segment

DAY = 86_400_000
NOW = 1_700_000_000_000 + 10 * DAY


def old_topic(tmp_path) -> str:
    """Topic ``t``: four segments of 3 records, 4, 3, 2 and 1 days old; retention 2.5 days."""
    root = f"file://{tmp_path}/log"
    storage = Storage(root)
    create_topic(storage, "t", 1, {"retention.ms": str(int(2.5 * DAY))})
    for age in (4, 3, 2, 1):
        append_segment(storage, "t", 0, [NOW - age * DAY] * 3)
    return root


def table_at(tmp_path, committed: int) -> Warehouse:
    wh = Warehouse(f"file://{tmp_path}/wh")
    load(wh, wh.create_table("orders", SCHEMA), "t", 0, 0, committed)
    return wh


def test_retention_without_a_warehouse(tmp_path):
    root = old_topic(tmp_path)
    report = run_retention(root, "t", now_ms=NOW)
    assert report.tables == {} and report.newly_lost == []
    assert report.to_dict()["partitions"]["0"]["log_start_offset"] == 6
    assert "partition 0: log start 0 -> 6, dropped 2 segment(s)" in report.render()
    assert PartitionReader(Storage(root), "t", 0).log_start_offset == 6


def test_a_table_behind_the_new_log_start_is_reported(tmp_path):
    root = old_topic(tmp_path)
    report = run_retention(root, "t", warehouse=table_at(tmp_path, 4), now_ms=NOW)
    assert report.tables == {"orders": {0: 4}}
    assert report.newly_lost == [("orders", 0, 4, 6)]
    assert "WARNING table orders LOSES offsets [4, 6) it never loaded" in report.render()
    assert report.to_dict()["partitions"]["0"]["unloaded"] == [
        {"table": "orders", "committed": 4, "newly_lost": True}]


def test_protect_unloaded_keeps_what_a_table_has_not_loaded(tmp_path):
    root = old_topic(tmp_path)
    report = run_retention(root, "t", warehouse=table_at(tmp_path, 4), now_ms=NOW,
                           protect_unloaded=True)
    assert report.newly_lost == []
    assert report.to_dict()["partitions"]["0"]["log_start_offset"] == 3   # only [0, 3) went
    assert "capped to keep data not loaded yet" in report.render()
