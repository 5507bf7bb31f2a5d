/* remote.c — another CPython process from outside (remote.h).
 *
 * Owns: the target's maps and ELF symbols, process_vm_readv/writev, stopping
 * every thread of the target for the few operations that must not race with
 * it, and the pending-call queue of its main interpreter (PEP 768's idea on
 * 3.11-3.13: a request written into the interpreter's memory, run by the
 * interpreter itself at its next safe point, between two bytecodes, with the
 * GIL held).
 * Never: a register of the target is read-modified-written or an inferior
 * call made; no signal is sent; a thread is never left stopped or traced. A
 * thread stopped inside a system call is resumed by the kernel's own restart
 * of that call (ptrace-stop is not a signal the program handles).
 * Runs in the client process (pyprof attach/dump/top), never in the target.
 */
#define _GNU_SOURCE 1
#include "remote.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void pp_remote_say(char *err, size_t n, const char *fmt, ...)
{
    if (err == NULL || n == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

int64_t pp_remote_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---------------------------------------------------------- memory */

int pp_remote_read(pid_t pid, uintptr_t addr, void *buf, size_t len)
{
    struct iovec local = {buf, len}, remote = {(void *)addr, len};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got == (ssize_t)len)
        return 0;
    if (got >= 0)
        errno = EFAULT;
    return -1;
}

int pp_remote_write(pid_t pid, uintptr_t addr, const void *buf, size_t len)
{
    struct iovec local = {(void *)buf, len}, remote = {(void *)addr, len};
    ssize_t put = process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (put == (ssize_t)len)
        return 0;
    if (put >= 0)
        errno = EFAULT;
    return -1;
}

#define RD(r, addr, var) pp_remote_read((r)->pid, (uintptr_t)(addr), &(var), sizeof(var))

/* ---------------------------------------------------------- maps and ELF */

typedef struct {
    uintptr_t start, end;
    unsigned long long offset;
    char perms[5];
    char path[512];
} map_row;

/* The target's mappings (malloc'd array, *count rows), or NULL with errno. */
static map_row *read_maps(pid_t pid, int *count)
{
    char name[64];
    snprintf(name, sizeof name, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(name, "re");
    if (f == NULL)
        return NULL;
    int cap = 256, n = 0;
    map_row *rows = malloc(cap * sizeof *rows);
    char line[1024];
    while (rows && fgets(line, sizeof line, f)) {
        if (n == cap) {
            map_row *more = realloc(rows, 2 * cap * sizeof *rows);
            if (more == NULL) {
                free(rows);
                rows = NULL;
                break;
            }
            rows = more;
            cap *= 2;
        }
        map_row *m = &rows[n];
        unsigned long s, e;
        int used = 0;
        m->path[0] = 0;
        if (sscanf(line, "%lx-%lx %4s %llx %*s %*s %n", &s, &e, m->perms, &m->offset, &used) < 4)
            continue;
        m->start = s;
        m->end = e;
        if (used > 0 && line[used] == '/') {
            size_t len = strcspn(line + used, "\n");
            if (len >= sizeof m->path)
                continue;
            memcpy(m->path, line + used, len);
            m->path[len] = 0;
        }
        n++;
    }
    int saved = errno;
    fclose(f);
    errno = saved;
    *count = n;
    return rows;
}

/* An ELF file of the target, mapped read-only here. */
typedef struct {
    const unsigned char *data;
    size_t size;
    const Elf64_Ehdr *eh;
} elf_file;

static int elf_open(pid_t pid, const char *path, elf_file *e)
{
    char name[600];
    int fd = -1;
    /* through the target's root: right inside a container too */
    snprintf(name, sizeof name, "/proc/%d/root%s", (int)pid, path);
    fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return -1;
    e->data = p;
    e->size = st.st_size;
    e->eh = p;
    if (memcmp(e->eh->e_ident, ELFMAG, SELFMAG) != 0 || e->eh->e_ident[EI_CLASS] != ELFCLASS64
        || e->eh->e_phoff + (size_t)e->eh->e_phnum * sizeof(Elf64_Phdr) > e->size
        || e->eh->e_shoff + (size_t)e->eh->e_shnum * sizeof(Elf64_Shdr) > e->size) {
        munmap(p, st.st_size);
        return -1;
    }
    return 0;
}

static void elf_close(elf_file *e)
{
    munmap((void *)e->data, e->size);
}

static const Elf64_Phdr *elf_phdr(const elf_file *e, int i)
{
    return (const Elf64_Phdr *)(e->data + e->eh->e_phoff) + i;
}

/* The lowest PT_LOAD's page-aligned address: load bias = its mapping - this. */
static uintptr_t elf_first_load(const elf_file *e)
{
    uintptr_t lo = UINTPTR_MAX;
    for (int i = 0; i < e->eh->e_phnum; i++) {
        const Elf64_Phdr *ph = elf_phdr(e, i);
        if (ph->p_type == PT_LOAD && ph->p_vaddr < lo)
            lo = ph->p_vaddr;
    }
    return lo == UINTPTR_MAX ? 0 : lo & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
}

/* Look the names up in .dynsym, then .symtab; addrs[i] stays 0 if absent. */
static void elf_lookup(const elf_file *e, const char *const *names, uintptr_t *addrs, int count,
                       uintptr_t bias)
{
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(e->data + e->eh->e_shoff);
    for (int pass = 0; pass < 2; pass++) {
        unsigned want = pass == 0 ? SHT_DYNSYM : SHT_SYMTAB;
        for (int i = 0; i < e->eh->e_shnum; i++) {
            if (sh[i].sh_type != want || sh[i].sh_link >= e->eh->e_shnum)
                continue;
            const Elf64_Shdr *strs = &sh[sh[i].sh_link];
            if (sh[i].sh_offset + sh[i].sh_size > e->size
                || strs->sh_offset + strs->sh_size > e->size || sh[i].sh_entsize != sizeof(Elf64_Sym))
                continue;
            const Elf64_Sym *sym = (const Elf64_Sym *)(e->data + sh[i].sh_offset);
            size_t nsym = sh[i].sh_size / sizeof *sym;
            const char *str = (const char *)e->data + strs->sh_offset;
            for (size_t k = 0; k < nsym; k++) {
                if (sym[k].st_shndx == SHN_UNDEF || sym[k].st_name >= strs->sh_size
                    || sym[k].st_value == 0)
                    continue;
                const char *s = str + sym[k].st_name;
                for (int j = 0; j < count; j++)
                    if (addrs[j] == 0 && strcmp(s, names[j]) == 0)
                        addrs[j] = bias + sym[k].st_value;
            }
        }
    }
}

/* Unused bytes the target maps writable: the tail of the last page of an
 * object's writable PT_LOAD, past its .bss (the kernel zero-fills it, the
 * program's data ends before it, and the heap starts on a page of its own).
 * The dynamic loader's own is skipped: its early allocator uses that tail. */
static void elf_scratch(const elf_file *e, uintptr_t bias, const map_row *rows, int count,
                        pp_remote *r, size_t need)
{
    size_t page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < e->eh->e_phnum && r->scratch == 0; i++) {
        const Elf64_Phdr *ph = elf_phdr(e, i);
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
            continue;
        uintptr_t end = bias + ph->p_vaddr + ph->p_memsz;
        uintptr_t page_end = (end + page - 1) & ~(uintptr_t)(page - 1);
        /* the next writable PT_LOAD, if any, must start beyond that page */
        int later = 0;
        for (int j = 0; j < e->eh->e_phnum; j++) {
            const Elf64_Phdr *q = elf_phdr(e, j);
            if (q->p_type == PT_LOAD && bias + q->p_vaddr >= end && bias + q->p_vaddr < page_end)
                later = 1;
        }
        if (later || page_end - end < need + 16)
            continue;
        for (int k = 0; k < count; k++) {
            if (rows[k].start <= end && page_end <= rows[k].end && rows[k].perms[0] == 'r'
                && rows[k].perms[1] == 'w') {
                /* aligned, and left alone if anything is there already */
                uintptr_t at = (end + 15) & ~(uintptr_t)15;
                unsigned char buf[512];
                size_t len = page_end - at < sizeof buf ? page_end - at : sizeof buf;
                if (pp_remote_read(r->pid, at, buf, len) < 0)
                    break;
                size_t zeros = 0;
                while (zeros < len && buf[zeros] == 0)
                    zeros++;
                if (zeros >= need) {
                    r->scratch = at;
                    r->scratch_size = zeros;
                }
                break;
            }
        }
    }
}

/* Whether a thread has exited (a zombie leader: its thread group runs on). */
static int thread_exited(pid_t pid, pid_t tid)
{
    char name[64], buf[512];
    snprintf(name, sizeof name, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return 1;
    buf[got] = 0;
    const char *end = strrchr(buf, ')');
    return end != NULL && (end[2] == 'Z' || end[2] == 'X');
}

/* A thread of the process that has not exited: the process's memory and maps
 * are reached through it when the first thread ended alone (a zombie leader). */
static pid_t live_thread(pid_t pid)
{
    if (!thread_exited(pid, pid))
        return pid;
    char name[64];
    snprintf(name, sizeof name, "/proc/%d/task", (int)pid);
    DIR *d = opendir(name);
    if (d == NULL)
        return pid;
    pid_t found = pid;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(de->d_name);
        if (tid > 0 && !thread_exited(pid, tid)) {
            found = tid;
            break;
        }
    }
    closedir(d);
    return found;
}

/* Whether rows[i] (offset 0) starts an object the loader mapped: its next
 * segments follow, one of them executable. A file mapped whole to be read
 * (libelf reading debug information does) is one mapping of its own. */
static int loaded_object_at(const map_row *rows, int count, int i)
{
    for (int k = i + 1; k < count && strcmp(rows[k].path, rows[i].path) == 0; k++)
        if (strchr(rows[k].perms, 'x') != NULL || strchr(rows[i].perms, 'x') != NULL)
            return 1;
    return strchr(rows[i].perms, 'x') != NULL;
}

int pp_remote_open(pp_remote *r, pid_t pid, char *err, size_t n)
{
    memset(r, 0, sizeof *r);
    pid = live_thread(pid);
    r->pid = pid;
    int count = 0;
    map_row *rows = read_maps(pid, &count);
    if (rows == NULL) {
        int e = errno;
        pp_remote_say(err, n, "cannot read /proc/%d/maps: %s", (int)pid, strerror(e));
        errno = e;
        return -1;
    }
    static const char *const names[] = {"_PyRuntime", "Py_Version", "PyRun_SimpleString",
                                        "PyCode_Type"};
    enum { N = sizeof names / sizeof names[0] };
    uintptr_t found[N] = {0};
    const char *seen_last = "";
    /* the program or a libpython by name first, then any object (an embedding
     * program: uwsgi, a game engine) */
    for (int i = 0; i < 2 * count && found[0] == 0; i++) {
        const map_row *row = &rows[i % count];
        if (i == count)
            seen_last = "";
        if (row->offset != 0 || row->path[0] != '/' || strcmp(row->path, seen_last) == 0
            || !loaded_object_at(rows, count, i % count))
            continue;
        seen_last = row->path;
        const char *base = strrchr(row->path, '/') + 1;
        int named = strncmp(base, "python", 6) == 0 || strncmp(base, "libpython", 9) == 0;
        if (named != (i < count))
            continue;
        elf_file e;
        if (elf_open(pid, row->path, &e) < 0)
            continue;
        uintptr_t bias = row->start - elf_first_load(&e);
        uintptr_t addrs[N] = {0};
        elf_lookup(&e, names, addrs, N, bias);
        if (addrs[0] && addrs[1]) {
            memcpy(found, addrs, sizeof found);
            elf_scratch(&e, bias, rows, count, r, 256);
        }
        elf_close(&e);
    }
    if (found[0] == 0) {
        free(rows);
        pp_remote_say(err, n, "no _PyRuntime and Py_Version symbols in the program or a libpython it "
            "maps (not CPython 3.11 or later)");
        errno = ENOENT;
        return -1;
    }
    /* other objects' tails, if the interpreter's own had no room (never ld.so's) */
    seen_last = "";
    for (int i = 0; i < count && r->scratch == 0; i++) {
        if (rows[i].offset != 0 || rows[i].path[0] != '/' || strcmp(rows[i].path, seen_last) == 0
            || strstr(rows[i].path, "/ld-") != NULL || !loaded_object_at(rows, count, i))
            continue;
        seen_last = rows[i].path;
        elf_file e;
        if (elf_open(pid, rows[i].path, &e) < 0)
            continue;
        elf_scratch(&e, rows[i].start - elf_first_load(&e), rows, count, r, 256);
        elf_close(&e);
    }
    free(rows);
    r->runtime = found[0];
    r->run_simple = found[2];
    r->code_type = found[3];
    unsigned long version = 0;
    if (RD(r, found[1], version) < 0) {
        int e = errno;
        pp_remote_say(err, n, "cannot read process %d's memory: %s", (int)pid, strerror(e));
        errno = e;
        return -1;
    }
    r->version_hex = (uint32_t)version;
    if ((version >> 24) != 3) {
        pp_remote_say(err, n, "Py_Version reads 0x%lx: not a CPython 3", version);
        errno = ENOENT;
        return -1;
    }
    r->L = pp_remote_layout_for((int)(version >> 16 & 0xff));
    if (r->L != NULL && RD(r, r->runtime + r->L->rt_interp_main, r->interp) < 0) {
        int e = errno;
        pp_remote_say(err, n, "cannot read process %d's interpreter: %s", (int)pid, strerror(e));
        errno = e;
        return -1;
    }
    /* the layout must describe this build: the main interpreter's first
     * thread state points back to it (a patch release or build whose
     * structures moved reads something else) */
    uintptr_t ts = 0, back = 0;
    if (r->L != NULL && (r->interp == 0 || RD(r, r->interp + r->L->in_threads_head, ts) < 0
                         || ts == 0 || RD(r, ts + r->L->ts_interp, back) < 0
                         || back != r->interp))
        r->L = NULL;
    return 0;
}

/* ---------------------------------------------------------- stopping */

static int stop_add(pp_remote_stop *s, pid_t tid)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        pid_t *t = realloc(s->tids, cap * sizeof *t);
        if (t == NULL)
            return -1;
        s->tids = t;
        int *g = realloc(s->sig, cap * sizeof *g);
        if (g == NULL)
            return -1;
        s->sig = g;
        s->cap = cap;
    }
    s->tids[s->n] = tid;
    s->sig[s->n] = 0;
    s->n++;
    return 0;
}

