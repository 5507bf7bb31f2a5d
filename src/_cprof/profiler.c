/* profiler.c — which engines run and when (see profiler.h). GIL held.
 *
 * Enable: a new generation of thread records, the run's clock origins, then
 * the tracer (or the sampler, or neither in memory mode), then the memory
 * hooks. Disable: the reverse, then the calls still open end now. A
 * background profiler (@profile's, in a plain run) steps aside while an
 * explicit one runs, and resumes after it.
 * Fork: the engines' helper threads stop in an os.register_at_fork `before`
 * hook and start again in the parent once CPython has counted its threads.
 * Before a capture reads the run, the engines are settled here (settle) and
 * what it reads from them is gathered (input_gather): capture only formats.
 * Never: per-event work; formats (capture.c writes).
 */
#include "profiler.h"
#include "gcwatch.h"

#include "clock.h"
#include "frames.h"

#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t pp_gen_counter;
static pp_profiler *pp_active;      /* at most one enabled profiler per process */
static pp_profiler *pp_suspended;   /* the background one under it (strong) */

/* ------------------------------------------------------------- fork */

/* CPython 3.12+ warns at os.fork() when /proc/self/stat counts more than one
 * thread. 3.12 counts before the after_in_parent hooks, 3.13 (before
 * gh-137109) after them: there os.fork / os.forkpty are wrapped so that the
 * helpers start again once the original returns. */

static int fork_depth;                      /* forks between before and after */
static _Thread_local int in_wrapper;        /* this thread is in our os.fork */

/* pthread_join returns before the kernel drops the thread from the count:
 * the exiting thread may be kept off a CPU in between, tens of ms on a
 * loaded machine (20 ms was not always enough: CPython's warning came). */
static void wait_gone(pid_t tid)
{
    if (tid <= 0)
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld", (long)tid);
    struct timespec ts = {0, 100000};
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < 20000 && access(path, F_OK) == 0; i++)
        nanosleep(&ts, NULL);
    Py_END_ALLOW_THREADS
}

static void resume_helpers(void)
{
    pp_sampler_helper_resume();
    pp_memory_curve_resume();
}

static PyObject *fork_before(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    fork_depth++;
    pid_t tids[2];
    int n = pp_sampler_helper_pause(tids);
    pid_t b = pp_memory_curve_pause();
    for (int i = 0; i < n; i++)
        wait_gone(tids[i]);
    wait_gone(b);
    Py_RETURN_NONE;
}

static PyObject *fork_after_parent(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    if (fork_depth > 0)
        fork_depth--;
    if (fork_depth == 0 && !in_wrapper)
        resume_helpers();
    Py_RETURN_NONE;
}

static PyObject *fork_after_child(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    fork_depth = 0;                         /* the other forking threads are gone */
    Py_RETURN_NONE;
}

/* self: the original os.fork or os.forkpty. */
static PyObject *fork_wrapper(PyObject *orig, PyObject *unused)
{
    (void)unused;
    pid_t parent = getpid();
    in_wrapper++;
    PyObject *r = PyObject_CallNoArgs(orig);
    in_wrapper--;
    if (getpid() == parent && !in_wrapper && fork_depth == 0)
        resume_helpers();
    return r;
}

static PyMethodDef fork_defs[] = {
    {"_pyprof_fork_before", fork_before, METH_NOARGS, NULL},
    {"_pyprof_fork_after_parent", fork_after_parent, METH_NOARGS, NULL},
    {"_pyprof_fork_after_child", fork_after_child, METH_NOARGS, NULL},
    {"fork", fork_wrapper, METH_NOARGS,
     "fork()\nos.fork, under pyprof: its helper threads stop for the fork."},
    {"forkpty", fork_wrapper, METH_NOARGS,
     "forkpty()\nos.forkpty, under pyprof: its helper threads stop for the fork."},
};

