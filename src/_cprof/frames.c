/* frames.c — what needs CPython's internal headers (Py_BUILD_CORE).
 *
 * Owns: layout facts exported as plain constants, and the walk of a thread's
 * interpreter frames for the sampler. Nothing else in pyprof includes
 * internal headers.
 * Never: calls into libpython from pp_frames_walk/pp_signal_tstate beyond the
 * documented lock-free thread-state reads; they run inside a signal handler
 * (no allocation, no locks, no reference counts, no unchecked pointer).
 */
#define _GNU_SOURCE 1             /* process_vm_readv */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "frames.h"
#include "internal/pycore_frame.h"
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_genobject.h"
#endif
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_interp.h"
#endif

#if PY_VERSION_HEX < 0x030C0000
/* 3.11: where a _PyInterpreterFrame keeps its code object and its owner. */
const size_t pp_iframe_code_offset = offsetof(_PyInterpreterFrame, f_code);
const size_t pp_iframe_owner_offset = offsetof(_PyInterpreterFrame, owner);
const char pp_frame_owned_by_generator = FRAME_OWNED_BY_GENERATOR;
/* 3.11: a frame object's switch for line events (C trace functions included). */
const size_t pp_frame_trace_lines_offset = offsetof(struct _frame, f_trace_lines);
const size_t pp_frame_trace_opcodes_offset = offsetof(struct _frame, f_trace_opcodes);
#endif

/* The calling thread's thread state (NULL if it never ran Python), and
 * whether it is attached: it holds the GIL (3.11) / is the thread's current
 * state (3.12+). Async-signal-safe: TSS and TLS reads only. */
PyThreadState *pp_signal_tstate(int *attached)
{
    PyThreadState *mine = PyGILState_GetThisThreadState();
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *current = PyThreadState_GetUnchecked();
#else
    PyThreadState *current = _PyThreadState_UncheckedGet();
#endif
    /* A subinterpreter's thread: its objects live in (and die with) another
     * interpreter's memory, which pyprof's registry must never reference. */
    if (mine != NULL && mine->interp != PyInterpreterState_Main())
        mine = NULL;
    *attached = mine != NULL && current == mine;
    return mine;
}

/* ---------------------------------------------------------- checked reads
 *
 * The handler interrupts the interpreter anywhere, including inside the few
 * instructions that link a new frame: 3.11 and 3.12 publish tstate->cframe
 * before setting its current_frame, and the compiler may order the stores
 * that fill a frame after the one that links it. A pointer read from the
 * chain may then be garbage. So nothing is dereferenced unchecked: a frame
 * inside one of the thread's data-stack chunks is read directly (that memory
 * is mapped), anything else (generator frames, entry frames on the C stack, a
 * garbage pointer) is copied with process_vm_readv, which fails on a bad
 * address instead of faulting; a code object is accepted only if its type is
 * the code type (checked the same way, then remembered until it dies). */

static pid_t self_pid;

#define CODE_CACHE_BITS 12
static _Atomic uintptr_t code_cache[1 << CODE_CACHE_BITS];   /* known code objects */

void pp_frames_init(void)
{
    self_pid = getpid();
    for (size_t i = 0; i < sizeof code_cache / sizeof code_cache[0]; i++)
        atomic_store(&code_cache[i], 0);
}

static_assert(offsetof(PyObject, ob_type) == sizeof(Py_ssize_t), "refcount, then type");

static int copy_from(pid_t pid, void *dst, const void *src, size_t n)
{
    struct iovec local = {dst, n}, remote = {(void *)src, n};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)n;
}

static int checked_copy(void *dst, const void *src, size_t n)
{
    return copy_from(self_pid, dst, src, n);
}

static inline size_t code_slot(uintptr_t p)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> (64 - CODE_CACHE_BITS));
}

/* A freed code object keeps its type word: the allocator writes its free-list
 * link over the reference count (NULL or an address far above any count), so
 * the count tells a live code object from a freed one. */
/* 1 if p is a live code object (2 if a coroutine's: CO_COROUTINE or
 * CO_ITERABLE_COROUTINE), else 0. */
