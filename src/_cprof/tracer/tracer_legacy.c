/* tracer_legacy.c — the tracer's hook back-ends on 3.11: the legacy C
 * profile hook (and the trace hook for line mode) on every thread, and the
 * PEP 523 frame-evaluation engine for builtins=False.
 *
 * Owns: the hooks on every thread state, the threading.setprofile/settrace
 * trampolines that give new threads the C hooks, the evaluation function
 * installed before ours. Hooks are bound to the tracer's owner object (what
 * sys.getprofile() returns), which leads back to the tracer state. GIL held.
 * Never: leaves a hook behind bound to a profiler it does not keep alive;
 * takes the trace hook from another tool (it refuses, naming the holder).
 */
#include "tracer_hot.h"

#if !PP_USE_MONITORING


#define GENERATOR_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)

/* 3.11 line mode: a generator's frame is resumed (not started) when it is
 * past its first RESUME instruction; that offset (bytes) is found once per
 * function, in its deoptimised bytecode. */
COLD int first_resume_offset(pp_tracer *p, PyCodeObject *code)
{
    uint32_t fid = pp_index_get(&p->reg->idx, (uint64_t)(uintptr_t)code);
    if (fid == PP_NONE)
        return INT32_MAX;
    if (p->reg->fresume[fid] >= 0)
        return p->reg->fresume[fid];
    int32_t off = INT32_MAX;
    PyObject *bytes = PyCode_GetCode(code);
    if (bytes == NULL) {
        PyErr_Clear();
    }
    else {
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(bytes);
        for (Py_ssize_t i = 0; i + 1 < PyBytes_GET_SIZE(bytes); i += 2) {
            if (b[i] == RESUME) {
                off = (int32_t)i;
                break;
            }
        }
        Py_DECREF(bytes);
    }
    return p->reg->fresume[fid] = off;
}

/* Not the evaluation that only makes the coroutine (RETURN_GENERATOR). */
static inline int owned_by_coroutine(PyFrameObject *frame)
{
    return *((char *)pp_frameobj_frame(frame) + pp_iframe_owner_offset)
           == pp_frame_owned_by_generator;
}

/* 3.11 reports a coroutine's suspension as a return: its state tells. */
static void coro_leave(pp_tracer *p, uintptr_t frame)
{
    if (pp_frames_owner_suspended(frame))
        pp_tracer_coro_suspend(p, frame);
    else
        pp_tracer_coro_end(p, frame);
}

static int legacy_callback(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    pp_tracer *p = pp_tracer_of(obj);
    if (UNLIKELY(!p->enabled))
        return 0;
    switch (what) {
    case PyTrace_CALL: {
        PyCodeObject *code = pp_frame_code_borrowed(frame);
        if (UNLIKELY(p->memory) && pp_mem_forget_hook)
            pp_mem_forget_hook((PyObject *)frame);  /* made for this hook, not by the program */
        enter(p, (uint64_t)(uintptr_t)code, (PyObject *)code, NULL, PP_KIND_PYTHON);
        if (UNLIKELY(pp_follows_coroutine(p, (PyObject *)code)) && owned_by_coroutine(frame))
            pp_tracer_coro_run(p, (PyObject *)code, pp_frameobj_frame(frame), 0);
        if (UNLIKELY(p->lines) && (code->co_flags & GENERATOR_FLAGS)
            && PyFrame_GetLasti(frame) > first_resume_offset(p, code))
            pp_tracer_line_resume_at(p, (PyObject *)code, PyFrame_GetLineNumber(frame),
                                     now_ticks(p));
        break;
    }
    case PyTrace_RETURN: {
        PyCodeObject *code = pp_frame_code_borrowed(frame);
        leave(p, (uint64_t)(uintptr_t)code);
        if (UNLIKELY(pp_follows_coroutine(p, (PyObject *)code)) && owned_by_coroutine(frame))
            coro_leave(p, pp_frameobj_frame(frame));
        break;
    }
    case PyTrace_C_CALL:
        if (p->builtins && PyCFunction_Check(arg))
            enter(p, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml, arg, NULL,
                  PP_KIND_BUILTIN);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (p->builtins && PyCFunction_Check(arg))
            leave(p, (uint64_t)(uintptr_t)((PyCFunctionObject *)arg)->m_ml);
        break;
    default:
        break;
    }
    return 0;
}

/* Line mode on 3.11: the C trace hook, for LINE events (and OPCODE events of
 * the targets' frames with --opcodes) only. Frames of other code have their
 * line events switched off at their first event; calls and returns are the
 * profile hook's business. */
