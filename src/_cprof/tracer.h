/* tracer.h — the deterministic function profiler.
 *
 * Owns: the Profiler object's state, the per-thread records (tables + shadow
 * stack) and the interpreter hooks: sys.monitoring callbacks on 3.12+ and the
 * legacy C profile hook on 3.11 (docs/architecture.md: hooks per version). The registry maps a
 * key (code object or PyMethodDef pointer) to a profile-wide function id and
 * holds a strong reference to what names it.
 * Never: Python-level code on the event path (the user timer excepted, as in
 * cProfile); formatting per event; work for events it does not need.
 */
#ifndef PP_TRACER_H
#define PP_TRACER_H

#include "frames.h"
#include "sampler.h"
#include "stack.h"
#include "table.h"

/* What names a function id: a code object (python), a C function's name
 * (builtin), or (ghost) a tuple (filename, name, qualname, firstlineno) kept
 * for a sampled code object destroyed before its samples were drained. */
enum { PP_KIND_PYTHON = 0, PP_KIND_BUILTIN = 1, PP_KIND_GHOST = 2 };

typedef struct pp_thread {
    struct pp_thread *next;
    uint32_t index;             /* order of first event, 0-based */
    uint64_t attach_gen;
    unsigned long ident;        /* threading.get_ident() */
    unsigned long native_id;    /* kernel thread id */
    uint64_t events;
    uint64_t flush_at;          /* periodic flush: look again at this many events */
    PyObject *name;             /* threading.Thread name, once known (strong) */
    uintptr_t cstack_guard;     /* 3.11 eval hook steps aside below this address (0: never) */
    int name_tries;             /* lookups left before giving up (raw threads) */
    pp_tables t;
    pp_stack st;
    pp_stepbase step;           /* counters at the last pyprof.step() mark */
} pp_thread;

#define PP_C_SITE_BITS (1u << 16)

typedef struct pp_profiler {
    PyObject_HEAD
    char warn_replaced;         /* sampling: warn once if the program takes SIGPROF back */
    int subcalls;
    int paths;                  /* record the calling-context tree */
    int builtins;
    int exact_builtins;         /* 3.12+: never DISABLE CALL at Python-only call sites */
    pp_index sites;             /* 3.12+: call site -> non-C calls seen, or SITE_KEPT */
    uint64_t c_sites[PP_C_SITE_BITS / 64];   /* 3.12+: call sites that called C (hashed) */
    int sites_disabled;         /* 3.12+: some site got DISABLE: re-arm when done */
    PyObject *timer;            /* user timer or NULL for the internal clock */
    double timeunit;            /* cProfile's timeunit (0: timer returns float seconds) */
    int enabled;
    int fast;                   /* events may take the inline fast path: TSC clock, no user
                                 * timer, no line mode */
    int lines;                  /* line mode: LINE events on line targets, call rows */
    int background;             /* steps aside while another profiler is enabled */
    PyObject *line_filter;      /* line mode: code -> bool, asked once per new code object */
    int in_timer;
    int oom;
    uint64_t gen;               /* fresh per enable; matches pp_tls.gen */
    pp_thread *threads;
    pp_thread **threads_tail;
    uint32_t nthreads;
    /* registry: key -> fid, and what names each fid */
    pp_index reg;
    PyObject **fobj;            /* code object (python) or str name (builtin) */
    uint8_t *fkind;
    uint8_t *ftarget;           /* line mode: 1 for line targets */
    int32_t *fresume;           /* 3.11 line mode: offset of the first RESUME, -1 unknown */
    uint32_t nfun, capfun;
    /* hooks */
    int tool_id;                /* sys.monitoring tool id, -1 when none */
    int eval_mode;              /* 3.11: PEP 523 frame evaluation instead of the profile hook */
    uint64_t cstack_asides;     /* 3.11 eval hook: frames run unrecorded near the C stack end */
    PyObject *prev_thread_hook; /* 3.11: threading's profile hook before ours */
    char lazy_threading;        /* 3.11: hook threading when the program imports it, not at enable */
    char threading_pending;     /* 3.11: enabled while threading was not imported yet */
    PyObject *prev_trace_hook;  /* 3.11 line mode: threading's trace hook before ours */
    /* capture */
    int64_t start_wall_ns;
    int64_t start_mono_ns;
    int64_t enabled_ns;         /* time spent enabled, over all enable/disable pairs */
    int64_t enabled_since_ns;
    uint64_t enable_count;
    PyObject *meta;             /* bytes: JSON written with every capture */
    PyObject *records;          /* list of bytes: whole records written before END */
    double snap_ns_per_tick;    /* > 0: the next snapshot converts ticks with this */
    pp_cntbase step_samples;    /* steps: sample counters at the last mark, by entry */
    pp_cntbase step_memory;     /* steps: live allocation sites at the last mark, by site */
    char *flush_path;
    int64_t flush_interval_ns;  /* 0 = no periodic flush */
    int64_t next_flush_ns;
    int flush_failed;
    long owner_pid;             /* a forked child never flushes over the parent's file */
    /* sampling mode (sampler.c) */
    int sampling;
    pp_sample_opts sopts;
    pp_samples samples;
    pp_index native_threads;    /* kernel thread id -> thread index */
    uint64_t ghosts;
    PyObject *sample_root;      /* code of the runner's frame: stacks are cut below it */
    PyObject *sample_program;   /* the program's code the runner runs (else: runner's work) */
    /* memory (memory.c) */
    int memory;                 /* allocation hooks record while enabled */
    int memory_only;            /* mode "memory": no call or sampling hooks */
    int64_t memory_sample;      /* 0: every allocation; else mean bytes between picks */
    int memory_stacks;          /* record each allocation's Python stack */
    struct pp_memdata *mem;     /* what they recorded, resolved to lines */
    /* timeline (function mode): each ended call as (fid, start, duration) */
    int timeline;
    int64_t tl_min_ns;          /* calls shorter than this are counted, not kept */
    int64_t tl_min_ticks;       /* the same in clock ticks (set by enable) */
    uint64_t tl_max;            /* events held over all threads, at most */
    int64_t start_ticks;        /* the clock at start_mono_ns: origin of the events */
    PyObject *weakreflist;
} pp_profiler;

