"""A reader that may not write (read-only credentials) cannot roll a pending write job
forward: it reads as if the job had not committed yet, in every partition, instead of
failing; once someone with write access rolls the job forward, it reads all of it."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

from kafkastore.cli.entry import main as cli
from kafkastore.job_commits import settle_pending
from kafkastore.storage import Storage
from tests.helpers.sink_jobs import half_marked_job, read_only_root


def _consume(root: str) -> list[str]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli(["--root", root, "consume", "out"]) == 0
    return sorted(json.loads(line)["value"] for line in out.getvalue().splitlines())


def _spark_values(spark, root: str) -> list[str]:
    df = spark.read.format("kafkastore").option("root", root).option("subscribe", "out").load()
    return sorted(r.value.decode() for r in df.select("value").collect())


def test_consume_without_write_access_reads_a_pending_job_as_not_committed(tmp_path):
    root = f"file://{tmp_path}/root"
    values = sorted(half_marked_job(root))
    with read_only_root(str(tmp_path / "root")):
        assert _consume(root) == []           # none of the job, and no storage error
    settle_pending(Storage(root))
    assert _consume(root) == values


def test_spark_reads_without_write_access_read_a_pending_job_as_not_committed(spark, tmp_path):
    """The data source's planning (in Spark's Python workers) cannot write the missing
    marker: the half-marked job is in neither partition; rolled forward, it is in both."""
    root = f"file://{tmp_path}/root"
    values = sorted(half_marked_job(root))
    with read_only_root(str(tmp_path / "root")):
        assert _spark_values(spark, root) == []
    settle_pending(Storage(root))
    assert _spark_values(spark, root) == values
