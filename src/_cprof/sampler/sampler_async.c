/* sampler_async.c — --async: asyncio tasks for the sampler (sampler.h).
 *
 * Owns: the tasks seen while sampling (pp_tasks): a row per task, a weak
 * reference to each task (with a callback that notes when it is freed), the
 * map coroutine address -> row that the drain uses to put a sample under its
 * task's root frame, and the awaiting time of suspended tasks, charged (wall
 * mode) to the coroutine chain where each one waits.
 *
 * The signal handler records only the address of the rootmost coroutine
 * of the stack (frames.c), and the sample's time. An address names a
 * coroutine only while it lives, and a task holds its coroutine until it is
 * freed: so a row has its coroutine's address until the task is freed (the
 * weak reference's callback notes when), and a sample maps to the row only
 * if it was taken before that (and after the row that had the address
 * before lost it). A task that starts and ends between two looks has no
 * row: its samples go to <task ?> (or, if a new task's coroutine took its
 * address before the drain, to that task). A named task is held (strong)
 * until a look sees it ended, so that its end state is read.
 *
 * Runs with the GIL only (the helper's looks, stop; the callback, in the
 * thread that frees a task: it only stores a time by row, since it can run
 * during any allocation of a look or a drain). Never runs Python code:
 * the registries, the task attributes and the coroutine chains are read with
 * C getters of CPython's own types and C containers (a Task subclass that
 * overrides get_name in Python is named from its _name, not called), so a
 * sys.monitoring tool never sees pyprof work; never changes a program object
 * (beyond the weak reference in each task's list of them).
 */
#include "sampler_int.h"
#include "asyncio_task.h"

#include <string.h>

#define MAX_TASK_ROWS (1u << 20)        /* past it, new tasks go to <task ?> */
#define MAX_CHAIN 64                    /* coroutines awaiting coroutines */
#define MAX_LOOPS 64                    /* loops running a task at one look */
#define LOOK_BUDGET_NS (1000 * 1000)    /* each half of a look, at most (the rest: the next) */
#define ALIVE INT64_MAX                 /* dead[]: the address is still the task's */
#define F_NOTED 1                       /* its loop's thread is in byloop */
#define F_FREE 2                        /* the row is on the free list */

static PyObject *await_fids;            /* type -> fid of its <await NAME> frame (this run) */
static int64_t prev_look, run_start;
static void peek(pp_sampling *p, int64_t now);
static void registries_forget(void);
static Py_ssize_t registry_n;           /* the registries' size at the last scan */
static int64_t full_after;              /* pp_async_fresh: no registry scan before */
static int64_t last_scan;               /* the last scan that read the registries whole */

static int grow(void **a, size_t each, uint32_t cap)
{
    void *n = realloc(*a, cap * each);
    if (n == NULL)
        return -1;
    *a = n;
    return 0;
}

/* No Python code here: the freed callback may run between two looks'
 * steps, never inside one of these. */
static int grow_rows(pp_tasks *t)
{
    if (t->n < t->cap)
        return 0;
    uint32_t cap = t->cap ? t->cap * 2 : 64;
    if (grow((void **)&t->rows, sizeof *t->rows, cap) < 0
        || grow((void **)&t->own->ref, sizeof *t->own->ref, cap) < 0
        || grow((void **)&t->own->obj, sizeof *t->own->obj, cap) < 0
        || grow((void **)&t->own->label, sizeof *t->own->label, cap) < 0
        || grow((void **)&t->own->code, sizeof *t->own->code, cap) < 0
        || grow((void **)&t->own->addr, sizeof *t->own->addr, cap) < 0
        || grow((void **)&t->own->coro, sizeof *t->own->coro, cap) < 0
        || grow((void **)&t->own->dead, sizeof *t->own->dead, cap) < 0
        || grow((void **)&t->own->born, sizeof *t->own->born, cap) < 0
        || grow((void **)&t->own->chain, sizeof *t->own->chain, cap) < 0
        || grow((void **)&t->own->where, sizeof *t->own->where, cap) < 0
        || grow((void **)&t->own->flags, sizeof *t->own->flags, cap) < 0)
        return -1;
    t->cap = cap;
    return 0;
}

/* The tasks whose weak references are out (one sampler runs at a time). */
static pp_tasks *weak_owner;

_Atomic uintptr_t pp_known_coro[1u << KNOWN_CORO_BITS];

static void known_forget(uintptr_t coro)
{
    uintptr_t was = coro;
    if (coro)
        atomic_compare_exchange_strong(&pp_known_coro[pp_known_slot(coro)], &was, 0);
}

/* A task with a row is being freed (the weak reference's callback, GIL
 * held, in any thread; possibly during a look's or a drain's allocation):
 * from now on its coroutine's address may be another's. Stores a time by
 * row, nothing else. */
static PyObject *task_freed(PyObject *self, PyObject *ref)
{
    (void)self;
    pp_tasks *t = weak_owner;
    uint32_t i = t != NULL && t->own->ready ? pp_index_get(&t->own->bywref, (uint64_t)(uintptr_t)ref) : PP_NONE;
    if (i != PP_NONE && i < t->n && t->own->ref[i] == ref && t->own->dead[i] == ALIVE) {
        t->own->dead[i] = pp_mono_ns();
        known_forget(t->own->coro[i]);       /* the address may be a new task's next */
    }
    Py_RETURN_NONE;
}

static PyMethodDef freed_def = {"_pyprof_task_freed", task_freed, METH_O, NULL};
static PyObject *freed_cb;              /* made once, kept */

