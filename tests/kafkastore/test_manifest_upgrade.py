"""A root written before delta versions (format 1: every version a full snapshot, no hint),
with real segments and many versions: read as it is, one listing to find the head the first
time, then format 2 from the next commit on and never a listing again."""
from __future__ import annotations

import json

from kafkastore import layout
from kafkastore.read.verify import verify_partition
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS

T, P = "old", 0


def as_format1(storage, versions):
    """Rewrite the stored versions as 7c4b7d9's code wrote them: each the full snapshot,
    compact JSON, "format": 1, no "kind"; and no hint."""
    store = ManifestStore(storage, T, P)
    for v in versions:
        d = store.load(v).to_dict()
        d["format"] = 1
        del d["kind"]
        storage.put(layout.manifest_path(T, P, v), json.dumps(d, separators=(",", ":")).encode())
    storage.delete([layout.manifest_hint_path(T, P)])
    store.forget_cached()


def ops_of(storage):
    fs = FaultyFS(storage.fs)
    ops: list[tuple[str, str]] = []
    fs.inject(("read", "stat", "list", "write", "delete"), count=None,
              match=lambda op, path: ops.append((op, path)) and False)
    return Storage(storage.url, fs=fs), ops


def test_many_format1_versions_list_once_then_never(local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    b = Broker(storage, housekeeping=False)
    for i in range(40):
        b.send(T, b"v%d" % i, partition=P)
        b.flush()
    old = [ManifestStore(storage, T, P).load(v) for v in range(1, 41)]
    as_format1(storage, range(1, 41))

    counted, ops = ops_of(storage)
    store = ManifestStore(counted, T, P)
    assert store.latest() == old[-1]
    assert [op for op, _ in ops].count("list") == 1  # no hint: one listing, once
    ops.clear()
    b2 = Broker(counted, housekeeping=False)
    for i in range(40, 60):  # 41 full (its base was format 1), then deltas and 48 full
        b2.send(T, b"v%d" % i, partition=P)
        b2.flush()
    assert json.loads(storage.get(layout.manifest_path(T, P, 41)))["kind"] == "full"
    assert json.loads(storage.get(layout.manifest_path(T, P, 42)))["kind"] == "delta"
    cold = ManifestStore(counted, T, P)
    cold.forget_cached()  # a new process: starts from the hint
    assert cold.latest().version == 60
    assert not [p for op, p in ops if op == "list"]
    # nothing lost: every old version still reads as it was, every record once, verify ok
    assert [cold.load(v) for v in range(1, 41)] == old
    rows = PartitionReader(storage, T, P).read(0).to_pylist()
    assert [r["value"] for r in rows] == [b"v%d" % i for i in range(60)]
    assert verify_partition(storage, T, P).ok


def test_the_first_format2_version_fences_older_kafkastore_off_the_topic(local_root):
    """Before the first delta-era version of an old topic lands, its _topic.json moves to
    format 3 (past 2), which kafkastore before delta versions refuses ("unsupported format 2"): its gc
    would otherwise expire versions a delta needs without reading them."""
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    b = Broker(storage, housekeeping=False)
    for i in range(3):
        b.send(T, b"v%d" % i, partition=P)
        b.flush()
    as_format1(storage, range(1, 4))
    meta_path = layout.topic_meta_path(T)
    doc = json.loads(storage.get(meta_path))
    doc["format"] = 1  # as the old code wrote it
    storage.put(meta_path, json.dumps(doc).encode())

    writes: list[str] = []
    fs = FaultyFS(storage.fs)
    fs.on_write(lambda op, path: writes.append(path), count=None)
    b2 = Broker(Storage(local_root, fs=fs), housekeeping=False)
    b2.send(T, b"v3", partition=P)
    b2.flush()
    # Format 3 (versioned topic metadata, topics._make_versioned), which old code refuses too.
    assert json.loads(storage.get(meta_path))["format"] == 3
    first_version = next(i for i, p in enumerate(writes) if "/_manifest/0" in p)
    fenced = [i for i, p in enumerate(writes) if p.endswith(meta_path)]
    assert fenced and fenced[0] < first_version, writes
    assert PartitionReader(storage, T, P).read(0).column("value").to_pylist() == [
        b"v0", b"v1", b"v2", b"v3"]
    before = storage.get(meta_path)
    b2.send(T, b"v4", partition=P)  # fenced once: later commits leave the file alone
    b2.flush()
    assert storage.get(meta_path) == before
    assert len([p for p in writes if p.endswith(meta_path)]) == 1
