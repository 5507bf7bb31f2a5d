/* threads.h — one profiler's per-thread records, and the calling thread's.
 *
 * Owns: the thread records (tables, shadow stack, identity, name, step base)
 * of a profiler, the TLS pointer of the calling thread to its record, the
 * flag that marks pyprof's own work on a thread, and the calling thread's
 * net and allocated bytes (memory with tracing: activations' peaks, line
 * targets' memory with callees). The
 * engines that record per thread (tracer, sampler, memory) share this level
 * instead of calling each other.
 * Never: formats; runs Python code (a thread's name is a dict lookup);
 * touches a record of another thread except with the GIL held.
 */
#ifndef PP_THREADS_H
#define PP_THREADS_H

#include "frames.h"
#include "stack.h"
#include "table.h"

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
    uint64_t name_at;           /* tracer: look the name up at this many events (UINT64_MAX: named) */
    int name_tries;             /* sampler: lookups left before giving up (raw threads) */
    uint32_t name_pass;         /* sampled threads: the sampler pass of the last lookup */
    pp_tables t;
    pp_stack st;
    pp_stepbase step;           /* counters at the last pyprof.step() mark */
} pp_thread;

/* The records of one profiler. */
typedef struct pp_threadset {
    pp_thread *head;
    pp_thread **tail;
    uint32_t n;
    uint64_t gen;               /* fresh per enable; matches pp_tls.gen */
    int timeline;               /* new records keep a timeline */
    int oom;                    /* a record could not be made */
    pp_index native;            /* sampled threads: kernel thread id + 1 -> index */
    pp_thread **byindex;        /* record of each index (NULL if it could not grow) */
    uint32_t cap_byindex;
    uint32_t sample_pass;       /* bumped per drain and refresh: one name lookup per pass */
} pp_threadset;

/* The calling thread's record for the enabled profiler. initial-exec: a plain
 * %fs-relative load on the event path (glibc's static TLS reserve for
 * dlopen'ed modules) instead of a __tls_get_addr call. */
typedef struct {
    uint64_t gen;
    pp_thread *ts;              /* NULL while the thread is paused */
    pp_thread *paused;          /* the record to restore when it resumes */
    int busy;                   /* pyprof's own work may run Python code (3.11 eval hook) */
} pp_tls_t;
extern __thread pp_tls_t pp_tls __attribute__((tls_model("initial-exec")));

/* Set while pyprof itself runs (hooks, registration, captures): allocations
 * made then are pyprof's, not the program's, and pass through unrecorded. */
extern __thread int pp_mem_self __attribute__((tls_model("initial-exec")));
static inline int pp_memory_self_begin(void)
{
    int was = pp_mem_self;
    pp_mem_self = 1;
    return was;
}
static inline void pp_memory_self_end(int was) { pp_mem_self = was; }

/* The garbage collector (gcwatch.c sets these while it watches): its
 * generation + 1 while it runs on this thread, else 0; the pseudo code
 * object standing for each generation (0: not watching). */
extern __thread int pp_gc_running __attribute__((tls_model("initial-exec")));
extern uintptr_t pp_gc_code[3];
/* Collections seen while watching: per generation, their count and pause. */
typedef struct {
    int on;
    uint64_t collections[3];
    int64_t pause_ns[3];
    int64_t max_pause_ns;
    uint64_t collected, uncollectable;
} pp_gcstats;
/* Async-signal-safe: a `<GC gen N>` frame for a stack read on this thread
 * while the collector runs (1 written), else 0. */
static inline int pp_gc_frame(pp_rawframe *out)
{
    int g = pp_gc_running;
    if (__builtin_expect(g == 0, 1) || pp_gc_code[g - 1] == 0)
        return 0;
    out->code = pp_gc_code[g - 1];
    out->offset = 0;
    out->flags = 0;
    return 1;
}

void pp_threads_init(pp_threadset *s);
/* The calling thread's record, made (or reused from an earlier enable) when
 * new; NULL when out of memory. GIL held. */
pp_thread *pp_threads_attach(pp_threadset *s);
static inline pp_thread *pp_threads_current(pp_threadset *s)
{
    if (__builtin_expect(pp_tls.gen == s->gen, 1))
        return pp_tls.ts;
    return pp_threads_attach(s);
}
/* Stop or resume recording the calling thread (until the next generation). */
void pp_threads_pause(pp_threadset *s, int paused);
int pp_threads_paused(const pp_threadset *s);
/* The records of the enabled profiler (NULL: none), for the checks below. */
void pp_threads_activate(pp_threadset *s);
/* The calling thread is pyprof's own (on) or no longer (GIL held): a
 * Python thread of pyprof's (the control channel's), whose samples are
 * pyprof's work, not the program's (at most 8 at a time). */
void pp_threads_own(int on);
int pp_threads_is_own(uint32_t tid);
/* The calling thread is paused by the enabled profiler (GIL held). */
int pp_threads_self_paused(void);
/* Look the thread's name up again (bounded retries; GIL held). */
void pp_thread_name_due(pp_thread *ts);
/* A sampled thread's record by kernel id, made when new (GIL held). */
pp_thread *pp_threads_sampled(pp_threadset *s, uint32_t tid, uint64_t ident);
/* Forget every count (records stay); free every record; forget the records
 * and this thread's TLS in a forked child. */
void pp_threads_clear(pp_threadset *s);
void pp_threads_free(pp_threadset *s);
void pp_threads_after_fork(pp_threadset *s);

/* Memory with tracing: the last outermost activation to return is settled
 * once its frame's locals are gone (at the next allocation or call). */
static inline void pp_thread_mem_settle(pp_tables *t, pp_stack *st)
{
    if (st->mem_pending) {
        t->f[st->mem_pending - 1].mem_residual += st->mem_cur - st->mem_pending_base;
        st->mem_pending = 0;
    }
}
/* Memory with tracing: C code's blocks this thread made or freed without
 * the GIL (set aside, stack.h) taken into its counters, before they are
 * read. GIL held, the thread's own record (or a snapshot's copy). */
void pp_thread_mem_take_aside(pp_tables *t, pp_stack *st);
static inline void pp_thread_mem_fold(pp_tables *t, pp_stack *st)
{
    if (__builtin_expect(atomic_load_explicit(&st->aside, memory_order_relaxed), 0))
        pp_thread_mem_take_aside(t, st);
}
/* Set by the memory engine while it records: the tracer's 3.11 hook forgets
 * a block it made CPython allocate (the frame object given to the profile
 * hook), as if never allocated. GIL held. */
extern void (*pp_mem_forget_hook)(PyObject *obj);
/* On (the tracer records with memory) or off. */
void pp_threads_mem_frames(int on);
/* From the allocation hooks, GIL held: the calling thread's net bytes moved by
 * `net` (a new high point for the running activation), its cumulative bytes
 * and blocks allocated by `alloc` and `blocks` (negative: a block forgotten). */
void pp_threads_mem_delta(int64_t net, int64_t alloc, int64_t blocks);
/* The enabled profiler's generation (0: none). GIL held. */
uint64_t pp_threads_active_gen(void);
/* From the allocation hooks, any thread, no GIL needed, while the memory
 * engine records under its lock (the records of `gen` outlive that): the
 * calling thread's share of a block of C code's, made or freed without the
 * GIL, set aside in its record for pp_thread_mem_fold. */
void pp_threads_mem_aside(uint64_t gen, int64_t net, int64_t alloc, int64_t blocks);

#endif
