"""Storage on every backend: whole-object writes, exclusive create under races, ranges, listings."""
from __future__ import annotations

import errno
import gc
import itertools
import multiprocessing
import os
import pickle
import time
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kafkastore.errors import CommitConflict, ConfigError, ObjectNotFoundError, StorageError
from kafkastore.storage import ObjectInfo, Storage
from kafkastore.storage.object_writes import write_all as _write_all
from tests.faults import FaultyFS, InjectedFault, faulty_storage
from tests.helpers.threads import run_at_once, run_side_by_side


@pytest.fixture
def storage(root_url):
    return Storage(root_url)


def test_put_get_roundtrip_and_overwrite(storage):
    storage.put("a/b/c.bin", b"hello")
    assert storage.get("a/b/c.bin") == b"hello"
    storage.put("a/b/c.bin", bytearray(b"world!"))
    assert storage.get("a/b/c.bin") == b"world!"
    assert storage.size("a/b/c.bin") == 6
    assert storage.exists("a/b/c.bin")
    assert not storage.exists("a/b/missing")


def test_missing_object_is_not_found(storage):
    with pytest.raises(ObjectNotFoundError):
        storage.get("nope")
    with pytest.raises(FileNotFoundError):  # ObjectNotFoundError is both
        storage.get_range("nope", 0, 10)
    with pytest.raises(ObjectNotFoundError):
        storage.size("nope")


def test_get_range(storage):
    storage.put("seg.log", bytes(range(100)))
    assert storage.get_range("seg.log", 0, 10) == bytes(range(10))
    assert storage.get_range("seg.log", 95, 200) == bytes(range(95, 100))
    assert storage.get_range("seg.log", 100, 120) == b""
    assert storage.get_range("seg.log", 150, 160) == b""
    assert storage.get_range("seg.log", 10, 10) == b""
    assert storage.get_range("seg.log", 20, 10) == b""
    with pytest.raises(ValueError):
        storage.get_range("seg.log", -1, 5)


def test_list_is_recursive_sorted_and_relative(storage):
    for rel, data in [("t/x/2.json", b"22"), ("t/x/1.json", b"1"), ("t/y/z/3", b"333"), ("u/4", b"")]:
        storage.put(rel, data)
    listed = storage.list("t")
    assert [o.path for o in listed] == ["t/x/1.json", "t/x/2.json", "t/y/z/3"]
    assert [o.size for o in listed] == [1, 2, 3]
    assert all(isinstance(o, ObjectInfo) and o.mtime > 0 for o in listed)
    assert [o.path for o in storage.list("t/x")] == ["t/x/1.json", "t/x/2.json"]
    assert [o.path for o in storage.list()] == ["t/x/1.json", "t/x/2.json", "t/y/z/3", "u/4"]
    assert storage.list("missing") == []
    assert storage.list_dirs("t") == ["x", "y"]
    assert storage.list_dirs("") == ["t", "u"]
    assert storage.list_dirs("missing") == []


def test_list_hides_temp_files_of_local_writes(local_root):
    storage = Storage(local_root)
    storage.put("d/real", b"x")
    with open(os.path.join(storage.full_path("d"), ".tmp-inflight"), "wb") as f:
        f.write(b"partial")
    assert [o.path for o in storage.list("d")] == ["d/real"]


def test_delete_is_idempotent(storage):
    storage.put("d/1", b"1")
    storage.put("d/2", b"2")
    storage.delete(["d/1", "d/missing"])
    storage.delete(["d/1"])
    storage.delete("d/2")
    assert storage.list("d") == []


def test_put_if_absent_conflicts_and_keeps_the_first(storage):
    storage.put_if_absent("m/00001.json", b"first")
    with pytest.raises(CommitConflict):
        storage.put_if_absent("m/00001.json", b"second")
    assert storage.get("m/00001.json") == b"first"


def test_put_if_absent_race_threads(storage):
    """Many threads race on one name: exactly one wins and its bytes are stored."""
    for round_ in range(3):
        name = f"race/{round_}.json"

        def attempt(i, name=name):
            try:
                storage.put_if_absent(name, f"writer-{i}".encode())
                return True
            except CommitConflict:
                return False

        winners = [i for i, won in enumerate(run_at_once(attempt, 12)) if won]
        assert len(winners) == 1  # the other 11 saw CommitConflict, nothing else
        assert storage.get(name) == f"writer-{winners[0]}".encode()


def test_listing_while_other_threads_write_and_delete(storage):
    """Listings, writes and deletes from several threads never trip over each other.

    A garbage collection can run Python code (here a gc callback; in real runs finalizers)
    in the middle of fsspec's copy of its memory store, and so switch threads there: without
    a lock a concurrent write changes the dict under the copy."""
    storage.put_many((f"many/{i:05d}", b"x") for i in range(200 if storage.protocol == "s3" else 3000))
    counter = itertools.count()

    def churn():
        name = f"churn/{next(counter)}"
        storage.put(name, b"y")
        storage.delete(name)

    def list_all():
        assert len(storage.list("many")) == len(storage.list("many"))

    switch = lambda phase, info: time.sleep(0)  # noqa: E731 - any Python code run by a collection
    gc.callbacks.append(switch)
    try:
        run_side_by_side([churn, list_all, lambda: storage.list_dirs("")], 1.5)
    finally:
        gc.callbacks.remove(switch)


