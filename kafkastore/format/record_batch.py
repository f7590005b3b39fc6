"""Kafka record batch, magic v2: header parsing, CRC, decoding and encoding.

See Kafka's DefaultRecordBatch.java and DefaultRecord.java. The wire schema
(all integers big-endian, offsets in bytes from the start of the batch)::

    RecordBatch =>
      BaseOffset           int64    0   offset of the first record (the batch's "offset")
      BatchLength          int32    8   bytes after this field: size = BatchLength + 12
      PartitionLeaderEpoch int32   12   not covered by the CRC (the broker sets it)
      Magic                int8    16   = 2
      CRC                  uint32  17   CRC-32C of Attributes .. end of batch
      Attributes           int16   21   see the masks below
      LastOffsetDelta      int32   23   last offset - base offset (kept by compaction)
      BaseTimestamp        int64   27   first record's timestamp, or delete horizon (KIP-534)
      MaxTimestamp         int64   35   max record timestamp, or the log append time
      ProducerId           int64   43   -1 without idempotence
      ProducerEpoch        int16   51
      BaseSequence         int32   53
      RecordCount          int32   57
      Records              ...     61   [Record], compressed as a whole if the codec is set

    Record =>
      Length               varint       bytes of the record after this field
      Attributes           int8         unused, 0
      TimestampDelta       varlong      timestamp - BaseTimestamp
      OffsetDelta          varint       offset - BaseOffset
      KeyLength            varint       -1 = null key
      Key                  bytes
      ValueLength          varint       -1 = null value (a tombstone)
      Value                bytes
      HeaderCount          varint
      Headers              [HeaderKeyLength varint, HeaderKey utf-8,
                            HeaderValueLength varint (-1 = null), HeaderValue]

    Attributes (int16) =>
      bits 0-2  compression codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
      bit  3    timestamp type (0 create time, 1 log append time)
      bit  4    transactional
      bit  5    control batch (transaction markers)
      bit  6    delete horizon set (BaseTimestamp is the delete horizon, KIP-534)

Everything here is a pure function over ``bytes`` / ``bytearray`` /
``memoryview``: no I/O, no clocks. Untrusted lengths are checked against the
bytes that are actually there before anything is sliced or allocated, and
every loop is bounded by the input, so garbage input fails fast with
:class:`~kafkastore.errors.CorruptRecordError` (or
:class:`~kafkastore.errors.CompressionError` for a payload that does not
decompress).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from .compression import MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .crc import crc32c
from .extensions import use
from ..errors import CompressionError, ConfigError, CorruptRecordError, CrcMismatchError
from .varint import decode_varint, decode_varlong, write_varint

# ----------------------------------------------------------------- layout

HEADER_STRUCT = struct.Struct(
    ">q"  # BaseOffset
    "i"   # BatchLength
    "i"   # PartitionLeaderEpoch
    "b"   # Magic
    "I"   # CRC
    "h"   # Attributes
    "i"   # LastOffsetDelta
    "q"   # BaseTimestamp
    "q"   # MaxTimestamp
    "q"   # ProducerId
    "h"   # ProducerEpoch
    "i"   # BaseSequence
    "i"   # RecordCount
)
HEADER_SIZE = HEADER_STRUCT.size                         # 61
LENGTH_OFFSET = struct.calcsize(">q")                    # 8
LOG_OVERHEAD = struct.calcsize(">qi")                    # 12: BaseOffset + BatchLength
PARTITION_LEADER_EPOCH_OFFSET = LOG_OVERHEAD             # 12
MAGIC_OFFSET = struct.calcsize(">qii")                   # 16
CRC_OFFSET = struct.calcsize(">qiib")                    # 17
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")            # 21
RECORD_COUNT_OFFSET = HEADER_SIZE - struct.calcsize(">i")  # 57
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD            # 49: a batch without records

MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

# The smallest record: length, attributes, timestamp delta, offset delta, key
# length, value length, header count, one byte each.
MIN_RECORD_SIZE = 7

_INT32_MAX = (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# ----------------------------------------------------------------- header

@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 13 fields of a v2 batch header, in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = create time, 1 = log append time."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon (KIP-534) when set, else None."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None


def _view(buf) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the batch header at ``buf[pos]``.

    Checks that the whole header is there, magic is 2, the batch length is at
    least a header's and the batch ends within ``buf``, the codec is known and
    the record count and last offset delta are consistent with each other and
    with the batch size. Does not check the CRC (see :func:`check_crc`) unless
    those fields are inconsistent: then a wrong CRC raises CrcMismatchError
    (the bytes were damaged) and a right one CorruptRecordError (the writer
    was wrong). Errors carry ``offset`` (when readable) and ``position``.
    """
    avail = len(buf) - pos
    if pos < 0 or avail < HEADER_SIZE:
        offset = struct.unpack_from(">q", buf, pos)[0] if 0 <= pos and avail >= 8 else None
        raise CorruptRecordError(
            f"truncated batch header: {max(avail, 0)} bytes left, need {HEADER_SIZE}",
            offset=offset, position=pos)
    h = BatchHeader(*HEADER_STRUCT.unpack_from(buf, pos))

    def corrupt(msg: str) -> CorruptRecordError:
        return CorruptRecordError(msg, offset=h.base_offset, position=pos)

    if h.magic != MAGIC:
        raise corrupt(f"unsupported magic {h.magic} (only v2 record batches are supported)")
    if h.batch_length < MIN_BATCH_LENGTH:
        raise corrupt(f"batch length {h.batch_length} is below the minimum {MIN_BATCH_LENGTH}")
    if h.batch_length > avail - LOG_OVERHEAD:
        raise corrupt(f"batch length {h.batch_length} runs past the end of the buffer "
                      f"({avail - LOG_OVERHEAD} bytes left)")
    problem = _header_problem(h)
    if problem is not None:
        # Implausible fields inside the CRC-covered region: when the CRC does
        # not match either, the bytes were damaged after they were written,
        # and CrcMismatchError is the more useful diagnosis.
        check_crc(buf, pos, h)
        raise corrupt(problem)
    return h


