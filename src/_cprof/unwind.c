/* unwind.c — libunwind access (see unwind.h). Local unwinding only. */
#include "unwind.h"

#ifdef PP_HAVE_LIBUNWIND
#define UNW_LOCAL_ONLY
#include <libunwind.h>

int pp_unwind_available(void)
{
    return 1;
}

int pp_unwind_self_depth(void)
{
    unw_context_t ctx;
    unw_cursor_t cur;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0)
        return -1;
    int n = 0;
    while (n < 4096 && unw_step(&cur) > 0)
        n++;
    return n;
}
#else
int pp_unwind_available(void)
{
    return 0;
}

int pp_unwind_self_depth(void)
{
    return -1;
}
#endif
