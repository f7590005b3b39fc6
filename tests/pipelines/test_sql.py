"""Spark SQL over topics and tables: view registration and naming, committed-only
reads, the built-in views, every file under sql/, and the two output formats."""
from __future__ import annotations

import base64
import glob
import io
import json
import os
import uuid

import pyarrow as pa
import pytest

from kafkastore.broker import Broker
from kafkastore.errors import ConfigError
from kafkastore.storage import Storage
from kafkastore.topics import create_topic
from pipelines import warehouse as wh
from pipelines.sql import (SQL_DIR, plan_names, referenced_names, register_views, run_sql,
                           sanitize, split_statements, to_json_value)

T0 = 1_704_067_200_000        # 2024-01-01T00:00Z
MINUTE = 60_000
SCHEMA = "order_id STRING, customer STRING, amount DOUBLE, currency STRING, ts BIGINT"
BAD = 45                      # the record of `orders` that is not JSON
SQL_FILES = sorted(glob.glob(os.path.join(SQL_DIR, "**", "*.sql"), recursive=True))


# ---------------------------------------------------------------------------
# pure parts


def test_sanitize_and_collisions():
    assert sanitize("web.page-views") == "web_page_views"
    assert sanitize("2024") == "_2024"
    names = plan_names(topics=["orders", "clicks", "web.page-views", "web_page-views"],
                       tables=["clicks", "order_events", "Orders_dead_letters"])
    # The table keeps the plain name; the topic is reachable through its alias.
    assert names["clicks"] == ("table", "clicks")
    assert names["topic_clicks"] == ("topic", "clicks")
    assert names["table_clicks"] == ("table", "clicks")
    assert names["orders"] == ("topic", "orders")
    # Two topics that sanitize alike: the first (sorted) gets the name, aliases get suffixes.
    assert names["web_page_views"] == ("topic", "web.page-views")
    assert names["topic_web_page_views"] == ("topic", "web.page-views")
    assert names["topic_web_page_views_2"] == ("topic", "web_page-views")
    # Table names win over derived views of other tables, case-insensitively.
    assert names["Orders_dead_letters"] == ("table", "Orders_dead_letters")
    assert "orders_dead_letters" not in names
    # Built-in views win over everything.
    clash = plan_names(topics=["load_lag", "warehouse_commits"], tables=[],
                       builtin=["warehouse_commits", "load_lag"])
    assert clash["warehouse_commits"] == ("meta", "warehouse_commits")
    assert clash["topic_load_lag"] == ("topic", "load_lag")


def test_split_statements_respects_quotes_and_comments():
    text = """-- first; still a comment
    SELECT 'a;b' AS x, "c;d" AS `e;f`; /* block; comment */
    SELECT 2 -- trailing; comment
    ;
    -- only a comment;
    """
    stmts = split_statements(text)
    assert len(stmts) == 2
    assert stmts[0].endswith("AS `e;f`")
    assert stmts[1].startswith("/* block; comment */")
    assert referenced_names("SELECT 'orders' FROM clicks -- customers") == {"select", "from",
                                                                            "clicks"}


def test_json_values():
    assert to_json_value(b"text") == "text"
    assert to_json_value(b"\xff\x00") == {"base64": base64.b64encode(b"\xff\x00").decode()}
    assert to_json_value([bytearray(b"a"), {"k": b"\xfe"}]) == ["a", {"k": {"base64": "/g=="}}]


# ---------------------------------------------------------------------------
# a root and a warehouse like the demo's


def _produce(storage, topic, records):
    broker = Broker(storage)
    for rec in records:
        broker.send(topic, rec.get("value"), key=rec.get("key"), timestamp=rec["ts"],
                    headers=rec.get("headers", ()))
    broker.flush()


