"""Differential tests: random programs (tests/programs/progen.py) run under pyprof and
under independent reference tools, compared figure by figure.

Checks (each in fresh subprocesses, the program loaded from a real file and
run once unprofiled first, so that imports and caches are warm for every run):

funcs   function mode = cProfile: pstats keys, calls, primitive calls and
        callers (calls, primitive calls per caller), from pyprof's pstats
        export (``pyprof.export.export(session, "pstats", path)``) against
        ``cProfile.Profile().stats``, both by ``runcall(main)``, with the
        collector off. On 3.12+ both the default mode and
        ``exact_builtins=True``; and both with ``builtins=False`` (on 3.11
        pyprof's frame-evaluation engine). Documented differences (docs/columns.md)
        are followed, not papered over: cProfile sees only the enabling
        thread on 3.11 (pyprof's main-thread figures are compared there, from
        ``Session.fstats``/``edges``); on 3.12+ cProfile pushes all threads on
        one stack (threads are run one at a time here, with a long switch
        interval, so only a thread's first frame, threading's ``_bootstrap``,
        gets a foreign caller in cProfile: its callers are not compared).
lines   line hits of every line of the program's file = the interpreter's own
        line events counted by a tool of our own (``sys.monitoring`` LINE on
        3.12+, ``sys.settrace`` + ``threading.settrace`` on 3.11), against
        ``Profile(lines_all=<the program's directory>)``'s ``line_totals()``.
memory  net bytes per line of the program's file at the end = tracemalloc's
        per-line statistics (``start(1)``, ``statistics("lineno")``), as in
        tests/programs/memtruth.py: every line where either side has at least 8 KiB,
        within 1% or 4 KiB (the programs keep blocks of 8 KiB or more; small
        objects from CPython's free lists, such as list headers, tracemalloc
        charges to the line that last reused them, pyprof to the line that
        allocated them: a few KiB may move between lines).
sample  every Python frame of every stack sampled by ``Profile(mode="sample",
        wall=True, rate=2000)`` is a function that started in the same
        program (``sys.monitoring`` PY_START on 3.12+; the profile hook,
        ``sys.setprofile``, from each thread's first frame, on 3.11), or a frame that was already running (the harness,
        pyprof's own ``enable``/``disable``, threading's bootstrap frames).

Command line (the harness and ``make fuzz``):
  python tests/programs/difftest.py fuzz [--seed S] [--n N] [--seconds T] [--checks a,b]
  python tests/programs/difftest.py run CHECK PROGRAM [TOOL]   (one run, JSON on stdout)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(os.path.dirname(HERE), "difftest_cases")   # tests/difftest_cases
CHECKS = ("funcs", "lines", "memory", "sample")
PY = "%d.%d" % sys.version_info[:2]
SAMPLE_RATE = 2000
MEMORY_MIN = 8192
MEMORY_SLACK = 4096


# ---------------------------------------------------------------------------
# The harness: runs in a subprocess, prints JSON.

def _load(path):
    import importlib.util
    name = "difftest_prog_%d" % (abs(hash(path)) % 10**8)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.main()                          # warm: imports, caches, first-run effects
    return mod


def _key(k):
    return "%s:%d:%s" % k


def _own(key):
    filename, _, name = key
    return (filename.endswith(("cProfile.py", "profiler.py"))
            or "_lsprof.Profiler" in name or "pyprof._cprof.Profiler" in name
            or "/pyprof/" in filename)


def _norm(stats):
    out = {}
    for key, (cc, nc, _tt, _ct, callers) in stats.items():
        if _own(key):
            continue
        out[_key(key)] = [cc, nc, {_key(c): list(v[:2]) for c, v in callers.items()
                                   if not _own(c)}]
    return out


def _main_thread_stats(session):
    """pstats-shaped counts of the main thread only, from the Session's public
    per-thread records (cProfile on 3.11 sees only the enabling thread)."""
    import threading
    main = threading.main_thread().ident
    tids = {t.index for t in session.threads.values() if t.ident == main}
    key = {fid: f.pstats_key for fid, f in session.functions.items()}
    stats = {}
    for (thread, fid), c in session.fstats.items():
        if thread in tids and c.calls:
            cc, nc, _, _, callers = stats.get(key[fid], (0, 0, 0, 0, {}))
            stats[key[fid]] = (cc + c.primitive_calls, nc + c.calls, 0, 0, callers)
    for (thread, caller, callee), c in session.edges.items():
        if thread in tids and c.calls and key[callee] in stats:
            callers = stats[key[callee]][4]
            nc, cc = callers.get(key[caller], (0, 0))[:2]
            callers[key[caller]] = (nc + c.calls, cc + c.primitive_calls)
    return stats


def run_funcs(path):
    import cProfile
    import gc
    import pstats

    import pyprof
    from pyprof.export import export
    mod = _load(path)
    # Threads run one at a time: the one started keeps the GIL until it ends.
    sys.setswitchinterval(100.0)
    out = {}
    variants = [("cprofile", cProfile.Profile, {}), ("pyprof", pyprof.Profile, {}),
                ("cprofile_nob", cProfile.Profile, {"builtins": False}),
                ("pyprof_nob", pyprof.Profile, {"builtins": False})]
    if sys.version_info >= (3, 12):
        variants.append(("pyprof_exact", pyprof.Profile, {"exact_builtins": True}))
    for name, cls, kw in variants:
        prof = cls(**kw)
        gc.collect()
        gc.disable()
        try:
            prof.runcall(mod.main)
        finally:
            gc.enable()
        if name.startswith("cprofile"):
            prof.create_stats()
            out[name] = _norm(prof.stats)
            continue
        session = prof.session()
        with tempfile.TemporaryDirectory() as tmp:
            export(session, "pstats", os.path.join(tmp, "out.prof"))
            out[name] = _norm(pstats.Stats(os.path.join(tmp, "out.prof")).stats)
        out[name + "_main"] = _norm(_main_thread_stats(session))
    return out


def run_lines(path):
    import threading
    from collections import Counter

    import pyprof
    mod = _load(path)
    ref = Counter()
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        tool = next(i for i in (4, 3, 5, 1, 0) if mon.get_tool(i) is None)
        mon.use_tool_id(tool, "difftest-line-counter")

        def line(code, lineno):
            if code.co_filename != path:
                return mon.DISABLE
            ref[lineno] += 1

        mon.register_callback(tool, mon.events.LINE, line)
        # 3.13.0 gives a tool with only LINE events fewer of them than
        # sys.settrace sees (none in a lambda called by map(); none for a line
        # re-entered by throw() into a `yield from`): the LINE events a tool
        # gets depend there on its other events. No-op PY_START and PY_RESUME,
        # which settrace and every profiler take, make the counter see them.
        noop = (mon.events.PY_START, mon.events.PY_RESUME)
        for event in noop:
            mon.register_callback(tool, event, lambda code, offset: None)
        mon.set_events(tool, mon.events.LINE | mon.events.PY_START | mon.events.PY_RESUME)
        try:
            mod.main()
        finally:
            mon.set_events(tool, 0)
            for event in noop:
                mon.register_callback(tool, event, None)
            mon.register_callback(tool, mon.events.LINE, None)
            mon.free_tool_id(tool)
            mon.restart_events()
    else:
        def local(frame, event, arg):
            if event == "line":
                ref[frame.f_lineno] += 1
            return local

        def global_(frame, event, arg):
            return local if frame.f_code.co_filename == path else None

        threading.settrace(global_)
        sys.settrace(global_)
        try:
            mod.main()
        finally:
            sys.settrace(None)
            threading.settrace(None)
    prof = pyprof.Profile(lines_all=os.path.dirname(path))
    prof.runcall(mod.main)
    s = prof.session()
    got = Counter()
    for (fid, lineno), c in s.line_totals().items():
        if s.functions[fid].filename == path and c.hits:
            got[lineno] += c.hits
    return {"reference": dict(ref), "pyprof": dict(got)}


def run_memory(path, tool):
    import gc
    mod = _load(path)
    result = {}
    # The collector off during the run (its timing depends on each tool's own
    # allocations), then a collection inside the measurement: what the program
    # keeps is left, not cyclic garbage (exceptions and their tracebacks).
    gc.collect()
    gc.disable()
    if tool == "tracemalloc":
        import tracemalloc
        tracemalloc.start(1)
        keep = mod.main()
        gc.collect()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        for st in snap.statistics("lineno"):
            frame = st.traceback[0]
            if frame.filename == path:
                result[frame.lineno] = result.get(frame.lineno, 0) + st.size
    else:
        import pyprof
        p = pyprof.Profile(mode="memory")
        p.enable()
        keep = mod.main()
        gc.collect()
        p.disable()
        s = p.session()
        for (fid, lineno), c in s.memory_lines().items():
            if s.functions[fid].filename == path and c.net_bytes:
                result[lineno] = result.get(lineno, 0) + c.net_bytes
    del keep
    return result


def run_sample(path):
    import gc
    import threading

    import pyprof
    mod = _load(path)
    ran = set()

    def hook(frame, event, arg):
        if event == "call":
            c = frame.f_code
            ran.add(_key((c.co_filename, c.co_firstlineno, c.co_name)))

    if sys.version_info >= (3, 12):
        # Every thread from its first frame to its teardown (a weakref callback
        # run as a thread ends, after its profile hook is gone, is seen here).
        mon = sys.monitoring
        tool = next(i for i in (4, 3, 5, 1, 0) if mon.get_tool(i) is None)
        mon.use_tool_id(tool, "difftest-ran")

        def start(code, offset):
            ran.add(_key((code.co_filename, code.co_firstlineno, code.co_name)))
            return mon.DISABLE

        mon.register_callback(tool, mon.events.PY_START, start)
        mon.set_events(tool, mon.events.PY_START)
        try:
            mod.main()
            gc.collect()            # finalizers of main's garbage (a loop's __del__) ran
        finally:
            mon.set_events(tool, 0)
            mon.register_callback(tool, mon.events.PY_START, None)
            mon.free_tool_id(tool)
            mon.restart_events()
    else:
        # threading.setprofile's hook starts after a new thread's bootstrap has
        # run functions of its own (Event.set...), which the sampler sees: the
        # hook is set in the thread's first frame instead.
        start = threading._start_new_thread

        def start_seen(fn, args, kwargs=None):
            def first():
                sys.setprofile(hook)
                return fn(*args, **(kwargs or {}))
            return start(first, ())

        threading._start_new_thread = start_seen
        sys.setprofile(hook)
        try:
            mod.main()
            gc.collect()
        finally:
            sys.setprofile(None)
            threading._start_new_thread = start
    running = set()
    f = sys._getframe()
    while f is not None:
        c = f.f_code
        running.add(_key((c.co_filename, c.co_firstlineno, c.co_name)))
        f = f.f_back
    p = pyprof.Profile(mode="sample", wall=True, rate=SAMPLE_RATE)
    t0 = time.perf_counter()
    p.enable()
    while True:
        mod.main()
        if time.perf_counter() - t0 > 0.2:
            break
    p.disable()
    s = p.session()
    sampled = {}
    for stack in s.stacks.values():
        for fid, _line in stack.frames:
            fn = s.functions[fid]
            sampled[_key(fn.pstats_key)] = fn.kind
    return {"ran": sorted(ran), "running": sorted(running), "sampled": sampled,
            "nsamples": sum(c.count for c in s.samples.values())}


def harness(argv):
    check, path = argv[0], os.path.abspath(argv[1])
    if check == "funcs":
        out = run_funcs(path)
    elif check == "lines":
        out = run_lines(path)
    elif check == "memory":
        out = run_memory(path, argv[2])
    elif check == "sample":
        out = run_sample(path)
    else:
        raise SystemExit("unknown check " + check)
    json.dump(out, sys.stdout)


# ---------------------------------------------------------------------------
# Running and comparing (in the test process).

class ProgramError(Exception):
    """The program (or a harness run) failed by itself: not a difference."""


def _run(args, timeout=120):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "run", *args],
                       capture_output=True, text=True, timeout=timeout, cwd=HERE)
    if r.returncode != 0:
        raise ProgramError(r.stderr.strip().splitlines()[-1] if r.stderr.strip()
                           else "exit %d" % r.returncode)
    return json.loads(r.stdout)


def _uses_threads(path):
    with open(path) as f:
        return "threading.Thread(" in f.read()


def _shared_stack(key):
    """On 3.12+ cProfile keeps one stack for all threads: what a thread runs
    while the main thread, waiting in ``Thread.start``/``join``, is inside the
    same function (threading's Event/Condition methods, the lock's
    ``acquire``...) counts as recursive there, and a thread's first frame
    (threading's ``_bootstrap``) gets the main thread's frame as caller
    (docs/columns.md, "Threads"). The generated threads never call what the
    main thread has on its stack otherwise (main(), the spawners)."""
    filename, _, name = key.split(":", 2) if key.startswith("~") else key.rsplit(":", 2)
    return filename.endswith("threading.py") or "'_thread." in name


def _diff_stats(expected, got, threads=False):
    problems = []
    for k in sorted(set(expected) | set(got)):
        if k not in got:
            problems.append("cProfile has %s (calls %d), pyprof not" % (k, expected[k][1]))
            continue
        if k not in expected:
            problems.append("pyprof has %s (calls %d), cProfile not" % (k, got[k][1]))
            continue
        (ecc, enc, ecal), (gcc, gnc, gcal) = expected[k], got[k]
        shared = threads and sys.version_info >= (3, 12) and _shared_stack(k)
        if shared:
            ecc, gcc = enc, gnc           # primitive calls: see _shared_stack
        if (ecc, enc) != (gcc, gnc):
            problems.append("%s: cProfile calls %d/%d, pyprof %d/%d (primitive/all)"
                            % (k, ecc, enc, gcc, gnc))
        if shared:
            ecal = {c: v for c, v in ecal.items() if not _shared_stack(c)}
            gcal = {c: v for c, v in gcal.items() if not _shared_stack(c)}
            if k.endswith(":_bootstrap"):
                ecal = gcal = {}
        if ecal != gcal:
            for c in sorted(set(ecal) | set(gcal)):
                if ecal.get(c) != gcal.get(c):
                    problems.append("%s called by %s: cProfile %s, pyprof %s"
                                    % (k, c, ecal.get(c), gcal.get(c)))
    return problems


def check_funcs(path):
    out = _run(["funcs", path])
    threads = _uses_threads(path)
    problems = []
    # pyprof_nob: builtins=False, on 3.11 pyprof's frame-evaluation engine.
    for variant, ref in (("pyprof", "cprofile"), ("pyprof_exact", "cprofile"),
                         ("pyprof_nob", "cprofile_nob")):
        if variant not in out:
            continue
        got = out[variant]
        if threads and sys.version_info < (3, 12):
            got = out[variant + "_main"]
        elif not threads and out[variant + "_main"] != got:
            # One thread: the Session's records and its pstats export must agree.
            problems.append("[%s] Session.fstats/edges differ from the pstats export" % variant)
        problems += ["[%s] %s" % (variant, p) for p in _diff_stats(out[ref], got, threads)]
    return problems


def check_lines(path):
    out = _run(["lines", path])
    ref, got = out["reference"], out["pyprof"]
    if not ref:
        raise ProgramError("the reference counter saw no line event")
    return ["line %s: %d line events, pyprof %d hits" % (k, ref.get(k, 0), got.get(k, 0))
            for k in sorted(set(ref) | set(got), key=int) if ref.get(k, 0) != got.get(k, 0)]


def check_memory(path):
    truth, got = _run(["memory", path, "tracemalloc"]), _run(["memory", path, "pyprof"])
    problems = []
    for k in sorted(set(truth) | set(got), key=int):
        t, g = truth.get(k, 0), got.get(k, 0)
        if max(t, g) >= MEMORY_MIN and abs(t - g) > max(0.01 * max(t, g), MEMORY_SLACK):
            problems.append("line %s: tracemalloc %d bytes live, pyprof %d" % (k, t, g))
    return problems


# Known pyprof bugs, each kept as a strict xfail case in tests/difftest_cases/:
# the random programs leave them out (else most programs would fail on them and
# hide anything new); the kept cases check them with known=False.
KNOWN_BUGS = {}   # none open (sample_init_shim.py was one: fixed, kept as a regular case)


def check_sample(path, known=True):
    out = _run(["sample", path])
    ran = set(out["ran"]) | set(out["running"])
    problems = []
    for k, kind in sorted(out["sampled"].items()):
        if kind != "python" or k in ran:
            continue
        if known and "sample" in KNOWN_BUGS and KNOWN_BUGS["sample"](k):
            continue
        filename, _, name = k.rsplit(":", 2)
        if filename == "<gc>":          # the collector's frame (--gc, on when sampling)
            continue
        if "/pyprof/" in filename or (filename.endswith("threading.py")
                                      and name in ("_bootstrap", "_bootstrap_inner")):
            continue
        problems.append("sampled %s, which never ran" % k)
    return problems


CHECK_FUNCS = {"funcs": check_funcs, "lines": check_lines, "memory": check_memory,
               "sample": check_sample}


def run_check(check, path, known=True):
    """The differences (a list of lines) of one check on one program file;
    known=False: without leaving out the known bugs (KNOWN_BUGS)."""
    if check in KNOWN_BUGS:
        return CHECK_FUNCS[check](path, known)
    return CHECK_FUNCS[check](path)


# ---------------------------------------------------------------------------
# Shrinking and keeping cases.

def write_program(prog, directory):
    path = os.path.join(directory, "prog_%d.py" % prog.seed)
    with open(path, "w") as f:
        f.write(prog.source())
    return path


def fails(prog, check, directory):
    path = write_program(prog, directory)
    try:
        return run_check(check, path)
    except (ProgramError, subprocess.TimeoutExpired):
        return []


def shrink(prog, check, directory, deadline=None):
    """Delta debugging over the program's removable statements: the smallest
    program found that still fails `check`."""
    removed = set()
    todo = prog.statements()
    chunk = max(1, len(todo) // 2)
    while chunk >= 1:
        i, progress = 0, False
        while i < len(todo):
            if deadline and time.monotonic() > deadline:
                return prog.without(removed)
            trial = removed | set(todo[i:i + chunk])
            if fails(prog.without(trial), check, directory):
                removed = trial
                todo = todo[:i] + todo[i + chunk:]
                progress = True
            else:
                i += chunk
        if not progress:
            chunk //= 2
    return prog.without(removed)


def keep_case(prog, check, problems, directory=CASES_DIR):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "%s_seed%d_py%s.py" % (check, prog.seed, PY.replace(".", "")))
    head = ["# difftest case: check=%s seed=%d found on Python %s" % (check, prog.seed, PY)]
    head += ["# difference: " + p for p in problems[:5]]
    head += ["# (to mark a confirmed pyprof bug: '# xfail[3.X,...]: exact description')"]
    with open(path, "w") as f:
        f.write("\n".join(head) + "\n" + prog.source())
    return path


def case_header(path):
    """(check, {python version: xfail reason}) of a kept case."""
    check, xfail = None, {}
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                break
            if line.startswith("# difftest case:"):
                check = line.split("check=")[1].split()[0]
            elif line.startswith("# xfail["):
                versions, reason = line[len("# xfail["):].split("]:", 1)
                for v in versions.split(","):
                    xfail[v.strip()] = reason.strip()
    return check, xfail


def fuzz(seed, n, seconds, checks, shrink_seconds=300, out=print):
    """Check programs seed, seed+1, ... (n of them, or until `seconds`);
    shrink and keep each failure. Returns [(seed, check, problems, case path)]."""
    import progen
    failures = []
    start = time.monotonic()
    done = 0
    with tempfile.TemporaryDirectory(prefix="difftest-") as tmp:
        for s in range(seed, seed + n):
            if seconds and time.monotonic() - start > seconds:
                break
            prog = progen.generate(s)
            path = write_program(prog, tmp)
            for check in checks:
                try:
                    problems = run_check(check, path)
                except ProgramError as e:
                    out("seed %d %s: program error (not counted): %s" % (s, check, e))
                    continue
                if problems:
                    out("seed %d %s: %d differences, shrinking" % (s, check, len(problems)))
                    small = shrink(prog, check, tmp, time.monotonic() + shrink_seconds)
                    small_problems = fails(small, check, tmp) or problems
                    case = keep_case(small, check, small_problems)
                    out("  kept %s (%d statements):\n    %s"
                        % (case, small.size(), "\n    ".join(small_problems[:5])))
                    failures.append((s, check, small_problems, case))
            done += 1
    out("difftest: %d programs (seeds %d..%d), %d checks each, %.0f s, %d failures"
        % (done, seed, seed + done - 1, len(checks), time.monotonic() - start, len(failures)))
    return failures


def main(argv):
    if argv and argv[0] == "run":
        return harness(argv[1:])
    import argparse
    ap = argparse.ArgumentParser(prog="difftest.py fuzz")
    ap.add_argument("cmd", choices=["fuzz"])
    ap.add_argument("--seed", type=int, default=int(os.environ.get("PYPROF_FUZZ_SEED", 0)))
    ap.add_argument("--n", type=int, default=int(os.environ.get("PYPROF_FUZZ_N", 100)))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("PYPROF_FUZZ_SECONDS", 0)))
    ap.add_argument("--checks", default=",".join(CHECKS))
    a = ap.parse_args(argv)
    failures = fuzz(a.seed, a.n, a.seconds, a.checks.split(","))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main(sys.argv[1:]))
