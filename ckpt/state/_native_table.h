/* An address-keyed hash table (object ids, the container memo, type indices).
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_TABLE_H
#define CKPT_NATIVE_TABLE_H

/* ---- an address-keyed hash table ----------------------------------------------------- */

typedef struct {
    void *key;
    void *val;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask, used;
    unsigned shift; /* 64 - log2(capacity): a slot index is a hash's top bits */
    int mapped;     /* slots is a mapping of its own (slots_alloc); PT_EMPTY: the shared
                     * empty array (pt_init_empty), allocated at the first put */
} PTable;

#define PT_EMPTY 2
#define PT_FIRST_CAP 64 /* what an empty table grows to at its first put */

/* Fibonacci hashing: the top bits of the address times 2**64 / phi spread the aligned,
 * clustered addresses of one allocator over the table in one multiply. */
static inline size_t phash(PTable *t, void *p)
{
    return (size_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL) >> t->shift);
}

/* An empty table over zeroed `slots` of `cap` entries (a power of two). */
static void pt_set(PTable *t, Slot *slots, size_t cap, int mapped)
{
    t->slots = slots;
    t->mapped = mapped;
    t->mask = cap - 1;
    t->used = 0;
    t->shift = 64;
    while (cap > 1) {
        cap >>= 1;
        t->shift--;
    }
}

/* Huge pages for the large tables.  A walk over a million objects looks up a 32 MiB id
 * table at random addresses: with 4 KiB pages nearly every lookup also misses the TLB,
 * with 2 MiB pages the table is 16 entries.  A table of HUGE_MIN bytes or more is its
 * own 2 MiB-aligned anonymous mapping with MADV_HUGEPAGE (THP "madvise" mode grants
 * it; "never" leaves 4 KiB pages, the same memory either way, as every page of a hash
 * table is touched).  Smaller tables stay with the allocator. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)
static int huge_tables = 1; /* 0: every table from PyMem (set_huge_tables, to compare) */

