/* tracer_events.c — deterministic function profiling: what the hooks call
 * out of line (the user timer, the full enter/leave paths, the timeline, the
 * end of the calls still open). The hooks are in tracer_monitoring.c (3.12+)
 * and tracer_legacy.c (3.11), the inlined event paths in tracer_hot.h.
 *
 * Danger points:
 * - a pending exception may be set when an enter event fires (gen.throw):
 *   anything that may touch the error indicator (user timer, first-time name
 *   formatting) saves and restores it;
 * - the user timer is Python code: it must not disable the profiler
 *   (in_timer guard, as 3.13's cProfile) and its errors are unraisable;
 * - thread records outlive their threads (their data is kept); TLS points at
 *   a record only while its generation matches the profiler's.
 * Never: calls the hooks' back-ends or tracer.c (they call down to it), another
 * engine or capture/profiler.
 */
#include "tracer_hot.h"

#include <stdlib.h>
#include <string.h>

int pp_pop_hooks;
pp_tracer *pp_tracer_active;
Py_ssize_t pp_tracer_offset;
/* Timeline: the started tracer's minimum duration (ticks) and the event
 * capacity not yet reserved by any thread's buffer. GIL held. */
static int64_t pp_tl_min_ticks;
static uint64_t pp_tl_left;

void pp_tracer_timeline_arm(int64_t min_ticks, uint64_t left)
{
    pp_tl_min_ticks = min_ticks;
    pp_tl_left = left;
}

/* ---------------------------------------------------------------- clock */

static int64_t user_timer_now_impl(pp_tracer *p)
{
    pp_err_state es;
    pp_err_save(&es);
    p->in_timer = 1;
    PyObject *o = PyObject_CallNoArgs(p->timer);
    p->in_timer = 0;
    int64_t v = 0;
    if (o == NULL) {
        PyErr_WriteUnraisable(p->timer);
    }
    else {
        if (p->timeunit > 0.0) {
            v = PyLong_AsLongLong(o);
        }
        else {
            double d = PyFloat_AsDouble(o);
            /* cProfile converts seconds to integer nanoseconds, rounding down. */
            v = (int64_t)(d * 1e9);
            if ((double)v > d * 1e9)
                v--;
        }
        Py_DECREF(o);
        if (PyErr_Occurred()) {
            PyErr_WriteUnraisable(p->timer);
            v = 0;
        }
    }
    pp_err_restore(&es);
    return v;
}

/* pyprof's own work: allocations made here are not the program's. */
int64_t pp_tracer_user_timer_now(pp_tracer *p)
{
    int was = pp_memory_self_begin();
    int64_t t = user_timer_now_impl(p);
    pp_memory_self_end(was);
    return t;
}

int64_t pp_tracer_now(pp_tracer *p)
{
    return now_ticks(p);
}

/* ------------------------------------------------------ enter / leave */

COLD uint32_t add_function_slot(pp_tracer *p, pp_thread *ts, uint64_t key,
                                  PyObject *obj, PyObject *self_arg, int kind)
{
    uint32_t fid = pp_registry_add(p->reg, key, obj, self_arg, kind);
    if (fid == PP_NONE)
        return PP_NONE;
    return pp_tables_add_function(&ts->t, key, fid);
}

static void line_enter(pp_tracer *p, pp_tables *t, pp_stack *st, uint32_t fs);

/* Full path of a call event: any thread state, table state or clock.
 * obj: the code object, or the C callable (self_arg: its bound self, if a descriptor) */
void pp_tracer_enter_slow(pp_tracer *p, uint64_t key, PyObject *obj, PyObject *self_arg, int kind)
{
    pp_thread *ts = pp_threads_current(p->threads);
    if (UNLIKELY(ts == NULL))
        return;
    ts->events++;
    pp_tables *t = &ts->t;
    uint32_t fs = pp_index_get(&t->fidx, key);
    if (UNLIKELY(fs == PP_NONE)) {
        fs = add_function_slot(p, ts, key, obj, self_arg, kind);
        if (fs == PP_NONE) {
            /* pyprof's own function is not recorded: its callees count
             * under its caller (its return finds it not on the stack) */
            if (!pp_registry_own(p->reg, key))
                p->oom = 1;
            return;
        }
    }
    pp_stack *st = &ts->st;
    uint32_t ps = PP_NONE;
    if (p->paths) {
        ps = pp_tables_path(t, st->depth ? st->f[st->depth - 1].pslot : PP_ROOT, fs);
        if (ps == PP_NONE)
            t->paths_dropped++;
    }
    uint32_t es = PP_NONE;
    if (p->subcalls && st->depth) {
        es = pp_tables_edge(t, st->f[st->depth - 1].fslot, fs);
        if (UNLIKELY(es == PP_NONE)) {
            p->oom = 1;
            return;
        }
    }
    pp_frame *f = pp_stack_push(st);
    if (UNLIKELY(f == NULL)) {
        p->oom = 1;
        return;
    }
    t->f[fs].rec_level++;
    if (es != PP_NONE)
        t->e[es].rec_level++;
    f->key = key;
    f->fslot = fs;
    f->eslot = es;
    f->pslot = ps;
    f->subt = 0;
    if (p->memory) {
        pp_thread_mem_fold(t, st);
        pp_thread_mem_settle(t, st);
        f->mem_base = f->mem_hw = st->mem_cur;
    }
    if (p->lines)
        line_enter(p, t, st, fs);
    /* last: our bookkeeping is not the callee's time; the clock without the
     * thread's line bookkeeping, as line times (0 in function mode) */
    f->t0 = now_ticks(p) - st->line_cost;
}


