"""Changes of a topic's metadata are conditional commits: racing changes on any broker all
land (a partition growth is never undone by a config change, nor the reverse), a lost
response is read back, and roots that only have a format-2 ``_topic.json`` keep working."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore import layout
from kafkastore.errors import CorruptMetadataError, InvalidPartitionsError, StorageError
from kafkastore.storage import Storage
from kafkastore.topics.admin import (alter_topic, create_topic, delete_topic, load_topic, update_topic,
                                     versions_dir)

from tests.faults import FaultyFS
from tests.helpers.roots import make_root_url

T = "orders"


def _topic_write(name: str = T):
    """Matches the first write of a change of ``name``: ``_topic.json`` or a version."""
    def match(op: str, path: str) -> bool:
        return path.endswith(f"topics/{name}/_topic.json") or (
            f"topics/{name}/_meta/" in path and path.rsplit("/", 1)[-1].startswith("v"))
    return match


def _racing(root_url: str):
    """``(storage the change runs on, its FaultyFS, a plain storage for the racer)``."""
    plain = Storage(root_url)
    fs = FaultyFS(plain.fs)
    return Storage(root_url, fs=fs), fs, plain


@pytest.mark.parametrize("changed_before", [False, True], ids=["format2-file", "versioned"])
def test_a_config_change_racing_a_partition_growth_keeps_both(root_url, changed_before):
    """The config change read the topic, then the growth landed on another broker before its
    write: both land (before, the config change's overwrite took the partitions back to 2)."""
    storage, fs, other = _racing(root_url)
    create_topic(other, T, 2, {"retention.ms": 1000}, now_ms=1)
    if changed_before:
        alter_topic(other, T, set_configs={"segment.ms": 50}, now_ms=2)
    fs.on_write(lambda op, path: alter_topic(other, T, partitions=5, now_ms=3), match=_topic_write())

    meta = alter_topic(storage, T, set_configs={"cleanup.policy": "compact"}, now_ms=4)

    assert meta.partitions == 5 and meta.config.to_dict()["cleanup.policy"] == "compact"
    for s in (storage, other):
        got = load_topic(s, T)
        assert got.partitions == 5 and got.created_ms == 1 and got.updated_ms == 4
        assert got.config.to_dict() == {"retention.ms": 1000, "cleanup.policy": "compact",
                                        **({"segment.ms": 50} if changed_before else {})}


def test_a_growth_racing_a_config_change_keeps_both(root_url):
    storage, fs, other = _racing(root_url)
    create_topic(other, T, 1, now_ms=1)
    fs.on_write(lambda op, path: alter_topic(other, T, set_configs={"retention.ms": 7}),
                match=_topic_write())
    assert alter_topic(storage, T, partitions=3).partitions == 3
    got = load_topic(other, T)
    assert got.partitions == 3 and got.config.to_dict() == {"retention.ms": 7}


def test_a_growth_that_no_longer_applies_gets_invalid_partitions(root_url):
    """Two CreatePartitions to 4 race: one lands, the other re-reads and is refused as
    Kafka refuses it (the topic has 4 already); nothing is written for it."""
    storage, fs, other = _racing(root_url)
    create_topic(other, T, 2, now_ms=1)
    fs.on_write(lambda op, path: alter_topic(other, T, partitions=4, require_growth=True),
                match=_topic_write())
    with pytest.raises(InvalidPartitionsError, match="has 4 partitions"):
        alter_topic(storage, T, partitions=4, require_growth=True)
    assert load_topic(other, T).partitions == 4
    with pytest.raises(InvalidPartitionsError):
        alter_topic(other, T, partitions=3)
    assert alter_topic(other, T, partitions=4).partitions == 4  # equal without require_growth: no-op


def test_a_lost_response_of_the_version_put_is_read_back(root_url):
    """The version lands but its response is lost: the engine reads it back as ours; the
    change is applied exactly once (one new version, not a second one)."""
    storage, fs, other = _racing(root_url)
    create_topic(other, T, 2, now_ms=1)
    alter_topic(other, T, set_configs={"retention.ms": 5}, now_ms=2)   # versioned from now on
    lost = fs.lose_response(match=lambda op, path: "/_meta/" in path and "/v0" in path)

    meta = alter_topic(storage, T, partitions=3, now_ms=3)

    assert lost.fired == 1 and meta.partitions == 3
    vdir = versions_dir(T, "c1")
    versions = sorted(o.path.rsplit("/", 1)[-1] for o in other.list(vdir) if "/v" in o.path)
    assert versions == [f"v{1:020d}.json", f"v{2:020d}.json"]
    got = load_topic(other, T)
    assert got.partitions == 3 and got.config.to_dict() == {"retention.ms": 5}


def test_a_failed_first_change_leaves_the_topic_readable_and_a_retry_lands(root_url):
    """The move of _topic.json to format 3 happened but its response was lost: nothing of the
    change was committed, the topic reads as before, and the retry commits it."""
    storage, fs, other = _racing(root_url)
    create_topic(other, T, 2, {"retention.ms": 9}, now_ms=1)
    fs.lose_response(match=_topic_write())
    with pytest.raises(StorageError):
        alter_topic(storage, T, partitions=3)
    got = load_topic(other, T)
    assert got.partitions == 2 and got.config.to_dict() == {"retention.ms": 9}
    assert alter_topic(storage, T, partitions=3).partitions == 3
    assert load_topic(other, T).config.to_dict() == {"retention.ms": 9}


def test_an_old_topic_file_is_read_as_is_and_moves_to_versions_on_its_next_change(local_root):
    storage = Storage(local_root)
    old = {"format": 2, "topic": T, "partitions": 2, "config": {"retention.ms": 1000},
           "created_ms": 77, "updated_ms": 78}
    storage.put(layout.topic_meta_path(T), json.dumps(old).encode())
    assert load_topic(storage, T).partitions == 2

    alter_topic(storage, T, set_configs={"segment.ms": 9}, now_ms=80)

    stored = json.loads(storage.get(layout.topic_meta_path(T)))
    assert stored["format"] == 3 and stored["incarnation"] == "c77"
    got = load_topic(storage, T)
    assert (got.partitions, got.created_ms, got.updated_ms) == (2, 77, 80)
    assert got.config.to_dict() == {"retention.ms": 1000, "segment.ms": 9}


def test_code_before_versioned_topics_refuses_a_changed_topic(local_root):
    """What an older broker sees: its parser (formats 1 and 2) refuses format 3 with one
    line, so it can neither serve nor overwrite the topic with stale metadata."""
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    alter_topic(storage, T, partitions=2)
    doc = json.loads(storage.get(layout.topic_meta_path(T)))
    from kafkastore.topics.admin import TopicMetadata
    import kafkastore.topics.admin as topics
    old_formats = topics.READABLE_TOPIC_FORMATS
    try:
        topics.READABLE_TOPIC_FORMATS = (1, 2)   # as the code before this change reads
        with pytest.raises(CorruptMetadataError, match="unsupported format 3"):
            TopicMetadata.from_dict(doc)
    finally:
        topics.READABLE_TOPIC_FORMATS = old_formats


def test_a_recreated_topic_does_not_read_the_deleted_ones_versions(root_url):
    storage = Storage(root_url)
    create_topic(storage, T, 1, now_ms=1)
    alter_topic(storage, T, partitions=3, set_configs={"retention.ms": 5}, now_ms=2)
    delete_topic(storage, T, now_ms=3)
    assert storage.list(versions_dir(T, "c1")) == []
    create_topic(storage, T, 1, now_ms=4)
    got = load_topic(storage, T)
    assert got.partitions == 1 and got.config.to_dict() == {}
    alter_topic(storage, T, set_configs={"segment.ms": 1}, now_ms=5)
    assert load_topic(storage, T).partitions == 1


def test_reading_a_changed_topic_does_not_list(local_root):
    """A read is _topic.json, the hint, the head version and the probe of the next one: no
    listing however many versions there are."""
    storage = Storage(local_root)
    create_topic(storage, T, 1)
    for i in range(12):
        alter_topic(storage, T, set_configs={"retention.ms": i + 1})
    fs = FaultyFS(storage.fs)
    ops: list[tuple[str, str]] = []
    fs.inject(("read", "stat", "list"), "before", match=lambda op, p: ops.append((op, p)) and False,
              count=None)
    assert load_topic(Storage(local_root, fs=fs), T).config.to_dict() == {"retention.ms": 12}
    assert not [o for o in ops if o[0] == "list"] and len(ops) <= 4, ops


# -- property: interleaved changes give the result of applying them in commit order ----------
_change = st.one_of(
    st.tuples(st.just("grow"), st.integers(1, 6)),
    st.tuples(st.just("set"), st.sampled_from(["retention.ms", "segment.ms"]), st.integers(1, 9)),
    st.tuples(st.just("delete"), st.sampled_from(["retention.ms", "segment.ms"])),
)


def _run(storage: Storage, change) -> None:
    if change[0] == "grow":
        alter_topic(storage, T, partitions=change[1])
    elif change[0] == "set":
        alter_topic(storage, T, set_configs={change[1]: change[2]})
    else:
        alter_topic(storage, T, delete_configs=[change[1]])


def _model(state: tuple[int, dict], change) -> tuple[int, dict]:
    partitions, config = state
    if change[0] == "grow":
        if change[1] < partitions:
            raise InvalidPartitionsError("fewer")
        return change[1], config
    if change[0] == "set":
        return partitions, {**config, change[1]: change[2]}
    return partitions, {k: v for k, v in config.items() if k != change[1]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_change, st.lists(_change, max_size=2)), min_size=1, max_size=4))
