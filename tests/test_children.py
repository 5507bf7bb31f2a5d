"""--children: every Python child profiled, one capture per process, merged by
the main process (docs/children.md). Real processes: os.fork, multiprocessing
(fork, spawn, forkserver; pools), ProcessPoolExecutor, subprocess; killed and
os._exit children; an unwritable output for a child; fork while other threads
profile and allocate."""
import glob
import os
import re
import subprocess
import sys
import textwrap

import pytest

from pyprof import Session
from support import TIMEOUT, run_pyprof as pyprof

def write(path, source):
    path.write_text(textwrap.dedent(source))
    return path


def calls(session, name):
    """Calls of the functions called `name`, over all processes."""
    totals = session.function_totals()
    return sum(totals[f].calls for f, fn in session.functions.items()
               if fn.name == name and f in totals)


def calls_by_process(session, name):
    """{pid: calls of `name`} for the processes that called it."""
    out = {}
    for i, record in enumerate(session.meta.get("processes", [])):
        totals = session.function_totals(threads=session.process_threads(i))
        n = sum(totals[f].calls for f, fn in session.functions.items()
                if fn.name == name and f in totals)
        if n:
            out[record["pid"]] = n
    return out


def tasks_per_pid(r):
    """{pid: tasks}: the Counter of worker pids the pool programs print last."""
    import json
    return {int(pid): n for pid, n in json.loads(r.stdout.strip().splitlines()[-1]).items()}


def run_ok(tmp_path, source, *args, opts=(), **kw):
    prog = write(tmp_path / "prog.py", source)
    out = tmp_path / "out.cprof"
    r = pyprof(["--children", *opts, "-o", str(out), str(prog), *args], tmp_path, **kw)
    assert r.returncode == 0, r.stderr
    # the children's files went into the merged capture
    assert glob.glob(str(tmp_path / "out.*.cprof")) == [], os.listdir(tmp_path)
    return Session.load(out), r


FORK = '''
import os, sys

def child_work(n):
    return sum(range(n))

def parent_work():
    return 1

parent_work()
pid = os.fork()
if pid == 0:
    for _ in range(5):
        child_work(100)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0
parent_work()
print("pid", pid)
'''


def test_fork_child_profiled_parent_not_doubled(tmp_path):
    s, r = run_ok(tmp_path, FORK)
    child = int(r.stdout.split()[-1])
    assert calls(s, "child_work") == 5
    assert calls(s, "parent_work") == 2         # the child's copy of the parent's counts is gone
    assert calls_by_process(s, "child_work") == {child: 5}
    assert list(calls_by_process(s, "parent_work").values()) == [2]
    pids = [p["pid"] for p in s.meta["processes"]]
    assert len(pids) == 2 and child in pids
    # the parent's threads were not carried into the child's capture
    child_index = pids.index(child)
    assert len(s.process_threads(child_index)) == 1


POOL = '''
import multiprocessing as mp, sys
from concurrent.futures import ProcessPoolExecutor

def task(x):
    return x * 2

if __name__ == "__main__":
    method, kind, workers, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ctx = mp.get_context(method)
    if kind == "pool":
        with ctx.Pool(workers) as p:
            r = p.map(task, range(n), chunksize=1)
    else:
        with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
            r = list(ex.map(task, range(n)))
    assert r == [2 * x for x in range(n)]
    print("ok")
'''


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("kind", ["pool", "executor"])
def test_pools_every_task_once(tmp_path, method, kind):
    s, r = run_ok(tmp_path, POOL, method, kind, "4", "200")
    assert calls(s, "task") == 200, calls_by_process(s, "task")
    by = calls_by_process(s, "task")
    assert os.getpid() not in by and len(by) >= 1


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_8_workers_1000_tasks(tmp_path, method):
    s, r = run_ok(tmp_path, POOL, method, "pool", "8", "1000")
    assert calls(s, "task") == 1000
    assert sum(calls_by_process(s, "task").values()) == 1000


BURN = '''
import multiprocessing as mp, sys, time

def burn(x):
    t = time.process_time()
    while time.process_time() - t < 0.3:
        sum(range(1000))
    return x

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2) as p:
        p.map(burn, range(4), chunksize=1)
'''


