/*
 * kafkastore.format._native: the C kernel behind kafkastore.format.arrow_decode.
 *
 * Walks Kafka record batches (magic v2) and writes the records straight into
 * Arrow-layout column buffers; Python wraps the finished buffers with
 * pyarrow.Array.from_buffers (zero copy).  Plain CPython C API, C11, no
 * dependencies beyond Python.h, so `pip install .` needs only gcc.
 *
 * Python API
 * ----------
 * crc32c(data, value=0) -> int
 *     CRC-32C (Castagnoli) of a bytes-like object, continuing from `value`.
 *     SSE4.2 `crc32` instructions (three interleaved streams) when the CPU
 *     has them, slicing-by-8 tables otherwise.
 * crc32c_sw(data, value=0) -> int      the table implementation (for tests)
 * HAVE_SSE42: bool                     whether crc32c() uses the hardware path
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
 * parse_jsonl(buf, max_ts) -> (rows, key, value, timestamp, partition) | None
 *     `produce` input lines of the common shape into Arrow buffers (a fast path
 *     of kafkastore.jsonl_bulk; None for any line it does not take).
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
 *
 * Memory: see "Memory blocks" below (fresh pages faulted in ahead in bulk, huge
 * pages where measured cheaper, a small cache of freed column buffers, buffers
 * sized once per region, values written into a lent input).  The GIL is released while
 * a region or records section of 64 KiB or more is decoded.
 *
 * Safety: every length read from the input is bounds-checked against the
 * batch (or record) it lives in before use; buffer growth is bounded by the
 * bytes actually present in the input, never by counts read from it.
 */
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

/* ------------------------------------------------------------------ */
/* Byte order helpers                                                  */
/* ------------------------------------------------------------------ */

static inline uint64_t ld_be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t ld_be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

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
/* CRC-32C                                                             */
/* ------------------------------------------------------------------ */

#define CRC32C_POLY 0x82F63B78u
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t crc_table[8][256];
static uint32_t crc_zeros_long[4][256];
static uint32_t crc_zeros_short[4][256];
static int have_sse42 = 0;

/* GF(2) 32x32 matrices as 32 columns: apply = xor of the columns of set bits. */
static uint32_t gf2_apply(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1)
            sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_compose(uint32_t *out, const uint32_t *a, const uint32_t *b) {
    /* out = a after b */
    uint32_t tmp[32];
    for (int i = 0; i < 32; i++)
        tmp[i] = gf2_apply(a, b[i]);
    memcpy(out, tmp, sizeof(tmp));
}

/* Table for "append len zero bytes" to a raw CRC register. */
static void crc_zeros_table(uint32_t zeros[4][256], size_t len) {
    uint32_t bit[32], op[32], acc[32];
    bit[0] = CRC32C_POLY; /* one zero bit */
    for (int i = 1; i < 32; i++)
        bit[i] = 1u << (i - 1);
    /* op = bit^8 (one zero byte) */
    memcpy(op, bit, sizeof(op));
    for (int i = 0; i < 3; i++)
        gf2_compose(op, op, op);
    /* acc = op^len by square-and-multiply */
    for (int i = 0; i < 32; i++)
        acc[i] = 1u << i;
    while (len) {
        if (len & 1)
            gf2_compose(acc, op, acc);
        len >>= 1;
        if (len)
            gf2_compose(op, op, op);
    }
    for (int n = 0; n < 256; n++) {
        zeros[0][n] = gf2_apply(acc, (uint32_t)n);
        zeros[1][n] = gf2_apply(acc, (uint32_t)n << 8);
        zeros[2][n] = gf2_apply(acc, (uint32_t)n << 16);
        zeros[3][n] = gf2_apply(acc, (uint32_t)n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^
           zeros[2][(crc >> 16) & 0xff] ^ zeros[3][crc >> 24];
}

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (int n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
    crc_zeros_table(crc_zeros_long, CRC_LONG);
    crc_zeros_table(crc_zeros_short, CRC_SHORT);
#ifdef KS_X86
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#ifdef KS_X86
static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    /* Three independent streams hide the 3-cycle latency of crc32; the
     * partial CRCs are combined with the "append N zero bytes" operator. */
    while (n >= 3 * CRC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC_LONG;
        do {
            c0 = _mm_crc32_u64(c0, ld64(p));
            c1 = _mm_crc32_u64(c1, ld64(p + CRC_LONG));
            c2 = _mm_crc32_u64(c2, ld64(p + 2 * CRC_LONG));
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_zeros_long, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(crc_zeros_long, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_LONG;
        n -= 3 * CRC_LONG;
    }
    while (n >= 3 * CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC_SHORT;
        do {
            c0 = _mm_crc32_u64(c0, ld64(p));
            c1 = _mm_crc32_u64(c1, ld64(p + CRC_SHORT));
            c2 = _mm_crc32_u64(c2, ld64(p + 2 * CRC_SHORT));
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_zeros_short, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(crc_zeros_short, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_SHORT;
        n -= 3 * CRC_SHORT;
    }
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, ld64(p));
        p += 8;
        n -= 8;
    }
    while (n) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    return ~(uint32_t)c0;
}
#endif

static inline uint32_t ks_crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef KS_X86
    if (have_sse42)
        return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

/* ------------------------------------------------------------------ */
/* Memory blocks                                                       */
/* ------------------------------------------------------------------ */

/*
 * A decode writes its whole output into fresh memory (about the size of the
 * records), and on Linux the kernel's page faults and page zeroing for fresh
 * memory cost as much as the decoding itself.  So:
 *
 * - blocks of MAP_THRESHOLD bytes and more are anonymous mappings, sized in
 *   2 MiB steps from 2 MiB up; by default the pages about to be written are
 *   faulted in ahead, 2 MiB per call (gb_reserve / gb_populate), never the
 *   unwritten rest of a reservation, as transparent huge pages or 4 KiB
 *   pages, whichever the process measured cheaper (alloc mode 4);
 * - Decoder.lend(buf): the value column may be written into the caller's
 *   writable input, behind the read position (a "borrowed" gbuf, never
 *   freed; moved to a block of our own when a batch could overrun input not
 *   read yet);
 * - freed blocks (the column buffers, once Arrow lets go of them) go to a
 *   small cache, bounded by `cache_limit` bytes of touched memory and
 *   CACHE_SLOTS blocks, marked MADV_FREE so the kernel can still take the
 *   pages back under memory pressure; the next decode (a Spark worker decodes
 *   split after split) reuses them without faults;
 * - Decoder.feed() sizes the buffers once from the batch headers of the
 *   region (see dec_presize), so large buffers rarely grow; when they do, by
 *   doubling, with mremap (no copy) or into a cached block.
 *
 * Smaller blocks use malloc.  _native.set_buffer_cache(limit) changes the
 * bound (0 = no cache).
 */
#if defined(__linux__) && !defined(KS_NO_MMAP) /* -DKS_NO_MMAP: malloc only (for ASan) */
#include <pthread.h>
#include <sys/mman.h>
#define KS_MMAP 1
#endif
#include "pythread.h"

#define GB_MIN 256
/* 0 = plain mappings (a fault per 4 KiB page), 1 = MADV_HUGEPAGE, 2 = populate
 * ahead (MADV_POPULATE_WRITE, see gb_populate), 3 = both, 4 = populate ahead,
 * huge or 4 KiB pages per chunk, whichever measured cheaper (default; see
 * auto_pick_huge).  Huge pages fault in slowly on VMs that return free 2 MiB
 * blocks to the host, and populating in bulk halves the kernel's cost per
 * 4 KiB page (bench/decode.py --cold compares). */
static int alloc_mode = 4;
#define MAP_THRESHOLD ((size_t)128 << 10)
#define HUGE_PAGE ((size_t)2 << 20)
#define MAP_STEP ((size_t)64 << 10)
#define CACHE_SLOTS 24

typedef struct {
    uint8_t *p;
    size_t len; /* bytes in use (only tracked for data buffers) */
    size_t cap;
    int mapped; /* p is an mmap of cap bytes */
    size_t pop; /* bytes from p known to be faulted in (populate modes) */
    int borrowed; /* p is memory lent by the caller (Decoder.lend): never freed */
} gbuf;

#ifdef KS_MMAP
typedef struct {
    uint8_t *p;
    size_t cap, touched;
} cblock;

static cblock cache[CACHE_SLOTS];
static size_t cache_touched = 0;                 /* sum of touched over cache[] */
static size_t cache_limit = (size_t)256 << 20;   /* bytes of touched memory */
static PyThread_type_lock cache_lock = NULL;

static size_t map_round(size_t cap) {
    size_t step = cap >= HUGE_PAGE ? HUGE_PAGE : MAP_STEP;
    return (cap + step - 1) & ~(step - 1);
}

/* A cached block of cap in [need, 2*need]: the smallest, and of those the
 * most touched (its pages are still there); NULL if none. */
static uint8_t *cache_take(size_t need, size_t *cap_out) {
    uint8_t *p = NULL;
    if (!cache_lock)
        return NULL;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p && cache[i].cap >= need && cache[i].cap <= 2 * need &&
            (best < 0 || cache[i].cap < cache[best].cap ||
             (cache[i].cap == cache[best].cap && cache[i].touched > cache[best].touched)))
            best = i;
    if (best >= 0) {
        p = cache[best].p;
        *cap_out = cache[best].cap;
        cache_touched -= cache[best].touched;
        cache[best].p = NULL;
    }
    PyThread_release_lock(cache_lock);
    return p;
}

/* Keep a block for reuse if there is room; 1 if kept. */
static int cache_put(uint8_t *p, size_t cap, size_t touched) {
    int kept = 0;
    if (!cache_lock || touched > cache_limit)
        return 0;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    if (cache_touched + touched <= cache_limit) {
        for (int i = 0; i < CACHE_SLOTS; i++) {
            if (!cache[i].p) {
#ifdef MADV_FREE
                /* Before the block is visible to cache_take: the pages may be
                 * reclaimed until someone writes to them again. */
                if (touched)
                    madvise(p, map_round(touched) < cap ? map_round(touched) : cap, MADV_FREE);
#endif
                cache[i].p = p;
                cache[i].cap = cap;
                cache[i].touched = touched;
                cache_touched += touched;
                kept = 1;
                break;
            }
        }
    }
    PyThread_release_lock(cache_lock);
    return kept;
}

static void cache_clear(void) {
    if (!cache_lock)
        return;
    PyThread_acquire_lock(cache_lock, WAIT_LOCK);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        if (cache[i].p)
            munmap(cache[i].p, cache[i].cap);
        cache[i].p = NULL;
    }
    cache_touched = 0;
    PyThread_release_lock(cache_lock);
}

/* In a forked child (pyspark.daemon forks its workers): a fresh lock (the
 * parent's may have been held by another thread), and the inherited cached
 * blocks are dropped: writing to them would copy every page (copy-on-write). */
static void cache_after_fork_child(void) {
    cache_lock = PyThread_allocate_lock();
    for (int i = 0; i < CACHE_SLOTS; i++) {
        if (cache[i].p)
            munmap(cache[i].p, cache[i].cap);
        cache[i].p = NULL;
    }
    cache_touched = 0;
}
#endif

/* Free a block; `touched` = how much of it was written (cache accounting). */
static void block_free(uint8_t *p, size_t cap, int mapped, size_t touched) {
#ifdef KS_MMAP
    if (mapped) {
        if (p && !cache_put(p, cap, touched < cap ? touched : cap))
            munmap(p, cap);
        return;
    }
#endif
    (void)cap;
    (void)mapped;
    (void)touched;
    free(p);
}

/* ------------------------------------------------------------------ */
/* Owned buffers handed to Python (buffer protocol, zero copy)         */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    uint8_t *data;
    Py_ssize_t size;
    size_t cap;
    int mapped;
} BufferObject;

static void Buffer_dealloc(BufferObject *self) {
    block_free(self->data, self->cap, self->mapped, (size_t)self->size);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 1, flags);
}

static Py_ssize_t Buffer_len(BufferObject *self) { return self->size; }

static PyBufferProcs Buffer_as_buffer = {
    (getbufferproc)Buffer_getbuffer,
    NULL,
};

static PySequenceMethods Buffer_as_sequence = {
    .sq_length = (lenfunc)Buffer_len,
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkastore.format._native.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column buffer produced by Decoder.finish() (read-only, zero copy).",
};

/* ------------------------------------------------------------------ */
/* Growable byte buffers                                               */
/* ------------------------------------------------------------------ */

/* Ensure cap >= need; new bytes are zero when `zero`.  0 ok, -1 no memory.
 * Callable without the GIL. */
static int gb_grow(gbuf *b, size_t need, int zero) {
    if (b->borrowed) {
        /* Lent memory cannot grow: move what is written to a block of our own. */
        gbuf t = {NULL, 0, 0, 0, 0, 0};
        if (gb_grow(&t, need > b->len ? need : b->len, zero) < 0)
            return -1;
        if (b->len)
            memcpy(t.p, b->p, b->len);
        t.len = b->len;
        *b = t;
        return 0;
    }
    size_t cap = b->cap ? b->cap : GB_MIN;
    while (cap < need) {
        if (cap > ((size_t)-1) / 4)
            return -1;
        cap *= 2;
    }
#ifdef KS_MMAP
    if (cap >= MAP_THRESHOLD) {
        cap = map_round(cap);
        size_t got = 0;
        uint8_t *np = cache_take(cap, &got);
        if (np) {
            /* A reused block holds old bytes: copy ours, zero the rest if asked. */
            if (b->p)
                memcpy(np, b->p, b->cap);
            if (zero)
                memset(np + b->cap, 0, got - b->cap);
            if (b->p)
                block_free(b->p, b->cap, b->mapped, b->cap);
            cap = got;
            /* Its pages are most likely still there (MADV_FREE is lazy): no
             * populate call; a page the kernel took back faults as usual. */
            b->pop = got;
        } else if (b->mapped) {
            np = mremap(b->p, b->cap, cap, MREMAP_MAYMOVE);
            if (np == MAP_FAILED) {
                /* mremap refuses a range of several mappings (chunks advised
                 * differently in mode 4 split it): copy instead. */
                np = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (np == MAP_FAILED)
                    return -1;
                memcpy(np, b->p, b->cap);
                munmap(b->p, b->cap);
                b->pop = 0;
            }
        } else {
            np = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (np == MAP_FAILED)
                return -1;
            if (b->p) {
                memcpy(np, b->p, b->cap);
                free(b->p);
            }
            b->pop = 0;
        }
        /* Fresh mapped memory is zero already. */
#ifdef MADV_HUGEPAGE
        if ((alloc_mode == 1 || alloc_mode == 3) && cap >= HUGE_PAGE)
            madvise(np, cap, MADV_HUGEPAGE); /* advisory: failure is harmless */
#endif
        b->p = np;
        b->cap = cap;
        b->mapped = 1;
        return 0;
    }
#endif
    uint8_t *np = realloc(b->p, cap);
    if (!np)
        return -1;
    if (zero)
        memset(np + b->cap, 0, cap - b->cap);
    b->p = np;
    b->cap = cap;
    return 0;
}