#define CODE_HEAD (offsetof(PyCodeObject, co_flags) + sizeof(int))
static int code_alive_in(pid_t pid, uintptr_t p)
{
    if (p == 0 || p % sizeof(void *))
        return 0;
    union { PyCodeObject co; char bytes[CODE_HEAD]; } head;
    if (!copy_from(pid, head.bytes, (void *)p, CODE_HEAD))
        return 0;
    PyObject *o = (PyObject *)&head.co;
    if (Py_TYPE(o) != &PyCode_Type || o->ob_refcnt <= 0 || o->ob_refcnt > (Py_ssize_t)UINT32_MAX)
        return 0;
    return head.co.co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE) ? 2 : 1;
}

int pp_frames_code_alive(uintptr_t p)
{
    return code_alive_in(getpid(), p) != 0;     /* not self_pid: this may run in a forked child */
}

/* code_alive_in, remembered: a cache slot holds the address, its low bit
 * set for a coroutine's code (code objects are 8-aligned). */
static int is_code(uintptr_t p)
{
    if (p == 0 || p % sizeof(void *))
        return 0;
    _Atomic uintptr_t *slot = &code_cache[code_slot(p)];
    uintptr_t c = atomic_load_explicit(slot, memory_order_relaxed);
    if ((c & ~(uintptr_t)1) == p)
        return 1 + (int)(c & 1);
    int r = code_alive_in(self_pid, p);
    if (r)
        atomic_store_explicit(slot, p | (uintptr_t)(r == 2), memory_order_relaxed);
    return r;
}

/* A code object is about to be freed (GIL held): its address may come back as
 * something else. */
void pp_frames_forget_code(PyObject *code)
{
    uintptr_t p = (uintptr_t)code;
    _Atomic uintptr_t *slot = &code_cache[code_slot(p)];
    uintptr_t expected = p;
    if (!atomic_compare_exchange_strong(slot, &expected, 0)) {
        expected = p | 1;
        atomic_compare_exchange_strong(slot, &expected, 0);
    }
}

typedef struct { uintptr_t lo, hi; } span;
#define MAX_CHUNKS 32
#define FRAME_HEAD offsetof(_PyInterpreterFrame, localsplus)

static int stack_chunks(PyThreadState *ts, span *out)
{
    int n = 0;
    _PyStackChunk *c = ts->datastack_chunk;
    while (c != NULL && n < MAX_CHUNKS) {
        _PyStackChunk head;
        if (!checked_copy(&head, c, offsetof(_PyStackChunk, data)))
            break;
        out[n++] = (span){(uintptr_t)c, (uintptr_t)c + head.size};
        c = head.previous;
    }
    return n;
}

/* Copies the head of the frame at p into *f; 0 if p cannot be read. */
static int read_frame(uintptr_t p, const span *chunks, int nchunks, _PyInterpreterFrame *f)
{
    if (p == 0 || p % sizeof(void *))
        return 0;
    for (int i = 0; i < nchunks; i++) {
        if (p >= chunks[i].lo && p + FRAME_HEAD <= chunks[i].hi) {
            memcpy(f, (void *)p, FRAME_HEAD);
            return 1;
        }
    }
    return checked_copy(f, (void *)p, FRAME_HEAD);
}

/* The Python frames of `ts`, leaf first: (code, instruction offset in code
 * units, entry flag). The entry flag marks the outermost Python frame run by
 * one C-level call of the interpreter (to merge with native stacks). Only the
 * thread that owns ts changes its frames, and it is the one running this (in
 * a signal handler): the chain does not move while we read it, but it may be
 * half-linked (see above). Async-signal-safe: reads and process_vm_readv. */
static int walk(PyThreadState *ts, const span *chunks, int nchunks, pp_rawframe *out, int max,
                int *truncated, uintptr_t *coro);

int pp_frames_walk(PyThreadState *ts, pp_rawframe *out, int max, int *truncated)
{
    uintptr_t coro;
    return pp_frames_walk_coro(ts, out, max, truncated, &coro);
}

/* Where a generator-owned frame sits in its generator object. */
#define GEN_FRAME_OFFSET offsetof(PyGenObject, gi_iframe)

