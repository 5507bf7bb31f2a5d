/* sampler_samples.c — the stack table, with the GIL (sampler.h): stacks of
 * (function, line) frames and native addresses, root first, each stored
 * once, and the samples on them. Code pointers become function ids (the
 * registry then keeps the code objects alive), offsets become lines; the
 * code object being destroyed (pp_samples_dying) becomes a ghost entry.
 * Never: reads the ring, calls the drain, the tasks or the handler's files
 * (they call down to it).
 */
#define _GNU_SOURCE
#include "sampler_int.h"
#include "symbols.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- stack table */

int pp_sampler_grow_array(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint32_t ncap = *cap ? *cap : 256;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

int pp_samples_init(pp_samples *s)
{
    memset(s, 0, sizeof *s);
    if (pp_index_init(&s->stackidx, 256) < 0 || pp_index_init(&s->sampleidx, 256) < 0
        || pp_index_init(&s->linecache, 1024) < 0 || pp_index_init(&s->insnidx, 64) < 0
        || pp_index_init(&s->insnstart, 64) < 0) {
        pp_samples_free(s);
        return -1;
    }
    return 0;
}

void pp_samples_free(pp_samples *s)
{
    free(s->frames);
    free(s->native);
    free(s->stacks);
    free(s->samples);
    free(s->insns);
    pp_index_free(&s->insnidx);
    pp_index_free(&s->insnstart);
    pp_index_free(&s->stackidx);
    pp_index_free(&s->sampleidx);
    pp_index_free(&s->linecache);
    memset(s, 0, sizeof *s);
}

void pp_samples_clear(pp_samples *s)
{
    s->nframes = s->nnative = s->nstacks = s->nsamples = s->ninsns = 0;
    pp_index_clear(&s->insnidx);
    pp_index_clear(&s->stackidx);
    pp_index_clear(&s->sampleidx);
    s->drained = s->truncated = s->foreign = 0;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

uint32_t pp_samples_stack(pp_samples *s, const uint64_t *fr, uint32_t n)
{
    return pp_samples_stack_id(s, fr, n, NULL, 0);
}

/* The id of the stack (frames root first, native leaf first), added if new. */
uint32_t pp_samples_stack_id(pp_samples *s, const uint64_t *fr, uint32_t n, const uintptr_t *nat,
                             uint32_t nn)
{
    uint64_t h = 0xCBF29CE484222325ull ^ n ^ ((uint64_t)nn << 32);
    for (uint32_t i = 0; i < n; i++)
        h = mix(h, fr[i]);
    for (uint32_t i = 0; i < nn; i++)
        h = mix(h, nat[i]);
    if (h == 0)
        h = 1;
    uint32_t i = pp_hash64(h, s->stackidx.mask);
    for (;;) {
        pp_ient *e = &s->stackidx.e[i];
        if (e->key == 0)
            break;
        if (e->key == h) {
            pp_stackent *st = &s->stacks[e->val];
            if (st->nframes == n && st->nnative == nn
                && (n == 0 || memcmp(s->frames + st->start, fr, n * sizeof *fr) == 0)
                && (nn == 0 || memcmp(s->native + st->nstart, nat, nn * sizeof *nat) == 0))
                return e->val;
        }
        i = (i + 1) & s->stackidx.mask;
    }
    if (pp_sampler_grow_array((void **)&s->frames, &s->capframes, s->nframes + n, sizeof *s->frames) < 0
        || pp_sampler_grow_array((void **)&s->native, &s->capnative, s->nnative + nn, sizeof *s->native) < 0
        || pp_sampler_grow_array((void **)&s->stacks, &s->capstacks, s->nstacks + 1, sizeof *s->stacks) < 0
        || pp_index_put(&s->stackidx, h, s->nstacks) < 0)
        return PP_NONE;
    pp_stackent *st = &s->stacks[s->nstacks];
    st->hash = h;
    st->start = s->nframes;
    st->nframes = n;
    st->nstart = s->nnative;
    st->nnative = nn;
    if (n)              /* (no arrays yet when every stack so far was empty) */
        memcpy(s->frames + s->nframes, fr, n * sizeof *fr);
    if (nn)
        memcpy(s->native + s->nnative, nat, nn * sizeof *nat);
    s->nframes += n;
    s->nnative += nn;
    if (nn)
        pp_symbols_prefetch(nat, (int)nn);     /* named while the program runs */
    return s->nstacks++;
}

static int add_sample(pp_samples *s, uint32_t thread, uint32_t stack, uint32_t state,
                      int64_t weight, uint64_t count)
{
    uint64_t key = ((uint64_t)stack + 1) << 24 ^ ((uint64_t)thread << 4) ^ state;
    key = key ? key : 1;
    uint32_t i = pp_hash64(key, s->sampleidx.mask);
    for (;;) {
        pp_ient *e = &s->sampleidx.e[i];
        if (e->key == 0)
            break;
        pp_sampleent *x = &s->samples[e->val];
        if (e->key == key && x->thread == thread && x->stack == stack && x->state == state) {
            x->count += count;
            x->weight_ns += weight;
            return 0;
        }
        i = (i + 1) & s->sampleidx.mask;
    }
    if (pp_sampler_grow_array((void **)&s->samples, &s->capsamples, s->nsamples + 1, sizeof *s->samples) < 0
        || pp_index_put(&s->sampleidx, key, s->nsamples) < 0)
        return -1;
    pp_sampleent *x = &s->samples[s->nsamples++];
    memset(x, 0, sizeof *x);
    x->thread = thread;
    x->stack = stack;
    x->state = state;
    x->count = count;
    x->weight_ns = weight;
    return 0;
}

int pp_samples_add(pp_samples *s, uint32_t thread, uint32_t stack, uint32_t state,
                   int64_t weight, uint64_t count)
{
    return add_sample(s, thread, stack, state, weight, count);
}

static PyObject *dying_code;    /* set while draining for a code object being destroyed */
static uint32_t dying_fid;

/* Function id of a sampled code object: registered (and so kept alive), or,
 * for the one being destroyed, a ghost entry that only keeps its names. */
static uint32_t code_fid(pp_sampling *p, PyObject *code)
{
    uint64_t key = (uint64_t)(uintptr_t)code;
    if (code == dying_code) {
        if (dying_fid == PP_NONE)
            dying_fid = pp_registry_ghost(p->reg, code);
        return dying_fid;
    }
    uint32_t fid = pp_registry_get(p->reg, key);
    if (fid != PP_NONE || pp_registry_own(p->reg, key))
        return fid;
    /* Checked again: a pointer read from a half-linked frame may name a code
     * object that was already freed when the handler read it, or has died
     * since (its drain can run before the record is published). */
    if (!pp_frames_code_alive((uintptr_t)code) || pp_frames_code_is_shim(code))
        return PP_NONE;
    return pp_registry_code(p->reg, code);
}

uint32_t pp_samples_insn_start(pp_samples *s, uint32_t fid, PyObject *code, uint32_t offset)
{
    uint64_t key = ((uint64_t)fid << 32 | offset) + 1;
    uint32_t got = pp_index_get(&s->insnstart, key);
    if (got != PP_NONE)
        return got - 1;
    /* co_code holds each instruction's inline caches as CACHE (0) units after
     * it (the adaptive code keeps counters there) */
    uint32_t start = offset;
    pp_err_state es;
    pp_err_save(&es);
    PyObject *bytes = PyCode_GetCode((PyCodeObject *)code);
    if (bytes != NULL && PyBytes_Check(bytes)) {
        const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(bytes);
        uint32_t n = (uint32_t)(PyBytes_GET_SIZE(bytes) / 2);
        while (start > 0 && start < n && b[start * 2] == 0)
            start--;
    }
    Py_XDECREF(bytes);
    PyErr_Clear();
    pp_err_restore(&es);
    if (code != dying_code)     /* a ghost's id is fresh each time: do not cache */
        pp_index_put(&s->insnstart, key, start + 1);
    return start;
}

/* A position of co_positions as stored: PP_NONE where there is none. */
static uint32_t position(int v)
{
    return v < 0 ? PP_NONE : (uint32_t)v;
}

int pp_samples_add_insn(pp_samples *s, uint32_t thread, uint32_t fid, PyObject *code,
                        uint32_t offset, int opcode, int self, int64_t weight, uint64_t count)
{
    uint64_t key = (((uint64_t)fid << 32 | offset) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)thread << 8)
                   ^ (uint64_t)opcode;
    key = key ? key : 1;
    pp_insnent *x = NULL;
    uint32_t i = pp_hash64(key, s->insnidx.mask);
    for (;; i = (i + 1) & s->insnidx.mask) {
        pp_ient *e = &s->insnidx.e[i];
        if (e->key == 0)
            break;
        pp_insnent *y = &s->insns[e->val];
        if (e->key == key && y->thread == thread && y->fid == fid && y->offset == offset
            && y->opcode == (uint32_t)opcode) {
            x = y;
            break;
        }
    }
    if (x == NULL) {
        if (code == NULL
            || pp_sampler_grow_array((void **)&s->insns, &s->capinsns, s->ninsns + 1,
                                     sizeof *s->insns) < 0
            || pp_index_put(&s->insnidx, key, s->ninsns) < 0)
            return -1;
        int line = -1, col = -1, end_line = -1, end_col = -1;
        if (offset < (uint32_t)Py_SIZE(code))
            PyCode_Addr2Location((PyCodeObject *)code, (int)(offset * 2), &line, &col,
                                 &end_line, &end_col);
        x = &s->insns[s->ninsns++];
        *x = (pp_insnent){thread, fid, offset, (uint32_t)opcode, position(line),
                          position(end_line), position(col), position(end_col), 0, 0, 0, 0};
    }
    x->total_count += count;
    x->total_weight_ns += weight;
    if (self) {
        x->count += count;
        x->weight_ns += weight;
    }
    return 0;
}

uint32_t pp_sampler_code_fid(pp_sampling *p, PyObject *code)
{
    return code_fid(p, code);
}

static uint32_t frame_line(pp_samples *s, uint32_t fid, PyObject *code, uint32_t offset)
{
    uint64_t key = ((uint64_t)fid << 32 | offset) + 1;
    uint32_t line = pp_index_get(&s->linecache, key);
    if (line != PP_NONE)
        return line;
    int l = offset < (uint32_t)Py_SIZE(code)
            ? PyCode_Addr2Line((PyCodeObject *)code, (int)(offset * 2)) : -1;
    line = l < 0 ? 0 : (uint32_t)l;
    if (code != dying_code)     /* a ghost's id is fresh each time: do not cache */
        pp_index_put(&s->linecache, key, line);
    return line;
}

void pp_samples_dying(PyObject *code)
{
    dying_code = code;
    dying_fid = PP_NONE;
}

uint32_t pp_samples_line(pp_samples *s, uint32_t fid, PyObject *code, uint32_t offset)
{
    return frame_line(s, fid, code, offset);
}
