/* capture_async.c — the capture's records of asyncio work (capture_int.h):
 * TASKS (the sampler's tasks, --async) and COROS (function tracing's
 * coroutines, first start to end).
 * Runs with the GIL held, inside a snapshot. Never: calls Python code.
 */
#include "capture_int.h"

/* Function tracing: per coroutine function, its coroutines and their wall time
 * (those still open: up to now, or to when the tracer stopped: `open`, by fid). */
void pp_capture_put_coros(buf *b, const pp_run *p, const tconv *tc, const int64_t *open)
{
    const pp_coros *c = &p->tr.coros;
    uint32_t n = 0;
    for (uint32_t f = 0; f < c->nfid; f++)
        n += c->instances[f] > 0;
    size_t r = record_begin(b, PP_REC_COROS);
    put_u32(b, n);
    for (uint32_t f = 0; f < c->nfid; f++) {
        if (!c->instances[f])
            continue;
        uint32_t ids[2] = {f, 0};
        put(b, ids, sizeof ids);
        put_u64(b, c->instances[f]);
        put_u64(b, c->ended[f]);
        int64_t w[2] = {conv(tc, c->wall[f]), conv(tc, open[f])};
        put(b, w, sizeof w);
    }
    record_end(b, r);
}

/* A task row: <6IqqqqQQ> (capture.h). */
static void put_task(buf *b, const uint32_t ids[6], const int64_t times[4], uint64_t samples,
                     uint64_t steps)
{
    put(b, ids, 6 * sizeof ids[0]);
    put(b, times, 4 * sizeof times[0]);
    put_u64(b, samples);
    put_u64(b, steps);
}

/* TASKS: --async sampling's tasks (sampler.h's pp_taskrow, ns of
 * CLOCK_MONOTONIC), or function tracing's (tracer.h's pp_tracer_task, ticks),
 * times from the run's start. Tracing's tasks have no awaiting stack: their
 * awaiting time is their lifetime less their steps. */
void pp_capture_put_tasks(buf *b, const pp_run *p, const tconv *tc, int64_t now,
                          uint32_t tasks_named)
{
    size_t r = record_begin(b, PP_REC_TASKS);
    if (p->sampling) {
        const pp_tasks *t = &p->sm.tasks;
        put_u32(b, tasks_named);
        for (uint32_t i = 0; i < t->n; i++) {
            const pp_taskrow *x = &t->rows[i];
            if (x->fid == PP_NONE)
                continue;                   /* not named (yet): short, never sampled */
            uint32_t ids[6] = {x->fid, x->coro_fid, x->created_fid, x->created_line, x->thread,
                               x->state};
            int64_t times[4] = {x->start_ns - p->start_mono_ns,
                                x->end_ns ? x->end_ns - p->start_mono_ns : -1,
                                x->running_ns, x->awaiting_ns};
            put_task(b, ids, times, x->samples, UINT64_MAX);
        }
    }
    else {
        const pp_coros *c = &p->tr.coros;
        if (p->tr.coros.stopped)
            now = p->tr.coros.stopped;
        put_u32(b, c->ntasks);
        for (uint32_t i = 0; i < c->ntasks; i++) {
            const pp_tracer_task *x = &c->tasks[i];
            int64_t end = x->ended ? x->end : now;
            int64_t running = x->running + (x->run_since ? now - x->run_since : 0);
            uint32_t ids[6] = {x->fid, x->coro_fid, PP_NONE, 0, x->thread,
                               x->ended ? 1u : 0u};
            int64_t times[4] = {conv(tc, x->start - p->start_ticks),
                                x->ended ? conv(tc, x->end - p->start_ticks) : -1,
                                conv(tc, running), conv(tc, end - x->start - running)};
            put_task(b, ids, times, 0, x->steps);
        }
    }
    record_end(b, r);
    if (p->sampling || !p->tr.timeline)
        return;
    const pp_coros *c = &p->tr.coros;
    r = record_begin(b, PP_REC_TASKSTEPS);
    put_u32(b, c->nsteps);
    for (uint32_t i = 0; i < c->nsteps; i++) {
        const pp_task_step *x = &c->steps[i];
        uint32_t ids[2] = {x->task, 0};
        int64_t t[2] = {conv(tc, x->start - p->start_ticks), conv(tc, x->dur)};
        put(b, ids, sizeof ids);
        put(b, t, sizeof t);
    }
    record_end(b, r);
}