extern PyTypeObject pp_profiler_type;

int pp_tracer_module_init(PyObject *module);
int pp_tracer_enable(pp_profiler *p);
int pp_tracer_disable(pp_profiler *p);
void pp_tracer_clear(pp_profiler *p);
void pp_tracer_free(pp_profiler *p);
/* Forked child, profiler disabled: drop the parent's data and thread records. */
int pp_tracer_after_fork(pp_profiler *p);
/* 3.11, lazy_threading: threading was just imported; give its new threads our hook. */
int pp_tracer_hook_threading(pp_profiler *p);
/* Stop or resume recording the calling thread's events (until the next enable). */
void pp_tracer_pause_thread(pp_profiler *p, int paused);
int pp_tracer_thread_paused(pp_profiler *p);
/* The calling thread is paused by the enabled profiler (GIL held). */
int pp_tracer_self_paused(void);
/* The interpreter mechanism in use (or last used): for captures and messages. */
static inline const char *pp_tracer_hook_name(const pp_profiler *p)
{
    if (p->memory_only)
        return "PyMem_SetAllocator";
    if (p->sampling)
        return p->sopts.mode == PP_SAMPLE_WALL ? "SIGPROF (wall-clock timer thread)"
                                                : "SIGPROF (ITIMER_PROF, process CPU time)";
    return PP_USE_MONITORING ? "sys.monitoring"
                             : p->eval_mode ? "PEP 523 frame evaluation" : "PyEval_SetProfile";
}
/* Ticks of the profiler's clock now (internal clock or user timer). */
int64_t pp_tracer_now(pp_profiler *p);
/* End the calls still open on `ts` at `now` (used by disable and snapshots). */
void pp_tracer_stop_all(pp_thread *ts, pp_tables *t, pp_stack *st, int64_t now, int lines);
/* For the sampler's drain (GIL held): a code object's function id (it is then
 * kept alive), a dying one's ghost id, and a sampled thread's index. */
uint32_t pp_tracer_register_code(pp_profiler *p, PyObject *code);
uint32_t pp_tracer_register_ghost(pp_profiler *p, PyObject *code);
void pp_tracer_note_thread(pp_profiler *p, uint32_t tid, uint64_t ident);
uint32_t pp_tracer_sample_thread(pp_profiler *p, uint32_t tid, uint64_t ident);
/* Memory with tracing (GIL held): the calling thread allocated (delta > 0) or
 * freed bytes. */
void pp_tracer_mem_delta(int64_t delta);
/* Timeline: ticks of the profiler's clock per nanosecond (user timer: its
 * unit), to turn a minimum duration in ns into ticks. */
double pp_tracer_ticks_per_ns(pp_profiler *p);
/* Write the periodic capture if one is due (GIL held). */
void pp_tracer_maybe_flush(pp_profiler *p);
/* The enabled profiler of this process, or NULL. */
pp_profiler *pp_tracer_active(void);
/* Line mode: make `code` a line target (registering it); its function id or
 * PP_NONE with an exception set. */
uint32_t pp_tracer_add_line_target(pp_profiler *p, PyObject *code);

#endif
