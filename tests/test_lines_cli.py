"""Line mode from the command line and in plain runs, and its outputs checked
by their readers: the line table against the capture, callgrind against the
real callgrind_annotate."""
import os
import pstats
import re
import shutil
import subprocess
import sys

import pytest

from pyprof import Session
from support import run_pyprof as pyprof, run_python as run
from test_cli import line_of, write

APP = """
import helpers

def undecorated(n):
    return sum(helpers.square(i) for i in range(n))

@profile
def work(n):
    total = 0
    for i in range(n):
        total += helpers.square(i)
    total += undecorated(10)
    return total

print(work(300))
"""

HELPERS = """
def square(x):
    y = x * x
    return y


class Shape:
    def area(self, side):
        a = side * side
        return a
"""


@pytest.fixture
def app(tmp_path):
    write(tmp_path / "helpers.py", HELPERS)
    return write(tmp_path / "app.py", APP)


def tables(text):
    """{function name: {line: hits}} from line tables, and the call rows."""
    out, rows, current = {}, [], None
    for ln in text.splitlines():
        m = re.match(r"Function: (\S+) at line (\d+)", ln)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+\S+  ", ln)
        if m and current is not None:
            current[int(m.group(1))] = int(m.group(2))
        m = re.match(r"\(call\)\s+(\d+)\s+.*-> (\S+)", ln)
        if m:
            rows.append((m.group(2), int(m.group(1))))
    return out, rows


