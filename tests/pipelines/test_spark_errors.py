"""A Spark job that fails on a worker is one line on stderr naming the
table, partition, segment and cause (the worker's own KafkaStoreError), with the full trace
in a log file the line names. The console script runs as a subprocess, as users run it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

KAFKASTORE = os.path.join(os.path.dirname(sys.executable), "kafkastore")
T = "dmg"


def run(*argv, log_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKASTORE_")}
    env["KAFKASTORE_LOG_DIR"] = str(log_dir)
    return subprocess.run([KAFKASTORE, *argv], capture_output=True, env=env, timeout=300)


def damaged_log(root: str, config: dict) -> str:
    """Three committed segments (offsets 0-9, 10-19, 20-29); the middle .log is cut in half."""
    storage = Storage(root)
    create_topic(storage, T, 1, config)
    broker = Broker(storage, commit_on_roll=False)
    for i in range(30):
        broker.send(T, b"value-%02d" % i, key=b"k%d" % (i % 5), partition=0)
        if i % 10 == 9:
            broker.flush()
    seg = ManifestStore(storage, T, 0).latest().segments[1]
    path = seg.paths(T, 0)[".log"]
    data = storage.get(path)
    storage.put(path, data[:len(data) // 2])
    return seg.stem


def assert_one_line_naming(p, stem: str, log_dir) -> str:
    assert p.returncode == 1, p.stderr.decode()
    err = p.stderr.decode()
    # One error line and no trace. What else may be there is not about the failure: the
    # JVM's note on incubator modules and the load's progress lines.
    lines = [ln for ln in err.splitlines() if not ln.startswith("WARNING: Using incubator modules")
             and not ln.startswith(f"load {T} -> ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "\tat " not in err and " ERROR " not in err, err
    line = lines[0]
    assert line.startswith("kafkastore: error: ")
    assert "SegmentMismatchError" in line and stem in line and "partition 0" in line
    assert "size is" in line  # the worker's own words, as verify prints them
    log = line.rsplit("full trace in ", 1)[1]
    assert os.path.dirname(log) == str(log_dir) and "Traceback" in open(log).read()
    return line


def test_load_of_a_damaged_segment_is_one_line_and_commits_nothing(tmp_path):
    root, wh = f"file://{tmp_path}/log", f"file://{tmp_path}/wh"
    stem = damaged_log(root, {})
    p = run("--root", root, "load", T, "--warehouse", wh, "--table", "events", log_dir=tmp_path)
    line = assert_one_line_naming(p, stem, tmp_path)
    assert "table events" in line
    out = run("--root", root, "offsets", T, "--warehouse", wh, log_dir=tmp_path)
    assert out.returncode == 0, out.stderr.decode()
    tables = json.loads(out.stdout).get("tables") or {}
    # Nothing committed: either no table at all, or one whose partition 0 has no committed offset.
    committed = (tables.get("events") or {}).get("partitions", {}).get("0", {}).get("committed")
    assert committed is None, tables


def test_compact_of_a_damaged_segment_is_one_line(tmp_path):
    root = f"file://{tmp_path}/log"
    stem = damaged_log(root, {"cleanup.policy": "compact"})
    p = run("--root", root, "compact", T, "--force", log_dir=tmp_path)
    assert_one_line_naming(p, stem, tmp_path)


def test_data_source_read_of_a_damaged_segment_names_it(spark, tmp_path):
    """The Spark data source reads through kafkastore.reader.read_range, so it refuses the
    damaged segment; the summary carries the worker's SegmentMismatchError."""
    from pipelines.spark_errors import SparkJobError, spark_errors

    root = f"file://{tmp_path}/log"
    stem = damaged_log(root, {})
    with pytest.raises(SparkJobError) as err:
        with spark_errors("read", topic=T):
            spark.read.format("kafkastore").option("root", root).option("topic", T).load().collect()
    assert err.value.cause_type == "SegmentMismatchError" and stem in str(err.value)
    assert "\n" not in str(err.value)


def test_sql_over_a_damaged_segment_is_one_line(spark, tmp_path, capsys, monkeypatch):
    """A Spark SQL query whose scan hits a damaged segment, through the CLI: one line
    naming the segment and the worker's error."""
    from pipelines.cli import main

    monkeypatch.setenv("KAFKASTORE_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("KAFKASTORE_SPARK_LOG_LEVEL", "WARN")  # keep the shared session as it is
    for name in ("KAFKASTORE_ROOT", "KAFKASTORE_CONF", "KAFKASTORE_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)
    root = f"file://{tmp_path}/log"
    stem = damaged_log(root, {})
    rc = main(["--root", root, "sql", f"SELECT count(*) FROM {T}", "--warehouse", f"file://{tmp_path}/wh"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("kafkastore: error: ")]
    assert rc == 1 and len(errors) == 1, err
    assert "SegmentMismatchError" in errors[0] and stem in errors[0], errors[0]
    assert "Traceback" not in errors[0]
