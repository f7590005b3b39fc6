"""A real Spark standalone cluster (1 master, 2 workers) runs a small job.

The job runs in its own Python process: this test session already owns a
local-mode SparkSession (one per process), and the cluster's driver must not
share it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.helpers.cluster import group_alive, standalone_cluster

JOB = r'''
import json, sys, time
from pipelines.source.session import get_spark
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import KafkaCommit, commit, committed_offsets
from pipelines.warehouse.reads import read_arrow
from pipelines.jobs.load import nullable, raw_schema
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.warehouse.files import DESCRIPTOR_DDL, write_files

master, warehouse = sys.argv[1], sys.argv[2]
spark = get_spark(master=master, app_name="kafkastore-cluster-test",
                  extra_conf={"spark.executor.memory": "512m", "spark.executor.cores": "1",
                              "spark.cores.max": "2", "spark.ui.enabled": "false"})
sc = spark.sparkContext
deadline = time.time() + 60
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.time() < deadline:
    time.sleep(0.2)   # the driver plus one executor per worker
executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1

def tag(batches):
    import os, pyarrow as pa, pipelines.warehouse.catalog
    for b in batches:
        yield pa.RecordBatch.from_pydict({"n": [b.num_rows], "pid": [os.getpid()]})

parts = spark.range(0, 1000, numPartitions=4).mapInArrow(tag, "n long, pid long").collect()

# Executors write Parquet through the table writer; the driver commits one snapshot.
rows = spark.sql("""
  SELECT CAST(NULL AS BINARY) AS key, CAST(CONCAT('v', id) AS BINARY) AS value,
         't' AS topic, CAST(id % 2 AS INT) AS partition, id DIV 2 AS offset,
         TIMESTAMP_MILLIS(1700000000000 + id) AS timestamp
  FROM range(0, 100, 1, 4)""")
wh = Warehouse(warehouse)
table = wh.create_table("cluster_tbl", nullable(raw_schema()))
location = table.location()

def write(batches):
    import pyarrow as pa
    from pipelines.warehouse.files import descriptor_schema, write_files
    out = write_files(location, list(batches), run_id="cluster-run")
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=descriptor_schema())

urls = [r.url for r in rows.mapInArrow(write, DESCRIPTOR_DDL).collect()]
commit(table, KafkaCommit("cluster-run", "load",
                                  (OffsetRange("t", 0, 0, 50), OffsetRange("t", 1, 0, 50)),
                                  tuple(urls)))
table = wh.table("cluster_tbl")
back = read_arrow(table)
print("RESULT " + json.dumps({
    "executors": executors, "rows": sum(p["n"] for p in parts),
    "pids": len({p["pid"] for p in parts}), "master": sc.master,
    "committed": {f"{t}/{p}": n for (t, p), n in committed_offsets(table).items()},
    "read_back": back.num_rows}))
spark.stop()
'''


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_job_on_standalone_cluster(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    started = time.monotonic()
    with standalone_cluster(workers=2, cores=1, memory="1g") as cluster:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        proc = subprocess.run(
            [sys.executable, str(script), cluster.master_url, f"file://{tmp_path}/warehouse"],
            env=cluster.env(), capture_output=True, text=True, timeout=180)
        pids = [p.pid for p in cluster.processes]
        master_log = cluster.log("master")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-4000:])
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["master"] == cluster.master_url
    assert result["executors"] == 2
    assert result["rows"] == 1000
    assert result["committed"] == {"t/0": 50, "t/1": 50} and result["read_back"] == 100
    assert master_log.count("Registering worker") == 2
    # Everything is stopped: no daemon survives the context manager.
    alive = [pid for pid in pids if group_alive(pid)]
    assert not alive, subprocess.run(["ps", "-eo", "pid,pgid,stat,cmd"], capture_output=True,
                                     text=True).stdout[-3000:]
    # How long it took is not asserted (a loaded CI machine is slow, not wrong): the marker's
    # timeout catches a hang.
    print(f"standalone cluster job: {time.monotonic() - started:.0f} s")
