/* memory.h — allocation hooks: bytes allocated and freed per Python line.
 *
 * Owns: wrappers around the RAW, MEM and OBJ allocators (PyMem_SetAllocator,
 * chained to the allocators found), the table of live blocks (pointer ->
 * site, size) and the per-site counters, all behind one spinlock.
 * Never: calls into Python or takes the GIL inside a hook; allocates from a
 * Python allocator for its own tables (they come from mmap).
 */
#ifndef PP_MEMORY_H
#define PP_MEMORY_H

#include "tracer.h"

/* A site: where blocks were allocated. code == 0: no Python frame (kind says
 * why). Counters in bytes and blocks; net = allocated - freed. */
enum { PP_MEM_LINE = 0, PP_MEM_DETACHED = 1, PP_MEM_NO_FRAME = 2 };
typedef struct {
    uintptr_t code;
    uint32_t offset;
    uint32_t kind;
    uint64_t alloc_bytes, alloc_count, free_bytes, free_count;
} pp_memsite;

typedef struct {
    uint64_t current, peak;             /* bytes traced and live, now and at most */
    uint64_t allocated;                 /* bytes allocated in all */
    uint64_t unknown_frees;             /* frees of blocks allocated before start */
    uint64_t live_blocks;
    int linked;                         /* every domain's allocations still reach our hooks */
} pp_meminfo;

/* What a profiler keeps: a row per site with its function id and line. */
typedef struct {
    uint32_t fid;                       /* PP_NONE for sites without a Python frame */
    uint32_t line;
    uint32_t kind;
    uint64_t alloc_bytes, alloc_count, free_bytes, free_count;
} pp_memrow;

struct pp_memdata {
    pp_memrow *rows;
    uint32_t nrows;
    pp_meminfo info;
};

/* What is being recorded now, resolved to rows (GIL held; malloc'd, the
 * caller frees *rows). Rows of finished runs are in p->mem. */
int pp_memory_rows(pp_profiler *p, pp_memrow **rows, uint32_t *n, pp_meminfo *info);
int pp_memory_recording(void);
void pp_memory_free(pp_profiler *p);

/* Start/stop recording (GIL held). The hooks are installed on first use and
 * stay, forwarding only, when stopped. */
int pp_memory_start(pp_profiler *p);
int pp_memory_stop(pp_profiler *p);
/* A copy of the sites (malloc'd, *n entries; the caller frees it) and the totals. */
pp_memsite *pp_memory_sites(uint32_t *n, pp_meminfo *info);
/* Forget everything recorded (GIL held, not recording). */
void pp_memory_clear(void);

#endif
