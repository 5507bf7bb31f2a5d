/* capture.c — snapshot of the profiler into a blob, and the .cprof writer.
 *
 * Runs with the GIL held (snapshot) and never inside a signal handler. The
 * writer uses only C and zlib, so a periodic flush can run from inside an
 * event callback without calling Python. Files are written to a temporary
 * name in the same directory and renamed, so readers see either the previous
 * complete file or the new one, never a half-written one.
 * Never: drains, starts or stops an engine (profiler.c settles them before a
 * capture; calls still open are ended in a copy of the tables).
 */
#include "capture_int.h"

#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* String table: a dict str -> index plus the strings in order. */
typedef struct {
    PyObject *index;
    PyObject *list;
} strtab;

static uint32_t intern_str(strtab *s, PyObject *str)
{
    if (str == NULL || !PyUnicode_Check(str))
        return 0;               /* "" is always interned first */
    PyObject *i = PyDict_GetItemWithError(s->index, str);
    if (i)
        return (uint32_t)PyLong_AsUnsignedLong(i);
    if (PyErr_Occurred())
        return UINT32_MAX;
    Py_ssize_t n = PyList_GET_SIZE(s->list);
    PyObject *ni = PyLong_FromSsize_t(n);
    if (ni == NULL || PyDict_SetItem(s->index, str, ni) < 0 || PyList_Append(s->list, str) < 0) {
        Py_XDECREF(ni);
        return UINT32_MAX;
    }
    Py_DECREF(ni);
    return (uint32_t)n;
}

/* Timeline: ticks of the profiler's clock to ns (a user timer's unit too). */
static inline int64_t tl_ns(const pp_run *p, const tconv *c, int64_t ticks)
{
    if (c->scale)
        return conv(c, ticks);
    if (p->tr.timeunit > 0.0)
        return (int64_t)llround((double)ticks * p->tr.timeunit * 1e9);
    return ticks;
}

typedef struct {
    uint64_t events, dropped_short, dropped_full, open;
} tlcounts;