static int ensure_ready(pp_tasks *t)
{
    if (t->own->ready)
        return 0;
    if (freed_cb == NULL && (freed_cb = PyCFunction_New(&freed_def, NULL)) == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (pp_index_init(&t->own->bycoro, 256) < 0 || pp_index_init(&t->own->byobj, 256) < 0
        || pp_index_init(&t->own->bywref, 256) < 0
        || pp_index_init(&t->own->byloop, 16) < 0 || pp_index_init(&t->own->byworker, 16) < 0)
        return -1;
    t->own->ready = 1;
    t->own->free_head = PP_NONE;
    return 0;
}

/* The indexes by address: an entry let go keeps its key with no row (a
 * tombstone), until there are many (reindex). */
static void index_set(pp_index *ix, uint64_t key, uint32_t val)
{
    pp_ient *e = pp_index_find(ix, key);
    if (e != NULL)
        e->val = val;
    else
        pp_index_put(ix, key, val);
}

static uint32_t tombs;

static void unindex(pp_index *ix, uint64_t key, uint32_t row)
{
    if (pp_index_get(ix, key) == row) {     /* not a newer row's at that address */
        index_set(ix, key, PP_NONE);
        tombs++;
    }
}

/* The row's task, a new reference; NULL once it was freed (or let go). */
static PyObject *get_task(pp_tasks *t, uint32_t i)
{
    if (t->own->obj[i] != NULL)
        return Py_NewRef(t->own->obj[i]);
    PyObject *o = t->own->ref[i] != NULL ? pp_weakref_get(t->own->ref[i]) : NULL;
    if (o == NULL)
        PyErr_Clear();
    return o;
}

/* The task let go: found freed, or sampling stops. Its coroutine's address
 * stays the row's for the samples taken until then (unlink, later). */
static void drop(pp_tasks *t, uint32_t i)
{
    PyObject *ref = t->own->ref[i], *obj = t->own->obj[i];
    if (ref == NULL)
        return;
    if (t->own->ready) {
        unindex(&t->own->byobj, t->own->addr[i], i);
        unindex(&t->own->bywref, (uint64_t)(uintptr_t)ref, i);
    }
    if (t->own->dead[i] == ALIVE)
        t->own->dead[i] = pp_mono_ns();      /* let go alive: its address is no longer watched */
    t->own->ref[i] = t->own->obj[i] = NULL;
    t->own->held--;
    Py_DECREF(ref);                     /* first: no callback when the task goes */
    Py_XDECREF(obj);
}

/* Once the samples taken before the task was freed are drained: its
 * coroutine's address is no longer the row's. */
static void unlink_coro(pp_tasks *t, uint32_t i)
{
    uintptr_t a = t->own->coro[i];
    if (a != 0 && t->own->ready) {
        uint32_t h = pp_index_get(&t->own->bycoro, a);
        if (h == i) {
            index_set(&t->own->bycoro, a, t->own->chain[i]);
            tombs += t->own->chain[i] == PP_NONE;
        }
        else
            for (uint32_t r = h, k = 0; r != PP_NONE && k < 4096; r = t->own->chain[r], k++)
                if (t->own->chain[r] == i) {
                    t->own->chain[r] = t->own->chain[i];
                    break;
                }
    }
    t->own->coro[i] = 0;
    t->own->chain[i] = PP_NONE;
    Py_CLEAR(t->own->label[i]);
    Py_CLEAR(t->own->code[i]);
}

/* A task let go unnamed: its row is free for another. */
static void free_row(pp_tasks *t, uint32_t row)
{
    if (t->own->flags[row] & F_FREE)
        return;
    drop(t, row);
    unlink_coro(t, row);
    t->rows[row].state = PP_TASK_DONE;
    t->rows[row].fid = PP_NONE;
    t->own->flags[row] = F_FREE;
    t->own->where[row] = t->own->free_head;
    t->own->free_head = row;
}

static void reindex(pp_tasks *t)
{
    tombs = 0;
    pp_index_clear(&t->own->bycoro);
    pp_index_clear(&t->own->byobj);
    pp_index_clear(&t->own->bywref);
    uint8_t *older = t->n ? calloc(t->n, 1) : NULL;     /* a row behind another in a chain */
    for (uint32_t i = 0; older && i < t->n; i++)
        if (t->own->coro[i] && t->own->chain[i] != PP_NONE && t->own->chain[i] < t->n)
            older[t->own->chain[i]] = 1;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->own->coro[i] && (older == NULL || !older[i]))
            pp_index_put(&t->own->bycoro, t->own->coro[i], i);
        if (t->own->ref[i] == NULL)
            continue;
        pp_index_put(&t->own->byobj, t->own->addr[i], i);
        pp_index_put(&t->own->bywref, (uint64_t)(uintptr_t)t->own->ref[i], i);
    }
    free(older);
}

void pp_tasks_clear(pp_tasks *t)
{
    if (t->own == NULL)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        drop(t, i);
        t->own->coro[i] = 0;
        Py_CLEAR(t->own->label[i]);
        Py_CLEAR(t->own->code[i]);
    }
    t->n = 0;
    t->own->held = 0;
    t->own->free_head = PP_NONE;
    t->own->cursor = 0;
    t->unmatched = 0;
    t->seen = 0;
    t->gap_ns = 0;
    if (t->own->ready) {
        pp_index_clear(&t->own->bycoro);
        pp_index_clear(&t->own->byobj);
        pp_index_clear(&t->own->bywref);
    }
}

uint32_t pp_tasks_named(const pp_tasks *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        n += t->rows[i].fid != PP_NONE;
    return n;
}

int pp_async_init(pp_sampling *p)
{
    p->tasks.own = calloc(1, sizeof *p->tasks.own);
    return p->tasks.own != NULL ? 0 : -1;
}

