/* The save walk: ids, the container memo, self-describing values, elements.
 * Why one file: the walk's ids, memo and element writers share one Walk struct and
 * call each other in its hot loop; the compiler sees them together in one unit.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_WALK_H
#define CKPT_NATIVE_WALK_H

/* ---- the save walk -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PTable ids;    /* address -> object id */
    PTable cmemo;  /* container address -> owner (strong) */
    PTable tindex; /* type address -> type index + 1 */
    PTable enumv;  /* enum member -> its _value_ (both strong) */
    PyObject *objects, *types, *shared, *plan_for, *enum_plan, *hooked, *ctx, *dyn;
    PyObject *savable, *escaped; /* registry._by_class; type indices with an escaped slot */
    PyObject *known[4]; /* classes ref_fits found registered, not yet in the type table */
    unsigned nknown;
    PyObject *fail_obj;
    Py_ssize_t fail_type;
    TypeEntry **tents;
    Py_ssize_t ntypes, cap_types;
    int32_t *tseq;
    Py_ssize_t ntseq, cap_tseq;
    PyObject *ids_view, *cmemo_view;
    CkptState *st; /* the state of the interpreter that made the walk */
    Py_ssize_t cur_type; /* the type index whose batch is being written */
    PyObject **held; /* containers recorded in cmemo from C, kept alive (strong) */
    Py_ssize_t nheld, cap_held;
} Walk;

static PyTypeObject WalkType, TableType;

typedef struct {
    PyObject_HEAD
    Walk *walk;
    int memo; /* 0: ids, 1: cmemo */
} Table;

static Py_ssize_t add_entry(Walk *w, PyTypeObject *cls, TypeEntry *te, PyObject *entry)
{
    if (w->ntypes == w->cap_types) {
        Py_ssize_t cap = w->cap_types ? w->cap_types * 2 : 16;
        TypeEntry **n = PyMem_Realloc(w->tents, cap * sizeof(TypeEntry *));
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        w->tents = n;
        w->cap_types = cap;
    }
    if (PyList_Append(w->types, entry) < 0)
        return -1;
    Py_ssize_t t = w->ntypes;
    if (pt_put(&w->tindex, cls, (void *)(intptr_t)(t + 1)) < 0) {
        /* keep types and tents in step */
        PySequence_DelItem(w->types, t);
        return -1;
    }
    w->tents[t] = te;
    w->ntypes++;
    return t;
}

/* The Plan ``native._plan_for`` left on the class's current TypeInfo, borrowed; NULL
 * (an error set only if the lookup failed) when there is none yet.  A class registered
 * again gets a new TypeInfo, so a plan found here is never a stale one. */
static PyObject *cached_plan(Walk *w, PyTypeObject *cls)
{
    PyObject *info = PyDict_GetItemWithError(w->savable, (PyObject *)cls);
    if (!info)
        return NULL;
    PyObject *d = PyObject_GenericGetDict(info, NULL);
    if (!d) { /* not a TypeInfo with a __dict__: let plan_for say what is wrong */
        PyErr_Clear();
        return NULL;
    }
    PyObject *plan = PyDict_GetItemWithError(d, w->st->str_native_plan);
    Py_DECREF(d); /* the info keeps its dict, and the dict the plan */
    return plan;
}

/* The type index of a savable class (added to the walk on first sight), or -1 with
 * an error set. */
static Py_ssize_t type_index(Walk *w, PyTypeObject *cls)
{
    Slot *s = pt_find(&w->tindex, cls);
    if (s)
        return (Py_ssize_t)(intptr_t)s->val - 1;
    PyObject *plan = cached_plan(w, cls);
    if (plan)
        Py_INCREF(plan);
    else if (PyErr_Occurred() || !(plan = PyObject_CallOneArg(w->plan_for, (PyObject *)cls)))
        return -1;
    if (!Py_IS_TYPE(plan, &PlanType)) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: plan_for must return a Plan");
        Py_DECREF(plan);
        return -1;
    }
    TypeEntry *te = te_from_plan((Plan *)plan);
    Py_DECREF(plan);
    if (!te)
        return -1;
    Py_ssize_t t = add_entry(w, cls, te, te->schema);
    if (t < 0)
        te_free(te);
    return t;
}

/* The type index of an enum class (added to the walk's types on first sight, as
 * graph.SaveWalk.enum_index adds it), or -1 with an error set. */
static Py_ssize_t enum_index(Walk *w, PyObject *cls)
{
    Slot *s = pt_find(&w->tindex, cls);
    if (s)
        return (Py_ssize_t)(intptr_t)s->val - 1;
    PyObject *r = PyObject_CallOneArg(w->enum_plan, cls);
    if (!r)
        return -1;
    TypeEntry *te = PyMem_Calloc(1, sizeof(TypeEntry));
    if (!te) {
        Py_DECREF(r);
        PyErr_NoMemory();
        return -1;
    }
    te->is_enum = 1;
    te->schema = Py_NewRef(cls);
    te->name = r;
    Py_ssize_t t = add_entry(w, (PyTypeObject *)cls, te, cls);
    if (t < 0)
        te_free(te);
    return t;
}

/* Whether a value without an id fits a reference slot: an instance of a registered
 * savable class (exact type).  No side effects. */
