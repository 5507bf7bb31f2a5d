"""The run options' declaration: each option's field and default, Profile's
keywords, and the command line's spelling (argparse's keywords, in the order
of --help). What reads options (argv.py, run.py, config.py, checks.py) builds
from here; this module never parses nor checks a value.

Imported by every Profile: built-in modules only at import.
"""
from __future__ import annotations

DEFAULT_MAX_EVENTS = 1_000_000          # timeline events, 24 bytes each: about 24 MB
# --async --timeline: an event loop makes calls by the million (130 MB of trace
# for a 2 s run); the tasks' steps are what such a timeline is for.
ASYNC_MIN_DURATION_NS = 1_000_000
ASYNC_MAX_EVENTS = 20_000
MAX_RATE = 100000                       # Hz
MAX_MEMORY_SAMPLE = 1 << 40             # bytes
MODES = ("trace", "sample", "memory")
# --mode's names: [tool.pyprof]'s mode (config.py)
RUN_MODES = ("function", "sample", "memory", "lines")

# pstats.Stats.sort_arg_dict_default's keys (tests/test_options.py checks it):
# pstats costs ~25 ms to import.
SORT_KEYS = ("calls", "cumtime", "cumulative", "filename", "line", "module", "name", "ncalls",
             "nfl", "pcalls", "stdname", "time", "tottime")

# Field: default. The record options are Profile's keywords, with its defaults
# (None: not given); the others are the run's (the command line's, %%cprof's).
FIELDS = {
    # what is recorded (Profile's keywords; a child's configuration)
    "builtins": True, "exact_builtins": False, "mode": "trace", "rate": None, "wall": False,
    "native": False, "memory": False, "memory_sample": None, "memory_stacks": None,
    "native_allocs": False, "temporary": None, "gc": None,
    "paths": True, "lines": False, "lines_of": (), "lines_all": None, "include": (),
    "exclude": (), "timeline": False, "timeline_min_duration": None,
    "timeline_max_events": None, "asyncio": False,
    # how the run is driven (command line and %%cprof)
    "outfile": None, "sort": "cumulative", "module": False, "code": False, "version": False,
    "sample": False, "cpu": False, "functions": False, "dump_every": 0.0, "signal": None,
    "objects": False, "unit": "us", "no_call_rows": False, "strict": False,
    "flush_interval": 10.0, "children": False, "listen": False, "live": False,
    "chosen_mode": None,
}
# Parser destinations that are not field names: dest -> (field, conversion).
FROM_ARGS = {"no_builtins": ("builtins", lambda v: not v),
              "min_duration": ("timeline_min_duration", None),
              "memory_stacks": ("memory_stacks", lambda v: True if v else None),  # None: auto
              "gc": ("gc", lambda v: True if v else None),      # None: by the mode
              "lines_all": ("lines_all", lambda v: True if v else None),
              "mode": ("chosen_mode", None)}
# What goes to Profile (and to a child) as keywords.
PROFILE_KEYS = ("builtins", "exact_builtins", "mode", "rate", "wall", "native", "memory",
                "memory_sample", "memory_stacks", "native_allocs", "temporary", "gc", "paths", "lines", "lines_of", "lines_all",
                "include", "exclude", "timeline", "timeline_min_duration",
                "timeline_max_events", "asyncio")



def default_rate(wall) -> float:
    """--rate's default: per CPU second, or per wall second (every thread)."""
    return 100.0 if wall else 250.0


def _looks_like_bytes(text) -> bool:
    digits = text[:-1] if text[-1:] in "kKmMgG" else text
    return digits.isdigit() and digits.isascii()


_SAMPLING = "sampling (docs/sampling.md)"
_MEMORY = "memory (docs/memory.md)"
_LINES = "line profiling (docs/lines.md)"
_TIMELINE = "timeline (docs/timeline.md)"
_FLAG = {"action": "store_true"}

