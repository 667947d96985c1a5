/* A growable byte buffer and the MessagePack writer.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_BUF_H
#define CKPT_NATIVE_BUF_H

/* ---- a growable byte buffer and the MessagePack writer ------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

/* Large buffers of earlier walks, kept for the next one.  A type's rows grow by
 * doubling, and each larger buffer is fresh pages: a page fault per 4 KiB on first
 * touch (about a quarter of a FlatSave's ~420 faults).  A buffer growing past KEEP_MIN
 * takes the largest kept one that holds it instead; rows buffers of KEEP_MIN bytes or
 * more are kept when the walk ends (at most KEEP_N, the largest, KEEP_TOTAL bytes in
 * all: what an idle sandbox holds after a checkpoint). */
#define KEEP_N 4
#define KEEP_MIN ((Py_ssize_t)64 << 10)
#define KEEP_TOTAL ((Py_ssize_t)8 << 20)
static char *kept_buf[KEEP_N];
static Py_ssize_t kept_cap[KEEP_N];
static int keep_buffers = 1; /* 0: none kept or taken (set_keep_buffers, to compare) */

/* The largest kept buffer of at least `need` bytes (taken out of the pool), or NULL. */
static char *take_kept(Py_ssize_t need, Py_ssize_t *cap)
{
    int best = -1;
    for (int i = 0; i < KEEP_N; i++)
        if (kept_buf[i] && kept_cap[i] >= need && (best < 0 || kept_cap[i] > kept_cap[best]))
            best = i;
    if (best < 0)
        return NULL;
    char *d = kept_buf[best];
    *cap = kept_cap[best];
    kept_buf[best] = NULL;
    kept_cap[best] = 0;
    return d;
}

/* Free a buffer's memory, or keep it for the next walk in place of a smaller one. */
static void buf_release(Buf *b)
{
    char *d = b->data;
    Py_ssize_t cap = b->cap;
    b->data = NULL;
    b->len = b->cap = 0;
    if (!d)
        return;
    if (keep_buffers && cap >= KEEP_MIN && cap <= KEEP_TOTAL) {
        int small = 0;
        Py_ssize_t total = 0;
        for (int i = 0; i < KEEP_N; i++) {
            total += kept_cap[i];
            if (kept_cap[i] < kept_cap[small])
                small = i;
        }
        if (kept_cap[small] < cap && total - kept_cap[small] + cap <= KEEP_TOTAL) {
            PyMem_Free(kept_buf[small]);
            kept_buf[small] = d;
            kept_cap[small] = cap;
            return;
        }
    }
    PyMem_Free(d);
}