static void put_json_info(buf *b, pp_run *p, const pp_snapin *in, const tconv *tc,
                          double time_unit, uint64_t events, const tlcounts *tl,
                          uint64_t paths_dropped, int64_t line_cost)
{
    int include_open = in->include_open;
    const pp_meminfo *live = in->live ? &in->live_info : NULL;
    char s[2048];
    int64_t now_wall = pp_clock_realtime_ns();
    int64_t dur = p->enabled_ns + (p->enabled ? pp_clock_monotonic_ns() - p->enabled_since_ns : 0);
    int n = snprintf(s, sizeof s,
        "{\"format\":[%d,%d],\"clock\":\"%s\",\"time_unit\":%.17g,\"ns_per_tick\":%.17g,"
        "\"clock_read_ns\":%.6g,\"user_timer\":%s,\"timeunit\":%.17g,"
        "\"start_wall_ns\":%lld,\"snapshot_wall_ns\":%lld,\"duration_ns\":%lld,"
        "\"events\":%llu,\"subcalls\":%s,\"builtins\":%s,\"exact_builtins\":%s,\"enabled\":%s,"
        "\"open_calls_counted\":%s,\"python\":\"%d.%d.%d\",\"hook\":\"%s\",\"tool_id\":%d,"
        "\"cstack_asides\":%llu,\"lines\":%s,\"paths\":%s,\"paths_dropped\":%llu",
        PP_FORMAT_MAJOR, PP_FORMAT_MINOR, p->tr.timer ? "user" : pp_clock_name(), time_unit,
        tc->ns_per_tick, p->tr.timer ? 0.0 : pp_clock_read_cost_ns(),
        p->tr.timer ? "true" : "false", p->tr.timeunit,
        (long long)p->start_wall_ns, (long long)now_wall, (long long)dur,
        (unsigned long long)events, p->tr.subcalls ? "true" : "false",
        p->tr.builtins ? "true" : "false", p->tr.exact_builtins ? "true" : "false",
        p->enabled ? "true" : "false",
        include_open ? "true" : "false",
        PY_MAJOR_VERSION, PY_MINOR_VERSION, PY_MICRO_VERSION,
        in->hook, p->tr.tool_id, (unsigned long long)p->tr.cstack_asides,
        p->tr.lines ? "true" : "false",
        p->tr.paths && !p->sampling && !p->memory_only ? "true" : "false",
        (unsigned long long)paths_dropped);
    if (n > 0 && (size_t)n < sizeof s && p->tr.asyncio)
        n += snprintf(s + n, sizeof s - (size_t)n, ",\"asyncio\":true");
    if (n > 0 && (size_t)n < sizeof s
        && ((p->sampling && p->sm.opts.opcodes) || (p->tr.lines && p->tr.opcodes)))
        n += snprintf(s + n, sizeof s - (size_t)n, ",\"opcodes\":true");
    if (n > 0 && (size_t)n < sizeof s && p->tr.lines)
        n += snprintf(s + n, sizeof s - (size_t)n, ",\"line_bookkeeping_ns\":%lld",
                      (long long)tl_ns(p, tc, line_cost));
    if (n > 0 && (size_t)n < sizeof s && p->sampling) {
        pp_sampler_info si = in->si;
        if (!p->enabled_ns && !p->enabled)
            memset(&si, 0, sizeof si);
        double elapsed = (double)(si.stopped_ns - si.started_ns) / 1e9;
        n += snprintf(s + n, sizeof s - (size_t)n,
            ",\"sampling\":{\"mode\":\"%s\",\"native\":%s,\"rate_requested\":%.6g,"
            "\"interval_ns\":%.0f,\"signals\":%llu,\"recorded\":%llu,\"dropped\":%llu,"
            "\"throttled\":%llu,"
            "\"other_threads\":%llu,\"drained\":%llu,\"truncated\":%llu,\"elapsed_s\":%.6f,"
            "\"cpu_s\":%.6f,\"rate_achieved\":%.6g,\"handler_replaced\":%s,"
            "\"weighting\":\"%s\",\"weighted_s\":%.6f,"
            "\"parked\":%llu,\"woken\":%llu,\"idle_ticks\":%llu,"
            "\"timer\":\"%s\",\"timer_fallback\":\"%s\"}",
            p->sm.opts.mode == PP_SAMPLE_WALL ? "wall" : "cpu",
            p->sm.opts.native ? "true" : "false",
            p->sm.opts.rate_hz, si.interval_ns, (unsigned long long)si.signals,
            (unsigned long long)si.recorded, (unsigned long long)si.dropped,
            (unsigned long long)si.throttled,
            (unsigned long long)si.foreign, (unsigned long long)p->sm.samples.drained,
            (unsigned long long)p->sm.samples.truncated, elapsed, (double)si.cpu_ns / 1e9,
            pp_sampler_achieved(&si),
            si.replaced ? "true" : "false",
            /* what a sample weighs: captures without this key weighed interval_ns */
            p->sm.opts.mode == PP_SAMPLE_CPU ? "thread_cpu_clock" : "thread_wall_clock",
            (double)si.weight_ns / 1e9, (unsigned long long)si.parked,
            (unsigned long long)si.woken, (unsigned long long)si.idle_ticks,
            p->sm.opts.mode == PP_SAMPLE_WALL ? "wall-clock" :
            si.source == PP_CPU_TASKCLOCK ? "task-clock" : "itimer",
            si.fallback ? si.fallback : "");
        if (n > 0 && (size_t)n < sizeof s && p->sm.opts.async)
            n += snprintf(s + n - 1, sizeof s - (size_t)n + 1,      /* inside "sampling" */
                ",\"async\":{\"tasks\":%u,\"seen\":%llu,\"unmatched_samples\":%llu,"
                "\"looks\":%llu,\"look_s\":%.6f,\"look_gap_s\":%.6f}}",
                in->tasks_named, (unsigned long long)p->sm.tasks.seen,
                (unsigned long long)p->sm.tasks.unmatched, (unsigned long long)p->sm.tasks.looks,
                (double)p->sm.tasks.look_ns / 1e9, (double)p->sm.tasks.gap_ns / 1e9) - 1;
    }
    if (n > 0 && (size_t)n < sizeof s && p->memory && (p->mem.data || live)) {
        /* finished runs, and the one being recorded */
        pp_meminfo all = {0};
        all.linked = 1;
        uint64_t rss_end = 0, rss_peak = 0;
        if (p->mem.data) {
            all = p->mem.data->info;
            rss_end = p->mem.data->rss_end;
            rss_peak = p->mem.data->rss_peak;
        }
        if (live) {
            pp_meminfo_add(&all, live);
            rss_end = in->rss_end;
            rss_peak = in->rss_peak;
        }
        const pp_meminfo *mi = &all;
        n += snprintf(s + n, sizeof s - (size_t)n,
            ",\"memory\":{\"mode\":\"%s\",\"sample_bytes\":%lld,\"peak_bytes\":%llu,"
            "\"current_bytes\":%llu,"
            "\"allocated_bytes\":%llu,\"live_blocks\":%llu,\"unknown_frees\":%llu,"
            "\"hooks_linked\":%s,\"rss_peak_bytes\":%llu,\"rss_end_bytes\":%llu,"
            "\"dropped_blocks\":%llu,\"native_allocs\":%s,\"temporary\":%u}",
            p->mem.sample ? "sampled" : "exact", (long long)p->mem.sample,
            (unsigned long long)mi->peak, (unsigned long long)mi->current,
            (unsigned long long)mi->allocated, (unsigned long long)mi->live_blocks,
            (unsigned long long)mi->unknown_frees, mi->linked ? "true" : "false",
            (unsigned long long)rss_peak, (unsigned long long)rss_end,
            (unsigned long long)mi->dropped, p->mem.native ? "true" : "false",
            p->mem.temporary);
    }
    if (n > 0 && (size_t)n < sizeof s && p->tr.timeline) {
        n += snprintf(s + n, sizeof s - (size_t)n,
            ",\"timeline\":true,\"timeline_events\":%llu,\"timeline_dropped_short\":%llu,"
            "\"timeline_dropped_full\":%llu,\"timeline_open\":%llu,"
            "\"timeline_min_duration_ns\":%lld,\"timeline_max_events\":%llu",
            (unsigned long long)tl->events, (unsigned long long)tl->dropped_short,
            (unsigned long long)tl->dropped_full, (unsigned long long)tl->open,
            (long long)p->tr.tl_min_ns, (unsigned long long)p->tr.tl_max);
    }
    if (n > 0 && (size_t)n < sizeof s && p->gcstats.on) {
        const pp_gcstats *g = &p->gcstats;
        n += snprintf(s + n, sizeof s - (size_t)n,
            ",\"gc\":{\"collections\":[%llu,%llu,%llu],\"pause_ns\":[%lld,%lld,%lld],"
            "\"max_pause_ns\":%lld,\"collected\":%llu,\"uncollectable\":%llu}",
            (unsigned long long)g->collections[0], (unsigned long long)g->collections[1],
            (unsigned long long)g->collections[2], (long long)g->pause_ns[0],
            (long long)g->pause_ns[1], (long long)g->pause_ns[2], (long long)g->max_pause_ns,
            (unsigned long long)g->collected, (unsigned long long)g->uncollectable);
    }
    if (n > 0 && (size_t)n + 1 < sizeof s)
        s[n++] = '}';
    if (n < 0 || (size_t)n >= sizeof s) {
        b->oom = 1;
        return;
    }
    size_t r = record_begin(b, PP_REC_INFO);
    put(b, s, (size_t)n);
    record_end(b, r);
}

