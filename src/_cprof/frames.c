/* frames.c — layout facts that need CPython's internal headers.
 *
 * Owns: the values read from Include/internal (Py_BUILD_CORE), exported as
 * plain constants so that no other file includes internal headers. Only
 * offsetof here: no internal function is called, nothing is linked against.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>

#if PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_frame.h"

/* 3.11: where a _PyInterpreterFrame keeps its code object and its owner. */
const size_t pp_iframe_code_offset = offsetof(_PyInterpreterFrame, f_code);
const size_t pp_iframe_owner_offset = offsetof(_PyInterpreterFrame, owner);
const char pp_frame_owned_by_generator = FRAME_OWNED_BY_GENERATOR;
/* 3.11: a frame object's switch for line events (C trace functions included). */
const size_t pp_frame_trace_lines_offset = offsetof(struct _frame, f_trace_lines);
#endif
