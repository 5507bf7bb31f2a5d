/* frames.h — the only place that knows CPython's per-version structures.
 *
 * Owns: small inline accessors over frames, thread states and exception state
 * whose spelling differs between 3.11, 3.12 and 3.13. Nothing else in pyprof
 * reads interpreter internals. Everything here needs the GIL unless marked.
 */
#ifndef PP_FRAMES_H
#define PP_FRAMES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#if PY_VERSION_HEX < 0x030B0000
#error "pyprof supports CPython 3.11 and newer"
#endif

#define PP_USE_MONITORING (PY_VERSION_HEX >= 0x030C0000)
/* os.fork counts the process's threads (to warn) after the after_in_parent
 * hooks: 3.13 (gh-137109 moved it before them again; its 3.13 backport is not
 * relied on). */
#define PP_FORK_COUNTS_AFTER_HOOKS (PY_VERSION_HEX >= 0x030D0000)
/* The function in `threading` that Thread.start calls with the new thread's
 * function first (sampler_wall.c wraps it while wall sampling runs). */
#if PY_VERSION_HEX >= 0x030D0000
#define PP_THREADING_START "_start_joinable_thread"
#else
#define PP_THREADING_START "_start_new_thread"
#endif

/* A frame as the sampler's signal handler records it: resolved to names and
 * lines later, with the GIL held. */
enum { PP_RAW_ENTRY = 1, PP_RAW_CORO = 2, PP_RAW_OPCODE = 4 };
typedef struct {
    uintptr_t code;             /* PyCodeObject *, alive when read; checked again when drained */
    uint32_t offset;            /* instruction, in code units */
    uint32_t flags;             /* PP_RAW_ENTRY; PP_RAW_CORO: a coroutine's own frame;
                                 * PP_RAW_OPCODE: the innermost frame's opcode as it ran
                                 * then (specialized, adaptive or instrumented) is
                                 * pp_raw_opcode's */
} pp_rawframe;

static inline int pp_raw_opcode(const pp_rawframe *f)
{
    return f->flags & PP_RAW_OPCODE ? (int)(f->flags >> 8 & 0xFF) : -1;
}

/* Async-signal-safe (frames.c): the calling thread's state and its frames. */
PyThreadState *pp_signal_tstate(int *attached);
/* The calling thread's innermost complete frame when it holds the GIL: 1 and
 * (code, offset in code units), else 0. No allocation, locks or refcounts. */
int pp_frames_current(uintptr_t *code, uint32_t *offset);
/* The same for the whole stack, innermost first: the number of frames written.
 * entries (NULL: not wanted): 1 for a frame an evaluation-loop call started at
 * (where a native stack merges in, as PP_RAW_ENTRY), else 0. */
int pp_frames_stack(uintptr_t *codes, uint32_t *offsets, uint8_t *entries, int max);
/* Whether p is a live code object (checked reads; GIL not needed). */
int pp_frames_code_alive(uintptr_t p);
/* A code object of CPython's own that runs no Python source (3.13's
 * _Py_InitCleanup, between a caller and a Python __init__): sys._getframe()
 * and tracebacks skip its frame, so do pyprof's stacks. GIL held, code alive. */
int pp_frames_code_is_shim(PyObject *code);
/* Without the GIL (the sampler's helper): the thread state holding the GIL
 * (0 if it is free), and the newest thread state of the main interpreter,
 * which changes when a thread state is made. Hints: the values may be stale
 * by the time they are used. */
uintptr_t pp_gil_holder(void);
uintptr_t pp_interp_threads_head(void);
/* Without the GIL: how many times the GIL has changed hands, and the thread
 * state that took it last (it may have dropped it since). No switch between
 * two reads: no thread but the last holder ran Python in between. */
uint64_t pp_gil_switches(uintptr_t *last_holder);
/* Where a thread's Python code stands (its top frame and instruction), as a
 * key; 0 if unreadable. Checked reads: the thread may run, its state may be
 * gone. A key that changed: the thread ran Python (it held the GIL).
 * Async-signal-safe. */
uint64_t pp_frames_top_key(uintptr_t tstate);
int pp_frames_walk(PyThreadState *ts, pp_rawframe *out, int max, int *truncated);
/* The same; *coro gets the address of the coroutine object that owns the
 * rootmost PP_RAW_CORO frame (0: none), an address only, never dereferenced. */
int pp_frames_walk_coro(PyThreadState *ts, pp_rawframe *out, int max, int *truncated,
                        uintptr_t *coro);
/* GIL held: where a suspended (or not yet started) coroutine or generator
 * object waits: its code object (borrowed) and instruction offset in code
 * units. 0 if gen is not one, or is running or finished. */
int pp_frames_gen_where(PyObject *gen, PyObject **code, uint32_t *offset);
/* GIL held: the running frame of the calling thread (an address only; 0 if
 * none), for the tracer's coroutines: a coroutine's frame lives in the
 * coroutine object, so its address names the coroutine while it lives. */