int pp_frames_walk_coro(PyThreadState *ts, pp_rawframe *out, int max, int *truncated,
                        uintptr_t *coro)
{
    span chunks[MAX_CHUNKS];
    int nchunks = stack_chunks(ts, chunks);
    return walk(ts, chunks, nchunks, out, max, truncated, coro);
}

/* Only the top chunk, from ts's own fields: no system call for a frame in it.
 * That chunk is the one the thread pushes frames into; outside a signal
 * handler nothing is half-linked, and inside one the span still holds only
 * mapped frames (a chunk is published after it is mapped, and the frame read
 * first is the current one). Other frames are read checked, as above. */
int pp_frames_walk_own(PyThreadState *ts, pp_rawframe *out, int max, int *truncated)
{
    span top = {(uintptr_t)ts->datastack_chunk, (uintptr_t)ts->datastack_limit};
    uintptr_t coro;
    return walk(ts, &top, top.lo && top.hi > top.lo, out, max, truncated, &coro);
}

int pp_frames_opcode_now(PyObject *code, uint32_t offset)
{
    if (offset >= (uint32_t)Py_SIZE(code))
        return -1;
    return *(const uint8_t *)&_PyCode_CODE((PyCodeObject *)code)[offset];
}

static int read_opcodes;         /* pp_frames_read_opcodes */

void pp_frames_read_opcodes(int on)
{
    read_opcodes = on;
}

/* The opcode at `off` of the code object `co` as the interpreter has it now
 * (specialized, adaptive or instrumented), as PP_RAW_OPCODE flags; 0 outside
 * its code. The first byte of a code unit is its opcode on every version and
 * byte order. Checked reads, in one system call: a half-linked frame's code
 * may be stale (see above), and another thread may be specializing it. */
static uint32_t opcode_flags(uintptr_t co, ptrdiff_t off)
{
    if (!read_opcodes || off < 0)
        return 0;
    Py_ssize_t size = 0;
    uint8_t unit[2];
    struct iovec local[2] = {{&size, sizeof size}, {unit, sizeof unit}};
    struct iovec remote[2] = {
        {&((PyVarObject *)co)->ob_size, sizeof size},
        {(void *)&_PyCode_CODE((PyCodeObject *)co)[off], sizeof unit}};  /* address only */
    if (process_vm_readv(self_pid, local, 2, remote, 2, 0) != (ssize_t)(sizeof size + sizeof unit)
        || off >= size)
        return 0;
    return PP_RAW_OPCODE | (uint32_t)unit[0] << 8;
}

static int walk(PyThreadState *ts, const span *chunks, int nchunks, pp_rawframe *out, int max,
                int *truncated, uintptr_t *coro)
{
    *truncated = 0;
    *coro = 0;
#if PY_VERSION_HEX >= 0x030D0000
    uintptr_t p = (uintptr_t)ts->current_frame;
#else
    uintptr_t p = ts->cframe ? (uintptr_t)ts->cframe->current_frame : 0;
#endif
    /* FRAME_HEAD bytes, aligned for the struct */
    union { _PyInterpreterFrame f; char bytes[sizeof(_PyInterpreterFrame)]; } buf;
    _PyInterpreterFrame *f = &buf.f;
    int n = 0;
    /* bounded: a half-linked chain may loop through readable memory */
    for (int guard = 0; guard < max + 64 && read_frame(p, chunks, nchunks, f);
         p = (uintptr_t)f->previous, guard++) {
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK) {
            if (n)
                out[n - 1].flags |= PP_RAW_ENTRY;
            continue;
        }
#endif
#if PY_VERSION_HEX >= 0x030D0000
        uintptr_t co = (uintptr_t)f->f_executable;
        const _Py_CODEUNIT *instr = f->instr_ptr;
#else
        uintptr_t co = (uintptr_t)f->f_code;
        const _Py_CODEUNIT *instr = f->prev_instr;
#endif
        int kind = is_code(co);
        if (!kind)
            continue;                   /* half-built: its code comes with the next sample */
        ptrdiff_t off = instr - _PyCode_CODE((PyCodeObject *)co);   /* address arithmetic only */
        if (n == max) {
            *truncated = 1;
            break;
        }
        out[n].code = co;
        out[n].offset = off < 0 || off > 0x7FFFFFFF ? 0 : (uint32_t)off;
        out[n].flags = n == 0 ? opcode_flags(co, off) : 0;     /* the instruction running */
        if (kind == 2 && f->owner == FRAME_OWNED_BY_GENERATOR && p > GEN_FRAME_OFFSET) {
            out[n].flags |= PP_RAW_CORO;
            *coro = p - GEN_FRAME_OFFSET;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (f->is_entry)
            out[n].flags |= PP_RAW_ENTRY;
#endif
        n++;
    }
    return n;
}

