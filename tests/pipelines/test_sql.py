"""Spark SQL over topics and Iceberg tables: view registration and naming, reads of
exactly one snapshot (committed files only, deletes applied or refused), the
validated tag, time travel, the built-in views, every file under sql/, the two
output formats and one-line errors."""
from __future__ import annotations

import base64
import glob
import io
import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import ConfigError
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.sql import (SQL_DIR, plan_names, referenced_names, register_views, run_sql,
                           sanitize, split_statements, to_json_value)
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import KafkaCommit, commit
from pipelines.warehouse.properties import VALIDATED_TAG
from pipelines.warehouse.reads import plan_scan
from tests.helpers.upsert import add_position_delete

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
                       tables=["clicks", "order_events", "order_events_dead_letters",
                               "Orders_validated"])
    # The table keeps the plain name; the topic is reachable through its alias.
    assert names["clicks"] == ("table", "clicks")
    assert names["topic_clicks"] == ("topic", "clicks")
    assert names["table_clicks"] == ("table", "clicks")
    assert names["orders"] == ("topic", "orders")
    # Two topics that sanitize alike: the first (sorted) gets the name, aliases get suffixes.
    assert names["web_page_views"] == ("topic", "web.page-views")
    assert names["topic_web_page_views"] == ("topic", "web.page-views")
    assert names["topic_web_page_views_2"] == ("topic", "web_page-views")
    # Dead-letter tables are tables (no _validated view of their own).
    assert names["order_events_dead_letters"] == ("table", "order_events_dead_letters")
    assert names["order_events_validated"] == ("validated", "order_events")
    assert "order_events_dead_letters_validated" not in names
    # Table names win over derived views of other tables, case-insensitively.
    assert names["Orders_validated"] == ("table", "Orders_validated")
    assert "orders_validated" not in names
    # Built-in views win over everything.
    clash = plan_names(topics=["load_lag", "warehouse_offsets"], tables=[],
                       builtin=["warehouse_offsets", "load_lag"])
    assert clash["warehouse_offsets"] == ("meta", "warehouse_offsets")
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

