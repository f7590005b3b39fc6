/*
 * keymap.c: compaction's key map, the greatest dirty offset of every key
 * (kafkastore.maintenance.compaction.latest_dirty_offsets' fast path).
 *
 * latest_per_key(chunks, dirty, offsets, plans=None) -> bytes (int64[n])
 *     Rows are the keys of `chunks`, a sequence of Arrow binary columns given as
 *     (count, first, int32 offsets buffer, data buffer) (`first`: the column's
 *     offset into its offsets buffer), one after the other: n = the sum of the
 *     counts.  `dirty` (n bytes, 0/1), `offsets` (int64[n]) and `plans` (int32[n]
 *     or None: all one plan) run along them.  Row i's answer is the greatest
 *     offsets[j] over the rows j with dirty[j] whose (plan, key bytes) equal row
 *     i's, or -1 when there is none.
 * _set_key_hash_bits(bits) -> old      tests: keep only the top `bits` bits of
 *     every key's hash (0: one hash for every key), so that keys sharing a hash
 *     are forced; 64 (the default) keeps them all.
 *
 * Exact by construction: keys are hashed into an open-addressing table (linear
 * probing, grown at half full) whose entries hold a representative key's bytes;
 * two keys share an entry only when their plans, lengths and bytes are equal, so
 * a shared hash only costs a comparison.  No dictionary of the key bytes is built
 * (a key of up to 16 bytes is copied into its entry, a longer one pointed at in the
 * caller's buffer).  With many distinct keys nearly every lookup misses the caches:
 * rows are hashed a block at a time and the slots of rows ahead are prefetched, and
 * the table's home slot is taken from the hash's top bits, so that doubling it walks
 * the old slots in order and never reads a key.  The GIL is released while the rows
 * are walked.
 */
#include "kernel.h"

/* Keys of one Arrow binary column, walked in row order. */
typedef struct {
    Py_buffer off, data;
    Py_ssize_t count, first;
    int set;
} kchunk;

/* A key of up to KEY_INLINE bytes is copied into its entry (no second cache miss into the
 * caller's data to compare it); a longer one is pointed at. */
#define KEY_INLINE 16
typedef struct {
    int64_t latest;
    uint32_t len;
    int32_t plan;
    union {
        const uint8_t *ptr;
        uint8_t bytes[KEY_INLINE];
    } key;
} kentry;

static inline const uint8_t *entry_key(const kentry *e) {
    return e->len <= KEY_INLINE ? e->key.bytes : e->key.ptr;
}

typedef struct {
    uint64_t *slots;   /* (tag << 32) | (entry + 1); 0 = empty */
    size_t mask;       /* 2^bits - 1 */
    int bits;
    kentry *entries;
    size_t count, cap;
} kmap;

static int key_hash_bits = 64;

/* The mask of the hash bits kept (all but under _set_key_hash_bits). */
static uint64_t kmap_keep_bits(void) {
    return key_hash_bits >= 64 ? ~0ULL : key_hash_bits <= 0 ? 0 : ~0ULL << (64 - key_hash_bits);
}

static inline uint64_t fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* A 64-bit hash of (plan, key bytes): 8-byte words folded by multiply-rotate, the
 * tail and the length mixed in, murmur3's finalizer last. */
static inline uint64_t key_hash(const uint8_t *p, uint32_t len, int32_t plan) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)(uint32_t)plan << 32) ^ len;
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ (w * 0x87c37b91114253d5ULL));
        h = ((h << 31) | (h >> 33)) * 0x4cf5ad432745937fULL;
    }
    uint64_t t = 0;
    for (uint32_t s = 0; i < len; i++, s += 8)
        t |= (uint64_t)p[i] << s;
    h ^= t * 0x87c37b91114253d5ULL;
    return fmix64(h);
}

/* A hash's home slot in a table of 2^bits slots: its top bits, so that the slot's tag (the
 * top 32 bits) gives it again when the table doubles (bits <= 32). */
static inline size_t home_slot(uint64_t h, int bits) {
    return (size_t)(h >> (64 - bits));
}

/* Doubles the table: the slots are walked in order and each lands at its home in the new
 * table (found from its tag alone: no key is read, writes run nearly in order). */
