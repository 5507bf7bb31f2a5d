/* module.c — pyprof._cprof: the Python-visible Profiler type and module
 * functions. Argument parsing and object lifetime only: which engines run is
 * profiler.c's; the engines are tracer.c (function events, with its back-ends
 * tracer_monitoring.c and tracer_legacy.c), sampler.c (timer samples) and
 * memory.c (allocations), over registry.c (function ids) and threads.c (per
 * thread records); capture.c writes snapshots and files; clock.c, unwind.c
 * and termguard.c serve the module functions. See docs/architecture.md.
 * Never touches interpreter internals (frames.h does).
 */
#include "profiler.h"
#include "remote_py.h"
#include "symbols.h"

#include "clock.h"
#include <structmember.h>
#include "termguard.h"
#include "unwind.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int profiler_init(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timer", "timeunit", "subcalls", "builtins", "exact_builtins",
                             "mode", "rate", "wall", "native", "memory", "memory_sample",
                             "memory_stacks", "paths", "native_allocs", "temporary", "gc",
                             "asyncio", "cpu_timer", "opcodes", NULL};
    /* every argument is required: the defaults are the option table's
     * (python/pyprof/options/table.py), which always passes them */
    PyObject *timer = NULL;
    double timeunit = 0.0, rate = 0.0;
    int subcalls = 0, builtins = 0, exact_builtins = 0, wall = 0, native = 0, memory = 0;
    long long memory_sample = 0;
    int memory_stacks = 0, paths = 0, native_allocs = 0, gc = 0, asyncio = 0, opcodes = 0;
    unsigned int temporary = 0;
    const char *mode = NULL, *cpu_timer = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OdpppzdpppLpppIppzp:Profiler", kwlist, &timer,
                                     &timeunit, &subcalls, &builtins, &exact_builtins, &mode,
                                     &rate, &wall, &native, &memory, &memory_sample,
                                     &memory_stacks, &paths, &native_allocs, &temporary, &gc,
                                     &asyncio, &cpu_timer, &opcodes))
        return -1;
    static const char *const cpu_timers[] = {"auto", "task-clock", "itimer"};
    int cpu_timer_ix = -1;
    for (int i = 0; cpu_timer && i < (int)(sizeof cpu_timers / sizeof *cpu_timers); i++)
        if (strcmp(cpu_timer, cpu_timers[i]) == 0)
            cpu_timer_ix = i;
    if (cpu_timer_ix < 0) {
        PyErr_Format(PyExc_ValueError, "cpu_timer must be 'auto', 'task-clock' or 'itimer', "
                     "not %s", cpu_timer ? cpu_timer : "None");
        return -1;
    }
    if (mode == NULL || (strcmp(mode, "trace") != 0 && strcmp(mode, "sample") != 0
                         && strcmp(mode, "memory") != 0)) {
        PyErr_Format(PyExc_ValueError, "mode must be 'trace', 'sample' or 'memory', not %s",
                     mode ? mode : "None");
        return -1;
    }
    if (self->run.enabled) {
        PyErr_SetString(PyExc_RuntimeError, "cannot re-initialise an enabled profiler");
        return -1;
    }
    if (timer == Py_None)
        timer = NULL;
    Py_XINCREF(timer);
    Py_XSETREF(self->run.tr.timer, timer);
    self->run.tr.timeunit = timeunit;
    self->run.tr.subcalls = subcalls;
    self->run.tr.paths = paths;
    self->run.tr.builtins = builtins;
    self->run.tr.exact_builtins = exact_builtins;
    self->run.sampling = strcmp(mode, "sample") == 0;
    if (memory_sample < 0 || memory_sample > ((long long)1 << 40)) {
        PyErr_Format(PyExc_ValueError,
                     "memory_sample must be a number of bytes in (0, 2**40], not %lld",
                     memory_sample);
        return -1;
    }
    self->run.memory_only = strcmp(mode, "memory") == 0;
    self->run.memory = memory || self->run.memory_only || memory_sample > 0;
    self->run.mem.sample = memory_sample;
    self->run.mem.stacks = memory_stacks;
    self->run.mem.native = native_allocs && self->run.memory;
    self->run.mem.native_stacks = native && self->run.mem.stacks;
    self->run.gc = gc;
    /* blocks keep a 24-bit allocation number (memory.c): N is below 2**24 */
    if (temporary >= (1u << 24)) {
        PyErr_Format(PyExc_ValueError, "temporary must be in [0, 2**24), not %u", temporary);
        return -1;
    }
    self->run.mem.temporary = self->run.memory && !memory_sample ? temporary : 0;
    if (self->run.mem.native && pp_native_allocs_unsupported() != NULL) {
        PyErr_SetString(PyExc_ValueError, pp_native_allocs_unsupported());
        return -1;
    }
    self->run.sm.opts.mode = wall ? PP_SAMPLE_WALL : PP_SAMPLE_CPU;
    self->run.sm.opts.rate_hz = rate;
    self->run.sm.opts.native = native;
    self->run.sm.opts.async = asyncio;
    self->run.sm.opts.cpu_timer = cpu_timer_ix;     /* PP_CPU_AUTO, _TASKCLOCK, _ITIMER */
    self->run.tr.asyncio = asyncio;
    self->run.sm.opts.opcodes = opcodes;
    self->run.tr.opcodes = opcodes;
    if (!(rate >= PP_RATE_MIN && rate <= PP_RATE_MAX)) {
        char msg[80];
        snprintf(msg, sizeof msg, "rate must be in [%g, %g] Hz, not %g", PP_RATE_MIN,
                 PP_RATE_MAX, rate);
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    return 0;
}