/* STRINGS, FUNCTIONS and THREADS: the records that share the string table. */
static int put_names(buf *b, pp_run *p)
{
    strtab st = {PyDict_New(), PyList_New(0)};
    int rc = -1;
    if (st.index == NULL || st.list == NULL)
        goto done;
    PyObject *empty = PyUnicode_FromString("");
    uint32_t e = empty ? intern_str(&st, empty) : UINT32_MAX;
    PyObject *tilde = PyUnicode_FromString("~");
    uint32_t tl = tilde ? intern_str(&st, tilde) : UINT32_MAX;
    Py_XDECREF(empty);
    Py_XDECREF(tilde);
    if (e == UINT32_MAX || tl == UINT32_MAX)
        goto done;

    buf fb = {0};
    put_u32(&fb, p->reg.nfun);
    for (uint32_t fid = 0; fid < p->reg.nfun; fid++) {
        uint32_t file, line, name, qual, kind = p->reg.fkind[fid];
        if (kind == PP_KIND_PYTHON) {
            PyCodeObject *co = (PyCodeObject *)p->reg.fobj[fid];
            file = intern_str(&st, co->co_filename);
            name = intern_str(&st, co->co_name);
            qual = intern_str(&st, co->co_qualname);
            line = (uint32_t)co->co_firstlineno;
        }
        else if (kind == PP_KIND_GHOST) {           /* (filename, name, qualname, line) */
            PyObject *t = p->reg.fobj[fid];
            file = intern_str(&st, PyTuple_GET_ITEM(t, 0));
            name = intern_str(&st, PyTuple_GET_ITEM(t, 1));
            qual = intern_str(&st, PyTuple_GET_ITEM(t, 2));
            line = (uint32_t)PyLong_AsLong(PyTuple_GET_ITEM(t, 3));
            kind = PP_KIND_PYTHON;                  /* for readers, it is a Python function */
        }
        else {
            file = tl;
            line = 0;
            name = qual = intern_str(&st, p->reg.fobj[fid]);
        }
        if (file == UINT32_MAX || name == UINT32_MAX || qual == UINT32_MAX) {
            free(fb.p);
            goto done;
        }
        uint32_t row[6] = {fid, file, line, name, qual, kind};
        put(&fb, row, sizeof row);
    }
    buf th = {0};
    put_u32(&th, p->threads.n);
    for (pp_thread *ts = p->threads.head; ts; ts = ts->next) {
        uint32_t name = intern_str(&st, ts->name);
        if (name == UINT32_MAX) {
            free(fb.p);
            free(th.p);
            goto done;
        }
        put_u32(&th, ts->index);
        put_u32(&th, name);
        put_u64(&th, ts->ident);
        put_u64(&th, ts->native_id);
        put_u64(&th, ts->events);
    }

    size_t r = record_begin(b, PP_REC_STRINGS);
    Py_ssize_t ns = PyList_GET_SIZE(st.list);
    put_u32(b, (uint32_t)ns);
    for (Py_ssize_t i = 0; i < ns; i++) {
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(st.list, i), &len);
        if (u == NULL) {
            /* Unencodable (lone surrogates): keep the slot, lose the text. */
            PyErr_Clear();
            u = "?";
            len = 1;
        }
        put_u32(b, (uint32_t)len);
        put(b, u, (size_t)len);
    }
    record_end(b, r);
    r = record_begin(b, PP_REC_FUNCTIONS);
    if (fb.oom || th.oom)
        b->oom = 1;
    put(b, fb.p, fb.n);
    record_end(b, r);
    r = record_begin(b, PP_REC_THREADS);
    put(b, th.p, th.n);
    record_end(b, r);
    free(fb.p);
    free(th.p);
    rc = 0;
done:
    Py_XDECREF(st.index);
    Py_XDECREF(st.list);
    return rc;
}

/* The per-thread tables of one kind, as records of the capture. */
typedef struct {
    buf fs, es, ls, cs, ms, ps, lm, is;
    uint32_t nfs, nes, nls, ncs, nms, nps, nlm, nis;
    uint64_t paths_dropped;
} statbufs;

static void put_thread_stats(statbufs *sb, const pp_thread *ts, const pp_tables *t,
                             const tconv *tc)
{
    buf *fs = &sb->fs, *es = &sb->es;
    uint32_t *nfs = &sb->nfs, *nes = &sb->nes;
    for (uint32_t i = 0; i < t->nf; i++) {
        const pp_fslot *s = &t->f[i];
        put_u32(fs, ts->index);
        put_u32(fs, s->fid);
        put_u64(fs, s->calls);
        put_u64(fs, s->rec_calls);
        put_i64(fs, conv(tc, s->tt));
        put_i64(fs, conv(tc, s->it));
        (*nfs)++;
        if (s->mem_peak || s->mem_residual) {
            put_u32(&sb->ms, ts->index);
            put_u32(&sb->ms, s->fid);
            put_i64(&sb->ms, s->mem_peak);
            put_i64(&sb->ms, s->mem_residual);
            sb->nms++;
        }
    }
    for (uint32_t i = 0; i < t->ne; i++) {
        const pp_eslot *s = &t->e[i];
        put_u32(es, ts->index);
        put_u32(es, t->f[s->caller].fid);
        put_u32(es, t->f[s->callee].fid);
        put_u32(es, 0);
        put_u64(es, s->calls);
        put_u64(es, s->rec_calls);
        put_i64(es, conv(tc, s->tt));
        put_i64(es, conv(tc, s->it));
        (*nes)++;
    }
    for (uint32_t i = 0; i < t->np; i++) {
        const pp_pslot *s = &t->p[i];
        put_u32(&sb->ps, ts->index);
        put_u32(&sb->ps, i);
        put_u32(&sb->ps, s->parent);
        put_u32(&sb->ps, t->f[s->fslot].fid);
        put_u64(&sb->ps, s->calls);
        put_i64(&sb->ps, conv(tc, s->tt));
        put_i64(&sb->ps, conv(tc, s->it));
        sb->nps++;
    }
    sb->paths_dropped += t->paths_dropped;
    for (uint32_t i = 0; i < t->nl; i++) {
        const pp_lslot *s = &t->l[i];
        put_u32(&sb->ls, ts->index);
        put_u32(&sb->ls, s->fid);
        put_u32(&sb->ls, s->line);
        put_u32(&sb->ls, 0);
        put_u64(&sb->ls, s->hits);
        put_i64(&sb->ls, conv(tc, s->time));
        sb->nls++;
        if (s->mem_alloc || s->mem_net || s->mem_peak) {
            put_u32(&sb->lm, ts->index);
            put_u32(&sb->lm, s->fid);
            put_u32(&sb->lm, s->line);
            put_u32(&sb->lm, 0);
            put_u64(&sb->lm, s->mem_alloc);
            put_u64(&sb->lm, s->mem_blocks);
            put_i64(&sb->lm, s->mem_net);
            put_i64(&sb->lm, s->mem_peak);
            sb->nlm++;
        }
    }
    for (uint32_t i = 0; i < t->ni; i++) {
        const pp_islot *s = &t->i[i];
        const uint32_t key[8] = {ts->index, s->fid, s->offset, s->opcode, s->line, s->end_line,
                                 s->col, s->end_col};
        put(&sb->is, key, sizeof key);
        put_u64(&sb->is, 0);
        put_i64(&sb->is, 0);
        put_u64(&sb->is, 0);
        put_i64(&sb->is, 0);
        put_u64(&sb->is, s->hits);
        put_i64(&sb->is, conv(tc, s->time));
        sb->nis++;
    }
    for (uint32_t i = 0; i < t->nc; i++) {
        const pp_cslot *s = &t->c[i];
        put_u32(&sb->cs, ts->index);
        put_u32(&sb->cs, t->l[s->lslot].fid);
        put_u32(&sb->cs, t->l[s->lslot].line);
        put_u32(&sb->cs, t->f[s->callee].fid);
        put_u64(&sb->cs, s->calls);
        put_i64(&sb->cs, conv(tc, s->time));
        sb->ncs++;
    }
}

