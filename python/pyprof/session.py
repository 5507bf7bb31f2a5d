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

The file format is described in docs/capture-format.md and src/_cprof/capture.h.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field

from .errors import PyprofError

MAGIC = b"\x89CPROF\r\n"
FORMAT_MAJOR = 1
FORMAT_MINOR = 4
_HEADER = struct.Struct("<8sHHIQI")

REC_INFO, REC_META, REC_STRINGS, REC_FUNCTIONS = 1, 2, 3, 4
REC_THREADS, REC_FSTATS, REC_EDGES, REC_LINES, REC_CALLROWS, REC_END = 5, 6, 7, 8, 9, 0xFFFF
REC_STACKS, REC_SAMPLES, REC_MEMORY, REC_FMEMORY, REC_MEMCURVE, REC_MEMSTACKS = (
    10, 11, 12, 13, 14, 15)
REC_PATHS, REC_STEP, REC_TIMELINE = 16, 17, 18
_REC = struct.Struct("<HHI")
_FUNC = struct.Struct("<6I")
_THREAD = struct.Struct("<IIQQQ")
_FSTAT = struct.Struct("<IIQQqq")
_EDGE = struct.Struct("<IIIIQQqq")
_LINE = struct.Struct("<IIIIQq")
_CALLROW = struct.Struct("<IIIIQq")
_SAMPLE = struct.Struct("<IIIIQq")
_MEMROW = struct.Struct("<IIIIQQQQQQ")
_FMEM = struct.Struct("<IIqq")
_MEMPOINT = struct.Struct("<qQQQII")
_PATH = struct.Struct("<IIIIQqq")
_TLEVENT = struct.Struct("<IIqq")
NO_FUNCTION = 0xFFFFFFFF
ROOT_PATH = 0xFFFFFFFE

# Where an allocation was made (docs/memory.md): a Python line, a thread that
# had released the GIL, or a thread holding it with no Python frame running.
MEMORY_SITES = ("line", "gil-released", "no-frame")

_LINE_ENTRY, _LINE_MASK = 0x80000000, 0x7FFFFFFF

# Thread states of a sample (docs/sampling.md).
STATES = ("python", "native", "idle", "other")

KINDS = ("python", "builtin")


@dataclass(frozen=True)
class Function:
    """A profiled function. ``kind`` is "python" or "builtin" (a C function or method)."""

    fid: int
    filename: str
    line: int
    name: str
    qualname: str
    kind: str

    @property
    def pstats_key(self):
        """The key cProfile/pstats uses: (file, first line, name), or ('~', 0, name) for C."""
        if self.kind == "python":
            return (self.filename, self.line, self.name)
        return ("~", 0, self.name)


@dataclass
class Counters:
    """Call counters of a function or an edge, in raw time units.

    ``calls``: activations that ended; ``rec_calls``: those that ended while
    another activation of the same function (or edge) was still open;
    ``total``: inclusive time of outermost activations; ``own``: self time.
    """

    calls: int = 0
    rec_calls: int = 0
    total: int = 0
    own: int = 0

    @property
    def primitive_calls(self):
        return self.calls - self.rec_calls

    def add(self, other: "Counters") -> None:
        self.calls += other.calls
        self.rec_calls += other.rec_calls
        self.total += other.total
        self.own += other.own


@dataclass
class LineCounters:
    """A line of a line target: ``hits`` (line events), ``time`` (raw units,
    callees included, outermost activation only under recursion)."""

    hits: int = 0
    time: int = 0

    def add(self, other: "LineCounters") -> None:
        self.hits += other.hits
        self.time += other.time


@dataclass
class CallRow:
    """Calls made while a line ran: ``calls`` and their inclusive ``time``."""

    calls: int = 0
    time: int = 0

    def add(self, other: "CallRow") -> None:
        self.calls += other.calls
        self.time += other.time


@dataclass(frozen=True)
class Stack:
    """A sampled stack: Python frames as (function id, line), root first; native
    instruction pointers (with --native), leaf first; with native frames, the
    indices of the Python frames that start a C-level call of the interpreter."""

    frames: tuple
    native: tuple = ()
    entries: tuple = ()


@dataclass
class SampleCounters:
    """Samples of one stack in one thread and state: how many, and the time
    they stand for (each sample weighs one sampling interval), in ns."""

    count: int = 0
    weight: int = 0

    def add(self, other: "SampleCounters") -> None:
        self.count += other.count
        self.weight += other.weight