static int kmap_grow(kmap *m) {
    int bits = m->bits + 1;
    size_t cap = (size_t)1 << bits, mask = cap - 1;
    uint64_t *slots = calloc(cap, sizeof(uint64_t));
    if (!slots)
        return -1;
    for (size_t j = 0; j <= m->mask; j++) {
        uint64_t s = m->slots[j];
        if (!s)
            continue;
        size_t i = home_slot(s & 0xffffffff00000000ULL, bits);
        while (slots[i])
            i = (i + 1) & mask;
        slots[i] = s;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = mask;
    m->bits = bits;
    return 0;
}

/* The entry of (plan, key), added (latest -1) when new; (size_t)-1 when out of memory. */
static inline size_t kmap_find(kmap *m, const uint8_t *key, uint32_t len, int32_t plan,
                               uint64_t h) {
    size_t i = home_slot(h, m->bits);
    uint64_t tag = (h >> 32) << 32;
    for (;;) {
        uint64_t s = m->slots[i];
        if (!s)
            break;
        if ((s & 0xffffffff00000000ULL) == tag) {
            kentry *e = &m->entries[(s & 0xffffffffULL) - 1];
            if (e->len == len && e->plan == plan && memcmp(entry_key(e), key, len) == 0)
                return (size_t)((s & 0xffffffffULL) - 1);
        }
        i = (i + 1) & m->mask;
    }
    if (m->count == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        kentry *grown = realloc(m->entries, cap * sizeof(kentry));
        if (!grown)
            return (size_t)-1;
        m->entries = grown;
        m->cap = cap;
    }
    size_t id = m->count++;
    kentry *e = &m->entries[id];
    e->latest = -1;
    e->len = len;
    e->plan = plan;
    if (len <= KEY_INLINE)
        memcpy(e->key.bytes, key, len);
    else
        e->key.ptr = key;
    m->slots[i] = tag | (uint64_t)(id + 1);
    if (m->count * 2 > m->mask + 1 && kmap_grow(m) < 0)
        return (size_t)-1;
    return id;
}

PyObject *mod_set_key_hash_bits(PyObject *Py_UNUSED(m), PyObject *args) {
    int bits;
    if (!PyArg_ParseTuple(args, "i:_set_key_hash_bits", &bits))
        return NULL;
    if (bits < 0 || bits > 64) {
        PyErr_SetString(PyExc_ValueError, "_set_key_hash_bits: bits must be 0-64");
        return NULL;
    }
    int old = key_hash_bits;
    key_hash_bits = bits;
    return PyLong_FromLong(old);
}

static void release_chunks(kchunk *ch, Py_ssize_t k) {
    for (Py_ssize_t c = 0; c < k; c++)
        if (ch[c].set) {
            PyBuffer_Release(&ch[c].off);
            PyBuffer_Release(&ch[c].data);
        }
}

/* Borrows the chunks' buffers into ch (k of them); the number of rows, or -1. */
static Py_ssize_t get_chunks(PyObject *seq, kchunk *ch, Py_ssize_t k) {
    Py_ssize_t n = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, c);
        PyObject *off, *data;
        if (!PyArg_ParseTuple(t, "nnOO:latest_per_key chunk", &ch[c].count, &ch[c].first,
                              &off, &data))
            return -1;
        if (ch[c].count < 0 || ch[c].first < 0) {
            PyErr_SetString(PyExc_ValueError, "latest_per_key: negative count or first row");
            return -1;
        }
        if (PyObject_GetBuffer(off, &ch[c].off, PyBUF_C_CONTIGUOUS) < 0)
            return -1;
        if (PyObject_GetBuffer(data, &ch[c].data, PyBUF_C_CONTIGUOUS) < 0) {
            PyBuffer_Release(&ch[c].off);
            return -1;
        }
        ch[c].set = 1;
        if (ch[c].off.len / 4 < ch[c].first + ch[c].count + 1) {
            PyErr_SetString(PyExc_ValueError, "latest_per_key: an offsets buffer is too short");
            return -1;
        }
        const int32_t *o = (const int32_t *)ch[c].off.buf + ch[c].first;
        /* Arrow offsets are non-decreasing: the first and last bound every row. */
        if (ch[c].count && (o[0] < 0 || (Py_ssize_t)o[ch[c].count] > ch[c].data.len)) {
            PyErr_SetString(PyExc_ValueError, "latest_per_key: offsets run outside the data");
            return -1;
        }
        n += ch[c].count;
    }
    return n;
}

