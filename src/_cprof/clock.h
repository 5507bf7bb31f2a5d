/* clock.h — the profiler's clocks.
 *
 * Owns: the tick source read on every event (TSC where the kernel itself
 * trusts it, else CLOCK_MONOTONIC through the vDSO), its calibration to
 * nanoseconds, and the measured cost of one read.
 * Never: a syscall-backed clock on the per-event path (thread CPU clocks cost
 * ~1.3 us on VMs); never allocates. pp_clock_now() is async-signal-safe.
 */
#ifndef PP_CLOCK_H
#define PP_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define PP_CLOCK_HAVE_TSC 1
#endif

enum { PP_CLOCK_MONOTONIC = 0, PP_CLOCK_TSC = 1 };

extern int pp_clock_kind;               /* chosen once by pp_clock_init() */

void pp_clock_init(void);               /* idempotent; GIL held */
const char *pp_clock_name(void);
double pp_clock_ns_per_tick(void);      /* calibrated; may sleep <=2 ms the first time */
/* Use this calibration (from the parent process, same host) from now on. */
void pp_clock_set_ns_per_tick(double ns_per_tick);
double pp_clock_read_cost_ns(void);     /* measured at init */
int64_t pp_clock_monotonic_ns(void);
int64_t pp_clock_realtime_ns(void);

static inline int64_t pp_clock_now(void)
{
#ifdef PP_CLOCK_HAVE_TSC
    if (__builtin_expect(pp_clock_kind == PP_CLOCK_TSC, 1))
        return (int64_t)__rdtsc();
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
