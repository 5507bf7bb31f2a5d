/* sampler.c — timers, the signal handler, wall mode's parking policy, the
 * helper (sampler.h). The top of the sampler: it calls sampler_signals.c,
 * sampler_wall.c, sampler_cpuclock.c, sampler_drain.c, sampler_async.c and
 * sampler_samples.c, none calls it.
 *
 * Signals: a real-time signal of its own (sampler_signals.c), so that a
 * program's SIGPROF, SIGALRM and interval timers never meet a tick: CPU
 * mode's per-thread task-clock events (sampler_cpuclock.c) and wall mode's
 * per-thread timers send it; where the kernel refuses task-clock events, CPU
 * mode falls back to SIGPROF from ITIMER_PROF.
 *
 * Signal handler (on_sample_signal): async-signal-safe only. It reads the
 * interrupted thread's own thread state and frames (frames.c), optionally its
 * native stack (unwind.c), and copies raw (code pointer, offset) frames into
 * one lock-free multi-producer ring: space is reserved with a CAS on `head`,
 * the record is written, then published by a release store of its length.
 * No allocation, no lock, no Python API, no reference count; a full ring
 * drops the sample and counts it. errno is preserved. Each record carries the
 * time it stands for (sample_weight: the thread's CPU or wall clock since its
 * previous record), not the interval asked: CPU timers fire at most once per
 * kernel tick. The ring's writers are inlined from sampler_ring.h; whether
 * a wall-mode thread parks is parking_woken/parking_after_sample's call.
 *
 * Helper thread (sampler_main): a plain pthread. It drains the ring every
 * DRAIN_NS with the GIL (PyGILState_Ensure); in wall mode it also gives each
 * Python thread its timers and writes parked threads' idle time.
 *
 * Ticker (ticker_main, wall mode): a plain pthread that never takes the GIL,
 * so that it keeps time while the helper waits for it (a thousand threads
 * woken at once can hold the GIL for most of a second): every tick it wakes
 * parked threads it sees running and notes when each parked one was last seen
 * alive, which bounds the charge of one that ends while parked. When the ring
 * is three quarters full (the helper waiting for the GIL), it moves the
 * records to a spill buffer (sampler_drain.c) rather than let samples drop.
 *
 * Drain (GIL held): sampler_drain.c, into the stack table of sampler_samples.c.
 *
 * fork: timers are paused around fork(); the child inherits no sampler.
 *
 * The handler stays installed after stop (inactive): a signal already sent
 * but not yet delivered would otherwise meet the default action (SIGPROF's
 * and a real-time signal's kill the process). pp_sampler_release_signal gives
 * each signal the disposition found before we took it once none of it is
 * pending anywhere in the process (a detach: docs/attach.md).
 */
#define _GNU_SOURCE
#include "sampler_int.h"
#include "sampler_ring.h"

#include "clock.h"
#include "symbols.h"
#include "unwind.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

pp_sampler_global pp_sampler_g;

/* Wall mode. A thread that has released the GIL and uses no CPU cannot change
 * its Python stack: after PARK_TICKS intervals (and PARK_MIN_NS) of such
 * samples its wall timer stops (it is "parked") and the time it stays so is
 * charged to its last stack, in the idle state, without interrupting it
 * (REPEAT records). A new thread that threading starts makes its slot as it
 * starts (sampler_wall.c): its first tick falls in its first interval, and
 * the first time a tick finds it blocked it parks at once. One the helper
 * finds starts parked, its first stack read by the helper. A parked thread
 * is woken (SIG_WAKE) by a CPU-clock timer on itself (it used WAKE_CPU_NS
 * of CPU) or by the ticker, which sees its CPU clock move or it hold the
 * GIL. Woken, it is sampled; if it runs (holds the GIL, or
 * uses CPU) its tick starts again, else (waiting for the GIL, blocked again)
 * it stays parked on the new stack. A tick then costs a signal per running
 * thread, nothing per parked one; a thread's wake-up costs one sample.
 * The slots: sampler_wall.c. */
#define PARK_TICKS 2
#define PARK_MIN_NS (5 * 1000 * 1000)  /* a program alternating short waits never parks */
/* What a tick costs a blocked thread outside the handler, not counted as its
 * running: the kernel's delivery, and the interrupted call's EINTR, after
 * which CPython may take the GIL back to check for signals before it waits
 * again (time.sleep does), queueing for it while other threads start. */
#define TICK_AFTERMATH_NS (25 * 1000)

/* Per thread, for the native/idle split: the thread CPU clock at its last sample. */
static __thread struct {
    int64_t idle_since;         /* wall mode: first of the idle samples in a row (0: none) */
    uint64_t idle_run;          /* S.run of idle_since */
    int64_t idle_cpu;           /* the CPU it used since then, outside this handler */
    int64_t cpu_out;            /* its CPU clock when an idle sample's handler ended (0: none) */
    int64_t cpu_ns, wall_ns;
    int64_t done_ns;            /* when this thread's last sample ended */
    uint64_t run;               /* S.run of `last` */
    int64_t last;               /* the clock (CPU or wall, per mode) at the last recorded sample */
    pid_t tid;                  /* this thread's kernel id, read once per run (a forked child's differs) */
    uint64_t rng;               /* the ticks' jitter (start_tick) */
    uint64_t tid_run;
} s_tls __attribute__((tls_model("initial-exec")));

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------- handler */

/* This thread's kernel id, read once per run (a forked child's differs). */
static pid_t self_tid(void)
{
    if (s_tls.tid_run != S.run) {
        s_tls.tid = (pid_t)syscall(SYS_gettid);
        s_tls.tid_run = S.run;
    }
    return s_tls.tid;
}

/* Signal handler context. The time a sample stands for: CPU mode, the
 * thread's CPU clock since its last recorded sample (CPU timers fire at most
 * once per kernel tick, whatever the rate asked); wall mode, the wall time
 * since then (coalesced signals). A thread's first sample of a run: on a
 * task-clock event, its CPU since the event opened; on ITIMER_PROF, one
 * interval of the process's CPU per signal, given by the drain
 * (sampler_drain.c says why), 0 here. */
