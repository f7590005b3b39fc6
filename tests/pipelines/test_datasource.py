"""The ``kafkastore`` Spark data source: options, offsets, planning, pushdown, isolation, SQL.

One log (file://) is written once for the module; each test reads it with Spark and
compares exact ``(topic, partition, offset)`` sets with what was written.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from kafkastore import layout
from kafkastore.write.log_writer import LogWriter as Broker
from kafkastore.format.crc import crc32c
from kafkastore.errors import ConfigError, DataLossError, OffsetOutOfRangeError
from kafkastore.manifest import AdvanceLogStart, AppendSegments, ManifestStore, SegmentEntry
from kafkastore.format.record_batch import Record, encode_batch
from kafkastore.format.segment_build import SegmentBuilder
from kafkastore.storage import Storage
from kafkastore.topics.admin import create_topic
from pipelines.source.datasource import (KafkaStoreDataSource, OffsetRange, parse_options,
                                         plan_offsets, ranges_to_options, read_topic, spark_schema)

T0 = 1_700_000_000_000
ORDERS = 180            # record i of "orders": partition i % 3, offset i // 3, timestamp T0 + i s
SPARK_KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                      "timestamp:timestamp,timestampType:int>")


def _ts(i: int) -> int:
    return T0 + i * 1000


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """A root with the topics every test reads (never modified by tests)."""
    root = f"file://{tmp_path_factory.mktemp('ds')}/root"
    storage = Storage(root)
    # index.interval.bytes=1: an index entry per batch, so partitions split finely.
    create_topic(storage, "orders", 3, {"index.interval.bytes": 1})
    create_topic(storage, "orders-eu", 1)
    create_topic(storage, "payments", 2)
    broker = Broker(storage, batch_size=120)
    for i in range(ORDERS):
        headers = [("h", f"x{i}".encode())] if i % 2 else []
        broker.send("orders", f"v{i}".encode(), key=f"k{i}".encode(), headers=headers,
                    timestamp=_ts(i), partition=i % 3)
        if i == ORDERS // 2 - 1:
            broker.flush()                     # two segments per partition
    for i in range(5):
        broker.send("orders-eu", b"eu", timestamp=_ts(i), partition=0)
    for i in range(20):
        broker.send("payments", b"pay", timestamp=_ts(i), partition=i % 2)
    broker.flush()
    return root


def _orders(partitions=(0, 1, 2), lo=0, hi=ORDERS // 3):
    return {("orders", p, o) for p in partitions for o in range(lo, hi)}


def _tpo(df) -> set:
    rows = df.select("topic", "partition", "offset").collect()
    out = {(r.topic, r.partition, r.offset) for r in rows}
    assert len(out) == len(rows), "a record was read twice"
    return out


def _read(spark, root, **options):
    return read_topic(spark, root, **options)


# --------------------------------------------------------------------------- schema and contents

def test_schema_is_sparks_kafka_schema(spark, log):
    assert spark_schema().simpleString() == SPARK_KAFKA_SCHEMA
    df = _read(spark, log, topic="orders")
    assert df.schema.simpleString() == SPARK_KAFKA_SCHEMA
    with_headers = _read(spark, log, topic="orders", includeHeaders=True)
    assert with_headers.schema.simpleString() == (
        SPARK_KAFKA_SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>")


def test_reads_every_record_of_every_partition(spark, log):
    df = _read(spark, log, topic="orders")
    assert df.rdd.getNumPartitions() == 3          # one input partition per topic-partition
    rows = df.collect()
    assert {(r.topic, r.partition, r.offset) for r in rows} == _orders() and len(rows) == ORDERS
    for r in rows:
        i = r.offset * 3 + r.partition
        assert (bytes(r.key), bytes(r.value)) == (f"k{i}".encode(), f"v{i}".encode())
        assert r.timestamp == dt.datetime.fromtimestamp(_ts(i) / 1000, dt.timezone.utc).replace(tzinfo=None)
        assert r.timestampType == 0


def test_headers_on_and_off(spark, log):
    rows = _read(spark, log, topic="orders", includeHeaders=True,
                 endingOffsets={"orders": {"0": 2, "1": 0, "2": 0}}).orderBy("offset").collect()
    assert [r.headers for r in rows][0] is None                    # i = 0: no headers
    assert [(h.key, bytes(h.value)) for h in rows[1].headers] == [("h", b"x3")]
    assert "headers" not in _read(spark, log, topic="orders").columns


# --------------------------------------------------------------------------- offsets and timestamps

def test_starting_and_ending_offsets_json(spark, log):
    df = _read(spark, log, topic="orders",
               startingOffsets=json.dumps({"orders": {"0": 5, "1": -2}}),      # 2: missing -> earliest
               endingOffsets=json.dumps({"orders": {"0": 20, "2": -1}}))       # 1: missing -> latest
    assert _tpo(df) == _orders([0], 5, 20) | _orders([1, 2])
    df = _read(spark, log, topic="orders", startingOffsets="earliest", endingOffsets="latest")
    assert _tpo(df) == _orders()


def test_timestamps(spark, log):
    # Records i >= 90 are offsets >= 30 in every partition; i >= 120 are offsets >= 40.
    df = _read(spark, log, topic="orders", startingTimestamp=_ts(90), endingTimestamp=_ts(120))
    assert _tpo(df) == _orders(lo=30, hi=40)
    df = _read(spark, log, topic="orders",
               startingOffsetsByTimestamp={"orders": {"0": _ts(150)}},
               endingOffsetsByTimestamp={"orders": {"1": _ts(3)}})
    assert _tpo(df) == _orders([0], 50) | _orders([1], 0, 1) | _orders([2])
    # A timestamp after every record: Spark's strategy "error" (default) or "latest".
    with pytest.raises(Exception, match="No offset matched"):
        _read(spark, log, topic="orders", startingTimestamp=_ts(10_000)).collect()
    assert _read(spark, log, topic="orders", startingTimestamp=_ts(10_000),
                 startingOffsetsByTimestampStrategy="latest").count() == 0


def test_subscribe_and_subscribe_pattern(spark, log):
    eu = {("orders-eu", 0, o) for o in range(5)}
    pay = {("payments", p, o) for p in (0, 1) for o in range(10)}
    assert _tpo(_read(spark, log, subscribe="orders-eu, payments")) == eu | pay
    assert _tpo(_read(spark, log, subscribePattern="orders.*")) == _orders() | eu
    assert _tpo(_read(spark, log, subscribePattern="pay")) == set()      # whole-name match
    assign = _read(spark, log, assign={"payments": [1], "orders-eu": [0]})
    assert _tpo(assign) == eu | {t for t in pay if t[1] == 1}


def test_plan_offsets_and_an_exact_reread(spark, log, tmp_path):
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, "grow", 2)
    broker = Broker(storage)
    for i in range(10):
        broker.send("grow", b"a", partition=i % 2)
    broker.flush()
    ranges = plan_offsets(root, "grow", startingOffsets={"grow": {"0": 2}})
    assert ranges == [OffsetRange("grow", 0, 2, 5), OffsetRange("grow", 1, 0, 5)]
    options = ranges_to_options(ranges)
    for i in range(6):                                  # the log grows after planning
        broker.send("grow", b"b", partition=i % 2)
    broker.flush()
    again = _tpo(_read(spark, root, **options))
    assert again == {("grow", 0, o) for o in range(2, 5)} | {("grow", 1, o) for o in range(5)}
    assert plan_offsets(root, "grow")[0] == OffsetRange("grow", 0, 0, 8)


def test_offset_gaps_from_compaction(spark, tmp_path):
    """A compacted segment (offsets 2, 3, 5, 6 and 9 gone) reads without complaint."""
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, "compacted", 1, {"cleanup.policy": "compact", "index.interval.bytes": 1})
    kept = [[0, 1], [4, 7, 8]]
    builder = SegmentBuilder(0, index_interval_bytes=1)
    builder.append(encode_batch([Record(o, _ts(o), b"k%d" % o, b"v") for o in kept[0]], last_offset=3))
    builder.append(encode_batch([Record(o, _ts(o), b"k%d" % o, b"v") for o in kept[1]], last_offset=9))
    built = builder.build()
    entry = SegmentEntry(base_offset=0, next_offset=10, record_count=5, size=len(built.log),
                         min_timestamp=_ts(0), max_timestamp=_ts(8), segment_id="c0ffee",
                         writer_id=0, leader_epoch=0, checksum=crc32c(built.log),
                         index_size=len(built.index), timeindex_size=len(built.timeindex))
    for ext, data in ((".log", built.log), (".index", built.index), (".timeindex", built.timeindex)):
        storage.put(layout.segment_path("compacted", 0, 0, "c0ffee", ext), data)
    ManifestStore(storage, "compacted", 0).commit(lambda m: ([AppendSegments((entry,))], []))
    assert _tpo(_read(spark, root, topic="compacted")) == {("compacted", 0, o) for o in (0, 1, 4, 7, 8)}
    df = _read(spark, root, topic="compacted", startingOffsets={"compacted": {"0": 2}},
               endingOffsets={"compacted": {"0": 8}}, minPartitions=4)
    assert _tpo(df) == {("compacted", 0, 4), ("compacted", 0, 7)}
    assert plan_offsets(root, "compacted") == [OffsetRange("compacted", 0, 0, 10)]


# --------------------------------------------------------------------------- splitting

def test_min_partitions_splits_without_loss_or_duplicates(spark, log):
    df = _read(spark, log, topic="orders", minPartitions=12)
    assert df.rdd.getNumPartitions() >= 12
    assert _tpo(df) == _orders()
    small = _read(spark, log, topic="orders", maxBytesPerPartition=300,
                  startingOffsets={"orders": {"1": 7}})
    assert small.rdd.getNumPartitions() > 12
    assert _tpo(small) == _orders([0, 2]) | _orders([1], 7)


# --------------------------------------------------------------------------- pushdown

def _planned(root, filters, **options):
    """(filters left for Spark, planned input partitions) of a reader, without Spark."""
    ds = KafkaStoreDataSource({"root": root, "topic": "orders", **options})
    reader = ds.reader(ds.schema())
    rest = reader.pushFilters(filters)
    return rest, reader.partitions()


def test_pushdown_prunes_partitions_segments_and_ranges(log):
    from pyspark.sql.datasource import (EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan,
                                        Not)
    _, everything = _planned(log, [])
    assert len(everything) == 3

    f_part, f_off, f_null = EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 50), IsNotNull(("offset",))
    rest, parts = _planned(log, [f_part, f_off, f_null])
    assert rest == [f_null]                                   # partition and offset are exact
    ranges = [rr for p in parts for rr in p.ranges]
    assert {rr.partition for rr in ranges} == {1}
    assert {rr.base_offset for rr in ranges} == {30}          # the first segment is skipped
    assert min(rr.start_offset for rr in ranges) == 50

    in_parts = In(("partition",), (0, 2, 7))
    rest, parts = _planned(log, [in_parts, LessThan(("offset",), 3)])
    assert rest == [] and {rr.partition for p in parts for rr in p.ranges} == {0, 2}
    assert {rr.end_offset for p in parts for rr in p.ranges} == {3}

    # Timestamp >= record 150's: every partition starts at offset 50; Spark re-checks it.
    since = GreaterThanOrEqual(("timestamp",), dt.datetime.fromtimestamp(_ts(150) / 1000, dt.timezone.utc))
    rest, parts = _planned(log, [since])
    assert rest == [since]
    assert {rr.base_offset for p in parts for rr in p.ranges} == {30}
    assert min(rr.start_offset for p in parts for rr in p.ranges) == 50

    negated = Not(EqualTo(("partition",), 1))
    rest, parts = _planned(log, [negated, EqualTo(("partition",), 9)])
    assert rest == [negated] and parts == []


@pytest.mark.parametrize("where", [
    "partition = 1 AND offset >= 50",
    "partition IN (0, 2) AND offset < 7",
    "offset > 10 AND offset <= 12",
    "offset IN (3, 40) AND partition >= 1",
    "timestamp >= timestamp'2023-11-14 22:15:30' AND timestamp < timestamp'2023-11-14 22:16:00'",
    "timestamp > timestamp'2023-11-14 22:15:29.999500'",
    "timestamp > timestamp'2023-11-14 22:15:29.999500' OR partition = 0",
    "timestamp = timestamp'2023-11-14 22:15:31'",
    "partition = 7",
])
def test_pushdown_gives_the_same_rows(spark, log, where):
    pushed = _tpo(_read(spark, log, topic="orders").where(where))
    plain = _tpo(_read(spark, log, topic="orders", pushFilters=False).where(where))
    assert pushed == plain


def test_pushdown_prunes_spark_input_partitions(spark, log):
    df = _read(spark, log, topic="orders")
    assert df.where("partition = 1 AND offset >= 50").rdd.getNumPartitions() == 1
    assert df.where("partition IN (0, 2)").rdd.getNumPartitions() == 2
    assert df.where("offset >= 1000").rdd.getNumPartitions() == 1   # Spark's empty placeholder
    assert df.where("offset >= 1000").count() == 0
    # With Python pushdown off, Spark refuses readers that implement pushFilters:
    # read_topic then asks for the plain reader, and Spark filters everything itself.
    conf = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(conf, "false")
    try:
        plain = _read(spark, log, topic="orders").where("partition = 1 AND offset < 5")
        assert _tpo(plain) == _orders([1], 0, 5) and plain.rdd.getNumPartitions() == 3
    finally:
        spark.conf.set(conf, "true")


# --------------------------------------------------------------------------- data loss

def test_fail_on_data_loss(spark, tmp_path):
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, "old", 1)
    broker = Broker(storage)
    for i in range(20):
        broker.send("old", b"x", partition=0)
        if i == 9:
            broker.flush()
    broker.flush()
    ManifestStore(storage, "old", 0).commit(lambda m: ([AdvanceLogStart(10)], []))
    start = {"old": {"0": 4}}
    with pytest.raises(DataLossError, match=r"starting offset 4 .*log now starts at offset 10"):
        plan_offsets(root, "old", startingOffsets=start)
    with pytest.raises(Exception, match=r"starting offset 4 .*starts at offset 10.*failOnDataLoss"):
        _read(spark, root, topic="old", startingOffsets=start).collect()
    clamped = _read(spark, root, topic="old", startingOffsets=start, failOnDataLoss=False)
    assert _tpo(clamped) == {("old", 0, o) for o in range(10, 20)}
    # An explicit end past the high watermark is refused the same way.
    with pytest.raises(OffsetOutOfRangeError, match="ending offset 99"):
        plan_offsets(root, "old", endingOffsets={"old": {"0": 99}})
    assert plan_offsets(root, "old", endingOffsets={"old": {"0": 99}}, failOnDataLoss=False) == [
        OffsetRange("old", 0, 10, 20)]
    with pytest.raises(ConfigError, match="Beginning offset 15 is after the ending offset 12"):
        plan_offsets(root, "old", startingOffsets={"old": {"0": 15}}, endingOffsets={"old": {"0": 12}})


# --------------------------------------------------------------------------- transactions

def test_read_committed_and_read_uncommitted(spark, tmp_path):
    root = f"file://{tmp_path}/root"
    storage = Storage(root)
    create_topic(storage, "txn", 1)
    create_topic(storage, "open", 1)
    broker = Broker(storage)
    for i in range(3):
        broker.send("txn", b"plain", partition=0)                       # 0-2
    broker.flush()
    broker.begin_transaction()
    broker.send("txn", b"committed", partition=0)                       # 3-4, marker 5
    broker.send("txn", b"committed", partition=0)
    broker.commit_transaction()
    broker.begin_transaction()
    broker.send("txn", b"aborted", partition=0)                         # 6-7, marker 8
    broker.send("txn", b"aborted", partition=0)
    broker.abort_transaction()
    broker.send("txn", b"plain", partition=0)                           # 9
    broker.flush()

    committed = _read(spark, root, topic="txn")
    assert _tpo(committed) == {("txn", 0, o) for o in (0, 1, 2, 3, 4, 9)}
    assert {bytes(r.value) for r in committed.collect()} == {b"plain", b"committed"}
    uncommitted = _read(spark, root, topic="txn", isolationLevel="read_uncommitted")
    assert _tpo(uncommitted) == {("txn", 0, o) for o in (0, 1, 2, 3, 4, 6, 7, 9)}

    # An open transaction: read_committed stops at the last stable offset.
    opener = Broker(storage)
    opener.send("open", b"a", partition=0)                               # 0
    opener.flush()
    opener.begin_transaction()
    opener.send("open", b"t", partition=0)                               # 1, still open
    opener.flush()
    assert plan_offsets(root, "open") == [OffsetRange("open", 0, 0, 1)]
    assert _tpo(_read(spark, root, topic="open")) == {("open", 0, 0)}
    assert _tpo(_read(spark, root, topic="open", **{"kafka.isolation.level": "read_uncommitted"})) == {
        ("open", 0, 0), ("open", 0, 1)}
    with pytest.raises(OffsetOutOfRangeError, match="last stable offset is 1"):
        plan_offsets(root, "open", endingOffsets={"open": {"0": 2}})


# --------------------------------------------------------------------------- SQL, S3

def test_sql_view(spark, log):
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW orders_view USING kafkastore "
              f"OPTIONS (root '{log}', topic 'orders', startingOffsets 'earliest')")
    counts = spark.sql("SELECT partition, count(*) AS n, max(offset) AS last FROM orders_view "
                       "GROUP BY partition ORDER BY partition").collect()
    assert [(r.partition, r.n, r.last) for r in counts] == [(0, 60, 59), (1, 60, 59), (2, 60, 59)]
    keys = spark.sql("SELECT CAST(key AS STRING) AS k FROM orders_view WHERE partition = 2 "
                     "AND offset = 4").collect()
    assert [r.k for r in keys] == ["k14"]
    # The root may also come as load()'s path, as for file sources.
    assert spark.read.format("kafkastore").option("topic", "orders-eu").load(log).count() == 5


def test_s3_root(spark, s3_endpoint):
    root = "s3://kafkastore-test/datasource"
    storage = Storage(root)
    create_topic(storage, "s3topic", 2)
    broker = Broker(storage)
    for i in range(8):
        broker.send("s3topic", b"s3", partition=i % 2, timestamp=_ts(i))
    broker.flush()
    # The JVM (and so every Python worker) may predate the moto fixture's environment:
    # hand the endpoint and credentials over as storage options.
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    df = _read(spark, root, topic="s3topic", storage_options=options,
               startingOffsets={"s3topic": {"1": 2}})
    assert _tpo(df) == {("s3topic", 0, o) for o in range(4)} | {("s3topic", 1, o) for o in (2, 3)}
    spark_view = (spark.read.format("kafkastore").option("root", root).option("topic", "s3topic")
                  .option("storage.endpoint_url", s3_endpoint).option("storage.key", "testing")
                  .option("storage.secret", "testing").load())
    assert spark_view.where("timestamp >= timestamp'2023-11-14 22:13:26'").count() == 2


# --------------------------------------------------------------------------- bad options

@pytest.mark.parametrize("options, message", [
    ({"topic": "t"}, r"option root is required.*s3://bucket"),
    ({"root": "file:///x"}, r"exactly one of the options topic, subscribe, subscribePattern, assign"),
    ({"root": "file:///x", "topic": "t", "subscribe": "u"}, r"got topic, subscribe"),
    ({"root": "file:///x", "subscribe": " , "}, r"comma-separated list of topics like 'orders,payments'"),
    ({"root": "file:///x", "subscribePattern": "("}, r"regular expression"),
    ({"root": "file:///x", "assign": "[1]"}, r'expected JSON like \{"topicA":\[0,1\]'),
    ({"root": "file:///x", "topic": "t", "startingOffsets": "{bad"},
     r'startingOffsets: expected "earliest", or JSON like \{"topicA":\{"0":23,"1":-2\}'),
    ({"root": "file:///x", "topic": "t", "startingOffsets": '{"t":{"0":"x"}}'}, r'JSON like \{"topicA"'),
    ({"root": "file:///x", "topic": "t", "startingOffsets": "latest"},
     r"starting offset can't be latest for batch queries"),
    ({"root": "file:///x", "topic": "t", "startingOffsets": '{"t":{"0":-1}}'}, r"t-0 can't be -1 \(latest\)"),
    ({"root": "file:///x", "topic": "t", "endingOffsets": "earliest"},
     r"ending offset can't be earliest"),
    ({"root": "file:///x", "topic": "t", "endingOffsets": '{"t":{"0":-2}}'}, r"can't be -2 \(earliest\)"),
    ({"root": "file:///x", "topic": "t", "endingOffsets": '{"u":{"0":5}}'}, r"topic\(s\) u that this read"),
    ({"root": "file:///x", "topic": "t", "startingTimestamp": "yesterday"}, r"a single long value"),
    ({"root": "file:///x", "topic": "t", "startingOffsetsByTimestamp": "{}x"}, r'\{"topicA":\{"0":1700000000000'),
    ({"root": "file:///x", "topic": "t", "minPartitions": "0"}, r"minPartitions must be a positive integer"),
    ({"root": "file:///x", "topic": "t", "maxBytesPerPartition": "lots"}, r"like 134217728 or 128m"),
    ({"root": "file:///x", "topic": "t", "includeHeaders": "yes"}, r"includeHeaders: expected true or false"),
    ({"root": "file:///x", "topic": "t", "failOnDataLoss": "1"}, r"failOnDataLoss: expected true or false"),
    ({"root": "file:///x", "topic": "t", "isolationLevel": "dirty"}, r"read_committed or read_uncommitted"),
    ({"root": "file:///x", "topic": "t", "storageOptions": "[]"}, r"storageOptions: expected a JSON object"),
    ({"root": "file:///x", "topic": "t", "startingOffset": "earliest"}, r"unknown option 'startingOffset'"),
    ({"root": "file:///x", "topic": "bad/name"}, r"option topic: invalid topic name"),
])
def test_bad_options_show_the_expected_shape(options, message):
    with pytest.raises(ConfigError, match=message):
        parse_options(options)


def test_options_parse(tmp_path):
    opts = parse_options({"ROOT": "file:///x", "Subscribe": "a,b,a", "storage.anon": "true",
                          "storage.default_block_size": "1024", "kafka.bootstrap.servers": "ignored:9092",
                          "maxBytesPerPartition": "2m", "maxOffsetsPerTrigger": "5"})
    assert opts.subscription == ("topics", ("a", "b"))
    assert opts.storage_options == {"anon": True, "default_block_size": 1024}
    assert opts.max_bytes_per_partition == 2 << 20
    assert (opts.include_headers, opts.fail_on_data_loss, opts.isolation) == (False, True, "read_committed")


def test_bad_options_through_spark(spark, log):
    with pytest.raises(Exception, match="ending offset can't be earliest"):
        (spark.read.format("kafkastore").option("root", log).option("topic", "orders")
         .option("endingOffsets", "earliest").load())
    with pytest.raises(ConfigError, match="memory://"):
        read_topic(spark, "memory://somewhere", "orders")
    with pytest.raises(Exception, match="partitions 0..2; the options name partition"):
        _read(spark, log, topic="orders", startingOffsets={"orders": {"5": 1}}).collect()
