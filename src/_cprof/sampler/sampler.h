/* sampler.h — the statistical sampler.
 *
 * Owns: the timers (CPU mode: a CPU-clock event per thread, or the process
 * CPU-time timer where the kernel refuses those; wall mode: a wall-clock
 * timer per Python thread), the signal handler (a real-time signal of its
 * own; SIGPROF for the process CPU-time timer),
 * the ring the handler writes raw samples into, the helper thread that drains
 * it with the GIL held, and the stack table the samples end up in.
 * Never, in the signal handler: malloc, locks, the Python API (beyond the
 * thread-state reads of frames.h), reference counts; a full ring drops the
 * sample and counts it.
 */
#ifndef PP_SAMPLER_H
#define PP_SAMPLER_H

#include "registry.h"

enum { PP_SAMPLE_CPU = 0, PP_SAMPLE_WALL = 1 };
/* CPU mode's timer: asked (opts.cpu_timer) and in use (info.source) */
enum { PP_CPU_AUTO = 0, PP_CPU_TASKCLOCK = 1, PP_CPU_ITIMER = 2 };
/* With native stacks, a stack frame's line carries this bit when the frame is
 * the first run by one C-level call of the interpreter. */
#define PP_LINE_ENTRY 0x80000000u

/* Thread states a sample is labelled with. */
enum {
    PP_STATE_PYTHON = 0,        /* attached: running Python code (or C code holding the GIL) */
    PP_STATE_NATIVE = 1,        /* detached, using CPU: C code that released the GIL */
    PP_STATE_IDLE = 2,          /* detached, not using CPU: blocked, sleeping, waiting for the GIL */
    PP_STATE_OTHER = 3,         /* a thread that never ran Python (wall/CPU time of C threads) */
    PP_STATE_AWAITING = 4,      /* --async, wall mode: a task suspended at an await (no signal:
                                 * charged by the helper, see sampler_async.c) */
};

/* The stack table: a stack is (function id, line) pairs, root first, plus
 * native instruction pointers, leaf first; samples are aggregated by
 * (thread, stack, state). */
typedef struct {
    uint64_t hash;
    uint32_t start;             /* into frames[] */
    uint32_t nframes;
    uint32_t nstart;            /* into native[] */
    uint32_t nnative;
} pp_stackent;

typedef struct {
    uint32_t thread;
    uint32_t stack;
    uint32_t state;
    uint32_t pad;
    uint64_t count;
    int64_t weight_ns;
} pp_sampleent;

/* --opcodes: samples by instruction and opcode as it ran (the innermost
 * frame's read by the handler: specialized, adaptive or instrumented; a
 * caller's, its CALL, read when drained), per thread: `count` and `weight_ns`
 * where it is the innermost frame's (self), `total_*` where it is on the
 * stack at all (once per sample); where it stands in the source
 * (co_positions: line, end line and 0-based UTF-8 byte columns, PP_NONE where
 * the compiler gave none). */
typedef struct {
    uint32_t thread, fid, offset, opcode;
    uint32_t line, end_line, col, end_col;
    uint64_t count, total_count;
    int64_t weight_ns, total_weight_ns;
} pp_insnent;

typedef struct pp_samples {
    uint64_t *frames;           /* fid << 32 | line */
    uint32_t nframes, capframes;
    uintptr_t *native;
    uint32_t nnative, capnative;
    pp_stackent *stacks;
    uint32_t nstacks, capstacks;
    pp_index stackidx;          /* hash -> stack id (hashes may repeat: compared) */
    pp_sampleent *samples;
    uint32_t nsamples, capsamples;
    pp_index sampleidx;
    pp_index linecache;         /* fid << 32 | offset -> line */
    pp_insnent *insns;          /* --opcodes */
    uint32_t ninsns, capinsns;
    pp_index insnidx;
    pp_index insnstart;         /* --opcodes: fid << 32 | offset -> its instruction's offset + 1 */
    uint64_t drained, truncated, foreign;
} pp_samples;

typedef struct {
    int mode;                   /* PP_SAMPLE_CPU / PP_SAMPLE_WALL */
    double rate_hz;             /* requested */
    int native;                 /* unwind native frames too (libunwind) */
    int async;                  /* asyncio tasks: samples under <task NAME> (sampler_async.c) */
    int cpu_timer;              /* CPU mode: PP_CPU_AUTO (task-clock where the kernel allows
                                 * it, else ITIMER_PROF), or one of them */
    int opcodes;                /* samples by the innermost instruction too (pp_insnent) */
} pp_sample_opts;
/* The rates a sampler takes (Hz): a task-clock period below 100 µs would be
 * mostly the handler's own CPU. */
#define PP_RATE_MIN 1.0
#define PP_RATE_MAX 10000.0

/* --async: one asyncio task seen while sampling (sampler_async.c). Times in
 * ns of CLOCK_MONOTONIC; running: the weight of its samples; awaiting: its
 * lifetime less that (wall mode). fid is PP_NONE until the task is named (it
 * had a sample, or was pending at the end of a look); a task let go unnamed
 * leaves no row (its slot is reused). */