static PyObject *profiler_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args; (void)kw;
    pp_profiler *self = (pp_profiler *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (pp_profiler_init(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* A profiler still enabled when it goes (3.11: the hook holds a borrowed
 * pointer; 3.12+: the interpreter's finalization drops the monitoring
 * callbacks that held it) is disabled first, here: the object is alive
 * (resurrected for the call), so what disabling references and lets go of
 * never frees it under its dealloc. */
static void profiler_finalize(PyObject *op)
{
    pp_profiler *self = (pp_profiler *)op;
    if (!self->run.enabled)
        return;
    pp_err_state es;
    pp_err_save(&es);
    if (pp_profiler_disable(self) < 0)
        PyErr_WriteUnraisable(op);
    pp_err_restore(&es);
}

static void profiler_dealloc(pp_profiler *self)
{
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0)
        return;                         /* resurrected */
    PyObject_GC_UnTrack(self);
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    Py_CLEAR(self->run.tr.timer);
    pp_profiler_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int profiler_traverse(pp_profiler *self, visitproc visit, void *arg)
{
    Py_VISIT(self->run.tr.timer);
    Py_VISIT(self->run.records);
    Py_VISIT(self->run.tr.prev_thread_hook);
    Py_VISIT(self->run.tr.prev_trace_hook);
    Py_VISIT(self->run.reg.line_filter);
    Py_VISIT(self->run.sm.root);
    Py_VISIT(self->run.sm.program);
    return 0;
}

static int profiler_clear_refs(pp_profiler *self)
{
    Py_CLEAR(self->run.tr.timer);
    Py_CLEAR(self->run.tr.prev_thread_hook);
    Py_CLEAR(self->run.tr.prev_trace_hook);
    Py_CLEAR(self->run.reg.line_filter);
    Py_CLEAR(self->run.sm.root);
    Py_CLEAR(self->run.sm.program);
    Py_CLEAR(self->run.records);
    return 0;
}

static PyObject *profiler_enable(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"subcalls", "builtins", NULL};
    int subcalls = -1, builtins = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pp:enable", kwlist, &subcalls, &builtins))
        return NULL;
    if (!self->run.enabled) {
        if (subcalls >= 0)
            self->run.tr.subcalls = subcalls;
        if (builtins >= 0)
            self->run.tr.builtins = builtins;
    }
    if (pp_profiler_enable(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *profiler_disable(pp_profiler *self, PyObject *unused)
{
    (void)unused;
    if (pp_profiler_disable(self) < 0)
        return NULL;
    if (self->run.sampling && self->run.sm.warn_replaced) {
        pp_sampler_info si;
        pp_sampler_get_info(&si);
        if (si.replaced) {
            self->run.sm.warn_replaced = 0;
            if (PyErr_WarnEx(PyExc_RuntimeWarning, PP_REPLACED_MESSAGE, 1) < 0)
                return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *profiler_clear(pp_profiler *self, PyObject *unused)
{
    (void)unused;
    pp_profiler_clear(self);
    Py_RETURN_NONE;
}

static PyObject *profiler_hook_threading(pp_profiler *self, PyObject *unused)
{
    (void)unused;
    if (pp_profiler_hook_threading(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *profiler_after_fork(pp_profiler *self, PyObject *unused)
{
    (void)unused;
    if (pp_profiler_after_fork(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *profiler_snapshot(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"include_open", "counters_only", "ns_per_tick", NULL};
    int include_open = 1, counters_only = 0;
    double ns_per_tick = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ppd:snapshot", kwlist, &include_open, &counters_only,
                                     &ns_per_tick))
        return NULL;
    self->run.snap_ns_per_tick = ns_per_tick;
    PyObject *r = pp_profiler_snapshot(self, (include_open ? PP_SNAP_OPEN : 0)
                                            | (counters_only ? PP_SNAP_COUNTERS : 0));
    self->run.snap_ns_per_tick = 0.0;
    return r;
}

static PyObject *profiler_step_counters(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"peek", NULL};
    int peek = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:_step_counters", kwlist, &peek))
        return NULL;
    return pp_profiler_step_counters(self, peek);
}

static PyObject *profiler_function_objects(pp_profiler *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = PyList_New(self->run.reg.nfun);
    if (l == NULL)
        return NULL;
    for (uint32_t i = 0; i < self->run.reg.nfun; i++)
        PyList_SET_ITEM(l, i, Py_NewRef(self->run.reg.fobj[i]));
    return l;
}

static PyObject *profiler_set_meta(pp_profiler *self, PyObject *meta)
{
    if (meta != Py_None && !PyBytes_Check(meta)) {
        PyErr_SetString(PyExc_TypeError, "meta must be bytes (JSON) or None");
        return NULL;
    }
    Py_XSETREF(self->run.meta, meta == Py_None ? NULL : Py_NewRef(meta));
    Py_RETURN_NONE;
}

static PyObject *profiler_set_records(pp_profiler *self, PyObject *records)
{
    if (records != Py_None && !PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a list of bytes or None");
        return NULL;
    }
    Py_XSETREF(self->run.records, records == Py_None ? NULL : Py_NewRef(records));
    Py_RETURN_NONE;
}

static PyObject *profiler_set_flush(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "interval", NULL};
    PyObject *path = Py_None;
    double interval = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Od:set_flush", kwlist, &path, &interval))
        return NULL;
    if (interval < 0.0) {
        PyErr_SetString(PyExc_ValueError, "flush interval must be >= 0");
        return NULL;
    }
    char *p = NULL;
    if (path != Py_None) {
        PyObject *enc = NULL;
        if (!PyUnicode_FSConverter(path, &enc))
            return NULL;
        p = strdup(PyBytes_AS_STRING(enc));
        Py_DECREF(enc);
        if (p == NULL)
            return PyErr_NoMemory();
    }
    free(self->flush_path);
    self->flush_path = p;
    self->flush_interval_ns = p ? (int64_t)(interval * 1e9) : 0;
    self->flush_failed = 0;
    self->owner_pid = getpid();
    if (self->flush_interval_ns)
        self->next_flush_ns = pp_clock_monotonic_ns() + self->flush_interval_ns;
    pp_profiler_flush_changed(self);
    Py_RETURN_NONE;
}

static PyObject *profiler_write_capture(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "final", NULL};
    PyObject *path;
    int final = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|p:write_capture", kwlist,
                                     PyUnicode_FSConverter, &path, &final))
        return NULL;
    char err[256];
    int rc = pp_profiler_write(self, PyBytes_AS_STRING(path), final, err, sizeof err);
    if (rc < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_OSError, "cannot write %s: %s", PyBytes_AS_STRING(path), err);
    Py_DECREF(path);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* An attribute, not a method: setting it is no call event, so the pause
 * leaves no frame of its own open on the thread (that frame would collect
 * all the paused time). */
static PyObject *profiler_get_thread_paused(pp_profiler *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(pp_profiler_thread_paused(self));
}

static int profiler_set_thread_paused(pp_profiler *self, PyObject *value, void *closure)
{
    (void)closure;
    int paused = value ? PyObject_IsTrue(value) : 0;
    if (paused < 0)
        return -1;
    pp_profiler_pause_thread(self, paused);
    return 0;
}

static PyObject *profiler_set_lines(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"filter", NULL};
    PyObject *filter = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:_set_lines", kwlist, &filter))
        return NULL;
    if (self->run.enabled) {
        PyErr_SetString(PyExc_RuntimeError, "line mode cannot change while the profiler is enabled");
        return NULL;
    }
    if (filter != Py_None && !PyCallable_Check(filter)) {
        PyErr_SetString(PyExc_TypeError, "filter must be callable or None");
        return NULL;
    }
    if (self->run.tr.timeline) {
        /* the timeline's positions are in the clock with pyprof's line
         * bookkeeping, the tracer's in line mode without it */
        PyErr_SetString(PyExc_ValueError, "the timeline records function calls: not with line mode");
        return NULL;
    }
    self->run.tr.lines = 1;
    Py_XSETREF(self->run.reg.line_filter, filter == Py_None ? NULL : Py_NewRef(filter));
    Py_RETURN_NONE;
}

static PyObject *profiler_set_timeline(pp_profiler *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"min_duration_ns", "max_events", NULL};
    long long min_ns = 0, max_events = 1000000;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|LL:_set_timeline", kwlist, &min_ns,
                                     &max_events))
        return NULL;
    if (self->run.enabled) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the timeline cannot change while the profiler is enabled");
        return NULL;
    }
    if (self->run.sampling || self->run.memory_only || self->run.tr.lines) {
        PyErr_SetString(PyExc_ValueError,
                        "the timeline records function calls: it needs function tracing "
                        "(not mode='sample', mode='memory' or line mode)");
        return NULL;
    }
    if (min_ns < 0) {
        PyErr_Format(PyExc_ValueError, "timeline_min_duration must be >= 0 ns, not %lld", min_ns);
        return NULL;
    }
    if (max_events < 0 || max_events > (long long)UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "timeline_max_events must be in [0, %llu], not %lld",
                     (unsigned long long)UINT32_MAX, max_events);
        return NULL;
    }
    if (self->run.enable_count && !self->run.tr.timeline && self->run.tr.timer != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "with a user timer, the timeline must be set before the first enable()");
        return NULL;
    }
    self->run.tr.timeline = 1;
    self->run.tr.tl_min_ns = min_ns;
    self->run.tr.tl_max = (uint64_t)max_events;
    Py_RETURN_NONE;
}

