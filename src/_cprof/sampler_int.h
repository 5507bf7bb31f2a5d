/* sampler_int.h — what sampler.c (timers, handler, helper) and
 * sampler_drain.c (the ring into the stack table) share; private to the
 * sampler unit.
 */
#ifndef PP_SAMPLER_INT_H
#define PP_SAMPLER_INT_H

#include "sampler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#define MAX_FRAMES 256
#define MAX_NATIVE 128
#define RING_BYTES (8u << 20)           /* 8 MiB: ~30 s of deep stacks at 1 kHz */
#define RING_SLACK (64u << 10)          /* a record never wraps: it may spill here */
/* Draining takes the GIL from the program: seldom (or when half full). */
#define DRAIN_NS (250 * 1000 * 1000)
/* Wall mode: how often the helper looks for new threads to give a timer. */
#define SCAN_NS (10 * 1000 * 1000)
/* A thread is named by `threading` a little after the kernel shows it. */
#define NAME_NS (30 * 1000 * 1000)
#define REC_ALIGN 8
#define REC_REPEAT 1            /* rawrec.pad: no frames; the thread's last stack, idle */

/* One raw sample, as the handler writes it. */
typedef struct {
    _Atomic uint32_t len;       /* bytes with padding; 0 until published */
    uint32_t tid;               /* kernel thread id */
    uint64_t ident;             /* threading.get_ident() of its thread state, 0 if none */
    int64_t t_ns;               /* CLOCK_MONOTONIC */
    uint8_t state;
    uint8_t truncated;
    uint16_t nframes;
    uint16_t nnative;
    uint16_t pad;
    int64_t weight_ns;          /* the time this sample stands for (see on_sigprof) */
    /* pp_rawframe frames[nframes]; uintptr_t native[nnative]; */
} rawrec;

#define MAX_BASE 512           /* threads whose CPU clock start reads at start */


struct wslot;

typedef struct {
    /* shared with the handler */
    _Atomic int active;
    _Atomic int paused;             /* around fork() */
    int native;
    int mode;
    int64_t interval_ns;
    unsigned char *buf;
    _Atomic uint64_t head, tail;
    _Atomic uint64_t signals, recorded, dropped, foreign, throttled;
    /* helper thread and control (GIL held) */
    pthread_t thread;
    int have_thread;
    /* wall mode: the ticker, which never takes the GIL (see sampler.c) */
    pthread_t ticker;
    int have_ticker;
    pid_t ticker_tid;
    _Atomic int64_t recheck_ns;     /* how often the ticker looks at each parked thread */
    _Atomic int stop;
    _Atomic int replaced;           /* the program took SIGPROF or ITIMER_PROF back */
    _Atomic int unbound;            /* wall mode: a thread state without its kernel thread yet */
    pid_t pid;
    pid_t helper_tid;
    /* wall mode: one slot per Python thread (its timers; the list changes
     * with the GIL and slots_mu held: start, the helper's refresh, stop; the
     * ticker reads it under slots_mu) */
    struct wslot **slots;
    uint32_t nslots, cap_slots;
    uintptr_t threads_head;         /* the interpreter's newest thread state at the last refresh */
    _Atomic uint64_t parked, woken, idle_ticks;
    pp_sampling *prof;              /* the sampling state (its owner kept alive) */
    PyObject *owner;                /* strong while sampling */
    int64_t started_ns, stopped_ns, cpu0_ns, cpu1_ns;
    double rate_hz;
    int draining;
    int corrupt;
    /* CPU mode: the CPU clocks of the threads alive at start (read-only while
     * active: the handler scans it for a thread's first sample of the run) */
    uint64_t run;                   /* bumped per start: tells a TLS reading of an older run */
    uint32_t nbase;
    struct { pid_t tid; int64_t cpu_ns; } base[MAX_BASE];
    _Atomic int64_t weight_ns;      /* total weight recorded (the achieved rate's time) */
} pp_sampler_global;

/* The process's one sampler. */
extern pp_sampler_global pp_sampler_g;
#define S pp_sampler_g

int pp_sampler_grow_array(void **arr, uint32_t *cap, uint32_t need, size_t elem);
/* A new run: no thread has a last stack yet. */
void pp_sampler_drain_reset(void);
/* The code watcher's callback: samples naming a dying code object are drained. */
void pp_sampler_drain_for_dying(PyObject *code);
/* Without the GIL (the ticker): the ring's published records move to a
 * buffer the next drain takes first. */
void pp_sampler_spill(void);
void pp_sampler_drain_atfork_child(void);

#endif
