"""The broker: partitioning, batching, compression, idempotence, segment rolls,
commit visibility, fencing, record validation and transactions."""
from __future__ import annotations

import random

import time

import pytest

from kafkastore.write import log_writer as broker_mod
from kafkastore.write.batching import MAX_TIMESTAMP_MS
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.format.compression import Compression
from kafkastore.errors import (ConfigError, FencedError, InvalidRecordError, OutOfOrderSequenceError,
                               RecordTooLargeError, StorageError, UnknownTopicError)
from kafkastore.manifest import ManifestStore
from kafkastore.read.reader import READ_UNCOMMITTED, PartitionReader
from kafkastore.format.record_batch import LOG_APPEND_TIME, Record, decode_batch
from kafkastore.format.segment_scan import iter_batches
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from tests.faults import faulty_storage

kp_default = pytest.importorskip("kafka.partitioner.default")

T = "t"


class Clock:
    """An injectable broker clock (epoch ms)."""

    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def setup(url: str, partitions: int = 1, topic: str = T, **configs) -> Storage:
    storage = Storage(url)
    create_topic(storage, topic, partitions, {k.replace("_", "."): v for k, v in configs.items()})
    return storage


def records(storage, p=0, topic=T, isolation="read_committed"):
    """``[(offset, key, value)]`` as a reader sees them."""
    t = PartitionReader(storage, topic, p).read(-2, isolation=isolation)
    return list(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                    t.column("value").to_pylist()))


def manifest(storage, p=0, topic=T):
    return ManifestStore(storage, topic, p).latest()


def batches(storage, p=0, topic=T):
    """Every batch header of every live segment, in log order: ``[(segment index, header)]``."""
    out = []
    m = manifest(storage, p, topic)
    for i, seg in enumerate(m.segments):
        log = storage.get(seg.paths(topic, p)[".log"])
        assert len(log) == seg.size
        out += [(i, h) for _, h in iter_batches(log)]
    return out


def kafka_partition(key: bytes, n: int) -> int:
    return (kp_default.murmur2(key) & 0x7FFFFFFF) % n


# ---------------------------------------------------------------------------
# partitioning
# ---------------------------------------------------------------------------

def test_keyed_records_land_where_kafka_puts_them(local_root):
    storage = setup(local_root, 5)
    b = Broker(storage)
    rnd = random.Random(3)
    keys = [rnd.randbytes(rnd.randrange(1, 24)) for _ in range(200)]
    for i, k in enumerate(keys):
        assert b.send(T, b"v%d" % i, key=k) == kafka_partition(k, 5)
    b.flush()
    for p in range(5):
        got = {k for _, k, _ in records(storage, p)}
        assert got == {k for k in keys if kafka_partition(k, 5) == p}


def test_explicit_partition_wins_and_is_checked(local_root):
    storage = setup(local_root, 3)
    b = Broker(storage)
    assert b.send(T, b"x", key=b"foobar", partition=2) == 2
    for bad in (3, -1, True):
        with pytest.raises(UnknownTopicError, match="partitions 0..2"):
            b.send(T, b"x", partition=bad)
    with pytest.raises(UnknownTopicError, match="unknown topic"):
        b.send("nope", b"x")
    b.flush()
    assert records(storage, 2) == [(0, b"foobar", b"x")]


def test_sticky_null_keys_deterministic_with_injected_rng(local_root):
    storage = setup(local_root, 4)

    def run():
        b = Broker(storage, rng=random.Random(7), batch_size=1000, producer_id=1)
        # value of 79 bytes + 21 bytes of estimated overhead = 100 bytes a record
        return [b.send(T, b"v" * 79) for _ in range(100)]

    first, second = run(), run()
    assert first == second
    runs = []
    for p in first:
        if runs and runs[-1][0] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    assert [n for _, n in runs] == [10] * 10          # switches after batch.size bytes
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))


# ---------------------------------------------------------------------------
# batching and compression
# ---------------------------------------------------------------------------

def test_batches_sealed_at_batch_size(local_root):
    storage = setup(local_root)
    b = Broker(storage, batch_size=1000)
    for i in range(95):
        b.send(T, b"%079d" % i)           # 100 estimated bytes each: 10 per batch
    [res] = b.flush()
    assert (res.base_offset, res.next_offset) == (0, 95)
    hs = [h for _, h in batches(storage)]
    assert [h.record_count for h in hs] == [10] * 9 + [5]
    assert [h.base_offset for h in hs] == list(range(0, 95, 10))
    assert all(h.size <= 1000 for h in hs)
    # Every batch carries the broker's producer id and consecutive sequence numbers.
    assert {h.producer_id for h in hs} == {b.producer_id}
    assert [h.base_sequence for h in hs] == list(range(0, 95, 10))
    assert [v for _, _, v in records(storage)] == [b"%079d" % i for i in range(95)]


def test_batches_sealed_after_linger_ms(local_root):
    storage = setup(local_root)
    clock = Clock()
    b = Broker(storage, linger_ms=50, clock=clock)
    for i in range(23):
        b.send(T, b"x%d" % i)
        clock.now += 10                   # records at +0, +10, ...: a batch spans < 50 ms
    b.flush()
    hs = [h for _, h in batches(storage)]
    assert [h.record_count for h in hs] == [5, 5, 5, 5, 3]
    assert all(h.max_timestamp - h.base_timestamp < 50 for h in hs)


def test_linger_zero_batches_by_size_only(local_root):
    storage = setup(local_root)
    clock = Clock()
    b = Broker(storage, linger_ms=0, clock=clock)
    for i in range(20):
        b.send(T, b"x")
        clock.now += 1000
    b.flush()
    assert [h.record_count for _, h in batches(storage)] == [20]


