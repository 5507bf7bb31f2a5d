"""The run options' declaration: each option's field and default, Profile's
keywords, and the command line's spelling (argparse's keywords, in the order
of --help). What reads options (argv.py, run.py, config.py, checks.py) builds
from here; this module never parses nor checks a value.

Imported by every Profile: built-in modules only at import.
"""
DEFAULT_MAX_EVENTS = 1_000_000          # timeline events, 24 bytes each: about 24 MB
# --async --timeline: an event loop makes calls by the million (130 MB of trace
# for a 2 s run); the tasks' steps are what such a timeline is for.
ASYNC_MIN_DURATION_NS = 1_000_000
ASYNC_MAX_EVENTS = 20_000
MIN_RATE, MAX_RATE = 1, 10000           # Hz (src/_cprof/sampler/sampler.h: PP_RATE_MIN/MAX)
CPU_TIMERS = ("auto", "task-clock", "itimer")
MAX_MEMORY_SAMPLE = 1 << 40             # bytes
MODES = ("trace", "sample", "memory")
# --mode's names: [tool.pyprof]'s mode (config.py)
RUN_MODES = ("function", "sample", "memory", "lines")

# pstats.Stats.sort_arg_dict_default's keys (tests/test_options.py checks it):
# pstats costs ~25 ms to import.
SORT_KEYS = ("calls", "cumtime", "cumulative", "filename", "line", "module", "name", "ncalls",
             "nfl", "pcalls", "stdname", "time", "tottime")

def default_rate(wall) -> float:
    """--rate's default: per CPU second, or per wall second (every thread)."""
    return 100.0 if wall else 250.0


def _looks_like_bytes(text) -> bool:
    """--memory-sample's optional value: a size of the grammar (5MB, 512k)."""
    from ..base.amounts import parse_size
    from ..errors import PyprofError
    try:
        return parse_size(text, "", zero_ok=True) >= 0     # 0: refused by its rule
    except PyprofError:
        return False


_SAMPLING = "sampling (docs/sampling.md)"
_MEMORY = "memory (docs/memory.md)"
_LINES = "line profiling (docs/lines.md)"
_TIMELINE = "timeline (docs/timeline.md)"
_FLAG = {"action": "store_true"}


class Option:
    """One run option, declared once: its RunOptions field and default; the
    command line's spelling (``cli``: argparse's group, option strings and
    keywords; ``dest``/``from_arg`` when argparse's destination differs);
    Profile's keyword and its default (``keyword``); whether a child process
    gets it (``child``); the C core's argument computed from Profile's
    keywords (``core``); its [tool.pyprof] key and PYPROF_* variable
    (``setting``: config.Setting's arguments)."""
    __slots__ = ("field", "default", "cli", "dest", "from_arg", "keyword", "child", "core",
                 "setting")

    def __init__(self, field, default, *, cli=None, dest=None, from_arg=None,
                 keyword=NotImplemented, child=False, core=None, setting=None):
        self.field, self.default, self.cli = field, default, cli
        self.dest, self.from_arg = dest or field, from_arg
        self.keyword, self.child, self.core, self.setting = keyword, child, core, setting

    @property
    def is_keyword(self) -> bool:
        return self.keyword is not NotImplemented


