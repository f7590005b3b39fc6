"""Garbage collection: unreferenced files go after the grace period, never a file a readable version lists."""
from __future__ import annotations

import itertools
import os
import time

import pytest

from kafkastore import layout
from kafkastore.errors import (ConfigError, KafkaStoreError, ObjectNotFoundError,
                               StaleUploadError, StorageError)
from kafkastore.maintenance.gc import collect_garbage
from kafkastore.manifest import ManifestStore, ReplaceSegments
from kafkastore.read.reader import PartitionReader
from kafkastore.maintenance.retention import apply_retention
from kafkastore.storage import Storage
from kafkastore.topics.admin import alter_topic, create_topic
from tests.helpers.roots import make_root_url
from tests.faults import FaultyFS
from tests.helpers.logdata import append_segment, segment_files, upload_segment
from tests.helpers.threads import run_side_by_side

T, P = "events", 0
DAY = 24 * 3600 * 1000
GRACE = 60_000  # file.delete.delay.ms default


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(params=["file", "memory"])
def storage(request, tmp_path):
    return Storage(make_root_url(request.param, tmp_path, request))


def stored_paths(storage) -> set[str]:
    return {o.path for o in storage.list(layout.partition_dir(T, P))}


def assert_every_version_readable(storage, topic=T, partition=P):
    """Every stored manifest version's files exist: nothing a reader may use was deleted."""
    paths = {o.path for o in storage.list(layout.partition_dir(topic, partition))}
    store = ManifestStore(storage, topic, partition)
    # history() rebuilds every stored version; a delta whose group is half expired (a failed
    # delete stopped the oldest-first sweep) is expired already and not returned.
    for m in store.history():
        v = m.version
        for s in m.segments:
            missing = set(s.paths(topic, partition).values()) - paths
            assert not missing, f"version {v} lists deleted files {missing}"


def log_with_old_data(storage, n=4, *, config=None):
    now = now_ms()
    create_topic(storage, T, 1, config or {"retention.ms": int(1.5 * DAY)})
    entries = []
    for i in range(n):
        ts = now - (n - i) * DAY
        entries.append(append_segment(storage, T, P, [ts, ts]))
    return entries


def test_orphans_of_a_crashed_writer_go_after_the_grace_and_not_before(root_url):
    storage = Storage(root_url)
    committed = log_with_old_data(storage, 2)
    hw = ManifestStore(storage, T, P).latest().high_watermark
    orphan = upload_segment(storage, T, P, hw, [1, 2, 3])  # uploaded, then the writer died
    orphan_files = segment_files(orphan, T, P)

    early = collect_garbage(storage, T, P, now_ms=now_ms())
    assert early.deleted == [] and sorted(early.young) == orphan_files
    assert set(orphan_files) <= stored_paths(storage)

    late = collect_garbage(storage, T, P, now_ms=now_ms() + GRACE + 5_000)
    assert sorted(late.deleted) == orphan_files
    assert late.bytes_deleted == orphan.size + orphan.index_size + orphan.timeindex_size
    # Version 2 is a delta on version 1 and groups go whole: expiry first made a full copy of
    # the head (version 3, "checkpoint"), then both went; the latest version always stays.
    assert late.versions_expired[P] == [1, 2]
    assert ManifestStore(storage, T, P).versions() == [3]
    remaining = stored_paths(storage)
    assert not set(orphan_files) & remaining
    for e in committed:
        assert set(segment_files(e, T, P)) <= remaining
    assert PartitionReader(storage, T, P).read(-2).num_rows == 4
    assert collect_garbage(storage, T, P, now_ms=now_ms() + GRACE + 5_000).deleted == []


