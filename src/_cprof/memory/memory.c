/* memory.c — allocation hooks (see memory.h).
 *
 * Sizes are the sizes requested from the Python allocators, as tracemalloc
 * counts them: a pymalloc request above 512 bytes that pymalloc passes on to
 * the RAW allocator is counted once, at the outer call (a thread-local guard
 * lets nested calls through). realloc moves the whole block to the line of
 * the realloc, as tracemalloc does. A block is removed from the table before
 * the allocator below frees it, so its address cannot be handed out again
 * while it is still listed.
 * Never: calls memory_control.c, memory_curve.c, memory_native.c or
 * memory_runs.c (they call down to it; start and stop are memory_control.c's).
 */
#define _GNU_SOURCE 1
#include "memory_hooks.h"

#include <pthread.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "frames.h"
#include "unwind.h"

enum { DOM_RAW, DOM_MEM, DOM_OBJ, NDOM };
static const PyMemAllocatorDomain domain_id[NDOM] = {
    PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};

/* The allocators below ours, never changed while installed: callers read an
 * allocator's function and context without a lock, so ours ignore ctx. */
static PyMemAllocatorEx below[NDOM];
static PyMemAllocatorEx ours[NDOM];
static int installed;
static _Atomic int recording;

/* ---------------------------------------------------------------- lock */

static atomic_flag lock = ATOMIC_FLAG_INIT;

static void lock_tables(void)
{
    while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire))
        sched_yield();
}

static void unlock_tables(void)
{
    atomic_flag_clear_explicit(&lock, memory_order_release);
}

/* -------------------------------------------------------------- tables */

/* Live blocks: open addressing, linear probing, backward-shift deletion.
 * A block's home slot keeps the allocator's locality: each 256 bytes of
 * address space has a run of 16 slots (one per 16 bytes, the allocators'
 * alignment) at a hashed place, so blocks made or freed one after the other
 * (a pool's objects, a list's items) share cache lines of the table instead
 * of each missing the cache (exact mode 0.79x on float, paired); runs are
 * 16-aligned, and only 16-byte blocks fill theirs. Short runs: two busy
 * regions hashed to one run spill little into the next. */
static inline size_t home_of(uintptr_t ptr, size_t mask)
{
    return ((size_t)pp_mem_mix(ptr >> 8) << 4 | (size_t)((ptr >> 4) & 15)) & mask;
}

/* size and count: what the block stands for (sampled mode: an estimate) */
typedef pp_memblock block;
static block *blocks;
static size_t nblocks_cap, nblocks;        /* capacity is a power of two */
/* The table and its mask for prefetching a block's slot before the lock is
 * taken (a stale pair prefetches a useless line, harmlessly): in a large
 * table nearly every lookup is a cache miss, overlapped so with the frame
 * read and site lookup that come first. */
static _Atomic(block *) blocks_hint;
static _Atomic size_t mask_hint;

static inline void prefetch_block(uintptr_t ptr)
{
    block *b = atomic_load_explicit(&blocks_hint, memory_order_relaxed);
    size_t mask = atomic_load_explicit(&mask_hint, memory_order_relaxed);
    if (b)
        __builtin_prefetch(&b[home_of(ptr, mask)], 1);
}

/* Sites: (code, offset, kind) -> counters. */
static pp_memsite *sites;
static uint32_t *site_slots;               /* open addressing: site index + 1, 0 empty */
static size_t nsites, sites_cap, slots_cap;

static pp_meminfo totals;
/* Bytes per site at the traced peak, kept lazily (memray's way): a peak ends
 * at the first free after a new maximum (peak_index counts them); a site
 * touched after that first saves what it had then, which is what it had at
 * the peak, since nothing touched it in between. */
static uint64_t peak_index;
static int rising;                         /* a new maximum since the last peak ended */

static inline void settle_peak(pp_memsite *st)
{
    if (st->seen_peak != peak_index) {
        st->at_peak = st->alloc_bytes - st->free_bytes;
        st->seen_peak = peak_index;
    }
}
static uint64_t threads_gen;               /* the thread records of this run (threads.h) */
static uint64_t interval_max;              /* most traced bytes live in this curve interval */
static uint64_t window_max;                /* most traced bytes live since pp_memory_window */
static uint32_t interval_site;             /* ... reached by an allocation at this site */

static int grow_blocks(void)
{
    size_t ncap = nblocks_cap ? nblocks_cap * 2 : 1 << 16;
    block *nb = pp_mem_map(ncap * sizeof *nb);
    if (nb == NULL)
        return -1;
    for (size_t i = 0; i < nblocks_cap; i++) {
        if (blocks[i].ptr == 0)
            continue;
        size_t j = home_of(blocks[i].ptr, ncap - 1);
        while (nb[j].ptr != 0)
            j = (j + 1) & (ncap - 1);
        nb[j] = blocks[i];
    }
    if (blocks)
        munmap(blocks, nblocks_cap * sizeof *blocks);
    blocks = nb;
    nblocks_cap = ncap;
    atomic_store_explicit(&mask_hint, 0, memory_order_relaxed);
    atomic_store_explicit(&blocks_hint, nb, memory_order_relaxed);
    atomic_store_explicit(&mask_hint, ncap - 1, memory_order_relaxed);
    return 0;
}

/* Sampled mode: how many tracked blocks hash to each slot, read without the
 * lock on every free, so that the many frees of unsampled blocks skip it. A
 * block's free follows its allocation through the program's own hand-off. */
#define FILTER_BITS 16
static _Atomic uint32_t filter[1 << FILTER_BITS];
static int64_t sample_every;               /* 0: every block (exact mode) */

