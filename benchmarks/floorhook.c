/* floorhook.c — the do-nothing hook, for the benchmarks' "floor" configuration.
 *
 * Installs the same interpreter mechanism pyprof uses, with callbacks that do
 * nothing, so the harness can show how far pyprof is from the cheapest any
 * deterministic profiler built on that mechanism can be:
 *   3.12+: sys.monitoring C vectorcall callbacks returning None, for the events
 *          given as a mask (pyprof's set: PY_* plus CALL/C_RETURN/C_RAISE), or
 *          local to one code object (LINE, INSTRUCTION: line targets);
 *   3.11:  PyEval_SetProfile with a C function returning 0, on every thread.
 * Built by benchmarks/run.py, never part of the pyprof package.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#if PY_VERSION_HEX >= 0x030C0000
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} noop_cb;

static PyObject *noop_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    (void)self; (void)args; (void)nargsf; (void)kw;
    Py_RETURN_NONE;
}

static PyTypeObject noop_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "floorhook.Noop",
    .tp_basicsize = sizeof(noop_cb),
    .tp_vectorcall_offset = offsetof(noop_cb, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
};

static int tool_id = -1;

/* The no-op callback for each event of `mask`, on our tool id. */
static int register_noop(PyObject *mon, long mask)
{
    noop_cb *cb = PyObject_New(noop_cb, &noop_type);
    if (cb == NULL)
        return -1;
    cb->vectorcall = noop_call;
    for (int bit = 0; bit < 17; bit++) {
        if (!(mask & (1L << bit)))
            continue;
        PyObject *r = PyObject_CallMethod(mon, "register_callback", "ilO", tool_id, 1L << bit,
                                          (PyObject *)cb);
        if (r == NULL) {
            Py_DECREF(cb);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(cb);
    return 0;
}

static PyObject *install(PyObject *m, PyObject *arg)
{
    (void)m;
    long mask = PyLong_AsLong(arg);
    if (mask < 0 && PyErr_Occurred())
        return NULL;
    PyObject *mon = PySys_GetObject("monitoring");
    if (mon == NULL)
        return PyErr_Format(PyExc_RuntimeError, "no sys.monitoring");
    for (int id = 2; id < 6 && tool_id < 0; id++) {
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", id, "floorhook");
        if (r) {
            tool_id = id;
            Py_DECREF(r);
        }
        else
            PyErr_Clear();
    }
    if (tool_id < 0)
        return PyErr_Format(PyExc_RuntimeError, "no free tool id");
    if (register_noop(mon, mask) < 0)
        return NULL;
    return PyObject_CallMethod(mon, "set_events", "il", tool_id, mask);
}

/* install_local(code, mask): the same callbacks, the events local to one
 * code object (as pyprof's LINE and INSTRUCTION events on its line targets);
 * install(0) first claims the tool id. */
static PyObject *install_local(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *code;
    long mask;
    if (!PyArg_ParseTuple(args, "Ol", &code, &mask))
        return NULL;
    PyObject *mon = PySys_GetObject("monitoring");
    if (mon == NULL || tool_id < 0)
        return PyErr_Format(PyExc_RuntimeError, "install(0) first");
    if (register_noop(mon, mask) < 0)
        return NULL;
    return PyObject_CallMethod(mon, "set_local_events", "iOl", tool_id, code, mask);
}

static PyObject *uninstall(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    PyObject *mon = PySys_GetObject("monitoring");
    if (mon == NULL || tool_id < 0)
        Py_RETURN_NONE;
    PyObject *r = PyObject_CallMethod(mon, "set_events", "ii", tool_id, 0);
    Py_XDECREF(r);
    for (int bit = 0; r && bit < 17; bit++) {
        r = PyObject_CallMethod(mon, "register_callback", "ilO", tool_id, 1L << bit, Py_None);
        Py_XDECREF(r);
    }
    if (r)
        r = PyObject_CallMethod(mon, "free_tool_id", "i", tool_id);
    Py_XDECREF(r);
    tool_id = -1;
    if (r == NULL)
        return NULL;
    Py_RETURN_NONE;
}
#else
static int noop_hook(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    (void)obj; (void)frame; (void)what; (void)arg;
    return 0;
}

/* install(mask): the profile hook; with LINE (32) in the mask, the trace hook
 * too (line events in every frame), as 3.11's line tracers need. */
static PyObject *install(PyObject *m, PyObject *arg)
{
    (void)m;
    long mask = PyLong_AsLong(arg);
    if (mask < 0 && PyErr_Occurred())
        return NULL;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts)) {
        if (_PyEval_SetProfile(ts, noop_hook, NULL) < 0)
            return NULL;
        if ((mask & 32) && _PyEval_SetTrace(ts, noop_hook, NULL) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *uninstall(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
         ts; ts = PyThreadState_Next(ts))
        if (_PyEval_SetProfile(ts, NULL, NULL) < 0 || _PyEval_SetTrace(ts, NULL, NULL) < 0)
            return NULL;
    Py_RETURN_NONE;
}
#endif

#if PY_VERSION_HEX < 0x030C0000
/* PEP 523: a frame-evaluation function that only forwards. It sees every
 * Python frame (calls and generator resumes) without putting 3.11's eval loop
 * on its tracing path, but no C function calls, and it turns off 3.11's
 * inlining of Python-to-Python calls (each call recurses in C). */
static PyObject *noop_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int exc)
{
    return _PyEval_EvalFrameDefault(ts, f, exc);
}

static PyObject *install_eval(PyObject *m, PyObject *on)
{
    (void)m;
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(),
                                         PyObject_IsTrue(on) ? noop_eval : NULL);
    Py_RETURN_NONE;
}
#endif

static PyMethodDef methods[] = {
    {"install", install, METH_O, "install(event_mask): no-op hook on (3.11: mask ignored)"},
    {"uninstall", uninstall, METH_NOARGS, "remove the no-op hook"},
#if PY_VERSION_HEX >= 0x030C0000
    {"install_local", install_local, METH_VARARGS,
     "install_local(code, mask): no-op callbacks for events local to one code object (3.12+)"},
#endif
#if PY_VERSION_HEX < 0x030C0000
    {"install_eval", install_eval, METH_O, "install_eval(on): no-op PEP 523 hook (3.11)"},
#endif
    {NULL},
};

static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "floorhook", NULL, -1, methods};

PyMODINIT_FUNC PyInit_floorhook(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyType_Ready(&noop_type) < 0)
        return NULL;
#endif
    return PyModule_Create(&def);
}