static PyObject *profiler_get_timeline(pp_profiler *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->run.tr.timeline);
}

static PyObject *profiler_set_sample_root(pp_profiler *self, PyObject *args)
{
    PyObject *root, *program = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:_set_sample_root", &root, &program))
        return NULL;
    if ((root != Py_None && !PyCode_Check(root)) || (program != Py_None && !PyCode_Check(program))) {
        PyErr_SetString(PyExc_TypeError, "_set_sample_root(code or None, program code or None)");
        return NULL;
    }
    Py_XSETREF(self->run.sm.root, root == Py_None ? NULL : Py_NewRef(root));
    Py_XSETREF(self->run.sm.program, program == Py_None ? NULL : Py_NewRef(program));
    Py_RETURN_NONE;
}

static PyObject *profiler_set_background(pp_profiler *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    self->run.tr.background = on;
    Py_RETURN_NONE;
}

static PyObject *profiler_add_line_target(pp_profiler *self, PyObject *code)
{
    uint32_t fid = pp_registry_add_line_target(&self->run.reg, code);
    return fid == PP_NONE ? NULL : PyLong_FromUnsignedLong(fid);
}

static PyObject *profiler_trace_running_frame(pp_profiler *self, PyObject *const *args,
                                              Py_ssize_t nargs)
{
    if (nargs != 2 || !PyFrame_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "_trace_running_frame(frame, on)");
        return NULL;
    }
    int on = PyObject_IsTrue(args[1]);
    if (on < 0)
        return NULL;
    if (pp_tracer_running_frame(&self->run.tr, (PyFrameObject *)args[0], on) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *profiler_line_targets(pp_profiler *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = PyList_New(0);
    for (uint32_t fid = 0; l && fid < self->run.reg.nfun; fid++) {
        if (!self->run.reg.ftarget[fid])
            continue;
        PyObject *i = PyLong_FromUnsignedLong(fid);
        if (i == NULL || PyList_Append(l, i) < 0)
            Py_CLEAR(l);
        Py_XDECREF(i);
    }
    return l;
}

static PyObject *profiler_get_memory(pp_profiler *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->run.memory);
}