static inline _Atomic uint32_t *filter_slot(uintptr_t ptr)
{
    return &filter[pp_mem_mix(ptr) >> (64 - FILTER_BITS)];
}

/* Exact mode keeps small blocks by page (memory_blocks.c: no probing, denser
 * cache lines), the rest here; a block's place follows from its address and
 * size, so a block put back after a failed realloc goes where it was. */
static uint32_t temporary;                 /* --temporary: count holds a number */
static size_t nhashed;                     /* blocks in this table */

static inline int paged_mode(void)
{
    return !sample_every && !temporary;
}

static void block_put(uintptr_t ptr, uint32_t site, uint64_t size, uint32_t count)
{
    if (paged_mode()) {
        int put = pp_paged_put(ptr, site, size);
        if (put) {
            nblocks += put == 1;
            return;
        }
    }
    if ((nhashed + 1) * 10 > nblocks_cap * 7 && grow_blocks() < 0) {
        totals.dropped++;           /* counted, but its free will not be: stays "live" */
        return;
    }
    size_t i = home_of(ptr, nblocks_cap - 1);
    while (blocks[i].ptr != 0 && blocks[i].ptr != ptr)
        i = (i + 1) & (nblocks_cap - 1);
    if (blocks[i].ptr == 0) {
        nblocks++;
        nhashed++;
        if (sample_every)
            atomic_fetch_add_explicit(filter_slot(ptr), 1, memory_order_relaxed);
    }
    blocks[i] = (block){ptr, site, count, size};
}

static int block_take(uintptr_t ptr, block *out)
{
    if (paged_mode() && pp_paged_take(ptr, &out->site, &out->size)) {
        out->ptr = ptr;
        out->count = 1;
        nblocks--;
        return 1;
    }
    if (nhashed == 0)
        return 0;
    size_t mask = nblocks_cap - 1, i = home_of(ptr, mask);
    while (blocks[i].ptr != ptr) {
        if (blocks[i].ptr == 0)
            return 0;
        i = (i + 1) & mask;
    }
    *out = blocks[i];
    /* backward shift: move later entries of the run into the hole when their
     * home slot is not between the hole and themselves */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; blocks[j].ptr != 0; j = (j + 1) & mask) {
        size_t home = home_of(blocks[j].ptr, mask);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            blocks[hole] = blocks[j];
            hole = j;
        }
    }
    blocks[hole].ptr = 0;
    nblocks--;
    nhashed--;
    if (sample_every)
        atomic_fetch_sub_explicit(filter_slot(ptr), 1, memory_order_relaxed);
    return 1;
}

static inline uint64_t site_hash(uintptr_t code, uint32_t offset, uint32_t kind, uint32_t stack)
{
    return pp_mem_mix(code ^ ((uint64_t)offset << 48 | kind) ^ ((uint64_t)stack << 24));
}

/* Allocation stacks: distinct (code, offset) sequences, innermost first, each
 * code object held (a stack may outlive its frames), with --native the
 * native stack too (instruction pointers, leaf first: native[nstart..]). */
#define STACK_MAX 64                        /* innermost frames kept */
#define NATIVE_MAX 128                      /* innermost native frames kept */
typedef struct { uintptr_t code; uint32_t offset; uint32_t entry; } sframe;
/* held: its code objects referenced; 0 for one read without the GIL (C code's
 * block, a thread that released it), checked when read (pp_memory_stacks) */
typedef struct { uint64_t hash; uint32_t start, depth, nstart, nnative, held; } sentry;
static sentry *stacks;
static uint32_t *stack_slots;               /* stack id + 1, 0 empty */
static sframe *sframes;
static uintptr_t *snative;
static size_t nstacks, stacks_cap, sslots_cap, nsframes, sframes_cap, nsnative, snative_cap;
static int with_stacks, with_native;

/* A stack as read in a hook: Python frames (entry: where an evaluation-loop
 * call started) and native ones. */
typedef struct {
    uintptr_t codes[STACK_MAX];
    uint32_t offsets[STACK_MAX];
    uint8_t entries[STACK_MAX];
    uintptr_t ips[NATIVE_MAX];
    int depth, nn;
} rawstack;

static int regrow(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : first;
    while (ncap < need)
        ncap *= 2;
    void *np = pp_mem_map(ncap * elem);
    if (np == NULL)
        return -1;
    if (*p) {
        memcpy(np, *p, *cap * elem);
        munmap(*p, *cap * elem);
    }
    *p = np;
    *cap = ncap;
    return 0;
}

static uint64_t stack_hash(const rawstack *r)
{
    uint64_t h = (uint64_t)r->depth | (uint64_t)r->nn << 32;
    for (int i = 0; i < r->depth; i++)
        h = pp_mem_mix(h ^ r->codes[i] ^ ((uint64_t)r->offsets[i] << 40)
                ^ ((uint64_t)r->entries[i] << 63));
    for (int i = 0; i < r->nn; i++)
        h = pp_mem_mix(h ^ r->ips[i]);
    return h;
}

static int same_stack(const sentry *e, const rawstack *r, uint64_t h)
{
    if (e->hash != h || e->depth != (uint32_t)r->depth || e->nnative != (uint32_t)r->nn)
        return 0;
    for (int i = 0; i < r->depth; i++) {
        const sframe *f = &sframes[e->start + i];
        if (f->code != r->codes[i] || f->offset != r->offsets[i] || f->entry != r->entries[i])
            return 0;
    }
    return r->nn == 0 || memcmp(snative + e->nstart, r->ips, (size_t)r->nn * sizeof *r->ips) == 0;
}

