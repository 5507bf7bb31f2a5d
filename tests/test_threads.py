"""Threads: every thread's calls are attributed, including threads started after
enable; per-thread counts agree with an independent sys.setprofile counter."""
import sys
import threading
from collections import Counter

import pytest

import pyprof
from pyprof import Session
from support import run_pyprof, run_python


def leaf(x):
    return x + 1


def worker(n, started, go):
    started.set()
    go.wait()
    for i in range(n):
        leaf(i)


def _run_threads(enable, disable):
    """8 threads: 4 exist (waiting) before enable, 4 are started after."""
    go = threading.Event()
    threads, idents = [], {}

    def start(i):
        started = threading.Event()
        t = threading.Thread(target=worker, args=(1000 * (i + 1), started, go), name=f"w{i}")
        t.start()
        started.wait()
        threads.append(t)
        idents[t.ident] = 1000 * (i + 1)

    for i in range(4):
        start(i)
    enable()
    for i in range(4, 8):
        start(i)
    go.set()
    for t in threads:
        t.join()
    disable()
    return idents


def test_eight_threads_all_attributed():
    prof = pyprof.Profile()
    idents = _run_threads(prof.enable, prof.disable)
    s = prof.session()
    leaf_ids = [f for f, fn in s.functions.items() if fn.name == "leaf"]
    assert len(leaf_ids) == 1
    per_thread = {s.threads[t].ident: c.calls for (t, f), c in s.fstats.items() if f == leaf_ids[0]}
    assert per_thread == idents
    total = s.function_totals()[leaf_ids[0]]
    assert total.calls == sum(idents.values()) == 36000
    names = {t.name for t in s.threads.values()}
    assert {f"w{i}" for i in range(8)} <= names


def test_thread_named_after_finalizers_in_its_first_events():
    """A collection in a new thread may run any amount of Python code (here a
    gc callback making 50 calls per collection) before the thread enters
    threading._active, where its name is looked up."""
    import gc

    def small():
        return 1

    def burn(phase, info):
        if threading.get_ident() not in threading._active:
            for _ in range(50):
                small()

    def work():
        for _ in range(1000):
            small()

    prof = pyprof.Profile()
    old = gc.get_threshold()
    gc.callbacks.append(burn)
    prof.enable()
    gc.set_threshold(1)
    try:
        t = threading.Thread(target=work, name="late-name")
        t.start()
        t.join()
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(burn)
        prof.disable()
    s = prof.session()
    named = {t.ident: t.name for t in s.threads.values()}
    assert named.get(t.ident) == "late-name"


def _reference_counts(func):
    """Independent ground truth: sys.setprofile/threading.setprofile 'call' events
    per (thread ident, function name)."""
    counts = Counter()

    def hook(frame, event, arg):
        if event == "call":
            counts[(threading.get_ident(), frame.f_code.co_name)] += 1

    def enable():
        threading.setprofile(hook)
        sys.setprofile(hook)

    def disable():
        sys.setprofile(None)
        threading.setprofile(None)

    func(enable, disable)
    return counts


def test_per_thread_counts_match_reference_counter():
    def scenario(enable, disable):
        go = threading.Event()

        def body():
            go.wait()
            for i in range(500):
                leaf(i)

        enable()
        ts = [threading.Thread(target=body) for _ in range(3)]
        for t in ts:
            t.start()
        go.set()
        for t in ts:
            t.join()
        disable()
        return [t.ident for t in ts]

    ref = _reference_counts(scenario)
    prof = pyprof.Profile()
    idents = scenario(prof.enable, prof.disable)
    s = prof.session()
    ours = Counter()
    for (t, f), c in s.fstats.items():
        ours[(s.threads[t].ident, s.functions[f].name)] += c.calls
    # Idents of the two runs differ; compare the multiset of per-thread leaf counts.
    ref_leaf = sorted(v for (i, n), v in ref.items() if n == "leaf")
    our_leaf = sorted(ours[(i, "leaf")] for i in idents)
    assert our_leaf == ref_leaf == [500, 500, 500]


