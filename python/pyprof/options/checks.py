"""The rules of a run's options: what does not combine or is out of range,
one OptionError line each (a PyprofError and a ValueError), the option
spelled as the caller spells it (``--rate`` on the command line, ``rate`` in
the API); and what the options imply (``mode``; ``memory`` with
``memory_sample``...). Never declares an option (table.py) nor parses one.
"""
from ..errors import OptionError
from .table import (ASYNC_MAX_EVENTS, ASYNC_MIN_DURATION_NS, DEFAULT_MAX_EVENTS,
                    MAX_MEMORY_SAMPLE, MAX_RATE, MIN_RATE, MODES, SORT_KEYS)


def _memory(opts) -> bool:
    """The run records memory (after what the options imply is settled)."""
    return opts.memory or opts.mode == "memory" or bool(opts.memory_sample)


def _stacks(opts) -> bool:
    """Allocation stacks are recorded."""
    return _memory(opts) and bool(opts.memory_stacks or (
        opts.memory_sample and opts.memory_stacks is not False))


def _need_libunwind():
    from .. import _cprof
    if "libunwind" not in _cprof.FEATURES:
        raise OptionError("--native needs libunwind, which this build of pyprof "
                          "lacks (install libunwind-dev, then reinstall pyprof)")


# ------------------------------------------------------------------ the rules
# Each rule refuses one thing (one OptionError line) or settles what the
# options imply; check() runs them in this order, the first refusal wins.
def module_or_code(opts):
    if opts.module and opts.code:
        raise OptionError("-m and -c cannot be used together")


def sort_key(opts):
    if opts.sort not in SORT_KEYS:
        raise OptionError(f"unknown sort key '{opts.sort}' (choose from "
                          f"{', '.join(SORT_KEYS)})")


def command_line_basics(opts):
    """--flush-interval, -o, and --sample's mode (the API names the mode)."""
    if opts.cli:
        if opts.flush_interval < 0:
            raise OptionError("--flush-interval must be >= 0")
        if opts.outfile:
            check_outfile(opts)
        if opts.sample:
            opts.mode = "sample"
    elif opts.mode not in MODES:
        raise OptionError(f"mode must be 'trace', 'sample' or 'memory', not {opts.mode}")


def memory_implied(opts):
    """--memory-sample's bytes; on the command line, the memory options imply --memory."""
    if opts.memory_sample is not None:
        opts.memory_sample = byte_count(opts.memory_sample, opts.name("memory_sample"))
        if opts.cli:
            opts.memory = True
    if opts.cli and (opts.memory_stacks or opts.native_allocs or opts.temporary):
        opts.memory = True


def native_allocs(opts):
    if opts.native_allocs:
        if not _memory(opts):
            raise OptionError("native_allocs=True goes with memory=True or mode='memory'")
        from .. import _cprof
        why = _cprof.native_allocs_unsupported()
        if why:
            raise OptionError(why if opts.cli else why.replace("--native-allocs",
                                                               "native_allocs=True"))


def temporary(opts):
    n = opts.name
    t = opts.temporary
    if t is None or t is False:
        opts.temporary = None
        return
    if isinstance(t, bool) or not isinstance(t, (int, str)) or not str(t).isdigit() \
            or not 1 <= int(t) < 2**24:
        raise OptionError(f"{n('temporary')} must be a number of allocations in "
                          f"[1, 2**24), not {t!r}")
    opts.temporary = int(t)
    if not _memory(opts):
        raise OptionError("temporary= goes with memory=True or mode='memory'")
    if opts.memory_sample:
        raise OptionError(f"{n('temporary')} needs exact memory mode (every allocation "
                          f"numbered), not {n('memory_sample')}")


def functions(opts):
    """--functions: --memory with call tracing; --memory alone is memory mode."""
    if not opts.cli:
        return
    if opts.functions and not opts.memory:
        raise OptionError("--functions goes with --memory (function mode is the default "
                          "without it)")
    if opts.functions and (opts.sample or opts.line_mode):
        raise OptionError("--functions combines --memory with function tracing, not with "
                          "--sample or line tracing")
    if opts.memory and not (opts.sample or opts.line_mode or opts.functions):
        opts.mode = "memory"


def timeline_mode(opts):
    cli = opts.cli
    if not opts.timeline:
        if cli and (opts.timeline_min_duration is not None
                    or opts.timeline_max_events is not None):
            raise OptionError("--min-duration and --timeline-max-events go with --timeline")
        return
    api = ("timeline=True records function calls: it goes with function mode (also with "
           "memory=True), not line mode, mode='sample' or mode='memory'")
    if opts.mode == "sample" or opts.line_mode:
        raise OptionError("--timeline records function calls: it goes with function mode, "
                          "not with --sample or line tracing (-l, --lines-of, --lines-all)"
                          if cli else api)
    if opts.mode == "memory":
        raise OptionError("--timeline records function calls: with --memory, add "
                          "--functions" if cli else api)


def timeline_limits(opts):
    """The shortest call kept and the events kept at most; --async's defaults."""
    if not opts.timeline:
        return
    from ..base.amounts import duration_ns
    if opts.timeline_min_duration is None and opts.asyncio:
        opts.timeline_min_duration = ASYNC_MIN_DURATION_NS
    opts.timeline_min_duration = duration_ns(opts.timeline_min_duration or 0,
                                             opts.name("timeline_min_duration"))
    if opts.timeline_max_events is None:
        opts.timeline_max_events = ASYNC_MAX_EVENTS if opts.asyncio else DEFAULT_MAX_EVENTS
    opts.timeline_max_events = int(opts.timeline_max_events)
    if not 0 <= opts.timeline_max_events < 2**32:
        raise OptionError(f"{opts.name('timeline_max_events')} must be in [0, 2**32), not "
                          f"{opts.timeline_max_events}")


