/* tracer_monitoring.c — the tracer's hook back-end on 3.12+: sys.monitoring.
 *
 * Owns: the tool id it claims, the C fast-call callback objects, the events
 * it sets, and the call-site DISABLE policy for CALL events. Callbacks run
 * with the GIL held (CPython has already disabled monitoring for the
 * callback's own work) and feed the event paths of tracer_hot.h.
 * Never: the legacy hooks (they tax every thread); changing the event set
 * per sample or per event (it re-instruments all code).
 */
#include "tracer_hot.h"

#if PP_USE_MONITORING


/* Key of a C callable as cProfile keys it (its PyMethodDef), or 0 to ignore. */
static inline uint64_t cfunc_key(PyObject *callable, PyObject *self_arg, PyObject *missing)
{
    if (PyCFunction_Check(callable))
        return (uint64_t)(uintptr_t)((PyCFunctionObject *)callable)->m_ml;
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type) && self_arg != missing && self_arg != NULL) {
        PyMethodDescrObject *d = (PyMethodDescrObject *)callable;
        if (PyObject_TypeCheck(self_arg, PyDescr_TYPE(d)))
            return (uint64_t)(uintptr_t)d->d_method;
    }
    return 0;
}


static PyObject *monitoring_module(void)
{
    PyObject *mon = PySys_GetObject("monitoring");    /* borrowed */
    if (mon == NULL)
        PyErr_SetString(PyExc_RuntimeError, "pyprof: sys.monitoring is unavailable");
    return mon;
}

/* Event bits, identical in 3.12 and 3.13 (internal in 3.12). */
enum {
    EV_PY_START = 1 << 0, EV_PY_RESUME = 1 << 1, EV_PY_RETURN = 1 << 2,
    EV_PY_YIELD = 1 << 3, EV_CALL = 1 << 4, EV_LINE = 1 << 5, EV_INSTRUCTION = 1 << 6,
    EV_PY_UNWIND = 1 << 12,
    EV_PY_THROW = 1 << 13, EV_C_RETURN = 1 << 15, EV_C_RAISE = 1 << 16,
};

static PyObject *mon_missing;   /* sys.monitoring.MISSING, compared by pointer */
static PyObject *mon_disable;   /* sys.monitoring.DISABLE */
static const uint8_t *call_tools;   /* which tools have CALL events (frames.c) */
static pp_tracer *wrapped_by;   /* the tracer whose wrappers sit in the legacy bridge */

/* CALL fires before every call, C or not, and an instrumented call site loses
 * its fast path: about 35 ns per Python-to-Python call. A site whose first
 * SITE_DISABLE_AFTER calls all went to non-C callables is DISABLEd for CALL
 * (and with it C_RETURN/C_RAISE); a site that ever called a C function before
 * that decision keeps its events. C calls only set a bit in p->c_sites (a
 * hashed bitmap: a collision merely keeps a Python-only site watched), so the
 * cost per C call stays a few instructions. exact_builtins turns all this off
 * (cProfile's cost). */
#define SITE_DISABLE_AFTER 64
#define SITE_KEPT UINT32_MAX

static inline uint64_t site_key(PyObject *code, PyObject *offset)
{
    long off;
    if (LIKELY(PyUnstable_Long_IsCompact((PyLongObject *)offset)))
        off = (long)PyUnstable_Long_CompactValue((PyLongObject *)offset);
    else if ((off = PyLong_AsLong(offset)) < 0) {
        PyErr_Clear();
        off = 0;
    }
    return (uint64_t)(uintptr_t)code ^ ((uint64_t)(off & 0xFFFF) << 48);
}

static inline uint32_t c_site_bit(uint64_t key)
{
    return pp_hash64(key, PP_C_SITE_BITS - 1);
}

/* A call to a non-C callable at (code, offset): DISABLE once the site has
 * proven to call only such callables. */
