"""Kafka record batches (magic v2) straight into Arrow, in Spark's Kafka schema.

Every Spark job reads the log through :func:`decode_to_arrow`: it takes the
bytes of a segment (or a byte range of one, aligned to batch boundaries) and
returns one ``pyarrow.RecordBatch`` with :data:`KAFKA_SCHEMA`, the schema of
Spark's Kafka source, so existing queries work unchanged::

    key binary, value binary, topic string, partition int32, offset int64,
    timestamp timestamp[us, UTC], timestampType int32,
    headers list<struct<key string, value binary>>

What it does, per batch (in offset order, as Kafka's consumer does):

* framing and header checks (magic 2, lengths, codec, record count), then the
  CRC-32C (``verify_crc``) on the bytes as stored (compressed);
* stops at the first batch whose base offset is ``>= end_offset``; skips
  batches that end before ``start_offset``; keeps only records with
  ``start_offset <= offset < end_offset``;
* control batches (transaction markers) never produce rows;
* under read_committed, transactional batches of an aborted transaction are
  dropped: ``aborted`` lists :class:`~kafkastore.format.transactions.AbortedTxn`
  (or ``(producer_id, first_offset, last_offset)`` tuples) and a
  transactional batch is dropped when its producer id matches and its base
  offset is within ``[first_offset, last_offset]``
  (as :func:`kafkastore.format.transactions.is_aborted`);
* compressed batches (gzip, snappy, lz4, zstd) are decompressed one at a time
  with :func:`kafkastore.format.compression.decompress_buffer` (the C kernel sizes its
  columns for the rest of the region from the first one it decodes); the C kernel
  decompresses zstd batches itself, in the same walk, with the system's libzstd
  (``libzstd.so.1``, opened at import when present), and hands back to that function
  only a batch it cannot decompress within the bound, which then raises as above;
* ``timestampType`` is 1 when the batch has the LogAppendTime bit, and then
  every record's timestamp is the batch's max timestamp (as Kafka's readers
  do), else 0 and the timestamp is base timestamp + delta. Timestamps are
  milliseconds in the log and microseconds in Arrow (as Spark converts them).

Columns that differ from a naive reading, chosen to mirror Spark:

* ``topic`` and ``partition`` are the arguments, repeated.
* ``headers`` is **null** for a record without headers (Spark's
  ``KafkaRecordToRowConverter`` does the same) and null for every row when
  ``include_headers=False``. The column is always present so the schema is
  fixed; Spark's source drops the column instead unless ``includeHeaders``
  is set, which the data source can do with ``batch.drop_columns``. A header
  key that is not valid UTF-8 is a CorruptRecordError (Arrow strings must be
  UTF-8; Kafka's Java client would substitute U+FFFD).

Errors: bytes that are not valid batches raise
:class:`~kafkastore.errors.CorruptRecordError` (a CRC failure
:class:`~kafkastore.errors.CrcMismatchError`), with ``segment`` (the
argument), ``offset`` (the batch's base offset) and ``position`` (the batch's
byte position in ``buf`` plus ``base_position``, so a caller that read a byte
range can report positions in the segment). A compressed payload that does
not decompress is a CorruptRecordError too (the CompressionError is chained
as ``__cause__``). Output too large for Arrow's 32-bit offsets (over 2 GiB of
keys, values or header bytes in one call) raises
:class:`~kafkastore.errors.KafkaStoreError`: decode a smaller byte range.

Two implementations sit behind one interface, as in aiokafka's ``record``
package: the C kernel in ``kafkastore/format/_native.c`` (walks the records and
writes Arrow buffers directly; no per-record Python objects) and a
pure-Python one (builds lists; slower, same results and errors). Both are
driven by the same loop (:func:`_decode`) through the :class:`BatchDecoder`
protocol. :func:`decode_to_arrow` uses the C one when it is built, unless the
environment sets ``KAFKASTORE_NO_EXTENSIONS=1``; :func:`decode_to_arrow_pure`
and :func:`decode_to_arrow_native` pick one explicitly (tests run both).

Memory (C kernel): the output is written into fresh column buffers (about
the size of the records); Arrow owns them and frees them with the batch.
Freed buffers are kept for the next decode, up to 256 MiB of touched memory
by default, marked reclaimable (MADV_FREE); ``KAFKASTORE_DECODE_CACHE_MB``
changes the bound (0: no cache). Fresh memory is faulted in ahead of the
writes, 2 MiB at a time (MADV_POPULATE_WRITE), never more than is written,
as transparent huge pages or 4 KiB pages, whichever the process measured
cheaper (``auto``); ``KAFKASTORE_DECODE_ALLOC`` picks another way
(``populate``: 4 KiB pages only; ``plain``: fault page by page; ``huge``:
huge pages faulted on write; ``huge+populate``); with
``reuse_input=True`` the value column is written into the caller's writable
input instead (see :func:`decode_to_arrow`). The GIL is released while the
C kernel decodes (64 KiB or more at once).
"""
from __future__ import annotations

