/* termguard.c — a Python-level SIGTERM handler that is sure to run (termguard.h).
 *
 * CPython's C handler only trips a flag; the Python handler runs when the main
 * thread next checks it. A signal that lands after the last check and before a
 * blocking call (a pool worker going idle in sem_wait when the pool is
 * terminated) leaves the thread blocked with the handler never run: the worker
 * neither writes its capture nor dies. The guard wraps CPython's handler; on
 * the first delivery it arms a timer that re-sends the signal to the main
 * thread every RESEND_NS, so the blocking call fails with EINTR and the
 * handler runs (PEP 475 checks signals before retrying). The Python handler
 * acknowledges first thing (pp_term_guard_ack), which stops the timer.
 *
 * A main thread that cannot run Python at all (a C call holding the GIL and
 * retrying EINTR itself) must not turn SIGTERM into "never die": after
 * GIVE_UP_NS and GIVE_UP_RESENDS unanswered re-sends, the default action is
 * restored and the signal re-raised.
 *
 * Everything in the handler is async-signal-safe: the chained handler is
 * CPython's (written for this), timer_settime, clock_gettime, getpid,
 * sigaction and raise.
 */
#define _GNU_SOURCE
#include "termguard.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>

#ifndef sigev_notify_thread_id         /* glibc before 2.35 names only the union member */
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define RESEND_NS 5000000L              /* 5 ms */
#define GIVE_UP_NS 2000000000LL         /* 2 s ... */
#define GIVE_UP_RESENDS 20              /* ... and 20 re-sends nobody answered */

enum { GUARD_OFF = 0, GUARD_IDLE, GUARD_ARMED, GUARD_ACKED };

static struct {
    atomic_int state;
    pid_t pid;                          /* the process the timer belongs to */
    timer_t timer;
    int have_timer;
    struct sigaction chained;           /* CPython's handler */
    long long armed_ns;
    atomic_int resends;
} G;

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void set_timer(long interval_ns)
{
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_interval.tv_nsec = interval_ns;
    its.it_value.tv_nsec = interval_ns;
    timer_settime(G.timer, 0, &its, NULL);
}

static void on_signal(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    if (G.chained.sa_flags & SA_SIGINFO) {
        if (G.chained.sa_sigaction)
            G.chained.sa_sigaction(sig, info, context);
    } else if (G.chained.sa_handler != SIG_DFL && G.chained.sa_handler != SIG_IGN) {
        G.chained.sa_handler(sig);
    }
    /* A forked child inherits the disposition, not the timer. */
    if (getpid() == G.pid && G.have_timer) {
        int state = atomic_load(&G.state);
        if (state == GUARD_IDLE) {
            G.armed_ns = mono_ns();
            atomic_store(&G.resends, 0);
            atomic_store(&G.state, GUARD_ARMED);
            set_timer(RESEND_NS);
        } else if (state == GUARD_ARMED
                   && atomic_fetch_add(&G.resends, 1) + 1 >= GIVE_UP_RESENDS
                   && mono_ns() - G.armed_ns >= GIVE_UP_NS) {
            set_timer(0);
            atomic_store(&G.state, GUARD_OFF);
            struct sigaction dfl;
            memset(&dfl, 0, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            sigemptyset(&dfl.sa_mask);
            sigaction(sig, &dfl, NULL);
            raise(sig);                 /* pending until this handler returns */
        }
    }
    errno = saved_errno;
}

int pp_term_guard_install(int signum)
{
    struct sigaction current;
    if (sigaction(signum, NULL, &current) != 0)
        return -1;
    if (current.sa_sigaction == on_signal && (current.sa_flags & SA_SIGINFO)) {
        current = G.chained;            /* reinstalled (a forked child): keep CPython's */
    } else if (!(current.sa_flags & SA_SIGINFO)
               && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)) {
        return 0;                       /* no Python handler to make sure of */
    }
    if (G.have_timer) {
        if (G.pid == getpid())
            timer_delete(G.timer);
        G.have_timer = 0;
    }
    atomic_store(&G.state, GUARD_OFF);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = signum;
    ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &ev, &G.timer) != 0)
        return -1;
    G.have_timer = 1;
    G.pid = getpid();
    G.chained = current;
    struct sigaction guard;
    memset(&guard, 0, sizeof guard);
    guard.sa_sigaction = on_signal;
    guard.sa_flags = SA_SIGINFO | (current.sa_flags & SA_ONSTACK);
    sigemptyset(&guard.sa_mask);
    atomic_store(&G.state, GUARD_IDLE);
    if (sigaction(signum, &guard, NULL) != 0) {
        atomic_store(&G.state, GUARD_OFF);
        return -1;
    }
    return 1;
}

void pp_term_guard_ack(void)
{
    if (G.have_timer && G.pid == getpid()) {
        atomic_store(&G.state, GUARD_ACKED);
        set_timer(0);
    }
}

#else

int pp_term_guard_install(int signum)
{
    (void)signum;
    return 0;
}

void pp_term_guard_ack(void)
{
}

#endif
