/* memory_curve.c — the memory curve: resident set size and traced bytes over
 * time, read by a thread of its own while the memory engine records.
 *
 * Owns: the curve's points, its thread (started and stopped with recording,
 * paused around fork), the RSS readings.
 * Never: calls into Python from its thread (it blocks every signal and reads
 * the engine's totals through pp_memory_interval_take only).
 */
#define _GNU_SOURCE 1
#include "memory_hooks.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>


#define CURVE_NS (10 * 1000 * 1000)
#define CURVE_MAX 65536                     /* then halve it and double the interval */

typedef struct { int64_t t_ns; uint64_t rss, heap, heap_max; uint32_t site; } rawpoint;

static struct {
    pthread_t thread;
    int running;
    pthread_mutex_t mu;                     /* guards points (the sampler thread appends) */
    pthread_cond_t cv;
    int stop;
    rawpoint *points;
    uint32_t n, cap;
    int64_t interval_ns;
    int statm_fd;
    int cv_ready;
    int paused;                             /* stopped for a fork */
    pid_t tid;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .statm_fd = -1};

/* The condition variable waits on CLOCK_MONOTONIC, as the deadlines are. */
static void init_cv(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&C.cv, &attr);
    pthread_condattr_destroy(&attr);
    C.cv_ready = 1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t read_rss(void)
{
    char buf[128];
    if (C.statm_fd < 0)
        return 0;
    ssize_t n = pread(C.statm_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    unsigned long long size = 0, resident = 0;
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        return 0;
    return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

void pp_memory_rss(uint64_t *rss, uint64_t *peak)
{
    int fd = C.statm_fd >= 0 ? C.statm_fd : open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    int saved = C.statm_fd;
    C.statm_fd = fd;
    *rss = read_rss();
    C.statm_fd = saved;
    if (fd != saved && fd >= 0)
        close(fd);
    struct rusage ru;
    *peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024 : 0;
}

static void add_point(void)
{
    rawpoint pt;
    pt.t_ns = now_ns();
    pt.rss = read_rss();
    pp_memory_interval_take(&pt.heap, &pt.heap_max, &pt.site);
    pthread_mutex_lock(&C.mu);
    if (C.n == CURVE_MAX) {                 /* keep the shape: pairs merged, maxima kept */
        for (uint32_t i = 0; i < C.n / 2; i++) {
            rawpoint a = C.points[2 * i], b = C.points[2 * i + 1];
            rawpoint m = b;
            if (a.heap_max > b.heap_max) {
                m.heap_max = a.heap_max;
                m.site = a.site;
            }
            if (a.rss > m.rss)
                m.rss = a.rss;
            C.points[i] = m;
        }
        C.n /= 2;
        C.interval_ns *= 2;
    }
    if (C.n == C.cap) {
        uint32_t ncap = C.cap ? C.cap * 2 : 1024;
        rawpoint *np = realloc(C.points, ncap * sizeof *np);   /* libc: not a hooked allocator */
        if (np == NULL) {
            pthread_mutex_unlock(&C.mu);
            return;
        }
        C.points = np;
        C.cap = ncap;
    }
    C.points[C.n++] = pt;
    pthread_mutex_unlock(&C.mu);
}

static void *curve_main(void *arg)
{
    (void)arg;
    /* named before its mask is set: the wall sampler's choice of a signal
     * leaves pyprof-* threads' masks out */
    pthread_setname_np(pthread_self(), "pyprof-curve");
    sigset_t set;
    sigfillset(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);         /* the program's signals are not ours */
    C.tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&C.mu);
    while (!C.stop) {
        int64_t due = now_ns() + C.interval_ns;
        struct timespec ts = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
        pthread_cond_timedwait(&C.cv, &C.mu, &ts);
        if (C.stop)
            break;
        pthread_mutex_unlock(&C.mu);
        add_point();
        pthread_mutex_lock(&C.mu);
    }
    pthread_mutex_unlock(&C.mu);
    return NULL;
}

void pp_curve_start(void)
{
    if (!C.cv_ready)
        init_cv();
    pthread_mutex_lock(&C.mu);
    C.n = 0;
    C.stop = 0;
    C.paused = 0;
    C.interval_ns = CURVE_NS;
    pthread_mutex_unlock(&C.mu);
    if (C.statm_fd < 0)
        C.statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    pp_memory_interval_take(NULL, NULL, NULL);
    add_point();                            /* where the curve starts */
    C.running = pthread_create(&C.thread, NULL, curve_main, NULL) == 0;
}

void pp_curve_stop(void)
{
    if (C.running) {
        pthread_mutex_lock(&C.mu);
        C.stop = 1;
        pthread_cond_signal(&C.cv);
        pthread_mutex_unlock(&C.mu);
        pthread_join(C.thread, NULL);
        C.running = 0;
    }
    add_point();                            /* where it ends */
}

/* Around fork, as the sampler's helper: CPython counts threads after fork(). */
pid_t pp_memory_curve_pause(void)
{
    if (!C.running)
        return C.paused ? C.tid : 0;        /* another thread's fork paused it */
    pthread_mutex_lock(&C.mu);
    C.stop = 1;
    pthread_cond_signal(&C.cv);
    pthread_mutex_unlock(&C.mu);
    /* Before the GIL goes: a thread forking meanwhile must not join it too. */
    C.running = 0;
    C.paused = 1;
    pthread_t th = C.thread;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(th, NULL);
    Py_END_ALLOW_THREADS
    return C.tid;
}

void pp_memory_curve_resume(void)
{
    if (!C.paused)
        return;
    C.paused = 0;
    if (!pp_memory_recording() || C.running)
        return;                             /* stopped meanwhile */
    pthread_mutex_lock(&C.mu);
    C.stop = 0;
    pthread_mutex_unlock(&C.mu);
    C.running = pthread_create(&C.thread, NULL, curve_main, NULL) == 0;
}

/* Around fork (memory.c's atfork handlers, with the tables' lock). */
void pp_curve_lock(void)
{
    pthread_mutex_lock(&C.mu);
}

void pp_curve_unlock(void)
{
    pthread_mutex_unlock(&C.mu);
}

/* The child has no curve thread: it goes on without one. */
void pp_curve_after_fork_child(void)
{
    pthread_mutex_init(&C.mu, NULL);
    if (C.cv_ready)
        init_cv();
    C.running = 0;
    C.paused = 0;
}

/* The points so far, sites resolved through rows (row i is site i). */
static pp_mempoint *resolve_curve(const pp_memrow *rows, uint32_t nrows, uint32_t *n)
{
    pthread_mutex_lock(&C.mu);
    pp_mempoint *out = malloc((C.n ? C.n : 1) * sizeof *out);
    *n = out ? C.n : 0;
    for (uint32_t i = 0; out && i < C.n; i++) {
        const rawpoint *r = &C.points[i];
        uint32_t fid = PP_NONE, line = 0;
        if (r->site < nrows) {
            fid = rows[r->site].fid;
            line = rows[r->site].line;
        }
        out[i] = (pp_mempoint){r->t_ns, r->rss, r->heap, r->heap_max, fid, line};
    }
    pthread_mutex_unlock(&C.mu);
    return out;
}

pp_mempoint *pp_memory_curve(pp_memstate *p, uint32_t *n)
{
    pp_memrow *rows;
    uint32_t nrows;
    pp_meminfo info;
    if (pp_memory_rows(p, &rows, &nrows, &info) < 0)
        return NULL;
    pp_mempoint *c = resolve_curve(rows, nrows, n);
    free(rows);
    return c;
}


/* This run's curve after the earlier runs' (rows: this run's, site-indexed),
 * and the RSS peak: the kernel's high-water mark and its RSS counter are
 * updated lazily, so the larger of it and what the curve saw. */
void pp_curve_keep(struct pp_memdata *m, const pp_memrow *rows, uint32_t n)
{
    uint32_t npts;
    pp_mempoint *pts = resolve_curve(rows, n, &npts);
    pp_mempoint *curve = pts ? realloc(m->curve, ((size_t)m->npoints + npts + 1) * sizeof *curve)
                             : NULL;
    if (curve) {
        memcpy(curve + m->npoints, pts, (size_t)npts * sizeof *pts);
        m->curve = curve;
        m->npoints += npts;
    }
    uint64_t rss_peak;
    pp_memory_rss(&m->rss_end, &rss_peak);
    for (uint32_t i = 0; pts && i < npts; i++)
        if (pts[i].rss > rss_peak)
            rss_peak = pts[i].rss;
    if (rss_peak > m->rss_peak)
        m->rss_peak = rss_peak;
    free(pts);
}