def _race_worker(args):
    url, name, token = args
    try:
        Storage(url).put_if_absent(name, token.encode())
        return token
    except CommitConflict:
        return None


def test_put_if_absent_race_processes(root_url):
    """Separate processes (no shared lock) race on one name; exactly one wins."""
    if root_url.startswith("memory://"):
        pytest.skip("a memory:// store lives in one process")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        for round_ in range(2):
            name = f"prace/{round_}"
            results = pool.map(_race_worker, [(root_url, name, f"p{i}") for i in range(8)])
            winners = [r for r in results if r is not None]
            assert len(winners) == 1
            assert Storage(root_url).get(name) == winners[0].encode()


def test_bad_urls_are_config_errors():
    for url in ("", "   ", None, 42, "nosuchproto://x/y", "s3://", "s3:///prefix"):
        with pytest.raises(ConfigError):
            Storage(url)


def test_plain_path_means_file(tmp_path):
    storage = Storage(str(tmp_path / "plain"))
    assert storage.protocol == "file" and storage.url.startswith("file://")
    storage.put("x", b"1")
    assert (tmp_path / "plain" / "x").read_bytes() == b"1"


def test_child_and_pickle(storage):
    child = storage.child("topics/t")
    child.put("0/a", b"a")
    assert storage.get("topics/t/0/a") == b"a"
    assert [o.path for o in child.list()] == ["0/a"]
    again = pickle.loads(pickle.dumps(storage))
    assert again.url == storage.url and again.get("topics/t/0/a") == b"a"


def test_s3_listing_sees_writes_from_other_clients(s3_endpoint):
    """Listings are not cached: an object written by another client shows up at once."""
    import boto3

    storage = Storage(f"s3://kafkastore-test/nocache-{uuid.uuid4().hex[:8]}")
    storage.put("m/1", b"1")
    assert [o.path for o in storage.list("m")] == ["m/1"]
    prefix = storage.full_path("m/2").split("/", 1)[1]
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(Bucket="kafkastore-test", Key=prefix, Body=b"2")
    assert [o.path for o in storage.list("m")] == ["m/1", "m/2"]
    assert storage.list_dirs("") == ["m"]


# -- the fault injector keeps each backend's semantics ------------------------------

def test_faulty_fs_write_faults(root_url):
    storage, fs = faulty_storage(root_url)
    fs.fail_before_write(match="a.json")
    with pytest.raises(StorageError) as info:
        storage.put_if_absent("a.json", b"1")
    assert not isinstance(info.value, CommitConflict)
    assert not storage.exists("a.json")  # (a) nothing was written
    fs.lose_response(match="a.json")
    with pytest.raises(StorageError):
        storage.put_if_absent("a.json", b"2")
    assert storage.get("a.json") == b"2"  # (b) written, response lost
    with pytest.raises(CommitConflict):  # exclusive create still holds through the wrapper
        storage.put_if_absent("a.json", b"3")
    fs.fail_reads(match="a.json", count=2)
    with pytest.raises(StorageError):
        storage.get("a.json")
    with pytest.raises(StorageError):
        storage.exists("a.json")
    assert storage.get("a.json") == b"2"  # (c) count exhausted
    fs.fail_reads(match=lambda op, path: op == "list", count=1)
    with pytest.raises(StorageError):
        storage.list()
    assert [o.path for o in storage.list()] == ["a.json"]
    assert fs.log and all(isinstance(entry, tuple) for entry in fs.log)


def test_faulty_fs_race_still_exclusive(root_url):
    base = Storage(root_url)
    stores = [Storage(root_url, fs=FaultyFS(base.fs)) for _ in range(6)]

    def attempt(i):
        try:
            stores[i].put_if_absent("x", str(i).encode())
            return True
        except CommitConflict:
            return False

    winners = [i for i, won in enumerate(run_at_once(attempt, len(stores))) if won]
    assert len(winners) == 1 and base.get("x") == str(winners[0]).encode()


def test_faulty_fs_callback_runs_before_write(root_url):
    storage, fs = faulty_storage(root_url)
    seen = []
    fs.on_write(lambda op, path: seen.append(path), match="b")
    fs.fail_before_write(match="b")
    with pytest.raises(StorageError) as info:
        storage.put("b", b"1")
    assert isinstance(info.value.__cause__, InjectedFault)  # an OSError, mapped to StorageError
    assert seen and not storage.exists("b")
    storage.put("b", b"1")
    assert storage.get("b") == b"1"


