"""ClusterDocument: the shared JSON documents of a root (quotas, ACLs, credentials)."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.cluster.documents import ClusterDocument
from kafkastore.errors import ClusterDocumentError, ConfigError
from kafkastore.storage import Storage
from tests.helpers.threads import run_at_once


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_absent_document_is_empty(root_url):
    assert ClusterDocument(Storage(root_url), "quotas").get() == {}


def test_update_then_other_reader_sees_it_within_max_age(root_url):
    storage = Storage(root_url)
    clock = FakeClock()
    writer = ClusterDocument(storage, "quotas")
    reader = ClusterDocument(Storage(root_url), "quotas", max_age_s=2.0, clock=clock)
    assert reader.get() == {}
    written = writer.update(lambda d: {**d, "a": 1})
    assert written == {"a": 1}
    clock.now = 1.0
    assert reader.get() == {}          # cached: not re-read before max_age_s
    clock.now = 2.01
    assert reader.get() == {"a": 1}    # re-read once max_age_s passed
    assert reader.refresh() == {"a": 1}


def test_two_writers_racing_lose_nothing(root_url):
    per_writer = 6
    docs = [ClusterDocument(Storage(root_url), "acls") for _ in range(2)]

    def run(i):
        for n in range(per_writer):
            docs[i].update(lambda d, key=f"w{i}-{n}": {**d, key: True})

    run_at_once(run, 2)
    final = ClusterDocument(Storage(root_url), "acls").refresh()
    assert set(final) == {f"w{i}-{n}" for i in range(2) for n in range(per_writer)}


def test_old_versions_are_pruned_and_head_still_found(root_url):
    storage = Storage(root_url)
    doc = ClusterDocument(storage, "users")
    for n in range(3 * doc.keep + 3):
        doc.update(lambda d, n=n: {**d, "n": n})
    stored = doc._listed_versions()
    assert len(stored) <= doc.keep + 2
    assert stored[-1] == 3 * doc.keep + 3
    # A cold reader (no hint) and one whose hint points at a pruned version both find the head.
    storage.delete([f"_cluster/users/_head.json"])
    assert ClusterDocument(Storage(root_url), "users").get() == {"n": 3 * doc.keep + 2}
    storage.put("_cluster/users/_head.json", b'{"version": 1}')
    assert ClusterDocument(Storage(root_url), "users").get() == {"n": 3 * doc.keep + 2}


def test_stale_reader_catches_up_past_pruned_versions(root_url):
    clock = FakeClock()
    reader = ClusterDocument(Storage(root_url), "quotas", clock=clock)
    writer = ClusterDocument(Storage(root_url), "quotas")
    writer.update(lambda d: {"n": 0})
    assert reader.get() == {"n": 0}
    for n in range(1, 2 * writer.keep + 4):   # the reader's version is pruned meanwhile
        writer.update(lambda d, n=n: {"n": n})
    clock.now = 10
    assert reader.get() == {"n": 2 * writer.keep + 3}


def test_damaged_version_names_document_and_version(root_url):
    storage = Storage(root_url)
    doc = ClusterDocument(storage, "quotas")
    doc.update(lambda d: {"x": 1})
    storage.put_if_absent("_cluster/quotas/v00000000000000000002.json", b"{not json")
    with pytest.raises(ClusterDocumentError, match=r"'quotas' version 2"):
        ClusterDocument(storage, "quotas").refresh()


def test_unchanged_update_writes_nothing_and_bad_changes_are_refused(root_url):
    storage = Storage(root_url)
    doc = ClusterDocument(storage, "quotas")
    doc.update(lambda d: {"x": 1})
    assert doc.update(lambda d: d) == {"x": 1}
    assert doc._listed_versions() == [1]
    with pytest.raises(ConfigError):
        doc.update(lambda d: [1])
    with pytest.raises(ConfigError):
        doc.update(lambda d: {"x": object()})
    with pytest.raises(ConfigError):
        ClusterDocument(storage, "../escape")


_ops = st.lists(st.tuples(st.sampled_from(["set", "delete"]), st.sampled_from("abcde"),
                          st.integers(-5, 5)), max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_sequence_of_updates_matches_a_dict(ops, tmp_path):
    """Any sequence of updates, read back by a fresh reader, equals applying them to a dict;
    the stored versions stay few."""
    url = f"file://{tmp_path}/root-{uuid.uuid4().hex[:8]}"
    doc = ClusterDocument(Storage(url), "p")
    model: dict = {}
    for op, key, value in ops:
        if op == "set":
            def change(d, key=key, value=value):
                return {**d, key: value}
            model[key] = value
        else:
            def change(d, key=key):
                return {k: v for k, v in d.items() if k != key}
            model.pop(key, None)
        assert doc.update(change) == model
    assert ClusterDocument(Storage(url), "p").get() == model
    assert len(doc._listed_versions()) <= doc.keep + 2
