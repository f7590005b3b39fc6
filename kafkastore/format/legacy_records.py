"""Kafka's old message format, magic 0 and 1 ("message sets"): decoding, encoding and the
conversions to and from v2 record batches that Produce v0-2 and Fetch v0-3 need.

See Kafka's LegacyRecord.java / AbstractLegacyRecordBatch.java (and kafka-python's
``kafka/record/legacy_records.py``). The wire schema (all integers big-endian,
offsets in bytes from the start of the entry)::

    MessageSet => repeated entries, no count (the enclosing bytes field bounds it)

    Entry =>
      Offset       int64    0   the message's offset; see "wrappers" below
      MessageSize  int32    8   bytes after this field
      CRC          uint32  12   CRC-32 (zlib's, not CRC-32C) of Magic .. end of the message
      Magic        int8    16   0 or 1
      Attributes   int8    17   see the masks below
      Timestamp    int64   18   magic 1 only (absent in magic 0)
      KeyLength    int32        -1 = null key
      Key          bytes
      ValueLength  int32        -1 = null value
      Value        bytes

    Attributes (int8) =>
      bits 0-2  compression codec (0 none, 1 gzip, 2 snappy, 3 lz4; zstd never existed here)
      bit  3    timestamp type (magic 1: 0 create time, 1 log append time)

Wrappers: a compressed entry (codec != 0) carries, as its value, a whole inner message
set compressed with that codec; its key is null. Inner messages are never compressed
themselves. In magic 0 the inner offsets are absolute. In magic 1 they are relative
(0, 1, ...) and the wrapper's offset is the absolute offset of the last inner message,
so ``absolute = wrapper offset - last inner relative offset + inner relative offset``.
Under log-append time (magic 1) every inner message takes the wrapper's timestamp.

Codec framings are the ones Kafka's Java clients write (see :mod:`.compression`), with
one exception: magic 0 lz4 is ``KafkaLZ4BlockOutputStream``'s broken framing (KAFKA-3160),
whose header checksum byte was computed over the 4 magic bytes too. It is repaired
before reading and broken again on writing, as Kafka does for magic 0.

Everything here is a pure function over bytes-like objects: no I/O, no clocks. Every
length is checked against the bytes that are there before anything is sliced, and
decompression is bounded, so garbage input fails with
:class:`~kafkastore.errors.CorruptRecordError` or :class:`~kafkastore.errors.CompressionError`.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import CompressionError, CorruptRecordError
from .compression import MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .record_batch import (COMPRESSION_MASK, CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Record,
                           decode_batch, encode_batch)

# ----------------------------------------------------------------- layout

ENTRY_HEAD = struct.Struct(">qiIbb")                 # Offset, MessageSize, CRC, Magic, Attributes
LOG_OVERHEAD = struct.calcsize(">qi")                # 12: Offset + MessageSize
CRC_OFFSET = LOG_OVERHEAD                            # 12
MAGIC_OFFSET = struct.calcsize(">qiI")               # 16
ATTRIBUTES_OFFSET = MAGIC_OFFSET + 1                 # 17
TIMESTAMP_OFFSET = ATTRIBUTES_OFFSET + 1             # 18 (magic 1)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
#: Bytes of a message after MessageSize with null key and value, per magic.
MESSAGE_OVERHEAD = {0: struct.calcsize(">Ibbii"), 1: struct.calcsize(">Ibbqii")}   # 14, 22

MAGIC_V0, MAGIC_V1 = 0, 1
CODEC_MASK = COMPRESSION_MASK                        # 0x07
TIMESTAMP_TYPE_MASK = 0x08
#: The codecs the old format has (zstd came with magic 2 only, KIP-110).
LEGACY_CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)

# LZ4 frame layout: magic, FLG, BD, [content size 8], [dict id 4], HC.
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One decoded (inner or plain) message: absolute offset, timestamp (-1 in magic 0), key,
    value, its magic and timestamp type, and the codec of the wrapper it came in (0: none)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    magic: int
    timestamp_type: int = CREATE_TIME
    codec: int = 0


# ----------------------------------------------------------------- xxh32 (lz4 header checksum)

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (the LZ4 frame header checksum is its second byte); small inputs only
    are ever hashed here, so the plain-Python version is fast enough."""
    n, i = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            for k in range(4):
                lane = int.from_bytes(data[i + 4 * k:i + 4 * k + 4], "little")
                v[k] = (_rotl((v[k] + lane * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[i:i + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _lz4_hc_position(frame: bytes) -> int:
    """Where the header checksum byte of an LZ4 frame is (CompressionError if no frame)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise CompressionError("not an lz4 frame")
    flg = frame[4]
    pos = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & _LZ4_FLG_DICT_ID else 0)
    if len(frame) <= pos:
        raise CompressionError("truncated lz4 frame header")
    return pos


def _set_lz4_hc(frame: bytes, broken: bool) -> bytes:
    """``frame`` with its header checksum computed right (over the descriptor, from FLG) or
    as Kafka's magic 0 writer did (from the frame magic on)."""
    pos = _lz4_hc_position(frame)
    hc = (xxh32(frame[0 if broken else 4:pos]) >> 8) & 0xFF
    return frame[:pos] + bytes((hc,)) + frame[pos + 1:]


def _decompress(codec: int, magic: int, payload, max_size: int) -> bytes:
    if codec == Compression.LZ4 and magic == MAGIC_V0:
        payload = _set_lz4_hc(bytes(payload), broken=False)
    return decompress(codec, payload, max_size)


def _compress(codec: int, magic: int, data: bytes) -> bytes:
    out = compress(codec, data)
    if codec == Compression.LZ4 and magic == MAGIC_V0:
        out = _set_lz4_hc(out, broken=True)
    return out


# ----------------------------------------------------------------- decode

def _read_bytes(buf, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"message ends before its {what} length", position=pos)
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise CorruptRecordError(f"{what} length {n} runs past its message", position=pos - 4)
    return bytes(buf[pos:pos + n]), pos + n


def _entries(buf, *, allow_partial: bool):
    """``(offset, start, end, crc, magic, attributes)`` of each entry of a message set; a
    trailing partial entry is an error unless ``allow_partial`` (then it ends the walk)."""
    n, pos = len(buf), 0
    while pos < n:
        if n - pos < ENTRY_HEAD.size:
            if allow_partial:
                return
            raise CorruptRecordError(f"{n - pos} trailing bytes are not a whole message", position=pos)
        offset, size, crc, magic, attrs = ENTRY_HEAD.unpack_from(buf, pos)
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise CorruptRecordError(f"message magic {magic} (only 0 and 1 here)", offset=offset,
                                     position=pos)
        if size < MESSAGE_OVERHEAD[magic]:
            raise CorruptRecordError(f"message size {size} is below the minimum "
                                     f"{MESSAGE_OVERHEAD[magic]}", offset=offset, position=pos)
        end = pos + LOG_OVERHEAD + size
        if end > n:
            if allow_partial:
                return
            raise CorruptRecordError(f"message of {size} bytes runs past the message set",
                                     offset=offset, position=pos)
        yield offset, pos, end, crc, magic, attrs
        pos = end


def decode_message_set(buf, *, verify_crc: bool = True, allow_partial: bool = False,
                       max_decompressed_size: int = MAX_DECOMPRESSED_SIZE,
                       inner_set: bool = False) -> list[LegacyMessage]:
    """Every message of a magic 0/1 message set, wrappers unpacked, with absolute offsets.

    Checks each CRC-32 (unless ``verify_crc=False``), the magic, every length, that wrappers
    hold uncompressed messages of their own magic and that the codec is one the old format
    has, and that all wrappers together decompress to at most ``max_decompressed_size``
    bytes. A trailing partial message (what a size-limited fetch may end with) is skipped
    when ``allow_partial``, else an error (``inner_set``: this is a wrapper's content,
    where compressed messages are refused). Raises CorruptRecordError / CompressionError.
    """
    view = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    out: list[LegacyMessage] = []
    unpacked = 0
    for offset, start, end, crc, magic, attrs in _entries(view, allow_partial=allow_partial):
        if verify_crc:
            actual = zlib.crc32(view[start + MAGIC_OFFSET:end])
            if actual != crc:
                raise CorruptRecordError(f"CRC-32 mismatch: stored 0x{crc:08x}, computed "
                                         f"0x{actual:08x}", offset=offset, position=start)
        codec = attrs & CODEC_MASK
        ts_type = LOG_APPEND_TIME if magic == MAGIC_V1 and attrs & TIMESTAMP_TYPE_MASK else CREATE_TIME
        pos = start + TIMESTAMP_OFFSET
        timestamp = NO_TIMESTAMP
        if magic == MAGIC_V1:
            (timestamp,) = _I64.unpack_from(view, pos)
            pos += 8
        try:
            key, pos = _read_bytes(view, pos, end, "key")
            value, pos = _read_bytes(view, pos, end, "value")
        except CorruptRecordError as exc:
            raise exc.located(offset=offset, position=start) from None
        if pos != end:
            raise CorruptRecordError(f"{end - pos} bytes after the value inside the message",
                                     offset=offset, position=start)
        if codec == Compression.NONE:
            out.append(LegacyMessage(offset, timestamp, key, value, magic, ts_type))
            continue
        if inner_set:  # refused before decompressing: no nesting, so no recursion bomb
            raise CorruptRecordError("a compressed message holds a compressed message",
                                     offset=offset, position=start)
        if codec not in LEGACY_CODECS:
            raise CorruptRecordError(f"unknown compression codec {codec} in message attributes",
                                     offset=offset, position=start)
        if value is None:
            raise CorruptRecordError("compressed message without a value", offset=offset, position=start)
        try:
            # One bound for the whole set, not per wrapper: many small wrappers of a
            # request cannot add up to more than one v2 batch may.
            inner_buf = _decompress(codec, magic, value, max_decompressed_size - unpacked)
        except CompressionError as exc:
            raise CompressionError(f"{exc} (offset {offset}, position {start})") from exc
        unpacked += len(inner_buf)
        inner = decode_message_set(inner_buf, verify_crc=verify_crc,
                                   max_decompressed_size=max_decompressed_size, inner_set=True)
        if not inner:
            raise CorruptRecordError("compressed message holds no messages", offset=offset, position=start)
        if any(m.magic != magic for m in inner):
            raise CorruptRecordError("a compressed message holds one of another magic",
                                     offset=offset, position=start)
        shift = offset - inner[-1].offset if magic == MAGIC_V1 else 0
        for m in inner:
            ts = timestamp if ts_type == LOG_APPEND_TIME else m.timestamp
            out.append(LegacyMessage(m.offset + shift, ts, m.key, m.value, magic, ts_type, codec))
    return out


# ----------------------------------------------------------------- encode

def _message(magic: int, attrs: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(struct.pack(">bb", magic, attrs))
    if magic == MAGIC_V1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field))
            body += field
    return struct.pack(">I", zlib.crc32(body)) + bytes(body)


def _entry(offset: int, message: bytes) -> bytes:
    return struct.pack(">qi", offset, len(message)) + message


def encode_message_set(records: Sequence[Record], magic: int, *, compression=Compression.NONE,
                       timestamp_type: int = CREATE_TIME) -> bytes:
    """``records`` (with absolute offsets) as a magic 0/1 message set: one entry each, or one
    wrapper holding all when compressed (inner offsets absolute in magic 0, relative to the
    first record in magic 1, the wrapper at the last record's offset, as Kafka's
    MemoryRecordsBuilder writes them). Headers are dropped (the old format has none);
    magic 0 has no timestamps. Raises CorruptRecordError for a codec the old format lacks."""
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise CorruptRecordError(f"magic {magic} is not an old message format")
    codec = Compression.parse(compression)
    if codec not in LEGACY_CODECS:
        raise CorruptRecordError(f"{codec.name.lower()} cannot be written in message format v{magic}")
    log_append = magic == MAGIC_V1 and timestamp_type == LOG_APPEND_TIME
    ts_attr = TIMESTAMP_TYPE_MASK if log_append else 0
    if codec == Compression.NONE:
        return b"".join(_entry(r.offset, _message(magic, ts_attr, r.timestamp, r.key, r.value))
                        for r in records)
    if not records:
        return b""
    base = records[0].offset if magic == MAGIC_V1 else 0
    inner = b"".join(_entry(r.offset - base, _message(magic, ts_attr, r.timestamp, r.key, r.value))
                     for r in records)
    wrapper_ts = max(r.timestamp for r in records)
    return _entry(records[-1].offset,
                  _message(magic, int(codec) | ts_attr, wrapper_ts, None, _compress(codec, magic, inner)))


# ----------------------------------------------------------------- conversions

def up_convert(buf, *, max_decompressed_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """A produce request's magic 0/1 message set as one v2 record batch, as Kafka's
    LogValidator converts it: offsets 0..n-1 (the broker assigns the real ones), the
    messages' timestamps (-1 from magic 0), create time (a LogAppendTime topic rewrites it
    on append), no producer id, compressed with the codec the producer used (Kafka's
    default ``compression.type=producer``). Raises CorruptRecordError / CompressionError
    for anything malformed, including an empty set or messages of mixed magic."""
    messages = decode_message_set(buf, max_decompressed_size=max_decompressed_size)
    if not messages:
        raise CorruptRecordError("empty message set")
    magic = messages[0].magic
    codec = next((m.codec for m in messages if m.codec), Compression.NONE)
    if any(m.magic != magic for m in messages):
        raise CorruptRecordError("a message set mixes magic 0 and 1")
    records = [Record(i, m.timestamp, m.key, m.value) for i, m in enumerate(messages)]
    return encode_batch(records, compression=codec)


@dataclass(frozen=True, slots=True)
class DownConverted:
    """What :func:`down_convert` made: ``units`` are whole entries (a plain message or one
    wrapper), each ``(bytes, next_offset)``, in offset order; ``unsupported`` says a zstd
    batch stopped the conversion (Kafka: UNSUPPORTED_COMPRESSION_TYPE before Fetch v10)."""

    units: tuple[tuple[bytes, int], ...]
    unsupported: bool = False


def down_convert(batches, magic: int, fetch_offset: int) -> DownConverted:
    """Stored v2 batches (concatenated) as magic 0/1 entries for an old fetcher, as Kafka's
    ``RecordsUtil.downConvert``: control batches (transaction markers) are dropped; every
    other batch, aborted transactional data included (old fetchers are read_uncommitted),
    becomes plain messages (uncompressed batch: only records at or after ``fetch_offset``)
    or one wrapper with the batch's codec holding all of its records (the client skips
    those before its offset); headers are dropped; a log-append-time batch keeps that type
    (magic 1). A zstd batch cannot be written in the old format: conversion stops before it.
    """
    view = memoryview(batches).cast("B") if not isinstance(batches, (bytes, bytearray)) else batches
    units: list[tuple[bytes, int]] = []
    pos, n = 0, len(view)
    while pos < n:
        header, records = decode_batch(view, pos, verify_crc=False)
        pos += header.size
        if header.is_control:
            continue
        codec = header.compression
        if codec == Compression.ZSTD:
            return DownConverted(tuple(units), True)
        if magic == MAGIC_V0:
            records = [Record(r.offset, NO_TIMESTAMP, r.key, r.value) for r in records]
        if codec == Compression.NONE:
            ts_attr = TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and header.timestamp_type else 0
            units.extend((_entry(r.offset, _message(magic, ts_attr, r.timestamp, r.key, r.value)),
                          r.offset + 1) for r in records if r.offset >= fetch_offset)
        elif records:
            units.append((encode_message_set(records, magic, compression=codec,
                                             timestamp_type=header.timestamp_type),
                          records[-1].offset + 1))
    return DownConverted(tuple(units))


def fit(units: Iterable[tuple[bytes, int]], limit: int, *, first_whole: bool) -> bytes:
    """The entries that fit in ``limit`` bytes, in order. When even the first does not fit:
    all of it if ``first_whole`` (Fetch v3, KIP-74), else its first ``limit`` bytes (Fetch
    v0-2, where Kafka returns a partial message and the consumer must raise its fetch size)."""
    out: list[bytes] = []
    total = 0
    for data, _next in units:
        if total + len(data) > limit:
            if not out:
                out.append(data if first_whole else data[:max(limit, 0)])
            break
        out.append(data)
        total += len(data)
    return b"".join(out)
