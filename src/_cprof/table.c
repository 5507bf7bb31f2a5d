/* table.c — growth and copying of the per-thread tables (see table.h).
 * Runs with the GIL held, on the owning thread or during a snapshot. Memory
 * comes from the C allocator, not PyMem, so the tables never show up in (or
 * recurse into) pyprof's own allocation hooks.
 */
#include "table.h"

#include <stdlib.h>
#include <string.h>

void pp_cntbase_free(pp_cntbase *b)
{
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

void pp_stepbase_free(pp_stepbase *b)
{
    pp_cntbase_free(&b->f);
    pp_cntbase_free(&b->e);
    pp_cntbase_free(&b->p);
    pp_cntbase_free(&b->l);
    pp_cntbase_free(&b->c);
}

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
    if (pp_index_init(&t->fidx, 256) < 0 || pp_index_init(&t->eidx, 512) < 0
        || pp_index_init(&t->lidx, 16) < 0 || pp_index_init(&t->cidx, 16) < 0
        || pp_index_init(&t->pidx, 512) < 0) {
        pp_tables_free(t);
        return -1;
    }
    return 0;
}

void pp_tables_free(pp_tables *t)
{
    pp_index_free(&t->fidx);
    pp_index_free(&t->eidx);
    pp_index_free(&t->lidx);
    pp_index_free(&t->cidx);
    pp_index_free(&t->pidx);
    pp_index_free(&t->iidx);
    free(t->i);
    free(t->f);
    free(t->p);
    free(t->e);
    free(t->l);
    free(t->c);
    for (uint32_t i = 0; i < t->caplmap; i++)
        free(t->lmap[i].slot);
    free(t->lmap);
    free(t->tl.ev);
    memset(t, 0, sizeof *t);
}

void pp_tables_clear(pp_tables *t)
{
    pp_index_clear(&t->fidx);
    pp_index_clear(&t->eidx);
    pp_index_clear(&t->lidx);
    pp_index_clear(&t->cidx);
    pp_index_clear(&t->pidx);
    if (t->iidx.e)
        pp_index_clear(&t->iidx);
    t->nf = t->ne = t->nl = t->nc = t->np = t->ni = 0;
    t->paths_dropped = 0;
    for (uint32_t i = 0; i < t->caplmap; i++)
        t->lmap[i].n = 0;       /* keep the memory, forget the slots */
    t->tl.n = 0;                /* the buffer keeps its reserved capacity */
    t->tl.dropped_short = t->tl.dropped_full = 0;
}

/* dst gets its own copy of an array of n used elements (capacity >= 1). */
static int copy_array(void **dst, const void *src, uint32_t n, uint32_t cap, size_t elem)
{
    *dst = malloc((size_t)(cap ? cap : 1) * elem);
    if (*dst == NULL)
        return -1;
    if (n)
        memcpy(*dst, src, (size_t)n * elem);
    return 0;
}

