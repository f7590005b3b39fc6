"""A batch the rewrite keeps whole (every record survives, create time, no passed delete
horizon) is not decoded to Arrow: one C walk over its records checks them and finds its
tombstones. It is copied byte for byte, or, when a tombstone needs a first delete horizon,
its records are rewritten against the horizon and compressed again: the same bytes, entries
and records as the decode-and-encode path, pass after pass."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkastore.format.extensions import load
from kafkastore.format.record_batch import HEADER_SIZE, Record, encode_batch
from kafkastore.format.segment_build import SegmentBuilder
from kafkastore.format.segment_scan import iter_batches
from kafkastore.maintenance import compaction_rewrite
from kafkastore.maintenance.compaction_rewrite import compact_partition_local
from kafkastore.manifest import AppendSegments, ManifestStore
from kafkastore.storage import Storage
from kafkastore.write.segments import write_segment
from tests.helpers.compaction import T0, TOPIC, check_compacted, counting_decoder, latest_manifest, make_topic, produce, read_all

_native = load("kafkastore.format._native")
#: The walk, read once: monkeypatch undoes its changes after the test, not between examples.
WALK = compaction_rewrite._restamp
needs_kernel = pytest.mark.skipif(WALK is None,
                                  reason="the C extension is not built or is switched off")
RETENTION = 1000


def _append(storage: Storage, batches, codec: str) -> None:
    """One segment of ``batches`` (lists of ``(key, value, headers, ts)``), offsets from the
    high watermark, written as an imported log would be (no broker checks)."""
    store = ManifestStore(storage, TOPIC, 0)
    hw = store.latest().high_watermark if store.latest() else 0
    builder = SegmentBuilder(hw)
    o = hw
    for recs in batches:
        records = []
        for k, v, hs, ts in recs:
            records.append(Record(o, ts, k, v, tuple(hs)))
            o += 1
        builder.append(encode_batch(records, compression=codec, producer_id=7, producer_epoch=0,
                                    base_sequence=records[0].offset))
    built = builder.build()
    seg = write_segment(storage, TOPIC, 0, built.stats, built.log, built.index, built.timeindex,
                        writer_id=1, leader_epoch=0)
    store.commit(lambda m: ([AppendSegments((seg,))], []), operation="append")


def _state(storage: Storage):
    """What a compaction leaves, without the random segment ids: every entry's fields and
    its log's bytes."""
    out = []
    for s in latest_manifest(storage).segments:
        d = s.to_dict()
        d.pop("segment_id")
        out.append((d, bytes(storage.get(s.paths(TOPIC, 0)[".log"]))))
    return out


def _distinct_with_tombstones(storage: Storage, codec: str = "zstd") -> None:
    """Three batches of ten records, every key once, every third record a tombstone."""
    keys = iter(range(30))
    _append(storage, [[(b"k%d" % k, None if k % 3 == 0 else b"v%d" % k, (), T0 + k)
                       for k in (next(keys) for _ in range(10))] for _ in range(3)], codec)
    produce(storage, [("z", "head")], ts=T0)


@needs_kernel
def test_a_batch_kept_whole_is_not_decoded_and_gets_its_horizon(tmp_path, monkeypatch):
    storage = Storage(tmp_path.as_uri())
    make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=RETENTION)
    _distinct_with_tombstones(storage)
    before = read_all(storage)
    rows = counting_decoder(monkeypatch)
    compact_partition_local(storage, TOPIC, 0, T0 + 10_000, force=True)
    assert rows == []                                  # no batch was decoded
    check_compacted(before, read_all(storage), 30)
    assert read_all(storage) == before                 # every record kept, tombstones too
    m = latest_manifest(storage)
    log = storage.get(m.segments[0].paths(TOPIC, 0)[".log"])
    assert [h.delete_horizon_ms for _, h in iter_batches(log)] == [T0 + 10_000 + RETENTION] * 3
    assert m.segments[0].delete_horizon_ms == T0 + 10_000 + RETENTION
    # Before the horizon a second pass changes nothing and decodes nothing.
    compact_partition_local(storage, TOPIC, 0, T0 + 10_500, force=True)
    assert rows == []
    assert latest_manifest(storage).segments[0].segment_id == m.segments[0].segment_id
    # After it the tombstones go: the batches lose records, so they are decoded.
    compact_partition_local(storage, TOPIC, 0, T0 + 10_000 + RETENTION, force=True)
    assert sum(rows) == 30
    assert [v for _, k, v in read_all(storage)].count(None) == 0