#if defined(__GNUC__)
#define KM_PREFETCH(p) __builtin_prefetch(p)
#else
#define KM_PREFETCH(p) ((void)0)
#endif
/* Rows are hashed a block at a time, and the table's slots (then entries) of the rows
 * KM_AHEAD (then KM_AHEAD / 2) ahead are prefetched: with many distinct keys nearly every
 * lookup misses the caches, and the misses of several rows then overlap. */
#define KM_BLOCK 256
#define KM_AHEAD 16

/* The walk (no Python calls: runs without the GIL). 0, -1 out of memory, -2 bad offsets. */
static int latest_walk(kchunk *ch, Py_ssize_t k, const uint8_t *dirty, const int64_t *values,
                       const int32_t *plans, int64_t *out, uint32_t *codes) {
    kmap m = {0};
    m.bits = 10;
    m.mask = 1023;
    m.slots = calloc(m.mask + 1, sizeof(uint64_t));
    if (!m.slots)
        return -1;
    uint64_t keep_bits = kmap_keep_bits();
    uint64_t hs[KM_BLOCK];
    int rc = 0;
    Py_ssize_t row = 0;
    for (Py_ssize_t c = 0; c < k && !rc; c++) {
        const int32_t *o = (const int32_t *)ch[c].off.buf + ch[c].first;
        const uint8_t *data = ch[c].data.buf;
        for (Py_ssize_t base = 0; base < ch[c].count && !rc; base += KM_BLOCK) {
            Py_ssize_t nb = ch[c].count - base < KM_BLOCK ? ch[c].count - base : KM_BLOCK;
            for (Py_ssize_t r = 0; r < nb; r++) {
                int32_t a = o[base + r], z = o[base + r + 1];
                if (KS_UNLIKELY(z < a)) {
                    rc = -2;
                    break;
                }
                hs[r] = key_hash(data + a, (uint32_t)(z - a), plans ? plans[row + r] : 0) &
                        keep_bits;
                if (r < KM_AHEAD)
                    KM_PREFETCH(&m.slots[home_slot(hs[r], m.bits)]);
            }
            for (Py_ssize_t r = 0; r < nb && !rc; r++, row++) {
                if (r + KM_AHEAD < nb)
                    KM_PREFETCH(&m.slots[home_slot(hs[r + KM_AHEAD], m.bits)]);
                if (r + KM_AHEAD / 2 < nb) {
                    uint64_t s = m.slots[home_slot(hs[r + KM_AHEAD / 2], m.bits)];
                    if (s)
                        KM_PREFETCH(&m.entries[(s & 0xffffffffULL) - 1]);
                }
                int32_t a = o[base + r], z = o[base + r + 1];
                int32_t plan = plans ? plans[row] : 0;
                size_t id = kmap_find(&m, data + a, (uint32_t)(z - a), plan, hs[r]);
                if (KS_UNLIKELY(id == (size_t)-1)) {
                    rc = -1;
                    break;
                }
                codes[row] = (uint32_t)id;
                if (dirty[row] && values[row] > m.entries[id].latest)
                    m.entries[id].latest = values[row];
            }
        }
    }
    if (!rc)
        for (Py_ssize_t i = 0; i < row; i++) {
            if (i + KM_AHEAD < row)
                KM_PREFETCH(&m.entries[codes[i + KM_AHEAD]]);
            out[i] = m.entries[codes[i]].latest;
        }
    free(m.slots);
    free(m.entries);
    return rc;
}