static PyObject *python_call_site(pp_tracer *p, PyObject *code, PyObject *offset)
{
    uint64_t key = site_key(code, offset);
    pp_ient *e = pp_index_find(&p->sites, key);
    if (e == NULL) {
        if (pp_index_put(&p->sites, key, 1) < 0)
            p->oom = 1;
        Py_RETURN_NONE;
    }
    if (e->val != SITE_KEPT && ++e->val >= SITE_DISABLE_AFTER) {
        uint32_t b = c_site_bit(key);
        uint32_t fid;
        if ((p->c_sites[b >> 6] & (1ull << (b & 63)))
            || (p->lines && (fid = pp_index_get(&p->reg->idx, (uint64_t)(uintptr_t)code)) != PP_NONE
                && p->reg->ftarget[fid])) {  /* call rows need every call of a target line */
            e->val = SITE_KEPT;
            Py_RETURN_NONE;
        }
        if (p->disabled_code == NULL)
            p->disabled_code = PySet_New(NULL);
        if (p->disabled_code == NULL || PySet_Add(p->disabled_code, code) < 0) {
            PyErr_Clear();          /* could not be re-armed: keep the site's events */
            e->val = SITE_KEPT;
            Py_RETURN_NONE;
        }
        return Py_NewRef(mon_disable);
    }
    Py_RETURN_NONE;
}

static inline void mark_c_call_site(pp_tracer *p, PyObject *code, PyObject *offset)
{
    uint32_t b = c_site_bit(site_key(code, offset));
    p->c_sites[b >> 6] |= 1ull << (b & 63);
}

COLD void line_resume(pp_tracer *p, PyObject *code, PyObject *offset)
{
    int64_t now = now_ticks(p);
    long off = PyLong_AsLong(offset);
    if (off < 0) {
        PyErr_Clear();
        return;
    }
    pp_tracer_line_resume_at(p, code, PyCode_Addr2Line((PyCodeObject *)code, (int)off), now);
}

/* LINE events (and with --opcodes INSTRUCTION events) on one code object
 * only (local events add to the global ones). */
int pp_tracer_line_events_on(pp_tracer *p, PyObject *code, int on)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL || p->tool_id < 0)
        return mon ? 0 : -1;
    PyObject *r = PyObject_CallMethod(mon, "set_local_events", "iOi", p->tool_id, code,
                                      on ? EV_LINE | (p->opcodes ? EV_INSTRUCTION : 0) : 0);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Local events are per code object: a running frame has them already. */
int pp_tracer_running_frame(pp_tracer *p, PyFrameObject *frame, int on)
{
    (void)p; (void)frame; (void)on;
    return 0;
}

/* A callable with the cheapest calling convention CPython offers. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    pp_tracer *prof;            /* kept alive by owner */
    PyObject *owner;            /* strong */
} pp_callback;

static void callback_dealloc(pp_callback *cb)
{
    Py_XDECREF(cb->owner);
    PyObject_Free(cb);
}

static PyTypeObject pp_callback_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyprof._cprof._MonitoringCallback",
    .tp_basicsize = sizeof(pp_callback),
    .tp_dealloc = (destructor)callback_dealloc,
    .tp_vectorcall_offset = offsetof(pp_callback, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "sys.monitoring callback of a pyprof profiler",
};

static PyObject *cb_py_enter(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        enter(p, (uint64_t)(uintptr_t)args[0], args[0], NULL, PP_KIND_PYTHON);
        if (UNLIKELY(pp_follows_coroutine(p, args[0])))
            pp_tracer_coro_run(p, args[0], pp_frames_running(), 1);
    }
    Py_RETURN_NONE;
}

/* PY_RESUME / PY_THROW: a call (as PY_START); in line mode a resumed line
 * target also goes on with its current line (no hit: no LINE event fires when
 * it resumes in the middle of a line). */
static PyObject *cb_py_resume(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        enter(p, (uint64_t)(uintptr_t)args[0], args[0], NULL, PP_KIND_PYTHON);
        if (UNLIKELY(pp_follows_coroutine(p, args[0])))
            pp_tracer_coro_run(p, args[0], pp_frames_running(), 0);
        if (UNLIKELY(p->lines))
            line_resume(p, args[0], args[1]);
    }
    Py_RETURN_NONE;
}

static PyObject *cb_line(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        int64_t now = now_ticks(p);
        PyLongObject *n = (PyLongObject *)args[1];
        long line = LIKELY(PyUnstable_Long_IsCompact(n)) ? (long)PyUnstable_Long_CompactValue(n)
                                                         : -1;
        line_event(p, args[0], (int)line, 1, now);
    }
    Py_RETURN_NONE;
}

/* INSTRUCTION (--opcodes, local to line targets): (code, offset in bytes). */
static PyObject *cb_instruction(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        int64_t now = now_ticks(p);
        PyLongObject *n = (PyLongObject *)args[1];
        if (LIKELY(PyUnstable_Long_IsCompact(n)))
            insn_event(p, args[0], (uint32_t)PyUnstable_Long_CompactValue(n) / 2, now);
    }
    Py_RETURN_NONE;
}

