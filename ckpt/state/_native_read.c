/* The native engine's reader: the compact stream's rows decoded straight from the bytes.
 *
 * Why one file: it is one reader.  Every byte of input goes through the checked reads
 * defined at its top, and the cursor's invariants (what has been checked against the
 * bytes left) hold across split, shells and fill; spread over files, a read could be
 * added that does not go through them.
 *
 * Without it, msgspec decodes the whole payload into Python lists first and C walks
 * those; here `split` finds the nine top-level items (and each type's rows) with one
 * structural pass, `shells` creates every object from the type_seq bytes, and `fill`
 * decodes each row's values where they lie, storing them into the objects at once.
 *
 * Hardening: every length and count is checked against the bytes that remain before
 * anything is allocated (an array of n items needs at least n bytes, a map 2n), ids are
 * checked against the object count, and nothing that input controls drives C
 * recursion beyond MAX_DEPTH: deeper values, maps with non-scalar keys and
 * extension types are handed to msgspec (a Python callable given by `read_configure`),
 * exactly as the whole payload used to be.  A value whose shape the field's fast path
 * does not take is decoded to the Python value msgspec would give and passed to the
 * typed engine's own load expression for that field, so errors are the typed engine's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "_native_compat.h"
#include "_native_read.h"
#include <datetime.h>


/* ---- the MessagePack reader ------------------------------------------------------------ */

typedef struct {
    const uint8_t *base, *p, *end;
} Rd;

enum { V_NIL, V_FALSE, V_TRUE, V_UINT, V_INT, V_FLOAT, V_STR, V_BIN, V_ARRAY, V_MAP, V_EXT };

typedef struct {
    int kind;
    uint64_t u; /* V_UINT */
    int64_t i;  /* V_INT */
    double f;   /* V_FLOAT */
    const uint8_t *data;
    Py_ssize_t n; /* bytes (str, bin, ext) or items (array, map) */
} Val;

/* StateError (this interpreter's, from read_configure), or NULL with an error set. */
static PyObject *state_error(void)
{
    CkptState *st = ckpt_state();
    if (st && !st->state_error)
        PyErr_SetString(PyExc_RuntimeError, "ckpt native: reader not configured");
    return st ? st->state_error : NULL;
}

static int rd_fail(Rd *r, const char *what)
{
    PyObject *err = state_error();
    if (!err)
        return -1;
    PyErr_Format(err, "state stream payload is malformed: %s at payload offset %zd", what,
                 (Py_ssize_t)(r->p - r->base));
    return -1;
}

static inline uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* The checked readers: every byte of the input is read through one of these four, which
 * never read or move past r->end (but for rd_skip and rd_quick, the two hottest loops,
 * which keep their own cursor and check each length the same way: see there). */

/* Take `n` bytes (a length field or a payload) if the input has them. */
static inline const uint8_t *take(Rd *r, Py_ssize_t n)
{
    if ((size_t)n > (size_t)(r->end - r->p)) /* a negative n too */
        return NULL;
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

/* Take one byte: its value, or -1 at the end. */
static inline int take_byte(Rd *r)
{
    return r->p < r->end ? *r->p++ : -1;
}

/* The next byte without taking it: its value, or -1 at the end. */
static inline int peek(const Rd *r)
{
    return r->p < r->end ? *r->p : -1;
}

/* Take the next `n` bytes if they are exactly `s`: 1, else 0 with nothing taken. */
static inline int take_if(Rd *r, const uint8_t *s, Py_ssize_t n)
{
    if (n > r->end - r->p || memcmp(r->p, s, (size_t)n) != 0)
        return 0;
    r->p += n;
    return 1;
}

/* Read one value's header.  Strings, binaries and extensions are consumed whole (data,
 * n); for arrays and maps n is the item count, checked against the bytes that remain,
 * and r->p is left at the first item. */
static int rd_head(Rd *r, Val *v)
{
    const uint8_t *q;
    int c = take_byte(r);
    if (c < 0)
        return rd_fail(r, "truncated");
    int lb = 0; /* bytes of a length field */
    if (c <= 0x7f) {
        v->kind = V_UINT, v->u = c;
        return 0;
    }
    if (c >= 0xe0) {
        v->kind = V_INT, v->i = (int8_t)c;
        return 0;
    }
    if (c <= 0x8f) {
        v->kind = V_MAP, v->n = c & 0x0f;
        goto count;
    }
    if (c <= 0x9f) {
        v->kind = V_ARRAY, v->n = c & 0x0f;
        goto count;
    }
    if (c <= 0xbf) {
        v->kind = V_STR, v->n = c & 0x1f;
        goto bytes;
    }
    switch (c) {
    case MP_NIL:
        v->kind = V_NIL;
        return 0;
    case MP_FALSE:
        v->kind = V_FALSE;
        return 0;
    case MP_TRUE:
        v->kind = V_TRUE;
        return 0;
    case 0xc4: case 0xc5: case 0xc6:
        lb = 1 << (c - 0xc4);
        v->kind = V_BIN;
        goto sized;
    case 0xd9: case 0xda: case 0xdb:
        lb = 1 << (c - 0xd9);
        v->kind = V_STR;
        goto sized;
    case 0xc7: case 0xc8: case 0xc9:
        lb = 1 << (c - 0xc7);
        if (!(q = take(r, lb)))
            return rd_fail(r, "truncated");
        v->kind = V_EXT, v->n = (Py_ssize_t)be(q, lb) + 1; /* with the type byte */
        goto bytes;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        v->kind = V_EXT, v->n = ((Py_ssize_t)1 << (c - 0xd4)) + 1;
        goto bytes;
    case 0xca: case 0xcb: {
        int n = c == 0xca ? 4 : 8;
        if (!(q = take(r, n)))
            return rd_fail(r, "truncated");
        uint64_t bits = be(q, n);
        v->kind = V_FLOAT;
        if (n == 4) {
            uint32_t b32 = (uint32_t)bits;
            float fl;
            memcpy(&fl, &b32, 4);
            v->f = fl;
        }
        else
            memcpy(&v->f, &bits, 8);
        return 0;
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        int n = 1 << (c - 0xcc);
        if (!(q = take(r, n)))
            return rd_fail(r, "truncated");
        v->kind = V_UINT, v->u = be(q, n);
        return 0;
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int n = 1 << (c - 0xd0);
        if (!(q = take(r, n)))
            return rd_fail(r, "truncated");
        uint64_t u = be(q, n);
        int64_t i;
        if (n == 1)
            i = (int8_t)u;
        else if (n == 2)
            i = (int16_t)u;
        else if (n == 4)
            i = (int32_t)u;
        else
            memcpy(&i, &u, 8);
        v->kind = V_INT, v->i = i;
        return 0;
    }
    case 0xdc: case 0xdd:
        lb = c == 0xdc ? 2 : 4;
        if (!(q = take(r, lb)))
            return rd_fail(r, "truncated");
        v->kind = V_ARRAY, v->n = (Py_ssize_t)be(q, lb);
        goto count;
    case 0xde: case 0xdf:
        lb = c == 0xde ? 2 : 4;
        if (!(q = take(r, lb)))
            return rd_fail(r, "truncated");
        v->kind = V_MAP, v->n = (Py_ssize_t)be(q, lb);
        goto count;
    }
    r->p--;
    return rd_fail(r, "invalid MessagePack byte");
sized:
    if (!(q = take(r, lb)))
        return rd_fail(r, "truncated");
    v->n = (Py_ssize_t)be(q, lb);
bytes:
    if (!(v->data = take(r, v->n)))
        return rd_fail(r, "truncated (a length runs past the end)");
    return 0;
count:
    /* every item takes at least one byte: a count the input cannot hold is refused
     * before anything is allocated for it */
    if (v->n > (r->end - r->p) / (v->kind == V_MAP ? 2 : 1))
        return rd_fail(r, "truncated (a count runs past the end)");
    return 0;
}

/* Skip n values, iteratively, with the common one-byte headers first.  The one hot
 * loop that keeps its own cursor (every advance checked against the bytes left, as in
 * take): through take/take_byte it cost 0.6M more instructions on FlatLoad's split.  The pending
 * count never exceeds the bytes that remain (each pending value needs one), so it
 * cannot overflow and a count the input cannot hold fails at once. */
static int rd_skip(Rd *r, Py_ssize_t n)
{
    const uint8_t *p = r->p, *end = r->end;
    while (n > 0) {
        if (p >= end)
            goto truncated;
        uint8_t c = *p++;
        n--;
        Py_ssize_t more = 0, len = 0;
        if (c <= MP_POSFIX_MAX || c >= MP_NEGFIX_MIN || c == MP_NIL || c == MP_FALSE ||
            c == MP_TRUE)
            continue;
        if (c < MP_FIXARRAY)
            more = 2 * (c & 0x0f);
        else if (c < MP_FIXSTR)
            more = c & 0x0f;
        else if (c < MP_NIL)
            len = c & 0x1f;
        else {
            int lb;
            switch (c) {
            case MP_UINT8: case MP_INT8: len = 1; break;
            case MP_UINT16: case MP_INT16: len = 2; break;
            case MP_FLOAT32: case MP_UINT32: case MP_INT32: len = 4; break;
            case MP_FLOAT64: case MP_UINT64: case MP_INT64: len = 8; break;
            case MP_FIXEXT1: len = 2; break;
            case MP_FIXEXT1 + 1: len = 3; break;
            case MP_FIXEXT1 + 2: len = 5; break;
            case MP_FIXEXT1 + 3: len = 9; break;
            case MP_FIXEXT16: len = 17; break;
            case MP_BIN8: case MP_STR8: case MP_EXT8: lb = 1; goto sized;
            case MP_BIN16: case MP_STR16: case MP_EXT16: lb = 2; goto sized;
            case MP_BIN32: case MP_STR32: case MP_EXT32: lb = 4; goto sized;
            case MP_ARRAY16: lb = 2; goto counted;
            case MP_ARRAY32: lb = 4; goto counted;
            case MP_MAP16: lb = 2; goto counted;
            case MP_MAP32: lb = 4; goto counted;
            default:
                r->p = p - 1;
                return rd_fail(r, "invalid MessagePack byte");
            }
            goto advance;
        sized:
            if (end - p < lb)
                goto truncated;
            len = (Py_ssize_t)be(p, lb) + (c >= MP_EXT8 && c <= MP_EXT32); /* ext: + type byte */
            p += lb;
            goto advance;
        counted:
            if (end - p < lb)
                goto truncated;
            more = (Py_ssize_t)be(p, lb) * (c >= MP_MAP16 ? 2 : 1);
            p += lb;
        }
        if (more) {
            if (more > (end - p) - n)
                goto truncated;
            n += more;
            continue;
        }
    advance:
        if (len > end - p)
            goto truncated;
        p += len;
    }
    r->p = p;
    return 0;
truncated:
    r->p = p;
    return rd_fail(r, "truncated (a length or count runs past the end)");
}

/* The value at r->p decoded by msgspec (maps with non-scalar keys, extensions, values
 * nested deeper than MAX_DEPTH): what the whole-payload decode gave before. */
static PyObject *rd_slow(Rd *r)
{
    const uint8_t *start = r->p;
    if (rd_skip(r, 1) < 0)
        return NULL;
    PyObject *mv = PyMemoryView_FromMemory((char *)start, r->p - start, PyBUF_READ);
    if (!mv)
        return NULL;
    CkptState *st = ckpt_state();
    PyObject *v = st ? PyObject_CallOneArg(st->slice_decode, mv) : NULL;
    Py_DECREF(mv);
    return v;
}

static inline int is_container_byte(uint8_t c)
{
    return (c >= 0x80 && c <= 0x9f) || c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf;
}

static inline int is_ext_byte(uint8_t c)
{
    return (c >= 0xc7 && c <= 0xc9) || (c >= 0xd4 && c <= 0xd8);
}

/* Whether the value at r->p is an array, a map or an extension: what msgspec, not a
 * plain-value fast path, must decode where a scalar is expected. */
static inline int next_is_composite(const Rd *r)
{
    int c = peek(r);
    return c >= 0 && (is_container_byte((uint8_t)c) || is_ext_byte((uint8_t)c));
}

/* A string, ASCII the quick way (what msgspec does too), else strict UTF-8. */
static inline PyObject *rd_str(const uint8_t *data, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (data[i] & 0x80)
            return PyUnicode_DecodeUTF8((const char *)data, n, NULL);
    PyObject *u = PyUnicode_New(n, 127);
    if (u)
        memcpy(PyUnicode_DATA(u), data, n);
    return u;
}

static PyObject *scalar(const Val *v)
{
    switch (v->kind) {
    case V_NIL:
        Py_RETURN_NONE;
    case V_FALSE:
        Py_RETURN_FALSE;
    case V_TRUE:
        Py_RETURN_TRUE;
    case V_UINT:
        return PyLong_FromUnsignedLongLong(v->u);
    case V_INT:
        return PyLong_FromLongLong(v->i);
    case V_FLOAT:
        return PyFloat_FromDouble(v->f);
    case V_STR:
        return rd_str(v->data, v->n);
    case V_BIN:
        return PyBytes_FromStringAndSize((const char *)v->data, v->n);
    }
    PyErr_SetString(PyExc_SystemError, "ckpt native: not a scalar");
    return NULL;
}

/* The common scalars without the general header decoder: a new reference, or NULL
 * with no error set (and r->p unchanged) for anything else.  Hot enough to keep its own
 * cursor (each length checked against `left` before r->p moves): through the checked
 * readers it cost 0.14M more instructions on FlatLoad. */
static inline PyObject *rd_quick(Rd *r)
{
    const uint8_t *p = r->p;
    Py_ssize_t left = r->end - p;
    if (left <= 0)
        return NULL;
    uint8_t c = *p;
    if (c <= MP_POSFIX_MAX) {
        r->p = p + 1;
        return PyLong_FromLong(c);
    }
    if (c >= MP_NEGFIX_MIN) {
        r->p = p + 1;
        return PyLong_FromLong((int8_t)c);
    }
    if (c >= MP_FIXSTR && c < MP_NIL) {
        Py_ssize_t n = c & 0x1f;
        if (n >= left)
            return NULL;
        r->p = p + 1 + n;
        return rd_str(p + 1, n);
    }
    switch (c) {
    case MP_NIL:
        r->p = p + 1;
        Py_RETURN_NONE;
    case MP_FALSE:
        r->p = p + 1;
        Py_RETURN_FALSE;
    case MP_TRUE:
        r->p = p + 1;
        Py_RETURN_TRUE;
    case MP_STR8: {
        if (left < 2 || p[1] > left - 2)
            return NULL;
        r->p = p + 2 + p[1];
        return rd_str(p + 2, p[1]);
    }
    case MP_FLOAT64: {
        if (left < 9)
            return NULL;
        uint64_t bits = be(p + 1, 8);
        double d;
        memcpy(&d, &bits, 8);
        r->p = p + 9;
        return PyFloat_FromDouble(d);
    }
    case MP_UINT8:
    case MP_UINT16:
    case MP_UINT32: {
        int n = 1 << (c - MP_UINT8);
        if (left < 1 + n)
            return NULL;
        r->p = p + 1 + n;
        return PyLong_FromUnsignedLong((unsigned long)be(p + 1, n));
    }
    }
    return NULL;
}

/* One value as the Python object msgspec decodes it to.  Recursion is bounded by
 * MAX_DEPTH; deeper values go to msgspec, which has its own limit. */
static PyObject *rd_obj(Rd *r, int depth)
{
    const uint8_t *start = r->p;
    PyObject *q = rd_quick(r);
    if (q || PyErr_Occurred())
        return q;
    if (peek(r) >= 0 && is_ext_byte((uint8_t)peek(r)))
        return rd_slow(r);
    Val v;
    if (rd_head(r, &v) < 0)
        return NULL;
    if (v.kind == V_ARRAY) {
        if (depth >= MAX_DEPTH) {
            r->p = start;
            return rd_slow(r);
        }
        PyObject *list = PyList_New(v.n);
        if (!list)
            return NULL;
        for (Py_ssize_t i = 0; i < v.n; i++) {
            PyObject *x = rd_obj(r, depth + 1);
            if (!x) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, i, x);
        }
        return list;
    }
    if (v.kind == V_MAP) {
        if (depth >= MAX_DEPTH) {
            r->p = start;
            return rd_slow(r);
        }
        PyObject *d = PyDict_New();
        if (!d)
            return NULL;
        for (Py_ssize_t i = 0; i < v.n; i++) {
            if (next_is_composite(r)) {
                /* a key msgspec turns into a tuple (or worse): let it decide */
                Py_DECREF(d);
                r->p = start;
                return rd_slow(r);
            }
            PyObject *k = rd_obj(r, depth + 1);
            if (!k) {
                Py_DECREF(d);
                return NULL;
            }
            PyObject *x = rd_obj(r, depth + 1);
            if (!x) {
                Py_DECREF(k);
                Py_DECREF(d);
                return NULL;
            }
            int rc = PyDict_SetItem(d, k, x);
            Py_DECREF(k);
            Py_DECREF(x);
            if (rc < 0) {
                Py_DECREF(d);
                return NULL;
            }
        }
        return d;
    }
    return scalar(&v);
}

