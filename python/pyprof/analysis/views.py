"""tfprof-style views of a Session (docs/views.md).

Four views show the same figures arranged four ways, and two show lines:

- ``code``: the call tree by code path, caller -> callee -> ... (tfprof's code view);
- ``op``: every function or builtin once, whatever called it (tfprof's op view);
- ``scope``: package -> module -> class -> function, with totals per level;
- ``graph``: the callers and callees of the selected functions, with edge figures;
- ``lines``: the line tables (traced, sampled or memory lines);
- ``memory``: the allocation sites, by line;
- ``tasks``: the asyncio tasks of an ``--async`` sampling capture, one row each;
- ``opcodes``: the instructions of an ``--opcodes`` capture, one row per
  instruction and opcode as it ran (docs/opcodes.md);
- ``specialization``: the hottest lines of an ``--opcodes`` capture, each with
  the instructions that ran generic there.

One option language filters them all (tfprof's semantics): ``start``, ``trim``,
``show``, ``hide`` name regexes, ``min_*`` thresholds, ``max_depth``,
``account_displayed_only``, ``order_by``, ``select``, ``thread``, ``step``.
A hidden node's figures still count in its ancestors' totals unless
``account_displayed_only`` is set. :func:`view` returns plain data (a tree of
dicts or a list of dicts); render/viewtable.py makes it a table, JSON or CSV.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field

from ..errors import PyprofError
from ..model.names import BUILTIN_FUNC, BUILTIN_METHOD
from ..model.session import STATES
from ..model.sources import read_source

VIEWS = ("code", "op", "scope", "graph", "lines", "memory", "tasks", "opcodes", "specialization")
TREE_VIEWS = ("code", "scope", "graph", "specialization")

# Columns: name -> (header, unit, meaning). Units: "s" seconds, "B" bytes,
# "n" a count, "" text. The docs (docs/views.md) define each one.
COLUMNS = {
    "calls": ("calls", "n", "calls that ended (traced captures)"),
    "hits": ("hits", "n", "times the line ran (traced lines)"),
    "time": ("time", "s", "inclusive time: the node and everything below it"),
    "self-time": ("self", "s", "time in the node's own code"),
    "per-call": ("per call", "s", "inclusive time / calls"),
    "cpu": ("cpu", "s", "sampled time while the thread ran on a CPU"),
    "samples": ("samples", "n", "samples in the node or below it"),
    "self-samples": ("self smp", "n", "samples in the node's own code"),
    "bytes": ("alloc", "B", "bytes allocated (node and below)"),
    "self-bytes": ("self alloc", "B", "bytes allocated by the node's own lines"),
    "net-bytes": ("net", "B", "allocated minus freed (still live at the end)"),
    "peak-bytes": ("peak", "B", "most bytes live at once (sites, or calls with --functions)"),
    "allocs": ("allocs", "n", "allocations (blocks)"),
    "native-bytes": ("native", "B", "of alloc: bytes C code allocated with malloc or mmap "
                     "(--native-allocs)"),
    "temp-allocs": ("temp", "n", "temporary allocations: blocks freed by their thread within "
                    "N of its allocations (--temporary)"),
    "occurrence": ("occurrence", "n", "contexts, callers or functions the node stands for"),
    "running": ("running", "s", "task: time it ran (its samples' weight)"),
    "awaiting": ("awaiting", "s", "task: its lifetime less its running time (wall mode); "
                 "coroutine function: its coroutines' wall time less their time"),
    "steps": ("steps", "n", "task: times it ran (traced captures)"),
    "coroutine": ("coroutine", "", "task: its coroutine's function, file:line"),
    "created": ("created", "", "task: where it was created (asyncio debug mode)"),
    "state": ("state", "", "task: pending, done or cancelled at the end"),
    "opcode": ("opcode", "", "instruction: its opcode as it ran (specialized, adaptive or "
               "instrumented form)"),
    "base-opcode": ("base", "", "instruction: the instruction that opcode stands for"),
    "specialization": ("state", "", "instruction: specialized, adaptive (generic form of a "
                       "family that specializes), instrumented, or empty (never specializes)"),
    "col-start": ("col", "n", "instruction: first column of its source range (0-based, "
                  "characters)"),
    "col-end": ("end col", "n", "instruction: the column after its source range"),
    "offset": ("offset", "n", "instruction: its offset in the function's bytecode, in bytes "
               "(as dis shows it)"),
    "thread": ("threads", "", "threads the node ran in"),
    "file": ("file", "", "file:line"),
}
# What adds up from children into a parent (tree views); the rest belongs to
# the node alone.
SUMMED = ("time", "cpu", "samples", "bytes", "net-bytes", "peak-bytes", "allocs", "native-bytes",
          "temp-allocs", "running", "awaiting")
# select/order-by name -> metric in Node.own / Node.total and which of the two
SELF_OF = {"self-time": "time", "self-samples": "samples", "self-bytes": "bytes"}
EDGE_KINDS = ("callers", "callees", "caller", "callee")


@dataclass
class Options:
    """Options shared by every view (see docs/views.md)."""

    select: tuple = ()
    order_by: str | None = None
    min_time: float = 0.0
    min_calls: int = 0
    min_bytes: int = 0
    min_samples: int = 0
    max_depth: int | None = None
    start: tuple = ()
    trim: tuple = ()
    show: tuple = ()
    hide: tuple = ()
    account_displayed_only: bool = False
    thread: tuple = ()
    process: tuple = ()
    step: str | None = None
    limit: int | None = None


@dataclass
class Node:
    name: str
    file: str = ""
    line: int = 0
    kind: str = "function"
    own: dict = field(default_factory=dict)      # summed metrics of the node itself
    fixed: dict = field(default_factory=dict)    # calls, hits, occurrence, thread, peak...
    children: dict = field(default_factory=dict)
    total: dict = field(default_factory=dict)    # filled by accounting
    shown: bool = True
    source: str | None = None                    # lines: the line's text


# ---------------------------------------------------------------- entry points
def view(session, name: str, options: Options | None = None, **kw):
    """The view `name` of `session` as plain data: tree views give a dict
    {"view", "columns", "roots": [node...]} where each node has "name", "file",
    "line", "kind", its columns and "children"; flat views the same with
    "rows" instead of "roots". Raises PyprofError on bad options."""
    opts = _options(options, kw)
    _SOURCES.clear()
    # trees are walked recursively and are as deep as the program's recursion
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50000))
    try:
        nodes, columns, tree = _build(session, name, opts)
        rows = _display(nodes, columns, opts, tree, accounted=name in ("code", "scope"))
    finally:
        sys.setrecursionlimit(limit)
    key = "roots" if tree else "rows"
    return {"view": name, "columns": columns, key: rows, "filters": _filters_text(opts)}


def check_options(options: Options, session=None) -> None:
    """Validate names and regexes before any work (clear one-line errors)."""
    for col in options.select:
        if col not in COLUMNS:
            raise PyprofError(f"unknown column {col!r} (choose from {', '.join(COLUMNS)})")
    if options.order_by is not None and options.order_by not in (*COLUMNS, "name"):
        raise PyprofError(f"unknown sort key {options.order_by!r} (choose from name, "
                          f"{', '.join(c for c in COLUMNS if COLUMNS[c][1])})")
    for opt in ("start", "trim", "show", "hide", "thread"):
        for rx in getattr(options, opt):
            try:
                re.compile(rx)
            except re.error as e:
                raise PyprofError(f"--{opt} {rx!r} is not a valid regular expression "
                                  f"({e})") from None
    for opt in ("min_time", "min_calls", "min_bytes", "min_samples"):
        if getattr(options, opt) < 0:
            raise PyprofError(f"--{opt.replace('_', '-')} must be >= 0")
    if options.max_depth is not None and options.max_depth < 1:
        raise PyprofError("--max-depth must be >= 1")


def _options(options, kw) -> Options:
    opts = dataclasses.replace(options) if options else Options()      # ours to change
    for k, v in kw.items():
        if not hasattr(opts, k):
            raise TypeError(f"unknown view option {k!r}")
        if k in ("select", "start", "trim", "show", "hide", "thread", "process") \
                and isinstance(v, (str, int)):
            v = (v,)
        setattr(opts, k, tuple(v) if isinstance(v, list) else v)
    check_options(opts)
    return opts


# ---------------------------------------------------------------- building
def _scope(session, opts):
    """The Session the options ask for (steps) and the thread indices (threads)."""
    if opts.step is not None:
        session = session.steps_session(session.select_steps(opts.step))
    threads = None
    if opts.thread:
        rxs = [re.compile(t) for t in opts.thread]
        threads = {i for i, t in session.threads.items()
                   if any(t.name == rx.pattern or rx.search(t.name) for rx in rxs)}
        if not threads:
            names = ", ".join(sorted({t.name for t in session.threads.values()}))
            raise PyprofError(f"--thread {' '.join(opts.thread)}: no thread matches "
                              f"(threads: {names or 'none'})")
    if opts.process:
        chosen = set()
        for i in process_indices(session, opts.process):
            chosen |= session.process_threads(i)
        threads = chosen if threads is None else threads & chosen
    return session, threads


def process_indices(session, specs) -> list:
    """The indices of the processes named by `specs`: a pid, or rR (rank R of
    an MPI run). PyprofError naming the processes when one matches none."""
    records = session.processes
    out = []
    for spec in specs:
        text = str(spec).strip()
        found = [i for i, r in enumerate(records) if str(r.get("pid")) == text]
        m = re.fullmatch(r"(?:r|rank)(\d+)", text)
        if not found and m:
            found = [i for i, r in enumerate(records) if isinstance(r.get("mpi"), dict)
                     and r["mpi"].get("rank") == int(m.group(1))]
        if not found:
            names = ", ".join(str(r.get("pid")) + (f" (r{r['mpi']['rank']})"
                                                   if isinstance(r.get("mpi"), dict) else "")
                              for r in records)
            raise PyprofError(f"--process {text}: no such process in this capture "
                              f"(processes: {names or 'none'})")
        out += [i for i in found if i not in out]
    return out


def _sources(session) -> dict:
    """Which figures the capture has."""
    return {"trace": bool(session.fstats) and not session.info.get("sampling"),
            "paths": bool(session.paths),
            "sample": bool(session.info.get("sampling")),
            "memory": bool(session.info.get("memory")),
            "lines": bool(session.info.get("lines"))}


def available_columns(session, name) -> list:
    src = _sources(session)
    cols = []
    if name == "lines":
        if src["lines"]:
            cols += ["hits", "time"]
        if src["sample"]:
            cols += ["samples", "self-samples", "time", "self-time", "cpu"]
        if src["memory"]:
            cols += ["bytes", "net-bytes", "peak-bytes", "allocs", *_memory_extra_columns(session)]
            if session.line_memory:
                cols.append("self-bytes")
    elif name == "memory":
        if src["memory"]:
            cols += ["bytes", "net-bytes", "peak-bytes", "allocs", *_memory_extra_columns(session)]
    elif name in ("opcodes", "specialization"):
        if src["sample"]:
            cols += ["samples", "self-samples", "time", "self-time"]
        if src["lines"]:
            cols += ["hits", "time"]
        cols += ["opcode", "base-opcode", "specialization", "col-start", "col-end", "offset"]
    elif name == "tasks":
        if session.tasks:
            cols += ["running", "awaiting", "coroutine", "created", "state"]
            if src["sample"]:
                cols.append("samples")
                if session.info["sampling"].get("mode") != "wall":
                    cols.remove("awaiting")
            else:
                cols.append("steps")
        return cols + ["thread"] if cols else []
    else:
        if src["trace"] and (name != "code" or src["paths"]):
            cols += ["calls", "time", "self-time", "per-call"]
            if name == "op" and session.coroutines:
                cols.append("awaiting")
        if src["sample"]:
            cols += ["samples", "self-samples", "time", "self-time", "cpu"]
        if src["memory"] and (name != "code" or session.memory_stacks):
            cols += ["bytes", "self-bytes", "net-bytes", "allocs"]
            if name in ("op", "scope"):
                cols.append("peak-bytes")
        if name in ("op", "scope", "graph"):
            cols.append("occurrence")
    cols += ["thread", "file"] if name not in ("memory", "scope") else ["file"]
    return list(dict.fromkeys(cols))


def _memory_extra_columns(session) -> list:
    """The memory columns of --native-allocs and --temporary, when recorded."""
    mem = session.info.get("memory") or {}
    return (["native-bytes"] if mem.get("native_allocs") else []) + (
        ["temp-allocs"] if mem.get("temporary") else [])


def _default_select(available, name) -> list:
    order = {"lines": ["hits", "samples", "time", "self-time", "bytes", "net-bytes",
                       "self-bytes", "native-bytes", "temp-allocs"],
             "memory": ["bytes", "net-bytes", "peak-bytes", "allocs", "native-bytes",
                        "temp-allocs"],
             "tasks": ["coroutine", "created", "running", "awaiting", "samples", "steps",
                       "state"],
             "opcodes": ["self-samples", "samples", "hits", "self-time", "time", "opcode",
                         "base-opcode", "specialization", "col-start", "col-end"],
             "specialization": ["self-samples", "hits", "self-time", "time", "opcode",
                                "specialization"]}.get(
        name, ["calls", "samples", "time", "self-time", "awaiting", "bytes", "net-bytes",
               "occurrence"])
    if name == "op":
        order.append("peak-bytes")
    return [c for c in order if c in available]


def _build(session, name, opts):
    if name not in VIEWS:
        raise PyprofError(f"unknown view {name!r} (choose from {', '.join(VIEWS)})")
    session, threads = _scope(session, opts)
    available = available_columns(session, name)
    if name == "tasks" and not available:
        raise PyprofError("this capture has no asyncio tasks (record with --async; "
                          "docs/async.md)")
    if name in ("opcodes", "specialization"):
        from .opcodes import NOT_SAMPLED, require
        require(session)
        if name == "specialization" and not session.info.get("sampling"):
            raise PyprofError(NOT_SAMPLED)
    select = list(opts.select) or _default_select(available, name)
    for col in select:
        if col not in available:
            raise PyprofError(f"column {col!r} is not in this capture's {name} view "
                              f"(available: {', '.join(available)})")
    if not any(COLUMNS[c][1] for c in select):
        raise PyprofError(f"the {name} view of this capture has no figures to show "
                          f"(available: {', '.join(available) or 'none'})")
    # an instruction's own time first: a call's total is its callee's
    first = ("self-time",) if name in ("opcodes", "specialization") else ()
    order = opts.order_by or next((c for c in (*first, "time", "running", "samples", "bytes",
                                               "hits", "calls")
                                   if c in available), select[0])
    if order != "name" and order not in available:
        raise PyprofError(f"sort key {order!r} is not in this capture's {name} view "
                          f"(available: {', '.join(available)})")
    opts.order_by = order
    builder = {"code": _code, "op": op_nodes, "scope": _scope_view, "graph": _graph,
               "lines": line_nodes, "memory": _memory, "tasks": task_nodes,
               "opcodes": opcode_nodes, "specialization": specialization_nodes}[name]
    nodes = builder(session, threads)
    return nodes, select, name in TREE_VIEWS


def _thread_names(session, indices) -> str:
    return ", ".join(sorted({session.threads[t].name for t in indices
                             if t in session.threads}))


def _fn_node(session, fid, kind=None) -> Node:
    f = session.functions[fid]
    return Node(f.qualname, f.filename if f.kind == "python" else "",
                f.line if f.kind == "python" else 0, kind or f.kind)


def _cpu_states(session) -> set:
    """States whose samples used a CPU: all of them in CPU mode."""
    if session.info.get("sampling", {}).get("mode") == "cpu":
        return set(range(len(STATES)))
    return {STATES.index("python"), STATES.index("native")}


def _sampled(session, threads):
    """(thread, Python frames root first, on a CPU?, samples, seconds) of each
    sampled stack of the given threads."""
    cpu = _cpu_states(session)
    interval = session.info.get("sampling", {}).get("interval_ns", 0) / 1e9
    for (t, sid, state), c in session.samples.items():
        if threads is not None and t not in threads:
            continue
        frames = session.stacks[sid].frames
        if frames:
            yield t, frames, state in cpu, c.count, (c.weight / 1e9 if c.weight
                                                      else c.count * interval)


def _add(d, key, value):
    d[key] = d.get(key, 0) + value


def _code(session, threads) -> dict:
    """Root children: the call tree merged from every source the capture has."""
    root = Node("", kind="root")
    seen_threads: dict = {}

    def child(parent, fid):
        n = parent.children.get(fid)
        if n is None:
            n = parent.children[fid] = _fn_node(session, fid)
        return n

    if session.paths:
        def copy(src, dst):
            for fid, c in src.children.items():
                n = child(dst, fid)
                _add(n.fixed, "calls", c.calls)
                _add(n.own, "time", session.seconds(c.own))
                seen_threads.setdefault(id(n), set()).update(c.threads)
                copy(c, n)
        copy(session.call_tree(threads), root)
    for t, frames, on_cpu, count, secs in _sampled(session, threads):
        node = root
        for fid, _ in frames:
            node = child(node, fid)
            seen_threads.setdefault(id(node), set()).add(t)
        _add(node.own, "samples", count)
        _add(node.own, "time", secs)
        if on_cpu:
            _add(node.own, "cpu", secs)
    if session.info.get("memory") and session.memory_stacks:
        for sid, c in session.memory_by_stack.items():
            frames = session.memory_stacks.get(sid)
            if not frames:
                continue
            node = root
            for fid, _ in frames:
                node = child(node, fid)
            _add(node.own, "bytes", c.alloc_bytes)
            _add(node.own, "net-bytes", c.net_bytes)
            _add(node.own, "allocs", c.alloc_count)

    def finish(n):
        ts = seen_threads.get(id(n))
        if ts:
            n.fixed["thread"] = _thread_names(session, ts)
        for c in n.children.values():
            finish(c)
    finish(root)
    return root.children


def _function_samples(session, threads):
    """fid -> (inclusive samples, self samples, inclusive s, self s, cpu s,
    threads), each stack counted once per function."""
    out: dict = {}
    for t, frames, on_cpu, count, secs in _sampled(session, threads):
        for fid in dict.fromkeys(f for f, _ in frames):
            r = out.setdefault(fid, [0, 0, 0.0, 0.0, 0.0, set()])
            r[0] += count
            r[2] += secs
            r[4] += secs if on_cpu else 0.0
            r[5].add(t)
        leaf = frames[-1][0]
        out[leaf][1] += count
        out[leaf][3] += secs
    return out


def op_nodes(session, threads) -> dict:
    nodes: dict = {}

    def node(fid):
        n = nodes.get(fid)
        if n is None:
            n = nodes[fid] = _fn_node(session, fid)
            n.total = {}
        return n

    if not session.info.get("sampling"):
        for fid, c in session.function_totals(threads).items():
            n = node(fid)
            n.fixed["calls"] = c.calls
            n.total["time"] = session.seconds(c.total)
            n.own["time"] = session.seconds(c.own)
        ran: dict = {}
        for (t, fid) in session.fstats:
            if threads is None or t in threads:
                ran.setdefault(fid, set()).add(t)
        for fid, ts in ran.items():
            if fid in nodes:
                nodes[fid].fixed["thread"] = _thread_names(session, ts)
        # coroutines (docs/async.md): called once each, however often they
        # resumed; awaiting is their wall time less the time they ran
        for fid, c in session.coroutines.items():
            if fid in nodes and c.instances:
                n = nodes[fid]
                n.fixed["calls"] = c.instances
                wall = session.seconds(c.wall + c.open_wall)
                n.total["awaiting"] = max(0.0, wall - n.total.get("time", 0.0))
        contexts: dict = {}         # fid -> distinct chains of callers (or callers)
        if session.paths:
            tree = session.call_tree(threads)
            stack = list(tree.children.values())
            while stack:
                n = stack.pop()
                _add(contexts, n.fid, 1)
                stack.extend(n.children.values())
        else:
            for (_, callee), _c in session.edge_totals(threads).items():
                _add(contexts, callee, 1)
        for fid, n in nodes.items():
            n.fixed["occurrence"] = contexts.get(fid, 1)
    else:
        for fid, (inc, own, inc_s, own_s, cpu_s, ts) in _function_samples(session,
                                                                           threads).items():
            n = node(fid)
            n.total.update(samples=inc, time=inc_s, cpu=cpu_s)
            n.own.update(samples=own, time=own_s)
            n.fixed["thread"] = _thread_names(session, ts)
        callers: dict = {}
        for _, fr, _, _, _ in _sampled(session, threads):
            for (a, _), (b, _) in zip(fr, fr[1:]):
                callers.setdefault(b, set()).add(a)
        for fid, n in nodes.items():
            n.fixed["occurrence"] = max(1, len(callers.get(fid, ())))
    if session.info.get("memory"):
        peaks = session.function_peaks()
        for fid, c in session.memory_functions().items():
            n = node(fid)
            n.own.update(bytes=c.alloc_bytes)
            n.total.update(bytes=c.alloc_bytes, allocs=c.alloc_count)
            n.total["net-bytes"] = c.net_bytes
            n.total["peak-bytes"] = peaks.get(fid, (c.peak_bytes, 0))[0]
            n.fixed.setdefault("occurrence", 1)
    for n in nodes.values():
        for k, v in n.own.items():
            n.total.setdefault(k, v)
    return nodes


def module_of(filename, session=None) -> str:
    """A dotted module name for a source file: relative to site-packages or the
    standard library when under them, else to the program's directory."""
    path = os.path.normpath(filename)
    parts = path.split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rel = parts[len(parts) - parts[::-1].index(marker):]
            return _dotted(rel)
    stdlib = os.path.dirname(os.__file__)
    if path.startswith(stdlib + os.sep):
        return _dotted(os.path.relpath(path, stdlib).split(os.sep))
    base = ""
    if session is not None:
        argv = session.meta.get("argv") or []
        cwd = session.meta.get("cwd") or ""
        if argv and argv[0] not in ("-c", "-m") and argv[0].endswith(".py"):
            base = os.path.dirname(os.path.join(cwd, argv[0]))
        else:
            base = cwd
    if base and path.startswith(os.path.normpath(base) + os.sep):
        return _dotted(os.path.relpath(path, base).split(os.sep))
    if filename.startswith("<"):
        return filename
    return _dotted([os.path.basename(path)])


