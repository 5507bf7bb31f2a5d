/* table.h — per-thread aggregation tables.
 *
 * Owns: an open-addressing index (u64 key -> u32 slot), the dense function and
 * edge slot arrays of one thread, and the cProfile accounting rule applied when
 * a call ends. Pure C: no Python API, so it can be copied for snapshots and
 * tested alone. Called with the GIL held (one writer per thread's tables);
 * never from a signal handler (it may allocate when growing).
 */
#ifndef PP_TABLE_H
#define PP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define PP_NONE UINT32_MAX

typedef struct {
    uint64_t key;               /* 0 = empty */
    uint32_t val;
    uint32_t pad;
} pp_ient;

typedef struct {
    pp_ient *e;
    uint32_t mask;              /* capacity - 1 (capacity is a power of two) */
    uint32_t count;
} pp_index;

/* Per (thread, function). tt: inclusive time of outermost activations only;
 * it: self time of every activation. Units: clock ticks until snapshot. */
typedef struct {
    uint64_t key;
    uint32_t fid;               /* profile-wide function id */
    uint32_t rec_level;         /* activations currently open in this thread */
    uint32_t last_caller;       /* edge cache: most functions have one main caller, */
    uint32_t last_edge;         /* so this usually saves the edge index probe */
    uint32_t last_lslot;        /* line mode: the same for call rows (caller's line slot */
    uint32_t last_crow;         /* -> call row of this callee) */
    uint32_t last_ppath;        /* path cache: caller's path -> this callee's path */
    uint32_t last_path;
    uint64_t calls;
    uint64_t rec_calls;         /* calls that ended while another activation was open */
    int64_t tt;
    int64_t it;
    /* with memory: bytes, over this thread's allocations minus its frees */
    int64_t mem_peak;           /* most reached above the start of one activation */
    int64_t mem_residual;       /* left at the end of outermost activations, summed */
} pp_fslot;

/* Per (thread, caller slot, callee slot): the same counters, per edge. */
typedef struct {
    uint32_t caller;
    uint32_t callee;
    uint32_t rec_level;
    uint32_t pad;
    uint64_t calls;
    uint64_t rec_calls;
    int64_t tt;
    int64_t it;
} pp_eslot;

/* Per (thread, calling context): a node of the calling-context tree, i.e. the
 * chain of functions from the thread's first frame down to this one. A path is
 * open at most once at a time, so its inclusive time needs no recursion rule. */
typedef struct {
    uint32_t parent;            /* caller's path slot, PP_ROOT at the bottom */
    uint32_t fslot;
    uint32_t last_fs;           /* child cache: the function slot this path called last */
    uint32_t last_child;        /* and the path of that call (recursion hits here) */
    uint64_t calls;
    int64_t tt;                 /* inclusive ticks */
    int64_t it;                 /* self ticks */
} pp_pslot;

#define PP_ROOT (PP_NONE - 1)
/* Bound on paths per thread (32 MB of slots): a program with more distinct
 * call chains (deep recursion over many shapes) keeps the first ones, and the
 * calls below the rest are counted as dropped. */
#define PP_MAX_PATHS (1u << 20)

/* Per (thread, code object, line) of a line target. `open` counts the
 * segments of this line running on this thread: a segment's time is added
 * only when it is the outermost one, so a recursive line is never counted
 * twice (the outer segment already contains the inner ones). */
typedef struct {
    uintptr_t code;             /* identity only: the registry keeps it alive */
    uint32_t fid;
    uint32_t line;
    uint32_t open;
    uint32_t pad;
    uint64_t hits;
    int64_t time;               /* ticks, callees included */
    /* with memory, callees included (same rule): the thread's bytes and
     * blocks allocated, allocated minus freed, most risen above the start */
    uint64_t mem_alloc, mem_blocks;
    int64_t mem_net, mem_peak;
} pp_lslot;

/* Line mode with --opcodes: per (thread, code object, instruction) of a line
 * target, as `open` and time work for lines (outermost running only). Its
 * base opcode and co_positions are read when the slot is made (the
 * tracer's slow path), so a snapshot copies plain numbers. */