static int trace_callback(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    (void)arg;
    pp_tracer *p = pp_tracer_of(obj);
    if (UNLIKELY(!p->enabled || pp_tls.busy))
        return 0;
    if (what == PyTrace_OPCODE) {
        int64_t now = now_ticks(p);
        int lasti = PyFrame_GetLasti(frame);
        if (lasti >= 0)
            insn_event(p, (PyObject *)pp_frame_code_borrowed(frame), (uint32_t)lasti / 2, now);
    }
    else if (what == PyTrace_LINE) {
        int64_t now = now_ticks(p);
        line_event(p, (PyObject *)pp_frame_code_borrowed(frame), PyFrame_GetLineNumber(frame),
                   1, now);
    }
    else if (what == PyTrace_CALL) {
        PyCodeObject *code = pp_frame_code_borrowed(frame);
        uint32_t fid = pp_registry_code(p->reg, (PyObject *)code);
        if (fid == PP_NONE || !p->reg->ftarget[fid])
            pp_frame_stop_line_events(frame);
        else if (p->opcodes)
            pp_frame_trace_opcodes(frame, 1);  /* --opcodes: every instruction of a target */
    }
    return 0;
}

int pp_tracer_line_events_on(pp_tracer *p, PyObject *code, int on)
{
    (void)p; (void)code; (void)on;      /* the trace hook asks ftarget at every call */
    return 0;
}

/* A target's frame that was running before line mode started has had no CALL
 * event to switch its OPCODE events on (--opcodes); stop switches them off
 * again, so that a later trace function gets none it did not ask for. */
int pp_tracer_running_frame(pp_tracer *p, PyFrameObject *frame, int on)
{
    if (p->opcodes)
        pp_frame_trace_opcodes(frame, on);
    return 0;
}

/* threading.setprofile() target: installs the C hook on a new thread at its
 * first event, then handles that event. */
static PyObject *thread_bootstrap(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    pp_tracer *p = pp_tracer_of(self);
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_thread_bootstrap(frame, event, arg)");
        return NULL;
    }
    if (!p->enabled) {
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    PyEval_SetProfile(legacy_callback, self);
    static const char *names[] = {"call", "exception", "line", "return",
                                  "c_call", "c_exception", "c_return"};
    for (int what = 0; what < 7; what++)
        if (PyUnicode_CompareWithASCIIString(args[1], names[what]) == 0)
            legacy_callback(self, (PyFrameObject *)args[0], what, args[2]);
    Py_RETURN_NONE;
}

static PyMethodDef bootstrap_def = {
    "_thread_bootstrap", (PyCFunction)(void (*)(void))thread_bootstrap, METH_FASTCALL,
    "Installs pyprof's C profile hook on a thread started while profiling."};

/* threading.settrace() target in line mode: the same for the trace hook. */
static PyObject *thread_trace_bootstrap(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    pp_tracer *p = pp_tracer_of(self);
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_thread_trace_bootstrap(frame, event, arg)");
        return NULL;
    }
    PyEval_SetTrace(p->enabled ? trace_callback : NULL, p->enabled ? self : NULL);
    if (p->enabled && PyUnicode_CompareWithASCIIString(args[1], "call") == 0)
        trace_callback(self, (PyFrameObject *)args[0], PyTrace_CALL, args[2]);
    Py_RETURN_NONE;
}

static PyMethodDef trace_bootstrap_def = {
    "_thread_trace_bootstrap", (PyCFunction)(void (*)(void))thread_trace_bootstrap,
    METH_FASTCALL, "Installs pyprof's C trace hook on a thread started while line profiling."};

/* threading.setprofile / settrace (which = "profile" / "trace"). */
static int threading_imported(void)
{
    PyObject *mods = PyImport_GetModuleDict();                  /* borrowed */
    return mods && PyDict_GetItemString(mods, "threading") != NULL;
}