@dataclass
class MemCounters:
    """Blocks allocated at one site and what became of them: bytes and blocks
    allocated, bytes and blocks of those freed while recording; net bytes are
    still live at the end (or were when recording stopped)."""

    alloc_bytes: int = 0
    alloc_count: int = 0
    free_bytes: int = 0
    free_count: int = 0
    peak_bytes: int = 0     # most of the site's bytes live at once (rows added: an upper bound)
    at_peak_bytes: int = 0  # its bytes live when the traced total peaked

    @property
    def net_bytes(self) -> int:
        return self.alloc_bytes - self.free_bytes

    def add(self, other: "MemCounters") -> None:
        self.alloc_bytes += other.alloc_bytes
        self.alloc_count += other.alloc_count
        self.free_bytes += other.free_bytes
        self.free_count += other.free_count
        self.peak_bytes += other.peak_bytes
        self.at_peak_bytes += other.at_peak_bytes


@dataclass(frozen=True)
class MemPoint:
    """A point of the memory curve: seconds since profiling started, resident
    set size, traced live bytes at the point and at most since the previous
    one, and the (function id, line) whose allocation made that most (None)."""

    t: float
    rss: int
    heap: int
    heap_max: int
    site: tuple | None = None


@dataclass
class PathNode:
    """A node of a thread's calling-context tree (function tracing): function
    ``fid`` called along the chain of its ``parent`` paths (ROOT_PATH: called at
    the bottom of the thread's stack). ``calls``, inclusive ``total`` and
    ``own`` time (raw units) of the activations made along exactly this chain."""

    parent: int
    fid: int
    calls: int = 0
    total: int = 0
    own: int = 0


@dataclass
class TreeNode:
    """A node of a merged call tree (see Session.call_tree): a function ``fid``
    (None at the root) with figures and children keyed by function id."""

    fid: int | None
    calls: int = 0
    total: int = 0
    own: int = 0
    children: dict = field(default_factory=dict)
    threads: set = field(default_factory=set)


@dataclass
class Step:
    """A step marked with pyprof.step(): its ``index`` (0-based, in marking
    order), ``name`` (None unless given), ``start`` and ``end`` in seconds since
    profiling started, and ``data``: a Session holding only what was counted
    during the step (its functions, threads and stacks are the whole capture's)."""

    index: int
    name: str | None
    start: float
    end: float
    data: "Session"

    @property
    def label(self) -> str:
        return self.name if self.name else f"step {self.index}"


