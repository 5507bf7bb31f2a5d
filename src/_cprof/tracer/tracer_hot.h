/* tracer_hot.h — the tracer's event paths, private to the tracer and its two
 * hook back-ends (tracer_monitoring.c, tracer_legacy.c), inlined into each
 * callback.
 *
 * Per call: find this thread's record (one TLS compare), find the function
 * slot (one probe in an open-addressing index), find the edge slot, push a
 * frame, read the clock last. Per return: read the clock first, pop, account.
 * Everything runs with the GIL held.
 * Never: included outside the tracer; allocates or calls out on the fast
 * paths (anything else is handed to the out-of-line slow paths).
 */
#ifndef PP_TRACER_HOT_H
#define PP_TRACER_HOT_H

#include "tracer.h"
#include "clock.h"

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
/* The event paths are inlined into each callback: a call would cost a
 * prologue/epilogue of callee-saved registers per event (~20 instructions). */
#define HOT static inline __attribute__((always_inline))
/* Slow paths stay out of line so the callbacks keep few registers live;
 * hidden: called directly, not through the PLT. */
#define COLD static __attribute__((noinline, cold))
#define PP_HIDDEN __attribute__((visibility("hidden")))
#define PP_SLOW PP_HIDDEN __attribute__((noinline, cold))

/* Work done when a call ends, beyond cProfile's accounting: one flag word so
 * the return path tests a single predictable branch whatever is off. Set by
 * start for the started tracer. */
enum { PP_POP_MEM = 1, PP_POP_TIMELINE = 2 };
extern int pp_pop_hooks PP_HIDDEN;
/* The started tracer (at most one per process), for the 3.11 eval hook. */
extern pp_tracer *pp_tracer_active PP_HIDDEN;
/* Where owner objects keep their pp_tracer (the 3.11 hooks get the owner). */
extern Py_ssize_t pp_tracer_offset PP_HIDDEN;

static inline pp_tracer *pp_tracer_of(PyObject *owner)
{
    return (pp_tracer *)((char *)owner + pp_tracer_offset);
}

PP_SLOW int64_t pp_tracer_user_timer_now(pp_tracer *p);
/* start: the timeline's minimum duration (ticks) and the event capacity no
 * thread's buffer holds yet (tracer_events.c keeps them for the hot path). */
void pp_tracer_timeline_arm(int64_t min_ticks, uint64_t left) PP_HIDDEN;
PP_SLOW void pp_tracer_enter_slow(pp_tracer *p, uint64_t key, PyObject *obj, PyObject *self_arg,
                                  int kind);
PP_SLOW void pp_tracer_leave_slow(pp_tracer *p, uint64_t key, int64_t now);
PP_HIDDEN __attribute__((noinline)) void pp_tracer_pop_hooks(pp_tables *t, pp_stack *st,
                                                             const pp_frame *f, int64_t tt);
/* Line mode: a resumed generator or coroutine that is a line target goes on
 * with the line it stopped in (no hit: that line already counted one). */
PP_SLOW void pp_tracer_line_resume_at(pp_tracer *p, PyObject *code, int line, int64_t now);
/* Coroutines (tracer_coro.c): a coroutine's frame at `frame` starts or
 * resumes (first: a first start); suspends; ends. Only for code with
 * CO_COROUTINE: the callbacks test the code's flags first. */
PP_SLOW void pp_tracer_coro_run(pp_tracer *p, PyObject *code, uintptr_t frame, int first);
PP_SLOW void pp_tracer_coro_suspend(pp_tracer *p, uintptr_t frame);
PP_SLOW void pp_tracer_coro_end(pp_tracer *p, uintptr_t frame);
static inline int pp_is_coroutine(PyObject *code)
{
    return (((PyCodeObject *)code)->co_flags & CO_COROUTINE) != 0;
}
/* Coroutines are followed when asked for (--async): ~15 ns an event that a
 * program that does not ask for it does not pay (issue 32, item 13). */
