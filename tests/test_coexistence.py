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
