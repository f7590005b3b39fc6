/*
 * kafkastore.format._native: the C kernel behind kafkastore.format.arrow_decode
 * and arrow_encode.  This file: the Python API (below), the method table and
 * module init; kernel.h says which source holds what.
 *
 * Walks Kafka record batches (magic v2) and writes the records straight into
 * Arrow-layout column buffers; Python wraps the finished buffers with
 * pyarrow.Array.from_buffers (zero copy).  Plain CPython C API, C11, no
 * dependencies beyond Python.h, so `pip install .` needs only gcc (libzstd is
 * opened at run time when the system has it: decode.c).
 *
 * Python API
 * ----------
 * crc32c(data, value=0) -> int
 *     CRC-32C (Castagnoli) of a bytes-like object, continuing from `value`.
 *     SSE4.2 `crc32` instructions (three interleaved streams) when the CPU
 *     has them, slicing-by-8 tables otherwise.
 * crc32c_sw(data, value=0) -> int      the table implementation (for tests)
 * HAVE_SSE42: bool                     whether crc32c() uses the hardware path
 * HAVE_ZSTD: bool                      whether libzstd.so.1 was found (Decoder.inline_zstd)
 * _set_inline_zstd(on) -> old          tests: turn inline zstd off process-wide
 *
 * Decoder(start_offset, end_offset, include_headers, verify_crc, aborted)
 *     Accumulates the rows of any number of batches.  `aborted` is a sequence
 *     of (producer_id, first_offset, last_offset) tuples (read_committed).
 *   .feed(buf, pos=0, end=len(buf)) -> None | (pos, codec, rec_start, rec_end)
 *     Walks the whole batches in buf[pos:end]: framing and CRC checks, range,
 *     control and aborted-transaction filtering, records of uncompressed
 *     batches decoded in C.  Returns None when the region is done (or a batch
 *     at or past end_offset was reached), or stops at a compressed batch that
 *     has rows to give: the caller decompresses buf[rec_start:rec_end] with
 *     `codec` and calls feed_records(buf, pos, decompressed), then resumes
 *     feed(buf, rec_end, end).  The CRC of that batch is already checked.
 *   .inline_zstd(max_size) -> bool
 *     From now on feed() decompresses zstd batches itself (the system's libzstd,
 *     opened at import: HAVE_ZSTD) and decodes them in the same walk; it still
 *     stops at one it cannot decompress within max_size bytes (or when libzstd
 *     is missing), so that the caller's decompression raises the precise error.
 *   .feed_records(buf, pos, records)
 *     Decodes the (decompressed) records section `records` of the batch whose
 *     header is at buf[pos:pos+61].
 *   .lend(buf) -> bool
 *     Before the first feed: buf (writable; the memory fed next) may hold the
 *     value column, written behind the read position; its bytes are
 *     unspecified afterwards.  False (nothing lent) for read-only memory.
 *   .finish() -> dict
 *     Hands over the column buffers (objects exporting the buffer protocol;
 *     the values as a memoryview of the lent buffer when they stayed there)
 *     and counts; the decoder is empty afterwards.
 * repeat_binary(value, n) -> (offsets, data)   a constant string column's buffers
 * fill_int32(v, n) -> Buffer                   a constant int32 column's buffer
 * _set_alloc_mode(mode) -> old                 tuning: 0 plain mmap, 1 huge pages,
 *                                              2 populate ahead, 3 huge pages +
 *                                              populate ahead, 4 populate ahead,
 *                                              huge pages or not by measure (default)
 * _alloc_stats() -> (ns/MiB 4 KiB, ns/MiB huge, chunks)   mode 4's measurements
 * DecodeError(kind, message, offset, position)
 *     kind 0 = corrupt batch, 1 = CRC mismatch, 2 = output too large for one
 *     Arrow batch.  offset is the batch's base offset (None if unreadable),
 *     position the batch's byte position in buf.
 *
 * set_buffer_cache(limit_bytes) -> old       bound of the block cache (see below)
 *
 * encode_records(records, base_offset, base_ts) -> (bytes, max_ts) | None
 * encode_arrow(n, base_offset, base_ts, <15 column buffers>, row0=0, rows=None, header=None)
 *     -> (bytes, max_ts) | None   (record i = column row rows[i], or row0 + i; with a
 *     header tuple, the whole uncompressed batch: header, records and CRC)
 *     The records section of a v2 batch (kafkastore.format.arrow_encode), byte for
 *     byte what record_batch._encode_records writes; None when the pure
 *     encoder must decide (it raises the precise error).
 * encode_arrow_batches(n, sizes, batch_limit, <15 column buffers>, rows, header)
 *     -> (EncBuffer, cuts, positions, max_ts, min_ts) | None   many whole uncompressed
 *     batches back to back in one writable buffer (Broker.send_arrow's fast path)
 * pylist_binary(seq) / pylist_int64(seq)   Arrow buffers of a list of bytes / ints
 *     (None allowed) in one pass, or None for any other type (Broker.send_many)
 * murmur2_arrow(n, valid, offsets, data) -> bytes (int32[n])   Kafka's murmur2 per key
 * latest_per_key(chunks, dirty, offsets, plans=None) -> bytes (int64[n])   compaction's
 *     key map: per row the greatest dirty offset of its (plan, key), exact (keymap.c)
 * _set_key_hash_bits(bits) -> old     tests: force keys to share hashes (keymap.c)
 * restamp_records(records, count, base_ts, last_delta, new_base_ts=None)
 *     -> (bytes | None, tombstones, min_ts, max_ts) | None   compaction: a batch kept
 *     whole, checked and given a delete horizon without decoding it (keymap.c)
 *
 * Memory: see "Memory blocks" in buffers.c (fresh pages faulted in ahead in bulk, huge
 * pages where measured cheaper, a small cache of freed column buffers, buffers
 * sized once per region, values written into a lent input).  The GIL is released while
 * a region or records section of 64 KiB or more is decoded.
 *
 * Safety: every length read from the input is bounds-checked against the
 * batch (or record) it lives in before use; buffer growth is bounded by the
 * bytes actually present in the input, never by counts read from it.
 */
