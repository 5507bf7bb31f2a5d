/* sampler_drain.c — the ring into the stack table, with the GIL (sampler.h).
 *
 * Owns: the drain of the handlers' ring into the stack table
 * (sampler_samples.c). A code object that dies before its
 * samples are drained is caught by the code watcher, which drains first and
 * records the dying object by name (a "ghost"), never by reference. Wall
 * mode's REPEAT records charge a thread's last stack. The spill: records
 * the ticker moves out of the ring (no GIL) while the drain cannot run.
 * Never: runs in the signal handler; reads a ring record not yet published.
 */
#define _GNU_SOURCE
#include "sampler_int.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- drain */

/* A sampled thread's index (its record made when new). */
static uint32_t sample_thread(pp_sampling *p, uint32_t tid, uint64_t ident)
{
    pp_thread *ts = pp_threads_sampled(p->threads, tid, ident);
    if (ts == NULL)
        return PP_NONE;
    ts->events++;
    return ts->index;
}

/* Wall mode: each thread's last recorded stack (by thread index), which its
 * REPEAT records charge; PP_NONE when it was the runner's own. */
static uint32_t *last_stack;
static uint32_t nlast;

static void set_last_stack(uint32_t thread, uint32_t st)
{
    if (thread >= nlast) {
        uint32_t n = nlast ? nlast : 64;
        while (n <= thread)
            n *= 2;
        uint32_t *a = realloc(last_stack, (size_t)n * sizeof *a);
        if (a == NULL)
            return;
        for (uint32_t i = nlast; i < n; i++)
            a[i] = PP_NONE;
        last_stack = a;
        nlast = n;
    }
    last_stack[thread] = st;
}



static uint32_t get_last_stack(uint32_t thread)
{
    return thread < nlast ? last_stack[thread] : PP_NONE;
}

/* --async: the task row of each thread's last recorded stack (PP_NONE: none),
 * which its REPEAT records charge too. */
static uint32_t *last_task;
static uint32_t nlast_task;

static void set_last_task(uint32_t thread, uint32_t row)
{
    if (thread >= nlast_task) {
        if (row == PP_NONE)
            return;
        uint32_t n = nlast_task ? nlast_task : 64;
        while (n <= thread)
            n *= 2;
        uint32_t *a = realloc(last_task, (size_t)n * sizeof *a);
        if (a == NULL)
            return;
        for (uint32_t i = nlast_task; i < n; i++)
            a[i] = PP_NONE;
        last_task = a;
        nlast_task = n;
    }
    last_task[thread] = row;
}

/* --async: a sample in a coroutine (raw[at] is the rootmost coroutine frame)
 * becomes the task's: its frames up to that one under the task's root frame.
 * The frames below (the event loop running the task) are dropped. Returns
 * the frames to keep (at + 1) and sets *row and *root_fid; n if the sample
 * is not in a coroutine. */
static uint32_t task_cut(pp_sampling *p, const rawrec *r, const pp_rawframe *raw, uint32_t n,
                         uint32_t *row, uint32_t *root_fid)
{
    *row = PP_NONE;
    *root_fid = PP_NONE;
    if (S.async && r->coro == 0 && p->tasks.own->work_code) {
        /* an executor's thread doing a task's to_thread work: from _WorkItem.run up */
        for (uint32_t i = n; i-- > 0;) {
            if (raw[i].code != p->tasks.own->work_code || i >= MAX_FRAMES - 1)
                continue;
            *row = pp_async_worker_row(p, r->tid, 1);
            if (*row == PP_NONE)
                return n;
            *root_fid = p->tasks.rows[*row].fid;
            return i + 1;
        }
        return n;
    }
    if (!S.async || r->coro == 0)
        return n;
    uint32_t at = n;
    for (uint32_t i = n; i-- > 0;)
        if (raw[i].flags & PP_RAW_CORO) {
            at = i;
            break;
        }
    if (at == n || at >= MAX_FRAMES - 1)
        return n;               /* below the runner's frame; or no room for the task's */
    *row = pp_async_row(p, (uintptr_t)r->coro, r->t_ns);
    *root_fid = *row != PP_NONE ? p->tasks.rows[*row].fid : p->tasks.unknown_fid;
    if (*root_fid == PP_NONE)
        return n;
    if (*row == PP_NONE)
        p->tasks.unmatched++;
    return at + 1;
}

