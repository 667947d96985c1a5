/* Per-type save plans: what Python's native._plan_for builds, parsed once.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_PLAN_H
#define CKPT_NATIVE_PLAN_H

/* ---- per-type plans ------------------------------------------------------------------- */

/* One node of a field's nest program (E_NEST, the SK_* codes). */
typedef struct {
    int kind, mask; /* mask: SK_SCALAR's scalar bits; M_NONE: Optional, None written Nil */
    int a, b;       /* the nodes below: a container's items (a), a dict's keys (a) and
                       values (b); each after this node in the program */
    PyObject *cls;  /* SK_ENUM: the class (borrowed: the field's arg holds it) */
} SNode;

typedef struct {
    PyObject *name;     /* interned field name */
    PyObject *fallback; /* save: fn(obj, ctx) -> wire value (the typed engine's code) */
    PyObject *arg;      /* OP_SAVE: the field's save= function */
    int dict_ok;        /* no data descriptor of this name: the instance dict decides */
    int op, mask, kop, kmask, vop, vmask, elide;
    Py_ssize_t tarity;          /* OP_TUPLE or E_TUPLE items: the fixed length, or -1 */
    int tmask[MAX_TUPLE_ITEMS]; /* ... each position's mask (scalar bits, M_REF, M_ENUM, M_ANY) */
    PyObject *tcls[MAX_TUPLE_ITEMS]; /* ... M_ENUM positions: the class, or NULL: none fits */
    PyObject *kenum, *venum; /* E_ENUM items or keys, values (tuple[E, ...]: kenum): the
                              enum class, or NULL where no member fits (not compact) */
    int vk;                     /* OP_VALUE: which value type (VK_*) */
    union {                     /* by op (a union: the field stays as large as it was) */
        PyObject *vcls;         /* OP_VALUE, VK_UUID: uuid.UUID (borrowed from arg) */
        SNode *nest;            /* OP_LIST, OP_DICT with E_NEST items or values: the
                                   program (owned), node 0 its root */
    };
    PyObject *vname;            /* OP_VALUE, VK_UUID: "int", its slot (held) */
} Field;

/* A class's parsed plan, built once by Python (``native._plan_for``) and kept on its
 * TypeInfo, so a walk meeting the class again parses nothing. */
typedef struct {
    PyObject_HEAD
    PyObject *schema, *name;
    int before_save, dict_ok;
    Py_ssize_t nfields;
    Field *fields; /* owned: names, fallbacks and args held */
} Plan;

static PyTypeObject PlanType;

typedef struct {
    PyObject *plan;   /* the Plan whose fields these are (NULL for an enum entry) */
    PyObject *schema; /* Schema, or the enum class for an enum entry */
    PyObject *name;   /* the type's stream name (for stats) */
    int is_enum, before_save, dict_ok;
    Py_ssize_t nfields;
    Field *fields; /* borrowed from the plan */
    void *keys_seen;          /* the class's shared keys the indices below refer to */
    Py_ssize_t keys_entries;  /* ... and how many entries they had */
    Py_ssize_t *vindex;       /* per field: its index in inline values, or -1 */
    Py_ssize_t *ahead;        /* the vindex entries look_ahead fetches values at */
    Py_ssize_t nahead;
    Py_ssize_t *aslot;        /* ... and those whose id or memo slots it fetches:
                                 index << 2 | AHEAD_REF, AHEAD_CONTAINER or AHEAD_REFS */
    Py_ssize_t naslot;
    PyObject **pending; /* borrowed: the walk's objects list keeps them */
    Py_ssize_t npending, cap_pending;
    Buf rows;
    Py_ssize_t nrows;
} TypeEntry;

static void te_free(TypeEntry *te)
{
    if (!te)
        return;
    PyMem_Free(te->vindex);
    PyMem_Free(te->ahead);
    PyMem_Free(te->aslot);
    PyMem_Free(te->pending);
    buf_release(&te->rows);
    Py_XDECREF(te->plan);
    Py_XDECREF(te->schema);
    Py_XDECREF(te->name);
    PyMem_Free(te);
}

static void plan_free_fields(Plan *p)
{
    Field *fields = p->fields;
    Py_ssize_t n = p->nfields;
    p->fields = NULL;
    p->nfields = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(fields[i].name);
        Py_XDECREF(fields[i].fallback);
        Py_XDECREF(fields[i].arg);
        Py_XDECREF(fields[i].vname);
        if (fields[i].op != OP_VALUE)
            PyMem_Free(fields[i].nest);
    }
    PyMem_Free(fields);
}


