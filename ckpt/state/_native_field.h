/* One field of a saved object, per op.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_FIELD_H
#define CKPT_NATIVE_FIELD_H

/* Each op's writer takes the walk, the buffer, the field, the object and the field's
 * value; writes the value (0), or hands the field to its slot function when the value
 * is not exactly what the op covers; -1 on error. */
#define FIELD_ARGS Walk *w, Buf *b, Field *f, PyObject *obj, PyObject *v

static inline int w_field_scalar(FIELD_ARGS)
{
    int bit = fit_bit(v);
    if (bit & f->mask)
        return w_scalar(b, v, bit);
    if (bit == 0 && Py_TYPE(v) == &PyLong_Type && (f->mask & M_INT)) {
        int r = w_slot_bigint(w, b, v); /* beyond 64 bits: the slot's escape */
        if (r <= 0)
            return r;
    }
    return w_fallback(w, b, f, obj);
}

static inline int w_field_ref(FIELD_ARGS)
{
    Slot *s = pt_find(&w->ids, v); /* one lookup for an object met before */
    if (s)
        return w_uint(b, (uint64_t)(intptr_t)s->val);
    if (!ref_fits_new(w, v))
        return w_fallback(w, b, f, obj);
    Py_ssize_t i = discover(w, v);
    return i < 0 ? -1 : w_uint(b, (uint64_t)i);
}

static int w_field_enum(FIELD_ARGS)
{
    if (v == Py_None && (f->mask & M_NONE))
        return w_byte(b, MP_NIL);
    if ((PyObject *)Py_TYPE(v) != f->arg)
        return w_fallback(w, b, f, obj);
    return w_elem(w, b, f, E_ENUM, v, obj);
}

static int w_field_any(FIELD_ARGS)
{
    if (v == Py_None)
        return w_byte(b, MP_NIL);
    return w_dyn(w, b, v, obj, 0);
}

static int w_field_save(FIELD_ARGS)
{
    PyObject *r = PyObject_CallOneArg(f->arg, v);
    if (!r)
        return -1;
    int rc = w_value(b, r, 0);
    Py_DECREF(r);
    return rc;
}

/* A mutable container field's identity, in two halves as typed's code has it (the
 * plain fields test the items in between).  The seen half: a container met before (and
 * not held only by its owner, `once`) is written as Nil and recorded as shared: 1 if so
 * (or -1), 0 to write it. */
static inline int w_seen_container(Walk *w, Buf *b, PyObject *v, int once)
{
    if (once || !memo_check(w, v))
        return 0;
    return seen_again(w, v) < 0 || w_byte(b, MP_NIL) < 0 ? -1 : 1;
}

/* The hold half: a container about to be written is remembered as owned by `obj`
 * (unless only its owner holds it: then it cannot be met again).  0, -1 on error. */
static inline int hold_container(Walk *w, PyObject *v, PyObject *obj, int once)
{
    return once ? 0 : memo_hold(w, v, obj);
}

/* Both halves, where nothing comes between them (the Optional containers, whose items
 * were tested first, and bytearray): 1 if met before (Nil written), 0 if held and to
 * be written, -1 on error. */
static inline int w_container_identity(Walk *w, Buf *b, PyObject *v, PyObject *obj)
{
    int once = held_once(v), seen = w_seen_container(w, b, v, once);
    return seen ? seen : hold_container(w, v, obj, once);
}

static int w_field_list(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PyList_Type)
        return w_fallback(w, b, f, obj);
    int once = held_once(v), seen = w_seen_container(w, b, v, once);
    if (seen)
        return seen < 0 ? -1 : 0;
    if (!list_fits(w, f, v))
        return w_fallback(w, b, f, obj);
    if (hold_container(w, v, obj, once) < 0)
        return -1;
    if (PyList_GET_SIZE(v) == 0 && f->elide)
        return w_byte(b, MP_NIL);
    return w_list_items(w, b, f, v, f->kop, obj);
}

static int w_field_set(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PySet_Type)
        return w_fallback(w, b, f, obj);
    int once = held_once(v), seen = w_seen_container(w, b, v, once);
    if (seen)
        return seen < 0 ? -1 : 0;
    if (!set_all_fit(w, f, v))
        return w_fallback(w, b, f, obj);
    if (hold_container(w, v, obj, once) < 0)
        return -1;
    if (PySet_GET_SIZE(v) == 0 && f->elide)
        return w_byte(b, MP_NIL);
    return w_set_items(w, b, f, v, f->kop, obj);
}

