"""The old message format (magic 0/1): round trips, conversions, and two independent
implementations (kafka-python's and aiokafka's legacy records) reading ours and we theirs."""
from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkastore.errors import CompressionError, CorruptRecordError
from kafkastore.format import legacy_records as L
from kafkastore.format.compression import Compression, compress
from kafkastore.format.record_batch import CREATE_TIME, LOG_APPEND_TIME, Record, decode_batch, encode_batch

CODECS = [0, 1, 2, 3]  # none, gzip, snappy, lz4


def _records(n: int, base: int = 10, ts: int = 1_000) -> list[Record]:
    return [Record(base + i, ts + i, (b"k%d" % i) if i % 2 else None, b"v%d" % i * (i + 1))
            for i in range(n)]


def _plain(records, magic):
    """What a record becomes in ``magic``: no timestamp in magic 0, no headers ever."""
    return [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in records]


def _got(messages):
    return [(m.offset, m.timestamp, m.key, m.value) for m in messages]


record = st.builds(lambda k, v, t: (k, v, t), st.none() | st.binary(max_size=40),
                   st.none() | st.binary(max_size=200), st.integers(0, 2**62))


@settings(max_examples=150, deadline=None)
@given(st.lists(record, min_size=1, max_size=12), st.sampled_from([0, 1]), st.sampled_from(CODECS),
       st.integers(0, 2**40), st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]))
def test_round_trip(items, magic, codec, base, ts_type):
    records = [Record(base + i, t, k, v) for i, (k, v, t) in enumerate(items)]
    data = L.encode_message_set(records, magic, compression=codec, timestamp_type=ts_type)
    got = L.decode_message_set(data)
    want = _plain(records, magic)
    if magic == 1 and ts_type == LOG_APPEND_TIME and codec:
        # Under log-append time every inner message takes the wrapper's timestamp.
        want = [(o, max(r.timestamp for r in records), k, v) for o, _, k, v in want]
    assert _got(got) == want
    assert {m.codec for m in got} == {codec}


@settings(max_examples=100, deadline=None)
@given(st.lists(record, min_size=1, max_size=12), st.sampled_from([0, 1]), st.sampled_from(CODECS))
def test_up_then_down_convert(items, magic, codec):
    """Produce (old -> v2) then fetch (v2 -> old) keeps every key and value, in order."""
    records = [Record(i, t, k, v) for i, (k, v, t) in enumerate(items)]
    v2 = L.up_convert(L.encode_message_set(records, magic, compression=codec))
    header, stored = decode_batch(v2)
    assert header.compression == codec and header.producer_id == -1
    assert [(r.key, r.value) for r in stored] == [(k, v) for k, v, _ in items]
    down = L.down_convert(v2, magic, 0)
    back = L.decode_message_set(b"".join(u for u, _ in down.units))
    assert _got(back) == _plain(records, magic)


def test_down_convert_drops_markers_keeps_aborted_and_skips_before_offset():
    from kafkastore.format.control import encode_marker_batch

    data = encode_batch(_records(3, base=0), transactional=True, producer_id=7, producer_epoch=0,
                        base_sequence=0)
    marker = encode_marker_batch(offset=3, timestamp=5, producer_id=7, producer_epoch=0, commit=False)
    plain = encode_batch(_records(3, base=4))
    zipped = encode_batch(_records(3, base=7), compression="gzip")
    down = L.down_convert(data + marker + plain + zipped, 1, 5)
    got = L.decode_message_set(b"".join(u for u, _ in down.units))
    # Aborted records stay (old fetchers are read_uncommitted), but only from the fetch offset
    # in uncompressed batches; the marker goes; a compressed batch is sent whole.
    assert [m.offset for m in got] == [5, 6, 7, 8, 9]
    assert [n for _, n in down.units] == [6, 7, 10]


def test_zstd_stops_down_conversion():
    down = L.down_convert(encode_batch(_records(2, base=0)) + encode_batch(_records(2, base=2),
                          compression="zstd"), 1, 0)
    assert down.unsupported and len(down.units) == 2
    assert L.down_convert(encode_batch(_records(2), compression="zstd"), 0, 0).unsupported


def test_fit_whole_first_or_partial():
    units = [(b"a" * 10, 1), (b"b" * 10, 2)]
    assert L.fit(units, 25, first_whole=False) == b"a" * 10 + b"b" * 10
    assert L.fit(units, 15, first_whole=False) == b"a" * 10
    assert L.fit(units, 4, first_whole=False) == b"aaaa"       # Fetch v0-2: a partial message
    assert L.fit(units, 4, first_whole=True) == b"a" * 10      # Fetch v3: KIP-74