ORDERS_SCHEMA = pa.schema([
    ("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.float64()),
    ("currency", pa.string()), ("ts", pa.int64()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC"))])
KAFKA_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())])
DL_SCHEMA = pa.schema(list(KAFKA_SCHEMA) + [pa.field("error", pa.string())])


def _produce(storage, topic, records):
    """Send ``records``; returns ``[(partition, offset)]`` in order (fresh topics)."""
    broker = Broker(storage)
    where, next_offset = [], {}
    for rec in records:
        p = broker.send(topic, rec.get("value"), key=rec.get("key"), timestamp=rec["ts"],
                        headers=rec.get("headers", ()), partition=rec.get("partition"))
        where.append((p, next_offset.get(p, 0)))
        next_offset[p] = next_offset.get(p, 0) + 1
    broker.flush()
    return where


def _write(table, data) -> str:
    import fsspec

    url = f"{table.location()}/data/{uuid.uuid4().hex}.parquet"
    with fsspec.open(url, "wb") as f:
        pq.write_table(data, f)
    return url


def _commit(table, run_id, ranges, data, operation="load"):
    """One kafkastore commit of ``data`` covering ``ranges`` (``{(t, p): (a, b)}``)."""
    rs = tuple(OffsetRange(t, p, a, b) for (t, p), (a, b) in sorted(ranges.items()))
    files = (_write(table, data),) if data is not None and data.num_rows else ()
    return commit(table, KafkaCommit(run_id, operation, rs, files=files)).snapshot_id


def _order_rows(batch):
    values = [json.loads(r["value"]) for r in batch]
    return pa.table({
        **{c: [v[c] for v in values] for c in ("order_id", "customer", "amount", "currency",
                                                "ts")},
        "topic": ["orders"] * len(batch), "partition": [r["partition"] for r in batch],
        "offset": [r["offset"] for r in batch],
        "timestamp": [r["ts"] * 1000 for r in batch]}, schema=ORDERS_SCHEMA)


def _ranges(batch, start):
    out = {}
    for r in batch:
        a, b = out.get(("orders", r["partition"]), (start.get(r["partition"], 0), 0))
        out[("orders", r["partition"])] = (a, max(b, r["offset"] + 1))
    return out


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
        orders.append({"key": f"c{i % 5}".encode(), "ts": T0 + i * MINUTE, "partition": i % 3,
                       "value": b"\xffnot json" if i == BAD else json.dumps(value).encode(),
                       "headers": [("source", b"test")]})
    for rec, (p, o) in zip(orders, _produce(storage, "orders", orders)):
        rec["partition"], rec["offset"] = p, o
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

    # order_events: two loads (the first validated), one dead letter in the second.
    wh = Warehouse(warehouse)
    events = wh.create_table("order_events", ORDERS_SCHEMA)
    bad = orders[BAD]
    first = [r for r in orders[:60] if r is not bad]
    dl = wh.create_table("order_events_dead_letters", DL_SCHEMA)
    _commit(dl, "load-1", _ranges(orders[:60], {}), pa.table({
        "key": [bad["key"]], "value": [b"\xffnot json"], "topic": ["orders"],
        "partition": [bad["partition"]], "offset": [bad["offset"]],
        "timestamp": [bad["ts"] * 1000], "timestampType": [0],
        "error": ["value is not UTF-8 JSON"]}, schema=DL_SCHEMA))
    s1 = _commit(events, "load-1", _ranges(orders[:60], {}), _order_rows(first))
    events.manage_snapshots().create_tag(s1, VALIDATED_TAG).commit()
    end1 = {p: b for (_t, p), (_a, b) in _ranges(orders[:60], {}).items()}
    s2 = _commit(events, "load-2", _ranges(orders[60:], end1), _order_rows(orders[60:]))
    # An orphan: a file no snapshot lists (a failed writer's) must never be read.
    _write(events, _order_rows([dict(first[0], offset=999)]))
    # A table named like a topic, holding the first 5 of its 10 offsets.
    clicks = wh.create_table("clicks", KAFKA_SCHEMA)
    _commit(clicks, "c1", {("clicks", 0): (0, 5)}, pa.table({
        "key": [None] * 5, "value": [b"click %d" % i for i in range(5)],
        "topic": ["clicks"] * 5, "partition": [0] * 5, "offset": list(range(5)),
        "timestamp": [(T0 + i) * 1000 for i in range(5)], "timestampType": [0] * 5},
        schema=KAFKA_SCHEMA))
    return {"root": root, "warehouse": warehouse, "orders": orders, "latest": latest,
            "first_rows": len(first), "s1": s1, "s2": s2}


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
                 "warehouse_offsets", "warehouse_snapshots", "warehouse_files", "load_lag",
                 "dead_letters_per_table"):
        assert name in views, name
    assert views["clicks"].startswith("table 'clicks' at main (snapshot ")
    assert views["order_events_validated"] == (f"table 'order_events' at tag validated "
                                               f"(snapshot {env['s1']})")
    assert views["topic_clicks"].startswith("topic 'clicks'")
    count = lambda v: spark.sql(f"SELECT count(*) AS n FROM {v}").first().n  # noqa: E731
    assert count("orders") == 90 and count("topic_orders") == 90
    assert count("clicks") == 5 and count("table_clicks") == 5 and count("topic_clicks") == 10
    assert count("web_page_views") == 1
    # The Kafka schema, headers included, for topics.
    assert spark.table("orders").columns == ["key", "value", "topic", "partition", "offset",
                                             "timestamp", "timestampType", "headers"]