/* held (GIL held, r read from the running frames, or no Python frames): a
 * stack found or added has its code objects held. */
static void hold_stack(sentry *e)
{
    for (uint32_t i = 0; i < e->depth; i++)
        Py_INCREF((PyObject *)sframes[e->start + i].code);
    e->held = 1;
}

/* The id of this stack, added if new; UINT32_MAX when out of memory. Tables
 * locked. */
static uint32_t stack_of(const rawstack *r, uint64_t h, int held)
{
    int n = r->depth;
    if ((nstacks + 1) * 2 > sslots_cap) {
        size_t ncap = sslots_cap ? sslots_cap * 2 : 4096;
        uint32_t *ns = pp_mem_map(ncap * sizeof *ns);
        if (ns == NULL)
            return UINT32_MAX;
        for (size_t k = 0; k < nstacks; k++) {
            size_t j = stacks[k].hash & (ncap - 1);
            while (ns[j])
                j = (j + 1) & (ncap - 1);
            ns[j] = (uint32_t)k + 1;
        }
        if (stack_slots)
            munmap(stack_slots, sslots_cap * sizeof *stack_slots);
        stack_slots = ns;
        sslots_cap = ncap;
    }
    size_t mask = sslots_cap - 1, j = h & mask;
    for (; stack_slots[j]; j = (j + 1) & mask)
        if (same_stack(&stacks[stack_slots[j] - 1], r, h)) {
            if (held && !stacks[stack_slots[j] - 1].held)
                hold_stack(&stacks[stack_slots[j] - 1]);     /* the same codes, running */
            return stack_slots[j] - 1;
        }
    if (regrow((void **)&stacks, &stacks_cap, nstacks + 1, sizeof *stacks, 1024) < 0
        || regrow((void **)&sframes, &sframes_cap, nsframes + (size_t)n, sizeof *sframes,
                  16384) < 0
        || regrow((void **)&snative, &snative_cap, nsnative + (size_t)r->nn, sizeof *snative,
                  16384) < 0)
        return UINT32_MAX;
    for (int i = 0; i < n; i++)
        sframes[nsframes + i] = (sframe){r->codes[i], r->offsets[i], r->entries[i]};
    if (r->nn)
        memcpy(snative + nsnative, r->ips, (size_t)r->nn * sizeof *r->ips);
    stacks[nstacks] = (sentry){h, (uint32_t)nsframes, (uint32_t)n, (uint32_t)nsnative,
                               (uint32_t)r->nn, 0};
    if (held)
        hold_stack(&stacks[nstacks]);
    nsframes += (size_t)n;
    nsnative += (size_t)r->nn;
    stack_slots[j] = (uint32_t)nstacks + 1;
    return (uint32_t)nstacks++;
}

static int grow_sites(void)
{
    size_t ncap = sites_cap ? sites_cap * 2 : 4096;
    pp_memsite *ns = pp_mem_map(ncap * sizeof *ns);
    uint32_t *nslots = pp_mem_map(ncap * 2 * sizeof *nslots);
    if (ns == NULL || nslots == NULL) {
        if (ns)
            munmap(ns, ncap * sizeof *ns);
        if (nslots)
            munmap(nslots, ncap * 2 * sizeof *nslots);
        return -1;
    }
    if (nsites)
        memcpy(ns, sites, nsites * sizeof *ns);
    for (size_t k = 0; k < nsites; k++) {
        size_t j = site_hash(ns[k].code, ns[k].offset, ns[k].kind, ns[k].stack) & (ncap * 2 - 1);
        while (nslots[j] != 0)
            j = (j + 1) & (ncap * 2 - 1);
        nslots[j] = (uint32_t)k + 1;
    }
    if (sites) {
        munmap(sites, sites_cap * sizeof *sites);
        munmap(site_slots, slots_cap * sizeof *site_slots);
    }
    sites = ns;
    site_slots = nslots;
    sites_cap = ncap;
    slots_cap = ncap * 2;
    return 0;
}

/* The site's index, created if new (*created set). UINT32_MAX if out of memory. */
static uint32_t site_of(uintptr_t code, uint32_t offset, uint32_t kind, uint32_t stack,
                        int *created)
{
    *created = 0;
    if (nsites == sites_cap && grow_sites() < 0)
        return UINT32_MAX;
    size_t mask = slots_cap - 1;
    size_t j = site_hash(code, offset, kind, stack) & mask;
    for (; site_slots[j] != 0; j = (j + 1) & mask) {
        pp_memsite *s = &sites[site_slots[j] - 1];
        if (s->code == code && s->offset == offset && s->kind == kind && s->stack == stack)
            return site_slots[j] - 1;
    }
    uint32_t k = (uint32_t)nsites++;
    sites[k] = (pp_memsite){.code = code, .offset = offset, .kind = kind, .stack = stack};
    site_slots[j] = k + 1;
    *created = 1;
    return k;
}

/* ------------------------------------------------------------- accounting */

/* Sampled mode: every allocated byte is picked with probability 1/R, through a
 * per-thread countdown of bytes drawn from an exponential distribution of mean
 * R (memoryless: after a pick, a fresh draw is exact). A block of s bytes is
 * picked with probability 1 - exp(-s/R) and then stands for s / (1 - exp(-s/R))
 * bytes and 1 / (1 - exp(-s/R)) blocks, which makes every estimate unbiased. */
static _Atomic uint64_t run_gen;
static __thread struct { uint64_t gen, rng; int64_t countdown; } s_pick
    __attribute__((tls_model("initial-exec")));

