/* symbols.h — native addresses named from debug information (elfutils'
 * libdw, opened at first use; compiled out without its headers). */
#ifndef PP_SYMBOLS_H
#define PP_SYMBOLS_H

#include <Python.h>
#include <stdint.h>

int pp_symbols_available(void);
/* {ip: [(name, file, line), ...]} for the given addresses of this process
 * (already moved into the calling instruction for return addresses): the
 * frames that name each one, innermost first — inlined functions, then the
 * function holding them — with linkage (mangled) names where the debug
 * information has them; file "" and line 0 where it has no line. An address
 * no object or symbol covers is left out. Py_None without libdw (not built
 * with it, or libdw.so.1 cannot be opened). GIL held (kept while the naming
 * thread finishes an address); not for signal handlers (reads files,
 * allocates). Each address is named once per process. */
PyObject *pp_symbols_frames(PyObject *ips);
/* A new native stack (leaf first) of the sampler's: its addresses named on
 * the naming thread (started at the first call after a quiesce) while the
 * sampler runs, so
 * that writing the capture finds them named. Any thread; not for signal
 * handlers. Without libdw: nothing. */
void pp_symbols_prefetch(const uintptr_t *ips, int n);
/* The naming thread stopped and joined (the sampler's stop, GIL held: the
 * thread never takes it); what it had not named is named with the capture. */
void pp_symbols_quiesce(void);

#endif