/* ---- fill plans (the tuples native._load_plan builds; ops as in _native.c) ------------- */

/* One node of an element program (L_ELEM), parsed from native._elem_prog's tuples. */
typedef struct ENode {
    int ek;     /* EK_* */
    int build;  /* EK_SEQ: what the items are built into (B_*) */
    int n;      /* nodes below: EK_TUPLE's arity; 1 for EK_OPT and EK_SEQ, 2 for EK_DICT */
    PyObject *arg; /* EK_ENUM: value -> member (borrowed from the plan) */
    struct ENode *kid[MAX_TUPLE_ITEMS];
} ENode;

typedef struct {
    PyObject *name;
    Py_ssize_t src;
    int op, build;
    PyObject *zero;
    int zero_call;
    PyObject *arg;
    PyObject *slot;
    int vk;            /* L_VALUE: which value type (VK_*); L_SEQ_TUPLE: the tuples' arity */
    PyObject *vcls;    /* L_VALUE, VK_UUID: uuid.UUID (borrowed from arg) */
    PyObject *vextra;  /* L_VALUE, VK_UUID: uuid.SafeUUID.unknown (borrowed) */
    int escapes;       /* the type holds slot escapes: a scalar slot may be one */
    ENode *prog;       /* L_ELEM: its program's nodes (prog[0] the root), owned */
} LField;

static inline PyObject *ref_get(PyObject *objs, PyObject *raw)
{
    if (PyLong_CheckExact(raw)) {
        Py_ssize_t i = PyLong_AsSsize_t(raw);
        if (i >= 0 && i < PyList_GET_SIZE(objs))
            return Py_NewRef(PyList_GET_ITEM(objs, i));
        PyErr_Clear();
    }
    return NULL;
}

static PyObject *call_slot(LField *f, PyObject *raw, PyObject *ctx)
{
    return PyObject_CallFunctionObjArgs(f->slot, raw, ctx, NULL);
}

static PyObject *make_zero(int how, PyObject *zero)
{
    switch (how) {
    case 0:
        return Py_NewRef(zero);
    case 2:
        return PyList_New(0);
    case 3:
        return PyDict_New();
    case 4:
        return PySet_New(NULL);
    }
    return PyObject_CallNoArgs(zero);
}

static PyObject *zero_of(LField *f)
{
    return make_zero(f->zero_call, f->zero);
}

static PyObject *refs_list(PyObject *objs, PyObject *raw)
{
    Py_ssize_t n = PyList_GET_SIZE(raw);
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = ref_get(objs, PyList_GET_ITEM(raw, i));
        if (!o) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, o);
    }
    return out;
}

/* Steals `list`. */
static PyObject *build_from(int build, PyObject *list)
{
    PyObject *r;
    switch (build) {
    case B_SET:
        r = PySet_New(list);
        break;
    case B_FROZENSET:
        r = PyFrozenSet_New(list);
        break;
    case B_TUPLE:
        r = PyList_AsTuple(list);
        break;
    default:
        return list;
    }
    Py_DECREF(list);
    return r;
}

static int plain_items(PyObject *list)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyTypeObject *t = Py_TYPE(PyList_GET_ITEM(list, i));
        if (t == &PyDict_Type || t == &PyList_Type)
            return 0;
    }
    return 1;
}

