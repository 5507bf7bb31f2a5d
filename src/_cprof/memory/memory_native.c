/* memory_native.c — allocations made by C code (--native-allocs), routed
 * into the memory engine's tables as blocks of PP_MEM_NATIVE sites.
 *
 * Mechanism: every loaded object calls malloc, free, mmap... through its own
 * relocation entries (the GOT, filled by the dynamic loader). At start they
 * are pointed at the wrappers below, which call the process's allocator (the
 * definitions dlsym(RTLD_DEFAULT) finds: glibc's, or an LD_PRELOADed one)
 * and record the block; dlopen is wrapped to do the same to objects loaded
 * later, dlsym to hand out the wrappers to code that looks an allocator up by
 * name (ctypes). At stop the entries get the allocator's functions back.
 * Not patched: the dynamic loader, the vDSO, pyprof's own module (its
 * allocations are its own), the object that defines the allocator (glibc, or
 * jemalloc/mimalloc/tcmalloc preloaded: their internal calls are not the
 * program's), and the allocator entries of the interpreter itself (its calls
 * to malloc are those of Python's RAW allocator, already counted, so each
 * block is counted once); its dlopen and dlsym entries are patched.
 *
 * Where the wrappers run: any thread, with or without the GIL or a Python
 * thread state, inside other libraries' signal handlers, inside the loader.
 * Never: allocates with malloc, calls into Python, takes the GIL, or records
 * while pyprof's own-work flag is set (a wrapper sets it while it records,
 * so an allocation made meanwhile, by a signal handler, passes through);
 * errno is as the allocator left it. The patching code (start, stop, after
 * dlopen) runs under a mutex and writes only pointer-sized entries.
 */
#define _GNU_SOURCE 1
#include "memory_hooks.h"
#include "unwind.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#define PP_NATIVE_SUPPORTED 1
#if defined(__x86_64__)
#define R_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB R_X86_64_GLOB_DAT
#define R_ABS R_X86_64_64
#else
#define R_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB R_AARCH64_GLOB_DAT
#define R_ABS R_AARCH64_ABS64
#endif
#endif

/* ------------------------------------------------------------- the real ones */

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*reallocarray_fn)(void *, size_t, size_t);
typedef void (*free_fn)(void *);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_fn)(void *, size_t);
typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlsym_fn)(void *, const char *);

static struct {
    malloc_fn malloc, valloc, pvalloc;
    calloc_fn calloc;
    realloc_fn realloc;
    reallocarray_fn reallocarray;
    free_fn free;
    posix_memalign_fn posix_memalign;
    memalign_fn aligned_alloc, memalign;
    mmap_fn mmap;
    munmap_fn munmap;
    dlopen_fn dlopen;
    dlsym_fn dlsym;
} real;

static _Atomic int active;              /* the wrappers record */

static inline int pass(void)
{
    return pp_mem_self || !atomic_load_explicit(&active, memory_order_acquire)
           || pp_memory_pass_through(-1);
}

/* ------------------------------------------------------------- the wrappers */

#define RECORD(ptr, size)                                   \
    do {                                                    \
        int saved_errno = errno;                            \
        pp_memory_note_alloc(ptr, size, PP_MEM_NATIVE);     \
        errno = saved_errno;                                \
    } while (0)

static void *w_malloc(size_t n)
{
    if (pass())
        return real.malloc(n);
    pp_mem_self = 1;
    void *p = real.malloc(n);
    if (p)
        RECORD(p, n);
    pp_mem_self = 0;
    return p;
}

static void *w_calloc(size_t n, size_t e)
{
    if (pass())
        return real.calloc(n, e);
    pp_mem_self = 1;
    void *p = real.calloc(n, e);
    if (p)
        RECORD(p, n * e);               /* non-NULL: n * e did not overflow */
    pp_mem_self = 0;
    return p;
}

/* After the allocator's realloc: the old block (taken out before, if `had`)
 * moves to this line; realloc(p, 0) returning NULL freed it (glibc). */