static int buf_grow(Buf *b, Py_ssize_t need)
{
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    if (keep_buffers && cap >= KEEP_MIN) {
        Py_ssize_t kcap;
        char *k = take_kept(b->len + need, &kcap);
        if (k) {
            if (b->len)
                memcpy(k, b->data, b->len);
            PyMem_Free(b->data);
            b->data = k;
            b->cap = kcap;
            return 0;
        }
    }
    char *d = PyMem_Realloc(b->data, cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int reserve(Buf *b, Py_ssize_t n)
{
    return (b->cap - b->len >= n) ? 0 : buf_grow(b, n);
}

/* A one-byte marker and an n-byte big-endian number (n = 0, 1, 2, 4, 8). */
static inline int w_head(Buf *b, uint8_t c, uint64_t v, int n)
{
    if (reserve(b, 9) < 0)
        return -1;
    char *p = b->data + b->len;
    p[0] = (char)c;
    switch (n) {
    case 1:
        p[1] = (char)v;
        break;
    case 2: {
        uint16_t x = __builtin_bswap16((uint16_t)v);
        memcpy(p + 1, &x, 2);
        break;
    }
    case 4: {
        uint32_t x = __builtin_bswap32((uint32_t)v);
        memcpy(p + 1, &x, 4);
        break;
    }
    case 8: {
        uint64_t x = __builtin_bswap64(v);
        memcpy(p + 1, &x, 8);
        break;
    }
    }
    b->len += 1 + n;
    return 0;
}

static inline int w_byte(Buf *b, uint8_t c)
{
    if (reserve(b, 1) < 0)
        return -1;
    b->data[b->len++] = (char)c;
    return 0;
}

CKPT_INLINE_NEW int w_uint(Buf *b, uint64_t v)
{
    if (v < 128)
        return w_byte(b, (uint8_t)v);
    if (v < 256)
        return w_head(b, MP_UINT8, v, 1);
    if (v < 65536)
        return w_head(b, MP_UINT16, v, 2);
    if (v < 4294967296ULL)
        return w_head(b, MP_UINT32, v, 4);
    return w_head(b, MP_UINT64, v, 8);
}

CKPT_INLINE_NEW int w_int(Buf *b, int64_t v)
{
    if (v >= 0)
        return w_uint(b, (uint64_t)v);
    if (v >= -32)
        return w_byte(b, (uint8_t)(int8_t)v);
    if (v >= -128)
        return w_head(b, MP_INT8, (uint8_t)(int8_t)v, 1);
    if (v >= -32768)
        return w_head(b, MP_INT16, (uint16_t)(int16_t)v, 2);
    if (v >= -2147483648LL)
        return w_head(b, MP_INT32, (uint32_t)(int32_t)v, 4);
    return w_head(b, MP_INT64, (uint64_t)v, 8);
}

static int w_len(Buf *b, Py_ssize_t n, uint8_t fix, Py_ssize_t fixmax, uint8_t c16, uint8_t c32)
{
    if (n < fixmax)
        return w_byte(b, fix | (uint8_t)n);
    if (n < 65536)
        return w_head(b, c16, (uint64_t)n, 2);
    if ((uint64_t)n <= 0xffffffffULL)
        return w_head(b, c32, (uint64_t)n, 4);
    PyErr_SetString(PyExc_OverflowError, "a container is too large for MessagePack");
    return -1;
}

/* The bytes w_array writes for n items (n below 2**32). */
static inline Py_ssize_t array_head_len(Py_ssize_t n)
{
    return n < MP_FIX_ITEMS ? 1 : n < 65536 ? 3 : 5;
}

static inline int w_array(Buf *b, Py_ssize_t n)
{
    return w_len(b, n, MP_FIXARRAY, MP_FIX_ITEMS, MP_ARRAY16, MP_ARRAY32);
}

/* The array whose header, at offset `at`, said `said` items holds `wrote`: where Python
 * code run while a live list's items were written resized the list, the header is
 * rewritten (moving the items when its length changes) to what iterating the list in
 * Python, as typed's code does, writes.  0, -1 on error. */
static int fix_array(Buf *b, Py_ssize_t at, Py_ssize_t said, Py_ssize_t wrote)
{
    if (said == wrote)
        return 0;
    Py_ssize_t was = array_head_len(said), now = array_head_len(wrote);
    if (now > was && reserve(b, now - was) < 0)
        return -1;
    if (now != was)
        memmove(b->data + at + now, b->data + at + was, (size_t)(b->len - at - was));
    Py_ssize_t end = b->len + now - was;
    b->len = at;
    int r = w_array(b, wrote);
    b->len = end;
    return r;
}

static inline int w_map(Buf *b, Py_ssize_t n)
{
    return w_len(b, n, MP_FIXMAP, MP_FIX_ITEMS, MP_MAP16, MP_MAP32);
}

static int w_raw(Buf *b, const char *p, Py_ssize_t n)
{
    if (reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int w_str(Buf *b, PyObject *s)
{
    Py_ssize_t n;
    const char *p;
    if (PyUnicode_IS_COMPACT_ASCII(s)) { /* its UTF-8 is its data */
        p = (const char *)PyUnicode_DATA(s);
        n = PyUnicode_GET_LENGTH(s);
    }
    else if (!(p = PyUnicode_AsUTF8AndSize(s, &n)))
        return -1;
    int r;
    if (n < 32)
        r = w_byte(b, MP_FIXSTR | (uint8_t)n);
    else if (n < 256)
        r = w_head(b, MP_STR8, (uint64_t)n, 1);
    else if (n < 65536)
        r = w_head(b, MP_STR16, (uint64_t)n, 2);
    else if ((uint64_t)n <= 0xffffffffULL)
        r = w_head(b, MP_STR32, (uint64_t)n, 4);
    else {
        PyErr_SetString(PyExc_OverflowError, "a str is too large for MessagePack");
        return -1;
    }
    return r < 0 ? -1 : w_raw(b, p, n);
}

/* Inlined into each writer, as it was into w_scalar alone: a call per bytes value cost
 * more than the header it writes. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int w_bin(Buf *b, const char *p, Py_ssize_t n)
{
    int r;
    if (n < 256)
        r = w_head(b, MP_BIN8, (uint64_t)n, 1);
    else if (n < 65536)
        r = w_head(b, MP_BIN16, (uint64_t)n, 2);
    else if ((uint64_t)n <= 0xffffffffULL)
        r = w_head(b, MP_BIN32, (uint64_t)n, 4);
    else {
        PyErr_SetString(PyExc_OverflowError, "a bytes value is too large for MessagePack");
        return -1;
    }
    return r < 0 ? -1 : w_raw(b, p, n);
}

static inline int w_long(Buf *b, PyObject *v)
{
#if CKPT_LONG_COMPACT
    /* below 2**30 in magnitude: 3.12's unstable API reads it without a call */
    if (PyUnstable_Long_IsCompact((PyLongObject *)v))
        return w_int(b, (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)v));
#endif
#if CKPT_LONG_311
    /* one 30-bit digit or zero: read it directly (3.11 int layout, public in longintrepr.h) */
    Py_ssize_t size = Py_SIZE(v);
    if (size == 0)
        return w_byte(b, 0);
    if (size == 1)
        return w_uint(b, ((PyLongObject *)v)->ob_digit[0]);
    if (size == -1)
        return w_int(b, -(int64_t)((PyLongObject *)v)->ob_digit[0]);
    if (size == 2 || size == -2) { /* below 2**60: addresses, sizes, offsets */
        const digit *d = ((PyLongObject *)v)->ob_digit;
        int64_t x = (int64_t)d[0] | ((int64_t)d[1] << PyLong_SHIFT);
        return w_int(b, size > 0 ? x : -x);
    }
#endif
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0) {
        if (x == -1 && PyErr_Occurred())
            return -1;
        return w_int(b, x);
    }
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred()))
            return w_head(b, MP_UINT64, u, 8);
        PyErr_Clear();
    }
    PyErr_SetString(PyExc_OverflowError, "can't serialize ints < -2**63 or > 2**64 - 1");
    return -1;
}