static int ref_fits_new(Walk *w, PyObject *x)
{
    Slot *s = pt_find(&w->tindex, Py_TYPE(x));
    if (s)
        return !w->tents[(intptr_t)s->val - 1]->is_enum;
    PyObject *tp = (PyObject *)Py_TYPE(x);
    for (int i = 0; i < 4; i++)
        if (w->known[i] == tp)
            return 1;
    /* A list of objects not met yet (a root's list) asks about one class many times:
     * remember the last few registered ones (held: the walk compares addresses). */
    int r = PyDict_Contains(w->savable, tp);
    if (r < 0)
        PyErr_Clear();
    if (r > 0)
        Py_XSETREF(w->known[w->nknown++ & 3], Py_NewRef(tp));
    return r > 0;
}

/* Whether a value fits a reference slot: None, an object with an id, or an instance
 * of a registered savable class (exact type).  No side effects. */
static inline int ref_fits(Walk *w, PyObject *x)
{
    return pt_find(&w->ids, x) || ref_fits_new(w, x);
}

/* The fit tests of a container's references skip an item that is the one that fitted
 * last: a list or dict of many references to one object not discovered yet (not in
 * the id table) asked the registry about it once per item.  ref_fits runs no Python,
 * so the container (which holds `last`) does not change during the test. */
static int all_refs_fit(Walk *w, PyObject *list)
{
    PyObject *last = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *x = PyList_GET_ITEM(list, i);
        if (x != last && !ref_fits(w, x))
            return 0;
        last = x;
    }
    return 1;
}

/* The loop every set fit test shares: `fits` becomes 1 if `item_fits` (an expression
 * of the set's borrowed item `k`) holds for every item of `set`, else 0.  An iteration
 * error (the portable path's) is cleared and a misfit: the slot function meets it again
 * and says so.  A macro rather than a function taking the test: each caller keeps its
 * own test inline (set_fits inlined in the walk, set_items_fit out of line). */
#define SET_ALL_FIT(fits, set, k, item_fits)                                                \
    do {                                                                                    \
        SetIter si_;                                                                        \
        PyObject *k;                                                                        \
        int r_ = 0;                                                                         \
        (fits) = 1;                                                                         \
        if (set_iter_init(&si_, (set)) < 0) {                                               \
            PyErr_Clear();                                                                  \
            (fits) = 0;                                                                     \
            break;                                                                          \
        }                                                                                   \
        while ((fits) && (r_ = set_iter_next(&si_, &k)) > 0)                                \
            (fits) = (item_fits);                                                           \
        set_iter_done(&si_);                                                                \
        if ((fits) && r_ < 0) {                                                             \
            PyErr_Clear();                                                                  \
            (fits) = 0;                                                                     \
        }                                                                                   \
    } while (0)

static int set_refs_fit(Walk *w, PyObject *set)
{
    int fits;
    SET_ALL_FIT(fits, set, k, ref_fits(w, k));
    return fits;
}

static Py_ssize_t discover(Walk *w, PyObject *x)
{
    Py_ssize_t t = type_index(w, Py_TYPE(x));
    if (t < 0)
        return -1;
    TypeEntry *te = w->tents[t];
    if (te->is_enum) {
        PyErr_Format(PyExc_TypeError, "an enum member (%R) cannot be saved as an object", x);
        return -1;
    }
    Py_ssize_t i = PyList_GET_SIZE(w->objects);
    if (w->ntseq == w->cap_tseq) {
        Py_ssize_t cap = w->cap_tseq ? w->cap_tseq * 2 : 1024;
        int32_t *n = PyMem_Realloc(w->tseq, cap * sizeof(int32_t));
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        w->tseq = n;
        w->cap_tseq = cap;
    }
    if (te->npending == te->cap_pending) {
        Py_ssize_t cap = te->cap_pending ? te->cap_pending * 2 : 64;
        PyObject **n = PyMem_Realloc(te->pending, cap * sizeof(PyObject *));
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        te->pending = n;
        te->cap_pending = cap;
    }
    if (pt_put(&w->ids, x, (void *)(intptr_t)i) < 0)
        return -1;
    if (PyList_Append(w->objects, x) < 0)
        return -1;
    w->tseq[w->ntseq++] = (int32_t)t;
    te->pending[te->npending++] = x;
    return i;
}

static inline Py_ssize_t ref_id(Walk *w, PyObject *x)
{
    Slot *s = pt_find(&w->ids, x);
    if (s)
        return (Py_ssize_t)(intptr_t)s->val;
    return discover(w, x);
}

static int seen_again(Walk *w, PyObject *c)
{
    PyObject *k = PyLong_FromVoidPtr(c);
    if (!k)
        return -1;
    int r = PyDict_SetItem(w->shared, k, c);
    Py_DECREF(k);
    return r;
}

/* A field's container that only its owner and the walk hold (the reference w_field is
 * given) is reachable from nowhere else, so it cannot be met again and its identity
 * need not be recorded: the typed engine's rule (codegen.UNIQUE_REFS), so the streams
 * stay the same.  It keeps the memo to containers that are really shared (on a large
 * graph the memo was the walk's biggest table), and a container a getter makes afresh
 * for each object is no longer taken for the one freed at its address before. */