static void after_realloc(void *old, void *p, size_t n, int had, const pp_memblock *b)
{
    int saved_errno = errno;
    pp_memory_realloc_done(old, p, n, had ? b : NULL, PP_MEM_NATIVE);
    if (p == NULL && n == 0 && had)
        pp_memory_release_block(old);   /* put back above, freed now */
    errno = saved_errno;
}

static void *w_realloc(void *old, size_t n)
{
    if (pass())
        return real.realloc(old, n);
    pp_mem_self = 1;
    pp_memblock b;
    int had = old != NULL && pp_memory_take_block(old, &b);
    void *p = real.realloc(old, n);
    after_realloc(old, p, n, had, &b);
    pp_mem_self = 0;
    return p;
}

static void *w_reallocarray(void *old, size_t n, size_t e)
{
    if (pass())
        return real.reallocarray(old, n, e);
    pp_mem_self = 1;
    pp_memblock b;
    int had = old != NULL && pp_memory_take_block(old, &b);
    void *p = real.reallocarray(old, n, e);
    after_realloc(old, p, p ? n * e : 1, had, &b);      /* NULL: failed, kept */
    pp_mem_self = 0;
    return p;
}

static void w_free(void *p)
{
    if (p != NULL && !pass()) {
        pp_mem_self = 1;
        int saved_errno = errno;
        pp_memory_release_block(p);
        errno = saved_errno;
        real.free(p);                   /* inside: the table lists no freed address */
        pp_mem_self = 0;
        return;
    }
    real.free(p);
}

static int w_posix_memalign(void **out, size_t align, size_t n)
{
    if (pass())
        return real.posix_memalign(out, align, n);
    pp_mem_self = 1;
    int rc = real.posix_memalign(out, align, n);
    if (rc == 0 && *out)
        RECORD(*out, n);
    pp_mem_self = 0;
    return rc;
}

#define ALIGNED(name)                               \
    static void *w_##name(size_t align, size_t n)   \
    {                                               \
        if (pass())                                 \
            return real.name(align, n);             \
        pp_mem_self = 1;                            \
        void *p = real.name(align, n);              \
        if (p)                                      \
            RECORD(p, n);                           \
        pp_mem_self = 0;                            \
        return p;                                   \
    }
ALIGNED(aligned_alloc)
ALIGNED(memalign)

#define PAGED(name)                                 \
    static void *w_##name(size_t n)                 \
    {                                               \
        if (pass())                                 \
            return real.name(n);                    \
        pp_mem_self = 1;                            \
        void *p = real.name(n);                     \
        if (p)                                      \
            RECORD(p, n);                           \
        pp_mem_self = 0;                            \
        return p;                                   \
    }
PAGED(valloc)
PAGED(pvalloc)

/* Anonymous mappings only: a file mapped is not allocated memory. */
static void *w_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off)
{
    if (!(flags & MAP_ANONYMOUS) || pass())
        return real.mmap(addr, n, prot, flags, fd, off);
    pp_mem_self = 1;
    void *p = real.mmap(addr, n, prot, flags, fd, off);
    if (p != MAP_FAILED)
        RECORD(p, n);
    pp_mem_self = 0;
    return p;
}

/* A mapping unmapped from its start is freed whole (see docs/memory.md). */
static int w_munmap(void *p, size_t n)
{
    if (pass())
        return real.munmap(p, n);
    pp_mem_self = 1;
    int saved_errno = errno;
    pp_memory_release_block(p);
    errno = saved_errno;
    int rc = real.munmap(p, n);
    pp_mem_self = 0;
    return rc;
}

static void patch_all(int restore);
static pthread_mutex_t patch_mu = PTHREAD_MUTEX_INITIALIZER;

/* Objects loaded while recording get the wrappers too (their constructors'
 * allocations are made before: not seen). */
static void *w_dlopen(const char *file, int mode)
{
    void *h = real.dlopen(file, mode);
    if (h != NULL && atomic_load_explicit(&active, memory_order_acquire)) {
        int saved_errno = errno;
        pthread_mutex_lock(&patch_mu);
        if (atomic_load_explicit(&active, memory_order_acquire))
            patch_all(0);
        pthread_mutex_unlock(&patch_mu);
        errno = saved_errno;
    }
    return h;
}

