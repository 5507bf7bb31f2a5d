"""The pytest plugin's summary (docs/pytest.md) in real pytest subprocesses,
against ground truth: threads timed by their own CPU clocks, a call of known
length, bytes held at the peak; every figure labelled with what it sums, and
no pytest, pluggy or pyprof lines in any list."""
import json
import os
import re

import pytest

import pyprof
from test_pytest_plugin import HOG, run_pytest, write


ROWS_CONFTEST = """
    import json
    ROWS = {}
    def pytest_runtest_logreport(report):
        for name, value in report.user_properties:
            if name == "pyprof":
                ROWS[report.nodeid.split("::")[-1]] = value
    def pytest_sessionfinish(session):
        json.dump(ROWS, open("rows.json", "w"))
"""


def summary_rows(cwd):
    """The summary's rows as the plugin recorded them (the reports' user_properties)."""
    return json.loads((cwd / "rows.json").read_text())


def summary_row(out, test):
    m = re.search(rf"^\s+([\d.]+) (ms|s)\s+\S+::{re.escape(test)}(?:\s+\[(.*)\])?$", out, re.M)
    assert m, out
    return float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1), m.group(3) or ""


def is_harness_file(file):
    parts = os.path.normpath(os.path.abspath(file)).split(os.sep)
    return ("_pytest" in parts or "pluggy" in parts
            or os.path.abspath(file).startswith(os.path.dirname(pyprof.__file__) + os.sep))


THREADS = """
    import json, threading, time

    def burn(seconds, got):
        t = time.thread_time()
        while time.thread_time() - t < seconds:
            pass
        got.append(time.thread_time())          # this thread's own CPU clock

    def test_threads():
        got = []
        ts = [threading.Thread(target=burn, args=(0.02, got)) for _ in range(30)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        json.dump(sum(got), open("cpu.json", "w"))
"""


@pytest.mark.parametrize("mode", ["sample", "function"])
def test_summary_labels_figures_summed_over_threads(tmp_path, mode):
    write(tmp_path / "conftest.py", ROWS_CONFTEST)
    write(tmp_path / "test_th.py", THREADS)
    r = run_pytest(tmp_path, f"--pyprof={mode}")
    assert r.returncode == 0, r.stdout + r.stderr
    wall, tops = summary_row(r.stdout, "test_threads")
    truth = json.loads((tmp_path / "cpu.json").read_text())        # ~0.6 s of CPU
    row = summary_rows(tmp_path)["test_threads"]
    # traced: every thread; sampled: those a sample caught (~5 samples each)
    assert (25 if mode == "sample" else 31) <= row["threads"] <= 31, row
    assert row["wall"] == pytest.approx(wall, abs=1e-3)
    clock = "CPU" if mode == "sample" else "wall"
    assert tops.startswith(f"{clock} self time summed over {row['threads']} threads: "), tops
    # CPU: burn leads; wall: so does, on a quiet machine, but the threads' waits
    # (lock.acquire: starts, joins) can outgrow it on a loaded one (1.50 s to 1.43 s)
    top = [f[0] for f in row["top"]]
    assert top[0] == "burn" if mode == "sample" else "burn" in top[:2], tops
    burn = next(f[3] for f in row["top"] if f[0] == "burn")
    if mode == "sample":
        # the threads' CPU, sampled: near what their own clocks say
        assert 0.6 * truth <= burn <= 1.15 * truth + 0.02, (burn, truth)
    else:
        # wall self time summed over the threads: beyond the test's wall, as labelled;
        # each thread's wall holds its CPU (burn's, and time.thread_time's of its own)
        s = pyprof.load(tmp_path / ".pyprof" / "test_th.py_test_threads.cprof")
        names = {fid: fn.name for fid, fn in s.functions.items()}
        busy = sum(s.seconds(c.own) for (t, fid), c in s.fstats.items()
                   if names[fid] == "burn" or "time.thread_time" in names[fid])
        assert busy >= 0.95 * truth and burn > wall, (busy, burn, truth, wall)


def test_summary_top_function_within_its_tests_time(tmp_path):
    write(tmp_path / "conftest.py", ROWS_CONFTEST)
    write(tmp_path / "test_k.py", HOG + """
    import json

    def spin_cpu(seconds):          # CPU time: a loaded machine cannot leave it unsampled
        t = time.thread_time()
        while time.thread_time() - t < seconds:
            pass

    @pytest.mark.parametrize("n", range(4))
    def test_known(n):
        t = time.perf_counter()
        spin_cpu(0.1)
        json.dump(time.perf_counter() - t, open(f"own{n}.json", "w"))
    """)
    for mode in ("function", "sample"):
        r = run_pytest(tmp_path, f"--pyprof={mode}", "--durations=10", "--durations-min=0",
                       "-vv")
        assert r.returncode == 0, r.stdout + r.stderr
        rows = summary_rows(tmp_path)
        for n in range(4):
            name = f"test_known[{n}]"
            own = json.loads((tmp_path / f"own{n}.json").read_text())
            wall, tops = summary_row(r.stdout, name)
            row = rows[name]
            assert row["threads"] == 1 and tops.startswith(
                ("wall" if mode == "function" else "CPU") + " self time, 1 thread: "), tops
            assert own <= row["wall"] and row["wall"] == pytest.approx(wall, abs=1e-3)
            # each top function's self time is within the test's own time
            assert row["top"] and all(f[3] <= row["wall"] for f in row["top"]), (mode, row)
            assert "spin_cpu" in {f[0] for f in row["top"]}
            dur = re.search(rf"^([\d.]+)s call\s+\S+::{re.escape(name)}$", r.stdout, re.M)
            assert dur and row["wall"] <= float(dur.group(1)) + 0.01, r.stdout


def test_summary_lists_leave_out_the_harness(tmp_path):
    write(tmp_path / "conftest.py", ROWS_CONFTEST)
    write(tmp_path / "test_m.py", """
    import time

    def hold():
        return [bytearray(1 << 20) for _ in range(6)]       # 6 MiB held at the peak

    def test_holds():
        keep = hold()
        assert len(keep) == 6

    def test_idle():
        print("x" * 100)
        time.sleep(0.01)
    """)
    r = run_pytest(tmp_path, "--pyprof=memory")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = summary_rows(tmp_path)
    top = rows["test_holds"]["top_memory"][0]
    # (3.11: the list comprehension is a function of its own)
    assert top[0].startswith("hold") and top[1:3] == [str(tmp_path / "test_m.py"), 5], top
    assert (6 << 20) <= top[3] < (6 << 20) + 65536, top
    for name, row in rows.items():
        for f in row.get("top", []) + row.get("top_memory", []):
            assert not is_harness_file(f[1]) and "pyprof" not in f[0], (name, f)
    text = r.stdout[r.stdout.index("pyprof: 2 tests"):]
    for word in ("FDCapture", "_multicall", "pytest_plugin.py", "_cprof"):
        assert word not in text, text
    assert "most allocating tests (peak traced bytes, all threads; the test's lines" in text
