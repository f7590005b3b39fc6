/* kafkastore.format._native: record batches into Arrow column buffers (see kernel.h for how the sources divide the work). */
#include "kernel.h"

#if defined(KS_MMAP) && !defined(KS_NO_DLOPEN)
#include <dlfcn.h>
#define KS_ZSTD_DLOPEN 1
#endif

PyObject *DecodeError;

PyObject *raise_kerr(const kerr *e) {
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
/* Batch header                                                        */
/* ------------------------------------------------------------------ */

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (HEADER_SIZE - LOG_OVERHEAD)
#define MIN_RECORD_SIZE 7 /* length varint + 6 one-byte fields */

#define ATTR_CODEC_MASK 0x07
#define CODEC_ZSTD 4
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
    int64_t comp_left;        /* compressed batches with rows in that region not decoded yet */
    Py_buffer lent;  /* the caller's writable input (lend()): vdata may live in it */
    int has_lent;
    int inline_zstd;  /* zstd batches decompressed in the walk (inline_zstd()) */
    size_t zstd_max;  /* their bound on decompressed bytes */
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
    d->comp_left = 0;
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

/* The fast path's varint (dec_records): one or two bytes at *pq (*pq < re), zig-zag
 * decoded as rd_varint would; -1 for anything else (longer, or its second byte past
 * re), which the full path then reads (and names, if it is damage). */
static inline int rd_varint_short(const uint8_t **pq, const uint8_t *re, int32_t *out) {
    const uint8_t *q = *pq;
    uint32_t r = q[0];
    if (KS_LIKELY(!(r & 0x80))) {
        *pq = q + 1;
    } else {
        if (KS_UNLIKELY(q + 1 >= re || (q[1] & 0x80)))
            return -1;
        r = (r & 0x7f) | ((uint32_t)q[1] << 7);
        *pq = q + 2;
    }
    *out = (int32_t)((r >> 1) ^ (0u - (r & 1)));
    return 0;
}

/* Copies n bytes from src to dst (not overlapping) in 32-byte steps, which may
 * read up to 31 bytes past src + n and write as far past dst + n: the caller
 * checks both stay within their buffers (else memcpy).  A key or value is
 * short, and a call into libc's memcpy with its size dispatch cost about as
 * much as the copy itself (16-byte steps were slower than libc; 32 faster). */
static inline void copy_over(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t k = 0; k < n; k += 32) {
        memcpy(dst + k, src + k, 16);
        memcpy(dst + k + 16, src + k + 16, 16);
    }
}
#define COPY_SLACK 32
#define COPY_OVER_MAX 256

/* How the fast path copies a key or value: by copy_over when the field is short and
 * both its source (before the batch's end `src_end`) and the column (before `dst_end`)
 * have the slack for its over-reads and over-writes, else by memcpy. */
static inline void copy_short(uint8_t *dst, const uint8_t *src, size_t n,
                              const uint8_t *src_end, const uint8_t *dst_end) {
    if (n <= COPY_OVER_MAX && src + n + COPY_SLACK <= src_end && dst + n + COPY_SLACK <= dst_end)
        copy_over(dst, src, n);
    else
        memcpy(dst, src, n);
}

/* How the full path copies one: memmove when the source may overlap the column (values
 * written in place, behind the read position), else memcpy. */
static inline void copy_field(uint8_t *dst, const uint8_t *src, size_t n, int overlap) {
    if (overlap)
        memmove(dst, src, n);
    else
        memcpy(dst, src, n);
}

#define RERR(...) do { KERR(err, ERR_CORRUPT, h->base_offset, 1, bpos, __VA_ARGS__); goto fail; } while (0)

/* Appends row `rows`'s nullable field (LEN bytes at SRC, -1: null) to the column's
 * DATA at TOT with its VALID bit, or counts it in NULLS.  COPY(dst, src, n, ...) moves
 * the bytes, given the rest of the arguments: copy_short (the fast path) or copy_field. */
#define PUT_NULLABLE(LEN, SRC, DATA, TOT, VALID, NULLS, COPY, ...)                         \
    do {                                                                                   \
        if ((LEN) >= 0) {                                                                  \
            COPY((DATA) + (TOT), (SRC), (size_t)(LEN), __VA_ARGS__);                       \
            (TOT) += (size_t)(LEN);                                                        \
            (VALID)[rows >> 3] |= (uint8_t)(1u << (rows & 7));                             \
        } else {                                                                           \
            (NULLS)++;                                                                     \
        }                                                                                  \
    } while (0)

