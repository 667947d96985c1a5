/* CPython's dict tables read in place (dict_next) and the import-time check that
 * allows it.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_DICT_H
#define CKPT_NATIVE_DICT_H

#if CKPT_DICT_TABLE
/* CPython's private dict layouts (Objects/dict-common.h in 3.11, pycore_dict.h in 3.12
 * and 3.13, the same for what is read here where the GIL exists), used only after the
 * import-time checks (check_dict_table, check_layout, check_values) agree with them. */
typedef struct {
    Py_ssize_t dk_refcnt;
    uint8_t dk_log2_size;
    uint8_t dk_log2_index_bytes;
    uint8_t dk_kind;
    uint32_t dk_version;
    Py_ssize_t dk_usable;
    Py_ssize_t dk_nentries;
    char dk_indices[];
} DictKeys;

typedef struct {
    PyObject *me_key;
    PyObject *me_value;
} StrEntry; /* a str-keyed table's entry */

typedef struct {
    Py_hash_t me_hash;
    PyObject *me_key;
    PyObject *me_value;
} AnyEntry; /* any other table's entry */

/* A combined or split table's entries, which follow its index array. */
static inline StrEntry *table_entries(DictKeys *k)
{
    return (StrEntry *)(k->dk_indices + ((size_t)1 << k->dk_log2_index_bytes));
}
#endif

/* 1 once check_dict_table (at import) found dict_next's reading equal to PyDict_Next's. */
static int dict_table_ok;

/* PyDict_Next, reading a combined table's entries in place where its layout is known
 * and checked (a third of Encoding/map's instructions were PyDict_Next's, for three
 * passes over a 1024-item dict). */
static inline int dict_next(PyObject *d, Py_ssize_t *pos, PyObject **k, PyObject **v)
{
#if CKPT_DICT_TABLE
    PyDictObject *dd = (PyDictObject *)d;
    if (dict_table_ok && !dd->ma_values) {
        DictKeys *dk = (DictKeys *)dd->ma_keys;
        Py_ssize_t i = *pos, n = dk->dk_nentries;
        if (i < 0)
            return 0;
        if (dk->dk_kind == 0) { /* DICT_KEYS_GENERAL */
            AnyEntry *e = (AnyEntry *)table_entries(dk);
            for (; i < n; i++)
                if (e[i].me_value) {
                    *k = e[i].me_key, *v = e[i].me_value, *pos = i + 1;
                    return 1;
                }
        }
        else if (dk->dk_kind == 1) { /* DICT_KEYS_UNICODE */
            StrEntry *e = table_entries(dk);
            for (; i < n; i++)
                if (e[i].me_value) {
                    *k = e[i].me_key, *v = e[i].me_value, *pos = i + 1;
                    return 1;
                }
        }
        else
            return PyDict_Next(d, pos, k, v);
        *pos = i;
        return 0;
    }
#endif
    return PyDict_Next(d, pos, k, v);
}

/* dict_next against PyDict_Next on dicts of both key kinds, with deleted entries: any
 * difference leaves dict_next to PyDict_Next.  0, or -1 on an error. */
static int check_dict_table(void)
{
    dict_table_ok = 0;
#if CKPT_DICT_TABLE
    PyObject *general = PyDict_New(), *strs = PyDict_New();
    int rc = general && strs ? 0 : -1;
    for (long i = 0; i < 40 && rc == 0; i++) {
        PyObject *n = PyLong_FromLong(i * 7919);
        PyObject *s = n ? PyObject_Str(n) : NULL;
        rc = s && PyDict_SetItem(general, n, s) == 0 && PyDict_SetItem(strs, s, n) == 0 &&
                     (i % 3 != 1 || (PyDict_DelItem(general, n) == 0 &&
                                     PyDict_DelItem(strs, s) == 0))
                 ? 0
                 : -1;
        Py_XDECREF(n);
        Py_XDECREF(s);
    }
    int same = rc == 0;
    PyObject *dicts[2] = {general, strs};
    for (int j = 0; j < 2 && same; j++) {
        Py_ssize_t p1 = 0, p2 = 0, count = 0;
        PyObject *k1, *v1, *k2, *v2;
        dict_table_ok = 1; /* tentatively, so dict_next reads the table */
        for (;;) {
            int a = dict_next(dicts[j], &p1, &k1, &v1), b = PyDict_Next(dicts[j], &p2, &k2, &v2);
            if (a != b || (a && (k1 != k2 || v1 != v2))) {
                same = 0;
                break;
            }
            if (!a)
                break;
            count++;
        }
        same = same && count == PyDict_GET_SIZE(dicts[j]);
        dict_table_ok = 0;
    }
    Py_XDECREF(general);
    Py_XDECREF(strs);
    if (rc < 0)
        return -1;
    dict_table_ok = same;
#endif
    return 0;
}

#endif
