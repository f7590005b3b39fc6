"""Many topics into many tables: a topic pattern with a table per topic, routing by a
field into several tables, each table with its own offsets (exactly once per table)."""
from __future__ import annotations

import json

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import (ConfigError, TableNameCollisionError,
                               UnroutableRecordsError)
from kafkastore.storage import Storage
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import commit
from pipelines.warehouse.offsets import committed_offsets
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.load_many import ManyLoadRequest, load_many
from pipelines.jobs.routing import matching_topics
from pipelines.spec.topic_routing import identifier_part, render_table, tables_by_source
from tests.helpers.loads import (assert_exactly_once, committed, make_topic, produce,
                                 table_offsets)

ORDERS = ("orders.eu", "orders.us", "orders.asia")


def _topics(root, names, count=6, start=0):
    storage = Storage(root)
    for name in names:
        make_topic(root, name, partitions=2)
        produce(storage, name, count, start=start)
    return storage


def _run(spark, root, wh, **entry):
    return load_many(spark, ManyLoadRequest.build(root=root, warehouse=wh, spec=entry,
                                                  progress=False))


def _rows(wh, table):
    return sum(len(v) for v in table_offsets(wh, table, kinds=("data",)).values())


def test_the_pattern_is_a_full_match_without_internal_topics():
    topics = ["orders.eu", "orders.eu.dlq", "xorders.us", "orders", "__consumer_offsets",
              "__transaction_state"]
    assert matching_topics(r"orders\.[a-z]+", topics) == ["orders.eu"]
    assert matching_topics(r".*", topics) == ["orders", "orders.eu", "orders.eu.dlq",
                                              "xorders.us"]
    # Java's named groups are accepted
    assert matching_topics(r"(?<site>orders)\..*", topics) == ["orders.eu", "orders.eu.dlq"]


def test_names_map_to_iceberg_identifiers():
    assert render_table("db.{topic}", topic="Orders.EU-2") == "db.orders_eu_2"
    assert identifier_part("2024.q1") == "_2024_q1"
    assert render_table("ev_{field}", field="us-east") == "ev_us_east"
    with pytest.raises(ConfigError, match="unknown placeholder"):
        render_table("db.{table}", topic="x")


def test_a_name_collision_is_refused_naming_both_topics(spark, local_root, tmp_path):
    with pytest.raises(TableNameCollisionError, match=r"'a\.b' and 'a_b'.*a_b"):
        tables_by_source("{topic}", ["a.b", "a_b"])
    _topics(local_root, ["a.b", "a_b"], count=2)
    wh = Warehouse(f"file://{tmp_path}/wh")
    with pytest.raises(TableNameCollisionError, match=r"'a\.b' and 'a_b'"):
        _run(spark, local_root, wh, topic_pattern=r"a.b", table_template="{topic}")
    assert wh.list_tables() == []   # refused before anything was created


def test_a_pattern_loads_each_topic_into_its_table_and_new_topics_on_the_next_run(
        spark, local_root, tmp_path, capsys):
    from pipelines.cli import main

    storage = _topics(local_root, [*ORDERS, "payments"])
    wh_url = f"file://{tmp_path}/wh"
    args = ["--root", local_root, "load", "--warehouse", wh_url,
            "--topic-pattern", r"orders\..*", "--table-template", "sales.{topic}"]
    assert main(args) == 0
    out = capsys.readouterr().err.splitlines()
    table_lines = [line for line in out if line.startswith("sales.")]
    assert sorted(line.split()[0] for line in table_lines) == [
        "sales.orders_asia", "sales.orders_eu", "sales.orders_us"]
    assert all("committed snapshot" in line and "6 rows" in line for line in table_lines)
    wh = Warehouse(wh_url)
    assert sorted(wh.list_tables()) == ["sales.orders_asia", "sales.orders_eu",
                                        "sales.orders_us"]
    for topic in ORDERS:
        table = "sales." + identifier_part(topic)
        assert committed(wh, table, topic) == {0: 3, 1: 3}
        assert_exactly_once(storage, topic, wh, table)

    # Between runs: more records in two topics, and a new topic matching the pattern.
    produce(storage, "orders.eu", 4, start=6)
    make_topic(local_root, "orders.jp", partitions=2)
    produce(storage, "orders.jp", 5)
    summary = _run(spark, local_root, wh, topic_pattern=r"orders\..*",
                   table_template="sales.{topic}")
    by_table = {s.table: s for s in summary.tables}
    assert not summary.failed
    assert by_table["sales.orders_jp"].ranges == {0: (0, 3), 1: (0, 2)}   # from the start
    assert set(by_table["sales.orders_jp"].initial) == {0, 1}
    assert by_table["sales.orders_eu"].ranges == {0: (3, 5), 1: (3, 5)}   # only the new
    assert by_table["sales.orders_us"].noop and by_table["sales.orders_asia"].noop
    for topic in (*ORDERS, "orders.jp"):
        assert_exactly_once(storage, topic, wh, "sales." + identifier_part(topic))
    assert _rows(wh, "sales.orders_eu") == 10 and _rows(wh, "sales.orders_jp") == 5