int pp_frames_gen_where(PyObject *gen, PyObject **code, uint32_t *offset)
{
    if (!PyGen_Check(gen) && !PyCoro_CheckExact(gen))
        return 0;
    PyGenObject *g = (PyGenObject *)gen;
    if (g->gi_frame_state >= FRAME_EXECUTING)
        return 0;                       /* running, or finished (its frame cleared) */
    _PyInterpreterFrame *f = (_PyInterpreterFrame *)g->gi_iframe;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *co = f->f_executable;
    if (!PyCode_Check(co))
        return 0;
    ptrdiff_t off = f->instr_ptr - _PyCode_CODE((PyCodeObject *)co);
#else
    PyObject *co = (PyObject *)f->f_code;
    ptrdiff_t off = f->prev_instr - _PyCode_CODE((PyCodeObject *)co);
#endif
    *code = co;
    *offset = off < 0 ? 0 : (uint32_t)off;
    return 1;
}

uintptr_t pp_frames_running(void)
{
    PyThreadState *ts = PyThreadState_GET();
#if PY_VERSION_HEX >= 0x030D0000
    return (uintptr_t)ts->current_frame;
#else
    return ts->cframe ? (uintptr_t)ts->cframe->current_frame : 0;
#endif
}

int pp_frames_owner_suspended(uintptr_t frame)
{
    _PyInterpreterFrame *f = (_PyInterpreterFrame *)frame;
    if (f == NULL || f->owner != FRAME_OWNED_BY_GENERATOR)
        return 0;
    PyGenObject *g = (PyGenObject *)(frame - GEN_FRAME_OFFSET);
    return g->gi_frame_state < FRAME_EXECUTING;
}

PyObject *pp_frames_local0_of(PyThreadState *ts, PyObject *code)
{
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame *f = ts->current_frame;
#else
    _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#endif
    for (int guard = 0; f != NULL && guard < 4096; f = f->previous, guard++) {
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK)
            continue;
#endif
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *co = f->f_executable;
#else
        PyObject *co = (PyObject *)f->f_code;
#endif
        if (co == code && !_PyFrame_IsIncomplete(f))
            return f->localsplus[0];
    }
    return NULL;
}

PyObject *pp_frames_owner(uintptr_t frame)
{
    _PyInterpreterFrame *f = (_PyInterpreterFrame *)frame;
    if (f == NULL || f->owner != FRAME_OWNED_BY_GENERATOR)
        return NULL;
    return (PyObject *)(frame - GEN_FRAME_OFFSET);
}

#if PY_VERSION_HEX < 0x030C0000
uintptr_t pp_frameobj_frame(PyFrameObject *f)
{
    return (uintptr_t)f->f_frame;
}
#endif

PyObject *pp_weakref_get(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    return PyWeakref_GetRef(ref, &o) < 0 ? NULL : o;
#else
    PyObject *o = PyWeakref_GetObject(ref);
    return o == NULL ? NULL : o == Py_None ? NULL : Py_NewRef(o);
#endif
}

int pp_frames_code_is_shim(PyObject *code)
{
#ifdef CO_NO_MONITORING_EVENTS
    return (((PyCodeObject *)code)->co_flags & CO_NO_MONITORING_EVENTS) != 0;
#elif PY_VERSION_HEX >= 0x030C0000
    /* 3.12's entry frames: owned by the C stack, but a sample can land while
     * one is being set up */
    return code == (PyObject *)PyInterpreterState_Main()->interpreter_trampoline;
#else
    (void)code;
    return 0;
#endif
}

/* The calling thread's complete Python frames, innermost first, when it holds
 * the GIL: up to max (code, offset) pairs; the number written (0 if detached). */
