"""``kafkastore produce`` as a real process: the merge its last commit starts finishes before the
interpreter exits, so repeated short runs keep a partition's live segments bounded and print
nothing but their one line of outcome."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.merge import DEFAULT_MIN_SEGMENTS
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic

KAFKASTORE = os.path.join(os.path.dirname(sys.executable), "kafkastore")
T, P = "events", 0


def produce(root: str, value: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKASTORE_")}
    line = json.dumps({"value": value, "partition": P}) + "\n"
    return subprocess.run([KAFKASTORE, "--root", root, "produce", T], input=line.encode(),
                          capture_output=True, env=env, timeout=300)


def live_segments(storage: Storage) -> int:
    return len(ManifestStore(storage, T, P).latest().segments)


def test_repeated_cli_produce_keeps_live_segments_bounded_and_quiet(tmp_path):
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, T, 1)
    # One segment short of the merge threshold, written in-process (fast), one flush each.
    b = Broker(storage, housekeeping=False)
    for i in range(DEFAULT_MIN_SEGMENTS - 1):
        b.send(T, b"pre-%d" % i, partition=P)
        b.flush()
    assert live_segments(storage) == DEFAULT_MIN_SEGMENTS - 1

    runs = 6
    for i in range(runs):
        p = produce(root, f"run-{i}")
        assert p.returncode == 0, p.stderr
        # Only the outcome line: no warning about housekeeping racing the exit.
        lines = p.stderr.decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith("produced 1 record(s)"), lines
        # The first run reaches the threshold and its merge lands before the process ends.
        assert live_segments(storage) < DEFAULT_MIN_SEGMENTS, (i, live_segments(storage))

    r = PartitionReader(Storage(root), T, P)
    values = [row["value"] for row in r.read(r.log_start_offset).to_pylist()]
    assert values == [b"pre-%d" % i for i in range(DEFAULT_MIN_SEGMENTS - 1)] + [
        b"run-%d" % i for i in range(runs)]