static PyObject *profiler_get_sampling(pp_profiler *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->run.sampling);
}

static PyObject *profiler_get_tasks_seen(pp_profiler *self, void *c)
{
    (void)c;
    if (!self->run.sampling || !self->run.sm.opts.async)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(self->run.sm.tasks.seen);
}

static PyObject *profiler_get_sampling_replaced(pp_profiler *self, void *c)
{
    (void)c;
    if (!self->run.sampling)
        Py_RETURN_FALSE;
    pp_sampler_info si;
    pp_sampler_get_info(&si);
    return PyBool_FromLong(si.replaced);
}

static PyObject *profiler_get_sampling_rates(pp_profiler *self, void *c)
{
    (void)c;
    if (!self->run.sampling)
        Py_RETURN_NONE;
    pp_sampler_info si;
    pp_sampler_get_info(&si);
    double over = si.mode == PP_SAMPLE_CPU ? (double)si.cpu_ns / 1e9
                                           : (double)(si.stopped_ns - si.started_ns) / 1e9;
    return Py_BuildValue("(ddd)", self->run.sm.opts.rate_hz, pp_sampler_achieved(&si), over);
}

static PyObject *profiler_get_sampling_timer(pp_profiler *self, void *c)
{
    (void)c;
    if (!self->run.sampling || self->run.sm.opts.mode != PP_SAMPLE_CPU)
        Py_RETURN_NONE;
    pp_sampler_info si;
    pp_sampler_get_info(&si);
    return Py_BuildValue("(ss)", si.source == PP_CPU_TASKCLOCK ? "task-clock" : "itimer",
                         si.fallback);
}

static PyObject *profiler_get_lines(pp_profiler *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->run.tr.lines);
}

static PyObject *profiler_get_enabled(pp_profiler *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->run.enabled);
}

static PyObject *profiler_get_exact(pp_profiler *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->run.tr.exact_builtins);
}

static PyObject *profiler_get_tool_id(pp_profiler *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->run.tr.tool_id);
}