def test_a_crash_between_two_tables_commits_is_exactly_once_per_table(
        spark, local_root, tmp_path, monkeypatch):
    storage = _topics(local_root, ORDERS)
    wh = Warehouse(f"file://{tmp_path}/wh")
    real = commit
    commits: list[str] = []

    def crash_at_the_second_table(tbl, kc):
        name = tbl.name()[-1]
        if name not in commits:
            commits.append(name)
        if len(commits) == 2:
            raise KeyboardInterrupt("killed between two tables' commits")
        return real(tbl, kc)

    monkeypatch.setattr("pipelines.warehouse.commit.commit", crash_at_the_second_table)
    with pytest.raises(KeyboardInterrupt):
        _run(spark, local_root, wh, topic_pattern=r"orders\..*", table_template="{topic}")
    monkeypatch.setattr("pipelines.warehouse.commit.commit", real)
    first, second = commits
    assert committed(wh, first, {identifier_part(t): t for t in ORDERS}[first]) == {0: 3, 1: 3}
    assert wh.load_table(second) is None or not committed_offsets(wh.load_table(second))

    produce(storage, "orders.eu", 2, start=6)
    summary = _run(spark, local_root, wh, topic_pattern=r"orders\..*", table_template="{topic}")
    by_table = {s.table: s for s in summary.tables}
    assert not summary.failed
    # the table that committed before the crash loads only records that came since
    assert by_table[first].noop or all(a >= 3 for a, _b in by_table[first].ranges.values())
    assert by_table[second].ranges == {0: (0, 3 + (second == "orders_eu")),
                                       1: (0, 3 + (second == "orders_eu"))}
    for topic in ORDERS:
        table = identifier_part(topic)
        assert_exactly_once(storage, topic, wh, table)
        assert _rows(wh, table) == (8 if topic == "orders.eu" else 6)


def _events(root, values):
    storage = Storage(root)
    make_topic(root, "events", partitions=2)
    broker = Broker(storage)
    for i, v in enumerate(values):
        broker.send("events", v, key=str(i).encode(), partition=i % 2)
    broker.flush()
    return storage


def _ids(wh, table):
    tbl = wh.load_table(table)
    return sorted(r["id"] for r in read_arrow(tbl, columns=["id"]).to_pylist())


ROUTE = {"topic": "events", "route_field": "region", "table_template": "ev_{field}",
         "value_format": "json", "value_schema": "id long, region string"}


def _event(i, region):
    return json.dumps({"id": i, "region": region}).encode()


def test_route_by_field_into_two_tables_and_a_default(spark, local_root, tmp_path):
    regions = ["eu", "us", "eu", None, "us", "eu"]
    values = [_event(i, r) for i, r in enumerate(regions)] + [b"not json"]
    storage = _events(local_root, values)
    wh = Warehouse(f"file://{tmp_path}/wh")
    # Without a default table, records no table takes are refused before anything is made.
    with pytest.raises(UnroutableRecordsError, match=r"events: .*region.*null or undecodable: 2"):
        _run(spark, local_root, wh, **ROUTE)
    assert wh.list_tables() == []

    summary = _run(spark, local_root, wh, **ROUTE, route_default="ev_other")
    assert not summary.failed
    assert sorted(s.table for s in summary.tables) == ["ev_eu", "ev_other", "ev_us"]
    assert _ids(wh, "ev_eu") == [0, 2, 5] and _ids(wh, "ev_us") == [1, 4]
    assert _ids(wh, "ev_other") == [3]
    assert sum(len(v) for v in table_offsets(wh, "ev_other", ("dead_letter",)).values()) == 1
    for table in ("ev_eu", "ev_us", "ev_other"):   # each table: the whole range, its rows
        assert committed(wh, table, "events") == {0: 4, 1: 3}

    # A new value on the next run gets its table (from the log start), the others go on.
    broker = Broker(storage)
    broker.send("events", _event(7, "apac"), partition=0)
    broker.send("events", _event(8, "eu"), partition=1)
    broker.flush()
    summary = _run(spark, local_root, wh, **ROUTE, route_default="ev_other")
    by_table = {s.table: s for s in summary.tables}
    assert by_table["ev_apac"].ranges == {0: (0, 5), 1: (0, 4)}
    assert by_table["ev_eu"].ranges == {0: (4, 5), 1: (3, 4)}
    assert _ids(wh, "ev_apac") == [7] and _ids(wh, "ev_eu") == [0, 2, 5, 8]
    assert _ids(wh, "ev_other") == [3] and _ids(wh, "ev_us") == [1, 4]


