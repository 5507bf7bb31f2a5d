/* memory_hooks.h — the allocation hooks' steps, private to memory.c and
 * memory_numpy.c (a second allocator family routed into the same tables),
 * memory_native.c (C code's malloc and mmap), memory_curve.c,
 * memory_runs.c and memory_control.c (start and stop, on top of the others).
 * Never: included outside the memory engine.
 */
#ifndef PP_MEMORY_HOOKS_H
#define PP_MEMORY_HOOKS_H

#include "memory.h"

#define PP_MEM_HIDDEN __attribute__((visibility("hidden")))

/* size and count: what the block stands for (sampled mode: an estimate) */
/* count: blocks the entry stands for (sampled mode: an estimate); with
 * --temporary (exact mode: always one block) the allocating thread's tag and
 * allocation number instead. 24 bytes: the table's size is the hooks' cost. */
typedef struct { uintptr_t ptr; uint32_t site; uint32_t count; uint64_t size; } pp_memblock;

/* The engine's tables live in anonymous mappings, never in malloc's heap
 * (memory_blocks.c). */
PP_MEM_HIDDEN void *pp_mem_map(size_t bytes);       /* zeroed; NULL if refused */

static inline uint64_t pp_mem_mix(uint64_t x)       /* a 64-bit finalizer (hashing) */
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Exact mode's small blocks (memory_blocks.c), kept by page; tables locked.
 * put: 0 not kept here (too large, unaligned, out of memory: the caller's
 * table keeps it), 1 added, 2 replaced one at the same address. take: 1 if
 * it was there (*site, *size filled). */
#define PP_PAGED_MAX 512
PP_MEM_HIDDEN int pp_paged_put(uintptr_t ptr, uint32_t site, uint64_t size);
PP_MEM_HIDDEN int pp_paged_take(uintptr_t ptr, uint32_t *site, uint64_t *size);
PP_MEM_HIDDEN void pp_paged_clear(void);

/* 1: let this allocation of domain d (-1: none) through unrecorded. */
PP_MEM_HIDDEN int pp_memory_pass_through(int d);
/* src: 0 for a Python allocator (NumPy's handler too), PP_MEM_NATIVE for C code. */
PP_MEM_HIDDEN void pp_memory_note_alloc(void *ptr, size_t size, uint32_t src);
/* Take a block out of the live table (1 if it was there). */
PP_MEM_HIDDEN int pp_memory_take_block(void *ptr, pp_memblock *b);
/* After a realloc below (b: the old block taken out before, or NULL). */
PP_MEM_HIDDEN void pp_memory_realloc_done(void *old, void *ptr, size_t size,
                                          const pp_memblock *b, uint32_t src);
/* A block freed (a temporary one if freed soon enough by its own thread). */
PP_MEM_HIDDEN void pp_memory_release_block(void *ptr);

/* For the curve (memory_curve.c): the traced bytes now and at most since the
 * last call, and the site that reached that most; all NULL: start afresh. */
PP_MEM_HIDDEN void pp_memory_interval_take(uint64_t *heap, uint64_t *heap_max, uint32_t *site);
PP_MEM_HIDDEN void pp_curve_start(void);
PP_MEM_HIDDEN void pp_curve_stop(void);
PP_MEM_HIDDEN void pp_curve_lock(void);
PP_MEM_HIDDEN void pp_curve_unlock(void);
PP_MEM_HIDDEN void pp_curve_after_fork_child(void);
/* The stopped run's rows, stacks and curve kept with p (memory_runs.c). */
PP_MEM_HIDDEN int pp_memory_keep_run(pp_memstate *p);
/* memory.c's part of start and stop, called by memory_control.c only. */
PP_MEM_HIDDEN void pp_memory_record_begin(pp_memstate *p);
PP_MEM_HIDDEN void pp_memory_record_end(void);
PP_MEM_HIDDEN void pp_memory_record_abort(void);
PP_MEM_HIDDEN void pp_memory_tables_lock(void);
PP_MEM_HIDDEN void pp_memory_tables_unlock(void);
/* This run's curve (rows: its sites) after the earlier runs' in m. */
PP_MEM_HIDDEN void pp_curve_keep(struct pp_memdata *m, const pp_memrow *rows, uint32_t n);

#endif
