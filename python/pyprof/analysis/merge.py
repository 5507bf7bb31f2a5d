"""Merging captures: runs, threads and processes of one program into one Session
(docs/merge-diff.md).

    merged = merge([Session.load(p) for p in paths], sources=paths)

Ids are local to a capture, so every input gets a :class:`Remap` (its function
ids, thread indices and stack ids in the merged Session) and every table is
then copied through it (:data:`TABLE_MERGERS`; the counter tables by the kinds
of their keys, model/tables.py):

- functions are matched by identity (kind, file, first line, name, qualname):
  the same function in two captures becomes one function id;
- threads are renumbered: each input keeps its own threads, and
  ``meta["thread_process"]`` tells which process each one belongs to;
- sampled stacks and allocation stacks are re-interned (identical stacks of two
  inputs become one stack id);
- counters with the same key are added.

The process is a dimension of the merged Session: ``meta["processes"]`` lists
one record per process (pid, host, argv, start time, the file it came from, its
own sampling and memory info and memory curve); :meth:`Session.process_threads`
gives a process's thread indices for the ``threads=`` arguments of the queries.
Merging a merged capture flattens its processes into the new list.

A new counter table is merged from its entry in model/tables.TABLES (its key's
kinds); one that needs more gets a function in ``_SPECIAL``.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from itertools import chain

from ..errors import PyprofError
from ..model.names import stable_name
from ..model.session import (NO_FUNCTION, TABLES, CoroCounters, MemCounters, MemExtra, PathNode,
                             Session, Stack, Step, Thread, process_records)


@dataclass
class Remap:
    """Where one input's ids go in the merged Session."""

    source: str                                     # the input's name (its file), for messages
    index: int = 0                                  # its position among the inputs
    functions: dict = field(default_factory=dict)   # input fid -> merged fid
    threads: dict = field(default_factory=dict)     # input thread index -> merged index
    stacks: dict = field(default_factory=dict)      # input sampled stack id -> merged id
    memory_stacks: dict = field(default_factory=dict)  # input allocation stack id -> merged id
    processes: dict = field(default_factory=dict)   # input process index -> merged index
    maps: dict = field(default_factory=dict)        # key part kind -> its map (_part_map)


class _Merged:
    """The Session being built and the interning tables shared by all inputs."""

    def __init__(self):
        self.session = Session()
        self.function_ids: dict = {}        # identity -> merged fid
        self.opcode_index: dict = {}        # (name, base) -> merged opcode number
        self.stack_ids: dict = {}           # (frames, native, entries), merged fids -> stack id
        self.memory_stack_ids: dict = {}    # (frames with merged fids, native) -> merged id
        self.memory_rows: dict = {}         # (fid, line, site, stack) -> MemCounters
        self.memory_extra: dict = {}        # (fid, line, site, stack) -> MemExtra
        self.origin_ns = 0                  # wall time of the earliest input's start
        self.steps: dict = {}               # step index -> (Step, its _Merged tables)


def function_identity(fn) -> tuple:
    """What makes two captures' functions the same function in a merge."""
    if fn.kind == "python":
        return (fn.kind, fn.filename, fn.line, fn.name, fn.qualname)
    # a C function by its stable name: cProfile's may hold an address (model/names.py)
    name = stable_name(fn.name)
    return (fn.kind, fn.filename, fn.line, name, name)


# ------------------------------------------------------------------ one function per table
def _merge_functions(merged, src, remap):
    for fid, fn in src.functions.items():
        new = merged.function_ids.setdefault(function_identity(fn), len(merged.function_ids))
        if new not in merged.session.functions:
            merged.session.functions[new] = replace(fn, fid=new)
        remap.functions[fid] = new


def _merge_processes(merged, src, remap):
    """Append the input's process records (one, or a merged input's list)."""
    processes = merged.session.meta.setdefault("processes", [])
    for i, record in enumerate(process_records(src, remap.source)):
        record = dict(record)
        if "memory_curve" in record:
            record["memory_curve"] = [
                [t, rss, heap, hmax, None if fid is None else remap.functions[fid], line]
                for t, rss, heap, hmax, fid, line in record["memory_curve"]]
        remap.processes[i] = len(processes)
        processes.append(record)