static inline size_t mapped_len(size_t cap)
{
    return (cap * sizeof(Slot) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

/* `cap` zeroed slots, or NULL (no error set) when memory is short; *mapped says
 * which way they came (slots_free needs it). */
static Slot *slots_alloc(size_t cap, int *mapped)
{
    *mapped = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge_tables && cap * sizeof(Slot) >= HUGE_MIN) {
        size_t len = mapped_len(cap);
        char *p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        char *a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        if (a > p)
            munmap(p, (size_t)(a - p));
        /* the tail past the table: never empty, as a - p < HUGE_PAGE */
        munmap(a + len, (size_t)(p + HUGE_PAGE - a));
        madvise(a, len, MADV_HUGEPAGE); /* advice only: a refusal leaves small pages */
        *mapped = 1;
        return (Slot *)a;
    }
#endif
    return PyMem_Calloc(cap, sizeof(Slot));
}

/* Free what slots_alloc(cap, &mapped) returned (NULL is fine). */
static void slots_free(Slot *slots, size_t cap, int mapped)
{
    if (!slots || mapped == PT_EMPTY)
        return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (mapped) {
        munmap(slots, mapped_len(cap));
        return;
    }
#else
    (void)cap, (void)mapped;
#endif
    PyMem_Free(slots);
}

static int pt_init(PTable *t, size_t cap)
{
    int mapped;
    Slot *slots = slots_alloc(cap, &mapped);
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    pt_set(t, slots, cap, mapped);
    return 0;
}

/* A table with no array of its own yet: lookups find nothing in a shared all-empty
 * array (never written: pt_put grows it first), and the first put allocates.  A small
 * save meets one or two classes and no enum: it no longer pays for zeroed arrays. */
static Slot pt_empty_slots[2];

static void pt_init_empty(PTable *t)
{
    pt_set(t, pt_empty_slots, 2, PT_EMPTY);
}

static inline Slot *pt_find(PTable *t, void *key)
{
    size_t i = phash(t, key);
    for (;;) {
        Slot *s = &t->slots[i];
        if (s->key == key)
            return s;
        if (!s->key)
            return NULL;
        i = (i + 1) & t->mask;
    }
}

static int pt_grow(PTable *t)
{
    PTable n;
    if (pt_init(&n, t->mapped == PT_EMPTY ? PT_FIRST_CAP : (t->mask + 1) * 2) < 0)
        return -1;
    for (size_t i = 0; i <= t->mask; i++) {
        Slot *s = &t->slots[i];
        if (s->key) {
            size_t j = phash(&n, s->key);
            while (n.slots[j].key)
                j = (j + 1) & n.mask;
            n.slots[j] = *s;
        }
    }
    n.used = t->used;
    slots_free(t->slots, t->mask + 1, t->mapped);
    *t = n;
    return 0;
}

/* Insert a new key (the caller checked it is absent). */
static int pt_put(PTable *t, void *key, void *val)
{
    if (((t->used + 1) * 2 > t->mask + 1 || t->mapped == PT_EMPTY) && pt_grow(t) < 0)
        return -1;
    size_t i = phash(t, key);
    while (t->slots[i].key)
        i = (i + 1) & t->mask;
    t->slots[i].key = key;
    t->slots[i].val = val;
    t->used++;
    return 0;
}

/* Remove a present slot, shifting later entries of its probe run back (no tombstones). */
static void pt_remove(PTable *t, Slot *slot)
{
    size_t i = (size_t)(slot - t->slots), j = i;
    t->slots[i].key = NULL;
    t->used--;
    for (;;) {
        j = (j + 1) & t->mask;
        if (!t->slots[j].key)
            return;
        size_t home = phash(t, t->slots[j].key);
        /* the entry at j may move to i unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            t->slots[i] = t->slots[j];
            t->slots[j].key = NULL;
            i = j;
        }
    }
}

/* The table without its array (freed or handed on by the caller). */
static void pt_detach(PTable *t)
{
    t->slots = NULL;
    t->mapped = 0;
    t->mask = t->used = 0;
}

static void pt_free(PTable *t)
{
    slots_free(t->slots, t->mask + 1, t->mapped);
    pt_detach(t);
}

/* Table sizes of the previous walk: a program saves graphs of similar size again and
 * again, so starting there skips the growth chain (rehashes and zeroed memory). */
static size_t last_ids = 1024, last_memo = 256;

/* The previous walk's id and memo arrays, kept for the next walk (up to SPARE_MAX
 * bytes each).  A fresh calloc of a large array is fresh pages, one page fault per
 * 4 KiB on first touch: a FlatSave took ~1470 faults, 512 of them for these two
 * tables; clearing a kept array with memset is several times cheaper. */
enum { SPARE_IDS, SPARE_MEMO };
#define SPARE_MAX ((size_t)8 << 20)
static Slot *spare_slots[2];
static size_t spare_cap[2];
static int spare_mapped[2];
static int spare_clean[2]; /* the kept array is all empty already (no memset needed) */

/* pt_init, taking the kept array when it is at least cap and at most 4 x cap slots. */
static int pt_init_spare(PTable *t, size_t cap, int which)
{
    Slot *kept = spare_slots[which];
    size_t kcap = spare_cap[which];
    if (!kept || kcap < cap || kcap > 4 * cap)
        return pt_init(t, cap);
    spare_slots[which] = NULL;
    if (!spare_clean[which])
        memset(kept, 0, kcap * sizeof(Slot));
    pt_set(t, kept, kcap, spare_mapped[which]);
    return 0;
}

/* pt_free, keeping the array for the next walk when it is not too large.  `clean`:
 * the caller emptied every slot (the next walk need not clear the array). */
static void pt_free_spare(PTable *t, int which, int clean)
{
    size_t cap = t->slots ? t->mask + 1 : 0;
    if (!cap || t->mapped == PT_EMPTY || cap * sizeof(Slot) > SPARE_MAX ||
        (spare_slots[which] && spare_cap[which] >= cap)) {
        pt_free(t); /* too large to keep, or a larger one is kept already */
        return;
    }
    slots_free(spare_slots[which], spare_cap[which], spare_mapped[which]);
    spare_slots[which] = t->slots;
    spare_mapped[which] = t->mapped;
    spare_cap[which] = cap;
    spare_clean[which] = clean || t->used == 0;
    pt_detach(t);
}

static size_t table_size_for(size_t used)
{
    size_t cap = 64;
    while (cap < used * 2 + 2 && cap < ((size_t)1 << 40))
        cap *= 2;
    return cap;
}

#endif
