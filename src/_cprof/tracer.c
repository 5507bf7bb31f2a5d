/* tracer.c — deterministic function profiling (see tracer.h).
 *
 * Event path, per call: find this thread's record (one TLS compare), find the
 * function slot (one probe in an open-addressing index), find the edge slot,
 * push a frame, read the clock last. Per return: read the clock first, pop,
 * account. Everything runs with the GIL held: on 3.12+ inside sys.monitoring
 * callbacks (CPython has already disabled monitoring for the callback's own
 * work), on 3.11 inside the legacy profile hook.
 *
 * Danger points:
 * - a pending exception may be set when an enter event fires (gen.throw):
 *   anything that may touch the error indicator (user timer, first-time name
 *   formatting) saves and restores it;
 * - the user timer is Python code: it must not disable the profiler
 *   (in_timer guard, as 3.13's cProfile) and its errors are unraisable;
 * - thread records outlive their threads (their data is kept); TLS points at
 *   a record only while its generation matches the profiler's.
 */
#include "tracer.h"
#include "memory.h"

#include "capture.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One thread record cached per OS thread for the active profiler. initial-exec:
 * a plain %fs-relative load on the event path (24 bytes of glibc's static TLS
 * reserve for dlopen'ed modules) instead of a __tls_get_addr call. */
static __thread struct {
    uint64_t gen;
    pp_thread *ts;              /* NULL while the thread is paused */
    pp_thread *paused;          /* the record to restore when it resumes */
    int busy;                   /* pyprof's own work may run Python code (3.11 eval hook) */
} pp_tls __attribute__((tls_model("initial-exec")));

static uint64_t pp_gen_counter;
static pp_profiler *pp_active;   /* at most one enabled profiler per process */

static int pp_mem_frames;       /* memory with tracing: peaks per activation */

/* Work done when a call ends, beyond cProfile's accounting: one flag word so
 * the return path tests a single predictable branch whatever is off. Set by
 * enable for the active profiler. */
enum { PP_POP_MEM = 1, PP_POP_TIMELINE = 2 };
static int pp_pop_hooks;
/* Timeline: the active profiler's minimum duration (ticks) and the event
 * capacity not yet reserved by any thread's buffer. GIL held. */
static int64_t pp_tl_min_ticks;
static uint64_t pp_tl_left;

/* From the allocation hooks, GIL held: the calling thread's net bytes moved
 * by delta; a new high point for the running activation. */
static void mem_settle(pp_tables *t, pp_stack *st)
{
    if (st->mem_pending) {
        t->f[st->mem_pending - 1].mem_residual += st->mem_cur - st->mem_pending_base;
        st->mem_pending = 0;
    }
}

void pp_tracer_mem_delta(int64_t delta)
{
    if (!pp_mem_frames)             /* first: memory alone or with the sampler pays nothing more */
        return;
    pp_profiler *p = pp_active;
    int attached;
    if (p == NULL || pp_tls.gen != p->gen || pp_tls.ts == NULL
        || (delta < 0 && !(pp_signal_tstate(&attached) && attached)))
        return;                     /* a free without the GIL: its stack is not to be touched */
    pp_stack *st = &pp_tls.ts->st;
    if (delta > 0)
        mem_settle(&pp_tls.ts->t, st);      /* a new allocation: the frame is gone */
    st->mem_cur += delta;
    if (delta > 0 && st->depth && st->mem_cur > st->f[st->depth - 1].mem_hw)
        st->f[st->depth - 1].mem_hw = st->mem_cur;
}

/* A background profiler (@profile's, in a plain run) steps aside while an
 * explicit one runs, and resumes after it (strong reference). */
static pp_profiler *pp_suspended;

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
/* The event paths are inlined into each callback: a call would cost a
 * prologue/epilogue of callee-saved registers per event (~20 instructions). */
#define HOT static inline __attribute__((always_inline))
/* Slow paths stay out of line so the callbacks keep few registers live. */
#define COLD static __attribute__((noinline, cold))

/* ---------------------------------------------------------------- clock */

static int64_t user_timer_now_impl(pp_profiler *p)
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
COLD int64_t user_timer_now(pp_profiler *p)
{
    int was = pp_memory_self_begin();
    int64_t t = user_timer_now_impl(p);
    pp_memory_self_end(was);
    return t;
}

static inline int64_t now_ticks(pp_profiler *p)
{
    if (LIKELY(p->timer == NULL))
        return pp_clock_now();
    return user_timer_now(p);
}

int64_t pp_tracer_now(pp_profiler *p)
{
    return now_ticks(p);
}

/* ------------------------------------------------------ thread records */

static pp_thread *attach_thread_impl(pp_profiler *p)
{
    unsigned long ident = PyThread_get_thread_ident();
    pp_thread *ts;
    /* A record from an earlier enable of this profiler is reused; one made in
     * this enable belongs to a thread that has ended (its ident reused). */
    for (ts = p->threads; ts; ts = ts->next)
        if (ts->ident == ident && ts->attach_gen != p->gen)
            break;
    if (ts == NULL) {
        ts = calloc(1, sizeof *ts);
        if (ts == NULL || pp_tables_init(&ts->t) < 0) {
            free(ts);
            p->oom = 1;
            return NULL;
        }
        ts->ident = ident;
        ts->native_id = PyThread_get_thread_native_id();
        /* Headroom kept free below the eval hook: 256 KiB, or a quarter of a
         * smaller stack; 0 (no guard) when the platform cannot tell. */
        uintptr_t low = pp_cstack_low(), here = (uintptr_t)&low;
        if (low && here > low) {
            uintptr_t room = (here - low) / 4;
            ts->cstack_guard = low + (room < (256u << 10) ? room : (256u << 10));
        }
        ts->name_tries = 64;
        ts->t.tl.on = p->timeline;
        ts->index = p->nthreads++;
        *p->threads_tail = ts;
        p->threads_tail = &ts->next;
    }
    ts->attach_gen = p->gen;
    pp_tls.gen = p->gen;
    pp_tls.ts = ts;
    pp_tls.paused = NULL;
    return ts;
}

COLD pp_thread *attach_thread(pp_profiler *p)
{
    int was = pp_memory_self_begin();
    pp_thread *ts = attach_thread_impl(p);
    pp_memory_self_end(was);
    return ts;
}

static inline pp_thread *current_thread(pp_profiler *p)
{
    if (LIKELY(pp_tls.gen == p->gen))
        return pp_tls.ts;
    return attach_thread(p);
}

/* Pausing points the calling thread's TLS at no record, which the event
 * paths already read as "nothing to record": no cost on the hot path. A new
 * enable (new generation) ends the pause. */
void pp_tracer_pause_thread(pp_profiler *p, int paused)
{
    if (!p->enabled)
        return;
    if (paused) {
        pp_thread *ts = current_thread(p);
        if (ts) {
            pp_tls.paused = ts;
            pp_tls.ts = NULL;
        }
    }
    else if (pp_tls.gen == p->gen && pp_tls.paused) {
        pp_tls.ts = pp_tls.paused;
        pp_tls.paused = NULL;
    }
}

int pp_tracer_self_paused(void)
{
    pp_profiler *p = pp_active;
    return p != NULL && pp_tls.gen == p->gen && pp_tls.paused != NULL;
}

int pp_tracer_thread_paused(pp_profiler *p)
{
    return p->enabled && pp_tls.gen == p->gen && pp_tls.paused != NULL;
}

/* A thread's name from threading._active (a dict lookup: no Python code
 * runs). A new thread enters _active only after its first events, so this is
 * retried on later returns, a bounded number of times (raw _thread threads
 * never appear there). */
static void resolve_thread_name_impl(pp_thread *ts)
{
    pp_err_state es;
    pp_err_save(&es);
    ts->name_tries--;
    PyObject *mods = PyImport_GetModuleDict();                  /* borrowed */
    PyObject *mod = mods ? PyDict_GetItemString(mods, "threading") : NULL;
    PyObject *active = mod && PyModule_Check(mod) ?
        PyDict_GetItemString(PyModule_GetDict(mod), "_active") : NULL;
    if (active && PyDict_Check(active)) {
        PyObject *key = PyLong_FromUnsignedLong(ts->ident);
        PyObject *thread = key ? PyDict_GetItemWithError(active, key) : NULL;
        Py_XDECREF(key);
        PyObject *dict = thread ? PyObject_GenericGetDict(thread, NULL) : NULL;
        PyObject *name = dict && PyDict_Check(dict) ? PyDict_GetItemString(dict, "_name") : NULL;
        if (name && PyUnicode_Check(name)) {
            ts->name = Py_NewRef(name);
            ts->name_tries = 0;
        }
        Py_XDECREF(dict);
    }
    PyErr_Clear();
    pp_err_restore(&es);
}

COLD void resolve_thread_name(pp_thread *ts)
{
    int was = pp_memory_self_begin();
    resolve_thread_name_impl(ts);
    pp_memory_self_end(was);
}

/* ------------------------------------------------------------ registry */

/* Name of a C method as cProfile's normalizeUserObj names a bound one:
 * repr(type(self).<name>) (which may be a Python override), else a fallback. */
static PyObject *bound_method_name(PyObject *self, const char *ml_name, PyObject *module)
{
    PyObject *name = PyUnicode_FromString(ml_name);
    if (name) {
        PyObject *mo = _PyType_Lookup(Py_TYPE(self), name);
        Py_DECREF(name);
        if (mo) {
            Py_INCREF(mo);
            PyObject *r = PyObject_Repr(mo);
            Py_DECREF(mo);
            if (r)
                return r;
        }
    }
    PyErr_Clear();
    if (module && PyUnicode_Check(module))
        return PyUnicode_FromFormat("<built-in method %S.%s>", module, ml_name);
    return PyUnicode_FromFormat("<built-in method %s>", ml_name);
}

/* Name of a C function exactly as cProfile names it. For a method descriptor
 * called with `self_arg`, cProfile first binds it (no module), then names it. */
static PyObject *builtin_name(PyObject *callable, PyObject *self_arg)
{
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type))
        return bound_method_name(self_arg, ((PyMethodDescrObject *)callable)->d_method->ml_name,
                                 NULL);
    PyCFunctionObject *fn = (PyCFunctionObject *)callable;
    if (fn->m_self != NULL)
        return bound_method_name(fn->m_self, fn->m_ml->ml_name, fn->m_module);
    PyObject *mod = fn->m_module, *modname = NULL;
    if (mod && PyUnicode_Check(mod)) {
        modname = Py_NewRef(mod);
    }
    else if (mod && PyModule_Check(mod)) {
        modname = PyModule_GetNameObject(mod);
        if (modname == NULL)
            PyErr_Clear();
    }
    if (modname) {
        PyObject *r = NULL;
        if (PyUnicode_CompareWithASCIIString(modname, "builtins") != 0)
            r = PyUnicode_FromFormat("<%U.%s>", modname, fn->m_ml->ml_name);
        Py_DECREF(modname);
        if (r)
            return r;
    }
    return PyUnicode_FromFormat("<%s>", fn->m_ml->ml_name);
}

