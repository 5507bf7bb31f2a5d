"""Run options: one shape for what a profiled run asks for.

``OPTIONS`` is the list of the command line's run options: ``run_parser()``
builds argparse's parser from it (the CLI's --help and errors, %%cprof, which
adds its view options), ``parse_run_args`` reads a plain command line with it
without importing argparse, and ``split_argv`` learns from it (or from a
parser's actions) which options take a value. ``RunOptions`` holds the values,
built from the parsed options (``from_args``) or from Profile's keywords
(``from_profile``), and checked once by ``check()``: every rule, one message
each, the option spelled as the caller spells it (``--rate`` on the command
line, ``rate`` in the API). ``profile_kwargs()`` gives Profile's keywords,
which are also a child's configuration (children.py) and, through Profile,
the C core's arguments.

Adding a run option: an OPTIONS entry, a field in _FIELDS (its default is
Profile's; PROFILE_KEYS if Profile takes it), a rule in ``check()`` if it has
one, and the C argument if the core needs it. tests/test_options.py checks
that every option reaches Profile and a child's configuration.

Imported by every Profile: built-in modules only at import.
"""
from __future__ import annotations

from .errors import OptionError

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
_FIELDS = {
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
_FROM_ARGS = {"no_builtins": ("builtins", lambda v: not v),
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


def set_mode(opts, mode):
    """The flag that selects `mode` on opts (function tracing: none)."""
    if mode in RUN_MODES[1:]:
        setattr(opts, mode, True)

class RunOptions:
    """The options of one profiled run, in one place (see the module's doc).

    ``check()`` validates them once and settles what they imply (``mode``;
    ``memory`` with ``memory_sample`` or ``memory_stacks``; durations and byte
    counts as numbers); the other methods read the result."""

    __slots__ = (*_FIELDS, "cli", "checked")

    def __init__(self, cli=False, **values):
        for name, default in _FIELDS.items():
            setattr(self, name, default)
        self.cli = cli              # messages spell options as the command line does
        self.checked = False
        for name, value in values.items():
            setattr(self, name, value)

    # -------------------------------------------------------- building
    @classmethod
    def from_args(cls, ns) -> "RunOptions":
        """From a namespace (or its dict) of ``run_parser()``; other
        destinations, such as %%cprof's view options, are left to their owner."""
        opts = cls(cli=True)
        for dest, value in (ns if isinstance(ns, dict) else vars(ns)).items():
            if dest in _FROM_ARGS:
                dest, convert = _FROM_ARGS[dest]
                value = convert(value) if convert else value
            if dest in _FIELDS:
                setattr(opts, dest, value)
        if opts.chosen_mode:
            opts._take_chosen_mode()
        return opts

    def _take_chosen_mode(self):
        """--mode MODE: the flag it stands for, set before the configuration
        is applied (config.py: a mode named on the command line wins)."""
        mode = self.chosen_mode
        others = [f for f, on in (
            ("--sample", self.sample), ("--memory", self.memory),
            ("--memory-sample", self.memory_sample is not None),
            ("--memory-stacks", self.memory_stacks), ("--native-allocs", self.native_allocs),
            ("--temporary", self.temporary is not None), ("line tracing", self.line_mode))
            if on]
        if mode == "function" and others:
            raise OptionError(f"--mode function and {', '.join(others)} do not combine "
                              f"(--mode function traces calls; with --memory: --memory "
                              f"--functions)")
        set_mode(self, mode)

    @classmethod
    def from_profile(cls, **kw) -> "RunOptions":
        """From Profile's keywords (docs/api.md)."""
        opts = cls()
        for name in PROFILE_KEYS:
            if name in kw:
                setattr(opts, name, kw[name])
        opts.rate = float(opts.rate) if opts.rate else None
        opts.sample = opts.mode == "sample"
        if "children" in kw:
            opts.children = kw["children"]
        if "flush_interval" in kw:
            opts.flush_interval = kw["flush_interval"]
        return opts

    def copy(self, **changes) -> "RunOptions":
        new = RunOptions.__new__(RunOptions)
        for name in self.__slots__:
            setattr(new, name, getattr(self, name))
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def __eq__(self, other):
        return isinstance(other, RunOptions) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __repr__(self):
        given = ", ".join(f"{n}={getattr(self, n)!r}" for n, d in _FIELDS.items()
                          if getattr(self, n) != d)
        return f"RunOptions({given})"

    # -------------------------------------------------------- reading
    @property
    def line_mode(self) -> bool:
        return bool(self.lines or self.lines_of or self.lines_all or self.include)

    def profile_kwargs(self, program_dir=None) -> dict:
        """Profile's keywords (plain data: also a child's configuration).
        ``program_dir``: what a command line's --lines-all means."""
        kw = {name: getattr(self, name) for name in PROFILE_KEYS}
        kw["lines"] = self.line_mode
        kw["lines_of"] = list(self.lines_of)
        kw["include"] = list(self.include)
        kw["exclude"] = list(self.exclude)
        kw["lines_all"] = program_dir if self.lines_all is True else self.lines_all or None
        kw["memory_sample"] = self.memory_sample or 0
        if self.timeline_min_duration is None:
            kw["timeline_min_duration"] = 0
        if self.timeline_max_events is None:
            kw["timeline_max_events"] = DEFAULT_MAX_EVENTS
        return kw

    def core_arguments(self) -> dict:
        """The C core's keywords, every one given (module.c holds no default)."""
        kw = self.profile_kwargs()
        sampled = kw["mode"] == "sample"
        stacks = kw["memory_stacks"]
        return dict(
            builtins=bool(kw["builtins"]), exact_builtins=bool(kw["exact_builtins"]),
            mode=kw["mode"], rate=float(kw["rate"] if sampled and kw["rate"] else
                                        default_rate(kw["wall"])),
            wall=bool(kw["wall"]), native=bool(kw["native"]), memory=bool(kw["memory"]),
            memory_sample=int(kw["memory_sample"]),
            # stacks cost a frame walk per recorded block: by default only when
            # few blocks are recorded (sampled memory)
            memory_stacks=bool(kw["memory_sample"]) if stacks is None else bool(stacks),
            paths=bool(kw["paths"]), native_allocs=bool(kw["native_allocs"]),
            temporary=int(kw["temporary"] or 0),
            # None: by the mode (tracing keeps cProfile's functions)
            gc=sampled if kw["gc"] is None else bool(kw["gc"]),
            asyncio=bool(kw["asyncio"]))

    # -------------------------------------------------------- the rules
    def name(self, field) -> str:
        """How the caller spells an option: --rate or rate."""
        if not self.cli:
            return field
        return {"timeline_min_duration": "--min-duration", "lines": "-l",
                "outfile": "-o", "asyncio": "--async"}.get(field, "--" + field.replace("_", "-"))

    def check(self) -> "RunOptions":
        """Refuse what does not combine, before anything runs (one line each,
        OptionError: a PyprofError and a ValueError); settle what the options
        imply. Returns self."""
        if self.checked:
            return self
        n, cli = self.name, self.cli
        lines = self.line_mode
        if self.module and self.code:
            raise OptionError("-m and -c cannot be used together")
        if self.sort not in SORT_KEYS:
            raise OptionError(f"unknown sort key '{self.sort}' (choose from "
                              f"{', '.join(SORT_KEYS)})")
        if cli:
            if self.flush_interval < 0:
                raise OptionError("--flush-interval must be >= 0")
            if self.outfile:
                self._check_outfile()
            if self.sample:
                self.mode = "sample"
        elif self.mode not in MODES:
            raise OptionError(f"mode must be 'trace', 'sample' or 'memory', not {self.mode}")
        # memory
        if self.memory_sample is not None:
            self.memory_sample = byte_count(self.memory_sample, n("memory_sample"))
            if cli:
                self.memory = True
        if cli and self.memory_stacks:
            self.memory = True
        if cli and (self.native_allocs or self.temporary):
            self.memory = True
        memory = self.memory or self.mode == "memory" or bool(self.memory_sample)
        if self.native_allocs:
            if not memory:
                raise OptionError("native_allocs=True goes with memory=True or mode='memory'")
            from . import _cprof
            why = _cprof.native_allocs_unsupported()
            if why:
                raise OptionError(why if cli else why.replace("--native-allocs",
                                                              "native_allocs=True"))
        if self.temporary is not None and self.temporary is not False:
            t = self.temporary
            if isinstance(t, bool) or not isinstance(t, (int, str)) or not str(t).isdigit() \
                    or not 1 <= int(t) < 2**24:
                raise OptionError(f"{n('temporary')} must be a number of allocations in "
                                  f"[1, 2**24), not {t!r}")
            self.temporary = int(t)
            if not memory:
                raise OptionError("temporary= goes with memory=True or mode='memory'")
            if self.memory_sample:
                raise OptionError(f"{n('temporary')} needs exact memory mode (every allocation "
                                  f"numbered), not {n('memory_sample')}")
        else:
            self.temporary = None
        if cli and self.functions and not self.memory:
            raise OptionError("--functions goes with --memory (function mode is the default "
                              "without it)")
        if cli and self.functions and (self.sample or lines):
            raise OptionError("--functions combines --memory with function tracing, not with "
                              "--sample or line tracing")
        if cli and self.memory and not (self.sample or lines or self.functions):
            self.mode = "memory"
        # timeline
        if not self.timeline:
            if cli and (self.timeline_min_duration is not None
                        or self.timeline_max_events is not None):
                raise OptionError("--min-duration and --timeline-max-events go with --timeline")
        else:
            if self.mode == "sample" or lines:
                raise OptionError(
                    "--timeline records function calls: it goes with function mode, not with "
                    "--sample or line tracing (-l, --lines-of, --lines-all)" if cli else
                    "timeline=True records function calls: it goes with function mode (also "
                    "with memory=True), not line mode, mode='sample' or mode='memory'")
            if self.mode == "memory":
                raise OptionError(
                    "--timeline records function calls: with --memory, add --functions" if cli
                    else "timeline=True records function calls: it goes with function mode "
                         "(also with memory=True), not line mode, mode='sample' or "
                         "mode='memory'")
            from .analysis.timeline import duration_ns
            if self.timeline_min_duration is None and self.asyncio:
                self.timeline_min_duration = ASYNC_MIN_DURATION_NS
            self.timeline_min_duration = duration_ns(self.timeline_min_duration or 0,
                                                     n("timeline_min_duration"))
            if self.timeline_max_events is None:
                self.timeline_max_events = ASYNC_MAX_EVENTS if self.asyncio else \
                    DEFAULT_MAX_EVENTS
            self.timeline_max_events = int(self.timeline_max_events)
            if not 0 <= self.timeline_max_events < 2**32:
                raise OptionError(f"{n('timeline_max_events')} must be in [0, 2**32), not "
                                  f"{self.timeline_max_events}")
        # asyncio tasks: the sampler's (task stacks) and function tracing's
        # (coroutines' awaiting time, which it always records)
        if self.asyncio and (lines or self.mode == "memory"):
            raise OptionError(f"{n('asyncio')} goes with "
                              + ("--sample or function tracing (not line tracing or --memory "
                                 "alone)" if cli else "mode='sample' or mode='trace' without "
                                 "line tracing"))
        if self.listen or self.live:
            flag = "--listen" if self.listen else "--live"
            if self.listen and self.live:
                raise OptionError("--listen and --live do not combine (--live listens already)")
            given = [f for f, on in (("-o", self.outfile), ("--sample", self.sample),
                                     ("--memory", self.memory), ("line tracing", lines),
                                     ("--timeline", self.timeline), ("--children", self.children),
                                     ("--objects", self.objects), ("--functions", self.functions),
                                     ("--gc", self.gc), ("--async", self.asyncio))
                     if on]
            if given:
                raise OptionError(f"{flag} runs the program without profiling it (profile it "
                                  f"with 'pyprof attach' or 'pyprof top'), not with "
                                  f"{', '.join(given)}")
        # sampling; --native also adds native frames to allocation stacks
        stacks = memory and (self.memory_stacks or (self.memory_sample and
                                                    self.memory_stacks is not False))
        if cli and not self.sample and (self.rate or self.wall or self.cpu or self.signal
                                        or self.dump_every or (self.native and not stacks)):
            raise OptionError("--rate, --cpu, --wall, --native, --signal and --dump-every go "
                              "with --sample (--native also with --memory-stacks or "
                              "--memory-sample)")
        if self.native and memory and self.mode != "sample" and not stacks:
            raise OptionError("native=True with memory needs the allocation stacks "
                              "(memory_stacks=True or memory_sample=)")
        if cli and self.native and stacks and not self.sample:
            from . import _cprof
            if "libunwind" not in _cprof.FEATURES:
                raise OptionError("--native needs libunwind, which this build of pyprof "
                                  "lacks (install libunwind-dev, then reinstall pyprof)")
        if self.mode == "sample":
            if self.rate is not None and not 0 < self.rate <= MAX_RATE:
                raise OptionError(f"{n('rate')} must be in (0, {MAX_RATE}] Hz, not "
                                  f"{self.rate:g}")
            if cli and lines:
                raise OptionError("--sample and line tracing (-l, --lines-of, --lines-all) do "
                                  "not combine: sampling already reports lines")
            if cli and self.native:
                from . import _cprof
                if "libunwind" not in _cprof.FEATURES:
                    raise OptionError("--native needs libunwind, which this build of pyprof "
                                      "lacks (install libunwind-dev, then reinstall pyprof)")
            if cli and self.signal:
                signal_number(self.signal)
            if cli and self.dump_every < 0:
                raise OptionError("--dump-every must be >= 0")
        self.checked = True
        return self

    def _check_outfile(self):
        from .export import MEMORY_FORMATS, STACK_FORMATS, format_for_path
        out = self.outfile
        check_writable(out)
        fmt = format_for_path(out)
        memory = (self.memory or self.memory_sample is not None or self.native_allocs
                  or self.temporary is not None)
        if fmt in MEMORY_FORMATS and not memory:
            raise OptionError(f"{out}: {fmt} shows memory: add --memory")
        memory_only = memory and not (self.sample or self.functions or self.lines
                                      or self.lines_of or self.lines_all)
        if fmt in STACK_FORMATS and memory_only:
            raise OptionError(f"{out}: {fmt} is made of call stacks, which memory profiling "
                              f"alone does not record: add --functions or --sample (or write "
                              f".memory.html, the allocation flame graph)")
        if fmt == "chrome" and not (self.timeline or memory):
            raise OptionError(f"{out}: a Chrome trace shows the timeline of calls or the "
                              f"memory curve: add --timeline (or --memory)")


def byte_count(value, option) -> int:
    """'4096', '512k', '5MB' (amounts.py's sizes, or an int) -> bytes in (0, 2**40]."""
    from .amounts import parse_size
    value = parse_size(value, option) if isinstance(value, str) else int(value)
    if not 0 <= value <= MAX_MEMORY_SAMPLE:
        raise OptionError(f"{option} must be a number of bytes in (0, 2**40], not {value}")
    return value


def usable_signal(name):
    """The number of signal `name` (USR2, SIGUSR2, 12), or None if pyprof
    cannot use it (KILL, STOP and PROF, which the sampler itself uses)."""
    import signal
    text = str(name).strip().upper()
    if text.isdigit():
        num = int(text)
        text = signal.Signals(num).name if num in signal.Signals._value2member_map_ else ""
    text = text if text.startswith("SIG") else "SIG" + text
    num = getattr(signal, text, None)
    if not isinstance(num, int) or text in ("SIGKILL", "SIGSTOP", "SIGPROF"):
        return None
    return num


def signal_number(name) -> int:
    """--signal's number; OptionError for a signal pyprof cannot use."""
    num = usable_signal(name)
    if num is None:
        raise OptionError(f"--signal: {name!r} is not a signal pyprof can use (e.g. USR1, USR2)")
    return num


def check_writable(path):
    """Fail before the program starts if the output cannot be written."""
    import os
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise OptionError(f"cannot write {path}: it is a directory")
    directory = os.path.dirname(path)
    try:
        # an unnamed file where the output goes (tempfile: ~10 ms of imports)
        os.close(os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600))
    except (AttributeError, OSError) as e:
        import errno
        if not isinstance(e, AttributeError) and e.errno in (
                errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS):
            # what tempfile would meet too
            raise OptionError(f"cannot write {path}: {e.strerror or e}") from None
        import tempfile                 # no O_TMPFILE here (OS or file system)
        try:
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as e2:
            raise OptionError(f"cannot write {path}: {e2.strerror or e2}") from None
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise OptionError(f"cannot write {path}: Permission denied")


# ------------------------------------------------------------------ the parser
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
_OURS = ("exclusive", "value_looks_like")       # keywords argparse does not take


def _dest(flags, kw) -> str:
    """argparse's destination of an option."""
    if "dest" in kw:
        return kw["dest"]
    flag = next((f for f in flags if f.startswith("--")), flags[0])
    return flag.lstrip("-").replace("-", "_")


def run_parser(prog="pyprof"):
    """The run options' argparse parser, built from OPTIONS (the command
    line's; %%cprof adds its own options to it)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        """argparse that reports a usage error as one line and exit status 2."""

        def error(self, message):
            raise OptionError(f"{message} (see '{self.prog} --help')")

    class Formatter(argparse.HelpFormatter):
        """argparse's, with the width shutil.get_terminal_size() would give:
        argparse makes one per add_argument, and shutil costs ~3 ms to import."""

        def __init__(self, prog, *args, width=None, **kw):
            if width is None and not args:
                width = _columns() - 2          # as HelpFormatter does
            super().__init__(prog, *args, width=width, **kw)

    p = Parser(
        prog=prog, formatter_class=Formatter,
        usage="python -m pyprof [-o FILE] [-s SORT] [-m module | -c code | script] [args...]",
        description="Profile a Python program (a drop-in for python -m cProfile). "
                    "Other commands: 'pyprof convert FILE.cprof -o OUT', "
                    "'pyprof view FILE.cprof [--view code|op|scope|graph|lines|memory]', "
                    "'pyprof stats FILE...', 'pyprof merge A B -o ALL', "
                    "'pyprof diff BEFORE AFTER' (each with --help).")
    groups = {None: p}
    for group, flags, kw in OPTIONS:
        if group not in groups:
            groups[group] = p.add_argument_group(group)
        where = groups[group]
        if "exclusive" in kw:
            key = (group, kw["exclusive"])
            if key not in groups:
                groups[key] = where.add_mutually_exclusive_group()
            where = groups[key]
        action = where.add_argument(*flags, **{k: v for k, v in kw.items() if k not in _OURS})
        if "value_looks_like" in kw:
            action.value_looks_like = kw["value_looks_like"]
    return p


def add_options(parser, names) -> None:
    """The OPTIONS entries whose long spelling is in `names`, added to another
    command's parser (``pyprof attach``, ``pyprof top``): the same flags, help
    and values as a run's."""
    groups = {None: parser}
    for group, flags, kw in OPTIONS:
        if max(flags, key=len) not in names:
            continue
        if group not in groups:
            groups[group] = parser.add_argument_group(group)
        groups[group].add_argument(*flags, **{k: v for k, v in kw.items() if k not in _OURS})


def _columns() -> int:
    """shutil.get_terminal_size().columns, without shutil."""
    import os
    import sys
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Option:
    """What the split and the plain reader need of an option (OPTIONS' entry or
    an argparse action): its value arity, and for the reader, how to store it."""
    __slots__ = ("dest", "nargs", "kw")

    def __init__(self, dest, nargs, kw):
        self.dest, self.nargs, self.kw = dest, nargs, kw

    def takes_value(self):
        """True: the next argument is the option's value; False: a flag; None:
        an optional value (nargs='?')."""
        return False if self.nargs == 0 else None if self.nargs == "?" else True


def _table(parser=None):
    """{option string: _Option}: from an argparse parser's actions (with the
    options %%cprof adds), else from OPTIONS."""
    table = {}
    if parser is not None:
        for action in parser._actions:      # argparse's list of actions (stable since 2.7)
            opt = _Option(action.dest, action.nargs, {
                "value_looks_like": getattr(action, "value_looks_like", None)})
            for flag in action.option_strings:
                table[flag] = opt
        return table
    for _, flags, kw in OPTIONS:
        action = kw.get("action")
        opt = _Option(_dest(flags, kw), 0 if action == "store_true" else kw.get("nargs"), kw)
        for flag in flags:
            table[flag] = opt
    return table


def split_argv(parser, argv):
    """(the options, the target and its arguments): the options end at the
    first argument that is neither an option nor an option's value, or at
    "--". Which options take a value is the parser's (None: OPTIONS')."""
    table = _table(parser)
    longs = [f for f in table if f.startswith("--")]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1:]
        if not a.startswith("-") or a == "-":
            break
        i += 1
        if a.startswith("--"):
            if "=" in a:                # --rate=100: the value is in the token
                continue
            opt = table.get(a)
            if opt is None:             # argparse's unique prefixes: --rat 100
                found = {id(table[f]): table[f] for f in longs if f.startswith(a)}
                opt = next(iter(found.values())) if len(found) == 1 else None
        else:
            # -o FILE, -oFILE, and flags run together: -lo FILE
            opt = None
            for k in range(1, len(a)):
                o = table.get("-" + a[k])
                if o is None or o.takes_value() is not False:
                    opt = o if k == len(a) - 1 else None
                    break
        if opt is None:
            continue
        takes = opt.takes_value()
        looks_like = opt.kw.get("value_looks_like")
        if takes is True or (takes is None and i < len(argv) and looks_like is not None
                             and looks_like(argv[i])):
            i += 1                      # an optional value only when it looks like one
    return argv[:i], argv[i:]