/* [[keys], [values]] from snapshots: discovering can run Python code. */
static int w_dict_snapshots(Walk *w, Buf *b, Field *f, PyObject *obj, PyObject *d)
{
    PyObject *keys = PyDict_Keys(d);
    if (!keys)
        return -1;
    PyObject *vals = PyDict_Values(d);
    if (!vals) {
        Py_DECREF(keys);
        return -1;
    }
    int r = w_byte(b, MP_FIXARRAY | 2);
    if (r == 0)
        r = w_list_items(w, b, f, keys, f->kop, obj);
    if (r == 0)
        r = w_list_items(w, b, f, vals, f->vop, obj);
    Py_DECREF(keys);
    Py_DECREF(vals);
    return r;
}

/* A dict's [[keys], [values]]: read in place where nothing can change it meanwhile,
 * else from snapshots. */
static int w_dict_items(Walk *w, Buf *b, Field *f, PyObject *obj, PyObject *d)
{
    if (f->kop != E_ANY && f->vop != E_ANY && f->vop < E_LIST) { /* no side effects */
        int r = w_dict_direct(w, b, f, d, f->kop, f->vop, obj);
        if (r <= 0)
            return r;
    }
    return w_dict_snapshots(w, b, f, obj, d);
}

static int w_field_dict(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PyDict_Type)
        return w_fallback(w, b, f, obj);
    int once = held_once(v), seen = w_seen_container(w, b, v, once);
    if (seen)
        return seen < 0 ? -1 : 0;
    if (!dict_all_fit(w, f, v))
        return w_fallback(w, b, f, obj);
    if (hold_container(w, v, obj, once) < 0)
        return -1;
    if (PyDict_GET_SIZE(v) == 0 && f->elide)
        return w_byte(b, MP_NIL);
    return w_dict_items(w, b, f, obj, v);
}

/* An Optional list, set, dict or bytearray field (M_NONE in its op's mask): None is Nil;
 * anything else typed's compact form (fit.compact): the exact type, then the items
 * (so a shared container that does not fit is escaped, as typed escapes it), then its
 * identity (met before: Nil, recorded as shared), then the items, an empty container
 * an empty array (or b""), never Nil.  Out of line: the plain fields' code stays as
 * the walk had it. */
static CKPT_NOINLINE int w_field_opt_container(FIELD_ARGS)
{
    if (v == Py_None)
        return w_byte(b, MP_NIL);
    int fits;
    switch (f->op) {
    case OP_LIST: /* the generic tests: the plain fields' inline ones stay inlined once */
        fits = Py_TYPE(v) == &PyList_Type ? list_items_fit(w, f, v) : -1;
        break;
    case OP_SET:
        fits = Py_TYPE(v) == &PySet_Type ? set_items_fit(w, f, v) : -1;
        break;
    case OP_DICT:
        fits = Py_TYPE(v) == &PyDict_Type ? dict_items_fit(w, f, v) : -1;
        break;
    default: /* OP_BYTEARRAY */
        fits = Py_TYPE(v) == &PyByteArray_Type ? 1 : -1;
    }
    if (fits <= 0)
        return w_fallback(w, b, f, obj);
    int seen = w_container_identity(w, b, v, obj);
    if (seen)
        return seen < 0 ? -1 : 0;
    switch (f->op) {
    case OP_LIST:
        return w_list_items(w, b, f, v, f->kop, obj);
    case OP_SET:
        return w_set_items(w, b, f, v, f->kop, obj);
    case OP_DICT:
        return w_dict_items(w, b, f, obj, v);
    }
    return w_bin(b, PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
}

/* A plain bytearray field: typed's generated code for a mutable container (its exact
 * type, its identity, then bytes; the empty one Nil). */
static CKPT_NOINLINE int w_field_bytearray(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PyByteArray_Type)
        return w_fallback(w, b, f, obj);
    int seen = w_container_identity(w, b, v, obj);
    if (seen)
        return seen < 0 ? -1 : 0;
    if (PyByteArray_GET_SIZE(v) == 0 && f->elide)
        return w_byte(b, MP_NIL);
    return w_bin(b, PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
}

/* Whether a tuple's items fit the field: tuple[A, B] (the length and each item's kind,
 * the plan's masks, each within kmask), or tuple[X, ...] (each item within kmask), or a
 * tuple[A, B, ...] longer than MAX_TUPLE_ITEMS (its masks in the plan's arg). */
static int tuple_fits(Field *f, PyObject *v)
{
    PyObject **items = ((PyTupleObject *)v)->ob_item;
    Py_ssize_t n = PyTuple_GET_SIZE(v);
    if (f->tarity >= 0) {
        if (n != f->tarity)
            return 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (!(fit_bit(items[i]) & f->tmask[i]))
                return 0;
        return 1;
    }
    if (!all_fit(items, n, f->kmask))
        return 0;
    if (f->arg == Py_None)
        return 1;
    if (n != PyTuple_GET_SIZE(f->arg))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(fit_bit(items[i]) & PyLong_AsLong(PyTuple_GET_ITEM(f->arg, i))))
            return 0;
    return 1;
}