/* PY_RETURN / PY_UNWIND: the frame ends (a coroutine too). */
static PyObject *cb_py_leave(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        leave(p, (uint64_t)(uintptr_t)args[0]);
        if (UNLIKELY(pp_follows_coroutine(p, args[0])))
            pp_tracer_coro_end(p, pp_frames_running());
    }
    Py_RETURN_NONE;
}

/* PY_YIELD: a generator or coroutine suspends (a call ends, as cProfile counts). */
static PyObject *cb_py_yield(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)nargsf; (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (LIKELY(p->enabled)) {
        leave(p, (uint64_t)(uintptr_t)args[0]);
        if (UNLIKELY(pp_follows_coroutine(p, args[0])))
            pp_tracer_coro_suspend(p, pp_frames_running());
    }
    Py_RETURN_NONE;
}

static PyObject *cb_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (!p->enabled)
        Py_RETURN_NONE;
    PyObject *callable = args[2];
    PyObject *arg0 = PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL;
    uint64_t key = Py_IS_TYPE(callable, &PyFunction_Type) ? 0
                                                           : cfunc_key(callable, arg0, mon_missing);
    if (key == 0) {
        if (p->exact_builtins)
            Py_RETURN_NONE;
        return python_call_site(p, args[0], args[1]);
    }
    if (!p->exact_builtins)
        mark_c_call_site(p, args[0], args[1]);
    enter(p, key, callable, arg0, PP_KIND_BUILTIN);
    pp_thread *ts = pp_tls.ts;
    if (LIKELY(ts != NULL && pp_tls.gen == p->gen && ts->st.depth
               && ts->st.f[ts->st.depth - 1].key == key))
        ts->st.f[ts->st.depth - 1].solo = (*call_tools & ~(1u << p->tool_id)) == 0;
    Py_RETURN_NONE;
}

static PyObject *cb_c_leave(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)kw;
    pp_tracer *p = ((pp_callback *)self)->prof;
    if (!p->enabled)
        Py_RETURN_NONE;
    PyObject *arg0 = PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL;
    uint64_t key = cfunc_key(args[2], arg0, mon_missing);
    if (key)
        leave(p, key);
    Py_RETURN_NONE;
}

/* The legacy profile bridge (sys.setprofile on 3.12+, tool 6) reports C_RETURN
 * and C_RAISE to a hook that never got the matching c_call: when a call site
 * was dispatched as an instrumented CALL (because some tool has CALL events)
 * and the hook was installed during the call (that sys.setprofile call
 * itself), CPython sends the call's C_RETURN to the instruction's tools as
 * they are now, tool 6 included. A CPython bug (every 3.12.x and 3.13.x; see
 * docs/how-it-works.md); pyprof must not cause it. So tool 6's C_RETURN and
 * C_RAISE callbacks are wrapped while pyprof has CALL events: the event is
 * dropped iff its C call is pyprof's innermost frame and began while no tool
 * but pyprof had CALL events (without pyprof the site would have been a
 * plain CALL, with no C_RETURN for anyone). Tool 6 runs before pyprof's own
 * callback (higher ids first), so that frame is still on pyprof's stack. */
static PyObject *bridge_orig[2];        /* the bridge's callbacks while wrapped */

static inline PyObject *bridge_event(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kw, int c_raise)
{
    pp_tracer *p = ((pp_callback *)self)->prof;
    pp_thread *ts = pp_tls.ts;
    if (p->enabled && ts != NULL && pp_tls.gen == p->gen && ts->st.depth
            && ts->st.f[ts->st.depth - 1].solo && PyVectorcall_NARGS(nargsf) >= 3) {
        PyObject *arg0 = PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL;
        uint64_t key = cfunc_key(args[2], arg0, mon_missing);
        if (key && ts->st.f[ts->st.depth - 1].key == key)
            Py_RETURN_NONE;
    }
    if (bridge_orig[c_raise] == NULL)
        Py_RETURN_NONE;
    return PyObject_Vectorcall(bridge_orig[c_raise], args, nargsf, kw);
}

static PyObject *cb_bridge_return(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kw)
{
    return bridge_event(self, args, nargsf, kw, 0);
}

static PyObject *cb_bridge_raise(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kw)
{
    return bridge_event(self, args, nargsf, kw, 1);
}

static PyObject *new_callback(pp_tracer *p, vectorcallfunc fn);

