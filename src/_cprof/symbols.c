/* symbols.c — native frames with function, file and line (see symbols.h).
 *
 * Owns: the process's libdwfl session over its loaded objects (reported again
 * when an object is loaded; begun again, its names dropped, when one is
 * unloaded), each compilation unit's index of scopes, every address named so
 * far (strings copied out of libdw), and the naming thread that names the
 * sampler's new addresses while the program runs; libdw itself, opened at the
 * first naming (dlopen), not linked: loading it and what it needs (libelf,
 * liblzma, libbz2) cost every start ~1 ms.
 * Never: runs in a signal handler or a hook; calls Python or takes the GIL on
 * the naming thread.
 */
#include "symbols.h"

#ifdef PP_HAVE_LIBDW
#include <dlfcn.h>
#include <dwarf.h>
#include <link.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

int pp_symbols_available(void) { return 1; }

#define PP_LIBDW "libdw.so.1"
#define PP_DW_FUNCTIONS(X)                                                                  \
    X(dwarf_attr) X(dwarf_attr_integrate) X(dwarf_child) X(dwarf_dieoffset) X(dwarf_filesrc)  \
    X(dwarf_formstring) X(dwarf_formudata) X(dwarf_getsrcfiles) X(dwarf_ranges)              \
    X(dwarf_siblingof) X(dwarf_tag) X(dwfl_addrmodule) X(dwfl_begin) X(dwfl_end)              \
    X(dwfl_lineinfo) X(dwfl_linux_proc_find_elf) X(dwfl_linux_proc_report)                   \
    X(dwfl_module_addrdie) X(dwfl_module_addrname) X(dwfl_module_getsrc)                     \
    X(dwfl_report_begin) X(dwfl_report_begin_add) X(dwfl_report_end) X(dwfl_standard_find_debuginfo) \
    X(dwfl_build_id_find_debuginfo) X(dwfl_module_build_id) X(dwelf_elf_gnu_build_id)          \
    X(elf_begin) X(elf_end)

#define PP_DW_POINTER(f) __typeof__(f) *f;
static struct { PP_DW_FUNCTIONS(PP_DW_POINTER) } dw;
static int dw_state;                    /* 0: not tried, 1: open, -1: not there */

