/* clock.c — clock choice, TSC calibration and read-cost measurement.
 *
 * The TSC is used only when the kernel's current clocksource is "tsc": then the
 * kernel has verified it is invariant and synchronised across CPUs, which is
 * exactly what we need. PYPROF_CLOCK=monotonic forces the portable clock.
 * Ticks become nanoseconds by a ratio measured against CLOCK_MONOTONIC over the
 * longest span available (process start of this module to the snapshot).
 * Never called from a signal handler except pp_clock_now() (header).
 */
#define _POSIX_C_SOURCE 200809L
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pp_clock_kind = PP_CLOCK_MONOTONIC;

static int initialised;
static int64_t cal_tick0, cal_ns0;
static double read_cost_ns;

int64_t pp_clock_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t pp_clock_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Linux: trust the TSC when the kernel does. Other platforms: never. */
static int kernel_trusts_tsc(void)
{
#if defined(PP_CLOCK_HAVE_TSC) && defined(__linux__)
    char buf[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == 0);
#else
    return 0;
#endif
}

/* The two clocks read at one instant: the monotonic clock between two tick
 * reads, the tightest of a few tries (a preemption between the reads of a pair
 * would otherwise shift the calibration by the time it lasted). */
static void read_pair(int64_t *ns, int64_t *tick)
{
    int64_t best = INT64_MAX;
    for (int i = 0; i < 5; i++) {
        int64_t a = pp_clock_now();
        int64_t n = pp_clock_monotonic_ns();
        int64_t b = pp_clock_now();
        if (b - a < best) {
            best = b - a;
            *ns = n;
            *tick = a + (b - a) / 2;
        }
    }
}

void pp_clock_init(void)
{
    if (initialised)
        return;
    initialised = 1;
    const char *want = getenv("PYPROF_CLOCK");
    if (want && strcmp(want, "monotonic") == 0)
        pp_clock_kind = PP_CLOCK_MONOTONIC;
    else
        pp_clock_kind = kernel_trusts_tsc() ? PP_CLOCK_TSC : PP_CLOCK_MONOTONIC;

    read_pair(&cal_ns0, &cal_tick0);

    /* Cost of one read: best of 5 batches of 2000 back-to-back reads. */
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        int64_t t0 = pp_clock_monotonic_ns();
        volatile int64_t sink = 0;
        for (int i = 0; i < 2000; i++)
            sink += pp_clock_now();
        (void)sink;
        double per = (double)(pp_clock_monotonic_ns() - t0) / 2000.0;
        if (per < best)
            best = per;
    }
    read_cost_ns = best;
}

const char *pp_clock_name(void)
{
    return pp_clock_kind == PP_CLOCK_TSC ? "tsc" : "monotonic";
}

double pp_clock_read_cost_ns(void)
{
    return read_cost_ns;
}

/* A calibration given by another process of the same host (a child of a
 * profiled parent: the TSC is the same counter), used instead of waiting for
 * 2 ms of this process's own span. 0: none. */
static double given_ns_per_tick;

void pp_clock_set_ns_per_tick(double ns_per_tick)
{
    given_ns_per_tick = ns_per_tick > 0 ? ns_per_tick : 0.0;
}

double pp_clock_ns_per_tick(void)
{
    if (pp_clock_kind != PP_CLOCK_TSC)
        return 1.0;
    if (given_ns_per_tick > 0)
        return given_ns_per_tick;
    /* Both ends are read as tight pairs (tens of ns apart), so 2 ms of span
     * puts the ratio within ~1e-4; a short run waits for at most that. */
    int64_t ns = pp_clock_monotonic_ns() - cal_ns0;
    const int64_t min_span = 2 * 1000 * 1000;
    if (ns < min_span) {
        struct timespec req = {0, (long)(min_span - ns)};
        nanosleep(&req, NULL);
    }
    int64_t ns1, t1;
    read_pair(&ns1, &t1);
    int64_t dt = t1 - cal_tick0;
    if (dt <= 0)
        return 1.0;
    return (double)(ns1 - cal_ns0) / (double)dt;
}