static inline int held_once(PyObject *c)
{
#ifdef Py_GIL_DISABLED
    (void)c;
    return 0; /* counts cannot tell */
#else
    return Py_REFCNT(c) <= 2;
#endif
}

/* Remember a container's first owner; 1 if it was met before. */
static int memo_check(Walk *w, PyObject *c)
{
    return pt_find(&w->cmemo, c) != NULL;
}

static int memo_put(Walk *w, PyObject *c, PyObject *owner)
{
    if (pt_put(&w->cmemo, c, owner) < 0)
        return -1;
    Py_INCREF(owner);
    return 0;
}

/* Keep a container alive until the walk ends (walk_clear_tables lets go). */
static int hold(Walk *w, PyObject *c)
{
    if (w->nheld == w->cap_held) {
        Py_ssize_t cap = w->cap_held ? w->cap_held * 2 : 64;
        PyObject **held = PyMem_Realloc(w->held, (size_t)cap * sizeof(PyObject *));
        if (!held) {
            PyErr_NoMemory();
            return -1;
        }
        w->held = held;
        w->cap_held = cap;
    }
    w->held[w->nheld++] = Py_NewRef(c);
    return 0;
}

/* memo_put, and the container held: the memo knows it by its address, and a container
 * freed mid-walk (one a getter made for a single read) would leave that address to the
 * next one allocated, which would be taken for it. */
static int memo_hold(Walk *w, PyObject *c, PyObject *owner)
{
    return memo_put(w, c, owner) < 0 ? -1 : hold(w, c);
}

static int w_dyn(Walk *w, Buf *b, PyObject *v, PyObject *owner, int depth);

/* An int beyond 64 bits as the typed engine's dyn encoder writes it, {T_BIGINT: str(v)}:
 * 0, -1 on error, 1 (nothing written, no error) where str() refuses it (more digits than
 * sys.get_int_max_str_digits allows): the Python path then raises the same error. */
static int w_bigint(Buf *b, PyObject *v)
{
    PyObject *s = PyObject_Str(v);
    if (!s) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    int r = w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, TAG_BIGINT) < 0 || w_str(b, s) < 0 ? -1 : 0;
    Py_DECREF(s);
    return r;
}

/* A compact slot's escape of an int beyond 64 bits, {T_SLOT: {T_BIGINT: str(v)}}, and
 * the current type recorded as holding an escape (typed's SaveCtx.esc): 0, -1 on error,
 * 1 (nothing written) where w_bigint declines. */
static int w_slot_bigint(Walk *w, Buf *b, PyObject *v)
{
    Py_ssize_t start = b->len;
    if (w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, TAG_SLOT) < 0)
        return -1;
    int r = w_bigint(b, v);
    if (r != 0) {
        b->len = start;
        return r;
    }
    PyObject *t = PyLong_FromSsize_t(w->cur_type);
    r = t ? PySet_Add(w->escaped, t) : -1;
    Py_XDECREF(t);
    return r;
}

static int w_dyn_python(Walk *w, Buf *b, PyObject *v, PyObject *owner)
{
    PyObject *r = PyObject_CallFunctionObjArgs(w->dyn, v, owner, NULL);
    if (!r)
        return -1;
    int rc = w_value(b, r, 0);
    Py_DECREF(r);
    return rc;
}

static int w_dyn_items(Walk *w, Buf *b, PyObject *list, PyObject *owner, int depth)
{
    Py_ssize_t n = PyList_GET_SIZE(list), at = b->len, i;
    if (w_array(b, n) < 0)
        return -1;
    for (i = 0; i < PyList_GET_SIZE(list); i++) { /* the live size: see fix_array */
        PyObject *x = PyList_GET_ITEM(list, i);
        Py_INCREF(x);
        int r = w_dyn(w, b, x, owner, depth + 1);
        Py_DECREF(x);
        if (r < 0)
            return -1;
    }
    return fix_array(b, at, n, i);
}

/* {tag: [items]} for a snapshot of a set or frozenset. */
static int w_dyn_set(Walk *w, Buf *b, PyObject *v, uint8_t tag, PyObject *owner, int depth)
{
    PyObject *items = PySequence_List(v);
    if (!items)
        return -1;
    int r = (w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, tag) < 0) ? -1 : 0;
    if (r == 0)
        r = w_dyn_items(w, b, items, owner, depth);
    Py_DECREF(items);
    return r;
}

/* A self-describing value, as the typed engine's dyn encoder (dyn.make_encoder) writes
 * it: the same checks in the same order for the types handled here; any other type
 * (and any value nested deeper than MAX_DEPTH) is that encoder's call. */
