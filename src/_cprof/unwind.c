/* unwind.c — libunwind access (see unwind.h). Local unwinding only.
 * pp_unwind_signal runs in the sampler's signal handler: libunwind's local
 * unwinding allocates nothing, but on a cache miss it walks the loaded
 * objects with dl_iterate_phdr, which takes the loader's lock; a sample taken
 * while that lock is held (during dlopen) would wait for it. Opt-in (--native),
 * documented. pp_unwind_here runs inside the allocation hooks and wrappers
 * (memory.c), any thread, GIL or not, with pyprof's own-work flag set: what
 * libunwind allocates passes through them. Never: calls Python. */
#define _GNU_SOURCE
#include "unwind.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

/* pyprof's module: the frames of the allocation hooks, left out of stacks. */
static uintptr_t self_lo, self_hi;

void pp_loaded_span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
    *lo = UINTPTR_MAX;
    *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        if (info->dlpi_addr + ph->p_vaddr < *lo)
            *lo = info->dlpi_addr + ph->p_vaddr;
        if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > *hi)
            *hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    }
}

static int self_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t a = (uintptr_t)data, lo, hi;
    pp_loaded_span(info, &lo, &hi);
    if (a < lo || a >= hi)
        return 0;
    self_lo = lo;
    self_hi = hi;
    return 1;
}

void pp_unwind_init_self(void)
{
    if (self_hi == 0)
        dl_iterate_phdr(self_cb, (void *)(uintptr_t)pp_unwind_init_self);
}

int pp_native_module(uintptr_t ip, const char **path, uintptr_t *base)
{
    Dl_info info;
    if (dladdr((void *)ip, &info) == 0 || info.dli_fname == NULL)
        return 0;
    *path = info.dli_fname;
    *base = (uintptr_t)info.dli_fbase;
    return 1;
}

#ifdef PP_HAVE_LIBUNWIND
#define UNW_LOCAL_ONLY
#include <libunwind.h>

int pp_unwind_available(void)
{
    return 1;
}

int pp_unwind_signal(void *uctx, uintptr_t *ips, int max)
{
    unw_cursor_t cur;
    if (unw_init_local2(&cur, (unw_context_t *)uctx, UNW_INIT_SIGNAL_FRAME) < 0)
        return 0;
    int n = 0;
    do {
        unw_word_t ip;
        if (unw_get_reg(&cur, UNW_REG_IP, &ip) < 0 || ip == 0)
            break;
        ips[n++] = (uintptr_t)ip;
    } while (n < max && unw_step(&cur) > 0);
    return n;
}

/* unw_backtrace: libunwind's fast path, which caches how each return address
 * unwinds (a step per frame per allocation through the DWARF tables made a
 * SQLite run 6x slower); it falls back to stepping where it cannot. */
int pp_unwind_here(uintptr_t *ips, int max)
{
    void *buf[256];
    int got = unw_backtrace(buf, max + 32 < 256 ? max + 32 : 256);
    int i = 0, n = 0;
    while (i < got && (uintptr_t)buf[i] >= self_lo && (uintptr_t)buf[i] < self_hi)
        i++;                            /* the hooks' own frames */
    for (; i < got && n < max; i++)
        ips[n++] = (uintptr_t)buf[i];
    return n;
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

int pp_unwind_signal(void *uctx, uintptr_t *ips, int max)
{
    (void)uctx; (void)ips; (void)max;
    return 0;
}

int pp_unwind_here(uintptr_t *ips, int max)
{
    (void)ips; (void)max;
    return 0;
}

int pp_unwind_self_depth(void)
{
    return -1;
}
#endif