_O = Option
# THE run options, in the order of --help. ``cli``'s "exclusive": options of
# one mutually exclusive group; "value_looks_like": an optional value
# (nargs="?") is taken only when the next argument passes it. Gives argparse's
# parser (argv.run_parser; %%cprof adds its view options) and the plain reader
# that spares a run argparse's ~10 ms of start-up.
TABLE = (
    _O("outfile", None,
           setting=dict(key="output", kind="path", help="where a run writes (-o)"),
           cli=(None, ("-o", "--outfile"), dict(
            metavar="FILE",
            help="write the profile to FILE, in the format its name asks for: .cprof (capture), "
                 "callgrind.out.* or .callgrind (callgrind), .txt (text tables), .collapsed or "
                 ".folded (collapsed stacks), .speedscope.json, .pb.gz (pprof), .html (the HTML "
                 "report), .flame.html (flame graph), .trace.json (Chrome/Perfetto trace, with "
                 "--timeline or --memory), else pstats (default: print a table to stdout)"))),
    _O("sort", 'cumulative',
           setting=dict(kind="choice", help="sort key of the printed table (-s)", choices=SORT_KEYS),
           cli=(None, ("-s", "--sort"), dict(
            metavar="SORT",
            help="sort key of the printed table, as pstats: " + ", ".join(SORT_KEYS)
                 + " (default: cumulative; sampled tables: tottime by self samples, cumulative "
                   "by total, the calls keys do not apply)"))),
    _O("chosen_mode", None,
           dest="mode",
           setting=dict(key="mode", kind="choice", help="function, sample, memory or lines", choices=RUN_MODES, field="mode"),
           cli=(None, ("--mode",), dict(
            choices=RUN_MODES, metavar="MODE",
            help="the mode, as [tool.pyprof]'s mode names it, over the configured one: function "
                 "(trace calls, the default), sample (--sample), memory (--memory) or lines (-l)"))),
    _O("module", False,
           cli=(None, ("-m",), dict(_FLAG, dest="module",
                             help="profile a library module run as a script (like python -m)"))),
    _O("code", False,
           cli=(None, ("-c",), dict(_FLAG, dest="code",
                             help="profile the program passed as a string (like python -c)"))),
    _O("sample", False,
           cli=(_SAMPLING, ("--sample",), dict(
            _FLAG, help="statistical sampling instead of tracing: low overhead, stacks with lines, "
                        "no call counts"))),
    _O("rate", None,
           keyword=None,
           child=True,
           core=lambda kw: float(kw["rate"] if kw["mode"] == "sample" and kw["rate"]
                                 else default_rate(kw["wall"])),
           setting=dict(kind="rate", help="samples per second (--rate)", group="sample"),
           cli=(_SAMPLING, ("--rate",), dict(
            type=float, metavar="HZ",
            help="samples per second (default: 250 for --cpu, 100 for --wall)"))),
    _O("cpu", False,
           cli=(_SAMPLING, ("--cpu",), dict(
            _FLAG, exclusive="cpu-wall",
            help="sample the process's CPU time (the default): threads in proportion to the CPU "
                 "they use"))),
    _O("cpu_timer", "auto",
           keyword="auto",
           child=True,
           core=lambda kw: kw["cpu_timer"] or "auto",
           setting=dict(kind="choice", help="CPU mode's timer (--cpu-timer)", choices=CPU_TIMERS,
                        group="sample"),
           cli=(_SAMPLING, ("--cpu-timer",), dict(
            choices=CPU_TIMERS, metavar="TIMER",
            help="what drives --cpu's samples: task-clock (a CPU-clock event per thread, any "
                 "rate), itimer (ITIMER_PROF, at most the kernel's tick) or auto (the default: "
                 "task-clock where the kernel allows it, else itimer)"))),
    _O("wall", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["wall"]),
           setting=dict(kind="bool", help="sample wall time (--wall)", group="sample"),
           cli=(_SAMPLING, ("--wall",), dict(
            _FLAG, exclusive="cpu-wall",
            help="sample every thread at the rate, running or not, labelled with its state "
                 "(python, native, idle)"))),
    _O("native", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["native"]),
           setting=dict(kind="bool", help="native frames (--native)", group="sample"),
           cli=(_SAMPLING, ("--native",), dict(
            _FLAG, help="native (C) frames too, merged with the Python ones (needs libunwind): in "
                        "sampled stacks, and in allocation stacks (--memory-stacks, "
                        "--memory-sample)"))),
    _O("asyncio", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["asyncio"]),
           setting=dict(kind="bool", help="asyncio tasks (--async)"),
           cli=(_SAMPLING, ("--async",), dict(
            _FLAG, dest="asyncio",
            help="asyncio: each sample of a task under <task NAME>, its coroutines' stack; "
                 "with --wall, suspended tasks' time where they wait (docs/async.md)"))),
    _O("opcodes", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["opcodes"]),
           setting=dict(kind="bool", help="instructions and column ranges (--opcodes)"),
           cli=(None, ("--opcodes",), dict(
            _FLAG, help="inside the line: with --sample, each sample's innermost instruction "
                        "(its opcode as it ran: specialized or adaptive, and its columns); with "
                        "line tracing, every instruction of the traced functions counted and "
                        "timed (docs/opcodes.md; 'pyprof view --view opcodes')"))),
    _O("gc", None,
           from_arg=lambda v: True if v else None,
           keyword=None,
           child=True,
           core=lambda kw: kw["mode"] == "sample" if kw["gc"] is None else bool(kw["gc"]),
           cli=(None, ("--gc",), dict(
            _FLAG, help="time in the cyclic garbage collector: a <GC gen N> frame in traced and "
                        "sampled stacks, collections and pauses per generation in the summary "
                        "(on by default with --sample; this turns it on for the other modes)"))),
    _O("dump_every", 0.0,
           setting=dict(kind="seconds", help="rewrite the capture while sampling (--dump-every)", group="sample"),
           cli=(_SAMPLING, ("--dump-every",), dict(
            type=float, metavar="SECONDS",
            help="with a .cprof output, rewrite it every SECONDS while sampling"))),
    _O("signal", None,
           setting=dict(kind="str", help="sampling on a signal (--signal)", group="sample"),
           cli=(_SAMPLING, ("--signal",), dict(
            metavar="NAME",
            help="with --sample: start and stop sampling each time the process receives this "
                 "signal (e.g. USR2), instead of from the start"))),
    _O("memory", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["memory"]),
           cli=(_MEMORY, ("--memory",), dict(
            _FLAG, help="record the bytes allocated and freed per line and function (alone, or "
                        "with -l, --sample or --functions)"))),
    _O("memory_sample", None,
           keyword=0,
           child=True,
           core=lambda kw: int(kw["memory_sample"] or 0),
           setting=dict(kind="bytes", help="sampled memory mode (--memory-sample)", group="memory"),
           cli=(_MEMORY, ("--memory-sample",), dict(
            metavar="BYTES", nargs="?", const="512k", value_looks_like=_looks_like_bytes,
            help="with low overhead: record a random sample of the allocations, each byte picked "
                 "with probability 1/BYTES (default 512k), estimates scaled up; implies --memory"))),
    _O("memory_stacks", None,
           from_arg=lambda v: True if v else None,
           keyword=None,
           child=True,
           core=lambda kw: bool(kw["memory_sample"]) if kw["memory_stacks"] is None
               else bool(kw["memory_stacks"]),
           setting=dict(kind="bool", help="allocation stacks (--memory-stacks)", group="memory"),
           cli=(_MEMORY, ("--memory-stacks",), dict(
            _FLAG, help="record each allocation's Python stack in exact mode too (for the memory "
                        "flame graph; on by default with --memory-sample)"))),
    _O("native_allocs", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["native_allocs"]),
           cli=(_MEMORY, ("--native-allocs",), dict(
            _FLAG, help="also record what C code allocates with malloc, calloc, realloc, "
                        "posix_memalign... and anonymous mmap (libraries, extensions), charged to "
                        "the Python line running; implies --memory"))),
    _O("temporary", None,
           keyword=None,
           child=True,
           core=lambda kw: int(kw["temporary"] or 0),
           cli=(_MEMORY, ("--temporary",), dict(
            metavar="N", nargs="?", const="1", value_looks_like=str.isdigit,
            help="count temporary allocations per line: blocks freed by their thread within N of "
                 "its allocations (default 1: before any other); implies --memory"))),
    _O("objects", False,
           setting=dict(kind="bool", help="live objects by type at the end (--objects)"),
           cli=(_MEMORY, ("--objects",), dict(
            _FLAG, help="at the end, the live objects by type: count and total size (pympler's "
                        "summary; any mode)"))),
    _O("functions", False,
           setting=dict(kind="bool", help="memory with call tracing (--functions)", group="memory"),
           cli=(_MEMORY, ("--functions",), dict(
            _FLAG, help="with --memory: also trace calls (time per function, and peak and "
                        "residual bytes per function)"))),
    _O("lines", False,
           keyword=False,
           child=True,
           cli=(_LINES, ("-l", "--lines"), dict(
            _FLAG, help="time every line of the functions decorated with @profile (the name needs "
                        "no import under pyprof)"))),
    _O("lines_of", (),
           keyword=(),
           child=True,
           setting=dict(kind="list", help="line targets (--lines-of)", group="lines"),
           cli=(_LINES, ("--lines-of",), dict(
            action="append", metavar="PATTERN",
            help="time every line of: a module, module:function, module:Class.method, or a file "
                 "glob (repeatable)"))),
    _O("lines_all", None,
           from_arg=lambda v: True if v else None,
           keyword=None,
           child=True,
           setting=dict(kind="bool", help="every line of the program's files (--lines-all)", group="lines"),
           cli=(_LINES, ("--lines-all",), dict(
            _FLAG, help="time every line of the program's own files (its directory, not "
                        "site-packages nor the standard library)"))),
    _O("include", (),
           keyword=(),
           child=True,
           setting=dict(kind="list", help="more files to line-trace (--include)", group="lines"),
           cli=(_LINES, ("--include",), dict(
            action="append", metavar="GLOB",
            help="with line profiling: also time the files matching GLOB"))),
    _O("exclude", (),
           keyword=(),
           child=True,
           setting=dict(kind="list", help="files not to line-trace (--exclude)", group="lines"),
           cli=(_LINES, ("--exclude",), dict(
            action="append", metavar="GLOB",
            help="with --lines-all/--include: not the files matching GLOB"))),
    _O("unit", 'us',
           setting=dict(kind="choice", help="time unit of the line tables (--unit)", choices=("s", "ms", "us", "ns")),
           cli=(_LINES, ("--unit",), dict(choices=["s", "ms", "us", "ns"],
                                   help="time unit of the line tables (default: us)"))),
    _O("no_call_rows", False,
           setting=dict(key="call_rows", kind="bool", help="call rows under the lines (not --no-call-rows)"),
           cli=(_LINES, ("--no-call-rows",), dict(
            _FLAG, help="line tables without the call rows under their lines"))),
    _O("strict", False,
           setting=dict(kind="bool", help="status 2 when a --lines-of matched nothing", group="lines"),
           cli=(_LINES, ("--strict",), dict(
            _FLAG, help="exit with status 2 when a --lines-of pattern matched nothing (and the "
                        "program itself succeeded)"))),
    _O("timeline", False,
           keyword=False,
           child=True,
           setting=dict(kind="bool", help="keep every call (--timeline)", group="function"),
           cli=(_TIMELINE, ("--timeline",), dict(
            _FLAG, help="function mode (also --memory --functions): keep every call as an event "
                        "with its start and duration, for a Chrome/Perfetto trace (-o "
                        "FILE.trace.json, or 'pyprof convert FILE.cprof --format chrome')"))),
    _O("timeline_min_duration", None,
           dest="min_duration",
           keyword=0,
           child=True,
           setting=dict(key="min_duration", kind="duration", help="shortest call kept (--min-duration)", group="timeline"),
           cli=(_TIMELINE, ("--min-duration",), dict(
            metavar="DURATION",
            help="with --timeline: keep only calls lasting at least DURATION (like 10us or 1ms; "
                 "the others are counted; default: all)"))),
    _O("timeline_max_events", None,
           keyword=DEFAULT_MAX_EVENTS,
           child=True,
           setting=dict(kind="count", help="events kept at most (--timeline-max-events)", group="timeline"),
           cli=(_TIMELINE, ("--timeline-max-events",), dict(
            type=int, metavar="N",
            help=f"with --timeline: keep at most N events over all threads, 24 bytes each "
                 f"(default {DEFAULT_MAX_EVENTS:,}); later calls are counted as dropped"))),
    _O("builtins", True,
           dest="no_builtins", from_arg=lambda v: not v,
           keyword=True,
           child=True,
           core=lambda kw: bool(kw["builtins"]),
           setting=dict(kind="bool", help="record C functions (not --no-builtins)"),
           cli=(None, ("--no-builtins",), dict(
            _FLAG, help="record Python functions only, not C functions and methods (cheaper: on "
                        "3.11 it avoids the interpreter's tracing mode altogether)"))),
    _O("exact_builtins", False,
           keyword=False,
           child=True,
           core=lambda kw: bool(kw["exact_builtins"]),
           setting=dict(kind="bool", help="every call site watched (--exact-builtins)"),
           cli=(None, ("--exact-builtins",), dict(
            _FLAG, help="3.12+: report C function calls at every call site, as cProfile (slower); "
                        "by default a site whose first 64 calls all went to Python functions stops "
                        "reporting calls"))),
    _O("flush_interval", 10.0,
           keyword=10.0,
           setting=dict(kind="seconds", help="periodic rewrite of a .cprof (--flush-interval)"),
           cli=(None, ("--flush-interval",), dict(
            type=float, metavar="SECONDS",
            help="with a .cprof outfile, rewrite it every SECONDS while the program runs so a "
                 "crash leaves the last flush (0: only at the end; default 10)"))),
    _O("children", False,
           keyword=False,
           setting=dict(kind="bool", help="profile child processes (--children)"),
           cli=(None, ("--children",), dict(
            _FLAG, help="profile every Python child too (os.fork, multiprocessing, "
                        "concurrent.futures, subprocess running Python): each writes NAME.PID.cprof "
                        "next to the output, merged into it at the end, one process apart from the "
                        "other (docs/children.md)"))),
    _O("listen", False,
           cli=(None, ("--listen",), dict(
            _FLAG, help="run the program without profiling, with pyprof's control channel open, so "
                        "that 'pyprof attach/top/dump PID' reach it without entering it (docs/attach.md)"))),
    _O("live", False,
           cli=(None, ("--live",), dict(
            _FLAG, help="run the program in the background (its output to a log file) and show "
                        "'pyprof top' on it: a live view of its functions and threads"))),
    _O("version", False,
           cli=(None, ("--version",), dict(
            _FLAG, help="print pyprof's version, Python, hook, clock and features, then exit"))),
    _O("mode", 'trace',
           keyword='trace',
           child=True,
           core=lambda kw: kw["mode"]),
    _O("paths", True,
           keyword=True,
           child=True,
           core=lambda kw: bool(kw["paths"])),
)

# Built from TABLE: RunOptions' fields and defaults; argparse's destinations
# that are not field names; Profile's keywords (a child's configuration, the
# ones marked child); the C core's arguments; argparse's list.
FIELDS = {o.field: o.default for o in TABLE}
FROM_ARGS = {o.dest: (o.field, o.from_arg) for o in TABLE
             if o.cli and (o.dest != o.field or o.from_arg)}
PROFILE_KEYS = tuple(o.field for o in TABLE if o.child)
KEYWORDS = {o.field: o.keyword for o in TABLE if o.is_keyword}
CORE = {o.field: o.core for o in TABLE if o.core}


def _argparse_entry(o):
    """o.cli, with the field's default as argparse's (a fresh list to append to)."""
    group, flags, kw = o.cli
    if o.dest == o.field and not o.from_arg and kw.get("action") != "store_true":
        default = list(o.default) if kw.get("action") == "append" else o.default
        kw = {**kw, "default": default}
    return group, flags, kw


OPTIONS = tuple(_argparse_entry(o) for o in TABLE if o.cli)

NOT_ARGPARSE = ("exclusive", "value_looks_like")       # keywords argparse does not take


