"""A clean stop of a process whose housekeeping is due is not a failure: a job that meets the
process's thread pools shut (the interpreter exiting, a broker's pools closed) is logged as a
stop, never as a warning, and a broker's stop waits for the housekeeper's step in flight."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from confluent_kafka import Producer

from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

# One process: a partition with merges due, a poke, and main returns at once (as `serve`
# does after a SIGTERM): the merge job runs while the interpreter shuts its pools down.
_EXIT_WITH_A_MERGE_DUE = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("kafkastore").setLevel(logging.INFO)
    from kafkastore.maintenance.housekeeper import Housekeeper
    from kafkastore.manifest import ManifestStore
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import create_topic
    from kafkastore.write.log_writer import LogWriter

    storage = Storage(sys.argv[1])
    create_topic(storage, "t", 1)
    writer = LogWriter(storage, housekeeping=False)
    for i in range(12):
        writer.send("t", b"v%d" % i, partition=0)
        writer.flush()
    hk = Housekeeper(storage, min_segments=0)
    print("scheduled", hk.poke("t", 0, ManifestStore(storage, "t", 0).latest()), flush=True)
""")


def test_a_process_that_exits_with_a_merge_due_logs_no_warning(tmp_path):
    out = subprocess.run([sys.executable, "-c", _EXIT_WITH_A_MERGE_DUE, f"file://{tmp_path}/root"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "scheduled True" in out.stdout
    # Seen failing: "kafkastore.merge WARNING housekeeping of t/0 failed: cannot schedule new
    # futures after interpreter shutdown".
    assert "WARNING" not in out.stderr, out.stderr
    assert "ERROR" not in out.stderr, out.stderr


def test_a_broker_stopped_with_merges_due_logs_no_housekeeping_failure(tmp_path):
    """`kafkastore serve` stopped by SIGTERM right after many small commits (merges due): its
    housekeeper is closed after the broker (its step in flight ends first), and nothing is
    logged as a failed housekeeping job. Seen failing on the old stop order (1 of 3 runs of
    these steps): "housekeeping of bench/1 failed: cannot schedule new futures after shutdown"."""
    root = f"file://{tmp_path}/root"
    create_topic(Storage(root), "bench", 2)
    proc = subprocess.Popen([sys.executable, "-m", "kafkastore.cli", "--root", root, "serve",
                             "--listen", "127.0.0.1:0", "--commit-interval-ms", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "serving" in line, line
        producer = Producer({"bootstrap.servers": line.split(" on ", 1)[1].split()[0],
                             "linger.ms": 0})
        for i in range(300):   # one commit each: small segments, merges due at the stop
            producer.produce("bench", b"x" * 100, partition=i % 2)
            producer.flush(30)
        proc.terminate()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    assert "housekeeping of" not in stderr and "gc of" not in stderr, stderr