@pytest.mark.parametrize("topic_codec, producer_codec, expected", [
    ("producer", "zstd", Compression.ZSTD),
    ("producer", None, Compression.NONE),
    ("gzip", "zstd", Compression.GZIP),
    ("snappy", None, Compression.SNAPPY),
    ("lz4", "gzip", Compression.LZ4),
    ("uncompressed", "lz4", Compression.NONE),
])
def test_compression_per_topic_and_producer(local_root, topic_codec, producer_codec, expected):
    storage = setup(local_root, compression_type=topic_codec)
    b = Broker(storage, compression=producer_codec, batch_size=2000)
    values = [b"value %d " % i * 5 for i in range(100)]
    for i, v in enumerate(values):
        b.send(T, v, key=b"k%d" % i, headers=[("h", b"%d" % i)])
    b.flush()
    hs = [h for _, h in batches(storage)]
    assert len(hs) > 1 and {h.compression for h in hs} == {expected}
    if expected != Compression.NONE:   # really compressed: smaller than the plain records
        assert sum(h.size for h in hs) < sum(len(v) for v in values)
    t = PartitionReader(storage, T, 0).read(-2)
    assert t.column("value").to_pylist() == values
    assert [h[0]["value"] for h in t.column("headers").to_pylist()] == [b"%d" % i for i in range(100)]


def test_log_append_time_topic(local_root):
    storage = setup(local_root, message_timestamp_type="LogAppendTime")
    clock = Clock(5_000_000)
    b = Broker(storage, clock=clock)
    b.send(T, b"a", timestamp=1000)
    b.send(T, b"b", timestamp=2000)
    b.flush()
    [(_, h)] = batches(storage)
    assert h.timestamp_type == LOG_APPEND_TIME and h.max_timestamp == 5_000_000
    seg = manifest(storage).segments[0]
    assert (seg.min_timestamp, seg.max_timestamp) == (5_000_000, 5_000_000)
    t = PartitionReader(storage, T, 0).read(-2)
    assert t.column("timestampType").to_pylist() == [1, 1]
    ts = t.column("timestamp").cast("int64").to_pylist()
    assert ts == [5_000_000_000, 5_000_000_000]          # microseconds
    # append_batch on such a topic gets the append time too.
    clock.now = 6_000_000
    b.append_batch(T, 0, [Record(0, 10, None, b"c")], producer_id=9, producer_epoch=0,
                   base_sequence=0)
    t = PartitionReader(storage, T, 0).read(2)
    assert t.column("timestamp").cast("int64").to_pylist() == [6_000_000_000]
    assert t.column("timestampType").to_pylist() == [1]


def test_create_time_topic_keeps_producer_timestamps(local_root):
    storage = setup(local_root)
    b = Broker(storage, clock=Clock(5_000_000))
    b.send(T, b"a", timestamp=1000)
    b.send(T, b"b")                                       # default: the broker's clock
    b.flush()
    t = PartitionReader(storage, T, 0).read(-2)
    assert t.column("timestamp").cast("int64").to_pylist() == [1_000_000, 5_000_000_000]
    assert t.column("timestampType").to_pylist() == [0, 0]
    seg = manifest(storage).segments[0]
    assert (seg.min_timestamp, seg.max_timestamp, seg.max_timestamp_offset) == (1000, 5_000_000, 1)


# ---------------------------------------------------------------------------
# record validation
# ---------------------------------------------------------------------------

def test_oversized_records_refused(local_root):
    storage = setup(local_root, max_message_bytes=1000)
    b = Broker(storage)
    b.send(T, b"ok")
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=1000"):
        b.send(T, b"x" * 1000)
    with pytest.raises(RecordTooLargeError):
        b.send(T, b"x", headers=[("h", b"y" * 990)])
    with pytest.raises(RecordTooLargeError):
        b.append_batch(T, 0, [Record(0, 1, b"k", b"x" * 600), Record(1, 1, b"k", b"x" * 600)],
                       producer_id=5, producer_epoch=0, base_sequence=0)
    b.flush()
    assert [v for _, _, v in records(storage)] == [b"ok"]
    assert all(h.size <= 1000 for _, h in batches(storage))


def test_batches_never_exceed_max_message_bytes(local_root):
    storage = setup(local_root, max_message_bytes=1500)
    b = Broker(storage, batch_size=100_000)               # batch.size above the topic's limit
    for i in range(50):
        b.send(T, b"%0100d" % i)
    b.flush()
    hs = [h for _, h in batches(storage)]
    assert len(hs) > 1 and all(h.size <= 1500 for h in hs)
    assert len(records(storage)) == 50


def test_batch_split_when_estimate_too_optimistic(local_root, monkeypatch):
    # With no per-record overhead in the estimate, a batch is sealed too full and must be
    # split in halves until each fits: offsets, order and sequences stay intact.
    monkeypatch.setattr(broker_mod, "RECORD_OVERHEAD", 0)
    storage = setup(local_root, max_message_bytes=600)
    b = Broker(storage, batch_size=100_000)
    values = [b"%050d" % i for i in range(40)]
    for v in values:
        b.send(T, v)
    b.flush()
    hs = [h for _, h in batches(storage)]
    assert len(hs) > 4 and all(h.size <= 600 for h in hs)
    assert [h.base_sequence for h in hs] == [sum(x.record_count for x in hs[:i]) for i in range(len(hs))]
    assert records(storage) == [(i, None, v) for i, v in enumerate(values)]


def test_single_record_over_limit_after_encoding_is_dropped_not_stuck(local_root, monkeypatch):
    monkeypatch.setattr(broker_mod, "RECORD_OVERHEAD", 0)
    storage = setup(local_root, max_message_bytes=200)
    b = Broker(storage)
    b.send(T, b"x" * 139)        # estimate 139 + 61 = 200 passes; the real batch is larger
    with pytest.raises(RecordTooLargeError):
        b.flush()
    b.send(T, b"small")
    b.flush()                    # the broker is not stuck on the refused record
    assert records(storage) == [(0, None, b"small")]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_unkeyed_records_refused_on_compacted_topic(local_root, policy):
    storage = setup(local_root, cleanup_policy=policy)
    b = Broker(storage)
    with pytest.raises(InvalidRecordError, match="compacted"):
        b.send(T, b"v")
    with pytest.raises(InvalidRecordError, match="compacted"):
        b.append_batch(T, 0, [Record(0, 1, None, b"v")], producer_id=1, producer_epoch=0,
                       base_sequence=0)
    b.send(T, b"v", key=b"k")
    b.send(T, None, key=b"k")                             # a tombstone is fine
    b.flush()
    assert records(storage) == [(0, b"k", b"v"), (1, b"k", None)]


