/* Saving an object, running a walk, and the Walk and Table types Python sees.
 * Why one file: saving one object, running the walk over the rest and the two types
 * Python sees (Walk, Table) are one lifecycle: create, run, release.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_SAVE_H
#define CKPT_NATIVE_SAVE_H

static int save_object(Walk *w, TypeEntry *te, PyObject *obj)
{
    if (te->before_save && run_before_save(w, obj) < 0)
        return -1;
    Buf *b = &te->rows;
    if (w_array(b, te->nfields) < 0)
        return -1;
    /* Held: Python code run for a field (a slot function) may replace obj.__dict__. */
    PyObject *d = te->dict_ok ? Py_XNewRef(instance_dict(obj)) : NULL;
    Py_ssize_t pos = 0;
#if CKPT_LAYOUT_VALUES
    Py_ssize_t *vindex = NULL;
    /* The full layout checks once per object (inline_values, value_indices); after a
     * field whose writing may have run Python code, only what that code could change:
     * the instance's class (__class__ assignment), its keys, or its values (gone once
     * a dict exists). */
    PyTypeObject *tp = Py_TYPE(obj);
    PyObject **values = te->dict_ok && !d ? inline_values(obj) : NULL;
    if (values)
        vindex = value_indices(te, tp);
    if (!vindex || !values_hold(values, te->keys_entries))
        values = NULL, vindex = NULL;
    int stale = 0; /* Python code may have run since `values` was checked */
#endif
    int rc = 0;
    for (Py_ssize_t i = 0; i < te->nfields && rc == 0; i++) {
        Field *f = &te->fields[i];
        if (f->op == OP_PY) {
            rc = w_fallback(w, b, f, obj);
#if CKPT_LAYOUT_VALUES
            stale = 1;
#endif
            continue;
        }
        PyObject *v = NULL;
#if CKPT_LAYOUT_VALUES
        if (vindex && vindex[i] >= 0) {
            if (stale) { /* read afresh (see above) */
                values = own_values(obj);
                if (!values || Py_TYPE(obj) != tp || te->keys_seen != split_keys(tp) ||
                    !values_hold(values, te->keys_entries))
                    values = NULL, vindex = NULL;
                stale = 0;
            }
            PyObject *x = values ? values[vindex[i]] : NULL;
            if (x && f->op == OP_SCALAR) {
                /* A scalar that fits is written without running Python code, so the
                 * value needs no reference of its own and `values` stays valid. */
                int bit = fit_bit(x);
                if (bit & f->mask) {
                    rc = w_scalar(b, x, bit);
                    continue;
                }
            }
            if (x)
                v = Py_NewRef(x);
        }
        if (!v)
#endif
            v = field_value(obj, d, &pos, f);
        if (!v) {
            rc = -1;
            break;
        }
        rc = w_field(w, b, f, obj, v);
        Py_DECREF(v);
#if CKPT_LAYOUT_VALUES
        stale = 1;
#endif
    }
    Py_XDECREF(d);
    if (rc == 0)
        te->nrows++;
    return rc;
}

/* Encode every pending object, type by type, until none is left (w->ctx set); with
 * `stats` not None, each type's batch is timed into it.  0, or -1 with an error. */