typedef struct {
    uintptr_t code;             /* identity only: the registry keeps it alive */
    uint32_t fid;
    uint32_t offset;            /* in code units */
    uint32_t open;
    uint32_t opcode;            /* the instruction's base opcode (what co_code holds) */
    uint32_t line, end_line, col, end_col;     /* PP_NONE: none */
    uint64_t hits;
    int64_t time;               /* ticks, from its event to its frame's next one, callees included */
} pp_islot;

/* Per (thread, line slot, callee function slot): calls made while that line
 * ran, with the same outermost-only rule for their inclusive time. */
typedef struct {
    uint32_t lslot;
    uint32_t callee;            /* function slot */
    uint32_t open;
    uint32_t pad;
    uint64_t calls;
    int64_t time;
} pp_cslot;

/* Line mode: line -> line slot of one function on one thread, dense from the
 * function's first line (line events of a loop then cost no hash probe). */
typedef struct {
    uint32_t *slot;             /* PP_NONE where not seen yet */
    uint32_t base;              /* line of slot[0] */
    uint32_t n;
} pp_lmap;

/* Timeline (function mode with timeline on): one ended call, in clock ticks.
 * 24 bytes; capture.c converts start and duration to ns since profiling began. */
typedef struct {
    uint32_t fid;               /* profile-wide function id */
    uint32_t pad;
    int64_t t0;                 /* ticks at entry (the frame's t0) */
    int64_t dur;                /* ticks, entry to return */
} pp_tlevent;

/* A thread's timeline buffer. Its capacity is reserved from one profile-wide
 * budget (tracer.c), so the events held by all threads never exceed it. `on`
 * is 0 in snapshot copies of the tables: their ended-now calls are not events. */
typedef struct {
    pp_tlevent *ev;
    uint32_t n, cap;
    uint64_t dropped_short;     /* calls shorter than the minimum duration */
    uint64_t dropped_full;      /* calls that found the budget spent (or no memory) */
    int on;
} pp_timeline;

typedef struct {
    pp_index fidx;
    pp_fslot *f;
    uint32_t nf, capf;
    pp_index eidx;
    pp_eslot *e;
    uint32_t ne, cape;
    pp_index lidx;              /* line mode only (empty otherwise) */
    pp_lslot *l;
    uint32_t nl, capl;
    pp_index cidx;
    pp_cslot *c;
    uint32_t nc, capc;
    pp_index iidx;              /* line mode with --opcodes only (empty otherwise) */
    pp_islot *i;
    uint32_t ni, capi;
    pp_lmap *lmap;              /* by function slot; lines of unmapped lines use lidx */
    uint32_t caplmap;
    pp_index pidx;              /* paths (when recorded) */
    pp_pslot *p;
    uint32_t np, capp;
    uint64_t paths_dropped;     /* calls made below a path that could not be added */
    pp_timeline tl;             /* timeline only (empty otherwise); never copied */
} pp_tables;

/* Steps: a table's counters at the last step mark, by slot (in ticks), so a
 * mark writes only what changed since. Lines keep hits in `calls` and time
 * in `tt`; call rows calls and time the same way. */
typedef struct {
    uint64_t calls, rec_calls;
    int64_t tt, it;
} pp_cnt4;

typedef struct {
    pp_cnt4 *v;
    uint32_t n, cap;
} pp_cntbase;

typedef struct {
    pp_cntbase f, e, p, l, c;
} pp_stepbase;

void pp_cntbase_free(pp_cntbase *b);
void pp_stepbase_free(pp_stepbase *b);

int pp_index_init(pp_index *ix, uint32_t capacity);
void pp_index_free(pp_index *ix);
int pp_index_put(pp_index *ix, uint64_t key, uint32_t val);   /* -1 on OOM */
void pp_index_clear(pp_index *ix);
int pp_index_copy(pp_index *dst, const pp_index *src);

static inline uint32_t pp_hash64(uint64_t key, uint32_t mask)
{
    key ^= key >> 29;
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32) & mask;
}