/* An OP_VALUE field's arg, (VK_*, class or None, extra), into the field; the datetime
 * C API is imported on first use (a class with such a field has the module loaded). */
static int value_plan(Field *f, PyObject *arg)
{
    PyObject *extra;
    if (!PyTuple_Check(arg) || !PyArg_ParseTuple(arg, "iOO", &f->vk, &f->vcls, &extra))
        goto bad;
    if (f->vk < VK_DATETIME || f->vk > VK_UUID || (f->vk == VK_UUID && !PyType_Check(f->vcls)))
        goto bad;
    if (!PyDateTimeAPI && !(PyDateTimeAPI = PyCapsule_Import(PyDateTime_CAPSULE_NAME, 0)))
        return -1;
    CkptState *st = ckpt_state();
    if (!st)
        return -1;
    f->vname = Py_NewRef(st->str_int);
    return 0;
bad:
    PyErr_Clear();
    PyErr_SetString(PyExc_SystemError, "ckpt native: bad value plan");
    return -1;
}

/* A stdlib value of exactly its field's type, as its codec's to_plain payload, byte for
 * byte what msgspec writes for that list: 0, -1 on error, 1 for a value this does not
 * take (another type, a time zone other than None and UTC), which the slot writes. */
static int w_std_value(Buf *b, Field *f, PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    switch (f->vk) {
    case VK_DATETIME: {
        if (t != PyDateTimeAPI->DateTimeType)
            return 1;
        PyObject *tz = PyDateTime_DATE_GET_TZINFO(v);
        if (tz != Py_None && tz != PyDateTime_TimeZone_UTC)
            return 1;
        if (w_array(b, 9) < 0 || w_uint(b, PyDateTime_GET_YEAR(v)) < 0 ||
            w_uint(b, PyDateTime_GET_MONTH(v)) < 0 || w_uint(b, PyDateTime_GET_DAY(v)) < 0 ||
            w_uint(b, PyDateTime_DATE_GET_HOUR(v)) < 0 ||
            w_uint(b, PyDateTime_DATE_GET_MINUTE(v)) < 0 ||
            w_uint(b, PyDateTime_DATE_GET_SECOND(v)) < 0 ||
            w_uint(b, PyDateTime_DATE_GET_MICROSECOND(v)) < 0 ||
            w_uint(b, PyDateTime_DATE_GET_FOLD(v)) < 0)
            return -1;
        if (tz == Py_None)
            return w_byte(b, MP_NIL);
        return w_raw(b, "\x91\xa3utc", 5); /* ["utc"] */
    }
    case VK_DATE:
        if (t != PyDateTimeAPI->DateType)
            return 1;
        if (w_array(b, 3) < 0 || w_uint(b, PyDateTime_GET_YEAR(v)) < 0 ||
            w_uint(b, PyDateTime_GET_MONTH(v)) < 0)
            return -1;
        return w_uint(b, PyDateTime_GET_DAY(v));
    case VK_TIMEDELTA:
        if (t != PyDateTimeAPI->DeltaType)
            return 1;
        if (w_array(b, 3) < 0 || w_int(b, PyDateTime_DELTA_GET_DAYS(v)) < 0 ||
            w_int(b, PyDateTime_DELTA_GET_SECONDS(v)) < 0)
            return -1;
        return w_int(b, PyDateTime_DELTA_GET_MICROSECONDS(v));
    case VK_UUID: {
        if ((PyObject *)t != f->vcls)
            return 1;
        /* v.bytes is v.int.to_bytes(16, "big"); an int that does not fit is the slot's */
        PyObject *n = PyObject_GetAttr(v, f->vname);
        if (!n)
            return -1;
        unsigned char raw[16];
        int rc = PyLong_CheckExact(n) ? long_to_be16(n, raw) : 1;
        Py_DECREF(n);
        if (rc != 0)
            return rc;
        if (w_raw(b, "\x91\xc4\x10", 3) < 0) /* [bin8 of 16 bytes] */
            return -1;
        return w_raw(b, (const char *)raw, 16);
    }
    }
    return 1;
}

/* An enum class from a plan's arg, borrowed (the field holds arg), or NULL for None;
 * 0, or -1 with an error set. */
static int enum_arg(PyObject *x, PyObject **cls)
{
    if (x == Py_None) {
        *cls = NULL;
        return 0;
    }
    if (!PyType_Check(x)) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad enum plan");
        return -1;
    }
    *cls = x;
    return 0;
}

