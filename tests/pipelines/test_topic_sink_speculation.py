"""Real speculation (opt-in: ``KAFKASTORE_SPECULATION_TEST=1``): Spark never speculates in
local mode, so ``bench/speculation.py`` starts its own session on ``local-cluster`` (two
executor JVMs) with ``spark.speculation`` on and one straggling task attempt, writes into
a topic and reads it back. It takes minutes (the standalone cluster's start), hence
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
    done = subprocess.run([sys.executable, os.path.join(HERE, "bench", "speculation.py"),
                           "--records", "4000", "--slow-s", "45"],
                          capture_output=True, text=True, timeout=1200, cwd=HERE)
    print(done.stdout)
    assert "speculative copy of the slow task ran: True" in done.stdout, done.stdout[-2000:]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
