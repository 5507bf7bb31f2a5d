/* frames.c — what needs CPython's internal headers (Py_BUILD_CORE).
 *
 * Owns: layout facts exported as plain constants, and the walk of a thread's
 * interpreter frames for the sampler. Nothing else in pyprof includes
 * internal headers.
 * Never: calls into libpython from pp_frames_walk/pp_signal_tstate beyond the
 * documented lock-free thread-state reads; they run inside a signal handler
 * (no allocation, no locks, no reference counts).
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>

#include "frames.h"
#include "internal/pycore_frame.h"

#if PY_VERSION_HEX < 0x030C0000
/* 3.11: where a _PyInterpreterFrame keeps its code object and its owner. */
const size_t pp_iframe_code_offset = offsetof(_PyInterpreterFrame, f_code);
const size_t pp_iframe_owner_offset = offsetof(_PyInterpreterFrame, owner);
const char pp_frame_owned_by_generator = FRAME_OWNED_BY_GENERATOR;
/* 3.11: a frame object's switch for line events (C trace functions included). */
const size_t pp_frame_trace_lines_offset = offsetof(struct _frame, f_trace_lines);
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
    *attached = mine != NULL && current == mine;
    return mine;
}

/* The Python frames of `ts`, leaf first: (code, instruction offset in code
 * units, entry flag). The entry flag marks the outermost Python frame run by
 * one C-level call of the interpreter (to merge with native stacks). Only the
 * thread that owns ts changes its frames, and it is the one running this (in
 * a signal handler): the chain is stable. Async-signal-safe: reads only. */
int pp_frames_walk(PyThreadState *ts, pp_rawframe *out, int max, int *truncated)
{
    *truncated = 0;
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame *f = ts->current_frame;
#else
    _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#endif
    int n = 0;
    for (int guard = 0; f != NULL && guard < (1 << 20); f = f->previous, guard++) {
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK) {
            if (n)
                out[n - 1].flags |= PP_RAW_ENTRY;
            continue;
        }
#endif
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *ex = f->f_executable;
        if (ex == NULL || Py_TYPE(ex) != &PyCode_Type)
            continue;
        PyCodeObject *co = (PyCodeObject *)ex;
        ptrdiff_t off = f->instr_ptr - _PyCode_CODE(co);
#else
        PyCodeObject *co = f->f_code;
        if (co == NULL)
            continue;
        ptrdiff_t off = f->prev_instr - _PyCode_CODE(co);
#endif
        if (n == max) {
            *truncated = 1;
            break;
        }
        out[n].code = (uintptr_t)co;
        out[n].offset = off < 0 ? 0 : (uint32_t)off;
        out[n].flags = 0;
#if PY_VERSION_HEX < 0x030C0000
        if (f->is_entry)
            out[n].flags |= PP_RAW_ENTRY;
#endif
        n++;
    }
    return n;
}