/* Fault in [pop, need) of a mapped block in one call (rounded up to
 * POP_STEP), so the pages are not faulted one by one as they are written.
 * Only what is about to be written: never the address space reserved
 * beyond it. */
#define POP_STEP ((size_t)2 << 20)
#if defined(KS_MMAP) && defined(MADV_POPULATE_WRITE)
/* Alloc mode 4 (auto): whether fresh memory is cheaper as huge pages or as
 * 4 KiB pages depends on the machine, and on a VM on the moment (a huge page
 * the host has taken back faults in 4 KiB at a time on the host: 5x slower
 * than 4 KiB pages, else 2x faster).  So each populate call of 2 MiB or more
 * is timed, per kind (ns per MiB, moving average), and the next chunk takes
 * the cheaper kind; every AUTO_EXPLORE-th chunk tries the other one. */
#define AUTO_EXPLORE 32
static int64_t pop_cost[2] = {0, 0}; /* [0] 4 KiB pages, [1] huge pages; 0 = not yet known */
static unsigned pop_chunks = 0;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Trials (the kind not known or not preferred) only on chunks of one huge
 * page, so a trial of the slow kind costs one 2 MiB chunk. */
static int auto_pick_huge(size_t len) {
    int64_t small = __atomic_load_n(&pop_cost[0], __ATOMIC_RELAXED);
    int64_t huge = __atomic_load_n(&pop_cost[1], __ATOMIC_RELAXED);
    int best = small && huge ? huge < small : (small ? 0 : huge ? 1 : 0);
    if (len > HUGE_PAGE)
        return best;
    unsigned k = __atomic_add_fetch(&pop_chunks, 1, __ATOMIC_RELAXED);
    if (!small || !huge)
        return !small ? 0 : 1;
    return best != (k % AUTO_EXPLORE == 0);
}

static void auto_record(int huge, int64_t ns, size_t len) {
    int64_t x = (int64_t)((double)ns * (double)(1 << 20) / (double)len);
    int64_t old = __atomic_load_n(&pop_cost[huge], __ATOMIC_RELAXED);
    __atomic_store_n(&pop_cost[huge], old ? (3 * old + x) / 4 : (x ? x : 1), __ATOMIC_RELAXED);
}
#endif

