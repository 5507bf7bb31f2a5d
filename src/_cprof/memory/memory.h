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

#include "registry.h"

/* A site: where blocks were allocated. code == 0: no Python frame (kind says
 * why); the PP_MEM_NATIVE bit of kind: blocks C code allocated with malloc or
 * mmap (--native-allocs), not through a Python allocator. Counters in bytes
 * and blocks; net = allocated - freed. */
enum { PP_MEM_LINE = 0, PP_MEM_DETACHED = 1, PP_MEM_NO_FRAME = 2, PP_MEM_NATIVE = 4 };
typedef struct {
    uintptr_t code;
    uint32_t offset;
    uint32_t kind;
    uint32_t stack;                     /* allocation stack id, UINT32_MAX if none */
    uint64_t alloc_bytes, alloc_count, free_bytes, free_count;
    uint64_t peak_bytes;                /* most of its bytes live at once */
    uint64_t at_peak;                   /* its bytes live when all traced bytes peaked */
    uint64_t seen_peak;                 /* the peak its at_peak belongs to (lazy) */
    uint64_t temp_bytes, temp_count;    /* blocks freed by their thread soon after (temporary) */
    uint32_t held;                      /* a reference to code is held (else: found by a
                                         * thread without the GIL, checked when resolved) */
} pp_memsite;

typedef struct {
    uint64_t current, peak;             /* bytes traced and live, now and at most */
    uint64_t allocated;                 /* bytes allocated in all */
    uint64_t unknown_frees;             /* frees of blocks allocated before start */
    uint64_t live_blocks;
    uint64_t dropped;                   /* blocks pyprof's tables had no room for (out of memory) */
    int linked;                         /* every domain's allocations still reach our hooks */
} pp_meminfo;

/* What a profiler keeps: a row per site with its function id and line. */
typedef struct {
    uint32_t fid;                       /* PP_NONE for sites without a Python frame */
    uint32_t line;
    uint32_t kind;                      /* with the PP_MEM_NATIVE bit */
    uint32_t stack;                     /* into pp_memdata's stacks, PP_NONE if none */
    uint64_t alloc_bytes, alloc_count, free_bytes, free_count, peak_bytes;
    uint64_t at_peak_bytes;             /* live when the traced total peaked */
    uint64_t temp_bytes, temp_count;
} pp_memrow;

/* Allocation stacks, resolved: frames (fid << 32 | line), root first; with
 * --native, per stack native words: its instruction pointers (leaf first),
 * then PP_MEMSTACK_ENTRY | i for each Python frame i (root first) that an
 * evaluation-loop call started at (where the native stack merges in). */
#define PP_MEMSTACK_ENTRY (1ull << 63)
typedef struct {
    uint64_t *frames, *native;
    uint32_t *start, *depth, *nstart, *nnative;
    uint32_t n, nframes, nnative_all;
} pp_memstacks;

/* The memory curve: a point per interval (10 ms, doubled when the curve gets
 * long): resident set size, traced live bytes at the end of the interval and
 * at most during it, and the line whose allocation made that most. */
typedef struct {
    int64_t t_ns;                       /* CLOCK_MONOTONIC */
    uint64_t rss, heap, heap_max;
    uint32_t fid, line;                 /* PP_NONE / 0 when not on a Python line */
} pp_mempoint;

struct pp_memdata {
    pp_memrow *rows;
    uint32_t nrows;
    pp_meminfo info;
    pp_mempoint *curve;
    uint32_t npoints;
    pp_memstacks stacks;
    uint64_t rss_peak;                  /* the kernel's high-water mark (bytes) */
    uint64_t rss_end;                   /* resident set size when recording stopped */
};

/* One profiler's memory state: its options and what its finished runs
 * recorded. (Which engines run is the profiler's business.) */
typedef struct pp_memstate {
    pp_registry *reg;                   /* the owner's function ids */
    int64_t sample;                     /* 0: every allocation; else mean bytes between picks */
    int stacks;                         /* record each allocation's Python stack */
    int native;                         /* C code's malloc and mmap too (memory_native.c) */
    int native_stacks;                  /* stacks: the native frames too (--native) */
    uint32_t temporary;                 /* N > 0: count blocks freed within N allocations */
    struct pp_memdata *data;            /* what finished runs recorded, resolved to lines */
} pp_memstate;

/* What is being recorded now, resolved to rows (GIL held; malloc'd, the
 * caller frees *rows). Rows of finished runs are in p->data. */
int pp_memory_rows(pp_memstate *p, pp_memrow **rows, uint32_t *n, pp_meminfo *info);
/* The allocation stacks recorded so far, resolved (GIL held; free with
 * pp_memstacks_free). Row stack ids index them. */
int pp_memory_stacks(pp_memstate *p, pp_memstacks *out);
void pp_memstacks_free(pp_memstacks *s);
int pp_memory_recording(void);
/* Totals of one run added to those of earlier ones (peak: the larger). */
void pp_meminfo_add(pp_meminfo *into, const pp_meminfo *run);
/* NumPy's C-API table capsule: patch its default data handler (GIL held). */
int pp_memory_patch_numpy(PyObject *api);
/* The curve recorded so far, resolved (malloc'd copy; GIL held). */
pp_mempoint *pp_memory_curve(pp_memstate *p, uint32_t *n);
/* Exact mode recording: the traced bytes live now and the most live since
 * the last call (a window of the caller's choosing), then 0; else -1. */
int pp_memory_window(uint64_t *current, uint64_t *peak);
/* Resident set size and its high-water mark now, in bytes (0 if unknown). */
void pp_memory_rss(uint64_t *rss, uint64_t *peak);
void pp_memory_free(pp_memstate *p);

/* --native-allocs (memory_native.c): NULL if C code's allocations can be
 * recorded in this process, else why not (one line). */
const char *pp_native_allocs_unsupported(void);
/* Point the loaded objects' allocator entries at the recording wrappers, and
 * back (GIL held). -1 with a Python exception if it cannot be done. */
int pp_native_allocs_start(void);
void pp_native_allocs_stop(void);

/* A block pyprof's own hook made CPython allocate (3.11's frame objects for the
 * profile hook): as if never allocated. GIL held. */
void pp_memory_forget(PyObject *obj);

/* Start/stop recording (GIL held). The hooks are installed on first use and
 * stay, forwarding only, when stopped, until pp_memory_uninstall. */
int pp_memory_start(pp_memstate *p);
/* Around fork (GIL held): stop the memory curve's thread, returning its
 * kernel tid (0: none ran), and start it again. */
pid_t pp_memory_curve_pause(void);
void pp_memory_curve_resume(void);
int pp_memory_stop(pp_memstate *p);
/* Not recording (GIL held): give the allocators found at install back. 1
 * done (or none installed), 0 kept (another hook sits above ours). */
int pp_memory_uninstall(void);
/* NumPy's default handler as it was (memory_numpy.c): 0, or -1 if it failed. */
int pp_memory_unpatch_numpy(void);
/* A copy of the sites (malloc'd, *n entries; the caller frees it) and the totals. */
pp_memsite *pp_memory_sites(uint32_t *n, pp_meminfo *info);
/* Forget everything recorded (GIL held, not recording). */
void pp_memory_clear(void);

#endif
