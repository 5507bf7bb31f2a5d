/* remote_read.c — the threads and Python stacks of another CPython process,
 * read from outside (remote_read.h): pyprof dump's read-only path and
 * pyprof top --remote.
 *
 * Owns: the walk of the main interpreter's thread states and frames through
 * process_vm_readv, the code-object cache (names, location tables), the
 * location-table decoding (CPython's Objects/locations.md, 3.11-3.13), and the
 * native stacks read with libunwind-ptrace while the threads are stopped
 * (opened at the first such read, not linked: it cost every start ~0.5 ms).
 * Never: writes the target's memory or registers (libunwind's ptrace
 * accessors are only asked to read), sends a signal, leaves a thread stopped;
 * no read is trusted unchecked, no loop unbounded. Version knowledge comes
 * from frames.h (pp_remote_layout) only. Runs in the client.
 */
#define _GNU_SOURCE 1
#include "remote_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#ifdef PP_HAVE_LIBUNWIND_PTRACE
#include <dlfcn.h>
#include <libunwind-ptrace.h>
#endif

#define CODE_BITS 12
#define MAX_STR_CHARS 4096
#define MAX_LINETABLE (1 << 20)
#define MAX_THREADS 4096
#define WALK_TRIES 4

static uintptr_t word_at(const unsigned char *buf, size_t off)
{
    uintptr_t v;
    memcpy(&v, buf + off, sizeof v);
    return v;
}

static int32_t i32_at(const unsigned char *buf, size_t off)
{
    int32_t v;
    memcpy(&v, buf + off, sizeof v);
    return v;
}

/* ---------------------------------------------------------- location tables */

