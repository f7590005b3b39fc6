"""A write job into topics whose driver died between two partitions' COMMIT markers (the
hazard the all-partitions-or-none rule is about), made with the sink's own protocol
(:mod:`pipelines.sink.commit`) as the Spark driver runs it."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pyarrow as pa

from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.sink import commit as tsc

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _commit_killed(root: str, results: str, topic: str, job: str) -> None:
    """The driver commits the given task results and dies (no clean-up at all) just before
    its first marker in partition 1: partition 0 is fully marked."""
    from kafkastore.write.log_writer import LogWriter

    marker = LogWriter.write_marker

    def dying(self, t, partition, *, commit):
        if partition == 1:
            os._exit(3)
        return marker(self, t, partition, commit=commit)

    LogWriter.write_marker = dying
    done = [tsc.TaskResult(r["producer_id"], tuple(map(tuple, r["partitions"])), r["records"])
            for r in json.loads(results)]
    tsc.commit_job(Storage(root), done, job=job, prefix=tsc.prefix_of(done[0].producer_id),
                   topics=[topic])


def half_marked_job(root: str, topic: str = "out", records: int = 40, job: str = "jk") -> list[str]:
    """Create ``topic`` (2 partitions) under ``root`` and leave job ``job`` there decided,
    pending and marked in partition 0 only; the values it wrote (``v0`` ...)."""
    storage = Storage(root)
    create_topic(storage, topic, 2, {})
    prefix = tsc.new_job_prefix()
    half = records // 2
    results = []
    for attempt, rows in ((1, range(0, half)), (2, range(half, records))):
        table = pa.table({"key": [f"k{i}" for i in rows], "value": [f"v{i}" for i in rows]})
        results.append(tsc.write_task(storage, [table], prefix=prefix, task_attempt_id=attempt,
                                      topic=topic, job=job, out=open(os.devnull, "w")))
    assert {p for r in results for _, p in r.partitions} == {0, 1}
    given = json.dumps([{"producer_id": r.producer_id, "partitions": r.partitions,
                         "records": r.records} for r in results])
    done = subprocess.run([sys.executable, "-m", "tests.helpers.sink_jobs", root, given, topic, job],
                          cwd=ROOT_DIR, timeout=300, stderr=subprocess.DEVNULL)
    assert done.returncode == 3
    # The hazard is real: read partition by partition, the job is in one and not the other.
    seen = {p: PartitionReader(storage, topic, p).read(0).num_rows for p in (0, 1)}
    assert seen[0] > 0 and seen[1] == 0, seen
    return [f"v{i}" for i in range(records)]


@contextlib.contextmanager
def read_only_root(path: str):
    """The local root at ``path`` refuses every write, to every process (Spark's Python
    workers too), as a root under read-only credentials does: its files and directories
    are made immutable (``chattr +i``; the tests run as root, for whom mode bits do not
    refuse anything) and made mutable again on exit. Skips when the file system or the
    user cannot do that."""
    import pytest

    made = subprocess.run(["chattr", "-R", "+i", path], capture_output=True, text=True)
    if made.returncode != 0:
        subprocess.run(["chattr", "-R", "-i", path], capture_output=True)
        pytest.skip(f"cannot make {path} read-only here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-R", "-i", path], check=True)


if __name__ == "__main__":
    _commit_killed(*sys.argv[1:5])
