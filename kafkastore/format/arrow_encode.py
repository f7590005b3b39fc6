"""Arrow columns -> Kafka record batches (magic v2): the write side of :mod:`arrow_decode`.

:func:`prepare` turns a table with columns ``key`` (binary/string, nullable),
``value`` (binary/string, nullable), optionally ``timestamp`` (int64 ms or a
timestamp type) and ``headers`` (``list<struct<key string, value binary>>``,
:data:`~kafkastore.format.arrow_decode.HEADERS_TYPE`, or ``list<list<string|binary>>``
of ``[key, value]`` pairs) into :class:`Columns`: flat numpy views of the
Arrow buffers, made once. :func:`encode_rows` encodes rows ``[start, stop)``
of it as one batch with the same arguments as
:func:`kafkastore.format.record_batch.encode_batch`, and the bytes are identical to
``encode_batch`` of the same records (tests check both paths against each
other): only the records section is built here, the header, compression
(:mod:`kafkastore.format.compression`) and CRC come from
:func:`kafkastore.format.record_batch.assemble_batch`.

Two implementations behind this one interface, as for decoding: the C kernel
(``_native.encode_arrow``: walks the buffers, no per-record Python objects)
and a pure one that converts the rows to :class:`~kafkastore.format.record_batch.Record`
objects and runs the pure encoder. ``KAFKASTORE_NO_EXTENSIONS=1`` forces the
pure one; :func:`encode_rows_pure` / :func:`encode_rows_native` pick one
explicitly. Whatever the C kernel does not handle (offsets out of order, a
timestamp delta beyond int64, a record over 2 GiB) goes to the pure encoder,
which raises the precise :class:`~kafkastore.errors.ConfigError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .compression import Compression
from .partitioner import murmur2
from .extensions import ENABLED, load
from ..errors import ConfigError
from .record_batch import (CREATE_TIME, DELETE_HORIZON_MASK, NO_PRODUCER_ID, NO_SEQUENCE,
                           TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, Record, assemble_batch,
                           batch_offsets, check_timestamp_type, encode_records_pure)

_native = load("kafkastore.format._native")

__all__ = ["Columns", "prepare", "encode_rows", "encode_rows_pure", "encode_rows_native",
           "EncodedBatches", "encode_batches", "encode_batches_pure", "encode_batches_native",
           "binary_array", "int64_array", "int64_values", "validity",
           "murmur2_column", "IMPLEMENTATION", "NATIVE_AVAILABLE"]

NATIVE_AVAILABLE = _native is not None and hasattr(_native, "encode_arrow")
#: "native" or "pure": what encode_rows uses.
IMPLEMENTATION = "native" if NATIVE_AVAILABLE and ENABLED else "pure"

_EMPTY = np.zeros(0, np.uint8)


@dataclass(frozen=True)
class _Binary:
    """A nullable binary column as flat buffers: row i is ``data[offsets[i]:offsets[i+1]]``."""

    valid: np.ndarray | None   # uint8[n], None when there are no nulls
    offsets: np.ndarray        # int32[n+1], absolute positions in data
    data: np.ndarray           # uint8

    def lengths(self) -> np.ndarray:
        """int64[n]: each row's length, -1 for null."""
        lens = np.diff(self.offsets).astype(np.int64)
        if self.valid is not None:
            lens[self.valid == 0] = -1
        return lens


@dataclass(frozen=True)
class Columns:
    """A table prepared for encoding (see :func:`prepare`); row slices are cheap views."""

    n: int
    key: _Binary
    value: _Binary
    timestamps: np.ndarray | None    # int64[n] ms, None: not given
    ts_valid: np.ndarray | None      # uint8[n] or None (no nulls)
    h_offsets: np.ndarray | None     # int32[n+1] into the header entries; None: no headers
    h_valid: np.ndarray | None
    h_key: _Binary | None
    h_value: _Binary | None

    def header_bytes(self) -> np.ndarray:
        """int64[n]: per row, sum over its headers of key bytes + value bytes."""
        if self.h_offsets is None:
            return np.zeros(self.n, np.int64)
        klen = np.diff(self.h_key.offsets).astype(np.int64)
        vlen = np.maximum(self.h_value.lengths(), 0)
        per_entry = np.concatenate(([0], np.cumsum(klen + vlen)))
        start, stop = self.h_offsets[:-1], self.h_offsets[1:]
        out = per_entry[stop] - per_entry[start]
        if self.h_valid is not None:
            out[self.h_valid == 0] = 0
        return out

    def header_counts(self) -> np.ndarray:
        """int64[n]: headers per row."""
        if self.h_offsets is None:
            return np.zeros(self.n, np.int64)
        out = np.diff(self.h_offsets).astype(np.int64)
        if self.h_valid is not None:
            out[self.h_valid == 0] = 0
        return out


