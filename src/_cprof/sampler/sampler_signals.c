/* sampler_signals.c — which signal the sampler ticks on, taking it, and
 * giving it back (sampler_int.h). CPU mode's interval timer takes SIGPROF;
 * wall mode and CPU mode's task-clock events a real-time signal no thread of
 * the program handles, blocks or waits for.
 * Linux reads the threads' masks and waits from /proc; elsewhere the
 * starting thread's mask alone is known.
 */
#define _GNU_SOURCE
#include "sampler_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The dispositions before pyprof took SIGPROF (the interval timer) and the real-time
 * signal (GIL held to change). */
static struct sigaction prev_sigprof, prev_rt;
static int have_prev_sigprof, have_prev_rt;
/* The sampler's handler, known from its first take (sampler.c keeps it). */
static pp_signal_handler our_handler;

int pp_sampler_handler_is_ours(int sig)
{
    struct sigaction cur;
    return sig > 0 && sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO)
           && our_handler != NULL && cur.sa_sigaction == our_handler;
}

/* Linux: the signals a thread waits for in sigwait, sigwaitinfo or
 * sigtimedwait (`task`: its /proc/self/task entry), 0 if it is in none. The
 * kernel unblocks them for the wait, so its SigBlk line does not show them:
 * the set is read where the call's first argument points, in this process's
 * own memory (read through /proc/self/mem: a pointer gone stale faults nothing). */
static unsigned long long waited_signals(const char *task)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/syscall", task);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    long nr = -1;
    unsigned long long set_at = 0, set = 0;
    if (fgets(line, sizeof line, f) == NULL || sscanf(line, "%ld %llx", &nr, &set_at) != 2)
        nr = -1;
    fclose(f);
    if (nr != SYS_rt_sigtimedwait || set_at == 0)
        return 0;
    int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (mem < 0)
        return 0;
    if (pread(mem, &set, sizeof set, (off_t)set_at) != (ssize_t)sizeof set)
        set = 0;
    close(mem);
    return set;
}

/* Linux: the union over this process's threads of the signal sets their
 * /proc status lines `a` and `b` (NULL: none) show (SigPnd: pending); with
 * `blocked` (a is SigBlk:), the signals each thread keeps from its handlers,
 * those of a wait included, pyprof's own threads (named pyprof-*: they block
 * every signal of the program's) and a thread's blocking of every real-time
 * signal left out. -1 when /proc cannot be read. */
static int tasks_signal_union(const char *a, const char *b, int blocked, unsigned long long *out)
{
    unsigned long long rt_mask = 0;
    for (int sig = SIGRTMIN; sig <= SIGRTMAX && sig <= 64; sig++)
        rt_mask |= 1ULL << (sig - 1);
    *out = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], line[128];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;                   /* a thread that ended meanwhile */
        unsigned long long set = 0;
        int own = 0;
        while (fgets(line, sizeof line, f) != NULL) {
            if (strncmp(line, "Name:\tpyprof-", 13) == 0)
                own = 1;
            else if (strncmp(line, a, strlen(a)) == 0 || (b && strncmp(line, b, strlen(b)) == 0))
                set |= strtoull(line + strlen(a), NULL, 16);
        }
        fclose(f);
        /* A thread blocking every real-time signal shields itself from all
         * signals (faulthandler's watchdog, a C library's worker): it takes
         * none of them in particular, and pyprof's go to other threads. */
        if (blocked && (set & rt_mask) == rt_mask)
            set &= ~rt_mask;
        if (blocked && !own)
            set |= waited_signals(e->d_name);
        if (!(own && blocked))
            *out |= set;
    }
    closedir(d);
    return 0;
}

/* Names written once per signal and kind, never again: a capture may hold
 * one while a later start picks another signal. */
static char hook_names[2][65][64];
static const char *const hook_kinds[2] = {"per-thread CPU-clock events", "per-thread wall-clock timers"};

