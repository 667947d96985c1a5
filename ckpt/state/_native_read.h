/* The native engine's byte reader (_native_read.c), added to the _native module at init. */
#ifndef CKPT_NATIVE_READ_H
#define CKPT_NATIVE_READ_H
#include <Python.h>

extern PyMethodDef native_read_methods[];

#endif
