/* asyncio_task.c — see asyncio_task.h. */
#include "asyncio_task.h"

PyObject *pp_attr(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* _asyncio.Task.get_name, once _asyncio is imported (kept: a static type). */
static PyObject *c_get_name(void)
{
    static PyObject *fn;
    if (fn == NULL) {
        PyObject *name = PyUnicode_FromString("_asyncio");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        PyObject *type = mod ? pp_attr(mod, "Task") : NULL;
        fn = type ? pp_attr(type, "get_name") : NULL;
        Py_XDECREF(type);
        Py_XDECREF(mod);
        Py_XDECREF(name);
        PyErr_Clear();
    }
    return fn;
}

PyObject *pp_task_name(PyObject *task)
{
    static PyObject *last_type;         /* the type last asked (strong), and whether its */
    static int last_c;                  /* get_name is C's own: read once a type */
    PyObject *get = c_get_name();
    if ((PyObject *)Py_TYPE(task) != last_type) {
        PyObject *m = pp_attr((PyObject *)Py_TYPE(task), "get_name");
        last_c = m != NULL && m == get;
        Py_XDECREF(m);
        Py_XSETREF(last_type, Py_NewRef((PyObject *)Py_TYPE(task)));
    }
    PyObject *name = last_c && get ? PyObject_CallOneArg(get, task) : NULL;
    if (name == NULL) {
        PyErr_Clear();
        PyObject *d = pp_attr(task, "__dict__");
        PyObject *v = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_name") : NULL;
        name = v ? Py_NewRef(v) : NULL;
        Py_XDECREF(d);
    }
    if (name != NULL && !PyUnicode_Check(name)) {
        PyObject *s = PyObject_Str(name);       /* a str subclass or an int: C's str */
        Py_DECREF(name);
        name = s;
    }
    if (name == NULL) {
        PyErr_Clear();
        name = PyUnicode_FromString("?");
    }
    return name;
}
