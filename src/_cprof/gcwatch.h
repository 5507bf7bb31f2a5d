/* gcwatch.h — time in CPython's cyclic garbage collector (--gc).
 *
 * Owns: the gc.callbacks entry (a C function: tracers never see it as a
 * call), the pseudo code objects `<GC gen N>`, the per-thread flag the
 * sampler's signal handler reads (threads.h), the collections' counts and
 * pauses of a run.
 * Never: runs Python code in the callback (a dict lookup and the clock);
 * counts its own allocations (pyprof's own-work flag is set).
 */
#ifndef PP_GCWATCH_H
#define PP_GCWATCH_H

#include "tracer/tracer.h"

/* Watch the collector for a run: stats are added to *stats; tracer (NULL:
 * none) gets a `<GC gen N>` call around each collection. GIL held. */
int pp_gcwatch_start(pp_gcstats *stats, pp_tracer *tracer);
void pp_gcwatch_stop(void);

#endif
