"""``__consumer_offsets``: Kafka's record schemas and the store that survives restarts."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from kafkastore.errors import CorruptRecordError
from kafkastore.groups.offsets import (OFFSETS_TOPIC, GroupKey, GroupMetadata, MemberMetadata,
                                       OffsetAndMetadata, OffsetKey, OffsetsStore,
                                       decode_consumer_assignment, decode_consumer_subscription,
                                       decode_group_value, decode_key, decode_offset_value,
                                       encode_consumer_assignment, encode_consumer_subscription,
                                       encode_group_key, encode_group_value, encode_offset_key,
                                       encode_offset_value, java_string_hash, partition_for_group)
from kafkastore.read.reader import PartitionReader
from kafkastore.storage import Storage
from kafkastore.topics.admin import load_topic

names = st.text(min_size=0, max_size=20)
i32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
i64 = st.integers(-(2 ** 63), 2 ** 63 - 1)


@given(names, names, i32, i64, i32, names, i64)
def test_offset_records_round_trip(group, topic, partition, offset, epoch, metadata, ts):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    om = OffsetAndMetadata(offset, epoch, metadata, ts)
    assert decode_offset_value(encode_offset_value(om)) == om


members = st.builds(MemberMetadata, names, st.none() | names, names, names, i32, i32,
                    st.binary(max_size=30), st.binary(max_size=30))


@given(names, names, i32, st.none() | names, st.none() | names, i64,
       st.lists(members, max_size=4).map(tuple))
def test_group_records_round_trip(group, ptype, gen, protocol, leader, ts, ms):
    assert decode_key(encode_group_key(group)) == GroupKey(group)
    g = GroupMetadata(group, ptype, gen, protocol, leader, ts, ms)
    assert decode_group_value(group, encode_group_value(g)) == g


def test_kafka_wire_bytes_of_an_offset_commit():
    # OffsetCommitKey v1 / OffsetCommitValue v3 exactly as Kafka lays them out.
    assert encode_offset_key("g", "t", 3) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert encode_offset_value(OffsetAndMetadata(5, 2, "m", 7)) == (
        b"\x00\x03" + (5).to_bytes(8, "big") + (2).to_bytes(4, "big") + b"\x00\x01m"
        + (7).to_bytes(8, "big"))
    # v1 values (with an expire timestamp) from older Kafkas decode too.
    v1 = b"\x00\x01" + (9).to_bytes(8, "big") + b"\x00\x00" + (4).to_bytes(8, "big") + (8).to_bytes(8, "big")
    assert decode_offset_value(v1) == OffsetAndMetadata(9, -1, "", 4)


def test_truncated_records_are_typed_errors():
    with pytest.raises(CorruptRecordError):
        decode_offset_value(encode_offset_value(OffsetAndMetadata(1))[:-1])
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x01\x00\x05ab")


def test_group_partition_matches_kafka():
    # Java: "hello".hashCode() == 99162322, "".hashCode() == 0, "polygenelubricants" == MIN_VALUE
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2 ** 31)
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # per UTF-16 unit


def test_consumer_protocol_payloads():
    a = encode_consumer_assignment({"t": [0, 2], "u": []}, b"x")
    assert decode_consumer_assignment(a) == {"t": [0, 2], "u": []}
    assert decode_consumer_assignment(b"") == {}
    assert decode_consumer_subscription(encode_consumer_subscription(["a", "b"])) == ["a", "b"]


def test_commits_survive_a_restart_and_tombstones_delete(root_url):
    s = Storage(root_url)
    store = OffsetsStore(s, partitions=3, clock=lambda: 1000)
    assert store.groups() == []
    assert store.group("g1").offsets == {}
    store.commit_offsets("g1", {("t", 0): OffsetAndMetadata(5, 1, "a", 10),
                                ("t", 1): OffsetAndMetadata(7)})
    store.commit_offsets("g1", {("t", 0): OffsetAndMetadata(6, 1, "b", 11)})
    store.commit_offsets("g2", {("u", 0): OffsetAndMetadata(1)})
    meta = GroupMetadata("g1", "consumer", 3, "range", "m1", 1000,
                         (MemberMetadata("m1", None, "c", "/127.0.0.1", 100, 200, b"s", b"a"),))
    store.store_group(meta)
    assert load_topic(s, OFFSETS_TOPIC).config.compact

    again = OffsetsStore(Storage(root_url))  # a restarted broker
    assert again.groups() == ["g1", "g2"]
    g1 = again.group("g1")
    assert g1.offsets == {("t", 0): OffsetAndMetadata(6, 1, "b", 11), ("t", 1): OffsetAndMetadata(7)}
    assert g1.metadata == meta
    # the first store catches up with writes of the second (a coordinator move and back)
    again.delete_offsets("g1", [("t", 1)])
    again.delete_group("g2")
    assert store.group("g1").offsets == {("t", 0): OffsetAndMetadata(6, 1, "b", 11)}
    assert store.groups() == ["g1"]
    # records land in the group's partition, as in Kafka
    p = partition_for_group("g1", 3)
    assert PartitionReader(s, OFFSETS_TOPIC, p).high_watermark == 5


def test_live_members_expire_with_the_state_timestamp():
    m1 = MemberMetadata("a", session_timeout_ms=100)
    m2 = MemberMetadata("b", session_timeout_ms=1000)
    g = GroupMetadata("g", "consumer", 1, "range", "a", 5000, (m1, m2))
    assert g.live_members(5050) == (m1, m2)
    assert g.live_members(5500) == (m2,)
    assert g.live_members(7000) == ()


@pytest.mark.parametrize("fault", ["fail_before_write", "lose_response"])
def test_commit_faults_lose_nothing_and_a_retry_converges(local_root, fault):
    from kafkastore.errors import KafkaStoreError
    from tests.faults import FaultyFS

    fs = FaultyFS(Storage(local_root).fs)
    s = Storage(local_root, fs=fs)
    store = OffsetsStore(s, partitions=2)
    store.commit_offsets("g", {("t", 0): OffsetAndMetadata(1)})
    injected = getattr(fs, fault)(match=f"__consumer_offsets/{partition_for_group('g', 2)}/_manifest/", count=1)
    try:
        store.commit_offsets("g", {("t", 0): OffsetAndMetadata(2)})
    except KafkaStoreError:
        store.commit_offsets("g", {("t", 0): OffsetAndMetadata(2)})   # the client retries
    store.commit_offsets("g", {("t", 1): OffsetAndMetadata(9)})
    assert injected.fired == 1
    fresh = OffsetsStore(Storage(local_root)).group("g").offsets
    assert fresh == store.group("g").offsets == {("t", 0): OffsetAndMetadata(2), ("t", 1): OffsetAndMetadata(9)}


def test_concurrent_commits_share_manifest_commits_and_all_land(local_root):
    import threading
    import time as _time

    from kafkastore.manifest import ManifestStore
    from tests.faults import FaultyFS

    fs = FaultyFS(Storage(local_root).fs)
    store = OffsetsStore(Storage(local_root, fs=fs), partitions=1)
    store.commit_offsets("warm-up", {("t", 0): OffsetAndMetadata(0)})
    # the next manifest write stalls, so that the other writers queue behind it
    fs.on_write(lambda op, path: _time.sleep(0.3), match="_manifest/", count=1)
    errors = []

    def writer(i):
        try:
            for n in range(5):
                store.commit_offsets(f"g{i}", {("t", 0): OffsetAndMetadata(n)})
        except Exception as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    fresh = OffsetsStore(Storage(local_root))
    assert fresh.groups() == sorted([f"g{i}" for i in range(6)] + ["warm-up"])
    assert all(fresh.group(f"g{i}").offsets == {("t", 0): OffsetAndMetadata(4)} for i in range(6))
    versions = ManifestStore(Storage(local_root), OFFSETS_TOPIC, 0).latest().version
    assert versions < 1 + 30   # 31 commits, fewer manifest versions: writers were batched
