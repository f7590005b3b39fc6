"""Kafka's default partitioner: murmur2 equal to the Java client's, sticky null keys."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.format import partitioner
from kafkastore.errors import ConfigError
from kafkastore.format.partitioner import StickyPartitioner, choose_partition, murmur2, partition_for_key

kp_default = pytest.importorskip("kafka.partitioner.default")


def kafka_python_partition(key: bytes, partitions: int) -> int:
    """What kafka-python's DefaultPartitioner computes (it mirrors the Java client)."""
    return (kp_default.murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize("key, expected", [
    (b"21", -973932308),        # values from Kafka's UtilsTest.testMurmur2
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_java_vectors(key, expected):
    assert murmur2(key) == expected


def test_murmur2_every_tail_length():
    # 0..3 trailing bytes after whole words go through Java's fall-through switch.
    for n in range(0, 13):
        data = bytes(range(200, 200 + n))
        assert murmur2(data) & 0xFFFFFFFF == kp_default.murmur2(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(1, 500))
def test_partition_matches_kafka_python(key, partitions):
    assert murmur2(key) & 0xFFFFFFFF == kp_default.murmur2(key)
    assert partition_for_key(key, partitions) == kafka_python_partition(key, partitions)


def test_partition_cache_does_not_change_answers():
    rnd = random.Random(5)
    keys = [rnd.randbytes(rnd.randrange(1, 30)) for _ in range(300)]
    first = [partition_for_key(k, 7) for k in keys]
    again = [partition_for_key(k, 7) for k in keys]          # served from the cache
    other = [partition_for_key(k, 11) for k in keys]          # same hash, another count
    assert first == again == [kafka_python_partition(k, 7) for k in keys]
    assert other == [kafka_python_partition(k, 11) for k in keys]
    # Mutable key types are accepted and hashed by content.
    assert partition_for_key(bytearray(b"abc"), 7) == partition_for_key(b"abc", 7)
    assert partition_for_key(memoryview(b"abc"), 7) == partition_for_key(b"abc", 7)


def test_partition_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(partitioner, "_CACHE", {})
    monkeypatch.setattr(partitioner, "_CACHE_MAX", 10)
    for i in range(35):
        assert partition_for_key(b"k%d" % i, 3) == kafka_python_partition(b"k%d" % i, 3)
    assert len(partitioner._CACHE) <= 10


def test_bad_partition_counts():
    with pytest.raises(ConfigError):
        partition_for_key(b"x", 0)
    with pytest.raises(ConfigError):
        StickyPartitioner(0)


def test_sticky_switches_after_batch_size_and_is_deterministic():
    def run(seed):
        sp = StickyPartitioner(5, batch_size=1000, rng=random.Random(seed).randrange)
        return [sp.next(100) for _ in range(200)]

    seq = run(42)
    assert seq == run(42)  # injected rng: deterministic
    # Runs of exactly batch.size / record size = 10 records, never the same partition twice in a row.
    runs = []
    for p in seq:
        if runs and runs[-1][0] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    assert all(n == 10 for _, n in runs)
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))
    assert len({p for p, _ in runs}) > 1
    assert all(0 <= p < 5 for p in seq)


def test_sticky_uneven_records_switch_once_batch_size_reached():
    sp = StickyPartitioner(3, batch_size=250, rng=random.Random(1).randrange)
    first = sp.next(200)
    assert sp.next(49) == first       # 249 < 250: same partition
    assert sp.next(10) == first       # 249 before this record: still below batch.size
    assert sp.next(10) != first       # 259 >= 250 already: switch


def test_sticky_single_partition():
    sp = StickyPartitioner(1, batch_size=10, rng=random.Random(0).randrange)
    assert {sp.next(100) for _ in range(20)} == {0}


def test_choose_partition():
    sp = StickyPartitioner(4, batch_size=10 ** 6, rng=random.Random(0).randrange)
    sticky = choose_partition(None, 4, sp, 10)
    assert choose_partition(None, 4, sp, 10) == sticky
    assert choose_partition(b"foobar", 4, sp, 10) == kafka_python_partition(b"foobar", 4)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=11), min_size=0, max_size=300), st.integers(0, 12))
def test_vectorised_murmur2_matches(keys, fixed):
    # Mixed lengths (small groups take the loop) plus a large group of one length
    # (vectorised), every tail length 0..3 covered across examples.
    import random as _r
    rnd = _r.Random(fixed)
    keys = keys + [rnd.randbytes(fixed) for _ in range(64)]
    rnd.shuffle(keys)
    expected = [kp_default.murmur2(k) for k in keys]
    assert [h & 0xFFFFFFFF for h in partitioner.murmur2_many(keys)] == expected
    with_none = keys + [None]
    assert partitioner.partitions_for_keys(with_none, 13) == \
        [kafka_python_partition(k, 13) for k in keys] + [None]


def test_vectorised_murmur2_java_vectors_and_types():
    keys = [b"21", b"foobar", b"abc"] * 40 + [bytearray(b"abc"), memoryview(b"21")]
    hs = partitioner.murmur2_many(keys)
    assert hs[:3] == [-973932308, -790332482, 479470107]
    assert hs[-2:] == [479470107, -973932308]
    assert partitioner.murmur2_many([]) == []
    assert partitioner.murmur2_many([b""] * 40) == [murmur2(b"")] * 40
    with pytest.raises(ConfigError):
        partitioner.partitions_for_keys([b"x"], 0)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), max_size=60), batch=st.integers(1, 5000),
       partitions=st.integers(1, 5), seed=st.integers(0, 100))
def test_sticky_next_many_equals_next_one_by_one(sizes, batch, partitions, seed):
    import random as _random

    from kafkastore.format.partitioner import StickyPartitioner

    one = StickyPartitioner(partitions, batch, _random.Random(seed).randrange)
    many = StickyPartitioner(partitions, batch, _random.Random(seed).randrange)
    half = len(sizes) // 2
    expected = [one.next(s) for s in sizes]
    got = list(many.next_many(sizes[:half])) + list(many.next_many(sizes[half:]))
    assert got == expected
