/* sampler_wall.c — wall mode's thread slots (sampler_int.h).
 *
 * Owns: one slot per Python thread — its timers (a CLOCK_MONOTONIC tick, a
 * CPU-clock wake-up), whether it is parked, the time charged for it — made
 * and dropped by the helper (GIL held), looked at by the ticker (without the
 * GIL), and parked or woken by the thread's own signal handler (sampler.c).
 * The slot list changes under pp_wall_mu and the GIL; the ticker reads it
 * under pp_wall_mu.
 * Never: frees a slot's memory (a late signal may carry its address).
 */
#define _GNU_SOURCE
#include "sampler_int.h"
#include "sampler_ring.h"

#include "frames.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

wslot *pp_wall_arena;
uint32_t pp_wall_arena_used;
static wslot *free_slots;
pthread_mutex_t pp_wall_mu = PTHREAD_MUTEX_INITIALIZER;

static void send_wake(wslot *sl);
static void suspect(wslot *sl, int64_t since);

/* Parks a slot whose thread's CPU clock reads `cpu`: a CPU-clock timer will
 * wake it; its tick is stopped by the caller. 0 if it cannot be woken. */
int pp_wall_set_parked(wslot *sl, int64_t cpu, int fresh)
{
    struct itimerspec at = pp_itimer(cpu + WAKE_CPU_NS, 0);
    if (!sl->have_wake || timer_settime(sl->wake, TIMER_ABSTIME, &at, NULL) != 0)
        return 0;
    int64_t now = pp_mono_ns();
    if (atomic_exchange(&sl->suspect_ns, 0))
        atomic_fetch_sub_explicit(&S.nsuspects, 1, memory_order_relaxed);
    atomic_store(&sl->cpu_parked, cpu);
    atomic_store(&sl->top_key, pp_frames_top_key(sl->tstate));
    atomic_store(&sl->top_ran, 0);
    atomic_store(&sl->seen_ns, now);
    atomic_store(&sl->parked_ns, now);
    if (fresh || now - atomic_load(&sl->duty_ns) > DUTY_WINDOW_NS) {
        atomic_store(&sl->duty_ns, now);
        atomic_store(&sl->duty_cpu, cpu);
    }
    atomic_store(&sl->left_ns, 0);
    atomic_store(&sl->young, 0);
    atomic_store(&sl->parked, 1);
    atomic_fetch_add_explicit(&S.nparked, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&S.parked, 1, memory_order_relaxed);
    return 1;
}

/* ------------------------------------------------ the helper's side (GIL) */

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

/* Wall mode: every Python thread gets a CLOCK_MONOTONIC timer whose signal the
 * kernel sends to that thread at expiry. A helper sending the signals instead
 * must itself be scheduled on time: on a busy CPU it runs late while the
 * program computes and on time while it sleeps, which biases wall shares
 * toward sleeping code. A thread idle long enough parks (sampler.c): its
 * timer stops until it runs again. Slots of threads that are gone are dropped
 * (GIL held: the thread list cannot change under us). */