static inline int pp_follows_coroutine(const pp_tracer *p, PyObject *code)
{
    return UNLIKELY(p->asyncio) && pp_is_coroutine(code);
}
/* Back-end (tracer_monitoring.c or tracer_legacy.c). */
PP_HIDDEN int pp_tracer_backend_init(void);
PP_HIDDEN int pp_tracer_install_hooks(pp_tracer *p);
PP_HIDDEN int pp_tracer_remove_hooks(pp_tracer *p);
/* Line mode: LINE events on one code object (3.12+; 3.11 asks at every call). */
PP_HIDDEN int pp_tracer_line_events_on(pp_tracer *p, PyObject *code, int on);

static inline int64_t now_ticks(pp_tracer *p)
{
    if (LIKELY(p->timer == NULL))
        return pp_clock_now();
    return pp_tracer_user_timer_now(p);
}

/* Fast path: a known thread, function and edge, room on the stack, the TSC.
 * It makes no calls, so it needs no callee-saved registers; anything else
 * (checked before any state changes) is handed to enter_slow. */
HOT void enter(pp_tracer *p, uint64_t key, PyObject *obj, PyObject *self_arg, int kind)
{
#ifdef PP_CLOCK_HAVE_TSC
    pp_thread *ts = pp_tls.ts;
    if (UNLIKELY(pp_tls.gen != p->gen || ts == NULL || !p->fast))
        goto slow;
    pp_stack *st = &ts->st;
    uint32_t depth = st->depth;
    if (UNLIKELY(depth == st->cap))
        goto slow;
    pp_tables *t = &ts->t;
    uint32_t fs = pp_index_get(&t->fidx, key);
    if (UNLIKELY(fs == PP_NONE))
        goto slow;
    uint32_t ps = PP_NONE;
    if (p->paths) {
        ps = pp_tables_path_find(t, depth ? st->f[depth - 1].pslot : PP_ROOT, fs);
        if (UNLIKELY(ps == PP_NONE))
            goto slow;                          /* a new path, or below an unrecorded one */
    }
    uint32_t es = PP_NONE;
    if (p->subcalls && depth) {
        uint32_t caller = st->f[depth - 1].fslot;
        pp_fslot *c = &t->f[fs];
        if (LIKELY(c->last_caller == caller)) {
            es = c->last_edge;
        }
        else {
            es = pp_index_get(&t->eidx, pp_edge_key(caller, fs));
            if (UNLIKELY(es == PP_NONE))
                goto slow;
            c->last_caller = caller;
            c->last_edge = es;
        }
        t->e[es].rec_level++;
    }
    ts->events++;
    t->f[fs].rec_level++;
    pp_frame *f = &st->f[depth];
    st->depth = depth + 1;
    f->key = key;
    f->fslot = fs;
    f->eslot = es;
    f->pslot = ps;
    f->subt = 0;
    f->t0 = (int64_t)__rdtsc();     /* last: our bookkeeping is not the callee's time */
    return;
slow:
#endif
    pp_tracer_enter_slow(p, key, obj, self_arg, kind);
}

HOT void stop_top(pp_tables *t, pp_stack *st, int64_t now)
{
    if (UNLIKELY(pp_pop_hooks & PP_POP_MEM))
        pp_thread_mem_fold(t, st);      /* C code's bytes: the returning frame's */
    pp_frame *f = &st->f[--st->depth];
    int64_t tt = now - f->t0;
    int64_t it = tt - f->subt;
    if (st->depth)
        st->f[st->depth - 1].subt += tt;
    if (UNLIKELY(pp_pop_hooks))
        pp_tracer_pop_hooks(t, st, f, tt);
    pp_account_function(&t->f[f->fslot], tt, it);
    if (f->eslot != PP_NONE)
        pp_account_edge(&t->e[f->eslot], tt, it);
    pp_account_path(t, f->pslot, tt, it);
}