/* A nullable length-prefixed field of the record (key, value, header value): its
 * varint length LEN (-1: null), PTR set to its bytes, which must end within the
 * record [q, re). WHERE (a format with its arguments) names the record in errors. */
#define RD_NULLABLE(LEN, PTR, WHAT, WHERE, ...)                                            \
    do {                                                                                   \
        if ((rc = rd_varint(&q, re, &(LEN))) < 0)                                          \
            RERR(WHERE ": %s " WHAT " length", __VA_ARGS__, rc == -1 ? "truncated" : "invalid"); \
        (PTR) = q;                                                                         \
        if (KS_UNLIKELY((LEN) < -1))                                                       \
            RERR(WHERE ": invalid " WHAT " length %d", __VA_ARGS__, (int)(LEN));           \
        if ((LEN) >= 0) {                                                                  \
            if (KS_UNLIKELY((size_t)(LEN) > (size_t)(re - q)))                             \
                RERR(WHERE ": " WHAT " length %d past the record end", __VA_ARGS__,        \
                     (int)(LEN));                                                          \
            q += (LEN);                                                                    \
        }                                                                                  \
    } while (0)

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
    const uint8_t *kend = o_kdata + d->kdata.cap, *vend = o_vdata + d->vdata.cap;
    int rc;
    int32_t i = 0;
    for (; i < count; i++) {
        /*
         * The fast path: a record whose varints are one or two bytes, with no
         * headers, in [start, end), every check of the full path below made,
         * and nothing written until the record is whole.  Anything else (and
         * any damage) leaves it to the full path below, which reads the same
         * record again, so both give the same rows and the same errors.
         */
        while (!inplace && i < count) {
            const uint8_t *r = q, *rre;
            int32_t frlen, ftsd, foffd, fklen, fvlen, fhc;
            if (KS_UNLIKELY(r >= e) || rd_varint_short(&r, e, &frlen) < 0 || frlen <= 0 ||
                (size_t)frlen > (size_t)(e - r))
                break;
            rre = r + frlen;
            r++; /* attributes (unused) */
            if (KS_UNLIKELY(r >= rre) || rd_varint_short(&r, rre, &ftsd) < 0 ||
                KS_UNLIKELY(r >= rre) || rd_varint_short(&r, rre, &foffd) < 0 ||
                foffd <= prev_delta || foffd > last_delta)
                break;
            const int64_t foffset = base + foffd;
            if (KS_UNLIKELY(foffset < start || foffset >= end))
                break;
            if (KS_UNLIKELY(r >= rre) || rd_varint_short(&r, rre, &fklen) < 0 || fklen < -1 ||
                (fklen > 0 && (size_t)fklen > (size_t)(rre - r)))
                break;
            const uint8_t *fkp = r;
            r += fklen > 0 ? fklen : 0;
            if (KS_UNLIKELY(r >= rre) || rd_varint_short(&r, rre, &fvlen) < 0 || fvlen < -1 ||
                (fvlen > 0 && (size_t)fvlen > (size_t)(rre - r)))
                break;
            const uint8_t *fvp = r;
            r += fvlen > 0 ? fvlen : 0;
            if (KS_UNLIKELY(r >= rre) || rd_varint_short(&r, rre, &fhc) < 0 || fhc != 0 ||
                r != rre)
                break;
            int64_t fts = h->max_timestamp;
            if (!log_append && __builtin_add_overflow(base_ts, (int64_t)ftsd, &fts))
                break;
            if (KS_UNLIKELY(fts > TS_MS_LIMIT || fts < -TS_MS_LIMIT || rows >= rows_cap))
                break;
            /* The record is whole: emit its row. */
            o_off[rows] = foffset;
            o_ts[rows] = fts * 1000;
            if (tstype) /* zero-filled (dec_reserve_rows) */
                o_tst[rows] = tstype;
            PUT_NULLABLE(fklen, fkp, o_kdata, klen_tot, o_kvalid, knulls, copy_short, e, kend);
            o_koff[rows + 1] = (int32_t)klen_tot;
            PUT_NULLABLE(fvlen, fvp, o_vdata, vlen_tot, o_vvalid, vnulls, copy_short, e, vend);
            o_voff[rows + 1] = (int32_t)vlen_tot;
            hnulls++;
            if (d->nhdr) /* zero-filled, and nhdr only grows (dec_reserve_rows) */
                o_hoff[rows + 1] = (int32_t)d->nhdr;
            rows++;
            prev_delta = foffd;
            q = rre;
            i++;
        }
        if (i >= count)
            break;
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
        const uint8_t *kp, *vp;
        RD_NULLABLE(klen, kp, "key", "record %d", (int)i);
        RD_NULLABLE(vlen, vp, "value", "record %d", (int)i);
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
            const uint8_t *hv;
            RD_NULLABLE(hvl, hv, "value", "record %d header %d", (int)i, (int)j);
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
        PUT_NULLABLE(klen, kp, o_kdata, klen_tot, o_kvalid, knulls, copy_field, 0);
        o_koff[rows + 1] = (int32_t)klen_tot;
        /* in place: behind the read position, possibly overlapping */
        PUT_NULLABLE(vlen, vp, o_vdata, vlen_tot, o_vvalid, vnulls, copy_field, inplace);
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

/* ------------------------------------------------------------------ */
/* zstd in the walk                                                    */
/* ------------------------------------------------------------------ */

/*
 * zstd batches decompressed inside the walk (Decoder.inline_zstd).
 *
 * Without it every compressed batch goes back to Python: feed() returns, Python
 * decompresses (python-zstandard's streaming decompressobj, which decodes through
 * its window buffer and copies out), allocates a bytes object per batch and calls
 * feed_records().  For 500-record batches that is 2,000 round trips per 1M records.
 * Here the system's libzstd is opened at run time (dlopen of libzstd.so.1: no
 * header and no link-time dependency, so building still needs only gcc) and each
 * batch's payload is decompressed in one call (ZSTD_decompressDCtx: concatenated
 * and skippable frames, no content size needed) into a scratch buffer of the
 * thread, reused from batch to batch (it stays in cache), then walked at once.
 *
 * Anything but a clean success (no libzstd, an error, output past the bound) is
 * not decided here: the batch goes back to Python as before, whose decompression
 * raises the precise error.  What is refused stays what kafkastore.format.compression
 * refuses, with one difference on crafted input: a frame that declares a window over
 * 128 MiB (no Kafka client writes one) is refused by the streaming decompression and
 * decoded here, its output still bounded by max_size.
 */
typedef struct ZSTD_DCtx_s ZSTD_DCtx;

/* The few libzstd functions used; their ABI has been stable since 1.0. */
static ZSTD_DCtx *(*z_create)(void);
static size_t (*z_free)(ZSTD_DCtx *);
static size_t (*z_decompress)(ZSTD_DCtx *, void *, size_t, const void *, size_t);
static unsigned (*z_is_error)(size_t);
static int (*z_error_code)(size_t);
static unsigned long long (*z_content_size)(const void *, size_t);

#define ZSTD_ERROR_DST_TOO_SMALL 70            /* ZSTD_error_dstSize_tooSmall */
#define ZSTD_CONTENTSIZE_UNKNOWN (0ULL - 1)
#define ZSTD_CONTENTSIZE_ERROR (0ULL - 2)
#define SCRATCH_MIN ((size_t)256 << 10)
#define SCRATCH_KEEP ((size_t)8 << 20)         /* a thread keeps at most this much */

int have_zstd = 0;
int inline_zstd_on = 1; /* _set_inline_zstd (tests compare both paths) */

#ifdef KS_ZSTD_DLOPEN
/* Per thread (the walk runs without the GIL): a decompression context and the
 * scratch buffer, freed when the thread ends. */
typedef struct {
    ZSTD_DCtx *dctx;
    uint8_t *buf;
    size_t cap;
} zscratch;

static pthread_key_t zkey;

static void zscratch_free(void *p) {
    zscratch *z = p;
    if (!z)
        return;
    if (z->dctx)
        z_free(z->dctx);
    free(z->buf);
    free(z);
}

static zscratch *zscratch_get(void) {
    zscratch *z = pthread_getspecific(zkey);
    if (z)
        return z;
    z = calloc(1, sizeof(*z));
    if (!z)
        return NULL;
    z->dctx = z_create();
    if (!z->dctx || pthread_setspecific(zkey, z) != 0) {
        zscratch_free(z);
        return NULL;
    }
    return z;
}

static int zscratch_reserve(zscratch *z, size_t need) {
    if (need <= z->cap)
        return 0;
    size_t cap = z->cap ? z->cap : SCRATCH_MIN;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = malloc(cap);
    if (!p)
        return -1;
    free(z->buf);
    z->buf = p;
    z->cap = cap;
    return 0;
}
#endif

void zstd_init(void) {
#ifdef KS_ZSTD_DLOPEN
    void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    unsigned (*version)(void) = (unsigned (*)(void))dlsym(lib, "ZSTD_versionNumber");
    z_create = (ZSTD_DCtx * (*)(void)) dlsym(lib, "ZSTD_createDCtx");
    z_free = (size_t(*)(ZSTD_DCtx *))dlsym(lib, "ZSTD_freeDCtx");
    z_decompress = (size_t(*)(ZSTD_DCtx *, void *, size_t, const void *, size_t))dlsym(
        lib, "ZSTD_decompressDCtx");
    z_is_error = (unsigned (*)(size_t))dlsym(lib, "ZSTD_isError");
    z_error_code = (int (*)(size_t))dlsym(lib, "ZSTD_getErrorCode");
    z_content_size = (unsigned long long (*)(const void *, size_t))dlsym(
        lib, "ZSTD_getFrameContentSize");
    /* 1.3.0: ZSTD_getErrorCode's codes as numbered above */
    if (!version || version() < 10300 || !z_create || !z_free || !z_decompress ||
        !z_is_error || !z_error_code || !z_content_size ||
        pthread_key_create(&zkey, zscratch_free) != 0) {
        dlclose(lib);
        return;
    }
    have_zstd = 1; /* the library stays open for the life of the process */
#endif
}

const uint8_t *zstd_batch(const uint8_t *src, size_t n, size_t max_size, size_t *out_len) {
#ifdef KS_ZSTD_DLOPEN
    if (!have_zstd || n == 0)
        return NULL;
    zscratch *z = zscratch_get();
    if (!z)
        return NULL;
    /* The first frame's content size when it states one (librdkafka's frames do;
     * zstd-jni's streaming ones do not), else what the scratch already holds. */
    unsigned long long cs = z_content_size(src, n);
    size_t want = SCRATCH_MIN;
    if (cs != ZSTD_CONTENTSIZE_UNKNOWN && cs != ZSTD_CONTENTSIZE_ERROR && cs <= max_size)
        want = (size_t)cs > want ? (size_t)cs : want;
    if (want > max_size)
        want = max_size;
    if (zscratch_reserve(z, want) < 0)
        return NULL;
    for (;;) {
        size_t cap = z->cap < max_size ? z->cap : max_size;
        size_t r = z_decompress(z->dctx, z->buf, cap, src, n);
        if (!z_is_error(r)) {
            *out_len = r;
            return z->buf;
        }
        if (z_error_code(r) != ZSTD_ERROR_DST_TOO_SMALL || cap >= max_size ||
            zscratch_reserve(z, z->cap * 2 < max_size ? z->cap * 2 : max_size) < 0)
            return NULL; /* Python decides (and names the error) */
    }
#else
    (void)src; (void)n; (void)max_size; (void)out_len;
    return NULL;
#endif
}

void zstd_release(void) {
#ifdef KS_ZSTD_DLOPEN
    zscratch *z = have_zstd ? pthread_getspecific(zkey) : NULL;
    if (z && z->cap > SCRATCH_KEEP) { /* one huge batch: do not keep its scratch */
        free(z->buf);
        z->buf = NULL;
        z->cap = 0;
    }
#endif
}

static void dec_presize_compressed(Decoder *d, size_t n, int32_t count);

/* A zstd batch (header at p, `size` bytes, CRC checked) decompressed and decoded here:
 * 1 done, 0 not decompressed here (the caller hands it to Python), -1 error. */
static int dec_zstd_batch(Decoder *d, const bheader *h, const uint8_t *p, Py_ssize_t size,
                          Py_ssize_t pos, kerr *err) {
    size_t n;
    const uint8_t *rec = zstd_batch(p + HEADER_SIZE, (size_t)(size - HEADER_SIZE), d->zstd_max,
                                    &n);
    if (!rec)
        return 0;
    /* Values in lent memory: this batch's may not pass its own end there (as feed_records). */
    if (d->vdata.borrowed &&
        (d->vdata.p + d->vdata.len > p + size ||
         n > (size_t)(p + size - (d->vdata.p + d->vdata.len))) &&
        dec_unborrow(d) < 0) {
        err->kind = ERR_NOMEM;
        return -1;
    }
    dec_presize_compressed(d, n, h->record_count);
    return dec_records(d, h, rec, n, pos, err) < 0 ? -1 : 1;
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
            if (codec == CODEC_ZSTD && d->inline_zstd && inline_zstd_on) {
                int rc = dec_zstd_batch(d, &h, p, size, pos, err);
                if (rc < 0)
                    return -1;
                if (rc == 1) {
                    pos += size;
                    continue;
                }
            }
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
    int64_t comp = 0;
    /* feed() resumes the same region after each compressed batch: scan once. */
    if (d->presized_buf == (const void *)buf && d->presized_end == end)
        return 0;
    d->presized_buf = buf;
    d->presized_end = end;
    d->comp_left = 0;
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
        } else if ((attrs & ATTR_CODEC_MASK) && !(attrs & ATTR_CONTROL) && count > 0) {
            comp++; /* sized from its decompressed records (dec_presize_compressed) */
        }
        pos += (Py_ssize_t)blen + LOG_OVERHEAD;
    }
    d->comp_left = comp;
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