static wslot *new_slot(void)
{
    if (free_slots) {
        wslot *sl = free_slots;
        free_slots = sl->next_free;
        return sl;
    }
    if (pp_wall_arena == NULL) {
        void *m = mmap(NULL, (size_t)MAX_SLOTS * sizeof(wslot), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        pp_wall_arena = m;
    }
    if (pp_wall_arena_used == MAX_SLOTS)
        return NULL;
    wslot *sl = &pp_wall_arena[pp_wall_arena_used];
    __atomic_store_n(&pp_wall_arena_used, pp_wall_arena_used + 1, __ATOMIC_RELEASE);
    return sl;
}

/* The time a parked thread has been idle goes into the ring (before a drain,
 * at stop; GIL held, so the slot list is stable). */
void pp_wall_flush(void)
{
    int64_t now = pp_mono_ns();
    for (uint32_t i = 0; i < S.nslots; i++) {
        wslot *sl = S.slots[i];
        if (atomic_load(&sl->parked) && atomic_load(&sl->sampled)) {
            /* woken, not yet awake: its last stack only up to when it ran */
            int64_t left = atomic_load(&sl->left_ns), upto = left > 0 && left < now ? left : now;
            int64_t prev = atomic_load(&sl->accounted);
            if (prev < upto && atomic_compare_exchange_strong(&sl->accounted, &prev, upto)
                && !pp_ring_write_repeat(sl->tid, sl->ident, upto, upto - prev))
                atomic_compare_exchange_strong(&sl->accounted, &upto, prev);   /* carries */
            now = pp_mono_ns();
        }
    }
}

/* A parked thread found gone at `now` (pp_wall_mu held): it ended after it
 * was last seen alive, and before the ticker's next look at it; charged to
 * halfway. Seen alive when a run of still looks began, it was alive at the
 * run's last look (the runs are apart in time: one extends at most). */
static int64_t ended_at(wslot *sl, int64_t now)
{
    int64_t seen = atomic_load(&sl->seen_ns);
    for (uint32_t j = S.nstill > STILL_RUNS ? S.nstill - STILL_RUNS : 0; j < S.nstill; j++) {
        const int64_t from = S.still[j % STILL_RUNS].from, upto = S.still[j % STILL_RUNS].upto;
        if (from <= seen && seen < upto)      /* but the last holder may have ended in it */
            seen = sl->doubt_ns > seen && sl->doubt_ns < upto ? sl->doubt_ns : upto;
    }
    int64_t gap = now - seen;
    int64_t recheck = atomic_load(&S.recheck_ns);
    if (recheck > 0 && gap > recheck)
        gap = recheck;
    return gap > 0 ? seen + gap / 2 : now;
}

/* A thread that ended while parked (its slot taken from the parked ones):
 * its last stack is charged up to when it was seen to run again, if it was
 * (woken, it could not take the signal: its exit had begun), the rest of its
 * life, without Python frames, to none of its code; else up to `end`. */
static void charge_ended(wslot *sl, int64_t end)
{
    int64_t prev = atomic_exchange(&sl->accounted, end);
    int64_t left = atomic_load(&sl->left_ns);
    pp_rawframe no_frames[1];
    uintptr_t no_native[1];
    if (left > prev && left < end) {
        pp_ring_write_repeat(sl->tid, sl->ident, left, left - prev);
        pp_ring_write_sample((uint32_t)sl->tid, sl->ident, end, PP_STATE_IDLE, 0, no_frames, 0,
                             no_native, 0, end - left, 0, 0);
    }
    else
        pp_ring_write_repeat(sl->tid, sl->ident, end, end - prev);
}

static void drop_slot(wslot *sl, int own_process)
{
    if (pp_wall_take_parked(sl)) {
        /* a thread that ended while parked: up to when it was last seen alive
         * (or now, if its kernel thread still exits) */
        struct timespec c;
        int64_t end = pp_mono_ns();
        if (own_process && clock_gettime(pp_thread_cpu_clock(sl->tid), &c) != 0)
            end = ended_at(sl, end);
        charge_ended(sl, end);
    }
    if (atomic_exchange(&sl->suspect_ns, 0))
        atomic_fetch_sub_explicit(&S.nsuspects, 1, memory_order_relaxed);
    atomic_store(&sl->magic, 0);
    if (own_process) {
        timer_delete(sl->tick);
        if (sl->have_wake)
            timer_delete(sl->wake);
    }
    sl->next_free = free_slots;
    free_slots = sl;
}

/* When a thread of this process started, on CLOCK_MONOTONIC (Linux: its
 * start in clock ticks since boot), or 0: a thread found a few ticks after it
 * started is charged from its start, as it would have been sampled. */
static int64_t thread_start_ns(pid_t tid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", (long)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');        /* the name may hold spaces */
    if (p == NULL)
        return 0;
    for (int field = 2; field < 22 && p; field++)   /* starttime is field 22 */
        p = strchr(p + 1, ' ');
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec boot, mono;
    if (p == NULL || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0
        || clock_gettime(CLOCK_MONOTONIC, &mono) != 0)
        return 0;
    unsigned long long ticks = strtoull(p + 1, NULL, 10);
    int64_t since_boot = (int64_t)(ticks * (1000000000ull / (unsigned long long)hz));
    return pp_ts_ns(mono) - (pp_ts_ns(boot) - since_boot);
}

/* When a thread found by the refresh at `now` started: it was not there at
 * the previous refresh. Soon after it, halfway between the two (/proc's
 * start time is no finer: it counts 10 ms ticks, and reading it costs ~20 µs,
 * a thousand threads started at once 20 ms); long after, from /proc. At the
 * first refresh, every thread was there before sampling started. */
static int64_t birth(pid_t tid, int64_t prev_refresh, int64_t now)
{
    if (prev_refresh == 0)
        return S.started_ns;
    if (now - prev_refresh <= 2 * SCAN_NS)
        return prev_refresh + (now - prev_refresh) / 2;
    return thread_start_ns(tid);
}

static int make_timer(clockid_t clock, pid_t tid, void *value, timer_t *out)
{
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = atomic_load(&S.rt_signal);
    ev.sigev_notify_thread_id = tid;
    ev.sigev_value.sival_ptr = value;
    return timer_create(clock, &ev, out);
}


#define YOUNG_NS (50 * 1000 * 1000)

/* GIL held. A new thread starts parked: it does not run Python now (we hold
 * the GIL), and most threads a program starts wait for work. Its first
 * sample is taken here, from its frames (the GIL keeps them still), unless
 * native stacks are asked: then it is woken once to take it itself. If it
 * runs, it is woken as any parked thread is, and its tick starts. 0: it
 * ticks from now (the calling thread; a thread without Python frames yet). */
static int start_parked(wslot *sl, PyThreadState *ts, pid_t self)
{
    struct timespec c;
    if (sl->tid == self || clock_gettime(pp_thread_cpu_clock(sl->tid), &c) != 0)
        return 0;
    if (S.native) {                     /* this wake-up is its look where it waits */
        sl->native_looked = 1;
        return pp_wall_set_parked(sl, pp_ts_ns(c), 1) ? (send_wake(sl), 1) : 0;
    }
    pp_rawframe frames[MAX_FRAMES];
    uintptr_t no_native[1];
    int truncated = 0;
    uintptr_t coro = 0;
    int nframes = pp_frames_walk_coro(ts, frames, MAX_FRAMES, &truncated, &coro);
    int64_t now = pp_mono_ns(), from = atomic_load(&sl->accounted);
    if (nframes <= 0
        || !pp_ring_write_sample((uint32_t)sl->tid, sl->ident, now, PP_STATE_IDLE, truncated,
                                 frames, nframes, no_native, 0, now > from ? now - from : 0,
                                 S.async ? coro : 0, 0))
        return 0;
    atomic_store(&sl->accounted, now);
    atomic_store(&sl->sampled, 1);
    sl->where = pp_stack_key(frames, nframes);
    return pp_wall_set_parked(sl, pp_ts_ns(c), 1);
}

/* GIL and pp_wall_mu held: a slot with its timers (not armed) for thread
 * `tid`, charged from `accounted`. 1 made; 0 not (the thread just exited,
 * or out of timers); -1 out of memory. The caller arms it and lists it. */
static int make_slot(PyThreadState *ts, pid_t tid, int64_t accounted, wslot **out)
{
    if (S.prof)             /* its record, in the order threads appear */
        (void)pp_threads_sampled(S.prof->threads, (uint32_t)tid, (uint64_t)pp_tstate_ident(ts));
    if (S.nslots == S.cap_slots
        && pp_sampler_grow_array((void **)&S.slots, &S.cap_slots, S.nslots + 1, sizeof *S.slots) < 0)
        return -1;
    wslot *sl = new_slot();
    if (sl == NULL)
        return -1;
    sl->tid = tid;
    sl->ts_id = pp_tstate_serial(ts);
    sl->ident = (uint64_t)pp_tstate_ident(ts);
    sl->tstate = (uintptr_t)ts;
    sl->run = S.run;
    sl->alive = 1;
    atomic_store(&sl->parked, 0);
    atomic_store(&sl->sampled, 0);
    atomic_store(&sl->moved_ns, MOVED_CPU_NS);
    atomic_store(&sl->suspect_ns, 0);
    atomic_store(&sl->wake_sent, 0);
    sl->native_looked = 0;
    atomic_store(&sl->young, 1);
    sl->where = 0;
    sl->doubt_ns = 0;
    atomic_store(&sl->accounted, accounted);
    if (make_timer(CLOCK_MONOTONIC, tid, sl, &sl->tick) != 0) {
        sl->next_free = free_slots;
        free_slots = sl;
        return 0;
    }
    sl->have_wake = make_timer(pp_thread_cpu_clock(tid), tid,
                               (char *)sl + SIG_WAKE, &sl->wake) == 0;
    atomic_store_explicit(&sl->magic, SLOT_MAGIC, memory_order_release);
    *out = sl;
    return 1;
}

/* GIL held: a slot with its timers for every Python thread with a kernel
 * thread; the slots of threads that are gone are dropped. */
void pp_wall_refresh(void)
{
    static pp_index by_tid;
    int unbound = 0;
    if (by_tid.e == NULL && pp_index_init(&by_tid, 64) < 0)
        return;
    pp_index_clear(&by_tid);
    for (uint32_t i = 0; i < S.nslots; i++) {
        S.slots[i]->alive = 0;
        (void)pp_index_put(&by_tid, (uint64_t)S.slots[i]->tid + 1, i);
    }
    PyInterpreterState *interp = PyInterpreterState_Main();
    int64_t now = pp_mono_ns(), prev_refresh = S.refresh_ns;
    S.refresh_ns = now;
    pid_t self = (pid_t)syscall(SYS_gettid);
    /* The helper's thread state (PyGILState_Ensure's) is made for this pass
     * and goes after it: the newest one but its is what tells a new thread. */
    PyThreadState *head = PyInterpreterState_ThreadHead(interp);
    if (self == S.helper_tid && head != NULL && head == PyThreadState_Get())
        head = PyThreadState_Next(head);
    S.threads_head = (uintptr_t)head;
    if (S.prof)
        S.prof->threads->sample_pass++;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        pid_t tid = (pid_t)pp_tstate_native_tid(ts);
        if (tid == 0)
            unbound = 1;                /* started, not yet running: look again soon */
        if (tid == 0 || tid == S.helper_tid)
            continue;
        uint32_t i = pp_index_get(&by_tid, (uint64_t)tid + 1);
        if (i != PP_NONE && S.slots[i]->ts_id == pp_tstate_serial(ts)) {
            S.slots[i]->alive = 1;
            S.slots[i]->tstate = (uintptr_t)ts;
            atomic_store(&S.slots[i]->seen_ns, now);    /* its state is there: not ended */
            continue;
        }
        if (pp_tstate_prealloc(interp, ts)) {      /* O(threads): new states only */
            unbound = 1;
            continue;
        }
        /* A thread with no Python frames yet (its start waits for the GIL)
         * is looked at again at the next refresh: it then has the stack it
         * waits in, and starts parked rather than ticking until it parks. */
        int64_t born = birth(tid, prev_refresh, now);
        pp_rawframe top[1];
        int cut = 0;
        if (tid != self && born > 0 && now - born < YOUNG_NS && pp_frames_walk(ts, top, 1, &cut) == 0) {
            unbound = 1;
            continue;
        }
        wslot *sl;
        /* threads alive at start count from the start, later ones from theirs */
        int made = make_slot(ts, tid, born <= 0 || born > now ? now
                                      : born < S.started_ns ? S.started_ns : born, &sl);
        if (made < 0)
            break;
        if (made == 0)
            continue;
        if (!start_parked(sl, ts, self)) {
            struct itimerspec its = pp_itimer(S.interval_ns, S.interval_ns);
            if (timer_settime(sl->tick, 0, &its, NULL) != 0) {
                drop_slot(sl, 1);
                continue;
            }
        }
        S.slots[S.nslots++] = sl;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < S.nslots; i++) {
        if (S.slots[i]->alive)
            S.slots[k++] = S.slots[i];
        else
            drop_slot(S.slots[i], 1);
    }
    S.nslots = k;
    atomic_store(&S.unbound, unbound);
}