def burn_seconds(s, process):
    """Sampled CPU seconds inside burn() in one process."""
    threads = s.process_threads(process)
    fids = {f for f, fn in s.functions.items() if fn.name == "burn"}
    return sum(c.weight for (t, stack, state), c in s.samples.items()
               if t in threads and any(fid in fids for fid, line in s.stacks[stack].frames)) / 1e9


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_sampled_pool_workers(tmp_path, method):
    # each worker burns 0.3 s of CPU per task, 4 tasks: the samples in burn()
    # add up to ~1.2 s, the main process's to 0. 100 Hz: below any kernel's
    # tick rate, which bounds the CPU timer (docs/sampling.md)
    s, r = run_ok(tmp_path, BURN, method, opts=("--sample", "--rate", "100"))
    seconds = [burn_seconds(s, i) for i in range(len(s.meta["processes"]))]
    assert seconds[0] == 0                      # the main process: it waits
    workers = [x for x in seconds[1:] if x > 0]
    assert len(workers) == 2, seconds
    assert sum(workers) == pytest.approx(1.2, rel=0.3), seconds


ALLOC = '''
import collections, json, multiprocessing as mp, os, sys

keep = []

def alloc(x):
    keep.append(bytearray(1_000_000))
    return os.getpid()

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2) as p:
        pids = p.map(alloc, range(6), chunksize=1)
    print(json.dumps(collections.Counter(pids)))
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_memory_of_pool_workers(tmp_path, method):
    # 6 tasks allocate 1,000,000 bytes each, in the workers
    s, r = run_ok(tmp_path, ALLOC, method, opts=("--memory",))
    fids = {f for f, fn in s.functions.items() if fn.name == "alloc"}
    allocated = sum(c.alloc_bytes for f, c in s.memory_functions().items() if f in fids)
    assert 6_000_000 <= allocated < 6_100_000
    # each worker keeps what it allocates: its curve's peak holds 1 MB per task
    # it ran (plus what it imported); the main process's curve holds none of it
    tasks = tasks_per_pid(r)
    peaks = {p["pid"]: max((pt.heap_max for pt in s.process_memory_curve(i)), default=0)
             for i, p in enumerate(s.meta["processes"])}
    for pid, n in tasks.items():
        assert n * 1_000_000 <= peaks[pid] < n * 1_000_000 + 8_000_000, (tasks, peaks)
    assert peaks[s.meta["processes"][0]["pid"]] < 3_000_000, peaks


def test_chrome_trace_has_one_process_per_child(tmp_path):
    # --timeline and --memory across a fork pool: each process its own pid in
    # the trace, its calls on its own threads, its own memory counter
    import json
    s, r = run_ok(tmp_path, ALLOC, "fork", opts=("--timeline", "--memory", "--functions"))
    out = tmp_path / "out.trace.json"
    c = pyprof(["convert", str(tmp_path / "out.cprof"), "-o", str(out)], tmp_path)
    assert c.returncode == 0, c.stderr
    events = json.loads(out.read_text())["traceEvents"]
    pids = [p["pid"] for p in s.meta["processes"]]
    named = {e["pid"] for e in events if e["name"] == "process_name"}
    assert named == set(pids)
    alloc_pids = {e["pid"] for e in events if e["ph"] == "X" and e["name"].startswith("alloc ")}
    by_process = calls_by_process(s, "alloc")
    assert alloc_pids == set(by_process) and pids[0] not in alloc_pids
    assert sum(1 for e in events if e["ph"] == "X" and e["name"].startswith("alloc ")) == 6
    memory_pids = {e["pid"] for e in events if e["ph"] == "C"}
    assert memory_pids == set(pids)
    # every thread track belongs to the process whose thread it is
    for e in events:
        if e["name"] == "thread_name":
            assert e["pid"] in pids


PER_PID = '''
import collections, json, multiprocessing as mp, os, sys