static int walk_run_pending(Walk *w, PyObject *ctx, PyObject *stats)
{
    PyObject *clock = NULL, *add = NULL;
    if (stats != Py_None) {
        clock = PyObject_GetAttrString(stats, "clock");
        add = clock ? PyObject_GetAttrString(stats, "add") : NULL;
        if (!add) {
            Py_XDECREF(clock);
            return -1;
        }
    }
    /* The typed engine's slot code may ask which type's batch is being encoded. */
    int has_current = PyObject_HasAttr(ctx, w->st->str_current); /* interned once */
    int progressed = 1;
    while (progressed) {
        progressed = 0;
        for (Py_ssize_t t = 0; t < w->ntypes; t++) {
            TypeEntry *te = w->tents[t];
            if (!te->npending)
                continue;
            w->cur_type = t;
            if (has_current) {
                PyObject *cur = PyLong_FromSsize_t(t);
                int r = cur ? PyObject_SetAttr(ctx, w->st->str_current, cur) : -1;
                Py_XDECREF(cur);
                if (r < 0)
                    goto fail;
            }
            PyObject *start = NULL;
            if (clock && !(start = PyObject_CallNoArgs(clock)))
                goto fail;
            /* The pending list grows while it is processed (a chain of one type). */
            for (Py_ssize_t i = 0; i < te->npending; i++) {
                look_ahead(w, te, i);
                if (save_object(w, te, te->pending[i]) < 0) {
                    w->fail_type = t;
                    Py_XSETREF(w->fail_obj, Py_NewRef(te->pending[i]));
                    Py_XDECREF(start);
                    goto fail;
                }
            }
            if (clock) {
                PyObject *end = PyObject_CallNoArgs(clock);
                PyObject *dt = end ? PyNumber_Subtract(end, start) : NULL;
                Py_XDECREF(end);
                Py_DECREF(start);
                if (!dt)
                    goto fail;
                PyObject *r = PyObject_CallFunction(add, "OOn", te->name, dt, te->npending);
                Py_DECREF(dt);
                if (!r)
                    goto fail;
                Py_DECREF(r);
            }
            te->npending = 0;
            progressed = 1;
        }
    }
    Py_XDECREF(clock);
    Py_XDECREF(add);
    return 0;
fail:
    Py_XDECREF(clock);
    Py_XDECREF(add);
    return -1;
}

