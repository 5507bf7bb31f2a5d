"""What a capture's records must agree on before any view reads them
(docs/capture-format.md, "What a reader checks").

The codec checks each record's own shape (sizes, counts, string indexes); this
module checks what the records say about each other once they are all read:
every id refers to a row that exists, a path's parent comes before it (so the
calling-context tree has no cycle), the JSON records have the types the views
use. A violation raises :class:`Corrupt` naming the record and the row; the
codec turns it into one PyprofError naming the file.

The checks run over the tables' key columns with C-level iteration (a set of
one column, its max) and look for the offending row only when one fails, so
they cost little next to parsing the rows.
"""
from __future__ import annotations

import math
from itertools import chain
from operator import attrgetter, itemgetter

from .tables import MEMORY_SITES, NO_FUNCTION, ROOT_PATH, STATES, TABLES

# Record names of the counter tables, for messages.
RECORD_NAMES = {t.name: {"memory_rows": "MEMORY", "line_memory": "LINEMEM",
                         "memory_extra": "MEMEXTRA", "instructions": "INSNS"}.get(
    t.name, t.name.upper()) for t in TABLES}

# Key fields that hold an index into a fixed list (not an id).
_ENUMS = {("samples", 2): ("state", len(STATES)), ("memory_rows", 2): ("site", len(MEMORY_SITES)),
          ("memory_extra", 2): ("site", len(MEMORY_SITES))}
_MEMORY_TABLES = ("memory_rows", "memory_extra")     # NO_FUNCTION: a site without a line
_KEY_WORDS = {"thread": "thread", "function": "function", "stack": "stack",
              "memstack": "allocation stack", "path": "path", "opcode": "opcode"}


class Corrupt(Exception):
    """A capture whose records disagree; the message names the record and row."""


def check(session, whole=None) -> None:
    """Check the tables of `session` against its names (or, for a step's
    counters, against `whole`, the capture it belongs to)."""
    names = whole if whole is not None else session
    if whole is None:
        _check_json(session)
    ids = {
        "thread": names.threads.keys(),
        "function": names.functions.keys(),
        "stack": names.stacks.keys(),
        "memstack": names.memory_stacks.keys(),
        "opcode": set(range(len(names.opcode_names()[0]))),
    }
    for table in TABLES:
        rows = getattr(session, table.name)
        if not rows:
            continue
        keys = rows if table.listed else rows.keys()      # a listed row starts with its key
        for i, kind in enumerate(table.keys):
            _check_column(table, keys, i, kind, ids)
        if table.name == "timeline":
            if min(map(itemgetter(3), rows)) < 0:
                _first_bad(table, rows, lambda k: k[3] < 0, "has a negative duration")
        if table.name in _MEMORY_TABLES:    # only a site that is not a line has no function

            def lineless(k):
                return k[0] == NO_FUNCTION and k[2] == MEMORY_SITES.index("line")
            if any(map(lineless, keys)):
                _first_bad(table, keys, lineless, "is a line of no function")
    if whole is None:
        _check_names(session)
        _check_tasks(session)
    _check_paths(session, names.functions, whole.paths if whole is not None else {})
    if session.edges:
        fstats = session.fstats
        if not {(k[0], k[2]) for k in session.edges} <= fstats.keys():
            row, k = next((n, k) for n, k in enumerate(session.edges)
                          if (k[0], k[2]) not in fstats)
            raise Corrupt(f"EDGES row {row} (thread {k[0]}, {k[1]} -> {k[2]}) has a callee "
                          f"without an FSTATS row in its thread")


def _check_tasks(session):
    """Each task and coroutine row names functions (and a thread) the capture has."""
    for i, t in enumerate(session.tasks):
        fids = [t.fid, t.coro_fid, t.created and t.created[0]]
        if any(f is not None and f not in session.functions for f in fids):
            raise Corrupt(f"TASKS row {i} has a function the capture does not have")
        if t.thread is not None and t.thread not in session.threads:
            raise Corrupt(f"TASKS row {i} has thread {t.thread}, which the capture does not have")
    for i, (task, start, dur) in enumerate(session.task_steps):
        if not 0 <= task < len(session.tasks) or dur < 0:
            raise Corrupt(f"TASKSTEPS row {i} has task {task} or duration {dur} out of range")
    for fid in session.coroutines:
        if fid not in session.functions:
            raise Corrupt(f"COROS has function {fid}, which the capture does not have")


