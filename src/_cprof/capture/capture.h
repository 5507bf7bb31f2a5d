/* capture.h — the .cprof capture format, written by the C core, and pp_run:
 * one profiler's engines and run state, which the capture reads.
 *
 * File  = header (28 bytes) + one zlib stream of the blob.
 * Header: magic "\x89CPROF\r\n", u16 major, u16 minor, u32 flags (bit 0: final
 *         write, else a periodic flush), u64 blob length, u32 crc32 of blob.
 * Blob  = records: u16 type, u16 zero, u32 payload length, payload. Readers
 *         skip unknown types (later issues add lines, stacks, memory, steps)
 *         and require the END record (so a truncated blob is detected).
 * All integers little-endian. Times are integers in INFO.time_unit seconds.
 * Record layouts are documented in docs/capture-format.md.
 * Never: calls an engine (starts, stops, drains or reads one), or decides
 * which engines run: the profiler layer hands it what it formats (pp_snapin).
 */
#ifndef PP_CAPTURE_H
#define PP_CAPTURE_H

#include "memory/memory.h"
#include "sampler/sampler.h"
#include "tracer/tracer.h"

#define PP_FORMAT_MAJOR 1
#define PP_FORMAT_MINOR 9

enum {
    PP_REC_INFO = 1,            /* JSON object written by the C core */
    PP_REC_META = 2,            /* JSON object given by the Python side */
    PP_REC_STRINGS = 3,         /* u32 n, n x (u32 len, utf-8 bytes) */
    PP_REC_FUNCTIONS = 4,       /* u32 n, n x <6I fid file line name qualname kind> */
    PP_REC_THREADS = 5,         /* u32 n, n x <IIQQQ index name ident native_id events> */
    PP_REC_FSTATS = 6,          /* u32 n, n x <IIQQqq thread fid calls rec_calls tt it> */
    PP_REC_EDGES = 7,           /* u32 n, n x <IIIIQQqq thread caller callee pad calls rec_calls tt it> */
    PP_REC_LINES = 8,           /* 1.1: u32 n, n x <IIIIQq thread fid line pad hits time> */
    PP_REC_CALLROWS = 9,        /* 1.1: u32 n, n x <IIIIQq thread fid line callee calls time> */
    PP_REC_STACKS = 10,         /* 1.2: u32 n, n x (u32 nframes, u32 nnative, nframes x u64
                                 * fid<<32|line root first, nnative x u64 ip leaf first) */
    PP_REC_SAMPLES = 11,        /* 1.2: u32 n, n x <IIIIQq thread stack state pad count weight_ns> */
    PP_REC_MEMORY = 12,         /* 1.3: u32 n, n x <IIIIQQQQQQ fid line kind stack alloc_bytes
                                 * alloc_count free_bytes free_count peak_bytes at_peak_bytes>
                                 * (fid 0xFFFFFFFF: no frame) */
    PP_REC_FMEMORY = 13,        /* 1.3: u32 n, n x <IIqq thread fid peak_bytes residual_bytes> */
    PP_REC_MEMCURVE = 14,       /* 1.3: u32 n, n x <qQQQII t_ns rss heap heap_max fid line>
                                 * (t_ns: since the start of profiling) */
    PP_REC_MEMSTACKS = 15,      /* 1.3: u32 n, n x (u32 depth, depth x u64 fid<<32|line root
                                 * first): MEMORY rows' stack ids index them */
    PP_REC_PATHS = 16,          /* 1.4: u32 n, n x <IIIIQqq thread path parent fid calls tt it>
                                 * (path ids per thread; parent 0xFFFFFFFE: a root) */
    PP_REC_STEP = 17,           /* 1.4: one per pyprof.step(), made by the Python side: u32
                                 * header length, JSON header, the step's tables as records */
    PP_REC_TIMELINE = 18,       /* 1.4: u32 n, n x <IIqq thread fid start_ns dur_ns>
                                 * (start_ns: since the start of profiling) */
    PP_REC_LINEMEM = 19,        /* 1.5: u32 n, n x <IIIIQQqq thread fid line pad alloc_bytes
                                 * alloc_blocks net_bytes peak_bytes> (line mode with memory:
                                 * callees included) */
    PP_REC_MEMEXTRA = 20,       /* 1.6: u32 n, n x <IIIIQQQQQQ fid line kind stack
                                 * native_alloc_bytes native_alloc_blocks native_free_bytes
                                 * native_free_blocks temp_bytes temp_blocks>: of MEMORY's
                                 * rows, C code's blocks and the temporary ones */
    PP_REC_TASKS = 21,          /* 1.7: u32 n, n x <IIIIIIqqqqQQ fid coro_fid created_fid
                                 * created_line thread state start_ns end_ns running_ns
                                 * awaiting_ns samples steps> (asyncio; times from the start) */
    PP_REC_COROS = 22,          /* 1.7: u32 n, n x <IIQQqq fid pad instances ended wall open_wall>
                                 * (function tracing: coroutines from first start to end) */
    PP_REC_TASKSTEPS = 23,      /* 1.7: u32 n, n x <IIqq task pad start_ns dur_ns> (tracing's
                                 * tasks with a timeline: each step of each task) */
    PP_REC_MEMNATIVE = 24,      /* 1.8: u32 n, n x (u32 count, count x u64): per MEMSTACKS
                                 * stack, its native frames (leaf first), then 1<<63 | i for
                                 * each Python frame i (root first) an evaluation-loop call
                                 * started at; written when a stack has native frames */
    PP_REC_INSNS = 25,          /* 1.9: u32 n, n x <8IQqQqQq thread fid offset opcode line
                                 * end_line col end_col samples weight_ns total_samples
                                 * total_weight_ns hits time> (--opcodes: instructions sampled
                                 * or traced; positions 0xFFFFFFFF: none) */
    PP_REC_END = 0xFFFF,
};