/* Memory with tracing: a returning activation's peak and residual; its high
 * point is its caller's too. */
COLD void mem_pop(pp_tables *t, pp_stack *st, const pp_frame *f)
{
    pp_fslot *fs = &t->f[f->fslot];
    if (f->mem_hw - f->mem_base > fs->mem_peak)
        fs->mem_peak = f->mem_hw - f->mem_base;
    if (fs->rec_level == 1) {               /* outermost: recursion counted once */
        pp_thread_mem_settle(t, st);
        st->mem_pending = f->fslot + 1;
        st->mem_pending_base = f->mem_base;
    }
    if (st->depth && f->mem_hw > st->f[st->depth - 1].mem_hw)
        st->f[st->depth - 1].mem_hw = f->mem_hw;
}

/* Timeline: reserve more room in a thread's buffer from the profile-wide
 * budget (chunks of at most 64 Ki events, so a thread holds little it does
 * not use). GIL held; C allocator (not PyMem: never seen by memory hooks). */
static int timeline_grow(pp_timeline *tl)
{
    uint64_t add = tl->cap < 4096 ? 4096 : tl->cap < 65536 ? tl->cap : 65536;
    if (add > pp_tl_left)
        add = pp_tl_left;
    if (add == 0 || (uint64_t)tl->cap + add > UINT32_MAX)
        return -1;
    pp_tlevent *ne = realloc(tl->ev, (size_t)(tl->cap + add) * sizeof(pp_tlevent));
    if (ne == NULL)
        return -1;
    tl->ev = ne;
    tl->cap += (uint32_t)add;
    pp_tl_left -= add;
    return 0;
}

/* Timeline: the call of frame f ended after tt ticks. */
static inline void timeline_add(pp_tables *t, const pp_frame *f, int64_t tt)
{
    pp_timeline *tl = &t->tl;
    if (!tl->on)
        return;                 /* a snapshot's copy, or a thread of another profiler */
    if (tt < pp_tl_min_ticks) {
        tl->dropped_short++;
        return;
    }
    if (tl->n == tl->cap && timeline_grow(tl) < 0) {
        tl->dropped_full++;
        return;
    }
    pp_tlevent *e = &tl->ev[tl->n++];
    e->fid = t->f[f->fslot].fid;
    e->pad = 0;
    e->t0 = f->t0;
    e->dur = tt;
}

/* Out of line: the return path stays as small with these off. */
void pp_tracer_pop_hooks(pp_tables *t, pp_stack *st, const pp_frame *f, int64_t tt)
{
    if (pp_pop_hooks & PP_POP_MEM)
        mem_pop(t, st, f);
    if (pp_pop_hooks & PP_POP_TIMELINE)
        timeline_add(t, f, tt);
}

/* A new frame was pushed in line mode: it counts into a call row when its
 * caller was running a line. */
static void line_enter(pp_tracer *p, pp_tables *t, pp_stack *st, uint32_t fs)
{
    pp_frame *f = &st->f[st->depth - 1];
    f->lslot = PP_NONE;
    f->islot = PP_NONE;
    f->crow = PP_NONE;
    if (st->depth < 2 || st->f[st->depth - 2].lslot == PP_NONE)
        return;
    uint32_t c = pp_tables_callrow(t, st->f[st->depth - 2].lslot, fs);
    if (c == PP_NONE) {
        p->oom = 1;
        return;
    }
    t->c[c].open++;
    f->crow = c;
}

/* Pop the top frame, ending its running line and its call row first. */
static inline void end_frame(int lines, pp_tables *t, pp_stack *st, int64_t now)
{
    if (lines) {
        pp_frame *f = &st->f[st->depth - 1];
        if (f->lslot != PP_NONE) {
            if (UNLIKELY(pp_pop_hooks & PP_POP_MEM)) {
                pp_thread_mem_fold(t, st);
                line_mem_end(t, st, f);
            }
            end_segment(t, f, now);
        }
        if (f->islot != PP_NONE)
            end_insn(t, f, now);
        if (f->crow != PP_NONE) {
            pp_cslot *c = &t->c[f->crow];
            c->calls++;
            if (--c->open == 0)
                c->time += now - f->t0;
        }
    }
    stop_top(t, st, now);
}

void pp_tracer_stop_all(pp_tables *t, pp_stack *st, int64_t now, int lines)
{
    now -= st->line_cost;
    while (st->depth)
        end_frame(lines, t, st, now);
    pp_thread_mem_settle(t, st);
}