/* Line mode: whether a code object seen for the first time is a line target.
 * Python code, run once per code object; its errors are unraisable. */
COLD int line_filter_says(pp_profiler *p, PyObject *code)
{
    pp_err_state es;
    pp_err_save(&es);
    pp_tls.busy++;
    PyObject *r = PyObject_CallOneArg(p->line_filter, code);
    pp_tls.busy--;
    int yes = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (yes < 0) {
        PyErr_WriteUnraisable(p->line_filter);
        yes = 0;
    }
    pp_err_restore(&es);
    return yes;
}

static int line_events_on(pp_profiler *p, PyObject *code, int on);

COLD void mark_line_target(pp_profiler *p, uint32_t fid)
{
    if (p->ftarget[fid])
        return;
    p->ftarget[fid] = 1;
    if (p->enabled && p->lines && line_events_on(p, p->fobj[fid], 1) < 0)
        PyErr_WriteUnraisable(p->fobj[fid]);
}

static uint32_t register_function_impl(pp_profiler *p, uint64_t key, PyObject *obj,
                                       PyObject *self_arg, int kind)
{
    uint32_t fid = pp_index_get(&p->reg, key);
    if (fid != PP_NONE)
        return fid;
    if (p->nfun == p->capfun) {
        uint32_t ncap = p->capfun ? p->capfun * 2 : 256;
        PyObject **no = realloc(p->fobj, ncap * sizeof(PyObject *));
        if (no == NULL)
            return PP_NONE;
        p->fobj = no;
        uint8_t *nk = realloc(p->fkind, ncap);
        if (nk == NULL)
            return PP_NONE;
        p->fkind = nk;
        uint8_t *nt = realloc(p->ftarget, ncap);
        if (nt == NULL)
            return PP_NONE;
        p->ftarget = nt;
        int32_t *nr = realloc(p->fresume, ncap * sizeof(int32_t));
        if (nr == NULL)
            return PP_NONE;
        p->fresume = nr;
        p->capfun = ncap;
    }
    PyObject *named;
    if (kind != PP_KIND_BUILTIN) {
        named = Py_NewRef(obj);
    }
    else {
        pp_err_state es;
        pp_err_save(&es);
        named = builtin_name(obj, self_arg);
        if (named == NULL)
            PyErr_Clear();
        pp_err_restore(&es);
        if (named == NULL)
            return PP_NONE;
    }
    fid = p->nfun;
    if (pp_index_put(&p->reg, key, fid) < 0) {
        Py_DECREF(named);
        return PP_NONE;
    }
    p->fobj[fid] = named;
    p->fkind[fid] = (uint8_t)kind;
    p->ftarget[fid] = 0;
    p->fresume[fid] = -1;
    p->nfun++;
    if (kind == PP_KIND_PYTHON && p->line_filter && line_filter_says(p, obj))
        mark_line_target(p, fid);
    return fid;
}

static uint32_t register_function(pp_profiler *p, uint64_t key, PyObject *obj,
                                  PyObject *self_arg, int kind)
{
    int was = pp_memory_self_begin();
    uint32_t fid = register_function_impl(p, key, obj, self_arg, kind);
    pp_memory_self_end(was);
    return fid;
}

COLD uint32_t add_function_slot(pp_profiler *p, pp_thread *ts, uint64_t key,
                                  PyObject *obj, PyObject *self_arg, int kind)
{
    uint32_t fid = register_function(p, key, obj, self_arg, kind);
    if (fid == PP_NONE)
        return PP_NONE;
    return pp_tables_add_function(&ts->t, key, fid);
}

/* ------------------------------------------------------ enter / leave */

static void maybe_flush(pp_profiler *p);

static void line_enter(pp_profiler *p, pp_tables *t, pp_stack *st, uint32_t fs);

/* Full path of a call event: any thread state, table state or clock.
 * obj: the code object, or the C callable (self_arg: its bound self, if a descriptor) */