def _binary(arr: pa.Array | pa.ChunkedArray, what: str) -> _Binary:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_null(t):
        arr = pa.nulls(len(arr), pa.binary())
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        arr = arr.cast(pa.binary())
    elif not pa.types.is_binary(t):
        raise ConfigError(f"column {what!r} must be binary or string, got {t}")
    n, off = len(arr), arr.offset
    bufs = arr.buffers()
    offsets = (np.frombuffer(bufs[1], np.int32, count=off + n + 1)[off:] if bufs[1] is not None
               else np.zeros(n + 1, np.int32))
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and bufs[2].size else _EMPTY
    valid = None
    if arr.null_count:
        valid = validity(arr)
    return _Binary(valid, offsets, data)


def validity(arr) -> np.ndarray:
    """uint8[len(arr)]: 1 where ``arr`` (an Array or ChunkedArray) is valid, from its bitmap.

    Not ``is_valid().to_numpy()``: converting a boolean array imports pandas (a quarter
    of a second of every CLI run that produces)."""
    if isinstance(arr, pa.ChunkedArray):
        return (np.concatenate([validity(c) for c in arr.chunks]) if arr.num_chunks
                else np.zeros(0, np.uint8))
    n, bitmap = len(arr), arr.buffers()[0]
    if bitmap is None:   # no nulls, or all (a null-type array has no bitmap)
        return np.full(n, 0 if arr.null_count else 1, np.uint8)
    bits = np.frombuffer(bitmap, np.uint8)
    return np.unpackbits(bits, count=arr.offset + n, bitorder="little")[arr.offset:]


