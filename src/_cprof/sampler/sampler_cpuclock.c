/* sampler_cpuclock.c — CPU mode's per-thread CPU-clock events (sampler_int.h).
 *
 * Owns: one perf task-clock event per thread of the process: the kernel's
 * software count of the thread's CPU time, run by a high-resolution timer
 * while the thread is on a CPU, so any rate is reached (ITIMER_PROF fires at
 * the kernel's tick: about 250 Hz at most). On overflow the kernel sends the
 * sampler's real-time signal to that thread itself (F_SETOWN_EX with its tid).
 * Opened for the threads alive at start, by a thread threading starts as it
 * starts (sampler_wall.c's start wrapper), and by the helper for the others,
 * found in /proc/self/task; closed at stop, in a forked child (the fds would
 * keep the parent's events alive past its stop), when the thread is gone.
 *
 * Blocks: an event stops after a block of overflows, which the kernel marks
 * POLL_HUP, and its thread's handler starts the next block with a new
 * period drawn around the mean (jitter). A real-time signal queues one entry
 * per overflow, and past RLIMIT_SIGPENDING the kernel sends SIGIO instead,
 * whose default action kills: a thread that blocks the signal has at most a
 * block queued. Redrawing the period restarts it, the time until the
 * handler's ioctl uncounted: a block spans BLOCK_NS at least, of 1 to
 * MAX_BLOCK periods (per sample, 100 µs gave 7,077 signals per CPU second of
 * 10,000; at 50 Hz a period per block keeps a 40 ms program cycle from
 * meeting the same phases for 8 samples).
 *
 * Kernel time counts where the kernel lets it (the signal lands as the system
 * call returns, in the frame that made it); at perf_event_paranoid 2 an
 * unprivileged process gets user-mode overflows only (exclude_kernel), and
 * code spending its CPU in system calls fewer samples (each weighs its
 * thread's CPU clock since its previous one, kernel time included, so the
 * totals do not move).
 * Never: an ioctl or close on an fd not known as our event, by number and the
 * kernel's event id (a program may close fds it did not open, and a stale
 * signal name one it has reopened).
 */
#define _GNU_SOURCE
#include "sampler_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_BLOCK 8             /* overflows per block: at most this many queued per thread */
#define BLOCK_NS (2 * 1000 * 1000)
#define FD_CAP 65536            /* fds above this are not tracked: their thread is not sampled */
#define RESCAN_NS (100 * 1000 * 1000)   /* /proc/self/task read in full at least this often */

typedef struct {
    pid_t tid;
    int fd;                     /* -1: never given one (pyprof's own; or the kernel refused) */
    uint64_t id;                /* the kernel's id of the event (PERF_EVENT_IOC_ID) */
    int64_t cpu0;               /* the thread's CPU clock when its event opened */
} cc_event;

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static cc_event *evs;
static uint32_t nevs, capevs;
/* fd -> the tid whose event it is (0: none), and the event's id (a program
 * that closed ours and opened a file at that number is not sent our ioctls):
 * what the handler checks */
static _Atomic pid_t *fd_tid;
static uint64_t *fd_id;
static int64_t *fd_cpu0;        /* the event's thread's CPU clock at open: its first sample's base */
/* Threads whose events ended (gone, or the run stopped), for the drain: ev_mu held */
static pp_cpuclock_end *ends;
static uint32_t nends, capends;
static int64_t period_ns;
static int block;               /* overflows per block at this period */
static int signo;
static uint64_t rng = 0x2545F4914F6CDD1Dull;
static nlink_t last_nlink;
static int64_t last_full_ns;
static char refusal[160];
static int user_only;           /* the kernel refused kernel-mode counting: user mode only */

static uint64_t draw(uint64_t *x)
{
    uint64_t z = *x += 0x9E3779B97F4A7C15ull;       /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A block's period: uniform in [P/2, 3P/2), 10 µs at least (the kernel's
 * floor for the timer). */
static uint64_t block_period(uint64_t r)
{
    uint64_t p = (uint64_t)period_ns / 2 + r % (uint64_t)period_ns;
    return p < 10000 ? 10000 : p;
}

