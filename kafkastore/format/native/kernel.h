/*
 * kernel.h: what the C sources of kafkastore.format._native share.
 *
 * The extension is cut by concern (see module.c for its Python API):
 *   crc.c      CRC-32C (SSE4.2 or slicing-by-8)
 *   buffers.c  memory blocks, the Buffer type, growable buffers, constant columns
 *   decode.c   record batches -> Arrow column buffers (the Decoder type)
 *   encode.c   Arrow columns / Python records -> v2 records sections and batches
 *   columns.c  Python lists -> Arrow buffers, Kafka's murmur2 partitioner
 *   keymap.c   compaction's key map: the greatest dirty offset of every key
 *   module.c   the method table and module init
 * Helpers on the per-record hot path (byte order, varints, UTF-8 checks,
 * buffer reservation) are static inline here so every source inlines them.
 */
#ifndef KAFKASTORE_KERNEL_H
#define KAFKASTORE_KERNEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(_M_X64)
#define KS_X86 1
#include <nmmintrin.h>
#endif

#if defined(__GNUC__)
#define KS_LIKELY(x) __builtin_expect(!!(x), 1)
#define KS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define KS_LIKELY(x) (x)
#define KS_UNLIKELY(x) (x)
#endif

#if defined(__linux__) && !defined(KS_NO_MMAP) /* -DKS_NO_MMAP: malloc only (for ASan) */
#include <pthread.h>
#include <sys/mman.h>
#define KS_MMAP 1
#endif
#include "pythread.h"

#define GB_MIN 256
#define MAP_THRESHOLD ((size_t)128 << 10)   /* blocks this large are mappings (buffers.c) */

/* ------------------------------------------------------------------ */
/* Byte order helpers                                                  */
/* ------------------------------------------------------------------ */

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KS_FROM_BE(BSWAP, v) BSWAP(v)
#else
#define KS_FROM_BE(BSWAP, v) (v)
#endif
/* NAME(p): the big-endian TYPE at p (unaligned). */
#define KS_DEFINE_LD_BE(NAME, TYPE, BSWAP)                                           \
    static inline TYPE NAME(const uint8_t *p) {                                      \
        TYPE v;                                                                      \
        memcpy(&v, p, sizeof(v));                                                    \
        return KS_FROM_BE(BSWAP, v);                                                 \
    }
KS_DEFINE_LD_BE(ld_be64, uint64_t, __builtin_bswap64)
KS_DEFINE_LD_BE(ld_be32, uint32_t, __builtin_bswap32)