def test_readers_of_an_old_version_keep_reading_within_the_grace(root_url):
    storage = Storage(root_url)
    entries = log_with_old_data(storage, 4)
    old_reader = PartitionReader(storage, T, P)  # loads the current version
    res = apply_retention(storage, T, P, now_ms())
    assert len(res.dropped) == 3
    t0 = now_ms()

    within = collect_garbage(storage, T, P, now_ms=t0 + GRACE // 2)
    assert within.deleted == [] and within.versions_expired[P] == []
    assert old_reader.read(0).column("offset").to_pylist() == list(range(8))

    after = collect_garbage(storage, T, P, now_ms=t0 + GRACE + 5_000)
    dropped_files = sorted(f for e in entries[:3] for f in segment_files(e, T, P))
    assert sorted(after.deleted) == dropped_files
    assert PartitionReader(storage, T, P).read(-2).column("offset").to_pylist() == [6, 7]
    # The bound of the guarantee: a reader still on an expired version loses its files.
    with pytest.raises(ObjectNotFoundError):
        old_reader.read(0)


def test_replaced_segments_go_after_the_grace(storage):
    entries = log_with_old_data(storage, 3, config={"retention.ms": -1})
    copy = upload_segment(storage, T, P, 0, [1, 2])  # what compaction would write
    ManifestStore(storage, T, P).commit(
        lambda m: ([ReplaceSegments((entries[0].segment_id,), (copy,))], []))
    assert collect_garbage(storage, T, P, now_ms=now_ms()).deleted == []
    report = collect_garbage(storage, T, P, now_ms=now_ms() + GRACE + 5_000)
    assert sorted(report.deleted) == segment_files(entries[0], T, P)
    assert_every_version_readable(storage)
    assert PartitionReader(storage, T, P).read(0).num_rows == 6


def test_grace_comes_from_the_topic_config_or_the_argument(storage):
    log_with_old_data(storage, 1)
    alter_topic(storage, T, set_configs={"file.delete.delay.ms": 10 * GRACE})
    orphan = upload_segment(storage, T, P, 2, [1])
    t = now_ms()
    report = collect_garbage(storage, T, P, now_ms=t + 2 * GRACE)
    assert report.grace_ms == 10 * GRACE and report.deleted == [] and len(report.young) == 3
    report = collect_garbage(storage, T, P, now_ms=t + 2 * GRACE, grace_ms=GRACE)
    assert sorted(report.deleted) == segment_files(orphan, T, P)


def test_dry_run_deletes_nothing(storage):
    log_with_old_data(storage, 2)
    orphan = upload_segment(storage, T, P, 4, [1])
    before = stored_paths(storage)
    report = collect_garbage(storage, T, P, now_ms=now_ms() + GRACE + 5_000, dry_run=True)
    assert sorted(report.deleted) == segment_files(orphan, T, P) and report.versions_expired == {}
    assert stored_paths(storage) == before


def test_unknown_objects_are_never_deleted(storage):
    log_with_old_data(storage, 1)
    pdir = layout.partition_dir(T, P)
    for rel in ("notes.txt", "00000000000000000000.log", "sub/00000000000000000000-abc.log"):
        storage.put(f"{pdir}/{rel}", b"keep me")
    report = collect_garbage(storage, T, P, now_ms=now_ms() + 10 * GRACE)
    assert report.deleted == []
    assert sorted(report.skipped) == sorted(f"{pdir}/{r}" for r in (
        "notes.txt", "00000000000000000000.log", "sub/00000000000000000000-abc.log"))


def test_temp_files_of_interrupted_local_writes(tmp_path):
    storage = Storage(f"file://{tmp_path}/root")
    log_with_old_data(storage, 1)
    pdir = storage.full_path(layout.partition_dir(T, P))
    old = [os.path.join(pdir, ".tmp-dead1"), os.path.join(pdir, "_manifest", ".tmp-dead2")]
    young = os.path.join(pdir, ".tmp-inflight")
    for path in old + [young]:
        with open(path, "wb") as f:
            f.write(b"partial")
    hour_ago = time.time() - 3600
    for path in old:
        os.utime(path, (hour_ago, hour_ago))
    report = collect_garbage(storage, T, P, now_ms=now_ms())
    assert sorted(report.deleted) == sorted([f"{layout.partition_dir(T, P)}/.tmp-dead1",
                                             f"{layout.manifest_dir(T, P)}/.tmp-dead2"])
    assert not any(os.path.exists(p) for p in old) and os.path.exists(young)
    assert report.young == [f"{layout.partition_dir(T, P)}/.tmp-inflight"]


def test_whole_topic(storage):
    t = now_ms()
    create_topic(storage, T, 2, {"retention.ms": DAY})
    orphans = []
    for p in (0, 1):
        append_segment(storage, T, p, [t - 3 * DAY])
        append_segment(storage, T, p, [t])
        orphans += segment_files(upload_segment(storage, T, p, 2, [t]), T, p)
        apply_retention(storage, T, p, t)
    report = collect_garbage(storage, T, now_ms=t + GRACE + 5_000)
    assert report.partitions == [0, 1]
    assert len(report.deleted) == 12 and set(orphans) <= set(report.deleted)
    for p in (0, 1):
        assert_every_version_readable(storage, T, p)
        assert PartitionReader(storage, T, p).read(-2).num_rows == 1


def test_bad_arguments(storage):
    log_with_old_data(storage, 1)
    with pytest.raises(KafkaStoreError):
        collect_garbage(storage, T, P, now_ms=time.time())
    with pytest.raises(KafkaStoreError):
        collect_garbage(storage, T, P, now_ms=now_ms(), grace_ms=-1)
    with pytest.raises(KafkaStoreError):
        collect_garbage(storage, T, 5, now_ms=now_ms())


# ---------------------------------------------------------------------------
# faults and races
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("ops", [("read", "stat", "list"), ("delete",)])
def test_faults_never_delete_referenced_files(tmp_path, request, ops):
    for backend in ("file", "memory"):
        url = make_root_url(backend, tmp_path, request)
        clean = Storage(url)
        log_with_old_data(clean, 5)
        apply_retention(clean, T, P, now_ms())
        upload_segment(clean, T, P, 10, [1])  # an orphan
        late = now_ms() + GRACE + 5_000
        # Fail the k-th matching operation, for every k until a run passes untouched.
        for k in itertools.count(1):
            counter = itertools.count(1)
            fs = FaultyFS(clean.fs)
            fault = fs.inject(ops, "before", count=1,
                              match=lambda op, path, c=counter, k=k: next(c) == k)
            faulty = Storage(url, fs=fs)
            try:
                collect_garbage(faulty, T, P, now_ms=late)
            except StorageError:
                pass
            assert_every_version_readable(clean)
            if not fault.fired:
                break
        assert k > 2
        report = collect_garbage(clean, T, P, now_ms=late)
        assert report.errors == []
        assert not any(p for p in stored_paths(clean)
                       if layout.parse_segment_name(p) and p not in
                       ManifestStore(clean, T, P).referenced_files())
        assert PartitionReader(clean, T, P).read(-2).column("offset").to_pylist() == [8, 9]


def test_delete_failures_are_reported_and_retried(storage):
    log_with_old_data(storage, 1)
    orphan = upload_segment(storage, T, P, 2, [1])
    fs = FaultyFS(storage.fs)
    fs.inject("delete", "before", count=1, match=".log")
    report = collect_garbage(Storage(storage.url, fs=fs), T, P, now_ms=now_ms() + GRACE + 5_000)
    assert len(report.errors) == 1 and len(report.deleted) == 2
    again = collect_garbage(storage, T, P, now_ms=now_ms() + GRACE + 5_000)
    assert again.deleted == [orphan.paths(T, P)[".log"]]


def test_concurrent_with_writers_retention_and_readers(storage, monkeypatch):
    """Everything at once on the real clock, with a short grace: no reader ever misses a file."""
    grace = 1500
    # Versions may expire after 1 s (the floor also tells slow commits to check they were not expired).
    monkeypatch.setattr(ManifestStore, "min_keep_ms", 1000)
    create_topic(storage, T, 1, {"retention.bytes": 1500, "file.delete.delay.ms": grace})
    append_segment(storage, T, P, [now_ms()])
    orphans: list[str] = []
    counter = itertools.count()

    def write():
        i = next(counter)
        if i % 4 == 3:  # a writer that crashes between upload and commit
            hw = ManifestStore(storage, T, P).latest().high_watermark
            orphans.extend(segment_files(upload_segment(storage, T, P, hw, [now_ms()]), T, P))
        else:
            try:
                append_segment(storage, T, P, [now_ms()] * 3)
            except StaleUploadError:
                # On a loaded machine an upload can outlive half the short grace: the commit
                # refuses it (GC may already be deleting it), and it is left as an orphan.
                pass
        time.sleep(0.01)

    def read():
        reader = PartitionReader(storage, T, P)
        table = reader.read(-2)
        assert table.column("offset").to_pylist() == list(range(reader.log_start_offset,
                                                                reader.high_watermark))

    run_side_by_side([write, read, read,
                      lambda: apply_retention(storage, T, P, now_ms()),
                      lambda: collect_garbage(storage, T, P, now_ms=now_ms()),
                      lambda: collect_garbage(storage, T, P, now_ms=now_ms())], 2.5)
    assert_every_version_readable(storage)
    time.sleep(grace / 1000 + 0.1)
    collect_garbage(storage, T, P, now_ms=now_ms())  # may first commit a full copy of the head
    time.sleep(grace / 1000 + 0.1)
    collect_garbage(storage, T, P, now_ms=now_ms())  # ... whose predecessors go one grace later
    left = stored_paths(storage)
    assert orphans and not set(orphans) & left
    m = ManifestStore(storage, T, P).latest()
    assert m.log_start_offset > 0 and len(ManifestStore(storage, T, P).versions()) <= 2
    live = {p for s in m.segments for p in s.paths(T, P).values()}
    assert {p for p in left if layout.parse_segment_name(p)} == live


def test_report_renders(storage):
    log_with_old_data(storage, 1)
    upload_segment(storage, T, P, 2, [1])
    report = collect_garbage(storage, T, now_ms=now_ms() + GRACE + 5_000, dry_run=True)
    assert str(report).startswith("gc events: would delete 3 file(s)")
    assert report.to_dict()["deleted"] == report.deleted


def test_grace_has_a_floor(storage):
    """file.delete.delay.ms=0 is valid, but must not delete the files of a commit in flight."""
    log_with_old_data(storage, 1)
    alter_topic(storage, T, set_configs={"file.delete.delay.ms": 0})
    upload_segment(storage, T, P, 2, [1])  # uploaded just now, commit not landed yet
    report = collect_garbage(storage, T, P, now_ms=now_ms() + 1_000)
    assert report.grace_ms == ManifestStore.min_keep_ms and report.deleted == [] and len(report.young) == 3


@pytest.mark.parametrize("grace", [0, 1_000, 59_999])
def test_explicit_grace_below_the_floor_is_refused(storage, grace):
    """An explicit grace below the floor is an error, not silently raised."""
    log_with_old_data(storage, 1)
    upload_segment(storage, T, P, 2, [1])
    with pytest.raises(ConfigError, match="below the safe floor"):
        collect_garbage(storage, T, P, now_ms=now_ms() + 1_000, grace_ms=grace)
    assert len(stored_paths(storage)) >= 6