static PyMethodDef profiler_methods[] = {
    {"enable", (PyCFunction)(void (*)(void))profiler_enable, METH_VARARGS | METH_KEYWORDS,
     "enable(subcalls=True, builtins=True)\nStart collecting profiling information."},
    {"disable", (PyCFunction)profiler_disable, METH_NOARGS,
     "disable()\nStop collecting; calls still open end now."},
    {"clear", (PyCFunction)profiler_clear, METH_NOARGS, "clear()\nForget all collected data."},
    {"_hook_threading", (PyCFunction)profiler_hook_threading, METH_NOARGS,
     "_hook_threading()\nthreading has just been imported (pyprof never imports it): on 3.11 its "
     "new threads get the profile and trace hooks, in wall mode its thread start is wrapped."},
    {"_after_fork", (PyCFunction)profiler_after_fork, METH_NOARGS,
     "_after_fork()\nIn a forked child, disabled: forget the parent's data and threads."},
    {"snapshot", (PyCFunction)(void (*)(void))profiler_snapshot, METH_VARARGS | METH_KEYWORDS,
     "snapshot(include_open=True, counters_only=False, ns_per_tick=0.0) -> bytes\nThe "
     "collected data as a capture blob (see pyprof.session); calls still open count as ending "
     "now unless include_open is false. counters_only: without the timeline and the records "
     "the Python side added (steps). ns_per_tick > 0: convert clock ticks with this factor."},
    {"_step_counters", (PyCFunction)(void (*)(void))profiler_step_counters,
     METH_VARARGS | METH_KEYWORDS,
     "_step_counters(peek=False) -> bytes\nWhat the counters gained since the previous call "
     "(pyprof.step), as a record stream; calls still open count up to now."},
    {"_function_objects", (PyCFunction)profiler_function_objects, METH_NOARGS,
     "Code objects (Python functions) or names (C functions), indexed by function id."},
    {"set_records", (PyCFunction)profiler_set_records, METH_O,
     "set_records(list)\nWhole records (bytes: type, 0, length, payload) the Python side adds; "
     "written with every capture, before END. The list is shared: append to it."},
    {"set_meta", (PyCFunction)profiler_set_meta, METH_O,
     "set_meta(json_bytes)\nMetadata written with every capture (the META record)."},
    {"set_flush", (PyCFunction)(void (*)(void))profiler_set_flush, METH_VARARGS | METH_KEYWORDS,
     "set_flush(path=None, interval=0.0)\n"
     "While enabled, write a capture to path every interval seconds (0: never)."},
    {"_set_lines", (PyCFunction)(void (*)(void))profiler_set_lines, METH_VARARGS | METH_KEYWORDS,
     "_set_lines(filter=None)\nLine mode from the next enable(): LINE events on line targets "
     "(added with _add_line_target, or code objects for which filter(code) is true, asked once "
     "each) and call rows."},
    {"_set_timeline", (PyCFunction)(void (*)(void))profiler_set_timeline,
     METH_VARARGS | METH_KEYWORDS,
     "_set_timeline(min_duration_ns=0, max_events=1000000)\nFrom the next enable(): keep "
     "each ended call lasting at least min_duration_ns as a timeline event, at most "
     "max_events of them over all threads (the others are counted)."},
    {"_set_sample_root", (PyCFunction)profiler_set_sample_root, METH_VARARGS,
     "_set_sample_root(root, program=None)\nSampled stacks start above the frames of code "
     "`root` (the runner's frame running the program); a sample whose frame above it is not "
     "`program`'s is the runner's own work and is dropped."},
    {"_set_background", (PyCFunction)profiler_set_background, METH_O,
     "_set_background(on)\nWhile enabled, step aside (disable) when another profiler is "
     "enabled, and resume when that one is disabled."},
    {"_add_line_target", (PyCFunction)profiler_add_line_target, METH_O,
     "_add_line_target(code) -> function id\nMake a code object a line target."},
    {"_trace_running_frame", (PyCFunction)(void (*)(void))profiler_trace_running_frame,
     METH_FASTCALL, "_trace_running_frame(frame, on)\nLine mode started mid-run: a line "
     "target's frame that is running now gets (on) or loses (off) what its code's own "
     "events do not give it."},
    {"_line_targets", (PyCFunction)profiler_line_targets, METH_NOARGS,
     "Function ids of the line targets."},
    {"write_capture", (PyCFunction)(void (*)(void))profiler_write_capture, METH_VARARGS | METH_KEYWORDS,
     "write_capture(path, final=True)\nWrite a .cprof capture file atomically."},
    {NULL},
};