static int w_dyn(Walk *w, Buf *b, PyObject *v, PyObject *owner, int depth)
{
    int bit = type_bit(v);
    if (bit) {
        if (bit != M_INT)
            return w_scalar(b, v, bit);
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow)
            return w_int(b, x);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (!(u == (unsigned long long)-1 && PyErr_Occurred()))
                return w_head(b, MP_UINT64, u, 8);
            PyErr_Clear();
        }
        int r = w_bigint(b, v); /* a big int: tagged */
        return r <= 0 ? r : w_dyn_python(w, b, v, owner);
    }
    if (depth >= MAX_DEPTH)
        return w_dyn_python(w, b, v, owner);
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyList_Type) {
        if (memo_check(w, v))
            return seen_again(w, v) < 0 ? -1 : w_byte(b, MP_NIL);
        if (memo_hold(w, v, owner) < 0)
            return -1;
        return w_dyn_items(w, b, v, owner, depth);
    }
    if (t == &PyDict_Type) {
        if (memo_check(w, v))
            return seen_again(w, v) < 0 ? -1 : w_byte(b, MP_NIL);
        if (memo_hold(w, v, owner) < 0)
            return -1;
        PyObject *keys = PyDict_Keys(v);
        if (!keys)
            return -1;
        PyObject *vals = PyDict_Values(v);
        if (!vals) {
            Py_DECREF(keys);
            return -1;
        }
        int r = (w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, TAG_DICT) < 0 ||
                 w_byte(b, MP_FIXARRAY | 2) < 0)
                    ? -1
                    : 0;
        if (r == 0)
            r = w_dyn_items(w, b, keys, owner, depth);
        if (r == 0)
            r = w_dyn_items(w, b, vals, owner, depth);
        Py_DECREF(keys);
        Py_DECREF(vals);
        return r;
    }
    if (t == &PyTuple_Type) {
        Py_ssize_t n = PyTuple_GET_SIZE(v);
        if (w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, TAG_TUPLE) < 0 || w_array(b, n) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (w_dyn(w, b, PyTuple_GET_ITEM(v, i), owner, depth + 1) < 0)
                return -1;
        return 0;
    }
    Slot *s = pt_find(&w->ids, v);
    if (s) {
        if (w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, TAG_REF) < 0)
            return -1;
        return w_uint(b, (uint64_t)(intptr_t)s->val);
    }
    if (t == &PySet_Type) {
        if (memo_check(w, v))
            return seen_again(w, v) < 0 ? -1 : w_byte(b, MP_NIL);
        if (memo_hold(w, v, owner) < 0)
            return -1;
        return w_dyn_set(w, b, v, TAG_SET, owner, depth);
    }
    if (t == &PyFrozenSet_Type)
        return w_dyn_set(w, b, v, TAG_FROZENSET, owner, depth);
    Slot *ts = pt_find(&w->tindex, t);
    int fresh = 0; /* a registered class this walk has not met (a fresh walk's root) */
    if (!ts && Py_IS_TYPE(t, &PyType_Type) &&
        (fresh = PyDict_Contains(w->savable, (PyObject *)t)) < 0)
        return -1; /* enum classes (their own metaclass) stay ctx.dyn's */
    if (fresh || (ts && !w->tents[(intptr_t)ts->val - 1]->is_enum)) {
        Py_ssize_t i = discover(w, v);
        if (i < 0)
            return -1;
        if (w_byte(b, MP_FIXMAP | 1) < 0 || w_byte(b, TAG_REF) < 0)
            return -1;
        return w_uint(b, (uint64_t)i);
    }
    return w_dyn_python(w, b, v, owner); /* bytearray, enum members, new types, errors */
}

/* An enum member's _value_, borrowed from the walk's table (which holds both): a
 * program's enums have few members, met again and again, so each member's _value_ is
 * looked up once per walk.  NULL with an error set. */
static CKPT_NOINLINE PyObject *enum_value_new(Walk *w, PyObject *x)
{
    PyObject *val = PyObject_GetAttr(x, w->st->str_value_);
    if (!val)
        return NULL;
    if (pt_put(&w->enumv, x, val) < 0) {
        Py_DECREF(val);
        return NULL;
    }
    Py_INCREF(x); /* the table owns key and value now */
    return val;
}

static inline PyObject *enum_value(Walk *w, PyObject *x)
{
    Slot *s = pt_find(&w->enumv, x);
    return s ? (PyObject *)s->val : enum_value_new(w, x);
}

static CKPT_NOINLINE int w_pos_items(Walk *w, Buf *b, Field *f, PyObject *x, PyObject *owner);
static int w_ref_items(Walk *w, Buf *b, PyObject *v);

/* Whether x fits node i of a nest program (E_NEST) and the nodes below it, as typed's
 * fit.fits(kind) tests it: exact types, ints within 64 bits.  The recursion follows the
 * program (each node's nodes below come after it: at most MAX_ELEM_NODES calls deep),
 * never the input.  No side effects: no Python code runs. */
static CKPT_NOINLINE int nest_fits(Walk *w, const SNode *p, int i, PyObject *x)
{
    const SNode *n = &p[i];
    int fits = 1;
    if (x == Py_None && (n->mask & M_NONE))
        return 1;
    switch (n->kind) {
    case SK_SCALAR:
        return (fit_bit(x) & n->mask) != 0;
    case SK_REF:
        return ref_fits(w, x);
    case SK_ENUM:
        return n->cls && (PyObject *)Py_TYPE(x) == n->cls;
    case SK_LIST:
        if (Py_TYPE(x) != &PyList_Type)
            return 0;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(x); j++)
            if (!nest_fits(w, p, n->a, PyList_GET_ITEM(x, j)))
                return 0;
        return 1;
    case SK_SET:
    case SK_FROZENSET:
        if (Py_TYPE(x) != (n->kind == SK_SET ? &PySet_Type : &PyFrozenSet_Type))
            return 0;
        SET_ALL_FIT(fits, x, k, nest_fits(w, p, n->a, k));
        return fits;
    case SK_DICT: {
        if (Py_TYPE(x) != &PyDict_Type)
            return 0;
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (dict_next(x, &pos, &k, &v))
            if (!nest_fits(w, p, n->a, k) || !nest_fits(w, p, n->b, v))
                return 0;
        return 1;
    }
    }
    return 0;
}

