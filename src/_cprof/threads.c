/* threads.c — per-thread records (see threads.h). GIL held everywhere.
 *
 * Thread records outlive their threads (their data is kept); TLS points at a
 * record only while its generation matches the profiler's.
 * Never: allocates from a Python allocator (C malloc: never seen by the
 * memory hooks); runs Python code.
 */
#include "threads.h"

#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread pp_tls_t pp_tls __attribute__((tls_model("initial-exec")));
__thread int pp_mem_self __attribute__((tls_model("initial-exec")));
__thread int pp_gc_running __attribute__((tls_model("initial-exec")));
uintptr_t pp_gc_code[3];

static pp_threadset *pp_active_set;     /* the enabled profiler's records */
void (*pp_mem_forget_hook)(PyObject *obj);
static int pp_mem_on;                   /* memory with tracing: peaks per activation */

void pp_threads_init(pp_threadset *s)
{
    s->head = NULL;
    s->tail = &s->head;
    s->n = 0;
    s->byindex = NULL;
    s->cap_byindex = 0;
}

/* A record; its counter tables (~20 KiB) are made only for a thread that
 * attaches (the tracer's): one the sampler names has none until then. */
static pp_thread *new_record(pp_threadset *s, unsigned long ident, unsigned long native_id,
                             int with_tables)
{
    pp_thread *ts = calloc(1, sizeof *ts);
    if (ts == NULL || (with_tables && pp_tables_init(&ts->t) < 0)) {
        free(ts);
        return NULL;
    }
    ts->ident = ident;
    ts->native_id = native_id;
    ts->index = s->n++;
    *s->tail = ts;
    s->tail = &ts->next;
    if (ts->index >= s->cap_byindex) {     /* many threads: find a record without a walk */
        uint32_t cap = s->cap_byindex ? s->cap_byindex * 2 : 64;
        pp_thread **a = realloc(s->byindex, (size_t)cap * sizeof *a);
        if (a) {                        /* filled from the list: no gap after a failure */
            s->byindex = a;
            s->cap_byindex = cap;
            for (pp_thread *o = s->head; o; o = o->next)
                a[o->index] = o;
        }
    }
    if (ts->index < s->cap_byindex)
        s->byindex[ts->index] = ts;
    return ts;
}

static pp_thread *attach_impl(pp_threadset *s)
{
    unsigned long ident = PyThread_get_thread_ident();
    pp_thread *ts;
    /* A record from an earlier enable of this profiler is reused; one made in
     * this enable belongs to a thread that has ended (its ident reused). */
    for (ts = s->head; ts; ts = ts->next)
        if (ts->ident == ident && ts->attach_gen != s->gen)
            break;
    if (ts != NULL && ts->t.fidx.e == NULL) {     /* the sampler's record */
        int timeline = ts->t.tl.on;
        if (pp_tables_init(&ts->t) < 0) {
            s->oom = 1;
            return NULL;
        }
        ts->t.tl.on = timeline;
    }
    if (ts == NULL) {
        ts = new_record(s, ident, PyThread_get_thread_native_id(), 1);
        if (ts == NULL) {
            s->oom = 1;
            return NULL;
        }
        /* Headroom kept free below the eval hook: 256 KiB, or a quarter of a
         * smaller stack; 0 (no guard) when the platform cannot tell. */
        uintptr_t low = pp_cstack_low(), here = (uintptr_t)&low;
        if (low && here > low) {
            uintptr_t room = (here - low) / 4;
            ts->cstack_guard = low + (room < (256u << 10) ? room : (256u << 10));
        }
        ts->t.tl.on = s->timeline;
    }
    ts->name_at = ts->name ? UINT64_MAX : 0;
    ts->attach_gen = s->gen;
    pp_tls.gen = s->gen;
    pp_tls.ts = ts;
    pp_tls.paused = NULL;
    return ts;
}

__attribute__((noinline, cold)) pp_thread *pp_threads_attach(pp_threadset *s)
{
    int was = pp_memory_self_begin();
    pp_thread *ts = attach_impl(s);
    pp_memory_self_end(was);
    return ts;
}

/* Pausing points the calling thread's TLS at no record, which the event
 * paths already read as "nothing to record": no cost on the hot path. A new
 * enable (new generation) ends the pause. */
