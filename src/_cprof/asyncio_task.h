/* asyncio_task.[ch] — an asyncio task read with C calls only, for the
 * sampler's --async and the tracer's tasks: pyprof never runs Python code to
 * look at the program's tasks (a sys.monitoring tool would see it work).
 * GIL held. */
#ifndef PP_ASYNCIO_TASK_H
#define PP_ASYNCIO_TASK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* getattr, its error cleared: a new reference or NULL. */
PyObject *pp_attr(PyObject *o, const char *name);
/* The task's name as Task.get_name() gives it when that is _asyncio's C
 * method; else (a subclass overriding it in Python, another task class) its
 * `_name`; "?" if neither. A new str, never NULL but on memory exhaustion. */
PyObject *pp_task_name(PyObject *task);

#endif