static int stop_has(const pp_remote_stop *s, pid_t tid)
{
    for (int i = 0; i < s->n; i++)
        if (s->tids[i] == tid)
            return 1;
    return 0;
}

/* Seize and interrupt one thread, not waiting for it: 0 asked, 1 gone, -1 error. */
static int seize_one(pp_remote_stop *s, pid_t tid)
{
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
        if (errno == ESRCH || (errno == EPERM && thread_exited(s->pid, tid)))
            return 1;
        return -1;
    }
    if (stop_add(s, tid) < 0) {
        ptrace(PTRACE_DETACH, tid, NULL, NULL);     /* not stopped yet: ESRCH, harmless */
        errno = ENOMEM;
        return -1;
    }
    if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 && errno != ESRCH)
        return -1;
    return 0;
}

static void stop_remove(pp_remote_stop *s, int i)
{
    memmove(s->tids + i, s->tids + i + 1, (s->n - i - 1) * sizeof *s->tids);
    memmove(s->sig + i, s->sig + i + 1, (s->n - i - 1) * sizeof *s->sig);
    s->n--;
}

/* Wait for the i-th seized thread to stop: 0 stopped, 1 gone (dropped from s). */
static int wait_one(pp_remote_stop *s, int i)
{
    for (;;) {
        int status;
        pid_t w = waitpid(s->tids[i], &status, __WALL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            stop_remove(s, i);                      /* ECHILD: it is gone */
            return 1;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            stop_remove(s, i);
            return 1;
        }
        if (WIFSTOPPED(status)) {
            int sig = WSTOPSIG(status), event = status >> 16;
            /* a signal on its way to the thread: handed back on resume; a
             * group-stop (job control) stays a stop after the detach */
            if (event == 0)
                s->sig[i] = sig;
            return 0;
        }
    }
}