static inline uint16_t ld_be16(const uint8_t *p) {
    return (uint16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline void st_be64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline void st_be32(uint8_t *p, uint32_t v) {
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline void st_be16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* ------------------------------------------------------------------ */
/* Errors: DecodeError(kind, message, offset, position)                */
/* ------------------------------------------------------------------ */
/* ------------------------------------------------------------------ */


enum { ERR_NONE = -1, ERR_CORRUPT = 0, ERR_CRC = 1, ERR_TOO_LARGE = 2, ERR_NOMEM = 3 };

typedef struct {
    int kind;
    int has_offset;
    int64_t offset;
    Py_ssize_t position;
    char msg[240];
} kerr;

#define KERR(e, k, off, hasoff, pos, ...)                                      \
    do {                                                                       \
        (e)->kind = (k);                                                       \
        (e)->offset = (off);                                                   \
        (e)->has_offset = (hasoff);                                            \
        (e)->position = (pos);                                                 \
        snprintf((e)->msg, sizeof((e)->msg), __VA_ARGS__);                     \
    } while (0)

extern PyObject *DecodeError;
PyObject *raise_kerr(const kerr *e);   /* sets DecodeError (or MemoryError); NULL */

/* ------------------------------------------------------------------ */
/* Varints (zig-zag; strict like kafkastore.format.varint)                    */
/* ------------------------------------------------------------------ */

/* Reads one zig-zag varint of STYPE (UTYPE unsigned) at *pq, before e: 0 ok, -1
 * truncated, -2 too long / too large. LAST_SHIFT is the shift of the last byte
 * allowed and LAST_MASK the bits that byte may not have (they would not fit). */
#define KS_DEFINE_RD_ZIGZAG(NAME, STYPE, UTYPE, LAST_SHIFT, LAST_MASK)               \
    static inline int NAME(const uint8_t **pq, const uint8_t *e, STYPE *out) {      \
        const uint8_t *q = *pq;                                                      \
        if (KS_UNLIKELY(q >= e))                                                     \
            return -1;                                                               \
        UTYPE b = *q++;                                                              \
        UTYPE r;                                                                     \
        if (KS_LIKELY(!(b & 0x80))) {                                                \
            r = b;                                                                   \
        } else {                                                                     \
            r = b & 0x7f;                                                            \
            for (int shift = 7;; shift += 7) {                                       \
                if (KS_UNLIKELY(q >= e))                                             \
                    return -1;                                                       \
                b = *q++;                                                            \
                if (shift == (LAST_SHIFT)) {                                         \
                    if (b & (LAST_MASK))                                             \
                        return -2;                                                   \
                    r |= b << (LAST_SHIFT);                                          \
                    break;                                                           \
                }                                                                    \
                r |= (b & 0x7f) << shift;                                            \
                if (!(b & 0x80))                                                     \
                    break;                                                           \
            }                                                                        \
        }                                                                            \
        *out = (STYPE)((r >> 1) ^ ((UTYPE)0 - (r & 1)));                             \
        *pq = q;                                                                     \
        return 0;                                                                    \
    }

KS_DEFINE_RD_ZIGZAG(rd_varint, int32_t, uint32_t, 28, 0xf0)
KS_DEFINE_RD_ZIGZAG(rd_varlong, int64_t, uint64_t, 63, 0xfe)

#include "utf8.h"

/* ------------------------------------------------------------------ */
/* Buffers (buffers.c)                                                 */
/* ------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t len; /* bytes in use (only tracked for data buffers) */
    size_t cap;
    int mapped; /* p is an mmap of cap bytes */
    size_t pop; /* bytes from p known to be faulted in (populate modes) */
    int borrowed; /* p is memory lent by the caller (Decoder.lend): never freed */
} gbuf;

typedef struct {
    PyObject_HEAD
    uint8_t *data;
    Py_ssize_t size;
    size_t cap;
    int mapped;
} BufferObject;

#define RELEASE_GIL_BYTES (64 * 1024)   /* inputs this large are worked on without the GIL */

extern int alloc_mode;
extern PyTypeObject BufferType;
extern PySequenceMethods Buffer_as_sequence;
void Buffer_dealloc(BufferObject *self);
/* The slots of every buffer type (Buffer, EncBuffer): a BufferObject freed by Buffer_dealloc,
   with a length; each type has its own name, buffer export (read-only or writable) and doc. */
#define BUFFER_TYPE_SLOTS(name, as_buffer, doc)        \
    PyVarObject_HEAD_INIT(NULL, 0)                     \
    .tp_name = (name),                                 \
    .tp_basicsize = sizeof(BufferObject),              \
    .tp_dealloc = (destructor)Buffer_dealloc,          \
    .tp_as_buffer = (as_buffer),                       \
    .tp_as_sequence = &Buffer_as_sequence,             \
    .tp_flags = Py_TPFLAGS_DEFAULT,                    \
    .tp_doc = (doc),
int gb_grow(gbuf *b, size_t need, int zero);
void gb_populate(gbuf *b, size_t need);
void gb_free(gbuf *b);
PyObject *gb_to_buffer(gbuf *b, size_t size);
PyObject *new_buffer(size_t size);
int buffers_init(void);

/* A column buffer argument that may be None (encode.c, columns.c). */
typedef struct {
    Py_buffer v;
    int set;
} optbuf;
int opt_get(PyObject *o, optbuf *b, Py_ssize_t need);

/* Room for `need` bytes (address space; nothing faulted in). */
static inline int gb_reserve_space(gbuf *b, size_t need, int zero) {
    if (KS_LIKELY(need <= b->cap))
        return 0;
    return gb_grow(b, need, zero);
}

/* Room for `need` bytes that are about to be written: in the populate
 * modes, the pages up to `need` are faulted in ahead, in bulk. */
static inline int gb_reserve(gbuf *b, size_t need, int zero) {
    if (KS_UNLIKELY(need > b->cap) && gb_grow(b, need, zero) < 0)
        return -1;
    if (KS_UNLIKELY(need > b->pop) && b->mapped && alloc_mode >= 2)
        gb_populate(b, need);
    return 0;
}

/* ------------------------------------------------------------------ */
/* CRC-32C (crc.c)                                                     */
/* ------------------------------------------------------------------ */

extern int have_sse42;
void crc_init(void);
uint32_t ks_crc32c(uint32_t crc, const uint8_t *p, size_t n);
uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n);

/* ------------------------------------------------------------------ */
/* zstd in the walk (decode.c: the system's libzstd, opened at run time) */
/* ------------------------------------------------------------------ */

extern int have_zstd;      /* libzstd.so.1 was opened */
extern int inline_zstd_on; /* the process-wide switch (_set_inline_zstd) */
void zstd_init(void);
/* The payload's records decompressed into the thread's scratch buffer (valid until the
   thread's next call), *out_len bytes; NULL: not decided here (Python decompresses). */
const uint8_t *zstd_batch(const uint8_t *src, size_t n, size_t max_size, size_t *out_len);
void zstd_release(void); /* after a walk: drop an oversized scratch buffer */

/* ------------------------------------------------------------------ */
/* Types and Python functions, by source                               */
/* ------------------------------------------------------------------ */

extern PyTypeObject DecoderType;                                     /* decode.c */
extern PyTypeObject EncBufferType;                                   /* encode.c */
PyObject *mod_crc32c(PyObject *m, PyObject *args);                   /* crc.c */
PyObject *mod_crc32c_sw(PyObject *m, PyObject *args);
PyObject *mod_repeat_binary(PyObject *m, PyObject *args);            /* buffers.c */
PyObject *mod_fill_int32(PyObject *m, PyObject *args);
PyObject *mod_set_alloc_mode(PyObject *m, PyObject *args);
PyObject *mod_alloc_stats(PyObject *m, PyObject *args);
PyObject *mod_set_buffer_cache(PyObject *m, PyObject *args);
PyObject *mod_encode_records(PyObject *m, PyObject *args);           /* encode.c */
PyObject *mod_encode_arrow(PyObject *m, PyObject *args);
PyObject *mod_encode_arrow_batches(PyObject *m, PyObject *args);
PyObject *mod_pylist_binary(PyObject *m, PyObject *arg);             /* columns.c */
PyObject *mod_pylist_int64(PyObject *m, PyObject *arg);
PyObject *mod_murmur2_arrow(PyObject *m, PyObject *args);
PyObject *mod_latest_per_key(PyObject *m, PyObject *args);          /* keymap.c */
PyObject *mod_set_key_hash_bits(PyObject *m, PyObject *args);
PyObject *mod_restamp_records(PyObject *m, PyObject *args);
PyObject *mod_set_inline_zstd(PyObject *m, PyObject *args);          /* decode.c */

#endif /* KAFKASTORE_KERNEL_H */
