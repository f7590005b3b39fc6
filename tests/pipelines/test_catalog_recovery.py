"""A catalog that lost a table (an emptied ``catalog.db`` made the
next load create a new table at the same location from offset 0): refused in one line
naming the orphaned metadata, unless ``--register-existing`` registers it again and the
load carries on from its committed offsets."""
from __future__ import annotations

import os
import sqlite3

import pytest

from kafkastore.errors import OrphanedTableError
from pipelines.warehouse.catalog import CATALOG_DB, Warehouse
from pipelines.warehouse.offsets import committed_offsets
from pipelines.warehouse.reads import read_arrow
from tests.helpers.iceberg_tables import SCHEMA, load
from tests.helpers.loads import assert_exactly_once, make_topic, produce


def _empty_catalog(warehouse_url: str) -> None:
    """What an operator's accident does: the SQLite catalog loses its table rows."""
    path = os.path.join(warehouse_url[len("file://"):], CATALOG_DB)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM iceberg_tables")


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_a_lost_table_is_refused_then_registered_again(tmp_path, how):
    wh = Warehouse(f"file://{tmp_path}/wh")
    t = wh.create_table("t", SCHEMA)
    load(wh, t, "t", 0, 0, 10)
    load(wh, wh.table("t"), "t", 0, 10, 15)
    newest = wh.table("t").metadata_location
    if how == "emptied":
        _empty_catalog(wh.url)
    else:
        os.remove(f"{tmp_path}/wh/{CATALOG_DB}")
    wh = Warehouse(wh.url)
    assert wh.load_table("t") is None
    with pytest.raises(OrphanedTableError) as exc:
        wh.create_table("t", SCHEMA)
    msg = str(exc.value)
    assert "\n" not in msg and newest in msg and "--register-existing" in msg
    with pytest.raises(OrphanedTableError):
        wh.recover(["t"])
    assert not wh.list_tables()                       # nothing was created
    wh.recover(["t"], register_existing=True)
    t = wh.table("t")
    assert t.metadata_location == newest
    assert committed_offsets(t) == {("t", 0): 15}
    assert sorted(read_arrow(t)["offset"].to_pylist()) == list(range(15))
    load(wh, t, "t", 0, 15, 20)                       # and commits carry on
    assert committed_offsets(wh.table("t")) == {("t", 0): 20}
    wh.recover(["t", "new"])                          # registered or never existed: fine


def test_cli_load_after_the_catalog_lost_the_table(spark, local_root, capsys):
    from pipelines.cli import main

    root, warehouse = f"{local_root}/log", f"{local_root}/wh"
    storage = make_topic(root, partitions=2)
    produce(storage, "t", 20)
    base = ["--root", root, "load", "t", "--warehouse", warehouse, "--table", "tbl"]
    assert main(base) == 0
    produce(storage, "t", 10, start=20)
    _empty_catalog(warehouse)
    capsys.readouterr()
    assert main(base) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and ".metadata.json" in err and "--register-existing" in err
    assert Warehouse(warehouse).list_tables() == []
    assert main(base + ["--register-existing"]) == 0
    wh = Warehouse(warehouse)
    assert committed_offsets(wh.table("tbl")) == {("t", 0): 15, ("t", 1): 15}
    assert_exactly_once(storage, "t", wh)
