/* table.c — growth and copying of the per-thread tables (see table.h).
 * Runs with the GIL held, on the owning thread or during a snapshot. Memory
 * comes from the C allocator, not PyMem, so the tables never show up in (or
 * recurse into) pyprof's own allocation hooks.
 */
#include "table.h"

#include <stdlib.h>
#include <string.h>

int pp_index_init(pp_index *ix, uint32_t capacity)
{
    ix->e = calloc(capacity, sizeof(pp_ient));
    ix->mask = capacity - 1;
    ix->count = 0;
    return ix->e ? 0 : -1;
}

void pp_index_free(pp_index *ix)
{
    free(ix->e);
    ix->e = NULL;
    ix->mask = 0;
    ix->count = 0;
}

static void index_insert_nogrow(pp_ient *e, uint32_t mask, uint64_t key, uint32_t val)
{
    uint32_t i = pp_hash64(key, mask);
    while (e[i].key != 0)
        i = (i + 1) & mask;
    e[i].key = key;
    e[i].val = val;
}

int pp_index_put(pp_index *ix, uint64_t key, uint32_t val)
{
    /* Keep the load below 1/2 so probes stay short. */
    if ((ix->count + 1) * 2 > ix->mask + 1) {
        uint32_t ncap = (ix->mask + 1) * 2;
        if (ncap == 0)
            return -1;
        pp_ient *ne = calloc(ncap, sizeof(pp_ient));
        if (!ne)
            return -1;
        for (uint32_t i = 0; i <= ix->mask; i++)
            if (ix->e[i].key)
                index_insert_nogrow(ne, ncap - 1, ix->e[i].key, ix->e[i].val);
        free(ix->e);
        ix->e = ne;
        ix->mask = ncap - 1;
    }
    index_insert_nogrow(ix->e, ix->mask, key, val);
    ix->count++;
    return 0;
}

void pp_index_clear(pp_index *ix)
{
    if (ix->e)
        memset(ix->e, 0, ((size_t)ix->mask + 1) * sizeof(pp_ient));
    ix->count = 0;
}

int pp_index_copy(pp_index *dst, const pp_index *src)
{
    dst->e = malloc(((size_t)src->mask + 1) * sizeof(pp_ient));
    if (!dst->e)
        return -1;
    memcpy(dst->e, src->e, ((size_t)src->mask + 1) * sizeof(pp_ient));
    dst->mask = src->mask;
    dst->count = src->count;
    return 0;
}

int pp_tables_init(pp_tables *t)
{
    memset(t, 0, sizeof *t);
    if (pp_index_init(&t->fidx, 256) < 0 || pp_index_init(&t->eidx, 512) < 0) {
        pp_tables_free(t);
        return -1;
    }
    return 0;
}

void pp_tables_free(pp_tables *t)
{
    pp_index_free(&t->fidx);
    pp_index_free(&t->eidx);
    free(t->f);
    free(t->e);
    memset(t, 0, sizeof *t);
}

void pp_tables_clear(pp_tables *t)
{
    pp_index_clear(&t->fidx);
    pp_index_clear(&t->eidx);
    t->nf = t->ne = 0;
}

int pp_tables_copy(pp_tables *dst, const pp_tables *src)
{
    memset(dst, 0, sizeof *dst);
    if (pp_index_copy(&dst->fidx, &src->fidx) < 0 || pp_index_copy(&dst->eidx, &src->eidx) < 0)
        goto fail;
    dst->f = malloc((src->capf ? src->capf : 1) * sizeof(pp_fslot));
    dst->e = malloc((src->cape ? src->cape : 1) * sizeof(pp_eslot));
    if (!dst->f || !dst->e)
        goto fail;
    if (src->nf)
        memcpy(dst->f, src->f, src->nf * sizeof(pp_fslot));
    if (src->ne)
        memcpy(dst->e, src->e, src->ne * sizeof(pp_eslot));
    dst->nf = src->nf;
    dst->ne = src->ne;
    dst->capf = src->capf ? src->capf : 1;
    dst->cape = src->cape ? src->cape : 1;
    return 0;
fail:
    pp_tables_free(dst);
    return -1;
}

static int grow(void **arr, uint32_t *cap, size_t elem)
{
    uint32_t ncap = *cap ? *cap * 2 : 64;
    if (ncap <= *cap)
        return -1;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

uint32_t pp_tables_add_function(pp_tables *t, uint64_t key, uint32_t fid)
{
    if (t->nf == t->capf && grow((void **)&t->f, &t->capf, sizeof(pp_fslot)) < 0)
        return PP_NONE;
    uint32_t s = t->nf;
    if (pp_index_put(&t->fidx, key, s) < 0)
        return PP_NONE;
    memset(&t->f[s], 0, sizeof(pp_fslot));
    t->f[s].key = key;
    t->f[s].fid = fid;
    t->f[s].last_caller = PP_NONE;
    t->nf++;
    return s;
}

uint32_t pp_tables_add_edge(pp_tables *t, uint32_t caller, uint32_t callee)
{
    if (t->ne == t->cape && grow((void **)&t->e, &t->cape, sizeof(pp_eslot)) < 0)
        return PP_NONE;
    uint32_t s = t->ne;
    if (pp_index_put(&t->eidx, pp_edge_key(caller, callee), s) < 0)
        return PP_NONE;
    memset(&t->e[s], 0, sizeof(pp_eslot));
    t->e[s].caller = caller;
    t->e[s].callee = callee;
    t->ne++;
    return s;
}
