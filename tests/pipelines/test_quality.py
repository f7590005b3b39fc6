"""The quality gate: Great Expectations checks of a load's snapshot and the
``validated`` tag (real GX, real pyiceberg catalogs, no mocks).

Most snapshots here are committed directly with the Iceberg table API (fast,
and they can be tampered with precisely); one is a real Spark load.
"""
from __future__ import annotations

import json
import uuid

import fsspec
import pytest

from kafkastore.errors import ConfigError, WarehouseError
from pipelines.quality import QualityCheckFailed, publish, validate_snapshot
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.properties import VALIDATED_TAG
from tests.helpers.quality_tables import T0, commit, rows, tag, validated_offsets
from tests.faults import lose_catalog_response


@pytest.fixture
def wh(tmp_path):
    return Warehouse(f"file://{tmp_path}/warehouse")


def test_clean_load_passes_moves_the_tag_and_is_documented(wh, tmp_path):
    sid = commit(wh, "t1", {("orders", 0): (0, 3), ("orders", 1): (0, 2)},
                 [rows("orders", 0, [0, 1, 2]), rows("orders", 1, [0, 1])])
    result = validate_snapshot(wh.url, "t1", sid, compacted=False)
    assert result.success and result.rows == 5 and result.dead_letters == 0
    assert result.published and result.validated_snapshot == sid == tag(wh, "t1")
    names = [c["name"] for c in result.checks]
    assert {"offsets_unique", "rows_match_snapshot", "rows_cover_range",
            "dead_letter_fraction"} <= set(names)
    index = tmp_path / "warehouse" / "_quality" / "t1" / "index.html"
    assert index.exists() and "<html" in index.read_text().lower()
    summary = json.loads((tmp_path / "warehouse" / "_quality" / "t1" / "results" /
                          f"{sid}.json").read_text())
    assert summary["status"] == "passed" and summary["validated_snapshot"] == sid
    # Validating again changes nothing.
    assert validate_snapshot(wh.url, "t1", sid, compacted=False, docs=False).published


def test_duplicate_offsets_fail_and_keep_the_tag(wh):
    good = commit(wh, "t2", {("orders", 0): (0, 2)}, [rows("orders", 0, [0, 1])])
    validate_snapshot(wh.url, "t2", good, compacted=False, docs=False)
    bad = commit(wh, "t2", {("orders", 0): (2, 4)},
                 [rows("orders", 0, [2, 3]), rows("orders", 0, [3])])
    with pytest.raises(QualityCheckFailed) as e:
        validate_snapshot(wh.url, "t2", bad, compacted=False, docs=False)
    assert "offsets_unique" in e.value.result.failed
    assert "\n" not in str(e.value)
    assert tag(wh, "t2") == good
    assert validated_offsets(wh, "t2") == [0, 1]


def test_rows_outside_the_ranges_the_snapshot_claims_fail(wh):
    # The file holds offset 7, which the snapshot's range [0, 2) does not cover.
    sid = commit(wh, "t3", {("orders", 0): (0, 2)}, [rows("orders", 0, [0, 1, 7])])
    result = validate_snapshot(wh.url, "t3", sid, compacted=False, docs=False,
                               raise_on_failure=False)
    assert result.failed == ["rows_match_snapshot"]
    assert tag(wh, "t3") is None and not result.published


def test_compacted_topics_skip_counts_but_need_keys(wh):
    sid = commit(wh, "t4", {("users", 0): (0, 10)}, [rows("users", 0, [2, 5, 9])])
    assert validate_snapshot(wh.url, "t4", sid, compacted=True, docs=False).success
    sid = commit(wh, "t4", {("users", 0): (10, 12)},
                 [rows("users", 0, [10, 11], keys=[b"k", None])])
    result = validate_snapshot(wh.url, "t4", sid, compacted=True, docs=False,
                               raise_on_failure=False)
    assert result.failed == ["keys_not_null"]
    result = validate_snapshot(wh.url, "t4", sid, compacted=False, docs=False,
                               raise_on_failure=False)
    assert "rows_cover_range" not in result.failed          # 2 rows for 2 offsets


def test_timestamps_must_be_before_the_interval_end(wh):
    sid = commit(wh, "t5", {("orders", 0): (0, 3)}, [rows("orders", 0, [0, 1, 2])])
    end = T0 + 2000                                          # offset 2 is at T0 + 2 s
    result = validate_snapshot(wh.url, "t5", sid, compacted=False, interval=(None, end),
                               docs=False, raise_on_failure=False)
    assert result.failed == ["timestamps_in_interval"]
    assert validate_snapshot(wh.url, "t5", sid, compacted=False, interval=(T0, end + 1),
                             docs=False).success