/* A row's stack id in the capture: the live rows' stacks follow the finished
 * runs' (`shift` of them); none when the live stacks could not be read. */
static uint32_t row_stack(const pp_memrow *r, uint32_t shift, int stacks_kept)
{
    return r->stack == PP_NONE || !stacks_kept ? PP_NONE : r->stack + shift;
}

static void put_memrows(buf *b, const pp_memrow *rows, uint32_t n, uint32_t shift,
                        int stacks_kept)
{
    for (uint32_t i = 0; i < n; i++) {
        put_u32(b, rows[i].fid);
        put_u32(b, rows[i].line);
        put_u32(b, rows[i].kind & ~PP_MEM_NATIVE);
        put_u32(b, row_stack(&rows[i], shift, stacks_kept));
        put_u64(b, rows[i].alloc_bytes);
        put_u64(b, rows[i].alloc_count);
        put_u64(b, rows[i].free_bytes);
        put_u64(b, rows[i].free_count);
        put_u64(b, rows[i].peak_bytes);
        put_u64(b, rows[i].at_peak_bytes);
    }
}

/* MEMEXTRA: of the rows above, what C code allocated and what was temporary. */
static uint32_t count_extra(const pp_memrow *rows, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += (rows[i].kind & PP_MEM_NATIVE) || rows[i].temp_count;
    return k;
}

static void put_extrarows(buf *b, const pp_memrow *rows, uint32_t n, uint32_t shift,
                          int stacks_kept)
{
    for (uint32_t i = 0; i < n; i++) {
        const pp_memrow *r = &rows[i];
        if (!(r->kind & PP_MEM_NATIVE) && !r->temp_count)
            continue;
        int native = (r->kind & PP_MEM_NATIVE) != 0;
        put_u32(b, r->fid);
        put_u32(b, r->line);
        put_u32(b, r->kind & ~PP_MEM_NATIVE);
        put_u32(b, row_stack(r, shift, stacks_kept));
        put_u64(b, native ? r->alloc_bytes : 0);
        put_u64(b, native ? r->alloc_count : 0);
        put_u64(b, native ? r->free_bytes : 0);
        put_u64(b, native ? r->free_count : 0);
        put_u64(b, r->temp_bytes);
        put_u64(b, r->temp_count);
    }
}

/* MEMORY: the finished runs' rows, then those being recorded (readers add up
 * rows with the same function and line). */
static void put_points(buf *b, const pp_mempoint *pts, uint32_t n, int64_t t0)
{
    for (uint32_t i = 0; i < n; i++) {
        put_i64(b, pts[i].t_ns - t0);
        put_u64(b, pts[i].rss);
        put_u64(b, pts[i].heap);
        put_u64(b, pts[i].heap_max);
        put_u32(b, pts[i].fid);
        put_u32(b, pts[i].line);
    }
}

static void put_curve(buf *b, const pp_run *p, const pp_mempoint *live, uint32_t nlive)
{
    uint32_t nold = p->mem.data ? p->mem.data->npoints : 0;
    size_t r = record_begin(b, PP_REC_MEMCURVE);
    put_u32(b, nold + nlive);
    if (nold)
        put_points(b, p->mem.data->curve, nold, p->start_mono_ns);
    put_points(b, live, nlive, p->start_mono_ns);
    record_end(b, r);
}

static void put_stacklist(buf *b, const pp_memstacks *s, int native)
{
    for (uint32_t k = 0; s && k < s->n; k++) {
        uint32_t n = native ? s->nnative[k] : s->depth[k];
        const uint64_t *w = native ? s->native + s->nstart[k] : s->frames + s->start[k];
        put_u32(b, n);
        for (uint32_t i = 0; i < n; i++)
            put_u64(b, w[i]);
    }
}

/* MEMORY rows, then MEMSTACKS: the finished runs', then the live ones (whose
 * stack ids come after the finished runs' stacks). */
