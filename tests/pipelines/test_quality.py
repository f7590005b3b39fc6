"""Great Expectations checks of warehouse commits (real GX, no mocks).

Most commits here are written directly with the warehouse writer (fast, and
they can be tampered with precisely); one is a real Spark load.
"""
from __future__ import annotations

import json
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafkastore.broker import Broker
from kafkastore.errors import ConfigError, WarehouseError
from kafkastore.storage import Storage
from kafkastore.topics import create_topic
from pipelines import warehouse as wh
from pipelines.quality import QualityCheckFailed, validate_commit

T0 = 1_704_067_200_000        # 2024-01-01T00:00Z
NOW = T0 + 86_400_000


def rows(topic, partition, offsets, *, ts=None, keys=None):
    """Kafka-schema rows: one per offset, timestamps T0 + offset seconds unless given."""
    n = len(offsets)
    ts = ts if ts is not None else [T0 + o * 1000 for o in offsets]
    keys = keys if keys is not None else [b"k%d" % o for o in offsets]
    return pa.table({
        "key": pa.array(keys, pa.binary()), "value": pa.array([b"{}"] * n, pa.binary()),
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "timestampType": pa.array([0] * n, pa.int32()),
    })


def commit(warehouse, table, ranges, data=(), dead=(), *, run=None, info=None):
    """Write ``data`` / ``dead`` (pyarrow tables) and commit them as one load."""
    t = wh.Table(warehouse, table)
    run = run or f"run-{t.state().version + 1}"
    files = []
    for tbl in data:
        files += wh.write_files(t.url, tbl, run_id=run)
    for tbl in dead:
        files += wh.write_files(t.url, tbl.append_column("error", pa.array(
            ["bad"] * tbl.num_rows, pa.string())), run_id=run, kind="dead_letter")
    return t.commit(wh.Commit.load(run, files, ranges, now_ms=NOW, info=info)).version


@pytest.fixture
def wh_url(tmp_path):
    return f"file://{tmp_path}/warehouse"


def test_clean_commit_passes_is_marked_and_documented(wh_url, tmp_path):
    v = commit(wh_url, "t1", {("orders", 0): (0, 10), ("orders", 1): (5, 8)},
               [rows("orders", 0, list(range(10))), rows("orders", 1, [5, 6, 7])])
    result = validate_commit(None, wh_url, "t1", v, compacted=False)
    assert result.success and result.status == "passed"
    assert result.rows == 13 and result.dead_letters == 0
    names = [c["name"] for c in result.checks]
    assert names == ["offsets_unique", "offsets_at_or_after_range_from",
                     "offsets_before_range_until", "rows_match_commit", "rows_cover_range",
                     "dead_letter_fraction"]
    table = wh.Table(wh_url, "t1")
    assert table.state().validation[v] == "passed"
    assert result.marked_version == v + 1
    assert table.read_commit(v + 1).operation == "validate"
    site = tmp_path / "warehouse" / "_quality" / "t1"
    assert (site / "index.html").exists()
    assert (site / "static" / "styles" / "data_docs_default_styles.css").exists()
    assert len(result.pages) == 2
    for page in result.pages:
        assert (site / page.split("/_quality/t1/", 1)[1]).exists()
    summary = json.loads((site / "results" / f"{v:020d}.json").read_text())
    assert summary["status"] == "passed" and summary["version"] == v
    # Validating again records nothing new (the status is already there).
    again = validate_commit(None, wh_url, "t1", v, compacted=False)
    assert again.success and again.marked_version is None
    assert table.state().version == v + 1


def test_duplicate_offsets_fail_and_mark_the_commit_failed(wh_url, tmp_path):
    # A tampered commit: offset 3 of partition 0 is in two files.
    v = commit(wh_url, "t2", {("orders", 0): (0, 6)},
               [rows("orders", 0, [0, 1, 2, 3]), rows("orders", 0, [3, 4, 5])])
    with pytest.raises(QualityCheckFailed) as e:
        validate_commit(None, wh_url, "t2", v, compacted=False)
    result = e.value.result
    assert not result.success
    assert "offsets_unique" in result.failed and "rows_cover_range" in result.failed
    assert "offsets_unique" in str(e.value)
    assert wh.Table(wh_url, "t2").state().validation[v] == "failed"
    # The data docs of the failure are there too.
    summary = json.loads((tmp_path / "warehouse" / "_quality" / "t2" / "results"
                          / f"{v:020d}.json").read_text())
    assert summary["status"] == "failed"
    assert (tmp_path / "warehouse" / "_quality" / "t2" / "index.html").exists()


