/* tracer.h — the deterministic function profiler (an engine).
 *
 * Owns: its state (pp_tracer: options, the interpreter hooks it holds, call
 * site marks), the event paths that fill the per-thread tables and shadow
 * stacks (threads.h) and the timeline, and two hook back-ends: sys.monitoring
 * on 3.12+ (tracer_monitoring.c), the legacy profile/trace hooks and the
 * PEP 523 frame-evaluation engine on 3.11 (tracer_legacy.c). See
 * docs/architecture.md for the hooks per version.
 * Never: Python-level code on the event path (the user timer excepted, as in
 * cProfile); formatting per event; work for events it does not need; calls
 * into another engine (the sampler, memory) or into capture/profiler.
 */
#ifndef PP_TRACER_H
#define PP_TRACER_H

#include "registry.h"

#define PP_C_SITE_BITS (1u << 16)

/* Coroutines (tracer_coro.c): each one open since its first start, by the
 * address of its frame (stable: the coroutine object holds it), and per
 * function the instances started, ended and the wall time of those ended. */
typedef struct {
    uint64_t key;               /* frame address; 0: empty */
    uint32_t fid;
    uint32_t pad;
    int64_t start, last;        /* clock ticks: first start; last suspension */
} pp_coro_open;

/* With asyncio on: a task's root coroutine, followed from its first start. */
typedef struct {
    uint32_t fid;               /* its <task NAME> frame */
    uint32_t coro_fid;
    uint32_t thread;            /* thread index of its first step */
    uint32_t ended;
    int64_t start, end;         /* clock ticks */
    int64_t running;            /* ticks of its steps */
    int64_t run_since;          /* start of the step running now (0: suspended) */
    uint64_t steps;
} pp_tracer_task;

/* A task's step, for the timeline: (task row, start, duration) in ticks. */
typedef struct {
    uint32_t task;
    uint32_t pad;
    int64_t start, dur;
} pp_task_step;

typedef struct {
    pp_coro_open *open;
    uint32_t mask, nopen;
    uint64_t *instances, *ended;
    int64_t *wall;              /* ticks from first start to end, of the ended ones */
    uint32_t nfid;
    int64_t stopped;            /* the clock when the tracer stopped (0: running) */
    uint64_t dropped;           /* not followed: out of memory */
    pp_tracer_task *tasks;      /* asyncio on: the tasks seen (pp_coro_open.pad: row + 1) */
    uint32_t ntasks, captasks;
    pp_task_step *steps;        /* asyncio and timeline on: the tasks' steps */
    uint32_t nsteps, capsteps;
    uint64_t steps_dropped;
    PyObject *current_task;     /* (_asyncio._get_running_loop, _asyncio._current_tasks) */
} pp_coros;