/* A field's value from its decoded wire value `raw` (owned by the caller, fresh: this
 * reader made it, so it may be returned as the value itself).  The same choices as
 * _native.c's load_value, which mirror the typed engine's load expressions; any shape
 * they do not take is the typed engine's own decoder for the field. */
static PyObject *value_of(LField *f, PyObject *raw, PyObject *objs, PyObject *ctx)
{
    PyTypeObject *t = Py_TYPE(raw);
    switch (f->op) {
    case L_RAW:
        if (t != &PyDict_Type)
            return Py_NewRef(raw);
        break;
    case L_NONE_ZERO:
        if (raw == Py_None)
            return zero_of(f);
        if (t != &PyDict_Type && (t != &PyList_Type || plain_items(raw)))
            return Py_NewRef(raw);
        break;
    case L_FALSY_ZERO:
        if (raw == Py_None || raw == Py_False ||
            (t == &PyUnicode_Type && PyUnicode_GET_LENGTH(raw) == 0) ||
            (t == &PyBytes_Type && PyBytes_GET_SIZE(raw) == 0))
            return zero_of(f);
        if (t == &PyUnicode_Type || t == &PyBytes_Type || raw == Py_True)
            return Py_NewRef(raw);
        break;
    case L_TUPLE:
        if (raw == Py_None)
            return zero_of(f);
        if (t == &PyList_Type && plain_items(raw))
            return PyList_AsTuple(raw);
        break;
    case L_REF: {
        PyObject *o = ref_get(objs, raw);
        if (o)
            return o;
        break;
    }
    case L_ANY:
        if (t != &PyDict_Type && t != &PyList_Type)
            return Py_NewRef(raw);
        if (t == &PyList_Type) {
            if (plain_items(raw))
                return Py_NewRef(raw); /* fresh: no copy needed */
            break;
        }
        if (PyDict_GET_SIZE(raw) == 1) {
            Py_ssize_t pos = 0;
            PyObject *k, *v;
            PyDict_Next(raw, &pos, &k, &v);
            if (PyLong_CheckExact(k)) {
                long tag = PyLong_AsLong(k);
                if (tag == 0) {
                    PyObject *o = ref_get(objs, v);
                    if (o)
                        return o;
                }
                else if (tag == 1 && PyList_CheckExact(v) && plain_items(v))
                    return PyList_AsTuple(v);
            }
            PyErr_Clear();
        }
        break;
    case L_ENUM:
        if (t != &PyDict_Type && t != &PyList_Type) {
            PyObject *m = PyDict_GetItemWithError(f->arg, raw);
            if (m)
                return Py_NewRef(m);
            PyErr_Clear();
        }
        break;
    case L_SEQ_REF:
        if (raw == Py_None)
            return zero_of(f);
        if (t == &PyList_Type) {
            PyObject *l = refs_list(objs, raw);
            if (l)
                return build_from(f->build, l);
            if (PyErr_Occurred())
                return NULL;
        }
        break;
    case L_SEQ:
        if (raw == Py_None)
            return zero_of(f);
        if (t == &PyList_Type && plain_items(raw))
            return build_from(f->build, Py_NewRef(raw));
        break;
    case L_DICT:
    case L_DICT_REF:
        if (raw == Py_None)
            return zero_of(f);
        if (t == &PyList_Type && PyList_GET_SIZE(raw) == 2) {
            PyObject *keys = PyList_GET_ITEM(raw, 0), *vals = PyList_GET_ITEM(raw, 1);
            if (!PyList_CheckExact(keys) || !PyList_CheckExact(vals) ||
                PyList_GET_SIZE(keys) != PyList_GET_SIZE(vals) || !plain_items(keys))
                break;
            if (f->op == L_DICT && !plain_items(vals))
                break;
            PyObject *d = dict_presized(PyList_GET_SIZE(keys));
            if (!d)
                return NULL;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
                PyObject *v = PyList_GET_ITEM(vals, i);
                if (f->op == L_DICT_REF) {
                    v = ref_get(objs, v);
                    if (!v) {
                        Py_DECREF(d);
                        goto slow;
                    }
                }
                else
                    Py_INCREF(v);
                int rc = PyDict_SetItem(d, PyList_GET_ITEM(keys, i), v);
                Py_DECREF(v);
                if (rc < 0) {
                    Py_DECREF(d);
                    return NULL; /* an unhashable key: typed raises the same TypeError */
                }
            }
            return d;
        }
        break;
    case L_SEQ_TUPLE:
        if (raw == Py_None)
            return zero_of(f);
        break;
    case L_SAVE:
        if (t != &PyDict_Type && (t != &PyList_Type || plain_items(raw)))
            return PyObject_CallOneArg(f->arg, raw);
        break;
    }
slow:
    return call_slot(f, raw, ctx);
}

/* An unsigned id at r->p below `limit`: its value, else -1 with r->p unchanged. */
static inline Py_ssize_t rd_id(Rd *r, Py_ssize_t limit)
{
    const uint8_t *start = r->p, *q;
    int c = take_byte(r);
    uint64_t u;
    if (c >= 0 && c <= MP_POSFIX_MAX)
        u = (uint64_t)c;
    else if (c >= MP_UINT8 && c <= MP_UINT64 && (q = take(r, 1 << (c - MP_UINT8))))
        u = be(q, 1 << (c - MP_UINT8));
    else
        goto other;
    if (u < (uint64_t)limit)
        return (Py_ssize_t)u;
other:
    r->p = start;
    return -1;
}

/* The tuple of an array of plain values (no list, dict or extension among them), read
 * straight into the tuple: what value_of makes of the decoded list, without the list.
 * NULL with r->p unchanged and no error set when the value is not such an array; NULL
 * with an error for a malformed head (the general path would fail on it the same way). */
