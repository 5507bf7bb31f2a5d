/* gcwatch.c — the garbage collector seen by the tracer, the sampler and the
 * summary (see gcwatch.h).
 *
 * CPython calls gc.callbacks with ("start" | "stop", {"generation": N, ...})
 * around every collection, automatic or gc.collect(), on the thread that
 * collects, with the GIL held. 3.12+ has no monitoring event for it.
 */
#include "gcwatch.h"

#include <time.h>

static PyObject *callback;              /* the C function in gc.callbacks */
static PyObject *codes[3];              /* `<GC gen N>`, kept for the process's life */
static pp_gcstats *stats;
static pp_tracer *tracer;
static __thread int64_t started_ns __attribute__((tls_model("initial-exec")));
static __thread int entered __attribute__((tls_model("initial-exec")));

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long info_long(PyObject *info, const char *key)
{
    PyObject *v = PyDict_Check(info) ? PyDict_GetItemString(info, key) : NULL;
    long n = v && PyLong_Check(v) ? PyLong_AsLong(v) : 0;
    if (n == -1 && PyErr_Occurred())
        PyErr_Clear();
    return n;
}

static PyObject *on_gc(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || stats == NULL || !PyUnicode_Check(args[0]))
        Py_RETURN_NONE;
    int was = pp_memory_self_begin();
    int start = PyUnicode_CompareWithASCIIString(args[0], "start") == 0;
    long gen = info_long(args[1], "generation");
    if (gen < 0 || gen > 2)
        gen = 2;
    if (start) {
        started_ns = mono_ns();
        pp_gc_running = (int)gen + 1;
        /* not entered while the tracer is not on yet (it starts after us) */
        entered = tracer != NULL && pp_tracer_pseudo(tracer, codes[gen], 1);
    }
    else if (pp_gc_running) {
        if (entered && tracer != NULL)
            pp_tracer_pseudo(tracer, codes[gen], 0);
        entered = 0;
        pp_gc_running = 0;
        int64_t d = mono_ns() - started_ns;
        stats->collections[gen]++;
        stats->pause_ns[gen] += d;
        if (d > stats->max_pause_ns)
            stats->max_pause_ns = d;
        stats->collected += (uint64_t)info_long(args[1], "collected");
        stats->uncollectable += (uint64_t)info_long(args[1], "uncollectable");
    }
    pp_memory_self_end(was);
    Py_RETURN_NONE;
}

static PyMethodDef on_gc_def = {"_pyprof_gc_callback", (PyCFunction)(void (*)(void))on_gc,
                                METH_FASTCALL, "pyprof's garbage-collector watch (--gc)."};

static PyObject *gc_callbacks(void)
{
    PyObject *gc = PyImport_ImportModule("gc");
    if (gc == NULL)
        return NULL;
    PyObject *cbs = PyObject_GetAttrString(gc, "callbacks");
    Py_DECREF(gc);
    if (cbs != NULL && !PyList_Check(cbs)) {
        Py_DECREF(cbs);
        PyErr_SetString(PyExc_RuntimeError, "pyprof --gc: gc.callbacks is not a list");
        return NULL;
    }
    return cbs;
}

int pp_gcwatch_start(pp_gcstats *s, pp_tracer *t)
{
    if (callback == NULL) {
        callback = PyCFunction_New(&on_gc_def, NULL);
        if (callback == NULL)
            return -1;
        for (int g = 0; g < 3; g++) {
            char name[16];
            snprintf(name, sizeof name, "<GC gen %d>", g);
            codes[g] = (PyObject *)PyCode_NewEmpty("<gc>", name, 0);
            if (codes[g] == NULL)
                return -1;
        }
    }
    PyObject *cbs = gc_callbacks();
    if (cbs == NULL)
        return -1;
    int rc = PySequence_Contains(cbs, callback) ? 0 : PyList_Append(cbs, callback);
    Py_DECREF(cbs);
    if (rc < 0)
        return -1;
    stats = s;
    stats->on = 1;
    tracer = t;
    for (int g = 0; g < 3; g++)
        pp_gc_code[g] = (uintptr_t)codes[g];
    return 0;
}

void pp_gcwatch_stop(void)
{
    if (stats == NULL)
        return;
    stats = NULL;
    tracer = NULL;
    for (int g = 0; g < 3; g++)
        pp_gc_code[g] = 0;
    PyObject *cbs = gc_callbacks();
    if (cbs == NULL) {
        PyErr_Clear();                  /* at interpreter exit: nothing left to undo */
        return;
    }
    Py_ssize_t i = PySequence_Index(cbs, callback);
    if (i >= 0)
        PySequence_DelItem(cbs, i);
    PyErr_Clear();
    Py_DECREF(cbs);
}
