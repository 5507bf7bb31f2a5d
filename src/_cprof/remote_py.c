/* remote_py.c — the Python face of remote.c: the RemoteProcess type.
 *
 * Owns: turning remote.c's results and errors into Python objects and
 * exceptions (OSError with the errno and remote.c's sentence).
 * Never: keeps the target stopped between two method calls; each method that
 * stops the target resumes it before returning. Runs in the client.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <structmember.h>

#include "remote.h"
#include "remote_py.h"
#include "remote_read.h"

typedef struct {
    PyObject_HEAD
    pp_remote r;
    pp_remote_cache cache;              /* code objects read from the target */
    PyObject *names;                    /* cache entry id -> (filename, qualname, name, first line) */
    long long last_pause_ns;
} remote_object;

static PyObject *remote_error(const char *err)
{
    int e = errno ? errno : EIO;
    PyObject *args = Py_BuildValue("(is)", e, err[0] ? err : strerror(e));
    if (args != NULL) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static int remote_init(remote_object *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"pid", NULL};
    int pid;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i", kwlist, &pid))
        return -1;
    if (self->cache.buckets == NULL) {
        pp_remote_cache_init(&self->cache);
        if (self->cache.buckets == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (self->names == NULL && (self->names = PyDict_New()) == NULL)
        return -1;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = pp_remote_open(&self->r, (pid_t)pid, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        remote_error(err);
        return -1;
    }
    return 0;
}

static PyObject *remote_queue_call(remote_object *self, PyObject *arg)
{
    char *text;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &text, &len) < 0)
        return NULL;
    char err[256] = "";
    int slot = -1, rc;
    uintptr_t where = 0;
    int64_t paused = 0;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = pp_remote_queue_call(&self->r, text, (size_t)len, &slot, &where, &paused, err,
                              sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return remote_error(err);
    if (rc == 1)
        return Py_BuildValue("(OOL)", Py_None, Py_None, (long long)paused);
    return Py_BuildValue("(iKL)", slot, (unsigned long long)where, (long long)paused);
}

static PyObject *remote_call_queued(remote_object *self, PyObject *args)
{
    int slot;
    unsigned long long where;
    if (!PyArg_ParseTuple(args, "iK", &slot, &where))
        return NULL;
    return PyBool_FromLong(pp_remote_call_queued(&self->r, slot, (uintptr_t)where));
}

static PyObject *remote_cancel_call(remote_object *self, PyObject *args)
{
    int slot, rc;
    unsigned long long where;
    if (!PyArg_ParseTuple(args, "iK", &slot, &where))
        return NULL;
    char err[256] = "";
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = pp_remote_cancel_call(&self->r, slot, (uintptr_t)where, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return remote_error(err);
    return PyBool_FromLong(rc);
}

static PyObject *remote_clear(remote_object *self, PyObject *args)
{
    unsigned long long where;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "Kn", &where, &len))
        return NULL;
    if (len < 0 || (size_t)len > self->r.scratch_size || where != self->r.scratch) {
        PyErr_SetString(PyExc_ValueError, "not the bytes the call's text was written to");
        return NULL;
    }
    char zeros[512] = {0};
    if ((size_t)len > sizeof zeros)
        len = sizeof zeros;
    if (pp_remote_write(self->r.pid, (uintptr_t)where, zeros, (size_t)len) < 0)
        return remote_error("");
    Py_RETURN_NONE;
}