static void gb_populate(gbuf *b, size_t need) {
#if defined(KS_MMAP) && defined(MADV_POPULATE_WRITE)
    size_t upto = (need + POP_STEP - 1) & ~(POP_STEP - 1);
    if (upto > b->cap)
        upto = b->cap;
    size_t from = b->pop & ~((size_t)4095);
    if (upto <= from) {
        b->pop = upto > b->pop ? upto : b->pop;
        return;
    }
    size_t len = upto - from;
    int timed = alloc_mode == 4 && len >= HUGE_PAGE, huge = 0;
    int64_t t0 = 0;
    if (timed) {
        huge = auto_pick_huge(len);
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
        madvise(b->p + from, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
        t0 = now_ns();
    }
    if (madvise(b->p + from, len, MADV_POPULATE_WRITE) < 0) {
        b->pop = b->cap; /* not supported (kernel < 5.14): stop asking */
        return;
    }
    if (timed)
        auto_record(huge, now_ns() - t0, len);
    b->pop = upto;
#else
    b->pop = b->cap;
    (void)need;
#endif
}

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

static void gb_free(gbuf *b) {
    if (!b->borrowed)
        block_free(b->p, b->cap, b->mapped, b->cap);
    b->borrowed = 0;
    b->p = NULL;
    b->len = b->cap = b->pop = 0;
    b->mapped = 0;
}

/* Hand the block to a Buffer object of `size` bytes; b is empty afterwards. */
static PyObject *gb_to_buffer(gbuf *b, size_t size) {
    if (b->p == NULL && gb_grow(b, GB_MIN, 1) < 0)
        return PyErr_NoMemory();
    BufferObject *o = PyObject_New(BufferObject, &BufferType);
    if (!o)
        return NULL;
    o->data = b->p;
    o->size = (Py_ssize_t)size;
    o->cap = b->cap;
    o->mapped = b->mapped;
    b->p = NULL;
    b->len = b->cap = b->pop = 0;
    b->mapped = 0;
    return (PyObject *)o;
}

static PyObject *new_buffer(size_t size) {
    gbuf b = {NULL, 0, 0, 0, 0, 0};
    if (gb_reserve(&b, size ? size : 1, 0) < 0)
        return PyErr_NoMemory();
    PyObject *o = gb_to_buffer(&b, size);
    if (!o)
        gb_free(&b);
    return o;
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

static PyObject *DecodeError;

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

static PyObject *raise_kerr(const kerr *e) {
    if (e->kind == ERR_NOMEM)
        return PyErr_NoMemory();
    PyObject *off = e->has_offset ? PyLong_FromLongLong(e->offset) : (Py_INCREF(Py_None), Py_None);
    if (!off)
        return NULL;
    PyObject *args = Py_BuildValue("(isNn)", e->kind, e->msg, off, e->position);
    if (!args)
        return NULL;
    PyErr_SetObject(DecodeError, args);
    Py_DECREF(args);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Varints (zig-zag; strict like kafkastore.format.varint)                    */
/* ------------------------------------------------------------------ */

/* 0 ok, -1 truncated, -2 too long / too large */
static inline int rd_varint(const uint8_t **pq, const uint8_t *e, int32_t *out) {
    const uint8_t *q = *pq;
    if (KS_UNLIKELY(q >= e))
        return -1;
    uint32_t b = *q++;
    uint32_t r;
    if (KS_LIKELY(!(b & 0x80))) {
        r = b;
    } else {
        r = b & 0x7f;
        for (int shift = 7;; shift += 7) {
            if (KS_UNLIKELY(q >= e))
                return -1;
            b = *q++;
            if (shift == 28) {
                if (b & 0xf0)
                    return -2;
                r |= b << 28;
                break;
            }
            r |= (b & 0x7f) << shift;
            if (!(b & 0x80))
                break;
        }
    }
    *out = (int32_t)((r >> 1) ^ (0u - (r & 1)));
    *pq = q;
    return 0;
}

static inline int rd_varlong(const uint8_t **pq, const uint8_t *e, int64_t *out) {
    const uint8_t *q = *pq;
    if (KS_UNLIKELY(q >= e))
        return -1;
    uint64_t b = *q++;
    uint64_t r;
    if (KS_LIKELY(!(b & 0x80))) {
        r = b;
    } else {
        r = b & 0x7f;
        for (int shift = 7;; shift += 7) {
            if (KS_UNLIKELY(q >= e))
                return -1;
            b = *q++;
            if (shift == 63) {
                if (b & 0xfe)
                    return -2;
                r |= b << 63;
                break;
            }
            r |= (b & 0x7f) << shift;
            if (!(b & 0x80))
                break;
        }
    }
    *out = (int64_t)((r >> 1) ^ (0ull - (r & 1)));
    *pq = q;
    return 0;
}

/* ------------------------------------------------------------------ */
/* UTF-8 validation (same acceptance as Python's strict utf-8 codec)   */
/* ------------------------------------------------------------------ */

/* Length (1-4) of the valid UTF-8 sequence that starts s[0..n), or 0 if none does:
 * no overlong forms, no surrogates, nothing past U+10FFFF (Python's decoder). */
static inline size_t utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    uint8_t lo = 0x80, hi = 0xbf;
    size_t need;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n - 1 < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k <= need; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    return need + 1;
}

static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* Batch header                                                        */
/* ------------------------------------------------------------------ */

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (HEADER_SIZE - LOG_OVERHEAD)
#define MIN_RECORD_SIZE 7 /* length varint + 6 one-byte fields */

#define ATTR_CODEC_MASK 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20

#define TS_MS_LIMIT (INT64_MAX / 1000)

typedef struct {
    int64_t base_offset;
    int32_t batch_length;
    uint32_t crc;
    uint16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int32_t record_count;
} bheader;

static void parse_header(const uint8_t *p, bheader *h) {
    h->base_offset = (int64_t)ld_be64(p);
    h->batch_length = (int32_t)ld_be32(p + 8);
    h->crc = ld_be32(p + 17);
    h->attributes = ld_be16(p + 21);
    h->last_offset_delta = (int32_t)ld_be32(p + 23);
    h->base_timestamp = (int64_t)ld_be64(p + 27);
    h->max_timestamp = (int64_t)ld_be64(p + 35);
    h->producer_id = (int64_t)ld_be64(p + 43);
    h->record_count = (int32_t)ld_be32(p + 57);
}

/* ------------------------------------------------------------------ */
/* The decoder object                                                  */
/* ------------------------------------------------------------------ */

typedef struct {
    int64_t pid, first, last;
} abtxn;

typedef struct {
    PyObject_HEAD
    int64_t start, end;
    int include_headers, verify_crc, busy, broken;
    abtxn *ab;
    Py_ssize_t nab;
    int64_t rows, nhdr;
    int64_t knulls, vnulls, hnulls, hvnulls;
    const void *presized_buf; /* region already sized by dec_presize */
    Py_ssize_t presized_end;
    Py_buffer lent;  /* the caller's writable input (lend()): vdata may live in it */
    int has_lent;
    gbuf off, ts, tst;             /* int64, int64 (us), int32 */
    gbuf kvalid, koff, kdata;      /* key: bitmap, int32 offsets, bytes */
    gbuf vvalid, voff, vdata;      /* value */
    gbuf hvalid, hoff;             /* headers list: bitmap, int32 offsets */
    gbuf hkoff, hkdata;            /* header key (string, never null) */
    gbuf hvvalid, hvoff, hvdata;   /* header value (binary, nullable) */
} Decoder;

static gbuf *dec_bufs(Decoder *d, int i) {
    gbuf *all[] = {&d->off, &d->ts, &d->tst, &d->kvalid, &d->koff, &d->kdata,
                   &d->vvalid, &d->voff, &d->vdata, &d->hvalid, &d->hoff,
                   &d->hkoff, &d->hkdata, &d->hvvalid, &d->hvoff, &d->hvdata};
    return (i >= 0 && i < (int)(sizeof(all) / sizeof(all[0]))) ? all[i] : NULL;
}

static void dec_free_bufs(Decoder *d) {
    gbuf *b;
    for (int i = 0; (b = dec_bufs(d, i)) != NULL; i++)
        gb_free(b);
}

static void dec_release_lent(Decoder *d) {
    if (d->has_lent) {
        PyBuffer_Release(&d->lent);
        d->has_lent = 0;
    }
}

/* Move the value bytes out of lent memory into a block of our own (when the
 * next batch could overwrite input not read yet).  0 ok, -1 no memory. */
static int dec_unborrow(Decoder *d) {
    if (!d->vdata.borrowed)
        return 0;
    return gb_grow(&d->vdata, d->vdata.len > GB_MIN ? d->vdata.len : GB_MIN, 0);
}

/* Fresh state: offset buffers start with their leading 0. */
static int dec_reset(Decoder *d) {
    dec_free_bufs(d);
    dec_release_lent(d);
    d->rows = d->nhdr = 0;
    d->knulls = d->vnulls = d->hnulls = d->hvnulls = 0;
    d->presized_buf = NULL;
    d->presized_end = 0;
    gbuf *offs[] = {&d->koff, &d->voff, &d->hoff, &d->hkoff, &d->hvoff};
    for (int i = 0; i < 5; i++) {
        if (gb_reserve(offs[i], GB_MIN, offs[i] == &d->hoff) < 0)
            return -1;
        memset(offs[i]->p, 0, 4);
    }
    return 0;
}

static int abtxn_cmp(const void *a, const void *b) {
    const abtxn *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return 0;
}

static int dec_is_aborted(const Decoder *d, int64_t pid, int64_t base) {
    Py_ssize_t lo = 0, hi = d->nab;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (d->ab[mid].pid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (Py_ssize_t i = lo; i < d->nab && d->ab[i].pid == pid && d->ab[i].first <= base; i++)
        if (base <= d->ab[i].last)
            return 1;
    return 0;
}

/* Room for `k` more rows in every per-row column.  timestampType and the
 * headers offsets are zero-filled and only non-zero entries are written:
 * with create-time batches and no headers (the common case) their fresh
 * pages are never touched by the decode (no faults, no populate). */
static int dec_reserve_rows(Decoder *d, int64_t k) {
    size_t n = (size_t)(d->rows + k);
    size_t bits = (n + 7) / 8 + 1;
    if (gb_reserve(&d->off, n * 8, 0) || gb_reserve(&d->ts, n * 8, 0) ||
        gb_reserve_space(&d->tst, n * 4, 1) || gb_reserve(&d->koff, (n + 1) * 4, 0) ||
        gb_reserve(&d->voff, (n + 1) * 4, 0) || gb_reserve_space(&d->hoff, (n + 1) * 4, 1) ||
        gb_reserve(&d->kvalid, bits, 1) || gb_reserve(&d->vvalid, bits, 1) ||
        gb_reserve(&d->hvalid, bits, 1))
        return -1;
    return 0;
}

/* Append one header (key already validated UTF-8). */
static int dec_add_header(Decoder *d, const uint8_t *k, int32_t klen,
                          const uint8_t *v, int32_t vlen) {
    size_t nh = (size_t)d->nhdr;
    if (gb_reserve(&d->hkoff, (nh + 2) * 4, 0) || gb_reserve(&d->hvoff, (nh + 2) * 4, 0) ||
        gb_reserve(&d->hvvalid, (nh + 1 + 7) / 8 + 1, 1) ||
        gb_reserve(&d->hkdata, d->hkdata.len + (size_t)klen + 1, 0) ||
        gb_reserve(&d->hvdata, d->hvdata.len + (size_t)(vlen > 0 ? vlen : 0) + 1, 0))
        return -1;
    memcpy(d->hkdata.p + d->hkdata.len, k, (size_t)klen);
    d->hkdata.len += (size_t)klen;
    if (vlen >= 0) {
        memcpy(d->hvdata.p + d->hvdata.len, v, (size_t)vlen);
        d->hvdata.len += (size_t)vlen;
        d->hvvalid.p[nh >> 3] |= (uint8_t)(1u << (nh & 7));
    } else {
        d->hvnulls++;
    }
    int32_t hk = (int32_t)d->hkdata.len, hv = (int32_t)d->hvdata.len;
    memcpy(d->hkoff.p + (nh + 1) * 4, &hk, 4);
    memcpy(d->hvoff.p + (nh + 1) * 4, &hv, 4);
    d->nhdr = (int64_t)nh + 1;
    return 0;
}

#define RERR(...) do { KERR(err, ERR_CORRUPT, h->base_offset, 1, bpos, __VA_ARGS__); goto fail; } while (0)

/*
 * Decode the records section [d0, d0+n) of one batch.  Rows with an offset
 * in [start, end) are appended.  0 ok, -1 error (err filled).
 */
static int dec_records(Decoder *d, const bheader *h, const uint8_t *d0, size_t n,
                       Py_ssize_t bpos, kerr *err) {
    int32_t count = h->record_count;
    if (count < 0) {
        KERR(err, ERR_CORRUPT, h->base_offset, 1, bpos, "negative record count %d", (int)count);
        return -1;
    }
    /* Rows reserved for at most what the bytes can hold, never for what a
     * count read from the input claims. */
    int64_t maxrows = (int64_t)(n / MIN_RECORD_SIZE) + 1;
    if (dec_reserve_rows(d, count < maxrows ? count : maxrows) < 0 ||
        gb_reserve(&d->kdata, d->kdata.len + n, 0) < 0 ||
        gb_reserve(&d->vdata, d->vdata.len + n, 0) < 0) {
        err->kind = ERR_NOMEM;
        return -1;
    }

    const int log_append = (h->attributes & ATTR_LOG_APPEND_TIME) != 0;
    const int32_t tstype = log_append ? 1 : 0;
    const int64_t base = h->base_offset, base_ts = h->base_timestamp;
    const int64_t start = d->start, end = d->end;
    const int want_headers = d->include_headers;
    const int32_t last_delta = h->last_offset_delta;
    int32_t prev_delta = -1;

    /* Hot state in locals: stores through uint8_t* may alias anything. */
    int64_t rows = d->rows;
    int64_t *o_off = (int64_t *)d->off.p;
    int64_t *o_ts = (int64_t *)d->ts.p;
    int32_t *o_tst = (int32_t *)d->tst.p;
    int32_t *o_koff = (int32_t *)d->koff.p;
    int32_t *o_voff = (int32_t *)d->voff.p;
    int32_t *o_hoff = (int32_t *)d->hoff.p;
    uint8_t *o_kvalid = d->kvalid.p, *o_vvalid = d->vvalid.p, *o_hvalid = d->hvalid.p;
    uint8_t *o_kdata = d->kdata.p, *o_vdata = d->vdata.p;
    const int inplace = d->vdata.borrowed;
    size_t klen_tot = d->kdata.len, vlen_tot = d->vdata.len;
    int64_t knulls = d->knulls, vnulls = d->vnulls, hnulls = d->hnulls;
    const int64_t rows_cap = d->rows + (count < maxrows ? count : maxrows);

    const uint8_t *q = d0, *e = d0 + n;
    int rc;
    for (int32_t i = 0; i < count; i++) {
        int32_t rlen, offd, klen, vlen, hcount;
        int64_t tsd;
        if (KS_UNLIKELY(q >= e))
            RERR("record count %d but the batch ends after %d records", (int)count, (int)i);
        if ((rc = rd_varint(&q, e, &rlen)) < 0)
            RERR("record %d: %s length varint", (int)i, rc == -1 ? "truncated" : "invalid");
        if (KS_UNLIKELY(rlen < 0 || (size_t)rlen > (size_t)(e - q)))
            RERR("record %d: length %d outside the batch (%zd bytes left)", (int)i, (int)rlen,
                 (Py_ssize_t)(e - q));
        const uint8_t *re = q + rlen;
        if (KS_UNLIKELY(q >= re))
            RERR("record %d: empty record", (int)i);
        q++; /* attributes (unused) */
        if ((rc = rd_varlong(&q, re, &tsd)) < 0)
            RERR("record %d: %s timestamp delta", (int)i, rc == -1 ? "truncated" : "invalid");
        if ((rc = rd_varint(&q, re, &offd)) < 0)
            RERR("record %d: %s offset delta", (int)i, rc == -1 ? "truncated" : "invalid");
        if (KS_UNLIKELY(offd <= prev_delta || offd > last_delta))
            RERR("record %d: offset delta %d not increasing within [0, %d] (previous %d)",
                 (int)i, (int)offd, (int)last_delta, (int)prev_delta);
        prev_delta = offd;
        const int64_t offset = base + offd; /* <= base + last_delta: checked per batch */
        const int emit = offset >= start && offset < end;
        if ((rc = rd_varint(&q, re, &klen)) < 0)
            RERR("record %d: %s key length", (int)i, rc == -1 ? "truncated" : "invalid");
        const uint8_t *kp = q;
        if (KS_UNLIKELY(klen < -1))
            RERR("record %d: invalid key length %d", (int)i, (int)klen);
        if (klen >= 0) {
            if (KS_UNLIKELY((size_t)klen > (size_t)(re - q)))
                RERR("record %d: key length %d past the record end", (int)i, (int)klen);
            q += klen;
        }
        if ((rc = rd_varint(&q, re, &vlen)) < 0)
            RERR("record %d: %s value length", (int)i, rc == -1 ? "truncated" : "invalid");
        const uint8_t *vp = q;
        if (KS_UNLIKELY(vlen < -1))
            RERR("record %d: invalid value length %d", (int)i, (int)vlen);
        if (vlen >= 0) {
            if (KS_UNLIKELY((size_t)vlen > (size_t)(re - q)))
                RERR("record %d: value length %d past the record end", (int)i, (int)vlen);
            q += vlen;
        }
        if ((rc = rd_varint(&q, re, &hcount)) < 0)
            RERR("record %d: %s header count", (int)i, rc == -1 ? "truncated" : "invalid");
        if (KS_UNLIKELY(hcount < 0))
            RERR("record %d: negative header count %d", (int)i, (int)hcount);
        const int keep_headers = emit && want_headers;
        for (int32_t j = 0; j < hcount; j++) {
            int32_t hkl, hvl;
            if ((rc = rd_varint(&q, re, &hkl)) < 0)
                RERR("record %d header %d: %s key length", (int)i, (int)j,
                     rc == -1 ? "truncated" : "invalid");
            if (KS_UNLIKELY(hkl < 0 || (size_t)hkl > (size_t)(re - q)))
                RERR("record %d header %d: key length %d invalid", (int)i, (int)j, (int)hkl);
            const uint8_t *hk = q;
            q += hkl;
            if ((rc = rd_varint(&q, re, &hvl)) < 0)
                RERR("record %d header %d: %s value length", (int)i, (int)j,
                     rc == -1 ? "truncated" : "invalid");
            const uint8_t *hv = q;
            if (KS_UNLIKELY(hvl < -1))
                RERR("record %d header %d: invalid value length %d", (int)i, (int)j, (int)hvl);
            if (hvl >= 0) {
                if (KS_UNLIKELY((size_t)hvl > (size_t)(re - q)))
                    RERR("record %d header %d: value length %d past the record end", (int)i,
                         (int)j, (int)hvl);
                q += hvl;
            }
            if (keep_headers) {
                if (!utf8_valid(hk, (size_t)hkl))
                    RERR("record %d header %d: key is not valid UTF-8", (int)i, (int)j);
                if (dec_add_header(d, hk, hkl, hv, hvl) < 0) {
                    err->kind = ERR_NOMEM;
                    goto fail;
                }
            }
        }
        if (KS_UNLIKELY(q != re))
            RERR("record %d: %zd bytes declared, %zd read", (int)i, (Py_ssize_t)rlen,
                 (Py_ssize_t)(q - (re - rlen)));
        if (!emit)
            continue;

        /* Emit the row. */
        int64_t ts = h->max_timestamp;
        int ts_overflow = 0;
        if (!log_append)
            ts_overflow = __builtin_add_overflow(base_ts, tsd, &ts);
        if (KS_UNLIKELY(ts_overflow || ts > TS_MS_LIMIT || ts < -TS_MS_LIMIT))
            RERR("record %d: timestamp %lld ms out of range", (int)i, (long long)ts);
        if (KS_UNLIKELY(rows >= rows_cap)) /* cannot happen: bounded by bytes */
            RERR("record %d: internal row overflow", (int)i);
        o_off[rows] = offset;
        o_ts[rows] = ts * 1000;
        if (tstype) /* zero-filled (dec_reserve_rows) */
            o_tst[rows] = tstype;
        if (klen >= 0) {
            memcpy(o_kdata + klen_tot, kp, (size_t)klen);
            klen_tot += (size_t)klen;
            o_kvalid[rows >> 3] |= (uint8_t)(1u << (rows & 7));
        } else {
            knulls++;
        }
        o_koff[rows + 1] = (int32_t)klen_tot;
        if (vlen >= 0) {
            if (inplace) /* behind the read position, possibly overlapping */
                memmove(o_vdata + vlen_tot, vp, (size_t)vlen);
            else
                memcpy(o_vdata + vlen_tot, vp, (size_t)vlen);
            vlen_tot += (size_t)vlen;
            o_vvalid[rows >> 3] |= (uint8_t)(1u << (rows & 7));
        } else {
            vnulls++;
        }
        o_voff[rows + 1] = (int32_t)vlen_tot;
        if (keep_headers && hcount > 0) {
            o_hvalid[rows >> 3] |= (uint8_t)(1u << (rows & 7));
        } else {
            hnulls++;
        }
        if (d->nhdr) /* zero-filled, and nhdr only grows (dec_reserve_rows) */
            o_hoff[rows + 1] = (int32_t)d->nhdr;
        rows++;
    }
    if (KS_UNLIKELY(q != e)) {
        KERR(err, ERR_CORRUPT, h->base_offset, 1, bpos,
             "%zd bytes left in the batch after its %d records", (Py_ssize_t)(e - q), (int)count);
        goto fail;
    }
    d->rows = rows;
    d->kdata.len = klen_tot;
    d->vdata.len = vlen_tot;
    d->knulls = knulls;
    d->vnulls = vnulls;
    d->hnulls = hnulls;
    if (klen_tot > INT32_MAX || vlen_tot > INT32_MAX || d->hkdata.len > INT32_MAX ||
        d->hvdata.len > INT32_MAX || d->nhdr > INT32_MAX) {
        KERR(err, ERR_TOO_LARGE, h->base_offset, 1, bpos,
             "decoded data exceeds 2 GiB in one column of one Arrow batch; "
             "decode a smaller byte range");
        return -1;
    }
    return 0;
fail:
    /* Rows of this batch were not committed (locals not written back), but
     * headers may have been: the decoder is marked broken by the caller. */
    return -1;
}

/* Walk whole batches in buf[pos:end).  Returns 1 = done, 0 = stopped at a
 * compressed batch (*stop = its position), -1 = error. */
static int dec_walk(Decoder *d, const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                    Py_ssize_t *stop, kerr *err) {
    while (pos < end) {
        const uint8_t *p = buf + pos;
        Py_ssize_t avail = end - pos;
        if (avail < HEADER_SIZE) {
            if (avail >= 8)
                KERR(err, ERR_CORRUPT, (int64_t)ld_be64(p), 1, pos,
                     "truncated batch header: %zd of %d bytes", avail, HEADER_SIZE);
            else
                KERR(err, ERR_CORRUPT, 0, 0, pos, "truncated batch header: %zd of %d bytes",
                     avail, HEADER_SIZE);
            return -1;
        }
        bheader h;
        parse_header(p, &h);
        if (p[16] != 2) {
            KERR(err, ERR_CORRUPT, h.base_offset, 1, pos,
                 "unsupported magic %d (only v2 record batches are supported)",
                 (int)(int8_t)p[16]);
            return -1;
        }
        if (h.batch_length < MIN_BATCH_LENGTH) {
            KERR(err, ERR_CORRUPT, h.base_offset, 1, pos, "batch length %d is below the minimum %d",
                 (int)h.batch_length, MIN_BATCH_LENGTH);
            return -1;
        }
        Py_ssize_t size = (Py_ssize_t)h.batch_length + LOG_OVERHEAD;
        if (size > avail) {
            KERR(err, ERR_CORRUPT, h.base_offset, 1, pos,
                 "batch length %d runs past the end of the buffer (%zd bytes left)",
                 (int)h.batch_length, avail - LOG_OVERHEAD);
            return -1;
        }
        /* Implausible CRC-covered fields: a CRC mismatch is the better
         * diagnosis when there is one (as record_batch.parse_header). */
        const char *problem = NULL;
        char pbuf[160];
        int codec = h.attributes & ATTR_CODEC_MASK;
        if (codec > 4) {
            snprintf(pbuf, sizeof(pbuf), "unknown compression codec %d in attributes", codec);
            problem = pbuf;
        } else if (h.record_count < 0) {
            snprintf(pbuf, sizeof(pbuf), "negative record count %d", (int)h.record_count);
            problem = pbuf;
        } else if (h.last_offset_delta < 0) {
            snprintf(pbuf, sizeof(pbuf), "negative last offset delta %d", (int)h.last_offset_delta);
            problem = pbuf;
        } else if ((int64_t)h.record_count > (int64_t)h.last_offset_delta + 1) {
            snprintf(pbuf, sizeof(pbuf), "record count %d exceeds last offset delta %d + 1",
                     (int)h.record_count, (int)h.last_offset_delta);
            problem = pbuf;
        } else if (codec == 0 &&
                   (int64_t)h.record_count * MIN_RECORD_SIZE > (int64_t)(size - HEADER_SIZE)) {
            snprintf(pbuf, sizeof(pbuf), "record count %d cannot fit in %zd bytes of records",
                     (int)h.record_count, size - HEADER_SIZE);
            problem = pbuf;
        }
        if (problem) {
            uint32_t crc = ks_crc32c(0, p + 21, (size_t)(size - 21));
            if (crc != h.crc)
                KERR(err, ERR_CRC, h.base_offset, 1, pos,
                     "CRC mismatch: stored 0x%08x, computed 0x%08x", h.crc, crc);
            else
                KERR(err, ERR_CORRUPT, h.base_offset, 1, pos, "%s", problem);
            return -1;
        }
        int64_t last;
        if (__builtin_add_overflow(h.base_offset, (int64_t)h.last_offset_delta, &last)) {
            KERR(err, ERR_CORRUPT, h.base_offset, 1, pos, "last offset overflows int64");
            return -1;
        }
        if (h.base_offset >= d->end)
            return 1;
        if (d->verify_crc) {
            uint32_t crc = ks_crc32c(0, p + 21, (size_t)(size - 21));
            if (crc != h.crc) {
                KERR(err, ERR_CRC, h.base_offset, 1, pos,
                     "CRC mismatch: stored 0x%08x, computed 0x%08x", h.crc, crc);
                return -1;
            }
        }
        int skip = (h.attributes & ATTR_CONTROL) || last < d->start ||
                   ((h.attributes & ATTR_TRANSACTIONAL) && d->nab &&
                    dec_is_aborted(d, h.producer_id, h.base_offset));
        if (!skip) {
            if (codec != 0) {
                *stop = pos;
                return 0;
            }
            /* Values written in place stay behind what is read (see lend). */
            if (d->vdata.borrowed && d->vdata.p + d->vdata.len > p + HEADER_SIZE &&
                dec_unborrow(d) < 0) {
                err->kind = ERR_NOMEM;
                return -1;
            }
            if (dec_records(d, &h, p + HEADER_SIZE, (size_t)(size - HEADER_SIZE), pos, err) < 0)
                return -1;
        }
        pos += size;
    }
    return 1;
}

/* Buffer argument helpers */
static int get_view(PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    return 0;
}

#define RELEASE_GIL_BYTES (64 * 1024)

/*
 * Size the buffers for the uncompressed batches of buf[pos:end) from their
 * headers alone (a cheap pass: ~2000 headers for 1M records), so that large
 * buffers are allocated once.  Only framing that the walk will check anyway
 * is trusted: the scan stops at the first batch that does not fit.  Keys and
 * values each get room for all record bytes (address space only: untouched
 * pages cost nothing).
 */
static int dec_presize(Decoder *d, const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end) {
    size_t bytes = 0, rows = 0;
    /* feed() resumes the same region after each compressed batch: scan once. */
    if (d->presized_buf == (const void *)buf && d->presized_end == end)
        return 0;
    d->presized_buf = buf;
    d->presized_end = end;
    while (end - pos >= HEADER_SIZE) {
        const uint8_t *p = buf + pos;
        int32_t blen = (int32_t)ld_be32(p + 8);
        if (blen < MIN_BATCH_LENGTH || (Py_ssize_t)blen + LOG_OVERHEAD > end - pos)
            break;
        int64_t base = (int64_t)ld_be64(p);
        if (base >= d->end)
            break;
        uint16_t attrs = ld_be16(p + 21);
        int32_t count = (int32_t)ld_be32(p + 57);
        int32_t lod = (int32_t)ld_be32(p + 23);
        int64_t last;
        size_t rec = (size_t)blen - MIN_BATCH_LENGTH;
        if (!(attrs & (ATTR_CODEC_MASK | ATTR_CONTROL)) && count > 0 &&
            !__builtin_add_overflow(base, (int64_t)lod, &last) && last >= d->start) {
            bytes += rec;
            rows += (size_t)count < rec / MIN_RECORD_SIZE ? (size_t)count : rec / MIN_RECORD_SIZE;
        }
        pos += (Py_ssize_t)blen + LOG_OVERHEAD;
    }
    if (bytes < MAP_THRESHOLD)
        return 0; /* small: normal growth is cheap */
    /* Values first: they are usually the bigger column, and get the cached
     * block with the most pages still in place. */
    if (dec_reserve_rows(d, (int64_t)rows) < 0 ||
        gb_reserve_space(&d->vdata, d->vdata.len + bytes, 0) < 0 ||
        gb_reserve_space(&d->kdata, d->kdata.len + bytes, 0) < 0)
        return -1;
    return 0;
}

static int dec_check_usable(Decoder *self) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder used from two threads at once");
        return -1;
    }
    if (self->broken) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder raised an error earlier; make a new one");
        return -1;
    }
    return 0;
}