/* mu held: libdw's functions, looked up once. 0, or -1 if it cannot be opened. */
static int dw_open(void)
{
    if (dw_state == 0) {
        void *h = dlopen(PP_LIBDW, RTLD_NOW | RTLD_LOCAL);
        int ok = h != NULL;
#define PP_DW_LOOKUP(f)                                                                     \
        if (ok) {                                                                           \
            void *sym = dlsym(h, #f);                                                       \
            ok = sym != NULL;                                                               \
            memcpy(&dw.f, &sym, sizeof sym);    /* object to function pointer: POSIX */     \
        }
        PP_DW_FUNCTIONS(PP_DW_LOOKUP)
#undef PP_DW_LOOKUP
        dw_state = ok ? 1 : -1;
    }
    return dw_state == 1 ? 0 : -1;
}

/* Below, each libdw call goes through the table. */
#define PP_DW_CALL(f) (*dw.f)
#define dwarf_attr PP_DW_CALL(dwarf_attr)
#define dwarf_attr_integrate PP_DW_CALL(dwarf_attr_integrate)
#define dwarf_filesrc PP_DW_CALL(dwarf_filesrc)
#define dwarf_formstring PP_DW_CALL(dwarf_formstring)
#define dwarf_formudata PP_DW_CALL(dwarf_formudata)
#define dwarf_getsrcfiles PP_DW_CALL(dwarf_getsrcfiles)
#define dwarf_tag PP_DW_CALL(dwarf_tag)
#define dwarf_child PP_DW_CALL(dwarf_child)
#define dwarf_siblingof PP_DW_CALL(dwarf_siblingof)
#define dwarf_ranges PP_DW_CALL(dwarf_ranges)
#define dwarf_dieoffset PP_DW_CALL(dwarf_dieoffset)
#define dwfl_addrmodule PP_DW_CALL(dwfl_addrmodule)
#define dwfl_begin PP_DW_CALL(dwfl_begin)
#define dwfl_end PP_DW_CALL(dwfl_end)
#define dwfl_lineinfo PP_DW_CALL(dwfl_lineinfo)
#define dwfl_linux_proc_find_elf PP_DW_CALL(dwfl_linux_proc_find_elf)
#define dwfl_linux_proc_report PP_DW_CALL(dwfl_linux_proc_report)
#define dwfl_module_addrdie PP_DW_CALL(dwfl_module_addrdie)
#define dwfl_module_addrname PP_DW_CALL(dwfl_module_addrname)
#define dwfl_module_getsrc PP_DW_CALL(dwfl_module_getsrc)
#define dwfl_report_begin PP_DW_CALL(dwfl_report_begin)
#define dwfl_report_begin_add PP_DW_CALL(dwfl_report_begin_add)
#define dwfl_report_end PP_DW_CALL(dwfl_report_end)
#define dwfl_standard_find_debuginfo PP_DW_CALL(dwfl_standard_find_debuginfo)
#define dwfl_build_id_find_debuginfo PP_DW_CALL(dwfl_build_id_find_debuginfo)
#define dwfl_module_build_id PP_DW_CALL(dwfl_module_build_id)
#define dwelf_elf_gnu_build_id PP_DW_CALL(dwelf_elf_gnu_build_id)
#define elf_begin PP_DW_CALL(elf_begin)
#define elf_end PP_DW_CALL(elf_end)

/* A DIE's name: its linkage (mangled) name where it has one, else its plain
 * name, following DW_AT_abstract_origin / DW_AT_specification. */
/* libdw's standard search asks debuginfod servers (DEBUGINFOD_URLS, set by
 * default on Fedora and Ubuntu) for the debug information an object lacks on
 * this host: naming a profile would send the build ids of the program's
 * libraries over the network and wait for the answers, or for a download.
 * Only with PYPROF_DEBUGINFOD=1 (docs/sampling.md); otherwise what the host
 * has: the build-id tree under /usr/lib/debug, then the object's
 * .gnu_debuglink beside it, in its .debug directory, or under /usr/lib/debug. */
static int debuginfod_allowed = -1;     /* mu held: read at the first session */

/* The candidate is the object's debug file: the same build id where the
 * object has one, else the same CRC (a dwz alternate file, crc 0, is taken
 * as named). */
static int debug_file_matches(Dwfl_Module *mod, int fd, GElf_Word crc)
{
    const unsigned char *want;
    GElf_Addr vaddr;
    int n = dwfl_module_build_id(mod, &want, &vaddr);
    if (n > 0 && crc != 0) {
        Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
        const void *got = NULL;
        ssize_t m = elf ? dwelf_elf_gnu_build_id(elf, &got) : -1;
        int same = m == n && memcmp(got, want, (size_t)n) == 0;
        if (elf)
            elf_end(elf);
        return same;
    }
    if (crc == 0)
        return 1;
    uLong sum = crc32(0L, Z_NULL, 0);
    unsigned char buf[1 << 16];
    ssize_t r;
    off_t at = 0;
    while ((r = pread(fd, buf, sizeof buf, at)) > 0) {
        sum = crc32(sum, buf, (uInt)r);
        at += r;
    }
    return r == 0 && (GElf_Word)sum == crc;
}

static int find_debuginfo_here(Dwfl_Module *mod, void **userdata, const char *modname,
                               Dwarf_Addr base, const char *file_name, const char *link,
                               GElf_Word crc, char **debug_name)
{
    if (debuginfod_allowed > 0)
        return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, link, crc,
                                            debug_name);
    int fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, link, crc,
                                          debug_name);
    if (fd >= 0 || link == NULL || link[0] == '\0')
        return fd;
    char dir[4096], path[4096];
    const char *slash = file_name ? strrchr(file_name, '/') : NULL;
    int dn = slash ? (int)(slash - file_name) : 0;
    if (slash == NULL || (size_t)dn >= sizeof dir)
        dir[0] = '\0';
    else
        snprintf(dir, sizeof dir, "%.*s", dn, file_name);
    struct stat self;
    int have_self = file_name != NULL && stat(file_name, &self) == 0;
    for (int k = 0; k < 4; k++) {
        int w = link[0] == '/' ? (k == 0 ? snprintf(path, sizeof path, "%s", link) : -1)
              : k == 0 ? (dir[0] ? snprintf(path, sizeof path, "%s/%s", dir, link) : -1)
              : k == 1 ? (dir[0] ? snprintf(path, sizeof path, "%s/.debug/%s", dir, link) : -1)
              : k == 2 ? snprintf(path, sizeof path, "/usr/lib/debug%s/%s", dir, link)
              : -1;
        if (w < 0 || (size_t)w >= sizeof path)
            continue;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        if ((have_self && fstat(fd, &st) == 0 && st.st_dev == self.st_dev
             && st.st_ino == self.st_ino) || !debug_file_matches(mod, fd, crc)) {
            close(fd);                  /* the object itself, or another build's */
            continue;
        }
        *debug_name = strdup(path);
        return fd;
    }
    return -1;
}

