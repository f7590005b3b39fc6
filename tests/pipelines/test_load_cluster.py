"""A load on a real standalone cluster (1 master, 2 workers) equals a local-mode load.

The cluster's driver runs in its own Python process (this test session owns a
local-mode SparkSession, one per process). Only URLs and options reach the
executors, so the same job works unchanged on both.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import committed_offsets
from pipelines.warehouse.reads import plan_scan, read_arrow
from pipelines.jobs.load import run_load
from tests.helpers.cluster import standalone_cluster
from tests.helpers.loads import assert_exactly_once, make_topic, produce

JOB = r'''
import json, sys
from pipelines.source.session import get_spark
from pipelines.jobs.load import run_load

master, root, warehouse = sys.argv[1:4]
spark = get_spark(master=master, app_name="kafkastore-load-on-cluster",
                  extra_conf={"spark.executor.memory": "512m", "spark.executor.cores": "1",
                              "spark.cores.max": "2", "spark.ui.enabled": "false"})
summary = run_load(spark, root=root, topic="t", warehouse=warehouse, table="tbl",
                   value_format="json", value_schema="id long, name string",
                   max_bytes_per_partition=4096, progress=False)
print("RESULT " + json.dumps({"summary": summary.to_dict(), "master": spark.sparkContext.master}))
spark.stop()
'''


def _value(i):
    return b"oops" if i % 11 == 4 else json.dumps({"id": i, "name": f"n{i}"}).encode()


def _contents(wh: Warehouse):
    """Rows of the table and of its dead letters, sorted by (partition, offset)."""
    out = {}
    for kind, name in (("data", "tbl"), ("dead_letter", "tbl_dead_letters")):
        rows = read_arrow(wh.table(name)).to_pylist()
        out[kind] = sorted(rows, key=lambda r: (r["partition"], r["offset"]))
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_cluster_load_equals_local_load(spark, tmp_path):
    root = f"file://{tmp_path}/log"
    storage = make_topic(root, partitions=3)
    produce(storage, "t", 150, value=_value, flush_every=20)
    started = time.monotonic()
    with standalone_cluster(workers=2, cores=1, memory="1g") as cluster:
        script = tmp_path / "job.py"
        script.write_text(JOB)
        proc = subprocess.run(
            [sys.executable, str(script), cluster.master_url, root, f"file://{tmp_path}/wh-cluster"],
            env=cluster.env(), capture_output=True, text=True, timeout=180)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-4000:])
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["master"].startswith("spark://")
    assert result["summary"]["rows"] + result["summary"]["dead_letters"] == 150
    assert time.monotonic() - started < 150

    local = run_load(spark, root=root, topic="t", warehouse=f"file://{tmp_path}/wh-local",
                     table="tbl", value_format="json", value_schema="id long, name string",
                     progress=False)
    on_cluster = Warehouse(f"file://{tmp_path}/wh-cluster")
    on_local = Warehouse(f"file://{tmp_path}/wh-local")
    assert committed_offsets(on_cluster.table("tbl")) == committed_offsets(on_local.table("tbl"))
    assert local.dead_letters == result["summary"]["dead_letters"] > 0
    assert _contents(on_cluster) == _contents(on_local)
    assert_exactly_once(storage, "t", on_cluster)
    # Small input splits: the cluster run wrote several files per partition.
    assert len(plan_scan(on_cluster.table("tbl")).files) > 3