static PyObject *Decoder_feed(Decoder *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos = 0, end = -1;
    if (!PyArg_ParseTuple(args, "O|nn:feed", &obj, &pos, &end))
        return NULL;
    if (dec_check_usable(self) < 0)
        return NULL;
    Py_buffer view;
    if (get_view(obj, &view) < 0)
        return NULL;
    if (end < 0)
        end = view.len;
    if (pos < 0 || pos > end || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "feed: pos/end outside the buffer");
        return NULL;
    }
    /* Values in lent memory only while feeding from it, behind pos. */
    if (self->vdata.borrowed &&
        (view.buf != self->lent.buf ||
         self->vdata.p + self->vdata.len > (uint8_t *)view.buf + pos) &&
        dec_unborrow(self) < 0) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    kerr err;
    err.kind = ERR_NONE;
    Py_ssize_t stop = -1;
    int rc;
    self->busy = 1;
    if (end - pos >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = dec_presize(self, (const uint8_t *)view.buf, pos, end);
        if (rc < 0)
            err.kind = ERR_NOMEM;
        else
            rc = dec_walk(self, (const uint8_t *)view.buf, pos, end, &stop, &err);
        Py_END_ALLOW_THREADS
    } else {
        rc = dec_walk(self, (const uint8_t *)view.buf, pos, end, &stop, &err);
    }
    self->busy = 0;
    PyObject *result = NULL;
    if (rc < 0) {
        self->broken = 1;
        raise_kerr(&err);
    } else if (rc == 1) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        const uint8_t *p = (const uint8_t *)view.buf + stop;
        Py_ssize_t size = (Py_ssize_t)(int32_t)ld_be32(p + 8) + LOG_OVERHEAD;
        result = Py_BuildValue("(ninn)", stop, (int)(ld_be16(p + 21) & ATTR_CODEC_MASK),
                               stop + HEADER_SIZE, stop + size);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyObject *Decoder_feed_records(Decoder *self, PyObject *args) {
    PyObject *obj, *recobj;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OnO:feed_records", &obj, &pos, &recobj))
        return NULL;
    if (dec_check_usable(self) < 0)
        return NULL;
    Py_buffer view, rec;
    if (get_view(obj, &view) < 0)
        return NULL;
    if (pos < 0 || view.len - pos < HEADER_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "feed_records: no batch header at pos");
        return NULL;
    }
    bheader h;
    parse_header((const uint8_t *)view.buf + pos, &h);
    const uint8_t *bufp = (const uint8_t *)view.buf;
    Py_ssize_t buflen = view.len;
    PyBuffer_Release(&view);
    if (get_view(recobj, &rec) < 0)
        return NULL;
    /* Values in lent memory: this batch's may not pass its own end there. */
    if (self->vdata.borrowed) {
        Py_ssize_t bend = h.batch_length >= 0 ? pos + (Py_ssize_t)h.batch_length + LOG_OVERHEAD
                                              : pos;
        if ((const void *)bufp != self->lent.buf || bend > buflen ||
            (size_t)rec.len > (size_t)(bufp + bend - (self->vdata.p + self->vdata.len)) ||
            self->vdata.p + self->vdata.len > bufp + bend) {
            if (dec_unborrow(self) < 0) {
                PyBuffer_Release(&rec);
                return PyErr_NoMemory();
            }
        }
    }
    kerr err;
    err.kind = ERR_NONE;
    int rc;
    self->busy = 1;
    if (rec.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = dec_records(self, &h, (const uint8_t *)rec.buf, (size_t)rec.len, pos, &err);
        Py_END_ALLOW_THREADS
    } else {
        rc = dec_records(self, &h, (const uint8_t *)rec.buf, (size_t)rec.len, pos, &err);
    }
    self->busy = 0;
    PyBuffer_Release(&rec);
    if (rc < 0) {
        self->broken = 1;
        return raise_kerr(&err);
    }
    Py_RETURN_NONE;
}

static PyObject *Decoder_finish(Decoder *self, PyObject *Py_UNUSED(ignored)) {
    if (dec_check_usable(self) < 0)
        return NULL;
    size_t n = (size_t)self->rows, nh = (size_t)self->nhdr;
    size_t bits = (n + 7) / 8, hbits = (nh + 7) / 8;
    /* Make sure every buffer exists and is large enough even with 0 rows. */
    if (dec_reserve_rows(self, 0) < 0 || gb_reserve(&self->hkoff, (nh + 1) * 4, 0) ||
        gb_reserve(&self->hvoff, (nh + 1) * 4, 0) || gb_reserve(&self->hvvalid, hbits + 1, 1) ||
        gb_reserve(&self->hkdata, 1, 0) || gb_reserve(&self->hvdata, 1, 0) ||
        gb_reserve(&self->kdata, 1, 0) || gb_reserve(&self->vdata, 1, 0))
        return PyErr_NoMemory();
    PyObject *res = PyDict_New();
    if (!res)
        return NULL;
    struct {
        const char *name;
        gbuf *b;
        size_t size;
    } items[] = {
        {"offset", &self->off, n * 8},
        {"timestamp", &self->ts, n * 8},
        {"timestamp_type", &self->tst, n * 4},
        {"key_validity", &self->kvalid, bits},
        {"key_offsets", &self->koff, (n + 1) * 4},
        {"key_data", &self->kdata, self->kdata.len},
        {"value_validity", &self->vvalid, bits},
        {"value_offsets", &self->voff, (n + 1) * 4},
        {"value_data", &self->vdata, self->vdata.len},
        {"headers_validity", &self->hvalid, bits},
        {"headers_offsets", &self->hoff, (n + 1) * 4},
        {"header_key_offsets", &self->hkoff, (nh + 1) * 4},
        {"header_key_data", &self->hkdata, self->hkdata.len},
        {"header_value_validity", &self->hvvalid, hbits},
        {"header_value_offsets", &self->hvoff, (nh + 1) * 4},
        {"header_value_data", &self->hvdata, self->hvdata.len},
    };
    for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
        PyObject *b;
        if (items[i].b->borrowed) {
            /* Values written in place: a memoryview of the caller's buffer. */
            PyObject *mv = PyMemoryView_FromObject(self->lent.obj);
            b = mv ? PySequence_GetSlice(mv, 0, (Py_ssize_t)items[i].size) : NULL;
            Py_XDECREF(mv);
            if (b)
                gb_free(items[i].b);
        } else {
            b = gb_to_buffer(items[i].b, items[i].size);
        }
        if (!b || PyDict_SetItemString(res, items[i].name, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(res);
            return NULL;
        }
        Py_DECREF(b);
    }
    struct {
        const char *name;
        int64_t v;
    } counts[] = {
        {"rows", self->rows},
        {"headers", self->nhdr},
        {"key_nulls", self->knulls},
        {"value_nulls", self->vnulls},
        {"headers_nulls", self->hnulls},
        {"header_value_nulls", self->hvnulls},
    };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        PyObject *v = PyLong_FromLongLong(counts[i].v);
        if (!v || PyDict_SetItemString(res, counts[i].name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(res);
            return NULL;
        }
        Py_DECREF(v);
    }
    if (dec_reset(self) < 0) {
        Py_DECREF(res);
        return PyErr_NoMemory();
    }
    return res;
}