/* ------------------------------------------------------------- the table */

typedef struct {
    const char *name;
    void **real;
    void *wrapper;
    int interp;                         /* patched in the interpreter's object too */
} hook;

#define H(n, w, i) {#n, (void **)&real.n, (void *)w, i}
static void *w_dlsym(void *handle, const char *name);
static const hook hooks[] = {
    H(malloc, w_malloc, 0), H(calloc, w_calloc, 0), H(realloc, w_realloc, 0),
    H(reallocarray, w_reallocarray, 0), H(free, w_free, 0),
    H(posix_memalign, w_posix_memalign, 0), H(aligned_alloc, w_aligned_alloc, 0),
    H(memalign, w_memalign, 0), H(valloc, w_valloc, 0), H(pvalloc, w_pvalloc, 0),
    H(mmap, w_mmap, 0), {"mmap64", (void **)&real.mmap, (void *)w_mmap, 0},
    H(munmap, w_munmap, 0), H(dlopen, w_dlopen, 1), H(dlsym, w_dlsym, 1),
};
#define NHOOKS (sizeof hooks / sizeof hooks[0])

/* A wrapper for what dlsym found, if it is a hooked function. */
static void *wrapped(void *sym)
{
    if (sym == NULL || !atomic_load_explicit(&active, memory_order_acquire))
        return sym;
    for (size_t i = 0; i < NHOOKS; i++)
        if (sym == *hooks[i].real && hooks[i].wrapper != (void *)w_dlsym
            && hooks[i].wrapper != (void *)w_dlopen)
            return hooks[i].wrapper;
    return sym;
}

/* ------------------------------------------------------------- ELF */

static int contains(const struct dl_phdr_info *info, const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && a >= info->dlpi_addr + ph->p_vaddr
            && a < info->dlpi_addr + ph->p_vaddr + ph->p_memsz)
            return 1;
    }
    return 0;
}

/* RTLD_NEXT as the caller meant it: the first object after the caller's, in
 * load order, that defines the name itself. The objects are listed first and
 * looked up after: dlopen must not run inside dl_iterate_phdr, whose lock a
 * thread in dlopen may be waiting for while holding dlopen's. */
#define NEXT_MAX 512
typedef struct {
    const void *caller;
    int seen, n;
    struct { const char *name; uintptr_t lo, hi; } obj[NEXT_MAX];
} next_ctx;

static int next_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    next_ctx *c = data;
    if (!c->seen) {
        c->seen = contains(info, c->caller);
        return 0;
    }
    if (c->n == NEXT_MAX)
        return 1;
    uintptr_t lo, hi;
    pp_loaded_span(info, &lo, &hi);
    c->obj[c->n].name = info->dlpi_name;
    c->obj[c->n].lo = lo;
    c->obj[c->n].hi = hi;
    c->n++;
    return 0;
}

static void *next_symbol(const void *caller, const char *name)
{
    /* mapped, not on the stack: this can run on a thread with a small one */
    next_ctx *c = real.mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED)
        return NULL;
    c->caller = caller;
    dl_iterate_phdr(next_cb, c);
    void *found = NULL;
    for (int i = 0; i < c->n && found == NULL; i++) {
        void *h = real.dlopen(c->obj[i].name && c->obj[i].name[0] ? c->obj[i].name : NULL,
                              RTLD_LAZY | RTLD_NOLOAD);
        if (h == NULL)
            continue;
        void *sym = real.dlsym(h, name);
        if (sym != NULL && (uintptr_t)sym >= c->obj[i].lo && (uintptr_t)sym < c->obj[i].hi)
            found = sym;
        dlclose(h);
    }
    real.munmap(c, sizeof *c);
    return found;
}

static void *w_dlsym(void *handle, const char *name)
{
    if (handle != RTLD_NEXT)
        return wrapped(real.dlsym(handle, name));
    return wrapped(next_symbol(__builtin_return_address(0), name));
}

/* Objects not patched, found once. */
static const void *self_addr, *interp_addr, *alloc_addr;

/* Dynamic entries hold addresses relocated by glibc, offsets elsewhere. */
static uintptr_t dyn_addr(const struct dl_phdr_info *info, uintptr_t v)
{
    return v < info->dlpi_addr ? v + info->dlpi_addr : v;
}