/* ------------------------------------- new threads: a slot from their start */

/* Named now: one that ends before the next drain is gone from
 * threading._active, where the drain would look its name up. */
static void name_thread(PyThreadState *ts, pid_t tid, PyObject *name)
{
    pp_thread *rec = name && S.prof ?
        pp_threads_sampled(S.prof->threads, (uint32_t)tid, (uint64_t)pp_tstate_ident(ts)) : NULL;
    if (rec && rec->name == NULL) {
        rec->name = Py_NewRef(name);
        rec->name_tries = 0;
    }
}

/* A thread the refresh finds is charged from its start, but one that ends
 * between two refreshes (every SCAN_NS, once the helper has the GIL) was
 * never seen: 200 threads of 2 ms, one after the other, got no sample. So
 * while wall sampling runs, threading's start function is wrapped, and each
 * new thread makes its own slot before it runs its target. Its first tick
 * comes at a uniform point of its first interval and weighs one interval
 * (the thread's charge starts one interval before that tick): a thread
 * shorter than an interval is sampled with a chance of its time over the
 * interval, and the time after a thread's last tick, which no tick sees, is
 * made up for (as for CPU mode's first samples, sampler_drain.c). In CPU
 * mode with task-clock events, the thread opens its event the same way. */
static void thread_begins(PyObject *name)
{
    if (!atomic_load(&S.active) || S.pid != getpid() || !S.prof)
        return;
    PyThreadState *ts = PyThreadState_Get();
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (S.mode == PP_SAMPLE_CPU) {      /* CPU mode's task-clock events */
        if (pp_on_task_clock())
            pp_cpuclock_thread_begins(tid);
        name_thread(ts, tid, name);
        return;
    }
    int64_t now = pp_mono_ns();
    uint64_t x = ((uint64_t)tid << 32 ^ (uint64_t)now) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    int64_t phase = 1 + (int64_t)(x % (uint64_t)S.interval_ns);
    pthread_mutex_lock(&pp_wall_mu);
    uint32_t i = 0;
    while (i < S.nslots && S.slots[i]->tid != tid)
        i++;
    wslot *sl;
    /* stopping sets S.stop before it deletes the slots under pp_wall_mu: none
     * is made after (the stop joins its helpers without the GIL) */
    if (i == S.nslots && atomic_load(&S.active) && !atomic_load(&S.stop)
        && make_slot(ts, tid, now + phase - S.interval_ns, &sl) > 0) {
        struct itimerspec its = pp_itimer(phase, S.interval_ns);
        if (timer_settime(sl->tick, 0, &its, NULL) != 0)
            drop_slot(sl, 1);
        else
            S.slots[S.nslots++] = sl;
    }
    pthread_mutex_unlock(&pp_wall_mu);
    name_thread(ts, tid, name);
}