static int wrap_os(PyObject *os, PyMethodDef *def)
{
    PyObject *orig = PyObject_GetAttrString(os, def->ml_name);
    if (orig == NULL) {
        PyErr_Clear();                      /* no forkpty on this platform */
        return 0;
    }
    PyObject *mod = PyUnicode_FromString("posix");
    PyObject *w = mod ? PyCFunction_NewEx(def, orig, mod) : NULL;
    int rc = w ? PyObject_SetAttrString(os, def->ml_name, w) : -1;
    Py_XDECREF(w);
    Py_XDECREF(mod);
    Py_DECREF(orig);
    return rc;
}

/* Once per process (a child inherits them), when a helper thread first runs. */
static int install_fork_hooks(void)
{
    static int done;
    if (done)
        return 0;
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL)
        return -1;
    PyObject *reg = PyObject_GetAttrString(os, "register_at_fork");
    PyObject *b = PyCFunction_New(&fork_defs[0], NULL);
    PyObject *ap = PyCFunction_New(&fork_defs[1], NULL);
    PyObject *ac = PyCFunction_New(&fork_defs[2], NULL);
    PyObject *kw = reg && b && ap && ac
                   ? Py_BuildValue("{sOsOsO}", "before", b, "after_in_parent", ap,
                                   "after_in_child", ac) : NULL;
    PyObject *args = kw ? PyTuple_New(0) : NULL;
    PyObject *r = args ? PyObject_Call(reg, args, kw) : NULL;
    int rc = r ? 0 : -1;
    if (rc == 0 && PP_FORK_COUNTS_AFTER_HOOKS)
        rc = wrap_os(os, &fork_defs[3]) < 0 || wrap_os(os, &fork_defs[4]) < 0 ? -1 : 0;
    Py_XDECREF(r);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_XDECREF(ac);
    Py_XDECREF(ap);
    Py_XDECREF(b);
    Py_XDECREF(reg);
    Py_DECREF(os);
    if (rc == 0)
        done = 1;
    return rc;
}

int pp_profiler_module_init(void)
{
    return pp_tracer_module_init(offsetof(pp_profiler, run.tr));
}