import os
import struct
from itertools import chain
from typing import Any, Callable, Iterable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .compression import MAX_DECOMPRESSED_SIZE, decompress_buffer
from .extensions import ENABLED, load
from ..errors import (
    CompressionError, ConfigError, CorruptRecordError, CrcMismatchError, KafkaStoreError,
)
from .record_batch import HEADER_SIZE, decode_records, parse_header
from .segment_scan import iter_batches

_native = load("kafkastore.format._native")  # None (not built): the pure decoder does everything

__all__ = [
    "KAFKA_SCHEMA", "HEADERS_TYPE", "IMPLEMENTATION", "NATIVE_AVAILABLE",
    "decode_to_arrow", "decode_to_arrow_pure", "decode_to_arrow_native", "BatchDecoder",
]

# ------------------------------------------------------------------ schema

HEADER_STRUCT_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_STRUCT_TYPE)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

#: Spark's Kafka source schema (every field nullable, as Spark declares them).
KAFKA_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", HEADERS_TYPE),
])

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_TS_MS_LIMIT = _INT64_MAX // 1000  # timestamps beyond this overflow microseconds

NATIVE_AVAILABLE = _native is not None

# The C kernel keeps up to this much of the memory of freed column buffers for
# the next decode (default 256 MiB, reclaimable by the kernel: MADV_FREE).
if _native is not None and os.environ.get("KAFKASTORE_DECODE_CACHE_MB"):
    try:
        _native.set_buffer_cache(max(0, int(os.environ["KAFKASTORE_DECODE_CACHE_MB"])) << 20)
    except ValueError:
        pass
# How the C kernel gets fresh memory (see the module docstring).
_ALLOC_MODES = {"plain": 0, "huge": 1, "populate": 2, "huge+populate": 3, "auto": 4}
if _native is not None and os.environ.get("KAFKASTORE_DECODE_ALLOC"):
    _mode = os.environ["KAFKASTORE_DECODE_ALLOC"].strip().lower()
    if _mode in _ALLOC_MODES:
        _native._set_alloc_mode(_ALLOC_MODES[_mode])
    else:  # at import: no error to raise to a caller; say it and keep the default
        import warnings
        warnings.warn(f"KAFKASTORE_DECODE_ALLOC={_mode!r} ignored: expected one of "
                      f"{', '.join(_ALLOC_MODES)}", RuntimeWarning, stacklevel=2)
#: "native" or "pure": what decode_to_arrow uses.
IMPLEMENTATION = "native" if NATIVE_AVAILABLE and ENABLED else "pure"