COLD void enter_slow(pp_profiler *p, uint64_t key, PyObject *obj, PyObject *self_arg, int kind)
{
    pp_thread *ts = current_thread(p);
    if (UNLIKELY(ts == NULL))
        return;
    ts->events++;
    pp_tables *t = &ts->t;
    uint32_t fs = pp_index_get(&t->fidx, key);
    if (UNLIKELY(fs == PP_NONE)) {
        fs = add_function_slot(p, ts, key, obj, self_arg, kind);
        if (fs == PP_NONE) {
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
        mem_settle(t, st);
        f->mem_base = f->mem_hw = st->mem_cur;
    }
    if (p->lines)
        line_enter(p, t, st, fs);
    f->t0 = now_ticks(p);       /* last: our bookkeeping is not the callee's time */
}

/* Fast path: a known thread, function and edge, room on the stack, the TSC.
 * It makes no calls, so it needs no callee-saved registers; anything else
 * (checked before any state changes) is handed to enter_slow. */
HOT void enter(pp_profiler *p, uint64_t key, PyObject *obj, PyObject *self_arg, int kind)
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
    enter_slow(p, key, obj, self_arg, kind);
}

/* Memory with tracing: a returning activation's peak and residual; its high
 * point is its caller's too. */
COLD void mem_pop(pp_tables *t, pp_stack *st, const pp_frame *f)
{
    pp_fslot *fs = &t->f[f->fslot];
    if (f->mem_hw - f->mem_base > fs->mem_peak)
        fs->mem_peak = f->mem_hw - f->mem_base;
    if (fs->rec_level == 1) {               /* outermost: recursion counted once */
        mem_settle(t, st);
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
static __attribute__((noinline)) void pop_hooks(pp_tables *t, pp_stack *st, const pp_frame *f,
                                                int64_t tt)
{
    if (pp_pop_hooks & PP_POP_MEM)
        mem_pop(t, st, f);
    if (pp_pop_hooks & PP_POP_TIMELINE)
        timeline_add(t, f, tt);
}

HOT void stop_top(pp_tables *t, pp_stack *st, int64_t now)
{
    pp_frame *f = &st->f[--st->depth];
    int64_t tt = now - f->t0;
    int64_t it = tt - f->subt;
    if (st->depth)
        st->f[st->depth - 1].subt += tt;
    if (UNLIKELY(pp_pop_hooks))
        pop_hooks(t, st, f, tt);
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

/* A new frame was pushed in line mode: it counts into a call row when its
 * caller was running a line. */
static void line_enter(pp_profiler *p, pp_tables *t, pp_stack *st, uint32_t fs)
{
    pp_frame *f = &st->f[st->depth - 1];
    f->lslot = PP_NONE;
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
        if (f->lslot != PP_NONE)
            end_segment(t, f, now);
        if (f->crow != PP_NONE) {
            pp_cslot *c = &t->c[f->crow];
            c->calls++;
            if (--c->open == 0)
                c->time += now - f->t0;
        }
    }
    stop_top(t, st, now);
}

void pp_tracer_stop_all(pp_thread *ts, pp_tables *t, pp_stack *st, int64_t now, int lines)
{
    (void)ts;
    while (st->depth)
        end_frame(lines, t, st, now);
    mem_settle(t, st);
}

/* A line event (hit) or a resumed frame's current line (no hit) of `code`,
 * which must be the running frame. `now` was read on entry to the hook. */
HOT void line_event(pp_profiler *p, PyObject *code, int line, int hit, int64_t now)
{
    pp_thread *ts = current_thread(p);
    if (UNLIKELY(ts == NULL || ts->st.depth == 0 || line < 0))
        return;
    pp_frame *f = &ts->st.f[ts->st.depth - 1];
    if (f->key != (uint64_t)(uintptr_t)code)
        return;                 /* a frame that began before enable() */
    pp_tables *t = &ts->t;
    ts->events++;
    if (f->lslot != PP_NONE)
        end_segment(t, f, now);
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
    f->lt0 = now_ticks(p);      /* last: our bookkeeping is not the line's time */
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
COLD void leave_slow(pp_profiler *p, uint64_t key, int64_t now)
{
    pp_thread *ts = current_thread(p);
    if (UNLIKELY(ts == NULL))
        return;
    ts->events++;
    pp_stack *st = &ts->st;
    if (st->depth == 0)
        return;
    if (UNLIKELY(st->f[st->depth - 1].key != key) && !unwind_to(p->lines, &ts->t, st, key, now))
        return;
    end_frame(p->lines, &ts->t, st, now);
    if (UNLIKELY(ts->name_tries) && (ts->events < 256 || (ts->events & 15) == 0))
        resolve_thread_name(ts);
    /* every 1024 events or so (a return, not a call, may be the 1024th) */
    if (UNLIKELY(p->flush_interval_ns) && ts->events >= ts->flush_at) {
        ts->flush_at = ts->events + 1024;
        maybe_flush(p);
    }
}

/* Fast path: the returning call is on top of a known thread's stack and no
 * housekeeping (thread name, periodic flush) is due. */
HOT void leave(pp_profiler *p, uint64_t key)
{
#ifdef PP_CLOCK_HAVE_TSC
    if (LIKELY(p->fast)) {
        int64_t now = (int64_t)__rdtsc();   /* first: our bookkeeping is not the callee's time */
        pp_thread *ts = pp_tls.ts;
        if (UNLIKELY(pp_tls.gen != p->gen || ts == NULL))
            goto slow;
        pp_stack *st = &ts->st;
        uint32_t depth = st->depth;
        if (UNLIKELY(depth == 0 || st->f[depth - 1].key != key || ts->name_tries
                     || (p->flush_interval_ns && ts->events + 1 >= ts->flush_at)))
            goto slow;
        ts->events++;
        stop_top(&ts->t, st, now);
        return;
slow:
        leave_slow(p, key, now);
        return;
    }
#endif
    leave_slow(p, key, now_ticks(p));
}

/* Key of a C callable as cProfile keys it (its PyMethodDef), or 0 to ignore. */
static inline uint64_t cfunc_key(PyObject *callable, PyObject *self_arg, PyObject *missing)
{
    if (PyCFunction_Check(callable))
        return (uint64_t)(uintptr_t)((PyCFunctionObject *)callable)->m_ml;
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type) && self_arg != missing && self_arg != NULL) {
        PyMethodDescrObject *d = (PyMethodDescrObject *)callable;
        if (PyObject_TypeCheck(self_arg, PyDescr_TYPE(d)))
            return (uint64_t)(uintptr_t)d->d_method;
    }
    return 0;
}

/* ------------------------------------------------------ periodic flush */

void pp_tracer_maybe_flush(pp_profiler *p)
{
    if (p->flush_interval_ns)
        maybe_flush(p);
}

static void maybe_flush_impl(pp_profiler *p)
{
    int64_t mono = pp_clock_monotonic_ns();
    if (mono < p->next_flush_ns || (long)getpid() != p->owner_pid)
        return;
    p->next_flush_ns = mono + p->flush_interval_ns;
    char err[256];
    pp_err_state es;
    pp_err_save(&es);
    pp_tls.busy++;              /* a finalizer run by the GC here is not the program's call */
    if (pp_capture_write(p, p->flush_path, 0, err, sizeof err) < 0 && !p->flush_failed) {
        p->flush_failed = 1;
        fprintf(stderr, "pyprof: periodic flush to %s failed: %s\n", p->flush_path, err);
    }
    pp_tls.busy--;
    PyErr_Clear();
    pp_err_restore(&es);
}

COLD void maybe_flush(pp_profiler *p)
{
    int was = pp_memory_self_begin();
    maybe_flush_impl(p);
    pp_memory_self_end(was);
}

/* Line mode: a resumed generator or coroutine that is a line target goes on
 * with the line it stopped in (no hit: that line already counted one). */
COLD void line_resume_at(pp_profiler *p, PyObject *code, int line, int64_t now)
{
    uint32_t fid = pp_index_get(&p->reg, (uint64_t)(uintptr_t)code);
    if (fid != PP_NONE && p->ftarget[fid])
        line_event(p, code, line, 0, now);
}

/* ------------------------------------------------ 3.12+: sys.monitoring */
#if PP_USE_MONITORING

/* Event bits, identical in 3.12 and 3.13 (internal in 3.12). */
enum {
    EV_PY_START = 1 << 0, EV_PY_RESUME = 1 << 1, EV_PY_RETURN = 1 << 2,
    EV_PY_YIELD = 1 << 3, EV_CALL = 1 << 4, EV_LINE = 1 << 5, EV_PY_UNWIND = 1 << 12,
    EV_PY_THROW = 1 << 13, EV_C_RETURN = 1 << 15, EV_C_RAISE = 1 << 16,
};

static PyObject *mon_missing;   /* sys.monitoring.MISSING, compared by pointer */
static PyObject *mon_disable;   /* sys.monitoring.DISABLE */

/* CALL fires before every call, C or not, and an instrumented call site loses
 * its fast path: about 35 ns per Python-to-Python call. A site whose first
 * SITE_DISABLE_AFTER calls all went to non-C callables is DISABLEd for CALL
 * (and with it C_RETURN/C_RAISE); a site that ever called a C function before
 * that decision keeps its events. C calls only set a bit in p->c_sites (a
 * hashed bitmap: a collision merely keeps a Python-only site watched), so the
 * cost per C call stays a few instructions. exact_builtins turns all this off
 * (cProfile's cost). */
#define SITE_DISABLE_AFTER 64
#define SITE_KEPT UINT32_MAX

static inline uint64_t site_key(PyObject *code, PyObject *offset)
{
    long off;
    if (LIKELY(PyUnstable_Long_IsCompact((PyLongObject *)offset)))
        off = (long)PyUnstable_Long_CompactValue((PyLongObject *)offset);
    else if ((off = PyLong_AsLong(offset)) < 0) {
        PyErr_Clear();
        off = 0;
    }
    return (uint64_t)(uintptr_t)code ^ ((uint64_t)(off & 0xFFFF) << 48);
}

static inline uint32_t c_site_bit(uint64_t key)
{
    return pp_hash64(key, PP_C_SITE_BITS - 1);
}

/* A call to a non-C callable at (code, offset): DISABLE once the site has
 * proven to call only such callables. */
static PyObject *python_call_site(pp_profiler *p, PyObject *code, PyObject *offset)
{
    uint64_t key = site_key(code, offset);
    pp_ient *e = pp_index_find(&p->sites, key);
    if (e == NULL) {
        if (pp_index_put(&p->sites, key, 1) < 0)
            p->oom = 1;
        Py_RETURN_NONE;
    }
    if (e->val != SITE_KEPT && ++e->val >= SITE_DISABLE_AFTER) {
        uint32_t b = c_site_bit(key);
        uint32_t fid;
        if ((p->c_sites[b >> 6] & (1ull << (b & 63)))
            || (p->lines && (fid = pp_index_get(&p->reg, (uint64_t)(uintptr_t)code)) != PP_NONE
                && p->ftarget[fid])) {  /* call rows need every call of a target line */
            e->val = SITE_KEPT;
            Py_RETURN_NONE;
        }
        p->sites_disabled = 1;
        return Py_NewRef(mon_disable);
    }
    Py_RETURN_NONE;
}

static inline void mark_c_call_site(pp_profiler *p, PyObject *code, PyObject *offset)
{
    uint32_t b = c_site_bit(site_key(code, offset));
    p->c_sites[b >> 6] |= 1ull << (b & 63);
}

COLD void line_resume(pp_profiler *p, PyObject *code, PyObject *offset)
{
    int64_t now = now_ticks(p);
    long off = PyLong_AsLong(offset);
    if (off < 0) {
        PyErr_Clear();
        return;
    }
    line_resume_at(p, code, PyCode_Addr2Line((PyCodeObject *)code, (int)off), now);
}

static PyObject *monitoring_module(void);

/* LINE events on one code object only (local events add to the global ones). */
static int line_events_on(pp_profiler *p, PyObject *code, int on)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL || p->tool_id < 0)
        return mon ? 0 : -1;
    PyObject *r = PyObject_CallMethod(mon, "set_local_events", "iOi", p->tool_id, code,
                                      on ? EV_LINE : 0);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* A callable with the cheapest calling convention CPython offers. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    pp_profiler *prof;          /* strong */
} pp_callback;