/* A return whose key is not on top: a frame below lost its return event (or
 * the returning frame began before enable). End the frames above a match
 * close to the top; otherwise ignore the event. */
COLD int unwind_to(int lines, pp_tables *t, pp_stack *st, uint64_t key, int64_t now)
{
    uint32_t limit = st->depth < 16 ? st->depth : 16;
    for (uint32_t i = 1; i <= limit; i++) {
        if (st->f[st->depth - i].key == key) {
            while (st->f[st->depth - 1].key != key)
                end_frame(lines, t, st, now);
            return 1;
        }
    }
    return 0;
}

/* Full path of a return event; `now` was read first, on entry to the hook. */
void pp_tracer_leave_slow(pp_tracer *p, uint64_t key, int64_t now)
{
    pp_thread *ts = pp_threads_current(p->threads);
    if (UNLIKELY(ts == NULL))
        return;
    ts->events++;
    pp_stack *st = &ts->st;
    if (st->depth == 0)
        return;
    now -= st->line_cost;       /* the clock of the frames' t0 (line mode) */
    if (UNLIKELY(st->f[st->depth - 1].key != key) && !unwind_to(p->lines, &ts->t, st, key, now))
        return;
    end_frame(p->lines, &ts->t, st, now);
    if (UNLIKELY(ts->events >= ts->name_at))
        pp_thread_name_due(ts);
    /* every 1024 events or so (a return, not a call, may be the 1024th) */
    if (UNLIKELY(p->periodic) && ts->events >= ts->flush_at) {
        ts->flush_at = ts->events + 1024;
        p->periodic(p->periodic_arg);
    }
}

int pp_tracer_base_opcode(pp_tracer *p, PyObject *code, uint32_t offset)
{
    pp_err_state es;
    pp_err_save(&es);
    int was = pp_memory_self_begin();       /* pyprof's objects, not the program's */
    if (p->base_code == NULL)
        p->base_code = PyDict_New();
    PyObject *bytes = p->base_code ? PyDict_GetItemWithError(p->base_code, code) : NULL;
    if (bytes == NULL && p->base_code && !PyErr_Occurred()) {
        PyObject *made = PyCode_GetCode((PyCodeObject *)code);
        if (made != NULL && PyDict_SetItem(p->base_code, code, made) == 0)
            bytes = made;                   /* held by the dict */
        Py_XDECREF(made);
    }
    int op = pp_frames_opcode_now(code, offset);     /* without it, the opcode as it is now */
    if (bytes != NULL && PyBytes_Check(bytes) && (Py_ssize_t)offset * 2 < PyBytes_GET_SIZE(bytes))
        op = (uint8_t)PyBytes_AS_STRING(bytes)[offset * 2];
    PyErr_Clear();
    pp_memory_self_end(was);
    pp_err_restore(&es);
    return op;
}

void pp_tracer_insn_hit(pp_tracer *p, pp_thread *ts, PyObject *code, uint32_t offset)
{
    uint32_t fid = pp_index_get(&p->reg->idx, (uint64_t)(uintptr_t)code);
    if (ts == NULL || fid == PP_NONE || !p->reg->ftarget[fid])
        return;                         /* no record: a paused thread's */
    uint32_t is = pp_tables_insn(&ts->t, (uintptr_t)code, offset);
    if (is == PP_NONE)
        is = pp_tracer_insn_slot(p, &ts->t, code, fid, offset);
    if (is != PP_NONE)
        ts->t.i[is].hits++;
}

uint32_t pp_tracer_insn_slot(pp_tracer *p, pp_tables *t, PyObject *code, uint32_t fid,
                             uint32_t offset)
{
    if (offset >= (uint32_t)Py_SIZE(code))
        return PP_NONE;
    uint32_t is = pp_tables_add_insn(t, (uintptr_t)code, offset, fid);
    if (is == PP_NONE) {
        p->oom = offset < (1u << 16);
        return PP_NONE;
    }
    pp_islot *i = &t->i[is];
    int line = -1, col = -1, end_line = -1, end_col = -1;
    PyCode_Addr2Location((PyCodeObject *)code, (int)(offset * 2), &line, &col, &end_line,
                         &end_col);
    i->line = line < 0 ? PP_NONE : (uint32_t)line;
    i->end_line = end_line < 0 ? PP_NONE : (uint32_t)end_line;
    i->col = col < 0 ? PP_NONE : (uint32_t)col;
    i->end_col = end_col < 0 ? PP_NONE : (uint32_t)end_col;
    i->opcode = (uint32_t)pp_tracer_base_opcode(p, code, offset);
    return is;
}

/* Line mode: a resumed generator or coroutine that is a line target goes on
 * with the line it stopped in (no hit: that line already counted one). */
void pp_tracer_line_resume_at(pp_tracer *p, PyObject *code, int line, int64_t now)
{
    uint32_t fid = pp_index_get(&p->reg->idx, (uint64_t)(uintptr_t)code);
    if (fid != PP_NONE && p->reg->ftarget[fid])
        line_event(p, code, line, 0, now);
}
