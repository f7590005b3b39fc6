"""The read a manifest commit makes just before its put (the probe for a hole: is N+2
stored?) is not the put. When it fails, nothing was put: the commit fails before its put,
as a failed read of the head does, and is never reported as an unknown outcome of a put
that was not sent (no read-back, no "unknown outcome" in the log)."""
from __future__ import annotations

import itertools
import logging

import pytest

from kafkastore import layout
from kafkastore.errors import CommitUnknownError, ReadBeforePutError, StorageError
from kafkastore.manifest import AppendSegments, ManifestStore, SegmentEntry
from kafkastore.storage import Storage
from tests.faults import FaultyFS

T, P = "orders", 0
_ids = itertools.count()


@pytest.fixture(autouse=True)
def _synthetic_entries(metadata_only_commits):
    """The entries here have no files behind them (see tests/conftest.py)."""


def _append(n: int):
    def build(base):
        hw = base.high_watermark if base else 0
        return [AppendSegments((SegmentEntry(
            base_offset=hw, next_offset=hw + n, record_count=n, size=10 * n,
            min_timestamp=1000 + hw, max_timestamp=1000 + hw + n, segment_id=f"s{next(_ids)}",
            writer_id=1, leader_epoch=0, checksum=0xDEADBEEF),))], []
    return build


def _store(url: str) -> tuple[ManifestStore, FaultyFS]:
    fs = FaultyFS(Storage(url).fs)
    store = ManifestStore(Storage(url, fs=fs), T, P)
    store.backoff_initial_s = 0.001
    store.backoff_max_s = 0.01
    return store, fs


def test_a_failed_probe_before_the_put_is_a_failure_before_the_put(local_root, caplog):
    store, fs = _store(local_root)
    assert store.commit(_append(1)).version == 1
    # Committing version 2 first reads version 3 (the probe for a hole): that read fails.
    probe = layout.manifest_path(T, P, 3)
    fs.fail_reads(match=lambda op, path: op == "read" and path.endswith(probe), count=1)
    with caplog.at_level(logging.INFO, logger="kafkastore.commit"):
        with pytest.raises(ReadBeforePutError) as info:
            store.commit(_append(1))
    assert isinstance(info.value, StorageError) and not isinstance(info.value, CommitUnknownError)
    assert not [op for op, when, path in fs.log if op == "write"], "nothing was put"
    assert "unknown outcome" not in caplog.text
    fs.clear()
    assert store.latest().version == 1
    # Retried (as any failed read before a commit), it lands once.
    assert store.commit(_append(1)).version == 2
    assert ManifestStore(Storage(local_root), T, P).latest().version == 2


def test_a_failed_probe_of_a_re_put_still_reads_back(local_root):
    """After an unknown outcome (here a put that failed without saying whether it was
    made), the same commit is put again; its probe failing then says nothing about the
    first put, which may yet land: the engine reads back as before, and puts again."""
    store, fs = _store(local_root)
    assert store.commit(_append(1)).version == 1
    probe = layout.manifest_path(T, P, 3)
    fs.on_write(lambda op, path: fs.fail_reads(
        match=lambda o, p: o == "read" and p.endswith(probe), count=1), match="_manifest/")
    fs.fail_before_write(match="_manifest/")    # the first put: outcome unknown
    assert store.commit(_append(1)).version == 2
    fs.clear()
    assert any(op == "read" and path.endswith(probe) for op, when, path in fs.log)
    assert ManifestStore(Storage(local_root), T, P).latest().version == 2
