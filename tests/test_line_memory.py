"""Line tables with memory include callees (issue 20, item 2): a line target's
Alloc / Net / Peak count what its thread allocated and freed while the line
ran, through any call (Python, C, NumPy), recursion counted once — checked
against known sizes and tracemalloc on the same calls; the self figures stay
tracemalloc's per line (tests/test_memory.py)."""
import csv
import os
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

import pyprof
from pyprof.export import export

MiB = 2**20


def line_of(fn, text):
    """The line number of the first line of `fn` containing `text`."""
    import inspect
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if text in s)


def traced(run):
    """tracemalloc's (net, peak above the start) of `run()`, bytes; pyprof off."""
    tracemalloc.start(1)
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        keep = run()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del keep
    return after - before, peak - before


def line_profile(fn, *args, **kw):
    p = pyprof.Profile(lines=True, memory=True, **kw)
    p.add_function(fn)
    p.enable()
    try:
        result = fn(*args)
    finally:
        p.disable()
    return p.session(), result


def inclusive(session, fn, line):
    fid = next(fid for fid, f in session.functions.items()
               if f.kind == "python" and f.qualname == fn.__qualname__)
    return session.line_memory_totals()[(fid, line)]


# ------------------------------------------------------------------ Python callees
def keeps_10_mib():
    return bytearray(10 * MiB)


def allocates_and_frees_50_mib():
    block = bytearray(50 * MiB)
    return len(block)


def target():
    kept = keeps_10_mib()
    n = allocates_and_frees_50_mib()
    return kept, n


def test_python_callees_kept_and_freed():
    s, _ = line_profile(target)
    kept = inclusive(s, target, line_of(target, "keeps_10_mib()"))
    freed = inclusive(s, target, line_of(target, "allocates_and_frees"))
    truth_kept = traced(keeps_10_mib)
    truth_freed = traced(allocates_and_frees_50_mib)
    assert kept.alloc_bytes == pytest.approx(10 * MiB, rel=0.01)
    assert kept.net_bytes == pytest.approx(10 * MiB, rel=0.01)
    assert kept.net_bytes == pytest.approx(truth_kept[0], abs=64 << 10)
    assert kept.peak_bytes == pytest.approx(truth_kept[1], abs=64 << 10)
    assert freed.alloc_bytes == pytest.approx(50 * MiB, rel=0.01)
    assert abs(freed.net_bytes) < 64 << 10                      # 0 net, within 64 KiB
    assert freed.net_bytes == pytest.approx(truth_freed[0], abs=64 << 10)
    assert freed.peak_bytes == pytest.approx(50 * MiB, rel=0.01)
    assert freed.peak_bytes == pytest.approx(truth_freed[1], abs=64 << 10)
    # the self figures: nothing allocated by the target's own lines but the tuple
    own = {line: c for (fid, line), c in s.memory_lines().items()
           if s.functions[fid].qualname == "target"}
    assert sum(c.alloc_bytes for c in own.values()) < 4096
    # the callees' own lines hold the bytes (self figures unchanged)
    helper = {s.functions[fid].qualname: c for fid, c in s.memory_functions().items()}
    assert helper["keeps_10_mib"].alloc_bytes == pytest.approx(10 * MiB, rel=0.01)
    assert helper["allocates_and_frees_50_mib"].alloc_bytes == pytest.approx(50 * MiB, rel=0.01)


# ------------------------------------------------------------------ recursion
def rec(n, out):
    out.append(bytearray(MiB))
    if n:
        rec(n - 1, out)


def test_recursion_counted_once():
    """The recursive line's outermost running holds the whole inner recursion;
    inner runnings of the same line are inside it and not counted again (that
    would give 1 + 2 + ... + N MiB)."""
    N = 12
    s, _ = line_profile(rec, N, [])
    c = inclusive(s, rec, line_of(rec, "rec(n - 1, out)"))
    out = []
    rec(0, out)                                 # the list's state before the inner call
    truth_net, truth_peak = traced(lambda: rec(N - 1, out))
    assert c.alloc_bytes == pytest.approx(N * MiB, rel=0.01)
    assert c.net_bytes == pytest.approx(truth_net, abs=64 << 10)
    assert c.peak_bytes == pytest.approx(truth_peak, abs=64 << 10)
    a = inclusive(s, rec, line_of(rec, "out.append"))
    assert a.alloc_bytes == pytest.approx((N + 1) * MiB, rel=0.01)      # every level
    # the whole recursion allocated what its lines allocated themselves
    own = sum(m.alloc_bytes for (fid, line), m in s.memory_lines().items()
              if s.functions[fid].qualname == "rec")
    assert c.alloc_bytes + a.alloc_bytes // (N + 1) == pytest.approx(own, rel=0.01)


