/* CPython-layout reads and stores: instance dicts, inline values, direct stores.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_LAYOUT_H
#define CKPT_NATIVE_LAYOUT_H

/* ---- where an instance keeps its attributes -------------------------------------------
 *
 * An instance of a "managed dict" class (Py_TPFLAGS_MANAGED_DICT: a plain class without
 * __slots__) keeps its attributes in a values array indexed like its class's shared keys
 * (ht_cached_keys) until something asks for its __dict__, and in a dict after that.
 * Where the two live differs by version (CPython's pycore_object.h and pycore_dict.h):
 *
 *   3.11  the dict pointer at obj[-3], the values pointer at obj[-4] (NULL once a dict
 *         exists); the insertion order is a byte array just before the values.
 *   3.12  one word at obj[-3]: the dict pointer, or the values pointer minus one (the low
 *         bit set); the insertion order as in 3.11.
 *   3.13  the dict pointer at obj[-3]; the values inline, right after the object header
 *         (Py_TPFLAGS_INLINE_VALUES), behind a 4-byte header {capacity, size, embedded,
 *         valid}, with the insertion order after the array.  A dict made from them shares
 *         them (the values stay valid); one that replaces them clears `valid`.
 *
 * check_layout and check_values verify the reading once, at import, against
 * PyObject_GenericGetDict and getattr; any mismatch turns these paths off, and every
 * field is then read with getattr. */

#if CKPT_LAYOUT_313
typedef struct {
    uint8_t capacity; /* slots in the array */
    uint8_t size;     /* attributes set, in the order array after the slots */
    uint8_t embedded;
    uint8_t valid;
    PyObject *values[1];
} Values313;

static inline Values313 *values_header(PyObject **values)
{
    return (Values313 *)((char *)values - offsetof(Values313, values));
}
#endif

#if CKPT_LAYOUT_VALUES
/* The instance's dict (borrowed), or NULL if it has none yet; a managed-dict class's. */
static inline PyObject *managed_dict(PyObject *obj)
{
#if CKPT_LAYOUT_312
    uintptr_t word = ((uintptr_t *)obj)[-3];
    return (word & 1) ? NULL : (PyObject *)word;
#else
    return ((PyObject **)obj)[-3];
#endif
}

/* The instance's own values array, or NULL where its attributes are not there (a dict
 * replaced them, or the class keeps none); a managed-dict heap type's instance. */
static inline PyObject **own_values(PyObject *obj)
{
#if CKPT_LAYOUT_311
    return ((PyObject ***)obj)[-4];
#elif CKPT_LAYOUT_312
    uintptr_t word = ((uintptr_t *)obj)[-3];
    return (word & 1) ? (PyObject **)(word + 1) : NULL;
#else
    PyTypeObject *tp = Py_TYPE(obj);
    if (!(tp->tp_flags & Py_TPFLAGS_INLINE_VALUES))
        return NULL;
    Values313 *v = (Values313 *)((char *)obj + tp->tp_basicsize);
    return v->valid ? v->values : NULL;
#endif
}

/* A split dict's values array (a dict made from an instance's values). */
static inline PyObject **split_values(PyDictObject *d)
{
#if CKPT_LAYOUT_313
    return ((Values313 *)d->ma_values)->values;
#else
    return (PyObject **)d->ma_values;
#endif
}

/* Whether a values array has a slot for each of the first n shared keys.  CPython sizes
 * each instance's array for every key its class can still gain, so this holds; it is
 * checked where the array carries its size (3.13), as a bound on what is read. */
static inline int values_hold(PyObject **values, Py_ssize_t n)
{
#if CKPT_LAYOUT_313
    return n <= values_header(values)->capacity;
#else
    (void)values, (void)n;
    return 1;
#endif
}
#endif

/* 1 once check_layout found the instance dict where managed_dict looks (and a dict's
 * tables where field_value reads them). */
static int dict_layout_ok;

static inline PyObject *instance_dict(PyObject *obj)
{
#if CKPT_LAYOUT_VALUES
    if (dict_layout_ok && (Py_TYPE(obj)->tp_flags & Py_TPFLAGS_MANAGED_DICT)) {
        PyObject *d = managed_dict(obj);
        if (d && PyDict_CheckExact(d))
            return d;
    }
#endif
    return NULL;
}

/* 1 once check_values found a fresh instance's attribute in its values array. */
static int values_layout_ok;