void pp_async_free(pp_sampling *p)
{
    pp_tasks *t = &p->tasks;
    if (t->own == NULL)
        return;
    pp_tasks_clear(t);
    if (weak_owner == t)
        weak_owner = NULL;
    free(t->rows);
    free(t->own->ref);
    free(t->own->obj);
    free(t->own->label);
    free(t->own->code);
    free(t->own->addr);
    free(t->own->coro);
    free(t->own->dead);
    free(t->own->born);
    free(t->own->chain);
    free(t->own->where);
    free(t->own->flags);
    if (t->own->ready) {
        pp_index_free(&t->own->bycoro);
        pp_index_free(&t->own->byobj);
        pp_index_free(&t->own->bywref);
        pp_index_free(&t->own->byloop);
        pp_index_free(&t->own->byworker);
    }
    free(t->own);
    memset(t, 0, sizeof *t);
}

void pp_async_reset(pp_sampling *p)
{
    run_start = pp_mono_ns();
    registry_n = 0;
    full_after = last_scan = 0;
    registries_forget();
    for (size_t k = 0; k < sizeof pp_known_coro / sizeof pp_known_coro[0]; k++)
        atomic_store_explicit(&pp_known_coro[k], 0, memory_order_relaxed);
    prev_look = run_start;              /* a task seen at the first look began since the start */
    Py_CLEAR(await_fids);
    p->tasks.unknown_fid = PP_NONE;
    if (ensure_ready(&p->tasks) == 0) {
        weak_owner = &p->tasks;
        reindex(&p->tasks);
        pp_index_clear(&p->tasks.own->byloop);   /* loops of another run may be gone */
        pp_index_clear(&p->tasks.own->byworker);
        p->tasks.own->nworkers = 0;
    }
}

/* A function named `text` with no code: <task NAME>, <await NAME>. */
static uint32_t named_fid(pp_sampling *p, PyObject *text)
{
    PyObject *empty = PyUnicode_FromString("");
    uint32_t fid = empty && text ? pp_registry_named(p->reg, empty, text, 0) : PP_NONE;
    Py_XDECREF(empty);
    PyErr_Clear();
    return fid;
}

/* The folder of asyncio's own files, as a path part (pyprof runs on Linux). */
static PyObject *asyncio_dir(void)
{
    static PyObject *dir;
    if (dir == NULL)
        dir = PyUnicode_FromString("/asyncio/");
    return dir;
}

/* asyncio's debug mode keeps where a task was made (the last entry of its
 * _source_traceback, a FrameSummary with slots). */
static void task_created(pp_sampling *p, PyObject *task, pp_taskrow *row)
{
    row->created_fid = PP_NONE;
    row->created_line = 0;
    PyObject *tb = pp_attr(task, "_source_traceback");
    Py_ssize_t at = tb != NULL && PyList_Check(tb) ? PyList_GET_SIZE(tb) : 0;
    while (at > 1) {                    /* the program's line, not asyncio's create_task */
        PyObject *f = pp_attr(PyList_GET_ITEM(tb, at - 1), "filename");
        int own = f && PyUnicode_Check(f) && asyncio_dir()
                  && PyUnicode_Find(f, asyncio_dir(), 0, PY_SSIZE_T_MAX, 1) >= 0;
        Py_XDECREF(f);
        PyErr_Clear();
        if (!own)
            break;
        at--;
    }
    if (at > 0) {
        PyObject *fs = PyList_GET_ITEM(tb, at - 1);
        PyObject *file = pp_attr(fs, "filename"), *name = pp_attr(fs, "name"), *line = pp_attr(fs, "lineno");
        if (file && name && line && PyUnicode_Check(file) && PyUnicode_Check(name)
            && PyLong_Check(line)) {
            long l = PyLong_AsLong(line);
            row->created_line = l > 0 ? (uint32_t)l : 0;
            row->created_fid = pp_registry_named(p->reg, file, name, 0);
        }
        Py_XDECREF(file);
        Py_XDECREF(name);
        Py_XDECREF(line);
        PyErr_Clear();
    }
    Py_XDECREF(tb);
}

/* A task first seen: a row, with a weak reference to it (whose callback
 * notes when it is freed), its start estimated, and what names it read at
 * once (its name, its coroutine's code: the task may be freed before the
 * drain meets its samples); named (name_row, a few µs) only if it matters:
 * it has a sample, or is pending at the end of a look. A few hundred ns: a
 * program may make tens of thousands of tasks a second. */
static void new_row(pp_sampling *p, PyObject *task, int64_t now)
{
    pp_tasks *t = &p->tasks;
    uint32_t i = t->own->free_head;
    if (i == PP_NONE && (t->n >= MAX_TASK_ROWS || grow_rows(t) < 0))
        return;
    PyObject *ref = PyWeakref_NewRef(task, freed_cb);
    if (ref == NULL) {                  /* a task type without weak references: no row */
        PyErr_Clear();
        return;
    }
    PyObject *coro = pp_attr(task, "_coro");
    PyObject *code = coro == NULL ? NULL
                     : PyCoro_CheckExact(coro) ? pp_attr(coro, "cr_code")
                     : PyGen_Check(coro) ? pp_attr(coro, "gi_code") : NULL;
    if (code != NULL && !PyCode_Check(code))
        Py_CLEAR(code);
    uintptr_t a = coro != NULL && coro != Py_None ? (uintptr_t)coro : 0;
    Py_XDECREF(coro);                   /* the task holds it until it is freed */
    if (i == PP_NONE)
        i = t->n++;
    else
        t->own->free_head = t->own->where[i];
    pp_taskrow *row = &t->rows[i];
    memset(row, 0, sizeof *row);
    row->fid = row->coro_fid = row->created_fid = row->thread = PP_NONE;
    row->state = PP_TASK_PENDING;
    /* made since the previous look or whole scan (a new task's sample asks
     * for one between looks): halfway, on average */
    int64_t since = last_scan > prev_look ? last_scan : prev_look;
    row->start_ns = since + (now - since) / 2;
    t->own->ref[i] = ref;
    t->own->obj[i] = NULL;
    t->own->label[i] = pp_task_name(task);
    t->own->code[i] = code;
    t->own->addr[i] = (uintptr_t)task;
    t->own->coro[i] = a;
    t->own->dead[i] = ALIVE;
    t->own->born[i] = 0;
    t->own->chain[i] = PP_NONE;
    t->own->where[i] = PP_NONE;
    t->own->flags[i] = 0;
    t->own->held++;
    t->seen++;
    if (a) {
        /* the row that had the address before: its samples are those from before it lost it */
        uint32_t h = pp_index_get(&t->own->bycoro, a);
        if (h != PP_NONE) {
            t->own->chain[i] = h;
            t->own->born[i] = t->own->dead[h] != ALIVE ? t->own->dead[h] : 0;
        }
        index_set(&t->own->bycoro, a, i);
        atomic_store_explicit(&pp_known_coro[pp_known_slot(a)], a, memory_order_relaxed);
    }
    index_set(&t->own->byobj, (uint64_t)(uintptr_t)task, i);
    index_set(&t->own->bywref, (uint64_t)(uintptr_t)ref, i);
    task_created(p, task, row);         /* asyncio's debug mode only */
    PyErr_Clear();
}