def test_timestamps_validated(local_root):
    storage = setup(local_root, message_timestamp_before_max_ms=1000,
                    message_timestamp_after_max_ms=500)
    clock = Clock(1_000_000)
    b = Broker(storage, clock=clock)
    for bad in (-1, MAX_TIMESTAMP_MS + 1, 1.5, "1"):
        with pytest.raises(ConfigError, match="timestamp"):
            b.send(T, b"x", timestamp=bad)
    with pytest.raises(InvalidRecordError, match="before.max.ms"):
        b.send(T, b"x", timestamp=1_000_000 - 1001)
    with pytest.raises(InvalidRecordError, match="after.max.ms"):
        b.send(T, b"x", timestamp=1_000_000 + 501)
    with pytest.raises(InvalidRecordError, match="before.max.ms"):
        b.append_batch(T, 0, [Record(0, 5, None, b"x")], producer_id=1, producer_epoch=0,
                       base_sequence=0)
    b.send(T, b"ok", timestamp=1_000_000 - 1000)
    b.send(T, b"ok", timestamp=1_000_000 + 500)
    b.flush()
    assert len(records(storage)) == 2


def test_max_timestamp_is_readable(local_root):
    storage = setup(local_root)
    b = Broker(storage, clock=Clock(MAX_TIMESTAMP_MS))
    b.send(T, b"x", timestamp=MAX_TIMESTAMP_MS)
    b.send(T, b"y", timestamp=0)
    b.flush()
    t = PartitionReader(storage, T, 0).read(-2)
    assert t.column("timestamp").cast("int64").to_pylist() == [MAX_TIMESTAMP_MS * 1000, 0]


# ---------------------------------------------------------------------------
# idempotence
# ---------------------------------------------------------------------------

def recs(*values):
    return [Record(i, 1000 + i, b"k", v) for i, v in enumerate(values)]


def recent_recs(*values):
    """Records stamped now: a producer whose records are older than a day is idle, and
    another producer's commit drops its state (Kafka's producer.id.expiration.ms)."""
    now = int(time.time() * 1000)
    return [Record(i, now + i, b"k", v) for i, v in enumerate(values)]


def test_append_batch_retry_is_not_written_twice(root_url):
    storage = setup(root_url)
    b = Broker(storage)
    r1 = b.append_batch(T, 0, recent_recs(b"a", b"b", b"c"), producer_id=77, producer_epoch=0,
                        base_sequence=0)
    assert (r1.base_offset, r1.next_offset, r1.duplicate) == (0, 3, False)
    other = Broker(storage)                       # someone else appends in between
    other.send(T, b"other")
    other.flush()
    r2 = b.append_batch(T, 0, recent_recs(b"a", b"b", b"c"), producer_id=77, producer_epoch=0,
                        base_sequence=0)
    assert (r2.base_offset, r2.next_offset, r2.duplicate) == (0, 3, True)
    r3 = b.append_batch(T, 0, recent_recs(b"d"), producer_id=77, producer_epoch=0, base_sequence=3)
    assert (r3.base_offset, r3.next_offset, r3.duplicate) == (4, 5, False)
    assert [v for _, _, v in records(storage)] == [b"a", b"b", b"c", b"other", b"d"]
    st = manifest(storage).producers[77]
    assert (st.epoch, st.last_sequence, st.last_offset) == (0, 3, 4)


def test_an_idle_producers_state_is_dropped_by_another_producers_commit(local_root):
    """The library Broker expires producer state as serve's Appender does (by the last
    batch's timestamp, producer.id.expiration.ms), keeping the committing producer's own."""
    storage = setup(local_root)
    Broker(storage).append_batch(T, 0, recs(b"old"), producer_id=5, producer_epoch=0,
                                 base_sequence=0)            # stamped 1970: idle for decades
    fresh = Broker(storage)
    fresh.append_batch(T, 0, recent_recs(b"new"), producer_id=6, producer_epoch=0,
                       base_sequence=0)
    assert set(manifest(storage).producers) == {6}