static int64_t sample_weight(const siginfo_t *info, int64_t now, int64_t *clock_now)
{
    int64_t base;
    if (S.mode == PP_SAMPLE_CPU) {
        *clock_now = thread_cpu_ns();
        if (s_tls.run != S.run && !(pp_on_task_clock()
                                    && pp_cpuclock_first_base(info, self_tid(), &base)))
            return 0;
        if (s_tls.run == S.run)
            base = s_tls.last;
    }
    else {
        *clock_now = now;
        base = s_tls.run == S.run ? s_tls.last : now - S.interval_ns;
    }
    return *clock_now > base ? *clock_now - base : 0;
}

/* The wall-mode slot a signal names (its timers' or the helper's), or NULL:
 * CPU mode, a signal from elsewhere, a stale one. */
static wslot *signal_slot(const siginfo_t *info, int *kind)
{
    if (S.mode != PP_SAMPLE_WALL || pp_wall_arena == NULL || info == NULL
        || (info->si_code != SI_TIMER && info->si_code != SI_QUEUE))
        return NULL;
    uintptr_t v = (uintptr_t)info->si_value.sival_ptr, a = (uintptr_t)pp_wall_arena;
    uintptr_t p = v & ~(uintptr_t)3;
    uint32_t used = __atomic_load_n(&pp_wall_arena_used, __ATOMIC_ACQUIRE);
    if (p < a || p >= a + (uintptr_t)used * sizeof(wslot) || (p - a) % sizeof(wslot))
        return NULL;
    wslot *sl = (wslot *)p;
    if (atomic_load_explicit(&sl->magic, memory_order_acquire) != SLOT_MAGIC
        || sl->run != S.run || sl->tid != self_tid())
        return NULL;
    *kind = (int)(v & 3);
    return sl;
}

/* On the thread, idle for PARK_MIN_NS (or found blocked at a wake-up, at
 * the stack `where`): its tick stops. */
static void park(wslot *sl, int tick_running, uint64_t where)
{
    int64_t moved = MOVED_CPU_NS;
    if (!tick_running && where == sl->where
        && pp_mono_ns() - atomic_load(&sl->parked_ns) >= MOVED_GROW_AFTER_NS) {
        moved = atomic_load(&sl->moved_ns) * 2;
        moved = moved < MOVED_CPU_NS ? MOVED_CPU_NS : moved > MOVED_MAX_NS ? MOVED_MAX_NS : moved;
    }
    sl->where = where;
    if (tick_running)
        sl->native_looked = 0;
    atomic_store(&sl->moved_ns, moved);
    struct itimerspec off = pp_itimer(0, 0);
    if (pp_wall_set_parked(sl, thread_cpu_ns(), tick_running) && tick_running)
        timer_settime(sl->tick, 0, &off, NULL);
    s_tls.idle_since = 0;
}

/* The next tick, a uniformly random 0.5-1.5 intervals after `from` (the
 * interval after it a safety net: the next handler sets it again). A fixed
 * period aliases with a program that sleeps in a loop: a 0.1 ms burst between
 * 1 ms sleeps got 1.5-4 % of the 1 kHz samples for 6.6 % of the time, 6.3-6.6 %
 * for 6.7-6.8 % with this. Samples are weighted by the time they stand for. */
static uint64_t next_random(void)
{
    uint64_t x = s_tls.rng;
    if (x == 0)
        x = ((uint64_t)syscall(SYS_gettid) << 32) ^ (uint64_t)pp_mono_ns();
    s_tls.rng = x += 0x9E3779B97F4A7C15ull;          /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

static void start_tick(wslot *sl, int64_t from)
{
    int64_t next = S.interval_ns / 2 + (int64_t)(next_random() % (uint64_t)S.interval_ns)
                   - (pp_mono_ns() - from);
    struct itimerspec tick = pp_itimer(next > S.interval_ns / 8 ? next : S.interval_ns / 8, S.interval_ns);
    timer_settime(sl->tick, 0, &tick, NULL);
}

/* On the thread (its CPU timer fired, the ticker saw its CPU clock move or it
 * hold the GIL): the time parked goes to its last stack. It is seen some time
 * after it woke: the CPU it used since it parked (a blocked thread uses none)
 * is that time, and goes to its next sample's stack instead. */
static void unpark(wslot *sl, int64_t now, int64_t ran)
{
    if (!pp_wall_take_parked(sl))
        return;
    atomic_fetch_add_explicit(&S.woken, 1, memory_order_relaxed);
    struct itimerspec off = pp_itimer(0, 0);
    timer_settime(sl->wake, 0, &off, NULL);
    if (atomic_load(&sl->sampled)) {    /* else its first sample counts from its start */
        /* it ran: up to when it started to, at the latest (it may have run
         * slower), or when the ticker first saw it had run, if earlier */
        int64_t left = ran > 0 ? now - ran : now, seen = atomic_load(&sl->left_ns);
        if (seen > 0 && seen < left)
            left = seen;
        int64_t prev = atomic_load(&sl->accounted), since;
        do {
            since = left > prev ? left : prev;
        } while (!atomic_compare_exchange_weak(&sl->accounted, &prev, since));
        if (!pp_ring_write_repeat(sl->tid, sl->ident, now, since - prev))
            atomic_compare_exchange_strong(&sl->accounted, &since, prev);  /* carries to its next sample */
    }
    s_tls.cpu_ns = thread_cpu_ns();
    s_tls.wall_ns = now;
    s_tls.idle_since = 0;
}

/* A parked thread woken: does it run (its tick starts again) or was it woken
 * by a short run and is blocked again (it is sampled once and stays parked)?
 * It runs if it holds the GIL, or if it used a tenth of the time since it
 * parked on a CPU and at least half the CPU timer's amount (C code without
 * the GIL; a blocked thread uses ~0, and taking a signal a few µs). A
 * thread waiting for the GIL, or back in a blocking call, stays parked: a
 * convoy of woken threads costs one sample each, not one per tick. One
 * judged blocked that runs is woken again by its CPU timer. */
static int woken_runs(wslot *sl, int64_t now, int64_t cpu)
{
    int attached = 0;
    (void)pp_signal_tstate(&attached);
    return attached || pp_wall_computes(sl, cpu, now);
}

/* Wall mode's parking policy, at a wake-up signal: the time parked is
 * charged; 1 if the thread is to be sampled and parked again, 0 if it runs
 * (its tick started again). */
static int parking_woken(wslot *sl, int64_t now)
{
    int64_t cpu = thread_cpu_ns(), ran = cpu - atomic_load(&sl->cpu_parked);
    int repark = !woken_runs(sl, now, cpu);
    unpark(sl, now, ran);
    if (!repark)
        start_tick(sl, now);
    return repark;
}

/* Wall mode's parking policy, after a sample (recorded: it went into the
 * ring): a thread idle long enough parks, a woken one blocked again parks on
 * its new stack, a running one gets its next tick. */
static void parking_after_sample(wslot *sl, int recorded, int repark, uint8_t state,
                                 const pp_rawframe *frames, int nframes, int64_t now,
                                 int64_t cpu_in)
{
    if (recorded && !repark) {          /* after the record: parked time repeats this stack */
        /* no frames: a thread starting or ending, which will soon run */
        if (state != PP_STATE_IDLE || nframes == 0)
            s_tls.idle_since = 0;
        else if (atomic_load(&sl->young))   /* a new thread blocked: as if it started parked */
            park(sl, 1, pp_stack_key(frames, nframes));
        else if (s_tls.idle_since == 0 || s_tls.idle_run != S.run || s_tls.cpu_out == 0) {
            s_tls.idle_since = now;
            s_tls.idle_cpu = 0;
        }
        else {
            int64_t ran = cpu_in - s_tls.cpu_out - TICK_AFTERMATH_NS;
            s_tls.idle_cpu += ran > 0 ? ran : 0;
            if (now - s_tls.idle_since >= PARK_TICKS * S.interval_ns
                && now - s_tls.idle_since >= PARK_MIN_NS) {
                if (s_tls.idle_cpu * DUTY_SHARE < now - s_tls.idle_since)
                    park(sl, 1, pp_stack_key(frames, nframes));
                else {                  /* it runs between the ticks: not idle */
                    s_tls.idle_since = now;
                    s_tls.idle_cpu = 0;
                }
            }
        }
        s_tls.idle_run = S.run;
    }
    if (repark) {                       /* a recorded stack to repeat, or it runs */
        if (atomic_load(&sl->sampled) && nframes > 0)
            park(sl, 0, pp_stack_key(frames, nframes));
        if (!atomic_load(&sl->parked))
            start_tick(sl, now);
    }
    else if (!atomic_load(&sl->parked))
        start_tick(sl, now);            /* a tick: the next one */
    /* the handler's own CPU is neither a run nor a duty share */
    int parked = atomic_load_explicit(&sl->parked, memory_order_relaxed);
    struct timespec c;
    s_tls.cpu_out = 0;
    if ((parked || s_tls.idle_since != 0) && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c) == 0) {
        s_tls.cpu_out = pp_ts_ns(c);
        if (parked)
            atomic_store(&sl->cpu_parked, s_tls.cpu_out);
    }
}

