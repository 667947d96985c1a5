/* The native engine's byte reader (_native_read.c), added to the _native module at init. */
#ifndef CKPT_NATIVE_READ_H
#define CKPT_NATIVE_READ_H
#include <Python.h>

#include "_native_state.h"
#include "_native_vocab.h"

extern PyMethodDef native_read_methods[];

/* Direct stores into a fresh instance's inline values (defined in _native.c, where the
 * 3.11 layouts are checked): the class's shared keys (NULL: not possible), a field's
 * index in them (-1: absent), the instance's values when it can take direct stores
 * (full checks, once per instance; NULL: store the usual way), and the store itself,
 * which re-checks only what Python code could have changed since (steals v; -1: not
 * done, v not taken). */
const void *ckpt_store_keys(PyTypeObject *tp);
Py_ssize_t ckpt_store_index(const void *keys, PyObject *name);
PyObject **ckpt_store_values(PyObject *obj, const void *keys);
int ckpt_store_put(PyObject *obj, const void *keys, PyObject **values, Py_ssize_t ix,
                   PyObject *v);

#endif