@dataclass
class Thread:
    index: int
    ident: int
    native_id: int
    events: int
    name: str = ""


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
    stacks: dict = field(default_factory=dict)      # stack id -> Stack
    samples: dict = field(default_factory=dict)     # (thread, stack, state) -> SampleCounters
    memory: dict = field(default_factory=dict)      # (fid, line, site kind) -> MemCounters
    memory_by_stack: dict = field(default_factory=dict)   # stack id -> MemCounters
    memory_stacks: dict = field(default_factory=dict)     # stack id -> ((fid, line), ...) root first
    memory_rows: list = field(default_factory=list)       # as recorded (what to_blob writes)
    fmemory: dict = field(default_factory=dict)     # (thread, fid) -> (peak, residual) bytes
    memory_curve: list = field(default_factory=list)  # MemPoint, in time order
    paths: dict = field(default_factory=dict)       # (thread, path id) -> PathNode
    steps: list = field(default_factory=list)       # Step, in marking order
    # a part of a capture (a step) has the counters of some paths only: the
    # whole capture's paths give the shape of the tree above them
    path_shape: dict = field(default_factory=dict)
    # function mode with a timeline: (thread, fid, start_ns, dur_ns) per kept call,
    # start in ns since profiling started (the memory curve's and steps' origin)
    timeline: list = field(default_factory=list)
    final: bool = True

    # ------------------------------------------------------------ reading
    @classmethod
    def load(cls, path) -> "Session":
        """Read a .cprof file. Raises PyprofError with one clear line on any problem."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise PyprofError(f"cannot read {path}: {e.strerror or e}") from None
        return cls.from_file_bytes(data, path)

    @classmethod
    def from_file_bytes(cls, data: bytes, name: str = "<bytes>") -> "Session":
        if len(data) < _HEADER.size or not data.startswith(MAGIC):
            hint = ""
            if data[:1] in (b"\xfb", b"{"):
                hint = " (it looks like a pstats file: read it with pstats.Stats)"
            elif not data:
                hint = " (the file is empty)"
            raise PyprofError(f"{name} is not a pyprof capture file{hint}")
        _, major, minor, flags, length, crc = _HEADER.unpack_from(data)
        if major > FORMAT_MAJOR:
            raise PyprofError(
                f"{name} was written by a newer pyprof (capture format {major}.{minor}); "
                f"this pyprof reads format {FORMAT_MAJOR}.x: upgrade pyprof")
        try:
            d = zlib.decompressobj()
            blob = d.decompress(data[_HEADER.size:], length + 1)
            if not d.eof:
                raise zlib.error("compressed stream ends early")
        except zlib.error as e:
            raise PyprofError(f"{name} is truncated or corrupt ({e})") from None
        if len(blob) != length or zlib.crc32(blob) != crc:
            raise PyprofError(f"{name} is truncated or corrupt (checksum mismatch)")
        session = cls.from_blob(blob, name)
        session.final = bool(flags & 1)
        return session

    @classmethod
    def from_blob(cls, blob: bytes, name: str = "<snapshot>") -> "Session":
        """Parse the record stream the C core produces (Profiler.snapshot())."""
        s = cls()
        strings: list[str] = []
        mv = memoryview(blob)
        off, end_seen = 0, False
        try:
            while off < len(blob):
                rtype, _, rlen = _REC.unpack_from(blob, off)
                off += _REC.size
                payload = mv[off:off + rlen]
                if len(payload) != rlen:
                    raise ValueError("record runs past the end")
                off += rlen
                if rtype == REC_END:
                    end_seen = True
                    break
                if rtype == REC_INFO:
                    s.info = json.loads(bytes(payload))
                elif rtype == REC_META:
                    s.meta = json.loads(bytes(payload))
                elif rtype == REC_STRINGS:
                    strings = _parse_strings(payload)
                elif rtype == REC_FUNCTIONS:
                    s.functions = {
                        fid: Function(fid, strings[fl], line, strings[nm], strings[qn], KINDS[kind])
                        for fid, fl, line, nm, qn, kind in _rows(_FUNC, payload)}
                elif rtype == REC_THREADS:
                    s.threads = {i: Thread(i, ident, nid, ev, strings[name])
                                 for i, name, ident, nid, ev in _rows(_THREAD, payload)}
                elif rtype == REC_FSTATS:
                    for t, fid, c, rc, tt, it in _rows(_FSTAT, payload):
                        s.fstats[(t, fid)] = Counters(c, rc, tt, it)
                elif rtype == REC_EDGES:
                    for t, a, b, _, c, rc, tt, it in _rows(_EDGE, payload):
                        s.edges[(t, a, b)] = Counters(c, rc, tt, it)
                elif rtype == REC_LINES:
                    for t, fid, line, _, hits, tm in _rows(_LINE, payload):
                        s.lines[(t, fid, line)] = LineCounters(hits, tm)
                elif rtype == REC_CALLROWS:
                    for t, fid, line, callee, calls, tm in _rows(_CALLROW, payload):
                        s.callrows[(t, fid, line, callee)] = CallRow(calls, tm)
                elif rtype == REC_STACKS:
                    s.stacks = _parse_stacks(payload)
                elif rtype == REC_SAMPLES:
                    for t, st, state, _, count, weight in _rows(_SAMPLE, payload):
                        s.samples[(t, st, state)] = SampleCounters(count, weight)
                elif rtype == REC_MEMORY:
                    for fid, line, kind, stack, *counts in _rows(_MEMROW, payload):
                        row = MemCounters(*counts)
                        s.memory_rows.append((fid, line, kind, stack, row))
                        key = (fid, line, MEMORY_SITES[kind])
                        s.memory.setdefault(key, MemCounters()).add(row)
                        if stack != NO_FUNCTION:
                            s.memory_by_stack.setdefault(stack, MemCounters()).add(row)
                elif rtype == REC_MEMSTACKS:
                    s.memory_stacks = _parse_memstacks(payload)
                elif rtype == REC_MEMCURVE:
                    s.memory_curve = [
                        MemPoint(t / 1e9, rss, heap, hmax,
                                 None if fid == NO_FUNCTION else (fid, line))
                        for t, rss, heap, hmax, fid, line in _rows(_MEMPOINT, payload)]
                elif rtype == REC_STEP:
                    s.steps.append(_parse_step(payload, name))
                elif rtype == REC_PATHS:
                    for t, pid, parent, fid, calls, tt, it in _rows(_PATH, payload):
                        s.paths[(t, pid)] = PathNode(parent, fid, calls, tt, it)
                elif rtype == REC_FMEMORY:
                    for t, fid, peak, residual in _rows(_FMEM, payload):
                        s.fmemory[(t, fid)] = (peak, residual)
                elif rtype == REC_TIMELINE:
                    s.timeline = list(_rows(_TLEVENT, payload))
                # Unknown record types come from newer minor versions: skip them.
        except (struct.error, ValueError, IndexError, KeyError, UnicodeDecodeError) as e:
            raise PyprofError(f"{name} is truncated or corrupt ({e})") from None
        if not end_seen:
            raise PyprofError(f"{name} is truncated or corrupt (no end record)")
        names = s.meta.get("thread_names", {})
        for t in s.threads.values():
            t.name = t.name or names.get(str(t.ident)) or f"Thread-{t.ident}"
        for st in s.steps:
            st.data.adopt(s)
        return s

    def adopt(self, whole: "Session") -> None:
        """Share the names of `whole` (a part of it, like a step's counters)."""
        self.info, self.meta, self.functions = whole.info, whole.meta, whole.functions
        self.threads, self.stacks, self.memory_stacks = whole.threads, whole.stacks, whole.memory_stacks
        self.path_shape = whole.paths

    # ------------------------------------------------------------ writing
    def to_blob(self) -> bytes:
        """The record stream of this Session (the inverse of from_blob)."""
        strings: dict[str, int] = {"": 0, "~": 1}

        def sid(text):      # strings must all be interned before STRINGS is packed
            return strings.setdefault(text, len(strings))

        funcs = b"".join(
            _FUNC.pack(f.fid, sid(f.filename), f.line, sid(f.name), sid(f.qualname),
                       KINDS.index(f.kind))
            for f in self.functions.values())
        threads = struct.pack("<I", len(self.threads)) + b"".join(
            _THREAD.pack(t.index, sid(t.name), t.ident, t.native_id, t.events)
            for t in self.threads.values())
        out = [_record(REC_INFO, json.dumps(self.info).encode())]
        if self.meta:
            out.append(_record(REC_META, json.dumps(self.meta).encode()))
        out.append(_record(REC_STRINGS, struct.pack("<I", len(strings)) + b"".join(
            struct.pack("<I", len(b)) + b for b in
            (t.encode("utf-8", "surrogatepass") for t in strings))))
        out.append(_record(REC_FUNCTIONS, struct.pack("<I", len(self.functions)) + funcs))
        out.append(_record(REC_THREADS, threads))
        if self.info.get("sampling"):
            out.append(_record(REC_STACKS, _pack_stacks(self.stacks)))
        if self.info.get("memory"):
            out.append(_record(REC_MEMCURVE, struct.pack("<I", len(self.memory_curve)) + b"".join(
                _MEMPOINT.pack(round(pt.t * 1e9), pt.rss, pt.heap, pt.heap_max,
                               *(pt.site if pt.site else (NO_FUNCTION, 0)))
                for pt in self.memory_curve)))
            out.append(_record(REC_MEMSTACKS, struct.pack("<I", len(self.memory_stacks)) + b"".join(
                struct.pack("<I", len(frames)) + b"".join(
                    struct.pack("<Q", fid << 32 | line) for fid, line in frames)
                for _, frames in sorted(self.memory_stacks.items()))))
        out.extend(self._table_records(self.info))
        if self.info.get("timeline"):
            out.append(_record(REC_TIMELINE, struct.pack("<I", len(self.timeline)) + b"".join(
                _TLEVENT.pack(t, fid, start, dur) for t, fid, start, dur in self.timeline)))
        for st in self.steps:
            out.append(_record(REC_STEP, _pack_step(st)))
        out.append(_record(REC_END, b""))
        return b"".join(out)

    def _table_records(self, info) -> list:
        """The counter tables (not the names), as records: what a capture and
        each of its steps hold. `info` tells which modes' tables to write."""
        out = [_record(REC_FSTATS, struct.pack("<I", len(self.fstats)) + b"".join(
            _FSTAT.pack(t, fid, c.calls, c.rec_calls, c.total, c.own)
            for (t, fid), c in self.fstats.items()))]
        out.append(_record(REC_EDGES, struct.pack("<I", len(self.edges)) + b"".join(
            _EDGE.pack(t, a, b, 0, c.calls, c.rec_calls, c.total, c.own)
            for (t, a, b), c in self.edges.items())))
        if info.get("paths"):
            out.append(_record(REC_PATHS, struct.pack("<I", len(self.paths)) + b"".join(
                _PATH.pack(t, pid, n.parent, n.fid, n.calls, n.total, n.own)
                for (t, pid), n in self.paths.items())))
        if info.get("sampling"):
            out.append(_record(REC_SAMPLES, struct.pack("<I", len(self.samples)) + b"".join(
                _SAMPLE.pack(t, st, state, 0, c.count, c.weight)
                for (t, st, state), c in self.samples.items())))
        if self.fmemory:
            out.append(_record(REC_FMEMORY, struct.pack("<I", len(self.fmemory)) + b"".join(
                _FMEM.pack(t, fid, peak, residual)
                for (t, fid), (peak, residual) in self.fmemory.items())))
        if info.get("memory"):
            out.append(_record(REC_MEMORY, struct.pack("<I", len(self.memory_rows)) + b"".join(
                _MEMROW.pack(fid, line, kind, stack, c.alloc_bytes, c.alloc_count,
                             c.free_bytes, c.free_count, c.peak_bytes, c.at_peak_bytes)
                for fid, line, kind, stack, c in self.memory_rows)))
        if info.get("lines"):
            out.append(_record(REC_LINES, struct.pack("<I", len(self.lines)) + b"".join(
                _LINE.pack(t, fid, line, 0, c.hits, c.time)
                for (t, fid, line), c in self.lines.items())))
            out.append(_record(REC_CALLROWS, struct.pack("<I", len(self.callrows)) + b"".join(
                _CALLROW.pack(t, fid, line, callee, c.calls, c.time)
                for (t, fid, line, callee), c in self.callrows.items())))
        return out

    def save(self, path) -> None:
        """Write this Session as a .cprof file (atomically)."""
        from . import _cprof
        try:
            _cprof.write_blob(os.fspath(path), self.to_blob(), self.final)
        except OSError as e:
            raise PyprofError(str(e)) from None

    # ------------------------------------------------------------ queries
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
        Built from the recorded paths (exact), not from caller/callee pairs."""
        root = TreeNode(None)
        nodes: dict = {}            # (thread, path id) -> TreeNode

        def node_for(t, pid):
            chain, key = [], (t, pid)
            while key not in nodes:
                p = self.paths.get(key) or self.path_shape.get(key)
                if p is None:
                    raise PyprofError(f"path {key[1]} of thread {t} is missing its parent")
                chain.append((key, p.fid))
                if p.parent == ROOT_PATH:
                    parent = root
                    break
                key = (t, p.parent)
            else:
                parent = nodes[key]
            for key, fid in reversed(chain):
                n = parent.children.get(fid)
                if n is None:
                    n = parent.children[fid] = TreeNode(fid)
                nodes[key] = parent = n
            return nodes[(t, pid)]

        for (t, pid), p in self.paths.items():
            if threads is not None and t not in threads:
                continue
            n = node_for(t, pid)
            n.calls += p.calls
            n.total += p.total
            n.own += p.own
            n.threads.add(t)
        root.total = sum(c.total for c in root.children.values())
        return root

    def line_totals(self, threads=None) -> dict:
        """(function id, line) -> LineCounters summed over threads."""
        return _totals(self.lines, LineCounters, threads)

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
        from .merge import process_records
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
        for name in ("fstats", "edges", "paths", "lines", "callrows", "samples", "fmemory"):
            table = getattr(self, name)
            for key in [k for k in table if k[0] in drop]:
                del table[key]
        self.timeline = [e for e in self.timeline if e[0] not in drop]
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
            _add_into(out, st.data)
        return out


def _add_into(out: "Session", part: "Session") -> None:
    for name in ("fstats", "edges", "lines", "callrows", "samples"):
        table = getattr(out, name)
        for key, c in getattr(part, name).items():
            if key in table:
                table[key].add(c)
            else:
                table[key] = type(c)(**vars(c))
    for key, p in part.paths.items():
        q = out.paths.get(key)
        if q is None:
            out.paths[key] = PathNode(p.parent, p.fid, p.calls, p.total, p.own)
        else:
            q.calls += p.calls
            q.total += p.total
            q.own += p.own
    for fid, line, kind, stack, c in part.memory_rows:
        row = MemCounters(**vars(c))
        out.memory_rows.append((fid, line, kind, stack, row))
        out.memory.setdefault((fid, line, MEMORY_SITES[kind]), MemCounters()).add(row)
        if stack != NO_FUNCTION:
            out.memory_by_stack.setdefault(stack, MemCounters()).add(row)


def _totals(table, counters, threads) -> dict:
    """A per-thread table ({(thread, *key): counters}) summed over threads."""
    out: dict = {}
    for key, c in table.items():
        if threads is None or key[0] in threads:
            rest = key[1] if len(key) == 2 else key[1:]
            out.setdefault(rest, counters()).add(c)
    return out


def _pack_step(st: Step) -> bytes:
    header = json.dumps({"index": st.index, "name": st.name, "start": st.start,
                         "end": st.end}).encode()
    tables = b"".join(st.data._table_records(st.data.info)) + _record(REC_END, b"")
    return struct.pack("<I", len(header)) + header + tables


def _parse_step(payload, name) -> Step:
    raw = bytes(payload)
    (hlen,) = struct.unpack_from("<I", raw)
    header = json.loads(raw[4:4 + hlen])
    data = Session.from_blob(raw[4 + hlen:], name)
    return Step(int(header["index"]), header.get("name"), float(header["start"]),
                float(header["end"]), data)


def _parse_stacks(payload) -> dict:
    raw = bytes(payload)
    (n,) = struct.unpack_from("<I", raw)
    off, out = 4, {}
    for sid in range(n):
        nf, nn = struct.unpack_from("<II", raw, off)
        off += 8
        words = struct.unpack_from(f"<{nf}Q", raw, off)
        off += 8 * nf
        native = struct.unpack_from(f"<{nn}Q", raw, off)
        off += 8 * nn
        out[sid] = Stack(tuple((w >> 32, w & _LINE_MASK) for w in words), tuple(native),
                         tuple(i for i, w in enumerate(words) if w & _LINE_ENTRY))
    return out


def _parse_memstacks(payload) -> dict:
    n = struct.unpack_from("<I", payload, 0)[0]
    off, out = 4, {}
    for sid in range(n):
        depth = struct.unpack_from("<I", payload, off)[0]
        off += 4
        words = struct.unpack_from(f"<{depth}Q", payload, off)
        off += 8 * depth
        out[sid] = tuple((w >> 32, w & 0xFFFFFFFF) for w in words)
    return out


def _pack_stacks(stacks) -> bytes:
    parts = [struct.pack("<I", len(stacks))]
    for sid in range(len(stacks)):
        st = stacks[sid]
        entries = set(st.entries)
        parts.append(struct.pack(f"<II{len(st.frames)}Q{len(st.native)}Q", len(st.frames),
                                 len(st.native),
                                 *(f << 32 | ln | (_LINE_ENTRY if i in entries else 0)
                                   for i, (f, ln) in enumerate(st.frames)), *st.native))
    return b"".join(parts)


def _rows(st: struct.Struct, payload):
    (n,) = struct.unpack_from("<I", payload)
    body = payload[4:4 + n * st.size]
    if len(body) != n * st.size:
        raise ValueError("table shorter than its count")
    return st.iter_unpack(body)


def _parse_strings(payload) -> list:
    (n,) = struct.unpack_from("<I", payload)
    out, off = [], 4
    raw = bytes(payload)
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", raw, off)
        off += 4
        if off + ln > len(raw):
            raise ValueError("string runs past its record")
        out.append(raw[off:off + ln].decode("utf-8", "surrogatepass"))
        off += ln
    return out


def _record(rtype: int, payload: bytes) -> bytes:
    return _REC.pack(rtype, 0, len(payload)) + payload


def load(path) -> Session:
    """Read a .cprof capture file (see Session.load)."""
    return Session.load(path)