static const char *die_name(Dwarf_Die *die)
{
    Dwarf_Attribute a;
    const char *s = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a)
        || dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
        s = dwarf_formstring(&a);
    if (s == NULL && dwarf_attr_integrate(die, DW_AT_name, &a))
        s = dwarf_formstring(&a);
    return s;
}

/* One address's frames, innermost first, the strings copied out of libdw. */
typedef struct {
    char *name, *file;
    int line;
} pp_cframe;

typedef struct {
    uintptr_t ip;                       /* 0: a free slot */
    int n;                              /* frames; 0: nothing names the address */
    pp_cframe *f;
} pp_named;

static void named_clear(pp_named *e)
{
    for (int i = 0; i < e->n; i++) {
        free(e->f[i].name);
        free(e->f[i].file);
    }
    free(e->f);
    e->n = 0;
    e->f = NULL;
}

static int add_frame(pp_named *e, const char *name, const char *file, int line)
{
    pp_cframe *f = realloc(e->f, (size_t)(e->n + 1) * sizeof *f);
    if (f == NULL)
        return -1;
    e->f = f;
    f[e->n] = (pp_cframe){strdup(name ? name : ""), strdup(file ? file : ""), line};
    if (f[e->n].name == NULL || f[e->n].file == NULL) {
        free(f[e->n].name);
        free(f[e->n].file);
        return -1;
    }
    e->n++;
    return 0;
}

/* The code-bearing scopes of one compilation unit: each address range of each
 * function and inlined instance, with the scope that holds it. Built with one
 * walk of the unit's DIEs the first time one of its addresses is named;
 * dwarf_getscopes walks the unit's DIEs for every address (about 0.8 ms per
 * address in libpython's ceval.c, whose main function holds thousands of
 * inlined instances). */
typedef struct {
    Dwarf_Addr lo, hi;                  /* [lo, hi), the unit's addresses */
    Dwarf_Die die;
    int parent;                         /* the enclosing scope's first range, or -1 */
    int depth;
} pp_scope;

typedef struct {
    Dwfl_Module *mod;
    Dwarf_Off cu;
    pp_scope *v;
    int n, cap;
} pp_unit;

typedef struct {
    pp_unit *v;
    int n, cap;
} pp_units;

#define PP_SCOPE_DEPTH_MAX 256          /* deeper nesting is not followed */

