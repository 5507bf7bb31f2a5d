/* remote_read.h — another CPython process's threads and Python stacks, read
 * from outside (process_vm_readv), for the read-only dump and top --remote.
 *
 * Owns: walking the main interpreter's thread states and their frames in the
 * target's memory, resolving code objects (names, line numbers from
 * co_linetable) with a cache per code address, and, with libunwind-ptrace,
 * each thread's native stack while the threads are stopped.
 * Never: writes the target's memory or registers, sends it a signal, or
 * leaves a thread stopped; every read is checked and every loop bounded.
 */
#ifndef PP_REMOTE_READ_H
#define PP_REMOTE_READ_H

#include <stdint.h>

#include "remote.h"

#define PP_REMOTE_MAX_DEPTH 512
#define PP_REMOTE_MAX_NATIVE 64

/* A code object of the target, resolved (UTF-8 strings, owned by the cache). */
typedef struct pp_remote_code {
    uintptr_t addr;
    uint64_t id;                        /* unique for the cache's lifetime */
    uintptr_t filename_ptr, name_ptr, qualname_ptr, linetable_ptr;
    int firstlineno;
    int shim;                           /* CPython's entry trampoline ("<shim>"): never shown */
    char *filename, *name, *qualname;
    unsigned char *linetable;
    size_t linetable_len;
    struct pp_remote_code *next;        /* the hash chain */
} pp_remote_code;

typedef struct {
    const pp_remote_code *code;
    int lineno;
} pp_remote_frame;

typedef struct {
    unsigned long ident, native_id;
    uintptr_t tstate;
    int holds_gil, is_main;
    int complete;                       /* 0: the walk read something inconsistent */
    int nframes;                        /* innermost first */
    pp_remote_frame frames[PP_REMOTE_MAX_DEPTH];
    int nnative;                        /* -1: not read */
    char *native[PP_REMOTE_MAX_NATIVE]; /* "name+0xoff" (malloc'd) */
} pp_remote_thread;

typedef struct {
    pp_remote_code **buckets;           /* hash chains by address */
    pp_remote_code *retired;            /* replaced during this read, freed at the next */
    uint64_t next_id;
    size_t count;
} pp_remote_cache;

void pp_remote_cache_init(pp_remote_cache *c);
void pp_remote_cache_free(pp_remote_cache *c);

/* Whether this build can read native stacks (libunwind-ptrace). */
int pp_remote_native_available(void);

/* Every thread of the main interpreter, with its Python stack. stop: all the
 * target's threads stopped for the read only (*paused_ns: for how long);
 * else read live, each thread's walk retried if it reads inconsistent.
 * native (needs stop): each thread's native stack too. *out: malloc'd array
 * of *count threads, free with pp_remote_threads_free before the next call
 * (its frames point into the cache). -1 with err on error. */
int pp_remote_threads(pp_remote *r, pp_remote_cache *c, int stop, int native,
                      pp_remote_thread **out, int *count, int64_t *paused_ns,
                      char *err, size_t n);
void pp_remote_threads_free(pp_remote_thread *t, int count);

/* Where the target's GIL lives: [*lo, *hi); -1 if it cannot be read. */
int pp_remote_gil_span(pp_remote *r, uintptr_t *lo, uintptr_t *hi);

/* The line of byte offset addrq in a 3.11+ location table (-1: none). */
int pp_remote_addr2line(const unsigned char *table, size_t len, int firstlineno, int addrq);

#endif