static struct itimerval itimer_of(int64_t value_ns, int64_t interval_ns)
{
    struct itimerval it;
    it.it_interval.tv_sec = (time_t)(interval_ns / 1000000000);
    it.it_interval.tv_usec = (suseconds_t)((interval_ns % 1000000000) / 1000);
    it.it_value.tv_sec = (time_t)(value_ns / 1000000000);
    it.it_value.tv_usec = (suseconds_t)((value_ns % 1000000000) / 1000);
    if (value_ns > 0 && it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
        it.it_value.tv_usec = 1;
    return it;
}

/* CPU mode's ticks jittered as wall mode's are (start_tick): each tick sets
 * the process's profiling timer again, a random time after the moment the
 * last one was due. A fixed period fell into step with a program whose
 * CPU-time period is a multiple of it (4 ms phases at 50 Hz: 0 samples in
 * one phase, 45 in another, for 20 each). The kernel fires CPU timers at its
 * own ticks, late by up to one: counting from when it was due keeps the rate
 * asked, as the kernel's own reload does, and the jitter is what the
 * interval has above the most lateness seen (about a tick), since times
 * within a tick fall on the same tick (a full interval's jitter halved the
 * rate at 250 Hz). A timer the program set meanwhile (another interval) is
 * put back as it was; stopping and forking disarm through cpu_timer_off,
 * which waits out a handler arming it now. */
static void cpu_rearm(void)
{
    atomic_fetch_add(&S.arming, 1);
    if (!atomic_load(&S.disarmed)) {
        int64_t now = pp_process_cpu_ns(), due = atomic_load(&S.cpu_due);
        int64_t late = now > due ? now - due : 0;
        if (late > atomic_load(&S.cpu_late_max))
            atomic_store(&S.cpu_late_max, late);
        int64_t most = atomic_load(&S.cpu_late_max), width = S.interval_ns - most;
        int64_t next = width > 0 ? S.interval_ns - late - width / 2
                                   + (int64_t)(next_random() % (uint64_t)width) : 0;
        /* a time within this tick: the kernel's reload (set again, it came a
         * tick late) */
        if (next < most || next < 1000)
            atomic_store(&S.cpu_due, due + S.interval_ns);
        else {
            struct itimerval it = itimer_of(next, S.interval_ns), old;
            if (setitimer(ITIMER_PROF, &it, &old) == 0) {
                if (old.it_interval.tv_sec != it.it_interval.tv_sec
                    || old.it_interval.tv_usec != it.it_interval.tv_usec)
                    (void)setitimer(ITIMER_PROF, &old, NULL);
                else
                    atomic_store(&S.cpu_due, now + next);
            }
        }
    }
    atomic_fetch_sub(&S.arming, 1);
}

/* The signal the running (or last) sampler uses. */
static int mode_signal(void)
{
    return pp_on_itimer() ? SIGPROF : atomic_load(&S.rt_signal);
}

static void on_sample_signal(int sig, siginfo_t *info, void *uctx)
{
    int saved_errno = errno;
    int kind = SIG_TICK, repark = 0;
    wslot *sl = NULL;
    /* the other mode's signal, left pending by an earlier run */
    if (sig != mode_signal())
        goto out;
    /* a task-clock overflow is sent by the kernel with POLL_IN (POLL_HUP: its
     * block's last); the same signal sent by a program, or a stale wall tick,
     * is no CPU sample, and a stale overflow no wall tick */
    int overflow = info && (info->si_code == POLL_IN || info->si_code == POLL_HUP);
    if (pp_on_task_clock()) {
        if (!overflow)
            goto out;
        if (info->si_code == POLL_HUP)  /* a block's last: 1 in 1-8 samples */
            pp_cpuclock_block_end(info, self_tid(), next_random());
    }
    else if (S.mode == PP_SAMPLE_WALL && overflow)
        goto out;
    sl = signal_slot(info, &kind);
    if (sl && kind == SIG_WAKE)
        atomic_store(&sl->wake_sent, 0);
    if (!atomic_load_explicit(&S.active, memory_order_acquire)
        || atomic_load_explicit(&S.paused, memory_order_relaxed))
        goto out;
    if (pp_on_itimer() && info && info->si_code == SI_KERNEL)
        cpu_rearm();
    int64_t now = pp_mono_ns();
    if (sl && kind == SIG_WAKE) {
        if (!atomic_load(&sl->parked))
            goto out;
        repark = parking_woken(sl, now);
        if (!repark)
            goto out;
        /* sampled now, then parked again (parking_after_sample) */
    }
    else if (sl && atomic_load(&sl->parked))
        goto out;                       /* a tick sent before it parked */
    atomic_fetch_add_explicit(&S.signals, 1, memory_order_relaxed);
    /* A signal already pending when the last sample ended (the rate is more
     * than this thread's samples can take): skip it, or the thread would do
     * nothing but sample. */
    if (!repark && now - s_tls.done_ns < S.interval_ns / 4) {
        atomic_fetch_add_explicit(&S.throttled, 1, memory_order_relaxed);
        goto out;
    }

    pp_rawframe frames[MAX_FRAMES];
    uintptr_t native[MAX_NATIVE];
    int attached = 0, truncated = 0, nframes = 0, nnative = 0;
    uintptr_t coro = 0;
    int64_t cpu_in = 0;                 /* detached: its CPU clock as this handler began */
    PyThreadState *ts = pp_signal_tstate(&attached);
    uint8_t state;
    if (ts == NULL) {
        state = PP_STATE_OTHER;
        atomic_fetch_add_explicit(&S.foreign, 1, memory_order_relaxed);
    }
    else {
        state = PP_STATE_PYTHON;
        if (!attached) {
            /* Detached: C code that released the GIL (using CPU since the last
             * sample: a blocked thread uses ~0; a runnable one short of a CPU
             * still gets a share) or blocked. Its clock is read before the
             * walk: the handler's own CPU is not the thread's (parking). */
            int64_t cpu = thread_cpu_ns(), wall = pp_mono_ns();
            int64_t dcpu = cpu - s_tls.cpu_ns, dwall = wall - s_tls.wall_ns;
            /* Taken out of a blocking call, or in its own code, as the
             * signal came; else (back from a call) by its CPU since its last
             * sample. A first sample in CPU mode: the kernel picked a
             * running thread. */
            int blocked = pp_signal_blocked(uctx);
            int busy = blocked >= 0 ? !blocked
                     : s_tls.wall_ns ? dwall > 0 && dcpu * 10 > dwall
                                     : S.mode == PP_SAMPLE_CPU;
            busy = busy && !repark;     /* found blocked */
            state = busy ? PP_STATE_NATIVE : PP_STATE_IDLE;
            s_tls.cpu_ns = cpu;
            s_tls.wall_ns = wall;
            cpu_in = cpu;
        }
        else {
            s_tls.wall_ns = 0;
        }
        nframes = pp_gc_frame(frames);      /* the collector runs: its frame on top */
        nframes += pp_frames_walk_coro(ts, frames + nframes, MAX_FRAMES - nframes, &truncated,
                                       &coro);
    }
    if (S.native)
        nnative = pp_unwind_signal(uctx, native, MAX_NATIVE);
    int64_t clock_now, weight;
    if (sl) {                           /* wall mode: since the slot's time was last charged */
        clock_now = now;                /* moved once recorded: a dropped sample's time carries */
        int64_t prev = atomic_load(&sl->accounted);
        weight = now > prev ? now - prev : 0;
    }
    else {
        weight = sample_weight(info, now, &clock_now);
    }

    /* CPU mode: what the thread runs after its last sample no sample sees;
     * its first one carries that, in the drain (sampler_drain.c) */
    uint16_t first = S.mode == PP_SAMPLE_CPU && s_tls.run != S.run ? REC_FIRST : 0;
    int recorded = pp_ring_write_sample(
        ts ? (uint32_t)pp_tstate_native_tid(ts) : (uint32_t)syscall(SYS_gettid),
        ts ? (uint64_t)pp_tstate_ident(ts) : 0, now, state, truncated, frames, nframes, native,
        nnative, weight, S.async ? coro : 0, first);
    if (recorded) {
        if (sl) {                       /* not parked: only this thread moves it now */
            atomic_store(&sl->accounted, now);
            atomic_store(&sl->sampled, 1);
        }
        /* Only a recorded sample moves the base: a throttled or dropped one
         * carries its time into the next. */
        s_tls.run = S.run;
        s_tls.last = clock_now;
    }
    if (sl)
        parking_after_sample(sl, recorded, repark, state, frames, nframes, now, cpu_in);
    s_tls.done_ns = pp_mono_ns();
out:
    errno = saved_errno;
}

/* ---------------------------------------------------- helper and ticker */

/* GIL held, after a drain: the threads whose task-clock events ended. */
static void drain_ends(pp_sampling *p)
{
    pp_cpuclock_end *ends;
    uint32_t n = pp_cpuclock_take_ends(&ends);
    pp_sampler_drain_ends(p, ends, n);
    free(ends);
}

/* The helper sleeps on a condition variable, so that stop() wakes it at once
 * (joining it must not wait out a drain period). */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv;
static int wake_cv_ready;

static int init_wake(void)
{
    if (wake_cv_ready)
        return 0;
    pthread_condattr_t a;
    if (pthread_condattr_init(&a) != 0)
        return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) || pthread_cond_init(&wake_cv, &a);
    pthread_condattr_destroy(&a);
    if (rc)
        return -1;
    wake_cv_ready = 1;
    return 0;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
    pthread_mutex_lock(&wake_mu);
    while (!atomic_load(&S.stop) && pp_mono_ns() < t)
        if (pthread_cond_timedwait(&wake_cv, &wake_mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&wake_mu);
}

static void wake_helper(void)
{
    pthread_mutex_lock(&wake_mu);
    atomic_store(&S.stop, 1);
    pthread_cond_broadcast(&wake_cv);   /* the helper and the ticker */
    pthread_mutex_unlock(&wake_mu);
}

/* A program may install its own handler for our signal (or, in CPU mode,
 * stop or change the profiling timer) while we sample: we cannot prevent it,
 * but the capture says so instead of silently thinning out. */
static void check_takeover(void)
{
    if (atomic_load(&S.replaced))
        return;
    int taken = !pp_sampler_handler_is_ours(mode_signal());
    struct itimerval it;
    taken |= pp_on_itimer() && !atomic_load(&S.paused)
             && getitimer(ITIMER_PROF, &it) == 0
             && (int64_t)it.it_interval.tv_sec * 1000000000
                + (int64_t)it.it_interval.tv_usec * 1000 != S.interval_ns / 1000 * 1000;
    /* stopping or forking disarms the timer too: not a takeover */
    if (taken && !atomic_load(&S.stop) && !atomic_load(&S.paused))
        atomic_store(&S.replaced, 1);
}

/* pyprof's own threads are not sampled: our signals are kept away from them.
 * Named, for top, ps and debuggers. */
static pid_t own_thread_init(const char *name)
{
    pthread_setname_np(pthread_self(), name);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPROF);
    if (atomic_load(&S.rt_signal) > 0)
        sigaddset(&set, atomic_load(&S.rt_signal));
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    return (pid_t)syscall(SYS_gettid);
}