def _merge_threads(merged, src, remap):
    out = merged.session
    thread_process = out.meta.setdefault("thread_process", {})
    for index in sorted(src.threads):
        t = src.threads[index]
        new = len(out.threads)
        out.threads[new] = Thread(new, t.ident, t.native_id, t.events, t.name)
        remap.threads[index] = new
        thread_process[str(new)] = remap.processes[src.thread_process(index)]


def _part_map(kind, remap):
    """The dict mapping one part of a key into the merged Session (None: the
    part stays: a "path", as path ids are per thread and threads are new, or
    a plain value). Made once per input and kind (after its stacks are merged)."""
    if kind == "opcode":
        return remap.maps["opcode"]             # _merge_opcodes
    if kind not in ("thread", "function", "stack", "memstack"):
        return None
    m = remap.maps.get(kind)
    if m is None:
        m = {"thread": remap.threads, "function": remap.functions, "stack": remap.stacks,
             "memstack": remap.memory_stacks}[kind]
        if kind in ("function", "memstack"):
            m = {**m, NO_FUNCTION: NO_FUNCTION}     # memory rows: a site without one
        remap.maps[kind] = m
    return m


def _mapped_keys(keys, maps):
    """`keys` (tuples; or rows that start with their key) with each part
    mapped by its dict of `maps` (None: kept), as an iterator of tuples. The
    loops are C's (columns through zip and map): 64 workers' captures have
    millions of key parts, and a Python call per part was most of a merge."""
    columns = zip(*keys)            # a listed row's counters are a column past the maps: dropped
    return zip(*[col if m is None else map(m.__getitem__, col)
                 for m, col in zip(maps, columns)])


def _clone(c):
    """A copy of a counters row (a plain dataclass), without copy.copy's reduce."""
    new = object.__new__(type(c))
    new.__dict__.update(c.__dict__)
    return new


def _table_merger(table):
    """Copy a {key: counters} table through the remap, adding counters that meet."""
    assert table.per_thread, "only a per-thread table has rows no earlier input has"

    def merge_table(merged, src, remap):
        rows = getattr(src, table.name)
        if not rows:
            return
        out = getattr(merged.session, table.name)
        maps = [_part_map(kind, remap) for kind in table.keys]
        # Each input's threads are new ones, so its rows meet no earlier
        # input's and are never added to: they are taken as they are (shared
        # with the input, not copied), unless two of its own rows meet (two
        # function ids of one input that are one function in the merge).
        fresh = dict(zip(_mapped_keys(rows, maps), rows.values()))
        if len(fresh) == len(rows):
            out.update(fresh)
            return
        for new_key, c in zip(_mapped_keys(rows, maps), rows.values()):
            mine = out.get(new_key)
            if mine is not None:
                mine.add(c)
            else:
                out[new_key] = _clone(c)
    merge_table.__name__ = f"_merge_{table.name}"
    return merge_table


def _merge_stacks(merged, src, remap):
    # each distinct frame of the input mapped once, the stacks through that
    functions, ids, out = remap.functions, merged.stack_ids, merged.session.stacks
    frames = set(chain.from_iterable(st.frames for st in src.stacks.values()))
    frame = {fr: (functions[fr[0]], fr[1]) for fr in frames}.__getitem__
    for sid, st in src.stacks.items():
        key = (tuple(map(frame, st.frames)), st.native, st.entries)
        new = ids.get(key)
        if new is None:
            new = ids[key] = len(ids)
            out[new] = Stack(*key)
        remap.stacks[sid] = new


def _merge_memory_stacks(merged, src, remap):
    functions, ids = remap.functions, merged.memory_stack_ids
    frames = set(chain.from_iterable(src.memory_stacks.values()))
    frame = {fr: (functions[fr[0]], fr[1]) for fr in frames}.__getitem__
    for sid, frames in src.memory_stacks.items():
        frames = tuple(map(frame, frames))
        native = src.memory_native.get(sid)
        new = ids.setdefault((frames, native), len(ids))
        merged.session.memory_stacks[new] = frames
        if native:
            merged.session.memory_native[new] = native
        remap.memory_stacks[sid] = new


def _merge_site_rows(name, counters, merged, src, remap):
    # Not per thread nor per process (the core does not record it): summed.
    table, rows, src_rows = _TABLE[name], getattr(merged, name), getattr(src, name)
    maps = [_part_map(kind, remap) for kind in table.keys]
    for key, row in zip(_mapped_keys(src_rows, maps), src_rows):
        rows.setdefault(key, counters()).add(row[-1])
    setattr(merged.session, name, [(*key, c) for key, c in rows.items()])


