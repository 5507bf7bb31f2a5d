/* unwind.h — native stacks through libunwind (compiled out without it). */
#ifndef PP_UNWIND_H
#define PP_UNWIND_H

#include <stdint.h>

int pp_unwind_available(void);
/* The native stack of the interrupted code (instruction pointers, leaf
 * first) from a signal handler's context; 0 frames without libunwind. */
int pp_unwind_signal(void *uctx, uintptr_t *ips, int max);
/* From a signal handler's context: 1 if the signal took the thread out of a
 * blocking system call, 0 if it was in its own code (on a CPU or runnable),
 * -1 if unknown (just back from a call that may have blocked without being
 * interruptible; an architecture other than x86-64 and AArch64). */
int pp_signal_blocked(const void *uctx);
/* The loaded object holding address `ip`: its path and load base (dladdr);
 * 0 if none. Not for signal handlers. */
int pp_native_module(uintptr_t ip, const char **path, uintptr_t *base);
/* The calling thread's own native stack (instruction pointers, leaf first),
 * without its innermost frames in pyprof's module: 0 frames without
 * libunwind. Allocates nothing itself (libunwind's caches may: through the
 * allocator wrappers, which let them through while pp_mem_self is set). */
int pp_unwind_here(uintptr_t *ips, int max);
/* Once, before pp_unwind_here is used: where pyprof's module lies. */
void pp_unwind_init_self(void);
/* Frames of the calling thread's native stack, or -1 when unavailable. */
int pp_unwind_self_depth(void);
/* The address span [*lo, *hi) of a loaded object's PT_LOAD segments, as
 * dl_iterate_phdr describes it. */
struct dl_phdr_info;
void pp_loaded_span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi);

#endif