/* --async: the tasks are looked at every LOOK_NS, less often when looking
 * would cost more than a 400th of the time (tens of thousands of tasks: up
 * to a second apart), in CPU mode, and while no task has been seen (a
 * program without an event loop). */
#define LOOK_NS (10 * 1000 * 1000)
#define LOOK_MAX_NS (1000 * 1000 * 1000)
static int64_t async_look_period(pp_sampling *p, int64_t cost_before)
{
    const pp_tasks *t = &p->tasks;
    /* the cheaper of the last two: one dear look (a run's first, with its
     * first-time costs; a helper kept off a CPU) does not space the next */
    int64_t cost = t->own->last_look_ns < cost_before ? t->own->last_look_ns : cost_before;
    int64_t period = cost * 400;
    /* no task yet; or CPU mode, where looks only name tasks (no awaiting time to
     * place), and each look takes the GIL from a loop that may be busy */
    if ((t->n == 0 || S.mode == PP_SAMPLE_CPU) && period < 5 * LOOK_NS)
        period = 5 * LOOK_NS;
    return period < LOOK_NS ? LOOK_NS : period > LOOK_MAX_NS ? LOOK_MAX_NS : period;
}

static void *sampler_main(void *arg)
{
    (void)arg;
    S.helper_tid = own_thread_init("pyprof-helper");
    int64_t tick = S.mode == PP_SAMPLE_WALL || S.async || pp_on_task_clock() ? SCAN_NS : DRAIN_NS;
    int64_t next = pp_mono_ns() + tick, next_drain = pp_mono_ns() + DRAIN_NS, flush_due = next_drain;
    int64_t next_refresh = 0, next_look = 0, last_look = 0;
    int looked = 0;
    while (!atomic_load(&S.stop)) {
        sleep_until(next);
        next += tick;
        int64_t now = pp_mono_ns();
        if (next < now)                 /* fell behind: skip ticks, do not burst */
            next = now + tick;
        if (atomic_load(&S.stop))
            break;
        check_takeover();
        if (pp_on_task_clock())
            pp_cpuclock_scan(now);      /* threads threading did not start */
        /* new thread states: looked at every SCAN_NS at most (it takes the GIL) */
        int refresh = S.mode == PP_SAMPLE_WALL && now >= next_refresh
                      && (pp_interp_threads_head() != S.threads_head || atomic_load(&S.unbound)
                          || atomic_load(&S.nsuspects));
        if (refresh)
            next_refresh = now + SCAN_NS;
        if (refresh && next_drain > now + NAME_NS)
            next_drain = now + NAME_NS;     /* again soon: the new thread's name */
        int look = S.async && now >= next_look;
        /* a sample met a coroutine of no known task: its task soon (a short
         * task may end before the next regular look), once per LOOK_NS at most */
        int fresh = !look && S.async && atomic_load(&S.new_coro) && now - last_look >= LOOK_NS;
        if (refresh || look || fresh || now >= next_drain
            || atomic_load(&S.head) - atomic_load(&S.tail) > RING_BYTES / 2) {
            if (now >= next_drain)
                next_drain = now + DRAIN_NS;
            if (atomic_load(&S.stop))
                break;
            uintptr_t displaced;
            (void)pp_gil_switches(&displaced);
            PyGILState_STATE g = PyGILState_Ensure();
            uintptr_t self_ts;
            atomic_store(&S.helper_switch, pp_gil_switches(&self_ts));
            if (!atomic_load(&S.stop) && S.prof) {
                if (S.mode == PP_SAMPLE_WALL && now >= flush_due) {
                    pthread_mutex_lock(&pp_wall_mu);
                    pp_wall_flush();         /* per drain period, not per new thread */
                    pthread_mutex_unlock(&pp_wall_mu);
                    flush_due = now + DRAIN_NS;
                }
                uintptr_t asked = 0;
                if (look || fresh) {
                    last_look = now;
                    asked = atomic_exchange(&S.new_coro, 0);    /* before the registries are read */
                }
                if (look)
                    pp_async_look_begin(S.prof, now);
                else if (S.async && refresh)        /* a new thread: an executor's, maybe */
                    pp_async_peek(S.prof, now);
                if (fresh)                          /* a new task, likely */
                    pp_async_fresh(S.prof, now, asked);
                else if (asked)
                    pp_async_asked(S.prof, asked);
                pp_sampler_drain(S.prof);
                if (pp_on_task_clock())
                    drain_ends(S.prof);     /* threads gone: after their last samples */
                if (look) {
                    int64_t cost_before = S.prof->tasks.own->last_look_ns;
                    pp_async_look_end(S.prof, now);
                    next_look = now + async_look_period(S.prof, looked ? cost_before : 0);
                    looked = 1;
                }
                if (S.mode == PP_SAMPLE_WALL) {
                    pthread_mutex_lock(&pp_wall_mu);
                    pp_wall_refresh();
                    pp_wall_suspect_displaced(displaced);
                    pp_wall_resolve_suspects();
                    pthread_mutex_unlock(&pp_wall_mu);
                }
                if (S.prof->periodic)
                    S.prof->periodic(S.prof->periodic_arg);    /* --dump-every */
            }
            PyGILState_Release(g);
        }
    }
    return NULL;
}

