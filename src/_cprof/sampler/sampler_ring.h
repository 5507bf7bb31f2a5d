/* sampler_ring.h — the ring's writers, private to the sampler: inlined into
 * the signal handler (sampler.c) and the helper's first samples of a thread
 * (sampler_wall.c). Async-signal-safe; 0 if the ring is full (dropped,
 * counted).
 * Never: allocates, takes a lock, calls into Python.
 */
#ifndef PP_SAMPLER_RING_H
#define PP_SAMPLER_RING_H

#include "sampler_int.h"

#include <stdatomic.h>
#include <string.h>

static inline rawrec *pp_ring_reserve(uint32_t len)
{
    uint64_t head = atomic_load_explicit(&S.head, memory_order_relaxed);
    for (int tries = 0; tries < 64; tries++) {
        uint64_t tail = atomic_load_explicit(&S.tail, memory_order_acquire);
        if (head + len - tail > RING_BYTES)
            return NULL;
        if (atomic_compare_exchange_weak_explicit(&S.head, &head, head + len,
                                                  memory_order_acq_rel, memory_order_relaxed))
            return (rawrec *)(S.buf + (head & (RING_BYTES - 1)));
    }
    return NULL;
}

/* A record with no frames: `weight` of the thread's time, idle, on the stack
 * of its previous record. Async-signal-safe (the handler and the helper). */
static inline int pp_ring_write_repeat(pid_t tid, uint64_t ident, int64_t now, int64_t weight)
{
    if (weight <= 0)
        return 1;
    uint32_t len = (uint32_t)((sizeof(rawrec) + REC_ALIGN - 1) & ~(size_t)(REC_ALIGN - 1));
    rawrec *r = pp_ring_reserve(len);
    if (r == NULL) {
        atomic_fetch_add_explicit(&S.dropped, 1, memory_order_relaxed);
        return 0;
    }
    r->tid = (uint32_t)tid;
    r->ident = ident;
    r->t_ns = now;
    r->state = PP_STATE_IDLE;
    r->truncated = 0;
    r->nframes = 0;
    r->nnative = 0;
    r->pad = REC_REPEAT;
    r->weight_ns = weight;
    r->coro = 0;
    atomic_fetch_add_explicit(&S.weight_ns, weight, memory_order_relaxed);
    atomic_fetch_add_explicit(&S.idle_ticks, (uint64_t)((weight + S.interval_ns / 2) / S.interval_ns),
                              memory_order_relaxed);
    atomic_store_explicit(&r->len, len, memory_order_release);
    return 1;
}

/* A sample into the ring, or 0 (full: dropped, counted). Async-signal-safe
 * (the handler; the helper for a new thread's first sample). */
static inline int pp_ring_write_sample(uint32_t tid, uint64_t ident, int64_t now, uint8_t state, int truncated,
                         const pp_rawframe *frames, int nframes, const uintptr_t *native,
                         int nnative, int64_t weight, uintptr_t coro, uint16_t flags)
{
    uint32_t len = (uint32_t)(sizeof(rawrec) + (size_t)nframes * sizeof(pp_rawframe)
                              + (size_t)nnative * sizeof(uintptr_t));
    len = (len + REC_ALIGN - 1) & ~(uint32_t)(REC_ALIGN - 1);
    rawrec *r = pp_ring_reserve(len);
    if (r == NULL) {
        atomic_fetch_add_explicit(&S.dropped, 1, memory_order_relaxed);
        return 0;
    }
    r->tid = tid;
    r->ident = ident;
    r->t_ns = now;
    r->state = state;
    r->truncated = (uint8_t)truncated;
    r->nframes = (uint16_t)nframes;
    r->nnative = (uint16_t)nnative;
    r->pad = flags;
    r->weight_ns = weight;
    r->coro = coro;
    if (coro && atomic_load_explicit(&pp_known_coro[pp_known_slot(coro)], memory_order_relaxed) != coro)
        atomic_store_explicit(&S.new_coro, coro, memory_order_relaxed);
    atomic_fetch_add_explicit(&S.weight_ns, weight, memory_order_relaxed);
    unsigned char *p = (unsigned char *)(r + 1);
    memcpy(p, frames, (size_t)nframes * sizeof(pp_rawframe));                /* stack arrays */
    memcpy(p + (size_t)nframes * sizeof(pp_rawframe), native, (size_t)nnative * sizeof(uintptr_t));
    atomic_store_explicit(&r->len, len, memory_order_release);
    atomic_fetch_add_explicit(&S.recorded, 1, memory_order_relaxed);
    return 1;
}

#endif