/* One profiler's state below the Python object: its engines' states (each
 * owned by its engine), which of them run, and the run's clock origins and
 * records. Held by the profiler; read here. */
typedef struct pp_run {
    int enabled;
    int sampling;               /* the sampler runs instead of the tracer */
    int memory;                 /* the allocation hooks record while enabled */
    int memory_only;            /* mode "memory": no call or sampling hooks */
    pp_registry reg;
    pp_threadset threads;
    pp_tracer tr;
    pp_sampling sm;
    pp_memstate mem;
    int64_t start_wall_ns;
    int64_t start_mono_ns;
    int64_t start_ticks;        /* the clock at start_mono_ns: origin of the timeline */
    int64_t enabled_ns;         /* time spent enabled, over all enable/disable pairs */
    int64_t enabled_since_ns;
    uint64_t enable_count;
    PyObject *meta;             /* bytes: JSON written with every capture */
    PyObject *records;          /* list of bytes: whole records written before END */
    double snap_ns_per_tick;    /* > 0: the next snapshot converts ticks with this */
    pp_cntbase step_samples;    /* steps: sample counters at the last mark, by entry */
    pp_cntbase step_memory;     /* steps: live allocation sites at the last mark, by site */
    int gc;                     /* watch the garbage collector (gcwatch.c) */
    pp_gcstats gcstats;         /* its collections while enabled, over all runs */
} pp_run;

/* What a capture is handed: the engines' state that is not plain data of
 * pp_run, read at one instant by the profiler layer (profiler.c), which owns
 * it. capture formats it and calls no engine. */
typedef struct pp_snapin {
    int include_open;           /* calls still open count as ending at `now` */
    int64_t now;                /* the tracer's clock at the snapshot (when open calls,
                                 * coroutines or tasks need it, else 0) */
    double ns_per_tick;         /* the clock's calibration (its own clock, not a user timer) */
    const char *hook;           /* the interpreter mechanism in use, or last used */
    uint32_t nthreads;
    const pp_tables **tables;   /* per thread record, in list order: its own tables, or
                                 * (include_open, calls open) a copy with them ended */
    int64_t *coro_open;         /* function tracing: coroutines still open, wall by fid
                                 * (NULL: no coroutine seen, or a step mark) */
    /* memory: the recording under way (live NULL when none; a step mark: rows only) */
    pp_memrow *live;
    uint32_t nlive;
    pp_meminfo live_info;
    pp_mempoint *curve;
    uint32_t ncurve;
    pp_memstacks stacks;
    int have_stacks;
    uint64_t rss_end, rss_peak;
    /* sampling */
    pp_sampler_info si;
    uint32_t tasks_named;
} pp_snapin;

/* Snapshot of the profiler as a blob (bytes). Calls still open are counted as
 * ending now when include_open is set (periodic flushes). GIL held. */
#define PP_SNAP_OPEN 1           /* calls still open count as ending now */
#define PP_SNAP_COUNTERS 2       /* counters only: no timeline, no records of the Python side */
PyObject *pp_capture_snapshot(pp_run *p, int flags, const pp_snapin *in);
/* pyprof.step(): what every counter table gained since the previous call, as a
 * record stream (FSTATS, EDGES, PATHS, LINES, CALLROWS, SAMPLES, MEMORY as the
 * modes have them, then END), calls still open counting up to now (`in` made
 * with include_open). With peek, the previous call stays the reference. */
PyObject *pp_capture_step_counters(pp_run *p, int peek, const pp_snapin *in);
/* Snapshot and write atomically (temporary file + rename). -1 with err set. */
int pp_capture_write(pp_run *p, const pp_snapin *in, const char *path, int final, char *err,
                     size_t errlen);
/* Write a blob to a file atomically. -1 with err set. No Python API used. */
int pp_capture_write_blob(const char *path, const void *blob, size_t n, int final,
                          char *err, size_t errlen);

#endif