/* Wall mode, never with the GIL: a parked thread holding the GIL wakes
 * within a tick; parked threads are looked at (pp_wall_check_parked). A tick
 * is the interval, 5 ms at least: each costs a timed wake-up (tens of µs on a
 * VM), and a late wake-up moves no time (unpark gives the CPU used since
 * parking to the next sample; a parked thread's CPU timer catches it within
 * a kernel tick of CPU anyway). */
#define TICKER_MIN_NS (5 * 1000 * 1000)
static void *ticker_main(void *arg)
{
    (void)arg;
    S.ticker_tid = own_thread_init("pyprof-ticker");
    int64_t tick = S.interval_ns < TICKER_MIN_NS ? TICKER_MIN_NS : S.interval_ns > SCAN_NS ? SCAN_NS : S.interval_ns;
    int64_t last = pp_mono_ns(), next = last + tick;
    while (!atomic_load(&S.stop)) {
        sleep_until(next);
        int64_t now = pp_mono_ns();
        next += tick;
        if (next < now)                 /* fell behind: skip ticks, do not burst */
            next = now + tick;
        if (atomic_load(&S.stop))
            break;
        pthread_mutex_lock(&pp_wall_mu);
        uint32_t nparked = pp_wall_look(now - last);
        pthread_mutex_unlock(&pp_wall_mu);
        last = now;
        if (nparked == 0)               /* nothing to look at: seldom (a park is seen late, not wrong) */
            next = now + SCAN_NS;
        /* the helper drains at half full; if it is kept waiting for the GIL */
        if (atomic_load(&S.head) - atomic_load(&S.tail) > RING_BYTES / 4 * 3)
            pp_sampler_spill();
    }
    return NULL;
}