/* CPU mode on task-clock events: what each thread's samples of the program
 * weighed in this run so far, and its last stack and state (thread PP_NONE:
 * none yet), by kernel tid; for the end of its event (drain_ends). */
typedef struct {
    uint32_t tid, thread, stack, state;
    int64_t seen;
    uint32_t insn_fid, insn_offset;     /* --opcodes: its last sample's instruction */
    int insn_op;
} cpu_run;
static cpu_run *runs;
static uint32_t nruns, capruns;
static pp_index runidx;         /* tid + 1 -> runs[] */

static cpu_run *cpu_run_of(uint32_t tid, int make)
{
    if (runidx.e == NULL && pp_index_init(&runidx, 64) < 0)
        return NULL;
    uint32_t i = pp_index_get(&runidx, (uint64_t)tid + 1);
    if (i != PP_NONE)
        return &runs[i];
    if (!make || pp_sampler_grow_array((void **)&runs, &capruns, nruns + 1, sizeof *runs) < 0
        || pp_index_put(&runidx, (uint64_t)tid + 1, nruns) < 0)
        return NULL;
    runs[nruns] = (cpu_run){tid, PP_NONE, PP_NONE, 0, 0, PP_NONE, 0, 0};
    return &runs[nruns++];
}

/* A thread's CPU that no sample of an earlier run saw (its run ended before
 * its first sample): its next run's first sample carries it. */
static int64_t *debt_of(pp_sampling *p, uint32_t tid, int make)
{
    for (uint32_t i = 0; i < p->ndebts; i++)
        if (p->debts[i].tid == tid)
            return &p->debts[i].ns;
    if (!make || pp_sampler_grow_array((void **)&p->debts, &p->capdebts, p->ndebts + 1,
                                       sizeof *p->debts) < 0)
        return NULL;
    p->debts[p->ndebts] = (pp_cpu_debt){tid, 0};
    return &p->debts[p->ndebts++].ns;
}

/* --opcodes: a sample's instructions, each (fid, offset) once: the
 * innermost's (`leaf`: raw[0] is the program's) self and total, the
 * callers' (their calls: opcode as now) total. The innermost's instruction
 * and opcode go to *leaf_at, *leaf_op. */
static void add_insns(pp_samples *s, uint32_t thread, const pp_rawframe *raw,
                      const uint32_t *ins, const uint32_t *fids, uint32_t n, int leaf,
                      int64_t weight, uint32_t *leaf_at, int *leaf_op)
{
    uint32_t at[MAX_FRAMES];
    for (uint32_t k = 0; k < n; k++)
        at[k] = pp_samples_insn_start(s, fids[k], (PyObject *)raw[ins[k]].code,
                                      raw[ins[k]].offset);
    for (uint32_t k = 0; k < n; k++) {
        const pp_rawframe *f = &raw[ins[k]];
        int seen = 0;
        for (uint32_t j = k + 1; j < n && !seen; j++)      /* recursion: deeper ones first */
            seen = fids[j] == fids[k] && at[j] == at[k];
        if (seen)
            continue;
        int self = ins[k] == 0 && leaf;
        /* the innermost's opcode as the handler read it, unless its pointer was
         * left on a cache unit (just back from a call): then as now */
        int op = self && at[k] == f->offset && pp_raw_opcode(f) >= 0
                 ? pp_raw_opcode(f) : pp_frames_opcode_now((PyObject *)f->code, at[k]);
        if (op < 0)
            continue;
        (void)pp_samples_add_insn(s, thread, fids[k], (PyObject *)f->code, at[k], op, self,
                                  weight, 1);
        if (self) {
            *leaf_at = at[k];
            *leaf_op = op;
        }
    }
}

/* One published record into the stack table. */
/* CPU mode on ITIMER_PROF: a thread's first sample of a run weighs one interval of the
 * process's signals (its CPU per signal so far), not the thread's CPU since
 * the run began; later ones weigh the thread's CPU since its previous one.
 * The CPU after a thread's last sample is seen by no sample: the process's
 * timer ticks every interval of its CPU, so a thread running alone is
 * sampled first at a uniform point of its first interval and stops at a
 * uniform point of its last, and one interval for the first gap makes up for
 * both; a thread shorter than one interval (a thread per request) is
 * sampled with a chance of its CPU / the interval, and weighs one interval
 * when it is. By the thread's own CPU since the run began, a thread lost
 * half an interval on average, and a short one nearly all its time. */