/* Line mode: the running line of frame f stops running at `now`. */
static inline void end_segment(pp_tables *t, pp_frame *f, int64_t now)
{
    pp_lslot *l = &t->l[f->lslot];
    if (--l->open == 0)
        l->time += now - f->lt0;
    f->lslot = PP_NONE;
}


/* --opcodes: the running instruction of frame f stops running at `now`. */
static inline void end_insn(pp_tables *t, pp_frame *f, int64_t now)
{
    pp_islot *i = &t->i[f->islot];
    if (--i->open == 0)
        i->time += now - f->it0;
    f->islot = PP_NONE;
}

/* --opcodes: a new instruction slot of `code` (its fid, base opcode and
 * positions read once): out of line, the first time a thread runs it. */
PP_SLOW uint32_t pp_tracer_insn_slot(pp_tracer *p, pp_tables *t, PyObject *code, uint32_t fid,
                                     uint32_t offset);
/* --opcodes: a hit of an instruction of a line target outside its frame's
 * timing (ts NULL: the thread is paused; not counted). */
PP_SLOW void pp_tracer_insn_hit(pp_tracer *p, pp_thread *ts, PyObject *code, uint32_t offset);
/* The base opcode of instruction `offset` of `code` (what co_code holds: no
 * specialized nor instrumented form), its co_code kept per code object. */
PP_HIDDEN int pp_tracer_base_opcode(pp_tracer *p, PyObject *code, uint32_t offset);

/* Line mode with memory: the line of frame f begins; the frame's high point
 * restarts from the thread's net bytes now (its own is kept in lm_hw0). */
static inline void line_mem_begin(const pp_stack *st, pp_frame *f)
{
    f->lm_alloc0 = st->mem_alloc;
    f->lm_blocks0 = st->mem_blocks;
    f->lm_net0 = st->mem_cur;
    f->lm_hw0 = f->mem_hw;
    f->mem_hw = st->mem_cur;
}

/* ... and ends (before end_segment): what the thread allocated and freed
 * meanwhile, callees included, counted at the outermost segment only, as
 * time is; the frame's high point is the higher of the two again. */
static inline void line_mem_end(pp_tables *t, const pp_stack *st, pp_frame *f)
{
    pp_lslot *l = &t->l[f->lslot];
    if (l->open == 1) {
        l->mem_alloc += (uint64_t)(st->mem_alloc - f->lm_alloc0);
        l->mem_blocks += (uint64_t)(st->mem_blocks - f->lm_blocks0);
        l->mem_net += st->mem_cur - f->lm_net0;
        if (f->mem_hw - f->lm_net0 > l->mem_peak)
            l->mem_peak = f->mem_hw - f->lm_net0;
    }
    if (f->lm_hw0 > f->mem_hw)
        f->mem_hw = f->lm_hw0;
}


/* A line event (hit) or a resumed frame's current line (no hit) of `code`,
 * which must be the running frame. `now` was read on entry to the hook; the
 * time from then to the end is added to the thread's line_cost. */