static int start_helpers(void)
{
    atomic_store(&S.stop, 0);
    S.have_thread = pthread_create(&S.thread, NULL, sampler_main, NULL) == 0;
    if (S.have_thread && S.mode == PP_SAMPLE_WALL)
        S.have_ticker = pthread_create(&S.ticker, NULL, ticker_main, NULL) == 0;
    return S.have_thread && (S.mode != PP_SAMPLE_WALL || S.have_ticker) ? 0 : -1;
}

/* GIL held; waits for them with it released (the helper may be waiting for it). */
static void join_helpers(void)
{
    pthread_t th = S.thread, tk = S.ticker;
    int h = S.have_thread, t = S.have_ticker;
    S.have_thread = S.have_ticker = 0;
    wake_helper();
    Py_BEGIN_ALLOW_THREADS
    if (h)
        pthread_join(th, NULL);
    if (t)
        pthread_join(tk, NULL);
    Py_END_ALLOW_THREADS
}

/* ------------------------------------------------------ start / stop */

static int timer_arm(int64_t interval_ns)
{
    struct itimerval it = itimer_of(interval_ns, interval_ns);
    return setitimer(ITIMER_PROF, &it, NULL);
}

static int cpu_timer_on(int64_t interval_ns)
{
    atomic_store(&S.cpu_due, pp_process_cpu_ns() + interval_ns);
    atomic_store(&S.cpu_late_max, 0);
    atomic_store(&S.disarmed, 0);
    return timer_arm(interval_ns);
}

/* Disarmed for good: a handler that was arming it again has finished. */
static void cpu_timer_off(void)
{
    atomic_store(&S.disarmed, 1);
    timer_arm(0);
    while (atomic_load(&S.arming) > 0)
        sched_yield();
    timer_arm(0);
}

/* ------------------------------------------------ helper around fork */

/* CPython 3.12+ counts the process's threads after fork() and warns if there
 * are several: the helper stops for the fork (profiler.c's hooks) while the
 * handler keeps filling the ring. */
static int helper_paused, helper_joining;

int pp_sampler_helper_pause(pid_t tids[2])
{
    if (S.pid != getpid())
        return 0;
    int n = 0;
    if (!S.have_thread && !helper_paused)
        return 0;
    if (S.have_thread) {
        helper_paused = helper_joining = 1;
        join_helpers();
        helper_joining = 0;
    }
    /* read once joined: a helper resumed by the previous fork may not have
     * written its tid yet when this one starts, but has when it has ended.
     * Paused already (by another thread's fork): the tids are those gone. */
    tids[n++] = S.helper_tid;
    if (S.mode == PP_SAMPLE_WALL)
        tids[n++] = S.ticker_tid;
    return n;
}

void pp_sampler_helper_resume(void)
{
    if (!helper_paused)
        return;
    helper_paused = 0;
    if (!atomic_load(&S.active) || S.have_thread || S.pid != getpid())
        return;                         /* stopped meanwhile */
    (void)start_helpers();
}

/* The task-clock events go on: a thread-directed signal does not make fork()
 * start over (a process-wide one, as SIGPROF from ITIMER_PROF, may). */
static void atfork_prepare(void)
{
    if (atomic_load(&S.active)) {
        atomic_store(&S.paused, 1);
        if (pp_on_itimer())
            cpu_timer_off();
    }
}

static void atfork_parent(void)
{
    if (atomic_load(&S.active)) {
        if (pp_on_itimer())
            cpu_timer_on(S.interval_ns);
        atomic_store(&S.paused, 0);
    }
}

static void atfork_child(void)
{
    /* The helper may have held the mutexes at fork(): the child's copies are new. */
    pthread_mutex_init(&wake_mu, NULL);
    pthread_mutex_init(&pp_wall_mu, NULL);
    pp_sampler_drain_atfork_child();
    pp_cpuclock_atfork_child();         /* its fds would keep the parent's events alive */
    wake_cv_ready = 0;
    /* No helper thread here: the child does not sample (its profiler's stop
     * knows, by pid). */
    atomic_store(&S.active, 0);
    atomic_store(&S.paused, 0);
}

/* GIL held, before the handler is active: a new run (every thread's next
 * sample is its first of the run). */