def _check_column(table, keys, i, kind, ids):
    if kind == "path":
        return                      # _check_paths
    if kind == "":
        enum = _ENUMS.get((table.name, i))
        if enum is None:
            return
        what, n = enum
        if max(map(itemgetter(i), keys)) >= n:
            _first_bad(table, keys, lambda k: k[i] >= n, f"has {what} {{v}} (at most {n - 1})", i)
        return
    allowed = ids[kind]
    values = set(map(itemgetter(i), keys))
    if table.name in _MEMORY_TABLES and kind in ("function", "memstack"):
        values.discard(NO_FUNCTION)
    if not values <= allowed:
        word = _KEY_WORDS[kind]
        _first_bad(table, keys, lambda k: k[i] not in allowed and not (
            table.name in _MEMORY_TABLES and k[i] == NO_FUNCTION),
            f"has {word} {{v}}, which the capture does not have", i)


def _first_bad(table, keys, bad, message, col=None):
    for n, k in enumerate(keys):
        if bad(k):
            v = k[col] if col is not None else None
            raise Corrupt(f"{RECORD_NAMES[table.name]} row {n} {message.format(v=v)}")
    raise Corrupt(f"{RECORD_NAMES[table.name]} {message.format(v='?')}")


def _check_paths(session, functions, shape):
    """Each path's parent is the root or an earlier path of its thread: the
    tree has no cycle and every chain ends at the root."""
    paths = session.paths
    if not paths:
        return
    if not set(map(attrgetter("fid"), paths.values())) <= functions.keys():
        row, (k, p) = next((n, kp) for n, kp in enumerate(paths.items())
                           if kp[1].fid not in functions)
        raise Corrupt(f"PATHS row {row} (thread {k[0]}, path {k[1]}) has function {p.fid}, "
                      f"which the capture does not have")
    bad = [k for k, p in paths.items()
           if p.parent != ROOT_PATH and not (p.parent < k[1] and (
               (k[0], p.parent) in paths or (k[0], p.parent) in shape))]
    if not bad:
        return
    t, pid = bad[0]
    row = list(paths).index(bad[0])
    parent = paths[bad[0]].parent
    if parent == pid:
        why = "(a cycle)"
    elif parent > pid:
        why = "(a parent comes before its children)"
    else:
        why = f"(thread {t} has no path {parent})"
    raise Corrupt(f"PATHS row {row} (thread {t}, path {pid}) has parent {parent} {why}")


def _check_names(session):
    """Ids inside the name tables: stacks' frames, the memory curve's sites."""
    functions = session.functions
    first = itemgetter(0)
    if session.stacks and not set(map(first, chain.from_iterable(
            map(attrgetter("frames"), session.stacks.values())))) <= functions.keys():
        _stacks_frames(session.stacks, functions)
    if session.memory_stacks and not set(map(first, chain.from_iterable(
            session.memory_stacks.values()))) <= functions.keys():
        _memstacks_frames(session.memory_stacks, functions)
    for sid, (_, entries) in session.memory_native.items():
        depth = len(session.memory_stacks.get(sid, ()))
        if sid not in session.memory_stacks or any(i >= depth for i in entries):
            raise Corrupt(f"MEMNATIVE stack {sid} " + (
                "has entry frames beyond its Python frames" if sid in session.memory_stacks
                else "is not a MEMSTACKS stack"))
    for n, pt in enumerate(session.memory_curve):
        if pt.site is not None and pt.site[0] not in functions:
            raise Corrupt(f"MEMCURVE row {n} names function {pt.site[0]}, which the capture "
                          f"does not have")
        if not math.isfinite(pt.t):
            raise Corrupt(f"MEMCURVE row {n} has time {pt.t}")


def _stacks_frames(stacks, functions):
    for sid, st in stacks.items():
        if not {f for f, _ in st.frames} <= functions.keys():
            fid = next(f for f, _ in st.frames if f not in functions)
            raise Corrupt(f"STACKS stack {sid} has a frame of function {fid}, which the "
                          f"capture does not have")


