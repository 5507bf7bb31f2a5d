/* sampler_int.h — what the sampler's files share: sampler.c (timers,
 * handler, helper), sampler_signals.c (which signal, taken and given back),
 * sampler_wall.c (wall mode's slots), sampler_cpuclock.c (CPU mode's
 * task-clock events), sampler_drain.c (the
 * ring into the stack table), sampler_async.c (--async's tasks),
 * sampler_samples.c (the stack table). Calls go that way down, never up.
 * Never: included outside the sampler's folder (sampler.h is its public face).
 */
#ifndef PP_SAMPLER_INT_H
#define PP_SAMPLER_INT_H

#include "frames.h"
#include "sampler.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <time.h>

#define STILL_RUNS 256                 /* runs of still looks kept (ended_at) */

#define MAX_FRAMES 256
#define MAX_NATIVE 128
#define RING_BYTES (8u << 20)           /* 8 MiB: ~30 s of deep stacks at 1 kHz */
#define RING_SLACK (64u << 10)          /* a record never wraps: it may spill here */
/* Draining takes the GIL from the program: seldom (or when half full). */
#define DRAIN_NS (250 * 1000 * 1000)
/* Wall mode: how often the helper looks for new threads to give a timer. */
#define SCAN_NS (10 * 1000 * 1000)
/* A thread is named by `threading` a little after the kernel shows it. */
#define NAME_NS (30 * 1000 * 1000)
#define REC_ALIGN 8
#define REC_REPEAT 1            /* rawrec.pad: no frames; the thread's last stack, idle */
#define REC_FIRST 2             /* rawrec.pad: CPU mode, the thread's first sample of the run */

/* One raw sample, as the handler writes it. */
typedef struct {
    _Atomic uint32_t len;       /* bytes with padding; 0 until published */
    uint32_t tid;               /* kernel thread id */
    uint64_t ident;             /* threading.get_ident() of its thread state, 0 if none */
    int64_t t_ns;               /* CLOCK_MONOTONIC */
    uint8_t state;
    uint8_t truncated;
    uint16_t nframes;
    uint16_t nnative;
    uint16_t pad;
    int64_t weight_ns;          /* the time this sample stands for (see on_sample_signal) */
    uint64_t coro;              /* --async: the coroutine of the rootmost coroutine frame */
    /* pp_rawframe frames[nframes]; uintptr_t native[nnative]; */
} rawrec;



struct wslot;