def _header_problem(h: BatchHeader) -> str | None:
    """What is inconsistent in the CRC-covered header fields, or None."""
    codec = h.attributes & COMPRESSION_MASK
    if codec > Compression.ZSTD:
        return f"unknown compression codec {codec} in attributes"
    if h.record_count < 0:
        return f"negative record count {h.record_count}"
    if h.last_offset_delta < 0:
        return f"negative last offset delta {h.last_offset_delta}"
    # Offsets in a batch are distinct and within [base, last], so there can be
    # at most last_offset_delta + 1 records (fewer after compaction).
    if h.record_count > h.last_offset_delta + 1:
        return (f"record count {h.record_count} exceeds last offset delta "
                f"{h.last_offset_delta} + 1")
    payload = h.batch_length - MIN_BATCH_LENGTH
    room = payload if codec == Compression.NONE else MAX_DECOMPRESSED_SIZE
    if h.record_count * MIN_RECORD_SIZE > room:
        return f"record count {h.record_count} cannot fit in {room} bytes of records"
    return None


def check_crc(buf, pos: int, header: BatchHeader) -> None:
    """Verify the CRC-32C of the batch at ``buf[pos]``; raise CrcMismatchError if wrong."""
    view = _view(buf)
    computed = crc32c(view[pos + ATTRIBUTES_OFFSET:pos + header.size])
    if computed != header.crc:
        raise CrcMismatchError(
            f"CRC mismatch: stored 0x{header.crc:08x}, computed 0x{computed:08x}",
            offset=header.base_offset, position=pos)


# ----------------------------------------------------------------- records

