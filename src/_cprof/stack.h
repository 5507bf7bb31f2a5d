/* stack.h — per-thread shadow call stack.
 *
 * Owns: the frames of calls in progress on one thread (key, slots, start time,
 * time spent in callees). Generators and coroutines leave the stack when they
 * yield and enter again when resumed (as cProfile), so suspended time is never
 * charged to them. GIL held; never from a signal handler (push may grow).
 */
#ifndef PP_STACK_H
#define PP_STACK_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    uint64_t key;
    uint32_t fslot;
    uint32_t eslot;             /* PP_NONE at the bottom or without subcalls */
    uint32_t pslot;             /* calling context (PP_NONE: not recorded) */
    uint32_t solo;              /* 3.12+, a C call: its site had CALL events from pyprof alone */
    int64_t t0;
    int64_t subt;               /* ticks spent in callees that have ended */
    /* line mode only (left unset otherwise) */
    uint32_t lslot;             /* line running in this frame, PP_NONE if none */
    uint32_t crow;              /* call row this activation counts into, PP_NONE if none */
    int64_t lt0;                /* when the running line's segment began */
    uint32_t islot;             /* --opcodes: instruction running in this frame, PP_NONE if none */
    int64_t it0;                /* when it began */
    /* memory only: the thread's net bytes at entry, and the most since */
    int64_t mem_base, mem_hw;
    /* line mode with memory: the thread's counters when the running line
     * began, and mem_hw before it (the line's own high point runs in mem_hw) */
    int64_t lm_alloc0, lm_blocks0, lm_net0, lm_hw0;
} pp_frame;

typedef struct {
    pp_frame *f;
    uint32_t depth;
    uint32_t cap;
    int64_t mem_cur;            /* memory: bytes this thread allocated minus those it freed */
    /* line mode: ticks of pyprof's line-event bookkeeping on this thread so
     * far. The tracer's clock in line mode is the clock minus this, so no
     * time (line, call, function) includes it (0 in function mode). */
    int64_t line_cost;
    int64_t mem_alloc;          /* memory: bytes and blocks this thread allocated, cumulative */
    int64_t mem_blocks;
    /* memory: the last outermost activation to return, settled once its
     * frame's locals are gone (they are freed after the return event) */
    uint32_t mem_pending;       /* its function slot + 1, 0 if none */
    int64_t mem_pending_base;
    /* memory: C code's blocks made or freed by this thread without the GIL,
     * set aside by the allocation hooks (no GIL: so atomic) until the thread
     * takes them in with the GIL (threads.h: pp_thread_mem_fold): net bytes,
     * their most since the last take, bytes and blocks allocated */
    _Atomic int64_t aside_net, aside_hw, aside_alloc, aside_blocks;
    _Atomic int aside;
} pp_stack;

int pp_stack_grow(pp_stack *s);                 /* -1 on OOM */
/* Lowest usable address of the calling thread's C stack (it grows down), or 0
 * when the platform cannot tell. */
uintptr_t pp_cstack_low(void);
void pp_stack_free(pp_stack *s);

static inline pp_frame *pp_stack_push(pp_stack *s)
{
    if (__builtin_expect(s->depth == s->cap, 0) && pp_stack_grow(s) < 0)
        return 0;
    return &s->f[s->depth++];
}

#endif