static CKPT_NOINLINE int w_nest(Walk *w, Buf *b, const SNode *p, int i, PyObject *x,
                                PyObject *owner);

/* A nested container that changed while it was written (code run to discover an object
 * or to read an enum member's value changed it): a ValueError, which the API reports
 * as the save's StateError; never a short array or a value its node does not take. */
static int nest_changed(void)
{
    PyErr_SetString(PyExc_ValueError,
                    "a container changed while it was being saved; a save must not change "
                    "the objects it saves");
    return -1;
}

/* The items of a list (a snapshot where Python code may have run: a set's, a dict's
 * keys or values) as node i of a nest program writes each.  Writing an item may run
 * Python code: a list that shrinks meanwhile is an error, not a short array. */
static int w_nest_items(Walk *w, Buf *b, const SNode *p, int i, PyObject *list,
                        PyObject *owner)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (w_array(b, n) < 0)
        return -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (j >= PyList_GET_SIZE(list))
            return nest_changed();
        PyObject *y = PyList_GET_ITEM(list, j);
        Py_INCREF(y);
        int r = w_nest(w, b, p, i, y, owner);
        Py_DECREF(y);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* A snapshot's items (PySequence_List, PyDict_Keys, PyDict_Values: a new list or NULL)
 * as node i writes each; the snapshot released. */
static int w_nest_snapshot(Walk *w, Buf *b, const SNode *p, int i, PyObject *snap,
                           PyObject *owner)
{
    if (!snap)
        return -1;
    int r = w_nest_items(w, b, p, i, snap, owner);
    Py_DECREF(snap);
    return r;
}

/* A value nest_fits let through, as typed's fit.compact(kind) writes it: a mutable
 * container met before is Nil (recorded as shared), else remembered as owned by `owner`
 * and its items written (an empty one an empty array); a dict [[keys], [values]].
 * Bounded by the program as nest_fits is.  A value that no longer fits its node (Python
 * code ran while a reference was discovered) is an error. */
static CKPT_NOINLINE int w_nest(Walk *w, Buf *b, const SNode *p, int i, PyObject *x,
                                PyObject *owner)
{
    const SNode *n = &p[i];
    if (x == Py_None && (n->mask & M_NONE))
        return w_byte(b, MP_NIL);
    PyTypeObject *t;
    switch (n->kind) {
    case SK_SCALAR: {
        int bit = fit_bit(x);
        return bit & n->mask ? w_scalar(b, x, bit) : nest_changed();
    }
    case SK_REF: {
        Py_ssize_t id = ref_id(w, x);
        return id < 0 ? -1 : w_uint(b, (uint64_t)id);
    }
    case SK_ENUM: {
        if (!n->cls || (PyObject *)Py_TYPE(x) != n->cls)
            return nest_changed();
        PyObject *val = enum_value(w, x);
        return val ? w_value(b, val, 0) : -1;
    }
    case SK_FROZENSET: /* immutable: no identity */
        if (Py_TYPE(x) != &PyFrozenSet_Type)
            return nest_changed();
        return w_nest_snapshot(w, b, p, n->a, PySequence_List(x), owner);
    case SK_LIST:
        t = &PyList_Type;
        break;
    case SK_SET:
        t = &PySet_Type;
        break;
    default:
        t = &PyDict_Type;
    }
    if (Py_TYPE(x) != t)
        return nest_changed();
    if (memo_check(w, x))
        return seen_again(w, x) < 0 ? -1 : w_byte(b, MP_NIL);
    if (memo_hold(w, x, owner) < 0)
        return -1;
    if (n->kind == SK_LIST)
        return w_nest_items(w, b, p, n->a, x, owner);
    if (n->kind == SK_SET)
        return w_nest_snapshot(w, b, p, n->a, PySequence_List(x), owner);
    /* keys, then values, as typed's comprehensions; snapshots: discovering runs Python */
    PyObject *vals = PyDict_Values(x);
    if (!vals || w_byte(b, MP_FIXARRAY | 2) < 0 ||
        w_nest_snapshot(w, b, p, n->a, PyDict_Keys(x), owner) < 0) {
        Py_XDECREF(vals);
        return -1;
    }
    return w_nest_snapshot(w, b, p, n->b, vals, owner);
}

/* One element of a container field (f: its per-position masks for E_TUPLE); 0 ok, -1
 * error. */