int pp_remote_stop_all(pid_t pid, pp_remote_stop *s, char *err, size_t n)
{
    memset(s, 0, sizeof *s);
    s->pid = pid;
    char name[64];
    snprintf(name, sizeof name, "/proc/%d/task", (int)pid);
    /* until a pass finds no thread not stopped yet (a running thread may
     * have started one meanwhile) */
    for (int pass = 0; pass < 64; pass++) {
        DIR *d = opendir(name);
        if (d == NULL) {
            int e = errno;
            pp_remote_resume_all(s, 0);
            pp_remote_say(err, n, "cannot list process %d's threads: %s", (int)pid, strerror(e));
            errno = e == ENOENT ? ESRCH : e;
            return -1;
        }
        /* every new thread asked to stop first, then waited for: the threads
         * stop together, not one after the other */
        int added = 0, first = s->n, failed = 0, e = 0;
        pid_t bad = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            pid_t tid = (pid_t)atoi(de->d_name);
            if (tid <= 0 || stop_has(s, tid))
                continue;
            if (seize_one(s, tid) < 0) {
                failed = 1;
                e = errno;
                bad = tid;
                break;
            }
        }
        closedir(d);
        for (int i = first; i < s->n;)
            if (wait_one(s, i) == 0) {
                added++;
                i++;
            }
        if (failed) {
            pp_remote_resume_all(s, 0);
            pp_remote_say(err, n, "ptrace of thread %d of process %d: %s", (int)bad, (int)pid,
                strerror(e));
            errno = e;
            return -1;
        }
        if (!added) {
            if (s->n == 0) {
                pp_remote_say(err, n, "process %d has no threads left (it ended)", (int)pid);
                errno = ESRCH;
                return -1;
            }
            s->stopped_ns = pp_remote_now_ns();
            return 0;
        }
    }
    pp_remote_resume_all(s, 0);
    pp_remote_say(err, n, "process %d kept starting threads while pyprof stopped them", (int)pid);
    errno = EAGAIN;
    return -1;
}