def test_log_append_time_survives_down_conversion():
    data = encode_batch(_records(2), timestamp_type=LOG_APPEND_TIME, max_timestamp=99)
    [(unit, _), _] = L.down_convert(data, 1, 0).units
    [m] = L.decode_message_set(unit)
    assert m.timestamp == 99 and m.timestamp_type == LOG_APPEND_TIME


def test_magic0_lz4_uses_kafkas_broken_header_checksum():
    """Kafka (KAFKA-3160) hashed the frame magic into a magic 0 lz4 header checksum: we write
    that, and read both it and a correct frame (what aiokafka writes)."""
    data = L.encode_message_set(_records(3), 0, compression="lz4")
    frame = L.decode_message_set(data, verify_crc=True)  # reads its own
    assert len(frame) == 3
    payload = data[L.LOG_OVERHEAD + L.MESSAGE_OVERHEAD[0]:]
    hc_at = L._lz4_hc_position(payload)
    assert payload[hc_at] == (L.xxh32(payload[:hc_at]) >> 8) & 0xFF  # hashed from the magic on
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(payload)  # so a strict reader refuses it, as with Kafka's
    good = lz4.frame.compress(b"x" * 1000)
    assert L._set_lz4_hc(good, broken=False) == good  # our xxh32 agrees with lz4's


@pytest.mark.parametrize("data", [
    b"\x00" * 11,                                                   # shorter than an entry head
    struct.pack(">qiIbb", 0, 100, 0, 1, 0) + b"\x00" * 10,           # size past the set
    struct.pack(">qiIbb", 0, 14, 0, 3, 0) + b"\x00" * 10,            # magic 3
    struct.pack(">qiIbb", 0, 14, 0, 0, 0) + struct.pack(">ii", -1, 5),  # value past its message
])
def test_malformed_sets_are_refused(data):
    with pytest.raises((CorruptRecordError, CompressionError)):
        L.up_convert(data)