def _merge_memory_rows(merged, src, remap):
    _merge_site_rows("memory_rows", MemCounters, merged, src, remap)


def _merge_memory_extra(merged, src, remap):
    _merge_site_rows("memory_extra", MemExtra, merged, src, remap)


def _merge_fmemory(merged, src, remap):
    out = merged.session.fmemory
    maps = [_part_map(kind, remap) for kind in _TABLE["fmemory"].keys]
    for key, (peak, residual) in zip(_mapped_keys(src.fmemory, maps), src.fmemory.values()):
        p0, r0 = out.get(key, (0, 0))       # two fids of one input may meet: as function_peaks
        out[key] = (max(p0, peak), r0 + residual)


def _merge_memory_curve(merged, src, remap):
    # One curve per Session: the first input's (the primary process); every
    # process's own curve is in its record of meta["processes"].
    if not merged.session.memory_curve and src.memory_curve:
        merged.session.memory_curve = [
            replace(p, site=None if p.site is None else (remap.functions[p.site[0]], p.site[1]))
            for p in src.memory_curve]


def _merge_opcodes(merged, src, remap):
    """--opcodes: each input's opcode numbers into the merged names (one list
    when every input ran the same CPython; a union when they did not)."""
    names, bases, adaptive = src.opcode_names()
    m = remap.maps["opcode"] = {}
    if not names:
        return
    out = merged.session.meta.setdefault("opcodes", {"names": [], "bases": [], "adaptive": []})
    out["adaptive"] = sorted(set(out["adaptive"]) | adaptive)
    index = merged.opcode_index
    for i, (name, base) in enumerate(zip(names, bases)):
        j = index.get((name, base))
        if j is None:
            j = index[(name, base)] = len(out["names"])
            out["names"].append(name)
            out["bases"].append(base)
        m[i] = j


def _merge_meta(merged, src, remap):
    """The first input's meta stays the top level (its memory curve is the
    Session's); line targets follow their function ids, and sources and native
    symbols are the union over inputs."""
    out = merged.session.meta
    meta = src.meta
    if remap.index == 0:
        for key, value in meta.items():
            if key not in ("processes", "thread_process", "line_targets", "sources",
                           "native_symbols", "opcodes"):
                out[key] = copy.deepcopy(value)
    targets = out.setdefault("line_targets", {})
    for fid, span in meta.get("line_targets", {}).items():
        targets.setdefault(str(remap.functions[int(fid)]), span)
    for key in ("sources", "native_symbols"):
        for k, v in meta.get(key, {}).items():
            out.setdefault(key, {}).setdefault(k, v)
    if not targets:
        del out["line_targets"]


def _merge_paths(merged, src, remap):
    # path ids are per thread, and each input's threads are new ones
    out, functions = merged.session.paths, remap.functions
    maps = [_part_map(kind, remap) for kind in _TABLE["paths"].keys]
    out.update(zip(_mapped_keys(src.paths, maps), [
        PathNode(p.parent, functions[p.fid], p.calls, p.total, p.own)
        for p in src.paths.values()]))


def _merge_timeline(merged, src, remap):
    """Events on one time axis: starts move from the input's origin to the
    earliest input's."""
    shift = int(src.info.get("start_wall_ns", merged.origin_ns)) - merged.origin_ns
    merged.session.timeline.extend(
        (remap.threads[t], remap.functions[fid], start + shift, dur)
        for t, fid, start, dur in src.timeline)


def _merge_asyncio(merged, src, remap):
    """Tasks (their rows, and traced steps after the rows already merged, on
    the earliest input's time axis) and coroutine counters (summed by function)."""
    out = merged.session
    shift = int(src.info.get("start_wall_ns", merged.origin_ns)) - merged.origin_ns
    base = len(out.tasks)
    for t in src.tasks:
        out.tasks.append(replace(
            t, fid=remap.functions[t.fid],
            coro_fid=None if t.coro_fid is None else remap.functions[t.coro_fid],
            created=None if t.created is None else (remap.functions[t.created[0]], t.created[1]),
            thread=None if t.thread is None else remap.threads[t.thread],
            start=t.start + shift, end=None if t.end is None else t.end + shift))
    out.task_steps.extend((base + task, start + shift, dur) for task, start, dur in src.task_steps)
    for fid, c in src.coroutines.items():
        mine = out.coroutines.setdefault(remap.functions[fid], CoroCounters())
        mine.instances += c.instances
        mine.ended += c.ended
        mine.wall += c.wall
        mine.open_wall += c.open_wall