def task(x):
    return os.getpid()

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(3) as p:
        pids = p.map(task, range(300), chunksize=1)
    print(json.dumps(collections.Counter(pids)))
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_per_process_view_and_stats(tmp_path, method):
    # ground truth: the tasks each worker ran, as the workers' pids returned
    # to the program say
    import csv
    import io
    import statistics
    s, r = run_ok(tmp_path, PER_PID, method)
    known = tasks_per_pid(r)
    assert sum(known.values()) == 300
    assert calls_by_process(s, "task") == known
    for pid, n in known.items():
        v = pyprof(["view", "out.cprof", "--view", "op", "--process", str(pid), "--show",
                    "^task", "--format", "csv"], tmp_path)
        assert v.returncode == 0, v.stderr
        rows = list(csv.DictReader(io.StringIO(v.stdout)))
        assert [int(row["calls"]) for row in rows] == [n]
    st = pyprof(["stats", "--by", "process", "--csv", "-", "--no-lines", "out.cprof"], tmp_path)
    assert st.returncode == 0, st.stderr
    row = next(row for row in csv.DictReader(io.StringIO(st.stdout)) if row["name"] == "task")
    counts = list(known.values())
    assert int(row["n"]) == len(known)              # over the processes that ran it
    assert float(row["calls_mean"]) == pytest.approx(statistics.mean(counts))
    assert float(row["calls_min"]) == min(counts) and float(row["calls_max"]) == max(counts)
    assert known[int(row["calls_min_pid"])] == min(counts)
    assert known[int(row["calls_max_pid"])] == max(counts)
    if len(counts) > 1:
        assert float(row["calls_cv"]) == pytest.approx(statistics.stdev(counts) /
                                                       statistics.mean(counts))
    # a pid that is not in the capture: one line, status 2
    bad = pyprof(["view", "out.cprof", "--view", "op", "--process", "1"], tmp_path)
    assert bad.returncode == 2 and "--process 1: no such process" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_subprocess_python_child(tmp_path):
    write(tmp_path / "child.py", '''
        def in_child():
            return 3
        for _ in range(4):
            in_child()
        ''')
    s, r = run_ok(tmp_path, '''
        import subprocess, sys, os
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "child.py")],
                       check=True)
        # a child given its own environment is not followed
        subprocess.run([sys.executable, "-c", "def not_followed(): pass\\nnot_followed()"],
                       env={"PATH": os.environ.get("PATH", "")}, check=True)
        ''')
    assert calls(s, "in_child") == 4
    assert calls(s, "not_followed") == 0
    assert len(s.meta["processes"]) == 2


def test_threads_of_a_new_interpreter_child(tmp_path):
    # a lean child (function mode) follows the threads its program starts,
    # whenever it imports threading (on 3.11 pyprof hooks threading only then)
    write(tmp_path / "child.py", '''
        import sys
        before = "threading" in sys.modules
        import threading

        def in_thread(i):
            return i

        def run(i):
            for _ in range(10):
                in_thread(i)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("threading imported at start:", before)
        ''')
    s, r = run_ok(tmp_path, '''
        import subprocess, sys, os
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "child.py")],
                       check=True)
        ''')
    assert calls(s, "in_thread") == 30
    child = 1
    assert len(s.process_threads(child)) == 4           # the main thread and 3 threads
    assert "threading imported at start: False" in r.stdout


def test_spawned_child_starts_lean(tmp_path):
    # function mode in a new interpreter does not import the pyprof package
    # (its start-up cost); the program can still import it
    s, r = run_ok(tmp_path, '''
        import subprocess, sys
        code = ("import sys; before = 'pyprof' in sys.modules\\n"
                "import pyprof\\n"
                "def lean(): pass\\n"
                "lean(); print(before, pyprof.Profile.__name__)")
        print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.strip())
        ''')
    assert "False Profile" in r.stdout
    assert calls(s, "lean") == 1


def test_program_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    write(site / "sitecustomize.py", "import os\nos.environ['MY_SITE'] = 'yes'\n")
    s, r = run_ok(tmp_path, '''
        import subprocess, sys
        out = subprocess.run([sys.executable, "-c",
                              "import os, sys; print(os.environ.get('MY_SITE'), "
                              "any('_boot' in p for p in sys.path))"],
                             capture_output=True, text=True, check=True).stdout
        print(out.strip())
        ''', env={**os.environ, "PYTHONPATH": str(site)})
    assert "yes False" in r.stdout


def test_killed_child_leaves_last_flush(tmp_path):
    s, r = run_ok(tmp_path, '''
        import os, signal, time

        def before_kill():
            pass

        pid = os.fork()
        if pid == 0:
            for _ in range(3):
                before_kill()
            t = time.time()
            while time.time() - t < 30:      # flushes every 0.1 s on events
                sum(range(10))
            os._exit(0)
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        ''', opts=("--flush-interval", "0.1"))
    assert calls(s, "before_kill") == 3