def _dotted(parts) -> str:
    parts = list(parts)
    last = parts[-1]
    for suffix in (".py", ".pyw", ".pyx"):
        if last.endswith(suffix):
            last = last[:-len(suffix)]
    parts[-1] = last
    if last == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)




def scope_path(session, fid) -> list:
    """[(name, kind)...] from the outermost package down to the function:
    kinds "module" (packages and modules), "class", "function"."""
    f = session.functions[fid]
    if f.kind != "python":
        m = BUILTIN_METHOD.fullmatch(f.name)
        if m:
            mod, _, cls = m.group(2).rpartition(".")
            return ([(p, "module") for p in (mod or "builtins").split(".")]
                    + [(cls, "class"), (m.group(1), "function")])
        m = BUILTIN_FUNC.fullmatch(f.name)
        if m:
            *mod, name = m.group(1).split(".")
            return [(p, "module") for p in (mod or ["builtins"])] + [(name, "function")]
        return [("builtins", "module"), (f.qualname, "function")]
    module = [(p, "module") for p in module_of(f.filename, session).split(".")]
    quals = [q for q in f.qualname.split(".") if q != "<locals>"]
    # a qualname's inner parts are classes or enclosing functions
    inner = [(q, "function" if f"{q}.<locals>" in f.qualname else "class") for q in quals[:-1]]
    return module + inner + [(quals[-1], "function")]