typedef struct pp_tracer {
    PyObject *owner;            /* the object holding this state (borrowed): hooks bind to it */
    pp_registry *reg;           /* the owner's function ids */
    pp_threadset *threads;      /* the owner's thread records */
    uint64_t gen;               /* threads->gen while started (read on the fast path) */
    int enabled;                /* hooks installed and recording */
    int fast;                   /* events may take the inline fast path: TSC clock, no user
                                 * timer, no line mode, no memory */
    int subcalls;
    int paths;                  /* record the calling-context tree */
    int builtins;
    int exact_builtins;         /* 3.12+: never DISABLE CALL at Python-only call sites */
    int lines;                  /* line mode: LINE events on line targets, call rows */
    int opcodes;                /* line mode: INSTRUCTION events too, hits and time per
                                 * instruction of the line targets (pp_islot) */
    PyObject *base_code;        /* --opcodes: code object -> its co_code (base opcodes) */
    int memory;                 /* allocation hooks record too: peaks per activation */
    int background;             /* steps aside while another profiler is enabled */
    int asyncio;                /* tasks: root coroutines named after their task */
    PyObject *timer;            /* user timer or NULL for the internal clock */
    double timeunit;            /* cProfile's timeunit (0: timer returns float seconds) */
    int in_timer;
    int oom;
    pp_index sites;             /* 3.12+: call site -> non-C calls seen, or SITE_KEPT */
    uint64_t c_sites[PP_C_SITE_BITS / 64];   /* 3.12+: call sites that called C (hashed) */
    PyObject *disabled_code;    /* 3.12+: set of the code objects where a site got DISABLE:
                                 * re-armed one by one when done */
    /* hooks */
    int tool_id;                /* sys.monitoring tool id, -1 when none */
    int eval_mode;              /* 3.11: PEP 523 frame evaluation instead of the profile hook */
    uint64_t cstack_asides;     /* 3.11 eval hook: frames run unrecorded near the C stack end */
    PyObject *prev_thread_hook; /* 3.11: threading's profile hook before ours */
    char threading_pending;     /* 3.11: enabled while threading was not imported yet */
    PyObject *prev_trace_hook;  /* 3.11 line mode: threading's trace hook before ours */
    /* timeline: each ended call as (fid, start, duration) */
    int timeline;
    int64_t tl_min_ns;          /* calls shorter than this are counted, not kept */
    int64_t tl_min_ticks;       /* the same in clock ticks (set by start) */
    uint64_t tl_max;            /* events held over all threads, at most */
    pp_coros coros;             /* coroutines: first start to end (tracer_coro.c) */
    /* periodic work of the owner (a flush), asked every 1024 events or so */
    void (*periodic)(void *arg);
    void *periodic_arg;
} pp_tracer;

/* offset: where objects holding a pp_tracer keep it (the 3.11 hooks are bound
 * to the owner object, which sys.getprofile() returns). */
int pp_tracer_module_init(Py_ssize_t offset);
void pp_tracer_init(pp_tracer *t, PyObject *owner, pp_registry *reg, pp_threadset *threads);
/* Install the hooks for this generation of the thread records (GIL held). */
int pp_tracer_start(pp_tracer *t);
/* Remove the hooks; calls stay open until pp_tracer_end_calls. */
int pp_tracer_stop(pp_tracer *t);
/* Calls still open on every thread end now, as cProfile's flush_unmatched. */
void pp_tracer_end_calls(pp_tracer *t);
void pp_tracer_free(pp_tracer *t);
/* threading was just imported: on 3.11, give its new threads our hooks. */
int pp_tracer_hook_threading(pp_tracer *t);
/* The interpreter mechanism of the tracer: for captures and messages; the
 * one it uses by default on this CPython. */
const char *pp_tracer_hook_name(const pp_tracer *t);
extern const char pp_tracer_default_hook[];
/* Ticks of the tracer's clock now (internal clock or user timer). */
int64_t pp_tracer_now(pp_tracer *t);
/* End the calls still open on a stack at `now`, a reading of the clock (used
 * by snapshots); in line mode the stack's line_cost is taken off it. */
void pp_tracer_stop_all(pp_tables *t, pp_stack *st, int64_t now, int lines);
/* Coroutines still open: (now - first start) of each, added by function id
 * into wall[fid] (nfid entries), GIL held. */
void pp_tracer_coro_open_wall(const pp_tracer *t, int64_t now, int64_t *wall, uint32_t nfid);
void pp_tracer_coro_clear(pp_tracer *t);
/* Time that is not a call (the garbage collector) entered and left as a
 * function of its own, the pseudo code object `code` (GIL held); 0 when
 * the tracer is not on (nothing recorded). */
int pp_tracer_pseudo(pp_tracer *t, PyObject *code, int entering);
/* Ticks of the tracer's clock per nanosecond (user timer: its unit). */
double pp_tracer_ticks_per_ns(const pp_tracer *t);
/* Line mode started mid-run: a target's frame already running (on) or, at
 * stop, one that was (off), given what its code's own events do not cover
 * (the back-end's; GIL held). */
int pp_tracer_running_frame(pp_tracer *t, PyFrameObject *frame, int on);

#endif
