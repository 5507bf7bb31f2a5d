/* profiler.h — one profiler: which engines run, enable/disable, the active
 * profiler of the process, periodic flushing, fork handling.
 *
 * Owns: pp_profiler (the Python object's state: its pp_run, which holds the
 * engines' states, and the flush settings), the one enabled profiler of the
 * process and the background one suspended under it. It is the only unit
 * that starts and stops engines.
 * Never: the Python-visible API (module.c); anything per event (the engines).
 */
#ifndef PP_PROFILER_H
#define PP_PROFILER_H

#include "capture/capture.h"

typedef struct pp_profiler {
    PyObject_HEAD
    pp_run run;
    char *flush_path;
    int64_t flush_interval_ns;  /* 0 = no periodic flush */
    int64_t next_flush_ns;
    int flush_failed;
    long owner_pid;             /* a forked child never flushes over the parent's file */
    PyObject *weakreflist;
} pp_profiler;

extern PyTypeObject pp_profiler_type;

int pp_profiler_module_init(void);
/* A new object's engines (after tp_alloc); -1 with MemoryError set. */
int pp_profiler_init(pp_profiler *p);
int pp_profiler_enable(pp_profiler *p);
int pp_profiler_disable(pp_profiler *p);
/* Forget every count (function ids stay). */
void pp_profiler_clear(pp_profiler *p);
void pp_profiler_free(pp_profiler *p);
/* Forked child, profiler disabled: drop the parent's data and thread records. */
int pp_profiler_after_fork(pp_profiler *p);
/* threading was just imported (pyprof never imports it; GIL held): the
 * engines that follow its new threads hook it now. */
int pp_profiler_hook_threading(pp_profiler *p);
/* The flush settings changed: the engines ask for periodic work, or not. */
void pp_profiler_flush_changed(pp_profiler *p);
/* Stop or resume recording the calling thread's events (until the next enable). */
void pp_profiler_pause_thread(pp_profiler *p, int paused);
int pp_profiler_thread_paused(pp_profiler *p);
/* No profiler enabled (GIL held): the sampler's signals and the allocators
 * as they were before pyprof's first run, where that is safe now (each flag
 * says if it was). -1 with RuntimeError while a profiler is enabled. */
int pp_profiler_release(int *signal_done, int *memory_done);
/* The enabled profiler of this process, or NULL. */
pp_profiler *pp_profiler_active(void);
/* GIL held, at the interpreter's exit (atexit, before its modules go): the
 * enabled profiler disabled, and the background one it suspended; each with
 * a flush path (flush_to) writes it a last time, final. */
int pp_profiler_disable_all(void);
/* capture.h's snapshot, step and write, the engines settled first (the
 * sampler's ring drained): capture only reads what it is handed. */
PyObject *pp_profiler_snapshot(pp_profiler *p, int flags);
PyObject *pp_profiler_step_counters(pp_profiler *p, int peek);
int pp_profiler_write(pp_profiler *p, const char *path, int final, char *err, size_t errlen);

#endif