int pp_profiler_init(pp_profiler *p)
{
    pp_run *r = &p->run;
    PyObject *self = (PyObject *)p;
    pp_threads_init(&r->threads);
    pp_tracer_init(&r->tr, self, &r->reg, &r->threads);
    r->tr.subcalls = r->tr.builtins = r->tr.paths = 1;
    r->sm.warn_replaced = 1;
    r->mem.reg = &r->reg;
    if (pp_index_init(&r->reg.idx, 1024) < 0 || pp_index_init(&r->tr.sites, 1024) < 0
        || pp_index_init(&r->threads.native, 64) < 0
        || pp_sampling_init(&r->sm, self, &r->reg, &r->threads) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------ periodic flush */

static void flush_impl(pp_profiler *p)
{
    int64_t mono = pp_clock_monotonic_ns();
    if (mono < p->next_flush_ns || (long)getpid() != p->owner_pid)
        return;
    p->next_flush_ns = mono + p->flush_interval_ns;
    char err[256];
    pp_err_state es;
    pp_err_save(&es);
    pp_tls.busy++;              /* a finalizer run by the GC here is not the program's call */
    if (pp_profiler_write(p, p->flush_path, 0, err, sizeof err) < 0 && !p->flush_failed) {
        p->flush_failed = 1;
        fprintf(stderr, "pyprof: periodic flush to %s failed: %s\n", p->flush_path, err);
    }
    pp_tls.busy--;
    PyErr_Clear();
    pp_err_restore(&es);
}

/* The engines' periodic work: write the capture if one is due. */
static void maybe_flush(void *arg)
{
    int was = pp_memory_self_begin();
    flush_impl((pp_profiler *)arg);
    pp_memory_self_end(was);
}

void pp_profiler_flush_changed(pp_profiler *p)
{
    void (*fn)(void *) = p->flush_interval_ns ? maybe_flush : NULL;
    p->run.tr.periodic = p->run.sm.periodic = fn;
    p->run.tr.periodic_arg = p->run.sm.periodic_arg = p;
}

/* ------------------------------------------------------ enable / disable */

int pp_profiler_enable(pp_profiler *p)
{
    pp_run *r = &p->run;
    if (r->enabled)
        return 0;
    if (pp_active != NULL && pp_active->run.tr.background && pp_suspended == NULL
        && !r->tr.background) {
        pp_profiler *bg = pp_active;
        if (pp_profiler_disable(bg) < 0)
            return -1;
        pp_suspended = (pp_profiler *)Py_NewRef((PyObject *)bg);
    }
    if (pp_active != NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "Another profiling tool is already active: a pyprof profiler is enabled; "
                        "disable it first");
        return -1;
    }
    int tracing = !r->memory_only && !r->sampling;
    r->threads.gen = ++pp_gen_counter;
    r->threads.timeline = r->tr.timeline;
    r->tr.memory = r->memory && tracing;        /* peaks per activation: call tracing only */
    pp_threads_mem_frames(0);
    if (r->enable_count++ == 0) {
        r->start_wall_ns = pp_clock_realtime_ns();
        r->start_mono_ns = pp_clock_monotonic_ns();
        /* the timeline's origin, the same instant in the profiler's clock (a
         * user timer is Python code: asked only when a timeline needs it) */
        r->start_ticks = r->tr.timer == NULL ? pp_clock_now()
                         : r->tr.timeline && tracing ? pp_tracer_now(&r->tr) : 0;
    }
    r->enabled_since_ns = pp_clock_monotonic_ns();
    if (p->flush_interval_ns)
        p->next_flush_ns = r->enabled_since_ns + p->flush_interval_ns;
    pp_profiler_flush_changed(p);
    pp_active = p;
    if ((r->sampling || r->memory) && install_fork_hooks() < 0)
        PyErr_Clear();                      /* then a fork warns, nothing worse */
    pp_threads_activate(&r->threads);
    r->enabled = 1;
    /* the collector's watch first: it may import gc, which no engine should see */
    int rc = r->gc && pp_gcwatch_start(&r->gcstats, tracing ? &r->tr : NULL) < 0 ? -1 : 0;
    if (rc == 0)
        rc = r->memory_only ? 0 : r->sampling ? pp_sampler_start(&r->sm) : pp_tracer_start(&r->tr);
    if (rc == 0 && r->memory && pp_memory_start(&r->mem) < 0) {
        if (!r->memory_only)
            (void)(r->sampling ? pp_sampler_stop(&r->sm) : pp_tracer_stop(&r->tr));
        rc = -1;
    }
    if (rc < 0 && r->gc) {              /* keeps the engine's error */
        pp_err_state err;
        pp_err_save(&err);
        pp_gcwatch_stop();
        pp_err_restore(&err);
    }
    if (rc < 0) {
        r->enabled = 0;
        pp_active = NULL;
        pp_threads_activate(NULL);
        return -1;
    }
    return 0;
}

int pp_profiler_disable(pp_profiler *p)
{
    pp_run *r = &p->run;
    if (r->tr.in_timer) {
        PyErr_SetString(PyExc_RuntimeError, "cannot disable profiler in external timer");
        return -1;
    }
    if (!r->enabled)
        return 0;
    r->enabled = 0;
    if (pp_active == p) {
        pp_active = NULL;
        pp_threads_activate(NULL);
    }
    if (r->gc)
        pp_gcwatch_stop();
    int rc = r->memory && pp_memory_stop(&r->mem) < 0 ? -1 : 0;
    if (!r->memory_only && (r->sampling ? pp_sampler_stop(&r->sm) : pp_tracer_stop(&r->tr)) < 0)
        rc = -1;
    /* the window holds every engine's run: a sampled thread's CPU in it is at
     * most its length */
    r->enabled_ns += pp_clock_monotonic_ns() - r->enabled_since_ns;
    /* Calls still open end now, as cProfile's flush_unmatched does. */
    pp_tracer_end_calls(&r->tr);
    if (rc == 0 && (r->tr.oom || r->threads.oom)) {
        r->tr.oom = r->threads.oom = 0;
        PyErr_SetString(PyExc_MemoryError, "pyprof: out of memory while profiling");
        rc = -1;
    }
    if (pp_suspended != NULL && pp_suspended != p && pp_active == NULL) {
        pp_profiler *bg = pp_suspended;
        pp_suspended = NULL;
        pp_err_state es;
        pp_err_save(&es);
        if (pp_profiler_enable(bg) < 0)
            PyErr_WriteUnraisable((PyObject *)bg);
        pp_err_restore(&es);
        Py_DECREF(bg);
    }
    return rc;
}

pp_profiler *pp_profiler_active(void)
{
    return pp_active;
}

int pp_profiler_disable_all(void)
{
    int rc = 0;
    for (int i = 0; i < 2 && pp_active != NULL; i++) {  /* the active one, then the background */
        pp_profiler *p = pp_active;
        rc |= pp_profiler_disable(p) < 0;
        /* a capture flushed while it ran (flush_to) ends final, with the whole run */
        char err[256];
        if (p->flush_path && (long)getpid() == p->owner_pid
            && pp_profiler_write(p, p->flush_path, 1, err, sizeof err) < 0) {
            fprintf(stderr, "pyprof: the last flush to %s failed: %s\n", p->flush_path, err);
            PyErr_Clear();
        }
    }
    return rc ? -1 : 0;
}

/* A detach (docs/attach.md): with no profiler enabled or suspended, what the
 * engines keep installed between runs is given back. The tracer keeps
 * nothing (stop frees the tool id and unsets the hooks). */
int pp_profiler_release(int *signal_done, int *memory_done)
{
    if (pp_active != NULL || pp_suspended != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof: a profiler is still enabled");
        return -1;
    }
    *signal_done = pp_sampler_release_signal() == 1;
    *memory_done = pp_memory_uninstall() == 1;
    if (*memory_done && pp_memory_unpatch_numpy() < 0)
        *memory_done = 0;
    return 0;
}

void pp_profiler_pause_thread(pp_profiler *p, int paused)
{
    if (p->run.enabled)
        pp_threads_pause(&p->run.threads, paused);
}

int pp_profiler_thread_paused(pp_profiler *p)
{
    return p->run.enabled && pp_threads_paused(&p->run.threads);
}

/* ------------------------------------------------------ data */

void pp_profiler_clear(pp_profiler *p)
{
    pp_run *r = &p->run;
    pp_samples_clear(&r->sm.samples);
    pp_tasks_clear(&r->sm.tasks);
    r->sm.ndebts = 0;
    pp_tracer_coro_clear(&r->tr);
    pp_cntbase_free(&r->step_samples);
    pp_cntbase_free(&r->step_memory);
    pp_memory_free(&r->mem);
    pp_threads_clear(&r->threads);
}

/* In a forked child, with the profiler disabled (GIL held; the child's only
 * thread): forget what the parent recorded, its thread records included, so
 * that the child's capture holds the child's work only and the parent's
 * counts are not written twice. Function ids stay registered (their counts
 * are gone). The next enable starts a new generation: this thread re-attaches. */
int pp_profiler_after_fork(pp_profiler *p)
{
    pp_run *r = &p->run;
    if (r->enabled) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof: reset after fork needs a disabled profiler");
        return -1;
    }
    pp_profiler_clear(p);
    pp_threads_after_fork(&r->threads);
    r->enable_count = 0;            /* the next enable sets the start times anew */
    r->enabled_ns = 0;
    r->tr.cstack_asides = 0;
    r->tr.oom = r->threads.oom = 0;
    p->flush_failed = 0;
    p->owner_pid = (long)getpid();
    return 0;
}