HOT void line_event(pp_tracer *p, PyObject *code, int line, int hit, int64_t now)
{
    pp_thread *ts = pp_threads_current(p->threads);
    if (UNLIKELY(ts == NULL || ts->st.depth == 0)) {
        /* A target running since before enable(), with nothing of its thread
         * seen below it (attached mid-run: docs/attach.md): one call, from now.
         * (3.11 sends the lines of any frame that began before enable.) */
        uint32_t fid = pp_index_get(&p->reg->idx, (uint64_t)(uintptr_t)code);
        if (line < 0 || fid == PP_NONE || !p->reg->ftarget[fid])
            return;
        pp_tracer_enter_slow(p, (uint64_t)(uintptr_t)code, code, NULL, PP_KIND_PYTHON);
        ts = pp_threads_current(p->threads);
        if (ts == NULL || ts->st.depth == 0)
            return;
    }
    if (UNLIKELY(line < 0))
        return;
    pp_frame *f = &ts->st.f[ts->st.depth - 1];
    if (f->key != (uint64_t)(uintptr_t)code)
        return;                 /* a frame that began before enable(), under others */
    pp_tables *t = &ts->t;
    ts->events++;
    now -= ts->st.line_cost;    /* the clock without our bookkeeping (stack.h) */
    if (UNLIKELY(p->memory))
        pp_thread_mem_fold(t, &ts->st);
    if (f->lslot != PP_NONE) {
        if (UNLIKELY(p->memory))
            line_mem_end(t, &ts->st, f);
        end_segment(t, f, now);
    }
    uint32_t ls = pp_tables_line_of(t, f->fslot, (uintptr_t)code, (uint32_t)line,
                                    t->f[f->fslot].fid,
                                    (uint32_t)((PyCodeObject *)code)->co_firstlineno);
    if (UNLIKELY(ls == PP_NONE)) {
        p->oom = 1;
        return;
    }
    t->l[ls].hits += (uint64_t)hit;
    t->l[ls].open++;
    f->lslot = ls;
    if (UNLIKELY(p->memory))
        line_mem_begin(&ts->st, f);
    f->lt0 = now;
    /* last: the clock without line_cost goes on from `now`, so the bookkeeping
     * in between (the memory reads included) is in no time */
    ts->st.line_cost = now_ticks(p) - now;
}



/* --opcodes: an instruction event (3.12+ INSTRUCTION, 3.11 the trace hook's
 * OPCODE) at `offset` (code units) of `code`, the running frame's: the
 * frame's previous instruction ends, this one begins (a hit). `now` was read
 * on entry to the hook; as for lines, the time from then to the end goes to
 * the thread's line_cost, in no instruction's time. */
HOT void insn_event(pp_tracer *p, PyObject *code, uint32_t offset, int64_t now)
{
    pp_thread *ts = pp_threads_current(p->threads);
    pp_frame *f = ts && ts->st.depth ? &ts->st.f[ts->st.depth - 1] : NULL;
    if (UNLIKELY(f == NULL || f->key != (uint64_t)(uintptr_t)code)) {
        /* a frame's first instruction runs before its start event (3.12+:
         * RESUME), or one that began before enable(): a hit, not timed */
        pp_tracer_insn_hit(p, ts, code, offset);
        return;
    }
    pp_tables *t = &ts->t;
    now -= ts->st.line_cost;
    if (f->islot != PP_NONE)
        end_insn(t, f, now);
    uint32_t is = pp_tables_insn(t, (uintptr_t)code, offset);
    if (UNLIKELY(is == PP_NONE)) {
        is = pp_tracer_insn_slot(p, t, code, t->f[f->fslot].fid, offset);
        if (is == PP_NONE)
            goto done;
    }
    t->i[is].hits++;
    t->i[is].open++;
    f->islot = is;
    f->it0 = now;
done:
    ts->st.line_cost = now_ticks(p) - now;
}


/* Fast path: the returning call is on top of a known thread's stack and no
 * housekeeping (thread name, periodic flush) is due. */
HOT void leave(pp_tracer *p, uint64_t key)
{
#ifdef PP_CLOCK_HAVE_TSC
    if (LIKELY(p->fast)) {
        int64_t now = (int64_t)__rdtsc();   /* first: our bookkeeping is not the callee's time */
        pp_thread *ts = pp_tls.ts;
        if (UNLIKELY(pp_tls.gen != p->gen || ts == NULL))
            goto slow;
        pp_stack *st = &ts->st;
        uint32_t depth = st->depth;
        if (UNLIKELY(depth == 0 || st->f[depth - 1].key != key || ts->events >= ts->name_at
                     || (p->periodic && ts->events + 1 >= ts->flush_at)))
            goto slow;
        ts->events++;
        stop_top(&ts->t, st, now);
        return;
slow:
        pp_tracer_leave_slow(p, key, now);
        return;
    }
#endif
    pp_tracer_leave_slow(p, key, now_ticks(p));
}

#endif