typedef struct {
    /* shared with the handler */
    _Atomic int active;
    _Atomic int paused;             /* around fork() */
    int native;
    int async;
    int mode;
    int64_t interval_ns;
    unsigned char *buf;
    _Atomic uint64_t head, tail;
    _Atomic uint64_t signals, recorded, dropped, foreign, throttled;
    /* --async: a coroutine a sample met that no known task owns (its
     * address; 0: none since the helper last asked), see pp_known_coro */
    _Atomic uintptr_t new_coro;
    /* helper thread and control (GIL held) */
    pthread_t thread;
    int have_thread;
    /* wall mode: the ticker, which never takes the GIL (see sampler.c) */
    pthread_t ticker;
    int have_ticker;
    pid_t ticker_tid;
    _Atomic int64_t recheck_ns;     /* how often the ticker looks at each parked thread */
    /* The GIL's switch count when the helper last took it (it holds the GIL
     * then, so the count is its own); the ticker's previous look at the GIL;
     * the runs of looks that proved every parked thread alive and still
     * (from the look that began a run to its last: a thread seen alive at
     * its start is alive at its end), the last STILL_RUNS of them, with
     * pp_wall_mu held. */
    _Atomic uint64_t helper_switch;
    uint64_t look_switches;
    int64_t look_ns;
    int look_valid;
    struct { int64_t from, upto; } still[STILL_RUNS];
    uint32_t nstill;
    uint32_t check_debt;        /* slots to look at after an unproven gap: a thread that
                                 * moved in it is found in the still looks after it */
    _Atomic int stop;
    _Atomic int replaced;           /* the program took our signal (or ITIMER_PROF) back */
    /* Wall mode's and the task-clock events' signal: a real-time one the
     * program left at SIG_DFL, so that its own SIGPROF, SIGALRM and interval
     * timers never meet our ticks (0: none chosen yet; kept for the process
     * while our handler is on it) */
    _Atomic int rt_signal;
    int source;                     /* CPU mode: PP_CPU_TASKCLOCK or PP_CPU_ITIMER */
    const char *fallback;           /* CPU mode: why not the task-clock ("": it is used) */
    _Atomic int arming;             /* CPU mode: handlers setting the timer (or an event) again now */
    _Atomic int disarmed;           /* CPU mode: stopped or forking, not set again */
    _Atomic int64_t cpu_due;        /* CPU mode: process CPU (ns) the next tick is due at */
    _Atomic int64_t cpu_late_max;   /* CPU mode: the most a tick came after it was due (ns) */
    _Atomic int unbound;            /* wall mode: a thread state without its kernel thread yet */
    pid_t pid;
    pid_t helper_tid;
    /* wall mode: one slot per Python thread (its timers; the list changes
     * with the GIL and slots_mu held: start, the helper's refresh, stop; the
     * ticker reads it under slots_mu) */
    struct wslot **slots;
    uint32_t nslots, cap_slots;
    uintptr_t threads_head;         /* the interpreter's newest thread state at the last refresh */
    int64_t refresh_ns;             /* when the last refresh ran (0: none yet this run) */
    _Atomic uint64_t parked, woken, idle_ticks;     /* counts, for the capture's info */
    _Atomic uint32_t nparked;       /* slots parked now */
    _Atomic uint32_t nsuspects;     /* slots with suspect_ns set */
    pp_sampling *prof;              /* the sampling state (its owner kept alive) */
    PyObject *owner;                /* strong while sampling */
    int64_t started_ns, stopped_ns, cpu0_ns, cpu1_ns;
    double rate_hz;
    int draining;
    int corrupt;
    /* CPU mode: the CPU clocks of the threads alive at start (read-only while
     * active: the handler scans it for a thread's first sample of the run) */
    uint64_t run;                   /* bumped per start: tells a TLS reading of an older run */
    _Atomic int64_t weight_ns;      /* total weight recorded (the achieved rate's time) */
    /* CPU mode's earlier runs at the same rate (pp_sampler_cpu_interval): a
     * short run (a decorated function's call) has too few signals of its own
     * to tell the kernel's interval. */
    int64_t past_cpu_ns, past_interval_ns;
    uint64_t past_signals;
} pp_sampler_global;

/* The process's one sampler. */
extern pp_sampler_global pp_sampler_g;
#define S pp_sampler_g

static inline int64_t pp_ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline int64_t pp_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return pp_ts_ns(ts);
}

static inline struct itimerspec pp_itimer(int64_t value, int64_t interval)
{
    struct itimerspec its;
    its.it_value.tv_sec = (time_t)(value / 1000000000);
    its.it_value.tv_nsec = (long)(value % 1000000000);
    its.it_interval.tv_sec = (time_t)(interval / 1000000000);
    its.it_interval.tv_nsec = (long)(interval % 1000000000);
    return its;
}

/* Linux: another thread's CPU clock (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED),
 * what glibc's pthread_getcpuclockid gives). */
static inline clockid_t pp_thread_cpu_clock(pid_t tid)
{
    return (clockid_t)((~(unsigned)tid << 3) | 6);
}

static inline int64_t pp_process_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}


/* CPU mode: the process's CPU time per signal so far (at least the interval
 * asked; more where the kernel coalesces ticks). Inline: the drain and the
 * sampler's info both read it, neither calls the other for it. */
static inline int64_t pp_sampler_cpu_interval(void)
{
    int same = S.past_interval_ns == S.interval_ns;
    uint64_t n = atomic_load(&S.signals) + (same ? S.past_signals : 0);
    int64_t cpu = (atomic_load(&S.active) ? pp_process_cpu_ns() : S.cpu1_ns) - S.cpu0_ns
                  + (same ? S.past_cpu_ns : 0);
    int64_t per = n > 0 && cpu > 0 ? cpu / (int64_t)n : 0;
    return per > S.interval_ns ? per : S.interval_ns;
}

/* ---- wall mode's thread slots (sampler_wall.c; see sampler.c on parking) */

#define WAKE_CPU_NS (200 * 1000)        /* a parked thread that used this much CPU is woken */
/* A parked thread whose CPU clock moved this much is woken by the ticker: a
 * blocked thread's clock creeps (kernel wake-ups, CPython's 5 ms GIL waits:
 * 1-5 µs each); returning from a blocking call into Python uses more. Found
 * blocked again at the same place after a while parked (queueing for the
 * GIL), twice as much, up to MOVED_MAX_NS: a crowd of waiters is not woken at
 * every creep (a program alternating short waits and work is not affected:
 * benchmarks/accuracy.py c5 lost 1-2 pp when it was). */