static PyObject *remote_nudge(remote_object *self, PyObject *unused)
{
    (void)unused;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = pp_remote_nudge(&self->r, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return remote_error(err);
    Py_RETURN_NONE;
}

static PyObject *remote_swap_main_thread(remote_object *self, PyObject *arg)
{
    unsigned long ident = PyLong_AsUnsignedLong(arg), old = 0;
    if (ident == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = pp_remote_swap_main_thread(&self->r, ident, &old, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return remote_error(err);
    return PyLong_FromUnsignedLong(old);
}

static PyObject *remote_gil(remote_object *self, PyObject *unused)
{
    (void)unused;
    unsigned long main_ident = 0, holder_ident = 0;
    uintptr_t holder = 0;
    errno = 0;
    if (pp_remote_gil(&self->r, &main_ident, &holder, &holder_ident) < 0)
        return remote_error("cannot read the interpreter's GIL");
    return Py_BuildValue("(kKk)", main_ident, (unsigned long long)holder, holder_ident);
}

static PyObject *remote_gil_last(remote_object *self, PyObject *unused)
{
    (void)unused;
    unsigned long last = 0;
    errno = 0;
    if (pp_remote_gil_last(&self->r, &last) < 0)
        return remote_error("cannot read the interpreter's GIL");
    return PyLong_FromUnsignedLong(last);
}

static PyObject *code_names(remote_object *self, const pp_remote_code *e)
{
    PyObject *key = PyLong_FromUnsignedLongLong(e->id);
    if (key == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(self->names, key);
    if (v == NULL && !PyErr_Occurred()) {
        v = Py_BuildValue("(sssi)", e->filename, e->qualname, e->name ? e->name : e->qualname,
                          e->firstlineno);
        if (v != NULL && PyDict_SetItem(self->names, key, v) < 0)
            Py_CLEAR(v);
        Py_XDECREF(v);                      /* the dict holds it */
    }
    Py_DECREF(key);
    return v;                               /* borrowed */
}

static PyObject *thread_dict(remote_object *self, const pp_remote_thread *t, int ids)
{
    PyObject *frames = PyList_New(t->nframes);
    if (frames == NULL)
        return NULL;
    for (int i = 0; i < t->nframes; i++) {
        PyObject *names = code_names(self, t->frames[i].code);
        PyObject *f = names == NULL ? NULL : ids ? Py_BuildValue(
            "(Ki)", (unsigned long long)t->frames[i].code->id, t->frames[i].lineno) : Py_BuildValue(
            "(OOi)", PyTuple_GET_ITEM(names, 0), PyTuple_GET_ITEM(names, 1),
            t->frames[i].lineno);
        if (f == NULL) {
            Py_DECREF(frames);
            return NULL;
        }
        PyList_SET_ITEM(frames, i, f);
    }
    PyObject *native = Py_None;
    Py_INCREF(native);
    if (t->nnative >= 0) {
        Py_DECREF(native);
        native = PyList_New(t->nnative);
        for (int i = 0; native != NULL && i < t->nnative; i++) {
            PyObject *s = PyUnicode_DecodeUTF8(t->native[i], strlen(t->native[i]), "replace");
            if (s == NULL)
                Py_CLEAR(native);
            else
                PyList_SET_ITEM(native, i, s);
        }
        if (native == NULL) {
            Py_DECREF(frames);
            return NULL;
        }
    }
    return Py_BuildValue("{s:k,s:k,s:O,s:O,s:O,s:N,s:N}", "ident", t->ident,
                         "native_id", t->native_id, "holds_gil", t->holds_gil ? Py_True : Py_False,
                         "is_main", t->is_main ? Py_True : Py_False,
                         "complete", t->complete ? Py_True : Py_False,
                         "frames", frames, "native", native);
}

static PyObject *remote_threads(remote_object *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stop", "native", "ids", NULL};
    int stop = 1, native = 0, ids = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ppp", kwlist, &stop, &native, &ids))
        return NULL;
    if (native && !stop) {
        PyErr_SetString(PyExc_ValueError, "native stacks are read with the threads stopped");
        return NULL;
    }
    char err[256] = "";
    pp_remote_thread *ths = NULL;
    int count = 0, rc;
    int64_t paused = 0;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = pp_remote_threads(&self->r, &self->cache, stop, native, &ths, &count, &paused, err,
                           sizeof err);
    Py_END_ALLOW_THREADS
    self->last_pause_ns = paused;
    if (rc < 0)
        return remote_error(err);
    PyObject *out = PyList_New(count);
    for (int i = 0; out != NULL && i < count; i++) {
        PyObject *d = thread_dict(self, &ths[i], ids);
        if (d == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, d);
    }
    pp_remote_threads_free(ths, count);
    return out;
}

static PyObject *remote_code(remote_object *self, PyObject *arg)
{
    PyObject *v = PyDict_GetItemWithError(self->names, arg);
    if (v == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, arg);
    Py_XINCREF(v);
    return v;
}

static PyObject *remote_gil_span(remote_object *self, PyObject *unused)
{
    (void)unused;
    uintptr_t lo = 0, hi = 0;
    errno = 0;
    if (pp_remote_gil_span(&self->r, &lo, &hi) < 0)
        return remote_error("cannot read where the interpreter's GIL is");
    return Py_BuildValue("(KK)", (unsigned long long)lo, (unsigned long long)hi);
}

static PyObject *remote_addr2line(PyObject *unused, PyObject *args)
{
    (void)unused;
    Py_buffer table;
    int first, addrq;
    if (!PyArg_ParseTuple(args, "y*ii", &table, &first, &addrq))
        return NULL;
    int line = pp_remote_addr2line(table.buf, (size_t)table.len, first, addrq);
    PyBuffer_Release(&table);
    return PyLong_FromLong(line);
}

static void remote_dealloc(remote_object *self)
{
    pp_remote_cache_free(&self->cache);
    Py_CLEAR(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *remote_get_version(remote_object *self, void *unused)
{
    (void)unused;
    uint32_t v = self->r.version_hex;
    return Py_BuildValue("(iii)", (int)(v >> 24), (int)(v >> 16 & 0xff), (int)(v >> 8 & 0xff));
}

static PyObject *remote_get_main_thread_at(remote_object *self, void *unused)
{
    (void)unused;
    if (self->r.L == NULL)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(self->r.runtime + self->r.L->rt_main_thread);
}

static PyObject *remote_get_known(remote_object *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->r.L != NULL);
}

static PyMethodDef remote_methods[] = {
    {"queue_call", (PyCFunction)remote_queue_call, METH_O,
     "queue_call(text: bytes) -> (slot, address, paused_ns); (None, None, paused_ns) if the "
     "queue was busy or full\nQueue PyRun_SimpleString(text) on the main interpreter's "
     "pending calls, the target's threads stopped meanwhile."},
    {"call_queued", (PyCFunction)remote_call_queued, METH_VARARGS,
     "call_queued(slot, address) -> bool\nWhether the call is still waiting (read only)."},
    {"cancel_call", (PyCFunction)remote_cancel_call, METH_VARARGS,
     "cancel_call(slot, address) -> bool\nEmpty the call's text if it is still queued."},
    {"clear", (PyCFunction)remote_clear, METH_VARARGS,
     "clear(address, length)\nZero the call's text again (after it ran or was cancelled)."},
    {"nudge", (PyCFunction)remote_nudge, METH_NOARGS,
     "nudge()\nSet the interpreter's request to run pending calls again."},
    {"swap_main_thread", (PyCFunction)remote_swap_main_thread, METH_O,
     "swap_main_thread(ident) -> old ident\n3.11: the thread the interpreter takes for its "
     "main thread (which alone runs pending calls there)."},
    {"threads", (PyCFunction)(void (*)(void))remote_threads, METH_VARARGS | METH_KEYWORDS,
     "threads(stop=True, native=False) -> [dict]\nEvery thread of the main interpreter read "
     "from outside: ident, native_id, holds_gil, is_main, complete, frames (innermost first, "
     "(filename, qualname, lineno); with ids=True (code id, lineno), see code()), native (with native=True: [\"name+0xoff\"], else None). "
     "stop: all threads stopped for the read only (last_pause_ns says how long); else read "
     "live. Nothing is written to the target."},
    {"addr2line", (PyCFunction)remote_addr2line, METH_VARARGS | METH_STATIC,
     "addr2line(co_linetable, co_firstlineno, byte_offset) -> line or -1\nThe decoder the "
     "remote reads use (for tests against CPython's own co_lines)."},
    {"code", (PyCFunction)remote_code, METH_O,
     "code(id) -> (filename, qualname, name, first line)\nA code object seen by threads(ids=True)."},
    {"gil_span", (PyCFunction)remote_gil_span, METH_NOARGS,
     "gil_span() -> (start, end)\nThe target's GIL structure's addresses: a thread waiting on "
     "a futex in them waits for the GIL."},
    {"gil", (PyCFunction)remote_gil, METH_NOARGS,
     "gil() -> (main thread ident, GIL holder's thread state or 0, its ident or 0)"},
    {"gil_last_holder", (PyCFunction)remote_gil_last, METH_NOARGS,
     "gil_last_holder() -> ident of the thread that held the GIL last (0: unknown)"},
    {NULL},
};

static PyMemberDef remote_members[] = {
    {"pid", T_INT, offsetof(remote_object, r.pid), READONLY, "the target"},
    {"runtime", T_ULONGLONG, offsetof(remote_object, r.runtime), READONLY, "&_PyRuntime"},
    {"last_pause_ns", T_LONGLONG, offsetof(remote_object, last_pause_ns), READONLY,
     "how long the last threads(stop=True) kept the target stopped (ns)"},
    {"scratch_size", T_PYSSIZET, offsetof(remote_object, r.scratch_size), READONLY,
     "unused writable bytes found for a call's text (0: none)"},
    {NULL},
};

static PyObject *remote_get_native(remote_object *self, void *unused)
{
    (void)self; (void)unused;
    return PyBool_FromLong(pp_remote_native_available());
}

static PyGetSetDef remote_getset[] = {
    {"native_available", (getter)remote_get_native, NULL,
     "whether this build reads native stacks from outside (libunwind-ptrace)", NULL},
    {"version", (getter)remote_get_version, NULL, "(major, minor, micro) of the target", NULL},
    {"main_thread_at", (getter)remote_get_main_thread_at, NULL,
     "the address of _PyRuntime's main thread ident (None: unknown layout)", NULL},
    {"known", (getter)remote_get_known, NULL, "whether pyprof knows this version's layout",
     NULL},
    {NULL},
};

PyTypeObject pp_remote_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyprof._cprof.RemoteProcess",
    .tp_basicsize = sizeof(remote_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RemoteProcess(pid)\nAnother CPython process seen from outside (remote.c): "
              "its interpreter found, nothing changed in it.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)remote_dealloc,
    .tp_init = (initproc)remote_init,
    .tp_methods = remote_methods,
    .tp_members = remote_members,
    .tp_getset = remote_getset,
};

PyObject *pp_remote_layout_check_py(PyObject *m, PyObject *unused)
{
    (void)m; (void)unused;
    const char *why = pp_remote_layout_check();
    if (why == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}
