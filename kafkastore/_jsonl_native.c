/*
 * kafkastore._jsonl_native: the C fast path of kafkastore.jsonl_bulk (`produce` input).
 *
 * parse_jsonl(buf, max_ts) -> (rows, key, value, timestamp, partition) | None
 *     `produce` input lines of the common shape into Arrow buffers: key and value
 *     (nulls, validity or None, int32 offsets, data), timestamp and partition (nulls,
 *     validity or None, int64 values); None for any line it does not take.
 *
 * Built as its own extension (optional, like kafkastore.format._native): it belongs to
 * the layer that owns produce input, not to the byte format.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/native/pymodule.h"
#include "format/native/utf8.h"

/* A column buffer handed to pyarrow (buffer protocol, zero copy, read-only). */
typedef struct {
    PyObject_HEAD
    uint8_t *data;
    Py_ssize_t size;
} BufferObject;

static void Buffer_dealloc(BufferObject *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 1, flags);
}

static PyBufferProcs Buffer_as_buffer = {
    (getbufferproc)Buffer_getbuffer,
    NULL,
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkastore._jsonl_native.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column buffer of parse_jsonl (read-only, zero copy).",
};

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
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b)
        return NULL;
    b->size = (Py_ssize_t)size;
    b->data = zero ? calloc(size ? size : 1, 1) : malloc(size ? size : 1);
    if (!b->data) {
        Py_DECREF(b);   /* dealloc frees NULL */
        PyErr_NoMemory();
        return NULL;
    }
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
    {"parse_jsonl", mod_parse_jsonl, METH_VARARGS,
     "parse_jsonl(buf, max_ts) -> (rows, key, value, timestamp, partition) | None: produce "
     "input lines of the common shape as Arrow buffers; key and value (nulls, validity or "
     "None, int32 offsets, data), timestamp and partition (nulls, validity or None, int64 "
     "values); None: a line the fast path does not take (see kafkastore.jsonl_bulk)"},
    {NULL, NULL, 0, NULL},
};

KS_MODULE_DEF(moduledef, "kafkastore._jsonl_native",
              "C fast path of kafkastore.jsonl_bulk: JSON lines of the common shape into Arrow buffers.",
              module_methods);

PyMODINIT_FUNC PyInit__jsonl_native(void) {
    if (PyType_Ready(&BufferType) < 0)
        return NULL;
    return PyModule_Create(&moduledef);
}