/* A row's names: its <task NAME> frame, its coroutine's function. 0 if it
 * has them. The task's name is read again if it is alive (a task may be
 * renamed), and the task is then held until a look sees it end. */
static int task_state(PyObject *task);

static int name_row(pp_sampling *p, uint32_t i)
{
    pp_tasks *t = &p->tasks;
    pp_taskrow *row = &t->rows[i];
    if (row->fid != PP_NONE)
        return 0;
    PyObject *task = get_task(t, i);
    PyObject *name = task != NULL ? pp_task_name(task) : Py_XNewRef(t->own->label[i]);
    PyObject *label = name ? PyUnicode_FromFormat("<task %U>", name) : NULL;
    row->fid = named_fid(p, label);
    Py_XDECREF(label);
    Py_XDECREF(name);
    if (row->fid == PP_NONE) {
        Py_XDECREF(task);
        return -1;
    }
    if (t->own->code[i] != NULL)
        row->coro_fid = pp_sampler_code_fid(p, t->own->code[i]);
    Py_CLEAR(t->own->code[i]);
    Py_CLEAR(t->own->label[i]);
    if (task != NULL && t->own->obj[i] == NULL && row->state == PP_TASK_PENDING
        && task_state(task) == PP_TASK_PENDING)
        t->own->obj[i] = Py_NewRef(task);    /* its end state is read at a look */
    Py_XDECREF(task);
    PyErr_Clear();
    return 0;
}

/* The tasks asyncio knows of: 3.12+ keeps them in _scheduled_tasks (a
 * WeakSet) and _eager_tasks (a set), 3.11 in _all_tasks (a WeakSet). A list
 * (new reference), NULL if asyncio is not imported. */
static int stopping_now;                /* stop's look: its time is the sampler's end */
static uint64_t scan_from;              /* where the next scan of a registry starts */

/* asyncio.tasks' registries and its _current_tasks, found once a run:
 * module globals that asyncio never rebinds. A look then makes no attribute
 * lookup (nor the AttributeError of a registry this version lacks): on a
 * helper thread woken every 10 ms, with cold caches, those were most of a
 * look's cost (tens of µs for a few tasks). */
static struct {
    PyObject *mod, *current, *sets[3];
    int weak[3], n;
} reg;

static void registries_forget(void)
{
    for (int k = 0; k < reg.n; k++)
        Py_CLEAR(reg.sets[k]);
    reg.n = 0;
    Py_CLEAR(reg.current);
    Py_CLEAR(reg.mod);
}

/* 1 once asyncio.tasks is imported (its registries then in `reg`). */
static int registries(void)
{
    static const char *names[] = {"_scheduled_tasks", "_eager_tasks", "_all_tasks"};
    if (reg.mod != NULL)
        return 1;
    PyObject *name = PyUnicode_FromString("asyncio.tasks");
    PyObject *mod = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    if (mod == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        PyObject *r = pp_attr(mod, names[k]);
        if (r == NULL)
            continue;
        int weak = !PyAnySet_Check(r);
        PyObject *items = weak ? pp_attr(r, "data") : Py_NewRef(r);
        Py_DECREF(r);
        if (items != NULL && PyAnySet_Check(items)) {
            reg.sets[reg.n] = items;
            reg.weak[reg.n++] = weak;
        }
        else
            Py_XDECREF(items);
    }
    PyObject *cur = pp_attr(mod, "_current_tasks");
    if (cur != NULL && !PyDict_Check(cur))
        Py_CLEAR(cur);
    reg.current = cur;
    reg.mod = mod;
    PyErr_Clear();
    return 1;
}

/* The tasks asyncio knows of, new ones made rows: 3.12+ keeps them in
 * _scheduled_tasks (a WeakSet) and _eager_tasks (a set), 3.11 in _all_tasks
 * (a WeakSet). Each registry is copied (a list: nothing changes it under us)
 * and read from a rotating start, within the look's time budget. */
static void scan_tasks(pp_sampling *p, int64_t now, int64_t t0)
{
    pp_tasks *t = &p->tasks;
    int whole = 1;
    registry_n = 0;
    for (int k = 0; k < reg.n; k++) {
        int weak = reg.weak[k];
        PyObject *list = PySequence_List(reg.sets[k]);
        Py_ssize_t n = list ? PyList_GET_SIZE(list) : 0;
        registry_n += n;
        Py_ssize_t from = n ? (Py_ssize_t)(scan_from % (uint64_t)n) : 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            if (!stopping_now && (j & 255) == 255 && pp_mono_ns() - t0 > LOOK_BUDGET_NS) {
                scan_from = (uint64_t)((from + j) % n);     /* the others at the next look */
                whole = 0;
                break;
            }
            PyObject *o = PyList_GET_ITEM(list, (from + j) % n);
            PyObject *task = weak ? (PyWeakref_Check(o) ? pp_weakref_get(o) : NULL) : Py_NewRef(o);
            if (task == NULL) {
                PyErr_Clear();
                continue;
            }
            uint32_t row = pp_index_get(&t->own->byobj, (uint64_t)(uintptr_t)task);
            if (row == PP_NONE || t->own->dead[row] != ALIVE)    /* else: a task freed there before */
                new_row(p, task, now);
            Py_DECREF(task);
        }
        Py_XDECREF(list);
        PyErr_Clear();
    }
    if (whole)
        last_scan = now;                /* a task not seen here was made after it */
}