def test_dead_letters_count_towards_coverage_and_their_fraction(wh):
    sid = commit(wh, "t6", {("orders", 0): (0, 4)}, [rows("orders", 0, [0, 1, 2])],
                 [rows("orders", 0, [3], error="not json")])
    result = validate_snapshot(wh.url, "t6", sid, compacted=False, docs=False,
                               raise_on_failure=False)
    assert result.rows == 4 and result.dead_letters == 1
    assert result.failed == ["dead_letter_fraction"]         # 1/4 > 0.01
    assert validate_snapshot(wh.url, "t6", sid, compacted=False, docs=False,
                             thresholds={"max_dead_letter_fraction": 0.5}).success
    with pytest.raises(ConfigError):
        validate_snapshot(wh.url, "t6", sid, thresholds={"max_dead_letter_fraction": 2})


def test_a_failed_load_holds_back_later_loads_until_a_reprocess_replaces_it(wh):
    l1 = commit(wh, "t7", {("orders", 0): (0, 2)}, [rows("orders", 0, [0, 1])])
    l2 = commit(wh, "t7", {("orders", 0): (2, 4)}, [rows("orders", 0, [2, 2])])   # bad
    l3 = commit(wh, "t7", {("orders", 0): (4, 6)}, [rows("orders", 0, [4, 5])])
    # Validating l3 first walks l1 and l2 too: the tag stops before the failure.
    r3 = validate_snapshot(wh.url, "t7", l3, compacted=False, docs=False)
    assert r3.success and not r3.published and r3.held_by == l2
    assert tag(wh, "t7") == l1 and validated_offsets(wh, "t7") == [0, 1]
    with pytest.raises(QualityCheckFailed):
        validate_snapshot(wh.url, "t7", l2, compacted=False, docs=False)
    assert tag(wh, "t7") == l1
    # A reprocess from offset 2 deletes l2's (and l3's) rows and reloads them.
    rp = commit(wh, "t7", {("orders", 0): (2, 6)}, [rows("orders", 0, [2, 3, 4, 5])],
                operation="reprocess")
    r = validate_snapshot(wh.url, "t7", rp, compacted=False, docs=False)
    assert r.published and tag(wh, "t7") == rp
    assert validated_offsets(wh, "t7") == [0, 1, 2, 3, 4, 5]
    # The tag never moves back: validating l1 again leaves it at the reprocess.
    assert validate_snapshot(wh.url, "t7", l1, compacted=False, docs=False).published
    assert tag(wh, "t7") == rp


def test_a_racing_validator_moving_the_tag_is_seen_and_never_undone(wh):
    l1 = commit(wh, "t8", {("orders", 0): (0, 1)}, [rows("orders", 0, [0])])
    l2 = commit(wh, "t8", {("orders", 0): (1, 2)}, [rows("orders", 0, [1])])
    table = wh.table("t8")
    raced = []

    def verdict(snap):
        if not raced:   # another validator publishes l2 while this one is checking
            other = wh.table("t8")
            other.manage_snapshots().create_tag(l2, VALIDATED_TAG).commit()
            raced.append(True)
        return True

    target = table.snapshot_by_id(l1)
    assert publish(table, None, target, verdict) == (l2, None)
    assert tag(wh, "t8") == l2                               # not moved back to l1


@pytest.mark.parametrize("landed", [True, False])
def test_a_lost_response_moving_the_tag_is_read_back(wh, monkeypatch, landed):
    l1 = commit(wh, "t9", {("orders", 0): (0, 1)}, [rows("orders", 0, [0])])
    table = wh.table("t9")
    lost = lose_catalog_response(monkeypatch, wh.catalog(), landed=landed)
    assert publish(table, None, table.snapshot_by_id(l1), lambda snap: True) == (l1, None)
    assert lost and tag(wh, "t9") == l1


def test_only_kafkastore_snapshots_of_main_can_be_validated(wh):
    sid = commit(wh, "t9", {("orders", 0): (0, 1)}, [rows("orders", 0, [0])])
    with pytest.raises(ConfigError, match="not a load or reprocess"):
        validate_snapshot(wh.url, "t9", 12345, docs=False)
    assert validate_snapshot(wh.url, "t9", None, compacted=False, docs=False).snapshot_id == sid


