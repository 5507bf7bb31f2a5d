"""One measured run: a pyperformance benchmark under one profiler configuration.

    python target.py CONFIG OUT.json SCRIPT [ARGS...]

Runs SCRIPT (a pyperformance ``run_benchmark.py`` with ``--worker -l N -w 0 -n 1``,
so it runs in this process) as ``__main__`` with the profiler of CONFIG enabled
around it, and writes {"wall": s, "cpu": s, ...} to OUT.json. Only the profiled
region is timed: interpreter start-up, imports of the profiler and writing its
results are left out for every configuration alike. The benchmark's own output
goes to /dev/null.

CONFIG is one of CONFIGS below. "count" and "count-lines" are not timed: they
count call events (cProfile's call count, builtins included) and line events
(pyprof's hits with every line traced) for the ns-per-event figures.

Sampling configurations: "pyprof-sample" (the defaults: CPU time, 250 Hz),
"pyprof-sample-native", "pyprof-wall-1k" (wall clock, 1 kHz), "pyinstrument"
in-process; "py-spy", "austin" and "scalene" run this script under them (see
run.py): the region is timed the same way, and its CPU time includes the
sampler's own process (our parent) for the out-of-process ones. A pyprof
sampling run also writes its capture and reports its size.

Memory configurations: "pyprof-memory" (exact), "pyprof-memory-sample" (512 KiB),
"tracemalloc" (1 frame, as pyprof's line attribution), "tracemalloc-snapshot"
(the same plus a snapshot and its per-line statistics at the end, inside the
timed region: what a user does to read it), "memray" (its Tracker, writing its
capture file), "pyprof-native" (exact, with --native-allocs), "memray-native"
(its Tracker with native stack traces), "memory_profiler" (its line-by-line mode on every function of
the benchmark's file, as @profile would), and "scalene-full" (run under
scalene's launcher, CPU and memory: see run.py).

Line-mode configurations: "pyprof-lines-file" and "lineprof-file" trace every
function of the benchmark's file (line_profiler through its auto-profile mode,
kernprof -p); "pyprof-lines-all" and "pprofile" trace every line that runs;
"pyprof-lines-file-memory" is "pyprof-lines-file" with exact memory (-l --memory).

Any pyprof configuration with the suffix "@before" runs with the pyprof package
found in the directory PYPROF_BENCH_BEFORE (an earlier build) instead of the
installed one: a change is measured before and after in the same rounds.
"""
import json
import os
import runpy
import sys
import time

# sys.monitoring event bits (3.12/3.13)
PY_EVENTS = 1 | 2 | 4 | 8 | 4096 | 8192     # START RESUME RETURN YIELD UNWIND THROW
C_EVENTS = 16 | 32768 | 65536               # CALL C_RETURN C_RAISE
LINE = 32


def _pyprof(**kw):
    import pyprof
    p = pyprof.Profile(**kw)
    return p.enable, p.disable


def _cprofile():
    import cProfile
    p = cProfile.Profile()
    return p.enable, p.disable


def _yappi():
    import yappi
    yappi.set_clock_type("wall")        # its default CPU clock is a syscall per event
    return yappi.start, yappi.stop


def _pyinstrument():
    from pyinstrument import Profiler
    p = Profiler()                      # default: 1 ms interval, wall clock
    return p.start, p.stop


def _pyprof_lines(argv, **kw):
    import pyprof
    if kw.pop("file", False):
        kw["lines_of"] = [os.path.abspath(argv[0])]
    p = pyprof.Profile(**kw)
    return p.enable, p.disable


def _lineprof_file(argv):
    """line_profiler's auto-profile mode on the benchmark script (kernprof -p):
    every function in it is decorated, the decorators switch tracing on."""
    import builtins
    from line_profiler import LineProfiler
    from line_profiler.autoprofile.autoprofile import run

    prof = LineProfiler()
    builtins.profile = prof

    def runner(argv):
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        run(argv[0], {"__file__": argv[0], "__name__": "__main__", "profile": prof, "prof": prof},
            prof_mod=[argv[0]])
    return (lambda: None), (lambda: None), runner


