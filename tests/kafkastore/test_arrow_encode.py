"""kafkastore.format.arrow_encode and the C records encoder behind record_batch.encode_batch:
byte-identical to the pure encoder, round trips through kafkastore's own decoders and
through kafka-python's and aiokafka's (Kafka-exact)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format import arrow_encode as ae
from kafkastore.format import record_batch as rb
from kafkastore.format.arrow_decode import HEADERS_TYPE, decode_to_arrow
from kafkastore.format.compression import Compression
from kafkastore.errors import ConfigError
from kafkastore.format.partitioner import murmur2
from kafkastore.format.record_batch import Record, decode_batch, encode_batch

NATIVE = ae.NATIVE_AVAILABLE and rb._native_encode_records is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="kafkastore.format._native is not built")
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]

blob = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=8), blob)
record_fields = st.tuples(st.integers(1, 3),                    # offset gap
                          st.integers(0, 1 << 42),              # timestamp
                          blob, blob, st.lists(header, max_size=3))


def records_of(fields, start=0):
    out, off = [], start
    for gap, ts, k, v, hs in fields:
        off += gap
        out.append(Record(off, ts, k, v, tuple(hs)))
    return out


def table_of(records):
    return pa.table({
        "key": pa.array([r.key for r in records], pa.binary()),
        "value": pa.array([r.value for r in records], pa.binary()),
        "timestamp": pa.array([r.timestamp for r in records], pa.int64()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers] or None
                             for r in records], HEADERS_TYPE),
    })


def as_tuples(records):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@needs_native
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(record_fields, min_size=1, max_size=12),
       codec=st.sampled_from(CODECS), log_append=st.booleans(), horizon=st.booleans())
def test_native_records_encoder_is_byte_identical(fields, codec, log_append, horizon):
    records = records_of(fields)
    kw = dict(compression=codec, timestamp_type=int(log_append),
              max_timestamp=99 if log_append else None,
              delete_horizon_ms=12345 if horizon else None,
              base_offset=0, last_offset=records[-1].offset + 2)
    body_native = rb._native_encode_records(records, kw["base_offset"], 7)
    body_pure = rb.encode_records_pure(records, kw["base_offset"], 7)
    assert bytes(body_native[0]) == bytes(body_pure[0]) and body_native[1] == body_pure[1]
    # the broker's buffered tuples take the same path
    assert rb._native_encode_records(as_tuples(records), 0, 7)[0] == body_native[0]
    data = encode_batch(records, **kw)
    if codec == Compression.NONE:
        rows = ae.prepare(table_of(records))
        offsets = np.array([r.offset for r in records], np.int64)
        assert ae.encode_rows_native(rows, 0, rows.n, offsets=offsets, **kw) == data
        assert ae.encode_rows_pure(rows, 0, rows.n, offsets=offsets, **kw) == data
    header, decoded = decode_batch(data)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == \
        [(r.offset, r.key, r.value, r.headers) for r in records]


@needs_native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(record_fields, min_size=1, max_size=30), codec=st.sampled_from(CODECS),
       data=st.data())
def test_encode_rows_native_and_pure_identical_on_slices(fields, codec, data):
    records = records_of(fields, start=100)
    rows = ae.prepare(table_of(records).slice(0))
    start = data.draw(st.integers(0, len(records) - 1))
    stop = data.draw(st.integers(start + 1, len(records)))
    offsets = np.array([r.offset for r in records[start:stop]], np.int64)
    kw = dict(offsets=offsets, compression=codec, producer_id=5, producer_epoch=1,
              base_sequence=3, transactional=True)
    native = ae.encode_rows_native(rows, start, stop, **kw)
    assert native == ae.encode_rows_pure(rows, start, stop, **kw)
    assert native == encode_batch(records[start:stop], compression=codec, producer_id=5,
                                  producer_epoch=1, base_sequence=3, transactional=True)
    # and kafkastore's Arrow decoder gives the rows back
    out = decode_to_arrow(native, topic="t", partition=0)
    assert out.column("offset").to_pylist() == list(offsets)
    assert out.column("key").to_pylist() == [r.key for r in records[start:stop]]
    assert out.column("value").to_pylist() == [r.value for r in records[start:stop]]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("impl", ["native", "pure"])
def test_kafka_clients_decode_what_encode_rows_writes(codec, impl):
    if impl == "native" and not NATIVE:
        pytest.skip("kafkastore.format._native is not built")
    from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
    from kafka.record.default_records import DefaultRecordBatch as KpBatch

    records = [Record(i, 1_700_000_000_000 + i, None if i % 5 == 0 else b"k%d" % i,
                      None if i % 7 == 3 else b"v" * i, (("h", b"x"), ("n", None)) if i % 2 else ())
               for i in range(50)]
    rows = ae.prepare(table_of(records))
    encode = ae.encode_rows_native if impl == "native" else ae.encode_rows_pure
    data = encode(rows, 0, 50, offsets=np.arange(50), compression=codec)
    for cls in (KpBatch, AioBatch):
        got = [(m.offset, m.timestamp, m.key, m.value, [tuple(h) for h in m.headers])
               for m in cls(bytearray(data))]
        assert got == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


@needs_native
def test_native_hands_errors_to_the_pure_encoder():
    with pytest.raises(ConfigError, match="must increase"):
        encode_batch([Record(5, 0), Record(5, 0)])
    with pytest.raises(ConfigError, match="too far"):
        encode_batch([Record(0, -(1 << 63)), Record(1, (1 << 63) - 1)])
    rows = ae.prepare(pa.table({"value": pa.array([b"a", b"b"])}))
    with pytest.raises(ConfigError, match="must increase"):
        ae.encode_rows_native(rows, 0, 2, offsets=[3, 3], timestamps=[0, 0])
    with pytest.raises(ConfigError, match="out of range"):   # the C header hands it back
        ae.encode_rows_native(rows, 0, 2, offsets=[0, 1], timestamps=[0, 0], producer_epoch=1 << 20)
    # unusual field types go to the pure encoder and behave as before
    assert encode_batch([Record(0, 0, bytearray(b"k"), memoryview(b"v"), [("a", b"b")])]) == \
        encode_batch([Record(0, 0, b"k", b"v", (("a", b"b"),))])


def test_prepare_accepts_strings_json_pairs_and_timestamp_types():
    t = pa.table({
        "key": pa.array(["a", None]),
        "value": pa.array(["x", "yy"], pa.large_string()),
        "timestamp": pa.array([1000, 2000], pa.timestamp("ms")),
        "headers": pa.array([[["h", "v"]], None], pa.list_(pa.list_(pa.string()))),
    })
    rows = ae.prepare(t)
    data = ae.encode_rows(rows, 0, 2, offsets=[0, 1])
    assert data == encode_batch([Record(0, 1000, b"a", b"x", (("h", b"v"),)),
                                 Record(1, 2000, None, b"yy")])
    with pytest.raises(ConfigError, match="value"):
        ae.prepare(pa.table({"key": pa.array([b"a"])}))
    with pytest.raises(ConfigError, match="pair"):
        ae.prepare(pa.table({"value": ["x"], "headers": pa.array([[["a", "b", "c"]]])}))


def test_murmur2_column_matches_kafka():
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"hello world", None, bytes(range(256))]
    col = ae._binary(pa.array(keys, pa.binary()), "key")
    got = ae.murmur2_column(col, len(keys))
    assert list(got) == [0 if k is None else murmur2(k) for k in keys]


@pytest.mark.parametrize("impl", ["native", "pure"])
def test_encode_rows_gathers_rows_without_a_copy(impl):
    if impl == "native" and not NATIVE:
        pytest.skip("kafkastore.format._native is not built")
    records = [Record(i, 1000 + i, b"k%d" % i, b"v" * i, (("h", b"%d" % i),) if i % 3 else ())
               for i in range(20)]
    cols = ae.prepare(table_of(records))
    rows = np.array([1, 4, 5, 11, 19], np.int64)
    encode = ae.encode_rows_native if impl == "native" else ae.encode_rows_pure
    got = encode(cols, 1, 4, rows=rows, offsets=[10, 11, 12])
    want = encode_batch([Record(10 + j, r.timestamp, r.key, r.value, r.headers)
                         for j, r in enumerate(records[i] for i in rows[1:4])])
    assert got == want


# -- many batches in one call (Broker.send_arrow's fast path) --------------------------

def _batches_kw(draw_rows, records, log_append, txn, seq=0x7FFFFFFE):
    n = len(records) if draw_rows is None else len(draw_rows)
    return dict(offsets=np.arange(100, 100 + n, dtype=np.int64),
                timestamps=np.array([records[i].timestamp for i in
                                     (range(n) if draw_rows is None else draw_rows)], np.int64),
                rows=draw_rows, timestamp_type=int(log_append),
                max_timestamp=(1 << 41) if log_append else None, producer_id=77,
                producer_epoch=3, base_sequence=seq, partition_leader_epoch=5,
                transactional=txn)


@pytest.mark.parametrize("impl", ["native", "pure"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(record_fields, min_size=1, max_size=30), limit=st.integers(1, 400),
       log_append=st.booleans(), txn=st.booleans(), seq=st.sampled_from([-1, 0, 0x7FFFFFFE]),
       data=st.data())
def test_encode_batches_equal_per_batch_encode_and_concatenation(impl, fields, limit, log_append,
                                                                txn, seq, data):
    """Each batch of encode_batches is byte for byte encode_rows (pure) of its rows, cut as
    batch_cuts says; positions, sequences and timestamps agree; both paths."""
    if impl == "native" and not NATIVE:
        pytest.skip("kafkastore.format._native is not built")
    records = records_of(fields)
    cols = ae.prepare(table_of(records))
    rows = data.draw(st.none() | st.lists(st.integers(0, len(records) - 1), min_size=1,
                                          max_size=30).map(lambda r: np.array(r, np.int64)))
    n = len(records) if rows is None else len(rows)
    sizes = np.array(data.draw(st.lists(st.integers(21, 200), min_size=n, max_size=n)), np.int64)
    kw = _batches_kw(rows, records, log_append, txn, seq)
    enc = (ae.encode_batches_native if impl == "native" else ae.encode_batches_pure)(
        cols, sizes, limit, **kw)
    assert enc is not None
    cuts = ae.batch_cuts(sizes, limit)
    assert enc.cuts.tolist() == cuts.tolist()
    expected = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        expected.append(ae.encode_rows_pure(
            cols, a, b, offsets=kw["offsets"][a:b], timestamps=kw["timestamps"][a:b], rows=rows,
            timestamp_type=kw["timestamp_type"], max_timestamp=kw["max_timestamp"],
            producer_id=77, producer_epoch=3,
            base_sequence=(seq + a) & 0x7FFFFFFF if seq >= 0 else seq,
            partition_leader_epoch=5, transactional=txn))
        assert enc.min_timestamps[len(expected) - 1] == kw["timestamps"][a:b].min()
    assert bytes(enc.data) == b"".join(expected)
    assert enc.positions.tolist() == np.cumsum([0] + [len(e) for e in expected]).tolist()
    for pos, e, mx in zip(enc.positions, expected, enc.max_timestamps):
        header = rb.parse_header(e)
        assert header.max_timestamp == mx
        _, decoded = decode_batch(bytes(enc.data), int(pos))  # CRC checked
        assert len(decoded) == header.record_count


@needs_native
def test_encode_batches_native_declines_what_the_pure_encoder_must_judge():
    records = [Record(0, 0, b"k", b"v", ()), Record(1, 1 << 62, b"k", b"v", ())]
    cols = ae.prepare(table_of(records))
    kw = dict(offsets=np.array([0, 1], np.int64),
              timestamps=np.array([-(1 << 62), 1 << 62], np.int64))  # delta beyond int64
    assert ae.encode_batches_native(cols, np.array([30, 30], np.int64), 1000, **kw) is None
    with pytest.raises(ConfigError):
        ae.encode_batches(cols, np.array([30], np.int64), 1000, **kw)  # one size for two rows


@needs_native
def test_encode_batches_native_buffer_is_writable():
    cols = ae.prepare(table_of([Record(0, 5, b"k", b"v", ())]))
    enc = ae.encode_batches_native(cols, np.array([30], np.int64), 1000,
                                   offsets=np.array([0], np.int64),
                                   timestamps=np.array([5], np.int64))
    view = memoryview(enc.data)
    assert not view.readonly
    view[0:8] = (42).to_bytes(8, "big")
    assert rb.parse_header(bytes(enc.data)).base_offset == 42
    decode_batch(bytes(enc.data), 0)  # base offset is outside the CRC


# -- send_many's list conversion ---------------------------------------------------------

@pytest.mark.parametrize("native", [True, False])
@settings(max_examples=100, deadline=None)
@given(values=st.lists(blob, max_size=40),
       stamps=st.lists(st.none() | st.integers(-(1 << 63), (1 << 63) - 1), max_size=40))
def test_list_conversion_equals_pyarrow(native, values, stamps):
    if native and not NATIVE:
        pytest.skip("kafkastore.format._native is not built")
    got = ae.binary_array(values, native=native)
    got.validate(full=True)
    assert got.equals(pa.array(values, pa.binary())) and got.null_count == values.count(None)
    got = ae.int64_array(stamps, native=native)
    got.validate(full=True)
    assert got.to_pylist() == stamps and got.null_count == stamps.count(None)


@pytest.mark.parametrize("native", [True, False])
@settings(max_examples=30, deadline=None)
@given(small=st.integers(0, 100), big=st.lists(st.none() | st.binary(min_size=200, max_size=3000),
                                                 max_size=30), last=blob)
def test_list_conversion_grows_past_its_size_guess(native, small, big, last):
    # The C pass sizes its buffer from the first 64 items: later, larger ones make it grow.
    if native and not NATIVE:
        pytest.skip("kafkastore.format._native is not built")
    values = [b"s%d" % i for i in range(small)] + big + [last]
    got = ae.binary_array(values, native=native)
    got.validate(full=True)
    assert got.equals(pa.array(values, pa.binary())) and got.null_count == values.count(None)


@pytest.mark.parametrize("native", [True, False])
def test_list_conversion_declines_inexact_types(native):
    if native and not NATIVE:
        pytest.skip("kafkastore.format._native is not built")
    for bad in ([b"a", "x"], [bytearray(b"a")], [b"a", 1], [memoryview(b"x")]):
        assert ae.binary_array(bad, native=native) is None
    for bad in ([1, True], [1, 2.0], [1 << 63], [-(1 << 63) - 1], [1, b"x"]):
        assert ae.int64_array(bad, native=native) is None
    assert ae.binary_array((b"a", None), native=native).to_pylist() == [b"a", None]  # tuples too


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.lists(st.one_of(st.none(), st.integers(-2 ** 31, 2 ** 31 - 1)),
                                max_size=20), min_size=1, max_size=3),
       typ=st.sampled_from([pa.int64(), pa.int32(), pa.int16()]), start=st.integers(0, 5),
       fill=st.sampled_from([0, -1]), chunked=st.booleans())
def test_validity_and_int64_values_read_the_buffers_as_arrow_does(chunks, typ, start, fill,
                                                                  chunked):
    """Read from the bitmap and data buffers (not through pandas), sliced and chunked."""
    values = [[v if v is None else max(-2 ** 15, min(2 ** 15 - 1, v)) for v in c] for c in chunks]
    arr = pa.chunked_array([pa.array(c, typ) for c in values], typ)
    arr = arr.slice(min(start, len(arr)))
    if not chunked:
        arr = arr.combine_chunks()
    want = arr.to_pylist()
    assert ae.validity(arr).tolist() == [int(v is not None) for v in want]
    got, valid = ae.int64_values(arr, fill=fill)
    assert got.dtype == np.int64 and got.tolist() == [fill if v is None else v for v in want]
    assert (valid is None) == (arr.null_count == 0)
    assert ae.validity(pa.nulls(3)).tolist() == [0, 0, 0]