void pp_profiler_free(pp_profiler *p)
{
    pp_run *r = &p->run;
    pp_memory_free(&r->mem);
    pp_threads_free(&r->threads);
    pp_registry_free(&r->reg);
    pp_tracer_free(&r->tr);
    pp_index_free(&r->threads.native);
    pp_sampling_free(&r->sm);
    pp_cntbase_free(&r->step_samples);
    pp_cntbase_free(&r->step_memory);
    Py_CLEAR(r->meta);
    Py_CLEAR(r->records);
    free(p->flush_path);
    p->flush_path = NULL;
}

int pp_profiler_hook_threading(pp_profiler *p)
{
    pp_sampler_hook_threading(&p->run.sm);
    return pp_tracer_hook_threading(&p->run.tr);
}

/* ---------------------------------------------------------- captures */

/* What the engines still hold goes where capture reads it. */
static void settle(pp_run *r)
{
    if (r->sampling)
        pp_sampler_drain(&r->sm);
}

/* The interpreter mechanism in use (or last used). */
static const char *hook_name(const pp_run *r)
{
    if (r->memory_only)
        return "PyMem_SetAllocator";
    if (r->sampling)
        return pp_sampler_hook();
    return pp_tracer_hook_name(&r->tr);
}

/* A thread's tables as if its calls still open ended at `now`: a copy,
 * leaving the live state untouched. -1 when memory runs out. */