def _scope_view(session, threads) -> dict:
    ops = op_nodes(session, threads)
    roots: dict = {}
    for fid, leaf in ops.items():
        path = scope_path(session, fid)
        level = roots
        for part, kind in path[:-1]:
            n = level.get((part, kind))
            if n is None:
                n = level[(part, kind)] = Node(part, kind=kind)
                n.fixed["occurrence"] = 0
            n.fixed["occurrence"] += 1          # functions defined in the scope
            level = n.children
        # A function's part of its scope is what its own code did: self time,
        # self samples, the bytes its lines allocated.
        for metric in ("bytes", "allocs", "net-bytes", "peak-bytes"):
            if metric in leaf.total:
                leaf.own[metric] = leaf.total[metric]
        leaf.total = {}
        leaf.fixed["occurrence"] = 1
        leaf.name = path[-1][0]
        key = (leaf.name, "function")
        holder = level.get(key)
        if holder is None:
            level[key] = leaf
        elif holder.kind == "function" and holder.file == "" and not holder.own:
            # the scope of functions nested in this one, made first: it is this one
            leaf.children = holder.children
            leaf.fixed["occurrence"] += holder.fixed.get("occurrence", 0)
            level[key] = leaf
        else:                       # another function of the same name (lambdas...)
            level[(leaf.name, fid)] = leaf
    return roots