@pytest.fixture(scope="module")
def env(tmp_path_factory, spark):
    base = tmp_path_factory.mktemp("sql")
    root, warehouse = f"file://{base}/log", f"file://{base}/warehouse"
    storage = Storage(root)
    create_topic(storage, "orders", 3)
    create_topic(storage, "customers", 2, {"cleanup.policy": "compact"})
    create_topic(storage, "clicks", 1)
    create_topic(storage, "web.page-views", 1)

    orders = []
    for i in range(90):
        value = {"order_id": f"o{i}", "customer": f"c{i % 5}", "amount": float(i),
                 "currency": "EUR", "ts": T0 + i * MINUTE}
        orders.append({"key": f"c{i % 5}".encode(), "ts": T0 + i * MINUTE,
                       "value": b"\xffnot json" if i == BAD else json.dumps(value).encode(),
                       "headers": [("source", b"test")]})
    _produce(storage, "orders", orders)
    customers, latest = [], {}
    for i in range(40):
        key = f"c{i % 6}"
        value = None if i % 9 == 8 else json.dumps({"customer": key, "name": f"n{i}"})
        customers.append({"key": key.encode(), "ts": T0 + i * 1000,
                          "value": None if value is None else value.encode()})
        latest[key] = value
    _produce(storage, "customers", customers)
    _produce(storage, "clicks", [{"key": None, "value": b"click %d" % i, "ts": T0 + i}
                                 for i in range(10)])
    _produce(storage, "web.page-views", [{"key": b"p", "value": b"/", "ts": T0}])

    from pipelines.load import run_load

    first = run_load(spark, root=root, topic="orders", warehouse=warehouse, table="order_events",
                     value_format="json", value_schema=SCHEMA, until_timestamp=T0 + 60 * MINUTE,
                     progress=False)
    events = wh.Table(warehouse, "order_events")
    events.commit(wh.Commit.validate("v1", first.version, "passed", now_ms=T0))
    second = run_load(spark, root=root, topic="orders", warehouse=warehouse,
                      table="order_events", value_format="json", value_schema=SCHEMA,
                      progress=False)
    # An orphan: a file no commit lists (a failed writer's) must never be read.
    wh.write_files(events.url, pa.table({
        "topic": ["orders"], "partition": pa.array([0], pa.int32()),
        "offset": pa.array([999], pa.int64()),
        "timestamp": pa.array([T0], pa.timestamp("ms", tz="UTC"))}), run_id="orphan")
    # A table named like a topic, holding the first 5 of its 10 offsets.
    clicks = wh.Table(warehouse, "clicks")
    files = wh.write_files(clicks.url, pa.table({
        "key": pa.array([None] * 5, pa.binary()),
        "value": pa.array([b"click %d" % i for i in range(5)], pa.binary()),
        "topic": ["clicks"] * 5, "partition": pa.array([0] * 5, pa.int32()),
        "offset": pa.array(range(5), pa.int64()),
        "timestamp": pa.array([T0 + i for i in range(5)], pa.timestamp("ms", tz="UTC"))}),
        run_id="c1")
    clicks.commit(wh.Commit.load("c1", files, {("clicks", 0): (0, 5)}, now_ms=T0))
    return {"root": root, "warehouse": warehouse, "orders": orders, "latest": latest,
            "first": first, "second": second}