void pp_threads_pause(pp_threadset *s, int paused)
{
    if (paused) {
        pp_thread *ts = pp_threads_current(s);
        if (ts) {
            pp_tls.paused = ts;
            pp_tls.ts = NULL;
        }
    }
    else if (pp_tls.gen == s->gen && pp_tls.paused) {
        pp_tls.ts = pp_tls.paused;
        pp_tls.paused = NULL;
    }
}

int pp_threads_paused(const pp_threadset *s)
{
    return pp_tls.gen == s->gen && pp_tls.paused != NULL;
}

void pp_threads_activate(pp_threadset *s)
{
    pp_active_set = s;
}

/* pyprof's own Python threads (the control channel's), by kernel id. */
#define OWN_THREADS 8
static uint32_t own_tids[OWN_THREADS];

void pp_threads_own(int on)
{
    uint32_t tid = (uint32_t)syscall(SYS_gettid);
    for (int i = 0; i < OWN_THREADS; i++) {
        if (on ? own_tids[i] == 0 : own_tids[i] == tid) {
            own_tids[i] = on ? tid : 0;
            return;
        }
    }
}

int pp_threads_is_own(uint32_t tid)
{
    for (int i = 0; tid != 0 && i < OWN_THREADS; i++)
        if (own_tids[i] == tid)
            return 1;
    return 0;
}

int pp_threads_self_paused(void)
{
    pp_threadset *s = pp_active_set;
    return s != NULL && pp_threads_paused(s);
}

/* The process's first thread (Linux: its kernel id is the process id). */
static int is_process_main_thread(unsigned long native_id)
{
#ifdef __linux__
    return native_id != 0 && native_id == (unsigned long)getpid();
#else
    (void)native_id;
    return 0;
#endif
}

/* A thread's name from threading._active (a dict lookup: no Python code
 * runs). A new thread enters _active only after its first events, so this is
 * retried on later events. Without threading (pyprof does not import it), the
 * main thread has the name threading would give it. */
static void resolve_name_impl(pp_thread *ts)
{
    pp_err_state es;
    pp_err_save(&es);
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
    else if (mod == NULL && is_process_main_thread(ts->native_id)) {
        ts->name = PyUnicode_InternFromString("MainThread");
        ts->name_tries = 0;
    }
    PyErr_Clear();
    pp_err_restore(&es);
}

static void resolve_name(pp_thread *ts)
{
    int was = pp_memory_self_begin();
    resolve_name_impl(ts);
    pp_memory_self_end(was);
}

/* Tracer: on every return of the first 256 events, then at doubling event
 * counts. No fixed number of tries: a collection in the new thread can run
 * any number of finalizers before it enters _active, and a raw _thread thread,
 * never there, costs only log2(events) lookups. */
__attribute__((noinline, cold)) void pp_thread_name_due(pp_thread *ts)
{
    if (ts->name == NULL)
        resolve_name(ts);
    ts->name_at = ts->name ? UINT64_MAX : ts->events < 256 ? ts->events + 1 : 2 * ts->events;
}

/* The sampler's helper sees every Python thread soon after it starts: its
 * name is read then, while the thread is alive (a short-lived thread may be
 * gone by the time its samples are drained). */
pp_thread *pp_threads_sampled(pp_threadset *s, uint32_t tid, uint64_t ident)
{
    uint64_t key = (uint64_t)tid + 1;
    uint32_t index = pp_index_get(&s->native, key);
    pp_thread *ts;
    if (index != PP_NONE) {
        if (index < s->cap_byindex && index < s->n)
            ts = s->byindex[index];
        else
            for (ts = s->head; ts && ts->index != index; ts = ts->next)
                ;
    }
    else {
        ts = new_record(s, (unsigned long)ident, tid, 0);
        if (ts == NULL)
            return NULL;
        ts->name_tries = ident ? 8 : 0;
        ts->name_pass = s->sample_pass - 1;
        if (pp_index_put(&s->native, key, ts->index) < 0)
            return NULL;
    }
    /* Once per pass: the records of one drain are all read before the
     * thread can enter threading._active (the drain holds the GIL). */
    if (ts && ts->name_tries && ts->name == NULL && ts->name_pass != s->sample_pass) {
        ts->name_pass = s->sample_pass;
        ts->name_tries--;
        resolve_name(ts);
    }
    return ts;
}