def test_crc_and_bad_wrappers_are_refused():
    good = bytearray(L.encode_message_set(_records(2), 1))
    good[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        L.decode_message_set(bytes(good))
    # A "gzip" wrapper whose value is not gzip; a wrapper around a compressed message.
    body = struct.pack(">bbq", 1, 1, 0) + struct.pack(">i", -1) + struct.pack(">i", 3) + b"abc"
    bogus = struct.pack(">qi", 0, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    with pytest.raises(CompressionError):
        L.up_convert(bogus)
    inner = L.encode_message_set(_records(1), 1, compression="gzip")
    body = struct.pack(">bbq", 1, 1, 0) + struct.pack(">i", -1)
    z = compress(Compression.GZIP, inner)
    body += struct.pack(">i", len(z)) + z
    nested = struct.pack(">qi", 0, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="compressed message"):
        L.up_convert(nested)
    with pytest.raises(CorruptRecordError, match="mixes"):
        L.up_convert(L.encode_message_set(_records(1), 0) + L.encode_message_set(_records(1), 1))


# -- independent implementations -----------------------------------------------------------

def _their_builder(lib: str):
    if lib == "kafka-python":
        from kafka.record.legacy_records import LegacyRecordBatchBuilder
    else:
        from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
    return LegacyRecordBatchBuilder


def _their_reader(lib: str):
    if lib == "kafka-python":
        from kafka.record.memory_records import MemoryRecords
    else:
        from aiokafka.record.memory_records import MemoryRecords
    return MemoryRecords


def _lz4_magic0_unsupported(lib: str) -> bool:
    """kafka-python writes/reads magic 0 lz4 only with ``xxhash``; aiokafka refuses to write
    it and reads only correct frames (so it cannot read Kafka's, nor ours)."""
    if lib == "aiokafka":
        return True
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.mark.parametrize("lib", ["kafka-python", "aiokafka"])
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_they_read_ours(lib, magic, codec):
    pytest.importorskip("kafka" if lib == "kafka-python" else "aiokafka")
    if magic == 0 and codec == 3 and _lz4_magic0_unsupported(lib):
        pytest.skip(f"{lib} cannot read magic 0 lz4 here")
    records = _records(5)
    reader = _their_reader(lib)(L.encode_message_set(records, magic, compression=codec))
    got = []
    while reader.has_next():
        batch = reader.next_batch()
        for r in batch:
            got.append((r.offset, r.timestamp if r.timestamp is not None else -1, r.key, r.value))
    assert got == _plain(records, magic)


@pytest.mark.parametrize("lib", ["kafka-python", "aiokafka"])
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_we_read_theirs(lib, magic, codec):
    pytest.importorskip("kafka" if lib == "kafka-python" else "aiokafka")
    if magic == 0 and codec == 3 and lib == "kafka-python" and _lz4_magic0_unsupported(lib):
        pytest.skip("kafka-python needs xxhash to write magic 0 lz4")
    if magic == 0 and codec == 3 and lib == "aiokafka":
        # aiokafka refuses to write it; build its correct-checksum frame by hand, which Kafka
        # (ignoring the magic 0 checksum) and we both read.
        inner = L.encode_message_set(_records(2, base=0), 0)
        body = struct.pack(">bb", 0, 3) + struct.pack(">i", -1)
        z = lz4.frame.compress(inner)
        body += struct.pack(">i", len(z)) + z
        data = struct.pack(">qi", 1, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
        assert [m.value for m in L.decode_message_set(data)] == [b"v0", b"v1v1"]
        return
    builder = _their_builder(lib)(magic, codec, 1 << 20)
    for i in range(5):
        builder.append(i, timestamp=(1_000 + i) if magic else None,
                       key=(b"k%d" % i) if i % 2 else None, value=b"v%d" % i)
    data = bytes(builder.build())
    got = L.decode_message_set(data)
    assert [(m.key, m.value) for m in got] == [((b"k%d" % i) if i % 2 else None, b"v%d" % i)
                                               for i in range(5)]
    if magic:
        assert [m.timestamp for m in got] == [1_000 + i for i in range(5)]
    # Offsets as Kafka computes them from the wrapper (the producer's are placeholders).
    assert [m.offset for m in got] == [got[0].offset + i for i in range(5)]
    v2 = L.up_convert(data)
    assert [r.value for r in decode_batch(v2)[1]] == [b"v%d" % i for i in range(5)]


class _XXHashShim:
    """``xxhash.xxh32(data).digest()`` from our xxh32 (itself checked against lz4's above)."""

    class xxh32:  # noqa: N801 - the xxhash package's name
        def __init__(self, data):
            self.value = L.xxh32(bytes(data))

        def digest(self):
            return self.value.to_bytes(4, "big")


@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_old_lz4_framing(monkeypatch, magic):
    """kafka-python's own magic 0 lz4 framing code (lz4_encode_old_kafka / lz4_decode_old_kafka,
    which need the ``xxhash`` package, here a shim) reads ours and writes what we read."""
    kafka_codec = pytest.importorskip("kafka.codec")
    monkeypatch.setattr(kafka_codec, "xxhash", _XXHashShim)
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

    records = _records(4)
    reader = MemoryRecords(L.encode_message_set(records, magic, compression="lz4"))
    got = [(r.offset, r.timestamp if r.timestamp is not None else -1, r.key, r.value)
           for r in reader.next_batch()]
    assert got == _plain(records, magic)
    builder = LegacyRecordBatchBuilder(magic, 3, 1 << 20)
    for i in range(4):
        builder.append(i, timestamp=5 if magic else None, key=None, value=b"z%d" % i)
    assert [m.value for m in L.decode_message_set(bytes(builder.build()))] == [b"z%d" % i for i in range(4)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([0, 1]), st.sampled_from(CODECS), st.data())
def test_damaged_sets_fail_cleanly(magic, codec, data):
    """Any byte of a valid set changed, or the set cut short: decoded or refused with the
    format's errors, never another exception (the broker maps those to CORRUPT_MESSAGE)."""
    buf = bytearray(L.encode_message_set(_records(3), magic, compression=codec))
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    else:
        del buf[data.draw(st.integers(1, len(buf))):]
    for verify in (True, False):
        try:
            L.up_convert(bytes(buf)) if verify else L.decode_message_set(bytes(buf), verify_crc=False)
        except (CorruptRecordError, CompressionError):
            pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_fail_cleanly(buf):
    try:
        L.up_convert(buf)
    except (CorruptRecordError, CompressionError):
        pass


def test_decompression_is_bounded_across_wrappers():
    one = L.encode_message_set([Record(0, 0, None, b"\x00" * 5000)], 1, compression="gzip")
    assert len(L.decode_message_set(one * 3, max_decompressed_size=20_000)) == 3
    with pytest.raises(CompressionError):
        L.decode_message_set(one * 5, max_decompressed_size=20_000)