static int w_elem(Walk *w, Buf *b, Field *f, int op, PyObject *x, PyObject *owner)
{
    switch (op) {
    case E_SCALAR:
        return w_scalar(b, x, type_bit(x));
    case E_REF: {
        Py_ssize_t i = ref_id(w, x);
        return i < 0 ? -1 : w_uint(b, (uint64_t)i);
    }
    case E_ENUM: {
        Slot *s = pt_find(&w->enumv, x);
        if (s)
            return w_value(b, (PyObject *)s->val, 0);
        if (x == Py_None) /* Optional[E]: the fit test let it through */
            return w_byte(b, MP_NIL);
        PyObject *val = enum_value_new(w, x);
        return val ? w_value(b, val, 0) : -1;
    }
    case E_ANY:
        return w_dyn(w, b, x, owner, 0);
    case E_LIST:
    case E_LIST_REF: /* checked by elem_fits: a list of fitting items */
        if (memo_check(w, x))
            return seen_again(w, x) < 0 ? -1 : w_byte(b, MP_NIL);
        if (memo_hold(w, x, owner) < 0)
            return -1;
        if (op == E_LIST_REF)
            return w_ref_items(w, b, x);
        if (w_array(b, PyList_GET_SIZE(x)) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(x); i++) { /* scalars: no Python runs */
            PyObject *y = PyList_GET_ITEM(x, i);
            if (w_scalar(b, y, type_bit(y)) < 0)
                return -1;
        }
        return 0;
    case E_NEST: /* checked by nest_fits */
        return w_nest(w, b, f->nest, 0, x, owner);
    case E_TUPLE: /* checked by tuple_item_fits */
        if (f->tarity >= 0)
            return w_pos_items(w, b, f, x, owner);
        if (w_array(b, PyTuple_GET_SIZE(x)) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(x); i++) {
            PyObject *y = PyTuple_GET_ITEM(x, i);
            if (w_scalar(b, y, type_bit(y)) < 0)
                return -1;
        }
        return 0;
    }
    PyErr_SetString(PyExc_SystemError, "ckpt native: bad element op");
    return -1;
}

/* All of a sequence's items have an allowed exact scalar type. */
static int all_fit(PyObject **items, Py_ssize_t n, int mask)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(fit_bit(items[i]) & mask))
            return 0;
    return 1;
}

/* Whether an item fits a tuple position's mask: a reference (M_REF), a member of the
 * position's enum class (M_ENUM, or None with M_NONE), or a scalar.  No side effects. */
static inline int pos_fits(Walk *w, int mask, PyObject *cls, PyObject *x)
{
    if (mask == M_REF)
        return ref_fits(w, x);
    if (mask & M_ENUM)
        return ((PyObject *)Py_TYPE(x) == cls && cls) || (x == Py_None && (mask & M_NONE));
    return (fit_bit(x) & mask) != 0;
}

/* A fixed tuple's items by position, each as typed's compact form of its kind (the
 * reference's id, the member's value, the scalar), checked by pos_fits.  The tuple
 * holds its items while discovering runs Python. */
static CKPT_NOINLINE int w_pos_items(Walk *w, Buf *b, Field *f, PyObject *x, PyObject *owner)
{
    Py_ssize_t n = PyTuple_GET_SIZE(x);
    if (w_array(b, n) < 0)
        return -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *y = PyTuple_GET_ITEM(x, j);
        int mask = f->tmask[j];
        if (mask == M_REF) {
            Py_ssize_t id = ref_id(w, y);
            if (id < 0 || w_uint(b, (uint64_t)id) < 0)
                return -1;
        }
        else if (mask & M_ENUM) {
            if (w_elem(w, b, f, E_ENUM, y, owner) < 0)
                return -1;
        }
        else if (w_scalar(b, y, type_bit(y)) < 0)
            return -1;
    }
    return 0;
}

/* An exact tuple whose items fit the field's tuple kind: tuple[A, B] (the field's
 * per-position masks: scalars, references, enums), or tuple[X, ...] (each item within
 * `mask`, its side's mask). */
static int tuple_item_fits(Walk *w, Field *f, PyObject *x, int mask)
{
    if (Py_TYPE(x) != &PyTuple_Type)
        return 0;
    PyObject **items = ((PyTupleObject *)x)->ob_item;
    Py_ssize_t n = PyTuple_GET_SIZE(x);
    if (f->tarity < 0)
        return all_fit(items, n, mask);
    if (n != f->tarity)
        return 0;
    for (Py_ssize_t j = 0; j < n; j++)
        if (!pos_fits(w, f->tmask[j], f->tcls[j], items[j]))
            return 0;
    return 1;
}

/* Whether one item fits a container's element op (E_SCALAR's mask; E_ENUM's class, or
 * None with M_NONE in the mask; E_TUPLE's kind).  No side effects. */
static inline int elem_fits(Walk *w, Field *f, int op, int mask, PyObject *cls, PyObject *x)
{
    switch (op) {
    case E_SCALAR:
        return (fit_bit(x) & mask) != 0;
    case E_REF:
        return ref_fits(w, x);
    case E_ENUM:
        return ((PyObject *)Py_TYPE(x) == cls && cls) || (x == Py_None && (mask & M_NONE));
    case E_TUPLE:
        return tuple_item_fits(w, f, x, mask);
    case E_LIST:
        return Py_TYPE(x) == &PyList_Type &&
               all_fit(((PyListObject *)x)->ob_item, PyList_GET_SIZE(x), mask);
    case E_LIST_REF:
        return Py_TYPE(x) == &PyList_Type && all_refs_fit(w, x);
    case E_NEST:
        return nest_fits(w, f->nest, 0, x);
    }
    return 1; /* E_ANY */
}