def test_offsets_outside_the_range_and_rows_of_unlisted_partitions_fail(wh_url):
    t = wh.Table(wh_url, "t3")
    files = wh.write_files(t.url, rows("orders", 0, [0, 1, 2]), run_id="r")
    files += wh.write_files(t.url, rows("orders", 1, [0]), run_id="r")
    # The commit claims partition 0 holds [0, 2) and knows nothing of partition 1:
    # the warehouse refuses that, so build the tampering the way a buggy writer would,
    # by lying about the file's bounds.
    lying = [dict(f, max_offset=1, rows=2) if f["partition"] == 0 else dict(f, partition=0,
             min_offset=1, max_offset=1) for f in files]
    v = t.commit(wh.Commit.load("r", lying, {("orders", 0): (0, 2)}, now_ms=NOW)).version
    result = validate_commit(None, wh_url, "t3", v, compacted=False, raise_on_failure=False)
    assert not result.success
    assert {"offsets_before_range_until", "offsets_at_or_after_range_from"} <= set(result.failed)


def test_a_file_rewritten_behind_the_commit_log_fails(wh_url, tmp_path):
    v = commit(wh_url, "t4", {("orders", 0): (0, 10)}, [rows("orders", 0, list(range(10)))])
    table = wh.Table(wh_url, "t4")
    (f,) = table.live_files()
    path = tmp_path / "warehouse" / "t4" / f.path
    tbl = pq.read_table(path)
    pq.write_table(tbl.slice(0, 9), path)          # one row gone
    result = validate_commit(None, wh_url, "t4", v, compacted=False, raise_on_failure=False)
    assert set(result.failed) == {"rows_match_commit", "rows_cover_range"}
    assert table.state().validation[v] == "failed"


def test_compacted_topics_skip_counts_but_need_keys(wh_url):
    # Offsets with holes (compacted away) are fine for a compacted topic ...
    v = commit(wh_url, "t5", {("customers", 0): (0, 10)}, [rows("customers", 0, [1, 4, 9])])
    result = validate_commit(None, wh_url, "t5", v, compacted=True)
    assert result.success
    assert "rows_cover_range" not in [c["name"] for c in result.checks]
    assert "keys_not_null" in [c["name"] for c in result.checks]
    # ... but not for a topic that is not.
    bad = validate_commit(None, wh_url, "t5", v, compacted=False, raise_on_failure=False)
    assert bad.failed == ["rows_cover_range"]
    # Unless told that offsets have holes (transactional topics: markers take offsets).
    assert validate_commit(None, wh_url, "t5", v, compacted=False,
                           thresholds={"exact_row_counts": False}).success
    # A null key in a compacted topic fails.
    v2 = commit(wh_url, "t5", {("customers", 0): (10, 12)},
                [rows("customers", 0, [10, 11], keys=[b"a", None])])
    result = validate_commit(None, wh_url, "t5", v2, compacted=True, raise_on_failure=False)
    assert result.failed == ["keys_not_null"]


def test_compaction_policy_is_read_from_the_topic_under_root(wh_url, tmp_path):
    root = f"file://{tmp_path}/log"
    create_topic(Storage(root), "customers", 1, {"cleanup.policy": "compact"})
    v = commit(wh_url, "t6", {("customers", 0): (0, 10)}, [rows("customers", 0, [2, 7])])
    assert validate_commit(None, wh_url, "t6", v, root=root).success


def test_timestamps_must_be_before_the_interval_end(wh_url):
    end = T0 + 5_000
    v = commit(wh_url, "t7", {("orders", 0): (0, 6)}, [rows("orders", 0, list(range(6)))])
    result = validate_commit(None, wh_url, "t7", v, compacted=False, interval=(T0, end),
                             raise_on_failure=False)
    assert result.failed == ["timestamps_in_interval"]
    assert "1 unexpected of 6" in [c for c in result.checks
                                   if c["name"] == "timestamps_in_interval"][0]["observed"]
    # Without an explicit interval, the bound the load recorded in its commit is used.
    v2 = commit(wh_url, "t7b", {("orders", 0): (0, 6)}, [rows("orders", 0, list(range(6)))],
                info={"until_timestamp": end})
    assert validate_commit(None, wh_url, "t7b", v2, compacted=False,
                           raise_on_failure=False).failed == ["timestamps_in_interval"]
    # Records older than the interval start are fine (catch-up, late records) ...
    assert validate_commit(None, wh_url, "t7", v, compacted=False,
                           interval=(T0 + 3_000, T0 + 60_000)).success
    # ... unless asked.
    strict = validate_commit(None, wh_url, "t7", v, compacted=False,
                             interval=(T0 + 3_000, T0 + 60_000), check_interval_start=True,
                             raise_on_failure=False)
    assert strict.failed == ["timestamps_in_interval"]