static int64_t draw_gap(void)
{
    uint64_t x = s_pick.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s_pick.rng = x;
    double u = (double)(((x * 0x2545F4914F6CDD1Dull) >> 11) + 1) * 0x1.0p-53;    /* (0, 1] */
    return (int64_t)(-(double)sample_every * log(u)) + 1;
}

/* Whether this block is recorded, and what it stands for. */
static inline int picked(size_t size, uint64_t *bytes, uint32_t *count)
{
    if (!sample_every) {
        *bytes = size;
        *count = 1;
        return 1;
    }
    uint64_t gen = atomic_load_explicit(&run_gen, memory_order_relaxed);
    if (s_pick.gen != gen) {
        s_pick.gen = gen;
        s_pick.rng = pp_mem_mix((uintptr_t)&s_pick ^ gen * 0x9E3779B97F4A7C15ull) | 1;
        s_pick.countdown = draw_gap();
    }
    s_pick.countdown -= (int64_t)size;
    if (s_pick.countdown > 0)
        return 0;
    s_pick.countdown = draw_gap();
    double p = -expm1(-(double)size / (double)sample_every);   /* 1 - exp(-s/R) */
    *bytes = (uint64_t)((double)size / p + 0.5);
    double c = 1.0 / p + 0.5;
    *count = c > 4e9 ? 4000000000u : (uint32_t)c;
    return 1;
}

/* Temporary allocations: a thread's recorded allocations are numbered; a
 * block freed by the thread that made it, fewer than `temporary` of its
 * allocations later, is temporary (memray's definition). */
#define SEQ_BITS 24                         /* the number, modulo 2**24 */
#define SEQ_MASK ((1u << SEQ_BITS) - 1)
static _Atomic uint32_t next_tag;
static __thread struct { uint64_t gen; uint32_t tag, n; } s_seq
    __attribute__((tls_model("initial-exec")));

/* A thread's tag (8 bits: threads 256 apart share one, and are told apart by
 * their numbers, which would also have to fall within N) and number. */
static inline uint32_t next_seq(void)
{
    uint64_t gen = atomic_load_explicit(&run_gen, memory_order_relaxed);
    if (s_seq.gen != gen) {
        s_seq.gen = gen;
        s_seq.tag = (atomic_fetch_add_explicit(&next_tag, 1, memory_order_relaxed) & 0xFF) + 1;
        s_seq.n = 0;
    }
    return (s_seq.tag & 0xFF) << SEQ_BITS | (++s_seq.n & SEQ_MASK);
}

static inline int is_temporary(const block *b)
{
    return temporary && s_seq.gen == atomic_load_explicit(&run_gen, memory_order_relaxed)
           && (s_seq.tag & 0xFF) == b->count >> SEQ_BITS
           && ((s_seq.n - b->count) & SEQ_MASK) < temporary;
}

/* Blocks an entry stands for (its count holds a number with --temporary). */
static inline uint32_t blocks_of(const block *b)
{
    return temporary ? 1 : b->count;
}

static void note_alloc(void *ptr, size_t size, uint32_t src)
{
    uint64_t est;
    uint32_t est_count;
    if (!picked(size, &est, &est_count))
        return;
    if (!paged_mode() || size > PP_PAGED_MAX)
        prefetch_block((uintptr_t)ptr);
    size = est;
    uintptr_t code = 0;
    uint32_t offset = 0, kind;
    rawstack r;
    int attached, aside = 0;
    uint64_t sh = 0;
    r.depth = r.nn = 0;
    if (with_stacks) {
        r.depth = pp_frames_stack(r.codes, r.offsets, r.entries, STACK_MAX);
        attached = r.depth > 0;
        if (attached) {
            code = r.codes[0];
            offset = r.offsets[0];
        }
        for (int i = 0; !with_native && i < r.depth; i++)
            r.entries[i] = 0;           /* where stacks merge: only with native frames */
    }
    else
        attached = pp_frames_current(&code, &offset);
    if (attached && pp_threads_self_paused())
        return;                     /* the CLI runner's own work (waiting for threads) */
    if (attached)
        kind = PP_MEM_LINE;
    else {
        int att;
        PyThreadState *ts = pp_signal_tstate(&att);
        kind = ts && att ? PP_MEM_NO_FRAME : PP_MEM_DETACHED;
        pp_rawframe f[STACK_MAX];
        int cut, nf;
        /* C code called from a Python line that released the GIL (ctypes,
         * sqlite3, zlib): that line (and its stack), read from the thread's
         * own frames, which cannot change while it runs C code. No reference
         * can be taken without the GIL: the site and the stack hold none (see
         * pp_memory_rows, pp_memory_stacks). */
        if (src && ts && !att
            && (nf = pp_frames_walk_own(ts, f, with_stacks ? STACK_MAX : 1, &cut)) >= 1) {
            kind = PP_MEM_LINE;
            code = f[0].code;
            offset = f[0].offset;
            aside = 1;              /* the line's thread counts it, later (threads.h) */
            for (int i = 0; with_stacks && i < nf; i++) {
                r.codes[i] = f[i].code;
                r.offsets[i] = f[i].offset;
                r.entries[i] = with_native && (f[i].flags & PP_RAW_ENTRY);
            }
            if (with_stacks)
                r.depth = nf;
        }
    }
    kind |= src;
    /* --native: C code's blocks, and every picked one in sampled mode (an
     * unwind per Python block made exact mode with stacks 1.7-2.5x slower);
     * pp_mem_self is set: what libunwind allocates passes through */
    if (with_native && (src || sample_every))
        r.nn = pp_unwind_here(r.ips, NATIVE_MAX);
    if (r.depth || r.nn)
        sh = stack_hash(&r);
    /* what the entry keeps in count: exact mode with --temporary, one block */
    uint32_t stored = temporary ? next_seq() : est_count;
    lock_tables();
    if (atomic_load_explicit(&recording, memory_order_relaxed)) {
        int created;
        uint32_t stack = r.depth || r.nn ? stack_of(&r, sh, !aside) : UINT32_MAX;
        uint32_t k = site_of(code, offset, kind, stack, &created);
        if (k == UINT32_MAX)
            totals.dropped++;       /* no room for a new site: not counted at all */
        else {
            pp_memsite *st = &sites[k];
            if (code && attached && !st->held) {
                Py_INCREF((PyObject *)code);   /* attached: the GIL is ours; dropped in clear */
                st->held = 1;
            }
            if (created)
                st->seen_peak = peak_index;     /* made after the last peak: 0 there */
            settle_peak(st);
            st->alloc_bytes += size;
            st->alloc_count += est_count;
            if (st->alloc_bytes - st->free_bytes > st->peak_bytes)
                st->peak_bytes = st->alloc_bytes - st->free_bytes;
            block_put((uintptr_t)ptr, k, size, stored);
            totals.allocated += size;
            totals.current += size;
            if (totals.current > totals.peak) {
                totals.peak = totals.current;
                rising = 1;
            }
            if (totals.current > interval_max) {
                interval_max = totals.current;
                interval_site = k;
            }
            if (totals.current > window_max)
                window_max = totals.current;
            if (aside)
                pp_threads_mem_aside(threads_gen, (int64_t)size, (int64_t)size, est_count);
        }
    }
    unlock_tables();
    if (attached)
        pp_threads_mem_delta((int64_t)size, (int64_t)size, est_count);
}