static int w_field_tuple(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PyTuple_Type || !tuple_fits(f, v))
        return w_fallback(w, b, f, obj);
    if (PyTuple_GET_SIZE(v) == 0) /* the empty tuple: Nil, as typed writes it */
        return w_byte(b, MP_NIL);
    if (w_array(b, PyTuple_GET_SIZE(v)) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++) {
        PyObject *x = PyTuple_GET_ITEM(v, i);
        if (w_scalar(b, x, type_bit(x)) < 0)
            return -1;
    }
    return 0;
}

/* The mask of a tuple position (tuple[A, B]) or of every item (tuple[X, ...]); M_REF: a
 * reference, as a reference slot takes it; M_ENUM: a member of the position's class. */
static inline int pos_mask(Field *f, Py_ssize_t i)
{
    return f->tarity >= 0 ? f->tmask[i] : f->kmask;
}

static inline PyObject *pos_cls(Field *f, Py_ssize_t i)
{
    return f->tarity >= 0 ? f->tcls[i] : f->kenum;
}

/* A tuple per position (E_REF in the plan's vop): items that are references, enum
 * members, Optional scalars, anything (Any: tuple[Any, ...], a bare tuple), or an
 * Optional[tuple] field's.  typed writes it through
 * the slot's fit test and compact encoder, so an array of each item's compact form
 * (the scalars, the references' ids, the members' values), the empty tuple an empty
 * array (not Nil). */
static CKPT_NOINLINE int w_field_ref_tuple(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PyTuple_Type)
        return v == Py_None && (f->mask & M_NONE) ? w_byte(b, MP_NIL) : w_fallback(w, b, f, obj);
    Py_ssize_t n = PyTuple_GET_SIZE(v);
    if (f->tarity >= 0 && n != f->tarity)
        return w_fallback(w, b, f, obj);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(v, i);
        int mask = pos_mask(f, i);
        if (mask == M_ANY)
            continue;
        if (mask == M_REF ? !ref_fits(w, x)
            : mask & M_ENUM ? !elem_fits(w, f, E_ENUM, mask, pos_cls(f, i), x)
                            : !(fit_bit(x) & mask))
            return w_fallback(w, b, f, obj);
    }
    if (w_array(b, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n && i < PyTuple_GET_SIZE(v); i++) {
        PyObject *x = PyTuple_GET_ITEM(v, i);
        int mask = pos_mask(f, i);
        if (mask == M_REF) {
            Py_ssize_t id = ref_id(w, x); /* discovering may run Python: the tuple is held */
            if (id < 0 || w_uint(b, (uint64_t)id) < 0)
                return -1;
        }
        else if (mask & M_ENUM) {
            if (w_elem(w, b, f, E_ENUM, x, obj) < 0)
                return -1;
        }
        else if (mask == M_ANY) {
            if (w_dyn(w, b, x, obj, 0) < 0) /* ctx.dyn's: None Nil, a reference tagged */
                return -1;
        }
        else if (w_scalar(b, x, type_bit(x)) < 0)
            return -1;
    }
    return 0;
}

/* A frozenset: typed's compact form (no identity: it is immutable), an array of its
 * items' (fit.compact), the empty one an empty array. */