static inline uint32_t pp_index_get(const pp_index *ix, uint64_t key)
{
    uint32_t i = pp_hash64(key, ix->mask);
    for (;;) {
        const pp_ient *p = &ix->e[i];
        if (p->key == key)
            return p->val;
        if (p->key == 0)
            return PP_NONE;
        i = (i + 1) & ix->mask;
    }
}

/* The entry holding `key`, or NULL. */
static inline pp_ient *pp_index_find(pp_index *ix, uint64_t key)
{
    uint32_t i = pp_hash64(key, ix->mask);
    for (;;) {
        pp_ient *p = &ix->e[i];
        if (p->key == key)
            return p;
        if (p->key == 0)
            return 0;
        i = (i + 1) & ix->mask;
    }
}

int pp_tables_init(pp_tables *t);
void pp_tables_free(pp_tables *t);
void pp_tables_clear(pp_tables *t);
int pp_tables_copy(pp_tables *dst, const pp_tables *src);
/* Slow paths: add a slot (the caller has checked it is absent). */
uint32_t pp_tables_add_function(pp_tables *t, uint64_t key, uint32_t fid);
uint32_t pp_tables_add_edge(pp_tables *t, uint32_t caller, uint32_t callee);

uint32_t pp_tables_add_line(pp_tables *t, uint64_t key, uintptr_t code, uint32_t fid,
                            uint32_t line);
uint32_t pp_tables_add_callrow(pp_tables *t, uint32_t lslot, uint32_t callee);
/* PP_NONE when memory runs out or PP_MAX_PATHS is reached */
uint32_t pp_tables_add_path(pp_tables *t, uint32_t parent, uint32_t fslot);

static inline uint64_t pp_path_key(uint32_t parent, uint32_t fslot)
{
    return 1ull << 63 | (uint64_t)(uint32_t)(parent + 1) << 32 | fslot;   /* never 0 */
}

/* The recorded path of function slot `fs` called from path `parent` (PP_ROOT
 * at the bottom of the stack), or PP_NONE when there is none (yet). Two
 * one-entry caches answer most calls: the callee's (its last caller's path)
 * and the caller path's (its last callee: recursion, where each depth is a
 * different parent); both learn the answer. */
static inline uint32_t pp_tables_path_find(pp_tables *t, uint32_t parent, uint32_t fs)
{
    if (parent == PP_NONE)              /* below a path that was not recorded */
        return PP_NONE;
    pp_fslot *c = &t->f[fs];
    if (c->last_ppath == parent)
        return c->last_path;
    uint32_t s;
    if (parent != PP_ROOT && t->p[parent].last_fs == fs) {
        s = t->p[parent].last_child;
    }
    else {
        if ((s = pp_index_get(&t->pidx, pp_path_key(parent, fs))) == PP_NONE)
            return PP_NONE;
        if (parent != PP_ROOT) {
            t->p[parent].last_fs = fs;
            t->p[parent].last_child = s;
        }
    }
    c->last_ppath = parent;
    c->last_path = s;
    return s;
}

/* The same, adding the path when it is new; PP_NONE below a path that was
 * not recorded, or when no more can be added. */
static inline uint32_t pp_tables_path(pp_tables *t, uint32_t parent, uint32_t fs)
{
    uint32_t s = pp_tables_path_find(t, parent, fs);
    if (s != PP_NONE || parent == PP_NONE)
        return s;
    if ((s = pp_tables_add_path(t, parent, fs)) == PP_NONE)
        return PP_NONE;
    return pp_tables_path_find(t, parent, fs);       /* now found: the caches learn it */
}

static inline void pp_account_path(pp_tables *t, uint32_t ps, int64_t tt, int64_t it)
{
    if (ps == PP_NONE)
        return;
    pp_pslot *s = &t->p[ps];
    s->calls++;
    s->tt += tt;
    s->it += it;
}

/* Line keys are exact below line 2^17 (user-space pointers use 47 bits);
 * beyond, keys may repeat and the slot itself is compared. */
static inline uint64_t pp_line_key(uintptr_t code, uint32_t line)
{
    return (uint64_t)code ^ ((uint64_t)line << 47);
}

