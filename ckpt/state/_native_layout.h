/* CPython-layout reads and stores: instance dicts, inline values, direct stores.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_LAYOUT_H
#define CKPT_NATIVE_LAYOUT_H

/* CPython 3.11 keeps a materialised instance dict of a "managed dict" class just
 * before the object (a layout checked once, at import, by check_layout).  An object
 * whose attributes still live in inline values has none: it is read with getattr. */
static int dict_layout_ok;

static inline PyObject *instance_dict(PyObject *obj)
{
#if CKPT_LAYOUT_311
    if (dict_layout_ok && (Py_TYPE(obj)->tp_flags & Py_TPFLAGS_MANAGED_DICT)) {
        PyObject *d = ((PyObject **)obj)[-3];
        if (d && PyDict_CheckExact(d))
            return d;
    }
#endif
    return NULL;
}

static PyObject *check_layout(PyObject *mod, PyObject *obj)
{
    dict_layout_ok = 0;
#if CKPT_LAYOUT_311
    if (Py_TYPE(obj)->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
        PyObject *d = PyObject_GenericGetDict(obj, NULL);
        if (!d)
            return NULL;
        dict_layout_ok = ((PyObject **)obj)[-3] == d;
        /* and a combined str-keyed dict's first entry is where field_value looks */
        PyDictObject *dd = (PyDictObject *)d;
        PyObject *k0 = NULL, *v0 = NULL;
        Py_ssize_t pos = 0;
        if (dict_layout_ok && !dd->ma_values && PyDict_Next(d, &pos, &k0, &v0)) {
            Keys311 *dk = (Keys311 *)dd->ma_keys;
            UEntry311 *e = table_entries(dk);
            dict_layout_ok = dk->dk_kind == 1 && e[0].me_key == k0 && e[0].me_value == v0;
        }
        Py_DECREF(d);
    }
#endif
    return PyBool_FromLong(dict_layout_ok);
}

/* An instance whose attributes are still CPython 3.11's inline values (no dict made
 * yet): the values array sits just before the object and is indexed like the class's
 * shared keys.  These mirror 3.11's private layouts; check_values verifies them once
 * at import against getattr, and any mismatch turns this path off. */
static int values_layout_ok;

#if CKPT_LAYOUT_311

/* A class whose instances may keep their attributes in inline values. */
static inline int managed_heap_type(PyTypeObject *tp)
{
    return (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) && (tp->tp_flags & Py_TPFLAGS_HEAPTYPE);
}

static inline PyObject **inline_values(PyObject *obj)
{
    if (!values_layout_ok || !managed_heap_type(Py_TYPE(obj)))
        return NULL;
    return ((PyObject ***)obj)[-4];
}

static inline Keys311 *split_keys(PyTypeObject *tp)
{
    Keys311 *k = (Keys311 *)((PyHeapTypeObject *)tp)->ht_cached_keys;
    return (k && k->dk_kind == 2 /* DICT_KEYS_SPLIT */) ? k : NULL;
}

static Py_ssize_t key_index(Keys311 *k, PyObject *name)
{
    UEntry311 *e = table_entries(k);
    for (Py_ssize_t i = 0; i < k->dk_nentries; i++)
        if (e[i].me_key == name)
            return i;
    return -1;
}

/* What look_ahead's last stages fetch for a field (TypeEntry.aslot): a reference's id
 * slot, a container's memo slot, or for a list of references its items and their id
 * slots. */
enum { AHEAD_REF, AHEAD_CONTAINER, AHEAD_REFS };

/* A field whose values are shared objects a save keeps touching (True, False, None, an
 * enum's members): fetching them ahead would only cost instructions. */
static inline int always_cached(const Field *f)
{
    return f->op == OP_ENUM || (f->op == OP_SCALAR && !(f->mask & ~(M_BOOL | M_NONE)));
}