class BatchDecoder(Protocol):
    """What the shared driver loop needs from an implementation.

    Constructed as ``Impl(start_offset, end_offset, include_headers,
    verify_crc, aborted)`` with ``end_offset`` an int (2**63-1 for none) and
    ``aborted`` a list of ``(producer_id, first_offset, last_offset)``.
    """

    def feed(self, buf, pos: int = 0, end: int = -1) -> tuple[int, int, int, int] | None:
        """Walk the whole batches of ``buf[pos:end]``.

        Uncompressed batches are decoded on the spot. Returns None when the
        region is done (or a batch at/after ``end_offset`` was reached), or
        ``(pos, codec, rec_start, rec_end)`` for a compressed batch with rows
        to give (its CRC already checked): the caller decompresses
        ``buf[rec_start:rec_end]``, calls :meth:`feed_records` and resumes at
        ``rec_end``.
        """

    def feed_records(self, buf, pos: int, records) -> None:
        """Decode the decompressed records of the batch whose header is at ``buf[pos]``."""

    def finish(self) -> dict[str, Any]:
        """The decoded columns: ``rows`` and arrays ``key``, ``value``, ``offset``,
        ``timestamp``, ``timestampType``, ``headers``."""


# ------------------------------------------------------------ the driver

def _view(buf) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _aborted_tuples(aborted) -> list[tuple[int, int, int]]:
    out = []
    for txn in aborted or ():
        if hasattr(txn, "producer_id"):
            out.append((int(txn.producer_id), int(txn.first_offset), int(txn.last_offset)))
        else:
            pid, first, last = txn
            out.append((int(pid), int(first), int(last)))
    return out


class _NoNativeError(Exception):
    """Placeholder for _native.DecodeError when the extension is not built."""


_DecodeError = _native.DecodeError if _native is not None else _NoNativeError


def _located(e: CorruptRecordError, segment, base_position: int) -> CorruptRecordError:
    pos = e.position + base_position if e.position is not None else None
    return type(e)(e.reason, segment=e.segment if e.segment is not None else segment,
                   offset=e.offset, position=pos)


def _from_native(e, segment, base_position: int) -> KafkaStoreError:
    kind, message, offset, position = e.args
    if kind == 2:
        return KafkaStoreError(message)
    cls = CrcMismatchError if kind == 1 else CorruptRecordError
    return cls(message, segment=segment, offset=offset, position=position + base_position)


def _decode(impl: Callable[..., BatchDecoder], buf, *, topic: str, partition: int,
            start_offset: int = 0, end_offset: int | None = None,
            aborted: Iterable = (), include_headers: bool = True, verify_crc: bool = True,
            segment: str | None = None, base_position: int = 0,
            reuse_input: bool = False) -> pa.RecordBatch:
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {type(topic).__name__}")
    if not 0 <= int(partition) <= _INT32_MAX:
        raise ConfigError(f"partition must be in [0, {_INT32_MAX}], got {partition!r}")
    view = _view(buf)
    end = _INT64_MAX if end_offset is None else int(end_offset)
    dec = impl(int(start_offset), end, bool(include_headers), bool(verify_crc),
               _aborted_tuples(aborted))
    if reuse_input and impl is _NativeDecoder:
        dec.lend(view)  # False for read-only memory: fresh memory then
    if impl is _NativeDecoder:
        # zstd batches decompressed and decoded in the C walk; any it cannot do (no
        # libzstd, damage, past the bound) still come back here and raise as below.
        dec.inline_zstd(MAX_DECOMPRESSED_SIZE)
    pos = 0
    try:
        while True:
            pending = dec.feed(view, pos)
            if pending is None:
                break
            pos, codec, rec_start, rec_end = pending
            try:
                records = decompress_buffer(codec, view[rec_start:rec_end],
                                            MAX_DECOMPRESSED_SIZE)
            except CompressionError as e:
                (base,) = struct.unpack_from(">q", view, pos)
                raise CorruptRecordError(f"batch payload does not decompress: {e}",
                                         offset=base, position=pos) from e
            dec.feed_records(view, pos, records)
            pos = rec_end
        cols = dec.finish()
    except CorruptRecordError as e:
        raise _located(e, segment, base_position) from e.__cause__
    except _DecodeError as e:
        raise _from_native(e, segment, base_position) from None
    n = cols["rows"]
    topic_col, partition_col = _constant_columns(topic, partition, n,
                                                 native=impl is not _PureDecoder)
    return pa.RecordBatch.from_arrays(
        [cols["key"], cols["value"], topic_col, partition_col, cols["offset"],
         cols["timestamp"], cols["timestampType"], cols["headers"]],
        schema=KAFKA_SCHEMA)