static int scope_add(pp_unit *u, Dwarf_Die *die, Dwarf_Addr lo, Dwarf_Addr hi, int parent, int depth)
{
    if (u->n == u->cap) {
        int cap = u->cap ? 2 * u->cap : 256;
        pp_scope *v = realloc(u->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        u->v = v;
        u->cap = cap;
    }
    u->v[u->n] = (pp_scope){lo, hi, *die, parent, depth};
    return u->n++;
}

/* Functions and inlined instances with code, below `die`; lexical blocks and
 * C++ namespaces and classes are passed through. -1 when out of memory. */
static int scope_walk(pp_unit *u, Dwarf_Die *die, int parent, int depth)
{
    Dwarf_Die child;
    if (depth > PP_SCOPE_DEPTH_MAX || dwarf_child(die, &child) != 0)
        return 0;
    do {
        int tag = dwarf_tag(&child), holder = parent;
        switch (tag) {
        case DW_TAG_subprogram:
        case DW_TAG_inlined_subroutine: {
            Dwarf_Addr base, lo, hi;
            ptrdiff_t off = 0;
            holder = -1;
            while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
                int at = scope_add(u, &child, lo, hi, parent, depth);
                if (at < 0)
                    return -1;
                if (holder < 0)
                    holder = at;
            }
            if (holder < 0)
                continue;               /* a declaration or an abstract instance: no code */
            break;
        }
        case DW_TAG_lexical_block:
        case DW_TAG_namespace:          /* not types: compilers put the code of a
                                         * class's methods outside the class */
        case DW_TAG_try_block:
        case DW_TAG_catch_block:
            break;
        default:
            continue;
        }
        if (scope_walk(u, &child, holder, depth + 1) < 0)
            return -1;
    } while (dwarf_siblingof(&child, &child) == 0);
    return 0;
}

/* The unit index for `cu` of `mod`, built if new; NULL when out of memory. */
static pp_unit *unit_of(pp_units *units, Dwfl_Module *mod, Dwarf_Die *cu)
{
    Dwarf_Off off = dwarf_dieoffset(cu);
    for (int i = 0; i < units->n; i++)
        if (units->v[i].mod == mod && units->v[i].cu == off)
            return &units->v[i];
    if (units->n == units->cap) {
        int cap = units->cap ? 2 * units->cap : 16;
        pp_unit *v = realloc(units->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return NULL;
        units->v = v;
        units->cap = cap;
    }
    pp_unit *u = &units->v[units->n++];
    *u = (pp_unit){mod, off, NULL, 0, 0};
    return scope_walk(u, cu, -1, 0) < 0 ? NULL : u;
}

/* The frames of one address, into `out` (empty): 0, or -1 when out of memory. */
static int frames_of(pp_units *units, Dwfl *dwfl, Dwarf_Addr ip, pp_named *out)
{
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, ip);
    if (mod == NULL)
        return 0;
    const char *file = NULL;
    int line = 0;
    Dwfl_Line *ln = dwfl_module_getsrc(mod, ip);
    if (ln != NULL)
        file = dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL);
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, ip, &bias);
    pp_unit *u = NULL;
    if (cu != NULL && (u = unit_of(units, mod, cu)) == NULL)
        return -1;
    /* the innermost scope holding the address: the deepest whose range does */
    int at = -1;
    for (int i = 0; u != NULL && i < u->n; i++)
        if (u->v[i].lo <= ip - bias && ip - bias < u->v[i].hi
            && (at < 0 || u->v[i].depth > u->v[at].depth))
            at = i;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (at >= 0 && dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
        files = NULL;
    int found = 0;
    for (; at >= 0; at = u->v[at].parent) {
        Dwarf_Die *die = &u->v[at].die;
        const char *name = die_name(die);
        if (name == NULL)               /* the symbol table searched only here: linearly */
            name = dwfl_module_addrname(mod, ip);
        if (add_frame(out, name, file, line) < 0)
            return -1;
        found = 1;
        if (dwarf_tag(die) == DW_TAG_subprogram)
            break;
        /* the next frame out runs at the inlined call's site */
        Dwarf_Attribute a;
        Dwarf_Word w;
        line = dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &a), &w) == 0 ? (int)w : 0;
        file = files && dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &a), &w) == 0
               && w < nfiles ? dwarf_filesrc(files, w, NULL, NULL) : NULL;
    }
    const char *sym;
    if (!found && (sym = dwfl_module_addrname(mod, ip)) != NULL)  /* no debug information */
        return add_frame(out, sym, file, line);
    return 0;
}

