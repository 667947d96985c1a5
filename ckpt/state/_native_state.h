/* The native module's state: the Python objects its C code keeps (the callables and the
 * error class configure() hands it, interned names), one set per interpreter.
 *
 * The module uses single-phase init with a state of this size (m_size), so each
 * interpreter that imports it runs PyInit__native and gets its own state, found with
 * PyState_FindModule; nothing here is shared between interpreters.  Hot paths never
 * look it up: a Walk keeps its interpreter's state from creation, and a fill its
 * module's; the lookup (ckpt_state) is for rare paths (errors, values C hands to
 * msgspec).  What stays in C statics is not Python objects: switches, tables of plain
 * numbers, kept byte buffers, the CRC table. */
#ifndef CKPT_NATIVE_STATE_H
#define CKPT_NATIVE_STATE_H
#include <Python.h>

typedef struct {
    PyObject *encode;       /* configure: msgspec's encode, for values C does not write */
    PyObject *state_error;  /* read_configure: ckpt.errors.StateError (NULL: not yet) */
    PyObject *slice_decode; /* read_configure: memoryview -> value, msgspec's */
    PyObject *no_args;      /* () */
    PyObject *str_value_;       /* "_value_" */
    PyObject *str_before_save;  /* "__before_save__" */
    PyObject *str_native_plan;  /* "_native_plan": where a TypeInfo keeps its Plan */
    PyObject *str_dict;         /* "__dict__" */
    PyObject *str_int;          /* "int" (a UUID's slot) */
    PyObject *str_is_safe;      /* "is_safe" (a UUID's slot) */
    PyObject *str_current;      /* "current" (typed's SaveCtx: the type being written) */
    int dict_watcher;           /* this interpreter's dict watcher id, or -1 */
} CkptState;

extern struct PyModuleDef ckpt_moduledef;

/* The state of a module object of ckpt_moduledef. */
static inline CkptState *ckpt_state_of(PyObject *mod)
{
    return (CkptState *)PyModule_GetState(mod);
}

/* This interpreter's state: NULL with an error set if the module is not imported here. */
static inline CkptState *ckpt_state(void)
{
    PyObject *m = PyState_FindModule(&ckpt_moduledef);
    if (!m) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "ckpt native: module not imported here");
        return NULL;
    }
    return ckpt_state_of(m);
}

#endif
