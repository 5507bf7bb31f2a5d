"""The data model: one Session per capture, read from a .cprof file or a live profiler.

A Session holds what the C core captured, keyed the way the core keys it:

- ``functions``: function id -> :class:`Function` (where it is and what it is called);
- ``threads``: thread index -> :class:`Thread`;
- ``fstats``: (thread index, function id) -> :class:`Counters`;
- ``edges``: (thread index, caller id, callee id) -> :class:`Counters`;
- ``timeline``: with a timeline, (thread index, function id, start ns, duration ns)
  per kept call;
- ``info``: what the core says about the capture (clock, time unit, events...);
- ``meta``: what the Python side added (command line, pid, host, thread names...).

Times are kept as the integers the core wrote, in ``time_unit`` seconds each, so a
Session round-trips through the file without loss; :meth:`Session.seconds`
converts. Every view and export reads a Session and nothing else.

The file format is model/codec.py's (docs/capture-format.md); the tables are listed
once, in model/tables.py.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ..errors import PyprofError
from . import codec
from .tables import (KINDS, MAX_DEPTH, MEMORY_SITES, NAME_TABLE_MODES, NO_FUNCTION,  # noqa: F401
                     ROOT_PATH,
                     STATES, TABLES, CallRow, Counters, Function, LineCounters, LineMemory,
                     CoroCounters, MemCounters, MemExtra,
                     MemPoint, PathNode, SampleCounters, Stack, Step, Table, TaskRow, Thread,
                     TreeNode)


@dataclass
class Session:
    info: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    functions: dict = field(default_factory=dict)
    threads: dict = field(default_factory=dict)
    fstats: dict = field(default_factory=dict)
    edges: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)       # (thread, fid, line) -> LineCounters
    callrows: dict = field(default_factory=dict)    # (thread, fid, line, callee) -> CallRow
    # line mode with memory: (thread, fid, line) -> LineMemory, callees included
    line_memory: dict = field(default_factory=dict)
    stacks: dict = field(default_factory=dict)      # stack id -> Stack
    samples: dict = field(default_factory=dict)     # (thread, stack, state) -> SampleCounters
    memory: dict = field(default_factory=dict)      # (fid, line, site kind) -> MemCounters
    memory_by_stack: dict = field(default_factory=dict)   # stack id -> MemCounters
    memory_stacks: dict = field(default_factory=dict)     # stack id -> ((fid, line), ...) root first
    # with --native: stack id -> (native ips leaf first, indices of entry frames)
    memory_native: dict = field(default_factory=dict)
    memory_rows: list = field(default_factory=list)       # as recorded (what to_blob writes)
    # of those: C code's blocks and temporary ones, as recorded (--native-allocs, --temporary)
    memory_extra: list = field(default_factory=list)
    memory_ext: dict = field(default_factory=dict)  # (fid, line, site kind) -> MemExtra
    fmemory: dict = field(default_factory=dict)     # (thread, fid) -> (peak, residual) bytes
    memory_curve: list = field(default_factory=list)  # MemPoint, in time order
    paths: dict = field(default_factory=dict)       # (thread, path id) -> PathNode
    steps: list = field(default_factory=list)       # Step, in marking order
    tasks: list = field(default_factory=list)       # TaskRow (--async sampling)
    coroutines: dict = field(default_factory=dict)  # fid -> CoroCounters (function tracing)
    # function tracing with asyncio and a timeline: (task row, start ns, duration ns) per step
    task_steps: list = field(default_factory=list)
    # a part of a capture (a step) has the counters of some paths only: the
    # whole capture's paths give the shape of the tree above them
    path_shape: dict = field(default_factory=dict)
    # function mode with a timeline: (thread, fid, start_ns, dur_ns) per kept call,
    # start in ns since profiling started (the memory curve's and steps' origin)
    timeline: list = field(default_factory=list)
    # --opcodes: (thread, fid, offset, opcode, line, end line, column, end column) ->
    # InsnCounters; opcode indexes opcode_names(), positions NO_POSITION where none
    instructions: dict = field(default_factory=dict)
    final: bool = True

    # ------------------------------------------------------------ the file (model/codec.py)
    @classmethod
    def load(cls, path) -> "Session":
        """Read a .cprof file. Raises PyprofError with one clear line on any problem."""
        return codec.read_file(path, cls())

    @classmethod
    def from_blob(cls, blob: bytes, name: str = "<snapshot>") -> "Session":
        """Parse the record stream the C core produces (Profiler.snapshot())."""
        return codec.parse_blob(blob, name, cls())

    def to_blob(self) -> bytes:
        """The record stream of this Session (the inverse of from_blob)."""
        return codec.pack_blob(self)

    def save(self, path) -> None:
        """Write this Session as a .cprof file (atomically)."""
        codec.write_file(path, self)

    # ------------------------------------------------------------ derived tables
    def reindex(self) -> None:
        """Rebuild what is derived from the recorded tables: memory by site and
        by allocation stack (from memory_rows), threads' default names, and
        the steps' shared names."""
        self.memory, self.memory_by_stack, self.memory_ext = {}, {}, {}
        for fid, line, kind, stack, row in self.memory_rows:
            self.memory.setdefault((fid, line, MEMORY_SITES[kind]), MemCounters()).add(row)
            if stack != NO_FUNCTION:
                self.memory_by_stack.setdefault(stack, MemCounters()).add(row)
        for fid, line, kind, stack, row in self.memory_extra:
            self.memory_ext.setdefault((fid, line, MEMORY_SITES[kind]), MemExtra()).add(row)
        names = self.meta.get("thread_names", {})
        for t in self.threads.values():
            t.name = t.name or names.get(str(t.ident)) or f"Thread-{t.ident}"
        for st in self.steps:
            if st.data is not self:
                st.data.adopt(self)
                st.data.reindex()

    def adopt(self, whole: "Session") -> None:
        """Share the names of `whole` (a part of it, like a step's counters)."""
        self.info, self.meta, self.functions = whole.info, whole.meta, whole.functions
        self.threads, self.stacks, self.memory_stacks = whole.threads, whole.stacks, whole.memory_stacks
        self.memory_native = whole.memory_native
        self.path_shape = whole.paths

    def keep_recorded(self) -> None:
        """Empty the tables of modes the info does not have (what a capture
        file keeps of them: nothing), in the steps too."""
        info = self.info
        for table in TABLES:
            if table.mode is not None and not info.get(table.mode):
                getattr(self, table.name).clear()
        for name, mode in NAME_TABLE_MODES.items():
            if not info.get(mode):
                getattr(self, name).clear()
        for st in self.steps:
            if st.data is not self:
                st.data.keep_recorded()

    def add(self, part: "Session") -> None:
        """Add the counters of `part` (a step's, same ids) into this Session."""
        for table in TABLES:
            if not table.step:
                continue
            out, rows = getattr(self, table.name), getattr(part, table.name)
            if table.listed:
                k = len(table.keys)
                out.extend((*r[:k], copy.copy(r[k])) for r in rows)
                continue
            for key, c in rows.items():
                if key in out:
                    out[key].add(c)
                else:
                    out[key] = copy.copy(c)
        self.reindex()

    # ------------------------------------------------------------ queries
    def opcode_names(self) -> tuple:
        """--opcodes: (names, bases, adaptive) of the instructions' opcode
        numbers, as the capturing interpreter names them (meta["opcodes"]):
        the opcode as it ran (specialized, adaptive or instrumented), the
        instruction it stands for, and the families that specialize
        (docs/opcodes.md)."""
        table = self.meta.get("opcodes") or {}
        return (tuple(table.get("names", ())), tuple(table.get("bases", ())),
                frozenset(table.get("adaptive", ())))

    @property
    def time_unit(self) -> float:
        """Seconds per raw time unit (1e-9 for the built-in clocks)."""
        return self.info.get("time_unit", 1e-9)

    def seconds(self, raw: int) -> float:
        """Raw time units to seconds, exactly as cProfile converts them (raw * unit)."""
        return raw * self.time_unit

    def function_totals(self, threads=None) -> dict:
        """function id -> Counters summed over threads (or the given thread indices)."""
        return _totals(self.fstats, Counters, threads)

    def edge_totals(self, threads=None) -> dict:
        """(caller id, callee id) -> Counters summed over threads."""
        return _totals(self.edges, Counters, threads)

    def sample_totals(self, threads=None, states=None) -> dict:
        """stack id -> SampleCounters summed over threads (and the given states)."""
        out: dict = {}
        for (t, st, state), c in self.samples.items():
            if (threads is None or t in threads) and (states is None or state in states):
                out.setdefault(st, SampleCounters()).add(c)
        return out

    def memory_lines(self) -> dict:
        """(fid, line) -> MemCounters for allocations made on Python lines."""
        out: dict = {}
        for (fid, line, kind), c in self.memory.items():
            if kind == "line":
                out.setdefault((fid, line), MemCounters()).add(c)
        return out

    def memory_ext_lines(self) -> dict:
        """(fid, line) -> MemExtra: of memory_lines(), C code's blocks
        (--native-allocs) and the temporary ones (--temporary)."""
        out: dict = {}
        for (fid, line, kind), c in self.memory_ext.items():
            if kind == "line":
                out.setdefault((fid, line), MemExtra()).add(c)
        return out

    def memory_functions(self) -> dict:
        """fid -> MemCounters: the lines of each function added up (its own
        allocations, not those of the functions it calls)."""
        out: dict = {}
        for (fid, line), c in self.memory_lines().items():
            out.setdefault(fid, MemCounters()).add(c)
        return out

    def function_peaks(self) -> dict:
        """fid -> (peak, residual) bytes, with function tracing: peak is the most
        its thread's net bytes rose during one call (callees included), at most
        over threads; residual the change of those net bytes over its calls,
        summed (negative when calls free more than they allocate)."""
        out: dict = {}
        for (t, fid), (peak, residual) in self.fmemory.items():
            p0, r0 = out.get(fid, (0, 0))
            out[fid] = (max(p0, peak), r0 + residual)
        return out

    def call_tree(self, threads=None) -> TreeNode:
        """The calling-context tree of function tracing, summed over threads
        (or the given thread indices): each node is a function reached along one
        chain of callers, with the calls, inclusive and self time spent there.
        Built from the recorded paths (exact), not from caller/callee pairs.
        At most MAX_DEPTH levels: a deeper path's self time is its ancestor's
        at that depth (its calls and total are already within the ancestor's)."""
        root = TreeNode(None)
        nodes: dict = {}            # (thread, path id) -> (TreeNode, depth, capped)

        def node_for(t, pid):
            chain, key = [], (t, pid)
            while key not in nodes:
                p = self.paths.get(key) or self.path_shape.get(key)
                if p is None or len(chain) > len(self.paths) + len(self.path_shape):
                    raise PyprofError(f"path {key[1]} of thread {t} is missing its parent")
                chain.append((key, p.fid))
                if p.parent == ROOT_PATH:
                    parent, depth, capped = root, 0, False
                    break
                key = (t, p.parent)
            else:
                parent, depth, capped = nodes[key]
            for key, fid in reversed(chain):
                if depth >= MAX_DEPTH:
                    capped = True
                else:
                    n = parent.children.get(fid)
                    if n is None:
                        n = parent.children[fid] = TreeNode(fid)
                    parent, depth = n, depth + 1
                nodes[key] = (parent, depth, capped)
            return nodes[(t, pid)]

        for (t, pid), p in self.paths.items():
            if threads is not None and t not in threads:
                continue
            n, _, capped = node_for(t, pid)
            if not capped:
                n.calls += p.calls
                n.total += p.total
            n.own += p.own
            n.threads.add(t)
        root.total = sum(c.total for c in root.children.values())
        return root

    def line_totals(self, threads=None) -> dict:
        """(function id, line) -> LineCounters summed over threads."""
        return _totals(self.lines, LineCounters, threads)

    def line_memory_totals(self, threads=None) -> dict:
        """(function id, line) -> LineMemory (callees included) summed over
        threads; empty without line mode and memory, or from an older capture."""
        return _totals(self.line_memory, LineMemory, threads)

    def callrow_totals(self, threads=None) -> dict:
        """(function id, line, callee id) -> CallRow summed over threads."""
        return _totals(self.callrows, CallRow, threads)

    @property
    def events(self) -> int:
        return self.info.get("events", 0)

    # ------------------------------------------------------------ processes
    # A merged capture (pyprof merge, docs/merge-diff.md) holds several processes;
    # any other capture holds one, process 0, with every thread in it.
    @property
    def processes(self) -> list:
        """One record per process: pid, host, argv, start_wall_ns, file, its own
        sampling/memory info and memory curve (meta["processes"] when merged)."""
        return process_records(self)

    def thread_process(self, thread: int) -> int:
        """The index (into ``processes``) of the process a thread belongs to."""
        return int(self.meta.get("thread_process", {}).get(str(thread), 0))

    def process_threads(self, process: int) -> set:
        """The thread indices of one process, for the ``threads=`` arguments:
        ``session.function_totals(threads=session.process_threads(1))``."""
        return {t for t in self.threads if self.thread_process(t) == process}

    def process_memory_curve(self, process: int) -> list:
        """The memory curve (MemPoint list) of one process."""
        if "processes" not in self.meta:
            return list(self.memory_curve) if process == 0 else []
        return [MemPoint(t, rss, heap, hmax, None if fid is None else (fid, line))
                for t, rss, heap, hmax, fid, line
                in self.meta["processes"][process].get("memory_curve", [])]

    def drop_threads(self, indices) -> None:
        """Forget what the given threads recorded (per-thread tables only:
        memory rows are not per thread)."""
        drop = set(indices)
        for table in TABLES:
            if not table.per_thread:
                continue
            rows = getattr(self, table.name)
            if table.listed:
                rows[:] = [r for r in rows if r[0] not in drop]
            else:
                for key in [k for k in rows if k[0] in drop]:
                    del rows[key]
        for t in drop:
            self.threads.pop(t, None)
        for st in self.steps:
            if st.data is not self:
                st.data.drop_threads(drop)

    def select_steps(self, spec) -> list:
        """The steps named by `spec`: an index N, "N", "A..B" (inclusive), or a
        step name. PyprofError when the capture has no steps or none match."""
        if not self.steps:
            raise PyprofError("this capture has no steps (mark them with pyprof.step())")
        text = str(spec).strip()
        lo = hi = None
        if ".." in text:
            a, _, b = text.partition("..")
            try:
                lo = int(a) if a else self.steps[0].index
                hi = int(b) if b else self.steps[-1].index
            except ValueError:
                lo = None
        elif text.lstrip("-").isdigit():
            lo = hi = int(text)
        chosen = ([st for st in self.steps if lo <= st.index <= hi] if lo is not None
                  else [st for st in self.steps if st.name == text])
        if not chosen:
            last = self.steps[-1].index
            raise PyprofError(f"--step {text}: no such step (this capture has steps "
                              f"{self.steps[0].index}..{last})")
        return chosen

    def steps_session(self, steps) -> "Session":
        """A Session of the counters of `steps` added up (names shared)."""
        out = Session()
        out.adopt(self)
        for st in steps:
            out.add(st.data)
        return out