/* The process's naming state, under `mu`: one libdwfl session (its modules
 * reported again when a library has been loaded since) with
 * its unit indexes, and every address named so far, by address. Kept for the
 * process: sampling with --native names addresses on a thread of its own
 * while the program runs (pp_symbols_prefetch), and the capture takes them. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Dwfl *session;
static pp_units units;
static pp_named *named;
static size_t named_cap, named_n;

static unsigned long long reported_adds, reported_subs;

static int count_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *c = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1;
}

/* mu held: the session ended, the names kept. Its files stay mapped while
 * it lasts, so it ends with each naming outside a run: a debugger or
 * pyprof's own attach reads this process's maps. */
static void end_session(void)
{
    for (int i = 0; i < units.n; i++)
        free(units.v[i].v);
    free(units.v);
    units = (pp_units){NULL, 0, 0};
    if (session != NULL)
        dwfl_end(session);
    session = NULL;
}

static void drop_names(void)
{
    for (size_t i = 0; i < named_cap; i++)
        if (named[i].ip != 0)
            named_clear(&named[i]);
    free(named);
    named = NULL;
    named_cap = named_n = 0;
    end_session();
}

static size_t slot_of(uintptr_t ip)
{
    uint64_t h = (uint64_t)ip * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & (named_cap - 1);
    while (named[i].ip != 0 && named[i].ip != ip)
        i = (i + 1) & (named_cap - 1);
    return i;
}

/* mu held: the entry of `ip`, named now if new; NULL when out of memory or
 * when this process's objects cannot be read. */
static pp_named *name_locked(uintptr_t ip)
{
    unsigned long long counts[2] = {0, 0};
    dl_iterate_phdr(count_cb, counts);
    if ((named_n != 0 || session != NULL) && counts[1] != reported_subs)
        drop_names();                   /* unloaded: an address may mean another function */
    if (named_cap == 0 || 2 * (named_n + 1) > named_cap) {
        size_t cap = named_cap ? 2 * named_cap : 1024;
        pp_named *old = named;
        size_t old_cap = named_cap;
        named = calloc(cap, sizeof *named);
        if (named == NULL) {
            named = old;
            return NULL;
        }
        named_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].ip != 0)
                named[slot_of(old[i].ip)] = old[i];
        free(old);
    }
    size_t i = slot_of(ip);
    if (named[i].ip == ip)
        return &named[i];
    int loaded = counts[0] != reported_adds;
    reported_adds = counts[0];
    reported_subs = counts[1];
    if (session == NULL) {
        static char *debuginfo_path = NULL;
        static Dwfl_Callbacks cb;               /* the session keeps a pointer to it */
        if (debuginfod_allowed < 0) {
            const char *opt = getenv("PYPROF_DEBUGINFOD");
            debuginfod_allowed = opt != NULL && strcmp(opt, "1") == 0;
        }
        cb = (Dwfl_Callbacks){.find_elf = dwfl_linux_proc_find_elf,
                              .find_debuginfo = find_debuginfo_here,
                              .debuginfo_path = &debuginfo_path};
        if ((session = dwfl_begin(&cb)) == NULL)
            return NULL;
        dwfl_report_begin(session);
        int rc = dwfl_linux_proc_report(session, getpid());
        dwfl_report_end(session, NULL, NULL);
        if (rc != 0) {
            dwfl_end(session);
            session = NULL;
            return NULL;
        }
    } else if (loaded) {
        dwfl_report_begin_add(session);         /* keeps what is known */
        dwfl_linux_proc_report(session, getpid());
        dwfl_report_end(session, NULL, NULL);
    }
    pp_named e = {ip, 0, NULL};
    if (frames_of(&units, session, (Dwarf_Addr)ip, &e) < 0) {
        named_clear(&e);
        return NULL;
    }
    named[i] = e;
    named_n++;
    return &named[i];
}