/* Read-only mappings when patching began (/proc/self/maps). An entry on a
 * read-only page (RELRO, relocated) is written between mprotect calls and
 * the page made read-only again; an entry on a writable page is written as
 * is and the page left so: it may belong to an object another thread is
 * loading, whose loader protects it when done (making it read-only ourselves
 * would make the loader's next write fault). */
#define RO_MAX 8192
typedef struct { uintptr_t lo, hi; } range;
static range *ro;                       /* mapped: RO_MAX ranges */
static int nro;

static void read_maps(void)
{
    nro = -1;                           /* unknown: leave every page we open writable */
    if (ro == NULL) {
        void *p = real.mmap(NULL, RO_MAX * sizeof *ro, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return;
        ro = p;
    }
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[4096];
    size_t have = 0;
    int n = 0;
    for (;;) {
        ssize_t got = read(fd, buf + have, sizeof buf - have);
        if (got <= 0)
            break;
        have += (size_t)got;
        char *line = buf, *end;
        while ((end = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
            unsigned long lo, hi;
            char perms[5];
            *end = 0;
            if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && perms[1] != 'w'
                && n < RO_MAX)
                ro[n++] = (range){lo, hi};
            line = end + 1;
        }
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (have == sizeof buf)         /* a line longer than the buffer: give up */
            break;
    }
    close(fd);
    nro = n;
}

static int read_only(uintptr_t at)
{
    for (int i = 0; i < nro; i++)
        if (at >= ro[i].lo && at < ro[i].hi)
            return 1;
    return 0;
}

typedef struct { int restore; int patched; } patch_ctx;

static void write_entry(const struct dl_phdr_info *info, uintptr_t at, void *value)
{
    (void)info;
    void **slot = (void **)at;
    if (*slot == value)
        return;
    uintptr_t pg = at & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    int was_ro = read_only(at);
    if (mprotect((void *)pg, len, PROT_READ | PROT_WRITE) != 0)
        return;
    atomic_store_explicit((_Atomic(void *) *)slot, value, memory_order_release);
    if (was_ro)
        mprotect((void *)pg, len, PROT_READ);
}

static void patch_rela(const struct dl_phdr_info *info, const ElfW(Rela) *r, size_t n,
                       const ElfW(Sym) *symtab, const char *strtab, int interp, patch_ctx *c)
{
    for (size_t i = 0; i < n; i++) {
        unsigned type = (unsigned)ELF64_R_TYPE(r[i].r_info);
        if (type != R_SLOT && type != R_GLOB && !(type == R_ABS && r[i].r_addend == 0))
            continue;
        size_t sym = ELF64_R_SYM(r[i].r_info);
        if (sym == 0)
            continue;
        const char *name = strtab + symtab[sym].st_name;
        if (name[0] != 'm' && name[0] != 'c' && name[0] != 'r' && name[0] != 'f'
            && name[0] != 'p' && name[0] != 'a' && name[0] != 'v' && name[0] != 'd')
            continue;
        for (size_t k = 0; k < NHOOKS; k++) {
            if ((interp && !hooks[k].interp) || strcmp(name, hooks[k].name) != 0)
                continue;
            if (*hooks[k].real != NULL) {
                write_entry(info, info->dlpi_addr + r[i].r_offset,
                            c->restore ? *hooks[k].real : hooks[k].wrapper);
                c->patched++;
            }
            break;
        }
    }
}

static int patch_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *nm = info->dlpi_name ? info->dlpi_name : "";
    if (strstr(nm, "linux-vdso") || strstr(nm, "/ld-linux") || strstr(nm, "/ld64.so")
        || contains(info, self_addr) || contains(info, alloc_addr))
        return 0;
    int interp = contains(info, interp_addr);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        const ElfW(Sym) *symtab = NULL;
        const char *strtab = NULL;
        const ElfW(Rela) *rela = NULL, *jmprel = NULL;
        size_t relasz = 0, pltsz = 0;
        long pltrel = DT_RELA;
        for (; d->d_tag != DT_NULL; d++) {
            switch (d->d_tag) {
            case DT_SYMTAB: symtab = (const void *)dyn_addr(info, d->d_un.d_ptr); break;
            case DT_STRTAB: strtab = (const void *)dyn_addr(info, d->d_un.d_ptr); break;
            case DT_RELA: rela = (const void *)dyn_addr(info, d->d_un.d_ptr); break;
            case DT_RELASZ: relasz = d->d_un.d_val; break;
            case DT_JMPREL: jmprel = (const void *)dyn_addr(info, d->d_un.d_ptr); break;
            case DT_PLTRELSZ: pltsz = d->d_un.d_val; break;
            case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
            default: break;
            }
        }
        if (symtab == NULL || strtab == NULL)
            continue;
        if (rela)
            patch_rela(info, rela, relasz / sizeof *rela, symtab, strtab, interp, data);
        if (jmprel && pltrel == DT_RELA)    /* 64-bit x86 and ARM: RELA only */
            patch_rela(info, jmprel, pltsz / sizeof *jmprel, symtab, strtab, interp, data);
    }
    return 0;
}