static PyObject *rd_plain_tuple(Rd *r)
{
    const uint8_t *start = r->p;
    Val v;
    if (rd_head(r, &v) < 0)
        return NULL;
    if (v.kind != V_ARRAY) {
        r->p = start;
        return NULL;
    }
    PyObject *t = PyTuple_New(v.n); /* rd_head checked the count against the bytes left */
    if (!t)
        return NULL;
    for (Py_ssize_t i = 0; i < v.n; i++) {
        if (next_is_composite(r)) {
            Py_DECREF(t);
            r->p = start;
            return NULL;
        }
        PyObject *x = rd_obj(r, 1);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* The id of a self-describing reference {0: id} at r->p, below `limit`: its value, else
 * -1 with r->p unchanged. */
static inline Py_ssize_t rd_any_ref(Rd *r, Py_ssize_t limit)
{
    static const uint8_t ref_head[2] = {MP_FIXMAP | 1, TAG_REF};
    const uint8_t *start = r->p;
    if (!take_if(r, ref_head, 2))
        return -1;
    Py_ssize_t i = rd_id(r, limit);
    if (i < 0)
        r->p = start;
    return i;
}

/* ---- looking ahead (large loads) ------------------------------------------------------
 * Past the caches, nearly all of fill's own time is the reference count of each object a
 * reference names: Py_NewRef on an object anywhere in the graph, a cache and TLB miss.
 * A second cursor reads the row AHEAD_ROWS ahead of the one being filled and
 * prefetches, for writing, the objects its reference fields name, so those misses are
 * under way when the row is filled.  It only reads and prefetches: a row it cannot
 * read stops it, and fill meets and reports the same bytes itself. */
#define AHEAD_ROWS 8
static Py_ssize_t load_ahead_min = 65536; /* objects; below it the graph stays cached */

typedef struct {
    Rd r;
    const uint8_t *ops; /* per stream column: L_REF, L_SEQ_REF, L_ANY, or 0 (skip) */
    Py_ssize_t nrow, left; /* columns per row; rows of this type not yet read ahead */
} Ahead;

static inline void ahead_touch(PyObject *objs, Py_ssize_t i)
{
    __builtin_prefetch(PyList_GET_ITEM(objs, i), 1, 3);
}

/* Read one row ahead; 0 once there is none left or it cannot be read (no error set). */
static int ahead_row(Ahead *a, PyObject *objs)
{
    if (a->left <= 0)
        return 0;
    a->left--;
    Py_ssize_t nobjs = PyList_GET_SIZE(objs);
    Val h;
    if (rd_head(&a->r, &h) < 0 || h.kind != V_ARRAY || h.n != a->nrow)
        goto stop;
    for (Py_ssize_t k = 0; k < a->nrow; k++) {
        const uint8_t *s = a->r.p;
        Py_ssize_t i;
        switch (a->ops[k]) {
        case L_REF:
            if ((i = rd_id(&a->r, nobjs)) >= 0) {
                ahead_touch(objs, i);
                continue;
            }
            break;
        case L_ANY:
            if ((i = rd_any_ref(&a->r, nobjs)) >= 0) {
                ahead_touch(objs, i);
                continue;
            }
            break;
        case L_SEQ_REF: {
            Val v;
            int c = peek(&a->r);
            if (c >= 0 && is_container_byte((uint8_t)c) && rd_head(&a->r, &v) == 0 &&
                v.kind == V_ARRAY) {
                Py_ssize_t m = 0;
                for (; m < v.n && (i = rd_id(&a->r, nobjs)) >= 0; m++)
                    ahead_touch(objs, i);
                if (m == v.n)
                    continue;
            }
            PyErr_Clear();
            a->r.p = s;
            break;
        }
        }
        if (rd_skip(&a->r, 1) < 0)
            goto stop;
    }
    return 1;
stop:
    PyErr_Clear();
    a->left = 0;
    return 0;
}

/* One field's value, read from r->p (which ends just past the value). */
/* ---- stdlib values from their payload arrays ------------------------------------------ */

/* A MessagePack int at r->p that fits a C int: 0 and its value, else -1 (r->p unchanged,
 * no error: a bigger int or another type is the slot decoder's to judge). */
static inline int rd_cint(Rd *r, int *out)
{
    const uint8_t *start = r->p, *q;
    int c = take_byte(r);
    int64_t v;
    if (c < 0)
        goto other;
    if (c <= MP_POSFIX_MAX)
        v = c;
    else if (c >= MP_NEGFIX_MIN)
        v = (int8_t)c;
    else if (c >= MP_UINT8 && c <= MP_UINT32 && (q = take(r, 1 << (c - MP_UINT8))))
        v = (int64_t)be(q, 1 << (c - MP_UINT8));
    else if (c >= MP_INT8 && c <= MP_INT32 && (q = take(r, 1 << (c - MP_INT8)))) {
        int n = 1 << (c - MP_INT8);
        uint64_t u = be(q, n);
        v = n == 1 ? (int8_t)u : n == 2 ? (int16_t)u : (int32_t)u;
    }
    else
        goto other;
    if (v < INT_MIN || v > INT_MAX)
        goto other;
    *out = (int)v;
    return 0;
other:
    r->p = start;
    return -1;
}

/* `n` ints into out[], all or none. */
static inline int rd_cints(Rd *r, int *out, int n)
{
    const uint8_t *start = r->p;
    for (int i = 0; i < n; i++)
        if (rd_cint(r, &out[i]) < 0) {
            r->p = start;
            return -1;
        }
    return 0;
}

/* An array header of exactly `n` items (fixarray: every payload here is short). */
static inline int rd_fixarray(Rd *r, int n)
{
    const uint8_t head = (uint8_t)(MP_FIXARRAY | n);
    return take_if(r, &head, 1) ? 0 : -1;
}

/* A datetime's time zone as written by values._tz_plain: Nil, or ["utc"]; NULL for
 * any other (fixed offsets and zone names are the slot decoder's). Borrowed. */
static inline PyObject *rd_simple_tz(Rd *r)
{
    static const uint8_t nil = MP_NIL, utc[5] = {MP_FIXARRAY | 1, MP_FIXSTR | 3, 'u', 't', 'c'};
    if (take_if(r, &nil, 1))
        return Py_None;
    if (take_if(r, utc, 5))
        return PyDateTime_TimeZone_UTC;
    return NULL;
}

/* A field of a stdlib value type (values.py's datetime, date, timedelta and uuid
 * codecs), built from its payload array as the codec's from_plain builds it.  NULL
 * with no error and r->p unchanged for every other shape (Nil in a field that is not
 * Optional, escapes, time zones other than None and UTC, ints beyond a C int) and for
 * values the constructor refuses: the slot decoder then gives the typed engine's
 * value or its StateError. */
static PyObject *rd_value(LField *f, Rd *r)
{
    const uint8_t *start = r->p;
    int x[8];
    PyObject *v = NULL;
    static const uint8_t nil = MP_NIL, bin16[2] = {MP_BIN8, 16};
    if (f->build && take_if(r, &nil, 1)) /* Optional: Nil is None */
        Py_RETURN_NONE;
    switch (f->vk) {
    case VK_DATETIME: {
        if (rd_fixarray(r, 9) < 0 || rd_cints(r, x, 8) < 0)
            goto other;
        PyObject *tz = rd_simple_tz(r);
        if (!tz || (x[7] != 0 && x[7] != 1))
            goto other;
        v = PyDateTimeAPI->DateTime_FromDateAndTimeAndFold(
            x[0], x[1], x[2], x[3], x[4], x[5], x[6], tz, x[7], PyDateTimeAPI->DateTimeType);
        break;
    }
    case VK_DATE:
        if (rd_fixarray(r, 3) < 0 || rd_cints(r, x, 3) < 0)
            goto other;
        v = PyDateTimeAPI->Date_FromDate(x[0], x[1], x[2], PyDateTimeAPI->DateType);
        break;
    case VK_TIMEDELTA:
        /* only the normalised form to_plain writes: C-int normalising could overflow */
        if (rd_fixarray(r, 3) < 0 || rd_cints(r, x, 3) < 0 || x[0] < -999999999 ||
            x[0] > 999999999 || x[1] < 0 || x[1] >= 86400 || x[2] < 0 || x[2] >= 1000000)
            goto other;
        v = PyDateTimeAPI->Delta_FromDelta(x[0], x[1], x[2], 1, PyDateTimeAPI->DeltaType);
        break;
    case VK_UUID: {
        /* uuid.UUID(bytes=b) stores int.from_bytes(b, "big") and SafeUUID.unknown in
         * its two slots (object.__setattr__: the class refuses setattr) */
        const uint8_t *q;
        if (rd_fixarray(r, 1) < 0 || !take_if(r, bin16, 2) || !(q = take(r, 16)))
            goto other;
        PyObject *n = long_from_be16(q);
        if (!n)
            return NULL;
        CkptState *st = ckpt_state();
        v = st ? PyBaseObject_Type.tp_new((PyTypeObject *)f->vcls, st->no_args, NULL) : NULL;
        if (v && (PyObject_GenericSetAttr(v, st->str_int, n) < 0 ||
                  PyObject_GenericSetAttr(v, st->str_is_safe, f->vextra) < 0))
            Py_CLEAR(v);
        Py_DECREF(n);
        return v;
    }
    default:
        goto other;
    }
    if (!v && (PyErr_ExceptionMatches(PyExc_ValueError) ||
               PyErr_ExceptionMatches(PyExc_OverflowError)))
        PyErr_Clear(); /* out of range: the slot decoder says so in its own words */
    else
        return v;
other:
    r->p = start;
    return NULL;
}

/* list[tuple[A, B, ...]] of scalars: an array of arrays of exactly `arity` items, none
 * of them an array, a map or an extension, as a list of tuples (each item as msgspec
 * decodes it, which is what typed's per-item decoder keeps); NULL with no error and
 * r->p unchanged for any other shape. */
static PyObject *rd_tuple_list(Rd *r, int arity)
{
    const uint8_t *start = r->p;
    if (peek(r) < 0 || !is_container_byte((uint8_t)peek(r)))
        return NULL;
    Val h;
    if (rd_head(r, &h) < 0 || h.kind != V_ARRAY) {
        PyErr_Clear(); /* the slow path reads it again and reports it */
        r->p = start;
        return NULL;
    }
    PyObject *out = PyList_New(h.n); /* h.n is checked against the bytes that remain */
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < h.n; k++) {
        if (rd_fixarray(r, arity) < 0)
            goto other;
        PyObject *t = PyTuple_New(arity);
        if (!t)
            goto fail;
        PyList_SET_ITEM(out, k, t);
        for (int j = 0; j < arity; j++) {
            if (next_is_composite(r))
                goto other;
            PyObject *x = rd_obj(r, 0); /* a scalar: no recursion */
            if (!x)
                goto fail;
            PyTuple_SET_ITEM(t, j, x);
        }
    }
    return out;
other:
    Py_DECREF(out);
    r->p = start;
    return NULL;
fail:
    Py_DECREF(out);
    return NULL;
}

/* A dict field's [[keys], [values]] read straight into the dict (plain keys; plain values
 * for L_DICT, ids below the object count for L_DICT_REF): what value_of makes of the
 * two decoded lists, without them (Decoding/map spent a quarter of its instructions
 * building and checking those lists).  NULL with r->p unchanged and no error set for
 * any other shape, and for bytes it cannot read: the general path then reads them and
 * reports what it finds. */
static PyObject *rd_dict(LField *f, Rd *r, Py_ssize_t nobjs, PyObject *objs)
{
    const uint8_t *start = r->p;
    Val kh, vh;
    PyObject *d = NULL, **keys = NULL;
    Py_ssize_t nkeys = 0;
    static const uint8_t pair = MP_FIXARRAY | 2;
    if (!take_if(r, &pair, 1))
        return NULL;
    if (peek(r) < 0 || !is_container_byte((uint8_t)peek(r))) {
        r->p = start;
        return NULL;
    }
    if (rd_head(r, &kh) < 0 || kh.kind != V_ARRAY)
        goto other;
    /* rd_head checked the count against the bytes left: at most one key a byte */
    keys = PyMem_Malloc((size_t)(kh.n ? kh.n : 1) * sizeof(PyObject *));
    if (!keys)
        goto other;
    for (; nkeys < kh.n; nkeys++) {
        if (next_is_composite(r) || !(keys[nkeys] = rd_obj(r, 0))) /* a scalar: no recursion */
            goto other;
    }
    if (peek(r) < 0 || !is_container_byte((uint8_t)peek(r)) || rd_head(r, &vh) < 0 ||
        vh.kind != V_ARRAY || vh.n != kh.n || !(d = dict_presized(kh.n)))
        goto other;
    for (Py_ssize_t i = 0; i < kh.n; i++) {
        PyObject *v;
        if (f->op == L_DICT_REF) {
            Py_ssize_t id = rd_id(r, nobjs);
            v = id < 0 ? NULL : Py_NewRef(PyList_GET_ITEM(objs, id));
        }
        else
            v = next_is_composite(r) ? NULL : rd_obj(r, 0);
        int rc = v ? PyDict_SetItem(d, keys[i], v) : -1;
        Py_XDECREF(v);
        if (rc < 0)
            goto other;
    }
    for (Py_ssize_t i = 0; i < nkeys; i++)
        Py_DECREF(keys[i]);
    PyMem_Free(keys);
    return d;
other:
    PyErr_Clear();
    for (Py_ssize_t i = 0; i < nkeys; i++)
        Py_DECREF(keys[i]);
    PyMem_Free(keys);
    Py_XDECREF(d);
    r->p = start;
    return NULL;
}

/* An int beyond 64 bits as the typed engine's dyn decoder makes it of {T_BIGINT:
 * "decimal"} (int(str)), or of a scalar slot's escape {T_SLOT: {T_BIGINT: "decimal"}}
 * (`slot`); NULL with no error and r->p unchanged for any other bytes, and for a string
 * int() refuses (the slot decoder then says so in its own words). */
static PyObject *rd_bigint(Rd *r, int slot)
{
    static const uint8_t head[4] = {MP_FIXMAP | 1, TAG_SLOT, MP_FIXMAP | 1, TAG_BIGINT};
    const uint8_t *start = r->p;
    Val v;
    if (!take_if(r, slot ? head : head + 2, slot ? 4 : 2))
        return NULL;
    PyObject *s = NULL, *n = NULL;
    if (rd_head(r, &v) == 0 && v.kind == V_STR && (s = rd_str(v.data, v.n)))
        n = PyLong_FromUnicodeObject(s, 10);
    Py_XDECREF(s);
    if (!n) {
        PyErr_Clear();
        r->p = start;
    }
    return n;
}


/* ---- element programs (L_ELEM) --------------------------------------------------------
 * A field whose kind nests (tuple[Ref, int], list[Any], dict[Ref, int], Optional[Enum],
 * list[tuple[Ref, Ref]], bytearray, ...) is read by walking its program, a tree of EK_*
 * nodes as deep as its annotation (native._elem_prog): each node takes only the wire
 * shape codegen.elem_decoder's decoder for it takes as that value.  Any other shape, and
 * any failure on the way, leaves the whole field to the slot decoder (read_field rewinds
 * and clears), so values and errors are the typed engine's.  Recursion follows the
 * program, never the input: a self-describing (EK_ANY) value is taken only one array
 * deep. */

static const uint8_t nil_byte = MP_NIL;

/* An array's head at r->p: its item count, or -1 for any other value. */
static inline Py_ssize_t rd_array(Rd *r)
{
    Val v;
    int c = peek(r);
    if (c < 0 || !is_container_byte((uint8_t)c) || rd_head(r, &v) < 0 || v.kind != V_ARRAY)
        return -1;
    return v.n; /* checked against the bytes that remain */
}

/* A self-describing leaf as dyn decodes it: a reference {0: id}, an int beyond 64 bits
 * {7: "decimal"}, or a plain scalar.  NULL for any other shape. */
static PyObject *any_leaf(Rd *r, PyObject *objs)
{
    Py_ssize_t i = rd_any_ref(r, PyList_GET_SIZE(objs));
    if (i >= 0)
        return Py_NewRef(PyList_GET_ITEM(objs, i));
    if (!next_is_composite(r))
        return rd_obj(r, 0);
    return peek(r) == (MP_FIXMAP | 1) ? rd_bigint(r, 0) : NULL;
}

/* `n` leaves (an array's items, its count checked by rd_head) into a new list. */
static PyObject *any_leaves(Rd *r, PyObject *objs, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = any_leaf(r, objs);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, x);
    }
    return out;
}