static int set_threading_hook(const char *which, PyObject *hook, PyObject **prev)
{
    if ((hook == NULL || hook == Py_None) && !threading_imported()) {
        if (prev)
            *prev = NULL;
        return 0;                       /* nothing to take back: no import for it */
    }
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL)
        return -1;
    if (prev) {
        *prev = PyObject_GetAttrString(threading, which[0] == 'p' ? "_profile_hook"
                                                                  : "_trace_hook");
        if (*prev == NULL)
            PyErr_Clear();
    }
    PyObject *r = PyObject_CallMethod(threading, which[0] == 'p' ? "setprofile" : "settrace",
                                      "O", hook ? hook : Py_None);
    Py_DECREF(threading);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* -------------------------- 3.11, builtins=False: PEP 523 frame evaluation
 *
 * Any profile function puts 3.11's eval loop on its tracing path (every
 * instruction unspecialised: 2-3x even on code without calls). Without C
 * functions to report, a frame-evaluation function sees every Python frame
 * (calls, generator resumes and throws) without that tax. Two costs, handled:
 * - CPython stops inlining Python-to-Python calls, so each call recurses on
 *   the C stack: near the end of a thread's C stack the hook steps aside (the
 *   previous evaluation function is restored until that frame returns), so a
 *   deep recursion that runs natively still runs; its deeper frames are then
 *   not recorded (counted in cstack_asides);
 * - no `tracing` flag protects pyprof's own work from re-entry: Python code it
 *   may run (a finalizer during a flush) sees pp_tls.busy and is not recorded.
 * Chains to the evaluation function installed before (a debugger's, a JIT's).
 */
static _PyFrameEvalFunction eval_prev;  /* NULL: CPython's default */
static int eval_aside_depth;            /* frames running with the hook stepped aside */

static inline PyObject *eval_next(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc)
{
    return eval_prev ? eval_prev(ts, f, exc) : _PyEval_EvalFrameDefault(ts, f, exc);
}

static PyObject *pp_eval_frame(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc);

COLD PyObject *eval_aside(pp_tracer *p, PyThreadState *ts, struct _PyInterpreterFrame *f,
                          int exc)
{
    PyInterpreterState *interp = PyThreadState_GetInterpreter(ts);
    p->cstack_asides++;
    if (eval_aside_depth++ == 0)
        _PyInterpreterState_SetEvalFrameFunc(interp, eval_prev ? eval_prev
                                                                : _PyEval_EvalFrameDefault);
    PyObject *r = eval_next(ts, f, exc);
    if (--eval_aside_depth == 0 && pp_tracer_active && pp_tracer_active->eval_mode)
        _PyInterpreterState_SetEvalFrameFunc(interp, pp_eval_frame);
    return r;
}

static PyObject *pp_eval_frame(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc)
{
    pp_tracer *p = pp_tracer_active;
    if (UNLIKELY(p == NULL || pp_tls.busy))
        return eval_next(ts, f, exc);
    pp_thread *th = pp_threads_current(p->threads);
    if (UNLIKELY(th == NULL))
        return eval_next(ts, f, exc);
    uintptr_t here = (uintptr_t)&th;
    if (UNLIKELY(here < th->cstack_guard))
        return eval_aside(p, ts, f, exc);
    PyCodeObject *code = pp_iframe_code(f);
    if (UNLIKELY(pp_iframe_creates_generator(f, code)))
        return eval_next(ts, f, exc);
    enter(p, (uint64_t)(uintptr_t)code, (PyObject *)code, NULL, PP_KIND_PYTHON);
    int coro = pp_follows_coroutine(p, (PyObject *)code);  /* owned by its coroutine (see above) */
    if (UNLIKELY(coro))
        pp_tracer_coro_run(p, (PyObject *)code, (uintptr_t)f, 0);
    PyObject *r = eval_next(ts, f, exc);
    /* The frame may have disabled this profiler (or enabled another). */
    if (LIKELY(pp_tracer_active != NULL)) {
        leave(pp_tracer_active, (uint64_t)(uintptr_t)code);
        if (UNLIKELY(coro))
            coro_leave(pp_tracer_active, (uintptr_t)f);   /* the coroutine holds the frame */
    }
    return r;
}

/* The frame-evaluation engine serves builtins=False with pyprof's own clock
 * (a user timer is Python code, which this hook would itself profile) where
 * the C stack's bounds are known. */
static int eval_mode_possible(pp_tracer *p)
{
    return !p->builtins && p->timer == NULL && pp_cstack_low() != 0;
}

static int install_eval(pp_tracer *p)
{
    (void)p;
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (cur != pp_eval_frame)
        eval_prev = cur == _PyEval_EvalFrameDefault ? NULL : cur;
    if (eval_aside_depth == 0)
        _PyInterpreterState_SetEvalFrameFunc(interp, pp_eval_frame);
    return 0;
}

static void remove_eval(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == pp_eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(interp, eval_prev ? eval_prev
                                                                : _PyEval_EvalFrameDefault);
}