static int varint(const unsigned char *p, const unsigned char *end, const unsigned char **next,
                  unsigned *out)
{
    unsigned val = 0, shift = 0;
    for (;;) {
        if (p >= end || shift > 28)
            return -1;
        unsigned b = *p++;
        val |= (b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    *next = p;
    *out = val;
    return 0;
}

/* A line below 0 is none CPython gives (0: a module's RESUME): a table read
 * torn, as a live read of a code object freed and made again can be, gives -1. */
int pp_remote_addr2line(const unsigned char *table, size_t len, int firstlineno, int addrq)
{
    if (addrq < 0)
        return firstlineno < 0 ? -1 : firstlineno;
    const unsigned char *p = table, *end = table + len;
    int line = firstlineno, start = 0;
    while (p < end) {
        unsigned first = *p;
        if (!(first & 128))
            return -1;                          /* not an entry's first byte */
        int code = (first >> 3) & 15, units = (first & 7) + 1, delta = 0;
        const unsigned char *q = p + 1;
        if (code == 13 || code == 14) {         /* no columns / long form: signed delta */
            unsigned u;
            if (varint(q, end, &q, &u) < 0)
                return -1;
            delta = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
        } else if (code >= 10 && code <= 12) {  /* one-line forms */
            delta = code - 10;
        }
        line += delta;
        int stop = start + units * 2;           /* bytes: 2 per code unit */
        if (addrq < stop)
            return code == 15 || line < 0 ? -1 : line;
        start = stop;
        /* the next entry starts at the next byte with the high bit set */
        p++;
        while (p < end && !(*p & 128))
            p++;
    }
    return -1;
}

/* ---------------------------------------------------------- the code cache */

void pp_remote_cache_init(pp_remote_cache *c)
{
    memset(c, 0, sizeof *c);
    c->buckets = calloc((size_t)1 << CODE_BITS, sizeof *c->buckets);
    c->next_id = 1;
}

static void code_free(pp_remote_code *e)
{
    free(e->filename);
    free(e->name);
    free(e->qualname);
    free(e->linetable);
    free(e);
}

void pp_remote_cache_free(pp_remote_cache *c)
{
    for (pp_remote_code *e = c->retired, *nx; e != NULL; e = nx) {
        nx = e->next;
        code_free(e);
    }
    if (c->buckets != NULL) {
        for (size_t i = 0; i < (size_t)1 << CODE_BITS; i++) {
            for (pp_remote_code *e = c->buckets[i], *nx; e != NULL; e = nx) {
                nx = e->next;
                code_free(e);
            }
        }
        free(c->buckets);
    }
    memset(c, 0, sizeof *c);
}

static size_t code_slot(uintptr_t addr)
{
    return (size_t)((addr >> 4) * 0x9E3779B97F4A7C15ull >> (64 - CODE_BITS));
}

static void put_utf8(char **o, uint32_t ch)
{
    unsigned char *p = (unsigned char *)*o;
    if (ch < 0x80) {
        *p++ = (unsigned char)ch;
    } else if (ch < 0x800) {
        *p++ = (unsigned char)(0xC0 | ch >> 6);
        *p++ = (unsigned char)(0x80 | (ch & 63));
    } else if (ch < 0x10000) {
        if (ch >= 0xD800 && ch < 0xE000)
            ch = 0xFFFD;                        /* a lone surrogate: not UTF-8 */
        *p++ = (unsigned char)(0xE0 | ch >> 12);
        *p++ = (unsigned char)(0x80 | (ch >> 6 & 63));
        *p++ = (unsigned char)(0x80 | (ch & 63));
    } else {
        if (ch > 0x10FFFF)
            ch = 0xFFFD;
        if (ch == 0xFFFD) {
            *o = (char *)p;
            put_utf8(o, ch);
            return;
        }
        *p++ = (unsigned char)(0xF0 | ch >> 18);
        *p++ = (unsigned char)(0x80 | (ch >> 12 & 63));
        *p++ = (unsigned char)(0x80 | (ch >> 6 & 63));
        *p++ = (unsigned char)(0x80 | (ch & 63));
    }
    *o = (char *)p;
}

/* A compact str of the target as malloc'd UTF-8, or NULL. */
static char *read_str(const pp_remote *r, uintptr_t addr)
{
    const pp_remote_layout *L = r->L;
    unsigned char head[128];
    if (addr == 0 || L->str_compact_size > sizeof head
        || pp_remote_read(r->pid, addr, head, L->str_compact_size) < 0)
        return NULL;
    uint32_t state;
    int64_t length;
    memcpy(&state, head + L->str_state, sizeof state);
    memcpy(&length, head + L->str_length, sizeof length);
    unsigned kind = state >> 2 & 7, compact = state >> 5 & 1, ascii = state >> 6 & 1;
    if (!compact || length < 0 || length > MAX_STR_CHARS || (kind != 1 && kind != 2 && kind != 4)
        || (ascii && kind != 1))
        return NULL;
    size_t bytes = (size_t)length * kind;
    unsigned char *raw = malloc(bytes + 1);
    char *out = malloc((size_t)length * 4 + 1);
    if (raw == NULL || out == NULL
        || (bytes && pp_remote_read(r->pid, addr + (ascii ? L->str_ascii_size : L->str_compact_size),
                                    raw, bytes) < 0)) {
        free(raw);
        free(out);
        return NULL;
    }
    char *o = out;
    for (int64_t i = 0; i < length; i++) {
        uint32_t ch;
        if (kind == 1) {
            ch = raw[i];
        } else if (kind == 2) {
            uint16_t v;
            memcpy(&v, raw + 2 * i, 2);
            ch = v;
        } else {
            memcpy(&ch, raw + 4 * i, 4);
        }
        if (ascii && ch >= 0x80)
            ch = '?';
        put_utf8(&o, ch);
    }
    *o = 0;
    free(raw);
    return out;
}

static unsigned char *read_bytes(const pp_remote *r, uintptr_t addr, size_t *len)
{
    const pp_remote_layout *L = r->L;
    int64_t size;
    if (addr == 0 || pp_remote_read(r->pid, addr + L->bytes_size, &size, sizeof size) < 0
        || size < 0 || size > MAX_LINETABLE)
        return NULL;
    unsigned char *buf = malloc((size_t)size + 1);
    if (buf == NULL || (size && pp_remote_read(r->pid, addr + L->bytes_data, buf, (size_t)size) < 0)) {
        free(buf);
        return NULL;
    }
    *len = (size_t)size;
    return buf;
}

/* The code object at addr (its header in `head`, L->co_code bytes), from the
 * cache if the cached entry still matches it, else resolved anew. */
static const pp_remote_code *code_for(pp_remote *r, pp_remote_cache *c, uintptr_t addr,
                                      const unsigned char *head)
{
    const pp_remote_layout *L = r->L;
    uintptr_t fn = word_at(head, L->co_filename), nm = word_at(head, L->co_name),
              qn = word_at(head, L->co_qualname), lt = word_at(head, L->co_linetable);
    int first = i32_at(head, L->co_firstlineno);
    size_t slot = code_slot(addr);
    pp_remote_code **link = &c->buckets[slot];
    for (pp_remote_code *e = *link; e != NULL; link = &e->next, e = e->next) {
        if (e->addr != addr)
            continue;
        if (e->filename_ptr == fn && e->name_ptr == nm && e->qualname_ptr == qn
            && e->linetable_ptr == lt && e->firstlineno == first)
            return e;
        *link = e->next;                        /* another code object at that address now */
        e->next = c->retired;                   /* frames of this read may point at it */
        c->retired = e;
        c->count--;
        break;
    }
    pp_remote_code *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->addr = addr;
    e->filename_ptr = fn;
    e->name_ptr = nm;
    e->qualname_ptr = qn;
    e->linetable_ptr = lt;
    e->firstlineno = first;
    e->filename = read_str(r, fn);
    e->name = read_str(r, nm);
    e->qualname = read_str(r, qn);
    e->linetable = read_bytes(r, lt, &e->linetable_len);
    if (e->filename == NULL || e->qualname == NULL) {
        code_free(e);                           /* freed meanwhile, or not a code object */
        return NULL;
    }
    e->shim = strcmp(e->filename, "<shim>") == 0;
    e->id = c->next_id++;
    e->next = c->buckets[slot];
    c->buckets[slot] = e;
    c->count++;
    return e;
}

int pp_remote_gil_span(pp_remote *r, uintptr_t *lo, uintptr_t *hi)
{
    const pp_remote_layout *L = r->L;
    uintptr_t gil = 0;
    if (L == NULL)
        return -1;
    if (L->in_gil_ptr == 0)
        gil = r->runtime + L->rt_gil;
    else if (pp_remote_read(r->pid, r->interp + L->in_gil_ptr, &gil, sizeof gil) < 0 || gil == 0)
        return -1;
    *lo = gil;
    *hi = gil + L->gil_size;
    return 0;
}

/* ---------------------------------------------------------- threads and frames */

/* Two reads in one system call: 0 both read whole, else -1 (nothing trusted). */
static int read_two(pid_t pid, uintptr_t a, void *abuf, size_t alen, uintptr_t b, void *bbuf,
                    size_t blen)
{
    struct iovec local[2] = {{abuf, alen}, {bbuf, blen}};
    struct iovec remote[2] = {{(void *)a, alen}, {(void *)b, blen}};
    return process_vm_readv(pid, local, 2, remote, 2, 0) == (ssize_t)(alen + blen) ? 0 : -1;
}

/* One thread's Python frames, innermost first: 0 read through, -1 a read
 * failed or the chain looked wrong (a live read racing the thread). A frame's
 * code header and the next frame are read in one system call. */
static int walk_frames(pp_remote *r, pp_remote_cache *c, uintptr_t frame, pp_remote_thread *t)
{
    const pp_remote_layout *L = r->L;
    unsigned char fr[96], head[256];
    size_t fr_need = (size_t)L->fr_owner + 1;
    if (fr_need < (size_t)L->fr_instr + 8)
        fr_need = (size_t)L->fr_instr + 8;
    if (fr_need > sizeof fr || L->co_code > sizeof head)
        return -1;
    t->nframes = 0;
    int have = 0;                               /* fr holds `frame` already */
    for (int guard = 0; frame != 0 && guard < 4 * PP_REMOTE_MAX_DEPTH; guard++) {
        if (t->nframes >= PP_REMOTE_MAX_DEPTH)
            return 0;                           /* deeper: the innermost are kept */
        if (!have && pp_remote_read(r->pid, frame, fr, fr_need) < 0)
            return -1;
        have = 0;
        uintptr_t code = word_at(fr, L->fr_code), instr = word_at(fr, L->fr_instr);
        uintptr_t previous = word_at(fr, L->fr_previous);
        int owner = fr[L->fr_owner];
        if (previous == frame)
            return -1;
        frame = previous;
        if (L->fr_owned_by_cstack >= 0 && owner == L->fr_owned_by_cstack)
            continue;
        if (code == 0)
            return -1;
        if (previous != 0 && read_two(r->pid, code, head, L->co_code, previous, fr, fr_need) == 0)
            have = 1;
        else if (pp_remote_read(r->pid, code, head, L->co_code) < 0)
            return -1;
        if (r->code_type != 0 && word_at(head, L->ob_type) != r->code_type) {
            if (L->minor >= 13)
                continue;                       /* f_executable is not always code */
            return -1;
        }
        const pp_remote_code *e = code_for(r, c, code, head);
        if (e == NULL)
            return -1;
        if (e->shim)
            continue;                           /* a C-stack frame read as it changed */
        intptr_t lasti = ((intptr_t)instr - (intptr_t)(code + L->co_code)) / 2;
        int line = e->firstlineno < 0 ? -1 : e->firstlineno;
        if (e->linetable != NULL && lasti >= -1 && lasti < (1 << 28))
            line = pp_remote_addr2line(e->linetable, e->linetable_len, e->firstlineno,
                                       (int)lasti * 2);
        t->frames[t->nframes].code = e;
        t->frames[t->nframes].lineno = line;
        t->nframes++;
    }
    return frame == 0 ? 0 : -1;
}

static uintptr_t current_frame(pp_remote *r, const unsigned char *ts)
{
    const pp_remote_layout *L = r->L;
    if (L->ts_cframe == 0)
        return word_at(ts, L->cf_current_frame);
    uintptr_t cframe = word_at(ts, L->ts_cframe), frame = 0;
    if (cframe == 0 || pp_remote_read(r->pid, cframe + L->cf_current_frame, &frame,
                                      sizeof frame) < 0)
        return 0;
    return frame;
}

#ifdef PP_HAVE_LIBUNWIND_PTRACE
/* libunwind's remote unwinder (its generic library, named by architecture)
 * and its ptrace accessors. */
#if defined(__x86_64__)
#define PP_LIBUNWIND_GENERIC "libunwind-x86_64.so.8"
#elif defined(__aarch64__)
#define PP_LIBUNWIND_GENERIC "libunwind-aarch64.so.8"
#else
#define PP_LIBUNWIND_GENERIC "libunwind-generic.so"
#endif
#define PP_LIBUNWIND_PTRACE "libunwind-ptrace.so.0"

/* unw_* are macros naming the architecture's functions (_Ux86_64_step...):
 * the table's members and the looked-up names are those. */
#define PP_UNW_STR_(x) #x
#define PP_UNW_STR(x) PP_UNW_STR_(x)
#define PP_UNW_GENERIC(X) X(unw_create_addr_space) X(unw_destroy_addr_space) \
    X(unw_init_remote) X(unw_get_reg) X(unw_get_proc_name) X(unw_step)
#define PP_UNW_PTRACE(X) X(_UPT_create) X(_UPT_destroy)
#define PP_UNW_POINTER(f) __typeof__(f) *f;
static struct {
    PP_UNW_GENERIC(PP_UNW_POINTER)
    PP_UNW_PTRACE(PP_UNW_POINTER)
    unw_accessors_t *accessors;
} up;
static int up_state;                    /* 0: not tried, 1: open, -1: not there */

static int up_lookup(void *h, const char *name, void *fp, size_t size)
{
    void *sym = h ? dlsym(h, name) : NULL;
    memcpy(fp, &sym, size);             /* object to function pointer: POSIX */
    return sym != NULL;
}

int pp_remote_native_available(void)
{
    if (up_state == 0) {
        /* global: libunwind-ptrace's own calls into the unwinder resolve there */
        void *gen = dlopen(PP_LIBUNWIND_GENERIC, RTLD_NOW | RTLD_GLOBAL);
        void *pt = gen ? dlopen(PP_LIBUNWIND_PTRACE, RTLD_NOW | RTLD_LOCAL) : NULL;
        int ok = gen != NULL && pt != NULL;
#define PP_UNW_FROM_GENERIC(f) ok = ok && up_lookup(gen, PP_UNW_STR(f), &up.f, sizeof up.f);
#define PP_UNW_FROM_PTRACE(f) ok = ok && up_lookup(pt, PP_UNW_STR(f), &up.f, sizeof up.f);
        PP_UNW_GENERIC(PP_UNW_FROM_GENERIC)
        PP_UNW_PTRACE(PP_UNW_FROM_PTRACE)
#undef PP_UNW_FROM_GENERIC
#undef PP_UNW_FROM_PTRACE
        void *acc = ok ? dlsym(pt, "_UPT_accessors") : NULL;
        up.accessors = acc;
        up_state = ok && acc != NULL ? 1 : -1;
    }
    return up_state == 1;
}

/* The native stack of a ptrace-stopped thread: only reads (registers, memory). */
static void read_native(unw_addr_space_t as, pid_t tid, pp_remote_thread *t)
{
    t->nnative = 0;
    void *ui = up._UPT_create(tid);
    if (ui == NULL)
        return;
    unw_cursor_t cur;
    if (up.unw_init_remote(&cur, as, ui) == 0) {
        do {
            unw_word_t ip = 0, off = 0;
            char name[256], text[300];
            if (up.unw_get_reg(&cur, UNW_REG_IP, &ip) < 0)
                break;
            if (up.unw_get_proc_name(&cur, name, sizeof name, &off) == 0)
                snprintf(text, sizeof text, "%s+0x%lx", name, (unsigned long)off);
            else
                snprintf(text, sizeof text, "0x%lx", (unsigned long)ip);
            t->native[t->nnative] = strdup(text);
            if (t->native[t->nnative] == NULL)
                break;
            t->nnative++;
        } while (t->nnative < PP_REMOTE_MAX_NATIVE && up.unw_step(&cur) > 0);
    }
    up._UPT_destroy(ui);
}
#else
int pp_remote_native_available(void)
{
    return 0;
}
#endif

void pp_remote_threads_free(pp_remote_thread *t, int count)
{
    if (t == NULL)
        return;
    for (int i = 0; i < count; i++)
        for (int k = 0; k < t[i].nnative; k++)
            free(t[i].native[k]);
    free(t);
}

/* Read every thread; the caller stopped the target or not (live). */
static int read_threads(pp_remote *r, pp_remote_cache *c, int live, pp_remote_thread **out,
                        int *count, char *err, size_t n)
{
    const pp_remote_layout *L = r->L;
    unsigned long main_ident = 0, holder_ident = 0;
    uintptr_t holder = 0, ts = 0;
    if (pp_remote_gil(r, &main_ident, &holder, &holder_ident) < 0
        || pp_remote_read(r->pid, r->interp + L->in_threads_head, &ts, sizeof ts) < 0) {
        pp_remote_say(err, n, "cannot read process %d's interpreter: %s", (int)r->pid, strerror(errno));
        return -1;
    }
    size_t ts_need = 0;
    uint16_t fields[] = {L->ts_next, L->ts_thread_id, L->ts_native_id, L->ts_cframe,
                         L->ts_cframe ? 0 : L->cf_current_frame};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if ((size_t)fields[i] + 8 > ts_need)
            ts_need = (size_t)fields[i] + 8;
    unsigned char tsbuf[512];
    if (ts_need > sizeof tsbuf) {
        pp_remote_say(err, n, "thread state layout too large");
        errno = ENOTSUP;
        return -1;
    }
    int cap = 8, got = 0;
    pp_remote_thread *ths = malloc(cap * sizeof *ths);
    if (ths == NULL) {
        errno = ENOMEM;
        return -1;
    }
    uintptr_t first = ts;
    for (int guard = 0; ts != 0 && guard < MAX_THREADS; guard++) {
        if (pp_remote_read(r->pid, ts, tsbuf, ts_need) < 0)
            break;                              /* live: the list changed under us */
        if (got == cap) {
            pp_remote_thread *more = realloc(ths, 2 * cap * sizeof *ths);
            if (more == NULL)
                break;
            ths = more;
            cap *= 2;
        }
        pp_remote_thread *t = &ths[got];
        t->tstate = ts;
        t->ident = word_at(tsbuf, L->ts_thread_id);
        t->native_id = word_at(tsbuf, L->ts_native_id);
        t->holds_gil = holder != 0 && holder == ts;
        t->is_main = t->ident == main_ident;
        t->nnative = -1;
        t->complete = 0;
        for (int tries = 0; tries < (live ? WALK_TRIES : 1); tries++) {
            if (tries > 0 && pp_remote_read(r->pid, ts, tsbuf, ts_need) < 0)
                break;
            if (walk_frames(r, c, current_frame(r, tsbuf), t) == 0) {
                t->complete = 1;
                break;
            }
        }
        got++;
        ts = word_at(tsbuf, L->ts_next);
        if (ts == first)
            break;
    }
    *out = ths;
    *count = got;
    return 0;
}

int pp_remote_threads(pp_remote *r, pp_remote_cache *c, int stop, int native,
                      pp_remote_thread **out, int *count, int64_t *paused_ns,
                      char *err, size_t n)
{
    *out = NULL;
    *count = 0;
    if (paused_ns)
        *paused_ns = 0;
    if (r->L == NULL) {
        pp_remote_say(err, n, "CPython %u.%u's layout is not known to pyprof", r->version_hex >> 24,
            r->version_hex >> 16 & 0xff);
        errno = ENOTSUP;
        return -1;
    }
    if (c->buckets == NULL) {
        errno = ENOMEM;
        return -1;
    }
    /* entries replaced during an earlier read: no result points at them now */
    for (pp_remote_code *e = c->retired, *nx; e != NULL; e = nx) {
        nx = e->next;
        code_free(e);
    }
    c->retired = NULL;
    if (!stop)
        return read_threads(r, c, 1, out, count, err, n);
    pp_remote_stop s;
    int64_t t0 = pp_remote_now_ns();
    if (pp_remote_stop_all(r->pid, &s, err, n) < 0)
        return -1;
    int rc = read_threads(r, c, 0, out, count, err, n);
    int saved = errno;
#ifdef PP_HAVE_LIBUNWIND_PTRACE
    if (rc == 0 && native && pp_remote_native_available()) {
        unw_addr_space_t as = up.unw_create_addr_space(up.accessors, 0);
        if (as != NULL) {
            for (int i = 0; i < *count; i++)
                for (int k = 0; k < s.n; k++)
                    if ((unsigned long)s.tids[k] == (*out)[i].native_id)
                        read_native(as, s.tids[k], &(*out)[i]);
            up.unw_destroy_addr_space(as);
        }
    }
#else
    (void)native;
#endif
    int64_t paused = pp_remote_resume_all(&s, t0);
    if (paused_ns)
        *paused_ns = paused;
    errno = saved;
    return rc;
}