def asyncio_tasks(opts):
    """The sampler's task stacks and function tracing's awaiting time."""
    if opts.asyncio and (opts.line_mode or opts.mode == "memory"):
        raise OptionError(f"{opts.name('asyncio')} goes with "
                          + ("--sample or function tracing (not line tracing or --memory "
                             "alone)" if opts.cli else "mode='sample' or mode='trace' without "
                             "line tracing"))


def listen_or_live(opts):
    if not (opts.listen or opts.live):
        return
    if opts.listen and opts.live:
        raise OptionError("--listen and --live do not combine (--live listens already)")
    given = [f for f, on in (("-o", opts.outfile), ("--sample", opts.sample),
                             ("--memory", opts.memory), ("line tracing", opts.line_mode),
                             ("--timeline", opts.timeline), ("--children", opts.children),
                             ("--objects", opts.objects), ("--functions", opts.functions),
                             ("--gc", opts.gc), ("--async", opts.asyncio)) if on]
    if given:
        raise OptionError(f"{'--listen' if opts.listen else '--live'} runs the program "
                          f"without profiling it (profile it with 'pyprof attach' or 'pyprof "
                          f"top'), not with {', '.join(given)}")


def sampling_options(opts):
    """The sampling options go with --sample; --native also adds native frames
    to allocation stacks."""
    stacks = _stacks(opts)
    if opts.cli and not opts.sample and (opts.rate or opts.wall or opts.cpu or opts.signal
                                         or opts.cpu_timer not in (None, "auto")
                                         or opts.dump_every or (opts.native and not stacks)):
        raise OptionError("--rate, --cpu, --cpu-timer, --wall, --native, --signal and --dump-every go "
                          "with --sample (--native also with --memory-stacks or "
                          "--memory-sample)")
    if opts.native and _memory(opts) and opts.mode != "sample" and not stacks:
        raise OptionError("native=True with memory needs the allocation stacks "
                          "(memory_stacks=True or memory_sample=)")
    if opts.cli and opts.native and stacks and not opts.sample:
        _need_libunwind()


def sample_mode(opts):
    if opts.mode != "sample":
        return
    if opts.rate is not None and not MIN_RATE <= opts.rate <= MAX_RATE:
        raise OptionError(f"{opts.name('rate')} must be in [{MIN_RATE}, {MAX_RATE}] Hz, not "
                          f"{opts.rate:g}")
    if opts.cpu_timer not in (None, "auto") and opts.wall:
        raise OptionError(f"{opts.name('cpu_timer')} is CPU mode's timer: wall mode has "
                          "per-thread wall-clock timers")
    if not opts.cli:
        return
    if opts.line_mode:
        raise OptionError("--sample and line tracing (-l, --lines-of, --lines-all) do "
                          "not combine: sampling already reports lines")
    if opts.native:
        _need_libunwind()
    if opts.signal:
        signal_number(opts.signal)
    if opts.dump_every < 0:
        raise OptionError("--dump-every must be >= 0")


def opcodes_mode(opts):
    """--opcodes: sampling reads each sample's instruction, line tracing
    counts the traced functions' instructions; nothing else sees them."""
    if opts.opcodes and opts.mode != "sample" and not opts.line_mode:
        raise OptionError(f"{opts.name('opcodes')} needs a mode that sees instructions: "
                          f"--sample, or line tracing (-l, --lines-of, --lines-all)")


RULES = (module_or_code, sort_key, command_line_basics, memory_implied, native_allocs,
         temporary, functions, timeline_mode, timeline_limits, asyncio_tasks, listen_or_live,
         sampling_options, sample_mode, opcodes_mode)


def check(opts):
    """Run every rule once (RunOptions.check). Returns opts."""
    if not opts.checked:
        for rule in RULES:
            rule(opts)
        opts.checked = True
    return opts


def check_outfile(opts):
    from ..export import MEMORY_FORMATS, STACK_FORMATS, format_for_path
    out = opts.outfile
    check_writable(out)
    fmt = format_for_path(out)
    memory = (opts.memory or opts.memory_sample is not None or opts.native_allocs
              or opts.temporary is not None)
    if fmt in MEMORY_FORMATS and not memory:
        raise OptionError(f"{out}: {fmt} shows memory: add --memory")
    memory_only = memory and not (opts.sample or opts.functions or opts.lines
                                  or opts.lines_of or opts.lines_all)
    if fmt in STACK_FORMATS and memory_only:
        raise OptionError(f"{out}: {fmt} is made of call stacks, which memory profiling "
                          f"alone does not record: add --functions or --sample (or write "
                          f".memory.html, the allocation flame graph)")
    if fmt == "chrome" and not (opts.timeline or memory):
        raise OptionError(f"{out}: a Chrome trace shows the timeline of calls or the "
                          f"memory curve: add --timeline (or --memory)")




def byte_count(value, option) -> int:
    """'4096', '512k', '5MB' (amounts.py's sizes, or an int) -> bytes in (0, 2**40]."""
    from ..base.amounts import parse_size
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


