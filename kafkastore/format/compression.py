"""Kafka's compression codecs, with the framings Kafka's Java client uses.

The codec of a v2 record batch is in the low three bits of its attributes;
the compressed payload is everything after the 61-byte header (the records,
without the record count, which stays in the header).

* gzip: a gzip stream (Java's ``GZIPOutputStream``); on read, concatenated
  members are accepted as ``GZIPInputStream`` does.
* snappy: written with the xerial framing of snappy-java's
  ``SnappyOutputStream`` (the only one Kafka's Java client writes)::

      magic  b"\\x82SNAPPY\\x00"   8 bytes
      version                      int32 BE = 1
      compatible version           int32 BE = 1
      repeated: [int32 BE length][raw snappy block]   one block per 32 KiB of input

  On read either that framing (also several concatenated streams, as
  snappy-java reads them) or one raw snappy block, which some non-Java
  clients write.
* lz4: one LZ4 frame as ``KafkaLZ4BlockOutputStream`` writes it: 64 KiB
  blocks, independent blocks, no block or content checksum, no content size.
  Any valid LZ4 frame is read.
* zstd: a zstd frame without content size (zstd-jni's streaming output); on
  read, frames with or without content size, concatenated frames accepted.

Every decompression is bounded by ``max_size`` so a tiny corrupt or hostile
payload cannot allocate gigabytes (a "decompression bomb"). All failures
raise :class:`~kafkastore.errors.CompressionError`.
"""
from __future__ import annotations

import enum
import struct
import threading
import zlib

from ..errors import CompressionError, ConfigError

#: Default bound on the decompressed size of one batch's records.
MAX_DECOMPRESSED_SIZE = 1 << 30  # 1 GiB: far above any sane batch, far below a bomb

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default block size, which Kafka uses
LZ4_BLOCK_SIZE = 64 * 1024     # KafkaLZ4BlockOutputStream's default

# Kafka's default levels (producer/topic ``compression.<codec>.level``, KIP-390),
# except lz4: Kafka >= 3.8 defaults to 9 (HC), which is several times slower in
# Python; the fast compressor is what Kafka used before that and the format is
# the same. Pass ``level=`` to choose.
DEFAULT_LEVELS = {"gzip": 6, "lz4": 0, "zstd": 3}


class Compression(enum.IntEnum):
    """The codec ids of the batch attributes (bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value) -> "Compression":
        """A codec from its Kafka name (``"zstd"``, ``"uncompressed"``, ...) or id.

        Raises ConfigError naming the valid values otherwise.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        elif isinstance(value, str):
            name = value.strip().lower()
            if name == "uncompressed":  # Kafka's name for "none" in topic configs
                return cls.NONE
            if name in _BY_NAME:
                return _BY_NAME[name]
        raise ConfigError(
            f"unknown compression {value!r}: expected one of "
            f"{', '.join(_BY_NAME)}, uncompressed (or 0-4)")

    @property
    def kafka_name(self) -> str:
        """The lower-case name Kafka uses (``"none"``, ``"gzip"``, ...)."""
        return self.name.lower()


_BY_NAME = {c.name.lower(): c for c in Compression}


def _codec(codec) -> Compression:
    try:
        return Compression.parse(codec)
    except ConfigError as e:
        raise CompressionError(str(e)) from None


# ---------------------------------------------------------------- compress