/* Per-field indices into the inline values for the class's shared keys `k`. */
static Py_ssize_t *index_values(TypeEntry *te, Keys311 *k)
{
    if (!te->vindex) {
        te->vindex = PyMem_Calloc(te->nfields ? te->nfields : 1, sizeof(Py_ssize_t));
        te->ahead = PyMem_Calloc(te->nfields ? te->nfields : 1, sizeof(Py_ssize_t));
        te->aslot = PyMem_Calloc(te->nfields ? te->nfields : 1, sizeof(Py_ssize_t));
        if (!te->vindex || !te->ahead || !te->aslot) {
            PyMem_Free(te->vindex);
            PyMem_Free(te->ahead);
            PyMem_Free(te->aslot);
            te->vindex = NULL, te->ahead = NULL, te->aslot = NULL;
            return NULL;
        }
    }
    te->nahead = te->naslot = 0;
    for (Py_ssize_t i = 0; i < te->nfields; i++) {
        int op = te->fields[i].op;
        Py_ssize_t ix = te->fields[i].dict_ok ? key_index(k, te->fields[i].name) : -1;
        te->vindex[i] = ix;
        if (ix >= 0 && !always_cached(&te->fields[i]))
            te->ahead[te->nahead++] = ix;
        if (ix < 0)
            continue;
        if (op == OP_REF || op == OP_ANY)
            te->aslot[te->naslot++] = ix << 2 | AHEAD_REF;
        else if (op == OP_LIST && te->fields[i].kop == E_REF)
            te->aslot[te->naslot++] = ix << 2 | AHEAD_REFS;
        else if (op == OP_LIST || op == OP_SET || op == OP_DICT)
            te->aslot[te->naslot++] = ix << 2 | AHEAD_CONTAINER;
    }
    te->keys_seen = k;
    te->keys_entries = k->dk_nentries;
    return te->vindex;
}

/* The indices above, recomputed only when the shared keys change (once per object: the
 * check is inline, the recomputing is not). */
static inline Py_ssize_t *value_indices(TypeEntry *te, PyTypeObject *tp)
{
    Keys311 *k = split_keys(tp);
    if (!k)
        return NULL;
    if (te->vindex && te->keys_seen == k && te->keys_entries == k->dk_nentries)
        return te->vindex;
    return index_values(te, k);
}
#endif

static PyObject *check_values(PyObject *mod, PyObject *args)
{
    PyObject *obj, *name;
    if (!PyArg_ParseTuple(args, "OU", &obj, &name))
        return NULL;
    values_layout_ok = 0;
#if CKPT_LAYOUT_311
    PyTypeObject *tp = Py_TYPE(obj);
    if (managed_heap_type(tp) && !((PyObject **)obj)[-3]) {
        PyObject **values = ((PyObject ***)obj)[-4];
        Keys311 *k = split_keys(tp);
        PyObject *expect = PyObject_GetAttr(obj, name);
        if (!expect)
            return NULL;
        Py_ssize_t i = (values && k) ? key_index(k, name) : -1;
        values_layout_ok = i >= 0 && values[i] == expect;
        Py_DECREF(expect);
    }
#endif
    return PyBool_FromLong(values_layout_ok);
}

/* ---- direct stores into a fresh instance's inline values (the loader's) ---------------
 *
 * 3.11 keeps a fresh instance's attributes in a values array indexed like its class's
 * shared keys, with a byte array of insertion order just before it (values[-1]: the
 * prefix size, values[-2]: how many are in order).  PyObject_GenericSetAttr finds the
 * descriptor (none: the plan checked), the key's index and then does what
 * values_put does; the loader keeps the indices per type and does only the last part.
 * check_store verifies all of it once at import (store, then read back through the
 * instance dict CPython builds from the values, in order); any mismatch turns it off. */
static int store_layout_ok;

#if CKPT_LAYOUT_311
static int values_put(PyObject **values, Py_ssize_t ix, PyObject *v)
{
    PyObject *old = values[ix];
    if (old) {
        values[ix] = v;
        Py_DECREF(old);
        return 0;
    }
    uint8_t *size_ptr = (uint8_t *)values - 2;
    int size = *size_ptr;
    if (ix > 0xff || size + 2 >= ((uint8_t *)values)[-1])
        return -1; /* no room in the order array: the caller stores the usual way */
    size++;
    size_ptr[-size] = (uint8_t)ix;
    *size_ptr = (uint8_t)size;
    values[ix] = v;
    return 0;
}
#endif

const void *ckpt_store_keys(PyTypeObject *tp)
{
#if CKPT_LAYOUT_311
    if (!store_layout_ok || !managed_heap_type(tp))
        return NULL;
    return split_keys(tp);
#else
    (void)tp;
    return NULL;
#endif
}

Py_ssize_t ckpt_store_index(const void *keys, PyObject *name)
{
#if CKPT_LAYOUT_311
    return keys ? key_index((Keys311 *)keys, name) : -1;
#else
    (void)keys, (void)name;
    return -1;
#endif
}

PyObject **ckpt_store_values(PyObject *obj, const void *keys)
{
#if CKPT_LAYOUT_311
    PyTypeObject *tp = Py_TYPE(obj);
    if (!keys || ckpt_store_keys(tp) != keys || ((PyObject **)obj)[-3])
        return NULL; /* keys changed, or the instance has a dict of its own */
    return ((PyObject ***)obj)[-4];
#else
    (void)obj, (void)keys;
    return NULL;
#endif
}