static PyObject *walk_run(Walk *w, PyObject *args)
{
    PyObject *ctx, *dyn, *stats;
    if (!PyArg_ParseTuple(args, "OOO", &ctx, &dyn, &stats))
        return NULL;
    Py_XSETREF(w->ctx, Py_NewRef(ctx));
    Py_XSETREF(w->dyn, Py_NewRef(dyn));
    if (walk_run_pending(w, ctx, stats) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Write the frame header (wire.py's "<4sBIQ": magic, version, CRC-32 of the payload,
 * its length) in front of a stream's payload.  The stream is fresh, seen by no one
 * else, so the CRC may run without the GIL. */
static void put_frame_header(char *p, Py_ssize_t total, int version)
{
    size_t n = (size_t)(total - FRAME_HEADER);
    uint32_t crc = crc32_maybe_unlocked((const unsigned char *)p + FRAME_HEADER, n, 1);
    memcpy(p, FRAME_MAGIC, 4);
    p[4] = (char)version;
    for (int i = 0; i < 4; i++)
        p[5 + i] = (char)(crc >> (8 * i));
    for (int i = 0; i < 8; i++)
        p[9 + i] = (char)((uint64_t)n >> (8 * i));
}

typedef struct {
    const char *data;
    Py_ssize_t len;
} Span;

/* The payload (prefix, type_seq, rows, then the suffix's parts) behind `header` bytes,
 * with the frame header written there when version >= 0 (header is FRAME_HEADER then).
 * A new bytes object, or NULL with an error set. */
static PyObject *assemble_spans(Walk *w, Py_ssize_t header, Span pre, const Span *suf, int nsuf,
                                int version)
{
    Buf mid = {0};
    PyObject *out = NULL;
    if (header < 0 || (version >= 0 && (header != FRAME_HEADER || version > 255))) {
        PyErr_SetString(PyExc_ValueError, "assemble: a bad header size or version");
        goto done;
    }
    if (w_array(&mid, w->ntseq) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < w->ntseq; i++)
        if (w_uint(&mid, (uint64_t)w->tseq[i]) < 0)
            goto done;
    if (w_array(&mid, w->ntypes) < 0)
        goto done;
    Py_ssize_t total = header + pre.len + mid.len;
    for (int k = 0; k < nsuf; k++)
        total += suf[k].len;
    for (Py_ssize_t t = 0; t < w->ntypes; t++)
        total += array_head_len(w->tents[t]->nrows) + w->tents[t]->rows.len;
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out)
        goto done;
    char *p = PyBytes_AS_STRING(out);
    memset(p, 0, header);
    p += header;
    memcpy(p, pre.data, pre.len);
    p += pre.len;
    memcpy(p, mid.data, mid.len);
    p += mid.len;
    for (Py_ssize_t t = 0; t < w->ntypes; t++) {
        TypeEntry *te = w->tents[t];
        Buf h = {0};
        if (w_array(&h, te->nrows) < 0) {
            Py_CLEAR(out);
            goto done;
        }
        memcpy(p, h.data, h.len);
        p += h.len;
        PyMem_Free(h.data);
        if (te->rows.len) {
            memcpy(p, te->rows.data, te->rows.len);
            p += te->rows.len;
        }
    }
    for (int k = 0; k < nsuf; k++) {
        if (suf[k].len)
            memcpy(p, suf[k].data, suf[k].len);
        p += suf[k].len;
    }
    if (p - PyBytes_AS_STRING(out) != total) { /* sized exactly above: no resize */
        PyErr_SetString(PyExc_SystemError, "ckpt native: assembled stream size mismatch");
        Py_CLEAR(out);
    }
    else if (version >= 0)
        put_frame_header(PyBytes_AS_STRING(out), total, version);
done:
    PyMem_Free(mid.data);
    return out;
}

/* assemble(header, prefix, suffix[, version]): the payload's middle, type_seq and
 * rows, between the Python-encoded prefix and suffix, behind `header` bytes left for
 * the frame header; with a version (header then FRAME_HEADER) the header is written
 * too, so a save frames its stream in this one call (it took three more: crc32,
 * struct's pack and set_header). */
static PyObject *walk_assemble(Walk *w, PyObject *args)
{
    Py_buffer pre, suf;
    Py_ssize_t header;
    int version = -1;
    if (!PyArg_ParseTuple(args, "ny*y*|i", &header, &pre, &suf, &version))
        return NULL;
    Span tail = {suf.buf, suf.len};
    PyObject *out = assemble_spans(w, header, (Span){pre.buf, pre.len}, &tail, 1, version);
    PyBuffer_Release(&pre);
    PyBuffer_Release(&suf);
    return out;
}

/* What a payload holds after the root when nothing is shared and nothing escaped: an
 * empty array of shared locations and an empty map of flags (native._NOTHING_SHARED). */
static const char nothing_shared[2] = {'\x90', '\x80'};

/* save(ctx, dyn, root, owner, stats, prefixes, version) -> bytes or (root_bytes,): a
 * save's fixed sequence in one call.  The root is written self-describing (as
 * dyn_bytes) and every pending object encoded (as run); then, when nothing is shared
 * or escaped and `prefixes` (a dict: tuple of the walk's types -> the payload's bytes
 * before type_seq) knows the type table, the stream is assembled and framed with
 * `version` (as assemble).  Otherwise (or version < 0) the root's bytes, in a tuple:
 * Python builds the head and tail and assembles.  A small save paid four calls, a
 * Python function and a bytes concatenation around the C core for this. */
static PyObject *walk_save(Walk *w, PyObject *const *args, Py_ssize_t n)
{
    if (n != 7 || !PyDict_CheckExact(args[5]) || !PyLong_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "save(ctx, dyn, root, owner, stats, prefixes: dict, version: int) "
                        "expected");
        return NULL;
    }
    PyObject *ctx = args[0], *prefixes = args[5];
    int overflow = 0;
    long version = PyLong_AsLongAndOverflow(args[6], &overflow);
    if (overflow || version > 255) {
        PyErr_SetString(PyExc_ValueError, "save: a bad format version");
        return NULL;
    }
    Py_XSETREF(w->ctx, Py_NewRef(ctx));
    Py_XSETREF(w->dyn, Py_NewRef(args[1]));
    Buf b = {NULL, 0, 0};
    PyObject *out = NULL;
    if (w_dyn(w, &b, args[2], args[3], 0) < 0 || walk_run_pending(w, ctx, args[4]) < 0)
        goto done;
    if (version >= 0 && PyDict_GET_SIZE(w->shared) == 0 && PySet_GET_SIZE(w->escaped) == 0) {
        PyObject *key = PyList_AsTuple(w->types);
        if (!key)
            goto done;
        PyObject *prefix = PyDict_GetItemWithError(prefixes, key); /* borrowed */
        Py_DECREF(key);
        if (prefix && PyBytes_CheckExact(prefix)) {
            Py_INCREF(prefix); /* held across the copy */
            Span tail[2] = {{b.data ? b.data : "", b.len}, {nothing_shared, 2}};
            Span pre = {PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)};
            out = assemble_spans(w, FRAME_HEADER, pre, tail, 2, (int)version);
            Py_DECREF(prefix);
            goto done;
        }
        if (PyErr_Occurred())
            goto done;
    }
    PyObject *root = PyBytes_FromStringAndSize(b.data ? b.data : "", b.len);
    if (root) {
        out = PyTuple_Pack(1, root);
        Py_DECREF(root);
    }
