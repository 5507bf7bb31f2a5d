/* registry.c — function ids and names (see registry.h). GIL held.
 *
 * Builtins are named exactly as cProfile names them, once per id. A pending
 * exception may be set when a function is first seen (gen.throw): naming
 * saves and restores it.
 * Never: allocates from a Python allocator for its own arrays; runs when
 * pyprof's own work is flagged off (pp_mem_self is set around it instead).
 */
#include "registry.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define COLD static __attribute__((noinline, cold))


/* Name of a C method as cProfile's normalizeUserObj names a bound one:
 * repr(type(self).<name>) (which may be a Python override), else a fallback. */
static PyObject *bound_method_name(PyObject *self, const char *ml_name, PyObject *module)
{
    PyObject *name = PyUnicode_FromString(ml_name);
    if (name) {
        PyObject *mo = _PyType_Lookup(Py_TYPE(self), name);
        Py_DECREF(name);
        if (mo) {
            Py_INCREF(mo);
            PyObject *r = PyObject_Repr(mo);
            Py_DECREF(mo);
            if (r)
                return r;
        }
    }
    PyErr_Clear();
    if (module && PyUnicode_Check(module))
        return PyUnicode_FromFormat("<built-in method %S.%s>", module, ml_name);
    return PyUnicode_FromFormat("<built-in method %s>", ml_name);
}

/* Name of a C function exactly as cProfile names it. For a method descriptor
 * called with `self_arg`, cProfile first binds it (no module), then names it. */
static PyObject *builtin_name(PyObject *callable, PyObject *self_arg)
{
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type))
        return bound_method_name(self_arg, ((PyMethodDescrObject *)callable)->d_method->ml_name,
                                 NULL);
    PyCFunctionObject *fn = (PyCFunctionObject *)callable;
    if (fn->m_self != NULL)
        return bound_method_name(fn->m_self, fn->m_ml->ml_name, fn->m_module);
    PyObject *mod = fn->m_module, *modname = NULL;
    if (mod && PyUnicode_Check(mod)) {
        modname = Py_NewRef(mod);
    }
    else if (mod && PyModule_Check(mod)) {
        modname = PyModule_GetNameObject(mod);
        if (modname == NULL)
            PyErr_Clear();
    }
    if (modname) {
        PyObject *r = NULL;
        if (PyUnicode_CompareWithASCIIString(modname, "builtins") != 0)
            r = PyUnicode_FromFormat("<%U.%s>", modname, fn->m_ml->ml_name);
        Py_DECREF(modname);
        if (r)
            return r;
    }
    return PyUnicode_FromFormat("<%s>", fn->m_ml->ml_name);
}

/* pyprof's package directory ("/.../pyprof/"), where this module was loaded
 * from, and the module's base address: what tells pyprof's own code and C
 * functions apart (found once, GIL held). */
static char own_dir[4096];
static size_t own_dir_len;
static void *own_base;
static int own_looked;

static void find_own(void)
{
    own_looked = 1;
    Dl_info info;
    if (dladdr(own_dir, &info) == 0)
        return;
    own_base = info.dli_fbase;
    const char *slash = info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
    if (slash == NULL || (size_t)(slash - info.dli_fname) + 1 >= sizeof own_dir)
        return;
    own_dir_len = (size_t)(slash - info.dli_fname) + 1;
    memcpy(own_dir, info.dli_fname, own_dir_len);
}

/* A code object in a file of pyprof's package, or a C function of this module
 * (the key of a builtin is its PyMethodDef) but for the stand-ins of the
 * program's calls it wraps (os.fork, threading's start: their self is the
 * wrapped function). Once per function. */
static int is_own(uint64_t key, PyObject *obj, int kind)
{
    if (!own_looked)
        find_own();
    if (kind == PP_KIND_BUILTIN) {
        Dl_info info;
        if (PyCFunction_Check(obj) && ((PyCFunctionObject *)obj)->m_self != NULL
                && PyCFunction_Check(((PyCFunctionObject *)obj)->m_self))
            return 0;
        return own_base && dladdr((void *)(uintptr_t)key, &info) && info.dli_fbase == own_base;
    }
    if (kind != PP_KIND_PYTHON || own_dir_len == 0 || !PyCode_Check(obj))
        return 0;
    Py_ssize_t n;
    const char *file = PyUnicode_AsUTF8AndSize(((PyCodeObject *)obj)->co_filename, &n);
    if (file == NULL) {
        PyErr_Clear();
        return 0;
    }
    return (size_t)n > own_dir_len && memcmp(file, own_dir, own_dir_len) == 0;
}

/* Remembers an own key (its code object kept alive: the address is the key). */
static void add_own(pp_registry *r, uint64_t key, PyObject *obj, int kind)
{
    if (r->own.e == NULL && pp_index_init(&r->own, 64) < 0)
        return;
    if (kind == PP_KIND_PYTHON) {
        if (r->own_code == NULL)
            r->own_code = PyList_New(0);
        if (r->own_code == NULL || PyList_Append(r->own_code, obj) < 0) {
            PyErr_Clear();
            return;
        }
    }
    pp_index_put(&r->own, key, 1);
}

/* Line mode: whether a code object seen for the first time is a line target.
 * Python code, run once per code object; its errors are unraisable. */
COLD int line_filter_says(pp_registry *r, PyObject *code)
{
    pp_err_state es;
    pp_err_save(&es);
    pp_tls.busy++;
    PyObject *o = PyObject_CallOneArg(r->line_filter, code);
    pp_tls.busy--;
    int yes = o ? PyObject_IsTrue(o) : -1;
    Py_XDECREF(o);
    if (yes < 0) {
        PyErr_WriteUnraisable(r->line_filter);
        yes = 0;
    }
    pp_err_restore(&es);
    return yes;
}