def compress(codec, data, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` in Kafka's framing (see module doc).

    ``level`` is the codec's compression level (None: Kafka's default);
    ``Compression.NONE`` returns the bytes unchanged.
    """
    codec = _codec(codec)
    try:
        if codec is Compression.NONE:
            return bytes(data)
        if codec is Compression.GZIP:
            return _gzip_compress(data, DEFAULT_LEVELS["gzip"] if level is None else level)
        if codec is Compression.SNAPPY:
            return _snappy_compress(data)
        if codec is Compression.LZ4:
            return _lz4_compress(data, DEFAULT_LEVELS["lz4"] if level is None else level)
        return _zstd_compress(data, DEFAULT_LEVELS["zstd"] if level is None else level)
    except CompressionError:
        raise
    except Exception as e:  # a library error: bad level, out of memory...
        raise CompressionError(f"{codec.kafka_name} compression failed: {e}") from e


def _gzip_compress(data, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 16+15: gzip wrapper
    return c.compress(data) + c.flush()


def _snappy_compress(data) -> bytes:
    from cramjam import snappy

    view = memoryview(data).cast("B")
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def _lz4_compress(data, level: int) -> bytes:
    import lz4.frame

    return lz4.frame.compress(
        data, compression_level=level, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False, content_checksum=False, block_checksum=False,
        store_size=False)


def _zstd_compress(data, level: int) -> bytes:
    obj = _zstd_compressor(level).compressobj()  # streaming, as zstd-jni's: no content size
    return obj.compress(data) + obj.flush()


def _zstd_compressor(level: int):
    """This thread's ZstdCompressor for ``level``: building one per batch cost as much as
    compressing a small batch (a compressor is not thread-safe, so one per thread and level;
    reusing its context gives the same bytes)."""
    compressors = getattr(_ZSTD_LOCAL, "cctx", None)
    if compressors is None:
        compressors = _ZSTD_LOCAL.cctx = {}
    cctx = compressors.get(level)
    if cctx is None:
        import zstandard

        cctx = compressors[level] = zstandard.ZstdCompressor(
            level=level, write_content_size=False, write_checksum=False)
    return cctx


# -------------------------------------------------------------- decompress

def decompress(codec, data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress a Kafka-framed payload; at most ``max_size`` bytes of output.

    Raises CompressionError for an unknown codec, a payload that does not
    decompress (corrupt, truncated, trailing garbage) or output over ``max_size``.
    """
    out = decompress_buffer(codec, data, max_size)
    return out if isinstance(out, bytes) else bytes(out)


def decompress_buffer(codec, data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes | bytearray:
    """:func:`decompress`, but the result may be the bytearray it was decompressed into
    (zstd of several frames or slices), saving a copy for a caller that only reads it
    through the buffer protocol (the Arrow decoder: one copy of every compressed batch's
    records)."""
    codec = _codec(codec)
    if codec is Compression.NONE:
        return bytes(data)
    try:
        if codec is Compression.GZIP:
            return _gzip_decompress(data, max_size)
        if codec is Compression.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec is Compression.LZ4:
            return _lz4_decompress(data, max_size)
        return _zstd_decompress(data, max_size)
    except CompressionError:
        raise
    except Exception as e:  # zlib.error, zstandard.ZstdError, RuntimeError from lz4, ...
        raise CompressionError(f"corrupt {codec.kafka_name} payload: {e}") from e


def _too_large(codec: str, max_size: int) -> CompressionError:
    return CompressionError(
        f"{codec} payload decompresses to more than {max_size} bytes")


def _gzip_decompress(data, max_size: int) -> bytes:
    rest = bytes(data)
    if not rest:
        raise CompressionError("empty gzip payload")
    out = bytearray()
    while rest:  # one gzip member per round
        d = zlib.decompressobj(31)
        chunk = d.decompress(rest, max_size - len(out) + 1)
        out += chunk
        if len(out) > max_size:
            raise _too_large("gzip", max_size)
        if not d.eof:
            if d.unconsumed_tail:  # stopped at the size bound with input left
                raise _too_large("gzip", max_size)
            raise CompressionError("truncated gzip payload")
        rest = d.unused_data
    return bytes(out)


def _snappy_raw(snappy, block, done: int, max_size: int) -> bytes:
    # The raw format starts with the uncompressed length: check it before
    # letting the library allocate that much.
    if done + snappy.decompress_raw_len(block) > max_size:
        raise _too_large("snappy", max_size)
    return bytes(snappy.decompress_raw(block))


def _snappy_decompress(data, max_size: int) -> bytes:
    from cramjam import snappy

    buf = bytes(data)
    if not buf.startswith(XERIAL_MAGIC):
        return _snappy_raw(snappy, buf, 0, max_size)
    out = bytearray()
    pos, end = 0, len(buf)
    while pos < end:
        if buf.startswith(XERIAL_MAGIC, pos):
            # A (possibly concatenated) stream header; version and compat are
            # not checked, as some non-Java writers get their byte order wrong.
            if end - pos < len(XERIAL_HEADER):
                raise CompressionError("truncated xerial snappy header")
            pos += len(XERIAL_HEADER)
            continue
        if end - pos < 4:
            raise CompressionError(f"truncated xerial snappy chunk length at byte {pos}")
        (length,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CompressionError(
                f"xerial snappy chunk length {length} at byte {pos - 4} "
                f"exceeds the {end - pos} bytes left")
        out += _snappy_raw(snappy, buf[pos:pos + length], len(out), max_size)
        pos += length
    return bytes(out)


def _lz4_decompress(data, max_size: int) -> bytes:
    import lz4.frame

    rest = bytes(data)
    if not rest:
        raise CompressionError("empty lz4 payload")
    out = bytearray()
    while rest:  # one frame per round
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(rest, max_length=max_size - len(out) + 1)
        while not d.eof and not d.needs_input and len(out) <= max_size:
            # Stopped at max_length with more output pending.
            more = d.decompress(b"", max_length=max_size - len(out) + 1)
            if not more:  # no progress: never spin
                break
            out += more
        if len(out) > max_size:
            raise _too_large("lz4", max_size)
        if not d.eof:
            raise CompressionError("truncated lz4 frame")
        rest = d.unused_data or b""
    return bytes(out)


# zstd's decompressobj has no output bound per call, so input is fed in slices:
# the worst zstd ratio (RLE blocks) is about 32768:1, so a slice of N bytes can
# overshoot the bound by at most ~32768*N before it is noticed. Slices are sized
# so that overshoot stays within a quarter of the bound (1 KiB at least).
_ZSTD_MAX_RATIO = 32768
_ZSTD_LOCAL = threading.local()


def _zstd_decompressor():
    # Building a ZstdDecompressor costs as much as decompressing a small batch: reuse one per thread.
    dctx = getattr(_ZSTD_LOCAL, "dctx", None)
    if dctx is None:
        import zstandard

        dctx = _ZSTD_LOCAL.dctx = zstandard.ZstdDecompressor()
    return dctx


def _zstd_decompress(data, max_size: int) -> bytes | bytearray:
    view = memoryview(data).cast("B")
    if not len(view):
        raise CompressionError("empty zstd payload")
    feed = max(1024, max_size // _ZSTD_MAX_RATIO // 4)
    dctx = _zstd_decompressor()
    if len(view) <= feed:
        # The common case, a batch's payload of one frame fed in one slice: its output as
        # decompress made it (no copy into a bytearray).
        d = dctx.decompressobj()
        out = d.decompress(view)
        if d.eof and not d.unused_data:
            if len(out) > max_size:
                raise _too_large("zstd", max_size)
            return out
    out = bytearray()
    pos = 0
    while pos < len(view):  # one frame per round
        d = dctx.decompressobj()
        while not d.eof and pos < len(view):
            chunk = view[pos:pos + feed]
            pos += len(chunk)
            out += d.decompress(chunk)
            if len(out) > max_size:
                raise _too_large("zstd", max_size)
        if not d.eof:
            raise CompressionError("truncated zstd frame")
        # Bytes fed past the end of this frame belong to the next one.
        pos -= len(d.unused_data)
    return out
