/* What the native engine's C core needs from CPython that differs between versions.
 *
 * Every private CPython function or object layout is used only inside the version range
 * where it is known (checked with PY_VERSION_HEX), and every other version takes a path
 * through the public C API that is always correct: a new CPython builds the core and runs
 * it correctly, only without that version's fast path.  Building with -DCKPT_PORTABLE=1
 * forces the public paths on every version, so they are tested where the fast ones exist
 * (tests/state/test_native_build.py).
 *
 *   CKPT_LAYOUT_311  CPython 3.11's dict and inline-values layouts (Objects/dict-common.h),
 *                    read and written by _native.c after import-time checks agree.
 *   CKPT_LAYOUT_312  3.12's (one tagged word for the dict or the values, pycore_object.h).
 *   CKPT_LAYOUT_313  3.13's (values inline after the object header, pycore_dict.h).
 *   CKPT_LAYOUT_VALUES  any of the three (_native_layout.h hides which).
 *   CKPT_DICT_TABLE  a dict's combined table (entries after the index array), 3.11-3.13.
 *   CKPT_LONG_311    3.11's int layout (signed digit count in ob_size, longintrepr.h).
 *   CKPT_LONG_COMPACT  3.12's unstable API for one-digit ints (PyUnstable_Long_*).
 */
#ifndef CKPT_NATIVE_COMPAT_H
#define CKPT_NATIVE_COMPAT_H
#include <Python.h>
#include <string.h>

#ifndef CKPT_PORTABLE
#define CKPT_PORTABLE 0
#endif

#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define CKPT_LAYOUT_311 1
#define CKPT_LONG_311 1
#else
#define CKPT_LAYOUT_311 0
#define CKPT_LONG_311 0
#endif

#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#define CKPT_LAYOUT_312 1
#else
#define CKPT_LAYOUT_312 0
#endif

#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000 &&             \
    !defined(Py_GIL_DISABLED)
#define CKPT_LAYOUT_313 1
#else
#define CKPT_LAYOUT_313 0
#endif

/* Some version's instance layout is known here (see _native_layout.h). */
#define CKPT_LAYOUT_VALUES (CKPT_LAYOUT_311 || CKPT_LAYOUT_312 || CKPT_LAYOUT_313)

/* dicts' combined tables (the same fields from 3.11 to 3.13 where the GIL exists) */
#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 &&             \
    !defined(Py_GIL_DISABLED)
#define CKPT_DICT_TABLE 1
#else
#define CKPT_DICT_TABLE 0
#endif

#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030C0000
#define CKPT_LONG_COMPACT 1
#else
#define CKPT_LONG_COMPACT 0
#endif

/* A cold function kept out of its callers (the walk's hot loop stays small). */
#if defined(__GNUC__) || defined(__clang__)
#define CKPT_NOINLINE __attribute__((noinline))
#else
#define CKPT_NOINLINE
#endif

/* A small hot function inlined into every caller whatever the compiler's estimate.
 * CKPT_INLINE_NEW does so only from 3.12, where the estimate left w_int and w_uint out
 * of line (3.13 FlatSave 51.06M -> 48.43M instructions); on 3.11 forcing them pushed
 * w_byte out of line instead (PeopleSave 66.3M -> 70.8M). */
#if defined(__GNUC__) || defined(__clang__)
#define CKPT_INLINE static inline __attribute__((always_inline))
#else
#define CKPT_INLINE static inline
#endif
#if PY_VERSION_HEX >= 0x030C0000
#define CKPT_INLINE_NEW CKPT_INLINE
#else
#define CKPT_INLINE_NEW static inline
#endif

/* 1 if this build may read CPython internals (the module's `fast_paths`; 0 built portable). */
#define CKPT_FAST_PATHS (!CKPT_PORTABLE)

/* ---- iterating a set or frozenset --------------------------------------------------------
 *
 * 3.11 and 3.12 export _PySet_NextEntry (borrowed keys, no allocation); 3.13 made it
 * internal, but its PySetObject stays in the public cpython/setobject.h, whose comment
 * defines a live entry (key set, hash not -1): that is read directly where the GIL
 * guards it.  Anywhere else an iterator (new references, one held at a time, and a
 * RuntimeError if the set changes size meanwhile). */