/* A self-describing value (EK_ANY): a leaf, an array of leaves (a list) or a tuple of
 * leaves {1: [...]}. */
static PyObject *any_value(Rd *r, PyObject *objs)
{
    static const uint8_t tuple_head[2] = {MP_FIXMAP | 1, TAG_TUPLE};
    int is_tuple = take_if(r, tuple_head, 2);
    int c = peek(r);
    if (!is_tuple && (c < 0 || !is_container_byte((uint8_t)c) || c == (MP_FIXMAP | 1)))
        return any_leaf(r, objs);
    Py_ssize_t n = rd_array(r);
    PyObject *l = n < 0 ? NULL : any_leaves(r, objs, n);
    if (!l || !is_tuple)
        return l;
    PyObject *t = PyList_AsTuple(l);
    Py_DECREF(l);
    return t;
}

static PyObject *elem_read(const ENode *e, Rd *r, PyObject *objs);

/* An empty container of a sequence build (B_*). */
static PyObject *empty_of(int build)
{
    switch (build) {
    case B_SET:
        return PySet_New(NULL);
    case B_FROZENSET:
        return PyFrozenSet_New(NULL);
    case B_TUPLE:
        return PyTuple_New(0);
    }
    return PyList_New(0);
}

/* EK_SEQ: Nil (the empty container, or a shared container's other place, patched
 * after loading) or an array of the node below's values. */
static PyObject *elem_seq(const ENode *e, Rd *r, PyObject *objs)
{
    if (take_if(r, &nil_byte, 1))
        return empty_of(e->build);
    Py_ssize_t n = rd_array(r);
    if (n < 0)
        return NULL;
    int seq = e->build == B_LIST || e->build == B_TUPLE;
    PyObject *out = e->build == B_LIST ? PyList_New(n) : e->build == B_TUPLE ? PyTuple_New(n)
                                                                            : empty_of(e->build);
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = elem_read(e->kid[0], r, objs);
        if (!x)
            goto fail;
        if (e->build == B_LIST)
            PyList_SET_ITEM(out, k, x);
        else if (seq)
            PyTuple_SET_ITEM(out, k, x);
        else {
            /* a fresh set or frozenset, not yet seen by other code (PySet_Add's rule) */
            int rc = PySet_Add(out, x);
            Py_DECREF(x);
            if (rc < 0)
                goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* EK_DICT: Nil (the empty dict, or a shared dict's other place) or [[keys], [values]]
 * of equal lengths, keys inserted in order (a repeated key keeps its first object and
 * its last value, as dict(zip(...)) does). */
static PyObject *elem_dict(const ENode *e, Rd *r, PyObject *objs)
{
    static const uint8_t pair = MP_FIXARRAY | 2;
    if (take_if(r, &nil_byte, 1))
        return PyDict_New();
    if (!take_if(r, &pair, 1))
        return NULL;
    Py_ssize_t n = rd_array(r);
    if (n < 0)
        return NULL;
    PyObject *keys = PyList_New(n), *d = NULL; /* n is checked against the bytes left */
    if (!keys)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = elem_read(e->kid[0], r, objs);
        if (!x)
            goto done;
        PyList_SET_ITEM(keys, k, x);
    }
    if (rd_array(r) != n || !(d = dict_presized(n)))
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = elem_read(e->kid[1], r, objs);
        int rc = x ? PyDict_SetItem(d, PyList_GET_ITEM(keys, k), x) : -1;
        Py_XDECREF(x);
        if (rc < 0) {
            Py_CLEAR(d);
            goto done;
        }
    }
done:
    Py_DECREF(keys);
    return d;
}

/* A value of node e's kind at r->p, or NULL (an error set or not) for a shape e does not
 * take; r->p is then anywhere in the value, and the caller rewinds. */
static PyObject *elem_read(const ENode *e, Rd *r, PyObject *objs)
{
    switch (e->ek) {
    case EK_PASS:
        if (!next_is_composite(r))
            return rd_obj(r, 0); /* a scalar: no recursion */
        return peek(r) == (MP_FIXMAP | 1) ? rd_bigint(r, 0) : NULL;
    case EK_REF: {
        Py_ssize_t i = rd_id(r, PyList_GET_SIZE(objs));
        return i < 0 ? NULL : Py_NewRef(PyList_GET_ITEM(objs, i));
    }
    case EK_ANY:
        return any_value(r, objs);
    case EK_ENUM: {
        if (next_is_composite(r))
            return NULL;
        PyObject *raw = rd_obj(r, 0);
        if (!raw)
            return NULL;
        /* the plain dict lookup: a missing value is the slot decoder's StateError */
        PyObject *m = PyDict_GetItemWithError(e->arg, raw);
        Py_DECREF(raw);
        return m ? Py_NewRef(m) : NULL;
    }
    case EK_OPT:
        if (take_if(r, &nil_byte, 1))
            Py_RETURN_NONE;
        return elem_read(e->kid[0], r, objs);
    case EK_TUPLE: {
        if (rd_array(r) != e->n)
            return NULL;
        PyObject *t = PyTuple_New(e->n);
        if (!t)
            return NULL;
        for (int k = 0; k < e->n; k++) {
            PyObject *x = elem_read(e->kid[k], r, objs);
            if (!x) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, k, x);
        }
        return t;
    }
    case EK_SEQ:
        return elem_seq(e, r, objs);
    case EK_DICT:
        return elem_dict(e, r, objs);
    case EK_BYTEARRAY: {
        Val v;
        int c = peek(r);
        if (take_if(r, &nil_byte, 1))
            return PyByteArray_FromStringAndSize(NULL, 0);
        if (c < MP_BIN8 || c > MP_BIN32 || rd_head(r, &v) < 0)
            return NULL;
        return PyByteArray_FromStringAndSize((const char *)v.data, v.n);
    }
    }
    return NULL;
}

/* A plan's program (EK_*, arg, *nodes below) into pool[*used...], depth-first; its node,
 * or NULL with an error for a program native._elem_prog does not build. */
static ENode *elem_parse(PyObject *t, ENode *pool, int *used, int depth)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2 ||
        PyTuple_GET_SIZE(t) - 2 > MAX_TUPLE_ITEMS || depth >= MAX_ELEM_DEPTH ||
        *used >= MAX_ELEM_NODES)
        goto bad;
    ENode *e = &pool[(*used)++];
    e->ek = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    e->arg = PyTuple_GET_ITEM(t, 1);
    e->n = (int)(PyTuple_GET_SIZE(t) - 2);
    if (e->ek == -1 && PyErr_Occurred())
        return NULL;
    int want; /* nodes below */
    switch (e->ek) {
    case EK_PASS: case EK_REF: case EK_ANY: case EK_BYTEARRAY:
        want = 0;
        break;
    case EK_ENUM:
        if (!PyDict_Check(e->arg))
            goto bad;
        want = 0;
        break;
    case EK_OPT:
        want = 1;
        break;
    case EK_SEQ:
        e->build = (int)PyLong_AsLong(e->arg);
        if (e->build < B_LIST || e->build > B_TUPLE)
            goto bad;
        want = 1;
        break;
    case EK_DICT:
        want = 2;
        break;
    case EK_TUPLE:
        want = e->n > 0 ? e->n : -1;
        break;
    default:
        goto bad;
    }
    if (e->n != want)
        goto bad;
    for (int k = 0; k < e->n; k++)
        if (!(e->kid[k] = elem_parse(PyTuple_GET_ITEM(t, k + 2), pool, used, depth + 1)))
            return NULL;
    return e;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad element program");
    return NULL;
}

/* An L_ELEM entry's arg, its program, into f->prog. */
static int elem_field(LField *f)
{
    int used = 0;
    if (!(f->prog = PyMem_Calloc(MAX_ELEM_NODES, sizeof(ENode)))) {
        PyErr_NoMemory();
        return -1;
    }
    return elem_parse(f->arg, f->prog, &used, 0) ? 0 : -1;
}