int pp_frames_stack(uintptr_t *codes, uint32_t *offsets, uint8_t *entries, int max)
{
    int attached;
    PyThreadState *ts = pp_signal_tstate(&attached);
    if (ts == NULL || !attached)
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame *f = ts->current_frame;
#else
    _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#endif
    int n = 0;
    for (; f != NULL && n < max; f = f->previous) {
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK) {
            if (entries && n)
                entries[n - 1] = 1;
            continue;
        }
#endif
        if (_PyFrame_IsIncomplete(f))
            continue;
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *co = f->f_executable;
        if (!PyCode_Check(co) || pp_frames_code_is_shim(co))
            continue;
        ptrdiff_t off = f->instr_ptr - _PyCode_CODE((PyCodeObject *)co);
#else
        PyObject *co = (PyObject *)f->f_code;
        ptrdiff_t off = f->prev_instr - _PyCode_CODE((PyCodeObject *)co);
#endif
        codes[n] = (uintptr_t)co;
        offsets[n] = off < 0 ? 0 : (uint32_t)off;
        if (entries) {
#if PY_VERSION_HEX >= 0x030C0000
            entries[n] = 0;
#else
            entries[n] = f->is_entry != 0;
#endif
        }
        n++;
    }
    return n;
}

int pp_frames_current(uintptr_t *code, uint32_t *offset)
{
    return pp_frames_stack(code, offset, NULL, 1);
}

static void (*code_destroyed)(PyObject *code);

#if PY_VERSION_HEX >= 0x030C0000
static int code_watcher = -1;

static int on_code_event(PyCodeEvent event, PyCodeObject *co)
{
    if (event == PY_CODE_EVENT_DESTROY && code_destroyed)
        code_destroyed((PyObject *)co);
    return 0;
}

int pp_frames_watch_code(void (*on_destroy)(PyObject *code), int on)
{
    code_destroyed = on_destroy;
    if (on && code_watcher < 0) {
        code_watcher = PyCode_AddWatcher(on_code_event);
        return code_watcher < 0 ? -1 : 0;
    }
    return 0;                           /* kept: the callback does nothing when idle */
}
#else
static destructor code_dealloc;

static void pp_code_dealloc(PyObject *co)
{
    code_destroyed(co);
    code_dealloc(co);
}

int pp_frames_watch_code(void (*on_destroy)(PyObject *code), int on)
{
    code_destroyed = on_destroy;
    if (on && code_dealloc == NULL) {
        code_dealloc = PyCode_Type.tp_dealloc;
        PyCode_Type.tp_dealloc = pp_code_dealloc;
    }
    else if (!on && code_dealloc != NULL && PyCode_Type.tp_dealloc == pp_code_dealloc) {
        PyCode_Type.tp_dealloc = code_dealloc;
        code_dealloc = NULL;
    }
    return 0;
}
#endif

#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_interp.h"
#include "internal/pycore_instruments.h"

/* The tools that have CALL events anywhere in the interpreter: a stable
 * address, read with one byte load per C call. Tool 6 (the legacy profile
 * hook's bridge) is there while any thread has a sys.setprofile hook. */
const uint8_t *pp_frames_call_tools(void)
{
    return &PyInterpreterState_Get()->monitors.tools[PY_MONITORING_EVENT_CALL];
}

/* GIL held. Put cb in place of the legacy profile bridge's callback for
 * C_RETURN (c_raise 0) or C_RAISE (1); returns the one it held (new
 * reference, may be NULL). The bridge's callbacks are created first if no
 * sys.setprofile ran yet (one 'sys.setprofile' audit event): a first
 * sys.setprofile would otherwise create fresh ones during the very call whose
 * C_RETURN is to be filtered. _PyMonitoring_RegisterCallback is not exported:
 * this is what it does. */
PyObject *pp_frames_legacy_profile_swap(int c_raise, PyObject *cb)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (!interp->sys_profile_initialized) {
        PyEval_SetProfile(NULL, NULL);
        if (PyErr_Occurred())
            return NULL;
    }
    int ev = c_raise ? PY_MONITORING_EVENT_C_RAISE : PY_MONITORING_EVENT_C_RETURN;
    PyObject **slot = &interp->monitoring_callables[PY_MONITORING_SYS_PROFILE_ID][ev];
    PyObject *old = *slot;
    *slot = Py_XNewRef(cb);
    return old;
}
#endif