static int64_t begin_cost;              /* the current look's first half (CPU) */

/* A look's cost is the helper's CPU for it: its wall time on a loaded machine
 * also holds the time the helper waited for a CPU, which spaced the looks
 * 400 times that (0.6 s apart under a load of 10). */
static int64_t own_cpu_ns(void)
{
    struct timespec c;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c) == 0 ? pp_ts_ns(c) : 0;
}

/* to_thread / run_in_executor: which executor thread runs work that a held
 * task awaits. A worker thread runs concurrent.futures' _WorkItem.run(self);
 * self.future's done callbacks hold (in a closure cell) the asyncio future
 * that the awaiting task has as its _fut_waiter. */
static PyObject *work_code;             /* _WorkItem.run's code (strong) */

static void map_workers(pp_sampling *p)
{
    pp_tasks *t = &p->tasks;
    pp_index_clear(&t->own->byworker);
    t->own->nworkers = 0;
    if (work_code == NULL) {
        PyObject *name = PyUnicode_FromString("concurrent.futures.thread");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        PyObject *cls = mod ? pp_attr(mod, "_WorkItem") : NULL;
        PyObject *run = cls ? pp_attr(cls, "run") : NULL;
        PyObject *code = run && PyFunction_Check(run) ? PyFunction_GetCode(run) : NULL;
        work_code = code && PyCode_Check(code) ? Py_NewRef(code) : NULL;
        Py_XDECREF(run);
        Py_XDECREF(cls);
        Py_XDECREF(mod);
        PyErr_Clear();
        if (work_code == NULL)
            return;
    }
    t->own->work_code = (uintptr_t)work_code;
    pp_index waiting;                   /* a held task's _fut_waiter -> row */
    if (pp_index_init(&waiting, 64) < 0)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->own->ref[i] == NULL || t->rows[i].state != PP_TASK_PENDING)
            continue;
        PyObject *task = get_task(t, i);
        PyObject *w = task ? pp_attr(task, "_fut_waiter") : NULL;
        if (w != NULL && w != Py_None)
            pp_index_put(&waiting, (uint64_t)(uintptr_t)w, i);
        Py_XDECREF(w);                  /* the task holds it, and no program code runs */
        Py_XDECREF(task);               /* meanwhile: the address stays */
    }
    PyThreadState *self = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Main()); ts;
         ts = PyThreadState_Next(ts)) {
        PyObject *item = ts == self ? NULL : pp_frames_local0_of(ts, work_code);
        PyObject *fut = item ? pp_attr(item, "future") : NULL;
        PyObject *cbs = fut ? pp_attr(fut, "_done_callbacks") : NULL;
        for (Py_ssize_t k = 0; cbs && PyList_Check(cbs) && k < PyList_GET_SIZE(cbs); k++) {
            PyObject *cb = PyList_GET_ITEM(cbs, k);
            PyObject *cells = PyFunction_Check(cb) ? PyFunction_GetClosure(cb) : NULL;
            for (Py_ssize_t c = 0; cells && PyTuple_Check(cells) && c < PyTuple_GET_SIZE(cells); c++) {
                PyObject *cell = PyTuple_GET_ITEM(cells, c);
                PyObject *v = PyCell_Check(cell) ? PyCell_GET(cell) : NULL;
                uint32_t row = v ? pp_index_get(&waiting, (uint64_t)(uintptr_t)v) : PP_NONE;
                if (row != PP_NONE && pp_index_put(&t->own->byworker,
                                                   (uint64_t)pp_tstate_native_tid(ts) + 1, row) == 0)
                    t->own->nworkers++;
            }
        }
        Py_XDECREF(cbs);
        Py_XDECREF(fut);
    }
    PyErr_Clear();
    pp_index_free(&waiting);
}

static uint32_t rescanned;              /* the drain pass that looked again (+ 1) */
/* A drain that meets a coroutine of no known task looks again, once, if a
 * look is cheap: a few thousand tasks at most in asyncio's registries. */
#define RESCAN_MAX_TASKS 4096

uint32_t pp_async_worker_row(pp_sampling *p, uint32_t tid, int rescan)
{
    pp_tasks *t = &p->tasks;
    uint32_t row = t->own->nworkers ? pp_index_get(&t->own->byworker, (uint64_t)tid + 1) : PP_NONE;
    if (row == PP_NONE && rescan && t->own->ready && rescanned != p->threads->sample_pass + 1
        && registry_n < RESCAN_MAX_TASKS) {
        rescanned = p->threads->sample_pass + 1;
        peek(p, pp_mono_ns());
        row = t->own->nworkers ? pp_index_get(&t->own->byworker, (uint64_t)tid + 1) : PP_NONE;
    }
    if (row != PP_NONE && ((t->own->flags[row] & F_FREE) || name_row(p, row) < 0))
        row = PP_NONE;
    return row;
}

/* A look's first half outside a look (a rescan, a new thread's drain): its
 * cost is not the look's (which spaces the looks). */
static void peek(pp_sampling *p, int64_t now)
{
    int64_t b = begin_cost;
    pp_async_look_begin(p, now);
    begin_cost = b;
}

void pp_async_peek(pp_sampling *p, int64_t now)
{
    peek(p, now);
}