def test_kernprof_like_bare_profile(app, tmp_path):
    r = pyprof(["-l", str(app)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("8955335\n")
    found, rows = tables(r.stdout)
    assert set(found) == {"work"}                      # only decorated code is line-traced
    body = line_of(app, "total += helpers.square(i)")
    assert found["work"][body] == 300
    assert found["work"][line_of(app, "for i in range(n):")] == 301
    assert ("square", 300) in rows and ("undecorated", 1) in rows
    # Outside pyprof the bare name does not exist: it is injected only under pyprof.
    plain = run([str(app)], tmp_path)
    assert plain.returncode == 1 and "NameError: name 'profile'" in plain.stderr


def test_plain_run_prints_at_exit_and_pyprof_output(app, tmp_path):
    src = APP.replace("import helpers", "import helpers\nfrom pyprof import profile")
    script = write(tmp_path / "plain.py", src)
    r = run([str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    found, _ = tables(r.stdout)
    assert found["work"][line_of(script, "total += helpers.square(i)")] == 300
    for name in ("out.cprof", "out.txt", "callgrind.out.1", "out.prof"):
        env = dict(os.environ, PYPROF_OUTPUT=str(tmp_path / name))
        r = run([str(script)], tmp_path, env=env)
        assert r.returncode == 0 and r.stdout == "8955335\n", r.stderr
        assert (tmp_path / name).stat().st_size > 0
    s = Session.load(tmp_path / "out.cprof")
    assert s.info["lines"] and s.meta["modes"] == ["function", "lines"]
    hits = {(s.functions[f].name, ln): c.hits for (f, ln), c in s.line_totals().items()}
    assert hits[("work", line_of(script, "total += helpers.square(i)"))] == 300
    assert tables((tmp_path / "out.txt").read_text())[0] == found
    stats = pstats.Stats(str(tmp_path / "out.prof")).stats
    assert any(k[2] == "work" and v[1] == 1 for k, v in stats.items())


# A module or file pattern covers all of its code: module body, class bodies,
# functions (named by qualified name).
WHOLE = {"<module>", "Shape", "square", "Shape.area"}


@pytest.mark.parametrize("pattern,expected", [
    ("helpers", WHOLE),
    ("helpers:square", {"square"}),
    ("helpers:Shape.area", {"Shape.area"}),
    ("*/helpers.py", WHOLE),
])
def test_lines_of_patterns(tmp_path, pattern, expected):
    write(tmp_path / "helpers.py", HELPERS)
    script = write(tmp_path / "main.py", """
        import helpers
        print(helpers.square(3), helpers.Shape().area(2))
    """)
    r = pyprof(["--lines-of", pattern, str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert set(tables(r.stdout)[0]) == expected
    assert "warning" not in r.stderr


def test_unmatched_pattern_warns_and_strict_fails(app, tmp_path):
    r = pyprof(["--lines-of", "helpers:nosuch", str(app)], tmp_path)
    assert r.returncode == 0
    assert r.stderr.strip() == "pyprof: warning: --lines-of 'helpers:nosuch' matched no code that ran"
    r = pyprof(["--strict", "--lines-of", "nosuchmodule", str(app)], tmp_path)
    assert r.returncode == 2 and "nosuchmodule" in r.stderr


def test_lines_all_traces_the_programs_files_only(app, tmp_path):
    r = pyprof(["--lines-all", str(app)], tmp_path)
    assert r.returncode == 0, r.stderr
    found, _ = tables(r.stdout)
    assert {"work", "undecorated", "square", "<module>"} <= set(found)
    files = set(re.findall(r"File: (\S+)", r.stdout))
    assert files == {str(app), str(tmp_path / "helpers.py")}     # no stdlib, no site-packages
    r = pyprof(["--lines-all", "--exclude", "*/helpers.py", str(app)], tmp_path)
    assert "square" not in tables(r.stdout)[0]


def test_view_convert_and_changed_or_missing_source(app, tmp_path):
    r = pyprof(["-l", "-o", "run.cprof", str(app)], tmp_path)
    assert r.returncode == 0, r.stderr
    v = pyprof(["view", "run.cprof"], tmp_path)
    assert v.returncode == 0 and "Note:" not in v.stdout
    assert tables(v.stdout)[0]["work"][line_of(app, "total += helpers.square(i)")] == 300
    ms = pyprof(["view", "run.cprof", "--unit", "ms"], tmp_path)
    assert ms.stdout.startswith("Timer unit: 0.001 s")
    fn = pyprof(["view", "run.cprof", "--functions", "-s", "ncalls"], tmp_path)
    assert "ncalls  tottime" in fn.stdout and "square" in fn.stdout
    c = pyprof(["convert", "run.cprof", "-o", "lines.txt"], tmp_path)
    assert c.returncode == 0 and (tmp_path / "lines.txt").read_text() == v.stdout
    app.write_text(app.read_text().replace("total = 0", "total = 0  # edited"))
    v = pyprof(["view", "run.cprof"], tmp_path)
    assert f"Note: {app} has changed since it was profiled" in v.stdout
    app.unlink()
    v = pyprof(["view", "run.cprof"], tmp_path)
    assert v.returncode == 0 and "source not available" in v.stdout
    assert tables(v.stdout)[0]["work"][line_of_text_lines(APP, "total += helpers.square(i)")] == 300


def line_of_text_lines(text, needle):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


@pytest.mark.skipif(shutil.which("callgrind_annotate") is None,
                    reason="callgrind_annotate (Debian package valgrind) is not installed")
def test_callgrind_annotate_reads_the_line_numbers(app, tmp_path):
    r = pyprof(["-l", "-o", "run.cprof", str(app)], tmp_path)
    assert r.returncode == 0, r.stderr
    r = pyprof(["convert", "run.cprof", "-o", "callgrind.out.run"], tmp_path)
    assert r.returncode == 0, r.stderr
    ann = subprocess.run(["callgrind_annotate", "--auto=yes", "--show-percs=no",
                          str(tmp_path / "callgrind.out.run")], cwd="/", capture_output=True,
                         text=True, timeout=60)
    assert ann.returncode == 0, ann.stderr
    assert "WARNING" not in ann.stdout + ann.stderr
    # Expected per line of work(): self time (line time minus its calls) and hits.
    s = Session.load(tmp_path / "run.cprof")
    ns = s.time_unit * 1e9
    fid = next(f for f, fn in s.functions.items() if fn.name == "work")
    rows = s.callrow_totals()
    expected = {}
    for (f, line), c in s.line_totals().items():
        if f == fid:
            calls = sum(r.time for (ff, ll, _), r in rows.items() if ff == f and ll == line)
            expected[line] = (max(0, round((c.time - calls) * ns)), c.hits)
    # The annotated source of app.py: "<ns> <hits>  <source line>" per line.
    section = ann.stdout.split(f"Auto-annotated source: {app}")[1]
    src = app.read_text().splitlines()
    seen = {}
    for ln in section.splitlines():
        m = re.match(r"\s*([\d,]+|\.)\s+([\d,]+|\.)\s\s(.*)$", ln)
        if not m:
            continue
        text = m.group(3)
        line = next((i for i, t in enumerate(src, 1) if t == text and i in expected), None)
        if line is not None and line not in seen:
            num = lambda g: 0 if g == "." else int(g.replace(",", ""))   # noqa: E731
            seen[line] = (num(m.group(1)), num(m.group(2)))
    for line, (cost, hits) in expected.items():
        if hits:
            assert seen[line] == (cost, hits), line


def test_decorating_a_class_is_a_clear_type_error(tmp_path):
    script = write(tmp_path / "bad.py", """
        from pyprof import profile

        @profile
        class C:
            pass
    """)
    r = run([str(script)], tmp_path)
    assert r.returncode == 1
    assert "TypeError: pyprof.profile: cannot line-profile a type object" in r.stderr


@pytest.mark.skipif(sys.version_info < (3, 12), reason="cProfile and pyprof share hooks on 3.11")
def test_profile_decorator_beside_cprofile(tmp_path):
    script = write(tmp_path / "both.py", """
        import cProfile
        from pyprof import profile

        @profile
        def f(x):
            y = x + 1
            return y

        p = cProfile.Profile()
        p.enable()
        f(1)
        p.disable()
        p.create_stats()
        print("cprofile", [v[1] for k, v in p.stats.items() if k[2] == "f"])
        f(2)
    """)
    r = run([str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cprofile [1]" in r.stdout
    assert tables(r.stdout)[0]["f"][line_of(script, "y = x + 1")] >= 1


def test_explicit_profiler_takes_precedence_over_at_exit_one(tmp_path):
    script = write(tmp_path / "prec.py", """
        import pyprof

        @pyprof.profile
        def f(x):
            return x + 1

        f(0)
        with pyprof.Profile() as p:
            f(1)
        print("explicit", [c.calls for fid, c in p.session().function_totals().items()
                           if p.session().functions[fid].name == "f"])
        f(2)
    """)
    r = run([str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "explicit [1]" in r.stdout
    assert tables(r.stdout)[0]["f"][line_of(script, "return x + 1")] == 2   # f(0) and f(2)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the trace hook is used on 3.11 only")
def test_trace_hook_held_by_another_tool_is_a_clear_error(tmp_path):
    script = write(tmp_path / "held.py", """
        import sys, pyprof
        sys.settrace(lambda *a: None)
        p = pyprof.Profile(lines=True)
        try:
            p.enable()
        except RuntimeError as e:
            print("refused:", e)
    """)
    r = run([str(script)], tmp_path)
    assert "refused: pyprof: line profiling on Python 3.11 needs the trace hook" in r.stdout


@pytest.mark.skipif(shutil.which("callgrind_annotate") is None,
                    reason="callgrind_annotate (Debian package valgrind) is not installed")
def test_function_level_callgrind_from_function_mode(app, tmp_path):
    """A function-mode capture (no line data) converts to callgrind too: each
    function's self time at its first line, its callees as call records."""
    app.write_text(app.read_text().replace("@profile\n", ""))
    r = pyprof(["-o", "fn.cprof", str(app)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert pyprof(["convert", "fn.cprof", "-o", "callgrind.out.fn"], tmp_path).returncode == 0
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--show-percs=no",
                          str(tmp_path / "callgrind.out.fn")], cwd="/", capture_output=True,
                         text=True, timeout=60)
    assert ann.returncode == 0 and "WARNING" not in ann.stdout + ann.stderr, ann.stderr
    s = Session.load(tmp_path / "fn.cprof")
    ns = s.time_unit * 1e9
    own_total = sum(max(0, round(c.own * ns)) for c in s.function_totals().values())
    m = re.search(r"^\s*([\d,]+)\s+PROGRAM TOTALS", ann.stdout, re.M)
    assert int(m.group(1).replace(",", "")) == own_total
    # work's inclusive cost is its cumulative time (self + calls recorded under it).
    fid = next(f for f, fn in s.functions.items() if fn.name == "work")
    line = re.search(rf"^\s*([\d,]+)\s+\S*app\.py:work:{s.functions[fid].line}", ann.stdout, re.M)
    assert line, ann.stdout
    work_incl = int(line.group(1).replace(",", ""))
    assert abs(work_incl - s.function_totals()[fid].total * ns) <= 20


def test_gprof2dot_reads_our_callgrind(app, tmp_path):
    pytest.importorskip("gprof2dot")
    assert pyprof(["-l", "-o", "run.cprof", str(app)], tmp_path).returncode == 0
    assert pyprof(["convert", "run.cprof", "-o", "callgrind.out.g"], tmp_path).returncode == 0
    # no pruning: a function's share varies with the machine's load, its presence must not
    r = run(["-m", "gprof2dot", "-n", "0", "-e", "0", "-f", "callgrind",
             str(tmp_path / "callgrind.out.g")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "work" in r.stdout and "square" in r.stdout and "digraph" in r.stdout