uintptr_t pp_frames_running(void);
/* GIL held: whether the generator or coroutine owning the frame at `frame`
 * is suspended (it yielded; 3.11's profile hook reports yields as returns). */
int pp_frames_owner_suspended(uintptr_t frame);
/* GIL held, ts another thread's state (stopped: it has no GIL): the first
 * local (self) of its innermost frame running `code` (borrowed), or NULL. */
PyObject *pp_frames_local0_of(PyThreadState *ts, PyObject *code);
/* GIL held: the generator or coroutine owning the frame (borrowed), or NULL. */
PyObject *pp_frames_owner(uintptr_t frame);
#if !PP_USE_MONITORING
/* 3.11: the interpreter frame of a frame object, an address only. */
uintptr_t pp_frameobj_frame(PyFrameObject *f);
#endif
/* A new reference from a weak reference (NULL: dead), or NULL with an error. */
PyObject *pp_weakref_get(PyObject *ref);
/* The same for the calling thread's own ts (it runs C code without the GIL:
 * its frames do not move), reading its current data-stack chunk directly:
 * the allocation wrappers' way, without a system call per allocation. */
int pp_frames_walk_own(PyThreadState *ts, pp_rawframe *out, int max, int *truncated);
/* Before sampling starts (after a fork too): the process id for checked reads. */
void pp_frames_init(void);
/* GIL held, code alive: the opcode at `offset` (code units) of `code` as the
 * interpreter has it now (specialized, adaptive or instrumented); -1 past
 * its end. */
int pp_frames_opcode_now(PyObject *code, uint32_t offset);
/* Whether the walks read the innermost frame's opcode (PP_RAW_OPCODE): one
 * checked read more per stack. Set before sampling starts. */
void pp_frames_read_opcodes(int on);
/* A code object is being freed (GIL held): forget that it was one. */
void pp_frames_forget_code(PyObject *code);

/* Call on_destroy(code) before any code object is destroyed (GIL held): a
 * code watcher on 3.12+, a tp_dealloc shim on 3.11. Off: the 3.11 shim goes,
 * the 3.12 watcher stays (the callback does nothing when idle). */
int pp_frames_watch_code(void (*on_destroy)(PyObject *code), int on);

#if PP_USE_MONITORING
/* 3.12+ (frames.c): the CALL tools byte, and the legacy profile bridge's
 * C_RETURN / C_RAISE callbacks swapped (GIL held; returns the old, a new ref). */
const uint8_t *pp_frames_call_tools(void);
PyObject *pp_frames_legacy_profile_swap(int c_raise, PyObject *cb);
#endif

/* A thread state's identities: kernel thread id (0 until the thread runs),
 * threading.get_ident(), and the interpreter's serial number of the state.
 * Plain field reads: safe in a signal handler for the thread's own state. */
static inline unsigned long pp_tstate_native_tid(PyThreadState *ts)
{
    return ts->native_thread_id;
}

static inline unsigned long pp_tstate_ident(PyThreadState *ts)
{
    return ts->thread_id;
}

static inline uint64_t pp_tstate_serial(PyThreadState *ts)
{
    return ts->id;
}

/* A thread state 3.11 filled with its creator's thread ids until the new
 * thread runs (a state sharing its kernel thread id with an older one). */
static inline int pp_tstate_prealloc(PyInterpreterState *interp, PyThreadState *ts)
{
#if PY_VERSION_HEX < 0x030C0000
    for (PyThreadState *o = PyInterpreterState_ThreadHead(interp); o; o = PyThreadState_Next(o))
        if (o != ts && o->native_thread_id == ts->native_thread_id && o->id < ts->id)
            return 1;
#else
    (void)interp; (void)ts;
#endif
    return 0;
}

/* Borrowed code object of a frame given to a legacy profile hook. */
static inline PyCodeObject *pp_frame_code_borrowed(PyFrameObject *frame)
{
    PyCodeObject *code = PyFrame_GetCode(frame);   /* new reference */
    Py_DECREF(code);                                /* the frame keeps it alive */
    return code;
}

/* Pending exception, saved around work that may clear or set one. */
typedef struct {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *type, *value, *tb;
#endif
} pp_err_state;

static inline void pp_err_save(pp_err_state *s)
{
#if PY_VERSION_HEX >= 0x030C0000
    s->exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&s->type, &s->value, &s->tb);
#endif
}

static inline void pp_err_restore(pp_err_state *s)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(s->exc);
#else
    PyErr_Restore(s->type, s->value, s->tb);
#endif
}

#if !PP_USE_MONITORING
#include <opcode.h>             /* RESUME */

/* 3.11: the code object of an interpreter frame (borrowed; offsets from frames.c). */
extern const size_t pp_iframe_code_offset;
extern const size_t pp_iframe_owner_offset;
extern const char pp_frame_owned_by_generator;