# ------------------------------------------------------------------ NumPy, CLI, CSV, API
NUMPY_APP = """\
import numpy as np


@profile
def main():
    small = [0] * 10
    arr = np.ones(8 * 2**20)
    total = float(arr[0]) + len(small)
    return arr, total


keep = main()
"""


@pytest.mark.parametrize("flag", ["--memory", "--memory-sample"])
def test_numpy_line_64_mib_table_csv_and_session(tmp_path, flag):
    pytest.importorskip("numpy")
    app = tmp_path / "app.py"
    app.write_text(NUMPY_APP)
    line = NUMPY_APP.splitlines().index("    arr = np.ones(8 * 2**20)") + 1
    r = subprocess.run([sys.executable, "-m", "pyprof", "-l", flag, "-o", "run.cprof",
                        str(app)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.load(tmp_path / "run.cprof")
    fid = next(fid for fid, f in s.functions.items() if f.qualname == "main")
    c = s.line_memory_totals()[(fid, line)]
    assert c.alloc_bytes == pytest.approx(64 * MiB, rel=0.01)
    assert c.net_bytes == pytest.approx(64 * MiB, rel=0.01)
    assert c.peak_bytes == pytest.approx(64 * MiB, rel=0.01)
    # the printed table (MiB): Alloc, Net, Peak with callees; the line's own net is 0
    v = subprocess.run([sys.executable, "-m", "pyprof", "view", "run.cprof"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert v.returncode == 0, v.stderr
    assert "Self net" in v.stdout
    row = next(ln for ln in v.stdout.splitlines() if ln.rstrip().endswith("np.ones(8 * 2**20)"))
    number, hits, time_, pct, alloc, net, peak, self_alloc, self_net = row.split()[:9]
    assert int(number) == line and hits == "1"
    assert float(alloc) == pytest.approx(64, rel=0.01)
    assert float(net) == pytest.approx(64, rel=0.01)
    assert float(peak) == pytest.approx(64, rel=0.01)
    assert float(self_net) == pytest.approx(0, abs=0.05)
    # the CSV: both sets of columns
    export(s, "memory-csv", tmp_path / "m.memory.csv")
    rows = list(csv.DictReader((tmp_path / "m.memory.csv").open()))
    mine = next(x for x in rows if x["function"] == "main" and x["line"] == str(line))
    assert int(mine["inclusive_allocated_bytes"]) == pytest.approx(64 * MiB, rel=0.01)
    assert int(mine["inclusive_net_bytes"]) == pytest.approx(64 * MiB, rel=0.01)
    assert int(mine["inclusive_peak_bytes"]) == pytest.approx(64 * MiB, rel=0.01)
    assert abs(int(mine["net_bytes"])) < 4096                  # self: NumPy's lines hold it
    numeric = [x for x in rows if x["inclusive_allocated_bytes"] == ""]
    assert sum(int(x["allocated_bytes"]) for x in numeric) >= 64 * MiB * 0.99
    # the lines view: bytes with callees, self-bytes the line's own
    from pyprof import views
    rows = views.view(s, "lines", select=["bytes", "self-bytes"])["rows"]
    mine = next(x for x in rows if x["name"] == f"main:{line}")
    assert mine["bytes"] == pytest.approx(64 * MiB, rel=0.01) and mine["self-bytes"] < 4096


def test_numpy_line_through_the_api():
    np = pytest.importorskip("numpy")

    def main():
        arr = np.ones(8 * 2**20)
        return arr

    s, _ = line_profile(main)
    c = inclusive(s, main, line_of(main, "np.ones"))
    truth_net, truth_peak = traced(lambda: np.ones(8 * 2**20))
    assert c.alloc_bytes == pytest.approx(64 * MiB, rel=0.01)
    assert c.net_bytes == pytest.approx(truth_net, rel=0.01)
    assert c.peak_bytes == pytest.approx(truth_peak, rel=0.01)


# ------------------------------------------------------------------ format
def test_capture_round_trip_and_older_captures(tmp_path):
    s, _ = line_profile(target)
    assert s.line_memory and s.info["format"] >= [1, 5]
    s.save(tmp_path / "a.cprof")
    again = pyprof.load(tmp_path / "a.cprof")
    assert again.line_memory == s.line_memory
    # a capture without the record (format 1.4) still loads and prints the old layout
    s.line_memory.clear()
    s.info["format"] = [1, 4]
    s.save(tmp_path / "old.cprof")
    old = pyprof.load(tmp_path / "old.cprof")
    assert old.line_memory == {}
    from pyprof.render.printout import render
    text = render(old)
    assert " Peak  Line Contents" in text and "Self net" not in text


def test_memory_off_and_memory_only_have_no_line_memory():
    p = pyprof.Profile(lines=True)
    p.add_function(target)
    with p:
        target()
    assert p.session().line_memory == {}
    p = pyprof.Profile(mode="memory")
    with p:
        target()
    assert p.session().line_memory == {}


def test_threads_each_count_their_own(tmp_path):
    """A line counts its own thread's allocations, not another thread's."""
    app = tmp_path / "t.py"
    app.write_text(textwrap.dedent("""\
        import threading

        stop = threading.Event()
        started = threading.Event()


        def noise():
            started.set()
            keep = []
            while not stop.is_set():
                keep.append(bytearray(1 << 16))
                if len(keep) > 64:
                    keep.clear()


        @profile
        def main():
            t = threading.Thread(target=noise)
            t.start()
            started.wait()
            data = bytearray(8 << 20)
            stop.set()
            t.join()
            return data


        main()
        """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "-l", "--memory", "-o", "t.cprof",
                        str(app)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.load(tmp_path / "t.cprof")
    fid = next(fid for fid, f in s.functions.items() if f.qualname == "main")
    line = app.read_text().splitlines().index("    data = bytearray(8 << 20)") + 1
    c = s.line_memory_totals()[(fid, line)]
    assert c.alloc_bytes == pytest.approx(8 << 20, abs=8192)
    assert c.net_bytes == pytest.approx(8 << 20, abs=8192)
    assert os.path.exists(tmp_path / "t.cprof")


# ------------------------------------------------------------------ frees, generators
def frees():
    big = bytearray(20 * MiB)
    del big
    return None


def test_a_line_that_frees_has_a_negative_net():
    s, _ = line_profile(frees)
    made = inclusive(s, frees, line_of(frees, "bytearray(20"))
    freed = inclusive(s, frees, line_of(frees, "del big"))
    assert made.alloc_bytes == pytest.approx(20 * MiB, rel=0.01)
    assert made.net_bytes == pytest.approx(20 * MiB, rel=0.01)
    assert freed.alloc_bytes < 4096 and freed.peak_bytes < 4096
    assert freed.net_bytes == pytest.approx(-20 * MiB, rel=0.01)
    # the self figures charge the free back to the line that allocated
    own = {line: c for (fid, line), c in s.memory_lines().items()
           if s.functions[fid].qualname == "frees"}
    assert own[line_of(frees, "bytearray(20")].net_bytes < 4096


def gen(n):
    for _ in range(n):
        yield bytearray(MiB)


def consume():
    out = list(gen(3))
    return out


def test_generator_lines_count_while_they_run():
    p = pyprof.Profile(lines=True, memory=True)
    p.add_function(gen)
    p.add_function(consume)
    with p:
        consume()
    s = p.session()
    y = inclusive(s, gen, line_of(gen, "yield"))
    assert y.alloc_bytes == pytest.approx(3 * MiB, rel=0.01)      # 1 MiB per running
    assert y.net_bytes == pytest.approx(3 * MiB, rel=0.01)
    assert y.peak_bytes == pytest.approx(MiB, rel=0.01)           # the highest running
    c = inclusive(s, consume, line_of(consume, "list(gen(3))"))
    assert c.alloc_bytes == pytest.approx(3 * MiB, rel=0.01)
    assert c.net_bytes == pytest.approx(3 * MiB, rel=0.01)
    assert c.peak_bytes == pytest.approx(3 * MiB, rel=0.01)


def test_a_corrupt_linemem_row_is_one_clear_error(tmp_path):
    s, _ = line_profile(target)
    key = next(iter(s.line_memory))
    s.line_memory[(key[0], 999_999, key[2])] = s.line_memory[key]
    s.save(tmp_path / "bad.cprof")
    with pytest.raises(pyprof.PyprofError, match=r"corrupt: LINEMEM row \d+ has function 999999"):
        pyprof.load(tmp_path / "bad.cprof")


# ------------------------------------------------------------------ issue 32, item 2
DECORATED_APP = """\
import enum
import json


class Color(enum.Enum):
    RED = 1
    GREEN = 2


def make_rows(n):
    return [{"id": i, "name": "x" * 100, "color": Color(1 + i % 2).name} for i in range(n)]


@profile
def idle():
    return 1


@profile
def main():
    rows = make_rows(20000)
    text = json.dumps(rows)
    back = json.loads(text)
    blob = bytearray(3 << 20)
    return rows, text, back, blob


idle()
keep = main()
"""


def test_memory_line_tables_are_the_decorated_functions(tmp_path):
    """-l --memory prints what -l prints for time, the decorated functions'
    tables (not those of enum, json or importlib that allocated too), and their
    bytes are tracemalloc's for the same calls."""
    app = tmp_path / "app.py"
    app.write_text(DECORATED_APP)
    r = subprocess.run([sys.executable, "-m", "pyprof", "-l", "--memory", "-o", "run.cprof",
                        str(app)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    v = subprocess.run([sys.executable, "-m", "pyprof", "view", "run.cprof"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert v.returncode == 0, v.stderr
    out = v.stdout
    assert sorted(ln.split()[1] for ln in out.splitlines() if ln.startswith("Function:")) == [
        "idle", "main"]
    assert [ln for ln in out.splitlines() if ln.startswith("File:")] == [f"File: {app}"] * 2
    for other in ("encoder.py", "decoder.py", "enum.py", "<frozen", "make_rows (app.py"):
        assert other not in out, other
    table = out[out.index("Memory per function"):out.index("Line bookkeeping")]
    names = [ln.split()[-2] for ln in table.splitlines()[3:] if ln.strip()]
    assert names[0] == "main" and set(names) <= {"main", "idle"}, names   # targets only
    # the figures: tracemalloc's on the same calls, in this process
    src = DECORATED_APP.splitlines()
    ns = {"profile": lambda f: f}
    exec(compile("\n".join(src[:-2]), "app", "exec"), ns)
    rows_truth = traced(lambda: ns["make_rows"](20000))
    rows = ns["make_rows"](20000)
    text_truth = traced(lambda: ns["json"].dumps(rows))
    text = ns["json"].dumps(rows)
    back_truth = traced(lambda: ns["json"].loads(text))
    s = pyprof.load(tmp_path / "run.cprof")
    fid = next(fid for fid, f in s.functions.items() if f.qualname == "main")
    incl = s.line_memory_totals()
    for code, (net, peak) in (("make_rows(20000)", rows_truth), ("json.dumps", text_truth),
                              ("json.loads", back_truth), ("bytearray", (3 * MiB, 3 * MiB))):
        c = incl[(fid, src.index(next(x for x in src if code in x and "=" in x)) + 1)]
        assert net > 512 << 10                                  # MiB-scale figures
        assert c.net_bytes == pytest.approx(net, rel=0.02, abs=32 << 10), code
        assert c.peak_bytes == pytest.approx(peak, rel=0.02, abs=32 << 10), code
    row = next(ln for ln in out.splitlines() if ln.rstrip().endswith("bytearray(3 << 20)"))
    assert row.split()[4:7] == ["3.0", "3.0", "3.0"]            # Alloc, Net, Peak (MiB)


def test_memory_line_mode_without_a_target_says_so(tmp_path):
    """-l --memory with no decorated function: no table of the code that
    allocated, one line saying why (as -l says for time)."""
    app = tmp_path / "app.py"
    app.write_text("import json\nkeep = [json.dumps({'n': i}) for i in range(20000)]\n")
    r = subprocess.run([sys.executable, "-m", "pyprof", "-l", "--memory", str(app)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "No line was profiled: no line target ran" in r.stdout
    assert "Function:" not in r.stdout and "Memory per function" not in r.stdout
    assert "Traced memory (MiB)" in r.stdout or "Traced memory (KiB)" in r.stdout