@dataclass(frozen=True, slots=True)
class Record:
    """One record: absolute offset and timestamp, nullable key/value, headers."""

    offset: int
    timestamp: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def decode_batch(buf, pos: int = 0, *, verify_crc: bool = True,
                 max_decompressed_size: int = MAX_DECOMPRESSED_SIZE
                 ) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``buf[pos]`` into its header and records.

    Decompresses the records, checks the CRC (unless ``verify_crc=False``),
    that exactly ``record_count`` records fill the batch, that every length
    stays within its record and that offsets increase within
    ``[base_offset, last_offset]``. Under log-append time every record takes
    the batch's max timestamp, as Kafka's readers do.
    Raises CorruptRecordError / CrcMismatchError / CompressionError.
    """
    header = parse_header(buf, pos)
    if verify_crc:
        check_crc(buf, pos, header)
    payload = _view(buf)[pos + HEADER_SIZE:pos + header.size]
    codec = header.attributes & COMPRESSION_MASK
    if codec == Compression.NONE:
        payload = bytes(payload)  # one copy; indexing bytes is faster than a memoryview
    else:
        try:
            payload = decompress(codec, payload, max_decompressed_size)
        except CompressionError as e:
            raise CompressionError(
                f"{e} (offset {header.base_offset}, position {pos})") from e
    try:
        records = list(map(Record, *decode_records(payload, header)))
    except CorruptRecordError as e:
        raise e.located(offset=header.base_offset, position=pos) from None
    return header, records


def decode_records(data: bytes, h: BatchHeader, start: int = _INT64_MIN,
                   stop: int = _INT64_MAX + 1, *, headers: bool = True
                   ) -> tuple[list[int], list[int], list, list, list[tuple]]:
    """The pure record decoder: parse the ``h.record_count`` records filling all of ``data``
    (a batch's uncompressed records section), shared by :func:`decode_batch` and the pure
    Arrow decoder (the C kernel in ``_native.c`` is its accelerated twin).

    Returns the records with ``start <= offset < stop`` as columns ``(offsets, timestamps
    (ms), keys, values, headers)``, ``headers`` a tuple of ``(str, bytes or None)`` per
    record (``()`` for all when ``headers=False``: header keys are then not decoded). Every
    record is checked, kept or not: every varint read and every length is bounded by the end
    of its record, so no field can run into the next record or past the buffer
    (CorruptRecordError naming the record).
    """
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    last_delta = h.last_offset_delta
    count = h.record_count
    end = len(data)
    varint, varlong = decode_varint, decode_varlong
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list = []
    values: list = []
    all_headers: list[tuple] = []
    pos = 0
    prev_delta = -1

    # Most varints in a record (small deltas, short lengths, -1 for null) are
    # one or two bytes: decode those inline and call out only for longer ones.
    for index in range(count):
        if pos >= end:
            raise CorruptRecordError(
                f"record count mismatch: header says {count}, batch holds {index}")
        b = data[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < end and data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            length, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            length, pos = varint(data, pos)
        if length < 1 or length > end - pos:
            raise CorruptRecordError(
                f"record {index}: length {length} exceeds the {end - pos} bytes left"
                if length else f"record {index}: empty record")
        rec_end = pos + length
        pos += 1  # attributes: unused by Kafka
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < rec_end and data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            ts_delta, pos = varlong(data, pos, rec_end)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < rec_end and data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            offset_delta, pos = varint(data, pos, rec_end)
        if not prev_delta < offset_delta <= last_delta:
            raise CorruptRecordError(
                f"record {index}: offset delta {offset_delta} not increasing within "
                f"[0, {last_delta}] (previous {prev_delta})")
        prev_delta = offset_delta
        offset = base_offset + offset_delta
        emit = start <= offset < stop

        # key and value: nullable length-prefixed bytes (written out twice: the hot loop)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            n, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < rec_end and data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            n, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            n, pos = varint(data, pos, rec_end)
        if n >= 0:
            if n > rec_end - pos:
                raise CorruptRecordError(
                    f"record {index}: key length {n} exceeds the {rec_end - pos} bytes left")
            key = data[pos:pos + n] if emit else None
            pos += n
        elif n == -1:
            key = None
        else:
            raise CorruptRecordError(f"record {index}: invalid key length {n}")
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            n, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < rec_end and data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            n, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            n, pos = varint(data, pos, rec_end)
        if n >= 0:
            if n > rec_end - pos:
                raise CorruptRecordError(
                    f"record {index}: value length {n} exceeds the {rec_end - pos} bytes left")
            value = data[pos:pos + n] if emit else None
            pos += n
        elif n == -1:
            value = None
        else:
            raise CorruptRecordError(f"record {index}: invalid value length {n}")

        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            n_headers, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            n_headers, pos = varint(data, pos, rec_end)
        if n_headers < 0 or n_headers * 2 > rec_end - pos:
            raise CorruptRecordError(f"record {index}: invalid header count {n_headers}")
        record_headers = ()
        if n_headers:
            keep = emit and headers
            hs = []
            for _ in range(n_headers):
                hkey_len, pos = varint(data, pos, rec_end)
                if hkey_len < 0 or hkey_len > rec_end - pos:
                    raise CorruptRecordError(
                        f"record {index}: invalid header key length {hkey_len}")
                hkey = data[pos:pos + hkey_len]
                pos += hkey_len
                hvalue_len, pos = varint(data, pos, rec_end)
                if hvalue_len >= 0:
                    if hvalue_len > rec_end - pos:
                        raise CorruptRecordError(
                            f"record {index}: header value length {hvalue_len} exceeds the "
                            f"{rec_end - pos} bytes left")
                    hvalue = data[pos:pos + hvalue_len]
                    pos += hvalue_len
                elif hvalue_len == -1:
                    hvalue = None
                else:
                    raise CorruptRecordError(
                        f"record {index}: invalid header value length {hvalue_len}")
                if keep:
                    try:
                        hs.append((str(hkey, "utf-8"), hvalue))
                    except UnicodeDecodeError:
                        raise CorruptRecordError(
                            f"record {index}: header key is not valid UTF-8") from None
            if keep:
                record_headers = tuple(hs)
        if pos != rec_end:
            raise CorruptRecordError(
                f"record {index}: length {length} but fields end {pos - rec_end:+d} bytes off")
        if emit:
            offsets.append(offset)
            timestamps.append(base_ts + ts_delta if append_time is None else append_time)
            keys.append(key)
            values.append(value)
            all_headers.append(record_headers)
    if pos != end:
        raise CorruptRecordError(
            f"record count mismatch: {count} records decoded, {end - pos} bytes left over")
    return offsets, timestamps, keys, values, all_headers



# ----------------------------------------------------------------- encode

def encode_batch(records: Sequence[Record], *,
                 compression=Compression.NONE,
                 timestamp_type: int = CREATE_TIME,
                 producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = -1,
                 base_sequence: int = NO_SEQUENCE,
                 partition_leader_epoch: int = -1,
                 transactional: bool = False,
                 control: bool = False,
                 base_offset: int | None = None,
                 last_offset: int | None = None,
                 delete_horizon_ms: int | None = None,
                 max_timestamp: int | None = None,
                 compression_level: int | None = None) -> bytes:
    """Encode ``records`` (with their own offsets) as one v2 batch.

    Offsets must increase; gaps are allowed (compacted logs). ``base_offset``
    defaults to the first record's offset and ``last_offset`` to the last
    one's (compaction passes the original to keep ``lastOffsetDelta``). With
    no records, ``base_offset`` and ``last_offset`` are required and an empty,
    uncompressed batch is written, as Kafka's cleaner does to keep producer
    state. The base timestamp is the first record's timestamp, or
    ``delete_horizon_ms`` when given (which sets the delete-horizon flag,
    KIP-534); the max timestamp is the records' maximum unless
    ``max_timestamp`` is given (the append time under log-append time, or an
    empty batch's timestamp; -1 if neither). ``compression`` is a
    :class:`Compression` or its name, ``compression_level`` the codec's level
    (None: Kafka's default). Bad arguments raise ConfigError.
    """
    codec = Compression.parse(compression)
    check_timestamp_type(timestamp_type)
    if records:
        base_offset, last_offset = batch_offsets(records[0].offset, records[-1].offset,
                                                 base_offset, last_offset)
    else:
        if base_offset is None or last_offset is None:
            raise ConfigError("an empty batch needs base_offset and last_offset")
        # Kafka writes empty batches uncompressed (DefaultRecordBatch.writeEmptyHeader).
        codec = Compression.NONE
        _check_span(base_offset, last_offset)

    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    elif records:
        base_ts = records[0].timestamp
    else:
        base_ts = NO_TIMESTAMP if max_timestamp is None else max_timestamp
    body, max_ts = _encode_records(records, base_offset, base_ts)
    return assemble_batch(body, len(records), base_offset, last_offset, base_ts, max_ts,
                          codec=codec, timestamp_type=timestamp_type, producer_id=producer_id,
                          producer_epoch=producer_epoch, base_sequence=base_sequence,
                          partition_leader_epoch=partition_leader_epoch,
                          transactional=transactional, control=control,
                          delete_horizon=delete_horizon_ms is not None,
                          max_timestamp=max_timestamp, compression_level=compression_level)


def check_timestamp_type(timestamp_type: int) -> None:
    """ConfigError unless 0 (create time) or 1 (log append time)."""
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ConfigError(f"timestamp_type must be 0 (create) or 1 (log append), "
                          f"got {timestamp_type!r}")


def batch_offsets(first: int, last: int, base_offset: int | None,
                  last_offset: int | None) -> tuple[int, int]:
    """A batch's base and last offset for records ``[first, last]`` (defaults: those),
    checked: the records inside, the span within int32 (ConfigError otherwise)."""
    if base_offset is None:
        base_offset = first
    if last_offset is None:
        last_offset = last
    if first < base_offset or last > last_offset:
        raise ConfigError(f"record offsets [{first}, {last}] outside the batch's "
                          f"[{base_offset}, {last_offset}]")
    _check_span(base_offset, last_offset)
    return base_offset, last_offset


def _check_span(base_offset: int, last_offset: int) -> None:
    if not 0 <= last_offset - base_offset <= _INT32_MAX:
        raise ConfigError(f"last offset {last_offset} must be within [base offset "
                          f"{base_offset}, base offset + {_INT32_MAX}]")


def assemble_batch(body, count: int, base_offset: int, last_offset: int, base_ts: int,
                   records_max_ts: int | None, *, codec: Compression, timestamp_type: int,
                   producer_id: int, producer_epoch: int, base_sequence: int,
                   partition_leader_epoch: int, transactional: bool, control: bool,
                   delete_horizon: bool, max_timestamp: int | None,
                   compression_level: int | None) -> bytes:
    """Header, compression and CRC around an uncompressed records section ``body``
    (the second half of :func:`encode_batch`, shared with :mod:`kafkastore.format.arrow_encode`)."""
    max_ts = records_max_ts
    if max_timestamp is not None:
        max_ts = max_timestamp
    elif max_ts is None:
        max_ts = NO_TIMESTAMP

    if codec != Compression.NONE:
        body = compress(codec, body, compression_level)

    attributes = int(codec) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    if delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    try:
        header = bytearray(HEADER_STRUCT.pack(
            base_offset, MIN_BATCH_LENGTH + len(body), partition_leader_epoch, MAGIC,
            0, attributes, last_offset - base_offset, base_ts, max_ts,
            producer_id, producer_epoch, base_sequence, count))
    except struct.error as e:
        raise ConfigError(f"batch header field out of range: {e}") from None
    crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", header, CRC_OFFSET, crc)
    return b"".join((header, body))


_native = use("kafkastore.format._native")
#: The C records encoder (None: not built or switched off, see :mod:`.extensions`).
_native_encode_records = _native.encode_records if _native is not None else None


def _encode_records(records: Sequence[Record], base_offset: int,
                    base_ts: int) -> tuple[bytes | bytearray, int | None]:
    """The uncompressed records section, and the max timestamp (None if empty).

    The C encoder writes the same bytes; it hands anything unusual (an offset
    out of order, an out-of-range timestamp, an odd field type) back to the
    pure one, which raises the precise error."""
    if _native_encode_records is not None and records:
        try:
            out = _native_encode_records(records, base_offset, base_ts)
        except OverflowError:
            out = None
        if out is not None:
            return out
    return encode_records_pure(records, base_offset, base_ts)


def encode_records_pure(records: Iterable[Record], base_offset: int,
                        base_ts: int) -> tuple[bytearray, int | None]:
    """The uncompressed records section, and the max timestamp (None if empty), in Python."""
    out = bytearray()
    rec = bytearray()
    varint = write_varint
    max_ts = None
    prev = base_offset - 1
    for r in records:
        offset, ts = r.offset, r.timestamp
        if offset <= prev:
            raise ConfigError(f"record offsets must increase: {offset} after {prev}")
        prev = offset
        delta = ts - base_ts
        if not _INT64_MIN <= delta <= _INT64_MAX:
            raise ConfigError(f"timestamp {ts} too far from base timestamp {base_ts}")
        if max_ts is None or ts > max_ts:
            max_ts = ts
        rec.clear()
        rec.append(0)  # attributes
        varint(delta, rec)
        varint(offset - base_offset, rec)
        key = r.key
        if key is None:
            rec.append(1)  # varint -1
        else:
            varint(len(key), rec)
            rec += key
        value = r.value
        if value is None:
            rec.append(1)
        else:
            varint(len(value), rec)
            rec += value
        headers = r.headers
        varint(len(headers), rec)
        for hkey, hvalue in headers:
            hk = hkey.encode("utf-8")
            varint(len(hk), rec)
            rec += hk
            if hvalue is None:
                rec.append(1)
            else:
                varint(len(hvalue), rec)
                rec += hvalue
        if len(rec) > _INT32_MAX:
            raise ConfigError(f"record at offset {offset} is over 2 GiB")
        varint(len(rec), out)
        out += rec
    return out, max_ts