static int Decoder_init(Decoder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"start_offset", "end_offset", "include_headers", "verify_crc",
                             "aborted", NULL};
    long long start = 0, end = INT64_MAX;
    int include_headers = 1, verify_crc = 1;
    PyObject *aborted = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|LLppO:Decoder", kwlist, &start, &end,
                                     &include_headers, &verify_crc, &aborted))
        return -1;
    self->start = start;
    self->end = end;
    self->include_headers = include_headers;
    self->verify_crc = verify_crc;
    self->busy = 0;
    self->broken = 0;
    free(self->ab);
    self->ab = NULL;
    self->nab = 0;
    if (aborted && aborted != Py_None) {
        PyObject *seq = PySequence_Fast(aborted, "aborted must be a sequence");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > 0) {
            self->ab = malloc((size_t)n * sizeof(abtxn));
            if (!self->ab) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                return -1;
            }
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            long long pid, first, last;
            PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyArg_ParseTuple(t, "LLL:aborted", &pid, &first, &last)) {
                Py_DECREF(seq);
                return -1;
            }
            self->ab[i].pid = pid;
            self->ab[i].first = first;
            self->ab[i].last = last;
        }
        self->nab = n;
        Py_DECREF(seq);
        if (n > 1)
            qsort(self->ab, (size_t)n, sizeof(abtxn), abtxn_cmp);
    }
    if (dec_reset(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Decoder_dealloc(Decoder *self) {
    dec_free_bufs(self);
    dec_release_lent(self);
    free(self->ab);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Decoder_lend(Decoder *self, PyObject *obj) {
    if (dec_check_usable(self) < 0)
        return NULL;
    if (self->has_lent || self->rows || self->vdata.len)
        Py_RETURN_FALSE;
    if (PyObject_GetBuffer(obj, &self->lent, PyBUF_WRITABLE) < 0) {
        PyErr_Clear(); /* read-only (bytes): values go to fresh memory */
        Py_RETURN_FALSE;
    }
    self->has_lent = 1;
    gb_free(&self->vdata);
    self->vdata.p = (uint8_t *)self->lent.buf;
    self->vdata.len = 0;
    self->vdata.cap = (size_t)self->lent.len;
    self->vdata.pop = self->vdata.cap;
    self->vdata.mapped = 0;
    self->vdata.borrowed = 1;
    Py_RETURN_TRUE;
}

static PyObject *Decoder_get_rows(Decoder *self, void *Py_UNUSED(c)) {
    return PyLong_FromLongLong(self->rows);
}

static PyMethodDef Decoder_methods[] = {
    {"feed", (PyCFunction)Decoder_feed, METH_VARARGS,
     "feed(buf, pos=0, end=-1) -> None | (pos, codec, rec_start, rec_end)"},
    {"feed_records", (PyCFunction)Decoder_feed_records, METH_VARARGS,
     "feed_records(buf, pos, records): decode the decompressed records of the batch at pos"},
    {"lend", (PyCFunction)Decoder_lend, METH_O,
     "lend(buf) -> bool: buf (writable, the memory fed next) may hold the value column; "
     "its bytes are unspecified afterwards. False (nothing lent) for read-only buffers"},
    {"finish", (PyCFunction)Decoder_finish, METH_NOARGS,
     "finish() -> dict of column buffers and counts; resets the decoder"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Decoder_getset[] = {
    {"rows", (getter)Decoder_get_rows, NULL, "rows decoded so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkastore.format._native.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Decoder(start_offset=0, end_offset=2**63-1, include_headers=True, "
              "verify_crc=True, aborted=()): Kafka v2 batches into Arrow buffers.",
    .tp_methods = Decoder_methods,
    .tp_getset = Decoder_getset,
    .tp_init = (initproc)Decoder_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* Encoder: records sections of v2 batches                             */
/* ------------------------------------------------------------------ */

/*
 * The records section of a batch (what record_batch._encode_records builds),
 * byte for byte.  Two front ends: a sequence of record tuples (the broker's
 * buffered records) and Arrow column buffers (Broker.send_arrow, compaction).
 * Anything unusual (a non-increasing offset, a timestamp delta out of int64,
 * a field of an unexpected type, a record over 2 GiB) makes them return None:
 * the caller then runs the pure encoder, which raises the precise error.
 */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} obuf;

static int ob_reserve(obuf *b, size_t extra) {
    if (KS_LIKELY(b->len + extra <= b->cap))
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > ((size_t)-1) / 4)
            return -1;
        cap *= 2;
    }
    uint8_t *np = realloc(b->p, cap);
    if (!np)
        return -1;
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int vsize(int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (u > 0x7F) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *wr_varint(uint8_t *q, int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (u > 0x7F) {
        *q++ = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *q++ = (uint8_t)u;
    return q;
}

static inline uint8_t *wr_bytes(uint8_t *q, const uint8_t *s, int64_t n) {
    if (n < 0) {
        *q++ = 1; /* varint -1: null */
        return q;
    }
    q = wr_varint(q, n);
    if (n)
        memcpy(q, s, (size_t)n);
    return q + n;
}

static inline int64_t bytes_size(int64_t n) { return n < 0 ? 1 : vsize(n) + n; }


/* Nullable bytes from a Python object: 1 ok, 0 unsupported type. */
typedef struct {
    const uint8_t *p;
    int64_t n; /* -1 = null */
    Py_buffer view;
    int has_view;
} pbytes;

static int pb_get(PyObject *o, pbytes *b) {
    b->has_view = 0;
    if (o == Py_None) {
        b->p = NULL;
        b->n = -1;
        return 1;
    }
    if (PyBytes_CheckExact(o)) {
        b->p = (const uint8_t *)PyBytes_AS_STRING(o);
        b->n = PyBytes_GET_SIZE(o);
        return 1;
    }
    if (PyObject_CheckBuffer(o) && PyObject_GetBuffer(o, &b->view, PyBUF_C_CONTIGUOUS) == 0) {
        b->has_view = 1;
        b->p = (const uint8_t *)b->view.buf;
        b->n = b->view.len;
        return 1;
    }
    PyErr_Clear();
    return 0;
}

static void pb_release(pbytes *b) {
    if (b->has_view)
        PyBuffer_Release(&b->view);
    b->has_view = 0;
}

static PyObject *rec_field(PyObject *r, Py_ssize_t i, const char *name) {
    if (PyTuple_Check(r)) {
        if (PyTuple_GET_SIZE(r) != 5)
            return NULL;
        PyObject *o = PyTuple_GET_ITEM(r, i);
        Py_INCREF(o);
        return o;
    }
    return PyObject_GetAttrString(r, name);
}

/* One record from a Python object; 1 written, 0 unsupported (fall back), -1 error. */
static int enc_py_record(obuf *out, PyObject *r, int64_t base_offset, int64_t base_ts,
                         int64_t *prev, int64_t *max_ts, int *have_max) {
    PyObject *fo = NULL, *ft = NULL, *fk = NULL, *fv = NULL, *fh = NULL, *hseq = NULL;
    pbytes key = {0}, value = {0};
    int ret = 0, overflow = 0;
    enum { MAXH = 64 };
    pbytes hvals[MAXH];
    const char *hkeys[MAXH];
    Py_ssize_t hklens[MAXH];
    Py_ssize_t nh = 0, got_h = 0;

    if (!(fo = rec_field(r, 0, "offset")) || !(ft = rec_field(r, 1, "timestamp")) ||
        !(fk = rec_field(r, 2, "key")) || !(fv = rec_field(r, 3, "value")) ||
        !(fh = rec_field(r, 4, "headers")))
        goto unsupported;
    if (!PyLong_Check(fo) || !PyLong_Check(ft))
        goto unsupported;
    long long off = PyLong_AsLongLongAndOverflow(fo, &overflow);
    if (overflow || (off == -1 && PyErr_Occurred()))
        goto unsupported;
    long long ts = PyLong_AsLongLongAndOverflow(ft, &overflow);
    if (overflow || (ts == -1 && PyErr_Occurred()))
        goto unsupported;
    if (off <= *prev)
        goto unsupported;
    int64_t od, tsd;
    if (__builtin_sub_overflow((int64_t)off, base_offset, &od) ||
        __builtin_sub_overflow((int64_t)ts, base_ts, &tsd))
        goto unsupported;
    if (!pb_get(fk, &key) || !pb_get(fv, &value))
        goto unsupported;
    if (!(hseq = PySequence_Fast(fh, "headers")))
        goto unsupported;
    nh = PySequence_Fast_GET_SIZE(hseq);
    if (nh > MAXH)
        goto unsupported;
    int64_t size = 1 + vsize(tsd) + vsize(od) + bytes_size(key.n) + bytes_size(value.n) + vsize(nh);
    for (Py_ssize_t j = 0; j < nh; j++) {
        PyObject *h = PySequence_Fast_GET_ITEM(hseq, j);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(h, 0)))
            goto unsupported;
        hkeys[j] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &hklens[j]);
        if (!hkeys[j])
            goto unsupported;
        if (!pb_get(PyTuple_GET_ITEM(h, 1), &hvals[j]))
            goto unsupported;
        got_h = j + 1;
        size += bytes_size(hklens[j]) + bytes_size(hvals[j].n);
    }
    if (size > INT32_MAX)
        goto unsupported;
    if (ob_reserve(out, (size_t)size + 5) < 0) {
        PyErr_NoMemory();
        ret = -1;
        goto done;
    }
    uint8_t *q = out->p + out->len;
    q = wr_varint(q, size);
    *q++ = 0;
    q = wr_varint(q, tsd);
    q = wr_varint(q, od);
    q = wr_bytes(q, key.p, key.n);
    q = wr_bytes(q, value.p, value.n);
    q = wr_varint(q, nh);
    for (Py_ssize_t j = 0; j < nh; j++) {
        q = wr_bytes(q, (const uint8_t *)hkeys[j], hklens[j]);
        q = wr_bytes(q, hvals[j].p, hvals[j].n);
    }
    out->len = (size_t)(q - out->p);
    *prev = off;
    if (!*have_max || ts > *max_ts) {
        *max_ts = ts;
        *have_max = 1;
    }
    ret = 1;
    goto done;
unsupported:
    PyErr_Clear();
    ret = 0;
done:
    for (Py_ssize_t j = 0; j < got_h; j++)
        pb_release(&hvals[j]);
    pb_release(&key);
    pb_release(&value);
    Py_XDECREF(fo);
    Py_XDECREF(ft);
    Py_XDECREF(fk);
    Py_XDECREF(fv);
    Py_XDECREF(fh);
    Py_XDECREF(hseq);
    return ret;
}

static PyObject *enc_result(obuf *out, int have_max, int64_t max_ts) {
    PyObject *data = PyBytes_FromStringAndSize((const char *)out->p, (Py_ssize_t)out->len);
    free(out->p);
    if (!data)
        return NULL;
    if (!have_max)
        return Py_BuildValue("(NO)", data, Py_None);
    return Py_BuildValue("(NL)", data, (long long)max_ts);
}

static PyObject *mod_encode_records(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *records;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "OLL:encode_records", &records, &base_offset, &base_ts))
        return NULL;
    PyObject *seq = PySequence_Fast(records, "records must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    obuf out = {NULL, 0, 0};
    int64_t prev = base_offset - 1, max_ts = 0;
    int have_max = 0;
    if (base_offset == INT64_MIN)
        goto fallback;
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = enc_py_record(&out, PySequence_Fast_GET_ITEM(seq, i), base_offset, base_ts, &prev,
                              &max_ts, &have_max);
        if (r < 0) {
            free(out.p);
            Py_DECREF(seq);
            return NULL;
        }
        if (r == 0)
            goto fallback;
    }
    Py_DECREF(seq);
    return enc_result(&out, have_max, max_ts);
fallback:
    free(out.p);
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* Arrow front end.  offsets/timestamps: int64[n], one per record; record i
 * is row r = rows[i] (or row0 + i) of whole columns: key/value validity
 * uint8 or None, int32 offsets into data; headers: list offsets int32 (or
 * None: no headers), list validity uint8 or None, header key offsets int32
 * and data, header value validity (uint8 or None), offsets and data; header
 * entries are indexed as the list offsets say.  Two passes: validate and
 * size, then write into the exact bytes object (no copy). */
typedef struct {
    Py_buffer v;
    int set;
} optbuf;

static int opt_get(PyObject *o, optbuf *b, Py_ssize_t need) {
    b->set = 0;
    if (o == Py_None)
        return 0;
    if (PyObject_GetBuffer(o, &b->v, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    b->set = 1;
    if (b->v.len < need) {
        PyErr_SetString(PyExc_ValueError, "encode_arrow: a column buffer is too short");
        return -1;
    }
    return 0;
}

#define NBUF 15

typedef struct {
    const int64_t *offs, *tss, *rows;
    int64_t row0;
    const uint8_t *kval, *vval, *hval, *hvval;
    const int32_t *koff, *voff, *hoff, *hkoff, *hvoff;
    const uint8_t *kdata, *vdata, *hkdata, *hvdata;
    size_t kspan, vspan, hkspan, hvspan;
    int64_t n_entries; /* header entries the header buffers hold */
} acols;

/* Sizes of row i's fields; 0 ok, 1 unsupported (pure decides), 2 bad buffers. */
static inline int arow(const acols *a, Py_ssize_t i, int64_t base_offset, int64_t base_ts,
                       int64_t *od, int64_t *tsd, int64_t *kn, int64_t *vn, int64_t *h0,
                       int64_t *h1, int64_t *size) {
    int64_t r = a->rows ? a->rows[i] : a->row0 + i;
    if (__builtin_sub_overflow(a->offs[i], base_offset, od) ||
        __builtin_sub_overflow(a->tss[i], base_ts, tsd))
        return 1;
    *kn = *vn = -1;
    if (!a->kval || a->kval[r]) {
        int32_t s = a->koff[r], z = a->koff[r + 1];
        if (s < 0 || z < s || (size_t)z > a->kspan)
            return 2;
        *kn = z - s;
    }
    if (!a->vval || a->vval[r]) {
        int32_t s = a->voff[r], z = a->voff[r + 1];
        if (s < 0 || z < s || (size_t)z > a->vspan)
            return 2;
        *vn = z - s;
    }
    *h0 = *h1 = 0;
    if (a->hoff && (!a->hval || a->hval[r])) {
        *h0 = a->hoff[r];
        *h1 = a->hoff[r + 1];
        if (*h0 < 0 || *h1 < *h0 || *h1 > a->n_entries)
            return 2;
    }
    int64_t sz = 1 + vsize(*tsd) + vsize(*od) + bytes_size(*kn) + bytes_size(*vn) + vsize(*h1 - *h0);
    for (int64_t j = *h0; j < *h1; j++) {
        int32_t s = a->hkoff[j], z = a->hkoff[j + 1];
        if (s < 0 || z < s || (size_t)z > a->hkspan)
            return 2;
        sz += bytes_size(z - s);
        if (!a->hvval || a->hvval[j]) {
            int32_t c = a->hvoff[j], d = a->hvoff[j + 1];
            if (c < 0 || d < c || (size_t)d > a->hvspan)
                return 2;
            sz += bytes_size(d - c);
        } else {
            sz += 1;
        }
    }
    if (sz > INT32_MAX)
        return 1;
    *size = sz;
    return 0;
}

/* Write record i (validated by arow before); returns the new end. */
static inline uint8_t *wr_arow(uint8_t *q, const acols *a, Py_ssize_t i, int64_t base_offset,
                               int64_t base_ts) {
    int64_t od = 0, tsd = 0, kn = 0, vn = 0, h0 = 0, h1 = 0, size = 0;
    int64_t r = a->rows ? a->rows[i] : a->row0 + i;
    arow(a, i, base_offset, base_ts, &od, &tsd, &kn, &vn, &h0, &h1, &size);
    q = wr_varint(q, size);
    *q++ = 0;
    q = wr_varint(q, tsd);
    q = wr_varint(q, od);
    q = wr_bytes(q, kn < 0 ? NULL : a->kdata + a->koff[r], kn);
    q = wr_bytes(q, vn < 0 ? NULL : a->vdata + a->voff[r], vn);
    q = wr_varint(q, h1 - h0);
    for (int64_t j = h0; j < h1; j++) {
        q = wr_bytes(q, a->hkdata + a->hkoff[j], a->hkoff[j + 1] - a->hkoff[j]);
        if (a->hvval && !a->hvval[j])
            q = wr_bytes(q, NULL, -1);
        else
            q = wr_bytes(q, a->hvdata + a->hvoff[j], a->hvoff[j + 1] - a->hvoff[j]);
    }
    return q;
}

/* The v2 header at h, as record_batch.assemble_batch packs it, around `body` bytes of
 * records already written at h + 61, then the CRC-32C of attributes..end. */
static void wr_batch_header(uint8_t *h, int64_t body, int64_t base_offset, int64_t leader_epoch,
                            int64_t attributes, int64_t last_offset_delta, int64_t base_ts,
                            int64_t max_ts, int64_t producer_id, int64_t producer_epoch,
                            int64_t base_sequence, int64_t count) {
    st_be64(h + 0, (uint64_t)base_offset);
    st_be32(h + 8, (uint32_t)(49 + body));
    st_be32(h + 12, (uint32_t)leader_epoch);
    h[16] = 2;
    st_be16(h + 21, (uint16_t)attributes);
    st_be32(h + 23, (uint32_t)last_offset_delta);
    st_be64(h + 27, (uint64_t)base_ts);
    st_be64(h + 35, (uint64_t)max_ts);
    st_be64(h + 43, (uint64_t)producer_id);
    st_be16(h + 51, (uint16_t)producer_epoch);
    st_be32(h + 53, (uint32_t)base_sequence);
    st_be32(h + 57, (uint32_t)count);
    st_be32(h + 17, ks_crc32c(0, h + 21, (size_t)(40 + body)));
}

/* Get the 15 column buffers and the optional row numbers, check that every row
 * index lies within every per-row buffer, and fill `a`.  0 ok; -1 Python error set;
 * -2 the buffers and row numbers do not agree (the caller raises). */
static int acols_load(acols *a, optbuf b[NBUF], optbuf *rb, PyObject *const o[NBUF],
                      PyObject *rows_obj, Py_ssize_t n, long long row0, const char *what) {
    for (int i = 0; i < NBUF; i++)
        if (opt_get(o[i], &b[i], i < 2 ? n * 8 : 0) < 0)
            return -1;
    if (opt_get(rows_obj, rb, n * 8) < 0)
        return -1;
    if (!b[0].set || !b[1].set || !b[3].set || !b[4].set || !b[6].set || !b[7].set) {
        PyErr_Format(PyExc_ValueError, "%s: offsets, timestamps, key and value offsets and "
                                       "data are required", what);
        return -1;
    }
    a->offs = b[0].v.buf;
    a->tss = b[1].v.buf;
    a->rows = rb->set ? rb->v.buf : NULL;
    a->row0 = row0;
    a->kval = b[2].set ? b[2].v.buf : NULL;
    a->koff = b[3].v.buf;
    a->kdata = b[4].v.buf;
    a->vval = b[5].set ? b[5].v.buf : NULL;
    a->voff = b[6].v.buf;
    a->vdata = b[7].v.buf;
    a->hoff = b[8].set ? b[8].v.buf : NULL;
    a->hval = b[9].set ? b[9].v.buf : NULL;
    a->hkoff = b[10].set ? b[10].v.buf : NULL;
    a->hkdata = b[11].set ? b[11].v.buf : NULL;
    a->hvval = b[12].set ? b[12].v.buf : NULL;
    a->hvoff = b[13].set ? b[13].v.buf : NULL;
    a->hvdata = b[14].set ? b[14].v.buf : NULL;
    a->kspan = (size_t)b[4].v.len;
    a->vspan = (size_t)b[7].v.len;
    a->hkspan = a->hkdata ? (size_t)b[11].v.len : 0;
    a->hvspan = a->hvdata ? (size_t)b[14].v.len : 0;
    a->n_entries = 0;
    /* every row index within every per-row buffer */
    int64_t rmax = -1;
    if (a->rows) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (a->rows[i] < 0)
                return -2;
            if (a->rows[i] > rmax)
                rmax = a->rows[i];
        }
    } else if (n) {
        rmax = row0 + n - 1;
    }
    if (rmax >= 0) {
        if ((a->kval && b[2].v.len <= rmax) || (a->vval && b[5].v.len <= rmax) ||
            (a->hval && b[9].v.len <= rmax) || b[3].v.len < (rmax + 2) * 4 ||
            b[6].v.len < (rmax + 2) * 4 || (a->hoff && b[8].v.len < (rmax + 2) * 4))
            return -2;
    }
    if (a->hoff) {
        if (!a->hkoff || !a->hvoff || !a->hkdata || !a->hvdata)
            return -2;
        int64_t ne = b[10].v.len / 4 - 1;
        if (b[13].v.len / 4 - 1 < ne)
            ne = b[13].v.len / 4 - 1;
        if (a->hvval && b[12].v.len < ne)
            ne = b[12].v.len;
        a->n_entries = ne;
    }
    return 0;
}

static PyObject *mod_encode_arrow(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_ssize_t n;
    long long base_offset, base_ts, row0 = 0;
    PyObject *o[NBUF], *rows_obj = Py_None, *hdr_obj = Py_None;
    if (!PyArg_ParseTuple(args, "nLLOOOOOOOOOOOOOOO|LOO:encode_arrow", &n, &base_offset, &base_ts,
                          &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9],
                          &o[10], &o[11], &o[12], &o[13], &o[14], &row0, &rows_obj, &hdr_obj))
        return NULL;
    /* header = (attributes, partition_leader_epoch, last_offset_delta, max_timestamp or None,
     * producer_id, producer_epoch, base_sequence): write the whole (uncompressed) batch */
    long long hv[7] = {0};
    int has_max_override = 0;
    if (hdr_obj != Py_None) {
        PyObject *mx = Py_None;
        /* anything that does not fit: the pure path raises the precise error */
        if (!PyArg_ParseTuple(hdr_obj, "LLLOLLL:header", &hv[0], &hv[1], &hv[2], &mx, &hv[4],
                              &hv[5], &hv[6])) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (mx != Py_None) {
            hv[3] = PyLong_AsLongLong(mx);
            if (hv[3] == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            has_max_override = 1;
        }
        if (hv[0] < INT16_MIN || hv[0] > INT16_MAX || hv[1] < INT32_MIN || hv[1] > INT32_MAX ||
            hv[2] < INT32_MIN || hv[2] > INT32_MAX || hv[5] < INT16_MIN || hv[5] > INT16_MAX ||
            hv[6] < INT32_MIN || hv[6] > INT32_MAX || n > INT32_MAX)
            Py_RETURN_NONE;
    }
    optbuf b[NBUF], rb = {0};
    memset(b, 0, sizeof(b));
    PyObject *res = NULL;
    if (n < 0 || row0 < 0) {
        PyErr_SetString(PyExc_ValueError, "negative row count or first row");
        return NULL;
    }
    acols a;
    int lr = acols_load(&a, b, &rb, o, rows_obj, n, row0, "encode_arrow");
    if (lr == -1)
        goto done;
    if (lr == -2)
        goto bad_rows;
    int64_t prev = (int64_t)base_offset - 1, max_ts = 0, total = 0;
    int have_max = 0, status = 0;
    int64_t od = 0, tsd = 0, kn = 0, vn = 0, h0 = 0, h1 = 0, size = 0;
    /* pass 1: validate and size */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (a.offs[i] <= prev) {
            status = 1;
            break;
        }
        prev = a.offs[i];
        status = arow(&a, i, base_offset, base_ts, &od, &tsd, &kn, &vn, &h0, &h1, &size);
        if (status)
            break;
        total += vsize(size) + size;
        if (!have_max || a.tss[i] > max_ts) {
            max_ts = a.tss[i];
            have_max = 1;
        }
    }
    if (status == 2)
        goto bad_rows;
    if (status == 1) {
        Py_INCREF(Py_None);
        res = Py_None;
        goto done;
    }
    int64_t hsize = hdr_obj != Py_None ? 61 : 0;
    if (hsize && total > INT32_MAX - 49) {
        Py_INCREF(Py_None);
        res = Py_None;
        goto done;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(hsize + total));
    if (!data)
        goto done;
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(data) + hsize;
    /* pass 2: write (the same checks cannot fail now) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        q = wr_arow(q, &a, i, base_offset, base_ts);
    if (hsize)
        wr_batch_header((uint8_t *)PyBytes_AS_STRING(data), total, base_offset, hv[1], hv[0],
                        hv[2], base_ts, has_max_override ? hv[3] : (have_max ? max_ts : -1),
                        hv[4], hv[5], hv[6], n);
    Py_END_ALLOW_THREADS
    if (have_max)
        res = Py_BuildValue("(NL)", data, (long long)max_ts);
    else
        res = Py_BuildValue("(NO)", data, Py_None);
    goto done;
bad_rows:
    PyErr_SetString(PyExc_ValueError, "encode_arrow: column buffers and offsets do not agree");
done:
    for (int i = 0; i < NBUF; i++)
        if (b[i].set)
            PyBuffer_Release(&b[i].v);
    if (rb.set)
        PyBuffer_Release(&rb.v);
    return res;
}

/* Many batches in one call (Broker.send_arrow): rows cut into batches of at
 * most batch_limit estimated bytes (at least one record each), every batch
 * written whole (header, records, CRC) back to back into one writable
 * buffer, with each batch's row cut, byte position, max and min timestamp
 * returned as int64 arrays, so the caller builds the segment's indexes
 * vectorised and writes the log without joining.  Batch b holds records
 * [cuts[b], cuts[b+1]); its base offset is offsets[cuts[b]], its base
 * sequence base_sequence + cuts[b] (mod 2^31).  Each batch's bytes equal
 * encode_arrow of the same rows with the same header (tests check it). */

/* BufferObject's layout, dealloc and length; only writable. */
static int EncBuffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 0, flags);
}

static PyBufferProcs EncBuffer_as_buffer = {
    (getbufferproc)EncBuffer_getbuffer,
    NULL,
};

static PyTypeObject EncBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkastore.format._native.EncBuffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &EncBuffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoded record batches from encode_arrow_batches() (writable: the writer "
              "sets the batches' base offsets in place at commit).",
};

static PyObject *i64_bytes(const int64_t *v, Py_ssize_t k) {
    return PyBytes_FromStringAndSize((const char *)v, k * (Py_ssize_t)sizeof(int64_t));
}

static PyObject *mod_encode_arrow_batches(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_ssize_t n;
    long long batch_limit;
    PyObject *o[NBUF], *sizes_obj, *rows_obj = Py_None, *hdr_obj, *mx = Py_None;
    long long hv[6] = {0}; /* attributes, leader epoch, (max ts), producer id, epoch, base seq */
    if (!PyArg_ParseTuple(args, "nOLOOOOOOOOOOOOOOOOO:encode_arrow_batches", &n, &sizes_obj,
                          &batch_limit, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &rows_obj,
                          &hdr_obj))
        return NULL;
    if (!PyArg_ParseTuple(hdr_obj, "LLOLLL:header", &hv[0], &hv[1], &mx, &hv[3], &hv[4], &hv[5])) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    long long max_override = 0;
    if (mx != Py_None) {
        max_override = PyLong_AsLongLong(mx);
        if (max_override == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    if (hv[0] < INT16_MIN || hv[0] > INT16_MAX || hv[1] < INT32_MIN || hv[1] > INT32_MAX ||
        hv[4] < INT16_MIN || hv[4] > INT16_MAX || hv[5] < INT32_MIN || hv[5] > INT32_MAX ||
        n > INT32_MAX)
        Py_RETURN_NONE;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "encode_arrow_batches: no rows");
        return NULL;
    }
    optbuf b[NBUF], rb = {0}, sb = {0};
    memset(b, 0, sizeof(b));
    PyObject *res = NULL;
    int64_t *cuts = NULL, *pos = NULL, *maxs = NULL, *mins = NULL, *body = NULL;
    gbuf out = {NULL, 0, 0, 0};
    if (opt_get(sizes_obj, &sb, n * 8) < 0)
        goto done;
    if (!sb.set) {
        PyErr_SetString(PyExc_ValueError, "encode_arrow_batches: sizes are required");
        goto done;
    }
    const int64_t *sizes = sb.v.buf;
    acols a;
    int lr = acols_load(&a, b, &rb, o, rows_obj, n, 0, "encode_arrow_batches");
    if (lr == -1)
        goto done;
    if (lr == -2)
        goto bad_rows;
    cuts = malloc((size_t)(n + 1) * sizeof(int64_t));
    pos = malloc((size_t)(n + 1) * sizeof(int64_t));
    maxs = malloc((size_t)n * sizeof(int64_t));
    mins = malloc((size_t)n * sizeof(int64_t));
    body = malloc((size_t)n * sizeof(int64_t));
    if (!cuts || !pos || !maxs || !mins || !body) {
        PyErr_NoMemory();
        goto done;
    }
    /* pass 1: cut (as Broker._buffer_rows: records while their estimates fit batch_limit),
     * validate and size */
    Py_ssize_t k = 0, i = 0;
    int64_t total = 0;
    int64_t od = 0, tsd = 0, kn = 0, vn = 0, h0 = 0, h1 = 0, size = 0;
    while (i < n) {
        Py_ssize_t j = i;
        int64_t est = 0;
        while (j < n && (j == i || est + sizes[j] <= batch_limit)) {
            est += sizes[j];
            j++;
        }
        int64_t base = a.offs[i], base_ts = a.tss[i], prev = base - 1, bt = 0;
        int64_t mx_ts = a.tss[i], mn_ts = a.tss[i];
        for (Py_ssize_t r = i; r < j; r++) {
            if (a.offs[r] <= prev)
                goto fallback;
            prev = a.offs[r];
            int st = arow(&a, r, base, base_ts, &od, &tsd, &kn, &vn, &h0, &h1, &size);
            if (st == 2)
                goto bad_rows;
            if (st)
                goto fallback;
            bt += vsize(size) + size;
            if (a.tss[r] > mx_ts)
                mx_ts = a.tss[r];
            if (a.tss[r] < mn_ts)
                mn_ts = a.tss[r];
        }
        if (bt > INT32_MAX - 49 || a.offs[j - 1] - base > INT32_MAX)
            goto fallback;
        cuts[k] = i;
        pos[k] = total;
        body[k] = bt;
        maxs[k] = mx != Py_None ? max_override : mx_ts; /* the MaxTimestamp header field */
        mins[k] = mn_ts;
        total += 61 + bt;
        k++;
        i = j;
    }
    cuts[k] = n;
    pos[k] = total;
    if (gb_grow(&out, (size_t)total, 0) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* pass 2: write (the same checks cannot fail now) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t bi = 0; bi < k; bi++) {
        uint8_t *h = out.p + pos[bi];
        uint8_t *q = h + 61;
        int64_t base = a.offs[cuts[bi]], base_ts = a.tss[cuts[bi]];
        for (Py_ssize_t r = cuts[bi]; r < cuts[bi + 1]; r++)
            q = wr_arow(q, &a, r, base, base_ts);
        /* NO_SEQUENCE (-1) stays; sequences wrap at 2^31 as Kafka's do */
        wr_batch_header(h, body[bi], base, hv[1], hv[0], a.offs[cuts[bi + 1] - 1] - base, base_ts,
                        maxs[bi], hv[3], hv[4],
                        hv[5] < 0 ? hv[5] : (hv[5] + cuts[bi]) & 0x7FFFFFFF,
                        cuts[bi + 1] - cuts[bi]);
    }
    Py_END_ALLOW_THREADS
    BufferObject *eb = PyObject_New(BufferObject, &EncBufferType);
    if (!eb)
        goto done;
    eb->data = out.p;
    eb->size = (Py_ssize_t)total;
    eb->cap = out.cap;
    eb->mapped = out.mapped;
    out.p = NULL;
    out.cap = 0;
    res = Py_BuildValue("(NNNNN)", (PyObject *)eb, i64_bytes(cuts, k + 1), i64_bytes(pos, k + 1),
                        i64_bytes(maxs, k), i64_bytes(mins, k));
    goto done;
fallback:
    Py_INCREF(Py_None);
    res = Py_None;
    goto done;
bad_rows:
    PyErr_SetString(PyExc_ValueError,
                    "encode_arrow_batches: column buffers and offsets do not agree");
done:
    if (out.p)
        gb_free(&out);
    free(cuts);
    free(pos);
    free(maxs);
    free(mins);
    free(body);
    for (int bi = 0; bi < NBUF; bi++)
        if (b[bi].set)
            PyBuffer_Release(&b[bi].v);
    if (rb.set)
        PyBuffer_Release(&rb.v);
    if (sb.set)
        PyBuffer_Release(&sb.v);
    return res;
}

/* Python lists -> Arrow buffers for Broker.send_many, in one pass: exact
 * types only (bytes or None; int or None, bool excluded), else None so that
 * the caller judges the records one by one through send(). */

/* Clear bit i of the validity bitmap of n items, made (all valid) at the first null.
 * 0, or -1 with a Python error set. */
static int mark_null(PyObject **bitmap, Py_ssize_t n, Py_ssize_t i) {
    if (!*bitmap) {
        *bitmap = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (!*bitmap)
            return -1;
        memset(PyBytes_AS_STRING(*bitmap), 0xFF, (size_t)((n + 7) / 8));
    }
    ((uint8_t *)PyBytes_AS_STRING(*bitmap))[i >> 3] &= (uint8_t)~(1u << (i & 7));
    return 0;
}

static PyObject *mod_pylist_binary(PyObject *Py_UNUSED(m), PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "pylist_binary needs a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *offs = NULL, *data = NULL, *bitmap = NULL, *res = NULL;
    int64_t nulls = 0;
    /* One pass over the items (each one is a cache miss in a long list): the data
     * buffer is sized from a sample and grown by doubling; the null bitmap is made at
     * the first None. */
    Py_ssize_t sample = 0, sampled = 0;
    for (Py_ssize_t i = 0; i < n && sampled < 64; i++)
        if (PyBytes_CheckExact(items[i])) {
            sample += PyBytes_GET_SIZE(items[i]);
            sampled++;
        }
    int64_t cap = sampled ? (int64_t)(sample / sampled) * n + n / 16 + 64 : 64;
    if (cap > ((int64_t)1 << 28)) /* a guess: start at 256 MiB at most, grow if it holds */
        cap = (int64_t)1 << 28;
    offs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    data = offs ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)cap) : NULL;
    if (!data)
        goto done;
    int32_t *o32 = (int32_t *)PyBytes_AS_STRING(offs);
    uint8_t *d = (uint8_t *)PyByteArray_AS_STRING(data);
    int64_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = items[i];
        o32[i] = (int32_t)at;
        if (o == Py_None) {
            if (mark_null(&bitmap, n, i) < 0)
                goto done;
            nulls++;
            continue;
        }
        if (!PyBytes_CheckExact(o))
            goto decline;
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        if (at + len > INT32_MAX)
            goto decline;
        if (at + len > cap) {
            cap = 2 * cap > at + len ? 2 * cap : at + len;
            if (cap > INT32_MAX)
                cap = INT32_MAX;
            if (PyByteArray_Resize(data, (Py_ssize_t)cap) < 0)
                goto done;
            d = (uint8_t *)PyByteArray_AS_STRING(data);
        }
        memcpy(d + at, PyBytes_AS_STRING(o), (size_t)len);
        at += len;
    }
    o32[n] = (int32_t)at;
    if (bitmap && (n & 7)) /* bits past the end are zero, as Arrow writers leave them */
        ((uint8_t *)PyBytes_AS_STRING(bitmap))[n >> 3] &= (uint8_t)((1u << (n & 7)) - 1);
    if (PyByteArray_Resize(data, (Py_ssize_t)at) < 0)
        goto done;
    res = Py_BuildValue("(nLOOO)", n, (long long)nulls, bitmap ? bitmap : Py_None, offs, data);
    goto done;