#if !CKPT_PORTABLE && PY_VERSION_HEX < 0x030D0000
#define CKPT_SET_PRIVATE 1
#elif !CKPT_PORTABLE && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define CKPT_SET_TABLE 1
#endif

typedef struct {
    PyObject *set;
    Py_ssize_t pos;
    PyObject *it;  /* the portable path's iterator */
    PyObject *cur; /* the portable path's current key (held until the next step) */
} SetIter;

static inline int set_iter_init(SetIter *si, PyObject *s)
{
    si->set = s;
    si->pos = 0;
    si->cur = NULL;
#if defined(CKPT_SET_PRIVATE) || defined(CKPT_SET_TABLE)
    si->it = NULL;
    return 0;
#else
    si->it = PyObject_GetIter(s);
    return si->it ? 0 : -1;
#endif
}

/* 1 and a borrowed key (valid until the next step while the set is unchanged), 0 at the
 * end, -1 on error (the portable path only). */
static inline int set_iter_next(SetIter *si, PyObject **key)
{
#if defined(CKPT_SET_PRIVATE)
    Py_hash_t h;
    return _PySet_NextEntry(si->set, &si->pos, key, &h);
#elif defined(CKPT_SET_TABLE)
    PySetObject *so = (PySetObject *)si->set;
    while (si->pos <= so->mask) {
        setentry *e = &so->table[si->pos++];
        if (e->key && e->hash != -1) {
            *key = e->key;
            return 1;
        }
    }
    return 0;
#else
    Py_CLEAR(si->cur);
    si->cur = PyIter_Next(si->it);
    if (!si->cur)
        return PyErr_Occurred() ? -1 : 0;
    *key = si->cur;
    return 1;
#endif
}

static inline void set_iter_done(SetIter *si)
{
    Py_CLEAR(si->cur);
    Py_CLEAR(si->it);
}

/* ---- ints as 16 big-endian bytes (a UUID) ----------------------------------------------- */

/* `n` (an exact int) as 16 big-endian unsigned bytes: 0, or 1 if it is negative or does
 * not fit (no error set), -1 on another error. */
static inline int long_to_be16(PyObject *n, unsigned char raw[16])
{
#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t need = PyLong_AsNativeBytes(
        n, raw, 16,
        Py_ASNATIVEBYTES_BIG_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER |
            Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (need < 0) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    return need > 16;
#elif !CKPT_PORTABLE
    if (_PyLong_AsByteArray((PyLongObject *)n, raw, 16, 0, 0) == 0)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
        return -1;
    PyErr_Clear();
    return 1;
#else
    PyObject *b = PyObject_CallMethod(n, "to_bytes", "is", 16, "big");
    if (!b) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    int ok = PyBytes_CheckExact(b) && PyBytes_GET_SIZE(b) == 16;
    if (ok)
        memcpy(raw, PyBytes_AS_STRING(b), 16);
    Py_DECREF(b);
    if (!ok)
        PyErr_SetString(PyExc_SystemError, "ckpt native: int.to_bytes gave another length");
    return ok ? 0 : -1;
#endif
}

/* The int that 16 big-endian unsigned bytes hold (new reference). */
static inline PyObject *long_from_be16(const unsigned char *p)
{
#if !CKPT_PORTABLE && PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromUnsignedNativeBytes(p, 16, Py_ASNATIVEBYTES_BIG_ENDIAN);
#elif !CKPT_PORTABLE
    return _PyLong_FromByteArray(p, 16, 0, 0);
#else
    return PyObject_CallMethod((PyObject *)&PyLong_Type, "from_bytes", "y#s", (const char *)p,
                               (Py_ssize_t)16, "big");
#endif
}

/* ---- dicts ------------------------------------------------------------------------------- */

/* A new dict with room for n items (the hint only where the private call is known). */
static inline PyObject *dict_presized(Py_ssize_t n)
{
#if !CKPT_PORTABLE && PY_VERSION_HEX < 0x030E0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

#endif