/* The new thread's function behind thread_begins: a C call, so no frame of
 * pyprof's is in the thread's stack. */
typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *name;                     /* the Thread's name, or NULL */
} begin_obj;

static PyObject *begin_call(PyObject *self, PyObject *args, PyObject *kw)
{
    thread_begins(((begin_obj *)self)->name);
    return PyObject_Call(((begin_obj *)self)->fn, args, kw);
}

static void begin_dealloc(PyObject *self)
{
    Py_XDECREF(((begin_obj *)self)->fn);
    Py_XDECREF(((begin_obj *)self)->name);
    PyObject_Free(self);
}

static PyTypeObject begin_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyprof._cprof.ThreadBegins",
    .tp_basicsize = sizeof(begin_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_call = begin_call,
    .tp_dealloc = begin_dealloc,
};

/* The name of the Thread whose bound _bootstrap is `fn` (a dict lookup: no
 * Python code runs), or NULL. Never leaves an exception set. */
static PyObject *thread_name(PyObject *fn)
{
    if (!PyMethod_Check(fn))
        return NULL;
    PyObject *dict = PyObject_GenericGetDict(PyMethod_GET_SELF(fn), NULL);
    PyObject *name = dict && PyDict_Check(dict) ? PyDict_GetItemString(dict, "_name") : NULL;
    name = name && PyUnicode_Check(name) ? Py_NewRef(name) : NULL;
    Py_XDECREF(dict);
    PyErr_Clear();
    return name;
}