static int64_t first_weight;

static void drain_record(pp_sampling *p, const rawrec *r, uint64_t *fr)
{
    pp_samples *s = &p->samples;
    s->drained++;
    if (r->pad & REC_REPEAT) {
        uint32_t thread = sample_thread(p, r->tid, r->ident);
        uint32_t st = thread == PP_NONE ? PP_NONE : get_last_stack(thread);
        if (st != PP_NONE)
            pp_samples_add(s, thread, st, PP_STATE_IDLE, r->weight_ns,
                       (uint64_t)((r->weight_ns + S.interval_ns / 2) / S.interval_ns));
        if (st != PP_NONE && thread < nlast_task && last_task[thread] != PP_NONE)
            pp_async_ran(p, last_task[thread], thread, r->t_ns, r->weight_ns);
        return;
    }
    const pp_rawframe *raw = (const pp_rawframe *)(r + 1);
    const uintptr_t *nat = (const uintptr_t *)(raw + r->nframes);
    uint32_t n = r->nframes;
    /* Frames from the root up to the runner's (the CLI's frame running
     * the program) are pyprof's, not the program's. */
    int runner_only = 0;
    for (uint32_t i = 0; p->root && i < n; i++) {
        if (raw[i].code == (uintptr_t)p->root) {
            /* In the runner's own work (waiting for threads...), not the
             * program's: its frame calls something else than the program. */
            runner_only = i == 0 || (p->program
                                     && raw[i - 1].code != (uintptr_t)p->program);
            n = i;
            break;
        }
    }
    uint32_t kept = 0, row, root_fid, leaf_fid = PP_NONE;
    uint32_t ins[MAX_FRAMES], nins = 0;     /* --opcodes: the program's frames (raw index) */
    uint32_t ins_fid[MAX_FRAMES];
    n = task_cut(p, r, raw, n, &row, &root_fid);
    if (root_fid != PP_NONE)
        fr[kept++] = (uint64_t)root_fid << 32;
    uint32_t base = kept;
    int own_leaf = 0;
    for (uint32_t i = n; i-- > 0;) {        /* leaf first -> root first */
        PyObject *code = (PyObject *)raw[i].code;
        uint32_t fid = pp_sampler_code_fid(p, code);
        if (fid == PP_NONE) {
            /* pyprof's own frame (a runner, a middleware, the pytest plugin):
             * the program's stack starts above it; on top, pyprof's own work */
            if (pp_registry_own(p->reg, raw[i].code)) {
                kept = base;
                own_leaf = 1;
            }
            continue;
        }
        own_leaf = 0;
        leaf_fid = i == 0 ? fid : PP_NONE;
        if (p->opts.opcodes) {
            ins[nins] = i;
            ins_fid[nins++] = fid;
        }
        uint32_t line = pp_samples_line(s, fid, code, raw[i].offset);
        if (S.native && (raw[i].flags & PP_RAW_ENTRY))
            line |= PP_LINE_ENTRY;          /* where native stacks are merged in */
        fr[kept++] = (uint64_t)fid << 32 | line;
    }
    n = kept;
    runner_only |= own_leaf || pp_threads_is_own(r->tid);
    uint32_t thread = runner_only ? PP_NONE : sample_thread(p, r->tid, r->ident);
    uint32_t st = thread == PP_NONE ? PP_NONE : pp_samples_stack_id(s, fr, n, nat, r->nnative);
    int64_t weight = r->weight_ns;
    if ((r->pad & REC_FIRST) && st != PP_NONE && pp_on_itimer()) {
        weight = first_weight;
        atomic_fetch_add_explicit(&S.weight_ns, first_weight - r->weight_ns,
                                  memory_order_relaxed);
    }
    cpu_run *cr = NULL;
    if (pp_on_task_clock()) {
        /* a sample in pyprof's own code weighs nothing that shows: its time
         * stays unseen, and goes with the run's end to the last stack of the
         * program (the CPU since the previous sample is mostly the program's) */
        cr = cpu_run_of(r->tid, 1);
        if (cr && st != PP_NONE) {
            cr->seen += r->weight_ns;
            cr->thread = thread;
            cr->stack = st;
            cr->state = r->state;
            cr->insn_fid = PP_NONE;
        }
        int64_t *debt = (r->pad & REC_FIRST) && st != PP_NONE ? debt_of(p, r->tid, 0) : NULL;
        if (debt && *debt > 0) {
            weight += *debt;
            atomic_fetch_add_explicit(&S.weight_ns, *debt, memory_order_relaxed);
            *debt = 0;
        }
    }
    if (st != PP_NONE)
        pp_samples_add(s, thread, st, r->state, weight, 1);
    uint32_t leaf_at = 0;
    int leaf_op = -1;
    if (p->opts.opcodes && st != PP_NONE) {     /* leaf_fid: raw[0] is the program's */
        add_insns(s, thread, raw, ins, ins_fid, nins, leaf_fid != PP_NONE, weight, &leaf_at,
                  &leaf_op);
        if (cr && leaf_op >= 0) {
            cr->insn_fid = leaf_fid;
            cr->insn_offset = leaf_at;
            cr->insn_op = leaf_op;
        }
    }
    if (thread != PP_NONE) {
        set_last_stack(thread, st);
        int worker = r->coro == 0;      /* to_thread work: the task awaits it meanwhile */
        set_last_task(thread, st != PP_NONE && !worker ? row : PP_NONE);
        if (st != PP_NONE && row != PP_NONE && !worker)
            pp_async_ran(p, row, thread, r->t_ns, weight);
    }
    else if (runner_only) {
        uint32_t ix = pp_index_get(&p->threads->native, (uint64_t)r->tid + 1);
        if (ix != PP_NONE)
            set_last_stack(ix, PP_NONE);
    }
    s->truncated += r->truncated;
    s->foreign += r->state == PP_STATE_OTHER;
}

