/* remote.h — another CPython process, from outside: its memory, its symbols,
 * its threads stopped and resumed, and a call queued on its interpreter.
 *
 * Owns: reading and writing another process's memory (process_vm_readv /
 * writev), finding its interpreter (ELF symbol tables of the mapped files),
 * stopping all its threads for a moment (PTRACE_SEIZE + PTRACE_INTERRUPT)
 * and resuming them, and the pending-call queue of its main interpreter.
 * Never: changes a register of the target, runs code in it at an arbitrary
 * instruction, sends it a signal, or leaves a thread stopped or traced; a
 * signal that reached a thread while it was stopped is handed back to it.
 * Version knowledge comes from frames.h (pp_remote_layout).
 */
#ifndef PP_REMOTE_H
#define PP_REMOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frames.h"

typedef struct {
    pid_t pid;
    uint32_t version_hex;               /* the target's Py_Version */
    const pp_remote_layout *L;          /* NULL: a version pyprof does not know */
    uintptr_t runtime;                  /* &_PyRuntime */
    uintptr_t interp;                   /* the main interpreter */
    uintptr_t run_simple;               /* PyRun_SimpleString */
    uintptr_t code_type;                /* &PyCode_Type */
    uintptr_t scratch;                  /* unused bytes the call's text goes to (0: not found) */
    size_t scratch_size;
} pp_remote;

/* Errors: -1 with errno set and a sentence in err (n bytes), written by: */
void pp_remote_say(char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* CLOCK_MONOTONIC in nanoseconds. */
int64_t pp_remote_now_ns(void);

/* Find the interpreter of `pid`: its Py_Version, _PyRuntime and the functions
 * pyprof needs. ENOENT: not a CPython 3.11+ (no Py_Version); EPERM/EACCES:
 * not ours to read. The version may be one without a layout (L == NULL). */
int pp_remote_open(pp_remote *r, pid_t pid, char *err, size_t n);
int pp_remote_read(pid_t pid, uintptr_t addr, void *buf, size_t len);
int pp_remote_write(pid_t pid, uintptr_t addr, const void *buf, size_t len);

/* Every thread of a process, stopped (ptrace-stopped, registers untouched). */
typedef struct {
    pid_t pid;
    int n, cap;
    pid_t *tids;
    int *sig;                           /* a signal to hand back on resume, or 0 */
    int64_t stopped_ns;                 /* when the last thread stopped */
} pp_remote_stop;

int pp_remote_stop_all(pid_t pid, pp_remote_stop *s, char *err, size_t n);
/* Resume and detach every stopped thread; the nanoseconds the process was
 * stopped (from the first seize to the last detach). */
int64_t pp_remote_resume_all(pp_remote_stop *s, int64_t t0);

/* Queue PyRun_SimpleString(text) on the main interpreter's pending calls
 * (any thread runs them at its next safe point on 3.12+, the main thread on
 * 3.11), all threads stopped meanwhile. 0 queued (slot and address in *slot,
 * *arg); 1 the queue's lock was held or the queue full: nothing written, try
 * again later; -1 error. *paused_ns: how long the threads were stopped. */
int pp_remote_queue_call(pp_remote *r, const char *text, size_t len, int *slot,
                         uintptr_t *arg, int64_t *paused_ns, char *err, size_t n);
/* Read-only: 1 the call at slot is still queued, 0 taken (run or running). */
int pp_remote_call_queued(pp_remote *r, int slot, uintptr_t arg);
/* Threads stopped: if the call is still queued, empty its text (it will run
 * nothing); 1 cancelled, 0 it was taken already, -1 error. */
int pp_remote_cancel_call(pp_remote *r, int slot, uintptr_t arg, char *err, size_t n);
/* Threads stopped: ask for the pending calls again (the eval-breaker bits). */
int pp_remote_nudge(pp_remote *r, char *err, size_t n);
/* 3.11, threads stopped: _PyRuntime.main_thread := ident (the old one in *old). */
int pp_remote_swap_main_thread(pp_remote *r, unsigned long ident, unsigned long *old,
                               char *err, size_t n);

/* Read-only: the main thread's ident, the GIL holder's thread state (0 if
 * the GIL is free) and its ident. */
int pp_remote_gil(pp_remote *r, unsigned long *main_ident, uintptr_t *holder,
                  unsigned long *holder_ident);

/* Read-only: the ident of the thread that held the GIL last (it may have
 * released it since; 0 if unknown). */
int pp_remote_gil_last(pp_remote *r, unsigned long *last_ident);

#endif
