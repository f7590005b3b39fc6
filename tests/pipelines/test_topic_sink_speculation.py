"""Real speculation: a write into a topic on a Spark standalone cluster of two hosts (a
master on 127.0.0.1, workers bound to 127.0.0.2 and 127.0.0.3, started from pyspark's own
classes), with ``spark.speculation`` on and one task attempt that straggles after its
writer has committed records to the log. Spark must launch a copy of it on the other host;
every record is then read exactly once, no read_committed snapshot during the write sees
part of the job, and no process of the cluster outlives the run.

The session is not the test session's (that one is local mode, and a process holds one
SparkSession): ``bench/speculation.py`` runs in a subprocess of its own process group.
Opt-in (``KAFKASTORE_SPECULATION_TEST=1``): it starts five JVMs (a master, two workers,
two executors) and a driver, more than 90 s on the shared 2-core machine; the writer
API's own speculation cases run always (tests/pipelines/test_spark_write.py)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.helpers.cluster import processes_under

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = 4000

pytestmark = pytest.mark.skipif(os.environ.get("KAFKASTORE_SPECULATION_TEST") != "1",
                                reason="opt-in: set KAFKASTORE_SPECULATION_TEST=1 (minutes)")


def _run_bench(workdir: str) -> subprocess.CompletedProcess:
    """``bench/speculation.py`` in a process group of its own; the whole group is killed
    when it does not finish in time (its driver JVM and any cluster process with it)."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "bench", "speculation.py"),
                             "--records", str(RECORDS), "--slow-s", "60", "--workdir", workdir],
                            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_a_speculative_copy_of_a_write_task_runs_on_the_other_host_and_adds_nothing(tmp_path):
    try:
        done = _run_bench(str(tmp_path))
    finally:
        left = processes_under(str(tmp_path))
        for pid, _ in left:
            os.kill(pid, signal.SIGKILL)
    out = done.stdout
    print(out)
    assert not left, f"processes of the cluster left running: {left}"
    assert "executors on hosts: ['127.0.0.2', '127.0.0.3']" in out, out[-3000:]
    assert "speculative copy of the slow task ran on another host: True" in out, out[-3000:]
    assert f"records read: {RECORDS} of {RECORDS}; missing 0, repeated 0" in out, out[-3000:]
    assert "(partial: none)" in out, out[-3000:]
    # The loser had committed records of its own to the log: they are there, aborted.
    aborted = re.search(r"the aborted attempts': (\d+)", out)
    assert aborted and int(aborted.group(1)) > 0, out[-3000:]
    assert "still running after its stop: 0" in out, out[-3000:]
    assert done.returncode == 0, out[-3000:]