void pp_threads_clear(pp_threadset *s)
{
    for (pp_thread *ts = s->head; ts; ts = ts->next) {
        pp_tables_clear(&ts->t);
        pp_stepbase_free(&ts->step);
        ts->st.depth = 0;
        ts->st.line_cost = 0;
        ts->events = 0;
        ts->flush_at = 0;
    }
}

void pp_threads_free(pp_threadset *s)
{
    pp_thread *ts = s->head;
    while (ts) {
        pp_thread *next = ts->next;
        pp_tables_free(&ts->t);
        pp_stack_free(&ts->st);
        pp_stepbase_free(&ts->step);
        Py_XDECREF(ts->name);
        free(ts);
        ts = next;
    }
    free(s->byindex);
    pp_threads_init(s);
}

/* The other threads do not exist in a forked child; their TLS went with them. */
void pp_threads_after_fork(pp_threadset *s)
{
    pp_threads_free(s);
    pp_index_clear(&s->native);
    pp_tls.gen = 0;
    pp_tls.ts = NULL;
    pp_tls.paused = NULL;
}

void pp_threads_mem_frames(int on)
{
    pp_mem_on = on;
}

void pp_threads_mem_delta(int64_t net, int64_t alloc, int64_t blocks)
{
    if (!pp_mem_on)             /* first: memory alone or with the sampler pays nothing more */
        return;
    pp_threadset *s = pp_active_set;
    int attached;
    if (s == NULL || pp_tls.gen != s->gen || pp_tls.ts == NULL
        || (net < 0 && !(pp_signal_tstate(&attached) && attached)))
        return;                 /* a free without the GIL: its stack is not to be touched */
    pp_stack *st = &pp_tls.ts->st;
    pp_thread_mem_fold(&pp_tls.ts->t, st);      /* C code's blocks came first */
    if (net > 0)
        pp_thread_mem_settle(&pp_tls.ts->t, st);    /* a new allocation: the frame is gone */
    st->mem_cur += net;
    st->mem_alloc += alloc;
    st->mem_blocks += blocks;
    if (net > 0 && st->depth && st->mem_cur > st->f[st->depth - 1].mem_hw)
        st->f[st->depth - 1].mem_hw = st->mem_cur;
}

uint64_t pp_threads_active_gen(void)
{
    return pp_active_set ? pp_active_set->gen : 0;
}

/* No GIL: only atomics of the calling thread's own record. A signal handler's
 * allocation may interleave with the thread's take; each update is atomic. */
void pp_threads_mem_aside(uint64_t gen, int64_t net, int64_t alloc, int64_t blocks)
{
    pp_thread *ts = pp_tls.ts;
    if (gen == 0 || pp_tls.gen != gen || ts == NULL)
        return;
    pp_stack *st = &ts->st;
    int64_t now = atomic_fetch_add_explicit(&st->aside_net, net, memory_order_relaxed) + net;
    if (now > atomic_load_explicit(&st->aside_hw, memory_order_relaxed))
        atomic_store_explicit(&st->aside_hw, now, memory_order_relaxed);
    if (alloc) {
        atomic_fetch_add_explicit(&st->aside_alloc, alloc, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->aside_blocks, blocks, memory_order_relaxed);
    }
    atomic_store_explicit(&st->aside, 1, memory_order_relaxed);
}

/* The set-aside bytes happened in the running activation (the innermost
 * frame, whose call into C made them): its high point is the thread's net
 * then plus their most. */
void pp_thread_mem_take_aside(pp_tables *t, pp_stack *st)
{
    atomic_store_explicit(&st->aside, 0, memory_order_relaxed);
    int64_t hw = atomic_exchange_explicit(&st->aside_hw, 0, memory_order_relaxed);
    int64_t net = atomic_exchange_explicit(&st->aside_net, 0, memory_order_relaxed);
    int64_t alloc = atomic_exchange_explicit(&st->aside_alloc, 0, memory_order_relaxed);
    int64_t blocks = atomic_exchange_explicit(&st->aside_blocks, 0, memory_order_relaxed);
    if (alloc > 0)
        pp_thread_mem_settle(t, st);    /* a new allocation: the returned frame is gone */
    if (st->depth && hw > 0 && st->mem_cur + hw > st->f[st->depth - 1].mem_hw)
        st->f[st->depth - 1].mem_hw = st->mem_cur + hw;
    st->mem_cur += net;
    st->mem_alloc += alloc;
    st->mem_blocks += blocks;
}
