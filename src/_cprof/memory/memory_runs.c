/* memory_runs.c — what the memory engine's runs leave with their profiler:
 * each stopped run's rows, allocation stacks and curve, after the earlier
 * runs' (stack ids renumbered), and their totals added up.
 * Never: touches the live tables (it reads them through pp_memory_rows and
 * pp_memory_stacks only); runs while recording.
 */
#include "memory_hooks.h"

#include <stdlib.h>
#include <string.h>

void pp_meminfo_add(pp_meminfo *into, const pp_meminfo *run)
{
    if (run->peak > into->peak)
        into->peak = run->peak;
    into->allocated += run->allocated;
    into->current += run->current;
    into->unknown_frees += run->unknown_frees;
    into->live_blocks += run->live_blocks;
    into->dropped += run->dropped;
    into->linked = run->linked;
}

/* *arr grown to hold `have + n` elements, the last n copied from src. */
static int append(void *arr, size_t have, const void *src, size_t n, size_t elem)
{
    void *grown = realloc(*(void **)arr, (have + n + 1) * elem);
    if (grown == NULL)
        return -1;
    *(void **)arr = grown;
    if (n)
        memcpy((char *)grown + have * elem, src, n * elem);
    return 0;
}

/* This run's stacks after the earlier runs'; its rows are made to point there
 * (or to none, out of memory). */
static void keep_stacks(pp_memstate *p, struct pp_memdata *m, pp_memrow *rows, uint32_t n)
{
    pp_memstacks st, *ms = &m->stacks;
    int ok = pp_memory_stacks(p, &st) == 0;
    if (!ok)
        PyErr_Clear();
    else {
        for (uint32_t k = 0; k < st.n; k++) {       /* indexes into the kept arrays */
            st.start[k] += ms->nframes;
            st.nstart[k] += ms->nnative_all;
        }
        ok = append(&ms->frames, ms->nframes, st.frames, st.nframes, sizeof *st.frames) == 0
             && append(&ms->native, ms->nnative_all, st.native, st.nnative_all,
                       sizeof *st.native) == 0
             && append(&ms->start, ms->n, st.start, st.n, sizeof *st.start) == 0
             && append(&ms->depth, ms->n, st.depth, st.n, sizeof *st.depth) == 0
             && append(&ms->nstart, ms->n, st.nstart, st.n, sizeof *st.nstart) == 0
             && append(&ms->nnative, ms->n, st.nnative, st.n, sizeof *st.nnative) == 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (rows[i].stack != PP_NONE)
            rows[i].stack = ok ? rows[i].stack + ms->n : PP_NONE;
    if (ok) {
        ms->n += st.n;
        ms->nframes += st.nframes;
        ms->nnative_all += st.nnative_all;
    }
    pp_memstacks_free(&st);
}

/* The stopped run's rows, stacks and curve kept with the profiler, after
 * its earlier runs'. GIL held, not recording. */
int pp_memory_keep_run(pp_memstate *p)
{
    pp_memrow *rows;
    uint32_t n;
    pp_meminfo info;
    int rc = pp_memory_rows(p, &rows, &n, &info);
    if (rc == 0) {
        struct pp_memdata *m = p->data ? p->data : calloc(1, sizeof *m);
        pp_memrow *all = m ? realloc(m->rows, ((size_t)m->nrows + n + 1) * sizeof *all) : NULL;
        if (all == NULL) {
            if (m != p->data)
                free(m);
            free(rows);
            PyErr_NoMemory();
            rc = -1;
        }
        else {
            pp_curve_keep(m, rows, n);
            keep_stacks(p, m, rows, n);
            memcpy(all + m->nrows, rows, (size_t)n * sizeof *rows);
            free(rows);
            m->rows = all;
            m->nrows += n;
            pp_meminfo_add(&m->info, &info);
            p->data = m;
        }
    }
    return rc;
}

void pp_memory_free(pp_memstate *p)
{
    if (p->data) {
        pp_memstacks_free(&p->data->stacks);
        free(p->data->curve);
        free(p->data->rows);
        free(p->data);
        p->data = NULL;
    }
}