static PyObject *read_field(LField *f, Rd *r, PyObject *objs, PyObject *ctx)
{
    const uint8_t *start = r->p;
    Py_ssize_t nobjs = PyList_GET_SIZE(objs);
    if (f->escapes && (f->op == L_NONE_ZERO || f->op == L_RAW || f->op == L_FALSY_ZERO) &&
        peek(r) == (MP_FIXMAP | 1)) {
        PyObject *n = rd_bigint(r, 1);
        if (n)
            return n;
    }
    if (f->op == L_REF) {
        Py_ssize_t i = rd_id(r, nobjs);
        if (i >= 0)
            return Py_NewRef(PyList_GET_ITEM(objs, i));
    }
    else if (f->op == L_SEQ_REF && peek(r) >= 0 && peek(r) != MP_NIL) {
        Val v;
        if (rd_head(r, &v) < 0)
            return NULL;
        if (v.kind == V_ARRAY) {
            PyObject *out = PyList_New(v.n);
            if (!out)
                return NULL;
            Py_ssize_t k = 0;
            for (; k < v.n; k++) {
                Py_ssize_t i = rd_id(r, nobjs);
                if (i < 0)
                    break;
                PyList_SET_ITEM(out, k, Py_NewRef(PyList_GET_ITEM(objs, i)));
            }
            if (k == v.n)
                return build_from(f->build, out);
            Py_DECREF(out);
        }
        r->p = start;
    }
    else if (f->op == L_TUPLE || (f->op == L_SEQ && f->build == B_TUPLE)) {
        PyObject *t = rd_plain_tuple(r);
        if (t || PyErr_Occurred())
            return t;
    }
    else if (f->op == L_ANY) {
        Py_ssize_t i = rd_any_ref(r, nobjs);
        if (i >= 0)
            return Py_NewRef(PyList_GET_ITEM(objs, i));
        PyObject *n = peek(r) == (MP_FIXMAP | 1) ? rd_bigint(r, 0) : NULL;
        if (n)
            return n;
    }
    else if (f->op == L_VALUE) {
        PyObject *v = rd_value(f, r);
        if (v || PyErr_Occurred())
            return v;
    }
    else if (f->op == L_SEQ_TUPLE) {
        PyObject *v = rd_tuple_list(r, f->vk);
        if (v || PyErr_Occurred())
            return v;
    }
    else if (f->op == L_DICT || f->op == L_DICT_REF) {
        PyObject *v = rd_dict(f, r, nobjs, objs);
        if (v)
            return v;
    }
    else if (f->op == L_ELEM) {
        /* a slot escape {8: value} (a type the stream lists as escaped): the value as
         * dyn decodes it, e.g. the () a tuple[Ref, int] field defaults to */
        static const uint8_t escape[2] = {MP_FIXMAP | 1, TAG_SLOT};
        if (f->build && take_if(r, &nil_byte, 1)) /* Nil is the kind's zero */
            return zero_of(f);
        PyObject *v = f->escapes && take_if(r, escape, 2) ? any_value(r, objs)
                                                          : elem_read(f->prog, r, objs);
        if (v)
            return v;
        PyErr_Clear(); /* the slot decoder meets the same bytes and says what it finds */
        r->p = start;
    }
    PyObject *raw = rd_obj(r, 0);
    if (!raw)
        return NULL;
    PyObject *v = f->op == L_PY ? call_slot(f, raw, ctx) : value_of(f, raw, objs, ctx);
    Py_DECREF(raw);
    return v;
}

static int get_buffer(PyObject *data, Py_buffer *buf)
{
    if (PyObject_GetBuffer(data, buf, PyBUF_SIMPLE) < 0)
        return -1;
    return 0;
}

/* An L_VALUE entry's arg, (VK_*, class or None, extra or None), into the field; the
 * datetime C API is imported on first use (a stream of such fields means the module is
 * loaded already). */
static int value_field(LField *f)
{
    if (!PyArg_ParseTuple(f->arg, "iOO", &f->vk, &f->vcls, &f->vextra))
        return -1;
    if (f->vk < VK_DATETIME || f->vk > VK_UUID ||
        (f->vk == VK_UUID && !PyType_Check(f->vcls))) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad value plan");
        return -1;
    }
    if (!PyDateTimeAPI && !(PyDateTimeAPI = PyCapsule_Import(PyDateTime_CAPSULE_NAME, 0)))
        return -1;
    return 0;
}

/* One read_fill call: the type's parsed plan and where its values go. */
typedef struct {
    LField *fs;
    Py_ssize_t n, nrow;  /* plan entries; columns per stream row */
    int has_dict, frozen, direct;
    int sequential;      /* the stream row holds exactly the read fields, in plan order */
    const uint8_t **at;  /* not sequential: each column's offset in the current row */
    const void *keys;    /* direct stores: the class's shared keys, */
    Py_ssize_t *ix;      /* ... each field's index in them, */
    int all_ix;          /* ... and whether every field has one yet */
    PyObject *objs, *ctx;
    CkptState *st; /* the module's */
} Fill;

/* The plan's entries into fl->fs, checked; fl->sequential set.  0, or -1 with an error. */
static int fill_parse(Fill *fl, PyObject *entries)
{
    Py_ssize_t expect = 0;
    fl->sequential = 1;
    for (Py_ssize_t j = 0; j < fl->n; j++) {
        LField *f = &fl->fs[j];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(entries, j), "UniiOiOO", &f->name, &f->src, &f->op,
                              &f->build, &f->zero, &f->zero_call, &f->arg, &f->slot))
            return -1;
        if (f->src >= fl->nrow)
            goto bad;
        if (f->op == L_VALUE && value_field(f) < 0)
            return -1;
        if (f->op == L_ELEM && elem_field(f) < 0)
            return -1;
        if (f->op == L_SEQ_TUPLE &&
            ((f->vk = (int)PyLong_AsLong(f->arg)) < 1 || f->vk >= MP_FIX_ITEMS)) {
            if (!PyErr_Occurred()) /* a fixarray */
                PyErr_SetString(PyExc_SystemError, "ckpt native: bad tuple list plan");
            return -1;
        }
        if (f->op != L_DEFAULT && f->op != L_FACTORY) {
            if (f->src < 0)
                goto bad;
            if (f->src != expect++)
                fl->sequential = 0;
        }
    }
    if (expect != fl->nrow)
        fl->sequential = 0;
    return 0;
bad:
    PyErr_SetString(PyExc_SystemError, "ckpt native: bad load plan");
    return -1;
}

/* Look ahead when the graph is large and this type's rows hold references: the op per
 * stream column into *ops (owned by the caller), and the first rows read ahead. */
static int fill_ahead_start(Fill *fl, Ahead *ahead, uint8_t **ops, Py_ssize_t nshells)
{
    if (PyList_GET_SIZE(fl->objs) < load_ahead_min || fl->nrow <= 0)
        return 0;
    if (!(*ops = PyMem_Calloc(fl->nrow, 1))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < fl->n; j++) {
        int op = fl->fs[j].op;
        if (fl->fs[j].src >= 0 && (op == L_REF || op == L_SEQ_REF || op == L_ANY)) {
            (*ops)[fl->fs[j].src] = (uint8_t)op;
            ahead->left = nshells;
        }
    }
    ahead->ops = *ops;
    for (int k = 0; k < AHEAD_ROWS && ahead_row(ahead, fl->objs); k++)
        ;
    return 0;
}

/* Store a field's value v (stolen) into obj the usual way: into the dict `d` being
 * built, or by setattr.  0, or -1 with an error. */
static int fill_store(const Fill *fl, PyObject *obj, PyObject *d, LField *f, PyObject *v)
{
    int rc;
    if (fl->has_dict)
        rc = PyDict_SetItem(d, f->name, v);
    else if (fl->frozen || fl->direct)
        rc = PyObject_GenericSetAttr(obj, f->name, v);
    else
        rc = PyObject_SetAttr(obj, f->name, v);
    Py_DECREF(v);
    return rc;
}

/* A field's value for the current row: read at r->p, or (`at` not NULL: the row is not
 * sequential) at its column's offset. */
static inline PyObject *fill_value(LField *f, Rd *r, const uint8_t **at, PyObject *objs,
                                   PyObject *ctx)
{
    if (f->op == L_DEFAULT)
        return Py_NewRef(f->arg);
    if (f->op == L_FACTORY)
        return make_zero(f->zero_call, f->arg);
    if (at)
        r->p = at[f->src];
    return read_field(f, r, objs, ctx);
}