/* The tracer, while its line events are on, is told of a new target. */
COLD void mark_line_target(pp_registry *r, uint32_t fid)
{
    if (r->ftarget[fid])
        return;
    r->ftarget[fid] = 1;
    if (r->on_target && r->on_target(r->target_arg, r->fobj[fid]) < 0)
        PyErr_WriteUnraisable(r->fobj[fid]);
}

static uint32_t register_function_impl(pp_registry *r, uint64_t key, PyObject *obj,
                                       PyObject *self_arg, int kind)
{
    uint32_t fid = pp_index_get(&r->idx, key);
    if (fid != PP_NONE || pp_registry_own(r, key))
        return fid;
    if (kind != PP_KIND_GHOST) {
        pp_err_state es;
        pp_err_save(&es);
        int own = is_own(key, obj, kind);
        if (own)
            add_own(r, key, obj, kind);
        pp_err_restore(&es);
        if (own)
            return PP_NONE;
    }
    if (r->nfun == r->capfun) {
        uint32_t ncap = r->capfun ? r->capfun * 2 : 256;
        PyObject **no = realloc(r->fobj, ncap * sizeof(PyObject *));
        if (no == NULL)
            return PP_NONE;
        r->fobj = no;
        uint8_t *nk = realloc(r->fkind, ncap);
        if (nk == NULL)
            return PP_NONE;
        r->fkind = nk;
        uint8_t *nt = realloc(r->ftarget, ncap);
        if (nt == NULL)
            return PP_NONE;
        r->ftarget = nt;
        int32_t *nr = realloc(r->fresume, ncap * sizeof(int32_t));
        if (nr == NULL)
            return PP_NONE;
        r->fresume = nr;
        r->capfun = ncap;
    }
    PyObject *named;
    if (kind != PP_KIND_BUILTIN) {
        named = Py_NewRef(obj);
    }
    else {
        pp_err_state es;
        pp_err_save(&es);
        named = builtin_name(obj, self_arg);
        if (named == NULL)
            PyErr_Clear();
        pp_err_restore(&es);
        if (named == NULL)
            return PP_NONE;
    }
    fid = r->nfun;
    if (pp_index_put(&r->idx, key, fid) < 0) {
        Py_DECREF(named);
        return PP_NONE;
    }
    r->fobj[fid] = named;
    r->fkind[fid] = (uint8_t)kind;
    r->ftarget[fid] = 0;
    r->fresume[fid] = -1;
    r->nfun++;
    if (kind == PP_KIND_PYTHON && r->line_filter && line_filter_says(r, obj))
        mark_line_target(r, fid);
    return fid;
}

uint32_t pp_registry_add(pp_registry *r, uint64_t key, PyObject *obj, PyObject *self_arg,
                         int kind)
{
    int was = pp_memory_self_begin();
    uint32_t fid = register_function_impl(r, key, obj, self_arg, kind);
    pp_memory_self_end(was);
    return fid;
}

/* A function of its own (filename, name, qualname, line), keyed apart from
 * code pointers: an address will be reused. */
static uint32_t add_ghost(pp_registry *r, PyObject *filename, PyObject *name,
                          PyObject *qualname, int line)
{
    PyObject *names = Py_BuildValue("(OOOi)", filename, name, qualname, line);
    if (names == NULL) {
        PyErr_Clear();
        return PP_NONE;
    }
    uint32_t fid = pp_registry_add(r, (1ull << 63) | ++r->ghosts, names, NULL, PP_KIND_GHOST);
    Py_DECREF(names);
    return fid;
}

uint32_t pp_registry_named(pp_registry *r, PyObject *filename, PyObject *name, int line)
{
    return add_ghost(r, filename, name, name, line);
}

uint32_t pp_registry_ghost(pp_registry *r, PyObject *code)
{
    /* pyprof's own code dies too (a module's body after its import, sampled
     * in the channel's thread): no id, as while it lived */
    if (is_own((uint64_t)(uintptr_t)code, code, PP_KIND_PYTHON))
        return PP_NONE;
    PyCodeObject *co = (PyCodeObject *)code;
    return add_ghost(r, co->co_filename, co->co_name, co->co_qualname, co->co_firstlineno);
}

uint32_t pp_registry_add_line_target(pp_registry *r, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "a line target must be a code object");
        return PP_NONE;
    }
    uint32_t fid = pp_registry_code(r, code);
    if (fid == PP_NONE) {
        if (pp_registry_own(r, (uint64_t)(uintptr_t)code))
            PyErr_Format(PyExc_ValueError, "%U is pyprof's own code, which is not profiled",
                         ((PyCodeObject *)code)->co_qualname);
        else if (!PyErr_Occurred())
            PyErr_NoMemory();
        return PP_NONE;
    }
    mark_line_target(r, fid);
    return fid;
}

void pp_registry_free(pp_registry *r)
{
    for (uint32_t i = 0; i < r->nfun; i++)
        Py_DECREF(r->fobj[i]);
    free(r->fobj);
    free(r->fkind);
    free(r->ftarget);
    free(r->fresume);
    r->fresume = NULL;
    r->fobj = NULL;
    r->fkind = NULL;
    r->ftarget = NULL;
    r->nfun = r->capfun = 0;
    pp_index_free(&r->idx);
    if (r->own.e != NULL)
        pp_index_free(&r->own);
    Py_CLEAR(r->own_code);
    Py_CLEAR(r->line_filter);
}