def test_interleaved_changes_equal_applying_them_in_commit_order(steps):
    """Each step's change reads the topic, then its racers (other brokers) commit in full
    right before its first write; the result is every change applied in the order they
    landed (racers first), changes that no longer apply refused and nothing else lost."""
    root = make_root_url("memory", None, None)
    plain = Storage(root)
    create_topic(plain, T, 2, now_ms=1)
    state: tuple[int, dict] = (2, {})
    for change, racers in steps:
        fs = FaultyFS(plain.fs)

        def race(op, path, racers=racers):
            for r in racers:
                try:
                    _run(plain, r)
                except InvalidPartitionsError:
                    pass
        staged = fs.on_write(race, match=_topic_write())
        try:
            _run(Storage(root, fs=fs), change)
            outer_ok = True
        except InvalidPartitionsError:
            outer_ok = False
        # The racers ran (and landed) only if the change got as far as writing.
        for r in racers if staged.fired else ():
            try:
                state = _model(state, r)
            except InvalidPartitionsError:
                pass
        try:
            state = _model(state, change)
            assert outer_ok, f"{change} was refused but applies to {state}"
        except InvalidPartitionsError:
            assert not outer_ok, f"{change} landed but does not apply"
        got = load_topic(plain, T)
        assert (got.partitions, got.config.to_dict()) == state


def test_update_topic_takes_a_pure_change(local_root):
    storage = Storage(local_root)
    create_topic(storage, T, 1, now_ms=1)
    from dataclasses import replace
    calls = []

    def double(meta):
        calls.append(meta.partitions)
        return replace(meta, partitions=meta.partitions * 2)
    assert update_topic(storage, T, double).partitions == 2
    assert update_topic(storage, T, double).partitions == 4 and calls == [1, 2]
    before = load_topic(storage, T)
    assert update_topic(storage, T, lambda m: m) == before  # unchanged: nothing committed
