"""No commit lists a file that GC may already have deleted.

Every manifest commit (broker, import, compaction, delete-records, the protocol
server: they all go through :meth:`ManifestStore.commit`) refuses to list a new
segment file written more than half the GC grace floor ago, or missing; writers
upload such files again or give up with :class:`StaleUploadError`. The grace
floor is tiny here (``min_keep_ms`` patched) so races take a second, not minutes.
"""
from __future__ import annotations

import threading
import time

import pytest

from kafkastore import layout
from kafkastore.write.kafka_import import import_kafka_dir
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import StaleUploadError
from kafkastore.maintenance.gc import collect_garbage
from kafkastore.manifest import AppendSegments, ManifestStore
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import FaultyFS
from tests.helpers.logdata import upload_segment
from tests.helpers.kafka_dir import kafka_batch, write_kafka_dir

T, P = "events", 0
FLOOR_MS = 400  # the patched GC grace floor; commits accept files up to 200 ms old


@pytest.fixture
def small_floor(monkeypatch):
    monkeypatch.setattr(ManifestStore, "min_keep_ms", FLOOR_MS)


class FakeClock:
    """Wall clock for Storage (epoch seconds) that tests move by hand."""

    def __init__(self):
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def assert_listed_files_exist(storage, topic=T, partition=P):
    store = ManifestStore(storage, topic, partition)
    present = {o.path for o in storage.list(layout.partition_dir(topic, partition))}
    for v in store.versions():
        for seg in store.load(v).segments:
            missing = set(seg.paths(topic, partition).values()) - present
            assert not missing, f"version {v} lists deleted files {sorted(missing)}"


def test_commit_refuses_old_and_missing_files(root_url, small_floor):
    clock = FakeClock()
    storage = Storage(root_url, clock=clock)
    create_topic(storage, T, 1)
    store = ManifestStore(storage, T, P)
    entry = upload_segment(storage, T, P, 0, [1, 2])
    clock.now += FLOOR_MS / 2 / 1000 + 0.05  # older than half the floor
    with pytest.raises(StaleUploadError) as err:
        store.commit(lambda m: ([AppendSegments((entry,))], []))
    assert err.value.segment_ids == (entry.segment_id,) and store.latest() is None
    # Missing: a file GC already took is refused however young the rest is.
    fresh = upload_segment(storage, T, P, 0, [1, 2])
    storage.delete([fresh.paths(T, P)[".log"]])
    with pytest.raises(StaleUploadError):
        store.commit(lambda m: ([AppendSegments((fresh,))], []))
    # A fresh one lands.
    ok = upload_segment(storage, T, P, 0, [1, 2])
    assert store.commit(lambda m: ([AppendSegments((ok,))], [])).high_watermark == 2


def test_files_written_by_another_process_are_aged_by_the_store(root_url, small_floor):
    """A commit that did not upload the files itself (compaction's driver) asks the store."""
    writer = Storage(root_url)
    create_topic(writer, T, 1)
    entry = upload_segment(writer, T, P, 0, [1])
    committer = Storage(root_url)  # knows nothing of the upload
    time.sleep(FLOOR_MS / 1000 + 1.1)  # S3 object times have whole seconds
    with pytest.raises(StaleUploadError):
        ManifestStore(committer, T, P).commit(lambda m: ([AppendSegments((entry,))], []))


def test_broker_uploads_again_what_grew_old_before_its_commit(root_url, small_floor):
    """The first upload round is slow (the clock jumps during it): the commit refuses, the
    broker re-uploads only the stale segments and commits; the old files stay unlisted."""
    clock = FakeClock()
    inner = Storage(root_url).fs
    fs = FaultyFS(inner)
    storage = Storage(root_url, fs=fs, clock=clock)
    create_topic(storage, T, 1, {"segment.bytes": 14})

    def slow(op, path):
        clock.now += FLOOR_MS / 3 / 1000  # each .log upload "takes" a third of the floor

    fs.on_write(slow, match=lambda op, path: path.endswith(".log"), count=3)
    broker = Broker(storage, commit_on_roll=False, batch_size=1)
    for i in range(3):
        broker.send(T, b"v%d" % i, partition=P)
    [result] = broker.flush()
    assert (result.base_offset, result.next_offset) == (0, 3)
    table = PartitionReader(storage, T, P).read(-2)
    assert table.column("value").to_pylist() == [b"v0", b"v1", b"v2"]
    logs = [o for o in storage.list(layout.partition_dir(T, P)) if o.path.endswith(".log")]
    assert len(logs) > 3  # the stale first uploads are orphans now, left to GC


def test_slow_flush_racing_gc_loses_nothing(root_url, small_floor):
    """The reported scenario, small: a flush of many tiny segments whose upload takes longer
    than the grace period while GC runs. Before the fix the commit listed files GC had
    already deleted; now the flush gives up with nothing committed, and nothing listed is lost."""
    inner = Storage(root_url).fs
    fs = FaultyFS(inner)
    storage = Storage(root_url, fs=fs)
    create_topic(storage, T, 1, {"segment.bytes": 14})
    fs.on_write(lambda op, path: time.sleep(0.02),
                match=lambda op, path: layout.parse_segment_name(path) is not None, count=None)
    stop = threading.Event()
    gc_errors = []

    def gc_loop():
        gc_storage = Storage(root_url)
        while not stop.is_set():
            try:
                collect_garbage(gc_storage, T, P, now_ms=int(time.time() * 1000), grace_ms=FLOOR_MS)
            except Exception as exc:  # noqa: BLE001 - reported below
                gc_errors.append(exc)
            time.sleep(0.01)

    gc = threading.Thread(target=gc_loop, daemon=True)
    gc.start()
    try:
        broker = Broker(storage, commit_on_roll=False, batch_size=1)
        for i in range(12):  # 12 segments x 3 files x 20 ms: well over the 400 ms grace
            broker.send(T, b"v%d" % i, partition=P)
        with pytest.raises(StaleUploadError, match="nothing of this flush was committed"):
            broker.flush()
    finally:
        stop.set()
        gc.join()
    assert not gc_errors
    assert ManifestStore(storage, T, P).latest() is None
    assert_listed_files_exist(storage)


def test_import_uploads_again_what_grew_old(tmp_path, root_url, small_floor):
    clock = FakeClock()
    fs = FaultyFS(Storage(root_url).fs)
    storage = Storage(root_url, fs=fs, clock=clock)
    create_topic(storage, T, 1)
    d = write_kafka_dir(tmp_path, f"{T}-0", {0: [kafka_batch(0, [b"a", b"b"])],
                                              2: [kafka_batch(2, [b"c"])],
                                              3: [kafka_batch(3, [b"d", b"e"])]})

    def slow(op, path):
        clock.now += FLOOR_MS / 3 / 1000

    fs.on_write(slow, match=lambda op, path: path.endswith(".log"), count=3)
    result = import_kafka_dir(storage, str(d), T, P)
    assert (result.log_start_offset, result.high_watermark) == (0, 5)
    assert PartitionReader(storage, T, P).read(-2).column("value").to_pylist() == [
        b"a", b"b", b"c", b"d", b"e"]
    assert_listed_files_exist(storage)
