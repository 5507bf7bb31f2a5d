"""The rows of a capture and the list of its counter tables (docs/capture-format.md).

Every counter table of a Session is one entry of :data:`TABLES`: what its key is
made of, which mode records it and whether a step holds it. The Session
(dropping threads, adding steps up), the merge and the codec all walk this list,
so a new table is one entry here (plus its record in model/codec.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

NO_FUNCTION = 0xFFFFFFFF
ROOT_PATH = 0xFFFFFFFE
# The deepest calling context a tree or a stack shows (the sampler keeps 256
# Python frames too): the self time of deeper calls is the deepest shown
# function's, so views and exports never walk thousands of levels.
MAX_DEPTH = 256
# Frames a stack of the capture holds at most: the sampler keeps the innermost
# 256 Python and 128 native frames, memory 64 (STACKS, MEMSTACKS); more is a
# corrupt capture.
MAX_STACK_FRAMES, MAX_NATIVE_FRAMES = 256, 128

# Where an allocation was made (docs/memory.md): a Python line, a thread that
# had released the GIL, or a thread holding it with no Python frame running.
MEMORY_SITES = ("line", "gil-released", "no-frame")

# Thread states of a sample (docs/sampling.md); "awaiting": --async's
# suspended tasks (docs/async.md).
STATES = ("python", "native", "idle", "other", "awaiting")
# An asyncio task's state at the end of a capture (docs/async.md).
TASK_STATES = ("pending", "done", "cancelled")

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
class LineMemory:
    """Memory of a line of a line target, callees included (line mode with
    memory; docs/memory.md): what its thread allocated while the line ran,
    bytes and blocks; ``net_bytes``, allocated minus freed by that thread
    meanwhile (memory_profiler's increment: negative when the line freed
    more than it allocated); ``peak_bytes``, the most that net rose above its
    level at the line's start during one running. Outermost running only
    under recursion, as the line's time."""

    alloc_bytes: int = 0
    alloc_count: int = 0
    net_bytes: int = 0
    peak_bytes: int = 0

    def add(self, other: "LineMemory") -> None:
        self.alloc_bytes += other.alloc_bytes
        self.alloc_count += other.alloc_count
        self.net_bytes += other.net_bytes
        self.peak_bytes = max(self.peak_bytes, other.peak_bytes)


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
    they stand for in ns (each sample weighs its thread's CPU time, or wall
    time, since that thread's previous sample: docs/sampling.md)."""

    count: int = 0
    weight: int = 0

    def add(self, other: "SampleCounters") -> None:
        self.count += other.count
        self.weight += other.weight


@dataclass
class InsnCounters:
    """An instruction (--opcodes, docs/opcodes.md). Sampling: ``samples`` and
    their ``weight`` (ns) where the innermost frame ran it (self), and
    ``total_samples``, ``total_weight`` where it was on the stack at all (a
    caller's call instruction: its callees' time). Line tracing: ``hits``
    (times it ran) and ``time`` (raw units, from its start to the next
    instruction of its frame, callees included, outermost only under
    recursion)."""

    samples: int = 0
    weight: int = 0
    total_samples: int = 0
    total_weight: int = 0
    hits: int = 0
    time: int = 0

    def add(self, other: "InsnCounters") -> None:
        self.samples += other.samples
        self.weight += other.weight
        self.total_samples += other.total_samples
        self.total_weight += other.total_weight
        self.hits += other.hits
        self.time += other.time


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


@dataclass
class MemExtra:
    """Of a memory site's blocks (MemCounters): those C code allocated with
    malloc or mmap (``--native-allocs``), and the temporary ones (freed by
    their thread within N of its allocations, ``--temporary``)."""

    native_alloc_bytes: int = 0
    native_alloc_count: int = 0
    native_free_bytes: int = 0
    native_free_count: int = 0
    temp_bytes: int = 0
    temp_count: int = 0

    @property
    def native_net_bytes(self) -> int:
        return self.native_alloc_bytes - self.native_free_bytes

    def add(self, other: "MemExtra") -> None:
        self.native_alloc_bytes += other.native_alloc_bytes
        self.native_alloc_count += other.native_alloc_count
        self.native_free_bytes += other.native_free_bytes
        self.native_free_count += other.native_free_count
        self.temp_bytes += other.temp_bytes
        self.temp_count += other.temp_count


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

    def add(self, other: "PathNode") -> None:
        self.calls += other.calls
        self.total += other.total
        self.own += other.own


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
class CoroCounters:
    """Function tracing: the coroutines of a coroutine function (docs/async.md).
    ``instances``: coroutines started; ``ended``: those that returned or
    raised; ``wall``: raw time units from each one's first start to its end,
    summed over the ended ones; ``open_wall``: the same up to the capture's
    end for those still suspended then."""

    instances: int = 0
    ended: int = 0
    wall: int = 0
    open_wall: int = 0


@dataclass
class TaskRow:
    """An asyncio task seen by --async sampling (docs/async.md). ``fid``: its
    ``<task NAME>`` root frame; ``coro_fid``: its coroutine's function;
    ``created``: (fid, line) where asyncio's debug mode saw it made, or None;
    ``thread``: its loop's thread index, or None; times in ns: ``start`` and
    ``end`` from the capture's start (end None while pending), ``running``
    (the weight of its samples, or of its steps when traced), ``awaiting``
    (its lifetime less that); ``samples``: its running samples; ``steps``:
    how many times it ran (function tracing with asyncio; None: unknown)."""

    fid: int
    coro_fid: int | None
    created: tuple | None
    thread: int | None
    state: str
    start: int
    end: int | None
    running: int
    awaiting: int
    samples: int
    steps: int | None = None        # times it ran: traced captures only


@dataclass
class Thread:
    index: int
    ident: int
    native_id: int
    events: int
    name: str = ""


@dataclass(frozen=True)
class Table:
    """A counter table of a Session: the attribute ``name``; ``keys``, what each
    part of a row's key is ("thread", "function", "stack" (sampled), "memstack"
    (allocation stack), or "" for a plain value such as a line); ``mode``, the
    INFO key of the mode that records it (None: every capture; a capture
    without its mode has the table empty); ``always``: written even when
    empty; ``step``: a step's counters hold it;
    ``listed``: a list of rows (key fields, then the counters) rather than a
    dict {key: counters}."""

    name: str
    keys: tuple
    mode: str | None = None
    step: bool = True
    listed: bool = False
    always: bool = True         # written when empty too (else only when it has rows)

    @property
    def per_thread(self) -> bool:
        return self.keys[0] == "thread"


TABLES = (
    Table("fstats", ("thread", "function")),
    Table("edges", ("thread", "function", "function")),
    Table("paths", ("thread", "path"), mode="paths"),
    Table("samples", ("thread", "stack", ""), mode="sampling"),
    Table("fmemory", ("thread", "function"), step=False, always=False),
    Table("memory_rows", ("function", "", "", "memstack"), mode="memory", listed=True),
    Table("memory_extra", ("function", "", "", "memstack"), mode="memory", step=False,
          listed=True, always=False),
    Table("lines", ("thread", "function", ""), mode="lines"),
    Table("callrows", ("thread", "function", "", "function"), mode="lines"),
    Table("line_memory", ("thread", "function", ""), mode="lines", step=False, always=False),
    Table("timeline", ("thread", "function", "", ""), mode="timeline", step=False, listed=True),
    # (thread, function, offset, opcode, line, end line, column, end column)
    Table("instructions", ("thread", "function", "", "opcode", "", "", "", ""), mode="opcodes",
          step=False),
)
# A position of an instruction (line, column) that the compiler did not give.
NO_POSITION = 0xFFFFFFFF
# The name tables that only some modes have.
NAME_TABLE_MODES = {"stacks": "sampling", "memory_stacks": "memory", "memory_curve": "memory"}
