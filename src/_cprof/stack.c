/* stack.c — growth of the shadow stack (see stack.h). GIL held. */
#include "stack.h"

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