int64_t pp_remote_resume_all(pp_remote_stop *s, int64_t t0)
{
    for (int i = 0; i < s->n; i++) {
        ptrace(PTRACE_DETACH, s->tids[i], NULL, (void *)(intptr_t)s->sig[i]);
    }
    int64_t paused = t0 ? pp_remote_now_ns() - t0 : 0;
    free(s->tids);
    free(s->sig);
    memset(s, 0, sizeof *s);
    return paused;
}

/* ---------------------------------------------------------- pending calls */

static uintptr_t pending(const pp_remote *r, uint16_t off)
{
    return r->interp + off;
}

/* With the threads stopped: whether the queue's lock is free. */
static int queue_lock_free(const pp_remote *r)
{
    const pp_remote_layout *L = r->L;
    if (L->minor >= 13) {
        uint8_t bits;
        if (RD(r, pending(r, L->pc_lock), bits) < 0)
            return -1;
        return (bits & 1) == 0;
    }
    /* PyThread_type_lock: a POSIX semaphore (sem_t *), free when its value is
     * 1 (glibc keeps the value in the low 32 bits, musl in the first int) */
    uintptr_t sem;
    uint32_t value;
    if (RD(r, pending(r, L->pc_lock), sem) < 0 || sem == 0 || RD(r, sem, value) < 0)
        return -1;
    return (value & 0x7fffffff) == 1;
}