def _read_plain(argv):
    """argparse's namespace (as a dict) for a plain command line, read with
    OPTIONS alone; None for anything else (argparse then reads it, with its
    messages): --help, unknown options, prefixes, flags run together, values
    that start with '-' or do not convert, -oFILE."""
    table = _table()
    values = {}
    for _, flags, kw in OPTIONS:
        default = kw.get("default", False if kw.get("action") == "store_true" else None)
        values[_dest(flags, kw)] = list(default) if isinstance(default, list) else default
    given = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        flag, value = a.split("=", 1) if a.startswith("--") and "=" in a else (a, None)
        opt = table.get(flag)
        if opt is None:
            return None
        kw = opt.kw
        if "exclusive" in kw:
            if kw["exclusive"] in given:
                return None
            given.add(kw["exclusive"])
        if opt.nargs == 0:
            if value is not None:
                return None
            values[opt.dest] = True
            continue
        if value is None:
            if opt.nargs == "?":
                nxt = argv[i] if i < len(argv) else None
                if nxt is not None and not nxt.startswith("-") and kw["value_looks_like"](nxt):
                    value, i = nxt, i + 1
                else:
                    value = kw["const"]
            elif i < len(argv) and not argv[i].startswith("-"):
                value, i = argv[i], i + 1
            else:
                return None
        try:
            value = kw.get("type", str)(value)
        except ValueError:
            return None
        if "choices" in kw and value not in kw["choices"]:
            return None
        if kw.get("action") == "append":
            values[opt.dest].append(value)
        else:
            values[opt.dest] = value
    return values