def test_dead_letter_fraction_threshold(wh_url):
    v = commit(wh_url, "t8", {("orders", 0): (0, 10)}, [rows("orders", 0, list(range(9)))],
               [rows("orders", 0, [9])])
    result = validate_commit(None, wh_url, "t8", v, compacted=False,
                             thresholds={"max_dead_letter_fraction": 0.05},
                             raise_on_failure=False)
    assert result.failed == ["dead_letter_fraction"]
    assert result.dead_letters == 1 and result.rows == 10
    table = wh.Table(wh_url, "t8")
    assert table.state().validation[v] == "failed"
    # A looser threshold passes, and the verdict flips in a new audited commit.
    ok = validate_commit(None, wh_url, "t8", v, compacted=False,
                         thresholds={"max_dead_letter_fraction": 0.1})
    assert ok.success and table.state().validation[v] == "passed"
    assert [c.validated for _, c in table.history() if c.operation == "validate"] == [
        "failed", "passed"]
    with pytest.raises(ConfigError):
        validate_commit(None, wh_url, "t8", v, thresholds={"max_dead_letter_fraction": 2})


def test_only_load_and_reprocess_commits_can_be_validated(wh_url):
    v = commit(wh_url, "t9", {("orders", 0): (0, 1)}, [rows("orders", 0, [0])])
    validate_commit(None, wh_url, "t9", v, compacted=False)
    with pytest.raises(WarehouseError, match="not a load or reprocess"):
        validate_commit(None, wh_url, "t9", v + 1)
    with pytest.raises(WarehouseError, match="not a load or reprocess"):
        validate_commit(None, wh_url, "t9", 99)


@pytest.mark.parametrize("backend", ["memory", "s3"])
def test_docs_are_written_through_fsspec(backend, request):
    if backend == "s3":
        request.getfixturevalue("s3_endpoint")
        url = f"s3://kafkastore-test/wh-{uuid.uuid4().hex[:8]}"
    else:
        url = f"memory://quality-{uuid.uuid4().hex[:8]}"
    v = commit(url, "t10", {("orders", 0): (0, 3)}, [rows("orders", 0, [0, 1, 2])])
    result = validate_commit(None, url, "t10", v, compacted=False)
    assert result.success and result.docs_url == f"{url}/_quality/t10/index.html"
    fs, path = fsspec.core.url_to_fs(result.docs_url)
    assert b"<html" in fs.cat_file(path)[:2000].lower()
    summary = json.loads(fs.cat_file(fsspec.core.url_to_fs(result.result_url)[1]))
    assert summary["status"] == "passed"
    assert wh.Table(url, "t10").state().validation[v] == "passed"


def test_a_real_spark_load_passes_with_and_without_spark(spark, tmp_path):
    root, warehouse = f"file://{tmp_path}/log", f"file://{tmp_path}/warehouse"
    storage = Storage(root)
    create_topic(storage, "orders", 2)
    broker = Broker(storage)
    for i in range(200):
        body = b"not json" if i == 100 else json.dumps({"id": i}).encode()
        broker.send("orders", body, key=b"k%d" % (i % 7), timestamp=T0 + i * 1000)
    broker.flush()
    from pipelines.load import run_load

    summary = run_load(spark, root=root, topic="orders", warehouse=warehouse, table="orders",
                       value_format="json", value_schema="id INT", until_timestamp=T0 + 150_000,
                       progress=False)
    assert summary.rows + summary.dead_letters == 150
    for session in (None, spark):
        result = validate_commit(session, warehouse, "orders", summary.version, root=root,
                                 thresholds={"max_dead_letter_fraction": 0.01})
        assert result.success, result.render()
        assert result.rows == 150 and result.dead_letters == 1
        assert "timestamps_in_interval" in [c["name"] for c in result.checks]