static void callback_dealloc(pp_callback *cb)
{
    Py_XDECREF((PyObject *)cb->prof);
    PyObject_Free(cb);
}

static PyTypeObject pp_callback_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyprof._cprof._MonitoringCallback",
    .tp_basicsize = sizeof(pp_callback),
    .tp_dealloc = (destructor)callback_dealloc,
    .tp_vectorcall_offset = offsetof(pp_callback, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "sys.monitoring callback of a pyprof profiler",
};

static PyObject *cb_py_enter(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_profiler *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled))
        enter(p, (uint64_t)(uintptr_t)args[0], args[0], NULL, PP_KIND_PYTHON);
    Py_RETURN_NONE;
}

/* PY_RESUME / PY_THROW: a call (as PY_START); in line mode a resumed line
 * target also goes on with its current line (no hit: no LINE event fires when
 * it resumes in the middle of a line). */
static PyObject *cb_py_resume(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_profiler *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        enter(p, (uint64_t)(uintptr_t)args[0], args[0], NULL, PP_KIND_PYTHON);
        if (UNLIKELY(p->lines))
            line_resume(p, args[0], args[1]);
    }
    Py_RETURN_NONE;
}

static PyObject *cb_line(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_profiler *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        int64_t now = now_ticks(p);
        PyLongObject *n = (PyLongObject *)args[1];
        long line = LIKELY(PyUnstable_Long_IsCompact(n)) ? (long)PyUnstable_Long_CompactValue(n)
                                                         : -1;
        line_event(p, args[0], (int)line, 1, now);
    }
    Py_RETURN_NONE;
}

static PyObject *cb_py_leave(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_profiler *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled))
        leave(p, (uint64_t)(uintptr_t)args[0]);
    Py_RETURN_NONE;
}

static PyObject *cb_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)kw;
    pp_profiler *p = ((pp_callback *)self)->prof;
    if (!p->enabled)
        Py_RETURN_NONE;
    PyObject *callable = args[2];
    PyObject *arg0 = PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL;
    uint64_t key = Py_IS_TYPE(callable, &PyFunction_Type) ? 0
                                                           : cfunc_key(callable, arg0, mon_missing);
    if (key == 0) {
        if (p->exact_builtins)
            Py_RETURN_NONE;
        return python_call_site(p, args[0], args[1]);
    }
    if (!p->exact_builtins)
        mark_c_call_site(p, args[0], args[1]);
    enter(p, key, callable, arg0, PP_KIND_BUILTIN);
    Py_RETURN_NONE;
}

static PyObject *cb_c_leave(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)kw;
    pp_profiler *p = ((pp_callback *)self)->prof;
    if (!p->enabled)
        Py_RETURN_NONE;
    PyObject *arg0 = PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL;
    uint64_t key = cfunc_key(args[2], arg0, mon_missing);
    if (key)
        leave(p, key);
    Py_RETURN_NONE;
}

static PyObject *monitoring_module(void)
{
    PyObject *mon = PySys_GetObject("monitoring");    /* borrowed */
    if (mon == NULL)
        PyErr_SetString(PyExc_RuntimeError, "pyprof: sys.monitoring is unavailable");
    return mon;
}

static PyObject *new_callback(pp_profiler *p, vectorcallfunc fn)
{
    pp_callback *cb = PyObject_New(pp_callback, &pp_callback_type);
    if (cb == NULL)
        return NULL;
    cb->vectorcall = fn;
    cb->prof = (pp_profiler *)Py_NewRef((PyObject *)p);
    return (PyObject *)cb;
}