/* With the threads stopped: tell the interpreter that calls are pending. */
static int signal_calls(const pp_remote *r)
{
    const pp_remote_layout *L = r->L;
    if (L->minor < 13) {
        int32_t one = 1;
        return pp_remote_write(r->pid, pending(r, L->pc_count), &one, sizeof one) < 0
            || pp_remote_write(r->pid, r->interp + L->in_eval_breaker, &one, sizeof one) < 0
            ? -1 : 0;
    }
    /* 3.13: each thread state has its own eval breaker; any thread that sees
     * the bit runs the queue (one at a time, the others clear their bit) */
    uintptr_t ts;
    if (RD(r, r->interp + L->in_threads_head, ts) < 0)
        return -1;
    for (int guard = 0; ts != 0 && guard < 100000; guard++) {
        uintptr_t bits;
        if (RD(r, ts + L->ts_eval_breaker, bits) < 0)
            return -1;
        bits |= L->calls_to_do_bit;
        if (pp_remote_write(r->pid, ts + L->ts_eval_breaker, &bits, sizeof bits) < 0
            || RD(r, ts + L->ts_next, ts) < 0)
            return -1;
    }
    return 0;
}

static int need_layout(const pp_remote *r, char *err, size_t n)
{
    if (r->L == NULL) {
        pp_remote_say(err, n, "CPython %u.%u's layout is not known to pyprof", r->version_hex >> 24,
            r->version_hex >> 16 & 0xff);
        errno = ENOTSUP;
        return -1;
    }
    return 0;
}