static void put_memory(buf *b, const pp_run *p, const pp_memrow *live, uint32_t nlive,
                       const pp_memstacks *live_stacks)
{
    uint32_t nold = p->mem.data ? p->mem.data->nrows : 0;
    uint32_t old_stacks = p->mem.data ? p->mem.data->stacks.n : 0;
    int live_kept = live_stacks != NULL;
    size_t r = record_begin(b, PP_REC_MEMORY);
    put_u32(b, nold + nlive);
    if (nold)
        put_memrows(b, p->mem.data->rows, nold, 0, 1);
    put_memrows(b, live, nlive, old_stacks, live_kept);
    record_end(b, r);
    uint32_t nextra = (nold ? count_extra(p->mem.data->rows, nold) : 0) + count_extra(live, nlive);
    if (nextra) {
        r = record_begin(b, PP_REC_MEMEXTRA);
        put_u32(b, nextra);
        if (nold)
            put_extrarows(b, p->mem.data->rows, nold, 0, 1);
        put_extrarows(b, live, nlive, old_stacks, live_kept);
        record_end(b, r);
    }
    r = record_begin(b, PP_REC_MEMSTACKS);
    put_u32(b, old_stacks + (live_stacks ? live_stacks->n : 0));
    put_stacklist(b, p->mem.data ? &p->mem.data->stacks : NULL, 0);
    put_stacklist(b, live_stacks, 0);
    record_end(b, r);
    if ((p->mem.data && p->mem.data->stacks.nnative_all)
        || (live_stacks && live_stacks->nnative_all)) {
        r = record_begin(b, PP_REC_MEMNATIVE);
        put_u32(b, old_stacks + (live_stacks ? live_stacks->n : 0));
        put_stacklist(b, p->mem.data ? &p->mem.data->stacks : NULL, 1);
        put_stacklist(b, live_stacks, 1);
        record_end(b, r);
    }
}

/* STACKS and SAMPLES: the sampler's stack table. */
static void put_samples(buf *b, const pp_samples *s)
{
    size_t r = record_begin(b, PP_REC_STACKS);
    put_u32(b, s->nstacks);
    for (uint32_t i = 0; i < s->nstacks; i++) {
        const pp_stackent *st = &s->stacks[i];
        put_u32(b, st->nframes);
        put_u32(b, st->nnative);
        put(b, s->frames + st->start, (size_t)st->nframes * sizeof(uint64_t));
        for (uint32_t k = 0; k < st->nnative; k++)
            put_u64(b, (uint64_t)s->native[st->nstart + k]);
    }
    record_end(b, r);
    r = record_begin(b, PP_REC_SAMPLES);
    put_u32(b, s->nsamples);
    for (uint32_t i = 0; i < s->nsamples; i++) {
        const pp_sampleent *x = &s->samples[i];
        put_u32(b, x->thread);
        put_u32(b, x->stack);
        put_u32(b, x->state);
        put_u32(b, 0);
        put_u64(b, x->count);
        put_i64(b, x->weight_ns);
    }
    record_end(b, r);
}

/* INSNS: --opcodes' instructions, as sampled. */
static void put_insns(buf *b, const pp_samples *s)
{
    size_t r = record_begin(b, PP_REC_INSNS);
    put_u32(b, s->ninsns);
    for (uint32_t i = 0; i < s->ninsns; i++) {
        const pp_insnent *x = &s->insns[i];
        const uint32_t key[8] = {x->thread, x->fid, x->offset, x->opcode, x->line, x->end_line,
                                 x->col, x->end_col};
        put(b, key, sizeof key);
        put_u64(b, x->count);
        put_i64(b, x->weight_ns);
        put_u64(b, x->total_count);
        put_i64(b, x->total_weight_ns);
        put_u64(b, 0);
        put_i64(b, 0);
    }
    record_end(b, r);
}

/* TIMELINE rows of one thread: its ended calls, then (include_open, while
 * enabled) the calls still open, clipped to `now` (they nest: each contains
 * the ones above it, and all end together). */
static void put_timeline(buf *b, pp_run *p, const tconv *tc, const pp_thread *ts,
                         int include_open, int64_t now, tlcounts *c)
{
    const pp_timeline *tl = &ts->t.tl;
    for (uint32_t i = 0; i < tl->n; i++) {
        const pp_tlevent *e = &tl->ev[i];
        /* start and end converted, then subtracted: a child's interval stays
         * inside its parent's whatever the rounding */
        int64_t start = tl_ns(p, tc, e->t0 - p->start_ticks);
        int64_t end = tl_ns(p, tc, e->t0 + e->dur - p->start_ticks);
        put_u32(b, ts->index);
        put_u32(b, e->fid);
        put_i64(b, start);
        put_i64(b, end - start);
    }
    c->events += tl->n;
    c->dropped_short += tl->dropped_short;
    c->dropped_full += tl->dropped_full;
    if (!include_open || !p->enabled)
        return;
    int64_t end = tl_ns(p, tc, now - p->start_ticks);
    for (uint32_t d = 0; d < ts->st.depth; d++) {
        const pp_frame *f = &ts->st.f[d];
        if (now - f->t0 < p->tr.tl_min_ticks || f->fslot >= ts->t.nf)
            continue;
        int64_t start = tl_ns(p, tc, f->t0 - p->start_ticks);
        put_u32(b, ts->index);
        put_u32(b, ts->t.f[f->fslot].fid);
        put_i64(b, start);
        put_i64(b, end - start);
        c->events++;
        c->open++;
    }
}

/* A table record: its u32 row count, then the rows. */
static void put_table(buf *b, uint16_t type, buf *rows, uint32_t n)
{
    size_t r = record_begin(b, type);
    put_u32(b, n);
    put(b, rows->p, rows->n);
    if (rows->oom)
        b->oom = 1;
    record_end(b, r);
}


/* ---------------------------------------------------------------- steps */

/* Counters `cur` (n entries, by slot) against the base of the last mark: the
 * delta of entry i, nonzero when it changed. */
static inline int cnt_changed(const pp_cntbase *base, const pp_cnt4 *cur, uint32_t i,
                              pp_cnt4 *d)
{
    pp_cnt4 prev = i < base->n ? base->v[i] : (pp_cnt4){0, 0, 0, 0};
    d->calls = cur[i].calls - prev.calls;
    d->rec_calls = cur[i].rec_calls - prev.rec_calls;
    d->tt = cur[i].tt - prev.tt;
    d->it = cur[i].it - prev.it;
    return d->calls || d->rec_calls || d->tt || d->it;
}

/* The base becomes `cur` (which it now owns), unless peeking. */
static void cnt_rebase(pp_cntbase *base, pp_cnt4 *cur, uint32_t n, int peek)
{
    if (peek) {
        free(cur);
        return;
    }
    free(base->v);
    base->v = cur;
    base->n = base->cap = n;
}

