"""Streaming reads: ``spark.readStream.format("kafkastore")`` (pipelines.source.stream).

The planner's decisions (starting offsets, limits, data loss, isolation, new partitions)
are tested on the stream reader directly, without Spark; a few real Spark queries with
``Trigger.AvailableNow`` and a checkpoint show restarts neither skip nor repeat a record,
and exactly-once into an Iceberg table through ``foreachBatch``.
"""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.errors import ConfigError, DataLossError, UnknownTopicError
from kafkastore.manifest import AdvanceLogStart, ManifestStore
from kafkastore.storage import Storage
from kafkastore.topics.admin import alter_topic, create_topic
from pipelines.source.stream import (KafkaStoreStreamReader, fair_shares, parse_stream_options)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

T0 = 1_700_000_000_000


def _produce(storage, topic, n, partitions, start=0, value=b"v" * 20):
    """``n`` records round robin over ``partitions``; record i has timestamp T0 + i s."""
    broker = Broker(storage, batch_size=1)
    for i in range(start, start + n):
        broker.send(topic, value, key=f"k{i}".encode(), timestamp=T0 + i * 1000,
                    partition=i % partitions)
    broker.flush()


def _reader(root, **options) -> KafkaStoreStreamReader:
    opts = {"root": root, **{k: str(v) for k, v in options.items()}}
    return KafkaStoreStreamReader(parse_stream_options(opts), out=io.StringIO())


def _count(start: dict, end: dict) -> dict:
    return {(t, int(p)): n - start.get(t, {}).get(p, 0) for t, parts in end.items()
            for p, n in parts.items()}


@pytest.fixture
def root(tmp_path):
    url = f"file://{tmp_path}/root"
    storage = Storage(url)
    create_topic(storage, "orders", 3)
    _produce(storage, "orders", 30, 3)
    return url


# --------------------------------------------------------------------------- options


def test_streaming_options_reuse_the_batch_parser_and_refuse_an_end(root):
    opts = parse_stream_options({"root": root, "topic": "orders", "maxOffsetsPerTrigger": "7",
                                 "maxBytesPerTrigger": "1k"})
    assert (opts.max_offsets_per_trigger, opts.max_bytes_per_trigger) == (7, 1024)
    with pytest.raises(ConfigError, match="endingOffsets is not valid in streaming"):
        parse_stream_options({"root": root, "topic": "orders", "endingOffsets": "latest"})
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        parse_stream_options({"root": root, "topic": "orders", "maxOffsetsPerTrigger": "0"})
    with pytest.raises(ConfigError, match="unknown option"):   # the batch parser's checks
        parse_stream_options({"root": root, "topic": "orders", "bogus": "1"})


def test_starting_offsets_are_resolved_once(root):
    storage = Storage(root)
    latest = _reader(root, topic="orders", startingOffsets="latest")
    assert latest.initialOffset() == {"orders": {"0": 10, "1": 10, "2": 10}}
    mixed = _reader(root, topic="orders", startingOffsets='{"orders": {"0": 3, "1": -1}}')
    assert mixed.initialOffset() == {"orders": {"0": 3, "1": 10, "2": 0}}
    by_time = _reader(root, topic="orders", startingTimestamp=T0 + 15_000)   # record 15
    assert by_time.initialOffset() == {"orders": {"0": 5, "1": 5, "2": 5}}   # 15, 16, 17
    _produce(storage, "orders", 9, 3, start=30)
    assert latest.initialOffset() == {"orders": {"0": 10, "1": 10, "2": 10}}   # not again
    assert _reader(root, topic="orders").initialOffset() == {"orders": {"0": 0, "1": 0, "2": 0}}


# --------------------------------------------------------------------------- limits


def test_max_offsets_per_trigger_is_split_fairly(root):
    storage = Storage(root)
    create_topic(storage, "small", 1)
    _produce(storage, "small", 2, 1)
    r = _reader(root, subscribe="orders,small", maxOffsetsPerTrigger=9)
    assert r.getDefaultReadLimit() == ReadMaxRows(9)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    # 9 over four partitions: "small" has 2, the other 7 go to the three "orders" ones.
    assert _count(start, end) == {("orders", 0): 3, ("orders", 1): 2, ("orders", 2): 2,
                                  ("small", 0): 2}
    assert r.latestOffset(start, ReadAllAvailable()) == {"orders": {"0": 10, "1": 10, "2": 10},
                                                         "small": {"0": 2}}


