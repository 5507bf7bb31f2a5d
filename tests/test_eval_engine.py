"""3.11 with builtins=False: the PEP 523 frame-evaluation engine (see
docs/how-it-works.md). Its counts are checked against cProfile in
test_parity.py; here, what is specific to it: the C-stack guard, threads the
profile hook cannot reach, coexistence with the legacy hook, and the mode
recorded in the capture."""
import subprocess
import sys
import textwrap
import threading

import pytest

import pyprof

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="the frame-evaluation engine serves 3.11 only")


def _calls(session, name):
    return sum(c.calls for f, c in session.function_totals().items()
               if session.functions[f].name == name)


def test_mode_recorded_in_capture():
    def leaf():
        return 1

    p = pyprof.Profile(builtins=False)
    p.runcall(lambda: [leaf() for _ in range(10)])
    s = p.session()
    assert s.info["hook"] == "PEP 523 frame evaluation"
    assert _calls(s, "leaf") == 10
    q = pyprof.Profile()
    q.runcall(leaf)
    assert q.session().info["hook"] == "PyEval_SetProfile"


def test_user_timer_uses_the_profile_hook():
    # A user timer is Python code: the eval hook would profile it; the profile
    # hook runs it with tracing off.
    ticks = iter(range(10**6))
    p = pyprof.Profile(lambda: next(ticks), 1.0, builtins=False)
    p.runcall(sum, [1, 2])
    assert p.session().info["hook"] == "PyEval_SetProfile"


def test_deep_recursion_that_runs_natively_still_runs():
    """Without the profile hook's inlined calls each Python call recurses on the
    C stack; near its end the engine steps aside instead of overflowing it."""
    prog = textwrap.dedent("""
        import sys, threading, pyprof
        sys.setrecursionlimit(400000)

        def down(n):
            return 0 if n == 0 else 1 + down(n - 1)

        def run(n):
            p = pyprof.Profile(builtins=False)
            p.enable()
            r = down(n)
            p.disable()
            s = p.session()
            calls = sum(c.calls for f, c in s.function_totals().items()
                        if s.functions[f].name == "down")
            print(n, r, calls, s.info["cstack_asides"])

        run(500)
        run(200000)
        threading.stack_size(512 * 1024)
        t = threading.Thread(target=run, args=(30000,))
        t.start()
        t.join()
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [list(map(int, line.split())) for line in r.stdout.split("\n") if line.strip()]
    assert rows[0] == [500, 500, 501, 0]                 # shallow: every call, no step aside
    n, result, calls, asides = rows[1]
    assert result == n == 200000 and asides >= 1
    assert 1000 < calls < n                              # recorded down to the guard
    n, result, calls, asides = rows[2]                   # a thread with a 512 KiB stack
    assert result == n and asides >= 1 and 100 < calls < n


def test_threads_the_profile_hook_cannot_reach():
    import _thread

    def work():
        return sum(range(10))

    done = threading.Event()

    def raw():
        for _ in range(5):
            work()
        done.set()

    p = pyprof.Profile(builtins=False)
    p.enable()
    _thread.start_new_thread(raw, ())
    assert done.wait(30)
    p.disable()
    assert _calls(p.session(), "work") == 5


def test_eval_and_profile_hook_profilers_one_after_the_other():
    def leaf():
        return 1

    for builtins in (False, True, False):
        p = pyprof.Profile(builtins=builtins)
        p.runcall(lambda: [leaf() for _ in range(7)])
        assert _calls(p.session(), "leaf") == 7
        assert sys.getprofile() is None


def test_flush_with_finalizers_running_python_code(tmp_path):
    """Garbage with __del__ methods collected while a periodic flush runs: the
    finalizers' calls must not corrupt the tables being written."""
    out = tmp_path / "f.cprof"
    prog = textwrap.dedent(f"""
        import gc, time, pyprof

        def touched():
            return 1

        class Node:
            def __init__(self):
                self.me = self
            def __del__(self):
                touched()

        def churn():
            for _ in range(200):
                Node()

        gc.set_threshold(50, 5, 5)
        p = pyprof.Profile(builtins=False, flush_to={str(out)!r}, flush_interval=0.001)
        p.enable()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            churn()
        p.disable()
        p.dump({str(out)!r})
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    s = pyprof.Session.load(out)
    assert _calls(s, "churn") > 10 and _calls(s, "__del__") > 0