/*
 * Compressed batches: their record bytes are known only once decompressed,
 * one batch at a time, so without this the columns grow by doubling, and
 * each step copies (into a cached block) what is written so far.  At a
 * compressed batch of `n` record bytes and `count` records, room is reserved
 * for as many bytes and rows per compressed batch still to come in the region (address space
 * only: pages are faulted in as they are written, so an estimate too large
 * costs nothing), capped at PRESIZE_CAP bytes (beyond, doubling is cheap enough).  Failure is not
 * an error: the columns then grow as before.
 */
#define PRESIZE_CAP ((size_t)512 << 20)
static void dec_presize_compressed(Decoder *d, size_t n, int32_t count) {
    if (d->comp_left <= 0)
        return;
    int64_t left = d->comp_left--;
    if (left < 2 || n == 0 || count <= 0)
        return;
    size_t more = n > PRESIZE_CAP / (size_t)left ? PRESIZE_CAP : n * (size_t)left;
    /* Rows as this batch has them (at most what its bytes can hold) per batch. */
    size_t per = (size_t)count < n / MIN_RECORD_SIZE + 1 ? (size_t)count : n / MIN_RECORD_SIZE + 1;
    size_t rows = more / n * per;
    size_t r = (size_t)d->rows + rows, bits = (r + 7) / 8 + 1;
    if (d->vdata.len + more <= d->vdata.cap && d->kdata.len + more <= d->kdata.cap)
        return;
    if (more < MAP_THRESHOLD)
        return;
    /* Values first (the cached block with the most pages in place), not when lent. */
    if (!d->vdata.borrowed)
        (void)gb_reserve_space(&d->vdata, d->vdata.len + more, 0);
    (void)(gb_reserve_space(&d->kdata, d->kdata.len + more, 0) ||
           gb_reserve_space(&d->off, r * 8, 0) || gb_reserve_space(&d->ts, r * 8, 0) ||
           gb_reserve_space(&d->tst, r * 4, 1) || gb_reserve_space(&d->koff, (r + 1) * 4, 0) ||
           gb_reserve_space(&d->voff, (r + 1) * 4, 0) ||
           gb_reserve_space(&d->hoff, (r + 1) * 4, 1) || gb_reserve_space(&d->kvalid, bits, 1) ||
           gb_reserve_space(&d->vvalid, bits, 1) || gb_reserve_space(&d->hvalid, bits, 1));
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
    zstd_release();
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
    dec_presize_compressed(self, (size_t)rec.len, h.record_count);
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

static PyObject *Decoder_inline_zstd(Decoder *self, PyObject *args) {
    Py_ssize_t max_size;
    if (!PyArg_ParseTuple(args, "n:inline_zstd", &max_size))
        return NULL;
    self->zstd_max = max_size > 0 ? (size_t)max_size : 0;
    self->inline_zstd = have_zstd && max_size > 0;
    return PyBool_FromLong(self->inline_zstd && inline_zstd_on);
}

PyObject *mod_set_inline_zstd(PyObject *Py_UNUSED(m), PyObject *args) {
    int on;
    if (!PyArg_ParseTuple(args, "p:_set_inline_zstd", &on))
        return NULL;
    int old = inline_zstd_on;
    inline_zstd_on = on;
    return PyBool_FromLong(old);
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
    {"inline_zstd", (PyCFunction)Decoder_inline_zstd, METH_VARARGS,
     "inline_zstd(max_size) -> bool: feed() decompresses zstd batches itself (at most "
     "max_size bytes each) when libzstd is there, handing back only those it cannot"},
    {"finish", (PyCFunction)Decoder_finish, METH_NOARGS,
     "finish() -> dict of column buffers and counts; resets the decoder"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Decoder_getset[] = {
    {"rows", (getter)Decoder_get_rows, NULL, "rows decoded so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject DecoderType = {
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