int pp_remote_queue_call(pp_remote *r, const char *text, size_t len, int *slot,
                         uintptr_t *arg, int64_t *paused_ns, char *err, size_t n)
{
    if (need_layout(r, err, n) < 0)
        return -1;
    if (r->run_simple == 0) {
        pp_remote_say(err, n, "no PyRun_SimpleString symbol in the target");
        errno = ENOENT;
        return -1;
    }
    if (r->scratch == 0 || len + 1 > r->scratch_size) {
        pp_remote_say(err, n, "no unused writable bytes found in the target's mapped objects for the "
            "bootstrap's %zu-byte text", len + 1);
        errno = ENOSPC;
        return -1;
    }
    const pp_remote_layout *L = r->L;
    pp_remote_stop s;
    int64_t t0 = pp_remote_now_ns();
    if (pp_remote_stop_all(r->pid, &s, err, n) < 0)
        return -1;
    /* fault injection for tests (PYPROF_ATTACH_KILL_AT, attach.py): the client
     * dies while the threads are stopped */
    const char *kill_at = getenv("PYPROF_ATTACH_KILL_AT");
    if (kill_at != NULL && strcmp(kill_at, "stopped") == 0)
        raise(SIGKILL);
    int rc = -1;
    int32_t first, last, count = 0, max = 0;
    int free_ = queue_lock_free(r);
    if (free_ < 0 || RD(r, pending(r, L->pc_first), first) < 0
        || RD(r, pending(r, L->pc_last), last) < 0
        || (L->pc_max && (RD(r, pending(r, L->pc_count), count) < 0
                          || RD(r, pending(r, L->pc_max), max) < 0))) {
        pp_remote_say(err, n, "cannot read the interpreter's pending calls: %s", strerror(errno));
        goto out;
    }
    if (first < 0 || first >= L->pc_ncalls || last < 0 || last >= L->pc_ncalls) {
        pp_remote_say(err, n, "the interpreter's pending calls look wrong (first %d, last %d): "
            "CPython %u.%u.%u's layout differs from the one pyprof knows", first, last,
            r->version_hex >> 24, r->version_hex >> 16 & 0xff, r->version_hex >> 8 & 0xff);
        errno = ENOTSUP;
        goto out;
    }
    int next = (last + 1) % L->pc_ncalls;
    if (!free_ || (L->pc_max ? count >= max : next == first)) {
        rc = 1;                                     /* busy or full: later */
        goto out;
    }
    unsigned char call[24] = {0};
    memcpy(call, &r->run_simple, sizeof(uintptr_t));
    memcpy(call + sizeof(uintptr_t), &r->scratch, sizeof(uintptr_t));
    char *buf = malloc(len + 1);
    if (buf == NULL) {
        errno = ENOMEM;
        goto out;
    }
    memcpy(buf, text, len);
    buf[len] = 0;
    int wrote = pp_remote_write(r->pid, r->scratch, buf, len + 1);
    free(buf);
    /* the call, then the index that publishes it, then the request to run it */
    if (wrote < 0
        || pp_remote_write(r->pid, pending(r, L->pc_calls) + (uintptr_t)last * L->pc_call_size,
                           call, L->pc_call_size) < 0
        || pp_remote_write(r->pid, pending(r, L->pc_last), &next, sizeof next) < 0) {
        pp_remote_say(err, n, "cannot write the target's memory: %s", strerror(errno));
        goto out;
    }
    if (L->pc_max) {
        count++;
        if (pp_remote_write(r->pid, pending(r, L->pc_count), &count, sizeof count) < 0)
            goto out;
    }
    if (signal_calls(r) < 0) {
        pp_remote_say(err, n, "cannot signal the pending call: %s", strerror(errno));
        goto out;
    }
    *slot = last;
    *arg = r->scratch;
    rc = 0;
    /* fault injection: the client dies with the call written, before any
     * thread could run it (the kernel resumes them as their tracer exits) */
    if (kill_at != NULL && strcmp(kill_at, "queued") == 0)
        raise(SIGKILL);
out:;
    int saved = errno;
    int64_t paused = pp_remote_resume_all(&s, t0);
    if (paused_ns)
        *paused_ns = paused;
    errno = saved;
    return rc;
}