def _merge_steps(merged, src, remap):
    """Steps with the same index (the same step of each process: a training
    step on every rank) become one step holding what they all counted."""
    for st in src.steps:
        entry = merged.steps.get(st.index)
        if entry is None:
            part = _Merged()
            entry = merged.steps[st.index] = (Step(st.index, st.name, st.start, st.end,
                                                   part.session), part)
        step, part = entry
        step.start, step.end = min(step.start, st.start), max(step.end, st.end)
        for merge_table in _STEP_TABLES:
            merge_table(part, st.data, remap)
    merged.session.steps = [merged.steps[i][0] for i in sorted(merged.steps)]


def _merge_info(merged, src, remap):
    if not merged.session.info:
        merged.session.info = copy.deepcopy(src.info)
    else:
        merged.session.info = merge_info(merged.session.info, src.info)


_TABLE = {t.name: t for t in TABLES}
# The counter tables that need more than their keys remapped; the others are
# copied by _table_merger.
_SPECIAL = {"paths": _merge_paths, "fmemory": _merge_fmemory, "memory_rows": _merge_memory_rows,
            "memory_extra": _merge_memory_extra,
            "timeline": _merge_timeline}
_COUNTER_MERGERS = {t.name: _SPECIAL.get(t.name) or _table_merger(t) for t in TABLES}

# In dependency order: functions, processes and threads before the tables that
# use their ids; sampled stacks and allocation stacks before the counter tables.
TABLE_MERGERS = [
    _merge_functions,
    _merge_processes,
    _merge_threads,
    _merge_stacks,
    _merge_memory_stacks,
    _merge_opcodes,
    *_COUNTER_MERGERS.values(),
    _merge_memory_curve,
    _merge_asyncio,
    _merge_meta,
    _merge_info,
    _merge_steps,           # after info: a step's tables are written per the capture's modes
]
# The tables a step holds (its counters), merged as the whole capture's are.
_STEP_TABLES = [_COUNTER_MERGERS[t.name] for t in TABLES if t.step]


# ------------------------------------------------------------------ info
# How the core's counters combine: summed, earliest, latest, any, all. Any other
# key is kept when every input agrees, else dropped (each process's own value
# is in its record of meta["processes"]).
_SUM = {"events", "duration_ns", "cstack_asides", "line_bookkeeping_ns",
        # sampling
        "signals", "recorded", "dropped", "throttled", "other_threads", "drained", "truncated",
        "elapsed_s", "cpu_s", "weighted_s", "parked", "woken", "idle_ticks",
        # memory (peaks summed: an upper bound of the processes' peak together)
        "peak_bytes", "current_bytes", "allocated_bytes", "live_blocks", "unknown_frees",
        "rss_peak_bytes", "rss_end_bytes", "dropped_blocks",
        # function tracing's call paths and timeline
        "paths_dropped", "timeline_events", "timeline_dropped_short", "timeline_dropped_full",
        "timeline_open"}
_MIN = {"start_wall_ns"}
_MAX = {"snapshot_wall_ns", "format"}
# A mode one input had: the merged capture has its table (the others add no rows).
_ANY = {"enabled", "open_calls_counted", "lines", "paths", "timeline", "asyncio", "native",
        "handler_replaced"}
_ALL = {"hooks_linked", "subcalls", "builtins"}
_MIXED = {"mode": "mixed", "clock": "mixed", "hook": "mixed", "python": "mixed", "timer": "mixed"}


def merge_info(a: dict, b: dict) -> dict:
    out = {}
    for key in a.keys() | b.keys():
        if key not in a or key not in b:
            value = a.get(key, b.get(key))
            if isinstance(value, dict):         # sampling/memory in one input only
                out[key] = copy.deepcopy(value)
            elif key in _SUM or key in _ANY or key in _MIN or key in _MAX:
                out[key] = value
            continue
        x, y = a[key], b[key]
        if isinstance(x, dict) and isinstance(y, dict):
            out[key] = merge_info(x, y)
        elif key in _SUM:
            out[key] = x + y
        elif key in _MIN:
            out[key] = min(x, y)
        elif key in _MAX:
            out[key] = max(x, y)
        elif key in _ANY:
            out[key] = bool(x or y)
        elif key in _ALL:
            out[key] = bool(x and y)
        elif x == y:
            out[key] = x
        elif key in _MIXED:
            out[key] = _MIXED[key]
    if "rate_achieved" in a and "rate_achieved" in b and "rate_achieved" not in out:
        out["rate_achieved"] = _achieved(out)
    return out


