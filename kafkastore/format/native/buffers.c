/* kafkastore.format._native: memory blocks, the Buffer type, growable buffers (see kernel.h for how the sources divide the work). */
#include "kernel.h"

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
 *   split after split) reuses them without faults; in auto mode a block taken
 *   for reuse has its pages collapsed into huge pages (cache_reuse_huge);
 * - Decoder.feed() sizes the buffers once from the batch headers of the
 *   region (see dec_presize), so large buffers rarely grow; when they do, by
 *   doubling, with mremap (no copy) or into a cached block.
 *
 * Smaller blocks use malloc.  _native.set_buffer_cache(limit) changes the
 * bound (0 = no cache).
 */

/* 0 = plain mappings (a fault per 4 KiB page), 1 = MADV_HUGEPAGE, 2 = populate
 * ahead (MADV_POPULATE_WRITE, see gb_populate), 3 = both, 4 = populate ahead,
 * huge or 4 KiB pages per chunk, whichever measured cheaper (default; see
 * auto_pick_huge).  Huge pages fault in slowly on VMs that return free 2 MiB
 * blocks to the host, and populating in bulk halves the kernel's cost per
 * 4 KiB page (bench/decode.py --cold compares). */
int alloc_mode = 4;
#define HUGE_PAGE ((size_t)2 << 20)
#define MAP_STEP ((size_t)64 << 10)
#define CACHE_SLOTS 24


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

#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25 /* Linux 6.1; older kernels refuse it (EINVAL): harmless */
#endif

/*
 * A block taken from the cache is being reused, so it is worth huge pages:
 * auto mode (4) gives fresh memory 4 KiB pages when those fault in cheaper,
 * which is right for a decode's first use of it and wrong for every reuse
 * after: on a VM (nested paging) a warm decode of 4 KiB pages spends about a
 * quarter of its time on TLB misses, and MADV_FREE walks every page table
 * entry when the block goes back.  So the pages the block had written are
 * collapsed into huge pages (MADV_COLLAPSE: synchronous, contents kept), once:
 * later reuses find them huge and the call returns after a look at each 2 MiB.
 * Only the touched part: collapsing the reserved rest would fault it in.
 * Not before the process has reused COLLAPSE_AFTER blocks (about two warm
 * decodes): the collapse costs about what fresh huge pages cost (30-270 ms of
 * system time for the 140 MB of a 1M-record decode on this VM, against ~9 ms
 * saved per warm decode), which a process that decodes a few times never
 * earns back; one that decodes split after split does.
 * Advisory: on failure (old kernel, THP off, no free huge page) the block
 * keeps its pages, and the process stops asking (a collapse that fails may
 * have spent its time on reclaim and compaction first: not once per decode).
 */
static int collapse_failed = 0; /* set by a failed collapse; _set_alloc_mode clears it */
#define COLLAPSE_AFTER 16
static unsigned collapse_takes = 0; /* blocks of 2 MiB or more taken for reuse in mode 4 */

#if defined(MADV_HUGEPAGE) && defined(MADV_COLLAPSE)
/* MADV_COLLAPSE ignores the system's THP setting: 1 unless it says "never" (read once). */
static int thp_allowed(void) {
    static int allowed = -1; /* a race only reads the file twice */
    if (allowed < 0) {
        char s[128] = {0};
        FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (f) {
            if (!fgets(s, sizeof(s), f))
                s[0] = 0;
            fclose(f);
        }
        allowed = f && !strstr(s, "[never]");
    }
    return allowed;
}
#endif

static void cache_reuse_huge(uint8_t *p, size_t cap, size_t touched) {
#if defined(MADV_HUGEPAGE) && defined(MADV_COLLAPSE)
    if (alloc_mode != 4 || touched < HUGE_PAGE ||
        __atomic_load_n(&collapse_failed, __ATOMIC_RELAXED) || !thp_allowed())
        return;
    uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t e = ((uintptr_t)p + (touched < cap ? touched : cap)) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (e <= a || __atomic_add_fetch(&collapse_takes, 1, __ATOMIC_RELAXED) <= COLLAPSE_AFTER)
        return;
    madvise((void *)a, e - a, MADV_HUGEPAGE); /* auto mode may have said NOHUGEPAGE */
    if (madvise((void *)a, e - a, MADV_COLLAPSE) < 0)
        __atomic_store_n(&collapse_failed, 1, __ATOMIC_RELAXED);
#else
    (void)p, (void)cap, (void)touched;
#endif
}

