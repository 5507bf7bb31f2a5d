/* taskclock_floor.c — what one signal costs a busy thread on this host, with a
 * handler that does nothing: a perf task-clock event (CPU mode's timer) and a
 * CLOCK_MONOTONIC POSIX timer (wall mode's), against no signal; the floor
 * under any in-process sampler that interrupts the thread (docs/sampling.md,
 * "CPU timers").
 *
 *   cc -O2 -o /tmp/taskclock_floor benchmarks/taskclock_floor.c && /tmp/taskclock_floor 100
 *
 * Argument: the period in µs. Prints, per source, the median over 15 rounds
 * of (loop time with signals) / (the mean of the loop time without, before
 * and after), and the µs per signal that gives.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 15

static volatile long signals;

static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    (void)sig;
    (void)uctx;
    signals++;
    if (info->si_code == POLL_HUP)          /* a task-clock block ended: the next one */
        ioctl(info->si_fd, PERF_EVENT_IOC_REFRESH, 8);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double loop(void)
{
    double t0 = now();
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 100000000UL; i++)
        x += i;
    return now() - t0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* on(1) starts the source, on(0) stops it */
static void measure(const char *name, void (*on)(int))
{
    double r[ROUNDS], with = 0;
    long n = 0;
    for (int k = 0; k < ROUNDS; k++) {
        double before = loop();
        long n0 = signals;
        on(1);
        double t = loop();
        on(0);
        n += signals - n0;
        with += t;
        r[k] = t / ((before + loop()) / 2);
    }
    qsort(r, ROUNDS, sizeof r[0], by_value);
    double rate = (double)n / with;
    printf("%-12s ratio %.3f [%.3f-%.3f], %.0f signals/s: %.1f us per signal\n", name,
           r[ROUNDS / 2], r[ROUNDS / 4], r[ROUNDS - 1 - ROUNDS / 4], rate,
           rate > 0 ? (r[ROUNDS / 2] - 1) / rate * 1e6 : 0.0);
}

static long period_ns;
static int perf_fd = -1;
static timer_t posix_timer;

static void task_clock(int start)
{
    ioctl(perf_fd, start ? PERF_EVENT_IOC_REFRESH : PERF_EVENT_IOC_DISABLE, start ? 8 : 0);
}

static void posix(int start)
{
    struct itimerspec its = {{0, start ? period_ns : 0}, {0, start ? period_ns : 0}};
    timer_settime(posix_timer, 0, &its, NULL);
}

static void none(int start)
{
    (void)start;
}

int main(int argc, char **argv)
{
    period_ns = (argc > 1 ? atol(argv[1]) : 100) * 1000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGRTMAX, &sa, NULL);
    pid_t tid = (pid_t)syscall(SYS_gettid);

    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (unsigned long long)period_ns;
    a.disabled = 1;
    a.exclude_hv = 1;
    perf_fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (perf_fd < 0) {
        a.exclude_kernel = 1;
        perf_fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    }
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGRTMAX;
    ev._sigev_un._tid = tid;
    timer_create(CLOCK_MONOTONIC, &ev, &posix_timer);

    printf("period %ld us\n", period_ns / 1000);
    measure("no signal", none);
    if (perf_fd >= 0) {
        struct f_owner_ex own = {F_OWNER_TID, tid};
        fcntl(perf_fd, F_SETOWN_EX, &own);
        fcntl(perf_fd, F_SETSIG, SIGRTMAX);
        fcntl(perf_fd, F_SETFL, fcntl(perf_fd, F_GETFL) | O_ASYNC);
        measure("task-clock", task_clock);
    }
    else
        perror("perf_event_open");
    measure("posix timer", posix);
    return 0;
}
