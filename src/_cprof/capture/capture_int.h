/* capture_int.h — what capture.c and capture_async.c share; private to the
 * capture unit: the growing byte buffer a snapshot is written into, its
 * little-endian writers, the record framing and the tick conversion.
 */
#ifndef PP_CAPTURE_INT_H
#define PP_CAPTURE_INT_H

#include "capture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *p;
    size_t n, cap;
    int oom;
} buf;

static inline void put(buf *b, const void *src, size_t n)
{
    if (b->oom || n == 0)       /* an empty table has no buffer: never memcpy from NULL */
        return;
    if (b->n + n > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->n + n)
            ncap *= 2;
        unsigned char *np = realloc(b->p, ncap);
        if (np == NULL) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* Little-endian writers (the build targets little-endian hosts; checked at init). */
static inline void put_u16(buf *b, uint16_t v) { put(b, &v, 2); }
static inline void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static inline void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static inline void put_i64(buf *b, int64_t v) { put(b, &v, 8); }

static inline size_t record_begin(buf *b, uint16_t type)
{
    put_u16(b, type);
    put_u16(b, 0);
    put_u32(b, 0);
    return b->n;
}

static inline void record_end(buf *b, size_t start)
{
    if (b->oom)
        return;
    uint32_t len = (uint32_t)(b->n - start);
    memcpy(b->p + start - 4, &len, 4);
}

typedef struct {
    int scale;                  /* ticks -> ns with ns_per_tick */
    double ns_per_tick;
} tconv;

static inline int64_t conv(const tconv *c, int64_t ticks)
{
    if (!c->scale)
        return ticks;
    return (int64_t)llround((double)ticks * c->ns_per_tick);
}

/* capture_async.c: the TASKS record (--async sampling) and the COROS record
 * (function tracing's coroutines). GIL held. */
void pp_capture_put_tasks(buf *b, const pp_run *p, const tconv *tc, int64_t now,
                          uint32_t tasks_named);
void pp_capture_put_coros(buf *b, const pp_run *p, const tconv *tc, const int64_t *open);

#endif
