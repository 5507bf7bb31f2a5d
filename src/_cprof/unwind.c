/* unwind.c — libunwind access (see unwind.h). Local unwinding only.
 * pp_unwind_signal runs in the sampler's signal handler: libunwind's local
 * unwinding allocates nothing, but on a cache miss it walks the loaded
 * objects with dl_iterate_phdr, which takes the loader's lock; a sample taken
 * while that lock is held (during dlopen) would wait for it. Opt-in (--native),
 * documented. pp_unwind_here runs inside the allocation hooks and wrappers
 * (memory.c), any thread, GIL or not, with pyprof's own-work flag set: what
 * libunwind allocates passes through them. Also reads a signal's context:
 * whether it took its thread out of a blocking call (pp_signal_blocked).
 * Never: calls Python. */
#define _GNU_SOURCE
#include "unwind.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <ucontext.h>

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

/* A blocked thread is taken out of its system call by the signal: the kernel
 * restarts the call after the handler (its instruction pointer back on the
 * call) or returns EINTR. One that is running, or runnable, is in its own
 * code. The instruction's bytes are read in place: the page was executing. */
int pp_signal_blocked(const void *uctx)
{
#if defined(__x86_64__)
    const ucontext_t *uc = uctx;
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP], in_page = ip & 4095;
    if (in_page < 2 || in_page > 4094)
        return -1;
    const unsigned char *p = (const unsigned char *)ip;
    if (p[0] == 0x0f && p[1] == 0x05)               /* syscall: to be restarted */
        return 1;
    if (p[-2] == 0x0f && p[-1] == 0x05)             /* back from one */
        return uc->uc_mcontext.gregs[REG_RAX] == -EINTR ? 1 : -1;
    return 0;
#elif defined(__aarch64__)
    const ucontext_t *uc = uctx;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.pc, in_page = pc & 4095;
    if ((pc & 3) != 0 || in_page < 4 || in_page > 4092)
        return -1;
    const uint32_t *p = (const uint32_t *)pc;
    if (p[0] == 0xd4000001u)                        /* svc #0: to be restarted */
        return 1;
    if (p[-1] == 0xd4000001u)
        return (int64_t)uc->uc_mcontext.regs[0] == -EINTR ? 1 : -1;
    return 0;
#else
    (void)uctx;
    return -1;
#endif
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