def _timestamps(arr) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_timestamp(t):
        unit = {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        raw = arr.cast(pa.int64())
        arr = pc.floor(pc.divide(raw, unit)).cast(pa.int64()) if unit > 1 else raw
        if t.unit == "s":
            arr = pc.multiply_checked(arr, 1000)
    elif pa.types.is_integer(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_null(t):
        arr = pa.nulls(len(arr), pa.int64())
    else:
        raise ConfigError(f"column 'timestamp' must be int64 epoch ms or a timestamp, got {t}")
    return int64_values(arr)


def int64_values(arr, fill: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer Array or ChunkedArray as (int64 values with ``fill`` for nulls, uint8
    validity or None if no nulls), read from its buffers (see :func:`validity`)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.type != pa.int64():
        arr = arr.cast(pa.int64())
    n, data = len(arr), arr.buffers()[1]
    values = (np.frombuffer(data, np.int64, count=arr.offset + n)[arr.offset:] if data is not None
              else np.full(n, fill, np.int64))
    valid = None
    if arr.null_count:
        valid = validity(arr)
        values = np.where(valid.view(bool), values, fill)
    return values, valid


def _headers(arr) -> tuple[np.ndarray, np.ndarray | None, _Binary, _Binary]:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_large_list(t):
        arr = arr.cast(pa.list_(t.value_type))
        t = arr.type
    if not pa.types.is_list(t):
        raise ConfigError(f"column 'headers' must be a list of (key, value) pairs, got {t}")
    n, off = len(arr), arr.offset
    offsets = np.frombuffer(arr.buffers()[1], np.int32, count=off + n + 1)[off:]
    values = arr.values
    vt = values.type
    if pa.types.is_struct(vt) and vt.num_fields == 2:
        hkey, hval = values.field(0), values.field(1)
        if values.null_count:
            raise ConfigError("a header (struct) is null: every header needs a key")
    elif (pa.types.is_list(vt) or pa.types.is_fixed_size_list(vt)) and not values.null_count:
        # [key, value] pairs, as the CLI's JSON lines give them
        lens = pc.list_value_length(values)
        if len(values) and (lens.null_count or pc.min(lens).as_py() != 2
                            or pc.max(lens).as_py() != 2):
            raise ConfigError("each header must be a [key, value] pair")
        hkey = pc.list_element(values, 0)
        hval = pc.list_element(values, 1)
    else:
        raise ConfigError(f"column 'headers' must hold struct<key, value> or [key, value] "
                          f"pairs, got {vt}")
    if hkey.null_count:
        raise ConfigError("a header key is null: header keys are strings")
    if not (pa.types.is_string(hkey.type) or pa.types.is_large_string(hkey.type)):
        if pa.types.is_binary(hkey.type) or pa.types.is_large_binary(hkey.type):
            hkey = hkey.cast(pa.string())  # validates UTF-8 (Kafka header keys are strings)
        else:
            raise ConfigError(f"header keys must be strings, got {hkey.type}")
    valid = None
    if arr.null_count:
        valid = validity(arr)
    return offsets, valid, _binary(hkey, "header key"), _binary(hval, "header value")


def prepare(table: pa.Table | pa.RecordBatch) -> Columns:
    """Flatten ``table``'s ``key``, ``value``, ``timestamp``, ``headers`` columns (see the
    module docstring; only ``value`` is required) into :class:`Columns`. Bad column types
    raise ConfigError."""
    names = table.schema.names
    if "value" not in names:
        raise ConfigError("a table to produce needs a 'value' column")
    n = table.num_rows
    value = _binary(table.column("value"), "value")
    key = (_binary(table.column("key"), "key") if "key" in names
           else _Binary(np.zeros(n, np.uint8), np.zeros(n + 1, np.int32), _EMPTY))
    ts = ts_valid = None
    if "timestamp" in names:
        ts, ts_valid = _timestamps(table.column("timestamp"))
    h_off = h_valid = h_key = h_val = None
    if "headers" in names:
        h_off, h_valid, h_key, h_val = _headers(table.column("headers"))
    return Columns(n, key, value, ts, ts_valid, h_off, h_valid, h_key, h_val)


def _records_native(cols: Columns, start: int, stop: int, rows, offsets: np.ndarray,
                    timestamps: np.ndarray, base_offset: int, base_ts: int, header=None):
    k, v = cols.key, cols.value
    if cols.h_offsets is not None:
        hk, hv = cols.h_key, cols.h_value
        hbufs = (cols.h_offsets, cols.h_valid, hk.offsets, hk.data, hv.valid, hv.offsets, hv.data)
    else:
        hbufs = (None,) * 7
    sel = None if rows is None else np.ascontiguousarray(rows[start:stop], np.int64)
    return _native.encode_arrow(
        stop - start, base_offset, base_ts, np.ascontiguousarray(offsets, np.int64),
        np.ascontiguousarray(timestamps, np.int64), k.valid, k.offsets, k.data,
        v.valid, v.offsets, v.data, *hbufs, start, sel, header)


def _records_pure(cols: Columns, start: int, stop: int, rows, offsets: np.ndarray,
                  timestamps: np.ndarray) -> list[Record]:
    index = range(start, stop) if rows is None else [int(r) for r in rows[start:stop]]

    def values(b: _Binary):
        out = []
        data = b.data.tobytes() if len(b.data) else b""
        for i in index:
            if b.valid is not None and not b.valid[i]:
                out.append(None)
            else:
                out.append(data[b.offsets[i]:b.offsets[i + 1]])
        return out

    keys, vals = values(cols.key), values(cols.value)
    headers: list[tuple] = [()] * (stop - start)
    if cols.h_offsets is not None:
        hk, hv = cols.h_key, cols.h_value
        kd, vd = hk.data.tobytes(), hv.data.tobytes()
        for r, i in enumerate(index):
            if cols.h_valid is not None and not cols.h_valid[i]:
                continue
            hs = []
            for j in range(cols.h_offsets[i], cols.h_offsets[i + 1]):
                hkey = kd[hk.offsets[j]:hk.offsets[j + 1]].decode("utf-8")
                hval = (None if hv.valid is not None and not hv.valid[j]
                        else vd[hv.offsets[j]:hv.offsets[j + 1]])
                hs.append((hkey, hval))
            headers[r] = tuple(hs)
    return [Record(int(o), int(t), k, v, h)
            for o, t, k, v, h in zip(offsets, timestamps, keys, vals, headers)]


def _encode(native: bool, cols: Columns, start: int, stop: int, *, offsets, timestamps=None,
            rows=None,
            compression=Compression.NONE, timestamp_type: int = CREATE_TIME,
            producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
            base_sequence: int = NO_SEQUENCE, partition_leader_epoch: int = -1,
            transactional: bool = False, base_offset: int | None = None,
            last_offset: int | None = None, delete_horizon_ms: int | None = None,
            max_timestamp: int | None = None, compression_level: int | None = None) -> bytes:
    codec = Compression.parse(compression)
    check_timestamp_type(timestamp_type)
    if not 0 <= start < stop <= (cols.n if rows is None else len(rows)):
        raise ConfigError(f"rows [{start}, {stop}) are not a non-empty part of the rows")
    offsets = np.asarray(offsets, np.int64)
    if timestamps is None:
        if cols.timestamps is None or cols.ts_valid is not None:
            raise ConfigError("timestamps are needed for every row")
        timestamps = (cols.timestamps[start:stop] if rows is None
                      else cols.timestamps[rows[start:stop]])
    timestamps = np.asarray(timestamps, np.int64)
    if len(offsets) != stop - start or len(timestamps) != stop - start:
        raise ConfigError("one offset and one timestamp per row are needed")
    base_offset, last_offset = batch_offsets(int(offsets[0]), int(offsets[-1]), base_offset,
                                             last_offset)
    base_ts = delete_horizon_ms if delete_horizon_ms is not None else int(timestamps[0])
    out = None
    if native:
        header = None
        if codec == Compression.NONE:
            # the C kernel writes the whole batch: header and CRC too (no copy, no join)
            attributes = ((TIMESTAMP_TYPE_MASK if timestamp_type else 0)
                          | (TRANSACTIONAL_MASK if transactional else 0)
                          | (DELETE_HORIZON_MASK if delete_horizon_ms is not None else 0))
            header = (attributes, partition_leader_epoch, last_offset - base_offset,
                      max_timestamp, producer_id, producer_epoch, base_sequence)
        out = _records_native(cols, start, stop, rows, offsets, timestamps, base_offset, base_ts,
                              header)
        if out is not None and header is not None:
            return out[0]
    if out is None:
        out = encode_records_pure(_records_pure(cols, start, stop, rows, offsets, timestamps),
                                  base_offset, base_ts)
    body, max_ts = out
    return assemble_batch(body, stop - start, base_offset, last_offset, base_ts, max_ts,
                          codec=codec, timestamp_type=timestamp_type, producer_id=producer_id,
                          producer_epoch=producer_epoch, base_sequence=base_sequence,
                          partition_leader_epoch=partition_leader_epoch,
                          transactional=transactional, control=False,
                          delete_horizon=delete_horizon_ms is not None,
                          max_timestamp=max_timestamp, compression_level=compression_level)


def encode_rows(cols: Columns, start: int, stop: int, **kw) -> bytes:
    """Rows ``[start, stop)`` of ``cols`` as one v2 batch.

    Keyword arguments are those of :func:`kafkastore.format.record_batch.encode_batch`
    (a data batch: no ``control``), plus ``offsets`` (int64, one per row,
    required), ``timestamps`` (int64 ms per row; default: the table's
    ``timestamp`` column) and ``rows`` (int64 row numbers: encode rows
    ``rows[start:stop]`` of ``cols``, a gather without copying the table).
    The bytes equal ``encode_batch`` of the same records.
    """
    return _encode(IMPLEMENTATION == "native", cols, start, stop, **kw)


def encode_rows_pure(cols: Columns, start: int, stop: int, **kw) -> bytes:
    """:func:`encode_rows` with the pure encoder."""
    return _encode(False, cols, start, stop, **kw)


def encode_rows_native(cols: Columns, start: int, stop: int, **kw) -> bytes:
    """:func:`encode_rows` with the C encoder (RuntimeError if it is not built)."""
    if not NATIVE_AVAILABLE:
        raise RuntimeError("kafkastore.format._native is not built (python setup.py build_ext --inplace)")
    return _encode(True, cols, start, stop, **kw)


class EncodedBatches(NamedTuple):
    """Uncompressed batches back to back (see :func:`encode_batches`)."""

    data: object             # bytes-like, writable when the C encoder made it
    cuts: np.ndarray         # int64[k+1]: batch b holds records [cuts[b], cuts[b+1])
    positions: np.ndarray    # int64[k+1]: byte position of each batch, then the total
    max_timestamps: np.ndarray  # int64[k]: each batch's MaxTimestamp header field
    min_timestamps: np.ndarray  # int64[k]: each batch's smallest record timestamp


def batch_cuts(sizes: np.ndarray, batch_limit: int) -> np.ndarray:
    """int64[k+1] row cuts: each batch takes records while the sum of their ``sizes``
    (estimates) stays within ``batch_limit``, and at least one."""
    csum = np.cumsum(sizes)
    cuts = [0]
    n = len(sizes)
    i = 0
    while i < n:
        before = int(csum[i - 1]) if i else 0
        j = min(n, max(i + 1, int(np.searchsorted(csum, batch_limit + before, side="right"))))
        cuts.append(j)
        i = j
    return np.array(cuts, np.int64)


def _encode_batches(native: bool, cols: Columns, sizes, batch_limit: int, *, offsets,
                    timestamps, rows=None, timestamp_type: int = CREATE_TIME,
                    max_timestamp: int | None = None, producer_id: int = NO_PRODUCER_ID,
                    producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE,
                    partition_leader_epoch: int = -1,
                    transactional: bool = False) -> EncodedBatches | None:
    check_timestamp_type(timestamp_type)
    offsets = np.ascontiguousarray(offsets, np.int64)
    timestamps = np.ascontiguousarray(timestamps, np.int64)
    sizes = np.ascontiguousarray(sizes, np.int64)
    n = len(offsets)  # rows [0, n) of cols, or rows[:n]
    if (n == 0 or len(timestamps) != n or len(sizes) != n
            or n > (cols.n if rows is None else len(rows))):
        raise ConfigError("one offset, timestamp and size per row are needed")
    if rows is not None:
        rows = rows[:n]
    if native:
        attributes = ((TIMESTAMP_TYPE_MASK if timestamp_type else 0)
                      | (TRANSACTIONAL_MASK if transactional else 0))
        k, v = cols.key, cols.value
        if cols.h_offsets is not None:
            hk, hv = cols.h_key, cols.h_value
            hbufs = (cols.h_offsets, cols.h_valid, hk.offsets, hk.data, hv.valid, hv.offsets,
                     hv.data)
        else:
            hbufs = (None,) * 7
        out = _native.encode_arrow_batches(
            n, sizes, batch_limit, offsets, timestamps, k.valid, k.offsets, k.data,
            v.valid, v.offsets, v.data, *hbufs,
            None if rows is None else np.ascontiguousarray(rows, np.int64),
            (attributes, partition_leader_epoch, max_timestamp, producer_id, producer_epoch,
             base_sequence))
        if out is None:
            return None
        data, cuts, positions, max_ts, min_ts = out
        return EncodedBatches(data, np.frombuffer(cuts, np.int64),
                              np.frombuffer(positions, np.int64), np.frombuffer(max_ts, np.int64),
                              np.frombuffer(min_ts, np.int64))
    cuts = batch_cuts(sizes, batch_limit)
    parts, max_ts, min_ts = [], [], []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        seq = (base_sequence + a) & 0x7FFFFFFF if base_sequence != NO_SEQUENCE else base_sequence
        part = _encode(False, cols, a, b, offsets=offsets[a:b], timestamps=timestamps[a:b],
                       rows=rows, timestamp_type=timestamp_type, max_timestamp=max_timestamp,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=seq, partition_leader_epoch=partition_leader_epoch,
                       transactional=transactional)
        parts.append(part)
        max_ts.append(int(np.frombuffer(part, ">i8", 1, 35)[0]))
        min_ts.append(int(timestamps[a:b].min()))
    positions = np.concatenate(([0], np.cumsum([len(p) for p in parts]))).astype(np.int64)
    return EncodedBatches(bytearray(b"".join(parts)), cuts, positions,
                          np.array(max_ts, np.int64), np.array(min_ts, np.int64))


def encode_batches(cols: Columns, sizes, batch_limit: int, **kw) -> EncodedBatches | None:
    """Rows of ``cols`` (``rows``: their numbers, default all) as uncompressed data batches
    back to back in one buffer: cut where the records' estimated ``sizes`` would pass
    ``batch_limit`` (at least one record a batch), as :func:`batch_cuts` says.

    Keywords: ``offsets`` and ``timestamps`` (int64, one per row, required),
    ``rows``, and the header fields of :func:`encode_rows` (``base_sequence`` is
    the first batch's; batch b starts at ``base_sequence + cuts[b]``). Each batch's
    bytes equal :func:`encode_rows` of its rows. None when the C encoder declines
    (the caller then encodes batch by batch, which raises the precise error).
    """
    return _encode_batches(IMPLEMENTATION == "native", cols, sizes, batch_limit, **kw)


def encode_batches_pure(cols: Columns, sizes, batch_limit: int, **kw) -> EncodedBatches | None:
    """:func:`encode_batches` with the pure encoder (batch by batch, then joined)."""
    return _encode_batches(False, cols, sizes, batch_limit, **kw)


def encode_batches_native(cols: Columns, sizes, batch_limit: int,
                          **kw) -> EncodedBatches | None:
    """:func:`encode_batches` with the C encoder (RuntimeError if it is not built)."""
    if not NATIVE_AVAILABLE:
        raise RuntimeError("kafkastore.format._native is not built (python setup.py build_ext --inplace)")
    return _encode_batches(True, cols, sizes, batch_limit, **kw)


_BYTES_OR_NONE = frozenset({bytes, type(None)})
_INT_OR_NONE = frozenset({int, type(None)})


def binary_array(seq, *, native: bool | None = None) -> pa.Array | None:
    """A sequence of ``bytes`` / None as an Arrow binary array, or None when an element
    has another type (exactly bytes: no str, bytearray or subclass) or the data passes
    2 GiB. One C pass when the extension is built (``native``: force a path)."""
    if native if native is not None else IMPLEMENTATION == "native":
        out = _native.pylist_binary(seq)
        if out is None:
            return None
        n, nulls, bitmap, offsets, data = out
        return pa.Array.from_buffers(pa.binary(), n, [
            None if bitmap is None else pa.py_buffer(bitmap), pa.py_buffer(offsets),
            pa.py_buffer(data)], null_count=nulls)
    if not set(map(type, seq)) <= _BYTES_OR_NONE:
        return None
    try:
        arr = pa.array(seq, pa.binary())
    except (pa.ArrowException, OverflowError):
        return None
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def int64_array(seq, *, native: bool | None = None) -> pa.Array | None:
    """A sequence of ``int`` / None as an Arrow int64 array, or None when an element has
    another type (bool and int subclasses included) or does not fit int64."""
    if native if native is not None else IMPLEMENTATION == "native":
        out = _native.pylist_int64(seq)
        if out is None:
            return None
        n, nulls, bitmap, values = out
        return pa.Array.from_buffers(pa.int64(), n, [
            None if bitmap is None else pa.py_buffer(bitmap), pa.py_buffer(values)],
            null_count=nulls)
    if not set(map(type, seq)) <= _INT_OR_NONE:
        return None
    try:
        return pa.array(seq, pa.int64())
    except (pa.ArrowException, OverflowError):
        return None


def murmur2_column(key: _Binary, n: int) -> np.ndarray:
    """Kafka's murmur2 of every key (int32[n]; 0 where the key is null)."""
    if IMPLEMENTATION == "native":
        out = _native.murmur2_arrow(n, key.valid, np.ascontiguousarray(key.offsets), key.data)
        return np.frombuffer(out, np.int32)

    data = key.data.tobytes()
    return np.array([0 if key.valid is not None and not key.valid[i]
                     else murmur2(data[key.offsets[i]:key.offsets[i + 1]]) for i in range(n)],
                    np.int32)