def _memstacks_frames(memory_stacks, functions):
    for sid, frames in memory_stacks.items():
        if not {f for f, _ in frames} <= functions.keys():
            fid = next(f for f, _ in frames if f not in functions)
            raise Corrupt(f"MEMSTACKS stack {sid} has a frame of function {fid}, which the "
                          f"capture does not have")


# ------------------------------------------------------------------ INFO and META
# What the views read of the JSON records, as a schema: "s" a string, "n" a
# finite number, "?" anything (read for its truth only), [x] a list of x,
# {key: x, "*": x for the other keys} an object, a tuple: one of. Keys not
# listed are not read by pyprof and may hold anything.
_N, _S, _ANY = "n", "s", "?"
_SAMPLING = {"mode": _S, "native": _ANY, "timer": _S, "timer_fallback": _S, **{k: (_N, None) for k in (
    "rate_requested", "interval_ns", "signals", "recorded", "dropped", "throttled",
    "other_threads", "drained", "truncated", "elapsed_s", "cpu_s", "rate_achieved",
    "parked", "woken", "idle_ticks")}}
_MEMORY = {"mode": _S, "hooks_linked": _ANY, "native_allocs": _ANY, **{k: (_N, None) for k in (
    "sample_bytes", "peak_bytes", "current_bytes", "allocated_bytes", "live_blocks",
    "unknown_frees", "rss_peak_bytes", "rss_end_bytes", "dropped_blocks", "temporary")}}
_GC = {"collections": [_N], "pause_ns": [_N], "max_pause_ns": _N, "collected": _N,
       "uncollectable": _N}
_INFO = {
    "format": [_N], "clock": _S, "time_unit": _N, "ns_per_tick": _N, "clock_read_ns": _N,
    "timeunit": (_N, None), "start_wall_ns": _N, "snapshot_wall_ns": _N, "duration_ns": _N,
    "events": _N, "python": _S, "hook": _S, "tool_id": _N, "paths_dropped": _N,
    "timeline_events": _N, "timeline_dropped_short": _N, "timeline_dropped_full": _N,
    "timeline_open": _N, "timeline_min_duration_ns": _N, "timeline_max_events": _N,
    "cstack_asides": _N, "line_bookkeeping_ns": _N,
    "sampling": (_SAMPLING, False, None),
    "memory": (_MEMORY, False, None),
    "gc": (_GC, None),
}
_CURVE_ROW = [(_N, None)]
_PROCESS = {
    "file": _S, "pid": _N, "host": _S, "argv": [_S], "cwd": _S, "executable": _S,
    "python": _S, "written_at": _N, "modes": [_S], "numpy_buffers": _S,
    "start_wall_ns": _N, "snapshot_wall_ns": _N, "duration_ns": _N, "events": _N,
    "clock": _S, "hook": _S, "time_unit": _N, "sampling": _INFO["sampling"],
    "memory": _INFO["memory"], "memory_curve": [_CURVE_ROW], "mpi": _ANY, "dask": {}, "ray": {}, "spark": {},
}
_MARKER = {"index": _N, "name": (_S, None), "event": _S, "t": _N}
_OBJECTS = [{"type": _S, "count": _N, "bytes": _N}]
_META = {
    "pyprof_version": _S, "argv": [_S], "executable": _S, "python": _S,
    "implementation": _S, "pid": _N, "host": _S, "cwd": _S, "modes": [_S],
    "numpy_buffers": _S, "written_at": _N, "thread_names": {"*": _S},
    "line_targets": {"*": [_N]}, "sources": {"*": (_S, None)}, "native_symbols": {"*": [_ANY]},
    "processes": [_PROCESS], "thread_process": {"*": _N}, "steps": [_MARKER],
    "dask": {}, "dask_lost": [{}], "dask_errors": {"*": _S},
    "ray": {}, "ray_lost": [{}], "ray_errors": {"*": _S},
    "spark": {}, "spark_lost": [{}], "spark_errors": {"*": _S},
    "objects": _OBJECTS, "objects_steps": [{"index": _N, "name": (_S, None), "t": _N,
                                            "objects": _OBJECTS}],
    "opcodes": {"names": [_S], "bases": [_S], "adaptive": [_S]},
}