def test_append_batch_sequence_rules(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    kw = dict(producer_id=5, producer_epoch=0)
    b.append_batch(T, 0, recs(b"a", b"b"), base_sequence=0, **kw)
    with pytest.raises(OutOfOrderSequenceError, match="does not follow 1"):
        b.append_batch(T, 0, recs(b"x"), base_sequence=5, **kw)       # a gap
    with pytest.raises(OutOfOrderSequenceError):
        b.append_batch(T, 0, recs(b"x"), base_sequence=1, **kw)       # overlaps, not a retry
    for i in range(6):                                                # push batch 0 out of the window
        b.append_batch(T, 0, recs(b"n%d" % i), base_sequence=2 + i, **kw)
    with pytest.raises(OutOfOrderSequenceError):
        b.append_batch(T, 0, recs(b"a", b"b"), base_sequence=0, **kw)  # too old to be recognised
    with pytest.raises(OutOfOrderSequenceError, match="epoch"):       # an older epoch is fenced
        b.append_batch(T, 0, recs(b"x"), producer_id=5, producer_epoch=-1, base_sequence=8)
    hw = manifest(storage).high_watermark
    # A bumped epoch restarts at sequence 0 and is not mistaken for an old duplicate.
    with pytest.raises(OutOfOrderSequenceError, match="sequence 0"):
        b.append_batch(T, 0, recs(b"x"), producer_id=5, producer_epoch=1, base_sequence=8)
    r = b.append_batch(T, 0, recs(b"e1"), producer_id=5, producer_epoch=1, base_sequence=0)
    assert (r.duplicate, r.base_offset) == (False, hw)
    r = b.append_batch(T, 0, recs(b"e1"), producer_id=5, producer_epoch=1, base_sequence=0)
    assert (r.duplicate, r.base_offset) == (True, hw)
    assert len(records(storage)) == hw + 1
    with pytest.raises(ConfigError):
        b.append_batch(T, 0, [], base_sequence=1, producer_id=5, producer_epoch=1)


def test_broker_resumes_sequences_from_manifest(local_root):
    storage = setup(local_root)
    b1 = Broker(storage, producer_id=42)
    for i in range(3):
        b1.send(T, b"%d" % i)
    b1.flush()
    b2 = Broker(storage, producer_id=42)              # a restart with the same producer id
    b2.send(T, b"3")
    b2.flush()
    assert [h.base_sequence for _, h in batches(storage)] == [0, 3]
    assert len(records(storage)) == 4
    b3 = Broker(storage, producer_id=42, producer_epoch=1)   # a new epoch starts over at 0
    b3.send(T, b"4")
    b3.flush()
    assert [h.base_sequence for _, h in batches(storage)][-1] == 0
    assert len(records(storage)) == 5


# ---------------------------------------------------------------------------
# segments
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("commit_on_roll", [True, False])
def test_segment_roll_by_segment_bytes(local_root, commit_on_roll):
    storage = setup(local_root, segment_bytes=2000)
    b = Broker(storage, batch_size=400, commit_on_roll=commit_on_roll)
    values = [b"%0100d" % i for i in range(120)]
    for v in values:
        b.send(T, v)
    results = b.flush()
    m = manifest(storage)
    assert len(m.segments) >= 5
    assert all(s.size <= 2000 for s in m.segments)
    assert all(a.next_offset == b_.base_offset for a, b_ in zip(m.segments, m.segments[1:]))
    assert m.high_watermark == 120
    if commit_on_roll:
        assert m.version > 2                        # committed as the buffer filled
    else:
        assert m.version == 1 and len(results) == 1   # several segments, one commit
        assert (results[0].base_offset, results[0].next_offset) == (0, 120)
    assert [v for _, _, v in records(storage)] == values
    # Files are named after the segment's base offset, which is also its first batch's.
    for s in m.segments:
        log = storage.get(s.paths(T, 0)[".log"])
        first = next(iter_batches(log))[1]
        assert first.base_offset == s.base_offset
        assert s.paths(T, 0)[".log"].rsplit("/", 1)[1].startswith("%020d-" % s.base_offset)


@pytest.mark.parametrize("commit_on_roll", [True, False])
def test_segment_roll_by_segment_ms(local_root, commit_on_roll):
    storage = setup(local_root, segment_ms=100)
    clock = Clock()
    b = Broker(storage, clock=clock, linger_ms=30, commit_on_roll=commit_on_roll)
    for i in range(30):
        b.send(T, b"%d" % i)                         # timestamp = the broker's clock
        clock.now += 10
    b.flush()
    m = manifest(storage)
    assert len(records(storage)) == 30
    if commit_on_roll:
        # send() rolls before a record that arrives segment.ms after the segment's first one.
        assert [s.next_offset - s.base_offset for s in m.segments] == [10, 10, 10]
        assert all(s.max_timestamp - s.min_timestamp < 100 for s in m.segments)
        assert m.version == 3
    else:
        # One flush, rolled at batch boundaries as Kafka's log does: a segment takes
        # batches begun less than segment.ms after its first batch.
        assert m.version == 1 and len(m.segments) == 3
        starts = [[h.base_timestamp for i, h in batches(storage) if i == n]
                  for n in range(len(m.segments))]
        assert all(seg[-1] - seg[0] < 100 for seg in starts)
        assert all(nxt[0] - seg[0] >= 100 for seg, nxt in zip(starts, starts[1:]))


def test_each_flush_rolls_a_segment(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    for n in range(3):
        b.send(T, b"%d" % n)
        [r] = b.flush()
        assert (r.base_offset, r.next_offset) == (n, n + 1)
    assert b.flush() == []                           # nothing buffered: no commit
    m = manifest(storage)
    assert [(s.base_offset, s.next_offset) for s in m.segments] == [(0, 1), (1, 2), (2, 3)]
    assert m.version == 3


def test_segment_files_and_manifest_agree(local_root):
    storage = setup(local_root, index_interval_bytes=500)
    b = Broker(storage, batch_size=300)
    for i in range(200):
        b.send(T, b"%050d" % i, key=b"k")
    b.flush()
    from kafkastore.read.verify import verify_partition
    report = verify_partition(storage, T, 0)
    assert report.ok, report.lines()
    [seg] = manifest(storage).segments
    assert seg.index_size > 8 and seg.index_size == storage.size(seg.paths(T, 0)[".index"])


# ---------------------------------------------------------------------------
# visibility, faults, several brokers, fencing
# ---------------------------------------------------------------------------

def test_records_invisible_until_commit_and_orphans_kept(root_url):
    setup(root_url)
    storage, fs = faulty_storage(root_url)
    b = Broker(storage)
    for i in range(10):
        b.send(T, b"%d" % i)
    assert manifest(storage) is None                  # buffered: nothing written yet
    fs.fail_before_write(match="_manifest/", count=None)
    with pytest.raises(StorageError):
        b.flush()
    assert manifest(storage) is None
    assert PartitionReader(storage, T, 0).high_watermark == 0
    orphans = [o.path for o in storage.list(f"topics/{T}/0") if "_manifest" not in o.path]
    # a small segment goes up as its .log alone (index-free: kafkastore.merge builds indexes)
    assert {p.rsplit(".", 1)[1] for p in orphans} == {"log"}
    fs.clear()
    [r] = b.flush()                                   # the batches were kept: retry lands once
    assert (r.base_offset, r.next_offset, r.duplicate) == (0, 10, False)
    assert [v for _, _, v in records(storage)] == [b"%d" % i for i in range(10)]
    after = [o.path for o in storage.list(f"topics/{T}/0")]
    assert set(orphans) <= set(after)                 # never deleted by the writer
    assert not set(orphans) & set(manifest(storage).segments[0].paths(T, 0).values())


def test_flush_commits_the_other_partitions_when_one_fails(root_url):
    # Partitions commit side by side: a failing one stops none of the others, on_commit
    # hears of every commit that landed (on the caller's thread, in partition order), the
    # first failure is raised, and the failed partition's records stay buffered for a retry.
    import threading

    setup(root_url, 4)
    storage, fs = faulty_storage(root_url)
    b = Broker(storage)
    heard = []
    b.on_commit = lambda r: heard.append((r.partition, r.record_count,
                                          threading.current_thread() is threading.main_thread()))
    for p in range(4):
        b.send_many(T, [b"%d-%d" % (p, i) for i in range(p + 1)], partition=p)
    fs.fail_before_write(match=f"topics/{T}/2/_manifest/", count=None)
    with pytest.raises(StorageError):
        b.flush()
    assert heard == [(0, 1, True), (1, 2, True), (3, 4, True)]
    assert [manifest(storage, p) is None for p in range(4)] == [False, False, True, False]
    fs.clear()
    [r] = b.flush()
    assert (r.partition, r.base_offset, r.next_offset, r.duplicate) == (2, 0, 3, False)
    assert heard[-1] == (2, 3, True)
    for p in range(4):
        assert [v for _, _, v in records(storage, p)] == [b"%d-%d" % (p, i) for i in range(p + 1)]


def test_brokers_sharing_a_root_each_lead_some_partitions(local_root):
    storage = setup(local_root, 4)
    a, b = Broker(storage, broker_id=1), Broker(Storage(local_root), broker_id=2)
    assert a.claim(T, [0, 1]) == {0: 1, 1: 1}
    assert b.claim(T, [2, 3]) == {2: 1, 3: 1}
    for i in range(40):
        (a if i % 4 < 2 else b).send(T, b"%d" % i, partition=i % 4)
    a.flush()
    b.flush()
    for p in range(4):
        m = manifest(storage, p)
        assert {s.writer_id for s in m.segments} == {1 if p < 2 else 2}
        assert {s.leader_epoch for s in m.segments} == {1}
        assert [v for _, _, v in records(storage, p)] == [b"%d" % i for i in range(p, 40, 4)]


def test_second_writer_fenced_after_claim(root_url):
    storage = setup(root_url)
    a, b = Broker(storage, broker_id=1), Broker(storage, broker_id=2)
    a.claim(T)
    a.send(T, b"a1")
    a.flush()
    assert b.claim(T) == {0: 2}
    before = manifest(storage)
    a.send(T, b"a2")
    with pytest.raises(FencedError):
        a.flush()
    after = manifest(storage)
    assert after.version == before.version and after.segments == before.segments
    assert a.flush() == []                           # the fenced records are dropped, not retried
    b.send(T, b"b1")
    b.flush()
    assert [v for _, _, v in records(storage)] == [b"a1", b"b1"]
    # A writer that never claimed is fenced too, once someone claims after its first commit.
    c = Broker(storage, broker_id=3)
    c.send(T, b"c1")
    c.flush()
    b.claim(T)
    c.send(T, b"c2")
    with pytest.raises(FencedError):
        c.flush()
    assert [v for _, _, v in records(storage)] == [b"a1", b"b1", b"c1"]


# ---------------------------------------------------------------------------
# transactions
# ---------------------------------------------------------------------------

def values(storage, p=0, isolation="read_committed"):
    return [v for _, _, v in records(storage, p, isolation=isolation)]


def test_transaction_abort_hidden_from_read_committed(root_url):
    storage = setup(root_url, 2)
    b = Broker(storage, producer_id=100)
    b.send(T, b"before", partition=0)
    b.flush()
    b.begin_transaction()
    b.send(T, b"t0", partition=0)
    b.send(T, b"t1", partition=0)
    b.send(T, b"u0", partition=1)
    b.flush()                                       # transactional data committed, txn open
    other = Broker(storage, producer_id=200)
    other.send(T, b"after", partition=0)
    other.flush()
    r = PartitionReader(storage, T, 0)
    assert (r.last_stable_offset, r.high_watermark) == (1, 4)
    assert values(storage) == [b"before"]           # stops at the LSO while the txn is open
    assert values(storage, isolation=READ_UNCOMMITTED) == [b"before", b"t0", b"t1", b"after"]
    assert r.read(2, isolation=READ_UNCOMMITTED).num_rows == 2
    results = b.abort_transaction()
    assert {res.partition for res in results} == {0, 1}
    r = PartitionReader(storage, T, 0)
    assert (r.last_stable_offset, r.high_watermark) == (5, 5)   # + the ABORT marker
    assert values(storage) == [b"before", b"after"]
    assert values(storage, isolation=READ_UNCOMMITTED) == [b"before", b"t0", b"t1", b"after"]
    assert values(storage, 1) == []
    assert values(storage, 1, isolation=READ_UNCOMMITTED) == [b"u0"]
    assert manifest(storage).segments[-1].aborted_txns == ((100, 1, 4),)
    # The markers are control batches, never records.
    ctl = [h for _, h in batches(storage) if h.is_control]
    assert [(h.base_offset, h.producer_id) for h in ctl] == [(4, 100)]
    assert all(h.is_transactional for _, h in batches(storage) if h.producer_id == 100
               and h.base_offset > 0)


def test_transaction_commit(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    b.begin_transaction()
    b.send(T, b"t0")
    b.send(T, b"t1")
    assert PartitionReader(storage, T, 0).high_watermark == 0   # nothing before the commit
    [res] = b.commit_transaction()
    assert (res.base_offset, res.next_offset, res.record_count) == (0, 3, 3)
    b.send(T, b"plain")
    b.flush()
    assert records(storage) == [(0, None, b"t0"), (1, None, b"t1"), (3, None, b"plain")]
    assert values(storage, isolation=READ_UNCOMMITTED) == [b"t0", b"t1", b"plain"]
    r = PartitionReader(storage, T, 0)
    assert r.last_stable_offset == r.high_watermark == 4
    hs = [h for _, h in batches(storage)]
    assert [(h.is_transactional, h.is_control) for h in hs] == [(True, False), (True, True),
                                                                 (False, False)]


def test_abort_in_one_flush_and_mixed_batches(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    b.send(T, b"plain0")                 # buffered, then sealed apart by begin_transaction
    b.begin_transaction()
    b.send(T, b"t0")
    b.abort_transaction()                # plain0, t0 and the marker in one commit
    b.send(T, b"plain1")
    b.flush()
    assert values(storage) == [b"plain0", b"plain1"]
    assert values(storage, isolation=READ_UNCOMMITTED) == [b"plain0", b"t0", b"plain1"]
    with pytest.raises(ConfigError):
        b.commit_transaction()           # none open
    b.begin_transaction()
    with pytest.raises(ConfigError):
        b.begin_transaction()            # already open
    b.send(T, b"t1")
    b.close()                            # an open transaction is aborted on close
    assert values(storage) == [b"plain0", b"plain1"]
    assert PartitionReader(storage, T, 0).last_stable_offset == manifest(storage).high_watermark


def test_empty_transaction_writes_nothing(local_root):
    storage = setup(local_root)
    b = Broker(storage)
    b.begin_transaction()
    assert b.commit_transaction() == []
    assert manifest(storage) is None


def test_transaction_markers_survive_a_failed_commit(local_root):
    # If committing one partition's marker fails, the other markers stay buffered and a
    # later flush completes the transaction (no partition is left with an open one).
    setup(local_root, 2)
    storage, fs = faulty_storage(local_root)
    b = Broker(storage)
    b.begin_transaction()
    b.send(T, b"a", partition=0)
    b.send(T, b"b", partition=1)
    fs.fail_before_write(match=f"topics/{T}/0/", count=None)
    with pytest.raises(StorageError):
        b.abort_transaction()
    fs.clear()
    b.flush()
    for p in (0, 1):
        r = PartitionReader(storage, T, p)
        assert r.last_stable_offset == r.high_watermark == 2
        assert values(storage, p) == []
        assert len(values(storage, p, isolation=READ_UNCOMMITTED)) == 1


def test_decoded_batches_match_records(local_root):
    # The bytes the broker wrote decode record for record (headers, null key/value).
    storage = setup(local_root)
    b = Broker(storage, clock=Clock(1234))
    b.send(T, None, key=b"k", headers=[("a", None), ("b", b"2")])
    b.send(T, b"v", key=None)
    b.flush()
    seg = manifest(storage).segments[0]
    _, rs = decode_batch(storage.get(seg.paths(T, 0)[".log"]))
    assert rs == [Record(0, 1234, b"k", None, (("a", None), ("b", b"2"))),
                  Record(1, 1234, None, b"v", ())]


def test_clock_ticking_between_calls(local_root):
    # A clock that moves on every call (a busy broker crossing millisecond boundaries) must
    # not produce a segment whose min timestamp is above its max (a marker stamped twice).
    import itertools

    storage = setup(local_root, 2)
    ticks = itertools.count(1_700_000_000_000, 3)
    b = Broker(storage, clock=lambda: next(ticks), linger_ms=5)
    for round_ in range(3):
        b.begin_transaction()
        for i in range(10):
            b.send(T, b"%d" % i, partition=i % 2)
        if round_ == 1:
            b.flush()
        b.abort_transaction() if round_ % 2 else b.commit_transaction()
        b.send(T, b"plain", partition=0)
        b.flush()
    from kafkastore.read.verify import verify_partition
    for p in range(2):
        m = manifest(storage, p)
        assert all(s.min_timestamp <= s.max_timestamp for s in m.segments)
        assert verify_partition(storage, T, p).ok
    assert len(values(storage, 0)) == 5 + 5 + 3


def test_send_many_same_as_send(local_root):
    storage = setup(local_root, 5)
    rnd = random.Random(9)
    keys = [rnd.randbytes(16) for _ in range(150)] + [None] * 20 + [b"k%d" % i for i in range(30)]
    vals = [b"v%d" % i for i in range(len(keys))]
    b = Broker(storage, rng=random.Random(1), batch_size=500)
    parts = b.send_many(T, vals, keys, timestamps=[1000 + i for i in range(len(keys))])
    ref = Broker(storage, rng=random.Random(1), batch_size=500)
    assert parts == [ref.send(T, v, key=k, timestamp=1000) for k, v in zip(keys, vals)]
    assert all(p == kafka_partition(k, 5) for k, p in zip(keys, parts) if k is not None)
    ref._buffers.clear()                                     # never flushed
    b.flush()
    got = {}
    for p in range(5):
        t = PartitionReader(storage, T, p).read(-2)
        for v, ts in zip(t.column("value").to_pylist(), t.column("timestamp").cast("int64").to_pylist()):
            got[v] = (p, ts // 1000)
    assert got == {v: (p, 1000 + i) for i, (v, p) in enumerate(zip(vals, parts))}
    assert b.send_many(T, [b"x", b"y"], partition=3, headers=[[("h", b"1")], ()]) == [3, 3]
    with pytest.raises(ConfigError, match="2 keys for 3 values"):
        b.send_many(T, [b"a", b"b", b"c"], [b"k", b"k"])
    compacted = setup(f"{local_root}/c", 1, cleanup_policy="compact")
    c = Broker(compacted)
    with pytest.raises(InvalidRecordError):                   # stops at the first refused record
        c.send_many(T, [b"a", b"b", b"c"], [b"k", None, b"k"])
    c.flush()
    assert records(compacted) == [(0, b"k", b"a")]            # those before it stay buffered


# -- send_arrow: the Arrow write path ------------------------------------------------

def _read_all(storage, partitions, topic=T):
    out = {}
    for p in range(partitions):
        t = PartitionReader(storage, topic, p).read(-2, include_headers=True)
        out[p] = list(zip(t.column("key").to_pylist(), t.column("value").to_pylist(),
                          t.column("timestamp").cast("int64").to_pylist(),
                          t.column("headers").to_pylist()))
    return out


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_send_arrow_writes_what_send_writes(local_root, codec):
    import pyarrow as pa

    from kafkastore.format.arrow_decode import HEADERS_TYPE

    rnd = random.Random(3)
    n = 400
    keys = [None if i % 9 == 0 else rnd.randbytes(rnd.randrange(0, 20)) for i in range(n)]
    vals = [None if i % 13 == 5 else rnd.randbytes(rnd.randrange(0, 300)) for i in range(n)]
    hdrs = [[("a", b"1"), ("b", None)] if i % 4 == 0 else [] for i in range(n)]
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(vals, pa.binary()),
                      "timestamp": pa.array([1000 + i for i in range(n)], pa.int64()),
                      "headers": pa.array([[{"key": k, "value": v} for k, v in h] or None
                                           for h in hdrs], HEADERS_TYPE)})
    a = setup(f"{local_root}/a", 4, compression_type=codec)
    b = setup(f"{local_root}/b", 4, compression_type=codec)
    fast = Broker(a, rng=random.Random(1), batch_size=2000, clock=Clock())
    slow = Broker(b, rng=random.Random(1), batch_size=2000, clock=Clock())
    parts = fast.send_arrow(T, table)
    ref = [slow.send(T, v, key=k, headers=h, timestamp=1000 + i)
           for i, (k, v, h) in enumerate(zip(keys, vals, hdrs))]
    assert parts.tolist() == ref
    fast.flush(), slow.flush()
    assert _read_all(a, 4) == _read_all(b, 4)
    for p in range(4):       # batches respect batch.size and max.message.bytes, CRCs good
        assert all(h.size <= 2000 + 400 for _, h in batches(a, p))


def test_send_arrow_refuses_like_send_and_keeps_rows_before(local_root):
    import pyarrow as pa

    storage = setup(local_root, 2, cleanup_policy="compact")
    b = Broker(storage, clock=Clock())
    t = pa.table({"key": pa.array([b"a", b"b", None, b"c"]), "value": pa.array([b"1"] * 4)})
    with pytest.raises(InvalidRecordError, match="need a key") as e:
        b.send_arrow(T, t)
    assert e.value.row == 2
    b.flush()
    assert sorted(v for p in range(2) for _, _, v in records(storage, p)) == [b"1", b"1"]
    late = pa.table({"key": [b"k"], "value": [b"v"], "timestamp": pa.array([-5], pa.int64())})
    with pytest.raises(ConfigError, match="timestamp"):
        b.send_arrow(T, late)
    with pytest.raises(UnknownTopicError):
        b.send_arrow(T, pa.table({"key": [b"k"], "value": [b"v"], "partition": [7]}))
    small = setup(f"{local_root}/s", 1, max_message_bytes=200)
    with pytest.raises(RecordTooLargeError) as e:
        Broker(small).send_arrow(T, pa.table({"value": [b"x", b"y" * 500]}))
    assert e.value.row == 1


def test_send_arrow_rolls_segments_and_partition_column(local_root):
    import pyarrow as pa

    storage = setup(local_root, 3, segment_bytes=4096)
    b = Broker(storage, batch_size=1000, clock=Clock())
    n = 300
    t = pa.table({"value": pa.array([b"%05d" % i + b"x" * 40 for i in range(n)]),
                  "partition": pa.array([i % 2 if i % 3 else None for i in range(n)], pa.int32())})
    parts = b.send_arrow(T, t, partition=2)
    assert parts.tolist() == [i % 2 if i % 3 else 2 for i in range(n)]
    b.flush()
    for p in range(3):
        m = manifest(storage, p)
        assert all(s.size <= 4096 for s in m.segments)
        vals = [v for _, _, v in records(storage, p)]
        assert vals == [b"%05d" % i + b"x" * 40 for i in range(n) if parts[i] == p]
    assert len(manifest(storage, 0).segments) > 1   # commit_on_roll committed as it went


def test_send_arrow_log_append_time_and_transactions(local_root):
    import pyarrow as pa

    storage = setup(local_root, 1, message_timestamp_type="LogAppendTime")
    clock = Clock()
    b = Broker(storage, clock=clock)
    b.begin_transaction()
    b.send_arrow(T, pa.table({"value": [b"a", b"b"], "timestamp": pa.array([5, 6], pa.int64())}))
    b.abort_transaction()
    b.send_arrow(T, pa.table({"value": [b"c"], "timestamp": pa.array([7], pa.int64())}))
    b.flush()
    t = PartitionReader(storage, T, 0).read(-2)
    assert t.column("value").to_pylist() == [b"c"]            # the aborted rows are hidden
    assert t.column("timestamp").cast("int64").to_pylist() == [clock.now * 1000]
    assert [h.timestamp_type for _, h in batches(storage) if not h.is_control] == [LOG_APPEND_TIME] * 2


def test_send_many_falls_back_to_send_for_what_arrow_would_change(local_root):
    storage = setup(local_root, 1)
    b = Broker(storage, clock=Clock())
    # bytearray values and a float timestamp do not go through Arrow: send judges them
    assert b.send_many(T, [bytearray(b"a"), b"b"], [b"k", None], partition=0) == [0, 0]
    with pytest.raises(ConfigError, match="timestamp must be an integer"):
        b.send_many(T, [b"c"], timestamps=[1.0], partition=0)
    b.send_many(T, [b"d"], headers=[(("h", b"1"),)], partition=0)
    b.flush()
    assert [v for _, _, v in records(storage)] == [b"a", b"b", b"d"]


def _segment_files(storage, partitions, topic=T):
    """Per partition: every live segment's (base offset, .log, .index, .timeindex) bytes and
    manifest fields other than its id."""
    out = {}
    for p in range(partitions):
        m = manifest(storage, p, topic)
        out[p] = [(s.base_offset, s.next_offset, s.record_count, s.size, s.min_timestamp,
                   s.max_timestamp, s.max_timestamp_offset, s.checksum)
                  + tuple(storage.get(s.paths(topic, p)[ext]) if storage.exists(s.paths(topic, p)[ext])
                          else None for ext in (".log", ".index", ".timeindex"))
                  for s in (m.segments if m else ())]
    return out


@pytest.mark.parametrize("commit_on_roll", [True, False])
@pytest.mark.parametrize("log_append", [False, True])
def test_send_arrow_fast_path_writes_the_bytes_of_the_batch_by_batch_path(
        local_root, monkeypatch, commit_on_roll, log_append):
    """Many batches per C call into one buffer (Broker._buffer_run), segments cut and
    rolled from arrays, base offsets set in place: the same segment files, indexes and
    manifest entries as encoding batch by batch, also mixed with send() in one flush."""
    import pyarrow as pa

    rnd = random.Random(5)
    n = 700
    table = pa.table({
        "key": pa.array([None if i % 7 == 0 else b"k%d" % (i % 5) for i in range(n)], pa.binary()),
        "value": pa.array([rnd.randbytes(rnd.randrange(0, 120)) for _ in range(n)], pa.binary()),
        "timestamp": pa.array([1_700_000_000_000 - (i * 7919) % 5000 for i in range(n)],
                              pa.int64())})
    configs = dict(segment_bytes=9000, index_interval_bytes=700)
    if log_append:
        configs["message_timestamp_type"] = "LogAppendTime"
    out = {}
    for name in ("fast", "slow"):
        storage = setup(f"{local_root}/{name}", 3, **configs)
        if name == "slow":  # batch by batch, one partition after another
            monkeypatch.setattr(Broker, "_buffer_run", lambda self, *a, **k: False)
            monkeypatch.setattr(Broker, "_buffer_groups", lambda self, st, cols, groups, now: [
                self._buffer_rows(tp, st, cols, rows, n, ts, sizes, now)
                for tp, rows, n, ts, sizes in groups])
        b = Broker(storage, rng=random.Random(2), producer_id=42, batch_size=1500,
                   clock=Clock(), commit_on_roll=commit_on_roll)
        b.send_arrow(T, table.slice(0, 400))
        b.send(T, b"between", key=b"k1", timestamp=1_700_000_000_000)
        b.send_arrow(T, table.slice(400))
        b.flush()
        b.send_arrow(T, table.slice(100, 50), partition=1)
        b.flush()
        out[name] = (_segment_files(storage, 3), _read_all(storage, 3))
        monkeypatch.undo()
    assert out["fast"] == out["slow"]
    assert sum(len(v) for v in out["fast"][1].values()) == n + 1 + 50
    assert max(len(v) for v in out["fast"][0].values()) > 2  # segments rolled


def test_send_arrow_partitions_encoded_side_by_side_then_buffered_in_order(local_root):
    """send_arrow encodes the partitions of one call concurrently, then buffers them in
    partition order: when partition 1's roll fails, partition 0 is buffered, partition 1
    up to its roll, partition 2 not at all (its sequence numbers given back), and
    sending the rest writes every row once with gapless sequences."""
    import pyarrow as pa

    from kafkastore.errors import StorageError

    setup(local_root, 3, segment_bytes=3000)
    fs, faulty = faulty_storage(local_root)
    b = Broker(fs, batch_size=500, clock=Clock(), producer_id=9)
    vals = {p: [b"%d-%04d" % (p, i) + b"v" * 60 for i in range(150)] for p in range(3)}
    rows = [(p, v) for i in range(150) for p, v in ((p, vals[p][i]) for p in range(3))]
    table = pa.table({"value": [v for _, v in rows], "partition": [p for p, _ in rows]})
    seen = []

    def second_manifest_write_of_1(op, path):
        if f"topics/{T}/1/_manifest/" in path:
            seen.append(path)
            return len(seen) >= 2
        return False

    faulty.fail_before_write(match=second_manifest_write_of_1, count=None)
    with pytest.raises(StorageError):
        b.send_arrow(T, table)
    faulty.clear()
    b.flush()
    got = {p: [v for _, _, v in records(fs, p)] for p in range(3)}
    assert got[0] == vals[0]
    assert got[1] == vals[1][:len(got[1])] and 0 < len(got[1]) < 150
    assert got[2] == []
    rest = [(1, v) for v in vals[1][len(got[1]):]] + [(2, v) for v in vals[2]]
    b.send_arrow(T, pa.table({"value": [v for _, v in rest], "partition": [p for p, _ in rest]}))
    b.flush()
    for p in range(3):
        assert [v for _, _, v in records(fs, p)] == vals[p]
        seqs = [(h.base_sequence, h.record_count) for _, h in batches(fs, p)]
        assert seqs[0][0] == 0
        assert all(s + c == t for (s, c), (t, _) in zip(seqs, seqs[1:]))  # no gap, no reuse


def test_send_arrow_fast_path_gives_back_sequences_when_a_roll_fails(local_root):
    """A roll's commit fails part way through a send_arrow: the rows before stay buffered
    (with their sequence numbers), the rest were not, and a retry writes each row once."""
    import pyarrow as pa

    from kafkastore.errors import StorageError

    setup(local_root, 1, segment_bytes=3000)
    fs, faulty = faulty_storage(local_root)
    b = Broker(fs, batch_size=500, clock=Clock(), producer_id=9)
    vals = [b"%04d" % i + b"v" * 60 for i in range(200)]
    seen = []

    def second_manifest_write(op, path):
        if "_manifest/" in path:
            seen.append(path)
            return len(seen) >= 2  # the first roll lands, the second never does
        return False

    faulty.fail_before_write(match=second_manifest_write, count=None)
    with pytest.raises(StorageError):
        b.send_arrow(T, pa.table({"value": vals}))
    faulty.clear()
    b.flush()
    got = [v for _, _, v in records(fs)]
    assert got == vals[:len(got)] and 0 < len(got) < len(vals)
    b.send_arrow(T, pa.table({"value": vals[len(got):]}))
    b.flush()
    assert [v for _, _, v in records(fs)] == vals
    seqs = [(h.base_sequence, h.record_count) for _, h in batches(fs)]
    assert all(s + c == t for (s, c), (t, _) in zip(seqs, seqs[1:]))  # no gap, no reuse