def test_table_views_read_one_snapshot_and_the_validated_tag(spark, env):
    register_views(spark, env["root"], env["warehouse"])
    r = spark.sql("SELECT count(*) AS n, count(DISTINCT partition, offset) AS d, max(offset) AS m "
                  "FROM order_events").first()
    assert r.n == r.d == 89 and r.m < 999              # the orphan is invisible
    dl = spark.sql("SELECT offset, error FROM order_events_dead_letters").collect()
    assert len(dl) == 1 and "UTF-8" in dl[0].error
    validated = spark.sql("SELECT count(*) AS n FROM order_events_validated").first().n
    assert validated == env["first_rows"] == 59          # only the validated first load
    assert spark.table("order_events_validated").columns == spark.table("order_events").columns
    assert dict(spark.table("order_events").dtypes)["timestamp"] == "timestamp"


def test_pyiceberg_sees_what_the_views_see(spark, env):
    """An independent reader (pyiceberg's own scan) agrees with our views."""
    table = Warehouse(env["warehouse"]).table("order_events")
    theirs = sorted(zip(*[table.scan().to_arrow()[c].to_pylist() for c in ("partition", "offset")]))
    ours = sorted((r["partition"], r["offset"]) for r in sql_rows(
        spark, env, "SELECT partition, offset FROM order_events"))
    assert ours == theirs and len(ours) == 89


def test_time_travel(spark, env):
    n = "SELECT count(*) AS n FROM order_events"
    assert sql_rows(spark, env, n, as_of_snapshot=env["s1"]) == [{"n": 59}]
    assert sql_rows(spark, env, n, as_of_snapshot=str(env["s2"])) == [{"n": 89}]
    snap = Warehouse(env["warehouse"]).table("order_events").snapshot_by_id(env["s1"])
    iso = _iso(snap.timestamp_ms)
    assert sql_rows(spark, env, n, as_of_timestamp=iso) == [{"n": 59}]
    assert sql_rows(spark, env, n, as_of_timestamp=snap.timestamp_ms - 1) == [{"n": 0}]
    offsets = sql_rows(spark, env, "SELECT sum(committed_offset) AS o FROM warehouse_offsets "
                                   "WHERE `table` = 'order_events'", as_of_snapshot=env["s1"])
    assert offsets == [{"o": 60}]
    # Other tables stay at their current snapshot under --as-of-snapshot.
    assert sql_rows(spark, env, "SELECT count(*) AS n FROM clicks",
                    as_of_snapshot=env["s1"]) == [{"n": 5}]
    for bad in ({"as_of_snapshot": 12345}, {"as_of_snapshot": "x"},
                {"as_of_timestamp": "yesterday"},
                {"as_of_snapshot": env["s1"], "as_of_timestamp": 1}):
        with pytest.raises(ConfigError) as e:
            sql_rows(spark, env, n, **bad)
        assert "\n" not in str(e.value)