_record = st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]),
                    st.one_of(st.none(), st.text("xyé", max_size=12).map(str.encode)),
                    st.lists(st.tuples(st.sampled_from(["h", "é"]),
                                       st.one_of(st.none(), st.binary(max_size=4))), max_size=2),
                    st.integers(-1, 5000))


@needs_kernel
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(segments=st.lists(st.lists(st.lists(_record, min_size=1, max_size=6, unique_by=lambda r: r[0]),
                                  min_size=1, max_size=4), min_size=1, max_size=3),
       codec=st.sampled_from(["none", "zstd", "gzip", "lz4", "snappy"]),
       topic_codec=st.sampled_from([None, "producer", "lz4"]))
def test_kept_whole_batches_equal_the_decode_and_encode_path(tmp_path_factory, monkeypatch,
                                                             segments, codec, topic_codec):
    """Three passes (a first horizon, before it, after it) with the walk and without it
    leave the same entries and the same bytes."""
    runs = []
    for walk in (WALK, None):
        monkeypatch.setattr(compaction_rewrite, "_restamp", walk)
        storage = Storage(tmp_path_factory.mktemp("w").as_uri())
        make_topic(storage, segment_bytes=10 ** 6, delete_retention_ms=RETENTION,
                   **({"compression_type": topic_codec} if topic_codec else {}))
        for batches in segments:
            _append(storage, [[(k, v, hs, ts if ts < 0 else T0 + ts) for k, v, hs, ts in b]
                              for b in batches], codec)
        produce(storage, [("z", "head")], ts=T0)
        states = []
        for now in (T0 + 10_000, T0 + 10_500, T0 + 10_000 + RETENTION):
            compact_partition_local(storage, TOPIC, 0, now, force=True)
            states.append((_state(storage), read_all(storage)))
        runs.append(states)
    assert runs[0] == runs[1]


@pytest.mark.skipif(not hasattr(_native, "restamp_records"), reason="the C extension is not built")
def test_the_walk_declines_what_the_decoder_would_refuse_and_restamps_what_it_accepts():
    records = [Record(10 + i, T0 + i, b"k%d" % i, None if i == 1 else b"v", ()) for i in range(3)]
    body = bytes(encode_batch(records, base_offset=10)[HEADER_SIZE:])
    walk = _native.restamp_records
    assert walk(body, 3, T0, 2) == (None, 1, T0, T0 + 2)             # checked, not rewritten
    out, tombstones, lo, hi = walk(body, 3, T0, 2, T0 + 99)
    again = encode_batch(records, base_offset=10, delete_horizon_ms=T0 + 99)
    assert (tombstones, lo, hi) == (1, T0, T0 + 2) and out == again[HEADER_SIZE:]
    assert walk(body, 4, T0, 2) is None                              # fewer records than counted
    assert walk(body, 3, T0, 1) is None                              # an offset past the last
    assert walk(body[:-1], 3, T0, 2) is None                         # truncated
    null_key = encode_batch([Record(0, T0, None, b"v", ())])[HEADER_SIZE:]
    assert walk(bytes(null_key), 1, T0, 0) is None
    bad_header = encode_batch([Record(0, T0, b"k", b"v", (("h", b""),))])[HEADER_SIZE:]
    broken = bytearray(bad_header)
    broken[broken.index(b"h")] = 0xFF                                 # a header key not UTF-8
    assert walk(bytes(bad_header), 1, T0, 0) is not None and walk(bytes(broken), 1, T0, 0) is None