int ckpt_store_put(PyObject *obj, const void *keys, PyObject **values, Py_ssize_t ix,
                   PyObject *v)
{
#if CKPT_LAYOUT_311
    /* ckpt_store_values checked the layout for this object; here only what Python code
     * run since could change: its class (and so its keys), or a dict made from its
     * values (the values pointer is then NULL) */
    if (split_keys(Py_TYPE(obj)) != keys || ((PyObject ***)obj)[-4] != values ||
        ((PyObject **)obj)[-3])
        return -1;
    return values_put(values, ix, v);
#else
    (void)obj, (void)keys, (void)values, (void)ix, (void)v;
    return -1;
#endif
}

/* check_store(fresh, name_a, a, name_b, b): `fresh` a new instance whose class's shared
 * keys hold both names and which has neither yet; stores b then a directly and checks
 * that the instance's dict reads {name_b: b, name_a: a} in that order. */
static PyObject *check_store(PyObject *mod, PyObject *args)
{
    PyObject *obj, *na, *a, *nb, *b;
    if (!PyArg_ParseTuple(args, "OUOUO", &obj, &na, &a, &nb, &b))
        return NULL;
    store_layout_ok = 0;
#if CKPT_LAYOUT_311
    if (!values_layout_ok)
        Py_RETURN_FALSE;
    store_layout_ok = 1; /* tentatively, so the helpers answer for the probe */
    const void *keys = ckpt_store_keys(Py_TYPE(obj));
    PyObject **values = ckpt_store_values(obj, keys);
    Py_ssize_t ia = ckpt_store_index(keys, na), ib = ckpt_store_index(keys, nb);
    store_layout_ok = 0;
    if (!values || ia < 0 || ib < 0 || ia == ib || values[ia] || values[ib] ||
        ((uint8_t *)values)[-2] != 0)
        Py_RETURN_FALSE;
    if (values_put(values, ib, Py_NewRef(b)) < 0)
        Py_RETURN_FALSE; /* nothing stored */
    if (values_put(values, ia, Py_NewRef(a)) < 0) {
        Py_DECREF(a);
        Py_RETURN_FALSE; /* b is in place and in order: still a valid instance */
    }
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (!d)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *k1, *v1, *k2, *v2;
    int ok = PyDict_GET_SIZE(d) == 2 && PyDict_Next(d, &pos, &k1, &v1) &&
             PyDict_Next(d, &pos, &k2, &v2) && k1 == nb && v1 == b && k2 == na && v2 == a;
    Py_DECREF(d);
    store_layout_ok = ok;
#endif
    return PyBool_FromLong(store_layout_ok);
}

/* A field's value (new reference): from the instance dict, trying the next entry in
 * insertion order first (dataclasses and both loaders fill fields in order). */
static inline PyObject *field_value(PyObject *obj, PyObject *d, Py_ssize_t *pos, Field *f)
{
    if (d && f->dict_ok) {
        Py_ssize_t at = *pos;
        PyObject *k, *v;
#if CKPT_LAYOUT_311
        /* A combined str-keyed table (what the loaders and __init__ make): look at the
         * entry in insertion order directly (layout checked by check_layout). */
        PyDictObject *dd = (PyDictObject *)d;
        Keys311 *dk = (Keys311 *)dd->ma_keys;
        if (dict_layout_ok && !dd->ma_values && dk->dk_kind == 1 /* DICT_KEYS_UNICODE */) {
            UEntry311 *e = table_entries(dk);
            if (at < dk->dk_nentries && e[at].me_key == f->name && e[at].me_value) {
                *pos = at + 1;
                return Py_NewRef(e[at].me_value);
            }
        }
        else if (dict_layout_ok && values_layout_ok && dd->ma_values && dk->dk_kind == 2) {
            /* a split table (a dict made from inline values): values by key index */
            UEntry311 *e = table_entries(dk);
            PyObject **vals = (PyObject **)dd->ma_values;
            if (at < dk->dk_nentries && e[at].me_key == f->name && vals[at]) {
                *pos = at + 1;
                return Py_NewRef(vals[at]);
            }
        }
        else
#endif
        if (PyDict_Next(d, &at, &k, &v) && k == f->name) {
            *pos = at;
            return Py_NewRef(v);
        }
        v = PyDict_GetItemWithError(d, f->name);
        if (v)
            return Py_NewRef(v);
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(obj, f->name); /* class attributes, __getattr__, errors */
}

#endif