def _iso(ms):
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def test_builtin_views(spark, env):
    offsets = sql_rows(spark, env, "SELECT * FROM kafkastore_offsets WHERE topic = 'orders' "
                                   "ORDER BY partition")
    assert [o["partition"] for o in offsets] == [0, 1, 2]
    assert sum(o["high_watermark"] for o in offsets) == 90
    committed = sql_rows(spark, env, "SELECT * FROM warehouse_offsets ORDER BY `table`, "
                                     "topic, partition")
    assert list(committed[0]) == ["table", "topic", "partition", "committed_offset",
                                  "snapshot_id", "committed_at"]
    assert [(c["table"], c["partition"], c["committed_offset"]) for c in committed
            if c["table"] != "order_events_dead_letters"] == [
        ("clicks", 0, 5), ("order_events", 0, 30), ("order_events", 1, 30),
        ("order_events", 2, 30)]
    snaps = sql_rows(spark, env, "SELECT * FROM warehouse_snapshots WHERE `table` = "
                                 "'order_events' ORDER BY committed_at, snapshot_id")
    assert list(snaps[0]) == ["table", "snapshot_id", "parent_id", "committed_at", "operation",
                              "kafkastore_operation", "run_id", "in_main", "refs", "summary"]
    assert [(s["snapshot_id"], s["run_id"], s["refs"], s["in_main"]) for s in snaps] == [
        (env["s1"], "load-1", ["validated"], True), (env["s2"], "load-2", ["main"], True)]
    assert json.loads(snaps[1]["summary"]["kafkastore.offsets"]) == {
        "orders": {"0": 30, "1": 30, "2": 30}}
    files = sql_rows(spark, env, "SELECT `table`, sum(records) AS rows, sum(delete_files) AS d "
                                 "FROM warehouse_files GROUP BY `table` ORDER BY `table`")
    assert files == [{"table": "clicks", "rows": 5, "d": 0},
                     {"table": "order_events", "rows": 89, "d": 0},
                     {"table": "order_events_dead_letters", "rows": 1, "d": 0}]


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
    snaps = [r for r in rows if "snapshot_id" in r]
    assert [(r["snapshot_id"], r["refs"], r["added_records"]) for r in snaps] == [
        (env["s1"], ["validated"], "59"), (env["s2"], ["main"], "30")]
    (totals,) = [r for r in rows if "all_rows" in r]
    assert totals == {"all_rows": 89, "validated_rows": 59}


def _time_travel(rows, env):
    assert {r["partition"]: r["committed_offset"] for r in rows} == {0: 30, 1: 30, 2: 30}
    assert {r["rows"] for r in rows} == {89}


def _dead_letters_per_table(rows, env):
    assert {r["table"]: r["dead_letter_fraction"] for r in rows} == {
        "order_events": round(1 / 90, 6), "clicks": 0.0}


CHECKS = {
    "examples/orders_per_hour.sql": _orders_per_hour,
    "examples/latest_value_per_key.sql": _latest_value_per_key,
    "examples/load_lag.sql": _load_lag,
    "examples/dead_letters.sql": _dead_letters,
    "examples/validated_vs_all.sql": _validated_vs_all,
    "examples/time_travel.sql": _time_travel,
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


def test_cli_input_errors_are_one_line(spark, env, tmp_path, capsys, monkeypatch):
    from pipelines.cli import main

    monkeypatch.setenv("KAFKASTORE_ROOT", env["root"])
    wh = ["--warehouse", env["warehouse"]]
    bad_utf8 = tmp_path / "bad.sql"
    bad_utf8.write_bytes(b"SELECT '\xff'")
    cases = [
        (["sql", "--file", str(tmp_path / "missing.sql")] + wh, "missing.sql"),
        (["sql", "--file", str(bad_utf8)] + wh, "not UTF-8"),
        (["sql", "SELECT 1 FROM order_events", "--as-of-snapshot", "42"] + wh,
         "unknown snapshot 42"),
        (["sql", "SELECT 1 FROM order_events", "--as-of-timestamp", "noon"] + wh,
         "bad timestamp"),
        (["sql", "SELEC 1"] + wh, "SQL error"),
    ]
    for argv, expected in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("kafkastore: error: ") and expected in err, (argv, err)
        assert err.count("\n") == 1, err
    assert main(["sql", "SELECT count(*) AS n FROM order_events", "--format", "jsonl",
                 "--as-of-snapshot", str(env["s1"])] + wh) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 59}


