/* One field of a saved object, per op.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_FIELD_H
#define CKPT_NATIVE_FIELD_H

static int w_field(Walk *w, Buf *b, Field *f, PyObject *obj, PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    switch (f->op) {
    case OP_SCALAR: {
        int bit = fit_bit(v);
        if (bit & f->mask)
            return w_scalar(b, v, bit);
        return w_fallback(w, b, f, obj);
    }
    case OP_REF: {
        if (!ref_fits(w, v))
            return w_fallback(w, b, f, obj);
        Py_ssize_t i = ref_id(w, v);
        return i < 0 ? -1 : w_uint(b, (uint64_t)i);
    }
    case OP_ENUM: {
        if (v == Py_None && (f->mask & M_NONE))
            return w_byte(b, MP_NIL);
        if ((PyObject *)t != f->arg)
            return w_fallback(w, b, f, obj);
        return w_elem(w, b, E_ENUM, v, obj);
    }
    case OP_ANY:
        if (v == Py_None)
            return w_byte(b, MP_NIL);
        return w_dyn(w, b, v, obj, 0);
    case OP_SAVE: {
        PyObject *r = PyObject_CallOneArg(f->arg, v);
        if (!r)
            return -1;
        int rc = w_value(b, r, 0);
        Py_DECREF(r);
        return rc;
    }
    case OP_LIST: {
        if (t != &PyList_Type)
            return w_fallback(w, b, f, obj);
        int once = held_once(v);
        if (!once && memo_check(w, v))
            return seen_again(w, v) < 0 ? -1 : w_byte(b, MP_NIL);
        if ((f->kop == E_SCALAR &&
             !all_fit(((PyListObject *)v)->ob_item, PyList_GET_SIZE(v), f->kmask)) ||
            (f->kop == E_REF && !all_refs_fit(w, v)) ||
            (f->kop == E_TUPLE && !all_tuples_fit(f, v)))
            return w_fallback(w, b, f, obj);
        if (!once && memo_hold(w, v, obj) < 0)
            return -1;
        if (PyList_GET_SIZE(v) == 0 && f->elide)
            return w_byte(b, MP_NIL);
        return w_list_items(w, b, v, f->kop, obj);
    }
    case OP_SET: {
        if (t != &PySet_Type)
            return w_fallback(w, b, f, obj);
        int once = held_once(v);
        if (!once && memo_check(w, v))
            return seen_again(w, v) < 0 ? -1 : w_byte(b, MP_NIL);
        if (!set_fits(v, f->kop, f->kmask) || (f->kop == E_REF && !set_refs_fit(w, v)))
            return w_fallback(w, b, f, obj);
        if (!once && memo_hold(w, v, obj) < 0)
            return -1;
        if (PySet_GET_SIZE(v) == 0 && f->elide)
            return w_byte(b, MP_NIL);
        return w_set_items(w, b, v, f->kop, obj);
    }
    case OP_DICT: {
        if (t != &PyDict_Type)
            return w_fallback(w, b, f, obj);
        int once = held_once(v);
        if (!once && memo_check(w, v))
            return seen_again(w, v) < 0 ? -1 : w_byte(b, MP_NIL);
        if (!dict_fits(w, v, f->kop, f->kmask, f->vop, f->vmask))
            return w_fallback(w, b, f, obj);
        if (!once && memo_hold(w, v, obj) < 0)
            return -1;
        if (PyDict_GET_SIZE(v) == 0 && f->elide)
            return w_byte(b, MP_NIL);
        if (f->kop != E_ANY && f->vop != E_ANY) {
            int r = w_dict_direct(w, b, v, f->kop, f->vop, obj);
            if (r <= 0)
                return r;
        }
        /* [[keys], [values]], from snapshots: discovering can run Python code. */
        PyObject *keys = PyDict_Keys(v);
        if (!keys)
            return -1;
        PyObject *vals = PyDict_Values(v);
        if (!vals) {
            Py_DECREF(keys);
            return -1;
        }
        int r = w_byte(b, MP_FIXARRAY | 2);
        if (r == 0)
            r = w_list_items(w, b, keys, f->kop, obj);
        if (r == 0)
            r = w_list_items(w, b, vals, f->vop, obj);
        Py_DECREF(keys);
        Py_DECREF(vals);
        return r;
    }
    case OP_TUPLE:
        if (t != &PyTuple_Type)
            return w_fallback(w, b, f, obj);
        if (f->tarity >= 0) { /* tuple[A, B]: the length and each item's kind (the plan's
                               * masks, each within kmask) */
            PyObject **items = ((PyTupleObject *)v)->ob_item;
            if (PyTuple_GET_SIZE(v) != f->tarity)
                return w_fallback(w, b, f, obj);
            for (Py_ssize_t i = 0; i < f->tarity; i++)
                if (!(fit_bit(items[i]) & f->tmask[i]))
                    return w_fallback(w, b, f, obj);
        }
        else {
            if (!all_fit(((PyTupleObject *)v)->ob_item, PyTuple_GET_SIZE(v), f->kmask))
                return w_fallback(w, b, f, obj);
            if (f->arg != Py_None) { /* a tuple[A, B, ...] longer than MAX_TUPLE_ITEMS */
                Py_ssize_t n = PyTuple_GET_SIZE(f->arg);
                if (PyTuple_GET_SIZE(v) != n)
                    return w_fallback(w, b, f, obj);
                for (Py_ssize_t i = 0; i < n; i++)
                    if (!(fit_bit(PyTuple_GET_ITEM(v, i)) &
                          PyLong_AsLong(PyTuple_GET_ITEM(f->arg, i))))
                        return w_fallback(w, b, f, obj);
            }
        }
        if (v == empty_tuple)
            return w_byte(b, MP_NIL);
        if (w_array(b, PyTuple_GET_SIZE(v)) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++) {
            PyObject *x = PyTuple_GET_ITEM(v, i);
            if (w_scalar(b, x, type_bit(x)) < 0)
                return -1;
        }
        return 0;
    case OP_FROZENSET: {
        if (t != &PyFrozenSet_Type || !set_fits(v, E_SCALAR, f->kmask))
            return w_fallback(w, b, f, obj);
        return w_scalar_set(b, v);
    }
    case OP_VALUE: {
        if (v == Py_None && (f->mask & M_NONE))
            return w_byte(b, MP_NIL);
        int rc = w_std_value(b, f, v);
        return rc == 1 ? w_fallback(w, b, f, obj) : rc;
    }
    default:
        return w_fallback(w, b, f, obj);
    }
}

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
    PyObject *res = PyObject_CallMethodNoArgs(obj, str_before_save);
    if (!res)
        return -1;
    Py_DECREF(res);
    return 0;
}

#endif
