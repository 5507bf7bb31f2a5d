"""What a capture's records must agree on before any view reads them
(docs/capture-format.md, "What a reader checks").

The codec checks each record's own shape (sizes, counts, string indexes); this
module checks what the records say about each other once they are all read:
every id refers to a row that exists, a path's parent comes before it (so the
calling-context tree has no cycle), the JSON records have the types the views
use. A violation raises :class:`Corrupt` naming the record and the row; the
codec turns it into one PyprofError naming the file.

The checks run over the table's keys with C-level iteration (sets of one key
column, min/max of a counter column) and look for the offending row only when
one fails, so they cost little next to parsing the rows.
"""
from __future__ import annotations

import math
from operator import itemgetter

from .tables import (MEMORY_SITES, NO_FUNCTION, ROOT_PATH, STATES, TABLES)

# Record names of the counter tables, for messages.
RECORD_NAMES = {t.name: ("MEMORY" if t.name == "memory_rows" else t.name.upper()) for t in TABLES}

# Key fields that hold an index into a fixed list (not an id).
_ENUMS = {("samples", 2): ("state", len(STATES)), ("memory_rows", 2): ("site", len(MEMORY_SITES))}
_KEY_WORDS = {"thread": "thread", "function": "function", "stack": "stack",
              "memstack": "allocation stack", "path": "path"}


class Corrupt(Exception):
    """A capture whose records disagree; the message names the record and row."""


def check(session, whole=None) -> None:
    """Check the tables of `session` against its names (or, for a step's
    counters, against `whole`, the capture it belongs to)."""
    names = whole if whole is not None else session
    _check_json(names)
    ids = {
        "thread": names.threads.keys(),
        "function": names.functions.keys(),
        "stack": names.stacks.keys(),
        "memstack": names.memory_stacks.keys(),
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
    if whole is None:
        _check_names(session)
    _check_paths(session, names.functions, whole.paths if whole is not None else {})
    if session.edges:
        fstats = session.fstats
        if not {(k[0], k[2]) for k in session.edges} <= fstats.keys():
            row, k = next((n, k) for n, k in enumerate(session.edges)
                          if (k[0], k[2]) not in fstats)
            raise Corrupt(f"EDGES row {row} (thread {k[0]}, {k[1]} -> {k[2]}) has a callee "
                          f"without an FSTATS row in its thread")


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
    if table.name == "memory_rows" and kind in ("function", "memstack"):
        values.discard(NO_FUNCTION)
    if not values <= allowed:
        word = _KEY_WORDS[kind]
        _first_bad(table, keys, lambda k: k[i] not in allowed and not (
            table.name == "memory_rows" and k[i] == NO_FUNCTION),
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
    if not {p.fid for p in paths.values()} <= functions.keys():
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
    for sid, st in session.stacks.items():
        if not {f for f, _ in st.frames} <= functions.keys():
            fid = next(f for f, _ in st.frames if f not in functions)
            raise Corrupt(f"STACKS stack {sid} has a frame of function {fid}, which the "
                          f"capture does not have")
    for sid, frames in session.memory_stacks.items():
        if not {f for f, _ in frames} <= functions.keys():
            fid = next(f for f, _ in frames if f not in functions)
            raise Corrupt(f"MEMSTACKS stack {sid} has a frame of function {fid}, which the "
                          f"capture does not have")
    for n, pt in enumerate(session.memory_curve):
        if pt.site is not None and pt.site[0] not in functions:
            raise Corrupt(f"MEMCURVE row {n} names function {pt.site[0]}, which the capture "
                          f"does not have")
        if not math.isfinite(pt.t):
            raise Corrupt(f"MEMCURVE row {n} has time {pt.t}")


# ------------------------------------------------------------------ INFO and META
_NUMBERS = ("time_unit", "ns_per_tick", "clock_read_ns", "start_wall_ns", "snapshot_wall_ns",
            "duration_ns", "events", "paths_dropped", "timeline_events",
            "timeline_dropped_short", "timeline_dropped_full", "timeline_open",
            "timeline_min_duration_ns", "timeline_max_events", "cstack_asides", "tool_id",
            "timeunit")
_OBJECTS_INFO = ("sampling", "memory")
_OBJECTS_META = ("thread_names", "line_targets", "sources", "native_symbols",
                 "thread_process")
_LISTS_META = ("argv", "modes", "processes", "steps")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_json(session):
    info, meta = session.info, session.meta
    if not isinstance(info, dict):
        raise Corrupt("INFO is not a JSON object")
    if not isinstance(meta, dict):
        raise Corrupt("META is not a JSON object")
    for key in _NUMBERS:
        if key in info and info[key] is not None and not _number(info[key]):
            raise Corrupt(f"INFO {key} is {info[key]!r}, not a number")
    unit = info.get("time_unit", 1e-9)
    if not (_number(unit) and unit > 0):
        raise Corrupt(f"INFO time_unit is {unit!r}, not a positive number")
    for key in _OBJECTS_INFO:
        v = info.get(key)
        if v and not isinstance(v, dict):
            raise Corrupt(f"INFO {key} is {v!r}, not an object")
        for k, x in (v or {}).items():
            if isinstance(x, float) and not math.isfinite(x):
                raise Corrupt(f"INFO {key}.{k} is {x!r}")
    for key in _OBJECTS_META:
        v = meta.get(key)
        if v is not None and not isinstance(v, dict):
            raise Corrupt(f"META {key} is {v!r}, not an object")
    for key in _LISTS_META:
        v = meta.get(key)
        if v is not None and not isinstance(v, list):
            raise Corrupt(f"META {key} is {v!r}, not a list")
    for k, v in (meta.get("thread_names") or {}).items():
        if not isinstance(v, str):
            raise Corrupt(f"META thread_names[{k}] is {v!r}, not a string")
    for k, v in (meta.get("line_targets") or {}).items():
        if not (k.isdigit() and int(k) in session.functions):
            raise Corrupt(f"META line_targets names function {k}, which the capture does "
                          f"not have")
        if not (isinstance(v, list) and len(v) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) for x in v)
                and 0 <= v[0] <= v[1] < 2**31):
            raise Corrupt(f"META line_targets[{k}] is {v!r}, not [first line, last line]")
    for k, v in (meta.get("thread_process") or {}).items():
        if not (isinstance(v, int) and not isinstance(v, bool) and
                0 <= v < len(meta.get("processes") or [None])):
            raise Corrupt(f"META thread_process[{k}] is {v!r}, not a process index")
    for n, p in enumerate(meta.get("processes") or ()):
        if not isinstance(p, dict):
            raise Corrupt(f"META processes[{n}] is not an object")