def test_threads_starting_and_ending_while_profiling():
    prof = pyprof.Profile()
    prof.enable()
    for _ in range(20):
        batch = [threading.Thread(target=lambda: [leaf(i) for i in range(50)]) for _ in range(10)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    prof.disable()
    s = prof.session()
    leaf_id = next(f for f, fn in s.functions.items() if fn.name == "leaf")
    assert s.function_totals()[leaf_id].calls == 200 * 50
    # Thread idents are reused by the OS; each started thread still gets its own record
    # or shares one only after the previous owner ended: no calls are lost or doubled.
    assert sum(c.calls for (t, f), c in s.fstats.items() if f == leaf_id) == 10000


def test_profile_disabled_in_another_thread():
    prof = pyprof.Profile()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            leaf(1)

    prof.enable()
    t = threading.Thread(target=spin)
    t.start()
    for i in range(1000):
        leaf(i)
    disabler = threading.Thread(target=prof.disable)
    disabler.start()
    disabler.join()
    stop.set()
    t.join()
    assert not prof.enabled
    s = prof.session()
    leaf_id = next(f for f, fn in s.functions.items() if fn.name == "leaf")
    assert s.function_totals()[leaf_id].calls >= 1000


# ------------------------------------------- threading imported by the program
LATE_THREADING = '''
import sys
print("threading at start:", "threading" in sys.modules, flush=True)
import threading, time


def leaf(x):
    return x + 1


def worker(n):
    for i in range(n):
        leaf(i)
    time.sleep(0.15)            # wall samples: the thread lives a while


ts = [threading.Thread(target=worker, args=(1000 * (k + 1),), name=f"late{k}")
      for k in range(3)]
for t in ts:
    t.start()
for t in ts:
    t.join()
leaf(0)
'''


@pytest.fixture(scope="module")
def late_threading(tmp_path_factory):
    d = tmp_path_factory.mktemp("late")
    (d / "late.py").write_text(LATE_THREADING)
    return d


@pytest.mark.parametrize("mode", [[], ["--lines-all"], ["--sample", "--wall"], ["--memory"]],
                         ids=["functions", "lines", "wall", "memory"])
def test_threading_imported_by_the_program_reaches_its_threads(late_threading, mode):
    """pyprof does not import threading before the program (plain python does
    not either); the threads the program starts after its own import are
    followed all the same (3.11: the profile and trace hooks reach them through
    threading once it is imported; wall mode: its thread start is wrapped)."""
    d = late_threading
    out = "_".join([m.strip("-") for m in mode] or ["functions"]) + ".cprof"
    plain = run_python(["late.py"], d)
    r = run_pyprof([*mode, "-o", out, "late.py"], d)
    assert r.returncode == plain.returncode == 0, r.stderr
    assert r.stdout == plain.stdout == "threading at start: False\n"
    s = Session.load(d / out)
    names = {t.name for t in s.threads.values()}
    if mode == ["--memory"]:
        assert names == {"MainThread"}, names   # memory is the process's: one record
        return
    assert {"MainThread", "late0", "late1", "late2"} <= names, names
    by_name = {i: t.name for i, t in s.threads.items()}
    if mode == ["--sample", "--wall"]:
        sampled = {by_name[t] for (t, sid, state) in s.samples}
        assert {"late0", "late1", "late2"} <= sampled, sampled
        return
    (leaf,) = [f for f, fn in s.functions.items() if fn.name == "leaf"]
    if mode == ["--lines-all"]:
        body = line_of_text(LATE_THREADING, "return x + 1")
        hits = {by_name[t]: c.hits for (t, fid, line), c in s.lines.items()
                if fid == leaf and line == body}
    else:
        hits = {by_name[t]: c.calls for (t, fid), c in s.fstats.items() if fid == leaf}
    assert hits == {"late0": 1000, "late1": 2000, "late2": 3000, "MainThread": 1}, hits


def line_of_text(text, needle):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)