/* Per-position masks into the field: each an int (scalar bits, M_REF or M_ANY) or
 * (M_ENUM [| M_NONE], enum class or None); 0, or -1 with an error set. */
static int tuple_plan(Field *f, PyObject *masks)
{
    if (!PyTuple_Check(masks) || PyTuple_GET_SIZE(masks) > MAX_TUPLE_ITEMS) {
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad tuple item plan");
        return -1;
    }
    f->tarity = PyTuple_GET_SIZE(masks);
    for (Py_ssize_t j = 0; j < f->tarity; j++) {
        PyObject *x = PyTuple_GET_ITEM(masks, j);
        f->tcls[j] = NULL;
        if (PyTuple_Check(x) && PyTuple_GET_SIZE(x) == 2) {
            if (enum_arg(PyTuple_GET_ITEM(x, 1), &f->tcls[j]) < 0)
                return -1;
            x = PyTuple_GET_ITEM(x, 0);
        }
        f->tmask[j] = PyLong_Check(x) ? (int)PyLong_AsLong(x) : -1;
        if (f->tmask[j] < 0 || ((f->tmask[j] & M_ENUM) && !(f->tmask[j] == M_ENUM ||
                                                            f->tmask[j] == (M_ENUM | M_NONE))) ||
            ((f->tmask[j] & M_ANY) && f->tmask[j] != M_ANY)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_SystemError, "ckpt native: bad tuple item plan");
            return -1;
        }
    }
    return 0;
}

/* A nest program, ((kind, mask, enum class or None, a, b), ...): at most MAX_ELEM_NODES
 * nodes, each container's nodes below it after it (what bounds every walk of it), into
 * the field; 0, or -1 with an error set. */
static int nest_plan(Field *f, PyObject *prog)
{
    if (!PyTuple_Check(prog) || PyTuple_GET_SIZE(prog) < 1 ||
        PyTuple_GET_SIZE(prog) > MAX_ELEM_NODES || f->nest)
        goto bad;
    int n = (int)PyTuple_GET_SIZE(prog);
    if (!(f->nest = PyMem_Calloc((size_t)n, sizeof(SNode)))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++) {
        SNode *x = &f->nest[i];
        PyObject *cls;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(prog, i), "iiOii", &x->kind, &x->mask, &cls,
                              &x->a, &x->b)) {
            PyErr_Clear();
            goto bad;
        }
        int below = x->kind >= SK_LIST, two = x->kind == SK_DICT;
        if (x->kind < SK_SCALAR || x->kind > SK_DICT || x->mask < 0 ||
            (x->kind != SK_SCALAR && (x->mask & ~M_NONE)) || (x->kind == SK_REF && x->mask) ||
            (below && (x->a <= i || x->a >= n)) || (two && (x->b <= i || x->b >= n)))
            goto bad;
        if (x->kind == SK_ENUM ? enum_arg(cls, &x->cls) < 0 : cls != Py_None)
            goto bad;
    }
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "ckpt native: bad nest plan");
    return -1;
}

/* A container field's arg, None or (item or key arg, value arg), each None, an enum
 * class (E_ENUM), a fixed tuple's masks (E_TUPLE, one side only) or a nest program
 * (E_NEST, one side only); 0, or -1. */
static int container_plan(Field *f, PyObject *arg)
{
    if (arg == Py_None)
        return 0;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 2)
        goto bad;
    int ops[2] = {f->kop, f->vop};
    PyObject **cls[2] = {&f->kenum, &f->venum};
    for (int side = 0; side < 2; side++) {
        PyObject *x = PyTuple_GET_ITEM(arg, side);
        if (ops[side] == E_ENUM) {
            if (enum_arg(x, cls[side]) < 0)
                return -1;
        }
        else if (ops[side] == E_TUPLE && x != Py_None) {
            if (f->tarity >= 0)
                goto bad; /* one side's masks only */
            if (tuple_plan(f, x) < 0)
                return -1;
        }
        else if (ops[side] == E_NEST) {
            if (nest_plan(f, x) < 0) /* one side's program only */
                return -1;
        }
        else if (x != Py_None)
            goto bad;
    }
    return 0;
bad:
    PyErr_SetString(PyExc_SystemError, "ckpt native: bad tuple item plan");
    return -1;
}

