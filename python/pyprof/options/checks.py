"""The rules of a run's options: what does not combine or is out of range,
one OptionError line each (a PyprofError and a ValueError), the option
spelled as the caller spells it (``--rate`` on the command line, ``rate`` in
the API); and what the options imply (``mode``; ``memory`` with
``memory_sample``...). Never declares an option (table.py) nor parses one.
"""
from __future__ import annotations

from ..errors import OptionError
from .table import (ASYNC_MAX_EVENTS, ASYNC_MIN_DURATION_NS, DEFAULT_MAX_EVENTS,
                    MAX_MEMORY_SAMPLE, MAX_RATE, MODES, SORT_KEYS)


def check(opts):
    """Refuse what does not combine, before anything runs (one line each,
    OptionError: a PyprofError and a ValueError); settle what the options
    imply. Returns opts."""
    if opts.checked:
        return opts
    n, cli = opts.name, opts.cli
    lines = opts.line_mode
    if opts.module and opts.code:
        raise OptionError("-m and -c cannot be used together")
    if opts.sort not in SORT_KEYS:
        raise OptionError(f"unknown sort key '{opts.sort}' (choose from "
                          f"{', '.join(SORT_KEYS)})")
    if cli:
        if opts.flush_interval < 0:
            raise OptionError("--flush-interval must be >= 0")
        if opts.outfile:
            check_outfile(opts)
        if opts.sample:
            opts.mode = "sample"
    elif opts.mode not in MODES:
        raise OptionError(f"mode must be 'trace', 'sample' or 'memory', not {opts.mode}")
    # memory
    if opts.memory_sample is not None:
        opts.memory_sample = byte_count(opts.memory_sample, n("memory_sample"))
        if cli:
            opts.memory = True
    if cli and opts.memory_stacks:
        opts.memory = True
    if cli and (opts.native_allocs or opts.temporary):
        opts.memory = True
    memory = opts.memory or opts.mode == "memory" or bool(opts.memory_sample)
    if opts.native_allocs:
        if not memory:
            raise OptionError("native_allocs=True goes with memory=True or mode='memory'")
        from .. import _cprof
        why = _cprof.native_allocs_unsupported()
        if why:
            raise OptionError(why if cli else why.replace("--native-allocs",
                                                          "native_allocs=True"))
    if opts.temporary is not None and opts.temporary is not False:
        t = opts.temporary
        if isinstance(t, bool) or not isinstance(t, (int, str)) or not str(t).isdigit() \
                or not 1 <= int(t) < 2**24:
            raise OptionError(f"{n('temporary')} must be a number of allocations in "
                              f"[1, 2**24), not {t!r}")
        opts.temporary = int(t)
        if not memory:
            raise OptionError("temporary= goes with memory=True or mode='memory'")
        if opts.memory_sample:
            raise OptionError(f"{n('temporary')} needs exact memory mode (every allocation "
                              f"numbered), not {n('memory_sample')}")
    else:
        opts.temporary = None
    if cli and opts.functions and not opts.memory:
        raise OptionError("--functions goes with --memory (function mode is the default "
                          "without it)")
    if cli and opts.functions and (opts.sample or lines):
        raise OptionError("--functions combines --memory with function tracing, not with "
                          "--sample or line tracing")
    if cli and opts.memory and not (opts.sample or lines or opts.functions):
        opts.mode = "memory"
    # timeline
    if not opts.timeline:
        if cli and (opts.timeline_min_duration is not None
                    or opts.timeline_max_events is not None):
            raise OptionError("--min-duration and --timeline-max-events go with --timeline")
    else:
        if opts.mode == "sample" or lines:
            raise OptionError(
                "--timeline records function calls: it goes with function mode, not with "
                "--sample or line tracing (-l, --lines-of, --lines-all)" if cli else
                "timeline=True records function calls: it goes with function mode (also "
                "with memory=True), not line mode, mode='sample' or mode='memory'")
        if opts.mode == "memory":
            raise OptionError(
                "--timeline records function calls: with --memory, add --functions" if cli
                else "timeline=True records function calls: it goes with function mode "
                     "(also with memory=True), not line mode, mode='sample' or "
                     "mode='memory'")
        from ..analysis.timeline import duration_ns
        if opts.timeline_min_duration is None and opts.asyncio:
            opts.timeline_min_duration = ASYNC_MIN_DURATION_NS
        opts.timeline_min_duration = duration_ns(opts.timeline_min_duration or 0,
                                                 n("timeline_min_duration"))
        if opts.timeline_max_events is None:
            opts.timeline_max_events = ASYNC_MAX_EVENTS if opts.asyncio else \
                DEFAULT_MAX_EVENTS
        opts.timeline_max_events = int(opts.timeline_max_events)
        if not 0 <= opts.timeline_max_events < 2**32:
            raise OptionError(f"{n('timeline_max_events')} must be in [0, 2**32), not "
                              f"{opts.timeline_max_events}")
    # asyncio tasks: the sampler's (task stacks) and function tracing's
    # (coroutines' awaiting time, which it always records)
    if opts.asyncio and (lines or opts.mode == "memory"):
        raise OptionError(f"{n('asyncio')} goes with "
                          + ("--sample or function tracing (not line tracing or --memory "
                             "alone)" if cli else "mode='sample' or mode='trace' without "
                             "line tracing"))
    if opts.listen or opts.live:
        flag = "--listen" if opts.listen else "--live"
        if opts.listen and opts.live:
            raise OptionError("--listen and --live do not combine (--live listens already)")
        given = [f for f, on in (("-o", opts.outfile), ("--sample", opts.sample),
                                 ("--memory", opts.memory), ("line tracing", lines),
                                 ("--timeline", opts.timeline), ("--children", opts.children),
                                 ("--objects", opts.objects), ("--functions", opts.functions),
                                 ("--gc", opts.gc), ("--async", opts.asyncio))
                 if on]
        if given:
            raise OptionError(f"{flag} runs the program without profiling it (profile it "
                              f"with 'pyprof attach' or 'pyprof top'), not with "
                              f"{', '.join(given)}")
    # sampling; --native also adds native frames to allocation stacks
    stacks = memory and (opts.memory_stacks or (opts.memory_sample and
                                                opts.memory_stacks is not False))
    if cli and not opts.sample and (opts.rate or opts.wall or opts.cpu or opts.signal
                                    or opts.dump_every or (opts.native and not stacks)):
        raise OptionError("--rate, --cpu, --wall, --native, --signal and --dump-every go "
                          "with --sample (--native also with --memory-stacks or "
                          "--memory-sample)")
    if opts.native and memory and opts.mode != "sample" and not stacks:
        raise OptionError("native=True with memory needs the allocation stacks "
                          "(memory_stacks=True or memory_sample=)")
    if cli and opts.native and stacks and not opts.sample:
        from .. import _cprof
        if "libunwind" not in _cprof.FEATURES:
            raise OptionError("--native needs libunwind, which this build of pyprof "
                              "lacks (install libunwind-dev, then reinstall pyprof)")
    if opts.mode == "sample":
        if opts.rate is not None and not 0 < opts.rate <= MAX_RATE:
            raise OptionError(f"{n('rate')} must be in (0, {MAX_RATE}] Hz, not "
                              f"{opts.rate:g}")
        if cli and lines:
            raise OptionError("--sample and line tracing (-l, --lines-of, --lines-all) do "
                              "not combine: sampling already reports lines")
        if cli and opts.native:
            from .. import _cprof
            if "libunwind" not in _cprof.FEATURES:
                raise OptionError("--native needs libunwind, which this build of pyprof "
                                  "lacks (install libunwind-dev, then reinstall pyprof)")
        if cli and opts.signal:
            signal_number(opts.signal)
        if cli and opts.dump_every < 0:
            raise OptionError("--dump-every must be >= 0")
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
    from ..amounts import parse_size
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