def _graph(session, threads) -> dict:
    """Function nodes with two groups under each: its callers and its callees."""
    ops = op_nodes(session, threads)
    if not session.info.get("sampling"):
        pairs = {k: (c.calls, session.seconds(c.total), session.seconds(c.own))
                 for k, c in session.edge_totals(threads).items()}
    else:
        pairs = {}
        for _, fr, _, count, secs in _sampled(session, threads):
            for a, b in {(a, b) for (a, _), (b, _) in zip(fr, fr[1:])}:
                r = pairs.setdefault((a, b), [0, 0.0, 0.0])
                r[0] += count
                r[1] += secs
    for fid, n in ops.items():
        n.own = {k: v for k, v in n.own.items()}
        groups = {}
        for (a, b), fig in pairs.items():
            if fid not in (a, b):
                continue
            side = "callers" if b == fid else "callees"
            other = a if side == "callers" else b
            g = groups.get(side)
            if g is None:
                g = groups[side] = Node(f"[{side}]", kind=side)
            e = _fn_node(session, other, kind=side[:-1])
            if session.info.get("sampling"):
                e.total = {"samples": fig[0], "time": fig[1]}
            else:
                e.fixed["calls"] = fig[0]
                e.total = {"time": fig[1], "self-time": fig[2]}
                e.own = {"time": fig[2]}
            g.children[(other, side)] = e
        n.children = groups
    return ops