/* Tool ids to try: the profiler's own first, then the free general ones,
 * then the debugger's and coverage's last so those tools can still start. A
 * background profiler (@profile's) leaves the profiler's id to cProfile. */
static const int tool_order[] = {2, 3, 4, 5, 1, 0};
static const int background_tool_order[] = {3, 4, 5, 2, 1, 0};

static int claim_tool_id(PyObject *mon, int background)
{
    const int *order = background ? background_tool_order : tool_order;
    for (size_t i = 0; i < sizeof tool_order / sizeof tool_order[0]; i++) {
        PyObject *holder = PyObject_CallMethod(mon, "get_tool", "i", order[i]);
        if (holder == NULL)
            return -1;
        int free_id = holder == Py_None;
        Py_DECREF(holder);
        if (!free_id)
            continue;
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", order[i], "pyprof");
        if (r) {
            Py_DECREF(r);
            return order[i];
        }
        PyErr_Clear();
    }
    /* All taken: name the holders. */
    PyObject *names = PyList_New(0);
    for (int id = 0; names && id < 6; id++) {
        PyObject *h = PyObject_CallMethod(mon, "get_tool", "i", id);
        PyObject *s = h ? PyUnicode_FromFormat("%d=%R", id, h) : NULL;
        Py_XDECREF(h);
        if (s == NULL || PyList_Append(names, s) < 0) {
            Py_XDECREF(s);
            Py_CLEAR(names);
            break;
        }
        Py_DECREF(s);
    }
    if (names) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *joined = sep ? PyUnicode_Join(sep, names) : NULL;
        if (joined)
            PyErr_Format(PyExc_RuntimeError,
                         "pyprof: no free sys.monitoring tool id (held by: %U)", joined);
        Py_XDECREF(joined);
        Py_XDECREF(sep);
        Py_DECREF(names);
    }
    return -1;
}

/* kind: 0 always, 1 with builtins (C functions), 2 in line mode (local to targets). */
static const struct { int event; vectorcallfunc fn; int kind; } mon_events[] = {
    {EV_PY_START, cb_py_enter, 0},  {EV_PY_RESUME, cb_py_resume, 0}, {EV_PY_THROW, cb_py_resume, 0},
    {EV_PY_RETURN, cb_py_leave, 0}, {EV_PY_YIELD, cb_py_leave, 0},   {EV_PY_UNWIND, cb_py_leave, 0},
    {EV_CALL, cb_call, 1},          {EV_C_RETURN, cb_c_leave, 1},    {EV_C_RAISE, cb_c_leave, 1},
    {EV_LINE, cb_line, 2},
};
#define N_MON_EVENTS (sizeof mon_events / sizeof mon_events[0])

static int unregister_monitoring(pp_profiler *p, PyObject *mon)
{
    int rc = 0;
    PyObject *r;
    if (p->sites_disabled) {
        /* DISABLE outlives set_events(id, 0) and even the tool id: re-arm, or
         * the next profiler on this id would miss calls at those sites. */
        r = PyObject_CallMethod(mon, "restart_events", NULL);
        rc |= r == NULL;
        Py_XDECREF(r);
        p->sites_disabled = 0;
    }
    r = PyObject_CallMethod(mon, "set_events", "ii", p->tool_id, 0);
    rc |= r == NULL;
    Py_XDECREF(r);
    for (uint32_t fid = 0; p->lines && fid < p->nfun; fid++)
        if (p->ftarget[fid])
            rc |= line_events_on(p, p->fobj[fid], 0) < 0;
    for (size_t i = 0; i < N_MON_EVENTS; i++) {
        r = PyObject_CallMethod(mon, "register_callback", "iiO", p->tool_id,
                                mon_events[i].event, Py_None);
        rc |= r == NULL;
        Py_XDECREF(r);
    }
    r = PyObject_CallMethod(mon, "free_tool_id", "i", p->tool_id);
    rc |= r == NULL;
    Py_XDECREF(r);
    p->tool_id = -1;
    return rc ? -1 : 0;
}

int pp_tracer_hook_threading(pp_profiler *p)
{
    p->threading_pending = 0;           /* sys.monitoring covers every thread */
    return 0;
}

static int install_hooks(pp_profiler *p)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL)
        return -1;
    if (mon_missing == NULL) {
        mon_missing = PyObject_GetAttrString(mon, "MISSING");
        mon_disable = PyObject_GetAttrString(mon, "DISABLE");
        if (mon_missing == NULL || mon_disable == NULL)
            return -1;
    }
    int id = claim_tool_id(mon, p->background);
    if (id < 0)
        return -1;
    p->tool_id = id;
    int mask = 0;
    for (size_t i = 0; i < N_MON_EVENTS; i++) {
        if ((mon_events[i].kind == 1 && !p->builtins) || (mon_events[i].kind == 2 && !p->lines))
            continue;
        PyObject *cb = new_callback(p, mon_events[i].fn);
        PyObject *r = cb ? PyObject_CallMethod(mon, "register_callback", "iiO", id,
                                               mon_events[i].event, cb) : NULL;
        Py_XDECREF(cb);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        if (mon_events[i].kind != 2)
            mask |= mon_events[i].event;
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "ii", id, mask);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    for (uint32_t fid = 0; p->lines && fid < p->nfun; fid++)
        if (p->ftarget[fid] && line_events_on(p, p->fobj[fid], 1) < 0)
            goto fail;
    return 0;
fail:;
    pp_err_state es;
    pp_err_save(&es);
    unregister_monitoring(p, mon);
    PyErr_Clear();
    pp_err_restore(&es);
    return -1;
}

static int remove_hooks(pp_profiler *p)
{
    if (p->tool_id < 0)
        return 0;
    PyObject *mon = monitoring_module();
    if (mon == NULL)
        return -1;
    return unregister_monitoring(p, mon);
}

/* ------------------------------------------------ 3.11: legacy profile hook */
#else

#define GENERATOR_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)

/* 3.11 line mode: a generator's frame is resumed (not started) when it is
 * past its first RESUME instruction; that offset (bytes) is found once per
 * function, in its deoptimised bytecode. */
COLD int first_resume_offset(pp_profiler *p, PyCodeObject *code)
{
    uint32_t fid = pp_index_get(&p->reg, (uint64_t)(uintptr_t)code);
    if (fid == PP_NONE)
        return INT32_MAX;
    if (p->fresume[fid] >= 0)
        return p->fresume[fid];
    int32_t off = INT32_MAX;
    PyObject *bytes = PyCode_GetCode(code);
    if (bytes == NULL) {
        PyErr_Clear();
    }
    else {
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(bytes);
        for (Py_ssize_t i = 0; i + 1 < PyBytes_GET_SIZE(bytes); i += 2) {
            if (b[i] == RESUME) {
                off = (int32_t)i;
                break;
            }
        }
        Py_DECREF(bytes);
    }
    return p->fresume[fid] = off;
}

static int legacy_callback(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    pp_profiler *p = (pp_profiler *)obj;
    if (UNLIKELY(!p->enabled))
        return 0;
    switch (what) {
    case PyTrace_CALL: {
        PyCodeObject *code = pp_frame_code_borrowed(frame);
        if (UNLIKELY(p->memory))
            pp_memory_forget((PyObject *)frame);    /* made for this hook, not by the program */
        enter(p, (uint64_t)(uintptr_t)code, (PyObject *)code, NULL, PP_KIND_PYTHON);
        if (UNLIKELY(p->lines) && (code->co_flags & GENERATOR_FLAGS)
            && PyFrame_GetLasti(frame) > first_resume_offset(p, code))
            line_resume_at(p, (PyObject *)code, PyFrame_GetLineNumber(frame), now_ticks(p));
        break;
    }
    case PyTrace_RETURN:
        leave(p, (uint64_t)(uintptr_t)pp_frame_code_borrowed(frame));
        break;
    case PyTrace_C_CALL:
        if (p->builtins && PyCFunction_Check(arg))
            enter(p, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml, arg, NULL,
                  PP_KIND_BUILTIN);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (p->builtins && PyCFunction_Check(arg))
            leave(p, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml);
        break;
    default:
        break;
    }
    return 0;
}

