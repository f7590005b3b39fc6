"""``produce`` input in bulk: JSON lines -> Arrow tables, chunk by chunk.

The input is read in chunks of whole lines (about :data:`CHUNK_BYTES`; never
the whole input), and each chunk is parsed in bulk into the columns
:meth:`kafkastore.write.log_writer.LogWriter.send_arrow` takes: by the C fast path
(``kafkastore._jsonl_native.parse_jsonl``) when every line has the common shape (string or null
key and value, integer timestamp and partition, no headers; see its comment
for the exact set), else by pyarrow's JSON reader. The per-line parser
(:func:`kafkastore.write.jsonl.parse_produce_line`) stays the judge of what is
accepted: a chunk is parsed in bulk only when that reading is certainly the
same, and otherwise (or whenever pyarrow refuses it) line by line, which also
gives the first bad line's error with its number. Routed past pyarrow to the
per-line parser:

* input that is not UTF-8 (pyarrow would take it into its strings);
* anything pyarrow refuses: invalid JSON, a line that is not an
  object, an unknown field, a field of another JSON type than the common one
  (a non-string key or value, ``{"base64": ...}``, a float, bool or string
  timestamp, NaN/Infinity, integers beyond int64, duplicate fields);
* a line that does not start with ``{`` (checked before pyarrow sees the chunk: its
  reader crashes the process on a top-level ``null``), so blank lines, leading
  whitespace and top-level non-objects; lines holding several objects (pyarrow's rows
  would not line up with line numbers), a UTF-8 BOM, ``\\uD800``-style escapes (lone
  surrogates), headers that are not ``[string, string|null]`` pairs, a
  timestamp or partition out of range.

A null value is a tombstone only if the line says ``"value": null`` (a
missing value is an error): the lines of null values are checked with the
per-line parser.
"""
from __future__ import annotations

import queue
import re
import threading
from dataclasses import dataclass
from typing import BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ..errors import ConfigError, KafkaStoreError
from ..format.arrow_encode import IMPLEMENTATION as _ENCODER
from ..format.arrow_encode import validity
from ..format.extensions import use
from .jsonl import MAX_TIMESTAMP_MS, parse_produce_line

_native = use("kafkastore._jsonl_native")  # None: not built or switched off
#: Whether lines of the common shape are parsed by the C fast path (off with the extensions).
NATIVE_PARSE = _native is not None and _ENCODER == "native"

#: Bytes read at a time (a chunk is this plus the rest of its last line).
CHUNK_BYTES = 4 << 20

_PAIRS = pa.list_(pa.list_(pa.string()))
_SCHEMA = pa.schema([
    ("key", pa.string()), ("value", pa.string()), ("headers", _PAIRS),
    ("timestamp", pa.int64()), ("partition", pa.int64()),
    ("topic", pa.string()), ("offset", pa.int64()),   # what consume writes: ignored
])
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="error")
_HEADERS_STRUCT = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD]")   # \uD800-style: pyarrow would take lone surrogates