/* The naming thread and its queue, under qmu. It lives while the sampler
 * runs (pp_symbols_quiesce joins it at stop): a program that forks after
 * profiling is single-threaded again. */
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcv = PTHREAD_COND_INITIALIZER;
static uintptr_t *queue;
static size_t queue_n, queue_cap;
static pthread_t namer;
static int namer_on, namer_stop;
#define PP_QUEUE_MAX (1u << 20)          /* beyond: left to the capture's naming */

static void *namer_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "pyprof-names");
    uintptr_t *batch = NULL;
    size_t batch_cap = 0;
    for (;;) {
        pthread_mutex_lock(&qmu);
        while (queue_n == 0 && !__atomic_load_n(&namer_stop, __ATOMIC_RELAXED))
            pthread_cond_wait(&qcv, &qmu);
        if (__atomic_load_n(&namer_stop, __ATOMIC_RELAXED)) {
            pthread_mutex_unlock(&qmu);
            break;
        }
        uintptr_t *q = queue;                   /* take the queue, leave the batch */
        size_t n = queue_n, cap = queue_cap;
        queue = batch;
        queue_cap = batch_cap;
        queue_n = 0;
        pthread_mutex_unlock(&qmu);
        batch = q;
        batch_cap = cap;
        /* mu per address: a fork() waits for one naming at most (atfork_prepare) */
        for (size_t i = 0; i < n && !__atomic_load_n(&namer_stop, __ATOMIC_RELAXED); i++) {
            pthread_mutex_lock(&mu);
            int ok = dw_open() == 0 && name_locked(batch[i]) != NULL;
            pthread_mutex_unlock(&mu);
            if (!ok)
                break;
        }
    }
    free(batch);
    return NULL;
}

/* A thread inside libdw or the loader (dlopen of a debug-info helper) at
 * fork() would leave the child a half-made state: fork waits for the naming
 * of one address. The child has no naming thread and starts again (the
 * parent's session and names are let go). */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&mu);
}

static void atfork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_mutex_init(&qmu, NULL);
    pthread_cond_init(&qcv, NULL);
    session = NULL;
    units = (pp_units){NULL, 0, 0};
    named = NULL;
    named_cap = named_n = 0;
    queue = NULL;
    queue_n = queue_cap = 0;
    __atomic_store_n(&namer_on, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&namer_stop, 0, __ATOMIC_RELAXED);
}