/* The ring's consumers - the drain (GIL held) and the spill (the ticker,
 * without it) - take records from its tail one at a time, under ring_mu. */
static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;

/* The oldest published record, or NULL (none; or a corrupt length: never
 * read past it). */
static rawrec *ring_next(uint32_t *len_out)
{
    uint64_t tail = atomic_load_explicit(&S.tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&S.head, memory_order_acquire);
    if (tail == head)
        return NULL;
    rawrec *r = (rawrec *)(S.buf + (tail & (RING_BYTES - 1)));
    uint32_t len = atomic_load_explicit(&r->len, memory_order_acquire);
    if (len == 0)
        return NULL;                    /* reserved, not yet published */
    if (len < sizeof(rawrec) || len > head - tail || len > RING_SLACK) {
        S.corrupt = 1;                  /* cannot happen */
        return NULL;
    }
    *len_out = len;
    return r;
}

static void ring_pop(rawrec *r, uint32_t len)
{
    /* All of it, not just the header: a later record may start anywhere in
     * here, and a stale nonzero len would publish it unwritten. */
    memset(r, 0, len);
    atomic_store_explicit(&S.tail, atomic_load_explicit(&S.tail, memory_order_relaxed) + len,
                          memory_order_release);
}

/* Records moved out of the ring while the drain could not run (it waits for
 * the GIL, which a crowd of threads can hold for seconds): drained first,
 * in order. Bounded; past it the ring fills and drops, counted. */
#define SPILL_MAX ((size_t)64 << 20)
static unsigned char *spill;
static size_t spill_used, spill_cap;
static _Atomic int spill_pending;

void pp_sampler_spill(void)
{
    pthread_mutex_lock(&ring_mu);
    uint32_t len;
    rawrec *r;
    while ((r = ring_next(&len)) != NULL) {
        if (spill_used + len > spill_cap) {
            size_t cap = spill_cap ? spill_cap * 2 : (size_t)RING_BYTES;
            while (cap < spill_used + len)
                cap *= 2;
            if (cap > SPILL_MAX)
                break;
            unsigned char *b = realloc(spill, cap);
            if (b == NULL)
                break;
            spill = b;
            spill_cap = cap;
        }
        memcpy(spill + spill_used, r, len);
        spill_used += len;
        atomic_store(&spill_pending, 1);
        ring_pop(r, len);
    }
    pthread_mutex_unlock(&ring_mu);
}

