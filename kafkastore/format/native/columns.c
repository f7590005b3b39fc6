/* kafkastore.format._native: Python lists into Arrow buffers; Kafka's murmur2 (see kernel.h for how the sources divide the work). */
#include "kernel.h"

/* A Python list on its way into an Arrow column: the items, and the validity
 * bitmap (made at the first None, all valid until then) with its null count. */
typedef struct {
    PyObject *seq; /* PySequence_Fast of the argument */
    PyObject **items;
    Py_ssize_t n;
    PyObject *bitmap;
    int64_t nulls;
} pylist;

static int pylist_open(pylist *c, PyObject *arg, const char *what) {
    memset(c, 0, sizeof(*c));
    c->seq = PySequence_Fast(arg, what);
    if (!c->seq)
        return -1;
    c->n = PySequence_Fast_GET_SIZE(c->seq);
    c->items = PySequence_Fast_ITEMS(c->seq);
    return 0;
}

/* Item i is None: clear its validity bit. -1 on MemoryError. */
static int pylist_null(pylist *c, Py_ssize_t i) {
    if (!c->bitmap) {
        c->bitmap = PyBytes_FromStringAndSize(NULL, (c->n + 7) / 8);
        if (!c->bitmap)
            return -1;
        memset(PyBytes_AS_STRING(c->bitmap), 0xFF, (size_t)((c->n + 7) / 8));
    }
    ((uint8_t *)PyBytes_AS_STRING(c->bitmap))[i >> 3] &= (uint8_t)~(1u << (i & 7));
    c->nulls++;
    return 0;
}

/* (n, nulls, validity or None, a[, b]): the column's buffers (b may be NULL). */
static PyObject *pylist_result(pylist *c, PyObject *a, PyObject *b) {
    Py_ssize_t n = c->n;
    if (c->bitmap && (n & 7)) /* bits past the end are zero, as Arrow writers leave them */
        ((uint8_t *)PyBytes_AS_STRING(c->bitmap))[n >> 3] &= (uint8_t)((1u << (n & 7)) - 1);
    PyObject *valid = c->bitmap ? c->bitmap : Py_None;
    return b ? Py_BuildValue("(nLOOO)", n, (long long)c->nulls, valid, a, b)
             : Py_BuildValue("(nLOO)", n, (long long)c->nulls, valid, a);
}

/* Releases what c holds and returns res (None: an item the fast path declines). */
static PyObject *pylist_close(pylist *c, PyObject *res, int declined) {
    Py_XDECREF(c->bitmap);
    Py_DECREF(c->seq);
    if (declined) {
        Py_XDECREF(res);
        Py_RETURN_NONE;
    }
    return res;
}

PyObject *mod_pylist_binary(PyObject *Py_UNUSED(m), PyObject *arg) {
    pylist c;
    if (pylist_open(&c, arg, "pylist_binary needs a sequence") < 0)
        return NULL;
    Py_ssize_t n = c.n;
    PyObject **items = c.items;
    PyObject *offs = NULL, *data = NULL, *res = NULL;
    int declined = 0;
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
            if (pylist_null(&c, i) < 0)
                goto done;
            continue;
        }
        Py_ssize_t len = PyBytes_CheckExact(o) ? PyBytes_GET_SIZE(o) : -1;
        if (len < 0 || at + len > INT32_MAX) {
            declined = 1;
            goto done;
        }
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
    if (PyByteArray_Resize(data, (Py_ssize_t)at) == 0)
        res = pylist_result(&c, offs, data);
done:
    Py_XDECREF(offs);
    Py_XDECREF(data);
    return pylist_close(&c, res, declined);
}

PyObject *mod_pylist_int64(PyObject *Py_UNUSED(m), PyObject *arg) {
    pylist c;
    if (pylist_open(&c, arg, "pylist_int64 needs a sequence") < 0)
        return NULL;
    PyObject *vals = PyBytes_FromStringAndSize(NULL, c.n * 8), *res = NULL;
    int declined = 0;
    if (!vals)
        goto done;
    int64_t *v = (int64_t *)PyBytes_AS_STRING(vals);
    for (Py_ssize_t i = 0; i < c.n; i++) {
        PyObject *o = c.items[i];
        v[i] = 0;
        if (o == Py_None) {
            if (pylist_null(&c, i) < 0)
                goto done;
            continue;
        }
        int overflow = 0;
        long long x = PyLong_CheckExact(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : 0;
        if (!PyLong_CheckExact(o) || overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            declined = 1;
            goto done;
        }
        v[i] = x;
    }
    res = pylist_result(&c, vals, NULL);
done:
    Py_XDECREF(vals);
    return pylist_close(&c, res, declined);
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

PyObject *mod_murmur2_arrow(PyObject *Py_UNUSED(m), PyObject *args) {
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