def test_max_bytes_per_trigger_limits_each_batch(root):
    r = _reader(root, topic="orders", maxBytesPerTrigger=1)
    assert r.getDefaultReadLimit() == ReadMaxBytes(1)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert sum(_count(start, end).values()) == 1            # below one record: still advances
    r = _reader(root, topic="orders")
    whole = r.latestOffset(start, ReadAllAvailable())
    segment_bytes = sum(s.size for p in range(3)
                        for s in ManifestStore(Storage(root), "orders", p).latest().segments)
    end = r.latestOffset(start, ReadMaxBytes(segment_bytes // 3))
    counts = _count(start, end)
    assert 9 <= sum(counts.values()) <= 10                   # about a third of 30 records
    assert set(counts.values()) <= {3, 4}                    # shared over the partitions
    assert all(end["orders"][p] <= whole["orders"][p] for p in whole["orders"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 6), st.integers(0, 50), max_size=6), st.integers(0, 120))
def test_fair_shares_are_max_min_fair(backlog, budget):
    backlog = {("t", p): n for p, n in backlog.items()}
    alloc = fair_shares(backlog, budget)
    assert all(0 <= alloc[tp] <= backlog[tp] for tp in backlog)
    assert sum(alloc.values()) == min(budget, sum(backlog.values()))
    starved = [tp for tp in backlog if alloc[tp] < backlog[tp]]
    for tp in starved:   # a partition left wanting got at least as much as anyone, minus one
        assert all(alloc[tp] >= alloc[other] - 1 for other in backlog)


# --------------------------------------------------------------------------- log changes


def test_data_loss_fails_naming_the_range_or_is_skipped(root):
    r = _reader(root, topic="orders")
    start = r.initialOffset()
    ManifestStore(Storage(root), "orders", 1).commit(lambda m: ([AdvanceLogStart(4)], []))
    with pytest.raises(DataLossError, match=r"orders-1.*offsets \[0, 4\) were deleted"):
        r.latestOffset(start, ReadAllAvailable())
    with pytest.raises(DataLossError, match=r"orders-1"):
        r.partitions(start, {"orders": {"0": 10, "1": 10, "2": 10}})
    lenient = _reader(root, topic="orders", failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    parts = lenient.partitions(start, end)
    read = {(rr.partition, rr.start_offset) for p in parts for rr in p.ranges}
    assert (1, 4) in read and (0, 0) in read                 # partition 1 from its log start
    assert not any(p == 1 and o < 4 for p, o in read)


def test_new_partitions_and_pattern_topics_are_read_from_offset_zero(root):
    storage = Storage(root)
    r = _reader(root, subscribePattern="orders.*")
    start = r.initialOffset()
    alter_topic(storage, "orders", partitions=4)
    create_topic(storage, "orders-eu", 1)
    _produce(storage, "orders", 4, 4, start=100)      # one record lands in the new partition 3
    _produce(storage, "orders-eu", 2, 1)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"orders": {"0": 11, "1": 11, "2": 11, "3": 1}, "orders-eu": {"0": 2}}
    ranges = {(rr.topic, rr.partition, rr.start_offset, rr.end_offset)
              for p in r.partitions(start, end) for rr in p.ranges}
    assert ("orders", 3, 0, 1) in ranges and ("orders-eu", 0, 0, 2) in ranges


def test_a_subscribed_topic_that_does_not_exist_yet_is_waited_for(root):
    """subscribe (and topic) of a missing topic plan empty batches, as Spark's Kafka source
    does; once the topic is created its records are read from offset 0."""
    storage = Storage(root)
    for option in ("subscribe", "topic"):
        r = _reader(root, **{option: "later"})
        start = r.initialOffset()
        assert start == {} and r.latestOffset(start, ReadAllAvailable()) == {}
    r = _reader(root, subscribe="orders,later")
    start = r.initialOffset()
    assert set(start) == {"orders"}
    create_topic(storage, "later", 2)
    _produce(storage, "later", 4, 2)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end["later"] == {"0": 2, "1": 2}


def test_assign_of_a_missing_topic_is_a_typed_error(root):
    r = _reader(root, assign='{"later": [0]}')
    with pytest.raises(UnknownTopicError, match="assign names topic.*later.*subscribe"):
        r.initialOffset()


def test_read_committed_stops_at_the_last_stable_offset(tmp_path):
    url = f"file://{tmp_path}/root"
    storage = Storage(url)
    create_topic(storage, "txn", 1)
    plain = Broker(storage)
    for _ in range(3):
        plain.send("txn", b"plain", partition=0)          # 0-2
    plain.flush()
    opener = Broker(storage)
    opener.begin_transaction()
    opener.send("txn", b"open", partition=0)              # 3: in an open transaction
    opener.flush()
    plain.send("txn", b"later", partition=0)              # 4
    plain.flush()
    r = _reader(url, topic="txn")
    assert r.latestOffset(r.initialOffset(), ReadAllAvailable()) == {"txn": {"0": 3}}
    dirty = _reader(url, topic="txn", isolationLevel="read_uncommitted")
    assert dirty.latestOffset(dirty.initialOffset(), ReadAllAvailable()) == {"txn": {"0": 5}}
    opener.commit_transaction()
    assert r.latestOffset({"txn": {"0": 3}}, ReadAllAvailable()) == {"txn": {"0": 6}}


def test_available_now_stops_at_the_end_seen_when_it_started(root):
    r = _reader(root, topic="orders", maxOffsetsPerTrigger=12)
    r.prepareForTriggerAvailableNow()
    _produce(Storage(root), "orders", 30, 3, start=30)
    offsets, batches = r.initialOffset(), 0
    while True:
        end = r.latestOffset(offsets, r.getDefaultReadLimit())
        if end == offsets:
            break
        assert sum(_count(offsets, end).values()) <= 12
        offsets, batches = end, batches + 1
    assert offsets == {"orders": {"0": 10, "1": 10, "2": 10}} and batches == 3


def test_progress_line_per_batch(root):
    r = _reader(root, topic="orders")
    start = r.initialOffset()
    r.partitions(start, r.latestOffset(start, ReadAllAvailable()))
    line = r._out.getvalue()
    assert "stream orders: 30 offsets" in line and "orders-0 [0, 10)" in line
    assert "behind: orders-0=0 orders-1=0 orders-2=0" in line


# --------------------------------------------------------------------------- Spark queries


def _run(spark, root, checkpoint, sink, **options):
    """One AvailableNow query over ``root`` with ``sink`` as foreachBatch; returns it."""
    reader = spark.readStream.format("kafkastore").option("root", root)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    q = (reader.load().writeStream.trigger(availableNow=True)
         .option("checkpointLocation", checkpoint).foreachBatch(sink).start())
    q.awaitTermination(600)
    return q


class _Collect:
    """foreachBatch collecting (topic, partition, offset) per batch; ``fail_at``: raise on
    that batch id once, before recording it (a crash between batches)."""

    def __init__(self, fail_at: int | None = None):
        self.batches: dict[int, list] = {}
        self.attempts: list[tuple[int, tuple]] = []
        self.fail_at = fail_at

    def __call__(self, df, batch_id):
        rows = [(r.topic, r.partition, r.offset) for r in
                df.select("topic", "partition", "offset").collect()]
        self.attempts.append((batch_id, tuple(sorted(rows))))
        if batch_id == self.fail_at:
            self.fail_at = None
            raise RuntimeError("crash inside foreachBatch")
        self.batches[batch_id] = rows

    def records(self) -> list:
        return [r for b in self.batches.values() for r in b]


def test_available_now_restarts_neither_skip_nor_repeat(spark, root, tmp_path):
    storage = Storage(root)
    ckpt = str(tmp_path / "ckpt")
    first = _Collect()
    _run(spark, root, ckpt, first, subscribePattern="orders.*", maxOffsetsPerTrigger=12)
    assert sorted(first.records()) == sorted({("orders", p, o) for p in range(3) for o in range(10)})
    assert len(first.batches) == 3 and all(len(b) <= 12 for b in first.batches.values())

    _produce(storage, "orders", 9, 3, start=30)              # 10-12 of each partition
    alter_topic(storage, "orders", partitions=4)
    _produce(storage, "orders", 4, 4, start=200)             # 13 of 0-2, 0 of the new 3
    create_topic(storage, "orders-eu", 1)
    _produce(storage, "orders-eu", 3, 1)
    second = _Collect()
    _run(spark, root, ckpt, second, subscribePattern="orders.*", maxOffsetsPerTrigger=12)
    want = ({("orders", p, o) for p in range(3) for o in range(10, 14)} | {("orders", 3, 0)}
            | {("orders-eu", 0, o) for o in range(3)})
    assert sorted(second.records()) == sorted(want)
    assert min(second.batches) == 3                           # batch ids go on


def test_a_query_killed_between_batches_resumes_exactly(spark, root, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    crashing = _Collect(fail_at=1)
    with pytest.raises(Exception, match="crash inside foreachBatch"):
        _run(spark, root, ckpt, crashing, topic="orders", maxOffsetsPerTrigger=10)
    assert [b for b, _ in crashing.attempts] == [0, 1]
    again = _Collect()
    _run(spark, root, ckpt, again, topic="orders", maxOffsetsPerTrigger=10)
    assert again.attempts[0] == crashing.attempts[1]          # the same batch, same offsets
    seen = crashing.records() + again.records()
    assert sorted(seen) == sorted({("orders", p, o) for p in range(3) for o in range(10)})


def test_foreach_batch_into_iceberg_is_exactly_once_across_a_crash(spark, root, tmp_path):
    from pipelines.warehouse.catalog import Warehouse
    from pipelines.warehouse.reads import read_arrow
    from pipelines.warehouse.offsets import committed_offsets
    from pipelines.source.stream import table_sink

    wh = Warehouse(f"file://{tmp_path}/wh")
    sink = table_sink(wh, "orders_raw")
    crashed = []

    def crash_after_commit(df, batch_id):
        sink(df, batch_id)
        if batch_id == 1 and not crashed:   # the table has the batch, Spark's log does not
            crashed.append(batch_id)
            raise RuntimeError("crash after the table's commit")

    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(Exception, match="crash after the table's commit"):
        _run(spark, root, ckpt, crash_after_commit, topic="orders", maxOffsetsPerTrigger=10,
             includeHeaders="true")
    _produce(Storage(root), "orders", 6, 3, start=30)
    _run(spark, root, ckpt, sink, topic="orders", maxOffsetsPerTrigger=10, includeHeaders="true")
    tbl = wh.load_table("orders_raw")
    rows = read_arrow(tbl).select(["topic", "partition", "offset"]).to_pylist()
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    assert got == sorted({("orders", p, o) for p in range(3) for o in range(12)})
    assert committed_offsets(tbl) == {("orders", p): 12 for p in range(3)}


def test_a_query_started_before_its_topic_exists_reads_it_once_created(spark, tmp_path):
    """A continuous query subscribed to a topic that does not exist runs empty batches;
    the topic is created and written to, and the running query delivers the records."""
    import time

    url = f"file://{tmp_path}/root"
    storage = Storage(url)
    create_topic(storage, "other", 1)
    got = _Collect()
    q = (spark.readStream.format("kafkastore").option("root", url).option("subscribe", "later")
         .load().writeStream.trigger(processingTime="200 milliseconds")
         .option("checkpointLocation", str(tmp_path / "ckpt")).foreachBatch(got).start())
    try:
        for _ in range(600):   # the query is up and planning (no data yet)
            if q.lastProgress is not None or q.exception() is not None:
                break
            time.sleep(0.1)
        assert q.exception() is None and q.isActive
        create_topic(storage, "later", 2)
        _produce(storage, "later", 6, 2)
        for _ in range(1200):
            if len(got.records()) >= 6 or q.exception() is not None:
                break
            time.sleep(0.1)
    finally:
        q.stop()
    assert q.exception() is None
    assert sorted(got.records()) == sorted(("later", i % 2, i // 2) for i in range(6))