decline:
    Py_INCREF(Py_None);
    res = Py_None;
done:
    Py_XDECREF(offs);
    Py_XDECREF(data);
    Py_XDECREF(bitmap);
    Py_DECREF(seq);
    return res;
}

static PyObject *mod_pylist_int64(PyObject *Py_UNUSED(m), PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "pylist_int64 needs a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *vals = PyBytes_FromStringAndSize(NULL, n * 8), *bitmap = NULL, *res = NULL;
    if (!vals)
        goto done;
    int64_t *v = (int64_t *)PyBytes_AS_STRING(vals);
    int64_t nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = items[i];
        if (o == Py_None) {
            v[i] = 0;
            if (mark_null(&bitmap, n, i) < 0)
                goto done;
            nulls++;
            continue;
        }
        if (!PyLong_CheckExact(o))
            goto decline;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            goto decline;
        }
        v[i] = x;
    }
    if (bitmap && (n & 7)) /* bits past the end are zero, as Arrow writers leave them */
        ((uint8_t *)PyBytes_AS_STRING(bitmap))[n >> 3] &= (uint8_t)((1u << (n & 7)) - 1);
    res = Py_BuildValue("(nLOO)", n, (long long)nulls, bitmap ? bitmap : Py_None, vals);
    goto done;
decline:
    Py_INCREF(Py_None);
    res = Py_None;