def _constant_columns(topic: str, partition: int, n: int, *,
                      native: bool = True) -> tuple[pa.Array, pa.Array]:
    """The topic and partition columns: ``n`` copies of each."""
    tb = topic.encode("utf-8")
    partition = int(partition)
    if native and _native is not None:
        try:
            offsets, data = _native.repeat_binary(tb, n)
        except _native.DecodeError as e:
            raise KafkaStoreError(e.args[1]) from None
        topic_col = pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        part = pa.Array.from_buffers(
            pa.int32(), n, [None, pa.py_buffer(_native.fill_int32(partition, n))])
        return topic_col, part
    if len(tb) * n > _INT32_MAX:
        raise KafkaStoreError("topic column exceeds 2 GiB in one Arrow batch; "
                              "decode a smaller byte range")
    offsets = np.arange(0, (n + 1) * len(tb), len(tb) or 1, dtype=np.int32)[:n + 1] \
        if tb else np.zeros(n + 1, dtype=np.int32)
    topic_col = pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(tb * n)])
    part = pa.array(np.full(n, partition, dtype=np.int32))
    return topic_col, part


# --------------------------------------------------------- the C kernel

if _native is not None:
    class _NativeDecoder(_native.Decoder):
        """The C decoder; finish() wraps its buffers as Arrow arrays (zero copy)."""

        __slots__ = ()

        def finish(self) -> dict[str, Any]:
            r = super().finish()
            n, nh = r["rows"], r["headers"]
            buf = pa.py_buffer

            def validity(name: str, nulls: int):
                return buf(r[name]) if nulls else None

            def binary(typ, length, prefix, nulls):
                return pa.Array.from_buffers(
                    typ, length,
                    [validity(prefix + "_validity", nulls) if nulls is not None else None,
                     buf(r[prefix + "_offsets"]), buf(r[prefix + "_data"])],
                    null_count=nulls or 0)

            hkeys = binary(pa.string(), nh, "header_key", None)
            hvals = binary(pa.binary(), nh, "header_value", r["header_value_nulls"])
            hstruct = pa.Array.from_buffers(HEADER_STRUCT_TYPE, nh, [None], null_count=0,
                                            children=[hkeys, hvals])
            hnulls = r["headers_nulls"]
            headers = pa.Array.from_buffers(
                HEADERS_TYPE, n, [validity("headers_validity", hnulls), buf(r["headers_offsets"])],
                null_count=hnulls, children=[hstruct])
            return {
                "rows": n,
                "key": binary(pa.binary(), n, "key", r["key_nulls"]),
                "value": binary(pa.binary(), n, "value", r["value_nulls"]),
                "offset": pa.Array.from_buffers(pa.int64(), n, [None, buf(r["offset"])]),
                "timestamp": pa.Array.from_buffers(TIMESTAMP_TYPE, n,
                                                   [None, buf(r["timestamp"])]),
                "timestampType": pa.Array.from_buffers(pa.int32(), n,
                                                       [None, buf(r["timestamp_type"])]),
                "headers": headers,
            }
else:
    _NativeDecoder = None


# ------------------------------------------------------ the pure decoder

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