static void name_hooks(int sig)
{
    for (int k = 0; k < 2; k++) {
        if (sig <= 0 || sig >= 65 || hook_names[k][sig][0])
            continue;
        if (sig == SIGRTMAX)
            snprintf(hook_names[k][sig], sizeof hook_names[k][sig], "SIGRTMAX (%s)", hook_kinds[k]);
        else
            snprintf(hook_names[k][sig], sizeof hook_names[k][sig], "SIGRTMAX-%d (%s)",
                     SIGRTMAX - sig, hook_kinds[k]);
    }
}

/* The real-time signal (wall mode's ticks, CPU mode's task-clock events):
 * the one an earlier start took while our handler is still on it, else the
 * highest real-time signal the program leaves at SIG_DFL and no thread of it
 * blocks (a blocked one may be a thread's
 * sigwait's or signalfd's: our ticks would reach it as its own signals).
 * From SIGRTMAX down: the C library and most programs take theirs from
 * SIGRTMIN up. 0: none free. */
int pp_sampler_pick_rt_signal(void)
{
    int kept = atomic_load(&S.rt_signal);
    if (kept > 0 && pp_sampler_handler_is_ours(kept))
        return kept;
    if (kept > 0)
        have_prev_rt = 0;             /* the program's since (or given back): not ours to restore */
    sigset_t blocked;
    if (pthread_sigmask(SIG_BLOCK, NULL, &blocked) != 0)
        sigemptyset(&blocked);
    unsigned long long others;
    if (tasks_signal_union("SigBlk:", NULL, 1, &others) != 0)
        others = 0;                     /* no /proc: this thread's mask only */
    for (int sig = SIGRTMAX; sig >= SIGRTMIN; sig--) {
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO)
            && cur.sa_handler == SIG_DFL && !sigismember(&blocked, sig)
            && !(others & (1ULL << (sig - 1))))
            return sig;
    }
    return 0;
}

/* `handler` on `sig`, the disposition found kept to give back. -1: errno. */
int pp_sampler_take_signal(int sig, pp_signal_handler handler)
{
    our_handler = handler;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    int *have_prev = sig == SIGPROF ? &have_prev_sigprof : &have_prev_rt;
    if (sigaction(sig, &sa, *have_prev ? NULL : sig == SIGPROF ? &prev_sigprof : &prev_rt) != 0)
        return -1;
    *have_prev = 1;
    if (sig != SIGPROF)
        name_hooks(sig);
    return 0;
}

/* Whether signal `sig` is pending on any thread (SigPnd) or on the process
 * (ShdPnd); 1 when it cannot be told. */
static int signal_pending(int sig)
{
    unsigned long long set;
    return tasks_signal_union("SigPnd:", "ShdPnd:", 0, &set) != 0 || (set & (1ULL << (sig - 1)));
}

/* One signal's disposition given back: 1 done (or nothing to do), 0 not now. */
static int release_one(int sig, const struct sigaction *prev, int *have_prev)
{
    if (!*have_prev)
        return 1;
    if (!pp_sampler_handler_is_ours(sig)) {
        *have_prev = 0;                 /* the program's own handler since: keep it */
        return 1;
    }
    /* No timer is left to send one (stop disarmed or deleted them all) and a
     * signal sent is pending at once: none pending now means none can come. */
    if (signal_pending(sig) || sigaction(sig, prev, NULL) != 0)
        return 0;
    *have_prev = 0;
    return 1;
}

int pp_sampler_give_back_signals(void)
{
    int prof = release_one(SIGPROF, &prev_sigprof, &have_prev_sigprof);
    int rt = release_one(atomic_load(&S.rt_signal), &prev_rt, &have_prev_rt);
    return prof && rt;
}

const char *pp_sampler_hook(void)
{
    if (pp_on_itimer())
        return "SIGPROF (ITIMER_PROF, process CPU time)";
    int sig = atomic_load(&S.rt_signal), k = S.mode == PP_SAMPLE_WALL;
    return sig > 0 && sig < 65 && hook_names[k][sig][0] ? hook_names[k][sig] : hook_kinds[k];
}