static int perf_open(pid_t tid, uint64_t first)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = first;
    a.disabled = 1;
    a.exclude_kernel = (unsigned)user_only;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* Whether fd is still the event `id` (a program may close every fd it did
 * not open, and open a file that gets the number). Async-signal-safe. */
static int still_ours(int fd, uint64_t id)
{
    uint64_t now;
    return fd >= 0 && ioctl(fd, PERF_EVENT_IOC_ID, &now) == 0 && now == id;
}

/* ev_mu held: an event on `tid`, its first overflow at a uniform point of
 * the first period (a thread's first sample weighs one period: the drain),
 * then blocks. -1 and errno. */
static int open_event(pid_t tid, uint64_t *id, int64_t *cpu0)
{
    uint64_t first = 1 + draw(&rng) % (uint64_t)period_ns;
    struct timespec c;
    /* before the event counts: its first sample weighs the CPU since */
    if (clock_gettime(pp_thread_cpu_clock(tid), &c) != 0) {
        errno = ESRCH;
        return -1;
    }
    *cpu0 = pp_ts_ns(c);
    int fd = perf_open(tid, first < 10000 ? 10000 : first);
    if (fd < 0)
        return -1;
    struct f_owner_ex own = {F_OWNER_TID, tid};
    int fl = fcntl(fd, F_GETFL);
    if (fd >= FD_CAP || fl < 0 || ioctl(fd, PERF_EVENT_IOC_ID, id) != 0
        || fcntl(fd, F_SETOWN_EX, &own) != 0
        || fcntl(fd, F_SETSIG, signo) != 0 || fcntl(fd, F_SETFL, fl | O_ASYNC) != 0) {
        int e = fd >= FD_CAP ? EMFILE : errno;
        close(fd);
        errno = e;
        return -1;
    }
    fd_id[fd] = *id;
    fd_cpu0[fd] = *cpu0;
    atomic_store(&fd_tid[fd], tid);     /* publishes fd_id[fd] and fd_cpu0[fd] */
    if (ioctl(fd, PERF_EVENT_IOC_REFRESH, 1) != 0) {
        int e = errno;
        atomic_store(&fd_tid[fd], 0);
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* An event let go: closed if its fd is still it (never a file of the
 * program's), forgotten by the handler's table if the table still names it. */
static void close_event(const cc_event *e)
{
    if (e->fd < 0)
        return;
    if (fd_id[e->fd] == e->id)
        atomic_store(&fd_tid[e->fd], 0);
    if (still_ours(e->fd, e->id))
        close(e->fd);
}

static int add_event(const cc_event *e)
{
    if (pp_sampler_grow_array((void **)&evs, &capevs, nevs + 1, sizeof *evs) < 0)
        return -1;
    evs[nevs++] = *e;
    return 0;
}

/* ev_mu held: `tid` gets an event (fd -1: none could be had); -1 and errno
 * when the thread is gone. */
static int give_event(pid_t tid, int own)
{
    cc_event e = {tid, -1, 0, 0};
    if (!own)
        e.fd = open_event(tid, &e.id, &e.cpu0);
    if (e.fd < 0 && errno == ESRCH)
        return -1;
    if (add_event(&e) < 0)
        close_event(&e);
    return 0;
}

/* ev_mu held: the thread of event `e` ran `cpu_ns` of CPU under it (alive:
 * its CPU clock, or `cpu_then` when known (> 0: the stopping thread's as the
 * stop began); gone: the event's own count), for the drain (pp_cpuclock_end). */
static void note_end(const cc_event *e, int gone, int64_t cpu_then)
{
    if (e->fd < 0 || !still_ours(e->fd, e->id))
        return;                         /* none; or the program closed it: no count to read */
    pp_cpuclock_end end = {e->tid, gone, 0};
    struct timespec c;
    uint64_t count;
    if (!gone && cpu_then > 0)
        end.cpu_ns = cpu_then - e->cpu0;
    else if (!gone && clock_gettime(pp_thread_cpu_clock(e->tid), &c) == 0)
        end.cpu_ns = pp_ts_ns(c) - e->cpu0;
    else if (read(e->fd, &count, sizeof count) == (ssize_t)sizeof count) {
        end.gone = 1;                   /* ended meanwhile: what the kernel counted */
        end.cpu_ns = (int64_t)count;
    }
    else
        return;
    if (end.cpu_ns < 0 || pp_sampler_grow_array((void **)&ends, &capends, nends + 1,
                                                sizeof *ends) < 0)
        return;
    ends[nends++] = end;
}

/* Whether thread `tid` is one of pyprof's own (named pyprof-*): those block
 * the sampler's signals and are never sampled. */
static int own_thread(pid_t tid)
{
    if (tid == S.helper_tid || tid == S.ticker_tid)
        return 1;
    char path[64], name[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, name, sizeof name - 1);
    close(fd);
    return n >= 7 && strncmp(name, "pyprof-", 7) == 0;
}

int pp_cpuclock_usable(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) {
        snprintf(refusal, sizeof refusal, "/proc/self/task: %s", strerror(errno));
        return 0;
    }
    closedir(d);
    user_only = 0;
    int fd = perf_open(0, 1000 * 1000);
    if (fd < 0 && (errno == EACCES || errno == EPERM)) {
        user_only = 1;
        fd = perf_open(0, 1000 * 1000);
    }
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    int e = errno;
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int paranoid = 0, have = f && fscanf(f, "%d", &paranoid) == 1;
    if (f)
        fclose(f);
    if (have)
        snprintf(refusal, sizeof refusal, "perf_event_open: %s; kernel.perf_event_paranoid = %d",
                 strerror(e), paranoid);
    else
        snprintf(refusal, sizeof refusal, "perf_event_open: %s", strerror(e));
    return 0;
}

const char *pp_cpuclock_refusal(void)
{
    return refusal;
}

static int by_tid(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* ev_mu held: every thread in /proc/self/task gets an event, the events of
 * threads gone are closed. -1 when /proc cannot be read. */
static int sync_tasks(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    pid_t *live = NULL;
    uint32_t nlive = 0, caplive = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (pp_sampler_grow_array((void **)&live, &caplive, nlive + 1, sizeof *live) < 0)
            break;
        live[nlive++] = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    if (nlive > 1)
        qsort(live, nlive, sizeof *live, by_tid);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < nevs; i++) {
        int alive = nlive && bsearch(&evs[i].tid, live, nlive, sizeof *live, by_tid);
        if (alive && (evs[i].fd < 0 || still_ours(evs[i].fd, evs[i].id)))
            evs[kept++] = evs[i];
        else {
            if (!alive)
                note_end(&evs[i], 1, 0);
            close_event(&evs[i]);       /* gone; or closed by the program: opened again below */
        }
    }
    nevs = kept;
    uint32_t had = nevs;
    if (had > 1)                                /* never qsort(NULL, 0): UB */
        qsort(evs, had, sizeof *evs, by_tid);   /* by tid, its first member */
    for (uint32_t i = 0; i < nlive; i++)
        if (!had || !bsearch(&live[i], evs, had, sizeof *evs, by_tid))
            (void)give_event(live[i], own_thread(live[i]));     /* -1: ended meanwhile */
    free(live);
    return 0;
}

int pp_cpuclock_start(int sig, int64_t interval_ns)
{
    if (fd_tid == NULL) {                /* untouched pages until used */
        fd_id = calloc(FD_CAP, sizeof *fd_id);
        fd_cpu0 = fd_id ? calloc(FD_CAP, sizeof *fd_cpu0) : NULL;
        fd_tid = fd_cpu0 ? calloc(FD_CAP, sizeof *fd_tid) : NULL;
        if (fd_tid == NULL)
            return -1;
    }
    pthread_mutex_lock(&ev_mu);
    nends = 0;
    signo = sig;
    period_ns = interval_ns;
    block = (int)((BLOCK_NS + interval_ns - 1) / interval_ns);
    block = block < 1 ? 1 : block > MAX_BLOCK ? MAX_BLOCK : block;
    rng ^= (uint64_t)pp_mono_ns();
    atomic_store(&S.disarmed, 0);
    last_nlink = 0;
    last_full_ns = pp_mono_ns();
    int rc = sync_tasks();
    pthread_mutex_unlock(&ev_mu);
    return rc;
}

void pp_cpuclock_scan(int64_t now)
{
    struct stat st;
    /* a task directory's link count is its thread count (+2): unchanged, the
     * threads are (a thread ended and another began meanwhile is caught by the
     * periodic full read; threading's threads open theirs as they start) */
    int counted = stat("/proc/self/task", &st) == 0;
    if (counted && st.st_nlink == last_nlink && now - last_full_ns < RESCAN_NS)
        return;
    pthread_mutex_lock(&ev_mu);
    if (!atomic_load(&S.disarmed)) {
        last_nlink = counted ? st.st_nlink : 0;
        last_full_ns = now;
        (void)sync_tasks();
    }
    pthread_mutex_unlock(&ev_mu);
}

void pp_cpuclock_thread_begins(pid_t tid)
{
    pthread_mutex_lock(&ev_mu);
    uint32_t i = 0;
    while (i < nevs && evs[i].tid != tid)
        i++;
    if (i == nevs && !atomic_load(&S.disarmed))
        (void)give_event(tid, 0);
    pthread_mutex_unlock(&ev_mu);
}

void pp_cpuclock_rebase_self(pid_t self, int64_t cpu_ns)
{
    pthread_mutex_lock(&ev_mu);
    for (uint32_t i = 0; i < nevs; i++) {
        if (evs[i].tid != self || evs[i].fd < 0)
            continue;
        evs[i].cpu0 = cpu_ns;
        __atomic_store_n(&fd_cpu0[evs[i].fd], cpu_ns, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&ev_mu);
}

int pp_cpuclock_first_base(const siginfo_t *info, pid_t self, int64_t *cpu0)
{
    int fd = info ? info->si_fd : -1;
    if (fd < 0 || fd >= FD_CAP || fd_tid == NULL || atomic_load(&fd_tid[fd]) != self)
        return 0;
    *cpu0 = __atomic_load_n(&fd_cpu0[fd], __ATOMIC_RELAXED);
    return 1;
}

void pp_cpuclock_block_end(const siginfo_t *info, pid_t self, uint64_t r)
{
    if (info == NULL || info->si_code != POLL_HUP)
        return;
    int fd = info->si_fd;
    atomic_fetch_add(&S.arming, 1);
    if (!atomic_load(&S.disarmed) && fd >= 0 && fd < FD_CAP && fd_tid
        && atomic_load(&fd_tid[fd]) == self && still_ours(fd, fd_id[fd])) {
        uint64_t p = block_period(r);
        (void)ioctl(fd, PERF_EVENT_IOC_PERIOD, &p);
        (void)ioctl(fd, PERF_EVENT_IOC_REFRESH, block);
    }
    atomic_fetch_sub(&S.arming, 1);
}

void pp_cpuclock_stop(pid_t self, int64_t self_cpu)
{
    if (fd_tid == NULL)
        return;
    atomic_store(&S.disarmed, 1);
    while (atomic_load(&S.arming) > 0)     /* a handler starting a block now */
        sched_yield();
    pthread_mutex_lock(&ev_mu);
    for (uint32_t i = 0; i < nevs; i++) {
        note_end(&evs[i], 0, evs[i].tid == self ? self_cpu : 0);
        close_event(&evs[i]);
    }
    nevs = 0;
    pthread_mutex_unlock(&ev_mu);
}

uint32_t pp_cpuclock_take_ends(pp_cpuclock_end **out)
{
    pthread_mutex_lock(&ev_mu);
    uint32_t n = nends;
    *out = NULL;
    if (n) {
        *out = ends;
        ends = NULL;
        nends = capends = 0;
    }
    pthread_mutex_unlock(&ev_mu);
    return n;
}

void pp_cpuclock_atfork_child(void)
{
    if (fd_tid == NULL)
        return;
    pthread_mutex_init(&ev_mu, NULL);
    atomic_store(&S.disarmed, 1);
    for (uint32_t i = 0; i < nevs; i++)
        close_event(&evs[i]);
    nevs = 0;
    nends = 0;                          /* the parent's threads */
}