/* threading's start function, wrapped (self: the original): the new
 * thread's function, its first argument, goes behind thread_begins. */
static PyObject *start_wrapped(PyObject *orig, PyObject *args, PyObject *kw)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1)
        return PyObject_Call(orig, args, kw);
    begin_obj *b = PyObject_New(begin_obj, &begin_type);
    PyObject *nargs = b ? PyTuple_New(n) : NULL;
    if (nargs == NULL) {
        Py_XDECREF(b);
        return NULL;
    }
    b->fn = Py_NewRef(PyTuple_GET_ITEM(args, 0));
    b->name = thread_name(b->fn);
    PyTuple_SET_ITEM(nargs, 0, (PyObject *)b);
    for (Py_ssize_t i = 1; i < n; i++)
        PyTuple_SET_ITEM(nargs, i, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    PyObject *r = PyObject_Call(orig, nargs, kw);
    Py_DECREF(nargs);
    return r;
}

static PyMethodDef start_def = {
    PP_THREADING_START, (PyCFunction)(void (*)(void))start_wrapped,
    METH_VARARGS | METH_KEYWORDS,
    "threading's thread start, wrapped by pyprof's wall sampler (docs/sampling.md)"};

static PyObject *hooked_module, *hook;

/* GIL held: wrap threading's start function (on) or put it back, if it is
 * still ours (off). Never leaves an exception set. Not imported for it: if
 * the program imports threading later, pp_sampler_hook_threading wraps it. */
void pp_wall_hook_threads(int on)
{
    if (PyErr_Occurred())
        return;                         /* not while an exception passes */
    PyObject *mods = PyImport_GetModuleDict();                 /* borrowed */
    PyObject *mod = on && hook == NULL && mods ? PyDict_GetItemString(mods, "threading") : NULL;
    if (mod != NULL && PyType_Ready(&begin_type) == 0) {
        Py_INCREF(mod);
        PyObject *orig = PyObject_GetAttrString(mod, PP_THREADING_START);
        PyObject *wrapped = orig ? PyCFunction_NewEx(&start_def, orig, NULL) : NULL;
        if (wrapped && PyObject_SetAttrString(mod, PP_THREADING_START, wrapped) == 0) {
            hooked_module = Py_NewRef(mod);
            hook = Py_NewRef(wrapped);
        }
        Py_XDECREF(wrapped);
        Py_XDECREF(orig);
        Py_XDECREF(mod);
    }
    else if (!on && hook != NULL) {
        PyObject *now = PyObject_GetAttrString(hooked_module, PP_THREADING_START);
        if (now == hook)
            (void)PyObject_SetAttrString(hooked_module, PP_THREADING_START,
                                         PyCFunction_GET_SELF(hook));
        Py_XDECREF(now);
        Py_CLEAR(hook);
        Py_CLEAR(hooked_module);
    }
    PyErr_Clear();
}

/* ------------------------------------- signal.pause: not ended by a tick */

/* pause() returns at any handled signal, ours too: the program's
 * `setitimer(ITIMER_REAL, 1); pause()` came back at the first tick, before
 * its SIGALRM. While wall sampling runs, signal.pause waits with the wall
 * signal blocked as well, so only the program's signals end it; a tick
 * meanwhile lands as the wait ends (the thread was idle: its time is
 * charged there). Not sampling (stopped, a forked child), the original. */