#define MOVED_CPU_NS (10 * 1000)
#define MOVED_MAX_NS (40 * 1000)
#define MOVED_GROW_AFTER_NS (20 * 1000 * 1000)  /* only for a thread that stayed parked this long */
/* Where a thread is: its whole Python stack, hashed (two blocking calls often
 * end in the same leaf, threading's Condition.wait). Async-signal-safe. */
static inline uint64_t pp_stack_key(const pp_rawframe *frames, int nframes)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < nframes; i++) {
        h ^= (uint64_t)frames[i].code ^ ((uint64_t)frames[i].offset << 1);
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 29;
    }
    return nframes > 0 ? h : 0;
}
#define MAX_SLOTS 65536
#define SLOT_MAGIC 0x70707773u
enum { SIG_TICK = 0, SIG_WAKE = 1 };    /* a signal's kind, in the low bits of its slot address */

typedef struct wslot {
    _Atomic uint32_t magic;     /* SLOT_MAGIC while in use */
    pid_t tid;
    uint64_t ts_id;             /* the thread state's serial */
    uint64_t ident;
    uintptr_t tstate;
    uint64_t run;               /* S.run it belongs to */
    timer_t tick, wake;         /* CLOCK_MONOTONIC; the thread's CPU clock */
    int have_wake;
    int native_looked;          /* --native: woken where it waits once since it parked running */
    _Atomic int young;          /* never parked yet: parks at its first idle sample */
    int alive;                  /* seen by the current refresh */
    _Atomic int parked;
    _Atomic int64_t accounted;  /* the thread's time up to here is in the ring */
    _Atomic int64_t cpu_parked; /* its CPU clock when it parked (at the handler's end) */
    _Atomic int64_t seen_ns;    /* when it was last seen alive, parked */
    int64_t doubt_ns;           /* parked, the last GIL holder at a look: may have ended since
                                 * the look before (pp_wall_mu held) */
    _Atomic int64_t parked_ns;  /* when it last parked */
    _Atomic int64_t left_ns;    /* parked, seen to have run since about then (0: not seen) */
    _Atomic int sampled;        /* it has a record this run (a repeat needs a stack) */
    _Atomic int64_t moved_ns;   /* parked: the CPU it must use to be woken by the ticker */
    _Atomic int64_t suspect_ns; /* parked, seen to have used CPU since (0: not): its stack
                                 * is looked at by the helper (pp_wall_resolve_suspects) */
    uint64_t where;             /* its last sample's stack (pp_stack_key) */
    _Atomic int wake_sent;      /* a SIG_WAKE of ours is on its way: real-time signals queue,
                                 * one at a time keeps the queue short (send_wake) */
    _Atomic uint64_t top_key;   /* parked: its top frame then (pp_frames_top_key) */
    _Atomic int64_t top_ran;    /* parked: its CPU since parking when that key was last compared */
    _Atomic int64_t duty_ns;    /* parked: since when, and from which CPU clock reading, its */
    _Atomic int64_t duty_cpu;   /* share of CPU is measured (kept when it parks again in place) */
    struct wslot *next_free;
} wslot;

/* Slots live in an arena that is never unmapped (signals carry a slot's
 * address, and one may arrive late), so the handler can check an address. */
extern wslot *pp_wall_arena;
extern uint32_t pp_wall_arena_used;
extern pthread_mutex_t pp_wall_mu;      /* S.slots: the helper vs the ticker */

/* A thread that spends this share of its time on a CPU between blocking
 * calls (a request loop, a poller: short runs at every wait) is not idle: it
 * ticks, or all of its runs would go to the stack where it waits. Measured
 * over at least DUTY_MIN_NS, in windows that restart after DUTY_WINDOW_NS. A
 * blocked thread's clock creeps by ~0.1 % (kernel wake-ups, the GIL's 5 ms
 * waits); a crowd woken at once runs ~50-100 µs each, once. */
#define DUTY_SHARE 50
#define DUTY_MIN_NS (20 * 1000 * 1000)
#define DUTY_WINDOW_NS (100 * 1000 * 1000)

/* A parked thread whose CPU clock reads `cpu` at `now` computes (C code
 * without the GIL, or Python): since it parked, at least half the CPU timer's
 * amount and a tenth of the time (a blocked thread uses ~0; one queueing for
 * the GIL a little at each of CPython's 5 ms waits), or a duty share since
 * its window began. Async-signal-safe. */