_SOURCES: dict = {}     # filename -> lines, for one view (cleared by view())


def _source_line(filename, line):
    """The text of a line (None if unknown). Each file is read once per view: a
    missing file would otherwise be looked for again at every line."""
    lines = _SOURCES.get(filename)
    if lines is None:
        lines = _SOURCES[filename] = read_source(filename, None)[0]
    return (lines[line - 1].strip() or None) if 0 < line <= len(lines) else None


def line_nodes(session, threads) -> dict:
    rows: dict = {}

    def row(fid, line):
        n = rows.get((fid, line))
        if n is None:
            f = session.functions[fid]
            n = rows[(fid, line)] = Node(f"{f.qualname}:{line}", f.filename, line, "line")
            n.total = {}
            n.source = _source_line(f.filename, line)
        return n

    if session.info.get("lines"):
        for (fid, line), c in session.line_totals(threads).items():
            n = row(fid, line)
            n.fixed["hits"] = c.hits
            n.total["time"] = session.seconds(c.time)
    for _, frames, on_cpu, count, secs in _sampled(session, threads):
        for fid, line in dict.fromkeys(frames):
            n = row(fid, line)
            _add(n.total, "samples", count)
            _add(n.total, "time", secs)
            if on_cpu:
                _add(n.total, "cpu", secs)
        n = row(*frames[-1])
        _add(n.own, "samples", count)
        _add(n.own, "time", secs)
    if session.info.get("memory"):
        for (fid, line), c in session.memory_lines().items():
            n = row(fid, line)
            n.total.update({"bytes": c.alloc_bytes, "net-bytes": c.net_bytes,
                            "peak-bytes": c.peak_bytes, "allocs": c.alloc_count})
            n.own["bytes"] = c.alloc_bytes
        for (fid, line), e in session.memory_ext_lines().items():
            _extra(row(fid, line).total, e, session)
        # line targets: callees included, as their time (docs/memory.md)
        for (fid, line), c in session.line_memory_totals(threads).items():
            n = row(fid, line)
            n.total.update({"bytes": c.alloc_bytes, "net-bytes": c.net_bytes,
                            "peak-bytes": c.peak_bytes, "allocs": c.alloc_count})
            n.own.setdefault("bytes", 0)
    return rows


