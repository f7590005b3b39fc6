"""gc's referenced set from the checkpoint chain: the head, its group, and the full
versions back to the oldest stored one, each recording what its previous group listed and it
no longer does, instead of one read per stored version. It must equal the replay of every
stored version (never less: a file a reader of a stored version may read stays)."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore import layout
from kafkastore.maintenance.gc import collect_garbage
from kafkastore.manifest import ManifestStore
from kafkastore.maintenance.merge import merge_partition
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.logdata import append_segment
from tests.helpers.roots import make_root_url

T, P = "events", 0
LATER = 3600 * 1000  # far past every grace: expiry keeps only what keep_last asks


def replayed(store: ManifestStore) -> set[str]:
    """The reference: every stored version rebuilt and its files collected (one read each)."""
    return store.referenced_files(versions=store.versions())


def paths_of(m) -> set[str]:
    return {p for s in m.segments for p in s.paths(T, P).values()}


OPS = st.lists(st.sampled_from(["append", "append", "append", "merge", "checkpoint", "expire",
                                "cold"]), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, k=st.sampled_from([2, 3, 5, 16]), keep=st.integers(1, 6))
def test_the_checkpoint_chain_gives_what_replaying_every_version_gives(tmp_path, ops, k, keep):
    storage = Storage(f"memory://gc-chain-{time.monotonic_ns()}")
    create_topic(storage, T, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ManifestStore, "full_every", k)
        store = ManifestStore(storage, T, P)
        ever: set[str] = set()  # every file any committed version listed
        expired = False
        for i, op in enumerate(ops):
            if op == "append":
                append_segment(storage, T, P, [1_700_000_000_000 + i])
            elif op == "merge":
                merge_partition(storage, T, P, min_segments=0, fan_in=2, max_runs=1)
            elif op == "checkpoint" and store.latest() is not None:
                store.commit(lambda b: ([], []), operation="checkpoint", full=True)
            elif op == "expire" and store.latest() is not None:
                now = storage.clock.wall_ms() + LATER
                expired |= bool(store.expire_versions(now, keep_ms=0, keep_last=keep))
            elif op == "cold":
                store.forget_cached()
            if store.latest() is not None:
                ever |= paths_of(store.latest())
        store.forget_cached()
        fast = ManifestStore(storage, T, P)._referenced_by_checkpoints()
        ref = replayed(store)
        assert fast is not None
        assert ref <= fast, f"the chain misses {sorted(ref - fast)}"
        assert fast <= ever
        if not expired:
            assert fast == ref
        assert store.referenced_files() == fast


def test_gc_reads_the_full_versions_not_every_delta(tmp_path, request):
    url = make_root_url("memory", tmp_path, request)
    inner = Storage(url)
    create_topic(inner, T, 1)
    for i in range(200):
        append_segment(inner, T, P, [1_700_000_000_000 + i])
        if i % 10 == 9:
            merge_partition(inner, T, P, min_segments=0, fan_in=2)
    fs = FaultyFS(inner.fs)
    reads: list[str] = []
    fs.inject("read", "before", match=layout.manifest_dir(T, P) + "/0", count=None,
              callback=lambda op, path: reads.append(path))
    store = ManifestStore(Storage(url, fs=fs), T, P)
    store.forget_cached()
    versions = len(store.versions())
    assert versions > 200
    got = store.referenced_files()
    # the full versions (one in 16) and the head's group, not one read per version
    assert len(reads) <= versions // 16 + 2 * 16, (len(reads), versions)
    assert got == replayed(ManifestStore(inner, T, P))


def test_versions_without_the_record_are_replayed(tmp_path, request):
    """A full version written before the record existed (here: stripped of it) sends gc back to
    replaying every stored version, which protects the same files."""
    import json

    url = make_root_url("memory", tmp_path, request)
    storage = Storage(url)
    create_topic(storage, T, 1)
    for i in range(40):
        append_segment(storage, T, P, [1_700_000_000_000 + i])
        if i % 8 == 7:
            merge_partition(storage, T, P, min_segments=0, fan_in=2)
    store = ManifestStore(storage, T, P)
    path = store.path(16)
    doc = json.loads(storage.get(path))
    assert "group" in doc
    del doc["group"]
    storage.delete([path])
    storage.put(path, json.dumps(doc).encode())
    store.forget_cached()
    assert store._referenced_by_checkpoints() is None
    assert store.referenced_files() == replayed(store)
    # a gc far in the future deletes only what no stored version lists
    report = collect_garbage(storage, T, P, now_ms=storage.clock.wall_ms() + LATER,
                             dry_run=True)
    assert not set(report.deleted) & replayed(store)