#include "kernel.h"
#include "pymodule.h"

static PyMethodDef module_methods[] = {
    {"encode_records", mod_encode_records, METH_VARARGS,
     "encode_records(records, base_offset, base_ts) -> (bytes, max_ts or None) | None: the "
     "records section of a v2 batch from (offset, timestamp, key, value, headers) records; "
     "None: something unusual, use the pure encoder (it raises the precise error)"},
    {"encode_arrow", mod_encode_arrow, METH_VARARGS,
     "encode_arrow(n, base_offset, base_ts, offsets, timestamps, key_valid, key_offsets, "
     "key_data, value_valid, value_offsets, value_data, headers_offsets, headers_valid, "
     "hkey_offsets, hkey_data, hvalue_valid, hvalue_offsets, hvalue_data, row0=0, rows=None, "
     "header=None) -> (bytes, max_ts or None) | None: the records section from Arrow column "
     "buffers (record i is column row rows[i] or row0 + i); with header = (attributes, "
     "partition_leader_epoch, last_offset_delta, max_timestamp or None, producer_id, "
     "producer_epoch, base_sequence) the whole uncompressed batch, CRC included"},
    {"encode_arrow_batches", mod_encode_arrow_batches, METH_VARARGS,
     "encode_arrow_batches(n, sizes, batch_limit, <the 15 buffers of encode_arrow>, rows, "
     "header) -> (EncBuffer, cuts, positions, max_ts, min_ts) | None: rows cut into "
     "uncompressed batches of at most batch_limit estimated bytes, written back to back; "
     "header = (attributes, partition_leader_epoch, max_timestamp or None, producer_id, "
     "producer_epoch, first base_sequence); the arrays are int64 bytes"},
    {"pylist_binary", mod_pylist_binary, METH_O,
     "pylist_binary(seq) -> (n, null_count, validity bitmap or None, int32 offsets, data) | "
     "None: Arrow binary buffers of a sequence of bytes/None (None: another type, or over "
     "2 GiB)"},
    {"pylist_int64", mod_pylist_int64, METH_O,
     "pylist_int64(seq) -> (n, null_count, validity bitmap or None, int64 values) | None: "
     "Arrow int64 buffers of a sequence of int/None (None: another type, bool, or out of "
     "range)"},
    {"murmur2_arrow", mod_murmur2_arrow, METH_VARARGS,
     "murmur2_arrow(n, valid, offsets, data) -> bytes of int32[n]: Kafka's murmur2 of each key"},
    {"latest_per_key", mod_latest_per_key, METH_VARARGS,
     "latest_per_key(chunks, dirty, offsets, plans=None) -> bytes of int64[n]: per row, the "
     "greatest offset of a dirty row with the same (plan, key bytes), -1 if none; chunks = "
     "[(count, first, int32 offsets, data)] of binary key columns (keymap.c)"},
    {"_set_key_hash_bits", mod_set_key_hash_bits, METH_VARARGS,
     "_set_key_hash_bits(bits) -> old: latest_per_key keeps only the top bits of each key's "
     "hash (tests: forced shared hashes; 64 = all)"},
    {"restamp_records", mod_restamp_records, METH_VARARGS,
     "restamp_records(records, count, base_ts, last_delta, new_base_ts=None) -> (bytes or "
     "None, tombstones, min_ts, max_ts) or None: a create-time records section checked, and "
     "relative to new_base_ts when it holds a tombstone (keymap.c)"},
    {"set_buffer_cache", mod_set_buffer_cache, METH_VARARGS,
     "set_buffer_cache(limit_bytes) -> old limit: bound the memory kept for reuse between "
     "decodes (touched bytes; 0 disables and frees the cache)"},
    {"_alloc_stats", mod_alloc_stats, METH_VARARGS,
     "_alloc_stats(small=-1, huge=-1) -> (ns per MiB populated as 4 KiB pages, as huge "
     "pages, chunks): alloc mode 4's measurements (0: none yet); sets them when >= 0 (tests)"},
    {"_set_alloc_mode", mod_set_alloc_mode, METH_VARARGS,
     "_set_alloc_mode(mode) -> old: 0 plain, 1 huge pages, 2 populate, "
     "3 huge pages + populate, 4 populate, huge pages where measured cheaper (default)"},
    {"_set_inline_zstd", mod_set_inline_zstd, METH_VARARGS,
     "_set_inline_zstd(on) -> old: whether Decoders set to inline_zstd() use it (tests)"},
    {"repeat_binary", mod_repeat_binary, METH_VARARGS,
     "repeat_binary(value, n) -> (int32 offsets Buffer, data Buffer) of n copies"},
    {"fill_int32", mod_fill_int32, METH_VARARGS, "fill_int32(v, n) -> Buffer of n int32 v"},
    {"crc32c", mod_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int (CRC-32C)"},
    {"crc32c_sw", mod_crc32c_sw, METH_VARARGS,
     "crc32c_sw(data, value=0) -> int (table implementation, for tests)"},
    {NULL, NULL, 0, NULL},
};

KS_MODULE_DEF(moduledef, "kafkastore.format._native",
              "C kernel of kafkastore.format.arrow_decode: Kafka v2 record batches into Arrow buffers.",
              module_methods);

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    zstd_init();
    if (buffers_init() < 0 || PyType_Ready(&DecoderType) < 0 || PyType_Ready(&EncBufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    DecodeError = PyErr_NewExceptionWithDoc(
        "kafkastore.format._native.DecodeError",
        "args = (kind, message, offset, position); kind 0 corrupt, 1 CRC, 2 too large",
        PyExc_ValueError, NULL);
    if (!DecodeError)
        goto fail;
    Py_INCREF(DecodeError);
    if (PyModule_AddObject(m, "DecodeError", DecodeError) < 0)
        goto fail;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0)
        goto fail;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0)
        goto fail;
    if (PyModule_AddIntConstant(m, "HAVE_SSE42", have_sse42) < 0)
        goto fail;
    if (PyModule_AddIntConstant(m, "HAVE_ZSTD", have_zstd) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