def _memory(session, threads) -> dict:
    rows = {}
    for (fid, line, kind), c in session.memory.items():
        if kind == "line":
            f = session.functions[fid]
            n = Node(f"{f.qualname}:{line}", f.filename, line, "line")
            n.source = _source_line(f.filename, line)
        else:
            n = Node(f"[{kind}]", kind="site")
        n.total = {"bytes": c.alloc_bytes, "net-bytes": c.net_bytes,
                   "peak-bytes": c.peak_bytes, "allocs": c.alloc_count}
        _extra(n.total, session.memory_ext.get((fid, line, kind)), session)
        rows[(fid, line, kind)] = n
    return rows


def _extra(total, e, session) -> None:
    """A memory row's native bytes and temporary blocks, where recorded."""
    mem = session.info.get("memory") or {}
    if mem.get("native_allocs"):
        total["native-bytes"] = e.native_alloc_bytes if e else 0
    if mem.get("temporary"):
        total["temp-allocs"] = e.temp_count if e else 0


# ---------------------------------------------------------------- filtering
def _where(session, fid, line=None) -> str:
    if fid is None or fid not in session.functions:
        return ""
    f = session.functions[fid]
    where = f"{f.filename}:{f.line if line is None else line}" if f.filename else ""
    return f"{f.qualname} ({where})" if where and line is None else where