done:
    Py_XDECREF(vals);
    Py_XDECREF(bitmap);
    Py_DECREF(seq);
    return res;
}

/* Kafka's murmur2 (Utils.murmur2) of each non-null key of an Arrow binary
 * column: int32[n] (0 for a null key). */
static int32_t murmur2_c(const uint8_t *d, int32_t len) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    int32_t n4 = len / 4;
    for (int32_t i = 0; i < n4; i++) {
        const uint8_t *p = d + 4 * i;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *t = d + 4 * n4;
    switch (len & 3) {
    case 3:
        h ^= (uint32_t)t[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)t[1] << 8;
        /* fall through */
    case 1:
        h ^= t[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *mod_murmur2_arrow(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_ssize_t n;
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "nOOO:murmur2_arrow", &n, &o[0], &o[1], &o[2]))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative row count");
        return NULL;
    }
    optbuf b[3];
    memset(b, 0, sizeof(b));
    PyObject *res = NULL;
    Py_ssize_t need[3] = {n, (n + 1) * 4, 0};
    for (int i = 0; i < 3; i++)
        if (opt_get(o[i], &b[i], need[i]) < 0)
            goto done;
    if (!b[1].set || !b[2].set) {
        PyErr_SetString(PyExc_ValueError, "murmur2_arrow: offsets and data are required");
        goto done;
    }
    res = PyBytes_FromStringAndSize(NULL, n * 4);
    if (!res)
        goto done;
    int32_t *h = (int32_t *)PyBytes_AS_STRING(res);
    const uint8_t *val = b[0].set ? b[0].v.buf : NULL, *data = b[2].v.buf;
    const int32_t *off = b[1].v.buf;
    size_t span = (size_t)b[2].v.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (val && !val[i]) {
            h[i] = 0;
            continue;
        }
        int32_t a = off[i], z = off[i + 1];
        if (a < 0 || z < a || (size_t)z > span) {
            Py_CLEAR(res);
            PyErr_SetString(PyExc_ValueError, "murmur2_arrow: offsets run outside the data");
            goto done;
        }
        h[i] = murmur2_c(data + a, z - a);
    }
done:
    for (int i = 0; i < 3; i++)
        if (b[i].set)
            PyBuffer_Release(&b[i].v);
    return res;
}

/* ------------------------------------------------------------------ */
/* Module functions                                                    */
/* ------------------------------------------------------------------ */

static PyObject *crc_common(PyObject *args, int sw) {
    Py_buffer view;
    unsigned long long value = 0;
    if (!PyArg_ParseTuple(args, "y*|K", &view, &value))
        return NULL;
    uint32_t crc;
    const uint8_t *p = (const uint8_t *)view.buf;
    size_t n = (size_t)view.len;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = sw ? crc32c_sw((uint32_t)value, p, n) : ks_crc32c((uint32_t)value, p, n);
        Py_END_ALLOW_THREADS
    } else {
        crc = sw ? crc32c_sw((uint32_t)value, p, n) : ks_crc32c((uint32_t)value, p, n);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *mod_crc32c(PyObject *Py_UNUSED(m), PyObject *args) { return crc_common(args, 0); }
static PyObject *mod_crc32c_sw(PyObject *Py_UNUSED(m), PyObject *args) { return crc_common(args, 1); }

/* Doubling memcpy: fill n*size bytes with copies of the first `size`. */
static void fill_pattern(uint8_t *dst, size_t total, size_t size) {
    size_t done = size;
    while (done < total) {
        size_t k = done < total - done ? done : total - done;
        memcpy(dst + done, dst, k);
        done += k;
    }
}

static PyObject *mod_repeat_binary(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer view;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*n:repeat_binary", &view, &n))
        return NULL;
    size_t L = (size_t)view.len;
    if (n < 0 || (L && (size_t)n > (size_t)INT32_MAX / L)) {
        PyBuffer_Release(&view);
        kerr e;
        KERR(&e, ERR_TOO_LARGE, 0, 0, 0,
             "repeated value exceeds 2 GiB in one Arrow column; decode a smaller byte range");
        return raise_kerr(&e);
    }
    PyObject *offs = new_buffer(((size_t)n + 1) * 4);
    PyObject *data = offs ? new_buffer(L * (size_t)n) : NULL;
    if (!data) {
        Py_XDECREF(offs);
        PyBuffer_Release(&view);
        return NULL;
    }
    int32_t *o = (int32_t *)((BufferObject *)offs)->data;
    for (Py_ssize_t i = 0; i <= n; i++)
        o[i] = (int32_t)((size_t)i * L);
    if (n > 0 && L > 0) {
        uint8_t *dst = ((BufferObject *)data)->data;
        memcpy(dst, view.buf, L);
        fill_pattern(dst, L * (size_t)n, L);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NN)", offs, data);
}

static PyObject *mod_fill_int32(PyObject *Py_UNUSED(m), PyObject *args) {
    int v;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "in:fill_int32", &v, &n))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative length");
        return NULL;
    }
    PyObject *b = new_buffer((size_t)n * 4);
    if (!b)
        return NULL;
    int32_t *o = (int32_t *)((BufferObject *)b)->data;
    for (Py_ssize_t i = 0; i < n; i++)
        o[i] = v;
    return b;
}

static PyObject *mod_set_alloc_mode(PyObject *Py_UNUSED(m), PyObject *args) {
    int mode;
    if (!PyArg_ParseTuple(args, "i", &mode))
        return NULL;
    if (mode < 0 || mode > 4) {
        PyErr_SetString(PyExc_ValueError, "alloc mode must be in 0..4");
        return NULL;
    }
    int old = alloc_mode;
    alloc_mode = mode;
    return PyLong_FromLong(old);
}

static PyObject *mod_alloc_stats(PyObject *Py_UNUSED(m), PyObject *args) {
    long long small = -1, huge = -1;
    if (!PyArg_ParseTuple(args, "|LL:_alloc_stats", &small, &huge))
        return NULL;
#if defined(KS_MMAP) && defined(MADV_POPULATE_WRITE)
    PyObject *r = Py_BuildValue("(LLI)", (long long)pop_cost[0], (long long)pop_cost[1],
                                pop_chunks);
    if (small >= 0) /* tests: set the measurements */
        __atomic_store_n(&pop_cost[0], (int64_t)small, __ATOMIC_RELAXED);
    if (huge >= 0)
        __atomic_store_n(&pop_cost[1], (int64_t)huge, __ATOMIC_RELAXED);
    return r;
#else
    return Py_BuildValue("(LLI)", 0LL, 0LL, 0u);
#endif
}

static PyObject *mod_set_buffer_cache(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "n:set_buffer_cache", &limit))
        return NULL;
    if (limit < 0) {
        PyErr_SetString(PyExc_ValueError, "limit must be >= 0");
        return NULL;
    }
#ifdef KS_MMAP
    size_t old = cache_limit;
    cache_clear();
    cache_limit = (size_t)limit;
    return PyLong_FromSize_t(old);
#else
    return PyLong_FromLong(0);
#endif
}

/* ------------------------------------------------------------------ */
/* produce input: JSON lines of the common shape -> Arrow buffers      */
/* ------------------------------------------------------------------ */
/*
 * parse_jsonl(buf, max_ts) -> None | (rows, columns)
 *
 * A fast path for kafkastore.jsonl_bulk, which stays the judge: this only
 * takes lines it reads exactly as kafkastore.jsonl.parse_produce_line does,
 * and answers None (the caller falls back) for anything else.  Taken: every
 * line one object of the fields key and value (string or null), timestamp
 * (integer 0..max_ts or null), partition (integer 0..2**31-1 or null),
 * headers (null or []), topic (string or null) and offset (integer or null),
 * each at most once, value present; strings with the JSON escapes (a
 * surrogate only in a high-low pair) and valid UTF-8; whitespace space, tab
 * or CR.  Not taken:
 * blank lines, a BOM, base64 objects, other JSON values, other numbers.
 */

typedef struct {
    BufferObject *valid, *offsets, *data;   /* binary column */
    int64_t nulls;
} jcol_bin;

typedef struct {
    BufferObject *valid, *values;           /* int64 column */
    int64_t nulls;
} jcol_int;

enum { JF_KEY = 1, JF_VALUE = 2, JF_TS = 4, JF_PART = 8, JF_HEADERS = 16, JF_TOPIC = 32,
       JF_OFFSET = 64 };