static inline int pp_wall_computes(const wslot *sl, int64_t cpu, int64_t now)
{
    int64_t ran = cpu - atomic_load(&sl->cpu_parked);
    if (ran >= WAKE_CPU_NS / 2 && ran * 10 > now - atomic_load(&sl->parked_ns))
        return 1;
    int64_t span = now - atomic_load(&sl->duty_ns);
    return span >= DUTY_MIN_NS && (cpu - atomic_load(&sl->duty_cpu)) * DUTY_SHARE > span;
}

/* Parks a slot whose thread's CPU clock reads `cpu` (its tick is stopped by
 * the caller); 0 if it cannot be woken. `fresh`: it ticked until now (its
 * duty window starts here), else it parks again in place (the window goes on
 * unless it is DUTY_WINDOW_NS old). Async-signal-safe. */
int pp_wall_set_parked(wslot *sl, int64_t cpu, int fresh);
/* Takes a slot out of the parked ones: 1 for the one caller that did (the
 * thread woken, the ticker or the helper seeing it gone), which then charges
 * its parked time. Async-signal-safe. */
static inline int pp_wall_take_parked(wslot *sl)
{
    if (!atomic_exchange(&sl->parked, 0))
        return 0;
    atomic_fetch_sub_explicit(&S.nparked, 1, memory_order_relaxed);
    return 1;
}
/* GIL and pp_wall_mu held: a slot for every new Python thread, the slots of
 * threads that are gone dropped; parked threads' time into the ring; all. */
void pp_wall_refresh(void);
/* GIL and pp_wall_mu held, after a refresh: the stacks of the parked threads
 * the ticker saw use CPU (suspects) are read; one found elsewhere is charged
 * there from when it was seen to move. */
void pp_wall_resolve_suspects(void);
/* GIL and pp_wall_mu held, before pp_wall_resolve_suspects: the thread that
 * last held the GIL before the helper asked for it may have run and blocked
 * elsewhere, and its switch is hidden behind the helper's from the ticker. */
void pp_wall_suspect_displaced(uintptr_t tstate);
void pp_wall_flush(void);
void pp_wall_delete(int own_process);
/* GIL held: threading's start function wrapped while wall sampling runs (on),
 * put back (off): each new thread makes its own slot as it starts. */
void pp_wall_hook_threads(int on);
/* GIL held: signal.pause replaced (on) by one that waits with the wall
 * signal blocked (a tick would end it), put back if still ours (off). */
void pp_wall_hook_pause(int on);
/* The ticker (pp_wall_mu held, never the GIL): wakes the parked threads
 * that ran since its previous look, `since_ns` ago. Returns how many are parked. */
uint32_t pp_wall_look(int64_t since_ns);

/* CPU mode on its task-clock events; on ITIMER_PROF. */
static inline int pp_on_task_clock(void)
{
    return S.mode == PP_SAMPLE_CPU && S.source == PP_CPU_TASKCLOCK;
}

static inline int pp_on_itimer(void)
{
    return S.mode == PP_SAMPLE_CPU && S.source == PP_CPU_ITIMER;
}

/* ---- CPU mode's task-clock events (sampler_cpuclock.c) */
/* Whether the kernel gives this process task-clock events (0: the reason is
 * pp_cpuclock_refusal's). */
int pp_cpuclock_usable(void);
const char *pp_cpuclock_refusal(void);
/* GIL held, before the helper starts: every thread but pyprof's own gets an
 * event sending `sig` each `interval_ns` of its CPU time. -1: /proc unread. */
int pp_cpuclock_start(int sig, int64_t interval_ns);
/* The helper, without the GIL: threads new since (not started by threading)
 * get theirs, those gone are closed. */
void pp_cpuclock_scan(int64_t now);
/* On a thread threading starts, as it starts. */
void pp_cpuclock_thread_begins(pid_t tid);
/* The handler, on `self` (its kernel tid): an event's block ended (POLL_HUP),
 * the next one starts with a period drawn from `r`. Async-signal-safe. */
void pp_cpuclock_block_end(const siginfo_t *info, pid_t self, uint64_t r);
/* The handler, on `self`: the CPU clock its event's thread had when the
 * event opened (the base of its first sample of the run): 1, or 0 when the
 * signal names no event of self's. Async-signal-safe. */