_YEAR_10000_NS = 253402300800 * 10**9       # the dates a report can show


def _fits(v, spec) -> bool:
    if spec is _ANY:
        return True
    if spec is None or spec is False:
        return v is spec
    if spec == _S:
        return isinstance(v, str)
    if spec == _N:
        return isinstance(v, (int, float)) and (not isinstance(v, float) or math.isfinite(v))
    if isinstance(spec, tuple):
        return any(_fits(v, s) for s in spec)
    return isinstance(v, list if isinstance(spec, list) else dict)


def _conform(v, spec, where):
    """Check `v` against `spec`; Corrupt naming `where` (INFO memory.peak_bytes)."""
    if isinstance(spec, tuple):
        for s in spec:
            if _fits(v, s):
                spec = s
                break
        else:
            raise Corrupt(f"{where} is {_short(v)}, not {_what(spec)}")
    elif not _fits(v, spec):
        raise Corrupt(f"{where} is {_short(v)}, not {_what(spec)}")
    if isinstance(spec, list):
        for i, x in enumerate(v):
            _conform(x, spec[0], f"{where}[{i}]")
    elif isinstance(spec, dict):
        for k, x in v.items():
            if k in spec:
                _conform(x, spec[k], f"{where}.{k}")
            elif "*" in spec:
                _conform(x, spec["*"], f"{where}.{k}")


def _what(spec) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_what(s) for s in spec)
    return {_S: "a string", _N: "a number", None: "null", False: "false"}.get(
        spec if not isinstance(spec, (list, dict)) else "", "a list" if isinstance(
            spec, list) else "an object")


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_json(session):
    info, meta = session.info, session.meta
    if not isinstance(info, dict):
        raise Corrupt("INFO is not a JSON object")
    if not isinstance(meta, dict):
        raise Corrupt("META is not a JSON object")
    _conform(info, _INFO, "INFO")
    _conform(meta, _META, "META")
    for where, rec in [("INFO", info)] + [(f"META.processes[{n}]", p) for n, p in
                                          enumerate(meta.get("processes") or ())]:
        for key in ("start_wall_ns", "snapshot_wall_ns"):
            v = rec.get(key)
            if v is not None and not 0 <= v < _YEAR_10000_NS:
                raise Corrupt(f"{where}.{key} is {v!r}, not a time since the epoch")
    for key in ("collections", "pause_ns"):         # per generation
        v = (info.get("gc") or {}).get(key)
        if v is not None and len(v) != 3:
            raise Corrupt(f"INFO.gc.{key} is {_short(v)}, not one number per generation")
    unit = info.get("time_unit", 1e-9)
    if not unit > 0:
        raise Corrupt(f"INFO.time_unit is {unit!r}, not a positive number")
    for k, v in (meta.get("line_targets") or {}).items():
        if not (k.isdigit() and int(k) in session.functions):
            raise Corrupt(f"META.line_targets names function {k}, which the capture does "
                          f"not have")
        if not (len(v) == 2 and all(isinstance(x, int) for x in v) and 0 <= v[0] <= v[1] < 2**31):
            raise Corrupt(f"META.line_targets.{k} is {v!r}, not [first line, last line]")
    nproc = len(meta.get("processes") or [None])
    for k, v in (meta.get("thread_process") or {}).items():
        if not (isinstance(v, int) and 0 <= v < nproc):
            raise Corrupt(f"META.thread_process.{k} is {v!r}, not a process index")
    for n, p in enumerate(meta.get("processes") or ()):
        for i, row in enumerate(p.get("memory_curve") or ()):
            if len(row) != 6 or (row[4] is not None and row[4] not in session.functions):
                raise Corrupt(f"META.processes[{n}].memory_curve[{i}] is {_short(row)}, not "
                              f"[t, rss, heap, heap_max, function id or null, line]")
    for k, v in (meta.get("native_symbols") or {}).items():
        if len(v) < 2 or not all(isinstance(x, str) for x in v[:2]):
            raise Corrupt(f"META.native_symbols.{k} is {_short(v)}, not [name, file]")
    ops = meta.get("opcodes") or {}
    if len(ops.get("names") or ()) != len(ops.get("bases") or ()):
        raise Corrupt("META.opcodes has not one base per opcode name")