static int wrap_bridge(pp_tracer *p)
{
    if (bridge_orig[0] != NULL)
        return 0;                       /* another pyprof tracer's wrappers are in place */
    vectorcallfunc fn[2] = {cb_bridge_return, cb_bridge_raise};
    for (int i = 0; i < 2; i++) {
        PyObject *cb = new_callback(p, fn[i]);
        if (cb == NULL)
            return -1;
        PyObject *old = pp_frames_legacy_profile_swap(i, cb);
        Py_DECREF(cb);
        if (old == NULL && PyErr_Occurred())
            return -1;
        bridge_orig[i] = old;
        wrapped_by = p;
    }
    return 0;
}

static void unwrap_bridge(pp_tracer *p)
{
    if (wrapped_by != p)
        return;
    for (int i = 0; i < 2; i++) {
        Py_XDECREF(pp_frames_legacy_profile_swap(i, bridge_orig[i]));
        Py_CLEAR(bridge_orig[i]);
    }
    wrapped_by = NULL;
}

/* Re-arm pyprof's DISABLEd sites, and only those: restart_events() would
 * re-arm every tool's (coverage's DISABLEd lines). Setting local events on a
 * code object re-instruments it against the tool's events, now none. */
static int rearm_disabled(pp_tracer *p, PyObject *mon)
{
    int rc = 0;
    if (p->disabled_code == NULL)
        return 0;
    PyObject *it = PyObject_GetIter(p->disabled_code), *code;
    while (it && (code = PyIter_Next(it)) != NULL) {
        PyObject *r = PyObject_CallMethod(mon, "set_local_events", "iOi", p->tool_id, code,
                                          EV_CALL);
        Py_XDECREF(r);
        r = r ? PyObject_CallMethod(mon, "set_local_events", "iOi", p->tool_id, code, 0) : NULL;
        rc |= r == NULL;
        Py_XDECREF(r);
        Py_DECREF(code);
    }
    rc |= it == NULL || PyErr_Occurred() != NULL;
    Py_XDECREF(it);
    Py_CLEAR(p->disabled_code);
    return rc ? -1 : 0;
}

static PyObject *new_callback(pp_tracer *p, vectorcallfunc fn)
{
    pp_callback *cb = PyObject_New(pp_callback, &pp_callback_type);
    if (cb == NULL)
        return NULL;
    cb->vectorcall = fn;
    cb->prof = p;
    cb->owner = Py_NewRef(p->owner);
    return (PyObject *)cb;
}

/* Tool ids to try: the profiler's own first, then the free general ones,
 * then the debugger's and coverage's last so those tools can still start. A
 * background profiler (@profile's) leaves the profiler's id to cProfile. */
static const int tool_order[] = {2, 3, 4, 5, 1, 0};
static const int background_tool_order[] = {3, 4, 5, 2, 1, 0};

static int claim_tool_id(PyObject *mon, int background)
{
    const int *order = background ? background_tool_order : tool_order;
    for (size_t i = 0; i < sizeof tool_order / sizeof tool_order[0]; i++) {
        PyObject *holder = PyObject_CallMethod(mon, "get_tool", "i", order[i]);
        if (holder == NULL)
            return -1;
        int free_id = holder == Py_None;
        Py_DECREF(holder);
        if (!free_id)
            continue;
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", order[i], "pyprof");
        if (r) {
            Py_DECREF(r);
            return order[i];
        }
        PyErr_Clear();
    }
    /* All taken: name the holders. */
    PyObject *names = PyList_New(0);
    for (int id = 0; names && id < 6; id++) {
        PyObject *h = PyObject_CallMethod(mon, "get_tool", "i", id);
        PyObject *s = h ? PyUnicode_FromFormat("%d=%R", id, h) : NULL;
        Py_XDECREF(h);
        if (s == NULL || PyList_Append(names, s) < 0) {
            Py_XDECREF(s);
            Py_CLEAR(names);
            break;
        }
        Py_DECREF(s);
    }
    if (names) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *joined = sep ? PyUnicode_Join(sep, names) : NULL;
        if (joined)
            PyErr_Format(PyExc_RuntimeError,
                         "pyprof: no free sys.monitoring tool id (held by: %U)", joined);
        Py_XDECREF(joined);
        Py_XDECREF(sep);
        Py_DECREF(names);
    }
    return -1;
}

/* kind: 0 always, 1 with builtins (C functions), 2 in line mode (local to
 * targets), 3 in line mode with --opcodes (local to targets). */
