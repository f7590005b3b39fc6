"""Warehouse reads resolve columns by Iceberg field id: after
another engine renamed, dropped, re-added or promoted a column, ``kafkastore sql``
and the table views read what pyiceberg (and every Iceberg reader) reads, never
Spark's by-name guess (a rename made ``count(payload)`` 0 of 6,200)."""
from __future__ import annotations

import io
import json
import uuid

import pyarrow as pa
import pytest
from pyiceberg.types import DoubleType, LongType, StringType

from pipelines.spec.offset_ranges import OffsetRange
from pipelines.sql import register_views, run_sql
from pipelines.warehouse import field_ids
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import KafkaCommit, commit
from tests.helpers.iceberg_tables import write

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC")), ("value", pa.binary()),
                    ("n", pa.int32()), ("x", pa.float32())])
ROWS = 200


def _rows(start, stop, schema=SCHEMA, **cols):
    data = {"topic": ["t"] * (stop - start), "partition": [0] * (stop - start),
            "offset": list(range(start, stop)), "timestamp": list(range(start, stop)),
            "value": [b"v%d" % i for i in range(start, stop)],
            "n": list(range(start, stop)), "x": [i / 2 for i in range(start, stop)]}
    data.update(cols)
    return pa.table({f.name: data[f.name] for f in schema}, schema=schema)


def _load(wh, name, start, stop, data=None):
    t = wh.table(name)
    url = write(wh, t, data if data is not None else _rows(start, stop))
    commit(t, KafkaCommit(f"r-{uuid.uuid4().hex[:8]}", "load",
                                  (OffsetRange("t", 0, start, stop),), files=(url,)))


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    """Tables loaded by kafkastore (files by name, no field ids), then changed by
    another engine through pyiceberg."""
    w = Warehouse(f"file://{tmp_path_factory.mktemp('fid')}/wh")
    for name in ("same", "ren", "drp", "readd", "prom"):
        w.create_table(name, SCHEMA)
        _load(w, name, 0, ROWS // 2)
        _load(w, name, ROWS // 2, ROWS)
    with w.table("ren").update_schema() as u:
        u.rename_column("value", "payload")
    with w.table("drp").update_schema() as u:
        u.delete_column("n")
    with w.table("readd").update_schema() as u:
        u.delete_column("value")
    with w.table("readd").update_schema() as u:
        u.add_column("value", StringType())
    new = pa.schema([f if f.name != "value" else pa.field("value", pa.string()) for f in SCHEMA])
    _load(w, "readd", ROWS, ROWS + 10,
          _rows(ROWS, ROWS + 10, new, value=[f"s{i}" for i in range(10)]))
    with w.table("prom").update_schema() as u:
        u.update_column("n", LongType())
        u.update_column("x", DoubleType())
    return w


def _sql(spark, wh, query):
    out = io.StringIO()
    run_sql(spark, query, root=None, warehouse=wh.url, fmt="jsonl", out=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_only_changed_tables_need_field_ids(wh):
    # A plain drop reads right by name (the column is simply not read): the fast path.
    for name in ("same", "drp"):
        t = wh.table(name)
        assert not field_ids.needs_field_ids(t.metadata, t.schema()), name
    for name in ("ren", "readd", "prom"):
        t = wh.table(name)
        assert field_ids.needs_field_ids(t.metadata, t.schema()), name


def test_rename(spark, wh):
    assert _sql(spark, wh, "SELECT count(payload) AS n, min(CAST(payload AS STRING)) AS lo "
                           "FROM ren") == [{"n": ROWS, "lo": "v0"}]


def test_drop(spark, wh):
    rows = _sql(spark, wh, "SELECT * FROM drp ORDER BY offset LIMIT 1")
    assert "n" not in rows[0] and rows[0]["x"] == 0.0 and rows[0]["value"] == "v0"
    assert _sql(spark, wh, "SELECT count(*) AS c FROM drp") == [{"c": ROWS}]


def test_dropped_column_added_again_reads_null_for_old_files(spark, wh):
    assert _sql(spark, wh, "SELECT count(*) AS c, count(value) AS v, min(value) AS lo "
                           "FROM readd") == [{"c": ROWS + 10, "v": 10, "lo": "s0"}]


def test_promotion(spark, wh):
    assert _sql(spark, wh, "SELECT sum(n) AS s, max(x) AS mx, first(typeof(n)) AS tn, "
                           "first(typeof(x)) AS tx FROM prom") == [
        {"s": sum(range(ROWS)), "mx": (ROWS - 1) / 2, "tn": "bigint", "tx": "double"}]


def test_table_views_read_by_field_id(spark, wh):
    """The table views (register_views, what a Spark SQL user queries) for every
    changed table: current column names, old files' values under their new names,
    nulls for a re-added column in files written before it."""
    register_views(spark, None, wh.url, views_dir=None)
    for name in ("same", "ren", "drp", "readd", "prom"):
        view = spark.table(name).orderBy("offset").toPandas()
        assert list(view.columns) == wh.table(name).schema().column_names, name
        assert view["offset"].tolist() == list(range(ROWS + 10 if name == "readd" else ROWS))
    ren = spark.table("ren").orderBy("offset").toPandas()
    assert [bytes(v) for v in ren["payload"]] == [b"v%d" % i for i in range(ROWS)]
    readd = spark.table("readd").orderBy("offset").toPandas()["value"].tolist()
    assert readd[:ROWS] == [None] * ROWS and readd[ROWS:] == [f"s{i}" for i in range(10)]


def test_cli_sql_after_rename(spark, wh, capsys):
    from pipelines.cli import main

    capsys.readouterr()
    assert main(["sql", "SELECT count(payload) AS n FROM ren", "--warehouse", wh.url,
                 "--format", "jsonl"]) == 0
    assert capsys.readouterr().out.strip() == json.dumps({"n": ROWS}, separators=(",", ":"))