#if CKPT_LAYOUT_VALUES
/* A class whose instances may keep their attributes in a values array. */
static inline int managed_heap_type(PyTypeObject *tp)
{
    return (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) && (tp->tp_flags & Py_TPFLAGS_HEAPTYPE);
}

static inline DictKeys *split_keys(PyTypeObject *tp)
{
    DictKeys *k = (DictKeys *)((PyHeapTypeObject *)tp)->ht_cached_keys;
    return (k && k->dk_kind == 2 /* DICT_KEYS_SPLIT */) ? k : NULL;
}

static Py_ssize_t key_index(DictKeys *k, PyObject *name)
{
    StrEntry *e = table_entries(k);
    for (Py_ssize_t i = 0; i < k->dk_nentries; i++)
        if (e[i].me_key == name)
            return i;
    return -1;
}

/* The values array an instance's attributes are read from, where it has no dict. */
static inline PyObject **inline_values(PyObject *obj)
{
    if (!values_layout_ok || !managed_heap_type(Py_TYPE(obj)))
        return NULL;
    return own_values(obj);
}
#endif

static PyObject *check_layout(PyObject *mod, PyObject *obj)
{
    dict_layout_ok = 0;
#if CKPT_LAYOUT_VALUES
    if (Py_TYPE(obj)->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
        PyObject *d = PyObject_GenericGetDict(obj, NULL);
        if (!d)
            return NULL;
        int ok = managed_dict(obj) == d;
        /* and field_value finds the dict's first entry where it looks: in a combined
         * str-keyed table by position, in a split one (3.12 and 3.13 make one from the
         * values) by shared-key index */
        PyDictObject *dd = (PyDictObject *)d;
        PyObject *k0 = NULL, *v0 = NULL;
        Py_ssize_t pos = 0;
        if (ok && PyDict_Next(d, &pos, &k0, &v0)) {
            DictKeys *dk = (DictKeys *)dd->ma_keys;
            StrEntry *e = table_entries(dk);
            if (!dd->ma_values)
                ok = dk->dk_kind == 1 && e[0].me_key == k0 && e[0].me_value == v0;
            else {
                Py_ssize_t i = dk->dk_kind == 2 ? key_index(dk, k0) : -1;
                ok = i >= 0 && split_values(dd)[i] == v0;
            }
        }
        Py_DECREF(d);
        dict_layout_ok = ok;
    }
#endif
    return PyBool_FromLong(dict_layout_ok);
}

#if CKPT_LAYOUT_VALUES
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
static Py_ssize_t *index_values(TypeEntry *te, DictKeys *k)
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
    DictKeys *k = split_keys(tp);
    if (!k)
        return NULL;
    if (te->vindex && te->keys_seen == k && te->keys_entries == k->dk_nentries)
        return te->vindex;
    return index_values(te, k);
}

/* How many attributes a values array's insertion order holds. */
static inline int values_count(PyObject **values)
{
#if CKPT_LAYOUT_313
    return values_header(values)->size;
#else
    return ((uint8_t *)values)[-2];
#endif
}
#endif

/* check_values(fresh, name): `fresh` an instance whose __init__ set only `name`; finds
 * that attribute in its values array, in order, as getattr finds it. */
static PyObject *check_values(PyObject *mod, PyObject *args)
{
    PyObject *obj, *name;
    if (!PyArg_ParseTuple(args, "OU", &obj, &name))
        return NULL;
    values_layout_ok = 0;
#if CKPT_LAYOUT_VALUES
    PyTypeObject *tp = Py_TYPE(obj);
    if (managed_heap_type(tp) && !managed_dict(obj)) {
        PyObject **values = own_values(obj);
        DictKeys *k = split_keys(tp);
        PyObject *expect = PyObject_GetAttr(obj, name);
        if (!expect)
            return NULL;
        Py_ssize_t i = (values && k) ? key_index(k, name) : -1;
        values_layout_ok = i >= 0 && values_hold(values, k->dk_nentries) &&
                           values_count(values) == 1 && values[i] == expect;
        Py_DECREF(expect);
    }
#endif
    return PyBool_FromLong(values_layout_ok);
}

/* ---- direct stores into a fresh instance's values (the loader's) ----------------------
 *
 * A fresh instance's values array is indexed like its class's shared keys, with a byte
 * array of insertion order beside it (3.11 and 3.12: before it, values[-1] the prefix
 * size and values[-2] how many are in order; 3.13: after its `capacity` slots, `size`
 * in its header).  PyObject_GenericSetAttr finds the descriptor (none: the plan
 * checked), the key's index and then does what values_put does; the loader keeps the
 * indices per type and does only the last part.  check_store verifies all of it once
 * at import (store, then read back through the instance dict CPython builds from the
 * values, in order); any mismatch turns it off. */