/* The copy has no timeline (tl zeroed, off): see pp_timeline. */
int pp_tables_copy(pp_tables *dst, const pp_tables *src)
{
    memset(dst, 0, sizeof *dst);
    if (pp_index_copy(&dst->fidx, &src->fidx) < 0 || pp_index_copy(&dst->eidx, &src->eidx) < 0
        || pp_index_copy(&dst->lidx, &src->lidx) < 0 || pp_index_copy(&dst->cidx, &src->cidx) < 0
        || pp_index_copy(&dst->pidx, &src->pidx) < 0
        || copy_array((void **)&dst->p, src->p, src->np, src->capp, sizeof(pp_pslot)) < 0
        || copy_array((void **)&dst->f, src->f, src->nf, src->capf, sizeof(pp_fslot)) < 0
        || copy_array((void **)&dst->e, src->e, src->ne, src->cape, sizeof(pp_eslot)) < 0
        || copy_array((void **)&dst->l, src->l, src->nl, src->capl, sizeof(pp_lslot)) < 0
        || copy_array((void **)&dst->c, src->c, src->nc, src->capc, sizeof(pp_cslot)) < 0
        || (src->iidx.e && (pp_index_copy(&dst->iidx, &src->iidx) < 0
                            || copy_array((void **)&dst->i, src->i, src->ni, src->capi,
                                          sizeof(pp_islot)) < 0))) {
        pp_tables_free(dst);
        return -1;
    }
    dst->ni = src->ni;
    dst->capi = src->capi ? src->capi : src->iidx.e != NULL;
    dst->nf = src->nf;
    dst->ne = src->ne;
    dst->nl = src->nl;
    dst->nc = src->nc;
    dst->np = src->np;
    dst->paths_dropped = src->paths_dropped;
    dst->capf = src->capf ? src->capf : 1;
    dst->cape = src->cape ? src->cape : 1;
    dst->capl = src->capl ? src->capl : 1;
    dst->capc = src->capc ? src->capc : 1;
    dst->capp = src->capp ? src->capp : 1;
    return 0;
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

/* A new zeroed slot at the end of an array, reachable through `ix` by `key`:
 * its index, or PP_NONE when memory runs out. */
static uint32_t add_slot(void **arr, uint32_t *n, uint32_t *cap, size_t elem, pp_index *ix,
                         uint64_t key)
{
    if (*n == *cap && grow(arr, cap, elem) < 0)
        return PP_NONE;
    if (pp_index_put(ix, key, *n) < 0)
        return PP_NONE;
    memset((char *)*arr + (size_t)*n * elem, 0, elem);
    return (*n)++;
}

uint32_t pp_tables_add_function(pp_tables *t, uint64_t key, uint32_t fid)
{
    uint32_t s = add_slot((void **)&t->f, &t->nf, &t->capf, sizeof(pp_fslot), &t->fidx, key);
    if (s != PP_NONE) {
        t->f[s].key = key;
        t->f[s].fid = fid;
        t->f[s].last_caller = PP_NONE;
        t->f[s].last_lslot = PP_NONE;
        t->f[s].last_ppath = PP_NONE;
    }
    return s;
}

uint32_t pp_tables_add_path(pp_tables *t, uint32_t parent, uint32_t fslot)
{
    if (t->np >= PP_MAX_PATHS)
        return PP_NONE;
    uint32_t s = add_slot((void **)&t->p, &t->np, &t->capp, sizeof(pp_pslot), &t->pidx,
                          pp_path_key(parent, fslot));
    if (s != PP_NONE) {
        t->p[s].parent = parent;
        t->p[s].fslot = fslot;
        t->p[s].last_fs = PP_NONE;
    }
    return s;
}

uint32_t pp_tables_add_edge(pp_tables *t, uint32_t caller, uint32_t callee)
{
    uint32_t s = add_slot((void **)&t->e, &t->ne, &t->cape, sizeof(pp_eslot), &t->eidx,
                          pp_edge_key(caller, callee));
    if (s != PP_NONE) {
        t->e[s].caller = caller;
        t->e[s].callee = callee;
    }
    return s;
}

uint32_t pp_tables_add_line(pp_tables *t, uint64_t key, uintptr_t code, uint32_t fid,
                            uint32_t line)
{
    uint32_t s = add_slot((void **)&t->l, &t->nl, &t->capl, sizeof(pp_lslot), &t->lidx, key);
    if (s != PP_NONE) {
        t->l[s].code = code;
        t->l[s].fid = fid;
        t->l[s].line = line;
    }
    return s;
}

uint32_t pp_tables_add_insn(pp_tables *t, uintptr_t code, uint32_t offset, uint32_t fid)
{
    if (offset >= (1u << 16) || (t->iidx.e == NULL && pp_index_init(&t->iidx, 64) < 0))
        return PP_NONE;
    uint32_t s = add_slot((void **)&t->i, &t->ni, &t->capi, sizeof(pp_islot), &t->iidx,
                          pp_insn_key(code, offset));
    if (s != PP_NONE) {
        t->i[s].code = code;
        t->i[s].fid = fid;
        t->i[s].offset = offset;
    }
    return s;
}

uint32_t pp_tables_add_callrow(pp_tables *t, uint32_t lslot, uint32_t callee)
{
    uint32_t s = add_slot((void **)&t->c, &t->nc, &t->capc, sizeof(pp_cslot), &t->cidx,
                          ((uint64_t)lslot + 1) << 32 | callee);
    if (s != PP_NONE) {
        t->c[s].lslot = lslot;
        t->c[s].callee = callee;
    }
    return s;
}

uint32_t pp_tables_line_slow(pp_tables *t, uint32_t fs, uintptr_t code, uint32_t line,
                             uint32_t fid, uint32_t base)
{
    uint32_t ls = pp_tables_line(t, code, line, fid);
    if (ls == PP_NONE || line < base || line - base > (1u << 16))
        return ls;              /* odd line numbers stay on the hash */
    if (fs >= t->caplmap) {
        uint32_t ncap = t->caplmap ? t->caplmap : 64;
        while (ncap <= fs)
            ncap *= 2;
        pp_lmap *nm = realloc(t->lmap, (size_t)ncap * sizeof(pp_lmap));
        if (nm == NULL)
            return ls;
        memset(nm + t->caplmap, 0, (size_t)(ncap - t->caplmap) * sizeof(pp_lmap));
        t->lmap = nm;
        t->caplmap = ncap;
    }
    pp_lmap *m = &t->lmap[fs];
    uint32_t want = line - base + 1;
    if (m->n == 0)
        m->base = base;
    if (want > m->n) {
        uint32_t ncap = want < 32 ? 32 : want + want / 2;
        uint32_t *ns = realloc(m->slot, (size_t)ncap * sizeof(uint32_t));
        if (ns == NULL)
            return ls;
        for (uint32_t i = m->n; i < ncap; i++)
            ns[i] = PP_NONE;
        m->slot = ns;
        m->n = ncap;
    }
    m->slot[line - m->base] = ls;
    return ls;
}