# Keys of meta that describe one process (everything else describes the program).
_PROCESS_META = ("pid", "host", "argv", "cwd", "executable", "python", "written_at", "modes",
                 "numpy_buffers", "steps", "objects", "mpi", "dask", "ray", "spark")


def process_records(session, source="") -> list:
    """The process records of a Session: a merged one's list, else one record
    made from its meta and info (curve sites as (fid, line) or None)."""
    if "processes" in session.meta:
        return session.meta["processes"]
    meta, info = session.meta, session.info
    record = {"file": source}
    record.update({k: meta[k] for k in _PROCESS_META if k in meta})
    for key in ("start_wall_ns", "snapshot_wall_ns", "duration_ns", "events", "clock", "hook",
                "time_unit", "sampling", "memory"):
        if key in info:
            record[key] = info[key]
    record["final"] = session.final
    if session.memory_curve:
        record["memory_curve"] = [
            [p.t, p.rss, p.heap, p.heap_max, *(p.site if p.site else (None, 0))]
            for p in session.memory_curve]
    return [record]



def _totals(table, counters, threads) -> dict:
    """A per-thread table ({(thread, *key): counters}) summed over threads."""
    out: dict = {}
    for key, c in table.items():
        if threads is None or key[0] in threads:
            rest = key[1] if len(key) == 2 else key[1:]
            out.setdefault(rest, counters()).add(c)
    return out


def load(path) -> Session:
    """Read a .cprof capture file (see Session.load)."""
    return Session.load(path)
