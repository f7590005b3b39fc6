"""The scheduled retention job also merges small segments (for logs nobody serves)."""
from __future__ import annotations

from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.jobs.log_retention import run_retention
from tests.helpers.logdata import append_segment

NOW = 1_700_000_000_000


def test_the_retention_job_merges_what_retention_keeps(tmp_path):
    root = f"file://{tmp_path}/log"
    storage = Storage(root)
    create_topic(storage, "t", 1, {"retention.ms": "-1"})
    for i in range(16):
        append_segment(storage, "t", 0, [NOW + i] * 3)
    expected = PartitionReader(storage, "t", 0).read(0).to_pylist()
    report = run_retention(root, "t", now_ms=NOW + 100)
    assert [len(m.merged) for m in report.merges] == [5]   # 16 -> 4 -> 1: two rounds, 5 runs
    assert len(ManifestStore(storage, "t", 0).latest().segments) == 1
    assert PartitionReader(storage, "t", 0).read(0).to_pylist() == expected
    assert "merge t/0:" in report.render()
    assert run_retention(root, "t", now_ms=NOW + 100, merge=False).merges == []