def _one_chunk(values: list, typ: pa.DataType, what: str) -> pa.Array:
    """pa.array(values), which chunks past 2 GiB of data: refused like the C kernel."""
    arr = pa.array(values, typ)
    if isinstance(arr, pa.ChunkedArray):
        raise KafkaStoreError(f"decoded {what} data exceeds 2 GiB in one column of one Arrow "
                              "batch; decode a smaller byte range")
    return arr


class _PureDecoder:
    """The pure-Python implementation of :class:`BatchDecoder` (builds lists): the batch
    walker :func:`kafkastore.format.segment_scan.iter_batches` and the record decoder
    :func:`kafkastore.format.record_batch.decode_records`, the C kernel's twins."""

    def __init__(self, start_offset: int, end_offset: int, include_headers: bool,
                 verify_crc: bool, aborted: list[tuple[int, int, int]]):
        self.start = start_offset
        self.end = end_offset
        self.include_headers = include_headers
        self.verify_crc = verify_crc
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in aborted:
            self.aborted.setdefault(pid, []).append((first, last))
        self._reset()

    def _reset(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple] = []

    def _is_aborted(self, pid: int, base: int) -> bool:
        for first, last in self.aborted.get(pid, ()):
            if first <= base <= last:
                return True
        return False

    def feed(self, buf, pos: int = 0, end: int = -1):
        view = _view(buf)
        if end < 0:
            end = len(view)
        try:
            for pos, h in iter_batches(view, pos, end, verify_crc=self.verify_crc,
                                       check_order=False, stop_offset=self.end):
                attrs = h.attributes
                if (attrs & _CONTROL or h.base_offset + h.last_offset_delta < self.start
                        or (attrs & _TRANSACTIONAL and self.aborted
                            and self._is_aborted(h.producer_id, h.base_offset))):
                    continue
                codec = attrs & _CODEC_MASK
                if codec:
                    return pos, codec, pos + HEADER_SIZE, pos + h.size
                self._records(h, bytes(view[pos + HEADER_SIZE:pos + h.size]), pos)
        except CorruptRecordError as e:
            if type(e) not in (CorruptRecordError, CrcMismatchError):
                # The C kernel names damage with these two types only: so do its twin.
                raise CorruptRecordError(e.reason, segment=e.segment, offset=e.offset,
                                         position=e.position) from None
            raise
        return None

    def feed_records(self, buf, pos: int, records) -> None:
        h = parse_header(buf, pos)
        self._records(h, bytes(records), pos)

    def _records(self, h, data: bytes, bpos: int) -> None:
        try:
            offsets, timestamps, keys, values, headers = decode_records(
                data, h, self.start, self.end, headers=self.include_headers)
            if timestamps and not -_TS_MS_LIMIT <= min(timestamps) <= max(timestamps) <= _TS_MS_LIMIT:
                bad = next(i for i, ts in enumerate(timestamps) if not -_TS_MS_LIMIT <= ts <= _TS_MS_LIMIT)
                raise CorruptRecordError(
                    f"record at offset {offsets[bad]}: timestamp {timestamps[bad]} ms out of range")
        except CorruptRecordError as e:
            raise e.located(offset=h.base_offset, position=bpos) from None
        # The whole batch decoded: commit its rows.
        self.offsets += offsets
        self.timestamps += timestamps
        self.ts_types += [1 if h.attributes & _LOG_APPEND_TIME else 0] * len(offsets)
        self.keys += keys
        self.values += values
        self.headers += headers

    def finish(self) -> dict[str, Any]:
        n = len(self.offsets)
        counts = np.fromiter(map(len, self.headers), dtype=np.int64, count=n)
        h_offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(counts, out=h_offsets[1:])
        flat = list(chain.from_iterable(self.headers)) if h_offsets[-1] else []
        hstruct = pa.StructArray.from_arrays(
            [_one_chunk([k for k, _ in flat], pa.string(), "header key"),
             _one_chunk([v for _, v in flat], pa.binary(), "header value")],
            fields=list(HEADER_STRUCT_TYPE))
        headers = pa.ListArray.from_arrays(
            pa.array(h_offsets), hstruct, type=HEADERS_TYPE,
            mask=pa.array(counts == 0) if n else None)
        cols = {
            "rows": n,
            "key": _one_chunk(self.keys, pa.binary(), "key"),
            "value": _one_chunk(self.values, pa.binary(), "value"),
            "offset": pa.array(self.offsets, pa.int64()),
            "timestamp": pc.multiply(pa.array(self.timestamps, pa.int64()), 1000
                                     ).view(TIMESTAMP_TYPE),
            "timestampType": pa.array(self.ts_types, pa.int32()),
            "headers": headers,
        }
        self._reset()
        return cols