/* A cached block of cap in [need, 2*need]: the smallest, and of those the
 * most touched (its pages are still there); NULL if none. */
static uint8_t *cache_take(size_t need, size_t *cap_out) {
    uint8_t *p = NULL;
    size_t touched = 0;
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
        touched = cache[best].touched;
        cache_touched -= touched;
        cache[best].p = NULL;
    }
    PyThread_release_lock(cache_lock);
    if (p)
        cache_reuse_huge(p, *cap_out, touched);
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


void Buffer_dealloc(BufferObject *self) {
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

PySequenceMethods Buffer_as_sequence = {
    .sq_length = (lenfunc)Buffer_len,
};

PyTypeObject BufferType = {
    BUFFER_TYPE_SLOTS("kafkastore.format._native.Buffer", &Buffer_as_buffer,
                      "A column buffer produced by Decoder.finish() (read-only, zero copy).")
};

/* ------------------------------------------------------------------ */
/* Growable byte buffers                                               */
/* ------------------------------------------------------------------ */

/* Ensure cap >= need; new bytes are zero when `zero`.  0 ok, -1 no memory.
 * Callable without the GIL. */
int gb_grow(gbuf *b, size_t need, int zero) {
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

void gb_populate(gbuf *b, size_t need) {
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

void gb_free(gbuf *b) {
    if (!b->borrowed)
        block_free(b->p, b->cap, b->mapped, b->cap);
    b->borrowed = 0;
    b->p = NULL;
    b->len = b->cap = b->pop = 0;
    b->mapped = 0;
}

/* Hand the block to a Buffer object of `size` bytes; b is empty afterwards. */
PyObject *gb_to_buffer(gbuf *b, size_t size) {
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

PyObject *new_buffer(size_t size) {
    gbuf b = {NULL, 0, 0, 0, 0, 0};
    if (gb_reserve(&b, size ? size : 1, 0) < 0)
        return PyErr_NoMemory();
    PyObject *o = gb_to_buffer(&b, size);
    if (!o)
        gb_free(&b);
    return o;
}

/* ------------------------------------------------------------------ */
/* Python functions over buffers: constant columns, memory tuning       */
/* ------------------------------------------------------------------ */


/* Doubling memcpy: fill n*size bytes with copies of the first `size`. */
static void fill_pattern(uint8_t *dst, size_t total, size_t size) {
    size_t done = size;
    while (done < total) {
        size_t k = done < total - done ? done : total - done;
        memcpy(dst + done, dst, k);
        done += k;
    }
}

PyObject *mod_repeat_binary(PyObject *Py_UNUSED(m), PyObject *args) {
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

PyObject *mod_fill_int32(PyObject *Py_UNUSED(m), PyObject *args) {
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

PyObject *mod_set_alloc_mode(PyObject *Py_UNUSED(m), PyObject *args) {
    int mode;
    if (!PyArg_ParseTuple(args, "i", &mode))
        return NULL;
    if (mode < 0 || mode > 4) {
        PyErr_SetString(PyExc_ValueError, "alloc mode must be in 0..4");
        return NULL;
    }
    int old = alloc_mode;
    alloc_mode = mode;
    __atomic_store_n(&collapse_failed, 0, __ATOMIC_RELAXED); /* a mode set anew tries again */
    return PyLong_FromLong(old);
}

PyObject *mod_alloc_stats(PyObject *Py_UNUSED(m), PyObject *args) {
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

PyObject *mod_set_buffer_cache(PyObject *Py_UNUSED(m), PyObject *args) {
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

/* The Buffer type and the block cache's lock (module init). 0 ok, -1 error set. */
int buffers_init(void) {
#ifdef KS_MMAP
    if (!cache_lock) {
        if (!(cache_lock = PyThread_allocate_lock())) {
            PyErr_NoMemory();
            return -1;
        }
        pthread_atfork(NULL, NULL, cache_after_fork_child);
    }
#endif
    return PyType_Ready(&BufferType);
}

/* An optional column buffer argument: None leaves b->set 0; else at least `need` bytes.
 * 0 ok, -1 error set.  Release with PyBuffer_Release(&b->v) when b->set. */
int opt_get(PyObject *o, optbuf *b, Py_ssize_t need) {
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
