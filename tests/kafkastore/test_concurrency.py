"""Concurrent writers and storage faults: producer processes racing on one partition,
a crash between segment upload and manifest commit, puts that fail or lose their response.

Afterwards every record is present exactly once, offsets are dense with no offset
shared, manifest history is linear, and files of failed attempts stay unlisted."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import CommitUnknownError, StorageError
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import READ_UNCOMMITTED, PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.helpers.roots import make_root_url
from tests.faults import faulty_storage

T = "t"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check_log(storage, partitions, expected_values):
    """Every value once, offsets dense from 0, history linear; returns {partition: hw}."""
    seen = []
    hws = {}
    for p in range(partitions):
        r = PartitionReader(storage, T, p)
        t = r.read(-2, isolation=READ_UNCOMMITTED)
        offs = t.column("offset").to_pylist()
        assert offs == list(range(r.high_watermark)), f"partition {p}: offsets not dense"
        seen += t.column("value").to_pylist()
        hws[p] = r.high_watermark
        check_history(storage, p)
    assert len(seen) == len(set(seen)), "a record was written twice"
    assert set(seen) == set(expected_values), "records missing"
    return hws


def check_history(storage, p):
    """Versions 1..n all present; each version extends the previous one's segments, where
    a merge may have replaced a run of them by one segment covering exactly their offsets."""
    store = ManifestStore(storage, T, p)
    history = store.history()
    assert [m.version for m in history] == list(range(1, len(history) + 1))
    for prev, cur in zip(history, history[1:]):
        assert cur.high_watermark >= prev.high_watermark
        kept = {s.segment_id for s in cur.segments}
        old = {s.segment_id for s in prev.segments}
        for seg in cur.segments:
            if seg.segment_id in old:
                continue
            covered = [s for s in prev.segments if seg.base_offset <= s.base_offset < seg.next_offset]
            if seg.base_offset >= prev.high_watermark:
                assert not covered  # appended
            else:  # merged: exactly a run of the previous version's segments, now gone
                assert covered and covered[0].base_offset == seg.base_offset
                assert covered[-1].next_offset == seg.next_offset
                assert not kept & {s.segment_id for s in covered}
        assert [s.segment_id for s in prev.segments if s.segment_id not in kept] == [
            s.segment_id for s in prev.segments
            if any(n.base_offset <= s.base_offset < n.next_offset and n.segment_id not in old
                   for n in cur.segments)]
    if history:
        segs = history[-1].segments
        assert all(a.next_offset == b.base_offset for a, b in zip(segs, segs[1:]))


def unlisted_files(storage, p):
    store = ManifestStore(storage, T, p)
    listed = store.referenced_files()
    return sorted(o.path for o in storage.list(f"topics/{T}/{p}")
                  if "/_manifest/" not in o.path and o.path not in listed)


# ---------------------------------------------------------------------------
# two producer processes
# ---------------------------------------------------------------------------

WORKER = textwrap.dedent('''
    import os, sys, time
    from kafkastore.write.log_writer import LogWriter as Broker
    from kafkastore.storage import Storage
    url, name, n, every, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    broker = Broker(Storage(url), batch_size=300)
    open(go + "." + name, "w").close()               # ready
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(n):
        broker.send("t", b"%s-%05d" % (name.encode(), i), key=b"k%d" % (i % 13))
        if (i + 1) % every == 0:
            broker.flush()
    broker.flush()
''')


def run_two_producers(url, tmp_path, n, every):
    go = str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, url, name, str(n), str(every), go],
                              cwd=REPO, stderr=subprocess.PIPE)
             for name in ("a", "b")]
    deadline = time.time() + 60
    while not all(os.path.exists(f"{go}.{name}") for name in ("a", "b")):
        assert time.time() < deadline, "workers did not start"
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs]
        time.sleep(0.01)
    open(go, "w").close()                                # both start at once
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()


@pytest.mark.parametrize("backend, n, every", [("file", 300, 10), ("s3", 60, 10)])
def test_two_producer_processes_same_partitions(backend, n, every, tmp_path, request):
    url = make_root_url(backend, tmp_path, request)
    storage = Storage(url)
    create_topic(storage, T, 2)
    run_two_producers(url, tmp_path, n, every)
    expected = [b"%s-%05d" % (w, i) for w in (b"a", b"b") for i in range(n)]
    hws = check_log(storage, 2, expected)
    assert sum(hws.values()) == 2 * n
    # Both writers wrote to every partition (whether their commits actually collided
    # depends on scheduling; the checks above hold either way).
    for p in range(2):
        writers = [v[:1] for v in PartitionReader(storage, T, p).read(-2).column("value").to_pylist()]
        assert {b"a", b"b"} <= set(writers)


def test_threads_racing_on_one_partition(tmp_path):
    url = f"memory://race-{os.getpid()}-{time.time_ns()}"
    storage = Storage(url)
    create_topic(storage, T, 1)
    errors = []

    def work(name):
        try:
            b = Broker(storage, batch_size=200)
            for i in range(200):
                b.send(T, b"%s-%d" % (name, i))
                if i % 5 == 4:
                    b.flush()
            b.flush()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in (b"x", b"y", b"z")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check_log(storage, 1, [b"%s-%d" % (n, i) for n in (b"x", b"y", b"z") for i in range(200)])


def test_conflict_retry_appends_after_the_winner(local_root):
    # While A puts its manifest, B commits first: A's put conflicts, A re-reads and commits
    # after B under new file names; the files of A's first attempt stay, unlisted.
    create_topic(Storage(local_root), T, 1)
    storage, fs = faulty_storage(local_root)
    a, b = Broker(storage), Broker(Storage(local_root))

    def b_commits(op, path):
        b.send(T, b"b0")
        b.flush()

    fs.on_write(b_commits, match="_manifest/")
    a.send(T, b"a0")
    a.send(T, b"a1")
    [r] = a.flush()
    assert (r.base_offset, r.next_offset) == (1, 3)
    assert [v for v in PartitionReader(storage, T, 0).read(-2).column("value").to_pylist()] == \
        [b"b0", b"a0", b"a1"]
    check_log(storage, 1, [b"b0", b"a0", b"a1"])
    orphans = unlisted_files(storage, 0)
    # A flush this small goes up as its .log alone (merging builds indexes later).
    assert len(orphans) == 1 and all("/00000000000000000000-" in o for o in orphans)


# ---------------------------------------------------------------------------
# a crash between segment upload and manifest commit
# ---------------------------------------------------------------------------

CRASHER = textwrap.dedent('''
    import os, sys
    from kafkastore.write.log_writer import LogWriter as Broker
    from tests.faults import faulty_storage
    storage, fs = faulty_storage(sys.argv[1])
    broker = Broker(storage)
    for i in range(20):
        broker.send("t", b"lost-%d" % i)
    fs.on_write(lambda op, path: os._exit(17), match="_manifest/")   # the process dies here
    broker.flush()
    sys.exit(0)
''')


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_crash_between_upload_and_commit(backend, tmp_path, request):
    url = make_root_url(backend, tmp_path, request)
    storage = Storage(url)
    create_topic(storage, T, 1)
    b = Broker(storage)
    for i in range(5):
        b.send(T, b"kept-%d" % i)
    b.flush()
    before = ManifestStore(storage, T, 0).latest()
    p = subprocess.run([sys.executable, "-c", CRASHER, url], cwd=REPO, capture_output=True,
                       timeout=120)
    assert p.returncode == 17, p.stderr.decode()
    after = ManifestStore(storage, T, 0).latest()
    assert after == before                                     # the log is as it was
    orphans = unlisted_files(storage, 0)
    assert sorted(o.rsplit(".", 1)[1] for o in orphans) == ["log"]  # small: no indexes
    assert all("/00000000000000000005-" in o for o in orphans)  # uploaded at the old HW
    check_log(storage, 1, [b"kept-%d" % i for i in range(5)])
    # The next writer carries on at the same high watermark; the orphans stay unlisted.
    b2 = Broker(storage)
    b2.send(T, b"next")
    [r] = b2.flush()
    assert (r.base_offset, r.next_offset) == (5, 6)
    assert set(orphans) <= set(unlisted_files(storage, 0))
    check_log(storage, 1, [b"kept-%d" % i for i in range(5)] + [b"next"])


# ---------------------------------------------------------------------------
# puts that fail or lose their response
# ---------------------------------------------------------------------------

def produce_values(broker, values):
    for v in values:
        broker.send(T, v)


def test_manifest_put_fails_then_succeeds(root_url):
    create_topic(Storage(root_url), T, 1)
    storage, fs = faulty_storage(root_url)
    b = Broker(storage)
    produce_values(b, [b"a", b"b"])
    fs.fail_before_write(match="_manifest/", count=2)          # absorbed by the store's retries
    [r] = b.flush()
    assert (r.base_offset, r.next_offset, r.duplicate) == (0, 2, False)
    assert len(fs.log) == 2
    check_log(storage, 1, [b"a", b"b"])
    assert ManifestStore(storage, T, 0).versions() == [1]


def test_manifest_put_lost_response_is_read_back(root_url):
    create_topic(Storage(root_url), T, 1)
    storage, fs = faulty_storage(root_url)
    b = Broker(storage)
    produce_values(b, [b"a", b"b"])
    fs.lose_response(match="_manifest/")                       # stored, but the caller hears an error
    [r] = b.flush()
    assert (r.base_offset, r.next_offset, r.duplicate) == (0, 2, False)
    produce_values(b, [b"c"])
    b.flush()
    check_log(storage, 1, [b"a", b"b", b"c"])
    assert ManifestStore(storage, T, 0).versions() == [1, 2]  # no version written twice


def test_unknown_outcome_retried_by_the_next_flush_exactly_once(root_url):
    create_topic(Storage(root_url), T, 1)
    storage, fs = faulty_storage(root_url)
    b = Broker(storage)
    produce_values(b, [b"a", b"b", b"c"])
    # The put lands but every response is lost, and reading back fails: the outcome is unknown.
    fs.lose_response(match="_manifest/", count=None)
    fs.fail_reads_from_write("_manifest/")   # the read-back fails; the put is made
    with pytest.raises(CommitUnknownError):
        b.flush()
    fs.clear()
    [r] = b.flush()                                            # the same batches, same sequences
    assert (r.base_offset, r.next_offset, r.duplicate) == (0, 3, True)
    produce_values(b, [b"d"])
    [r] = b.flush()
    assert (r.base_offset, r.next_offset, r.duplicate) == (3, 4, False)
    check_log(storage, 1, [b"a", b"b", b"c", b"d"])


def test_unknown_outcome_then_more_records(local_root):
    # Records sent after a flush with an unknown outcome are not mixed into the retry of the
    # batches in doubt: those are recognised as duplicates, the new ones are written once.
    create_topic(Storage(local_root), T, 1)
    storage, fs = faulty_storage(local_root)
    b = Broker(storage)
    produce_values(b, [b"a", b"b"])
    fs.lose_response(match="_manifest/", count=None)
    fs.fail_reads_from_write("_manifest/")   # the read-back fails; the put is made
    with pytest.raises(CommitUnknownError):
        b.flush()
    fs.clear()
    produce_values(b, [b"c", b"d"])
    r1, r2 = b.flush()
    assert (r1.base_offset, r1.next_offset, r1.duplicate) == (0, 2, True)
    assert (r2.base_offset, r2.next_offset, r2.duplicate) == (2, 4, False)
    check_log(storage, 1, [b"a", b"b", b"c", b"d"])


def test_unknown_outcome_that_did_not_land_is_written_once(root_url):
    create_topic(Storage(root_url), T, 1)
    storage, fs = faulty_storage(root_url)
    b = Broker(storage)
    produce_values(b, [b"a", b"b"])
    fs.fail_before_write(match="_manifest/", count=None)      # never lands
    with pytest.raises(StorageError):
        b.flush()
    assert ManifestStore(storage, T, 0).latest() is None
    fs.clear()
    [r] = b.flush()
    assert (r.base_offset, r.next_offset, r.duplicate) == (0, 2, False)
    check_log(storage, 1, [b"a", b"b"])


def test_segment_upload_failure_keeps_the_batches(local_root):
    create_topic(Storage(local_root), T, 1)
    storage, fs = faulty_storage(local_root)
    b = Broker(storage)
    produce_values(b, [b"a"])
    fs.fail_before_write(match=".log")
    with pytest.raises(StorageError):
        b.flush()
    assert ManifestStore(storage, T, 0).latest() is None
    produce_values(b, [b"b"])                                 # more records meanwhile
    r1, r2 = b.flush()                                        # the batches in doubt go first
    assert [(r.base_offset, r.next_offset, r.duplicate) for r in (r1, r2)] == [(0, 1, False),
                                                                              (1, 2, False)]
    check_log(storage, 1, [b"a", b"b"])
    assert unlisted_files(storage, 0) == []                   # a small segment has no indexes


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_writers_racing_with_a_merger_lose_and_duplicate_nothing(backend, tmp_path, request):
    """Three writers on one partition (2-record flushes) while a merger merges whatever it
    finds, over and over: every record once, offsets dense, every merge exactly a run."""
    from kafkastore.maintenance.merge import merge_partition

    storage = Storage(make_root_url(backend, tmp_path, request))
    create_topic(storage, T, 1)
    errors, merged = [], []
    done = threading.Event()

    def work(name):
        try:
            b = Broker(storage, batch_size=200, housekeeping=False)
            for i in range(120):
                b.send(T, b"%s-%d" % (name, i))
                if i % 2 == 1:
                    b.flush()
            b.flush()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def merger():
        while not done.is_set():
            try:
                merged.extend(merge_partition(storage, T, 0, min_segments=0, fan_in=2).merged)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in (b"x", b"y", b"z")]
    m = threading.Thread(target=merger)
    m.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    m.join()
    assert errors == [] and merged
    check_log(storage, 1, [b"%s-%d" % (n, i) for n in (b"x", b"y", b"z") for i in range(120)])
    # (how far the merger got while the writers ran depends on scheduling; one more pass ends it)
    merge_partition(storage, T, 0, min_segments=0, fan_in=2, rounds=20, pack=True)
    assert len(ManifestStore(storage, T, 0).latest().segments) < 40  # 180 flushes
    check_log(storage, 1, [b"%s-%d" % (n, i) for n in (b"x", b"y", b"z") for i in range(120)])