def sql_rows(spark, env, query, **kw):
    out = io.StringIO()
    run_sql(spark, query, root=env["root"], warehouse=env["warehouse"], fmt="jsonl", out=out,
            **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_views_and_names(spark, env):
    views = register_views(spark, env["root"], env["warehouse"])
    for name in ("orders", "customers", "topic_orders", "web_page_views", "order_events",
                 "table_order_events", "order_events_dead_letters", "order_events_validated",
                 "clicks", "topic_clicks", "table_clicks", "kafkastore_offsets",
                 "warehouse_commits", "warehouse_files", "load_lag", "dead_letters_per_table"):
        assert name in views, name
    assert views["clicks"].startswith("live data files of table 'clicks'")
    assert views["topic_clicks"].startswith("topic 'clicks'")
    count = lambda v: spark.sql(f"SELECT count(*) AS n FROM {v}").first().n  # noqa: E731
    assert count("orders") == 90 and count("topic_orders") == 90
    assert count("clicks") == 5 and count("table_clicks") == 5 and count("topic_clicks") == 10
    assert count("web_page_views") == 1
    # The Kafka schema, headers included, for topics.
    assert spark.table("orders").columns == ["key", "value", "topic", "partition", "offset",
                                             "timestamp", "timestampType", "headers"]


def test_table_views_read_only_committed_files(spark, env):
    register_views(spark, env["root"], env["warehouse"])
    r = spark.sql("SELECT count(*) AS n, count(DISTINCT partition, offset) AS d, max(offset) AS m "
                  "FROM order_events").first()
    assert r.n == r.d == 89 and r.m < 999              # the orphan is invisible
    dl = spark.sql("SELECT offset, error FROM order_events_dead_letters").collect()
    assert len(dl) == 1 and "UTF-8" in dl[0].error
    first = env["first"]
    validated = spark.sql("SELECT count(*) AS n FROM order_events_validated").first().n
    assert validated == first.rows == 59                # only the validated first commit
    assert set(spark.table("order_events_validated").columns) == set(
        spark.table("order_events").columns)
    assert {"order_id", "amount"} <= set(spark.table("order_events").columns)


def test_builtin_views(spark, env):
    offsets = sql_rows(spark, env, "SELECT * FROM kafkastore_offsets WHERE topic = 'orders' "
                                   "ORDER BY partition")
    assert [o["partition"] for o in offsets] == [0, 1, 2]
    assert sum(o["high_watermark"] for o in offsets) == 90
    assert all(o["log_start_offset"] == 0 for o in offsets)
    commits = sql_rows(spark, env, "SELECT * FROM warehouse_commits WHERE `table` = "
                                   "'order_events' ORDER BY version, partition")
    assert list(commits[0]) == ["table", "version", "run_id", "operation", "topic", "partition",
                                "from", "until", "validated", "user", "time", "validates"]
    assert [(c["version"], c["operation"], c["validated"]) for c in commits] == [
        (1, "load", "passed")] * 3 + [(2, "validate", "passed")] + [(3, "load", None)] * 3
    assert commits[3]["validates"] == 1 and commits[3]["partition"] is None
    assert sum(c["until"] - c["from"] for c in commits if c["operation"] == "load") == 90
    assert commits[0]["time"] == "2024-01-01T00:00:00.000Z" or commits[0]["time"].endswith("Z")
    files = sql_rows(spark, env, "SELECT kind, sum(rows) AS rows FROM warehouse_files WHERE "
                                 "`table` = 'order_events' GROUP BY kind ORDER BY kind")
    assert files == [{"kind": "data", "rows": 89}, {"kind": "dead_letter", "rows": 1}]


@pytest.mark.parametrize("path", SQL_FILES, ids=[os.path.relpath(p, SQL_DIR) for p in SQL_FILES])
def test_every_sql_file(spark, env, path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    name = os.path.relpath(path, SQL_DIR)
    if name.startswith("views" + os.sep):
        # Views are registered by register_views; running the file again must work too.
        out = io.StringIO()
        run_sql(spark, text, root=env["root"], warehouse=env["warehouse"], out=out)
        view = os.path.basename(path)[:-4]
        rows = sql_rows(spark, env, f"SELECT * FROM {view}")
    else:
        rows = sql_rows(spark, env, text)
    CHECKS[name.replace(os.sep, "/")](rows, env)


def _orders_per_hour(rows, env):
    assert sum(r["records"] for r in rows) == 90
    assert {r["hour"] for r in rows} == {"2024-01-01T00:00:00.000Z", "2024-01-01T01:00:00.000Z"}
    assert {r["partition"] for r in rows} == {0, 1, 2}
    assert round(sum(r["amount"] or 0 for r in rows), 2) == sum(range(90)) - BAD


def _latest_value_per_key(rows, env):
    expected = {k: v for k, v in env["latest"].items() if v is not None}
    assert {r["key"]: r["value"] for r in rows} == expected
    assert [r["key"] for r in rows] == sorted(expected)


def _load_lag_view(rows, env):
    lag = {(r["table"], r["partition"]): r["lag"] for r in rows}
    assert lag == {("order_events", 0): 0, ("order_events", 1): 0, ("order_events", 2): 0,
                   ("clicks", 0): 5}
    assert all(r["lost"] == 0 for r in rows)
    assert {(r["table"], r["committed_offset"], r["high_watermark"]) for r in rows
            if r["table"] == "clicks"} == {("clicks", 5, 10)}


def _load_lag(rows, env):
    _load_lag_view(rows, env)
    assert rows[0]["table"] == "clicks"                 # worst first


def _dead_letters(rows, env):
    per_table = [r for r in rows if "dead_letter_fraction" in r]
    latest = [r for r in rows if "error" in r]
    assert {(r["table"], r["dead_letters"], r["rows"]) for r in per_table} == {
        ("order_events", 1, 89), ("clicks", 0, 5)}
    assert len(latest) == 1 and latest[0]["value"].endswith("not json")


def _validated_vs_all(rows, env):
    by_version = {(r["version"], r["kind"]): r for r in rows if "version" in r}
    assert by_version[(1, "data")]["validated"] == "passed"
    assert by_version[(3, "data")]["validated"] is None
    (totals,) = [r for r in rows if "all_rows" in r]
    assert totals == {"all_rows": 89, "validated_rows": env["first"].rows}


def _dead_letters_per_table(rows, env):
    assert {r["table"]: r["dead_letter_fraction"] for r in rows} == {
        "order_events": round(1 / 90, 6), "clicks": 0.0}


CHECKS = {
    "examples/orders_per_hour.sql": _orders_per_hour,
    "examples/latest_value_per_key.sql": _latest_value_per_key,
    "examples/load_lag.sql": _load_lag,
    "examples/dead_letters.sql": _dead_letters,
    "examples/validated_vs_all.sql": _validated_vs_all,
    "views/load_lag.sql": _load_lag_view,
    "views/dead_letters_per_table.sql": _dead_letters_per_table,
}


def test_every_sql_file_has_a_check():
    assert sorted(CHECKS) == sorted(os.path.relpath(p, SQL_DIR).replace(os.sep, "/")
                                    for p in SQL_FILES)


def test_jsonl_output(spark, env):
    (row,) = sql_rows(spark, env, "SELECT * FROM orders WHERE offset = 0 AND partition = 0")
    assert row["topic"] == "orders" and isinstance(row["key"], str)
    assert row["timestamp"].endswith(".000Z") and row["timestamp"].startswith("2024-01-01T")
    assert row["headers"] == [{"key": "source", "value": "test"}]
    (bad,) = sql_rows(spark, env, "SELECT value FROM order_events_dead_letters")
    assert base64.b64decode(bad["value"]["base64"]) == b"\xffnot json"
    (misc,) = sql_rows(spark, env, "SELECT CAST(NULL AS STRING) AS n, 1.50BD AS d, "
                                   "map('a', 1) AS m, named_struct('x', array(1, 2)) AS s, "
                                   "timestamp_micros(1704067200000001) AS us, "
                                   "DATE'2024-01-02' AS day")
    assert misc == {"n": None, "d": 1.5, "m": {"a": 1}, "s": {"x": [1, 2]},
                    "us": "2024-01-01T00:00:00.000001Z", "day": "2024-01-02"}


def test_table_output(spark, env):
    out = io.StringIO()
    run_sql(spark, "SELECT 1 AS n, 'x' AS s, CAST(NULL AS INT) AS z, repeat('y', 500) AS long; "
                   "CREATE OR REPLACE TEMPORARY VIEW tmp_v AS SELECT 1 AS a; "
                   "SELECT a FROM tmp_v",
            root=env["root"], warehouse=env["warehouse"], fmt="table", out=out)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[1].split("|")[1:5] == [" n ", " s ", "    z ", " " + "long".ljust(120) + " "]
    assert "| 1 | x | NULL | " + "y" * 117 + "... |" in text
    assert text.count("(1 row)") == 2
    assert "\n\n+---+" in text                          # results are separated by a blank line


def test_errors_are_one_line_config_errors(spark, env):
    with pytest.raises(ConfigError) as e:
        run_sql(spark, "SELECT * FROM no_such_view", root=env["root"],
                warehouse=env["warehouse"], out=io.StringIO())
    assert "\n" not in str(e.value) and "no_such_view" in str(e.value)
    with pytest.raises(ConfigError):
        run_sql(spark, " -- nothing\n", root=env["root"], warehouse=env["warehouse"])
    with pytest.raises(ConfigError):
        run_sql(spark, "SELECT 1", root=None, warehouse=None, fmt="csv")


def test_only_what_the_query_needs_and_stale_views_dropped(spark, env, tmp_path):
    views = register_views(spark, env["root"], env["warehouse"], only={"select", "orders"})
    assert set(views) == {"orders"}
    views = register_views(spark, env["root"], env["warehouse"], only={"load_lag"})
    assert set(views) == {"load_lag", "warehouse_commits", "kafkastore_offsets"}
    register_views(spark, env["root"], env["warehouse"])
    assert spark.catalog.tableExists("order_events")
    # Against an empty warehouse, the table views of the earlier call go away.
    empty = f"file://{tmp_path}/empty"
    views = register_views(spark, env["root"], empty)
    assert "order_events" not in views
    assert not spark.catalog.tableExists("order_events")
    assert spark.sql("SELECT count(*) AS n FROM warehouse_commits").first().n == 0


def test_non_local_tables_are_read_through_arrow(spark, env):
    url = f"memory://sql-{uuid.uuid4().hex[:8]}"
    table = wh.Table(url, "mem.table")
    files = wh.write_files(table.url, pa.table({
        "key": pa.array([b"k", None], pa.binary()), "value": pa.array([b"\xff", b"v"]),
        "topic": ["t", "t"], "partition": pa.array([0, 0], pa.int32()),
        "offset": pa.array([0, 1], pa.int64()),
        "timestamp": pa.array([T0, T0 + 1], pa.timestamp("ms", tz="UTC"))}), run_id="m1")
    table.commit(wh.Commit.load("m1", files, {("t", 0): (0, 2)}, now_ms=T0))
    rows = []
    out = io.StringIO()
    run_sql(spark, "SELECT * FROM mem_table ORDER BY offset; "
                   "SELECT count(*) AS n FROM mem_table_validated; "
                   "SELECT count(*) AS n FROM mem_table_dead_letters",
            root=None, warehouse=url, fmt="jsonl", out=out)
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    assert rows[0]["value"] == {"base64": "/w=="} and rows[0]["key"] == "k"
    assert rows[1]["key"] is None and rows[1]["timestamp"] == "2024-01-01T00:00:00.001Z"
    assert rows[2:] == [{"n": 0}, {"n": 0}]