static void new_run(void)
{
    S.run++;
    atomic_store(&S.weight_ns, 0);
}

int pp_sampler_start(pp_sampling *p)
{
    const pp_sample_opts *o = &p->opts;
    static int atfork_done;
    if (atomic_load(&S.active) || S.have_thread || helper_joining) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof: a sampler is already running in this process");
        return -1;
    }
    if (!(o->rate_hz >= PP_RATE_MIN && o->rate_hz <= PP_RATE_MAX)) {
        char msg[96];
        snprintf(msg, sizeof msg, "pyprof: sampling rate must be in [%g, %g] Hz, not %g",
                 PP_RATE_MIN, PP_RATE_MAX, o->rate_hz);
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    if (o->native && !pp_unwind_available()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyprof: native stacks need libunwind, which this build lacks "
                        "(install libunwind-dev and rebuild)");
        return -1;
    }
    struct sigaction cur;
    struct itimerval it;
    int sig = SIGPROF, source = PP_CPU_ITIMER;
    const char *fallback = "";
    if (o->mode == PP_SAMPLE_WALL || o->cpu_timer != PP_CPU_ITIMER)
        sig = pp_sampler_pick_rt_signal();
    if (o->mode == PP_SAMPLE_WALL && sig == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyprof: no real-time signal is free (all handled or blocked by "
                        "the program); wall-clock sampling needs one");
        return -1;
    }
    if (o->mode == PP_SAMPLE_CPU && o->cpu_timer != PP_CPU_ITIMER) {
        if (sig != 0 && pp_cpuclock_usable())
            source = PP_CPU_TASKCLOCK;
        else {
            fallback = sig == 0 ? "no real-time signal is free (all handled or blocked by "
                                  "the program)" : pp_cpuclock_refusal();
            if (o->cpu_timer == PP_CPU_TASKCLOCK) {
                PyErr_Format(PyExc_RuntimeError, "pyprof: no per-thread CPU-clock events "
                             "here (%s); --cpu-timer itimer samples at the kernel's tick", fallback);
                return -1;
            }
            sig = SIGPROF;
        }
    }
    /* elsewhere a signal of our own: the program's SIGPROF is its own */
    int itimer = o->mode == PP_SAMPLE_CPU && source == PP_CPU_ITIMER;
    if (itimer && sigaction(SIGPROF, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO
            ? cur.sa_sigaction != on_sample_signal
            : (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN))) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyprof: the program already handles SIGPROF (another profiler?); "
                        "pyprof's CPU-time sampler on ITIMER_PROF needs that signal (--wall does not)");
        return -1;
    }
    else if (itimer && getitimer(ITIMER_PROF, &it) == 0
             && (it.it_value.tv_sec || it.it_value.tv_usec)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyprof: the program already runs a profiling timer (ITIMER_PROF)");
        return -1;
    }
    /* calloc's pages are zero and untouched until used: memset would fault
     * in all 8 MiB at start (~4 ms); a ring used before is cleared below. */
    int ring_fresh = S.buf == NULL;
    if (S.buf == NULL) {
        S.buf = calloc(1, RING_BYTES + RING_SLACK);
        if (S.buf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    pp_frames_init();
    pp_frames_read_opcodes(o->opcodes);
    if (init_wake() < 0) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof: cannot set up the sampler thread");
        return -1;
    }
    if (pp_frames_watch_code(pp_sampler_drain_for_dying, 1) < 0)
        return -1;
    if (!atfork_done && pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0)
        atfork_done = 1;
    helper_paused = 0;
    S.mode = o->mode;
    S.source = source;
    S.fallback = fallback;
    S.native = o->native;
    S.async = o->async;
    pp_async_reset(p);
    S.rate_hz = o->rate_hz;
    S.interval_ns = (int64_t)(1e9 / o->rate_hz);
    S.pid = getpid();
    atomic_store(&S.head, 0);
    atomic_store(&S.tail, 0);
    atomic_store(&S.signals, 0);
    atomic_store(&S.recorded, 0);
    atomic_store(&S.dropped, 0);
    atomic_store(&S.foreign, 0);
    atomic_store(&S.throttled, 0);
    atomic_store(&S.replaced, 0);
    atomic_store(&S.unbound, 0);
    atomic_store(&S.parked, 0);
    atomic_store(&S.nparked, 0);
    atomic_store(&S.nsuspects, 0);
    atomic_store(&S.woken, 0);
    atomic_store(&S.idle_ticks, 0);
    atomic_store(&S.helper_switch, 0);
    S.nstill = 0;
    S.check_debt = 0;
    S.look_valid = 0;
    S.look_ns = 0;
    S.refresh_ns = 0;
    pp_sampler_drain_reset();
    atomic_store(&S.stop, 0);
    atomic_store(&S.paused, 0);
    S.corrupt = 0;
    if (!ring_fresh)
        memset(S.buf, 0, RING_BYTES + RING_SLACK);
    S.prof = p;
    S.owner = Py_NewRef(p->owner);

    if (sig != SIGPROF)
        atomic_store(&S.rt_signal, sig);  /* before the handler can see it */
    if (pp_sampler_take_signal(sig, on_sample_signal) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        S.prof = NULL;
        Py_CLEAR(S.owner);
        return -1;
    }
    new_run();
    S.started_ns = pp_mono_ns();
    S.cpu0_ns = pp_process_cpu_ns();
    atomic_store_explicit(&S.active, 1, memory_order_release);
    if (S.mode == PP_SAMPLE_WALL) {
        pthread_mutex_lock(&pp_wall_mu);
        pp_wall_refresh();
        pthread_mutex_unlock(&pp_wall_mu);
    }
    /* before the helper: it is never given one */
    if (pp_on_task_clock()
        && pp_cpuclock_start(sig, S.interval_ns) != 0) {
        pp_cpuclock_stop(0, 0);
        atomic_store(&S.active, 0);
        S.prof = NULL;
        Py_CLEAR(S.owner);
        PyErr_SetString(PyExc_RuntimeError, "pyprof: cannot open the CPU-clock events");
        return -1;
    }
    if (start_helpers() != 0) {
        if (pp_on_task_clock())
            pp_cpuclock_stop(0, 0);
        join_helpers();
        atomic_store(&S.active, 0);
        pthread_mutex_lock(&pp_wall_mu);
        pp_wall_delete(1);
        pthread_mutex_unlock(&pp_wall_mu);
        S.prof = NULL;
        Py_CLEAR(S.owner);
        PyErr_SetString(PyExc_RuntimeError, "pyprof: cannot start the sampler thread");
        return -1;
    }
    if (pp_on_itimer() && cpu_timer_on(S.interval_ns) != 0) {
        pp_sampler_stop(p);
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (S.mode == PP_SAMPLE_WALL || pp_on_task_clock())
        pp_wall_hook_threads(1);        /* a new thread gets its timer as it starts */
    if (S.mode == PP_SAMPLE_WALL)
        pp_wall_hook_pause(1);
    if (S.native) {
        /* started: the naming thread reads the libraries every stack passes
         * through (the interpreter's, libc) from now, not from the first drain */
        uintptr_t here[64];
        pp_unwind_init_self();
        pp_symbols_prefetch(here, pp_unwind_here(here, 64));
    }
    if (pp_on_task_clock())             /* the start's own CPU is not the program's */
        pp_cpuclock_rebase_self((pid_t)syscall(SYS_gettid), thread_cpu_ns());
    return 0;
}

void pp_sampler_hook_threading(pp_sampling *p)
{
    if (p == S.prof && atomic_load(&S.active)
        && (S.mode == PP_SAMPLE_WALL || pp_on_task_clock()))
        pp_wall_hook_threads(1);
}

int pp_sampler_stop(pp_sampling *p)
{
    if (p != S.prof)
        return 0;
    int64_t stop_cpu = thread_cpu_ns();     /* the stop's own CPU is not the program's */
    int own_process = S.pid == getpid();
    if (own_process)
        check_takeover();
    if ((S.mode == PP_SAMPLE_WALL || pp_on_task_clock()) && PyGILState_Check()) {
        pp_wall_hook_threads(0);
        pp_wall_hook_pause(0);
    }
    /* stop first: the helper must not read our own disarming as a takeover */
    if (own_process && S.have_thread)
        wake_helper();
    else
        atomic_store(&S.stop, 1);
    if (own_process && pp_on_itimer())
        cpu_timer_off();
    else if (own_process && S.mode == PP_SAMPLE_CPU)
        pp_cpuclock_stop((pid_t)syscall(SYS_gettid), stop_cpu);
    pthread_mutex_lock(&pp_wall_mu);
    pp_wall_delete(own_process);          /* a forked child has none of the timers */
    pthread_mutex_unlock(&pp_wall_mu);
    if (own_process)
        join_helpers();
    S.have_thread = S.have_ticker = 0;
    atomic_store_explicit(&S.active, 0, memory_order_release);
    S.stopped_ns = pp_mono_ns();
    S.cpu1_ns = pp_process_cpu_ns();
    /* Take what the handlers published (one still writing is dropped). */
    if (S.async)
        pp_async_stop_begin(p, S.stopped_ns);
    pp_sampler_drain(p);
    if (pp_on_task_clock())
        drain_ends(p);
    if (S.mode == PP_SAMPLE_CPU) {
        if (S.past_interval_ns != S.interval_ns) {
            S.past_cpu_ns = 0;
            S.past_signals = 0;
            S.past_interval_ns = S.interval_ns;
        }
        S.past_cpu_ns += S.cpu1_ns - S.cpu0_ns;
        S.past_signals += atomic_load(&S.signals);
    }
    if (S.async)
        pp_async_stop(p, S.stopped_ns);
    pp_frames_watch_code(pp_sampler_drain_for_dying, 0);
    if (S.native)
        pp_symbols_quiesce();           /* no thread of ours outlives the run */
    PyObject *owner = S.owner;
    S.prof = NULL;
    S.owner = NULL;
    Py_XDECREF(owner);
    return 0;
}

int pp_sampler_release_signal(void)
{
    if (atomic_load(&S.active) || S.have_thread || helper_paused)
        return -1;
    return pp_sampler_give_back_signals();
}

void pp_sampler_get_info(pp_sampler_info *out)
{
    out->mode = S.mode;
    out->source = S.source;
    out->fallback = S.fallback ? S.fallback : "";
    out->native = S.native;
    out->rate_hz = S.rate_hz;
    out->interval_ns = (double)S.interval_ns;
    out->signals = atomic_load(&S.signals);
    out->recorded = atomic_load(&S.recorded);
    out->dropped = atomic_load(&S.dropped);
    out->foreign = atomic_load(&S.foreign);
    out->throttled = atomic_load(&S.throttled);
    out->weight_ns = atomic_load(&S.weight_ns);
    out->started_ns = S.started_ns;
    out->stopped_ns = atomic_load(&S.active) ? pp_mono_ns() : S.stopped_ns;
    out->cpu_ns = (atomic_load(&S.active) ? pp_process_cpu_ns() : S.cpu1_ns) - S.cpu0_ns;
    out->replaced = atomic_load(&S.replaced);
    out->parked = atomic_load(&S.parked);
    out->woken = atomic_load(&S.woken);
    out->idle_ticks = atomic_load(&S.idle_ticks);
}

/* Signals per CPU second in cpu mode (the requested rate's unit); in wall mode, per
 * thread: samples (recorded and parked ticks) per second of the time they weigh. */
double pp_sampler_achieved(const pp_sampler_info *si)
{
    if (si->mode == PP_SAMPLE_CPU)
        return si->cpu_ns > 0 ? (double)si->signals / ((double)si->cpu_ns / 1e9) : 0.0;
    return si->weight_ns > 0 ? (double)(si->recorded + si->idle_ticks) / ((double)si->weight_ns / 1e9)
                             : 0.0;
}

int pp_sampling_init(pp_sampling *p, PyObject *owner, pp_registry *reg, pp_threadset *threads)
{
    p->owner = owner;
    p->reg = reg;
    p->threads = threads;
    if (pp_samples_init(&p->samples) < 0)
        return -1;
    return pp_async_init(p);
}

void pp_sampling_free(pp_sampling *p)
{
    free(p->debts);
    p->debts = NULL;
    p->ndebts = p->capdebts = 0;
    pp_samples_free(&p->samples);
    pp_async_free(p);
    Py_CLEAR(p->root);
    Py_CLEAR(p->program);
}