# ------------------------------------------------------------ public API

def decode_to_arrow_pure(buf, *, topic: str, partition: int, start_offset: int = 0,
                         end_offset: int | None = None, aborted: Iterable = (),
                         include_headers: bool = True, verify_crc: bool = True,
                         segment: str | None = None, base_position: int = 0,
                         reuse_input: bool = False) -> pa.RecordBatch:
    """:func:`decode_to_arrow` with the pure-Python decoder (``reuse_input`` has no effect)."""
    return _decode(_PureDecoder, buf, topic=topic, partition=partition,
                   start_offset=start_offset, end_offset=end_offset, aborted=aborted,
                   include_headers=include_headers, verify_crc=verify_crc, segment=segment,
                   base_position=base_position)


def decode_to_arrow_native(buf, *, topic: str, partition: int, start_offset: int = 0,
                           end_offset: int | None = None, aborted: Iterable = (),
                           include_headers: bool = True, verify_crc: bool = True,
                           segment: str | None = None, base_position: int = 0,
                           reuse_input: bool = False) -> pa.RecordBatch:
    """:func:`decode_to_arrow` with the C decoder (RuntimeError if it is not built)."""
    if _NativeDecoder is None:
        raise RuntimeError("kafkastore.format._native is not built (pip install . with a C compiler, "
                           "or python setup.py build_ext --inplace)")
    return _decode(_NativeDecoder, buf, topic=topic, partition=partition,
                   start_offset=start_offset, end_offset=end_offset, aborted=aborted,
                   include_headers=include_headers, verify_crc=verify_crc, segment=segment,
                   base_position=base_position, reuse_input=reuse_input)


def decode_to_arrow(buf, *, topic: str, partition: int, start_offset: int = 0,
                    end_offset: int | None = None, aborted: Iterable = (),
                    include_headers: bool = True, verify_crc: bool = True,
                    segment: str | None = None, base_position: int = 0,
                    reuse_input: bool = False) -> pa.RecordBatch:
    """Decode whole consecutive v2 batches into one RecordBatch of :data:`KAFKA_SCHEMA`.

    ``buf``: bytes-like holding a segment or a batch-aligned byte range of one
    (``base_position``: where ``buf`` starts in the segment, for error
    positions). Keeps records with ``start_offset <= offset < end_offset``
    (``end_offset`` None: no upper bound), drops control batches and the
    ``aborted`` transactions' batches, checks CRCs when ``verify_crc``.
    ``reuse_input=True``: ``buf`` is writable memory the caller hands over
    (say a bytearray the segment was read into, not used again): the C kernel
    may write the value column into it instead of into fresh memory (the
    batch then keeps ``buf`` alive, and a bytearray cannot be resized while
    it lives); ``buf``'s bytes are unspecified afterwards, also after an error.
    No effect on read-only memory (bytes) or with the pure decoder.
    See the module docstring for the column semantics and errors.
    """
    impl = _NativeDecoder if IMPLEMENTATION == "native" else _PureDecoder
    return _decode(impl, buf, topic=topic, partition=partition,
                   start_offset=start_offset, end_offset=end_offset, aborted=aborted,
                   include_headers=include_headers, verify_crc=verify_crc, segment=segment,
                   base_position=base_position, reuse_input=reuse_input)