/* One object's row, from r->p: its fields read and stored.  0, or -1 with an error. */
static int fill_row(Fill *fl, Rd *r, PyObject *obj)
{
    if (fl->ix && !fl->all_ix) {
        /* looked up again until every field has an index: the first instances may add
         * the keys */
        fl->all_ix = 1;
        for (Py_ssize_t j = 0; j < fl->n; j++)
            if ((fl->ix[j] = ckpt_store_index(fl->keys, fl->fs[j].name)) < 0)
                fl->all_ix = 0;
    }
    PyObject **values = fl->all_ix ? ckpt_store_values(obj, fl->keys) : NULL;
    Val h;
    const uint8_t *row_at = r->p;
    if (rd_head(r, &h) < 0)
        return -1;
    if (h.kind != V_ARRAY || h.n != fl->nrow) {
        r->p = row_at;
        PyErr_Format(fl->st->state_error, "a %s row has the wrong number of fields",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    const uint8_t *row_end = NULL;
    if (!fl->sequential) {
        for (Py_ssize_t k = 0; k < fl->nrow; k++) {
            fl->at[k] = r->p;
            if (rd_skip(r, 1) < 0)
                return -1;
        }
        row_end = r->p;
    }
    PyObject *d = fl->has_dict ? dict_presized(fl->n) : NULL;
    if (fl->has_dict && !d)
        return -1;
    /* the loop's invariants in locals: the calls below are opaque to the compiler */
    LField *fs = fl->fs;
    const void *keys = fl->keys;
    Py_ssize_t *ix = fl->ix;
    const uint8_t **at = fl->sequential ? NULL : fl->at;
    PyObject *objs = fl->objs, *ctx = fl->ctx;
    for (Py_ssize_t j = 0, n = fl->n; j < n; j++) {
        PyObject *v = fill_value(&fs[j], r, at, objs, ctx);
        if (!v)
            goto fail;
        if (values && ckpt_store_put(obj, keys, values, ix[j], v) == 0)
            continue; /* stored: the values array owns v now */
        if (fill_store(fl, obj, d, &fs[j], v) < 0)
            goto fail;
    }
    if (!fl->sequential)
        r->p = row_end;
    if (fl->has_dict) {
        int rc = fl->frozen ? PyObject_GenericSetAttr(obj, fl->st->str_dict, d)
                            : PyObject_SetAttr(obj, fl->st->str_dict, d);
        Py_DECREF(d);
        return rc;
    }
    return 0;
fail:
    Py_XDECREF(d);
    return -1;
}

/* A fill plan parsed once (read_plan): the entries read_fill parsed from the plan's
 * tuples on every call (~3.4k instructions, and getargs' code for a cold load to fetch),
 * kept with the tuple whose objects its entries borrow. */
typedef struct {
    PyObject_HEAD
    PyObject *plan; /* the tuple parsed (strong); NULL once cleared: unusable */
    LField *fs;
    Py_ssize_t n, nrow;
    int has_dict, frozen, direct, sequential;
} FillPlan;

static void fields_free(LField *fs, Py_ssize_t n)
{
    for (Py_ssize_t j = 0; fs && j < n; j++)
        PyMem_Free(fs[j].prog);
    PyMem_Free(fs);
}

/* plan (has_dict, frozen, nrow, entries[, escapes]) into fl: its entries parsed into a
 * new fl->fs (the caller frees it with fields_free).  0, or -1 with an error. */
static int plan_parse(Fill *fl, PyObject *plan)
{
    PyObject *entries;
    int escapes = 0; /* the stream lists the type as holding slot escapes */
    if (!PyTuple_Check(plan)) {
        PyErr_SetString(PyExc_TypeError, "a fill plan must be a tuple or a parsed plan");
        return -1;
    }
    if (!PyArg_ParseTuple(plan, "ipnO!|p", &fl->has_dict, &fl->frozen, &fl->nrow, &PyTuple_Type,
                          &entries, &escapes))
        return -1;
    fl->direct = fl->has_dict == 2;
    if (fl->direct)
        fl->has_dict = 0;
    fl->n = PyTuple_GET_SIZE(entries);
    if (!(fl->fs = PyMem_Calloc(fl->n ? fl->n : 1, sizeof(LField)))) {
        PyErr_NoMemory();
        return -1;
    }
    if (fill_parse(fl, entries) < 0)
        return -1;
    for (Py_ssize_t j = 0; j < fl->n; j++)
        fl->fs[j].escapes = escapes;
    return 0;
}

static int fillplan_traverse(FillPlan *p, visitproc visit, void *arg)
{
    Py_VISIT(p->plan);
    return 0;
}

static int fillplan_clear(FillPlan *p)
{
    fields_free(p->fs, p->n);
    p->fs = NULL;
    p->n = 0;
    Py_CLEAR(p->plan);
    return 0;
}

static void fillplan_dealloc(FillPlan *p)
{
    PyObject_GC_UnTrack(p);
    fillplan_clear(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyTypeObject FillPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt.state._native.FillPlan",
    .tp_basicsize = sizeof(FillPlan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)fillplan_dealloc,
    .tp_traverse = (traverseproc)fillplan_traverse,
    .tp_clear = (inquiry)fillplan_clear,
    .tp_doc = "A fill plan parsed once (read_plan), for read_fill.",
};

/* read_plan(plan) -> FillPlan: the plan tuple parsed and checked as read_fill does. */
static PyObject *read_plan(PyObject *mod, PyObject *plan)
{
    if (!(FillPlanType.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&FillPlanType) < 0)
        return NULL;
    Fill fl = {.st = ckpt_state_of(mod)};
    if (plan_parse(&fl, plan) < 0) {
        fields_free(fl.fs, fl.n);
        return NULL;
    }
    FillPlan *p = PyObject_GC_New(FillPlan, &FillPlanType);
    if (!p) {
        fields_free(fl.fs, fl.n);
        return NULL;
    }
    p->plan = Py_NewRef(plan);
    p->fs = fl.fs;
    p->n = fl.n;
    p->nrow = fl.nrow;
    p->has_dict = fl.has_dict;
    p->frozen = fl.frozen;
    p->direct = fl.direct;
    p->sequential = fl.sequential;
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

/* read_fill(shells, body, start, plan, objs, ctx) -> offset after the last row.
 * shells: the type's objects in row order (a list); start: the payload offset of its
 * first row; plan: a FillPlan (read_plan) or its tuple, parsed for this call. */
static PyObject *read_fill(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_Check(args[0]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "read_fill(shells: list, body, start, plan, objs: list, ctx) expected");
        return NULL;
    }
    PyObject *shells = args[0], *body = args[1], *plan = args[3];
    Py_ssize_t start = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Fill fl = {.st = ckpt_state_of(mod), .objs = args[4], .ctx = args[5]};
    PyObject *result = NULL;
    LField *owned = NULL; /* fields parsed for this call only */
    if (Py_IS_TYPE(plan, &FillPlanType)) {
        FillPlan *p = (FillPlan *)plan;
        if (!p->plan) {
            PyErr_SetString(PyExc_ValueError, "read_fill: a cleared plan");
            return NULL;
        }
        fl.fs = p->fs;
        fl.n = p->n;
        fl.nrow = p->nrow;
        fl.has_dict = p->has_dict;
        fl.frozen = p->frozen;
        fl.direct = p->direct;
        fl.sequential = p->sequential;
        Py_INCREF(plan); /* its fields stay while they are read */
    }
    else {
        int rc = plan_parse(&fl, plan);
        owned = fl.fs;
        if (rc < 0) {
            fields_free(owned, fl.n);
            return NULL;
        }
        plan = NULL;
    }
    Py_buffer buf;
    if (get_buffer(body, &buf) < 0) {
        Py_XDECREF(plan);
        fields_free(owned, fl.n);
        return NULL;
    }
    uint8_t *ahead_ops = NULL;
    if (!fl.sequential && !(fl.at = PyMem_Calloc(fl.nrow ? fl.nrow : 1, sizeof(uint8_t *)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (start < 0 || start > buf.len) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad row offset");
        goto done;
    }
    if (fl.direct && PyList_GET_SIZE(shells) > 0) {
        fl.keys = ckpt_store_keys(Py_TYPE(PyList_GET_ITEM(shells, 0)));
        fl.ix = fl.keys ? PyMem_Calloc(fl.n ? fl.n : 1, sizeof(Py_ssize_t)) : NULL;
        if (fl.keys && !fl.ix) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Rd r = {buf.buf, (const uint8_t *)buf.buf + start, (const uint8_t *)buf.buf + buf.len};
    Ahead ahead = {r, NULL, fl.nrow, 0};
    if (fill_ahead_start(&fl, &ahead, &ahead_ops, PyList_GET_SIZE(shells)) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(shells); i++) {
        ahead_row(&ahead, fl.objs);
        if (fill_row(&fl, &r, PyList_GET_ITEM(shells, i)) < 0)
            goto done;
    }
    result = PyLong_FromSsize_t(r.p - r.base);
done:
    PyMem_Free(ahead_ops);
    fields_free(owned, fl.n);
    PyMem_Free(fl.ix);
    PyMem_Free(fl.at);
    PyBuffer_Release(&buf);
    Py_XDECREF(plan);
    return result;
}

/* ---- the top level --------------------------------------------------------------------- */

/* read_split(body) -> (spans, type_seq, rows)
 *   spans: the nine top-level items' (start, end) payload offsets;
 *   type_seq: (start, count) of its items, or None when it is not an array;
 *   rows: per type (start, count) of its rows (None for an item that is not an array),
 *         or None when the rows item is not an array.
 * The whole payload is checked structurally (every length and count against the
 * bytes that remain, nothing after the top-level array); nothing is decoded. */
/* (a, b) as a tuple of two ints: read_split makes a dozen per load, and
 * Py_BuildValue("nn") parsed its format each time (~450 instructions a pair). */
static PyObject *int_pair(Py_ssize_t a, Py_ssize_t b)
{
    PyObject *x = PyLong_FromSsize_t(a), *y = x ? PyLong_FromSsize_t(b) : NULL;
    PyObject *t = y ? PyTuple_New(2) : NULL;
    if (!t) {
        Py_XDECREF(x);
        Py_XDECREF(y);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, x);
    PyTuple_SET_ITEM(t, 1, y);
    return t;
}

static PyObject *read_split(PyObject *mod, PyObject *data)
{
    Py_buffer buf;
    if (get_buffer(data, &buf) < 0)
        return NULL;
    PyObject *spans = NULL, *tseq = NULL, *rows = NULL, *result = NULL;
    Rd r = {buf.buf, buf.buf, (const uint8_t *)buf.buf + buf.len};
    Val v;
    if (rd_head(&r, &v) < 0)
        goto done;
    if (v.kind != V_ARRAY || v.n != 9) {
        PyErr_SetString(ckpt_state_of(mod)->state_error,
                        "state stream payload has the wrong shape (not a ckpt object stream)");
        goto done;
    }
    spans = PyTuple_New(9);
    if (!spans)
        goto done;
    tseq = Py_NewRef(Py_None);
    rows = Py_NewRef(Py_None);
    for (int item = 0; item < 9; item++) {
        const uint8_t *s = r.p;
        if (item == 4 || item == 5) {
            if (rd_head(&r, &v) < 0)
                goto done;
            if (v.kind != V_ARRAY) {
                r.p = s;
                if (rd_skip(&r, 1) < 0)
                    goto done;
            }
            else if (item == 4) {
                Py_SETREF(tseq, int_pair((Py_ssize_t)(r.p - r.base), v.n));
                if (!tseq || rd_skip(&r, v.n) < 0)
                    goto done;
            }
            else {
                Py_SETREF(rows, PyList_New(v.n));
                if (!rows)
                    goto done;
                for (Py_ssize_t t = 0; t < v.n; t++) {
                    const uint8_t *ts = r.p;
                    Val tv;
                    if (rd_head(&r, &tv) < 0)
                        goto done;
                    PyObject *entry;
                    if (tv.kind == V_ARRAY) {
                        entry = int_pair((Py_ssize_t)(r.p - r.base), tv.n);
                        if (!entry)
                            goto done;
                        PyList_SET_ITEM(rows, t, entry);
                        if (rd_skip(&r, tv.n) < 0)
                            goto done;
                    }
                    else {
                        PyList_SET_ITEM(rows, t, Py_NewRef(Py_None));
                        r.p = ts;
                        if (rd_skip(&r, 1) < 0)
                            goto done;
                    }
                }
            }
        }
        else if (rd_skip(&r, 1) < 0)
            goto done;
        PyObject *span = int_pair((Py_ssize_t)(s - r.base), (Py_ssize_t)(r.p - r.base));
        if (!span)
            goto done;
        PyTuple_SET_ITEM(spans, item, span);
    }
    if (r.p != r.end) {
        rd_fail(&r, "trailing bytes after the top-level array");
        goto done;
    }
    result = PyTuple_Pack(3, spans, tseq, rows);
done:
    Py_XDECREF(spans);
    Py_XDECREF(tseq);
    Py_XDECREF(rows);
    PyBuffer_Release(&buf);
    return result;
}

/* read_open(body, t_ref) -> (spans, type_seq, rows, head_key, root_ref, counts):
 * read_split's result, and what a load looks up in Python before it reads a row:
 * head_key, the bytes from the version to the end of the type table when nothing is
 * shared and no flag is set (the shared and flags items exactly [] and {}), else None;
 * root_ref, the object id of a root written {t_ref: id} with a fixint id, else -1;
 * counts, each type's row count (None where rows is not a list of arrays).  Python
 * read these with six memoryview operations and a list comprehension a load. */
static PyObject *read_open(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read_open(body, t_ref: int) expected");
        return NULL;
    }
    long tref = PyLong_AsLong(args[1]);
    if (tref < 0 || tref > 0x7f) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "read_open: t_ref must be a positive fixint");
        return NULL;
    }
    PyObject *split = read_split(mod, args[0]);
    if (!split)
        return NULL;
    Py_buffer buf;
    if (get_buffer(args[0], &buf) < 0) {
        Py_DECREF(split);
        return NULL;
    }
    PyObject *result = NULL, *key = NULL, *ref = NULL, *counts = NULL;
    PyObject *spans = PyTuple_GET_ITEM(split, 0);
    Py_ssize_t at[9][2];
    for (int i = 0; i < 9; i++)
        for (int k = 0; k < 2; k++) {
            at[i][k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(PyTuple_GET_ITEM(spans, i), k));
            if (at[i][k] < 0 || at[i][k] > buf.len) { /* read_split made them: in range */
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_SystemError, "ckpt native: bad span");
                goto done;
            }
        }
    const uint8_t *p = buf.buf;
    Py_ssize_t sh = at[7][0]; /* SHARED, then FLAGS */
    if (at[8][1] == sh + 2 && p[sh] == 0x90 && p[sh + 1] == 0x80)
        key = PyBytes_FromStringAndSize((const char *)p + at[0][0], at[3][1] - at[0][0]);
    else
        key = Py_NewRef(Py_None);
    Py_ssize_t r0 = at[6][0], id = -1; /* ROOT */
    if (at[6][1] - r0 == 3 && p[r0] == 0x81 && p[r0 + 1] == (uint8_t)tref && p[r0 + 2] < 0x80)
        id = p[r0 + 2];
    ref = key ? PyLong_FromSsize_t(id) : NULL;
    if (!ref)
        goto done;
    PyObject *rows = PyTuple_GET_ITEM(split, 2);
    if (PyList_Check(rows)) {
        Py_ssize_t nt = PyList_GET_SIZE(rows);
        if (!(counts = PyList_New(nt)))
            goto done;
        for (Py_ssize_t t = 0; t < nt; t++) {
            PyObject *pair = PyList_GET_ITEM(rows, t);
            if (!PyTuple_Check(pair)) { /* None: an item that is not an array */
                Py_SETREF(counts, Py_NewRef(Py_None));
                break;
            }
            PyList_SET_ITEM(counts, t, Py_NewRef(PyTuple_GET_ITEM(pair, 1)));
        }
    }
    else
        counts = Py_NewRef(Py_None);
    result = PyTuple_Pack(6, spans, PyTuple_GET_ITEM(split, 1), rows, key, ref, counts);
done:
    Py_XDECREF(key);
    Py_XDECREF(ref);
    Py_XDECREF(counts);
    PyBuffer_Release(&buf);
    Py_DECREF(split);
    return result;
}

/* read_shells(classes, names, counts, body, start, n) -> (objs, per_type): every object
 * created empty with object.__new__, from the n type indices at payload offset start
 * (checked by read_split to be n values); counts[t] is type t's row count. */
static PyObject *read_shells(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_Check(args[0]) || !PyList_Check(args[1]) ||
        !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "read_shells(classes: list, names: list, counts: list, body, start, n) "
                        "expected");
        return NULL;
    }
    PyObject *classes = args[0], *names = args[1], *counts = args[2], *body = args[3];
    Py_ssize_t start = PyNumber_AsSsize_t(args[4], PyExc_OverflowError);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyNumber_AsSsize_t(args[5], PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t ntypes = PyList_GET_SIZE(classes);
    if (PyList_GET_SIZE(counts) != ntypes || PyList_GET_SIZE(names) != ntypes) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: type table and counts disagree");
        return NULL;
    }
    Py_buffer buf;
    if (get_buffer(body, &buf) < 0)
        return NULL;
    PyObject *objs = NULL, *per = NULL, *result = NULL;
    Py_ssize_t *fill = PyMem_Calloc(ntypes ? ntypes : 1, sizeof(Py_ssize_t));
    if (!fill) {
        PyErr_NoMemory();
        goto done;
    }
    if (start < 0 || start > buf.len || n < 0 || n > buf.len - start) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad type_seq span");
        goto done;
    }
    PyObject *no_args = ckpt_state_of(mod)->no_args;
    /* First pass: count, without allocating, so no count the input claims is trusted. */
    Rd r = {buf.buf, (const uint8_t *)buf.buf + start, (const uint8_t *)buf.buf + buf.len};
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t t = rd_id(&r, ntypes);
        if (t < 0) {
            PyErr_SetString(ckpt_state_of(mod)->state_error,
                            "state stream refers to a type index outside its type table");
            goto done;
        }
        fill[t]++;
    }
    for (Py_ssize_t t = 0; t < ntypes; t++) {
        Py_ssize_t c = PyLong_AsSsize_t(PyList_GET_ITEM(counts, t));
        if (c == -1 && PyErr_Occurred())
            goto done;
        if (c != fill[t]) {
            PyErr_Format(ckpt_state_of(mod)->state_error,
                         "type %R: object count and row count disagree",
                         PyList_GET_ITEM(names, t));
            goto done;
        }
    }
    objs = PyList_New(n + 1);
    per = PyList_New(ntypes);
    if (!objs || !per)
        goto done;
    PyList_SET_ITEM(objs, 0, Py_NewRef(Py_None));
    for (Py_ssize_t t = 0; t < ntypes; t++) {
        if (fill[t] && !PyType_Check(PyList_GET_ITEM(classes, t))) {
            PyErr_SetString(PyExc_SystemError, "ckpt native: not a class");
            goto done;
        }
        PyObject *l = PyList_New(fill[t]);
        if (!l)
            goto done;
        PyList_SET_ITEM(per, t, l);
        fill[t] = 0;
    }
    r.p = (const uint8_t *)buf.buf + start;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t t = rd_id(&r, ntypes); /* checked above */
        PyObject *cls = PyList_GET_ITEM(classes, t);
        PyObject *o = PyBaseObject_Type.tp_new((PyTypeObject *)cls, no_args, NULL);
        if (!o)
            goto done;
        PyList_SET_ITEM(objs, i + 1, o);
        PyList_SET_ITEM(PyList_GET_ITEM(per, t), fill[t]++, Py_NewRef(o));
    }
    result = PyTuple_Pack(2, objs, per);