def task_nodes(session, threads) -> dict:
    """One node per asyncio task (--async sampling): its name, its coroutine,
    where it was created, running and awaiting seconds, samples, state."""
    nodes = {}
    for i, t in enumerate(session.tasks):
        if threads is not None and t.thread not in threads:
            continue
        label = session.functions[t.fid].name
        name = label[6:-1] if label.startswith("<task ") and label.endswith(">") else label
        f = session.functions.get(t.coro_fid) if t.coro_fid is not None else None
        n = Node(name, f.filename if f else "", f.line if f else 0, "task")
        n.total = {"running": t.running / 1e9, "awaiting": t.awaiting / 1e9,
                   "samples": t.samples}
        n.fixed = {"coroutine": _where(session, t.coro_fid),
                   "created": _where(session, *t.created) if t.created else "",
                   "state": t.state,
                   "thread": _thread_names(session, [t.thread]) if t.thread is not None else ""}
        if t.steps is not None:
            n.fixed["steps"] = t.steps
        nodes[i] = n
    return nodes


def _insn_node(session, i) -> Node:
    f = session.functions[i.fid]
    line = i.line if i.line is not None else 0
    n = Node(f"{f.qualname}:{line}", f.filename, line, "instruction")
    n.source = i.fragment
    if session.info.get("sampling"):
        n.total = {"samples": i.total_samples, "time": i.total_weight}
        n.own = {"samples": i.samples, "time": i.weight}
    else:
        n.total = {"time": i.time}
        n.fixed["hits"] = i.hits
    n.fixed.update({"opcode": i.opcode, "base-opcode": i.base, "specialization": i.state,
                    "col-start": i.col, "col-end": i.end_col, "offset": i.offset})
    return n


def opcode_nodes(session, threads) -> dict:
    """One node per instruction and opcode as it ran (--opcodes)."""
    from .opcodes import instructions
    return {(i.fid, i.offset, i.opcode): _insn_node(session, i)
            for i in instructions(session, threads)}


def specialization_nodes(session, threads) -> dict:
    """The hottest lines (--opcodes), each with the instructions that ran
    generic there (adaptive: of a family that specializes, not specialized)."""
    from .opcodes import specialization_report
    nodes = {}
    for r in specialization_report(session, threads, top=1 << 30):
        f = session.functions[r.fid]
        n = Node(f"{f.qualname}:{r.line}", f.filename, r.line, "line")
        n.source = r.source
        n.own = {"samples": r.samples, "time": r.seconds} if session.info.get("sampling") \
            else {"time": r.seconds}
        n.total = {"samples": r.total_samples, "time": r.total_seconds} \
            if session.info.get("sampling") else dict(n.own)
        if not session.info.get("sampling"):
            n.fixed["hits"] = r.hits
        n.children = {(i.offset, i.opcode): _insn_node(session, i) for i in r.generic}
        nodes[(r.fid, r.line)] = n
    return nodes


def _matches(rxs, node) -> bool:
    return any(rx.search(node.name) or (node.file and rx.search(node.file)) for rx in rxs)


def node_value(node, col):
    """The node's figure for a column; None where the node has none (a scope
    has no calls, a caller group no figures)."""
    if node.kind in ("callers", "callees"):
        return None
    if col in SELF_OF:
        if node.kind in ("module", "class"):
            return None                 # a scope has no code of its own
        return node.own.get(SELF_OF[col], 0 if SELF_OF[col] in node.total else None)
    if col == "per-call":
        calls = node.fixed.get("calls")
        return node.total.get("time", 0) / calls if calls else None
    if col in SUMMED:
        return node.total.get(col)
    if col == "file":
        return f"{node.file}:{node.line}" if node.file else ""
    if col == "thread":
        return node.fixed.get("thread", "")
    return node.fixed.get(col)