def _pprofile(argv):
    import pprofile
    p = pprofile.Profile()          # deterministic: every line of every file
    return p.enable, p.disable


def _floor(mask):
    import floorhook
    return (lambda: floorhook.install(mask)), floorhook.uninstall


CONFIGS = {
    "base": lambda: (lambda: None, lambda: None),
    "pyprof": _pyprof,
    "pyprof-exact": lambda: _pyprof(exact_builtins=True),
    "pyprof-nobuiltins": lambda: _pyprof(builtins=False),
    "pyprof-nopaths": lambda: _pyprof(paths=False),
    # --timeline at its defaults (all calls, at most 1M events held)
    "pyprof-timeline": lambda: _pyprof(timeline=True),
    "cProfile": _cprofile,
    "yappi": _yappi,
    "pyinstrument": _pyinstrument,
    "floor": lambda: _floor(PY_EVENTS | C_EVENTS),
    "floor-py": lambda: _floor(PY_EVENTS),
    "floor-lines": lambda: _floor(PY_EVENTS | C_EVENTS | LINE),
    "floor-pep523": lambda: _floor_pep523(),
    "pyprof-sample": lambda: _pyprof_sample(),
    "pyprof-sample-native": lambda: _pyprof_sample(native=True),
    "pyprof-wall-1k": lambda: _pyprof_sample(wall=True, rate=1000),
    # CPU mode's timers (docs/sampling.md, "CPU timers"): task-clock events at
    # 250 Hz to 10 kHz; ITIMER_PROF (at most the kernel's tick, whatever is asked)
    **{f"pyprof-cpu-{name}": (lambda r=r: _pyprof_sample(rate=r, cpu_timer="task-clock"))
       for name, r in (("250", 250), ("1k", 1000), ("4k", 4000), ("10k", 10000))},
    "pyprof-itimer": lambda: _pyprof_sample(cpu_timer="itimer"),
    "pyprof-itimer-1k": lambda: _pyprof_sample(rate=1000, cpu_timer="itimer"),
    # run under an out-of-process sampler (py-spy, austin) or in-process from
    # its own launcher (scalene): nothing to start here
    "pyprof-memory": lambda: _pyprof_memory(),
    "pyprof-memory-sample": lambda: _pyprof_memory(memory_sample=512 << 10),
    "tracemalloc": lambda: _tracemalloc(False),
    "tracemalloc-snapshot": lambda: _tracemalloc(True),
    "memray": lambda: _memray(),
    # C code's malloc/mmap too (--native-allocs); memray with native stacks
    "pyprof-native": lambda: _pyprof_memory(native_allocs=True),
    "memray-native": lambda: _memray(native_traces=True),
    "scalene-full": lambda: (lambda: None, lambda: None),
    "py-spy": lambda: (lambda: None, lambda: None),
    **{f"py-spy-{name}": (lambda: (lambda: None, lambda: None)) for name in ("1k", "4k", "10k")},
    "austin": lambda: (lambda: None, lambda: None),
    "scalene": lambda: (lambda: None, lambda: None),
}
EXTERNAL = {"py-spy", "py-spy-1k", "py-spy-4k", "py-spy-10k", "austin"}
_sampler = []


def _pyprof_memory(**kw):
    import pyprof
    p = pyprof.Profile(mode="memory", **kw)
    return p.enable, p.disable


def _tracemalloc(snapshot):
    import tracemalloc

    def stop():
        if snapshot:
            tracemalloc.take_snapshot().statistics("lineno")
        tracemalloc.stop()
    return (lambda: tracemalloc.start(1)), stop


def _memray(**kw):
    import tempfile
    import memray
    path = os.path.join(tempfile.mkdtemp(prefix="memray-"), "run.bin")
    tracker = memray.Tracker(path, **kw)
    return tracker.__enter__, (lambda: tracker.__exit__(None, None, None))