static int current_tasks(PyObject **out);

/* Around the helper's own work with the GIL: its allocations are not the
 * program's, no finalizer or weakref callback runs meanwhile, and the
 * thread's pending exception is kept. */
typedef struct {
    int mem, gc;
    pp_err_state err;
} aside;

static void aside_begin(aside *a)
{
    a->mem = pp_memory_self_begin();
    a->gc = PyGC_Disable();
    pp_err_save(&a->err);
}

static void aside_end(aside *a)
{
    pp_err_restore(&a->err);
    if (a->gc)
        PyGC_Enable();
    pp_memory_self_end(a->mem);
}

/* A sample asked (S.new_coro): the loops' running tasks first (a few µs;
 * the asking task is likely still in the burst it was sampled in), the
 * registries (hundreds of µs with thousands of tasks) only if that did not
 * find it, and no more often than 400 times their last cost. */
void pp_async_fresh(pp_sampling *p, int64_t now, uintptr_t asked)
{
    pp_tasks *t = &p->tasks;
    if (!S.async || ensure_ready(t) < 0)
        return;
    aside a;
    aside_begin(&a);
    PyObject *cur[MAX_LOOPS];
    int ncur = registries() ? current_tasks(cur) : 0;
    for (int c = 0; c < ncur; c++)
        Py_INCREF(cur[c]);              /* borrowed from the dict: held while new_row reads them */
    for (int c = 0; c < ncur; c++) {
        uint32_t row = pp_index_get(&t->own->byobj, (uint64_t)(uintptr_t)cur[c]);
        if (cur[c] != Py_None && (row == PP_NONE || t->own->dead[row] != ALIVE))
            new_row(p, cur[c], now);
        Py_DECREF(cur[c]);
    }
    PyErr_Clear();
    aside_end(&a);
    if (pp_index_get(&t->own->bycoro, asked) == PP_NONE && now >= full_after
        && registry_n < RESCAN_MAX_TASKS) {
        int64_t c0 = own_cpu_ns();
        peek(p, now);
        full_after = now + 400 * (own_cpu_ns() - c0);
    }
    pp_async_asked(p, asked);
}

void pp_async_asked(pp_sampling *p, uintptr_t coro)
{
    pp_tasks *t = &p->tasks;
    if (t->own->ready && pp_index_get(&t->own->bycoro, coro) == PP_NONE)
        atomic_store_explicit(&pp_known_coro[pp_known_slot(coro)], coro, memory_order_relaxed);
}


void pp_async_look_begin(pp_sampling *p, int64_t now)
{
    pp_tasks *t = &p->tasks;
    if (!S.async || ensure_ready(t) < 0)
        return;
    int64_t t0 = pp_mono_ns(), c0 = own_cpu_ns();
    if (now < t0 && !stopping_now)
        now = t0;                       /* the time the registries are read (the GIL took a while) */
    aside a;
    aside_begin(&a);
    if (registries())
        scan_tasks(p, now, t0);
    if (t->own->held)
        map_workers(p);
    PyErr_Clear();
    aside_end(&a);
    t->look_ns += pp_mono_ns() - t0;
    begin_cost += own_cpu_ns() - c0;
}

/* The row whose task's coroutine was at `coro` at t_ns: the rows that had
 * the address, newest first, each from when the one before lost it to when
 * its own task was freed. */
static uint32_t row_at(pp_tasks *t, uintptr_t coro, int64_t t_ns)
{
    uint32_t r = t->own->ready ? pp_index_get(&t->own->bycoro, coro) : PP_NONE;
    for (uint32_t k = 0; r != PP_NONE && r < t->n && k < 4096; r = t->own->chain[r], k++)
        if (t->own->born[r] <= t_ns && t_ns < t->own->dead[r])
            return r;
    return PP_NONE;
}

uint32_t pp_async_row(pp_sampling *p, uintptr_t coro, int64_t t_ns)
{
    pp_tasks *t = &p->tasks;
    uint32_t row = row_at(t, coro, t_ns);
    if (row == PP_NONE && t->own->ready && rescanned != p->threads->sample_pass + 1
        && registry_n < RESCAN_MAX_TASKS) {
        /* a task made since the last look (a drain without a look: a new
         * thread's): the registries again, once per drain */
        rescanned = p->threads->sample_pass + 1;
        peek(p, pp_mono_ns());
        row = row_at(t, coro, t_ns);
    }
    if (row != PP_NONE && name_row(p, row) < 0)
        row = PP_NONE;
    if (row == PP_NONE && t->unknown_fid == PP_NONE) {
        PyObject *label = PyUnicode_FromString("<task ?>");
        t->unknown_fid = named_fid(p, label);
        Py_XDECREF(label);
    }
    return row;
}

void pp_async_ran(pp_sampling *p, uint32_t row, uint32_t thread, int64_t t_ns, int64_t weight)
{
    if (row >= p->tasks.n)
        return;                         /* a row of before a clear() */
    pp_taskrow *r = &p->tasks.rows[row];
    r->running_ns += weight;
    r->samples++;
    r->thread = thread;
    if (r->first_run_ns == 0 || t_ns < r->first_run_ns)
        r->first_run_ns = t_ns;
    if (t_ns > r->last_run_ns)
        r->last_run_ns = t_ns;
}

/* <await NAME>: the leaf of a waiting chain, what is awaited that is no
 * coroutine (a future, an async generator's step...). */