# The signal lands before the child blocks: libc's kill (not os.kill, which
# runs the handlers) and os.read run inside one C call (itertools.starmap), so
# the interpreter never checks for signals between them and read() starts
# with the handler pending. Without the
# re-send of src/_cprof/termguard.c the child sleeps forever (a pool
# worker terminated just as it goes idle).
TERM_BEFORE_BLOCK = '''
import ctypes, itertools, operator, os, signal, sys

def before_term():
    pass

pid = os.fork()
if pid == 0:
    before_term()
    r, w = os.pipe()
    kill = ctypes.CDLL(None, use_errno=True).kill
    list(itertools.starmap(operator.call, [(kill, os.getpid(), signal.SIGTERM),
                                           (os.read, r, 1)]))
    os._exit(7)                             # not reached: SIGTERM ends the child
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status))
'''


def test_sigterm_just_before_blocking_call_still_writes_and_ends(tmp_path):
    s, r = run_ok(tmp_path, TERM_BEFORE_BLOCK, opts=("--flush-interval", "0"), timeout=60)
    assert "child status -15" in r.stdout       # died by SIGTERM, as without pyprof
    assert calls(s, "before_term") == 1         # after writing its capture
    assert len(s.meta["processes"]) == 2


def test_sigterm_without_pyprof_has_the_same_status(tmp_path):
    prog = write(tmp_path / "plain.py", TERM_BEFORE_BLOCK)
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True,
                       timeout=60)
    assert "child status -15" in r.stdout, r.stderr


# A main thread that can never run Python again (a C call holding the GIL and
# blocked for good: relocking a default pthread mutex) never runs the Python
# handler: SIGTERM must still end it (the bound of termguard.c), as it would
# without pyprof, not leave it hanging.
TERM_WHILE_STUCK = '''
import ctypes, os, signal, sys, time

pid = os.fork()
if pid == 0:
    libc = ctypes.PyDLL(None)               # PyDLL: the GIL stays held
    mutex = ctypes.create_string_buffer(64)
    libc.pthread_mutex_init(mutex, None)
    libc.pthread_mutex_lock(mutex)
    os.write(1, b"stuck\\n")
    libc.pthread_mutex_lock(mutex)           # blocks for good
    os._exit(7)
time.sleep(0.5)
t = time.monotonic()
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), "after %.1f s" % (time.monotonic() - t))
'''


def test_sigterm_ends_a_child_that_cannot_run_python(tmp_path):
    s, r = run_ok(tmp_path, TERM_WHILE_STUCK, opts=("--flush-interval", "0"), timeout=60)
    assert "child status -15" in r.stdout, r.stdout
    seconds = float(r.stdout.split("after")[1].split()[0])
    assert 1.9 <= seconds < 20, r.stdout        # the 2 s bound, then the default action


def test_os_exit_child_leaves_last_flush(tmp_path):
    s, r = run_ok(tmp_path, '''
        import os, time

        def flushed():
            pass

        pid = os.fork()
        if pid == 0:
            flushed()
            t = time.time()
            while time.time() - t < 0.5:
                sum(range(10))
            os._exit(3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
        ''', opts=("--flush-interval", "0.1"))
    assert calls(s, "flushed") == 1


