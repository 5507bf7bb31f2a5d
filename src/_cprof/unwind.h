/* unwind.h — native stacks through libunwind (compiled out without it).
 * This issue only links and self-tests libunwind; the sampler (a later
 * issue) unwinds from signal contexts here. Never used without PP_HAVE_LIBUNWIND.
 */
#ifndef PP_UNWIND_H
#define PP_UNWIND_H

int pp_unwind_available(void);
/* Frames of the calling thread's native stack, or -1 when unavailable. */
int pp_unwind_self_depth(void);

#endif