static void drain_locked(pp_sampling *p)
{
    uint64_t fr[MAX_FRAMES + 1];
    int gc_was = PyGC_Disable();        /* a collection here could free sampled code */
    p->threads->sample_pass++;
    first_weight = pp_on_itimer() ? pp_sampler_cpu_interval() : 0;
    pthread_mutex_lock(&ring_mu);
    for (size_t off = 0; off < spill_used;) {
        const rawrec *r = (const rawrec *)(spill + off);
        drain_record(p, r, fr);
        off += atomic_load_explicit(&r->len, memory_order_relaxed);
    }
    if (spill_used) {
        free(spill);
        spill = NULL;
        spill_used = spill_cap = 0;
        atomic_store(&spill_pending, 0);
    }
    uint32_t len;
    rawrec *r;
    while ((r = ring_next(&len)) != NULL) {
        drain_record(p, r, fr);
        ring_pop(r, len);
    }
    pthread_mutex_unlock(&ring_mu);
    if (gc_was)
        PyGC_Enable();
}

/* The end of threads' task-clock events (sampler_cpuclock.c): what their
 * CPU under the event was and their samples did not weigh goes to their last
 * stack. A thread still there at stop: its CPU since its last sample, so its
 * samples weigh its CPU exactly, never more (a test's functions stay within
 * the test's time); one that ran no sample carries its CPU to its first
 * sample of the profiler's next run (a decorated call shorter than an
 * interval, made again and again). A thread gone: its first overflow fell
 * at a uniform point of its first interval, so one of T < P CPU was sampled
 * with a chance of T/P; weighing P then keeps short-lived threads (a thread
 * per request) at their CPU on average. */
void pp_sampler_drain_ends(pp_sampling *p, const pp_cpuclock_end *e, uint32_t n)
{
    if (p != S.prof)
        return;
    for (uint32_t i = 0; i < n; i++) {
        cpu_run *cr = cpu_run_of((uint32_t)e[i].tid, 0);
        if (cr == NULL || cr->thread == PP_NONE) {
            /* no sample of the program: carried to the thread's next one */
            int64_t *debt = e[i].gone ? NULL : debt_of(p, (uint32_t)e[i].tid, 1);
            if (debt)
                *debt += e[i].cpu_ns;
            continue;
        }
        int64_t ran = e[i].gone && e[i].cpu_ns < S.interval_ns ? S.interval_ns : e[i].cpu_ns;
        int64_t tail = ran - cr->seen;
        cr->seen = 0;
        if (tail <= 0)
            continue;
        pp_samples_add(&p->samples, cr->thread, cr->stack, cr->state, tail, 0);
        if (cr->insn_fid != PP_NONE)
            (void)pp_samples_add_insn(&p->samples, cr->thread, cr->insn_fid, NULL,
                                      cr->insn_offset, cr->insn_op, 1, tail, 0);
        atomic_fetch_add_explicit(&S.weight_ns, tail, memory_order_relaxed);
        if (cr->thread < nlast_task && last_task[cr->thread] != PP_NONE)
            pp_async_ran(p, last_task[cr->thread], cr->thread, pp_mono_ns(), tail);
    }
}

void pp_sampler_drain_reset(void)
{
    nruns = 0;
    if (runidx.e)
        pp_index_clear(&runidx);
    for (uint32_t i = 0; i < nlast; i++)
        last_stack[i] = PP_NONE;
    for (uint32_t i = 0; i < nlast_task; i++)
        last_task[i] = PP_NONE;
    pthread_mutex_lock(&ring_mu);       /* no helper runs: a spill left by an older run */
    free(spill);
    spill = NULL;
    spill_used = spill_cap = 0;
    atomic_store(&spill_pending, 0);
    pthread_mutex_unlock(&ring_mu);
}

void pp_sampler_drain_atfork_child(void)
{
    pthread_mutex_init(&ring_mu, NULL);     /* the ticker may have held it */
}

void pp_sampler_drain(pp_sampling *p)
{
    if (S.buf == NULL || p != S.prof || S.draining)
        return;
    S.draining = 1;
    int was = pp_memory_self_begin();       /* pyprof's allocations, not the program's */
    drain_locked(p);
    pp_memory_self_end(was);
    S.draining = 0;
}

static int pending(void)
{
    return S.buf != NULL && (atomic_load(&S.head) != atomic_load(&S.tail)
                             || atomic_load(&spill_pending));
}

/* Before a code object goes, the samples that name it are drained. */
void pp_sampler_drain_for_dying(PyObject *code)
{
    pp_frames_forget_code(code);
    if (!pending() || S.prof == NULL || S.draining)
        return;
    pp_err_state es;
    pp_err_save(&es);
    pp_samples_dying(code);
    pp_sampler_drain(S.prof);
    pp_samples_dying(NULL);
    PyErr_Clear();
    pp_err_restore(&es);
}