# The run options, in the order of --help: (group, option strings, argparse's
# keywords). The one list: run_parser() gives it to argparse, and parse_run_args
# reads a plain command line with it without importing argparse (~10 ms of
# start-up), handing anything else (--help, errors, abbreviations) to argparse.
# "exclusive": options of one mutually exclusive group; "value_looks_like": an
# optional value (nargs="?") is taken only when the next argument passes it.
OPTIONS = (
    (None, ("-o", "--outfile"), dict(
        metavar="FILE",
        help="write the profile to FILE, in the format its name asks for: .cprof (capture), "
             "callgrind.out.* or .callgrind (callgrind), .txt (text tables), .collapsed or "
             ".folded (collapsed stacks), .speedscope.json, .pb.gz (pprof), .html (the HTML "
             "report), .flame.html (flame graph), .trace.json (Chrome/Perfetto trace, with "
             "--timeline or --memory), else pstats (default: print a table to stdout)")),
    (None, ("-s", "--sort"), dict(
        default="cumulative", metavar="SORT",
        help="sort key of the printed table, as pstats: " + ", ".join(SORT_KEYS)
             + " (default: cumulative; sampled tables: tottime by self samples, cumulative "
               "by total, the calls keys do not apply)")),
    (None, ("--mode",), dict(
        choices=RUN_MODES, metavar="MODE",
        help="the mode, as [tool.pyprof]'s mode names it, over the configured one: function "
             "(trace calls, the default), sample (--sample), memory (--memory) or lines (-l)")),
    (None, ("-m",), dict(_FLAG, dest="module",
                         help="profile a library module run as a script (like python -m)")),
    (None, ("-c",), dict(_FLAG, dest="code",
                         help="profile the program passed as a string (like python -c)")),
    (_SAMPLING, ("--sample",), dict(
        _FLAG, help="statistical sampling instead of tracing: low overhead, stacks with lines, "
                    "no call counts")),
    (_SAMPLING, ("--rate",), dict(
        type=float, metavar="HZ",
        help="samples per second (default: 250 for --cpu, 100 for --wall)")),
    (_SAMPLING, ("--cpu",), dict(
        _FLAG, exclusive="cpu-wall",
        help="sample the process's CPU time (the default): threads in proportion to the CPU "
             "they use")),
    (_SAMPLING, ("--wall",), dict(
        _FLAG, exclusive="cpu-wall",
        help="sample every thread at the rate, running or not, labelled with its state "
             "(python, native, idle)")),
    (_SAMPLING, ("--native",), dict(
        _FLAG, help="native (C) frames too, merged with the Python ones (needs libunwind): in "
                    "sampled stacks, and in allocation stacks (--memory-stacks, "
                    "--memory-sample)")),
    (_SAMPLING, ("--async",), dict(
        _FLAG, dest="asyncio",
        help="asyncio: each sample of a task under <task NAME>, its coroutines' stack; "
             "with --wall, suspended tasks' time where they wait (docs/async.md)")),
    (None, ("--gc",), dict(
        _FLAG, help="time in the cyclic garbage collector: a <GC gen N> frame in traced and "
                    "sampled stacks, collections and pauses per generation in the summary "
                    "(on by default with --sample; this turns it on for the other modes)")),
    (_SAMPLING, ("--dump-every",), dict(
        type=float, metavar="SECONDS", default=0.0,
        help="with a .cprof output, rewrite it every SECONDS while sampling")),
    (_SAMPLING, ("--signal",), dict(
        metavar="NAME",
        help="with --sample: start and stop sampling each time the process receives this "
             "signal (e.g. USR2), instead of from the start")),
    (_MEMORY, ("--memory",), dict(
        _FLAG, help="record the bytes allocated and freed per line and function (alone, or "
                    "with -l, --sample or --functions)")),
    (_MEMORY, ("--memory-sample",), dict(
        metavar="BYTES", nargs="?", const="512k", value_looks_like=_looks_like_bytes,
        help="with low overhead: record a random sample of the allocations, each byte picked "
             "with probability 1/BYTES (default 512k), estimates scaled up; implies --memory")),
    (_MEMORY, ("--memory-stacks",), dict(
        _FLAG, help="record each allocation's Python stack in exact mode too (for the memory "
                    "flame graph; on by default with --memory-sample)")),
    (_MEMORY, ("--native-allocs",), dict(
        _FLAG, help="also record what C code allocates with malloc, calloc, realloc, "
                    "posix_memalign... and anonymous mmap (libraries, extensions), charged to "
                    "the Python line running; implies --memory")),
    (_MEMORY, ("--temporary",), dict(
        metavar="N", nargs="?", const="1", value_looks_like=str.isdigit,
        help="count temporary allocations per line: blocks freed by their thread within N of "
             "its allocations (default 1: before any other); implies --memory")),
    (_MEMORY, ("--objects",), dict(
        _FLAG, help="at the end, the live objects by type: count and total size (pympler's "
                    "summary; any mode)")),
    (_MEMORY, ("--functions",), dict(
        _FLAG, help="with --memory: also trace calls (time per function, and peak and "
                    "residual bytes per function)")),
    (_LINES, ("-l", "--lines"), dict(
        _FLAG, help="time every line of the functions decorated with @profile (the name needs "
                    "no import under pyprof)")),
    (_LINES, ("--lines-of",), dict(
        action="append", default=[], metavar="PATTERN",
        help="time every line of: a module, module:function, module:Class.method, or a file "
             "glob (repeatable)")),
    (_LINES, ("--lines-all",), dict(
        _FLAG, help="time every line of the program's own files (its directory, not "
                    "site-packages nor the standard library)")),
    (_LINES, ("--include",), dict(
        action="append", default=[], metavar="GLOB",
        help="with line profiling: also time the files matching GLOB")),
    (_LINES, ("--exclude",), dict(
        action="append", default=[], metavar="GLOB",
        help="with --lines-all/--include: not the files matching GLOB")),
    (_LINES, ("--unit",), dict(default="us", choices=["s", "ms", "us", "ns"],
                               help="time unit of the line tables (default: us)")),
    (_LINES, ("--no-call-rows",), dict(
        _FLAG, help="line tables without the call rows under their lines")),
    (_LINES, ("--strict",), dict(
        _FLAG, help="exit with status 2 when a --lines-of pattern matched nothing (and the "
                    "program itself succeeded)")),
    (_TIMELINE, ("--timeline",), dict(
        _FLAG, help="function mode (also --memory --functions): keep every call as an event "
                    "with its start and duration, for a Chrome/Perfetto trace (-o "
                    "FILE.trace.json, or 'pyprof convert FILE.cprof --format chrome')")),
    (_TIMELINE, ("--min-duration",), dict(
        metavar="DURATION",
        help="with --timeline: keep only calls lasting at least DURATION (like 10us or 1ms; "
             "the others are counted; default: all)")),
    (_TIMELINE, ("--timeline-max-events",), dict(
        type=int, metavar="N",
        help=f"with --timeline: keep at most N events over all threads, 24 bytes each "
             f"(default {DEFAULT_MAX_EVENTS:,}); later calls are counted as dropped")),
    (None, ("--no-builtins",), dict(
        _FLAG, help="record Python functions only, not C functions and methods (cheaper: on "
                    "3.11 it avoids the interpreter's tracing mode altogether)")),
    (None, ("--exact-builtins",), dict(
        _FLAG, help="3.12+: report C function calls at every call site, as cProfile (slower); "
                    "by default a site whose first 64 calls all went to Python functions stops "
                    "reporting calls")),
    (None, ("--flush-interval",), dict(
        type=float, default=10.0, metavar="SECONDS",
        help="with a .cprof outfile, rewrite it every SECONDS while the program runs so a "
             "crash leaves the last flush (0: only at the end; default 10)")),
    (None, ("--children",), dict(
        _FLAG, help="profile every Python child too (os.fork, multiprocessing, "
                    "concurrent.futures, subprocess running Python): each writes NAME.PID.cprof "
                    "next to the output, merged into it at the end, one process apart from the "
                    "other (docs/children.md)")),
    (None, ("--listen",), dict(
        _FLAG, help="run the program without profiling, with pyprof's control channel open, so "
                    "that 'pyprof attach/top/dump PID' reach it without entering it (docs/attach.md)")),
    (None, ("--live",), dict(
        _FLAG, help="run the program in the background (its output to a log file) and show "
                    "'pyprof top' on it: a live view of its functions and threads")),
    # Printed by cmd_run, not argparse's "version" action: that one re-wraps the
    # text to the terminal width, splitting it over two lines.
    (None, ("--version",), dict(
        _FLAG, help="print pyprof's version, Python, hook, clock and features, then exit")),
)
NOT_ARGPARSE = ("exclusive", "value_looks_like")       # keywords argparse does not take