/* Line mode on 3.11: the C trace hook, for LINE events only. Frames of other
 * code have their line events switched off at their first event; calls and
 * returns are the profile hook's business. */
static int trace_callback(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    (void)arg;
    pp_profiler *p = (pp_profiler *)obj;
    if (UNLIKELY(!p->enabled || pp_tls.busy))
        return 0;
    if (what == PyTrace_LINE) {
        int64_t now = now_ticks(p);
        line_event(p, (PyObject *)pp_frame_code_borrowed(frame), PyFrame_GetLineNumber(frame),
                   1, now);
    }
    else if (what == PyTrace_CALL) {
        PyCodeObject *code = pp_frame_code_borrowed(frame);
        uint32_t fid = register_function(p, (uint64_t)(uintptr_t)code, (PyObject *)code, NULL,
                                         PP_KIND_PYTHON);
        if (fid == PP_NONE || !p->ftarget[fid])
            pp_frame_stop_line_events(frame);
    }
    return 0;
}

static int line_events_on(pp_profiler *p, PyObject *code, int on)
{
    (void)p; (void)code; (void)on;      /* the trace hook asks ftarget at every call */
    return 0;
}

/* threading.setprofile() target: installs the C hook on a new thread at its
 * first event, then handles that event. */
static PyObject *thread_bootstrap(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    pp_profiler *p = (pp_profiler *)self;
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_thread_bootstrap(frame, event, arg)");
        return NULL;
    }
    if (!p->enabled) {
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    PyEval_SetProfile(legacy_callback, self);
    static const char *names[] = {"call", "exception", "line", "return",
                                  "c_call", "c_exception", "c_return"};
    for (int what = 0; what < 7; what++)
        if (PyUnicode_CompareWithASCIIString(args[1], names[what]) == 0)
            legacy_callback(self, (PyFrameObject *)args[0], what, args[2]);
    Py_RETURN_NONE;
}

static PyMethodDef bootstrap_def = {
    "_thread_bootstrap", (PyCFunction)(void (*)(void))thread_bootstrap, METH_FASTCALL,
    "Installs pyprof's C profile hook on a thread started while profiling."};

/* threading.settrace() target in line mode: the same for the trace hook. */
static PyObject *thread_trace_bootstrap(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    pp_profiler *p = (pp_profiler *)self;
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_thread_trace_bootstrap(frame, event, arg)");
        return NULL;
    }
    PyEval_SetTrace(p->enabled ? trace_callback : NULL, p->enabled ? self : NULL);
    if (p->enabled && PyUnicode_CompareWithASCIIString(args[1], "call") == 0)
        trace_callback(self, (PyFrameObject *)args[0], PyTrace_CALL, args[2]);
    Py_RETURN_NONE;
}

static PyMethodDef trace_bootstrap_def = {
    "_thread_trace_bootstrap", (PyCFunction)(void (*)(void))thread_trace_bootstrap,
    METH_FASTCALL, "Installs pyprof's C trace hook on a thread started while line profiling."};

/* threading.setprofile / settrace (which = "profile" / "trace"). */
static int threading_imported(void)
{
    PyObject *mods = PyImport_GetModuleDict();                  /* borrowed */
    return mods && PyDict_GetItemString(mods, "threading") != NULL;
}

static int set_threading_hook(const char *which, PyObject *hook, PyObject **prev)
{
    if ((hook == NULL || hook == Py_None) && !threading_imported()) {
        if (prev)
            *prev = NULL;
        return 0;                       /* nothing to take back: no import for it */
    }
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL)
        return -1;
    if (prev) {
        *prev = PyObject_GetAttrString(threading, which[0] == 'p' ? "_profile_hook"
                                                                  : "_trace_hook");
        if (*prev == NULL)
            PyErr_Clear();
    }
    PyObject *r = PyObject_CallMethod(threading, which[0] == 'p' ? "setprofile" : "settrace",
                                      "O", hook ? hook : Py_None);
    Py_DECREF(threading);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* -------------------------- 3.11, builtins=False: PEP 523 frame evaluation
 *
 * Any profile function puts 3.11's eval loop on its tracing path (every
 * instruction unspecialised: 2-3x even on code without calls). Without C
 * functions to report, a frame-evaluation function sees every Python frame
 * (calls, generator resumes and throws) without that tax. Two costs, handled:
 * - CPython stops inlining Python-to-Python calls, so each call recurses on
 *   the C stack: near the end of a thread's C stack the hook steps aside (the
 *   previous evaluation function is restored until that frame returns), so a
 *   deep recursion that runs natively still runs; its deeper frames are then
 *   not recorded (counted in cstack_asides);
 * - no `tracing` flag protects pyprof's own work from re-entry: Python code it
 *   may run (a finalizer during a flush) sees pp_tls.busy and is not recorded.
 * Chains to the evaluation function installed before (a debugger's, a JIT's).
 */
static _PyFrameEvalFunction eval_prev;  /* NULL: CPython's default */
static int eval_aside_depth;            /* frames running with the hook stepped aside */

static inline PyObject *eval_next(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc)
{
    return eval_prev ? eval_prev(ts, f, exc) : _PyEval_EvalFrameDefault(ts, f, exc);
}

static PyObject *pp_eval_frame(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc);

COLD PyObject *eval_aside(pp_profiler *p, PyThreadState *ts, struct _PyInterpreterFrame *f,
                          int exc)
{
    PyInterpreterState *interp = PyThreadState_GetInterpreter(ts);
    p->cstack_asides++;
    if (eval_aside_depth++ == 0)
        _PyInterpreterState_SetEvalFrameFunc(interp, eval_prev ? eval_prev
                                                                : _PyEval_EvalFrameDefault);
    PyObject *r = eval_next(ts, f, exc);
    if (--eval_aside_depth == 0 && pp_active && pp_active->eval_mode)
        _PyInterpreterState_SetEvalFrameFunc(interp, pp_eval_frame);
    return r;
}

static PyObject *pp_eval_frame(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc)
{
    pp_profiler *p = pp_active;
    if (UNLIKELY(p == NULL || pp_tls.busy))
        return eval_next(ts, f, exc);
    pp_thread *th = current_thread(p);
    if (UNLIKELY(th == NULL))
        return eval_next(ts, f, exc);
    uintptr_t here = (uintptr_t)&th;
    if (UNLIKELY(here < th->cstack_guard))
        return eval_aside(p, ts, f, exc);
    PyCodeObject *code = pp_iframe_code(f);
    if (UNLIKELY(pp_iframe_creates_generator(f, code)))
        return eval_next(ts, f, exc);
    enter(p, (uint64_t)(uintptr_t)code, (PyObject *)code, NULL, PP_KIND_PYTHON);
    PyObject *r = eval_next(ts, f, exc);
    /* The frame may have disabled this profiler (or enabled another). */
    if (LIKELY(pp_active != NULL))
        leave(pp_active, (uint64_t)(uintptr_t)code);
    return r;
}

/* The frame-evaluation engine serves builtins=False with pyprof's own clock
 * (a user timer is Python code, which this hook would itself profile) where
 * the C stack's bounds are known. */
static int eval_mode_possible(pp_profiler *p)
{
    return !p->builtins && p->timer == NULL && pp_cstack_low() != 0;
}