static inline uint32_t pp_tables_line(pp_tables *t, uintptr_t code, uint32_t line, uint32_t fid)
{
    uint64_t key = pp_line_key(code, line);
    uint32_t i = pp_hash64(key, t->lidx.mask);
    for (;;) {
        const pp_ient *e = &t->lidx.e[i];
        if (e->key == 0)
            return pp_tables_add_line(t, key, code, fid, line);
        if (e->key == key && t->l[e->val].code == code && t->l[e->val].line == line)
            return e->val;
        i = (i + 1) & t->lidx.mask;
    }
}

/* The instruction slot of (code, offset); made (PP_NONE when memory runs
 * out, or an offset past 2**16 code units) by pp_tables_add_insn, which the
 * caller fills. */
static inline uint64_t pp_insn_key(uintptr_t code, uint32_t offset)
{
    return (uint64_t)code << 16 | offset;       /* user-space pointers fit 48 bits */
}

static inline uint32_t pp_tables_insn(const pp_tables *t, uintptr_t code, uint32_t offset)
{
    if (offset >= (1u << 16) || t->iidx.e == NULL)
        return PP_NONE;
    return pp_index_get(&t->iidx, pp_insn_key(code, offset));
}

uint32_t pp_tables_add_insn(pp_tables *t, uintptr_t code, uint32_t offset, uint32_t fid);

static inline uint32_t pp_tables_callrow(pp_tables *t, uint32_t lslot, uint32_t callee)
{
    pp_fslot *f = &t->f[callee];
    if (f->last_lslot == lslot)
        return f->last_crow;
    uint32_t c = pp_index_get(&t->cidx, ((uint64_t)lslot + 1) << 32 | callee);
    if (c == PP_NONE && (c = pp_tables_add_callrow(t, lslot, callee)) == PP_NONE)
        return PP_NONE;
    f->last_lslot = lslot;
    f->last_crow = c;
    return c;
}

/* Line mode: the slot of `line` of the function in slot `fs` (code, fid as
 * given), through the function's dense map; PP_NONE on OOM. */
uint32_t pp_tables_line_slow(pp_tables *t, uint32_t fs, uintptr_t code, uint32_t line,
                             uint32_t fid, uint32_t base);

static inline uint32_t pp_tables_line_of(pp_tables *t, uint32_t fs, uintptr_t code,
                                         uint32_t line, uint32_t fid, uint32_t base)
{
    if (fs < t->caplmap) {
        const pp_lmap *m = &t->lmap[fs];
        uint32_t i = line - m->base;
        if (i < m->n && m->slot[i] != PP_NONE)
            return m->slot[i];
    }
    return pp_tables_line_slow(t, fs, code, line, fid, base);
}

static inline uint64_t pp_edge_key(uint32_t caller, uint32_t callee)
{
    return ((uint64_t)caller + 1) << 32 | callee;   /* never 0 */
}

static inline uint32_t pp_tables_edge(pp_tables *t, uint32_t caller, uint32_t callee)
{
    pp_fslot *c = &t->f[callee];
    if (c->last_caller == caller)
        return c->last_edge;
    uint32_t e = pp_index_get(&t->eidx, pp_edge_key(caller, callee));
    if (e == PP_NONE && (e = pp_tables_add_edge(t, caller, callee)) == PP_NONE)
        return PP_NONE;
    c->last_caller = caller;
    c->last_edge = e;
    return e;
}

/* cProfile's rule when an activation ends after `tt` ticks, `it` of them its
 * own: inclusive time counts only at the outermost level of recursion. */
static inline void pp_account_function(pp_fslot *s, int64_t tt, int64_t it)
{
    if (--s->rec_level == 0)
        s->tt += tt;
    else
        s->rec_calls++;
    s->it += it;
    s->calls++;
}

static inline void pp_account_edge(pp_eslot *s, int64_t tt, int64_t it)
{
    if (--s->rec_level == 0)
        s->tt += tt;
    else
        s->rec_calls++;
    s->it += it;
    s->calls++;
}

#endif
