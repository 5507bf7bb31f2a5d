"""Start-up and finish cost on an empty program (issue 19, deliverable 7).

Times whole processes: plain ``python empty.py``, ``python -m cProfile -o``,
``py-spy record -o x.txt -f raw --``, ``python -m pyprof -o x.cprof`` in each
mode, and ``python -c "import pyprof"``. Rounds are interleaved (every
configuration once per round, in a shuffled order) and each configuration is
compared with the plain run of its own round (paired); the report is the
median over the rounds of that difference, in ms, of the wall time and of the
CPU time (user + system, which other load on the machine disturbs less).

    python benchmarks/startup.py [--rounds 30] [--python PY]... [--only NAME]...

Each PY is an interpreter with pyprof installed (default: this one), for
example .bench/3.12/bin/python (`make bench` makes it, py-spy included); the
configurations of all of them are interleaved, so two builds of pyprof (before
and after a change) compare under the same load. py-spy is looked for beside
each PY (a venv's bin/) and then on PATH (skipped if missing).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PYPROF_MODES = [
    ("pyprof functions", []),
    ("pyprof --lines-all", ["--lines-all"]),
    ("pyprof --sample", ["--sample"]),
    ("pyprof --sample --wall", ["--sample", "--wall"]),
    ("pyprof --memory", ["--memory"]),
    ("pyprof --memory --functions", ["--memory", "--functions"]),
    ("pyprof --timeline", ["--timeline"]),
]


def configs(py, d, pyspy):
    empty = os.path.join(d, "empty.py")
    out = [("python empty.py", [py, empty]),
           ("python -c 'import pyprof'", [py, "-c", "import pyprof"]),
           ("cProfile -o x.prof", [py, "-m", "cProfile", "-o", os.path.join(d, "x.prof"), empty])]
    if pyspy:
        out.append(("py-spy record -f raw", [pyspy, "record", "-o", os.path.join(d, "x.txt"),
                                             "-f", "raw", "--", py, empty]))
    for name, args in PYPROF_MODES:
        out.append((name, [py, "-m", "pyprof", *args, "-o", os.path.join(d, "x.cprof"), empty]))
    # the same without the TSC: no wait for the clock's 20 ms calibration span at the end
    out.append(("pyprof functions, monotonic clock", ["env", "PYPROF_CLOCK=monotonic", py, "-m",
                                                      "pyprof", "-o", os.path.join(d, "x.cprof"),
                                                      empty]))
    return out


FAILED = {}


def run_once(key, argv, env):
    """(wall seconds, CPU seconds) of one run (CPU: user + system time of the
    process and the children it waited for, which load on the machine
    disturbs less than the wall time)."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stderr.close()
    if p.returncode != 0:
        # py-spy fails now and then on a program this short: it ended before
        # py-spy read its memory maps. The time is still what the run cost.
        if key[1].startswith("py-spy"):
            FAILED[key] = FAILED.get(key, 0) + 1
        else:
            raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): "
                             f"{err.decode()[-500:]}")
    return dt, ru.ru_utime + ru.ru_stime


def bench(pythons, rounds, only):
    """Every configuration of every interpreter, interleaved in each round
    (so that two builds of pyprof compare under the same load)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PYPROF"))}      # nothing steering start-up
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "empty.py"), "w").close()
        todo = []
        for py in pythons:
            pyspy = os.path.join(os.path.dirname(py), "py-spy")
            if not os.access(pyspy, os.X_OK):
                pyspy = shutil.which("py-spy")
            todo += [(py, name, argv) for name, argv in configs(py, d, pyspy)
                     if name == "python empty.py" or not only or any(o in name for o in only)]
        for py, name, argv in todo:                         # warm the page cache, .pyc files
            run_once((py, name), argv, env)
        FAILED.clear()
        times = {(py, name): [] for py, name, _ in todo}
        for _ in range(rounds):
            order = list(todo)
            random.shuffle(order)
            for py, name, argv in order:
                times[py, name].append(run_once((py, name), argv, env))
    results = []
    for py in pythons:
        version = subprocess.run([py, "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True).stdout.strip()
        base = times[py, "python empty.py"]
        rows = []
        for (p, name), ts in times.items():
            if p != py:
                continue
            row = [name]
            for k in (0, 1):                # wall, CPU
                row.append(statistics.median(t[k] for t in ts) * 1e3)
                row.append(statistics.median(t[k] - b[k] for t, b in zip(ts, base)) * 1e3)
            rows.append(row)
        results.append((py, version, rows))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--only", action="append", default=[],
                    help="only the configurations whose name contains this (repeatable)")
    opts = ap.parse_args()
    for py, version, rows in bench(opts.python or [sys.executable], opts.rounds, opts.only):
        print(f"\nCPython {version} ({py}): {opts.rounds} interleaved rounds, median ms "
              f"(added: median of the paired difference with plain python)")
        print(f"| {'configuration':<34} | {'wall ms':>7} | {'added':>6} | {'CPU ms':>6} | "
              f"{'added':>6} |")
        print(f"|{'-' * 36}|{'-' * 8}:|{'-' * 7}:|{'-' * 7}:|{'-' * 7}:|")
        for name, wall, wall_added, cpu, cpu_added in rows:
            failed = f" ({FAILED[py, name]} failed)" if (py, name) in FAILED else ""
            print(f"| {name + failed:<34} | {wall:7.1f} | {wall_added:+6.1f} | {cpu:6.1f} | "
                  f"{cpu_added:+6.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