def test_put_many_writes_every_object_in_order(storage):
    storage.put("p/0/x.index", b"old")
    view = memoryview(bytearray(b"0123456789"))[2:8]
    storage.put_many([("p/0/x.index", b"idx"), ("p/0/x.log", view), ("q/y.bin", bytearray(b"y"))])
    assert storage.get("p/0/x.index") == b"idx"
    assert storage.get("p/0/x.log") == b"234567"
    assert storage.get("q/y.bin") == b"y"
    assert storage.upload_time("p/0/x.log") <= storage.upload_time("q/y.bin") + 1e-6
    assert [o.path for o in storage.list("p")] == ["p/0/x.index", "p/0/x.log"]


def test_put_many_writes_a_list_of_buffers_as_their_bytes_one_after_another(storage):
    parts = (b"ab", memoryview(bytearray(b"--cde--"))[2:5], b"", bytearray(b"f"))
    storage.put_many([("r/x.log", parts), ("r/y.log", [b"g"] * 3)])
    assert storage.get("r/x.log") == b"abcdef"
    assert storage.get("r/y.log") == b"ggg"


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.binary(max_size=5), max_size=2500))
@example(parts=[b"x", b""] * 1500)
def test_write_all_writes_every_buffer_past_iov_max(tmp_path_factory, parts):
    path = tmp_path_factory.mktemp("w") / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        _write_all(fd, parts)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(parts)


def test_put_many_local_fsyncs_each_file_and_each_directory_once(local_root, monkeypatch):
    """The durability argument of put_many (docs/DECISIONS.md): every file's data is
    fsynced, and every directory holding a new name is fsynced after its renames."""
    storage = Storage(local_root)
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    storage.put_many([(f"t/0/s{i}.{ext}", b"x" * i) for i in range(2) for ext in ("a", "b")]
                     + [("t/1/s.a", b"z")])
    base = storage.full_path("")
    dirs = [p for p in synced if os.path.isdir(p)]
    files = [p for p in synced if not os.path.isdir(p)]
    assert len(files) == 5  # every data file (under its temporary name)
    assert sorted(dirs) == sorted({os.path.join(base, "t/0"), os.path.join(base, "t/1")})
    assert synced[-2:] == dirs  # the directories last, after every rename
    assert not [n for n in os.listdir(os.path.join(base, "t/0")) if n.startswith(".tmp-")]


def test_put_many_failure_leaves_no_temporary_files(local_root):
    storage = Storage(local_root)
    os.makedirs(storage.full_path("d"), exist_ok=True)
    storage.put("d/a", b"old")
    os.makedirs(storage.full_path("d/b"))  # a directory where a file should go: rename fails
    with pytest.raises(StorageError):
        storage.put_many([("d/a", b"new"), ("d/b", b"x"), ("d/c", b"y")])
    assert sorted(os.listdir(storage.full_path("d"))) == ["a", "b"]
    assert storage.get("d/a") == b"new"  # renamed before the failure: each name old or new


def test_put_many_a_failed_fsync_leaves_no_file_of_the_batch(local_root, monkeypatch):
    """The files are written and fsynced side by side: one failing fails the call, and the
    temporary files of the others (whose threads succeeded) are removed; no name appears."""
    storage = Storage(local_root)
    real_fsync = os.fsync

    def fsync(fd):
        if os.fstat(fd).st_size == 7:
            raise OSError(errno.EIO, "injected")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(StorageError):
        storage.put_many([("e/a", b"a" * 3), ("e/b", b"b" * 7), ("e/c", b"c" * 5)])
    assert os.listdir(storage.full_path("e")) == []


def test_a_missing_bucket_is_named_for_every_operation(s3_endpoint):
    """A write was an "unknown outcome", a read a missing object and a
    listing empty; each now says the bucket does not exist (a definite failure)."""
    from kafkastore.errors import BucketNotFoundError, StoragePermissionError

    s = Storage("s3://no-such-bucket-20/root")
    for op in (lambda: s.put("a/b", b"x"), lambda: s.put_if_absent("a/c", b"x"),
               lambda: s.get("a/b"), lambda: s.get_range("a/b", 0, 1), lambda: s.list("a"),
               lambda: s.list_dirs(""), lambda: s.exists("a/b"), lambda: s.size("a/b"),
               lambda: s.put_many([("a/d", b"x")])):
        with pytest.raises(BucketNotFoundError, match="bucket 'no-such-bucket-20' of "
                                                      "s3://no-such-bucket-20/root does not exist"):
            op()
    assert issubclass(BucketNotFoundError, StoragePermissionError)  # refused: nothing written
    # an existing bucket still answers "not found" and empty listings as before
    ok = Storage(f"s3://kafkastore-test/root-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ObjectNotFoundError):
        ok.get("a/b")
    assert ok.list("a") == [] and ok.list_dirs("") == [] and not ok.exists("a/b")
