/* memory_blocks.c — live small blocks of exact mode, by page (see memory_hooks.h).
 *
 * A block of at most PP_PAGED_MAX bytes at a 16-byte aligned address is kept
 * in its 4 KiB page's record: one 8-byte slot (site + 1, size) per 16 bytes of
 * the page, found by a small directory of pages, no probing. Blocks made or
 * freed one after the other (a pool's objects) share the record's cache lines:
 * 8 slots to a line, where the hashed table of memory.c held 2.7 entries of
 * blocks spread over 6 lines. A page's record is reused for another page once
 * its last block is freed (the memory used is that of pages with live small
 * blocks: 2 KiB each, at most half of a full page's bytes).
 *
 * Runs with memory.c's table lock held; never allocates with malloc, never
 * calls into Python.
 */
#define _GNU_SOURCE 1
#include "memory_hooks.h"

#include <string.h>
#include <sys/mman.h>

#define PAGE_SHIFT 12
#define SLOTS (1u << (PAGE_SHIFT - 4))

void *pp_mem_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    /* a hashed table is read at random: with 4 KiB pages nearly every
     * lookup of a large one missed the TLB (THP is often "madvise" only) */
    if (bytes >= (2u << 20))
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

typedef struct { uint32_t site1, size; } slot;          /* site1: site + 1, 0 empty */
typedef struct { slot s[SLOTS]; } record;
typedef struct { uintptr_t key; uint32_t rec, live; } dirent;   /* key: page number, 0 empty */

static dirent *dir;
static size_t dir_cap, ndir;                /* capacity: a power of two */
static record *pool;                        /* records; free ones are all zero */
static size_t pool_cap, npool;
static uint32_t *spare;                     /* indexes of free records below npool */
static size_t nspare, spare_cap;
static uintptr_t last_key;                  /* the last page found, and its entry */
static dirent *last_ent;

/* Grown in place where the kernel can (mremap): no copy of the records. */
static int grow_mapping(void **p, size_t *cap, size_t elem, size_t first)
{
    size_t ncap = *cap ? *cap * 2 : first;
    void *np = *p ? mremap(*p, *cap * elem, ncap * elem, MREMAP_MAYMOVE)
                  : pp_mem_map(ncap * elem);
    if (np == NULL || np == MAP_FAILED)
        return -1;
#ifdef MADV_HUGEPAGE
    if (ncap * elem >= (2u << 20))
        madvise(np, ncap * elem, MADV_HUGEPAGE);
#endif
    *p = np;
    *cap = ncap;
    return 0;
}

static inline dirent *find(uintptr_t key)
{
    if (key == last_key)
        return last_ent;
    if (ndir == 0)
        return NULL;
    size_t mask = dir_cap - 1, i = pp_mem_mix(key) & mask;
    while (dir[i].key != key) {
        if (dir[i].key == 0)
            return NULL;
        i = (i + 1) & mask;
    }
    last_key = key;
    last_ent = &dir[i];
    return last_ent;
}

static int grow_dir(void)
{
    size_t ncap = dir_cap ? dir_cap * 2 : 1024;
    dirent *nd = pp_mem_map(ncap * sizeof *nd);
    if (nd == NULL)
        return -1;
    for (size_t i = 0; i < dir_cap; i++) {
        if (dir[i].key == 0)
            continue;
        size_t j = pp_mem_mix(dir[i].key) & (ncap - 1);
        while (nd[j].key != 0)
            j = (j + 1) & (ncap - 1);
        nd[j] = dir[i];
    }
    if (dir)
        munmap(dir, dir_cap * sizeof *dir);
    dir = nd;
    dir_cap = ncap;
    last_key = 0;
    return 0;
}

static dirent *add_page(uintptr_t key)
{
    if ((ndir + 1) * 2 > dir_cap && grow_dir() < 0)
        return NULL;
    uint32_t rec;
    if (nspare)
        rec = spare[--nspare];
    else {
        if (npool == pool_cap && grow_mapping((void **)&pool, &pool_cap, sizeof *pool, 256) < 0)
            return NULL;
        if (npool == spare_cap
            && grow_mapping((void **)&spare, &spare_cap, sizeof *spare, 256) < 0)
            return NULL;
        rec = (uint32_t)npool++;
    }
    size_t mask = dir_cap - 1, i = pp_mem_mix(key) & mask;
    while (dir[i].key != 0)
        i = (i + 1) & mask;
    dir[i] = (dirent){key, rec, 0};
    ndir++;
    last_key = key;
    last_ent = &dir[i];
    return last_ent;
}

/* Its record spare (all zero: no live block), its entry out, backward shift. */
static void drop_page(dirent *d)
{
    spare[nspare++] = d->rec;
    size_t mask = dir_cap - 1, hole = (size_t)(d - dir);
    for (size_t j = (hole + 1) & mask; dir[j].key != 0; j = (j + 1) & mask) {
        size_t home = pp_mem_mix(dir[j].key) & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            dir[hole] = dir[j];
            hole = j;
        }
    }
    dir[hole].key = 0;
    ndir--;
    last_key = 0;
}

int pp_paged_put(uintptr_t ptr, uint32_t site, uint64_t size)
{
    if (size > PP_PAGED_MAX || (ptr & 15) || site >= UINT32_MAX - 1)
        return 0;
    uintptr_t key = ptr >> PAGE_SHIFT;
    dirent *d = find(key);
    if (d == NULL && (d = add_page(key)) == NULL)
        return 0;
    slot *s = &pool[d->rec].s[(ptr >> 4) & (SLOTS - 1)];
    int fresh = s->site1 == 0;
    d->live += (uint32_t)fresh;
    *s = (slot){site + 1, (uint32_t)size};
    return fresh ? 1 : 2;
}

int pp_paged_take(uintptr_t ptr, uint32_t *site, uint64_t *size)
{
    if (ptr & 15)
        return 0;
    dirent *d = find(ptr >> PAGE_SHIFT);
    if (d == NULL)
        return 0;
    slot *s = &pool[d->rec].s[(ptr >> 4) & (SLOTS - 1)];
    if (s->site1 == 0)
        return 0;
    *site = s->site1 - 1;
    *size = s->size;
    *s = (slot){0, 0};
    if (--d->live == 0)
        drop_page(d);
    return 1;
}

void pp_paged_clear(void)
{
    if (dir)
        memset(dir, 0, dir_cap * sizeof *dir);
    if (pool)
        memset(pool, 0, npool * sizeof *pool);
    ndir = npool = nspare = 0;
    last_key = 0;
}