static int install_eval(pp_profiler *p)
{
    (void)p;
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (cur != pp_eval_frame)
        eval_prev = cur == _PyEval_EvalFrameDefault ? NULL : cur;
    if (eval_aside_depth == 0)
        _PyInterpreterState_SetEvalFrameFunc(interp, pp_eval_frame);
    return 0;
}

static void remove_eval(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == pp_eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(interp, eval_prev ? eval_prev
                                                                : _PyEval_EvalFrameDefault);
}

static int remove_hooks(pp_profiler *p);

/* Line mode needs the trace hook, which only one tool can hold: refuse,
 * naming the holder, rather than silence a debugger or coverage.py. */
static int install_trace_hooks(pp_profiler *p)
{
    PyThreadState *me = PyThreadState_Get();
    if (pp_tstate_has_trace(me) && pp_tstate_traceobj(me) != (PyObject *)p) {
        PyObject *holder = pp_tstate_traceobj(me);
        PyErr_Format(PyExc_RuntimeError,
                     "pyprof: line profiling on Python 3.11 needs the trace hook, which is held "
                     "by %R (a debugger or coverage.py?)", holder ? holder : Py_None);
        return -1;
    }
    PyObject *boot = PyCFunction_New(&trace_bootstrap_def, (PyObject *)p);
    if (boot == NULL)
        return -1;
    Py_CLEAR(p->prev_trace_hook);
    int rc = set_threading_hook("trace", boot, &p->prev_trace_hook);
    Py_DECREF(boot);
    if (rc < 0)
        return -1;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (!pp_tstate_has_trace(ts) && _PyEval_SetTrace(ts, trace_callback, (PyObject *)p) < 0)
            return -1;
    }
    return 0;
}

/* threading.setprofile(our bootstrap), keeping the hook it had. */
static int hook_threading(pp_profiler *p)
{
    PyObject *boot = PyCFunction_New(&bootstrap_def, (PyObject *)p);
    if (boot == NULL)
        return -1;
    Py_CLEAR(p->prev_thread_hook);
    int rc = set_threading_hook("profile", boot, &p->prev_thread_hook);
    Py_DECREF(boot);
    return rc;
}

int pp_tracer_hook_threading(pp_profiler *p)
{
    if (!p->threading_pending)
        return 0;
    p->threading_pending = 0;
    return p->enabled && !p->eval_mode && !p->sampling ? hook_threading(p) : 0;
}

static int install_hooks(pp_profiler *p)
{
    p->eval_mode = !p->lines && eval_mode_possible(p);
    if (p->eval_mode)
        return install_eval(p);
    p->threading_pending = p->lazy_threading && !p->lines && !threading_imported();
    if (!p->threading_pending && hook_threading(p) < 0)
        return -1;
    if (p->lines && install_trace_hooks(p) < 0) {
        pp_err_state es;
        pp_err_save(&es);
        remove_hooks(p);
        pp_err_restore(&es);
        return -1;
    }
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (_PyEval_SetProfile(ts, legacy_callback, (PyObject *)p) < 0) {
            /* (an audit hook may refuse) never leave a hook with a borrowed p behind */
            pp_err_state es;
            pp_err_save(&es);
            remove_hooks(p);
            PyErr_Clear();
            pp_err_restore(&es);
            return -1;
        }
    }
    return 0;
}

static int remove_hooks(pp_profiler *p)
{
    if (p->eval_mode) {
        remove_eval();
        return 0;
    }
    int rc = 0;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (pp_tstate_profileobj(ts) == (PyObject *)p && _PyEval_SetProfile(ts, NULL, NULL) < 0)
            rc = -1;
    }
    p->threading_pending = 0;
    PyObject *prev = p->prev_thread_hook;
    p->prev_thread_hook = NULL;
    if (set_threading_hook("profile", prev, NULL) < 0)
        rc = -1;
    Py_XDECREF(prev);
    if (p->lines) {
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
             ts; ts = PyThreadState_Next(ts)) {
            if (pp_tstate_traceobj(ts) == (PyObject *)p && _PyEval_SetTrace(ts, NULL, NULL) < 0)
                rc = -1;
        }
        prev = p->prev_trace_hook;
        p->prev_trace_hook = NULL;
        if (set_threading_hook("trace", prev, NULL) < 0)
            rc = -1;
        Py_XDECREF(prev);
    }
    return rc;
}

#endif

/* ------------------------------------------------------ enable / disable */

int pp_tracer_enable(pp_profiler *p)
{
    if (p->enabled)
        return 0;
    if (pp_active != NULL && pp_active->background && pp_suspended == NULL && !p->background) {
        pp_profiler *bg = pp_active;
        if (pp_tracer_disable(bg) < 0)
            return -1;
        pp_suspended = (pp_profiler *)Py_NewRef((PyObject *)bg);
    }
    if (pp_active != NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "Another profiling tool is already active: a pyprof profiler is enabled; "
                        "disable it first");
        return -1;
    }
    p->gen = ++pp_gen_counter;
    p->fast = p->timer == NULL && pp_clock_kind == PP_CLOCK_TSC && !p->lines && !p->memory;
    pp_mem_frames = p->memory && !p->memory_only && !p->sampling;     /* call tracing only */
    int timeline = p->timeline && !p->memory_only && !p->sampling;
    pp_pop_hooks = (pp_mem_frames ? PP_POP_MEM : 0) | (timeline ? PP_POP_TIMELINE : 0);
    if (timeline) {
        /* a call of exactly the minimum is kept: round the threshold up */
        double ticks = (double)p->tl_min_ns * pp_tracer_ticks_per_ns(p);
        int64_t min = (int64_t)ticks;
        p->tl_min_ticks = pp_tl_min_ticks = min + ((double)min < ticks);
        uint64_t reserved = 0;
        for (pp_thread *ts = p->threads; ts; ts = ts->next) {
            ts->t.tl.on = 1;
            reserved += ts->t.tl.cap;
        }
        pp_tl_left = p->tl_max > reserved ? p->tl_max - reserved : 0;
    }
    pp_index_clear(&p->sites);
    memset(p->c_sites, 0, sizeof p->c_sites);
    if (p->enable_count++ == 0) {
        p->start_wall_ns = pp_clock_realtime_ns();
        p->start_mono_ns = pp_clock_monotonic_ns();
        /* the timeline's origin, the same instant in the profiler's clock (a
         * user timer is Python code: asked only when a timeline needs it) */
        p->start_ticks = p->timer == NULL ? pp_clock_now() : timeline ? now_ticks(p) : 0;
    }
    p->enabled_since_ns = pp_clock_monotonic_ns();
    if (p->flush_interval_ns)
        p->next_flush_ns = p->enabled_since_ns + p->flush_interval_ns;
    pp_active = p;
    p->enabled = 1;
    int rc = p->memory_only ? 0
             : p->sampling ? pp_sampler_start(p, &p->sopts) : install_hooks(p);
    if (rc == 0 && p->memory && pp_memory_start(p) < 0) {
        if (!p->memory_only)
            (void)(p->sampling ? pp_sampler_stop(p) : remove_hooks(p));
        rc = -1;
    }
    if (rc < 0) {
        p->enabled = 0;
        pp_active = NULL;
        return -1;
    }
    return 0;
}