static inline const uint8_t *j_ws(const uint8_t *p, const uint8_t *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static inline int j_hex(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The string whose opening quote is at p[-1]: its bytes appended at *out (if out), the
 * position after the closing quote returned; NULL if the fast path does not take it. */
static const uint8_t *j_string(const uint8_t *p, const uint8_t *e, uint8_t **out) {
    uint8_t *q = out ? *out : NULL;
    for (;;) {
        const uint8_t *s = p;
        while (p < e && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80)
            p++;
        if (q) {
            memcpy(q, s, (size_t)(p - s));
            q += p - s;
        }
        if (p >= e)
            return NULL;
        uint8_t c = *p;
        if (c == '"') {
            if (out)
                *out = q;
            return p + 1;
        }
        if (c < 0x20)
            return NULL;                     /* a raw control character: not JSON */
        if (c >= 0x80) {                     /* one UTF-8 sequence */
            size_t k = utf8_seq(p, (size_t)(e - p));
            if (!k)
                return NULL;
            if (q) {
                memcpy(q, p, k);
                q += k;
            }
            p += k;
            continue;
        }
        /* an escape */
        if (e - p < 2)
            return NULL;
        uint8_t x = p[1], b;
        switch (x) {
        case '"': b = '"'; break;
        case '\\': b = '\\'; break;
        case '/': b = '/'; break;
        case 'b': b = '\b'; break;
        case 'f': b = '\f'; break;
        case 'n': b = '\n'; break;
        case 'r': b = '\r'; break;
        case 't': b = '\t'; break;
        case 'u': {
            if (e - p < 6)
                return NULL;
            int h0 = j_hex(p[2]), h1 = j_hex(p[3]), h2 = j_hex(p[4]), h3 = j_hex(p[5]);
            if ((h0 | h1 | h2 | h3) < 0)
                return NULL;
            uint32_t cp = (uint32_t)(h0 << 12 | h1 << 8 | h2 << 4 | h3);
            if (cp >= 0xd800 && cp <= 0xdfff) {
                /* a high surrogate then a low one: one code point; a lone one is not text */
                if (cp > 0xdbff || e - p < 12 || p[6] != '\\' || p[7] != 'u')
                    return NULL;
                int l0 = j_hex(p[8]), l1 = j_hex(p[9]), l2 = j_hex(p[10]), l3 = j_hex(p[11]);
                if ((l0 | l1 | l2 | l3) < 0)
                    return NULL;
                uint32_t lo = (uint32_t)(l0 << 12 | l1 << 8 | l2 << 4 | l3);
                if (lo < 0xdc00 || lo > 0xdfff)
                    return NULL;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                if (q) {
                    *q++ = (uint8_t)(0xf0 | cp >> 18);
                    *q++ = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
                    *q++ = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
                    *q++ = (uint8_t)(0x80 | (cp & 0x3f));
                }
                p += 12;
                continue;
            }
            if (q) {
                if (cp < 0x80)
                    *q++ = (uint8_t)cp;
                else if (cp < 0x800) {
                    *q++ = (uint8_t)(0xc0 | cp >> 6);
                    *q++ = (uint8_t)(0x80 | (cp & 0x3f));
                } else {
                    *q++ = (uint8_t)(0xe0 | cp >> 12);
                    *q++ = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
                    *q++ = (uint8_t)(0x80 | (cp & 0x3f));
                }
            }
            p += 6;
            continue;
        }
        default:
            return NULL;
        }
        if (q)
            *q++ = b;
        p += 2;
    }
}

/* A JSON integer in [0, max] (no sign, no fraction, no exponent) at p; NULL if not. */
static const uint8_t *j_uint(const uint8_t *p, const uint8_t *e, int64_t max, int64_t *v) {
    if (p >= e || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0' && p + 1 < e && p[1] >= '0' && p[1] <= '9')
        return NULL;                         /* a leading zero: not JSON */
    int64_t x = 0;
    while (p < e && *p >= '0' && *p <= '9') {
        int d = *p++ - '0';
        if (x > (max - d) / 10)
            return NULL;
        x = x * 10 + d;
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E'))
        return NULL;
    *v = x;
    return p;
}

static inline int j_null(const uint8_t **pp, const uint8_t *e) {
    const uint8_t *p = *pp;
    if (e - p >= 4 && memcmp(p, "null", 4) == 0) {
        *pp = p + 4;
        return 1;
    }
    return 0;
}

static inline void j_bit(BufferObject *bm, int64_t i) { bm->data[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* Parse buf into the columns; rows on success, -1 if the fast path does not take it. */
static int64_t j_parse(const uint8_t *p, const uint8_t *e, int64_t max_ts,
                       jcol_bin *key, jcol_bin *val, jcol_int *ts, jcol_int *part) {
    int64_t n = 0;
    uint8_t *kq = key->data->data, *vq = val->data->data;
    int32_t *ko = (int32_t *)key->offsets->data, *vo = (int32_t *)val->offsets->data;
    int64_t *tv = (int64_t *)ts->values->data, *pv = (int64_t *)part->values->data;
    ko[0] = vo[0] = 0;
    while (p < e) {
        p = j_ws(p, e);
        if (p >= e || *p != '{')
            return -1;                       /* blank line, BOM, not an object */
        p = j_ws(p + 1, e);
        unsigned seen = 0;
        int64_t t = 0, part_v = 0;
        int t_set = 0, part_set = 0, k_set = 0, v_set = 0;
        uint8_t *kq0 = kq, *vq0 = vq;
        if (p < e && *p == '}')
            return -1;                       /* no value */
        for (;;) {
            if (p >= e || *p != '"')
                return -1;
            const uint8_t *name = p + 1;
            while (p + 1 < e && p[1] != '"' && p[1] != '\\' && p[1] >= 0x20)
                p++;
            if (p + 1 >= e || p[1] != '"')
                return -1;
            size_t len = (size_t)(p + 1 - name);
            p = j_ws(p + 2, e);
            if (p >= e || *p != ':')
                return -1;
            p = j_ws(p + 1, e);
            unsigned f;
#define J_IS(s) (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)
            if (J_IS("key")) f = JF_KEY;
            else if (J_IS("value")) f = JF_VALUE;
            else if (J_IS("timestamp")) f = JF_TS;
            else if (J_IS("partition")) f = JF_PART;
            else if (J_IS("headers")) f = JF_HEADERS;
            else if (J_IS("topic")) f = JF_TOPIC;
            else if (J_IS("offset")) f = JF_OFFSET;
            else return -1;
#undef J_IS
            if (seen & f)
                return -1;                   /* duplicate field */
            seen |= f;
            if (j_null(&p, e)) {
                /* null: the field's default */
            } else if (p >= e) {
                return -1;
            } else if (f == JF_KEY || f == JF_VALUE || f == JF_TOPIC) {
                if (*p != '"')
                    return -1;
                uint8_t **dst = f == JF_KEY ? &kq : f == JF_VALUE ? &vq : NULL;
                if (!(p = j_string(p + 1, e, dst)))
                    return -1;
                if (f == JF_KEY) k_set = 1; else if (f == JF_VALUE) v_set = 1;
            } else if (f == JF_TS) {
                if (!(p = j_uint(p, e, max_ts, &t)))
                    return -1;
                t_set = 1;
            } else if (f == JF_PART) {
                if (!(p = j_uint(p, e, INT32_MAX, &part_v)))
                    return -1;
                part_set = 1;
            } else if (f == JF_OFFSET) {
                int64_t ignored;
                if (!(p = j_uint(p, e, INT64_MAX, &ignored)))
                    return -1;
            } else {                         /* headers: only [] */
                if (*p != '[')
                    return -1;
                p = j_ws(p + 1, e);
                if (p >= e || *p != ']')
                    return -1;
                p++;
            }
            p = j_ws(p, e);
            if (p < e && *p == ',') {
                p = j_ws(p + 1, e);
                continue;
            }
            if (p < e && *p == '}')
                break;
            return -1;
        }
        if (!(seen & JF_VALUE))
            return -1;
        p = j_ws(p + 1, e);
        if (p < e) {
            if (*p != '\n')
                return -1;                   /* something after the object */
            p++;
        }
        if (kq - key->data->data > INT32_MAX || vq - val->data->data > INT32_MAX)
            return -1;
        if (k_set) j_bit(key->valid, n); else { key->nulls++; kq = kq0; }
        if (v_set) j_bit(val->valid, n); else { val->nulls++; vq = vq0; }
        if (t_set) j_bit(ts->valid, n); else ts->nulls++;
        if (part_set) j_bit(part->valid, n); else part->nulls++;
        tv[n] = t;
        pv[n] = part_v;
        n++;
        ko[n] = (int32_t)(kq - key->data->data);
        vo[n] = (int32_t)(vq - val->data->data);
    }
    key->data->size = ko[n];
    val->data->size = vo[n];
    return n;
}

static BufferObject *j_buffer(size_t size, int zero) {
    BufferObject *b = (BufferObject *)new_buffer(size);
    if (b && zero)
        memset(b->data, 0, size);
    return b;
}

static PyObject *j_bin_tuple(jcol_bin *c, int64_t n) {
    c->offsets->size = (n + 1) * 4;
    c->valid->size = (n + 7) / 8;
    return Py_BuildValue("(LOOO)", (long long)c->nulls,
                         c->nulls ? (PyObject *)c->valid : Py_None, c->offsets, c->data);
}

static PyObject *j_int_tuple(jcol_int *c, int64_t n) {
    c->values->size = n * 8;
    c->valid->size = (n + 7) / 8;
    return Py_BuildValue("(LOO)", (long long)c->nulls,
                         c->nulls ? (PyObject *)c->valid : Py_None, c->values);
}

static PyObject *mod_parse_jsonl(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *obj;
    long long max_ts;
    if (!PyArg_ParseTuple(args, "OL:parse_jsonl", &obj, &max_ts))
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = v.buf, *e = p + v.len;
    /* Rows are at most the lines: newlines + 1.  Unescaping never grows a string. */
    size_t rows = 1;
    for (const uint8_t *s = p; (s = memchr(s, '\n', (size_t)(e - s))) != NULL; s++)
        rows++;
    size_t data = (size_t)v.len + 1, bits = (rows + 7) / 8;
    jcol_bin key = {j_buffer(bits, 1), j_buffer((rows + 1) * 4, 0), j_buffer(data, 0), 0};
    jcol_bin val = {j_buffer(bits, 1), j_buffer((rows + 1) * 4, 0), j_buffer(data, 0), 0};
    jcol_int ts = {j_buffer(bits, 1), j_buffer(rows * 8, 0), 0};
    jcol_int part = {j_buffer(bits, 1), j_buffer(rows * 8, 0), 0};
    PyObject *res = NULL;
    if (key.valid && key.offsets && key.data && val.valid && val.offsets && val.data
        && ts.valid && ts.values && part.valid && part.values) {
        int64_t n;
        Py_BEGIN_ALLOW_THREADS
        n = j_parse(p, e, (int64_t)max_ts, &key, &val, &ts, &part);
        Py_END_ALLOW_THREADS
        if (n < 0) {
            res = Py_None;
            Py_INCREF(res);
        } else {
            PyObject *k = j_bin_tuple(&key, n), *vl = j_bin_tuple(&val, n);
            PyObject *t = j_int_tuple(&ts, n), *pt = j_int_tuple(&part, n);
            if (k && vl && t && pt)
                res = Py_BuildValue("(LOOOO)", (long long)n, k, vl, t, pt);
            Py_XDECREF(k);
            Py_XDECREF(vl);
            Py_XDECREF(t);
            Py_XDECREF(pt);
        }
    }
    Py_XDECREF(key.valid); Py_XDECREF(key.offsets); Py_XDECREF(key.data);
    Py_XDECREF(val.valid); Py_XDECREF(val.offsets); Py_XDECREF(val.data);
    Py_XDECREF(ts.valid); Py_XDECREF(ts.values);
    Py_XDECREF(part.valid); Py_XDECREF(part.values);
    PyBuffer_Release(&v);
    return res;
}

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
    {"parse_jsonl", mod_parse_jsonl, METH_VARARGS,
     "parse_jsonl(buf, max_ts) -> (rows, key, value, timestamp, partition) | None: produce "
     "input lines of the common shape as Arrow buffers; key and value (nulls, validity or "
     "None, int32 offsets, data), timestamp and partition (nulls, validity or None, int64 "
     "values); None: a line the fast path does not take (see kafkastore.jsonl_bulk)"},
    {"murmur2_arrow", mod_murmur2_arrow, METH_VARARGS,
     "murmur2_arrow(n, valid, offsets, data) -> bytes of int32[n]: Kafka's murmur2 of each key"},
    {"set_buffer_cache", mod_set_buffer_cache, METH_VARARGS,
     "set_buffer_cache(limit_bytes) -> old limit: bound the memory kept for reuse between "
     "decodes (touched bytes; 0 disables and frees the cache)"},
    {"_alloc_stats", mod_alloc_stats, METH_VARARGS,
     "_alloc_stats(small=-1, huge=-1) -> (ns per MiB populated as 4 KiB pages, as huge "
     "pages, chunks): alloc mode 4's measurements (0: none yet); sets them when >= 0 (tests)"},
    {"_set_alloc_mode", mod_set_alloc_mode, METH_VARARGS,
     "_set_alloc_mode(mode) -> old: 0 plain, 1 huge pages, 2 populate, "
     "3 huge pages + populate, 4 populate, huge pages where measured cheaper (default)"},
    {"repeat_binary", mod_repeat_binary, METH_VARARGS,
     "repeat_binary(value, n) -> (int32 offsets Buffer, data Buffer) of n copies"},
    {"fill_int32", mod_fill_int32, METH_VARARGS, "fill_int32(v, n) -> Buffer of n int32 v"},
    {"crc32c", mod_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int (CRC-32C)"},
    {"crc32c_sw", mod_crc32c_sw, METH_VARARGS,
     "crc32c_sw(data, value=0) -> int (table implementation, for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafkastore.format._native",
    .m_doc = "C kernel of kafkastore.format.arrow_decode: Kafka v2 record batches into Arrow buffers.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
#ifdef KS_MMAP
    if (!cache_lock) {
        if (!(cache_lock = PyThread_allocate_lock()))
            return PyErr_NoMemory();
        pthread_atfork(NULL, NULL, cache_after_fork_child);
    }
#endif
    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&DecoderType) < 0 ||
        PyType_Ready(&EncBufferType) < 0)
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
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