def _memory_profiler(argv):
    """memory_profiler's line-by-line mode on every function of the benchmark
    file (what @profile on each would do)."""
    import types
    from memory_profiler import LineProfiler
    prof = LineProfiler(backend="psutil")
    path = os.path.abspath(argv[0])

    def runner(argv):
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(path))
        with open(path) as f:
            code = compile(f.read(), path, "exec")
        consts = [code]
        while consts:                    # every function defined in the file
            c = consts.pop()
            for k in c.co_consts:
                if isinstance(k, types.CodeType):
                    prof.code_map.add(k)         # what add_function does with f.__code__
                    consts.append(k)
        prof.enable_by_count()
        try:
            exec(code, {"__name__": "__main__", "__file__": path})
        finally:
            prof.disable_by_count()
    return (lambda: None), (lambda: None), runner


def _pyprof_sample(**kw):
    import pyprof
    p = pyprof.Profile(mode="sample", **kw)
    _sampler.append(p)
    return p.enable, p.disable


def _parent_cpu():
    """CPU seconds used so far by our parent process (an out-of-process sampler),
    summed over its threads (schedstat: nanoseconds, not clock ticks)."""
    total = 0
    task_dir = f"/proc/{os.getppid()}/task"
    for tid in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass                        # a thread that just exited
    return total / 1e9
BEFORE = "@before"          # suffix of a configuration run with PYPROF_BENCH_BEFORE's pyprof
# Configurations that need the script path.
ARGV_CONFIGS = {
    "pyprof-lines-file": lambda argv: _pyprof_lines(argv, file=True),
    "pyprof-lines-all": lambda argv: _pyprof_lines(argv, include=["*"]),
    # line mode with exact memory on the same functions (the tables of -l --memory)
    "pyprof-lines-file-memory": lambda argv: _pyprof_lines(argv, file=True, memory=True),
    "lineprof-file": _lineprof_file,
    "pprofile": _pprofile,
    "memory_profiler": _memory_profiler,
}


def _floor_pep523():
    import floorhook
    return (lambda: floorhook.install_eval(True)), (lambda: floorhook.install_eval(False))


def _run_script(argv):
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")


def count_lines(argv):
    import pyprof
    p = pyprof.Profile(include=["*"])
    p.enable()
    try:
        _run_script(argv)
    finally:
        p.disable()
    return sum(c.hits for c in p.session().lines.values())


def count_calls(argv):
    import cProfile
    p = cProfile.Profile()
    p.enable()
    try:
        _run_script(argv)
    finally:
        p.disable()
    p.create_stats()
    own = ("cProfile.py", "runpy.py", os.path.basename(__file__))
    return sum(v[1] for k, v in p.stats.items() if not k[0].endswith(own))


def main():
    config, out, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    if config.endswith(BEFORE):
        # The same configuration with another build of pyprof (the directory in
        # PYPROF_BENCH_BEFORE holds its package): a change measured before and
        # after in the same rounds, paired.
        sys.path.insert(0, os.environ["PYPROF_BENCH_BEFORE"])
        config = config.removesuffix(BEFORE)
    devnull = open(os.devnull, "w")
    saved_stdout = sys.stdout
    sys.stdout = devnull
    result = {"config": config}
    try:
        if config == "count":
            result["calls"] = count_calls(argv)
        elif config == "count-lines":
            result["lines"] = count_lines(argv)
        else:
            made = ARGV_CONFIGS[config](argv) if config in ARGV_CONFIGS else CONFIGS[config]()
            start, stop = made[:2]
            runner = made[2] if len(made) > 2 else _run_script
            p0 = _parent_cpu() if config in EXTERNAL else 0.0
            c0 = time.process_time()
            t0 = time.perf_counter()
            start()
            try:
                runner(argv)
            finally:
                stop()
                t1 = time.perf_counter()
                c1 = time.process_time()
                p1 = _parent_cpu() if config in EXTERNAL else 0.0
            result.update(wall=t1 - t0, cpu=c1 - c0 + p1 - p0)
            if _sampler:
                path = out + ".cprof"
                _sampler[0].dump(path)
                result["capture_bytes"] = os.path.getsize(path)
                result["samples"] = sum(c.count for c in _sampler[0].session().samples.values())
                os.unlink(path)
    finally:
        sys.stdout = saved_stdout
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