/* Every item of a list fits the field's item op, any op (out of line: the common ops'
 * tests stay inline in the walk). */
static CKPT_NOINLINE int list_items_fit(Walk *w, Field *f, PyObject *list)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
        if (!elem_fits(w, f, f->kop, f->kmask, f->kenum, PyList_GET_ITEM(list, i)))
            return 0;
    return 1;
}

/* Every item of a list fits the field's item op. */
static inline int list_fits(Walk *w, Field *f, PyObject *list)
{
    if (f->kop == E_SCALAR)
        return all_fit(((PyListObject *)list)->ob_item, PyList_GET_SIZE(list), f->kmask);
    if (f->kop == E_REF)
        return all_refs_fit(w, list);
    return f->kop == E_ANY || list_items_fit(w, f, list);
}

static int set_fits(PyObject *s, int op, int mask)
{
    if (op != E_SCALAR)
        return 1;
    int fits;
    SET_ALL_FIT(fits, s, k, (fit_bit(k) & mask) != 0);
    return fits;
}

/* Every item of a set or frozenset fits the field's item op, any op (out of line: sets
 * are rare, and inlined this loop would grow the walk every save runs). */
static CKPT_NOINLINE int set_items_fit(Walk *w, Field *f, PyObject *s)
{
    int fits;
    SET_ALL_FIT(fits, s, k, elem_fits(w, f, f->kop, f->kmask, f->kenum, k));
    return fits;
}

/* Every item of a set or frozenset fits the field's item op. */
static inline int set_all_fit(Walk *w, Field *f, PyObject *s)
{
    if (f->kop == E_ENUM || f->kop == E_TUPLE)
        return set_items_fit(w, f, s);
    return set_fits(s, f->kop, f->kmask) && (f->kop != E_REF || set_refs_fit(w, s));
}

static int dict_fits(Walk *w, PyObject *d, int kop, int kmask, int vop, int vmask)
{
    if (kop == E_ANY && vop == E_ANY)
        return 1;
    Py_ssize_t pos = 0;
    PyObject *k, *v, *vlast = NULL; /* as all_refs_fit: the value that fitted last */
    while (dict_next(d, &pos, &k, &v)) {
        if ((kop == E_SCALAR && !(fit_bit(k) & kmask)) || (kop == E_REF && !ref_fits(w, k)))
            return 0;
        if ((vop == E_SCALAR && !(fit_bit(v) & vmask)) ||
            (vop == E_REF && v != vlast && !ref_fits(w, v)))
            return 0;
        if (vop == E_REF)
            vlast = v;
    }
    return 1;
}

/* Every entry of a dict fits the field's key and value ops, any ops (out of line). */
static CKPT_NOINLINE int dict_items_fit(Walk *w, Field *f, PyObject *d)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (dict_next(d, &pos, &k, &v))
        if (!elem_fits(w, f, f->kop, f->kmask, f->kenum, k) ||
            !elem_fits(w, f, f->vop, f->vmask, f->venum, v))
            return 0;
    return 1;
}

/* Every entry of a dict fits the field's key and value ops. */
static inline int dict_all_fit(Walk *w, Field *f, PyObject *d)
{
    if (f->kop == E_ENUM || f->kop == E_TUPLE || f->vop == E_ENUM || f->vop >= E_TUPLE)
        return dict_items_fit(w, f, d);
    return dict_fits(w, d, f->kop, f->kmask, f->vop, f->vmask);
}

static int w_fallback(Walk *w, Buf *b, Field *f, PyObject *obj)
{
    PyObject *r = PyObject_CallFunctionObjArgs(f->fallback, obj, w->ctx, NULL);
    if (!r)
        return -1;
    int rc = w_value(b, r, 0);
    Py_DECREF(r);
    return rc;
}

/* A list of references writes an item that is the one before it without looking its
 * id up again (a list of one shared object: the id table's lookup was a third of the
 * item's cost).  `last` cannot be another object at a recycled address: every object
 * with an id is held by w->objects until the walk is released. */
static int w_ref_items(Walk *w, Buf *b, PyObject *v)
{
    PyObject *last = NULL;
    Py_ssize_t id = 0, n = PyList_GET_SIZE(v), at = b->len, i;
    if (w_array(b, n) < 0)
        return -1;
    for (i = 0; i < PyList_GET_SIZE(v); i++) { /* the live size: see fix_array */
        PyObject *x = PyList_GET_ITEM(v, i);
        if (x != last) {
            Py_INCREF(x); /* discovering may run Python that empties the list */
            id = ref_id(w, x);
            Py_DECREF(x);
            if (id < 0)
                return -1;
            last = x;
        }
        if (w_uint(b, (uint64_t)id) < 0)
            return -1;
    }
    return fix_array(b, at, n, i);
}

static int w_list_items(Walk *w, Buf *b, Field *f, PyObject *v, int op, PyObject *owner)
{
    if (op == E_REF)
        return w_ref_items(w, b, v);
    Py_ssize_t n = PyList_GET_SIZE(v), at = b->len, i;
    if (w_array(b, n) < 0)
        return -1;
    for (i = 0; i < PyList_GET_SIZE(v); i++) { /* the live size: see fix_array */
        PyObject *x = PyList_GET_ITEM(v, i);
        Py_INCREF(x);
        int r = w_elem(w, b, f, op, x, owner);
        Py_DECREF(x);
        if (r < 0)
            return -1;
    }
    return fix_array(b, at, n, i);
}