static PyGetSetDef profiler_getset[] = {
    {"enabled", (getter)profiler_get_enabled, NULL, "True while collecting.", NULL},
    {"lines", (getter)profiler_get_lines, NULL, "True in line mode.", NULL},
    {"timeline", (getter)profiler_get_timeline, NULL, "True when calls are kept as a timeline.",
     NULL},
    {"sampling", (getter)profiler_get_sampling, NULL, "True in sampling mode.", NULL},
    {"memory", (getter)profiler_get_memory, NULL, "True when allocations are recorded.", NULL},
    {"tasks_seen", (getter)profiler_get_tasks_seen, NULL,
     "--async sampling: how many asyncio tasks it saw (None: not --async sampling).", NULL},
    {"sampling_replaced", (getter)profiler_get_sampling_replaced, NULL,
     "Sampling: True when the program replaced pyprof's signal handler or profiling timer "
     "while it sampled (later samples are missing).", NULL},
    {"sampling_rates", (getter)profiler_get_sampling_rates, NULL,
     "Sampling: (requested Hz, achieved Hz, the seconds measured: process CPU seconds in "
     "cpu mode, where the rates are per CPU second, else wall seconds). None when not sampling.",
     NULL},
    {"sampling_timer", (getter)profiler_get_sampling_timer, NULL,
     "CPU-mode sampling: (timer, why not task-clock): timer 'task-clock' (per-thread CPU-clock "
     "events) or 'itimer' (ITIMER_PROF); the reason is '' unless auto fell back. None "
     "otherwise.", NULL},
    {"exact_builtins", (getter)profiler_get_exact, NULL,
     "True: CALL events stay on at every call site (cProfile's cost, no adaptive disabling).",
     NULL},
    {"_thread_paused", (getter)profiler_get_thread_paused,
     (setter)profiler_set_thread_paused,
     "True: the calling thread's events are not recorded (until set False or the next "
     "enable).", NULL},
    {"tool_id", (getter)profiler_get_tool_id, NULL,
     "sys.monitoring tool id in use (3.12+), -1 when none.", NULL},
    {NULL},
};

static PyMemberDef profiler_members[] = {
    {"_warn_replaced", T_BOOL, offsetof(pp_profiler, run.sm.warn_replaced), 0,
     "Sampling: disable() warns (RuntimeWarning) when the program took our signal back."},
    {"_start_mono_ns", T_LONGLONG, offsetof(pp_profiler, run.start_mono_ns), READONLY,
     "CLOCK_MONOTONIC ns of the first enable(): the origin of the capture's times."},
    {NULL},
};

PyTypeObject pp_profiler_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyprof._cprof.Profiler",
    .tp_basicsize = sizeof(pp_profiler),
    .tp_dealloc = (destructor)profiler_dealloc,
    .tp_finalize = profiler_finalize,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Profiler(timer=None, timeunit=0.0, subcalls=True, builtins=True)\n\n"
              "The C core of pyprof.Profile: deterministic function profiling.",
    .tp_traverse = (traverseproc)profiler_traverse,
    .tp_clear = (inquiry)profiler_clear_refs,
    .tp_weaklistoffset = offsetof(pp_profiler, weakreflist),
    .tp_methods = profiler_methods,
    .tp_getset = profiler_getset,
    .tp_members = profiler_members,
    .tp_init = (initproc)profiler_init,
    .tp_new = profiler_new,
};

static PyObject *mod_set_ns_per_tick(PyObject *m, PyObject *arg)
{
    (void)m;
    double ns = PyFloat_AsDouble(arg);
    if (ns == -1.0 && PyErr_Occurred())
        return NULL;
    pp_clock_set_ns_per_tick(ns);
    Py_RETURN_NONE;
}

static PyObject *mod_clock_info(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    return Py_BuildValue("{s:s,s:d,s:d}", "name", pp_clock_name(),
                         "ns_per_tick", pp_clock_ns_per_tick(),
                         "read_ns", pp_clock_read_cost_ns());
}

static PyObject *mod_memory_window(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    uint64_t current, peak;
    if (pp_memory_window(&current, &peak) < 0)
        Py_RETURN_NONE;
    int was = pp_memory_self_begin();
    PyObject *r = Py_BuildValue("(KK)", (unsigned long long)current, (unsigned long long)peak);
    pp_memory_self_end(was);
    return r;
}