static int tables_ended_at(const pp_run *r, const pp_thread *ts, int64_t now, pp_tables *copy)
{
    pp_stack st = {0};
    if (pp_tables_copy(copy, &ts->t) < 0)
        return -1;
    st.f = malloc(ts->st.depth * sizeof(pp_frame));
    if (st.f == NULL) {
        pp_tables_free(copy);
        return -1;
    }
    memcpy(st.f, ts->st.f, ts->st.depth * sizeof(pp_frame));
    st.depth = st.cap = ts->st.depth;
    st.mem_cur = ts->st.mem_cur;
    st.mem_alloc = ts->st.mem_alloc;
    st.mem_blocks = ts->st.mem_blocks;
    st.mem_pending = ts->st.mem_pending;
    st.mem_pending_base = ts->st.mem_pending_base;
    /* C code's bytes set aside now (its thread without the GIL): read, left there */
    atomic_store(&st.aside_net, atomic_load(&ts->st.aside_net));
    atomic_store(&st.aside_hw, atomic_load(&ts->st.aside_hw));
    atomic_store(&st.aside_alloc, atomic_load(&ts->st.aside_alloc));
    atomic_store(&st.aside_blocks, atomic_load(&ts->st.aside_blocks));
    atomic_store(&st.aside, atomic_load(&ts->st.aside));
    st.line_cost = ts->st.line_cost;
    pp_tracer_stop_all(copy, &st, now, r->tr.lines);
    pp_stack_free(&st);
    return 0;
}

typedef struct {
    pp_snapin in;
    pp_tables *copies;          /* per thread: those in.tables points to */
} snapshot_input;

static void input_free(snapshot_input *s)
{
    for (uint32_t i = 0; i < s->in.nthreads; i++)
        if (s->in.tables[i] == &s->copies[i])
            pp_tables_free(&s->copies[i]);
    free(s->copies);
    free((void *)s->in.tables);
    free(s->in.coro_open);
    free(s->in.live);
    free(s->in.curve);
    if (s->in.have_stacks)
        pp_memstacks_free(&s->in.stacks);
}

/* Everything a capture reads from the engines, at this instant (settled
 * first); for a step mark (steps) only what it counts: the threads' tables
 * and the live memory rows. ns_per_tick: 0 for the clock's own calibration
 * now. -1 with an exception set. */
