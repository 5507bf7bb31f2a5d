/* stack.c — growth of the shadow stack (see stack.h), and the bounds of the
 * thread's C stack (the only platform-specific part). GIL held. */
#define _GNU_SOURCE
#include "stack.h"

#include <pthread.h>
#include <stdlib.h>

int pp_stack_grow(pp_stack *s)
{
    uint32_t ncap = s->cap ? s->cap * 2 : 128;
    if (ncap <= s->cap)
        return -1;
    pp_frame *nf = realloc(s->f, (size_t)ncap * sizeof(pp_frame));
    if (!nf)
        return -1;
    s->f = nf;
    s->cap = ncap;
    return 0;
}

void pp_stack_free(pp_stack *s)
{
    free(s->f);
    s->f = 0;
    s->depth = s->cap = 0;
}

uintptr_t pp_cstack_low(void)
{
#if defined(__linux__) && defined(__GLIBC__)
    pthread_attr_t attr;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return 0;
    int rc = pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    return rc == 0 ? (uintptr_t)addr : 0;
#else
    return 0;
#endif
}