def given_fields(argv, parser=None) -> set:
    """The RunOptions fields the options in `argv` (the options part of a
    command line, split_argv's first half) set: what configuration must not
    override (config.py). ``--cpu`` counts as giving ``wall``."""
    table = _table(parser)
    longs = [f for f in table if f.startswith("--")]
    found = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--" or not a.startswith("-") or a == "-":
            continue
        opts = []
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            opt = table.get(flag)
            if opt is None:
                cands = {id(table[f]): table[f] for f in longs if f.startswith(flag)}
                opt = next(iter(cands.values())) if len(cands) == 1 else None
            opts = [opt] if opt is not None else []
            if opt is not None and "=" not in a and opt.takes_value() is True:
                i += 1
        else:
            for k in range(1, len(a)):
                o = table.get("-" + a[k])
                if o is None:
                    break
                opts.append(o)
                if o.takes_value() is not False:
                    if k == len(a) - 1 and o.takes_value() is True:
                        i += 1
                    break
        for o in opts:
            dest = o.dest
            if dest in _FROM_ARGS:
                dest = _FROM_ARGS[dest][0]
            found.add("wall" if dest == "cpu" else dest)
    return found


def parse_run_args(argv, parser=None):
    """(RunOptions, the target and its arguments) from a command line."""
    mine, rest = split_argv(parser, argv)
    values = _read_plain(mine) if parser is None else None
    if values is None:
        parser = parser or run_parser()
        values = vars(parser.parse_args(mine))
    return RunOptions.from_args(values), rest
