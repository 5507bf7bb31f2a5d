/* tracer_coro.c — coroutine-aware numbers of function tracing (tracer.h).
 *
 * A tracer counts each resume of a coroutine as a call, as cProfile does:
 * its time is the time it ran. What it does not see is the coroutine's wall
 * time, from its first start to its end, which a suspended coroutine spends
 * awaiting. Owns pp_coros: each coroutine open since its first start, keyed
 * by the address of its frame (held by the coroutine object, so stable while
 * it lives), and per function the instances started and ended and the wall
 * time of the ended ones. A coroutine closed without an event (CPython 3.12+
 * closes one suspended outside any try block silently) stays open until a
 * new coroutine's frame takes its address: it ends then, at its last
 * suspension.
 * Runs on the tracer's event paths for CO_COROUTINE code only, GIL held.
 * Never: calls Python code; touches non-coroutine calls (the back-ends test
 * the code's flags before calling here).
 */
#include "tracer_hot.h"
#include "asyncio_task.h"

#include <stdlib.h>
#include <string.h>

#define MAX_OPEN (1u << 22)     /* coroutines followed at once, at most */
#define MAX_TASKS (1u << 20)    /* task rows, at most */
#define MAX_STEPS (1u << 22)    /* timeline: task steps kept, at most */

/* asyncio on: if the coroutine starting in `frame` is the current task's
 * own coroutine, a task row (its index + 1), else 0. Calls C only:
 * _asyncio.current_task() and the C Task's getters. */
static uint32_t task_row(pp_tracer *p, uintptr_t frame, uint32_t coro_fid, int64_t now)
{
    pp_coros *c = &p->coros;
    PyObject *gen = pp_frames_owner(frame);
    if (gen == NULL || c->ntasks >= MAX_TASKS)
        return 0;
    pp_err_state es;
    pp_err_save(&es);
    if (c->current_task == NULL) {
        /* (_asyncio._get_running_loop, _asyncio._current_tasks): None without a
         * loop (no exception raised per coroutine), the loop's running task */
        PyObject *name = PyUnicode_FromString("_asyncio");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;     /* not imported: no task */
        PyObject *get = mod ? pp_attr(mod, "_get_running_loop") : NULL;
        PyObject *cur = mod ? pp_attr(mod, "_current_tasks") : NULL;
        if (get && cur && PyDict_Check(cur))
            c->current_task = PyTuple_Pack(2, get, cur);
        Py_XDECREF(get);
        Py_XDECREF(cur);
        Py_XDECREF(mod);
        Py_XDECREF(name);
    }
    uint32_t row = 0;
    PyObject *task = NULL;
    if (c->current_task) {
        PyObject *loop = PyObject_CallNoArgs(PyTuple_GET_ITEM(c->current_task, 0));
        task = loop && loop != Py_None
               ? Py_XNewRef(PyDict_GetItem(PyTuple_GET_ITEM(c->current_task, 1), loop)) : NULL;
        Py_XDECREF(loop);
    }
    PyObject *coro = task && task != Py_None ? pp_attr(task, "_coro") : NULL;
    if (coro == gen) {
        PyObject *name = pp_task_name(task);
        PyObject *label = name ? PyUnicode_FromFormat("<task %U>", name) : NULL;
        PyObject *empty = PyUnicode_FromString("");
        Py_XDECREF(name);
        uint32_t fid = label && empty ? pp_registry_named(p->reg, empty, label, 0) : PP_NONE;
        Py_XDECREF(label);
        Py_XDECREF(empty);
        if (fid != PP_NONE && c->ntasks == c->captasks) {
            uint32_t cap = c->captasks ? c->captasks * 2 : 64;
            pp_tracer_task *t = realloc(c->tasks, cap * sizeof *t);
            if (t != NULL) {
                c->tasks = t;
                c->captasks = cap;
            }
        }
        if (fid != PP_NONE && c->ntasks < c->captasks) {
            pp_tracer_task *t = &c->tasks[c->ntasks++];
            memset(t, 0, sizeof *t);
            t->fid = fid;
            t->coro_fid = coro_fid;
            t->thread = pp_tls.ts ? pp_tls.ts->index : PP_NONE;
            t->start = now;
            row = c->ntasks;
        }
    }
    Py_XDECREF(coro);
    Py_XDECREF(task);
    PyErr_Clear();
    pp_err_restore(&es);
    return row;
}

/* A task's step ends at `now`. */
static void step_ends(pp_tracer *p, uint32_t row, int64_t now)
{
    pp_coros *c = &p->coros;
    pp_tracer_task *t = &c->tasks[row - 1];
    if (t->run_since == 0)
        return;
    t->running += now - t->run_since;
    if (p->timeline) {
        if (c->nsteps == c->capsteps && c->capsteps < MAX_STEPS) {
            uint32_t cap = c->capsteps ? c->capsteps * 2 : 1024;
            pp_task_step *s = realloc(c->steps, cap * sizeof *s);
            if (s != NULL) {
                c->steps = s;
                c->capsteps = cap;
            }
        }
        if (c->nsteps < c->capsteps)
            c->steps[c->nsteps++] = (pp_task_step){row - 1, 0, t->run_since, now - t->run_since};
        else
            c->steps_dropped++;
    }
    t->run_since = 0;
}