/* Takes the block out of the table; 1 if it was there (*b filled). */
/* Sampled mode: a pointer whose filter slot is empty was never picked. */
static inline int surely_untracked(void *ptr)
{
    return sample_every
           && atomic_load_explicit(filter_slot((uintptr_t)ptr), memory_order_relaxed) == 0;
}

static int take_block(void *ptr, block *b)
{
    if (surely_untracked(ptr))
        return 0;                   /* no lock */
    lock_tables();
    int had = atomic_load_explicit(&recording, memory_order_relaxed)
              && block_take((uintptr_t)ptr, b);
    if (!had && !sample_every && atomic_load_explicit(&recording, memory_order_relaxed))
        totals.unknown_frees++;
    unlock_tables();
    return had;
}

/* Tables locked, recording: a block of C code's charged to a line, freed by
 * a thread without the GIL, is set aside for that thread (1), as its making
 * was; else 0: the caller tells the thread, as for Python's blocks. */
static int aside_free_locked(const block *b)
{
    int att;
    if (b->site >= nsites || sites[b->site].kind != (PP_MEM_LINE | PP_MEM_NATIVE)
        || (pp_signal_tstate(&att) && att))
        return 0;
    pp_threads_mem_aside(threads_gen, -(int64_t)b->size, 0, 0);
    return 1;
}

/* Charges a freed block to its site (freed: by free, not moved by realloc).
 * Tables locked. */
static void charge_locked(const block *b, int freed)
{
    if (!atomic_load_explicit(&recording, memory_order_relaxed) || b->site >= nsites)
        return;
    if (freed && is_temporary(b)) {
        sites[b->site].temp_bytes += b->size;
        sites[b->site].temp_count++;
    }
    if (rising) {                           /* the first free after a maximum: a peak */
        peak_index++;
        rising = 0;
    }
    settle_peak(&sites[b->site]);
    sites[b->site].free_bytes += b->size;
    sites[b->site].free_count += blocks_of(b);
    totals.current -= b->size;
}

static void charge_free(const block *b)
{
    lock_tables();
    int aside = atomic_load_explicit(&recording, memory_order_relaxed) && aside_free_locked(b);
    charge_locked(b, 0);
    unlock_tables();
    if (!aside)
        pp_threads_mem_delta(-(int64_t)b->size, 0, 0);
}

/* A block freed (taken out and charged under one lock). */
static void release_block(void *ptr)
{
    block b;
    if (surely_untracked(ptr))
        return;                     /* no lock */
    lock_tables();
    int had = atomic_load_explicit(&recording, memory_order_relaxed)
              && block_take((uintptr_t)ptr, &b);
    int aside = had && aside_free_locked(&b);
    if (had)
        charge_locked(&b, 1);
    else if (!sample_every && atomic_load_explicit(&recording, memory_order_relaxed))
        totals.unknown_frees++;
    unlock_tables();
    if (had && !aside)
        pp_threads_mem_delta(-(int64_t)b.size, 0, 0);
}

static void put_back(void *ptr, const block *b)
{
    lock_tables();
    if (atomic_load_explicit(&recording, memory_order_relaxed))
        block_put((uintptr_t)ptr, b->site, b->size, b->count);
    unlock_tables();
}

void pp_memory_forget(PyObject *obj)
{
    if (!atomic_load_explicit(&recording, memory_order_relaxed) || surely_untracked(obj))
        return;
    block b;
    int had;
    lock_tables();
    had = block_take((uintptr_t)obj, &b);
    if (had && b.site < nsites) {
        settle_peak(&sites[b.site]);
        sites[b.site].alloc_bytes -= b.size;
        sites[b.site].alloc_count -= blocks_of(&b);
        totals.allocated -= b.size;
        totals.current -= b.size;
    }
    unlock_tables();
    if (had)
        pp_threads_mem_delta(-(int64_t)b.size, -(int64_t)b.size, -(int64_t)blocks_of(&b));
}