static PyObject *pause_wrapped(PyObject *orig, PyObject *unused)
{
    (void)unused;
    int sig = atomic_load(&S.rt_signal);
    sigset_t mask;
    if (!atomic_load(&S.active) || S.mode != PP_SAMPLE_WALL || S.pid != getpid() || sig <= 0
        || pthread_sigmask(SIG_BLOCK, NULL, &mask) != 0)
        return PyObject_CallNoArgs(orig);
    sigaddset(&mask, sig);
    Py_BEGIN_ALLOW_THREADS
    (void)sigsuspend(&mask);
    Py_END_ALLOW_THREADS
    if (PyErr_CheckSignals())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef pause_def = {
    "pause", (PyCFunction)(void (*)(void))pause_wrapped, METH_NOARGS,
    "pause()\n--\n\nWait until a signal arrives (pyprof's wall sampler's ticks do not end "
    "the wait: docs/sampling.md)."};

static PyObject *pause_hook, *pause_orig;

/* The modules whose `pause` we replace: signal, and _signal, whose names a
 * later `import signal` copies. */
static const char *const pause_modules[] = {"signal", "_signal"};

void pp_wall_hook_pause(int on)
{
    if (PyErr_Occurred())
        return;                         /* not while an exception passes */
    PyObject *mods = PyImport_GetModuleDict();                 /* borrowed */
    if (mods == NULL)
        return;
    if (on && pause_hook == NULL) {
        for (size_t i = 0; i < sizeof pause_modules / sizeof *pause_modules; i++) {
            PyObject *mod = PyDict_GetItemString(mods, pause_modules[i]);   /* borrowed */
            PyObject *orig = mod ? PyObject_GetAttrString(mod, "pause") : NULL;
            PyErr_Clear();
            if (orig == NULL || !PyCFunction_Check(orig)
                || (pause_orig != NULL && orig != pause_orig)) {
                Py_XDECREF(orig);       /* not the builtin (the program's own): left be */
                continue;
            }
            if (pause_hook == NULL) {
                PyObject *modname = PyObject_GetAttrString(orig, "__module__");
                PyErr_Clear();
                pause_hook = PyCFunction_NewEx(&pause_def, orig, modname);
                Py_XDECREF(modname);
                if (pause_hook == NULL) {
                    Py_DECREF(orig);
                    break;
                }
                pause_orig = Py_NewRef(orig);
            }
            (void)PyObject_SetAttrString(mod, "pause", pause_hook);
            Py_DECREF(orig);
            PyErr_Clear();
        }
    }
    else if (!on && pause_hook != NULL) {
        for (size_t i = 0; i < sizeof pause_modules / sizeof *pause_modules; i++) {
            PyObject *mod = PyDict_GetItemString(mods, pause_modules[i]);   /* borrowed */
            PyObject *now = mod ? PyObject_GetAttrString(mod, "pause") : NULL;
            PyErr_Clear();
            if (now == pause_hook)
                (void)PyObject_SetAttrString(mod, "pause", pause_orig);
            Py_XDECREF(now);
        }
        Py_CLEAR(pause_hook);
        Py_CLEAR(pause_orig);
    }
    PyErr_Clear();
}

void pp_wall_delete(int own_process)
{
    for (uint32_t i = 0; i < S.nslots; i++)
        drop_slot(S.slots[i], own_process);
    S.nslots = 0;
}

/* A suspect (check_parked) may have run Python and blocked elsewhere, or only
 * queued for the GIL. We hold the GIL, so its frames stand still and its
 * thread state is alive (the refresh just matched it): its stack is read
 * here. Elsewhere: its old stack is charged up to when it was seen to move,
 * the new one from then. The same: it stays parked, and one seen there again
 * after a while parked must move twice as much to be a suspect again. With
 * native stacks, only the thread can read its own: it is woken instead when
 * elsewhere, and once per park when not (queueing for the GIL shows as
 * take_gil). Taken out of the parked ones meanwhile, so its handler leaves
 * it be. */
void pp_wall_resolve_suspects(void)
{
    for (uint32_t i = 0; i < S.nslots && atomic_load(&S.nsuspects); i++) {
        wslot *sl = S.slots[i];
        int64_t since = atomic_exchange(&sl->suspect_ns, 0);
        if (since == 0)
            continue;
        atomic_fetch_sub_explicit(&S.nsuspects, 1, memory_order_relaxed);
        int64_t cpu_parked = atomic_load(&sl->cpu_parked);
        if (!sl->alive || !pp_wall_take_parked(sl))
            continue;                   /* gone, or woken: its own sample tells */
        struct timespec c;
        if (clock_gettime(pp_thread_cpu_clock(sl->tid), &c) == 0
            && pp_wall_computes(sl, pp_ts_ns(c), pp_mono_ns())) {
            /* it computes: its handler takes it from here, as for its CPU timer */
            if (pp_wall_set_parked(sl, cpu_parked, 0))
                send_wake(sl);
            continue;
        }
        pp_rawframe frames[MAX_FRAMES];
        uintptr_t no_native[1];
        int truncated = 0;
        uintptr_t coro = 0;
        int nframes = pp_frames_walk_coro((PyThreadState *)sl->tstate, frames, MAX_FRAMES,
                                          &truncated, &coro);
        uint64_t where = pp_stack_key(frames, nframes);
        int elsewhere = nframes > 0 && where != sl->where, wake = 0;
        int64_t now = pp_mono_ns(), moved = MOVED_CPU_NS;
        if (S.native) {
            wake = elsewhere || !sl->native_looked;
            sl->native_looked = 1;
        }
        else if (elsewhere) {
            int64_t prev = atomic_load(&sl->accounted), from = since > prev ? since : prev;
            if (from > prev)
                pp_ring_write_repeat(sl->tid, sl->ident, from, from - prev);
            if (pp_ring_write_sample((uint32_t)sl->tid, sl->ident, now, PP_STATE_IDLE, truncated,
                                     frames, nframes, no_native, 0, now - from,
                                     S.async ? coro : 0, 0)) {
                atomic_store(&sl->accounted, now);
                sl->where = where;
                /* the ticks it stands for, as a parked thread's repeat counts them */
                int64_t ticks = (now - from + S.interval_ns / 2) / S.interval_ns;
                if (ticks > 1)
                    atomic_fetch_add_explicit(&S.idle_ticks, (uint64_t)(ticks - 1),
                                              memory_order_relaxed);
            }
            else
                atomic_store(&sl->accounted, from);     /* the rest carries */
        }
        if (!elsewhere && now - atomic_load(&sl->parked_ns) >= MOVED_GROW_AFTER_NS) {
            moved = atomic_load(&sl->moved_ns) * 2;
            moved = moved > MOVED_MAX_NS ? MOVED_MAX_NS : moved;
        }
        atomic_store(&sl->moved_ns, moved);
        if (clock_gettime(pp_thread_cpu_clock(sl->tid), &c) != 0 || !pp_wall_set_parked(sl, pp_ts_ns(c), 0)) {
            struct itimerspec tick = pp_itimer(S.interval_ns, S.interval_ns);
            timer_settime(sl->tick, 0, &tick, NULL);    /* cannot stay parked: it ticks */
            continue;
        }
        if (wake) {                     /* its old stack up to `since`, if it cannot take it */
            atomic_store(&sl->left_ns, since);
            send_wake(sl);
        }
    }
}

/* When a parked thread seen to have run since `lo` moved: after `lo` and
 * after it parked, and `ran` (the CPU it used since then) before `now` at
 * the latest. The middle: the earlier end gave up to a tick to the new stack
 * (benchmarks/wall_transitions.py: 3.8 ms off per call, 2.6 with this). */
static int64_t moved_at(wslot *sl, int64_t lo, int64_t now, int64_t ran)
{
    int64_t parked = atomic_load(&sl->parked_ns);
    if (lo < parked)
        lo = parked;
    int64_t hi = now - (ran > 0 ? ran : 0);
    return hi > lo ? lo + (hi - lo) / 2 : lo;
}

/* A clock read of a parked thread: the CPU it used since it parked (0 if unread). */
static int64_t ran_since_parked(wslot *sl)
{
    struct timespec c;
    if (clock_gettime(pp_thread_cpu_clock(sl->tid), &c) != 0)
        return 0;
    return pp_ts_ns(c) - atomic_load(&sl->cpu_parked);
}

/* A parked thread that took the GIL, ran a few µs (too few for its clock to
 * tell) and blocked elsewhere, after which the helper took the GIL: the
 * ticker's next look finds the helper as the last holder and that switch its
 * own. Seen in a thread woken while queueing for the GIL (parked again where
 * it queued) that then ran into a 0.3 s wait, all charged to the old stack. */
void pp_wall_suspect_displaced(uintptr_t tstate)
{
    if (tstate == 0)
        return;
    for (uint32_t i = 0; i < S.nslots; i++) {
        wslot *sl = S.slots[i];
        if (sl->tstate == tstate) {
            if (sl->alive && atomic_load(&sl->parked))
                suspect(sl, moved_at(sl, S.look_ns, pp_mono_ns(), ran_since_parked(sl)));
            return;
        }
    }
}

/* ------------------------------------------------ the ticker's side (no GIL) */

/* A real-time signal queues each one sent (SIGPROF's coalesced): one wake
 * at a time per thread, or a thread that blocks the signal would fill the
 * user's queue (RLIMIT_SIGPENDING) with the ticker's. The handler clears
 * wake_sent; the slot's reuse does for one never delivered. */
static void send_wake(wslot *sl)
{
    if (atomic_exchange(&sl->wake_sent, 1))
        return;
    int sig = atomic_load(&S.rt_signal);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = sig;
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = getuid();
    si.si_value.sival_ptr = (char *)sl + SIG_WAKE;
    if (syscall(SYS_rt_tgsigqueueinfo, S.pid, sl->tid, sig, &si) != 0)
        atomic_store(&sl->wake_sent, 0);
}

/* Without the GIL: the slot of the parked thread whose thread state is `ts`,
 * or NULL (the last answer is kept: mostly the same thread is asked again). */
static wslot *parked_slot(uintptr_t ts)
{
    static uintptr_t cached_ts;
    static wslot *slot;
    if (ts == 0)
        return NULL;
    if (ts != cached_ts || slot == NULL || slot->tstate != ts
        || atomic_load(&slot->magic) != SLOT_MAGIC) {
        cached_ts = ts;
        slot = NULL;
        for (uint32_t i = 0; i < S.nslots; i++)
            if (S.slots[i]->tstate == ts) {
                slot = S.slots[i];
                break;
            }
    }
    return slot != NULL && atomic_load(&slot->parked) ? slot : NULL;
}

/* The helper is to read this parked thread's stack (pp_wall_resolve_suspects):
 * it may have run since `since`. */
/* A parked thread whose clock moved by less than a move ran Python if its
 * top frame moved: a thread queueing for the GIL creeps in place. Compared
 * again once the clock moved by a few µs more (three checked reads each: a
 * crowd of GIL waiters is not read at every look). */
static int moved_in_place(wslot *sl, int64_t ran)
{
    if (ran - atomic_load(&sl->top_ran) < MOVED_CPU_NS / 2)
        return 0;
    atomic_store(&sl->top_ran, ran);
    uint64_t top = pp_frames_top_key(sl->tstate), then = atomic_load(&sl->top_key);
    return top != 0 && then != 0 && top != then;
}

static void suspect(wslot *sl, int64_t since)
{
    int64_t none = 0, parked = atomic_load(&sl->parked_ns);
    if (atomic_compare_exchange_strong(&sl->suspect_ns, &none, since > parked ? since : parked))
        atomic_fetch_add_explicit(&S.nsuspects, 1, memory_order_relaxed);
}

/* Without the GIL: a parked thread whose CPU clock moved may have run since
 * it parked (a short run between two blocking calls can escape both its CPU
 * timer, checked at kernel ticks, and the GIL check), or only queued for the
 * GIL, whose waits make a clock creep: it becomes a suspect, whose stack the
 * helper reads with the GIL (pp_wall_resolve_suspects) instead of a signal
 * (a thousand threads woken at once and queueing for the GIL were each woken
 * 1-6 times by signals, which slowed the queue itself: 0.1-1 s of CPU). How
 * much CPU is a move: the slot's moved_ns (MOVED_CPU_NS, sampler_int.h), or
 * any CPU if its top frame moved (it ran Python: a GIL waiter creeps in
 * place). Reads are budgeted per second, round robin: each parked thread is
 * looked at every tick while there are few, every n / CHECKS_PER_S s when
 * there are many. A read costs ~0.2 µs. A move found in still looks was
 * made before they began (moved_by). */
#define CHECKS_PER_S 50000

static uint32_t check_parked(int64_t since_ns, int64_t moved_by)
{
    static uint32_t cursor;
    uint32_t budget = (uint32_t)(CHECKS_PER_S * since_ns / 1000000000);
    uint32_t nparked = atomic_load_explicit(&S.nparked, memory_order_relaxed);
    if (budget < 8)
        budget = 8;
    int64_t per = (int64_t)nparked * 1000000000 / CHECKS_PER_S;
    atomic_store(&S.recheck_ns, per > since_ns ? per : since_ns);
    uint32_t k = 0;
    for (; k < S.nslots && budget; k++) {
        wslot *sl = S.slots[cursor++ % S.nslots];
        if (!atomic_load(&sl->parked))
            continue;
        budget--;
        struct timespec c;
        int64_t now = pp_mono_ns();
        if (clock_gettime(pp_thread_cpu_clock(sl->tid), &c) != 0) {
            /* ended while parked, since we last saw it: charged to halfway */
            if (pp_wall_take_parked(sl)) {
                int64_t end = ended_at(sl, now);
                charge_ended(sl, end);
            }
            continue;
        }
        atomic_store(&sl->seen_ns, now);
        int64_t ran = pp_ts_ns(c) - atomic_load(&sl->cpu_parked);
        if (pp_wall_computes(sl, pp_ts_ns(c), now))
            send_wake(sl);              /* it ticks again (its CPU timer waits for a tick) */
        else if (ran > atomic_load(&sl->moved_ns) || moved_in_place(sl, ran))
            /* it moved since then at the latest, and before moved_by */
            suspect(sl, now - ran < moved_by ? now - ran : moved_by);
    }
    S.check_debt = S.check_debt > k ? S.check_debt - k : 0;
    return nparked;
}


/* A parked thread's Python stack changes only while it holds the GIL, and a
 * thread ends only with it. Between two looks, the threads that took the GIL
 * are the last holder and, for each other switch CPython counted, one we do
 * not know, but for the helper's (it notes its switch). None unknown: every
 * parked thread is alive and still, but for the last holder, whose stack the
 * helper reads if it is parked and may have run (woken, if it holds the
 * GIL); no other clock is read (a busy thread beside a thousand idle ones
 * costs the ticker a few reads a second) once every parked thread has been
 * looked at since the last gap. Else each parked thread's CPU clock is
 * looked at (check_parked). The runs of still looks also tell how long a
 * thread found gone was alive (ended_at). */
uint32_t pp_wall_look(int64_t since_ns)
{
    uintptr_t last;
    uint64_t n = pp_gil_switches(&last), prev = S.look_switches;
    uint64_t helper = atomic_load(&S.helper_switch);
    int known = S.look_valid && n >= prev
                && n - prev <= 1u + (helper > prev && helper < n);
    int64_t prev_ns = S.look_ns;
    S.look_switches = n;
    S.look_valid = 1;
    S.look_ns = pp_mono_ns();
    /* one that holds the GIL runs Python: it ticks again */
    uintptr_t holder = pp_gil_holder();
    wslot *sl = parked_slot(holder);
    if (sl != NULL)
        send_wake(sl);
    /* the last holder ran since the previous look (it took the GIL), and may
     * have blocked again; one that parked as the last holder takes the GIL
     * back without a switch counted: its clock tells */
    if (last != holder && (sl = parked_slot(last)) != NULL) {
        int64_t ran = ran_since_parked(sl);
        sl->doubt_ns = prev_ns;
        if (n != prev || ran > atomic_load(&sl->moved_ns) || moved_in_place(sl, ran))
            suspect(sl, moved_at(sl, prev_ns, S.look_ns, ran));
    }
    if (known && S.nstill > 0) {
        S.still[(S.nstill - 1) % STILL_RUNS].upto = pp_mono_ns();
        /* the round that the gap before began goes on (budgeted as there) */
        return S.check_debt ? check_parked(since_ns, S.still[(S.nstill - 1) % STILL_RUNS].from)
                            : atomic_load_explicit(&S.nparked, memory_order_relaxed);
    }
    /* a new run: from this look (check_parked's reads come after it); every
     * parked thread may have moved in the gap: each is looked at once more */
    S.still[S.nstill % STILL_RUNS].from = S.still[S.nstill % STILL_RUNS].upto = S.look_ns;
    S.nstill++;
    S.check_debt = S.nslots;
    return check_parked(since_ns, INT64_MAX);
}