static pp_cnt4 *cnt_new(uint32_t n)
{
    return malloc((size_t)(n ? n : 1) * sizeof(pp_cnt4));
}

typedef struct {
    buf fs, es, ps, ls, cs, ss, ms;
    uint32_t nfs, nes, nps, nls, ncs, nss, nms;
} stepbufs;

/* What a table's entries are read from and written with at a mark. */
typedef struct {
    const pp_tables *t;
    const pp_thread *ts;
    const pp_run *p;
    const tconv *tc;
    const pp_memrow *live;      /* memory: rows of the recording under way */
    uint32_t nold, old_stacks;  /* memory: finished rows, and their stacks */
} stepctx;

typedef pp_cnt4 (*cnt_get)(const stepctx *c, uint32_t i);
typedef void (*row_put)(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d);

/* The entries of one table that changed since the last mark, as rows; the
 * base becomes the current counters (unless peeking). -1 on OOM. */
static int step_table(buf *b, uint32_t *nrows, pp_cntbase *base, uint32_t n,
                      const stepctx *c, cnt_get get, row_put put_row, int peek)
{
    pp_cnt4 d, *cur = cnt_new(n);
    if (cur == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        cur[i] = get(c, i);
        if (cnt_changed(base, cur, i, &d)) {
            put_row(b, c, i, &d);
            (*nrows)++;
        }
    }
    cnt_rebase(base, cur, n, peek);
    return 0;
}

static pp_cnt4 get_function(const stepctx *c, uint32_t i)
{
    const pp_fslot *s = &c->t->f[i];
    return (pp_cnt4){s->calls, s->rec_calls, s->tt, s->it};
}

static void put_function(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    put_u32(b, c->ts->index);
    put_u32(b, c->t->f[i].fid);
    put_u64(b, d->calls);
    put_u64(b, d->rec_calls);
    put_i64(b, conv(c->tc, d->tt));
    put_i64(b, conv(c->tc, d->it));
}

static pp_cnt4 get_edge(const stepctx *c, uint32_t i)
{
    const pp_eslot *s = &c->t->e[i];
    return (pp_cnt4){s->calls, s->rec_calls, s->tt, s->it};
}

static void put_edge(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    const pp_eslot *s = &c->t->e[i];
    put_u32(b, c->ts->index);
    put_u32(b, c->t->f[s->caller].fid);
    put_u32(b, c->t->f[s->callee].fid);
    put_u32(b, 0);
    put_u64(b, d->calls);
    put_u64(b, d->rec_calls);
    put_i64(b, conv(c->tc, d->tt));
    put_i64(b, conv(c->tc, d->it));
}

static pp_cnt4 get_path(const stepctx *c, uint32_t i)
{
    const pp_pslot *s = &c->t->p[i];
    return (pp_cnt4){s->calls, 0, s->tt, s->it};
}

static void put_path(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    const pp_pslot *s = &c->t->p[i];
    put_u32(b, c->ts->index);
    put_u32(b, i);
    put_u32(b, s->parent);
    put_u32(b, c->t->f[s->fslot].fid);
    put_u64(b, d->calls);
    put_i64(b, conv(c->tc, d->tt));
    put_i64(b, conv(c->tc, d->it));
}

static pp_cnt4 get_line(const stepctx *c, uint32_t i)
{
    const pp_lslot *s = &c->t->l[i];
    return (pp_cnt4){s->hits, 0, s->time, 0};
}

static void put_line(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    const pp_lslot *s = &c->t->l[i];
    put_u32(b, c->ts->index);
    put_u32(b, s->fid);
    put_u32(b, s->line);
    put_u32(b, 0);
    put_u64(b, d->calls);
    put_i64(b, conv(c->tc, d->tt));
}

static pp_cnt4 get_callrow(const stepctx *c, uint32_t i)
{
    const pp_cslot *s = &c->t->c[i];
    return (pp_cnt4){s->calls, 0, s->time, 0};
}

static void put_callrow(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    const pp_cslot *s = &c->t->c[i];
    put_u32(b, c->ts->index);
    put_u32(b, c->t->l[s->lslot].fid);
    put_u32(b, c->t->l[s->lslot].line);
    put_u32(b, c->t->f[s->callee].fid);
    put_u64(b, d->calls);
    put_i64(b, conv(c->tc, d->tt));
}

static pp_cnt4 get_sample(const stepctx *c, uint32_t i)
{
    const pp_sampleent *x = &c->p->sm.samples.samples[i];
    return (pp_cnt4){x->count, 0, x->weight_ns, 0};
}

static void put_sample(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    const pp_sampleent *x = &c->p->sm.samples.samples[i];
    put_u32(b, x->thread);
    put_u32(b, x->stack);
    put_u32(b, x->state);
    put_u32(b, 0);
    put_u64(b, d->calls);
    put_i64(b, d->tt);
}

/* Memory: the rows of finished recordings, then those of the one under way.
 * A recording that stops appends its rows, in their order, to the finished
 * ones, so a site keeps its index from mark to mark. */
static const pp_memrow *mem_row(const stepctx *c, uint32_t i)
{
    return i < c->nold ? &c->p->mem.data->rows[i] : &c->live[i - c->nold];
}

static pp_cnt4 get_memory(const stepctx *c, uint32_t i)
{
    const pp_memrow *r = mem_row(c, i);
    return (pp_cnt4){r->alloc_bytes, r->alloc_count, (int64_t)r->free_bytes,
                     (int64_t)r->free_count};
}

static void put_memory_row(buf *b, const stepctx *c, uint32_t i, const pp_cnt4 *d)
{
    const pp_memrow *r = mem_row(c, i);
    uint32_t stack = r->stack;
    if (i >= c->nold)                       /* numbered as in the capture */
        stack = stack == PP_NONE || !c->p->mem.stacks ? PP_NONE : stack + c->old_stacks;
    put_u32(b, r->fid);
    put_u32(b, r->line);
    put_u32(b, r->kind & ~PP_MEM_NATIVE);
    put_u32(b, stack);
    put_u64(b, d->calls);
    put_u64(b, d->rec_calls);
    put_u64(b, (uint64_t)d->tt);
    put_u64(b, (uint64_t)d->it);
    put_u64(b, 0);                          /* peaks are not per step */
    put_u64(b, 0);
}