/* A set or frozenset of scalars, read in place: writing a scalar runs no Python code. */
static int w_scalar_set(Buf *b, PyObject *v)
{
    if (w_array(b, PySet_GET_SIZE(v)) < 0)
        return -1;
    SetIter si;
    PyObject *k;
    int r;
    if (set_iter_init(&si, v) < 0)
        return -1;
    while ((r = set_iter_next(&si, &k)) > 0)
        if (w_scalar(b, k, type_bit(k)) < 0) {
            r = -1;
            break;
        }
    set_iter_done(&si);
    return r;
}

static int w_set_items(Walk *w, Buf *b, Field *f, PyObject *v, int op, PyObject *owner)
{
    if (op == E_SCALAR)
        return w_scalar_set(b, v);
    /* Iterate a snapshot: discovering can run Python code. */
    PyObject *items = PySequence_List(v);
    if (!items)
        return -1;
    int r = w_list_items(w, b, f, items, op, owner);
    Py_DECREF(items);
    return r;
}

#if CKPT_LAYOUT_311 || PY_VERSION_HEX >= 0x030C0000
/* One pass of a dict's keys (which 0) or values (1), read in place. */
static int w_dict_pass(Walk *w, Buf *b, Field *f, PyObject *d, int which, int op,
                       PyObject *owner)
{
    if (w_array(b, PyDict_GET_SIZE(d)) < 0)
        return -1;
    Py_ssize_t pos = 0, id = 0;
    PyObject *k, *x, *last = NULL; /* as w_ref_items: a reference met just before */
    while (dict_next(d, &pos, &k, &x)) {
        PyObject *item = which ? x : k;
        if (op == E_REF && item == last) {
            if (w_uint(b, (uint64_t)id) < 0)
                return -1;
            continue;
        }
        if (op == E_REF) {
            Py_INCREF(item); /* discovering may run Python */
            id = ref_id(w, item);
            Py_DECREF(item);
            if (id < 0 || w_uint(b, (uint64_t)id) < 0)
                return -1;
            last = item;
            continue;
        }
        Py_INCREF(item); /* held: discovering may run Python */
        int r = w_elem(w, b, f, op, item, owner);
        Py_DECREF(item);
        if (r < 0)
            return -1;
    }
    return 0;
}
#endif

#if PY_VERSION_HEX >= 0x030C0000
/* The dict w_dict_direct is reading (3.12+), and whether it changed meanwhile. */
static PyObject *watched_dict;
static int watched_changed;

static int on_dict_event(PyDict_WatchEvent event, PyObject *d, PyObject *key, PyObject *value)
{
    (void)event, (void)key, (void)value;
    if (d == watched_dict)
        watched_changed = 1;
    return 0;
}
#endif

/* [[keys], [values]] of a dict read in place, without the two snapshot lists: 0 done,
 * -1 error, 1 the dict changed meanwhile (only Python code run to discover a new class
 * can change it), so nothing was written and the caller takes snapshots.  Only for
 * scalar and reference items: what they write has no side effect a second try repeats
 * differently (an object discovered keeps its id). */
static int w_dict_direct(Walk *w, Buf *b, Field *f, PyObject *d, int kop, int vop,
                         PyObject *owner)
{
#if CKPT_LAYOUT_311
    Py_ssize_t start = b->len;
    uint64_t version = ((PyDictObject *)d)->ma_version_tag;
    Py_INCREF(d);
    int r = w_byte(b, MP_FIXARRAY | 2);
    if (r == 0)
        r = w_dict_pass(w, b, f, d, 0, kop, owner);
    if (r == 0)
        r = w_dict_pass(w, b, f, d, 1, vop, owner);
    if (r == 0 && ((PyDictObject *)d)->ma_version_tag != version) {
        b->len = start;
        r = 1;
    }
    Py_DECREF(d);
    return r;
#elif PY_VERSION_HEX >= 0x030C0000
    /* No version tag to compare from 3.12: a dict watcher (public API) says whether
     * the dict changed.  One dict at a time (a nested walk takes snapshots). */
    int dict_watcher = w->st->dict_watcher;
    if (dict_watcher < 0 || watched_dict)
        return 1;
    if (PyDict_Watch(dict_watcher, d) < 0) {
        PyErr_Clear();
        return 1;
    }
    Py_ssize_t start = b->len;
    watched_dict = Py_NewRef(d);
    watched_changed = 0;
    int r = w_byte(b, MP_FIXARRAY | 2);
    if (r == 0)
        r = w_dict_pass(w, b, f, d, 0, kop, owner);
    if (r == 0)
        r = w_dict_pass(w, b, f, d, 1, vop, owner);
    if (PyDict_Unwatch(dict_watcher, d) < 0 && r == 0)
        r = -1;
    if (r == 0 && watched_changed) {
        b->len = start;
        r = 1;
    }
    watched_dict = NULL;
    Py_DECREF(d);
    return r;
#else
    return 1;
#endif
}

#endif
