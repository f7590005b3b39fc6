"""What a read of a cluster document costs in store requests.

Brokers re-read the ACLs, the SCRAM credentials and the client quotas every second or so
to keep them within their freshness bound; on S3 every request is a round trip of 0.1-1 s,
so a read that is three requests one after the other (the head hint, the next version,
an existence check of the version in hand) cannot keep a copy younger than 2 s once a
request takes about a second. A read is one listing of the document's directory (which
pruning keeps to a few versions), plus a GET of the head only when it changed.
"""
from __future__ import annotations

import threading

import pytest

from kafkastore.cluster.documents import ClusterDocument
from kafkastore.errors import StorageError
from kafkastore.storage import Storage
from tests.helpers.counting import counting_fs


def _counting(url: str, **kw):
    fs = counting_fs(Storage(url).fs, **kw)
    return Storage(url, fs=fs), fs


@pytest.fixture
def url(tmp_path):
    return f"file://{tmp_path}"


def test_a_read_of_an_unchanged_document_is_one_request(url):
    writer = ClusterDocument(Storage(url), "acls")
    for n in range(3):
        writer.update(lambda d, n=n: {**d, "n": n})
    storage, fs = _counting(url)
    reader = ClusterDocument(storage, "acls")
    assert reader.refresh() == {"n": 2}
    before = fs.snapshot()
    for _ in range(5):
        assert reader.refresh() == {"n": 2}
    assert (fs.snapshot() - before).total_requests == 5


def test_a_read_that_finds_a_new_version_is_two_requests(url):
    writer = ClusterDocument(Storage(url), "quotas")
    writer.update(lambda d: {"a": 1})
    storage, fs = _counting(url)
    reader = ClusterDocument(storage, "quotas")
    reader.refresh()
    for n in range(4):
        writer.update(lambda d, n=n: {"a": n + 2})
        before = fs.snapshot()
        assert reader.refresh() == {"a": n + 2}
        assert (fs.snapshot() - before).total_requests == 2


def test_a_reader_far_behind_pruned_versions_reads_the_head(url):
    writer = ClusterDocument(Storage(url), "scram")
    writer.update(lambda d: {"v": 0})
    reader = ClusterDocument(Storage(url), "scram")
    assert reader.refresh() == {"v": 0}
    for n in range(1, 3 * ClusterDocument.keep):
        writer.update(lambda d, n=n: {"v": n})
    assert reader.refresh() == {"v": 3 * ClusterDocument.keep - 1}
    assert reader.version == writer.version


def test_reads_do_not_wait_for_each_other(url):
    """Two reads of one document overlap (a refresher starts the next read before the one
    in flight ends when the store is slow): the document's lock is not held across I/O."""
    ClusterDocument(Storage(url), "acls").update(lambda d: {"x": 1})
    storage, fs = _counting(url)
    reader = ClusterDocument(storage, "acls")
    reader.refresh()
    inside = threading.Barrier(2, timeout=10)
    count = fs._count
    waited = set()

    def held(*a, **kw):   # each read's first request waits until the other read is in one too
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            inside.wait()
        return count(*a, **kw)

    fs._count = held
    out = []
    threads = [threading.Thread(target=lambda: out.append(reader.refresh())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out == [{"x": 1}, {"x": 1}]


def test_a_failed_read_leaves_the_copy_as_old_as_it_was(url):
    ClusterDocument(Storage(url), "acls").update(lambda d: {"x": 1})
    storage, fs = _counting(url)
    reader = ClusterDocument(storage, "acls")
    reader.refresh()
    read_at = reader.read_at

    def broken(*a, **kw):
        raise OSError(5, "the store is down")

    fs.find = broken
    with pytest.raises(StorageError):
        reader.refresh()
    assert reader.read_at == read_at