/* threading.setprofile / settrace (which) of our bootstrap, keeping the hook
 * it had in *prev. */
static int hook_threading_with(pp_tracer *p, PyMethodDef *bootstrap, const char *which,
                               PyObject **prev)
{
    PyObject *boot = PyCFunction_New(bootstrap, p->owner);
    if (boot == NULL)
        return -1;
    Py_CLEAR(*prev);
    int rc = set_threading_hook(which, boot, prev);
    Py_DECREF(boot);
    return rc;
}

static int hook_threading(pp_tracer *p)
{
    return hook_threading_with(p, &bootstrap_def, "profile", &p->prev_thread_hook);
}

/* Line mode: new threads get the trace hook too. */
static int hook_threading_trace(pp_tracer *p)
{
    return hook_threading_with(p, &trace_bootstrap_def, "trace", &p->prev_trace_hook);
}

/* Line mode needs the trace hook, which only one tool can hold: refuse,
 * naming the holder, rather than silence a debugger or coverage.py. */
static int install_trace_hooks(pp_tracer *p)
{
    PyThreadState *me = PyThreadState_Get();
    if (pp_tstate_has_trace(me) && pp_tstate_traceobj(me) != p->owner) {
        PyObject *holder = pp_tstate_traceobj(me);
        PyErr_Format(PyExc_RuntimeError,
                     "pyprof: line profiling on Python 3.11 needs the trace hook, which is held "
                     "by %R (a debugger or coverage.py?)", holder ? holder : Py_None);
        return -1;
    }
    if (!p->threading_pending && hook_threading_trace(p) < 0)
        return -1;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (!pp_tstate_has_trace(ts) && _PyEval_SetTrace(ts, trace_callback, p->owner) < 0)
            return -1;
    }
    return 0;
}

int pp_tracer_hook_threading(pp_tracer *p)
{
    if (!p->threading_pending)
        return 0;
    p->threading_pending = 0;
    if (!p->enabled || p->eval_mode)
        return 0;
    if (hook_threading(p) < 0)
        return -1;
    return p->lines ? hook_threading_trace(p) : 0;
}

int pp_tracer_install_hooks(pp_tracer *p)
{
    p->eval_mode = !p->lines && eval_mode_possible(p);
    if (p->eval_mode)
        return install_eval(p);
    /* pyprof never imports threading (its cost, and the program's own import
     * would move): hooked when the program imports it (pp_tracer_hook_threading) */
    p->threading_pending = !threading_imported();
    if (!p->threading_pending && hook_threading(p) < 0)
        return -1;
    if (p->lines && install_trace_hooks(p) < 0) {
        pp_err_state es;
        pp_err_save(&es);
        pp_tracer_remove_hooks(p);
        pp_err_restore(&es);
        return -1;
    }
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (_PyEval_SetProfile(ts, legacy_callback, p->owner) < 0) {
            /* (an audit hook may refuse) never leave a hook with a borrowed p behind */
            pp_err_state es;
            pp_err_save(&es);
            pp_tracer_remove_hooks(p);
            PyErr_Clear();
            pp_err_restore(&es);
            return -1;
        }
    }
    return 0;
}

int pp_tracer_remove_hooks(pp_tracer *p)
{
    if (p->eval_mode) {
        remove_eval();
        return 0;
    }
    int rc = 0;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (pp_tstate_profileobj(ts) == p->owner && _PyEval_SetProfile(ts, NULL, NULL) < 0)
            rc = -1;
    }
    p->threading_pending = 0;
    PyObject *prev = p->prev_thread_hook;
    p->prev_thread_hook = NULL;
    if (set_threading_hook("profile", prev, NULL) < 0)
        rc = -1;
    Py_XDECREF(prev);
    if (p->lines) {
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
             ts; ts = PyThreadState_Next(ts)) {
            if (pp_tstate_traceobj(ts) == p->owner && _PyEval_SetTrace(ts, NULL, NULL) < 0)
                rc = -1;
        }
        prev = p->prev_trace_hook;
        p->prev_trace_hook = NULL;
        if (set_threading_hook("trace", prev, NULL) < 0)
            rc = -1;
        Py_XDECREF(prev);
    }
    return rc;
}


const char pp_tracer_default_hook[] = "PyEval_SetProfile";

const char *pp_tracer_hook_name(const pp_tracer *p)
{
    return p->eval_mode ? "PEP 523 frame evaluation" : pp_tracer_default_hook;
}

int pp_tracer_backend_init(void)
{
    return 0;
}

#endif
