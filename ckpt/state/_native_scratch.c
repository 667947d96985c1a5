/* Large working blocks kept from one native save walk for the next: see
 * _native_scratch.h for why. */
#include "_native_scratch.h"

#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SCRATCH_ASAN 1
#else
#define SCRATCH_ASAN 0
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

#define SCRATCH_SLOTS 8
#define SCRATCH_HELD_MAX ((size_t)64 << 20)  /* what a program keeps between saves */
#define SCRATCH_BLOCK_MAX ((size_t)32 << 20) /* larger blocks go straight back */

static struct {
    void *p;
    size_t size;
} kept[SCRATCH_SLOTS];
static unsigned nkept;
static size_t held;

static void drop(unsigned i)
{
    held -= kept[i].size;
    kept[i] = kept[--nkept];
}

void *scratch_alloc(size_t n, size_t *got)
{
    if (n < SCRATCH_MIN) {
        void *p = PyMem_Malloc(n ? n : 1);
        if (!p) {
            PyErr_NoMemory();
            return NULL;
        }
        *got = n;
        return p;
    }
    /* The smallest kept block that fits and wastes at most three quarters of itself;
     * under ASan only an exact fit, so every byte past n stays poisoned. */
    int best = -1;
    for (unsigned i = 0; i < nkept; i++) {
        size_t s = kept[i].size;
        int fits = SCRATCH_ASAN ? s == n : (s >= n && s / 4 <= n);
        if (fits && (best < 0 || s < kept[best].size))
            best = (int)i;
    }
    if (best >= 0) {
        void *p = kept[best].p;
        *got = kept[best].size;
        drop((unsigned)best);
        ASAN_UNPOISON_MEMORY_REGION(p, *got);
        return p;
    }
    void *p = PyMem_RawMalloc(n);
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    *got = n;
    return p;
}

void *scratch_calloc(size_t n, size_t *got)
{
    void *p = scratch_alloc(n, got);
    if (p)
        memset(p, 0, n);
    return p;
}

void scratch_free(void *p, size_t size)
{
    if (!p)
        return;
    if (size < SCRATCH_MIN) {
        PyMem_Free(p);
        return;
    }
    if (size <= SCRATCH_BLOCK_MAX) {
        /* Make room by dropping smaller blocks: the larger one is the costlier to map. */
        while (nkept == SCRATCH_SLOTS || held + size > SCRATCH_HELD_MAX) {
            int smallest = -1;
            for (unsigned i = 0; i < nkept; i++)
                if (smallest < 0 || kept[i].size < kept[smallest].size)
                    smallest = (int)i;
            if (smallest < 0 || kept[smallest].size >= size)
                break;
            void *q = kept[smallest].p;
            ASAN_UNPOISON_MEMORY_REGION(q, kept[smallest].size);
            drop((unsigned)smallest);
            PyMem_RawFree(q);
        }
        if (nkept < SCRATCH_SLOTS && held + size <= SCRATCH_HELD_MAX) {
            ASAN_POISON_MEMORY_REGION(p, size);
            kept[nkept].p = p;
            kept[nkept].size = size;
            nkept++;
            held += size;
            return;
        }
    }
    PyMem_RawFree(p);
}

void *scratch_grow(void *p, size_t size, size_t keep, size_t n, size_t *got)
{
    if (n < SCRATCH_MIN && size < SCRATCH_MIN) {
        void *q = PyMem_Realloc(p, n ? n : 1);
        if (!q) {
            PyErr_NoMemory();
            return NULL;
        }
        *got = n;
        return q;
    }
    void *q = scratch_alloc(n, got);
    if (!q)
        return NULL;
    if (keep)
        memcpy(q, p, keep);
    scratch_free(p, size);
    return q;
}

size_t scratch_release(void)
{
    size_t was = held;
    while (nkept) {
        void *p = kept[nkept - 1].p;
        ASAN_UNPOISON_MEMORY_REGION(p, kept[nkept - 1].size);
        drop(nkept - 1);
        PyMem_RawFree(p);
    }
    return was;
}

size_t scratch_held(void)
{
    return held;
}