int pp_cpuclock_first_base(const siginfo_t *info, pid_t self, int64_t *cpu0);
/* Every event closed; none sends a signal once this returns. Each thread's
 * CPU under its event is noted (pp_cpuclock_take_ends): thread `self`'s up
 * to `self_cpu`, its CPU clock when the stop began (0: now). */
void pp_cpuclock_stop(pid_t self, int64_t self_cpu);
/* Thread `self`'s events count from `cpu_ns`, its CPU clock as the start
 * ends: its first sample does not weigh pyprof's start. */
void pp_cpuclock_rebase_self(pid_t self, int64_t cpu_ns);
/* A thread's event ended: the thread is gone (found by the helper, or by
 * the stop: cpu_ns is then what the event counted) or the run stopped
 * (cpu_ns: its CPU clock since the event opened). */
typedef struct {
    pid_t tid;
    int gone;
    int64_t cpu_ns;
} pp_cpuclock_end;
/* The ends noted since the last call (a malloc'ed array the caller frees;
 * NULL when none). */
uint32_t pp_cpuclock_take_ends(pp_cpuclock_end **out);
/* GIL held, after the drain that took their threads' last samples: the ends
 * of task-clock events into the stack table (sampler_drain.c). */
void pp_sampler_drain_ends(pp_sampling *p, const pp_cpuclock_end *e, uint32_t n);
void pp_cpuclock_atfork_child(void);

/* ---- the signals (sampler_signals.c) */
typedef void (*pp_signal_handler)(int sig, siginfo_t *info, void *uctx);
/* Whether `sig`'s handler is the one pp_sampler_take_signal installed. */
int pp_sampler_handler_is_ours(int sig);
/* The real-time signal: the one an earlier start took while our handler is
 * still on it, else the highest real-time one free in every thread. 0: none. */
int pp_sampler_pick_rt_signal(void);
/* `handler` (the sampler's) on `sig` (GIL held), what was there kept. -1 and errno. */
int pp_sampler_take_signal(int sig, pp_signal_handler handler);
/* Each signal taken given its earlier disposition once none of it is pending:
 * 1 done, 0 not yet (call again later). */
int pp_sampler_give_back_signals(void);

int pp_sampler_grow_array(void **arr, uint32_t *cap, uint32_t need, size_t elem);
/* A new run: no thread has a last stack yet. */
void pp_sampler_drain_reset(void);
/* The code watcher's callback: samples naming a dying code object are drained. */
void pp_sampler_drain_for_dying(PyObject *code);
/* Without the GIL (the ticker): the ring's published records move to a
 * buffer the next drain takes first. */
void pp_sampler_spill(void);
void pp_sampler_drain_atfork_child(void);
/* The stack table's own steps (sampler_samples.c), for the drain and the
 * tasks' stacks. */
uint32_t pp_samples_stack(pp_samples *s, const uint64_t *fr, uint32_t n);
uint32_t pp_samples_stack_id(pp_samples *s, const uint64_t *fr, uint32_t n, const uintptr_t *nat,
                             uint32_t nnat);
/* The code object being destroyed, drained by name (NULL: none). */
void pp_samples_dying(PyObject *code);
/* The tasks' own state made (0) or not (-1: out of memory). */
int pp_async_init(pp_sampling *p);
int pp_samples_add(pp_samples *s, uint32_t thread, uint32_t stack, uint32_t state,
                   int64_t weight, uint64_t count);
uint32_t pp_samples_line(pp_samples *s, uint32_t fid, PyObject *code, uint32_t offset);
/* --opcodes: the offset of the instruction `offset` of `code` (fid) is in:
 * itself, or the one whose inline cache holds it (3.11 and 3.12 leave a
 * calling frame's instruction pointer on its call's last cache unit). */
uint32_t pp_samples_insn_start(pp_samples *s, uint32_t fid, PyObject *code, uint32_t offset);
/* --opcodes: `count` samples of `weight` with instruction `offset` of `code`
 * (fid), run as `opcode`, on `thread`'s stack; `self`: as its innermost
 * frame's. code NULL: added to that row only if it is there. -1: no memory,
 * or no row. */
int pp_samples_add_insn(pp_samples *s, uint32_t thread, uint32_t fid, PyObject *code,
                        uint32_t offset, int opcode, int self, int64_t weight, uint64_t count);
uint32_t pp_sampler_code_fid(pp_sampling *p, PyObject *code);

/* --async: the tasks' state that sampler.h's pp_tasks only points to, by
 * row (docs/async.md, "How it works"). Written by sampler_async.c; the
 * helper reads last_look_ns, the drain work_code. */
