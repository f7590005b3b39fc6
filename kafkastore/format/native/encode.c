/* kafkastore.format._native: v2 records sections and batches from Arrow columns (see kernel.h for how the sources divide the work). */
#include "kernel.h"

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

PyObject *mod_encode_records(PyObject *Py_UNUSED(m), PyObject *args) {
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

PyObject *mod_encode_arrow(PyObject *Py_UNUSED(m), PyObject *args) {
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

PyTypeObject EncBufferType = {
    BUFFER_TYPE_SLOTS("kafkastore.format._native.EncBuffer", &EncBuffer_as_buffer,
                      "Encoded record batches from encode_arrow_batches() (writable: the writer "
                      "sets the batches' base offsets in place at commit).")
};

static PyObject *i64_bytes(const int64_t *v, Py_ssize_t k) {
    return PyBytes_FromStringAndSize((const char *)v, k * (Py_ssize_t)sizeof(int64_t));
}

PyObject *mod_encode_arrow_batches(PyObject *Py_UNUSED(m), PyObject *args) {
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