/* ---------------------------------------------------------------- hooks */

/* Set around a test allocation: did it pass through our hook of each domain? */
static __thread int probing __attribute__((tls_model("initial-exec")));
static __thread int probe_hit __attribute__((tls_model("initial-exec")));

static inline int pass_through(int d)
{
    if (probing) {
        if (d >= 0)
            probe_hit |= 1 << d;
        return 1;
    }
    /* acquire: what start() set before recording (sample_every) is visible */
    return pp_mem_self || !atomic_load_explicit(&recording, memory_order_acquire);
}

/* After a realloc below: the old block (taken out before, b; NULL if it was
 * not tracked) is back if the realloc failed, else freed and the new one made
 * on this line. */
static void realloc_done(void *old, void *ptr, size_t size, const block *b, uint32_t src)
{
    if (ptr == NULL) {
        if (b)
            put_back(old, b);              /* failed: the old block is still there */
        return;
    }
    if (b)
        charge_free(b);
    note_alloc(ptr, size, src);
}

static void *do_malloc(int d, size_t size)
{
    if (pass_through(d))
        return below[d].malloc(below[d].ctx, size);
    pp_mem_self = 1;
    void *ptr = below[d].malloc(below[d].ctx, size);
    if (ptr)
        note_alloc(ptr, size, 0);
    pp_mem_self = 0;
    return ptr;
}

static void *do_calloc(int d, size_t nelem, size_t elsize)
{
    if (pass_through(d))
        return below[d].calloc(below[d].ctx, nelem, elsize);
    pp_mem_self = 1;
    void *ptr = below[d].calloc(below[d].ctx, nelem, elsize);
    if (ptr)
        note_alloc(ptr, nelem * elsize, 0);   /* the PyMem_*Calloc callers checked overflow */
    pp_mem_self = 0;
    return ptr;
}

static void *do_realloc(int d, void *old, size_t size)
{
    if (pass_through(d))
        return below[d].realloc(below[d].ctx, old, size);
    pp_mem_self = 1;
    block b;
    int had = old != NULL && take_block(old, &b);
    void *ptr = below[d].realloc(below[d].ctx, old, size);
    realloc_done(old, ptr, size, had ? &b : NULL, 0);
    pp_mem_self = 0;
    return ptr;
}

static void do_free(int d, void *ptr)
{
    if (ptr != NULL && !pass_through(d)) {
        pp_mem_self = 1;
        release_block(ptr);
        pp_mem_self = 0;
    }
    below[d].free(below[d].ctx, ptr);
}

#define DOMAIN_HOOKS(name, d)                                                         \
    static void *name##_malloc(void *ctx, size_t n) { (void)ctx; return do_malloc(d, n); } \
    static void *name##_calloc(void *ctx, size_t n, size_t e)                         \
    { (void)ctx; return do_calloc(d, n, e); }                                         \
    static void *name##_realloc(void *ctx, void *p, size_t n)                         \
    { (void)ctx; return do_realloc(d, p, n); }                                        \
    static void name##_free(void *ctx, void *p) { (void)ctx; do_free(d, p); }
DOMAIN_HOOKS(raw, DOM_RAW)
DOMAIN_HOOKS(mem, DOM_MEM)
DOMAIN_HOOKS(obj, DOM_OBJ)

static void install(void)
{
    ours[DOM_RAW] = (PyMemAllocatorEx){NULL, raw_malloc, raw_calloc, raw_realloc, raw_free};
    ours[DOM_MEM] = (PyMemAllocatorEx){NULL, mem_malloc, mem_calloc, mem_realloc, mem_free};
    ours[DOM_OBJ] = (PyMemAllocatorEx){NULL, obj_malloc, obj_calloc, obj_realloc, obj_free};
    for (int d = 0; d < NDOM; d++)
        PyMem_GetAllocator(domain_id[d], &below[d]);
    for (int d = 0; d < NDOM; d++)
        PyMem_SetAllocator(domain_id[d], &ours[d]);
    installed = 1;
}

/* A detach (GIL held, not recording): the allocators found at install back, unless a
 * hook sits above ours (then kept, forwarding). 1 done, 0 kept. */
int pp_memory_uninstall(void)
{
    PyMemAllocatorEx cur;
    for (int d = 0; d < NDOM && installed; d++)
        if (PyMem_GetAllocator(domain_id[d], &cur), cur.malloc != ours[d].malloc)
            return 0;
    for (int d = 0; d < NDOM && installed; d++)
        PyMem_SetAllocator(domain_id[d], &below[d]);
    installed = 0;
    return 1;
}

/* Domains whose allocations still reach our hooks: ours may be on top, or
 * below another hook installed since (tracemalloc started after us). */
static int reached_domains(void)
{
    probing = 1;
    probe_hit = 0;
    PyMem_RawFree(PyMem_RawMalloc(8));
    PyMem_Free(PyMem_Malloc(8));
    PyObject_Free(PyObject_Malloc(8));
    probing = 0;
    return probe_hit;
}

/* For the NumPy handler (memory_numpy.c): the hooks' steps, out of line. */
int pp_memory_pass_through(int d) { return pass_through(d); }
void pp_memory_note_alloc(void *ptr, size_t size, uint32_t src) { note_alloc(ptr, size, src); }
int pp_memory_take_block(void *ptr, pp_memblock *b) { return take_block(ptr, b); }
void pp_memory_realloc_done(void *old, void *ptr, size_t size, const pp_memblock *b,
                            uint32_t src)
{
    realloc_done(old, ptr, size, b, src);
}
void pp_memory_release_block(void *ptr) { release_block(ptr); }

