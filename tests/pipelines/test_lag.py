"""pipelines.lag: the committed offsets and lag of the warehouse tables loading a topic."""
from __future__ import annotations

from pipelines.warehouse.catalog import Warehouse
from pipelines.jobs.lag import committed_offsets_by_table, table_lag
from tests.helpers.iceberg_tables import SCHEMA, load

PARTITIONS = {"0": {"log_start_offset": 0, "high_watermark": 10},
              "1": {"log_start_offset": 6, "high_watermark": 8},
              "2": {"log_start_offset": 3, "high_watermark": 5}}


def warehouse(tmp_path) -> Warehouse:
    wh = Warehouse(f"file://{tmp_path}/wh")
    orders = wh.create_table("orders", SCHEMA)
    load(wh, orders, "t", 0, 0, 4)
    load(wh, wh.load_table("orders"), "t", 1, 0, 2)
    other = wh.create_table("other", SCHEMA)
    load(wh, other, "u", 0, 0, 9)        # loads another topic: not reported for t
    return wh


def test_committed_offsets_name_only_the_tables_loading_the_topic(tmp_path):
    wh = warehouse(tmp_path)
    assert committed_offsets_by_table(wh, "t") == {"orders": {0: 4, 1: 2}}
    assert committed_offsets_by_table(f"file://{tmp_path}/wh", "u") == {"other": {0: 9}}
    assert committed_offsets_by_table(wh, "nobody") == {}


def test_lag_and_lost_offsets_per_partition(tmp_path):
    lag = table_lag(warehouse(tmp_path), "t", PARTITIONS)
    assert lag == {"orders": {"lag": 6 + 2 + 2, "partitions": {
        "0": {"committed": 4, "lag": 6, "lost": 0},
        "1": {"committed": 2, "lag": 2, "lost": 4},          # [2, 6) deleted before loading
        "2": {"committed": None, "lag": 2, "lost": 0},       # never loaded: from the log start
    }}}


def test_a_missing_warehouse_has_no_tables_and_is_not_created(tmp_path):
    assert table_lag(f"file://{tmp_path}/none", "t", PARTITIONS) == {}
    assert not (tmp_path / "none").exists()