def test_s3_warehouse_with_a_local_catalog(s3_endpoint, tmp_path):
    url = f"s3://kafkastore-test/wh-{uuid.uuid4().hex[:8]}"
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    wh = Warehouse(url, catalog)
    sid = commit(wh, "t10", {("orders", 0): (0, 3)}, [rows("orders", 0, [0, 1, 2])])
    result = validate_snapshot(url, "t10", sid, catalog=catalog, compacted=False)
    assert result.success and result.published
    assert result.docs_url == f"{url}/_quality/t10/index.html"
    fs, path = fsspec.core.url_to_fs(result.docs_url)
    assert b"<html" in fs.cat_file(path)[:2000].lower()
    assert tag(wh, "t10") == sid


def test_a_real_spark_load_passes_and_pyiceberg_reads_exactly_its_rows(spark, tmp_path):
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from pipelines.jobs.load import run_load

    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/warehouse"
    storage = Storage(root)
    create_topic(storage, "orders", 2)
    broker = Broker(storage)
    sent = {}
    for i in range(200):
        body = b"not json" if i == 100 else json.dumps({"id": i}).encode()
        sent[i] = broker.send("orders", body, key=b"k%d" % (i % 7), timestamp=T0 + i * 1000)
    broker.flush()
    summary = run_load(spark, root=root, topic="orders", warehouse=warehouse, table="orders",
                       value_format="json", value_schema="id INT", until_timestamp=T0 + 150_000,
                       progress=False)
    assert summary.rows + summary.dead_letters == 150
    result = validate_snapshot(warehouse, "orders", summary.snapshot_id, root=root,
                               interval=(None, T0 + 150_000), docs=False,
                               thresholds={"max_dead_letter_fraction": 0.01})
    assert result.success, result.render()
    assert result.rows == 150 and result.dead_letters == 1 and result.published
    assert "timestamps_in_interval" in [c["name"] for c in result.checks]

    # An independent reader: pyiceberg on the catalog database, not our code path.
    from pyiceberg.catalog import load_catalog

    # The SQL catalog keys tables by catalog name: kafkastore names its catalog "kafkastore".
    catalog = load_catalog("kafkastore", type="sql",
                           uri=f"sqlite:///{tmp_path}/warehouse/catalog.db")
    data = catalog.load_table("default.orders").scan().to_arrow()
    assert sorted(data["id"].to_pylist()) == [i for i in range(150) if i != 100]
    assert len(set(zip(data["partition"].to_pylist(), data["offset"].to_pylist()))) == 149
    dead = catalog.load_table("default.orders_dead_letters").scan().to_arrow()
    assert dead.num_rows == 1 and dead["partition"][0].as_py() == sent[100]
    tagged = catalog.load_table("default.orders").snapshot_by_name(VALIDATED_TAG)
    assert tagged.snapshot_id == summary.snapshot_id


def test_the_command_line(wh, capsys, tmp_path):
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from pipelines.quality import main

    # The topic's policy (compacted or not) is read from the log root: give the command one.
    root = f"file://{tmp_path}/log"
    create_topic(Storage(root), "orders", 1)
    cli = ["--root", root, "--warehouse", wh.url]
    good = commit(wh, "t11", {("orders", 0): (0, 2)}, [rows("orders", 0, [0, 1])])
    assert main([*cli, "--table", "t11"]) == 0
    assert f"tag validated -> {good}" in capsys.readouterr().out
    bad = commit(wh, "t11", {("orders", 0): (2, 4)}, [rows("orders", 0, [2, 2])])
    assert main([*cli, "--table", "t11", "--snapshot", str(bad)]) == 1
    assert "FAIL" in capsys.readouterr().out and tag(wh, "t11") == good
    assert main([*cli, "--table", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkastore: error: ") and err.count("\n") == 1


def test_an_expired_unvalidated_snapshot_keeps_the_tag(wh):
    l1 = commit(wh, "t12", {("orders", 0): (0, 1)}, [rows("orders", 0, [0])])
    validate_snapshot(wh.url, "t12", l1, compacted=False, docs=False)
    l2 = commit(wh, "t12", {("orders", 0): (1, 2)}, [rows("orders", 0, [1, 1])])   # bad, unchecked
    l3 = commit(wh, "t12", {("orders", 0): (2, 3)}, [rows("orders", 0, [2])])
    wh.table("t12").maintenance.expire_snapshots().by_ids([l2]).commit()
    with pytest.raises(WarehouseError, match="expired"):
        validate_snapshot(wh.url, "t12", l3, compacted=False, docs=False)
    assert tag(wh, "t12") == l1