static uint32_t await_fid(pp_sampling *p, PyTypeObject *type)
{
    if (await_fids == NULL && (await_fids = PyDict_New()) == NULL)
        return PP_NONE;
    PyObject *v = PyDict_GetItem(await_fids, (PyObject *)type);
    if (v != NULL)
        return (uint32_t)PyLong_AsUnsignedLong(v);
    const char *name = strrchr(type->tp_name, '.');
    name = name ? name + 1 : type->tp_name;
    if (strcmp(name, "FutureIter") == 0)        /* a C Future's __await__ */
        name = "Future";
    PyObject *label = PyUnicode_FromFormat("<await %s>", name);
    uint32_t fid = named_fid(p, label);
    Py_XDECREF(label);
    PyObject *f = fid != PP_NONE ? PyLong_FromUnsignedLong(fid) : NULL;
    if (f == NULL || PyDict_SetItem(await_fids, (PyObject *)type, f) < 0)
        PyErr_Clear();
    Py_XDECREF(f);
    return fid;
}

/* The stack a suspended task waits in: its root frame, the chain of
 * coroutines (cr_await / gi_yieldfrom) with the line each one waits at,
 * then what the innermost one awaits. */
static uint32_t waiting_stack(pp_sampling *p, uint32_t row, PyObject *task)
{
    pp_tasks *t = &p->tasks;
    uint64_t fr[MAX_CHAIN + 2];
    uint32_t n = 0;
    fr[n++] = (uint64_t)t->rows[row].fid << 32;
    PyObject *o = pp_attr(task, "_coro");
    while (o != NULL && n < MAX_CHAIN) {
        PyObject *code;
        uint32_t off;
        if (!PyCoro_CheckExact(o) && !PyGen_Check(o)) {
            uint32_t leaf = o == Py_None ? PP_NONE : await_fid(p, Py_TYPE(o));
            if (leaf != PP_NONE)
                fr[n++] = (uint64_t)leaf << 32;
            break;
        }
        if (!pp_frames_gen_where(o, &code, &off))
            break;
        uint32_t fid = pp_sampler_code_fid(p, code);
        if (fid == PP_NONE && !pp_registry_own(p->reg, (uint64_t)(uintptr_t)code))
            break;
        if (fid == PP_NONE)
            n = 1;                      /* pyprof's own (a middleware): the chain starts above it */
        else
            fr[n++] = (uint64_t)fid << 32 | pp_samples_line(&p->samples, fid, code, off);
        PyObject *next = pp_attr(o, PyCoro_CheckExact(o) ? "cr_await" : "gi_yieldfrom");
        Py_DECREF(o);
        o = next;
        if (o == Py_None)
            Py_CLEAR(o);
    }
    Py_XDECREF(o);
    PyErr_Clear();
    return pp_samples_stack(&p->samples, fr, n);
}

/* The thread of a task's loop that has no running sample yet: the thread
 * of another task of that loop that ran; else the loop's _thread_id
 * (asyncio's: threading.get_ident() of the thread running it). */
static uint32_t loop_thread(pp_sampling *p, PyObject *task)
{
    PyObject *loop = pp_attr(task, "_loop");
    uint32_t out = loop ? pp_index_get(&p->tasks.own->byloop, (uint64_t)(uintptr_t)loop) : PP_NONE;
    PyObject *id = loop && out == PP_NONE ? pp_attr(loop, "_thread_id") : NULL;
    Py_XDECREF(loop);
    if (id != NULL && PyLong_Check(id)) {
        unsigned long ident = PyLong_AsUnsignedLong(id);
        for (pp_thread *th = p->threads->head; th; th = th->next)
            if (th->ident == ident) {
                out = th->index;
                break;
            }
    }
    Py_XDECREF(id);
    PyErr_Clear();
    return out;
}

/* Wall mode: a task's lifetime up to `until`, less its running samples, is
 * awaiting; what was not charged yet goes to where it waits. */
static void charge(pp_sampling *p, uint32_t row, int64_t until, PyObject *task)
{
    pp_tasks *t = &p->tasks;
    pp_taskrow *r = &t->rows[row];
    int64_t due = until - r->start_ns - r->running_ns - r->awaiting_ns;
    if (due <= 0)
        return;
    if (r->thread == PP_NONE && task != NULL)
        r->thread = loop_thread(p, task);
    if (r->thread == PP_NONE)
        return;                         /* later, once its loop's thread is known */
    if (t->own->where[row] == PP_NONE)
        t->own->where[row] = pp_samples_stack(&p->samples, (uint64_t[]){(uint64_t)r->fid << 32}, 1);
    r->awaiting_ns += due;
    if (S.mode == PP_SAMPLE_WALL && t->own->where[row] != PP_NONE) {
        int64_t iv = S.interval_ns > 0 ? S.interval_ns : 1;
        pp_samples_add(&p->samples, r->thread, t->own->where[row], PP_STATE_AWAITING, due,
                       (uint64_t)((due + iv / 2) / iv));
    }
}

/* The loops' running tasks (asyncio.tasks._current_tasks: loop -> task). */
static int current_tasks(PyObject **out)
{
    int n = 0;
    if (reg.current != NULL) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (n < MAX_LOOPS && PyDict_Next(reg.current, &pos, &k, &v))
            out[n++] = v;               /* compared by address only */
    }
    return n;
}

static int task_state(PyObject *task)
{
    PyObject *st = pp_attr(task, "_state");
    int out = PP_TASK_PENDING;
    if (st != NULL && PyUnicode_Check(st)) {
        if (PyUnicode_CompareWithASCIIString(st, "CANCELLED") == 0)
            out = PP_TASK_CANCELLED;
        else if (PyUnicode_CompareWithASCIIString(st, "FINISHED") == 0)
            out = PP_TASK_DONE;
    }
    Py_XDECREF(st);
    PyErr_Clear();
    return out;
}

/* Per look, at most: the waiting stacks read (round robin over the tasks),
 * and the pending tasks named. A look then costs O(tasks) cheap reads (the
 * registries, each task's state) and a bounded number of dear ones: a task
 * that starts and ends between two looks, or past the budget, and has no
 * sample, gets no row. */
#define WAIT_BUDGET 256
#define NAME_BUDGET 256