done:
    buf_release(&b);
    return out;
}

/* dyn_bytes(ctx, dyn, value, owner) -> bytes: `value` self-describing, as ctx.dyn(value,
 * owner) encodes it and msgspec writes that (the root: one C pass instead of Python's
 * dyn over a root list or dict), discovering objects in the same order. */
static PyObject *walk_dyn_bytes(Walk *w, PyObject *args)
{
    PyObject *ctx, *dyn, *v, *owner;
    if (!PyArg_ParseTuple(args, "OOOO", &ctx, &dyn, &v, &owner))
        return NULL;
    Py_XSETREF(w->ctx, Py_NewRef(ctx));
    Py_XSETREF(w->dyn, Py_NewRef(dyn));
    Buf b = {NULL, 0, 0};
    PyObject *out = NULL;
    if (w_dyn(w, &b, v, owner, 0) == 0)
        out = PyBytes_FromStringAndSize(b.data ? b.data : "", b.len);
    buf_release(&b);
    return out;
}

static PyObject *walk_discover(Walk *w, PyObject *x)
{
    Py_ssize_t i = ref_id(w, x);
    return i < 0 ? NULL : PyLong_FromSsize_t(i);
}

/* What the Python side records in cmemo (the typed engine's slot code), kept alive the
 * same way (SaveWalk.hold). */