done:
    PyMem_Free(fill);
    Py_XDECREF(objs);
    Py_XDECREF(per);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *set_load_ahead_min(PyObject *mod, PyObject *arg)
{
    Py_ssize_t v = PyLong_AsSsize_t(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t was = load_ahead_min;
    load_ahead_min = v < 0 ? 0 : v;
    return PyLong_FromSsize_t(was);
}

static PyObject *read_configure(PyObject *mod, PyObject *args)
{
    PyObject *err, *dec;
    if (!PyArg_ParseTuple(args, "OO", &err, &dec))
        return NULL;
    CkptState *st = ckpt_state_of(mod);
    Py_XSETREF(st->state_error, Py_NewRef(err));
    Py_XSETREF(st->slice_decode, Py_NewRef(dec));
    Py_RETURN_NONE;
}

/* Guard: the reader's functions are usable only after read_configure. */
#define CONFIGURED                                                                     \
    if (!ckpt_state_of(mod)->state_error) {                                            \
        PyErr_SetString(PyExc_RuntimeError, "ckpt native: reader not configured");     \
        return NULL;                                                                   \
    }

static PyObject *read_split_checked(PyObject *mod, PyObject *data)
{
    CONFIGURED
    return read_split(mod, data);
}

static PyObject *read_open_checked(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    CONFIGURED
    return read_open(mod, args, nargs);
}

static PyObject *read_shells_checked(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    CONFIGURED
    return read_shells(mod, args, nargs);
}

static PyObject *read_fill_checked(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    CONFIGURED
    return read_fill(mod, args, nargs);
}

static PyObject *read_plan_checked(PyObject *mod, PyObject *plan)
{
    CONFIGURED
    return read_plan(mod, plan);
}

PyMethodDef native_read_methods[] = {
    {"read_configure", read_configure, METH_VARARGS,
     "read_configure(StateError, decode_slice): set up the byte reader."},
    {"set_load_ahead_min", set_load_ahead_min, METH_O,
     "set_load_ahead_min(n) -> previous: the object count from which fill reads ahead."},
    {"read_split", read_split_checked, METH_O,
     "Find the payload's nine items and each type's rows; check its structure."},
    {"read_open", (PyCFunction)(void (*)(void))read_open_checked, METH_FASTCALL,
     "read_split's result with the head's key and the root's object id."},
    {"read_shells", (PyCFunction)(void (*)(void))read_shells_checked, METH_FASTCALL,
     "Create every object without __init__ from the type_seq bytes."},
    {"read_fill", (PyCFunction)(void (*)(void))read_fill_checked, METH_FASTCALL,
     "Fill one type's objects from its rows, decoded from the bytes."},
    {"read_plan", read_plan_checked, METH_O,
     "A fill plan parsed once, for read_fill (which parses a tuple plan on every call)."},
    {NULL},
};