static const struct { int event; vectorcallfunc fn; int kind; } mon_events[] = {
    {EV_PY_START, cb_py_enter, 0},  {EV_PY_RESUME, cb_py_resume, 0}, {EV_PY_THROW, cb_py_resume, 0},
    {EV_PY_RETURN, cb_py_leave, 0}, {EV_PY_YIELD, cb_py_yield, 0},   {EV_PY_UNWIND, cb_py_leave, 0},
    {EV_CALL, cb_call, 1},          {EV_C_RETURN, cb_c_leave, 1},    {EV_C_RAISE, cb_c_leave, 1},
    {EV_LINE, cb_line, 2},          {EV_INSTRUCTION, cb_instruction, 3},
};
#define N_MON_EVENTS (sizeof mon_events / sizeof mon_events[0])

static int unregister_monitoring(pp_tracer *p, PyObject *mon)
{
    int rc = 0;
    PyObject *r;
    unwrap_bridge(p);
    r = PyObject_CallMethod(mon, "set_events", "ii", p->tool_id, 0);
    rc |= r == NULL;
    Py_XDECREF(r);
    /* DISABLE outlives set_events(id, 0) and even the tool id: re-arm, or
     * the next profiler on this id would miss calls at those sites. */
    rc |= rearm_disabled(p, mon) < 0;
    for (uint32_t fid = 0; p->lines && fid < p->reg->nfun; fid++)
        if (p->reg->ftarget[fid])
            rc |= pp_tracer_line_events_on(p, p->reg->fobj[fid], 0) < 0;
    for (size_t i = 0; i < N_MON_EVENTS; i++) {
        r = PyObject_CallMethod(mon, "register_callback", "iiO", p->tool_id,
                                mon_events[i].event, Py_None);
        rc |= r == NULL;
        Py_XDECREF(r);
    }
    r = PyObject_CallMethod(mon, "free_tool_id", "i", p->tool_id);
    rc |= r == NULL;
    Py_XDECREF(r);
    p->tool_id = -1;
    return rc ? -1 : 0;
}

int pp_tracer_hook_threading(pp_tracer *p)
{
    p->threading_pending = 0;           /* sys.monitoring covers every thread */
    return 0;
}

int pp_tracer_install_hooks(pp_tracer *p)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL)
        return -1;
    if (mon_missing == NULL) {
        mon_missing = PyObject_GetAttrString(mon, "MISSING");
        mon_disable = PyObject_GetAttrString(mon, "DISABLE");
        if (mon_missing == NULL || mon_disable == NULL)
            return -1;
    }
    call_tools = pp_frames_call_tools();
    int id = claim_tool_id(mon, p->background);
    if (id < 0)
        return -1;
    p->tool_id = id;
    int mask = 0;
    for (size_t i = 0; i < N_MON_EVENTS; i++) {
        if ((mon_events[i].kind == 1 && !p->builtins) || (mon_events[i].kind == 2 && !p->lines)
            || (mon_events[i].kind == 3 && !(p->lines && p->opcodes)))
            continue;
        PyObject *cb = new_callback(p, mon_events[i].fn);
        PyObject *r = cb ? PyObject_CallMethod(mon, "register_callback", "iiO", id,
                                               mon_events[i].event, cb) : NULL;
        Py_XDECREF(cb);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        if (mon_events[i].kind < 2)
            mask |= mon_events[i].event;
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "ii", id, mask);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    if (p->builtins && wrap_bridge(p) < 0)
        goto fail;
    for (uint32_t fid = 0; p->lines && fid < p->reg->nfun; fid++)
        if (p->reg->ftarget[fid] && pp_tracer_line_events_on(p, p->reg->fobj[fid], 1) < 0)
            goto fail;
    return 0;
fail:;
    pp_err_state es;
    pp_err_save(&es);
    unregister_monitoring(p, mon);
    PyErr_Clear();
    pp_err_restore(&es);
    return -1;
}

int pp_tracer_remove_hooks(pp_tracer *p)
{
    if (p->tool_id < 0)
        return 0;
    PyObject *mon = monitoring_module();
    if (mon == NULL)
        return -1;
    return unregister_monitoring(p, mon);
}

const char pp_tracer_default_hook[] = "sys.monitoring";

const char *pp_tracer_hook_name(const pp_tracer *p)
{
    (void)p;
    return pp_tracer_default_hook;
}

int pp_tracer_backend_init(void)
{
    return PyType_Ready(&pp_callback_type);
}

#endif
