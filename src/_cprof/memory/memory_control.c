/* memory_control.c — memory: start and stop of a recording (see memory.h):
 * the allocation hooks (memory.c), the curve's thread (memory_curve.c), the
 * native allocators (memory_native.c) and the run kept at stop
 * (memory_runs.c), in that order, and the fork handlers over them.
 *
 * The top of the engine: the files below never call it back.
 */
#include "memory_hooks.h"

#include <pthread.h>

static int atfork_done;

static void atfork_prepare(void)
{
    pp_curve_lock();
    pp_memory_tables_lock();
}

static void atfork_parent(void)
{
    pp_memory_tables_unlock();
    pp_curve_unlock();
}

static void atfork_child(void)
{
    pp_memory_tables_unlock();
    pp_curve_after_fork_child();
}

int pp_memory_start(pp_memstate *p)
{
    atfork_done = atfork_done || pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0;
    pp_memory_record_begin(p);
    pp_curve_start();
    if (p->native && pp_native_allocs_start() < 0) {
        pp_curve_stop();
        pp_memory_record_abort();
        return -1;
    }
    return 0;
}

int pp_memory_stop(pp_memstate *p)
{
    if (p->native)
        pp_native_allocs_stop();
    pp_curve_stop();
    pp_memory_record_end();
    int rc = pp_memory_keep_run(p);
    pp_memory_clear();                  /* drops the code objects: p's registry keeps them */
    return rc;
}