def test_route_values_send_the_others_to_the_default(spark, local_root, tmp_path):
    _events(local_root, [_event(i, r) for i, r in enumerate(["eu", "us", "mars", "eu"])])
    wh = Warehouse(f"file://{tmp_path}/wh")
    summary = _run(spark, local_root, wh, **ROUTE, route_values=["eu", "us"],
                   route_default="ev_rest")
    assert not summary.failed
    assert _ids(wh, "ev_eu") == [0, 3] and _ids(wh, "ev_us") == [1]
    assert _ids(wh, "ev_rest") == [2]


def test_cli_bad_regex_is_one_line(local_root, tmp_path, capsys):
    from pipelines.cli import main

    code = main(["--root", local_root, "load", "--warehouse", f"file://{tmp_path}/wh",
                 "--topic-pattern", "orders(", "--table-template", "{topic}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith("kafkastore: error: bad --topic-pattern 'orders('")


def test_a_crash_between_route_tables_commits_loses_no_new_value(spark, local_root, tmp_path,
                                                                  monkeypatch):
    """The tables of values seen first by a run that crashed after other tables committed
    are still loaded by the re-run (they were created, empty, before any commit)."""
    storage = _events(local_root, [_event(i, r) for i, r in enumerate(["eu", "us", "eu", "us"])])
    wh = Warehouse(f"file://{tmp_path}/wh")
    _run(spark, local_root, wh, **ROUTE)
    broker = Broker(storage)
    for i, r in [(4, "eu"), (5, "zz"), (6, "us"), (7, "zz")]:
        broker.send("events", _event(i, r), partition=i % 2)
    broker.flush()
    real = commit

    def crash_at_zz(tbl, kc):
        if tbl.name()[-1] == "ev_zz":
            raise KeyboardInterrupt("killed between two tables' commits")
        return real(tbl, kc)

    monkeypatch.setattr("pipelines.warehouse.commit.commit", crash_at_zz)
    with pytest.raises(KeyboardInterrupt):
        _run(spark, local_root, wh, **ROUTE)
    monkeypatch.setattr("pipelines.warehouse.commit.commit", real)
    assert committed(wh, "ev_eu", "events") == committed(wh, "ev_us", "events") == {0: 4, 1: 4}
    assert not committed_offsets(wh.load_table("ev_zz"))

    summary = _run(spark, local_root, wh, **ROUTE)
    by_table = {s.table: s for s in summary.tables}
    assert by_table["ev_zz"].ranges == {0: (0, 4), 1: (0, 4)}
    assert by_table["ev_eu"].noop and by_table["ev_us"].noop
    assert _ids(wh, "ev_eu") == [0, 2, 4] and _ids(wh, "ev_us") == [1, 3, 6]
    assert _ids(wh, "ev_zz") == [5, 7]


def test_a_failed_table_does_not_stop_the_others_and_the_cli_says_which(
        spark, local_root, tmp_path, capsys):
    from kafkastore.maintenance.retention import delete_records
    from pipelines.cli import main

    storage = _topics(local_root, ("m.a", "m.b"), count=4)
    wh_url = f"file://{tmp_path}/wh"
    args = ["--root", local_root, "load", "--warehouse", wh_url, "--topic-pattern", r"m\..",
            "--table-template", "{topic}"]
    assert main(args) == 0
    produce(storage, "m.a", 6, start=4)
    produce(storage, "m.b", 6, start=4)
    delete_records(storage, "m.a", 0, 4)     # m.a/0: offsets 2..3 go before they were loaded
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("m_b <- m.b: committed snapshot") for line in err), err
    assert any(line.startswith("m_a: FAILED: DataLossError") for line in err), err
    assert err[-1].startswith("kafkastore: error: 1 of 2 table(s) failed: m_a: DataLossError")
    wh = Warehouse(wh_url)
    assert committed(wh, "m_b", "m.b") == {0: 5, 1: 5}
    assert committed(wh, "m_a", "m.a") == {0: 2, 1: 2}


def test_cli_flags_a_pattern_load_does_not_take_are_refused_in_one_line(local_root, tmp_path,
                                                                         capsys):
    from pipelines.cli import main

    code = main(["--root", local_root, "load", "--warehouse", f"file://{tmp_path}/wh",
                 "--topic-pattern", "o.*", "--table-template", "{topic}", "--table", "x",
                 "--cdc", "debezium"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert err[0].startswith("kafkastore: error: --cdc, --table cannot be given with")