static int store_layout_ok;

#if CKPT_LAYOUT_VALUES
CKPT_INLINE int values_put(PyObject **values, Py_ssize_t ix, PyObject *v)
{
#if CKPT_LAYOUT_313
    Values313 *h = values_header(values);
    if (ix >= h->capacity)
        return -1;
#endif
    PyObject *old = values[ix];
    if (old) {
        values[ix] = v;
        Py_DECREF(old);
        return 0;
    }
#if CKPT_LAYOUT_313
    if (h->size >= h->capacity)
        return -1; /* no room in the order array: the caller stores the usual way */
    ((uint8_t *)&values[h->capacity])[h->size] = (uint8_t)ix;
    h->size++;
#else
    uint8_t *size_ptr = (uint8_t *)values - 2;
    int size = *size_ptr;
    if (ix > 0xff || size + 2 >= ((uint8_t *)values)[-1])
        return -1; /* no room in the order array: the caller stores the usual way */
    size++;
    size_ptr[-size] = (uint8_t)ix;
    *size_ptr = (uint8_t)size;
#endif
    values[ix] = v;
    return 0;
}
#endif

const void *ckpt_store_keys(PyTypeObject *tp)
{
#if CKPT_LAYOUT_VALUES
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
#if CKPT_LAYOUT_VALUES
    return keys ? key_index((DictKeys *)keys, name) : -1;
#else
    (void)keys, (void)name;
    return -1;
#endif
}

PyObject **ckpt_store_values(PyObject *obj, const void *keys)
{
#if CKPT_LAYOUT_VALUES
    PyTypeObject *tp = Py_TYPE(obj);
    if (!keys || ckpt_store_keys(tp) != keys || managed_dict(obj))
        return NULL; /* keys changed, or the instance has a dict of its own */
    PyObject **values = own_values(obj);
    return values && values_hold(values, ((DictKeys *)keys)->dk_nentries) ? values : NULL;
#else
    (void)obj, (void)keys;
    return NULL;
#endif
}

int ckpt_store_put(PyObject *obj, const void *keys, PyObject **values, Py_ssize_t ix,
                   PyObject *v)
{
#if CKPT_LAYOUT_VALUES
    /* ckpt_store_values checked the layout for this object; here only what Python code
     * run since could change: its class (and so its keys), or a dict made from its
     * values (3.11, 3.12: the values pointer is gone then; 3.13: the dict shares them,
     * and would not hear of the store) */
    if (split_keys(Py_TYPE(obj)) != keys || own_values(obj) != values || managed_dict(obj))
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
#if CKPT_LAYOUT_VALUES
    if (!values_layout_ok)
        Py_RETURN_FALSE;
    store_layout_ok = 1; /* tentatively, so the helpers answer for the probe */
    const void *keys = ckpt_store_keys(Py_TYPE(obj));
    PyObject **values = ckpt_store_values(obj, keys);
    Py_ssize_t ia = ckpt_store_index(keys, na), ib = ckpt_store_index(keys, nb);
    store_layout_ok = 0;
    if (!values || ia < 0 || ib < 0 || ia == ib || values[ia] || values[ib] ||
        values_count(values) != 0)
        Py_RETURN_FALSE;
    if (values_put(values, ib, Py_NewRef(b)) < 0) {
        Py_DECREF(b);
        Py_RETURN_FALSE; /* nothing stored */
    }
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
#if CKPT_LAYOUT_VALUES
        /* A combined str-keyed table (what the loaders and __init__ make): look at the
         * entry in insertion order directly (layout checked by check_layout). */
        PyDictObject *dd = (PyDictObject *)d;
        DictKeys *dk = (DictKeys *)dd->ma_keys;
        if (dict_layout_ok && !dd->ma_values && dk->dk_kind == 1 /* DICT_KEYS_UNICODE */) {
            StrEntry *e = table_entries(dk);
            if (at < dk->dk_nentries && e[at].me_key == f->name && e[at].me_value) {
                *pos = at + 1;
                return Py_NewRef(e[at].me_value);
            }
        }
        else if (dict_layout_ok && values_layout_ok && dd->ma_values && dk->dk_kind == 2) {
            /* a split table (a dict made from inline values): values by key index */
            StrEntry *e = table_entries(dk);
            PyObject **vals = split_values(dd);
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