def _display(nodes: dict, columns, opts, tree, accounted):
    rx = {k: [re.compile(r) for r in getattr(opts, k)]
          for k in ("start", "trim", "show", "hide")}

    # 1. which nodes the name filters display (start/trim/show/hide)
    def mark(n, started, parent_shown=True):
        if n.kind in EDGE_KINDS:            # a graph's callers/callees: with their function
            n.shown = parent_shown
            for c in n.children.values():
                mark(c, started, parent_shown)
            return
        started = started or not rx["start"] or _matches(rx["start"], n)
        trimmed = bool(rx["trim"]) and _matches(rx["trim"], n)
        n.shown = (started and not trimmed and (not rx["show"] or _matches(rx["show"], n))
                   and not (rx["hide"] and _matches(rx["hide"], n)))
        if trimmed:
            _hide_all(n)
            return
        for c in n.children.values():
            mark(c, started, n.shown)

    for n in nodes.values():
        mark(n, False)

    # 2. totals: a node's own figures plus its children's totals (only the
    # displayed ones with account_displayed_only)
    def account(n):
        for c in n.children.values():
            account(c)
        counted = n.shown or not opts.account_displayed_only
        total = {k: v for k, v in n.own.items() if k in SUMMED} if counted else {}
        for c in n.children.values():
            for k, v in c.total.items():
                total[k] = total.get(k, 0) + v
        n.total = total

    if accounted:
        for n in nodes.values():
            account(n)

    # 3. thresholds, then depth, on what is displayed
    def passes(n):
        """Thresholds; a node without a figure is not judged by its threshold."""
        if n.kind in EDGE_KINDS:
            return n.shown
        return (n.total.get("time", n.total.get("running", opts.min_time)) >= opts.min_time
                and n.fixed.get("calls", opts.min_calls) >= opts.min_calls
                and n.total.get("bytes", opts.min_bytes) >= opts.min_bytes
                and n.total.get("samples", opts.min_samples) >= opts.min_samples)

    order = opts.order_by

    def sort_key(n):
        if order == "name" or n.kind in ("callers", "callees"):
            return (0, n.name)
        v = node_value(n, order)
        if v is None:
            v = 0
        return (1, -v if isinstance(v, (int, float)) else v, n.name)

    def emit(n, depth):
        """The displayed nodes at or below n (n hidden: its displayed descendants)."""
        visible = n.shown and passes(n)
        kids = []
        for c in n.children.values():
            kids.extend(emit(c, depth + (1 if visible else 0)))
        kids.sort(key=lambda r: r["_sort"])
        if not visible:         # its displayed descendants move up (not its callers/callees)
            return [k for k in kids if k["kind"] not in EDGE_KINDS]
        if opts.max_depth is not None and depth > opts.max_depth:
            return []
        row = _row(n, columns)
        row["_sort"] = sort_key(n)
        if tree:
            row["children"] = kids
        return [row]

    out = []
    for n in nodes.values():
        out.extend(emit(n, 1))
    out.sort(key=lambda r: r["_sort"])
    if opts.limit is not None:
        out = out[:opts.limit]
    _strip(out)
    return out


def _hide_all(n):
    n.shown = False
    for c in n.children.values():
        _hide_all(c)


def _row(n, columns) -> dict:
    row = {"name": n.name, "file": n.file, "line": n.line, "kind": n.kind}
    if n.source is not None:
        row["source"] = n.source
    for col in columns:
        if col != "file":
            v = node_value(n, col)
            row[col] = round(v, 9) if COLUMNS[col][1] == "s" and v is not None else v
    return row


def _strip(rows):
    for r in rows:
        r.pop("_sort", None)
        _strip(r.get("children", ()))


def flatten(rows, depth=0, path=()):
    for r in rows:
        p = (*path, r["name"])
        yield depth, p, r
        yield from flatten(r.get("children", ()), depth + 1, p)


def _filters_text(opts) -> str:
    parts = []
    for k in ("start", "trim", "show", "hide", "thread", "process"):
        for v in getattr(opts, k):
            parts.append(f"--{k} {v}")
    for k, unit in (("min_time", "s"), ("min_calls", ""), ("min_bytes", ""),
                    ("min_samples", "")):
        v = getattr(opts, k)
        if v:
            parts.append(f"--{k.replace('_', '-')} {v:g}{unit}")
    if opts.max_depth is not None:
        parts.append(f"--max-depth {opts.max_depth}")
    if opts.step is not None:
        parts.append(f"--step {opts.step}")
    if opts.account_displayed_only:
        parts.append("--account-displayed-only")
    return " ".join(parts)