static int grow_fids(pp_coros *c, uint32_t fid)
{
    if (fid < c->nfid)
        return 0;
    uint32_t n = c->nfid ? c->nfid : 64;
    while (n <= fid)
        n *= 2;
    uint64_t *a = realloc(c->instances, n * sizeof *a);
    if (a == NULL)
        return -1;
    c->instances = a;
    uint64_t *e = realloc(c->ended, n * sizeof *e);
    if (e == NULL)
        return -1;
    c->ended = e;
    int64_t *w = realloc(c->wall, n * sizeof *w);
    if (w == NULL)
        return -1;
    c->wall = w;
    memset(a + c->nfid, 0, (n - c->nfid) * sizeof *a);
    memset(e + c->nfid, 0, (n - c->nfid) * sizeof *e);
    memset(w + c->nfid, 0, (n - c->nfid) * sizeof *w);
    c->nfid = n;
    return 0;
}

static inline uint32_t slot_of(const pp_coros *c, uint64_t key)
{
    return pp_hash64(key, c->mask);
}

static pp_coro_open *find(pp_coros *c, uint64_t key)
{
    if (c->open == NULL)
        return NULL;
    for (uint32_t i = slot_of(c, key);; i = (i + 1) & c->mask) {
        if (c->open[i].key == key)
            return &c->open[i];
        if (c->open[i].key == 0)
            return NULL;
    }
}

static int rehash(pp_coros *c, uint32_t cap)
{
    pp_coro_open *old = c->open, *n = calloc(cap, sizeof *n);
    uint32_t oldcap = old ? c->mask + 1 : 0;
    if (n == NULL)
        return -1;
    c->open = n;
    c->mask = cap - 1;
    for (uint32_t i = 0; i < oldcap; i++) {
        if (old[i].key == 0)
            continue;
        uint32_t j = slot_of(c, old[i].key);
        while (n[j].key != 0)
            j = (j + 1) & c->mask;
        n[j] = old[i];
    }
    free(old);
    return 0;
}

/* Linear probing's deletion: the entries after it move back into the gap. */
static void remove_at(pp_coros *c, pp_coro_open *e)
{
    uint32_t i = (uint32_t)(e - c->open), j = i;
    c->open[i].key = 0;
    c->nopen--;
    for (;;) {
        j = (j + 1) & c->mask;
        if (c->open[j].key == 0)
            return;
        uint32_t home = slot_of(c, c->open[j].key);
        /* may j's entry move to i? only if its home is not in (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            c->open[i] = c->open[j];
            c->open[j].key = 0;
            i = j;
        }
    }
}

static void end_entry(pp_coros *c, pp_coro_open *e, int64_t now)
{
    if (e->pad) {
        pp_tracer_task *t = &c->tasks[e->pad - 1];
        t->ended = 1;
        t->end = now;
    }
    if (grow_fids(c, e->fid) == 0) {
        c->ended[e->fid]++;
        c->wall[e->fid] += now - e->start;
    }
    remove_at(c, e);
}

void pp_tracer_coro_run(pp_tracer *p, PyObject *code, uintptr_t frame, int first)
{
    pp_coros *c = &p->coros;
    if (frame == 0)
        return;
    int64_t now = now_ticks(p);
    pp_coro_open *e = find(c, frame);
    if (e != NULL) {
        if (!first) {                   /* a resume */
            if (e->pad) {
                c->tasks[e->pad - 1].steps++;
                c->tasks[e->pad - 1].run_since = now;
            }
            return;
        }
        end_entry(c, e, e->last);       /* closed without an event: a new one is here */
    }
    uint32_t fid = pp_registry_get(p->reg, (uint64_t)(uintptr_t)code);
    if (fid == PP_NONE || grow_fids(c, fid) < 0)
        return;
    if (c->open == NULL || (c->nopen + 1) * 4 > (c->mask + 1) * 3) {
        if (c->nopen >= MAX_OPEN || rehash(c, c->open ? (c->mask + 1) * 2 : 1024) < 0) {
            c->dropped++;
            return;
        }
    }
    uint32_t i = slot_of(c, frame);
    while (c->open[i].key != 0)
        i = (i + 1) & c->mask;
    uint32_t row = p->asyncio ? task_row(p, frame, fid, now) : 0;
    if (row) {
        c->tasks[row - 1].steps = 1;
        c->tasks[row - 1].run_since = now;
    }
    c->open[i] = (pp_coro_open){frame, fid, row, now, now};
    c->nopen++;
    c->instances[fid]++;
}

void pp_tracer_coro_suspend(pp_tracer *p, uintptr_t frame)
{
    pp_coro_open *e = find(&p->coros, frame);
    if (e != NULL) {
        e->last = now_ticks(p);
        if (e->pad)
            step_ends(p, e->pad, e->last);
    }
}

void pp_tracer_coro_end(pp_tracer *p, uintptr_t frame)
{
    pp_coro_open *e = find(&p->coros, frame);
    if (e != NULL) {
        int64_t now = now_ticks(p);
        if (e->pad)
            step_ends(p, e->pad, now);
        end_entry(&p->coros, e, now);
    }
}

void pp_tracer_coro_open_wall(const pp_tracer *t, int64_t now, int64_t *wall, uint32_t nfid)
{
    const pp_coros *c = &t->coros;
    if (t->coros.stopped)
        now = t->coros.stopped;
    for (uint32_t i = 0; c->open && i <= c->mask; i++)
        if (c->open[i].key != 0 && c->open[i].fid < nfid && now > c->open[i].start)
            wall[c->open[i].fid] += now - c->open[i].start;
}

void pp_tracer_coro_clear(pp_tracer *t)
{
    pp_coros *c = &t->coros;
    free(c->open);
    free(c->instances);
    free(c->ended);
    free(c->wall);
    free(c->tasks);
    free(c->steps);
    Py_CLEAR(c->current_task);
    memset(c, 0, sizeof *c);
}