static int w_float(Buf *b, PyObject *v)
{
    double d = PyFloat_AS_DOUBLE(v);
    uint64_t bits;
    memcpy(&bits, &d, 8);
    return w_head(b, MP_FLOAT64, bits, 8);
}

static inline int type_bit(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyLong_Type)
        return M_INT;
    if (t == &PyUnicode_Type)
        return M_STR;
    if (v == Py_None)
        return M_NONE;
    if (t == &PyFloat_Type)
        return M_FLOAT;
    if (t == &PyBool_Type)
        return M_BOOL;
    if (t == &PyBytes_Type)
        return M_BYTES;
    return 0;
}

/* An int MessagePack holds: -2**63 <= v < 2**64. */
static int int_fits(PyObject *v)
{
#if CKPT_LONG_311
    Py_ssize_t size = Py_SIZE(v); /* signed count of 30-bit digits */
    if (size >= -2 && size <= 2)
        return 1;
#elif CKPT_LONG_COMPACT
    if (PyUnstable_Long_IsCompact((PyLongObject *)v))
        return 1;
#endif
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    (void)x;
    if (!overflow)
        return 1;
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred()))
            return 1;
    }
    PyErr_Clear();
    return 0;
}

/* type_bit for a value the compact form takes as is: ints must fit 64 bits. */
static inline int fit_bit(PyObject *v)
{
    int bit = type_bit(v);
    if (bit == M_INT && !int_fits(v))
        return 0;
    return bit;
}

static int w_scalar(Buf *b, PyObject *v, int bit)
{
    switch (bit) {
    case M_INT:
        return w_long(b, v);
    case M_STR:
        return w_str(b, v);
    case M_NONE:
        return w_byte(b, MP_NIL);
    case M_FLOAT:
        return w_float(b, v);
    case M_BOOL:
        return w_byte(b, v == Py_True ? MP_TRUE : MP_FALSE);
    case M_BYTES:
        return w_bin(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    }
    PyErr_SetString(PyExc_SystemError, "ckpt native: bad scalar");
    return -1;
}

/* Hand a value this writer does not cover (or one nested too deep) to msgspec; its
 * encoding of a sub-value is exactly its bytes inside the whole payload. */
static int w_msgspec(Buf *b, PyObject *v)
{
    CkptState *st = ckpt_state(); /* values C does not write: a rare path */
    if (!st)
        return -1;
    if (!st->encode) {
        PyErr_SetString(PyExc_RuntimeError, "ckpt native: not configured");
        return -1;
    }
    PyObject *enc = PyObject_CallOneArg(st->encode, v);
    if (!enc)
        return -1;
    int r = w_raw(b, PyBytes_AS_STRING(enc), PyBytes_GET_SIZE(enc));
    Py_DECREF(enc);
    return r;
}

/* A wire value (what the typed engine's Python code would put in a row), as msgspec
 * would encode it. */
static int w_value(Buf *b, PyObject *v, int depth)
{
    int bit = type_bit(v);
    if (bit)
        return w_scalar(b, v, bit);
    if (depth >= MAX_DEPTH)
        return w_msgspec(b, v);
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyList_Type) {
        if (w_array(b, PyList_GET_SIZE(v)) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            PyObject *x = PyList_GET_ITEM(v, i);
            Py_INCREF(x);
            int r = w_value(b, x, depth + 1);
            Py_DECREF(x);
            if (r < 0)
                return -1;
        }
        return 0;
    }
    if (t == &PyTuple_Type) {
        if (w_array(b, PyTuple_GET_SIZE(v)) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
            if (w_value(b, PyTuple_GET_ITEM(v, i), depth + 1) < 0)
                return -1;
        return 0;
    }
    if (t == &PyDict_Type) {
        if (w_map(b, PyDict_GET_SIZE(v)) < 0)
            return -1;
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        while (PyDict_Next(v, &pos, &k, &x)) {
            Py_INCREF(k);
            Py_INCREF(x);
            int r = w_value(b, k, depth + 1);
            if (r == 0)
                r = w_value(b, x, depth + 1);
            Py_DECREF(k);
            Py_DECREF(x);
            if (r < 0)
                return -1;
        }
        return 0;
    }
    return w_msgspec(b, v);
}

#endif