def test_a_data_file_deleted_behind_icebergs_back_is_one_line(spark, tmp_path, capsys):
    from pipelines.cli import main

    warehouse = f"file://{tmp_path}/wh"
    table = Warehouse(warehouse).create_table("gone", KAFKA_SCHEMA)
    _commit(table, "g1", {("t", 0): (0, 1)}, pa.table({
        "key": [b"k"], "value": [b"v"], "topic": ["t"], "partition": [0], "offset": [0],
        "timestamp": [T0 * 1000], "timestampType": [0]}, schema=KAFKA_SCHEMA))
    (path,) = plan_scan(table).files
    os.remove(path[len("file://"):])
    assert main(["sql", "SELECT * FROM gone", "--warehouse", warehouse]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkastore: error: ") and err.count("\n") == 1, err


def test_positional_deletes_are_applied_not_ignored(spark, tmp_path):
    """Another engine's merge-on-read delete (a position delete file): the view
    reads through pyiceberg, which applies it."""
    warehouse = f"file://{tmp_path}/wh"
    table = Warehouse(warehouse).create_table("mor", KAFKA_SCHEMA)
    _commit(table, "m1", {("t", 0): (0, 3)}, pa.table({
        "key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"], "topic": ["t"] * 3,
        "partition": [0] * 3, "offset": [0, 1, 2], "timestamp": [T0 * 1000] * 3,
        "timestampType": [0] * 3}, schema=KAFKA_SCHEMA))
    _add_position_delete(table, position=1)
    assert plan_scan(table).delete_files
    out = io.StringIO()
    run_sql(spark, "SELECT offset FROM mor ORDER BY offset", root=None, warehouse=warehouse,
            fmt="jsonl", out=out)
    assert [json.loads(x)["offset"] for x in out.getvalue().splitlines()] == [0, 2]


def _add_position_delete(table, position):
    """Commit a position delete file for row ``position`` of the table's only data file,
    as a merge-on-read engine (Spark, Trino) would."""
    (task,) = list(table.scan().plan_files())
    add_position_delete(table, task, position)


def test_only_what_the_query_needs_and_stale_views_dropped(spark, env, tmp_path):
    views = register_views(spark, env["root"], env["warehouse"], only={"select", "orders"})
    assert set(views) == {"orders"}
    views = register_views(spark, env["root"], env["warehouse"], only={"load_lag"})
    assert set(views) == {"load_lag", "warehouse_offsets", "kafkastore_offsets"}
    register_views(spark, env["root"], env["warehouse"])
    assert spark.catalog.tableExists("order_events")
    # Against an empty warehouse, the table views of the earlier call go away.
    empty = f"file://{tmp_path}/empty"
    views = register_views(spark, env["root"], empty)
    assert "order_events" not in views
    assert not spark.catalog.tableExists("order_events")
    assert spark.sql("SELECT count(*) AS n FROM warehouse_snapshots").first().n == 0


def test_s3_tables_are_read_through_arrow(spark, s3_endpoint, tmp_path):
    url = f"s3://kafkastore-test/sql-{uuid.uuid4().hex[:8]}"
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    wh = Warehouse(url, catalog)
    table = wh.create_table("mem.table", KAFKA_SCHEMA)
    import fsspec

    data = pa.table({
        "key": pa.array([b"k", None], pa.binary()), "value": pa.array([b"\xff", b"v"]),
        "topic": ["t", "t"], "partition": [0, 0], "offset": [0, 1],
        "timestamp": [T0 * 1000, (T0 + 1) * 1000], "timestampType": [0, 0]},
        schema=KAFKA_SCHEMA)
    path = f"{table.location()}/data/{uuid.uuid4().hex}.parquet"
    with fsspec.open(path, "wb") as f:
        pq.write_table(data, f)
    commit(table, KafkaCommit("m1", "load", (OffsetRange("t", 0, 0, 2),), files=(path,)))
    out = io.StringIO()
    run_sql(spark, "SELECT * FROM mem_table ORDER BY offset; "
                   "SELECT count(*) AS n FROM mem_table_validated",
            root=None, warehouse=url, catalog=catalog, fmt="jsonl", out=out)
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    assert rows[0]["value"] == {"base64": "/w=="} and rows[0]["key"] == "k"
    assert rows[1]["key"] is None and rows[1]["timestamp"] == "2024-01-01T00:00:00.001Z"
    assert rows[2:] == [{"n": 0}]
