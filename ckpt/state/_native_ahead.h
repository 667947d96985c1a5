/* Looking ahead in the save walk: prefetches for the objects to come.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_AHEAD_H
#define CKPT_NATIVE_AHEAD_H

/* ---- looking ahead --------------------------------------------------------------------
 *
 * A large graph's save is bound by memory latency more than by instructions.  perf's
 * cpu-clock samples put about two thirds of walk_run's time on a chain of dependent
 * loads per object, each a likely cache miss: the object's header, its dict or inline
 * values, then each attribute value's header, and the id-table and memo slots.
 * The pending list says which objects come next, so each link of the chain is fetched
 * a few objects ahead, one link per stage.
 *
 * A stage re-reads its chain from the object every time (the Python code a field may
 * run can change any of it) and reads only what the save itself reads a moment later;
 * what it finds it only prefetches, which never faults and never changes a value. */
#define LOOK 4 /* objects between one stage and the next; the gain is flat over 2-12 */

/* Objects a walk must have met before it looks ahead: as many as fill a core's L2 cache
 * at about 512 bytes each (4096 for 2 MiB; set at import).  A smaller graph stays in the
 * caches, where the stages are only instructions that prefetch nothing worth having;
 * past them each stage hides a miss the save would wait for. */
static Py_ssize_t look_min = 4096;

static void look_min_init(void)
{
#ifdef _SC_LEVEL2_CACHE_SIZE
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 >= 64 * 1024 && l2 <= 1024L * 1024 * 1024)
        look_min = l2 / 512;
#endif
}

/* Every 64-byte line that bytes [p, p + n) touch. */
static inline void prefetch_lines(const void *p, size_t n)
{
    uintptr_t end = (uintptr_t)p + n;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64)
        __builtin_prefetch((const void *)a);
}

/* Stage 1: the object's header, and the dict and values pointers just before it. */
static inline void ahead_object(PyObject *o)
{
    __builtin_prefetch((const char *)o - 32);
    __builtin_prefetch(o);
}

#if CKPT_LAYOUT_VALUES
/* The array the object's attribute values are in, indexed by the class's shared keys:
 * its inline values or its dict's split table (NULL if neither, or unindexed). */
CKPT_INLINE PyObject **values_for_ahead(TypeEntry *te, PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject **values = inline_values(o);
    if (!values) {
        PyDictObject *d = (PyDictObject *)instance_dict(o);
        if (!d || !d->ma_values || !values_layout_ok || !managed_heap_type(tp) ||
            (DictKeys *)d->ma_keys != split_keys(tp))
            return NULL;
        values = split_values(d);
    }
    return value_indices(te, tp) && values_hold(values, te->keys_entries) ? values : NULL;
}

/* Stage 2: the object's inline values, or its dict. */
static inline void ahead_values(TypeEntry *te, PyObject *o)
{
    PyObject **v = inline_values(o);
    if (v) {
        prefetch_lines(v, (size_t)te->nfields * sizeof(PyObject *));
        return;
    }
    if (dict_layout_ok && (Py_TYPE(o)->tp_flags & Py_TPFLAGS_MANAGED_DICT)) {
        PyObject *d = managed_dict(o);
        if (d)
            prefetch_lines(d, sizeof(PyDictObject));
    }
}

/* Stage 3: that dict's values (a split table) or entries (a combined one). */
static inline void ahead_dict(TypeEntry *te, PyObject *o)
{
    PyDictObject *d = (PyDictObject *)instance_dict(o);
    if (!d)
        return;
    DictKeys *dk = (DictKeys *)d->ma_keys;
    if (d->ma_values)
        prefetch_lines(split_values(d), (size_t)te->nfields * sizeof(PyObject *));
    else if (dk->dk_kind == 1 /* DICT_KEYS_UNICODE */)
        prefetch_lines(table_entries(dk), (size_t)te->nfields * sizeof(StrEntry));
}

/* Stage 4: each attribute value's header (w_field reads every value's type) and the
 * line after it, where an int's digits, a float's value or a str's state and text lie
 * when the object straddles two lines.  Values are found as save_object and
 * field_value find them: by shared-key index in inline values or a split table, by
 * position in a combined str-keyed table.  Scalars are fetched too: the save reads
 * each one a moment later, and a scalar is as likely to miss as a reference. */