/* When a task that a look saw pending ended: halfway since the previous
 * look, or after its last sample; before it was freed. */
static int64_t ended_at(const pp_taskrow *r, int64_t now, int64_t freed)
{
    int64_t end = prev_look + (now - prev_look) / 2;
    if (freed < end)
        end = freed;
    if (r->last_run_ns > end)
        end = r->last_run_ns;
    return end < r->start_ns ? r->start_ns : end;
}

/* Sampling stops: the row keeps its figures, nothing else. */
static void finish(pp_tasks *t, uint32_t i)
{
    drop(t, i);
    unlink_coro(t, i);
    if (t->rows[i].fid == PP_NONE)      /* never sampled, not named: no row */
        free_row(t, i);
}

static void look_end(pp_sampling *p, int64_t now, int stopping)
{
    pp_tasks *t = &p->tasks;
    if (!S.async || !t->own->ready)
        return;
    int64_t t0 = pp_mono_ns(), c0 = own_cpu_ns();
    if (!stopping && now < t0)
        now = t0;                       /* after the drain: its samples reach about now */
    aside a;
    aside_begin(&a);
    PyObject *cur[MAX_LOOPS];
    int ncur = t->own->held && registries() ? current_tasks(cur) : 0, changed = 0;
    uint32_t waits = stopping ? UINT32_MAX : WAIT_BUDGET, names = stopping ? UINT32_MAX : NAME_BUDGET;
    uint32_t n = t->n, first = n ? t->own->cursor % n : 0, next = first;
    uint32_t resume = PP_NONE;
    /* the samples taken before the previous look were all drained by now */
    int64_t drained_before = prev_look;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (first + k) % n;
        if (!stopping && (k & 255) == 255 && pp_mono_ns() - t0 > LOOK_BUDGET_NS) {
            resume = i;                 /* the rest at the next look */
            break;
        }
        if (t->own->flags[i] & F_FREE)
            continue;
        pp_taskrow *r = &t->rows[i];
        if (t->own->ref[i] == NULL) {        /* freed: only its coroutine's address is left */
            if (t->own->coro[i] && (stopping || t->own->dead[i] < drained_before)) {
                unlink_coro(t, i);
                changed = 1;
            }
            if (t->own->coro[i] == 0 && r->fid == PP_NONE)
                free_row(t, i);         /* never sampled, not named: no row */
            continue;
        }
        PyObject *task = get_task(t, i);
        if (task == NULL) {             /* freed since the last look (the callback noted when) */
            if (r->state == PP_TASK_PENDING) {
                r->state = PP_TASK_DONE;    /* (or cancelled: it cannot be read any more) */
                r->end_ns = ended_at(r, now, t->own->dead[i]);
                if (r->fid != PP_NONE)
                    charge(p, i, r->end_ns, NULL);
            }
            drop(t, i);
            changed = 1;
            if (stopping)
                finish(t, i);
            continue;
        }
        if (r->first_run_ns && r->first_run_ns < r->start_ns)
            r->start_ns = r->first_run_ns;
        if (r->thread != PP_NONE && !(t->own->flags[i] & F_NOTED)) {
            PyObject *loop = pp_attr(task, "_loop");    /* held by the task: the address stays */
            if (loop != NULL)
                pp_index_put(&t->own->byloop, (uint64_t)(uintptr_t)loop, r->thread);
            Py_XDECREF(loop);
            t->own->flags[i] |= F_NOTED;
        }
        if (r->state == PP_TASK_PENDING) {
            int state = task_state(task), running = 0;
            for (int c = 0; c < ncur; c++)
                running |= cur[c] == task;
            if (r->fid == PP_NONE && state == PP_TASK_PENDING && names) {
                names--;                /* pending at a look: its awaiting time matters */
                name_row(p, i);
            }
            if (r->fid == PP_NONE) {    /* short, never sampled (yet): its row only if it is */
                r->state = (uint32_t)state;
                if (state != PP_TASK_PENDING)
                    r->end_ns = ended_at(r, now, ALIVE);
            }
            else if (state == PP_TASK_PENDING) {
                if (!running && waits) {
                    waits--;
                    t->own->where[i] = waiting_stack(p, i, task);
                    next = i + 1;
                    charge(p, i, now, task);
                }
                else if (stopping)
                    charge(p, i, now, task);
            }
            else {                      /* ended since the previous look */
                r->state = (uint32_t)state;
                r->end_ns = ended_at(r, now, ALIVE);
                charge(p, i, r->end_ns, task);
                Py_CLEAR(t->own->obj[i]);    /* its end state is read: weakly held from now */
            }
        }
        Py_DECREF(task);                /* perhaps the last reference: the task is freed here */
        if (stopping)
            finish(t, i);
    }
    t->own->cursor = resume != PP_NONE ? resume : next;
    if (changed && tombs > t->own->held + 4096)
        reindex(t);
    PyErr_Clear();
    aside_end(&a);
    if (now - prev_look > t->gap_ns)
        t->gap_ns = now - prev_look;    /* what bounds the error of a start or an end */
    prev_look = now;
    t->looks++;
    int64_t cost = pp_mono_ns() - t0;
    t->look_ns += cost;
    t->own->last_look_ns = begin_cost + own_cpu_ns() - c0;
    begin_cost = 0;
}

void pp_async_look_end(pp_sampling *p, int64_t now)
{
    look_end(p, now, 0);
}

void pp_async_stop(pp_sampling *p, int64_t now)
{
    look_end(p, now, 1);
    stopping_now = 0;
    registries_forget();                /* another run may see another asyncio (reloaded) */
}

void pp_async_stop_begin(pp_sampling *p, int64_t now)
{
    stopping_now = 1;
    if (registry_n < RESCAN_MAX_TASKS)      /* the tasks made since the last look, if cheap */
        pp_async_look_begin(p, now);
}