void pp_memory_interval_take(uint64_t *heap, uint64_t *heap_max, uint32_t *site)
{
    lock_tables();
    if (heap) {
        *heap = totals.current;
        *heap_max = interval_max > totals.current ? interval_max : totals.current;
        *site = interval_site;
        interval_max = totals.current;
    }
    else
        interval_max = 0;
    interval_site = UINT32_MAX;
    unlock_tables();
}

int pp_memory_window(uint64_t *current, uint64_t *peak)
{
    if (!atomic_load(&recording) || sample_every)
        return -1;
    lock_tables();
    *current = totals.current;
    *peak = window_max > totals.current ? window_max : totals.current;
    window_max = totals.current;
    unlock_tables();
    return 0;
}

/* ------------------------------------------------------------ control */

/* The recording's own part of start (memory_control.c starts the rest). */
void pp_memory_record_begin(pp_memstate *p)
{
    if (!installed)
        install();                 /* once: allocators found later are above ours */
    else {
        /* A hook installed before ours and stopped since (tracemalloc) put
         * back what it found, unlinking ours: link ours again on top. Nothing
         * calls the unlinked ones, so what lies below them can change. */
        int reached = reached_domains();
        for (int d = 0; d < NDOM; d++) {
            if (reached & (1 << d))
                continue;
            PyMem_GetAllocator(domain_id[d], &below[d]);
            PyMem_SetAllocator(domain_id[d], &ours[d]);
        }
    }
    pp_mem_forget_hook = pp_memory_forget;
    pp_memory_clear();
    sample_every = p->sample;
    with_stacks = p->stacks;
    with_native = p->stacks && p->native_stacks && pp_unwind_available();
    if (with_native)
        pp_unwind_init_self();
    temporary = p->temporary;
    lock_tables();
    threads_gen = pp_threads_active_gen();  /* read by the hooks under the lock */
    unlock_tables();
    atomic_fetch_add(&run_gen, 1);      /* fresh countdowns and seeds */
    atomic_store(&recording, 1);
}

/* The recording's own part of stop: the hooks stop counting. */
void pp_memory_record_end(void)
{
    int reached = reached_domains();  /* before: a probe while recording would count */
    lock_tables();
    totals.linked = reached == (1 << NDOM) - 1;
    atomic_store(&recording, 0);
    unlock_tables();
}

/* A start that failed after pp_memory_record_begin. */
void pp_memory_record_abort(void)
{
    atomic_store(&recording, 0);
    pp_memory_clear();
}

/* fork: the tables' lock held across it (memory_control.c's atfork handlers). */
void pp_memory_tables_lock(void) { lock_tables(); }
void pp_memory_tables_unlock(void) { unlock_tables(); }

int pp_memory_recording(void)
{
    return atomic_load(&recording);
}

int pp_memory_rows(pp_memstate *p, pp_memrow **out, uint32_t *nout, pp_meminfo *info)
{
    uint32_t n;
    pp_memsite *s = pp_memory_sites(&n, info);
    pp_memrow *rows = malloc((n ? n : 1) * sizeof *rows);
    if (s == NULL || rows == NULL) {
        free(s);
        free(rows);
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t fid = PP_NONE, line = 0, kind = s[i].kind;
        if (s[i].code && !s[i].held && !pp_frames_code_alive(s[i].code))
            kind = PP_MEM_DETACHED | (kind & PP_MEM_NATIVE);    /* its code is gone */
        else if (s[i].code) {
            PyObject *code = (PyObject *)s[i].code;
            fid = pp_registry_code(p->reg, code);
            int l = s[i].offset < (uint32_t)Py_SIZE(code)
                    ? PyCode_Addr2Line((PyCodeObject *)code, (int)(s[i].offset * 2)) : -1;
            line = l < 0 ? 0 : (uint32_t)l;
            if (fid == PP_NONE && pp_registry_own(p->reg, s[i].code)) {
                kind = PP_MEM_NO_FRAME | (kind & PP_MEM_NATIVE);   /* pyprof's own code */
                line = 0;
            }
        }
        rows[i] = (pp_memrow){fid, line, kind,
                              s[i].stack == UINT32_MAX ? PP_NONE : s[i].stack,
                              s[i].alloc_bytes, s[i].alloc_count, s[i].free_bytes,
                              s[i].free_count, s[i].peak_bytes, s[i].at_peak,
                              s[i].temp_bytes, s[i].temp_count};
    }
    free(s);
    *out = rows;
    *nout = n;
    return 0;
}

void pp_memstacks_free(pp_memstacks *s)
{
    free(s->frames);
    free(s->start);
    free(s->depth);
    free(s->native);
    free(s->nstart);
    free(s->nnative);
    memset(s, 0, sizeof *s);
}