enum { PP_TASK_PENDING = 0, PP_TASK_DONE = 1, PP_TASK_CANCELLED = 2 };
typedef struct {
    uint32_t fid;               /* its <task NAME> frame */
    uint32_t coro_fid;          /* its coroutine's function (PP_NONE: not a coroutine) */
    uint32_t created_fid;       /* where it was created (asyncio debug mode), or PP_NONE */
    uint32_t created_line;
    uint32_t thread;            /* its loop's thread index (PP_NONE: not known) */
    uint32_t state;
    int64_t start_ns, end_ns;   /* end_ns: 0 while pending */
    int64_t running_ns, awaiting_ns;
    int64_t first_run_ns, last_run_ns;      /* its first and last running sample (0: none) */
    uint64_t samples;           /* running samples */
} pp_taskrow;

typedef struct {
    pp_taskrow *rows;
    uint32_t n, cap;
    /* by row and by address: sampler_async.c's own (sampler_int.h); made
     * by pp_sampling_init */
    struct pp_tasks_own *own;
    uint32_t unknown_fid;       /* <task ?>: a coroutine of a task never seen */
    uint64_t unmatched;         /* samples in a coroutine of no known task */
    uint64_t seen;              /* tasks seen by a look */
    uint64_t looks;
    int64_t look_ns;            /* time spent looking at tasks, in all */
    int64_t gap_ns;             /* the longest time between two looks */
} pp_tasks;

/* CPU mode on task-clock events: a thread's CPU that no sample of an
 * earlier run saw, carried to its next first sample (sampler_drain.c). */
typedef struct {
    uint32_t tid;
    int64_t ns;
} pp_cpu_debt;

/* One profiler's sampling state: the options, the stack table the samples
 * end up in, where the program's frames begin. */
typedef struct pp_sampling {
    PyObject *owner;            /* the object holding this state (borrowed; the
                                 * sampler keeps it alive while it samples) */
    pp_registry *reg;           /* the owner's function ids */
    pp_threadset *threads;      /* the owner's thread records */
    pp_sample_opts opts;
    pp_samples samples;
    pp_tasks tasks;
    PyObject *root;             /* code of the runner's frame: stacks are cut below it */
    PyObject *program;          /* the program's code the runner runs (else: runner's work) */
    char warn_replaced;         /* warn once if the program takes our signal back */
    pp_cpu_debt *debts;         /* by kernel tid, across this profiler's runs */
    uint32_t ndebts, capdebts;
    /* periodic work of the owner (a flush), from the helper with the GIL */
    void (*periodic)(void *arg);
    void *periodic_arg;
} pp_sampling;

int pp_sampling_init(pp_sampling *p, PyObject *owner, pp_registry *reg, pp_threadset *threads);
void pp_sampling_free(pp_sampling *p);
/* Start / stop sampling with p's options (GIL held). One sampler per process. */
int pp_sampler_start(pp_sampling *p);
int pp_sampler_stop(pp_sampling *p);
/* threading was just imported (GIL held): wall mode wraps its thread start. */
void pp_sampler_hook_threading(pp_sampling *p);
/* Around fork (GIL held, in the forking process): stop the helper threads,
 * giving their kernel tids in tids (returns how many), and start them again. */
int pp_sampler_helper_pause(pid_t tids[2]);
void pp_sampler_helper_resume(void);
/* No sampler running (GIL held): give our signals (SIGPROF, the wall
 * signal) the dispositions they had before we took them. 1 done (or nothing
 * to do), 0 not now (one is pending somewhere: the inert handler stays), -1
 * a sampler runs. */
int pp_sampler_release_signal(void);
/* The running (or last) sampler's mechanism, naming its signal (a real-time
 * one is chosen at start): "SIGRTMAX-2 (per-thread wall-clock timers)",
 * "SIGRTMAX (per-thread CPU-clock events)", "SIGPROF (ITIMER_PROF, ...)". */
const char *pp_sampler_hook(void);
/* Move what the handler recorded into p's stack table (GIL held). */
void pp_sampler_drain(pp_sampling *p);
/* Counters of the running or last sampler, for the capture's INFO. */
typedef struct {
    int mode, native;
    int source;                 /* CPU mode: PP_CPU_TASKCLOCK or PP_CPU_ITIMER */
    const char *fallback;       /* CPU mode, auto: why the task-clock events were not used
                                 * ("" when they were) */
    double rate_hz, interval_ns;
    uint64_t signals, recorded, dropped, foreign, throttled;
    int64_t weight_ns;          /* the time the recorded samples stand for */
    int64_t started_ns, stopped_ns;
    int64_t cpu_ns;             /* process CPU time while sampling */
    int replaced;               /* the program replaced our signal handler or timer */
    uint64_t parked, woken;     /* wall mode: threads parked (their tick stopped); woken (sampled again) */
    uint64_t idle_ticks;        /* wall mode: the ticks parked threads were charged without a signal */
} pp_sampler_info;
void pp_sampler_get_info(pp_sampler_info *out);
double pp_sampler_achieved(const pp_sampler_info *si);
#define PP_REPLACED_MESSAGE \
    "the program replaced pyprof's signal handler or profiling timer while it was " \
    "sampled: samples after that moment are missing"

/* The task rows recorded so far are forgotten (a cleared profiler). */
void pp_tasks_clear(pp_tasks *t);
/* The rows that a capture writes (named tasks). */
uint32_t pp_tasks_named(const pp_tasks *t);

int pp_samples_init(pp_samples *s);
void pp_samples_free(pp_samples *s);
void pp_samples_clear(pp_samples *s);

#endif