def _achieved(sampling) -> float:
    """The achieved rate of merged sampling info, from its summed counts (as
    the core computes it: signals per CPU second, or samples per second of the
    time they weigh)."""
    if sampling.get("mode") == "cpu":
        cpu = sampling.get("cpu_s") or 0
        return sampling.get("signals", 0) / cpu if cpu > 0 else 0.0
    weighed = sampling.get("weighted_s") or 0
    taken = sampling.get("recorded", 0) + sampling.get("idle_ticks", 0)
    return taken / weighed if weighed > 0 else 0.0


def program_of(record) -> str:
    """The program a process ran: its main script as an absolute path (or
    module file), else its command line."""
    argv = record.get("argv") or []
    if not argv:
        return ""
    main = argv[0]
    if main in ("-c", "", "-"):
        return " ".join(argv)
    return os.path.normpath(os.path.join(record.get("cwd") or "", main))


def process_key(record):
    """The same process (captured twice) has the same host, pid and start time."""
    return (record.get("host"), record.get("pid"), record.get("start_wall_ns"))


def _check(sessions, sources, force):
    """Refuse what would mix unrelated data or count a process twice."""
    if not sessions:
        raise PyprofError("nothing to merge: no capture given")
    units = {s.time_unit for s in sessions}
    if len(units) > 1:
        a, b = sorted(units)[:2]
        first = sources[[s.time_unit for s in sessions].index(a)]
        second = sources[[s.time_unit for s in sessions].index(b)]
        raise PyprofError(f"{first} and {second} count time in different units ({a:g} s and "
                          f"{b:g} s: captures made with different timers) and cannot be merged")
    if force:
        return
    seen_program, seen_process = {}, {}
    for session, source in zip(sessions, sources):
        for record in process_records(session, source):
            program = program_of(record)
            if program and seen_program and program not in seen_program:
                other, other_source = next(iter(seen_program.items()))
                raise PyprofError(
                    f"{other_source} and {source} are captures of different programs ({other!r} "
                    f"and {program!r}); use --force to merge them anyway")
            if program:
                seen_program.setdefault(program, source)
            key = process_key(record)
            if key[1] is not None and key in seen_process:
                first = seen_process[key]
                what = (f"{source} is given twice" if first == source else
                        f"{first} and {source} are captures of the same process")
                raise PyprofError(
                    f"{what} (pid {key[1]} on {key[0]}, same start time): merging would count "
                    f"it twice; use --force to merge anyway")
            seen_process[key] = source


def merge(sessions, force=False, sources=None) -> Session:
    """One Session from several captures of one program (runs, threads,
    processes). ``sources`` names the inputs in messages and in
    ``meta["processes"]`` (default ``input 1``, ``input 2``...).

    The merged Session's per-thread counter rows are the inputs' own objects
    (each input's threads are new ones, so nothing is added to them): like
    every Session's rows, they are read, not changed.

    Refused (PyprofError) unless ``force``: captures of different programs (main
    script or command differ) and the same process twice (same host, pid and
    start time). Always refused: different time units."""
    sessions = list(sessions)
    sources = list(sources) if sources is not None else [
        f"input {i + 1}" for i in range(len(sessions))]
    _check(sessions, sources, force)
    merged = _Merged()
    merged.origin_ns = min((int(s.info.get("start_wall_ns", 0)) for s in sessions), default=0)
    for index, (src, source) in enumerate(zip(sessions, sources)):
        remap = Remap(source, index)
        for merge_table in TABLE_MERGERS:
            merge_table(merged, src, remap)
    out = merged.session
    out.final = all(s.final for s in sessions)
    # What save() writes: the tables of the merged modes only, info and meta
    # the merged Session's own (not shared with an input), derived tables rebuilt.
    out.info, out.meta = copy.deepcopy(out.info), copy.deepcopy(out.meta)
    for st in out.steps:
        st.data.info = out.info
    out.keep_recorded()
    out.reindex()
    return out


def merge_files(paths, force=False) -> Session:
    """Load and merge capture files; a loading error names its file."""
    return merge([Session.load(p) for p in paths], force=force,
                 sources=[os.fspath(p) for p in paths])