/* Plan(schema, name, before_save, dict_ok, ((name, op, mask, kop, kmask, vop, vmask,
 * elide, fallback, arg, dict_ok), ...)) */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *schema, *name, *fields;
    int before_save, dict_ok;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Plan() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OUppO!", &schema, &name, &before_save, &dict_ok, &PyTuple_Type,
                          &fields))
        return NULL;
    Plan *p = (Plan *)type->tp_alloc(type, 0);
    if (!p)
        return NULL;
    p->schema = Py_NewRef(schema);
    p->name = Py_NewRef(name);
    p->before_save = before_save;
    p->dict_ok = dict_ok;
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    p->fields = PyMem_Calloc(n ? n : 1, sizeof(Field));
    if (!p->fields) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Field *f = &p->fields[i];
        PyObject *fname, *fb, *arg;
        p->nfields = i; /* what plan_free_fields releases if this one fails */
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fields, i), "UiiiiiipOOp", &fname, &f->op,
                              &f->mask, &f->kop, &f->kmask, &f->vop, &f->vmask, &f->elide, &fb,
                              &arg, &f->dict_ok)) {
            Py_DECREF(p);
            return NULL;
        }
        f->name = Py_NewRef(fname);
        f->fallback = Py_NewRef(fb);
        f->arg = Py_NewRef(arg);
        p->nfields = i + 1;
        f->tarity = -1;
        int r = 0;
        if (f->op == OP_TUPLE && PyTuple_Check(arg) && PyTuple_GET_SIZE(arg) <= MAX_TUPLE_ITEMS)
            r = tuple_plan(f, arg); /* tuple[A, B]: per-position masks */
        else if (f->op == OP_TUPLE && arg != Py_None && !PyTuple_Check(arg))
            r = enum_arg(arg, &f->kenum); /* tuple[E, ...] */
        else if (f->op == OP_VALUE)
            r = value_plan(f, arg);
        int nests = f->kop == E_NEST || f->vop == E_NEST;
        if (r == 0 && (f->op == OP_SET || f->op == OP_FROZENSET || f->op == OP_DICT) &&
            (f->kop == E_LIST || f->kop == E_LIST_REF || f->kop == E_NEST)) {
            /* no list is a set item or key (nor, here, any nested container) */
            PyErr_SetString(PyExc_SystemError, "ckpt native: bad container plan");
            r = -1;
        }
        else if (r == 0 && nests && (f->op != OP_LIST && f->op != OP_DICT)) {
            PyErr_SetString(PyExc_SystemError, "ckpt native: bad container plan");
            r = -1;
        }
        else if (f->op == OP_LIST || f->op == OP_SET || f->op == OP_FROZENSET ||
                 f->op == OP_DICT) {
            r = container_plan(f, arg);
            if (r == 0 && nests && !f->nest) {
                PyErr_SetString(PyExc_SystemError, "ckpt native: bad nest plan");
                r = -1;
            }
        }
        else if ((f->op == OP_ENUM || f->op == OP_ENUM_DYN) && !PyType_Check(arg)) {
            PyErr_SetString(PyExc_SystemError, "ckpt native: bad enum plan");
            r = -1;
        }
        if (r < 0) {
            Py_DECREF(p);
            return NULL;
        }
    }
    p->nfields = n;
    return (PyObject *)p;
}

static int plan_traverse(Plan *p, visitproc visit, void *arg)
{
    Py_VISIT(p->schema);
    Py_VISIT(p->name);
    for (Py_ssize_t i = 0; i < p->nfields; i++) {
        Py_VISIT(p->fields[i].fallback);
        Py_VISIT(p->fields[i].arg);
    }
    return 0;
}

static int plan_clear(Plan *p)
{
    Py_CLEAR(p->schema);
    Py_CLEAR(p->name);
    plan_free_fields(p);
    return 0;
}

static void plan_dealloc(Plan *p)
{
    PyObject_GC_UnTrack(p);
    plan_clear(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt.state._native.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = plan_new,
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_traverse = (traverseproc)plan_traverse,
    .tp_clear = (inquiry)plan_clear,
    .tp_doc = "One class's save plan, parsed once (see native._plan_for).",
};

static TypeEntry *te_from_plan(Plan *p)
{
    if (!p->schema) { /* cleared by the collector: never handed out again */
        PyErr_SetString(PyExc_SystemError, "ckpt native: a cleared plan");
        return NULL;
    }
    TypeEntry *te = PyMem_Calloc(1, sizeof(TypeEntry));
    if (!te) {
        PyErr_NoMemory();
        return NULL;
    }
    te->plan = Py_NewRef((PyObject *)p);
    te->schema = Py_NewRef(p->schema);
    te->name = Py_NewRef(p->name);
    te->before_save = p->before_save;
    te->dict_ok = p->dict_ok;
    te->nfields = p->nfields;
    te->fields = p->fields;
    return te;
}

#endif
