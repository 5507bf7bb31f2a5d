/* symbols.h — native addresses named from debug information (elfutils'
 * libdw, opened at first use; compiled out without its headers). */
#ifndef PP_SYMBOLS_H
#define PP_SYMBOLS_H

#include <Python.h>

int pp_symbols_available(void);
/* {ip: [(name, file, line), ...]} for the given addresses of this process
 * (already moved into the calling instruction for return addresses): the
 * frames that name each one, innermost first — inlined functions, then the
 * function holding them — with linkage (mangled) names where the debug
 * information has them; file "" and line 0 where it has no line. An address
 * no object or symbol covers is left out. Py_None without libdw (not built
 * with it, or libdw.so.1 cannot be opened). GIL held;
 * not for signal handlers (reads files, allocates). */
PyObject *pp_symbols_frames(PyObject *ips);

#endif