/* One thread's tables: the rows that changed since its last mark. */
static int step_thread(stepbufs *sb, pp_thread *ts, const pp_tables *t, const tconv *tc,
                       int peek)
{
    stepctx c = {t, ts, NULL, tc, NULL, 0, 0};
    pp_stepbase *base = &ts->step;
    if (step_table(&sb->fs, &sb->nfs, &base->f, t->nf, &c, get_function, put_function, peek) < 0
        || step_table(&sb->es, &sb->nes, &base->e, t->ne, &c, get_edge, put_edge, peek) < 0
        || step_table(&sb->ps, &sb->nps, &base->p, t->np, &c, get_path, put_path, peek) < 0
        || step_table(&sb->ls, &sb->nls, &base->l, t->nl, &c, get_line, put_line, peek) < 0
        || step_table(&sb->cs, &sb->ncs, &base->c, t->nc, &c, get_callrow, put_callrow,
                      peek) < 0)
        return -1;
    return 0;
}

static int step_samples(stepbufs *sb, pp_run *p, int peek)
{
    stepctx c = {NULL, NULL, p, NULL, NULL, 0, 0};
    return step_table(&sb->ss, &sb->nss, &p->step_samples, p->sm.samples.nsamples, &c,
                      get_sample, put_sample, peek);
}

static int step_memory(stepbufs *sb, pp_run *p, const pp_snapin *in, int peek)
{
    stepctx c = {NULL, NULL, p, NULL, in->live, p->mem.data ? p->mem.data->nrows : 0,
                 p->mem.data ? p->mem.data->stacks.n : 0};
    int rc = step_table(&sb->ms, &sb->nms, &p->step_memory, c.nold + in->nlive, &c,
                        get_memory, put_memory_row, peek);
    if (rc < 0)
        PyErr_NoMemory();
    return rc;
}

PyObject *pp_capture_step_counters(pp_run *p, int peek, const pp_snapin *in)
{
    tconv tc = {0, 1.0};
    if (p->tr.timer == NULL) {
        tc.scale = 1;
        tc.ns_per_tick = in->ns_per_tick;
    }
    stepbufs sb = {0};
    buf b = {0};
    int oom = 0;
    uint32_t i = 0;
    for (pp_thread *ts = p->threads.head; ts && !oom; ts = ts->next, i++) {
        const pp_tables *t = i < in->nthreads ? in->tables[i] : NULL;
        if (t == NULL || step_thread(&sb, ts, t, &tc, peek) < 0)
            oom = 1;
    }
    if (!oom && p->sampling && step_samples(&sb, p, peek) < 0)
        oom = 1;
    PyObject *result = NULL;
    if (!oom && p->memory && step_memory(&sb, p, in, peek) < 0) {
        free(sb.fs.p); free(sb.es.p); free(sb.ps.p); free(sb.ls.p); free(sb.cs.p);
        free(sb.ss.p); free(sb.ms.p);
        return NULL;                        /* the error is set */
    }
    put_table(&b, PP_REC_FSTATS, &sb.fs, sb.nfs);
    put_table(&b, PP_REC_EDGES, &sb.es, sb.nes);
    if (p->tr.paths && !p->sampling && !p->memory_only)
        put_table(&b, PP_REC_PATHS, &sb.ps, sb.nps);
    if (p->tr.lines) {
        put_table(&b, PP_REC_LINES, &sb.ls, sb.nls);
        put_table(&b, PP_REC_CALLROWS, &sb.cs, sb.ncs);
    }
    if (p->sampling)
        put_table(&b, PP_REC_SAMPLES, &sb.ss, sb.nss);
    if (p->memory)
        put_table(&b, PP_REC_MEMORY, &sb.ms, sb.nms);
    size_t r = record_begin(&b, PP_REC_END);
    record_end(&b, r);
    if (oom || b.oom)
        PyErr_NoMemory();
    else
        result = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.n);
    free(b.p);
    free(sb.fs.p); free(sb.es.p); free(sb.ps.p); free(sb.ls.p); free(sb.cs.p);
    free(sb.ss.p); free(sb.ms.p);
    return result;
}

