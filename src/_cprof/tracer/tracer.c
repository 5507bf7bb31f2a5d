/* tracer.c — deterministic function profiling: the engine's control (see
 * tracer.h): init, start and stop (installing the hooks of tracer_monitoring.c,
 * 3.12+, or tracer_legacy.c, 3.11), the end of the calls, free. The events'
 * out-of-line paths are in tracer_events.c, the inlined ones in tracer_hot.h.
 *
 * Never: calls another engine or capture/profiler (the owner's periodic work
 * is a callback it gave); is called back by the files below it.
 */
#include "tracer_hot.h"

#include <string.h>

/* ------------------------------------------------------ start / stop */

/* Line mode, while started: a new target gets its LINE events. */
static int on_line_target(void *arg, PyObject *code)
{
    return pp_tracer_line_events_on((pp_tracer *)arg, code, 1);
}

void pp_tracer_init(pp_tracer *p, PyObject *owner, pp_registry *reg, pp_threadset *threads)
{
    p->owner = owner;
    p->reg = reg;
    p->threads = threads;
    p->tool_id = -1;
}

int pp_tracer_start(pp_tracer *p)
{
    p->gen = p->threads->gen;
    p->fast = p->timer == NULL && pp_clock_kind == PP_CLOCK_TSC && !p->lines && !p->memory;
    pp_threads_mem_frames(p->memory);
    pp_pop_hooks = (p->memory ? PP_POP_MEM : 0) | (p->timeline ? PP_POP_TIMELINE : 0);
    if (p->timeline) {
        /* a call of exactly the minimum is kept: round the threshold up */
        double ticks = (double)p->tl_min_ns * pp_tracer_ticks_per_ns(p);
        int64_t min = (int64_t)ticks;
        p->tl_min_ticks = min + ((double)min < ticks);
        uint64_t reserved = 0;
        for (pp_thread *ts = p->threads->head; ts; ts = ts->next) {
            ts->t.tl.on = 1;
            reserved += ts->t.tl.cap;
        }
        pp_tracer_timeline_arm(p->tl_min_ticks, p->tl_max > reserved ? p->tl_max - reserved : 0);
    }
    pp_index_clear(&p->sites);
    memset(p->c_sites, 0, sizeof p->c_sites);
    pp_tracer_active = p;
    p->coros.stopped = 0;
    p->enabled = 1;
    if (pp_tracer_install_hooks(p) < 0) {
        p->enabled = 0;
        pp_tracer_active = NULL;
        return -1;
    }
    if (p->lines) {
        p->reg->on_target = on_line_target;
        p->reg->target_arg = p;
    }
    return 0;
}

int pp_tracer_stop(pp_tracer *p)
{
    if (!p->enabled)
        return 0;
    p->enabled = 0;
    p->coros.stopped = now_ticks(p);
    if (pp_tracer_active == p)
        pp_tracer_active = NULL;
    p->reg->on_target = NULL;
    p->reg->target_arg = NULL;
    return pp_tracer_remove_hooks(p);
}

void pp_tracer_end_calls(pp_tracer *p)
{
    int64_t now = now_ticks(p);
    for (pp_thread *ts = p->threads->head; ts; ts = ts->next)
        pp_tracer_stop_all(&ts->t, &ts->st, now, p->lines);
}

double pp_tracer_ticks_per_ns(const pp_tracer *p)
{
    if (p->timer == NULL)
        return 1.0 / pp_clock_ns_per_tick();
    if (p->timeunit > 0.0)
        return 1e-9 / p->timeunit;
    return 1.0;                 /* a float timer's seconds are kept as integer ns */
}

void pp_tracer_free(pp_tracer *p)
{
    pp_index_free(&p->sites);
    pp_tracer_coro_clear(p);
    Py_CLEAR(p->disabled_code);
    Py_CLEAR(p->base_code);
    Py_CLEAR(p->prev_thread_hook);
    Py_CLEAR(p->prev_trace_hook);
    Py_CLEAR(p->timer);
}

int pp_tracer_module_init(Py_ssize_t offset)
{
    pp_tracer_offset = offset;
    pp_clock_init();
    return pp_tracer_backend_init();
}

int pp_tracer_pseudo(pp_tracer *p, PyObject *code, int entering)
{
    if (!p->enabled)
        return 0;
    uint64_t key = (uint64_t)(uintptr_t)code;
    if (entering)
        pp_tracer_enter_slow(p, key, code, NULL, PP_KIND_PYTHON);
    else
        pp_tracer_leave_slow(p, key, pp_tracer_now(p));
    return 1;
}
