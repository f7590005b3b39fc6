/* kafkastore.format._native: CRC-32C (see kernel.h for how the sources divide the work). */
#include "kernel.h"

/* ------------------------------------------------------------------ */
/* CRC-32C                                                             */
/* ------------------------------------------------------------------ */

#define CRC32C_POLY 0x82F63B78u
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t crc_table[8][256];
static uint32_t crc_zeros_long[4][256];
static uint32_t crc_zeros_short[4][256];
int have_sse42 = 0;

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

void crc_init(void) {
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

uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
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

/* Three independent streams of BLOCK bytes hide the 3-cycle latency of crc32; the
 * partial CRCs are combined with ZEROS, the "append BLOCK zero bytes" operator.
 * Runs on crc32c_hw's c0, p and n while 3 * BLOCK bytes are left. */
#define CRC3_STREAMS(BLOCK, ZEROS)                                                 \
    while (n >= 3 * (BLOCK)) {                                                     \
        uint64_t c1 = 0, c2 = 0;                                                   \
        const uint8_t *end = p + (BLOCK);                                          \
        do {                                                                       \
            c0 = _mm_crc32_u64(c0, ld64(p));                                       \
            c1 = _mm_crc32_u64(c1, ld64(p + (BLOCK)));                             \
            c2 = _mm_crc32_u64(c2, ld64(p + 2 * (BLOCK)));                         \
            p += 8;                                                                \
        } while (p < end);                                                         \
        c0 = crc_shift(ZEROS, (uint32_t)c0) ^ (uint32_t)c1;                        \
        c0 = crc_shift(ZEROS, (uint32_t)c0) ^ (uint32_t)c2;                        \
        p += 2 * (BLOCK);                                                          \
        n -= 3 * (BLOCK);                                                          \
    }

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    CRC3_STREAMS(CRC_LONG, crc_zeros_long);
    CRC3_STREAMS(CRC_SHORT, crc_zeros_short);
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

uint32_t ks_crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef KS_X86
    if (have_sse42)
        return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

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

PyObject *mod_crc32c(PyObject *Py_UNUSED(m), PyObject *args) { return crc_common(args, 0); }
PyObject *mod_crc32c_sw(PyObject *Py_UNUSED(m), PyObject *args) { return crc_common(args, 1); }