static PyObject *walk_hold(Walk *w, PyObject *c)
{
    if (hold(w, c) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *walk_seen_again(Walk *w, PyObject *c)
{
    if (seen_again(w, c) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *walk_enum_index(Walk *w, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "enum_index needs a class");
        return NULL;
    }
    Py_ssize_t t = enum_index(w, cls);
    return t < 0 ? NULL : PyLong_FromSsize_t(t);
}

static PyObject *walk_type_seq(Walk *w, void *closure)
{
    PyObject *l = PyList_New(w->ntseq);
    if (!l)
        return NULL;
    for (Py_ssize_t i = 0; i < w->ntseq; i++) {
        PyObject *x = PyLong_FromLong(w->tseq[i]);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *walk_failed(Walk *w, void *closure)
{
    if (!w->fail_obj)
        Py_RETURN_NONE;
    return Py_BuildValue("(nO)", w->fail_type, w->fail_obj);
}

/* Empty the id table key by key when it is sparse (a small save: two keys in 1024
 * slots), so the next walk takes it without clearing 16 KiB; 1 when it is empty. */
static int ids_emptied(Walk *w)
{
    if (!w->objects || !w->ids.slots || w->ids.used * 8 > w->ids.mask + 1)
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(w->objects); i++) {
        Slot *s = pt_find(&w->ids, PyList_GET_ITEM(w->objects, i));
        if (s)
            pt_remove(&w->ids, s);
    }
    return w->ids.used == 0;
}

static void walk_clear_tables(Walk *w)
{
    if (w->ids.slots && w->ids.used > 1) {
        last_ids = table_size_for(w->ids.used);
        last_memo = table_size_for(w->cmemo.used);
    }
    if (w->cmemo.slots && w->cmemo.used) {
        for (size_t i = 0; i <= w->cmemo.mask; i++)
            if (w->cmemo.slots[i].key) {
                w->cmemo.slots[i].key = NULL; /* left empty for the next walk */
                Py_DECREF((PyObject *)w->cmemo.slots[i].val);
            }
        w->cmemo.used = 0;
    }
    pt_free_spare(&w->cmemo, SPARE_MEMO, 1);
    for (Py_ssize_t i = 0; i < w->nheld; i++)
        Py_DECREF(w->held[i]);
    PyMem_Free(w->held);
    w->held = NULL;
    w->nheld = w->cap_held = 0;
    pt_free_spare(&w->ids, SPARE_IDS, ids_emptied(w));
    pt_free(&w->tindex);
    if (w->enumv.slots && w->enumv.used) {
        for (size_t i = 0; i <= w->enumv.mask; i++)
            if (w->enumv.slots[i].key) {
                Py_DECREF((PyObject *)w->enumv.slots[i].key);
                Py_DECREF((PyObject *)w->enumv.slots[i].val);
            }
    }
    pt_free(&w->enumv);
    for (Py_ssize_t t = 0; t < w->ntypes; t++)
        te_free(w->tents[t]);
    PyMem_Free(w->tents);
    w->tents = NULL;
    w->ntypes = w->cap_types = 0;
    PyMem_Free(w->tseq);
    w->tseq = NULL;
    w->ntseq = w->cap_tseq = 0;
}

static int walk_clear(Walk *w)
{
    Py_CLEAR(w->objects);
    Py_CLEAR(w->types);
    Py_CLEAR(w->shared);
    Py_CLEAR(w->plan_for);
    Py_CLEAR(w->enum_plan);
    Py_CLEAR(w->savable);
    for (int i = 0; i < 4; i++)
        Py_CLEAR(w->known[i]);
    Py_CLEAR(w->escaped);
    Py_CLEAR(w->hooked);
    Py_CLEAR(w->ctx);
    Py_CLEAR(w->dyn);
    Py_CLEAR(w->fail_obj);
    Py_CLEAR(w->ids_view);
    Py_CLEAR(w->cmemo_view);
    return 0;
}

static PyObject *walk_release(Walk *w, PyObject *unused)
{
    walk_clear_tables(w);
    for (int i = 0; i < 4; i++)
        Py_CLEAR(w->known[i]);
    PyObject *tmp;
    tmp = w->ctx; w->ctx = NULL; Py_XDECREF(tmp);
    tmp = w->dyn; w->dyn = NULL; Py_XDECREF(tmp);
    tmp = w->ids_view; w->ids_view = NULL; Py_XDECREF(tmp);
    tmp = w->cmemo_view; w->cmemo_view = NULL; Py_XDECREF(tmp);
    if (w->objects && PyList_SetSlice(w->objects, 0, PyList_GET_SIZE(w->objects), NULL) < 0)
        return NULL;
    if (w->types && PyList_SetSlice(w->types, 0, PyList_GET_SIZE(w->types), NULL) < 0)
        return NULL;
    if (w->shared)
        PyDict_Clear(w->shared);
    if (w->escaped)
        PySet_Clear(w->escaped);
    Py_CLEAR(w->fail_obj);
    Py_RETURN_NONE;
}

static int walk_traverse(Walk *w, visitproc visit, void *arg)
{
    Py_VISIT(w->objects);
    Py_VISIT(w->types);
    Py_VISIT(w->shared);
    Py_VISIT(w->plan_for);
    Py_VISIT(w->enum_plan);
    Py_VISIT(w->savable);
    for (int i = 0; i < 4; i++)
        Py_VISIT(w->known[i]);
    Py_VISIT(w->escaped);
    Py_VISIT(w->hooked);
    Py_VISIT(w->ctx);
    Py_VISIT(w->dyn);
    Py_VISIT(w->fail_obj);
    Py_VISIT(w->ids_view);
    Py_VISIT(w->cmemo_view);
    if (w->cmemo.slots)
        for (size_t i = 0; i <= w->cmemo.mask; i++)
            if (w->cmemo.slots[i].key)
                Py_VISIT((PyObject *)w->cmemo.slots[i].val);
    if (w->enumv.slots)
        for (size_t i = 0; i <= w->enumv.mask; i++)
            if (w->enumv.slots[i].key) {
                Py_VISIT((PyObject *)w->enumv.slots[i].key);
                Py_VISIT((PyObject *)w->enumv.slots[i].val);
            }
    for (Py_ssize_t i = 0; i < w->nheld; i++)
        Py_VISIT(w->held[i]);
    for (Py_ssize_t t = 0; t < w->ntypes; t++) {
        TypeEntry *te = w->tents[t];
        Py_VISIT(te->schema);
        Py_VISIT(te->plan);
    }
    return 0;
}

static void walk_dealloc(Walk *w)
{
    PyObject_GC_UnTrack(w);
    walk_clear(w);
    walk_clear_tables(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *table_new(Walk *w, int memo)
{
    Table *t = PyObject_GC_New(Table, &TableType);
    if (!t)
        return NULL;
    t->walk = (Walk *)Py_NewRef(w);
    t->memo = memo;
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

/* Set a walk up for a save: what Python hands it, and its tables with None as object
 * 0 (a fresh walk, or one walk_release left empty).  0, or -1 with an error set. */
static int walk_start(Walk *w, PyObject *const *args, Py_ssize_t n)
{
    if (n != 4 || !PySet_CheckExact(args[2]) || !PyDict_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "Walk(plan_for, enum_plan, hooked: set, savable: dict) expected");
        return -1;
    }
    Py_XSETREF(w->plan_for, Py_NewRef(args[0]));
    Py_XSETREF(w->enum_plan, Py_NewRef(args[1]));
    Py_XSETREF(w->hooked, Py_NewRef(args[2]));
    Py_XSETREF(w->savable, Py_NewRef(args[3]));
    Py_CLEAR(w->fail_obj);
    w->fail_type = w->cur_type = 0;
    if (!w->escaped && !(w->escaped = PySet_New(NULL)))
        return -1;
    if (!w->objects && !(w->objects = PyList_New(0)))
        return -1;
    if (!w->types && !(w->types = PyList_New(0)))
        return -1;
    if (!w->shared && !(w->shared = PyDict_New()))
        return -1;
    pt_init_empty(&w->tindex);
    pt_init_empty(&w->enumv);
    if (pt_init_spare(&w->ids, last_ids, SPARE_IDS) < 0 ||
        pt_init_spare(&w->cmemo, last_memo, SPARE_MEMO) < 0 ||
        pt_put(&w->ids, Py_None, (void *)0) < 0 || PyList_Append(w->objects, Py_None) < 0)
        return -1;
    return 0;
}

static PyObject *walk_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Walk() takes no keyword arguments");
        return NULL;
    }
    CkptState *st = ckpt_state();
    if (!st)
        return NULL;
    Walk *w = (Walk *)type->tp_alloc(type, 0);
    if (!w)
        return NULL;
    w->st = st;
    if (walk_start(w, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args)) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

/* renew(plan_for, enum_plan, hooked, savable): a released walk set up for another
 * save, as Walk(...) makes one.  native.py keeps one idle walk per interpreter, so a
 * small save does not allocate and free the walk, its lists, dict and set each time
 * (what they held was let go by release: nothing large or from the last save stays). */
static PyObject *walk_renew(Walk *w, PyObject *const *args, Py_ssize_t n)
{
    if (w->ids.slots || w->ntypes || (w->objects && PyList_GET_SIZE(w->objects))) {
        PyErr_SetString(PyExc_RuntimeError, "renew() needs a released walk");
        return NULL;
    }
    if (walk_start(w, args, n) < 0) {
        walk_release(w, NULL); /* what walk_start took, let go again */
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The id table and container memo as Python mappings, made at the first read: a save
 * whose values all fit their slots never reads them (release drops them). */
static PyObject *walk_view(Walk *w, PyObject **view, int memo)
{
    if (!*view && !(*view = table_new(w, memo)))
        return NULL;
    return Py_NewRef(*view);
}

static PyObject *walk_ids(Walk *w, void *closure)
{
    return walk_view(w, &w->ids_view, 0);
}

static PyObject *walk_cmemo(Walk *w, void *closure)
{
    return walk_view(w, &w->cmemo_view, 1);
}

static PyMethodDef walk_methods[] = {
    {"run", (PyCFunction)walk_run, METH_VARARGS, "Encode every pending object."},
    {"assemble", (PyCFunction)walk_assemble, METH_VARARGS, "The framed payload's bytes."},
    {"save", (PyCFunction)(void (*)(void))walk_save, METH_FASTCALL,
     "save(ctx, dyn, root, owner, stats, prefixes, version): the stream, or (root bytes,)."},
    {"discover", (PyCFunction)walk_discover, METH_O, "The id of an object (given one if new)."},
    {"dyn_bytes", (PyCFunction)walk_dyn_bytes, METH_VARARGS,
     "A value self-describing, as MessagePack bytes (the root)."},
    {"seen_again", (PyCFunction)walk_seen_again, METH_O, "A container met a second time."},
    {"hold", (PyCFunction)walk_hold, METH_O, "Keep a container cmemo records alive."},
    {"enum_index", (PyCFunction)walk_enum_index, METH_O, "The type index of an enum class."},
    {"release", (PyCFunction)walk_release, METH_NOARGS, "Drop the walk's tables."},
    {"renew", (PyCFunction)(void (*)(void))walk_renew, METH_FASTCALL,
     "renew(plan_for, enum_plan, hooked, savable): a released walk set up again."},
    {"crc32", crc32_py, METH_VARARGS, "zlib.crc32 of a buffer from an offset."},
    {NULL},
};

static PyMemberDef walk_members[] = {
    {"objects", T_OBJECT, offsetof(Walk, objects), READONLY, NULL},
    {"types", T_OBJECT, offsetof(Walk, types), READONLY, NULL},
    {"shared", T_OBJECT, offsetof(Walk, shared), READONLY, NULL},
    {"escaped", T_OBJECT, offsetof(Walk, escaped), READONLY, NULL},
    {NULL},
};

static PyGetSetDef walk_getset[] = {
    {"type_seq", (getter)walk_type_seq, NULL, NULL, NULL},
    {"failed", (getter)walk_failed, NULL, NULL, NULL},
    {"ids", (getter)walk_ids, NULL, NULL, NULL},
    {"cmemo", (getter)walk_cmemo, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject WalkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt.state._native.Walk",
    .tp_basicsize = sizeof(Walk),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = walk_new,
    .tp_dealloc = (destructor)walk_dealloc,
    .tp_traverse = (traverseproc)walk_traverse,
    .tp_clear = (inquiry)walk_clear,
    .tp_methods = walk_methods,
    .tp_members = walk_members,
    .tp_getset = walk_getset,
    .tp_doc = "One native save walk: ids, container memo, type table and rows.",
};

/* ---- the tables as Python sees them (the typed engine's helpers use them) ----------- */

static int table_key(PyObject *k, void **out)
{
    if (!PyLong_CheckExact(k))
        return 0;
    void *p = PyLong_AsVoidPtr(k);
    if (!p && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = p;
    return 1;
}

static PyObject *table_lookup(Table *t, PyObject *k)
{
    void *key;
    if (!t->walk->ids.slots || !table_key(k, &key))
        return NULL;
    Slot *s = pt_find(t->memo ? &t->walk->cmemo : &t->walk->ids, key);
    if (!s)
        return NULL;
    if (t->memo)
        return Py_NewRef((PyObject *)s->val);
    return PyLong_FromSsize_t((Py_ssize_t)(intptr_t)s->val);
}

static PyObject *table_get(Table *t, PyObject *const *args, Py_ssize_t n)
{
    if (n < 1 || n > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    PyObject *r = table_lookup(t, args[0]);
    if (r || PyErr_Occurred())
        return r;
    return Py_NewRef(n == 2 ? args[1] : Py_None);
}

static int table_contains(Table *t, PyObject *k)
{
    PyObject *r = table_lookup(t, k);
    if (!r)
        return PyErr_Occurred() ? -1 : 0;
    Py_DECREF(r);
    return 1;
}

static PyObject *table_getitem(Table *t, PyObject *k)
{
    PyObject *r = table_lookup(t, k);
    if (!r && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, k);
    return r;
}

static int table_setitem(Table *t, PyObject *k, PyObject *v)
{
    void *key;
    if (!t->memo || !t->walk->cmemo.slots || !table_key(k, &key)) {
        PyErr_SetString(PyExc_TypeError, "only cmemo[id(container)] = owner is supported");
        return -1;
    }
    Slot *s = pt_find(&t->walk->cmemo, key);
    if (!v) { /* del cmemo[k]: the typed engine forgets a container it then escapes */
        if (!s) {
            PyErr_SetObject(PyExc_KeyError, k);
            return -1;
        }
        PyObject *owner = (PyObject *)s->val;
        pt_remove(&t->walk->cmemo, s);
        Py_DECREF(owner);
        return 0;
    }
    if (s) {
        Py_INCREF(v);
        Py_SETREF(*(PyObject **)&s->val, v);
        return 0;
    }
    return memo_put(t->walk, (PyObject *)key, v);
}

static Py_ssize_t table_len(Table *t)
{
    return t->memo ? (Py_ssize_t)t->walk->cmemo.used : (Py_ssize_t)t->walk->ids.used;
}

static int table_traverse(Table *t, visitproc visit, void *arg)
{
    Py_VISIT(t->walk);
    return 0;
}

static int table_clear(Table *t)
{
    Py_CLEAR(t->walk);
    return 0;
}

static void table_dealloc(Table *t)
{
    PyObject_GC_UnTrack(t);
    Py_CLEAR(t->walk);
    PyObject_GC_Del(t);
}

static PyMethodDef table_methods[] = {
    {"get", (PyCFunction)(void (*)(void))table_get, METH_FASTCALL, "get(id, default=None)"},
    {NULL},
};

static PySequenceMethods table_seq = {.sq_contains = (objobjproc)table_contains};
static PyMappingMethods table_map = {
    .mp_length = (lenfunc)table_len,
    .mp_subscript = (binaryfunc)table_getitem,
    .mp_ass_subscript = (objobjargproc)table_setitem,
};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt.state._native.Table",
    .tp_basicsize = sizeof(Table),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_traverse = (traverseproc)table_traverse,
    .tp_clear = (inquiry)table_clear,
    .tp_methods = table_methods,
    .tp_as_sequence = &table_seq,
    .tp_as_mapping = &table_map,
    .tp_doc = "A walk's id table or container memo, keyed by id(x).",
};

#endif