PyObject *pp_capture_snapshot(pp_run *p, int flags, const pp_snapin *in)
{
    int include_open = in->include_open;
    tconv tc = {0, 1.0};
    double time_unit = 1e-9;
    if (p->tr.timer == NULL) {
        tc.scale = 1;
        tc.ns_per_tick = in->ns_per_tick;
    }
    else if (p->tr.timeunit > 0.0) {
        time_unit = p->tr.timeunit;
    }

    buf b = {0};
    statbufs sb = {0};
    uint64_t events = 0;
    int64_t line_cost = 0;
    uint32_t i = 0;
    for (pp_thread *ts = p->threads.head; ts; ts = ts->next, i++) {
        events += ts->events;
        line_cost += ts->st.line_cost;
        const pp_tables *t = i < in->nthreads ? in->tables[i] : NULL;
        if (t == NULL) {
            b.oom = 1;
            break;
        }
        put_thread_stats(&sb, ts, t, &tc);
    }

    /* timeline rows first: INFO reports their counts */
    buf tlb = {0};
    tlcounts tlc = {0};
    if (p->tr.timeline && !(flags & PP_SNAP_COUNTERS)) {
        int64_t tnow = include_open && p->enabled ? in->now : 0;
        for (pp_thread *ts = p->threads.head; ts; ts = ts->next)
            put_timeline(&tlb, p, &tc, ts, include_open, tnow, &tlc);
    }
    put_json_info(&b, p, in, &tc, time_unit, events, &tlc, sb.paths_dropped, line_cost);
    if (p->meta && PyBytes_Check(p->meta)) {
        size_t r = record_begin(&b, PP_REC_META);
        put(&b, PyBytes_AS_STRING(p->meta), (size_t)PyBytes_GET_SIZE(p->meta));
        record_end(&b, r);
    }
    PyObject *result = NULL;
    if (put_names(&b, p) < 0)
        goto done;
    put_table(&b, PP_REC_FSTATS, &sb.fs, sb.nfs);
    put_table(&b, PP_REC_EDGES, &sb.es, sb.nes);
    if (in->coro_open)                      /* function tracing saw coroutines */
        pp_capture_put_coros(&b, p, &tc, in->coro_open);
    if (p->tr.paths && !p->sampling && !p->memory_only)
        put_table(&b, PP_REC_PATHS, &sb.ps, sb.nps);
    if (p->tr.lines) {
        put_table(&b, PP_REC_LINES, &sb.ls, sb.nls);
        put_table(&b, PP_REC_CALLROWS, &sb.cs, sb.ncs);
        if (p->tr.opcodes)
            put_table(&b, PP_REC_INSNS, &sb.is, sb.nis);
    }
    if (p->sampling)
        put_samples(&b, &p->sm.samples);
    if (p->sampling && p->sm.opts.opcodes)
        put_insns(&b, &p->sm.samples);
    if ((p->sampling && p->sm.opts.async) || (!p->sampling && !p->memory_only && p->tr.asyncio))
        pp_capture_put_tasks(&b, p, &tc, in->now, in->tasks_named);
    if (p->memory) {
        put_memory(&b, p, in->live, in->nlive, in->have_stacks ? &in->stacks : NULL);
        put_curve(&b, p, in->curve, in->ncurve);
        if (!p->memory_only)
            put_table(&b, PP_REC_FMEMORY, &sb.ms, sb.nms);
        if (p->tr.lines && sb.nlm)
            put_table(&b, PP_REC_LINEMEM, &sb.lm, sb.nlm);
    }
    if (p->tr.timeline && !(flags & PP_SNAP_COUNTERS)) {
        size_t r = record_begin(&b, PP_REC_TIMELINE);
        put_u32(&b, (uint32_t)tlc.events);
        put(&b, tlb.p, tlb.n);
        if (tlb.oom)
            b.oom = 1;
        record_end(&b, r);
    }
    if (p->records && !(flags & PP_SNAP_COUNTERS)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(p->records); i++) {
            PyObject *rec = PyList_GET_ITEM(p->records, i);
            if (PyBytes_Check(rec))
                put(&b, PyBytes_AS_STRING(rec), (size_t)PyBytes_GET_SIZE(rec));
        }
    }
    size_t r = record_begin(&b, PP_REC_END);
    record_end(&b, r);
    if (b.oom)
        PyErr_NoMemory();
    else
        result = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.n);
done:
    free(b.p);
    free(tlb.p);
    free(sb.fs.p);
    free(sb.es.p);
    free(sb.ls.p);
    free(sb.is.p);
    free(sb.cs.p);
    free(sb.ms.p);
    free(sb.ps.p);
    free(sb.lm.p);
    return result;
}


int pp_capture_write_blob(const char *path, const void *blob, size_t n, int final,
                          char *err, size_t errlen)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (tmp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    /* Never follow a link planted at the temporary name; mode as open() would. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (f == NULL) {
        snprintf(err, errlen, "%s", strerror(errno));
        if (fd >= 0)
            close(fd);
        free(tmp);
        return -1;
    }
    unsigned char hdr[28];
    memcpy(hdr, "\x89" "CPROF\r\n", 8);
    uint16_t major = PP_FORMAT_MAJOR, minor = PP_FORMAT_MINOR;
    uint32_t flags = final ? 1u : 0u;
    uint64_t len = n;
    uint32_t crc = (uint32_t)crc32(0L, (const Bytef *)blob, (uInt)0);
    /* crc32 takes uInt lengths: feed large blobs in pieces. */
    for (size_t off = 0; off < n;) {
        size_t chunk = n - off > (1u << 30) ? (1u << 30) : n - off;
        crc = (uint32_t)crc32(crc, (const Bytef *)blob + off, (uInt)chunk);
        off += chunk;
    }
    memcpy(hdr + 8, &major, 2);
    memcpy(hdr + 10, &minor, 2);
    memcpy(hdr + 12, &flags, 4);
    memcpy(hdr + 16, &len, 8);
    memcpy(hdr + 24, &crc, 4);
    int ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr;

    z_stream zs;
    memset(&zs, 0, sizeof zs);
    unsigned char out[65536];
    if (ok && deflateInit(&zs, 6) != Z_OK)
        ok = 0;
    if (ok) {
        size_t off = 0;
        int flush;
        do {
            size_t chunk = n - off > (1u << 20) ? (1u << 20) : n - off;
            zs.next_in = (Bytef *)blob + off;
            zs.avail_in = (uInt)chunk;
            off += chunk;
            flush = off == n ? Z_FINISH : Z_NO_FLUSH;
            do {
                zs.next_out = out;
                zs.avail_out = sizeof out;
                if (deflate(&zs, flush) == Z_STREAM_ERROR) {
                    ok = 0;
                    break;
                }
                size_t have = sizeof out - zs.avail_out;
                if (have && fwrite(out, 1, have, f) != have)
                    ok = 0;
            } while (ok && zs.avail_out == 0);
        } while (ok && flush != Z_FINISH);
        deflateEnd(&zs);
    }
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        snprintf(err, errlen, "%s", saved ? strerror(saved) : "write failed");
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

int pp_capture_write(pp_run *p, const pp_snapin *in, const char *path, int final, char *err,
                     size_t errlen)
{
    PyObject *blob = pp_capture_snapshot(p, PP_SNAP_OPEN, in);
    if (blob == NULL) {
        snprintf(err, errlen, "snapshot failed (out of memory)");
        return -1;
    }
    int rc = pp_capture_write_blob(path, PyBytes_AS_STRING(blob), (size_t)PyBytes_GET_SIZE(blob),
                                   final, err, errlen);
    Py_DECREF(blob);
    return rc;
}