static inline void ahead_fields(TypeEntry *te, PyObject *o)
{
    PyObject **values = values_for_ahead(te, o);
    if (values) {
        const Py_ssize_t *ix = te->ahead;
        for (Py_ssize_t j = 0, m = te->nahead; j < m; j++) {
            PyObject *v = values[ix[j]];
            const char *at = v ? (const char *)v : (const char *)values; /* no branch */
            __builtin_prefetch(at);
            __builtin_prefetch(at + 48);
        }
        return;
    }
    PyDictObject *d = (PyDictObject *)instance_dict(o);
    DictKeys *dk = d ? (DictKeys *)d->ma_keys : NULL;
    if (!dk || d->ma_values || dk->dk_kind != 1 /* DICT_KEYS_UNICODE */)
        return;
    StrEntry *e = table_entries(dk);
    Py_ssize_t n = dk->dk_nentries < te->nfields ? dk->dk_nentries : te->nfields;
    for (Py_ssize_t i = 0; i < n; i++)
        if (e[i].me_value) {
            __builtin_prefetch(e[i].me_value);
            __builtin_prefetch((const char *)e[i].me_value + 48);
        }
}

/* The first items of a list of references that the stages look at. */
#define AHEAD_ITEMS 8

/* Stage 4b, two objects ahead: the item arrays of its lists of references (the list
 * headers came with stage 4). */
static inline void ahead_items(TypeEntry *te, PyObject *o)
{
    PyObject **values = values_for_ahead(te, o);
    if (!values)
        return;
    for (Py_ssize_t j = 0; j < te->naslot; j++) {
        Py_ssize_t c = te->aslot[j];
        PyObject *v = values[c >> 2];
        if ((c & 3) == AHEAD_REFS && v && PyList_CheckExact(v)) {
            Py_ssize_t n = PyList_GET_SIZE(v);
            prefetch_lines(((PyListObject *)v)->ob_item,
                           (size_t)(n < AHEAD_ITEMS ? n : AHEAD_ITEMS) * sizeof(PyObject *));
        }
        else if ((c & 3) == AHEAD_CONTAINER && v && PyDict_CheckExact(v))
            __builtin_prefetch(((PyDictObject *)v)->ma_keys); /* its keys' header */
    }
}

/* A field's dict, one object ahead: the entries dict_fits and the writing step through
 * (their header came with stage 4b; 16 bytes an entry for str keys, 24 for others). */
static inline void ahead_dict_entries(PyObject *v)
{
    DictKeys *dk = (DictKeys *)((PyDictObject *)v)->ma_keys;
    size_t size = (size_t)dk->dk_nentries * (dk->dk_kind == 0 ? 24 : 16);
    prefetch_lines(table_entries(dk), size < 512 ? size : 512);
}

/* Stage 5, one object before it is written: the id-table slot of each reference, the
 * memo slot of each container that something else holds too (held_once: no memo), and
 * for a list of references each item's header and id slot (all_refs_fit looks both up
 * for every item: in a graph past the caches those look-ups miss).  They are fetched
 * here, this late, and not with the headers (stage 4): fetched that early they compete
 * with the headers for the cache and are evicted before the write uses them. */
static inline void ahead_slots(Walk *w, TypeEntry *te, PyObject *o)
{
    PyObject **values = values_for_ahead(te, o);
    if (!values || !w->ids.slots)
        return;
    for (Py_ssize_t j = 0; j < te->naslot; j++) {
        Py_ssize_t c = te->aslot[j];
        PyObject *v = values[c >> 2];
        if (!v)
            continue;
        switch (c & 3) {
        case AHEAD_REF:
            __builtin_prefetch(&w->ids.slots[phash(&w->ids, v)]);
            break;
        case AHEAD_REFS:
            if (PyList_CheckExact(v)) {
                Py_ssize_t n = PyList_GET_SIZE(v);
                PyObject **items = ((PyListObject *)v)->ob_item;
                for (Py_ssize_t k = 0; k < n && k < AHEAD_ITEMS; k++) {
                    __builtin_prefetch(items[k]);
                    __builtin_prefetch(&w->ids.slots[phash(&w->ids, items[k])]);
                }
            }
            /* fall through: the list's own memo slot */
        default:
            if (PyDict_CheckExact(v))
                ahead_dict_entries(v);
            if (w->cmemo.slots && Py_REFCNT(v) > 1)
                __builtin_prefetch(&w->cmemo.slots[phash(&w->cmemo, v)]);
        }
    }
}
#endif

static inline void look_ahead(Walk *w, TypeEntry *te, Py_ssize_t i)
{
    if (PyList_GET_SIZE(w->objects) < look_min)
        return;
    PyObject **p = te->pending;
    Py_ssize_t n = te->npending;
    if (i + 4 * LOOK < n)
        ahead_object(p[i + 4 * LOOK]);
#if CKPT_LAYOUT_VALUES
    if (i + 3 * LOOK < n)
        ahead_values(te, p[i + 3 * LOOK]);
    if (i + 2 * LOOK < n)
        ahead_dict(te, p[i + 2 * LOOK]);
    if (i + LOOK < n)
        ahead_fields(te, p[i + LOOK]);
    if (i + 2 < n)
        ahead_items(te, p[i + 2]);
    if (i + 1 < n)
        ahead_slots(w, te, p[i + 1]);
#endif
}

#endif