int pp_tracer_disable(pp_profiler *p)
{
    if (p->in_timer) {
        PyErr_SetString(PyExc_RuntimeError, "cannot disable profiler in external timer");
        return -1;
    }
    if (!p->enabled)
        return 0;
    p->enabled = 0;
    if (pp_active == p)
        pp_active = NULL;
    p->enabled_ns += pp_clock_monotonic_ns() - p->enabled_since_ns;
    int rc = p->memory && pp_memory_stop(p) < 0 ? -1 : 0;
    if (!p->memory_only && (p->sampling ? pp_sampler_stop(p) : remove_hooks(p)) < 0)
        rc = -1;
    /* Calls still open end now, as cProfile's flush_unmatched does. */
    int64_t now = now_ticks(p);
    for (pp_thread *ts = p->threads; ts; ts = ts->next)
        pp_tracer_stop_all(ts, &ts->t, &ts->st, now, p->lines);
    if (rc == 0 && p->oom) {
        p->oom = 0;
        PyErr_SetString(PyExc_MemoryError, "pyprof: out of memory while profiling");
        rc = -1;
    }
    if (pp_suspended != NULL && pp_suspended != p && pp_active == NULL) {
        pp_profiler *bg = pp_suspended;
        pp_suspended = NULL;
        pp_err_state es;
        pp_err_save(&es);
        if (pp_tracer_enable(bg) < 0)
            PyErr_WriteUnraisable((PyObject *)bg);
        pp_err_restore(&es);
        Py_DECREF(bg);
    }
    return rc;
}

uint32_t pp_tracer_register_code(pp_profiler *p, PyObject *code)
{
    return register_function(p, (uint64_t)(uintptr_t)code, code, NULL, PP_KIND_PYTHON);
}

uint32_t pp_tracer_register_ghost(pp_profiler *p, PyObject *code)
{
    PyCodeObject *co = (PyCodeObject *)code;
    PyObject *names = Py_BuildValue("(OOOi)", co->co_filename, co->co_name, co->co_qualname,
                                    co->co_firstlineno);
    if (names == NULL) {
        PyErr_Clear();
        return PP_NONE;
    }
    /* Keyed apart from code pointers: the address will be reused. */
    uint32_t fid = register_function(p, (1ull << 63) | ++p->ghosts, names, NULL, PP_KIND_GHOST);
    Py_DECREF(names);
    return fid;
}

static pp_thread *sampled_thread(pp_profiler *p, uint32_t tid, uint64_t ident);

uint32_t pp_tracer_sample_thread(pp_profiler *p, uint32_t tid, uint64_t ident)
{
    pp_thread *ts = sampled_thread(p, tid, ident);
    if (ts == NULL)
        return PP_NONE;
    ts->events++;
    return ts->index;
}

/* The sampler's helper sees every Python thread soon after it starts: its
 * name is read then, while the thread is alive (a short-lived thread may be
 * gone by the time its samples are drained). */
void pp_tracer_note_thread(pp_profiler *p, uint32_t tid, uint64_t ident)
{
    (void)sampled_thread(p, tid, ident);
}

static pp_thread *sampled_thread(pp_profiler *p, uint32_t tid, uint64_t ident)
{
    uint64_t key = (uint64_t)tid + 1;
    uint32_t index = pp_index_get(&p->native_threads, key);
    pp_thread *ts;
    if (index != PP_NONE) {
        for (ts = p->threads; ts && ts->index != index; ts = ts->next)
            ;
    }
    else {
        ts = calloc(1, sizeof *ts);
        if (ts == NULL || pp_tables_init(&ts->t) < 0) {
            free(ts);
            return NULL;
        }
        ts->ident = (unsigned long)ident;
        ts->native_id = tid;
        ts->name_tries = ident ? 8 : 0;
        ts->index = p->nthreads++;
        *p->threads_tail = ts;
        p->threads_tail = &ts->next;
        if (pp_index_put(&p->native_threads, key, ts->index) < 0)
            return NULL;
    }
    if (ts && ts->name_tries && ts->name == NULL)
        resolve_thread_name(ts);
    return ts;
}

double pp_tracer_ticks_per_ns(pp_profiler *p)
{
    if (p->timer == NULL)
        return 1.0 / pp_clock_ns_per_tick();
    if (p->timeunit > 0.0)
        return 1e-9 / p->timeunit;
    return 1.0;                 /* a float timer's seconds are kept as integer ns */
}

pp_profiler *pp_tracer_active(void)
{
    return pp_active;
}

uint32_t pp_tracer_add_line_target(pp_profiler *p, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "a line target must be a code object");
        return PP_NONE;
    }
    uint32_t fid = register_function(p, (uint64_t)(uintptr_t)code, code, NULL, PP_KIND_PYTHON);
    if (fid == PP_NONE) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return PP_NONE;
    }
    mark_line_target(p, fid);
    return fid;
}

void pp_tracer_clear(pp_profiler *p)
{
    pp_samples_clear(&p->samples);
    pp_cntbase_free(&p->step_samples);
    pp_cntbase_free(&p->step_memory);
    pp_memory_free(p);
    for (pp_thread *ts = p->threads; ts; ts = ts->next) {
        pp_tables_clear(&ts->t);
        pp_stepbase_free(&ts->step);
        ts->st.depth = 0;
        ts->events = 0;
        ts->flush_at = 0;
    }
}

/* Every thread record and its tables. */
static void free_threads(pp_profiler *p)
{
    pp_thread *ts = p->threads;
    while (ts) {
        pp_thread *next = ts->next;
        pp_tables_free(&ts->t);
        pp_stack_free(&ts->st);
        pp_stepbase_free(&ts->step);
        Py_XDECREF(ts->name);
        free(ts);
        ts = next;
    }
    p->threads = NULL;
    p->threads_tail = &p->threads;
    p->nthreads = 0;
}

/* In a forked child, with the profiler disabled (GIL held; the child's only
 * thread): forget what the parent recorded, its thread records included (the
 * other threads do not exist here; their TLS went with them), so that the
 * child's capture holds the child's work only and the parent's counts are not
 * written twice. Function ids stay registered (their counts are gone). The
 * next enable starts a new generation: this thread re-attaches. */
int pp_tracer_after_fork(pp_profiler *p)
{
    if (p->enabled) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof: reset after fork needs a disabled profiler");
        return -1;
    }
    pp_tracer_clear(p);
    free_threads(p);
    pp_index_clear(&p->native_threads);
    pp_tls.gen = 0;
    pp_tls.ts = NULL;
    pp_tls.paused = NULL;
    p->enable_count = 0;            /* the next enable sets the start times anew */
    p->enabled_ns = 0;
    p->cstack_asides = 0;
    p->oom = 0;
    p->flush_failed = 0;
    p->owner_pid = (long)getpid();
    return 0;
}

void pp_tracer_free(pp_profiler *p)
{
    pp_memory_free(p);
    free_threads(p);
    for (uint32_t i = 0; i < p->nfun; i++)
        Py_DECREF(p->fobj[i]);
    free(p->fobj);
    free(p->fkind);
    free(p->ftarget);
    free(p->fresume);
    p->fresume = NULL;
    p->fobj = NULL;
    p->fkind = NULL;
    p->ftarget = NULL;
    p->nfun = p->capfun = 0;
    pp_index_free(&p->reg);
    pp_index_free(&p->sites);
    pp_index_free(&p->native_threads);
    pp_samples_free(&p->samples);
    pp_cntbase_free(&p->step_samples);
    pp_cntbase_free(&p->step_memory);
    Py_CLEAR(p->prev_thread_hook);
    Py_CLEAR(p->prev_trace_hook);
    Py_CLEAR(p->line_filter);
    Py_CLEAR(p->sample_root);
    Py_CLEAR(p->sample_program);
    Py_CLEAR(p->meta);
    Py_CLEAR(p->records);
    free(p->flush_path);
    p->flush_path = NULL;
}

int pp_tracer_module_init(PyObject *module)
{
    (void)module;
    pp_clock_init();
#if PP_USE_MONITORING
    if (PyType_Ready(&pp_callback_type) < 0)
        return -1;
#endif
    return 0;
}