def _count_lines(data) -> int:
    """Newlines in ``data`` (numpy: several times ``bytes.count``'s speed on big chunks)."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == 10))


_OPEN_BRACE = ord("{")


def _every_line_starts_an_object(chunk) -> bool:
    """Whether every line of ``chunk`` starts with ``{`` (vectorised over the line starts).

    Checked before pyarrow's reader sees a chunk: its JSON reader crashes the process
    (SIGSEGV) on a top-level ``null`` at the start of its input, and takes a blank line or
    a top-level non-object elsewhere into rows that no longer line up with lines. Anything
    else (a blank line, leading whitespace, ``null``, a number, string, array, ``true``)
    goes to the per-line parser, which says "line N: expected a JSON object" or accepts it.
    """
    a = np.frombuffer(chunk, np.uint8)
    if not len(a):
        return True
    starts = np.concatenate(([0], np.flatnonzero(a[:-1] == 10) + 1))
    return bool((a[starts] == _OPEN_BRACE).all())


@dataclass
class ParsedChunk:
    """The rows of a chunk's good lines (up to the first bad one) and that line's error."""

    table: pa.Table            # key, value (binary), headers, timestamp, partition
    lines: np.ndarray          # int64: the line number of each row
    error: KafkaStoreError | None = None
    bulk: bool = True          # parsed in bulk (False: line by line)
    native: bool = False       # parsed in bulk by the C fast path


def iter_chunks(raw: BinaryIO, chunk_bytes: int | None = None
                ) -> Iterator[tuple[int, bytearray, int]]:
    """``(number of the first line, bytes of whole lines, newlines in them)`` of a binary
    stream, read ``chunk_bytes`` (default :data:`CHUNK_BYTES`) at a time. Only the last
    chunk may end without a newline.

    The chunk is one bytearray, refilled for the next chunk: use it (or copy it) before
    asking for the next. Reading into the same memory every time, rather than into
    fresh memory per chunk, spares a page fault per 4 KiB of input."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    buf = bytearray(chunk_bytes)
    scratch = np.empty(0, bool)
    lineno, carry = 1, b""
    while True:
        have = len(carry)
        buf = _sized(buf, have + chunk_bytes)
        with memoryview(buf) as view:
            view[:have] = carry
            end = have + _read_into(raw, view[have:])
        if end == have:
            if carry:
                yield lineno, bytearray(carry), 0
            return
        cut = buf.rfind(b"\n", 0, end) + 1
        if cut == 0:          # no end of line yet: a long line, read on
            carry = bytes(buf[:end])
            continue
        carry = bytes(buf[cut:end])
        if len(scratch) < cut:
            scratch = np.empty(cut, bool)
        newlines = int(np.count_nonzero(np.equal(np.frombuffer(buf, np.uint8, count=cut), 10,
                                                 out=scratch[:cut])))
        buf = _sized(buf, cut)
        yield lineno, buf, newlines
        lineno += newlines


def _sized(buf: bytearray, size: int) -> bytearray:
    """``buf`` resized to ``size`` bytes in place (within its allocation that is free), or a
    copy if something still holds a view of it."""
    grow = size - len(buf)
    try:
        if grow < 0:
            del buf[size:]
        elif grow > 0:
            buf += _ZEROS[:grow] if grow <= len(_ZEROS) else bytes(grow)
        return buf
    except BufferError:
        new = bytearray(size)
        new[:min(size, len(buf))] = buf[:size]
        return new


# Zeros to grow a buffer by: never written, so reading them maps no new memory.
_ZEROS = memoryview(bytes(CHUNK_BYTES))


def _read_into(raw, view: memoryview) -> int:
    """Fill ``view`` from ``raw`` as far as the input goes; the number of bytes read."""
    readinto = getattr(raw, "readinto", None)
    got = 0
    while got < len(view):
        if readinto is not None:
            n = readinto(view[got:])
        else:
            data = raw.read(len(view) - got)
            n = len(data)
            view[got:got + n] = data
        if not n:
            break
        got += n
    return got


def parse_ahead(raw: BinaryIO, chunk_bytes: int | None = None) -> Iterator[ParsedChunk]:
    """:func:`parse_chunk` of each chunk of :func:`iter_chunks`, read and parsed on a thread
    one chunk ahead of the consumer: the read and the C parser release the GIL, so the next
    chunk is parsed while this one is sent. Stops after the first chunk with an error; an
    exception of the reader is raised here, where the chunk it stopped at would have come."""
    out: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for first, chunk, newlines in iter_chunks(raw, chunk_bytes):
                parsed = parse_chunk(chunk, first, newlines)
                if not put(parsed) or parsed.error is not None:
                    return
        except BaseException as exc:  # noqa: BLE001 -- handed to the consumer
            put(exc)
            return
        put(None)

    thread = threading.Thread(target=work, name="kafkastore-parse", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.error is not None:
                return
    finally:
        stop.set()   # the thread ends at its next hand-over (not joined: it may be in a read)


def parse_chunk(chunk: bytes | bytearray, first_lineno: int,
                lines: int | None = None) -> ParsedChunk:
    """Parse a chunk of whole lines (see the module docstring); ``lines``: its number of
    newlines, if known."""
    parsed = _bulk(chunk, first_lineno, lines)
    return parsed if parsed is not None else parse_lines(chunk, first_lineno)


def _native_table(chunk, nlines: int) -> pa.Table | None:
    """The C fast path: the chunk's columns if every line is of the common shape (the C
    parser reads those exactly as :func:`parse_produce_line`), else None."""
    got = _native.parse_jsonl(chunk, MAX_TIMESTAMP_MS)
    if got is None or got[0] != nlines:
        return None
    n, key, value, ts, part = got
    buf = pa.py_buffer

    def bitmap(valid):
        return None if valid is None else buf(valid)

    def binary(nulls, valid, offsets, data):
        return pa.Array.from_buffers(pa.binary(), n, [bitmap(valid), buf(offsets), buf(data)],
                                     null_count=nulls)

    def int64(nulls, valid, values):
        return pa.Array.from_buffers(pa.int64(), n, [bitmap(valid), buf(values)],
                                     null_count=nulls)

    return pa.table({"key": binary(*key), "value": binary(*value), "timestamp": int64(*ts),
                     "partition": int64(*part)})


def _bulk(chunk, first_lineno: int, newlines: int | None) -> ParsedChunk | None:
    if newlines is None:
        newlines = _count_lines(chunk)
    nlines = newlines + (not chunk.endswith(b"\n"))
    if NATIVE_PARSE:
        table = _native_table(chunk, nlines)
        if table is not None:
            return ParsedChunk(table, np.arange(first_lineno, first_lineno + nlines,
                                                dtype=np.int64), native=True)
    # Single-byte searches first: a multi-byte `in` scans a chunk at a fraction of memchr's
    # speed, and all-ASCII input (the usual) can hold neither a BOM nor bad UTF-8.
    ascii_only = chunk.isascii()
    if not ascii_only and b"\xef\xbb\xbf" in chunk:
        return None
    if b"\\" in chunk and _SURROGATE_ESCAPE.search(chunk):
        return None
    if not ascii_only:
        try:
            chunk.decode("utf-8")   # pyarrow does not check the UTF-8 of strings
        except UnicodeDecodeError:
            return None
    if not _every_line_starts_an_object(chunk):
        return None
    try:
        t = pj.read_json(pa.BufferReader(chunk), parse_options=_PARSE)
    except Exception:  # noqa: BLE001 - any refusal: the per-line parser decides and explains
        return None
    # Rows equal lines only if no line is blank (pyarrow gives it no row; none is, as every
    # line starts with "{") and none holds several objects: then each line gives one row.
    if t.num_rows != nlines:
        return None
    ts, part, headers = t.column("timestamp"), t.column("partition"), t.column("headers")
    if ts.null_count < len(ts) and (pc.min(ts).as_py() < 0 or pc.max(ts).as_py() > MAX_TIMESTAMP_MS):
        return None
    if part.null_count < len(part) and pc.min(part).as_py() < 0:
        return None
    headers = headers.combine_chunks()
    if headers.null_count < len(headers):
        pairs = headers.values
        if pairs.null_count:
            return None
        if len(pairs):
            lens = pc.list_value_length(pairs)
            if pc.min(lens).as_py() != 2 or pc.max(lens).as_py() != 2:
                return None
            if pc.list_element(pairs, 0).null_count:
                return None
        pairs_struct = pa.StructArray.from_arrays(
            [pc.list_element(pairs, 0), pc.list_element(pairs, 1).cast(pa.binary())],
            names=["key", "value"]) if len(pairs) else pa.array([], _HEADERS_STRUCT.value_type)
        headers = pa.ListArray.from_arrays(
            headers.offsets, pairs_struct, type=_HEADERS_STRUCT,
            mask=headers.is_null() if headers.null_count else None)
    else:
        headers = None
    value = t.column("value")
    if value.null_count:
        # "value": null (a tombstone) or no value at all (an error): ask the per-line parser
        lines = chunk.split(b"\n")
        for i in np.flatnonzero(validity(value) == 0):
            try:
                parse_produce_line(lines[i].decode("utf-8"), first_lineno + int(i))
            except KafkaStoreError:
                return None
    cols = {"key": t.column("key").cast(pa.binary()), "value": value.cast(pa.binary()),
            "timestamp": ts, "partition": part}
    if headers is not None:
        cols["headers"] = headers
    return ParsedChunk(pa.table(cols), np.arange(first_lineno, first_lineno + nlines,
                                                 dtype=np.int64))


def parse_lines(chunk: bytes, first_lineno: int) -> ParsedChunk:
    """The per-line parser over a chunk: rows up to the first bad line, and its error."""
    keys, values, headers, stamps, parts, linenos = [], [], [], [], [], []
    error = None
    lines = chunk.split(b"\n")
    last_complete = lines[-1] == b""
    if last_complete:
        lines.pop()
    for i, raw in enumerate(lines):
        lineno = first_lineno + i
        if last_complete or i < len(lines) - 1:
            raw += b"\n"   # as a file iterator gives it (JSON error columns count it)
        try:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"line {lineno}: not UTF-8 ({exc.reason} at byte "
                                  f"{exc.start})") from None
            if not line.strip():
                continue
            rec = parse_produce_line(line, lineno)
        except KafkaStoreError as exc:
            error = exc
            break
        keys.append(rec.key)
        values.append(rec.value)
        headers.append([{"key": k, "value": v} for k, v in rec.headers] or None)
        stamps.append(rec.timestamp)
        parts.append(rec.partition)
        linenos.append(lineno)
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                      "timestamp": pa.array(stamps, pa.int64()),
                      "partition": pa.array(parts, pa.int64()),
                      "headers": pa.array(headers, _HEADERS_STRUCT)})
    return ParsedChunk(table, np.array(linenos, np.int64), error, bulk=False)
