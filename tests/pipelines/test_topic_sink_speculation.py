"""Real speculation (opt-in: ``KAFKASTORE_SPECULATION_TEST=1``): Spark never speculates in
local mode, so ``bench/speculation.py`` starts its own session (``local-cluster``, two
executor JVMs, or the cluster ``KAFKASTORE_SPECULATION_MASTER`` names) with
``spark.speculation`` on and one straggling task attempt, writes into a topic and reads
it back. It takes minutes (the standalone cluster's start), hence
opt-in; the writer API's own speculation cases run always (tests/pipelines/test_spark_write.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(os.environ.get("KAFKASTORE_SPECULATION_TEST") != "1",
                                reason="opt-in: set KAFKASTORE_SPECULATION_TEST=1 (minutes)")


def test_a_speculative_copy_of_a_write_task_leaves_every_record_once():
    """Every record exactly once with a straggling attempt. Spark launches the copy only
    on a cluster of two hosts (``KAFKASTORE_SPECULATION_MASTER=spark://...``; see the
    script's docstring): there the copy must have run; on ``local-cluster`` (one host)
    it cannot."""
    master = os.environ.get("KAFKASTORE_SPECULATION_MASTER")
    done = subprocess.run([sys.executable, os.path.join(HERE, "bench", "speculation.py"),
                           "--records", "4000", "--slow-s", "45",
                           *(["--master", master] if master else [])],
                          capture_output=True, text=True, timeout=1200, cwd=HERE)
    print(done.stdout)
    assert "missing 0, repeated 0" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.returncode == (0 if master else 2), done.stdout[-2000:]