static void patch_all(int restore)
{
    patch_ctx c = {restore, 0};
    read_maps();
    dl_iterate_phdr(patch_cb, &c);
}

/* ------------------------------------------------------------- control */

typedef struct { int dynamic; } main_ctx;

static int main_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    main_ctx *m = data;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_INTERP || info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            m->dynamic = 1;
    return 1;                           /* the first object is the main program */
}

const char *pp_native_allocs_unsupported(void)
{
#ifndef PP_NATIVE_SUPPORTED
    return "--native-allocs works on Linux x86-64 and AArch64 only: this platform's "
           "allocations cannot be interposed";
#else
    main_ctx m = {0};
    dl_iterate_phdr(main_cb, &m);
    if (!m.dynamic)
        return "--native-allocs cannot work in this process: the interpreter is a static "
               "executable (no dynamic linking to interpose malloc through)";
    return NULL;
#endif
}

static int resolve_real(void)
{
    if (real.malloc != NULL)
        return 0;
    for (size_t k = 0; k < NHOOKS; k++)
        if (*hooks[k].real == NULL)
            *hooks[k].real = dlsym(RTLD_DEFAULT, hooks[k].name);
    if (!real.malloc || !real.calloc || !real.realloc || !real.free || !real.mmap
        || !real.munmap || !real.dlopen || !real.dlsym) {
        memset(&real, 0, sizeof real);
        return -1;
    }
    self_addr = (const void *)pp_native_allocs_start;
    interp_addr = (const void *)PyMem_RawMalloc;
    alloc_addr = (const void *)real.malloc;
    return 0;
}

/* A fork while another thread patched: the child's copy of the mutex is held
 * by a thread it does not have. */
static void after_fork_child(void)
{
    pthread_mutex_init(&patch_mu, NULL);
}

/* GIL held. */
int pp_native_allocs_start(void)
{
    static int atfork_set;
    if (!atfork_set && pthread_atfork(NULL, NULL, after_fork_child) == 0)
        atfork_set = 1;
    const char *why = pp_native_allocs_unsupported();
    if (why != NULL) {
        PyErr_SetString(PyExc_RuntimeError, why);
        return -1;
    }
    pthread_mutex_lock(&patch_mu);
    if (resolve_real() < 0) {
        pthread_mutex_unlock(&patch_mu);
        PyErr_SetString(PyExc_RuntimeError,
                        "--native-allocs: the C library's allocator functions were not found");
        return -1;
    }
    pp_frames_init();                   /* checked reads of detached threads' frames */
    atomic_store(&active, 1);           /* before: a wrapper reached now records */
    patch_all(0);
    pthread_mutex_unlock(&patch_mu);
    return 0;
}

/* GIL held. Wrappers still running (or handed out by dlsym) pass through. */
void pp_native_allocs_stop(void)
{
    pthread_mutex_lock(&patch_mu);
    if (atomic_load(&active)) {
        atomic_store(&active, 0);
        patch_all(1);
    }
    pthread_mutex_unlock(&patch_mu);
}
