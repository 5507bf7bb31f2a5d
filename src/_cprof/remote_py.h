/* remote_py.h — the RemoteProcess type (remote_py.c) for module.c. */
#ifndef PP_REMOTE_PY_H
#define PP_REMOTE_PY_H

#include <Python.h>

extern PyTypeObject pp_remote_type;
/* _remote_layout_check() -> None or the first field of this build's own
 * layout row that differs from its structures (frames.c). */
PyObject *pp_remote_layout_check_py(PyObject *m, PyObject *unused);

#endif