/* ------------------------------------------------------------- the GIL */

#if PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"
#endif

/* The main interpreter's GIL. CPython counts a switch when a thread other
 * than the last holder takes it (take_gil, under the GIL's mutex: the holder
 * is stored before the count); the last holder stays set after it drops it. */
#if PY_VERSION_HEX >= 0x030D0000
#define GIL_LOCKED(g) __atomic_load_n(&(g)->locked, __ATOMIC_ACQUIRE)
#define GIL_LAST(g) ((uintptr_t)__atomic_load_n(&(g)->last_holder, __ATOMIC_ACQUIRE))
#else
#define GIL_LOCKED(g) __atomic_load_n(&(g)->locked._value, __ATOMIC_ACQUIRE)
#define GIL_LAST(g) __atomic_load_n(&(g)->last_holder._value, __ATOMIC_ACQUIRE)
#endif

static struct _gil_runtime_state *main_gil(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyInterpreterState_Main()->ceval.gil;
#else
    return &_PyRuntime.ceval.gil;
#endif
}

uintptr_t pp_gil_holder(void)
{
    struct _gil_runtime_state *g = main_gil();
    return g != NULL && GIL_LOCKED(g) ? GIL_LAST(g) : 0;
}

uint64_t pp_gil_switches(uintptr_t *last_holder)
{
    struct _gil_runtime_state *g = main_gil();
    *last_holder = 0;
    if (g == NULL)
        return 0;
    for (;;) {          /* a pair read between two switches */
        uint64_t n = __atomic_load_n(&g->switch_number, __ATOMIC_ACQUIRE);
        *last_holder = GIL_LAST(g);
        if (__atomic_load_n(&g->switch_number, __ATOMIC_ACQUIRE) == n)
            return n;
    }
}

uint64_t pp_frames_top_key(uintptr_t tstate)
{
    uintptr_t frame = 0, instr = 0;
    if (tstate == 0)
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    if (!checked_copy(&frame, (void *)(tstate + offsetof(PyThreadState, current_frame)), sizeof frame)
        || frame == 0
        || !checked_copy(&instr, (void *)(frame + offsetof(_PyInterpreterFrame, instr_ptr)), sizeof instr))
        return 0;
#else
    uintptr_t cframe = 0;
    if (!checked_copy(&cframe, (void *)(tstate + offsetof(PyThreadState, cframe)), sizeof cframe)
        || cframe == 0
        || !checked_copy(&frame, (void *)(cframe + offsetof(_PyCFrame, current_frame)), sizeof frame)
        || frame == 0
        || !checked_copy(&instr, (void *)(frame + offsetof(_PyInterpreterFrame, prev_instr)), sizeof instr))
        return 0;
#endif
    return ((uint64_t)frame * 0x9E3779B97F4A7C15ull ^ (uint64_t)instr) | 1;
}

