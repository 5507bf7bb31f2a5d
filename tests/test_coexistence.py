"""pyprof beside other tools: coverage.py, debuggers and other sys.monitoring
users keep working, and a clear error names the holders when no tool id is free."""
import os
import subprocess
import sys
import textwrap

import pytest

import pyprof
from conftest import monitoring_only

PROGRAM = textwrap.dedent("""
    import pyprof

    def covered_only_if_run(x):
        y = x * 2
        return y + 1

    def main():
        p = pyprof.Profile()
        p.enable()
        total = sum(covered_only_if_run(i) for i in range(25))
        p.disable()
        p.create_stats()
        calls = [v[1] for k, v in p.stats.items() if k[2] == "covered_only_if_run"]
        print("RESULT", total, calls)

    main()
""")


@pytest.mark.parametrize("core", ["default", "sysmon"])
def test_under_coverage(tmp_path, core):
    pytest.importorskip("coverage")
    if core == "sysmon" and sys.version_info < (3, 12):
        pytest.skip("coverage's sys.monitoring core needs 3.12+")
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = dict(os.environ, COVERAGE_FILE=str(tmp_path / ".coverage"))
    if core == "sysmon":
        env["COVERAGE_CORE"] = "sysmon"
    r = subprocess.run([sys.executable, "-m", "coverage", "run", str(prog)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "RESULT 625 [25]" in r.stdout
    rep = subprocess.run([sys.executable, "-m", "coverage", "report", "-m", "--include",
                          str(prog)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert rep.returncode == 0, rep.stderr
    line = next(ln for ln in rep.stdout.splitlines() if "prog.py" in ln)
    assert line.split()[-1] == "100%" or line.rstrip().endswith("100%"), rep.stdout


@monitoring_only
def test_takes_another_tool_id_when_profiler_id_is_held():
    mon = sys.monitoring
    mon.use_tool_id(mon.PROFILER_ID, "someone-else")
    try:
        p = pyprof.Profile()
        p.enable()
        used = p.tool_id
        assert mon.get_tool(used) == "pyprof"
        (lambda: None)()
        p.disable()
        assert used not in (mon.PROFILER_ID, -1)
        assert mon.get_tool(mon.PROFILER_ID) == "someone-else"
        p.create_stats()
        assert any(k[2] == "<lambda>" for k in p.stats)
        assert mon.get_tool(used) is None    # released on disable
    finally:
        mon.free_tool_id(mon.PROFILER_ID)


@monitoring_only
def test_beside_cprofile():
    import cProfile

    def work():
        return sum(i for i in range(100))

    c = cProfile.Profile()
    c.enable()
    p = pyprof.Profile()
    p.enable()
    work()
    p.disable()
    c.disable()
    p.create_stats()
    c.create_stats()
    key = (__file__, work.__code__.co_firstlineno, "work")
    assert p.stats[key][1] == c.stats[key][1] == 1


@monitoring_only
def test_no_free_tool_id_names_the_holders():
    mon = sys.monitoring
    taken = []
    for i in range(6):
        if mon.get_tool(i) is None:
            mon.use_tool_id(i, f"tool{i}")
            taken.append(i)
    try:
        p = pyprof.Profile()
        with pytest.raises(RuntimeError, match=r"no free sys.monitoring tool id.*tool2"):
            p.enable()
        assert not p.enabled
    finally:
        for i in taken:
            mon.free_tool_id(i)
    p.enable()
    p.disable()


def test_debugger_style_trace_function_keeps_working():
    # A settrace-based debugger (pdb, IDEs) sees its line events while pyprof profiles.
    seen = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name == "target":
            seen.append(event)
        return tracer

    def target():
        a = 1
        b = a + 1
        return b

    p = pyprof.Profile()
    sys.settrace(tracer)
    try:
        p.enable()
        target()
        p.disable()
    finally:
        sys.settrace(None)
    assert seen.count("line") == 3 and "call" in seen and "return" in seen
    p.create_stats()
    assert p.stats[(__file__, target.__code__.co_firstlineno, "target")][1] == 1


def test_sys_getprofile_restored_after_disable():
    before = sys.getprofile()
    p = pyprof.Profile()
    p.enable()
    p.disable()
    assert sys.getprofile() is before


TOOL_DISABLES_LINES = textwrap.dedent("""
    import sys, pyprof
    M = sys.monitoring
    M.use_tool_id(4, "cov")
    hits = []
    def on_line(code, line):
        hits.append(line)
        return M.DISABLE            # what coverage's sysmon core does after a line's first hit
    M.register_callback(4, M.events.LINE, on_line)
    def g():
        return 1
    def f():
        x = 0
        for i in range(200):        # > 64 calls to Python only: pyprof DISABLEs this CALL site
            x += g()
        return x
    M.set_local_events(4, f.__code__, M.events.LINE)
    f(); n1 = len(hits)
    p = pyprof.Profile(); p.enable(); f(); p.disable()
    n2 = len(hits)
    f(); n3 = len(hits)
    # pyprof's own DISABLEd site is re-armed: a new tool on its id sees every call again
    M.use_tool_id(2, "next")        # the id pyprof took
    seen = []
    M.register_callback(2, M.events.CALL, lambda code, off, c, a: seen.append(c))
    M.set_events(2, M.events.CALL)
    f()
    M.set_events(2, 0)
    print("HITS", n1, n2 - n1, n3 - n2, sum(1 for c in seen if getattr(c, "__name__", "") == "g"))
""")


@monitoring_only
def test_tool_that_disables_its_events_keeps_them_disabled(tmp_path):
    """pyprof's stop re-arms the call sites it DISABLEd, not every tool's
    (sys.monitoring.restart_events() would give coverage its lines back)."""
    prog = tmp_path / "tool.py"
    prog.write_text(TOOL_DISABLES_LINES)
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    n1, during, after, calls = map(int, r.stdout.split()[1:])
    assert n1 == 5 and (during, after, calls) == (0, 0, 200), r.stdout


COVERED = textwrap.dedent("""
    import contextlib, os, pyprof

    def g(i):
        if i % 3:
            return i
        return -i

    def f(n):
        return sum(g(i) for i in range(n))

    f(100)
    with pyprof.Profile() if os.environ.get("WITH_PYPROF") else contextlib.nullcontext():
        f(200)
    f(300)
""")


def test_coverage_sysmon_measures_the_same_lines_under_pyprof(tmp_path):
    pytest.importorskip("coverage", minversion="7.4")
    if sys.version_info < (3, 12):
        pytest.skip("coverage's sys.monitoring core needs 3.12+")
    import json
    prog = tmp_path / "prog.py"
    prog.write_text(COVERED)
    got = {}
    for with_pyprof in ("", "1"):
        env = dict(os.environ, COVERAGE_FILE=str(tmp_path / f".cov{with_pyprof}"),
                   COVERAGE_CORE="sysmon", WITH_PYPROF=with_pyprof)
        r = subprocess.run([sys.executable, "-m", "coverage", "run", "--branch", str(prog)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out = tmp_path / f"cov{with_pyprof}.json"
        r = subprocess.run([sys.executable, "-m", "coverage", "json", "-o", str(out),
                            "--include", str(prog)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        data = json.loads(out.read_text())["files"]
        f = next(v for k, v in data.items() if k.endswith("prog.py"))
        got[with_pyprof] = (f["executed_lines"], f.get("executed_branches"))
    assert got["1"] == got[""], got