typedef struct pp_tasks_own {
    PyObject **ref;             /* a weak reference to the task (its callback notes when it is freed) */
    PyObject **obj;             /* the task, strong: a named task until a look saw it end */
    PyObject **label;           /* its name and its coroutine's code, read when first seen */
    PyObject **code;            /*   (strong, until it is named or forgotten) */
    uintptr_t *addr;            /* the task's address (byobj) */
    uintptr_t *coro;            /* its coroutine's address (0: no longer in bycoro) */
    int64_t *dead;              /* when that address stopped being its coroutine's (INT64_MAX: not yet) */
    int64_t *born;              /* samples from before: an older coroutine's at that address */
    uint32_t *chain;            /* the row that had that address before (bycoro's list, newest first) */
    uint32_t *where;
    uint8_t *flags;             /* its loop noted; a free row (sampler_async.c) */
    uint32_t free_head;         /* rows of tasks let go unnamed, for reuse (via where[]) */
    uint32_t cursor;            /* the row the next look's waiting stacks start from */
    int64_t last_look_ns;       /* what the last look cost */
    pp_index byloop;            /* event loop address -> thread index, of tasks held */
    pp_index byworker;          /* kernel tid of an executor's thread -> row of the task
                                 * awaiting its work item (to_thread), at the last look */
    uintptr_t work_code;        /* concurrent.futures.thread._WorkItem.run's code, or 0 */
    uint32_t nworkers;
    int ready;                  /* the indexes are made */
    uint32_t held;              /* rows with ref set (the task not yet found freed) */
    pp_index bycoro;            /* coroutine address -> newest row with it (then chain[]) */
    pp_index byobj;             /* task address -> row, while ref is set */
    pp_index bywref;            /* weak reference address -> row, while ref is set */
} pp_tasks_own;

/* ---- --async (sampler_async.c; GIL held, the helper's or stop's) */
/* The coroutines of the tasks the helper knows, direct-mapped by address:
 * written by the helper and the freed callback, read by the handler, which
 * asks for a look (S.new_coro) when a sample's coroutine is not there, so
 * that a short task is named before it ends unseen. A stale entry only
 * delays that to the next regular look. */
#define KNOWN_CORO_BITS 12
extern _Atomic uintptr_t pp_known_coro[1u << KNOWN_CORO_BITS];
static inline uint32_t pp_known_slot(uintptr_t coro)
{
    return (uint32_t)(((uint64_t)coro >> 4) * 0x9E3779B97F4A7C15ull >> (64 - KNOWN_CORO_BITS));
}
/* New run: forget the tasks. */
void pp_async_reset(pp_sampling *p);
void pp_async_free(pp_sampling *p);
/* Before a drain: the tasks made since the last look, and their coroutines. */
void pp_async_look_begin(pp_sampling *p, int64_t now);
/* The same outside a look (a new thread's drain, a new coroutine): not
 * counted as a look's cost. */
void pp_async_peek(pp_sampling *p, int64_t now);
/* A sample met a coroutine of no known task (`asked`): the running tasks,
 * then the registries if cheap enough (sampler_async.c). */
void pp_async_fresh(pp_sampling *p, int64_t now, uintptr_t asked);
/* After a look or a peek: the coroutine that asked for it (S.new_coro), noted as known
 * if no task owns it (a coroutine run without a task asks once). */
void pp_async_asked(pp_sampling *p, uintptr_t coro);
/* After it: the time of the tasks that wait, where they wait; ended tasks let go. */
void pp_async_look_end(pp_sampling *p, int64_t now);
/* Sampling stops: every task let go, its time charged up to now. */
void pp_async_stop_begin(pp_sampling *p, int64_t now);
void pp_async_stop(pp_sampling *p, int64_t now);
/* The drain: the row of the task whose coroutine was at `coro` at t_ns
 * (PP_NONE: none known), and a sample of `weight` in it. */
uint32_t pp_async_row(pp_sampling *p, uintptr_t coro, int64_t t_ns);
/* The row of the task whose to_thread work thread `tid` runs (PP_NONE: none),
 * as the last look saw; with rescan, looked at again (once per drain) if not. */
uint32_t pp_async_worker_row(pp_sampling *p, uint32_t tid, int rescan);
void pp_async_ran(pp_sampling *p, uint32_t row, uint32_t thread, int64_t t_ns, int64_t weight);

#endif