int pp_remote_call_queued(pp_remote *r, int slot, uintptr_t arg)
{
    const pp_remote_layout *L = r->L;
    uintptr_t call[2];
    int32_t first, last;
    if (L == NULL || RD(r, pending(r, L->pc_first), first) < 0
        || RD(r, pending(r, L->pc_last), last) < 0
        || RD(r, pending(r, L->pc_calls) + (uintptr_t)slot * L->pc_call_size, call) < 0)
        return 0;
    int inside = first <= last ? (slot >= first && slot < last) : (slot >= first || slot < last);
    return inside && call[0] == r->run_simple && call[1] == arg;
}

int pp_remote_cancel_call(pp_remote *r, int slot, uintptr_t arg, char *err, size_t n)
{
    if (need_layout(r, err, n) < 0)
        return -1;
    pp_remote_stop s;
    if (pp_remote_stop_all(r->pid, &s, err, n) < 0)
        return -1;
    int rc = pp_remote_call_queued(r, slot, arg);
    if (rc == 1) {
        char nul = 0;                   /* PyRun_SimpleString("") runs nothing */
        if (pp_remote_write(r->pid, arg, &nul, 1) < 0) {
            pp_remote_say(err, n, "cannot write the target's memory: %s", strerror(errno));
            rc = -1;
        }
    }
    pp_remote_resume_all(&s, 0);
    return rc;
}

int pp_remote_nudge(pp_remote *r, char *err, size_t n)
{
    if (need_layout(r, err, n) < 0)
        return -1;
    pp_remote_stop s;
    if (pp_remote_stop_all(r->pid, &s, err, n) < 0)
        return -1;
    int rc = signal_calls(r);
    if (rc < 0)
        pp_remote_say(err, n, "cannot signal the pending call: %s", strerror(errno));
    pp_remote_resume_all(&s, 0);
    return rc;
}

int pp_remote_swap_main_thread(pp_remote *r, unsigned long ident, unsigned long *old,
                               char *err, size_t n)
{
    if (need_layout(r, err, n) < 0)
        return -1;
    pp_remote_stop s;
    if (pp_remote_stop_all(r->pid, &s, err, n) < 0)
        return -1;
    int rc = 0;
    uintptr_t at = r->runtime + r->L->rt_main_thread;
    if (RD(r, at, *old) < 0 || pp_remote_write(r->pid, at, &ident, sizeof ident) < 0
        || (ident != *old && signal_calls(r) < 0)) {
        pp_remote_say(err, n, "cannot write the target's main thread: %s", strerror(errno));
        rc = -1;
    }
    /* fault injection (attach.py): the client dies with a thread standing in
     * for the main one, before it could run the call */
    const char *kill_at = getenv("PYPROF_ATTACH_KILL_AT");
    if (rc == 0 && ident != *old && kill_at != NULL && strcmp(kill_at, "swapped") == 0)
        raise(SIGKILL);
    pp_remote_resume_all(&s, 0);
    return rc;
}

int pp_remote_gil(pp_remote *r, unsigned long *main_ident, uintptr_t *holder,
                  unsigned long *holder_ident)
{
    const pp_remote_layout *L = r->L;
    *holder = 0;
    *holder_ident = 0;
    if (L == NULL || RD(r, r->runtime + L->rt_main_thread, *main_ident) < 0)
        return -1;
    uintptr_t gil = L->in_gil_ptr ? 0 : r->runtime + L->rt_gil;
    if (L->in_gil_ptr && RD(r, r->interp + L->in_gil_ptr, gil) < 0)
        return -1;
    int32_t locked = 0;
    uintptr_t last = 0;
    if (gil == 0 || RD(r, gil + L->gil_locked, locked) < 0
        || RD(r, gil + L->gil_last_holder, last) < 0)
        return -1;
    if (locked > 0 && last != 0) {
        *holder = last;
        if (RD(r, last + L->ts_thread_id, *holder_ident) < 0)
            *holder_ident = 0;
    }
    return 0;
}

int pp_remote_gil_last(pp_remote *r, unsigned long *last_ident)
{
    const pp_remote_layout *L = r->L;
    *last_ident = 0;
    uintptr_t gil = L == NULL || L->in_gil_ptr ? 0 : r->runtime + L->rt_gil, last = 0;
    if (L == NULL || (L->in_gil_ptr && RD(r, r->interp + L->in_gil_ptr, gil) < 0) || gil == 0
        || RD(r, gil + L->gil_last_holder, last) < 0)
        return -1;
    if (last != 0 && RD(r, last + L->ts_thread_id, *last_ident) < 0)
        *last_ident = 0;
    return 0;
}