uintptr_t pp_interp_threads_head(void)
{
    PyInterpreterState *interp = PyInterpreterState_Main();
    return (uintptr_t)__atomic_load_n(&interp->threads.head, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------- other processes */

static const pp_remote_layout remote_layouts[] = {
    {.minor = 11,
     .rt_interp_main = 48, .rt_main_thread = 80, .rt_gil = 360, .rt_tstate_current = 576,
     .in_threads_head = 16, .in_gil_ptr = 0, .in_eval_breaker = 100,
     .pc_lock = 112, .pc_count = 120, .pc_max = 0, .pc_calls = 128, .pc_first = 640,
     .pc_last = 644, .pc_ncalls = 32, .pc_call_size = 16,
     .gil_last_holder = 8, .gil_locked = 16, .gil_size = 208,
     .ts_next = 8, .ts_interp = 16, .ts_thread_id = 152, .ts_native_id = 160,
     .ts_cframe = 56, .cf_current_frame = 8, .ts_eval_breaker = 0, .calls_to_do_bit = 0,
     .fr_code = 32, .fr_previous = 48, .fr_instr = 56, .fr_owner = 69,
     .fr_owned_by_cstack = -1, .instr_is_next = 0,
     .co_filename = 112, .co_name = 120, .co_qualname = 128, .co_firstlineno = 72,
     .co_linetable = 136, .co_code = 184,
     .str_state = 32, .str_length = 16, .str_ascii_size = 48, .str_compact_size = 72,
     .bytes_size = 16, .bytes_data = 32, .ob_type = 8},
    {.minor = 12,
     .rt_interp_main = 48, .rt_main_thread = 64, .rt_gil = 0, .rt_tstate_current = 0,
     .in_threads_head = 72, .in_gil_ptr = 384, .in_eval_breaker = 368,
     .pc_lock = 408, .pc_count = 416, .pc_max = 0, .pc_calls = 424, .pc_first = 936,
     .pc_last = 940, .pc_ncalls = 32, .pc_call_size = 16,
     .gil_last_holder = 8, .gil_locked = 16, .gil_size = 208,
     .ts_next = 8, .ts_interp = 16, .ts_thread_id = 136, .ts_native_id = 144,
     .ts_cframe = 56, .cf_current_frame = 0, .ts_eval_breaker = 0, .calls_to_do_bit = 0,
     .fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 70,
     .fr_owned_by_cstack = 3, .instr_is_next = 0,
     .co_filename = 112, .co_name = 120, .co_qualname = 128, .co_firstlineno = 68,
     .co_linetable = 136, .co_code = 192,
     .str_state = 32, .str_length = 16, .str_ascii_size = 40, .str_compact_size = 56,
     .bytes_size = 16, .bytes_data = 32, .ob_type = 8},
    {.minor = 13,
     .rt_interp_main = 640, .rt_main_thread = 656, .rt_gil = 0, .rt_tstate_current = 0,
     .in_threads_head = 7344, .in_gil_ptr = 16, .in_eval_breaker = 0,
     .pc_lock = 40, .pc_count = 44, .pc_max = 48, .pc_calls = 56, .pc_first = 7256,
     .pc_last = 7260, .pc_ncalls = 300, .pc_call_size = 24,
     .gil_last_holder = 8, .gil_locked = 16, .gil_size = 208,
     .ts_next = 8, .ts_interp = 16, .ts_thread_id = 152, .ts_native_id = 160,
     .ts_cframe = 0, .cf_current_frame = 72, .ts_eval_breaker = 24, .calls_to_do_bit = 4,
     .fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 70,
     .fr_owned_by_cstack = 3, .instr_is_next = 1,
     .co_filename = 112, .co_name = 120, .co_qualname = 128, .co_firstlineno = 68,
     .co_linetable = 136, .co_code = 200,
     .str_state = 32, .str_length = 16, .str_ascii_size = 40, .str_compact_size = 56,
     .bytes_size = 16, .bytes_data = 32, .ob_type = 8},
};

const pp_remote_layout *pp_remote_layout_for(int minor)
{
    for (size_t i = 0; i < sizeof remote_layouts / sizeof remote_layouts[0]; i++)
        if (remote_layouts[i].minor == minor)
            return &remote_layouts[i];
    return NULL;
}

/* This build's own row against the structures it is compiled with: the first
 * field that differs, or NULL (tests/test_remote.py asks on every version). */
#include "internal/pycore_runtime.h"
#if PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_interp.h"
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_ceval.h"
#endif
#include "internal/pycore_code.h"

const char *pp_remote_layout_check(void)
{
    const pp_remote_layout *L = pp_remote_layout_for(PY_MINOR_VERSION);
    if (L == NULL)
        return "no row for this version";
#define EQ(field, value) if ((size_t)L->field != (size_t)(value)) return #field
    EQ(rt_interp_main, offsetof(_PyRuntimeState, interpreters.main));
    EQ(rt_main_thread, offsetof(_PyRuntimeState, main_thread));
    EQ(in_threads_head, offsetof(PyInterpreterState, threads.head));
    EQ(ts_next, offsetof(PyThreadState, next));
    EQ(ts_interp, offsetof(PyThreadState, interp));
    EQ(ts_thread_id, offsetof(PyThreadState, thread_id));
    EQ(ts_native_id, offsetof(PyThreadState, native_thread_id));
    EQ(fr_previous, offsetof(_PyInterpreterFrame, previous));
    EQ(fr_owner, offsetof(_PyInterpreterFrame, owner));
    EQ(co_filename, offsetof(PyCodeObject, co_filename));
    EQ(co_name, offsetof(PyCodeObject, co_name));
    EQ(co_qualname, offsetof(PyCodeObject, co_qualname));
    EQ(co_firstlineno, offsetof(PyCodeObject, co_firstlineno));
    EQ(co_linetable, offsetof(PyCodeObject, co_linetable));
    EQ(co_code, offsetof(PyCodeObject, co_code_adaptive));
    EQ(str_state, offsetof(PyASCIIObject, state));
    EQ(str_length, offsetof(PyASCIIObject, length));
    EQ(str_ascii_size, sizeof(PyASCIIObject));
    EQ(str_compact_size, sizeof(PyCompactUnicodeObject));
    EQ(bytes_data, offsetof(PyBytesObject, ob_sval));
    EQ(bytes_size, offsetof(PyVarObject, ob_size));
    EQ(ob_type, offsetof(PyObject, ob_type));
    EQ(gil_last_holder, offsetof(struct _gil_runtime_state, last_holder));
    EQ(gil_locked, offsetof(struct _gil_runtime_state, locked));
    EQ(gil_size, sizeof(struct _gil_runtime_state));
#if PY_VERSION_HEX < 0x030D0000
    EQ(in_eval_breaker, offsetof(PyInterpreterState, ceval.eval_breaker));
    EQ(pc_lock, offsetof(PyInterpreterState, ceval.pending.lock));
    EQ(pc_count, offsetof(PyInterpreterState, ceval.pending.calls_to_do));
    EQ(pc_calls, offsetof(PyInterpreterState, ceval.pending.calls));
    EQ(pc_first, offsetof(PyInterpreterState, ceval.pending.first));
    EQ(pc_last, offsetof(PyInterpreterState, ceval.pending.last));
    EQ(pc_ncalls, NPENDINGCALLS);
    EQ(pc_call_size, sizeof(PyInterpreterState *) * 2);
    EQ(ts_cframe, offsetof(PyThreadState, cframe));
    EQ(cf_current_frame, offsetof(_PyCFrame, current_frame));
    EQ(fr_code, offsetof(_PyInterpreterFrame, f_code));
    EQ(fr_instr, offsetof(_PyInterpreterFrame, prev_instr));
#else
    EQ(pc_lock, offsetof(PyInterpreterState, ceval.pending.mutex));
    EQ(pc_count, offsetof(PyInterpreterState, ceval.pending.npending));
    EQ(pc_max, offsetof(PyInterpreterState, ceval.pending.max));
    EQ(pc_calls, offsetof(PyInterpreterState, ceval.pending.calls));
    EQ(pc_first, offsetof(PyInterpreterState, ceval.pending.first));
    EQ(pc_last, offsetof(PyInterpreterState, ceval.pending.next));
    EQ(pc_ncalls, PENDINGCALLSARRAYSIZE);
    EQ(pc_call_size, sizeof(struct _pending_call));
    EQ(ts_eval_breaker, offsetof(PyThreadState, eval_breaker));
    EQ(calls_to_do_bit, _PY_CALLS_TO_DO_BIT);
    EQ(cf_current_frame, offsetof(PyThreadState, current_frame));
    EQ(fr_code, offsetof(_PyInterpreterFrame, f_executable));
    EQ(fr_instr, offsetof(_PyInterpreterFrame, instr_ptr));
#endif
#if PY_VERSION_HEX < 0x030C0000
    EQ(rt_gil, offsetof(_PyRuntimeState, ceval.gil));
    EQ(rt_tstate_current, offsetof(_PyRuntimeState, gilstate.tstate_current));
#else
    EQ(in_gil_ptr, offsetof(PyInterpreterState, ceval.gil));
    EQ(fr_owned_by_cstack, FRAME_OWNED_BY_CSTACK);
#endif
#undef EQ
    return NULL;
}