static CKPT_NOINLINE int w_field_frozenset(FIELD_ARGS)
{
    if (Py_TYPE(v) != &PyFrozenSet_Type)
        return v == Py_None && (f->mask & M_NONE) ? w_byte(b, MP_NIL) : w_fallback(w, b, f, obj);
    if (!set_all_fit(w, f, v))
        return w_fallback(w, b, f, obj);
    return w_set_items(w, b, f, v, f->kop, obj);
}

/* An enum typed never writes compactly (member values that are not all 64-bit ints or
 * strs, or a Flag): every member is escaped as dyn writes it,
 * {T_SLOT: {T_ENUM: [type index, value self-describing]}}, the type recorded as
 * holding an escape; None in an Optional field is Nil; any other value the slot's. */
static CKPT_NOINLINE int w_field_enum_dyn(FIELD_ARGS)
{
    if (v == Py_None && (f->mask & M_NONE))
        return w_byte(b, MP_NIL);
    if ((PyObject *)Py_TYPE(v) != f->arg)
        return w_fallback(w, b, f, obj);
    PyObject *t = PyLong_FromSsize_t(w->cur_type);
    int r = t ? PySet_Add(w->escaped, t) : -1;
    Py_XDECREF(t);
    if (r < 0)
        return -1;
    Py_ssize_t index = enum_index(w, f->arg);
    if (index < 0)
        return -1;
    PyObject *val = enum_value(w, v); /* held by the walk's table until it ends */
    if (!val || w_raw(b, (const char[]){MP_FIXMAP | 1, TAG_SLOT, MP_FIXMAP | 1, TAG_ENUM,
                                        MP_FIXARRAY | 2}, 5) < 0 ||
        w_uint(b, (uint64_t)index) < 0)
        return -1;
    return w_dyn(w, b, val, obj, 0);
}

static int w_field_value(FIELD_ARGS)
{
    if (v == Py_None && (f->mask & M_NONE))
        return w_byte(b, MP_NIL);
    int rc = w_std_value(b, f, v);
    return rc == 1 ? w_fallback(w, b, f, obj) : rc;
}

static int w_field(FIELD_ARGS)
{
    switch (f->op) {
    case OP_SCALAR:
        return w_field_scalar(w, b, f, obj, v);
    case OP_REF:
        return w_field_ref(w, b, f, obj, v);
    case OP_ENUM:
        return w_field_enum(w, b, f, obj, v);
    case OP_ANY:
        return w_field_any(w, b, f, obj, v);
    case OP_SAVE:
        return w_field_save(w, b, f, obj, v);
    case OP_LIST:
        if (f->mask & M_NONE)
            return w_field_opt_container(w, b, f, obj, v);
        return w_field_list(w, b, f, obj, v);
    case OP_SET:
        if (f->mask & M_NONE)
            return w_field_opt_container(w, b, f, obj, v);
        return w_field_set(w, b, f, obj, v);
    case OP_DICT:
        if (f->mask & M_NONE)
            return w_field_opt_container(w, b, f, obj, v);
        return w_field_dict(w, b, f, obj, v);
    case OP_TUPLE:
        if (f->vop == E_REF)
            return w_field_ref_tuple(w, b, f, obj, v);
        return w_field_tuple(w, b, f, obj, v);
    case OP_FROZENSET:
        return w_field_frozenset(w, b, f, obj, v);
    case OP_VALUE:
        return w_field_value(w, b, f, obj, v);
    case OP_BYTEARRAY:
        if (f->mask & M_NONE)
            return w_field_opt_container(w, b, f, obj, v);
        return w_field_bytearray(w, b, f, obj, v);
    case OP_ENUM_DYN:
        return w_field_enum_dyn(w, b, f, obj, v);
    default:
        return w_fallback(w, b, f, obj);
    }
}
#undef FIELD_ARGS

static int run_before_save(Walk *w, PyObject *obj)
{
    PyObject *k = PyLong_FromVoidPtr(obj);
    if (!k)
        return -1;
    int has = PySet_Contains(w->hooked, k);
    if (has != 0) {
        Py_DECREF(k);
        return has < 0 ? -1 : 0;
    }
    int r = PySet_Add(w->hooked, k);
    Py_DECREF(k);
    if (r < 0)
        return -1;
    PyObject *res = PyObject_CallMethodNoArgs(obj, w->st->str_before_save);
    if (!res)
        return -1;
    Py_DECREF(res);
    return 0;
}

#endif