int pp_memory_stacks(pp_memstate *p, pp_memstacks *out)
{
    memset(out, 0, sizeof *out);
    lock_tables();
    size_t n = nstacks, nf = nsframes, nn = nsnative;
    sframe *copy = malloc((nf ? nf : 1) * sizeof *copy);
    sentry *ents = malloc((n ? n : 1) * sizeof *ents);
    uintptr_t *ips = malloc((nn ? nn : 1) * sizeof *ips);
    if (copy && ents && ips) {
        if (nf)
            memcpy(copy, sframes, nf * sizeof *copy);
        if (n)
            memcpy(ents, stacks, n * sizeof *ents);
        if (nn)
            memcpy(ips, snative, nn * sizeof *ips);
    }
    unlock_tables();
    size_t nwords = nn;                         /* ips, then a word per entry frame */
    for (size_t k = 0; copy && ents && k < n; k++)
        for (uint32_t i = 0; ents[k].nnative && i < ents[k].depth; i++)
            nwords += copy[ents[k].start + i].entry != 0;
    out->frames = calloc(nf ? nf : 1, sizeof *out->frames);    /* a shortened stack's rest: 0 */
    out->native = malloc((nwords ? nwords : 1) * sizeof *out->native);
    out->start = malloc((n ? n : 1) * sizeof *out->start);
    out->depth = malloc((n ? n : 1) * sizeof *out->depth);
    out->nstart = malloc((n ? n : 1) * sizeof *out->nstart);
    out->nnative = malloc((n ? n : 1) * sizeof *out->nnative);
    if (!copy || !ents || !ips || !out->frames || !out->native || !out->start || !out->depth
        || !out->nstart || !out->nnative) {
        free(copy);
        free(ents);
        free(ips);
        pp_memstacks_free(out);
        PyErr_NoMemory();
        return -1;
    }
    uint32_t w = 0;
    for (size_t k = 0; k < n; k++) {           /* innermost first -> root first */
        sentry *e = &ents[k];
        /* read without the GIL: a code object freed since leaves the stack's
         * Python frames out (its bytes stay at the root); 3.13's shim frames
         * are left out, as pp_frames_stack does */
        uint32_t kept = 0;
        for (uint32_t i = 0; !e->held && i < e->depth; i++) {
            sframe *f = &copy[e->start + i];
            if (!pp_frames_code_alive(f->code)) {
                kept = 0;
                break;
            }
            if (!pp_frames_code_is_shim((PyObject *)f->code))
                copy[e->start + kept++] = *f;
        }
        if (!e->held)
            e->depth = kept;
        out->start[k] = e->start;
        out->depth[k] = e->depth;
        out->nstart[k] = w;
        for (uint32_t i = 0; i < e->nnative; i++)
            out->native[w++] = ips[e->nstart + i];
        uint32_t shown = 0;
        for (uint32_t i = 0; i < e->depth; i++) {
            const sframe *f = &copy[e->start + e->depth - 1 - i];
            PyObject *code = (PyObject *)f->code;
            uint32_t fid = pp_registry_code(p->reg, code);
            if (fid == PP_NONE && pp_registry_own(p->reg, f->code)) {
                /* pyprof's own frame: the program's stack starts above it */
                shown = 0;
                w = out->nstart[k] + e->nnative;
                continue;
            }
            int l = f->offset < (uint32_t)Py_SIZE(code)
                    ? PyCode_Addr2Line((PyCodeObject *)code, (int)(f->offset * 2)) : -1;
            out->frames[e->start + shown] = (uint64_t)fid << 32 | (uint32_t)(l < 0 ? 0 : l);
            if (e->nnative && f->entry)
                out->native[w++] = PP_MEMSTACK_ENTRY | shown;
            shown++;
        }
        out->depth[k] = shown;
        out->nnative[k] = w - out->nstart[k];
    }
    out->n = (uint32_t)n;
    out->nframes = (uint32_t)nf;
    out->nnative_all = w;
    free(copy);
    free(ents);
    free(ips);
    return 0;
}

pp_memsite *pp_memory_sites(uint32_t *n, pp_meminfo *info)
{
    int linked = !atomic_load(&recording) || reached_domains() == (1 << NDOM) - 1;
    lock_tables();
    *n = (uint32_t)nsites;
    pp_memsite *copy = malloc((nsites ? nsites : 1) * sizeof *copy);
    if (copy && nsites)
        memcpy(copy, sites, nsites * sizeof *copy);
    for (size_t k = 0; copy && k < nsites; k++) {
        /* the run still at its peak (no free since the maximum), or a site
         * not touched since the last peak: what it has now is what it had */
        if (rising || copy[k].seen_peak != peak_index)
            copy[k].at_peak = copy[k].alloc_bytes - copy[k].free_bytes;
    }
    *info = totals;
    info->live_blocks = nblocks;
    if (atomic_load(&recording))
        info->linked = linked;
    unlock_tables();
    return copy;
}

void pp_memory_clear(void)
{
    /* GIL held and not recording (or about to start): no hook touches the tables */
    for (size_t k = 0; k < nsites; k++)
        if (sites[k].code && sites[k].held)
            Py_DECREF((PyObject *)sites[k].code);
    for (size_t k = 0; k < nstacks; k++)
        for (uint32_t i = 0; stacks[k].held && i < stacks[k].depth; i++)
            Py_DECREF((PyObject *)sframes[stacks[k].start + i].code);
    lock_tables();
    nsites = 0;
    window_max = 0;
    nstacks = nsframes = nsnative = 0;
    if (stack_slots)
        memset(stack_slots, 0, sslots_cap * sizeof *stack_slots);
    if (site_slots)
        memset(site_slots, 0, slots_cap * sizeof *site_slots);
    if (blocks)
        memset(blocks, 0, nblocks_cap * sizeof *blocks);
    for (size_t i = 0; i < sizeof filter / sizeof filter[0]; i++)
        atomic_store_explicit(&filter[i], 0, memory_order_relaxed);
    nblocks = nhashed = 0;
    pp_paged_clear();
    memset(&totals, 0, sizeof totals);
    peak_index = 0;
    rising = 0;
    totals.linked = 1;
    unlock_tables();
}