PyObject *mod_latest_per_key(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *chunks, *dirty_o, *values_o, *plans_o = Py_None;
    if (!PyArg_ParseTuple(args, "OOO|O:latest_per_key", &chunks, &dirty_o, &values_o, &plans_o))
        return NULL;
    PyObject *seq = PySequence_Fast(chunks, "latest_per_key: chunks must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    kchunk *ch = calloc(k ? (size_t)k : 1, sizeof(kchunk));
    optbuf b[3];
    memset(b, 0, sizeof(b));
    PyObject *res = NULL;
    uint32_t *codes = NULL;
    if (!ch) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = get_chunks(seq, ch, k);
    if (n < 0)
        goto done;
    if (n > ((Py_ssize_t)1 << 31) - 1) {   /* a table of at most 2^32 slots (home_slot) */
        PyErr_SetString(PyExc_ValueError, "latest_per_key: too many rows");
        goto done;
    }
    if (opt_get(dirty_o, &b[0], n) < 0 || opt_get(values_o, &b[1], n * 8) < 0 ||
        opt_get(plans_o, &b[2], n * 4) < 0)
        goto done;
    if (!b[0].set || !b[1].set) {
        PyErr_SetString(PyExc_ValueError, "latest_per_key: dirty and offsets are required");
        goto done;
    }
    res = PyBytes_FromStringAndSize(NULL, n * 8);
    codes = malloc((n ? (size_t)n : 1) * sizeof(uint32_t));
    if (!res || !codes) {
        Py_CLEAR(res);
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = latest_walk(ch, k, b[0].v.buf, b[1].v.buf, b[2].set ? b[2].v.buf : NULL,
                     (int64_t *)PyBytes_AS_STRING(res), codes);
    Py_END_ALLOW_THREADS
    if (rc) {
        Py_CLEAR(res);
        if (rc == -1)
            PyErr_NoMemory();
        else
            PyErr_SetString(PyExc_ValueError, "latest_per_key: offsets run outside the data");
    }
done:
    free(codes);
    if (ch) {
        release_chunks(ch, k);
        free(ch);
    }
    for (int i = 0; i < 3; i++)
        if (b[i].set)
            PyBuffer_Release(&b[i].v);
    Py_DECREF(seq);
    return res;
}

/* ------------------------------------------------------------------ */
/* restamp_records: compaction's rewrite of a batch it keeps whole      */
/* ------------------------------------------------------------------ */
/*
 * restamp_records(records, count, base_ts, last_delta, new_base_ts=None)
 *     -> (bytes | None, tombstones, min_ts, max_ts) | None
 *
 * `records` is the uncompressed records section of a create-time v2 data batch of
 * `count` records whose base timestamp is `base_ts` and last offset delta `last_delta`.
 * One walk checks it as the decoder does (lengths, offset deltas increasing within
 * [0, last_delta], keys present, header keys UTF-8, timestamps in range) and counts the
 * tombstones; min_ts is the least record timestamp >= 0 (-1 if none), max_ts the
 * greatest.  With `new_base_ts` and at least one tombstone, the bytes are the same
 * records relative to base timestamp `new_base_ts` (the delete horizon): each timestamp
 * delta and record length rewritten, attributes 0, the rest copied; byte for byte what
 * encode_arrow writes for the decoded records.  None (the caller decodes the batch
 * instead, which raises the precise error) for anything it does not accept: a null key,
 * damage, a timestamp or delta out of range.
 */
#define RS_TS_LIMIT (INT64_MAX / 1000)   /* the decoder's bound (Arrow microseconds) */
#define RS_NOGIL_BYTES (16 * 1024)       /* a batch's walk this large runs without the GIL */

static inline int rs_vsize(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *rs_put(uint8_t *q, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *q++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *q++ = (uint8_t)z;
    return q;
}

/* Skips a nullable byte string (length varint, bytes) within [*pq, e): 0 ok, -1 damage;
 * *len gets the length (-1: null). */
static inline int rs_skip_bytes(const uint8_t **pq, const uint8_t *e, int32_t *len) {
    if (rd_varint(pq, e, len) < 0 || *len < -1 || (*len > 0 && (size_t)*len > (size_t)(e - *pq)))
        return -1;
    if (*len > 0)
        *pq += *len;
    return 0;
}

typedef struct {
    Py_ssize_t tombstones;
    int64_t min_ts, max_ts;
    size_t out_bound;     /* bytes the restamped records can take */
} rs_walk;

/* The checking walk: 0 ok, -1 not accepted. */
static int rs_check(const uint8_t *p, size_t n, Py_ssize_t count, int64_t base_ts,
                    int32_t last_delta, int has_new, int64_t new_base, rs_walk *w) {
    const uint8_t *q = p, *e = p + n;
    int32_t prev = -1;
    w->tombstones = 0;
    w->min_ts = -1;
    w->max_ts = 0;
    w->out_bound = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t rlen, offd, klen, vlen, hcount;
        int64_t tsd, ts;
        if (rd_varint(&q, e, &rlen) < 0 || rlen < 1 || (size_t)rlen > (size_t)(e - q))
            return -1;
        const uint8_t *r = q + 1, *re = q + rlen;   /* past the attributes byte */
        if (rd_varlong(&r, re, &tsd) < 0 || rd_varint(&r, re, &offd) < 0)
            return -1;
        if (offd <= prev || offd > last_delta)
            return -1;
        prev = offd;
        if (rs_skip_bytes(&r, re, &klen) < 0 || klen < 0 || rs_skip_bytes(&r, re, &vlen) < 0)
            return -1;
        if (rd_varint(&r, re, &hcount) < 0 || hcount < 0)
            return -1;
        for (int32_t j = 0; j < hcount; j++) {
            int32_t hkl, hvl;
            const uint8_t *hk;
            if (rd_varint(&r, re, &hkl) < 0 || hkl < 0 || (size_t)hkl > (size_t)(re - r))
                return -1;
            hk = r;
            r += hkl;
            if (!utf8_valid(hk, (size_t)hkl) || rs_skip_bytes(&r, re, &hvl) < 0)
                return -1;
        }
        if (r != re)
            return -1;
        if (__builtin_add_overflow(base_ts, tsd, &ts) || ts > RS_TS_LIMIT || ts < -RS_TS_LIMIT)
            return -1;
        if (has_new) {
            int64_t nd;
            if (__builtin_sub_overflow(ts, new_base, &nd))
                return -1;
            /* length varint (at most 5 bytes), attributes, new delta, the rest */
            w->out_bound += (size_t)rlen + 5 + 10;
        }
        w->tombstones += vlen == -1;
        if (i == 0 || ts > w->max_ts)
            w->max_ts = ts;
        if (ts >= 0 && (w->min_ts < 0 || ts < w->min_ts))
            w->min_ts = ts;
        q = re;
    }
    return q == e ? 0 : -1;
}

/* The rewriting walk over records rs_check accepted: the bytes written, or -1 if a record
 * would be too long. */
static Py_ssize_t rs_write(const uint8_t *p, size_t n, Py_ssize_t count, int64_t base_ts,
                           int64_t new_base, uint8_t *out) {
    const uint8_t *q = p, *e = p + n;
    uint8_t *o = out;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t rlen = 0;
        int64_t tsd = 0;
        rd_varint(&q, e, &rlen);
        const uint8_t *r = q + 1, *re = q + rlen;
        rd_varlong(&r, re, &tsd);
        const int64_t nd = base_ts + tsd - new_base;   /* checked by rs_check */
        const int64_t nlen = (int64_t)(re - r) + 1 + rs_vsize(nd);
        if (nlen > INT32_MAX)
            return -1;
        o = rs_put(o, nlen);
        *o++ = 0;
        o = rs_put(o, nd);
        memcpy(o, r, (size_t)(re - r));
        o += re - r;
        q = re;
    }
    return (Py_ssize_t)(o - out);
}

PyObject *mod_restamp_records(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer in;
    Py_ssize_t count;
    long long base_ts, new_base = 0;
    int last_delta;
    PyObject *new_o = Py_None;
    if (!PyArg_ParseTuple(args, "y*nLi|O:restamp_records", &in, &count, &base_ts, &last_delta,
                          &new_o))
        return NULL;
    int has_new = new_o != Py_None;
    if (has_new) {
        new_base = PyLong_AsLongLong(new_o);
        if (new_base == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&in);
            return NULL;
        }
    }
    PyObject *res = NULL, *out = NULL;
    rs_walk w;
    int rc;
    const uint8_t *p = (const uint8_t *)in.buf;
    size_t n = (size_t)in.len;
    if (count < 0 || last_delta < 0) {
        rc = -1;
    } else if (n >= RS_NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = rs_check(p, n, count, (int64_t)base_ts, last_delta, has_new, (int64_t)new_base, &w);
        Py_END_ALLOW_THREADS
    } else {
        rc = rs_check(p, n, count, (int64_t)base_ts, last_delta, has_new, (int64_t)new_base, &w);
    }
    if (rc < 0) {
        PyBuffer_Release(&in);
        Py_RETURN_NONE;
    }
    if (has_new && w.tombstones > 0) {
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)w.out_bound);
        if (!out)
            goto done;
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        Py_ssize_t len;
        if (n >= RS_NOGIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            len = rs_write(p, n, count, (int64_t)base_ts, (int64_t)new_base, o);
            Py_END_ALLOW_THREADS
        } else {
            len = rs_write(p, n, count, (int64_t)base_ts, (int64_t)new_base, o);
        }
        if (len < 0) {
            Py_CLEAR(out);
            res = Py_None;
            Py_INCREF(res);
            goto done;
        }
        if (_PyBytes_Resize(&out, len) < 0)
            goto done;
    } else {
        out = Py_None;
        Py_INCREF(out);
    }
    res = Py_BuildValue("(OnLL)", out, w.tombstones, (long long)w.min_ts, (long long)w.max_ts);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&in);
    return res;
}