static PyObject *mod_write_blob(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"path", "blob", "final", NULL};
    PyObject *path;
    Py_buffer blob;
    int final = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&y*|p:write_blob", kwlist,
                                     PyUnicode_FSConverter, &path, &blob, &final))
        return NULL;
    char err[256];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pp_capture_write_blob(PyBytes_AS_STRING(path), blob.buf, (size_t)blob.len, final,
                               err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_Format(PyExc_OSError, "cannot write %s: %s", PyBytes_AS_STRING(path), err);
    PyBuffer_Release(&blob);
    Py_DECREF(path);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *mod_active(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    pp_profiler *p = pp_profiler_active();
    return Py_NewRef(p ? (PyObject *)p : Py_None);
}

static PyObject *mod_native_modules(PyObject *m, PyObject *ips)
{
    (void)m;
    PyObject *seq = PySequence_Fast(ips, "native_modules(ips): a sequence of addresses");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        uintptr_t ip = (uintptr_t)PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        const char *path;
        uintptr_t base;
        PyObject *item;
        if (PyErr_Occurred())
            item = NULL;
        else if (pp_native_module(ip, &path, &base))
            item = Py_BuildValue("(sK)", path, (unsigned long long)base);
        else
            item = Py_NewRef(Py_None);
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *mod_native_frames(PyObject *m, PyObject *ips)
{
    (void)m;
    int was = pp_memory_self_begin();
    PyObject *r = pp_symbols_frames(ips);
    pp_memory_self_end(was);
    return r;
}

static PyObject *mod_native_depth(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    return PyLong_FromLong(pp_unwind_self_depth());
}

static PyObject *mod_code_alive(PyObject *m, PyObject *address)
{
    (void)m;
    unsigned long long p = PyLong_AsUnsignedLongLong(address);
    if (p == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(pp_frames_code_alive((uintptr_t)p));
}

static PyObject *mod_numpy_patch(PyObject *m, PyObject *api)
{
    (void)m;
    int was = pp_memory_self_begin();
    int rc = pp_memory_patch_numpy(api);
    pp_memory_self_end(was);
    if (rc < 0)
        return NULL;
    return PyLong_FromLong(rc);
}

static PyObject *mod_native_allocs_unsupported(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    const char *why = pp_native_allocs_unsupported();
    if (why == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

static PyObject *mod_term_guard(PyObject *m, PyObject *arg)
{
    (void)m;
    long signum = PyLong_AsLong(arg);
    if (signum == -1 && PyErr_Occurred())
        return NULL;
    if (signum < 1 || signum >= NSIG) {
        PyErr_SetString(PyExc_ValueError, "signal number out of range");
        return NULL;
    }
    int rc = pp_term_guard_install((int)signum);
    if (rc < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(rc);
}

static PyObject *mod_term_guard_ack(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    pp_term_guard_ack();
    Py_RETURN_NONE;
}

static PyObject *mod_release(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    int sig, mem;
    if (pp_profiler_release(&sig, &mem) < 0)
        return NULL;
    return Py_BuildValue("{sOsO}", "signal", sig ? Py_True : Py_False,
                         "allocators", mem ? Py_True : Py_False);
}

static PyObject *mod_own_thread(PyObject *m, PyObject *on)
{
    (void)m;
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    pp_threads_own(v);
    Py_RETURN_NONE;
}

/* compile(source, filename, "exec", dont_inherit=True) without its
 * PyAST_Check, which builds the ast module's ~120 types on first use
 * (~1.5 ms of every run's start-up); the same flags and errors otherwise. */
static PyObject *mod_compile_program(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *source, *filename;
    if (!PyArg_ParseTuple(args, "OU:compile_program", &source, &filename))
        return NULL;
    PyCompilerFlags cf;
    cf.cf_flags = PyCF_SOURCE_IS_UTF8;
    cf.cf_feature_version = PY_MINOR_VERSION;
    const char *str;
    Py_ssize_t size;
    if (PyUnicode_Check(source)) {
        cf.cf_flags |= PyCF_IGNORE_COOKIE;
        str = PyUnicode_AsUTF8AndSize(source, &size);
        if (str == NULL)
            return NULL;
    } else if (PyBytes_Check(source)) {
        str = PyBytes_AS_STRING(source);
        size = PyBytes_GET_SIZE(source);
    } else {
        PyErr_SetString(PyExc_TypeError, "compile_program() takes str or bytes");
        return NULL;
    }
    if (strlen(str) != (size_t)size) {     /* the caller leaves these to compile() */
        PyErr_SetString(PyExc_ValueError, "source code string cannot contain null bytes");
        return NULL;
    }
    return Py_CompileStringObject(str, filename, Py_file_input, &cf, -1);
}

/* exec(code, globals) as pyprof's own C function, which is never recorded:
 * the program's <module> is the root of its call tree. Under exec itself, exec
 * would be that root and also what every import of a source module calls,
 * which leaves the program without a root in pstats' callers (tuna, snakeviz
 * and gprof2dot then find no entry to the main thread's calls). */
static PyObject *mod_run_program(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *code, *globals;
    if (!PyArg_ParseTuple(args, "O!O!:run_program", &PyCode_Type, &code, &PyDict_Type, &globals))
        return NULL;
    return PyEval_EvalCode(code, globals, globals);
}

/* atexit: a profiler still enabled when the program ends is disabled while
 * the interpreter still has all it needs (sys.monitoring, threading, the
 * sampler's threads); in its finalization, disabling it would call into
 * what is being torn down. The program's atexit functions registered after
 * pyprof was imported (its reports, dumps) run before this one. */
static PyObject *mod_disable_at_exit(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    if (pp_profiler_disable_all() < 0)
        PyErr_WriteUnraisable(NULL);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"run_program", mod_run_program, METH_VARARGS,
     "run_program(code, globals)\nexec(code, globals), unrecorded: the program's <module> is "
     "the root of its calls."},
    {"compile_program", mod_compile_program, METH_VARARGS,
     "compile_program(source, filename) -> code\nAs compile(source, filename, 'exec', "
     "dont_inherit=True), without building the ast module's types."},
    {"_own_thread", mod_own_thread, METH_O,
     "_own_thread(on)\nThe calling thread is pyprof's own (the control channel's) or no "
     "longer: its samples are left out of captures."},
    {"_release", mod_release, METH_NOARGS,
     "_release() -> {'signal': bool, 'allocators': bool}\nNo profiler enabled: give back "
     "the sampler's signals' dispositions (SIGPROF, wall mode's real-time signal) and the "
     "allocators, where safe now (a detach: docs/attach.md)."},
    {"_term_guard", mod_term_guard, METH_O,
     "_term_guard(signum) -> bool\nMain thread, after signal.signal(signum, handler): re-send "
     "the signal until the handler calls _term_guard_ack() (children.md)."},
    {"_term_guard_ack", mod_term_guard_ack, METH_NOARGS,
     "_term_guard_ack()\nThe Python handler runs: stop re-sending."},
    {"_set_ns_per_tick", mod_set_ns_per_tick, METH_O,
     "_set_ns_per_tick(ns)\nThe TSC calibration of a parent process on this host (children)."},
    {"clock_info", mod_clock_info, METH_NOARGS,
     "clock_info() -> dict(name, ns_per_tick, read_ns)\nThe event clock and its measured cost."},
    {"_memory_window", mod_memory_window, METH_NOARGS,
     "_memory_window() -> (current, peak) or None\nExact memory mode: the traced bytes live "
     "now and the most live since the last call (the cluster tasks' peaks)."},
    {"write_blob", (PyCFunction)(void (*)(void))mod_write_blob, METH_VARARGS | METH_KEYWORDS,
     "write_blob(path, blob, final=True)\nWrite a capture blob as a .cprof file atomically."},
    {"active", mod_active, METH_NOARGS,
     "active() -> Profiler or None\nThe profiler enabled in this process, if any."},
    {"native_modules", mod_native_modules, METH_O,
     "native_modules(ips) -> [(path, load base) or None]\nThe loaded objects holding these "
     "addresses (dladdr)."},
    {"native_frames", mod_native_frames, METH_O,
     "native_frames(ips) -> {ip: [(name, file, line), ...]} or None without libdw\nThe "
     "frames naming each address, innermost first (inlined functions, then the function), "
     "from debug information or the symbol tables."},
    {"_numpy_patch", mod_numpy_patch, METH_O,
     "_numpy_patch(array_api_capsule) -> 1 patched, 0 not possible\nMemory mode: route "
     "NumPy's default array-data handler through pyprof (for the life of the process)."},
    {"native_allocs_unsupported", mod_native_allocs_unsupported, METH_NOARGS,
     "native_allocs_unsupported() -> None or str\nWhy C code's allocations cannot be "
     "recorded in this process (--native-allocs), or None."},
    {"_code_alive", mod_code_alive, METH_O,
     "_code_alive(address) -> bool\nWhether a live code object is at this address, as the "
     "sampler decides it (checked reads)."},
    {"_remote_layout_check", pp_remote_layout_check_py, METH_NOARGS,
     "_remote_layout_check() -> None or str\nThe first field of this build's row of the "
     "other-process layouts that its own structures contradict (frames.c)."},
    {"native_stack_depth", mod_native_depth, METH_NOARGS,
     "Frames on this thread's native stack via libunwind, -1 when built without it."},
    {"_disable_at_exit", mod_disable_at_exit, METH_NOARGS,
     "_disable_at_exit()\nDisable the enabled profiler (registered with atexit)."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pyprof._cprof",
    "pyprof's C core: event hooks, per-thread tables and the capture writer.",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__cprof(void)
{
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "pyprof: big-endian hosts are not supported yet");
        return NULL;
    }
    if (PyType_Ready(&pp_profiler_type) < 0 || PyType_Ready(&pp_remote_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (pp_profiler_module_init() < 0)
        goto fail;
    if (PyModule_AddObjectRef(m, "Profiler", (PyObject *)&pp_profiler_type) < 0
        || PyModule_AddObjectRef(m, "RemoteProcess", (PyObject *)&pp_remote_type) < 0)
        goto fail;
    const char *have[3] = {"zlib", NULL, NULL};
    int nhave = 1;
    if (pp_unwind_available())
        have[nhave++] = "libunwind";
    if (pp_symbols_available())
        have[nhave++] = "libdw";
    PyObject *features = PyTuple_New(nhave);
    for (int i = 0; features && i < nhave; i++) {
        PyObject *name = PyUnicode_FromString(have[i]);
        if (name == NULL)
            Py_CLEAR(features);
        else
            PyTuple_SET_ITEM(features, i, name);
    }
    if (features == NULL || PyModule_AddObject(m, "FEATURES", features) < 0) {
        Py_XDECREF(features);
        goto fail;
    }
    if (PyModule_AddObject(m, "FORMAT_VERSION",
                           Py_BuildValue("(ii)", PP_FORMAT_MAJOR, PP_FORMAT_MINOR)) < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "HOOK", pp_tracer_default_hook) < 0)
        goto fail;
    PyObject *atexit = PyImport_ImportModule("atexit");
    PyObject *at_exit = atexit ? PyObject_GetAttrString(m, "_disable_at_exit") : NULL;
    PyObject *r = at_exit ? PyObject_CallMethod(atexit, "register", "O", at_exit) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(at_exit);
    Py_XDECREF(atexit);
    if (r == NULL)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