void pp_symbols_prefetch(const uintptr_t *ips, int n)
{
    if (n <= 0)
        return;
    pthread_mutex_lock(&qmu);
    if (!__atomic_load_n(&namer_on, __ATOMIC_RELAXED)) {
        static int atfork_set;
        if (!atfork_set)
            atfork_set = pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0;
        /* no signal for it: no sampler's, none of the program's */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        __atomic_store_n(&namer_stop, 0, __ATOMIC_RELAXED);
        int on = atfork_set && pthread_create(&namer, NULL, namer_main, NULL) == 0 ? 1 : -1;
        __atomic_store_n(&namer_on, on, __ATOMIC_RELAXED);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (__atomic_load_n(&namer_on, __ATOMIC_RELAXED) > 0 && queue_n + (size_t)n <= PP_QUEUE_MAX) {
        if (queue_n + (size_t)n > queue_cap) {
            size_t cap = queue_cap ? queue_cap : 256;
            while (cap < queue_n + (size_t)n)
                cap *= 2;
            uintptr_t *q = realloc(queue, cap * sizeof *q);
            if (q != NULL) {
                queue = q;
                queue_cap = cap;
            }
        }
        if (queue_n + (size_t)n <= queue_cap) {
            /* the leaf as it is, each return address inside its call */
            for (int i = 0; i < n; i++)
                queue[queue_n++] = i == 0 ? ips[i] : ips[i] - 1;
            pthread_cond_signal(&qcv);
        }
    }
    pthread_mutex_unlock(&qmu);
}

void pp_symbols_quiesce(void)
{
    pthread_mutex_lock(&qmu);
    int on = __atomic_load_n(&namer_on, __ATOMIC_RELAXED) > 0;
    if (on) {
        __atomic_store_n(&namer_stop, 1, __ATOMIC_RELAXED);
        pthread_cond_signal(&qcv);
    }
    pthread_mutex_unlock(&qmu);
    if (on)
        pthread_join(namer, NULL);      /* within one address's naming */
    pthread_mutex_lock(&qmu);
    __atomic_store_n(&namer_on, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&namer_stop, 0, __ATOMIC_RELAXED);
    queue_n = 0;                        /* the rest is named with the capture */
    pthread_mutex_unlock(&qmu);
    pthread_mutex_lock(&mu);
    end_session();
    pthread_mutex_unlock(&mu);
}

PyObject *pp_symbols_frames(PyObject *ips)
{
    PyObject *seq = PySequence_Fast(ips, "native_frames(ips): a sequence of addresses");
    if (seq == NULL)
        return NULL;
    PyObject *out = PyDict_New();
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    /* The GIL is kept: a thread that forks holds it, and its fork waits for
     * mu (atfork_prepare); the naming thread holds mu for one address. */
    pthread_mutex_lock(&mu);
    if (dw_open() < 0) {
        pthread_mutex_unlock(&mu);
        Py_DECREF(out);
        Py_DECREF(seq);
        Py_RETURN_NONE;                 /* as without libdw: the callers fall back */
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
        unsigned long long ip = PyLong_AsUnsignedLongLong(key);
        if (PyErr_Occurred())
            goto fail;
        if (ip == 0)
            continue;
        pp_named *e = name_locked((uintptr_t)ip);
        if (e == NULL) {
            if (session == NULL)
                PyErr_SetString(PyExc_OSError, "native_frames: cannot read this process's objects");
            else
                PyErr_NoMemory();
            goto fail;
        }
        if (e->n == 0)
            continue;
        PyObject *frames = PyList_New(e->n);
        if (frames == NULL)
            goto fail;
        for (int k = 0; k < e->n; k++) {
            PyObject *t = Py_BuildValue("(ssi)", e->f[k].name, e->f[k].file, e->f[k].line);
            if (t == NULL) {
                Py_DECREF(frames);
                goto fail;
            }
            PyList_SET_ITEM(frames, k, t);
        }
        int rc = PyDict_SetItem(out, key, frames);
        Py_DECREF(frames);
        if (rc < 0)
            goto fail;
    }
    if (!__atomic_load_n(&namer_on, __ATOMIC_RELAXED))
        end_session();
    pthread_mutex_unlock(&mu);
    Py_DECREF(seq);
    return out;
fail:
    if (!__atomic_load_n(&namer_on, __ATOMIC_RELAXED))
        end_session();
    pthread_mutex_unlock(&mu);
    Py_DECREF(out);
    Py_DECREF(seq);
    return NULL;
}

#else

int pp_symbols_available(void) { return 0; }

PyObject *pp_symbols_frames(PyObject *ips)
{
    (void)ips;
    Py_RETURN_NONE;
}

void pp_symbols_prefetch(const uintptr_t *ips, int n)
{
    (void)ips; (void)n;
}

void pp_symbols_quiesce(void)
{
}

#endif
