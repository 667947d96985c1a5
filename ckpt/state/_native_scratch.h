/* Large working blocks of the native save walk, kept from one walk for the next
 * (_native_scratch.c).
 *
 * A walk's id table, container memo and row buffers are megabytes for a 20000-node
 * graph.  Freed at the end of each save, they go back to the C allocator, which returns
 * the top of its heap to the kernel; the next save then faults every page in afresh,
 * and on a VM a fault costs microseconds.  Keeping a few such blocks (a bounded total)
 * makes a program's repeated saves reuse memory already mapped.
 *
 * Blocks below SCRATCH_MIN bytes are plain PyMem blocks and are never kept, so a
 * block's size alone says which allocator owns it: pass scratch_free and scratch_grow
 * the size scratch_alloc or scratch_grow reported.  All calls need the GIL. */
#ifndef CKPT_NATIVE_SCRATCH_H
#define CKPT_NATIVE_SCRATCH_H
#include <Python.h>

#define SCRATCH_MIN ((size_t)64 << 10)

/* A block of at least n bytes (uninitialised); *got is its real size.  NULL with
 * MemoryError set when there is no memory. */
void *scratch_alloc(size_t n, size_t *got);

/* scratch_alloc's block with its first n bytes zeroed. */
void *scratch_calloc(size_t n, size_t *got);

/* Give a block back (p may be NULL). */
void scratch_free(void *p, size_t size);

/* A block of at least n bytes holding the first `keep` bytes of p (size `size`), which
 * is given back; NULL with MemoryError set (p is then untouched and still owned). */
void *scratch_grow(void *p, size_t size, size_t keep, size_t n, size_t *got);

/* Drop every kept block; returns the bytes that were held. */
size_t scratch_release(void);

/* The bytes kept now. */
size_t scratch_held(void);

#endif