static inline PyCodeObject *pp_iframe_code(struct _PyInterpreterFrame *f)
{
    return *(PyCodeObject **)((char *)f + pp_iframe_code_offset);
}

/* 3.11: calling a generator, coroutine or async generator function evaluates
 * its frame once, before the generator owns it, only to create the generator
 * (RETURN_GENERATOR): that evaluation is not a call of the function. */
static inline int pp_iframe_creates_generator(struct _PyInterpreterFrame *f, PyCodeObject *code)
{
    return (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        && *((char *)f + pp_iframe_owner_offset) != pp_frame_owned_by_generator;
}

/* 3.11: the profile and trace objects installed on a thread state, to remove only ours. */
static inline PyObject *pp_tstate_profileobj(PyThreadState *ts)
{
    return ts->c_profileobj;
}

static inline PyObject *pp_tstate_traceobj(PyThreadState *ts)
{
    return ts->c_tracefunc ? ts->c_traceobj : NULL;
}

static inline int pp_tstate_has_trace(PyThreadState *ts)
{
    return ts->c_tracefunc != NULL;
}

/* 3.11: no more line events for this frame (what f_trace_lines = False does). */
extern const size_t pp_frame_trace_lines_offset;

static inline void pp_frame_stop_line_events(PyFrameObject *frame)
{
    *((char *)frame + pp_frame_trace_lines_offset) = 0;
}
/* 3.11, --opcodes: a frame object's switch for the trace hook's OPCODE events. */
extern const size_t pp_frame_trace_opcodes_offset;

static inline void pp_frame_trace_opcodes(PyFrameObject *frame, int on)
{
    *((char *)frame + pp_frame_trace_opcodes_offset) = (char)(on != 0);
}
#endif

/* ---------------------------------------------------------- other processes
 *
 * Where CPython 3.11-3.13 keep what pyprof reads and writes in *another*
 * process (remote.c: attach, the read-only dump, top --remote): offsets in
 * bytes, per minor version, whatever version this build is for. The build's
 * own version's row is checked against the real structures at compile time
 * (frames.c), so each row is checked by the build of its version. */
typedef struct {
    int minor;                          /* 11, 12, 13 */
    /* _PyRuntime */
    uint16_t rt_interp_main, rt_main_thread;
    uint16_t rt_gil;                    /* 3.11: the GIL lives in _PyRuntime.ceval */
    uint16_t rt_tstate_current;         /* 3.11: the GIL holder's state; 0 after */
    /* PyInterpreterState */
    uint16_t in_threads_head, in_gil_ptr;   /* in_gil_ptr: 3.12+, 0 before */
    uint16_t in_eval_breaker;           /* 3.11/3.12 (per interpreter); 0 on 3.13 */
    /* the interpreter's pending calls, the queue any thread runs (3.11: the main thread) */
    uint16_t pc_lock;                   /* 3.11/3.12: PyThread_type_lock; 3.13: PyMutex */
    uint16_t pc_count;                  /* 3.11/3.12: calls_to_do; 3.13: npending */
    uint16_t pc_max;                    /* 3.13: max; 0 before */
    uint16_t pc_calls, pc_first, pc_last;
    uint16_t pc_ncalls, pc_call_size;
    /* _gil_runtime_state */
    uint16_t gil_last_holder, gil_locked;
    uint16_t gil_size;                  /* its bytes: a futex in them is a wait for the GIL */
    /* PyThreadState */
    uint16_t ts_next, ts_interp, ts_thread_id, ts_native_id;
    uint16_t ts_cframe;                 /* 3.11/3.12: _PyCFrame *; 0 on 3.13 */
    uint16_t cf_current_frame;          /* in _PyCFrame (3.11/3.12); in the state (3.13) */
    uint16_t ts_eval_breaker;           /* 3.13: per thread; 0 before */
    uint32_t calls_to_do_bit;           /* 3.13: _PY_CALLS_TO_DO_BIT */
    /* _PyInterpreterFrame */
    uint16_t fr_code, fr_previous, fr_instr, fr_owner;
    int fr_owned_by_cstack;             /* -1 (3.11: none) */
    int instr_is_next;                  /* 3.13's instr_ptr; 3.11/3.12's prev_instr: 0 */
    /* PyCodeObject, str, bytes */
    uint16_t co_filename, co_name, co_qualname, co_firstlineno, co_linetable, co_code;
    uint16_t str_state, str_length, str_ascii_size, str_compact_size;
    uint16_t bytes_size, bytes_data, ob_type;
} pp_remote_layout;

/* The layout of CPython 3.minor, or NULL if pyprof does not know it. */
const pp_remote_layout *pp_remote_layout_for(int minor);
/* This build's own row against its structures: the first field that differs,
 * or NULL. */
const char *pp_remote_layout_check(void);

#endif