static int input_gather(pp_run *r, int include_open, int steps, double ns_per_tick,
                        snapshot_input *s)
{
    memset(s, 0, sizeof *s);
    settle(r);
    pp_snapin *in = &s->in;
    in->include_open = include_open;
    int coros = !steps && !r->sampling && !r->memory_only && r->tr.coros.nfid;
    int tasks = !steps && ((r->sampling && r->sm.opts.async)
                           || (!r->sampling && !r->memory_only && r->tr.asyncio));
    /* read only when used: a user timer is Python code */
    in->now = include_open || coros || tasks ? pp_tracer_now(&r->tr) : 0;
    in->ns_per_tick = r->tr.timer ? 1.0 : ns_per_tick > 0 ? ns_per_tick : pp_clock_ns_per_tick();
    in->hook = hook_name(r);
    uint32_t n = 0;
    for (pp_thread *ts = r->threads.head; ts; ts = ts->next)
        n++;
    in->tables = calloc(n ? n : 1, sizeof *in->tables);
    s->copies = calloc(n ? n : 1, sizeof *s->copies);
    if (in->tables == NULL || s->copies == NULL)
        goto oom;
    for (pp_thread *ts = r->threads.head; ts; ts = ts->next, in->nthreads++) {
        uint32_t i = in->nthreads;
        if (!include_open || ts->st.depth == 0) {
            in->tables[i] = &ts->t;
            continue;
        }
        if (tables_ended_at(r, ts, in->now, &s->copies[i]) < 0)
            goto oom;
        in->tables[i] = &s->copies[i];
    }
    if (coros) {
        in->coro_open = calloc(r->tr.coros.nfid, sizeof *in->coro_open);
        if (in->coro_open == NULL)
            goto oom;
        pp_tracer_coro_open_wall(&r->tr, in->now, in->coro_open, r->tr.coros.nfid);
    }
    if (r->memory && r->enabled && pp_memory_recording()) {
        /* resolved before the names are written: it may register functions */
        if (pp_memory_rows(&r->mem, &in->live, &in->nlive, &in->live_info) < 0)
            goto fail;
        if (steps)
            return 0;
        in->curve = pp_memory_curve(&r->mem, &in->ncurve);
        if (pp_memory_stacks(&r->mem, &in->stacks) == 0)
            in->have_stacks = 1;
        else
            PyErr_Clear();
        pp_memory_rss(&in->rss_end, &in->rss_peak);
    }
    if (r->sampling && !steps) {
        pp_sampler_get_info(&in->si);
        in->tasks_named = pp_tasks_named(&r->sm.tasks);
    }
    return 0;
oom:
    PyErr_NoMemory();
fail:
    input_free(s);
    return -1;
}

/* steps compare snapshots: one calibration for all of them (module.c) */
PyObject *pp_profiler_snapshot(pp_profiler *p, int flags)
{
    int was = pp_memory_self_begin();       /* pyprof's allocations, not the program's */
    snapshot_input s;
    PyObject *blob = NULL;
    if (input_gather(&p->run, flags & PP_SNAP_OPEN, 0, p->run.snap_ns_per_tick, &s) == 0) {
        blob = pp_capture_snapshot(&p->run, flags, &s.in);
        input_free(&s);
    }
    pp_memory_self_end(was);
    return blob;
}

PyObject *pp_profiler_step_counters(pp_profiler *p, int peek)
{
    int was = pp_memory_self_begin();
    snapshot_input s;
    PyObject *rows = NULL;
    if (input_gather(&p->run, 1, 1, 0.0, &s) == 0) {
        rows = pp_capture_step_counters(&p->run, peek, &s.in);
        input_free(&s);
    }
    pp_memory_self_end(was);
    return rows;
}

int pp_profiler_write(pp_profiler *p, const char *path, int final, char *err, size_t errlen)
{
    int was = pp_memory_self_begin();
    snapshot_input s;
    int rc = -1;
    if (input_gather(&p->run, 1, 0, p->run.snap_ns_per_tick, &s) == 0) {
        rc = pp_capture_write(&p->run, &s.in, path, final, err, errlen);
        input_free(&s);
    }
    else {
        snprintf(err, errlen, "snapshot failed (out of memory)");
    }
    pp_memory_self_end(was);
    return rc;
}