def test_unwritable_output_for_child_reported(tmp_path):
    # The output directory is replaced by a file while the child runs (the
    # tests may run as root, for whom permissions do not stop a write).
    prog = write(tmp_path / "prog.py", '''
        import os, sys
        outdir = sys.argv[1]

        def child_fn():
            pass

        os.rename(outdir, outdir + ".away")
        open(outdir, "w").close()
        pid = os.fork()
        if pid == 0:
            child_fn()
            sys.exit(0)
        os.waitpid(pid, 0)
        os.unlink(outdir)
        os.rename(outdir + ".away", outdir)
        print("program went on")
        ''')
    outdir = tmp_path / "out"
    outdir.mkdir()
    r = pyprof(["--children", "--flush-interval", "0", "-o", str(outdir / "out.cprof"),
                str(prog), str(outdir)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "program went on" in r.stdout
    assert "pyprof: error: child process" in r.stderr and "cannot write" in r.stderr, r.stderr
    s = Session.load(outdir / "out.cprof")
    assert len(s.meta.get("processes", [None])) == 1


# GCC 12's AddressSanitizer allocator takes no lock around fork(): a child forked while
# another thread is inside ASan's malloc waits forever on that thread's allocator lock
# at its first malloc (seen: in pp_memory_stop, under os.fork's at-fork hook), which
# glibc's malloc prevents. Not pyprof's hang: the same program passes without ASan.
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="ASan's allocator is not fork-safe with threads allocating (GCC 12)")
@pytest.mark.parametrize("opts", [("--memory", "--functions"),
                                  ("--sample", "--wall", "--rate", "1000", "--memory")],
                         ids=["memory+functions", "wall-sampling+memory"])
def test_fork_while_threads_profile_and_allocate(tmp_path, opts):
    s, r = run_ok(tmp_path, '''
        import os, threading, time

        stop = False

        def busy():
            while not stop:
                x = [bytearray(64) for _ in range(50)]
                del x

        threads = [threading.Thread(target=busy) for _ in range(3)]
        for t in threads:
            t.start()

        def in_fork_child():
            return [0] * 10

        for i in range(40):
            pid = os.fork()
            if pid == 0:
                in_fork_child()
                os._exit(0) if i % 2 else None
                raise SystemExit(0)
            _, status = os.waitpid(pid, 0)
            assert status == 0
        stop = True
        for t in threads:
            t.join()
        ''', opts=opts)
    # every child that exited normally wrote its capture (the os._exit ones
    # only what they flushed: nothing, with the default interval)
    assert len(s.meta["processes"]) >= 21
    if "--functions" in opts:
        assert calls(s, "in_fork_child") >= 20


def test_api_children(tmp_path):
    prog = write(tmp_path / "prog.py", '''
        import multiprocessing as mp, sys
        import pyprof

        def task(x):
            return x + 1

        if __name__ == "__main__":
            prof = pyprof.Profile(children=sys.argv[1])
            with prof:
                with mp.get_context("spawn").Pool(2) as p:
                    p.map(task, range(50))
            prof.dump(sys.argv[1])
        ''')
    out = tmp_path / "api.cprof"
    r = subprocess.run([sys.executable, str(prog), str(out)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert calls(Session.load(out), "task") == 50


def test_lean_child_meta_is_the_json_of_json_dumps():
    # a lean child writes its meta without the json module (start-up cost)
    import json
    from pyprof.runtime.children import decode_config, encode_config, json_text
    weird = ["plain", 'quote " and \\ backslash', "tab\tnew\nline\r\x00\x1f\x7f",
             "é ü 中文", "emoji \U0001F600", "lone \udcff surrogate", ""]
    value = {"argv": weird, "n": 3, "big": 2 ** 70, "f": 0.1, "neg": -1.5e-300, "t": True,
             "none": None, "nested": {"a": [1, [2, {"b": False}]], "tuple": (1, "x")},
             "nan": float("nan"), "obj": object.__name__, "path": __file__}
    text = json_text(value)
    expected = json.loads(json.dumps(value, default=str))
    expected["nan"] = None                  # not JSON: written as null
    assert json.loads(text) == expected
    assert text.isascii()
    config = {"run": "ab" * 16, "profile": {"mode": "sample", "rate": 250.0,
                                            "include": ["a", "é"]}, "mpi": None}
    assert decode_config(encode_config(config)) == config



# Every mode; pyprof's helper threads (the sampler's, the memory curve's) must
# not make CPython 3.12+ warn "This process is multi-threaded" at os.fork().
FORK_MODES = {"sample": ["--sample"], "wall": ["--sample", "--wall"], "memory": ["--memory"],
              "memory-sample": ["--memory-sample"], "memory-functions": ["--memory", "--functions"],
              "functions": [], "lines": ["--lines-all"]}
# pyprof's own threads per mode: wall sampling has a helper and a ticker
# (docs/architecture.md), the other sampling and memory-curve modes a helper.
FORK_HELPERS = {"sample": 1, "wall": 2, "memory": 1, "memory-sample": 1, "memory-functions": 1,
                "functions": 0, "lines": 0}

FORK_QUIET = '''
    import os, sys, time

    def threads():
        return len(os.listdir("/proc/self/task"))

    log = open(sys.argv[1], "w")
    for i in range(100):
        before = threads()
        pid = os.fork()
        if pid == 0:
            log.write(f"child {threads()}\\n")
            log.flush()
            os._exit(3)
        after = threads()
        for _ in range(50):             # a joined thread may still be leaving the
            if after <= before:         # kernel's list (its exit wakes the join first)
                break
            time.sleep(0.001)
            after = threads()
        print(f"parent {before} {after}", file=log, flush=True)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
    pid, fd = os.forkpty()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)
    log.close()
    print("forked", i + 1)
    '''


@pytest.mark.parametrize("mode", FORK_MODES)
def test_fork_prints_what_it_prints_without_pyprof(tmp_path, mode):
    prog = write(tmp_path / "prog.py", FORK_QUIET)
    plain = subprocess.run([sys.executable, "-W", "always", str(prog), str(tmp_path / "plain.log")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    r = subprocess.run([sys.executable, "-W", "always", "-m", "pyprof", *FORK_MODES[mode],
                        "-o", str(tmp_path / "out.cprof"), str(prog), str(tmp_path / "log")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == plain.returncode == 0, r.stderr
    # a loaded machine may hold wall ticks back: pyprof says so (cli.py), not the fork
    ours = re.sub(r"^pyprof: note: asked for \d+ samples per second, got \d+ .*\n", "", r.stderr,
                  flags=re.M)
    assert (r.stdout, ours) == (plain.stdout, plain.stderr) == ("forked 100\n", "")
    lines = (tmp_path / "log").read_text().split("\n")[:-1]
    parents = [line.split() for line in lines if line.startswith("parent")]
    assert len(parents) == 100
    # the helpers are back in the parent as soon as os.fork returns ...
    assert all(before == after for _, before, after in parents), [p for p in parents if p[1] != p[2]]
    assert int(parents[0][1]) == 1 + FORK_HELPERS[mode]
    # ... and never run in a child not profiled
    assert sorted(set(line for line in lines if line.startswith("child"))) == ["child 1"]
    s = Session.load(tmp_path / "out.cprof")
    assert s.meta.get("processes", [None]) == [None] or len(s.meta["processes"]) == 1


@pytest.mark.parametrize("mode", FORK_MODES)
def test_fork_100_times_while_threads_allocate(tmp_path, mode):
    prog = write(tmp_path / "prog.py", '''
        import os, threading

        stop = False

        def busy():
            while not stop:
                x = [bytearray(64) for _ in range(50)]
                del x

        threads = [threading.Thread(target=busy) for _ in range(2)]
        for t in threads:
            t.start()
        for i in range(100):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        stop = True
        for t in threads:
            t.join()
        print("done")
        ''')
    r = pyprof([*FORK_MODES[mode], "-o", str(tmp_path / "out.cprof"), str(prog)], tmp_path)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr


@pytest.mark.parametrize("mode", ["functions", "sample", "memory"])
def test_sigterm_right_after_fork_ends_the_child(tmp_path, mode):
    # A pool terminated just after it forked a worker: the SIGTERM can reach the
    # child before CPython's after-fork code has run. Without pyprof the
    # default action ends it; the runner's Python handler must not swallow it
    # (it did for 191 of 200 children under --sample).
    prog = write(tmp_path / "prog.py", '''
        import os, signal, time
        survived = 0
        for i in range(30):
            pid = os.fork()
            if pid == 0:
                time.sleep(1)
                os._exit(7)
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            survived += os.waitstatus_to_exitcode(status) != -signal.SIGTERM
        print("survived", survived)
        ''')
    r = pyprof([*FORK_MODES[mode], "-o", str(tmp_path / "out.cprof"), str(prog)], tmp_path)
    assert r.returncode == 0 and r.stdout == "survived 0\n", (r.stdout, r.stderr)


@pytest.mark.parametrize("mode", ["sample", "wall", "memory", "memory-sample"])
def test_forks_from_several_threads_at_once(tmp_path, mode):
    # A pool's handler thread forks while the program does: the helpers are
    # stopped once and started again once, by the last fork to finish.
    prog = write(tmp_path / "prog.py", '''
        import os, threading, time

        def forker():
            for _ in range(25):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)

        base = len(os.listdir("/proc/self/task"))
        ts = [threading.Thread(target=forker) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for _ in range(200):            # joined threads leave the kernel's list a bit later
            if len(os.listdir("/proc/self/task")) <= base:
                break
            time.sleep(0.005)
        print(base, len(os.listdir("/proc/self/task")))
        ''')
    r = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-m", "pyprof",
                        *FORK_MODES[mode], "-o", str(tmp_path / "out.cprof"), str(prog)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    base, after = map(int, r.stdout.split())
    assert base == after == 1 + FORK_HELPERS[mode], r.stdout     # the main thread and the helpers
