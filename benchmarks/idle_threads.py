"""Wall-clock sampling beside idle threads (issue 21): what a tick costs.

A main thread computes a fixed amount of work beside N threads blocked on an
Event (N = 1, 10, 100, 1000); the run is timed plain and under each sampler at
the same rate, interleaved and paired, and the ratio of process CPU (the
program, its threads and, for py-spy, the sampling process: RUSAGE_CHILDREN of
the command) is the median over the rounds.

Configurations: pyprof `--sample --wall` (and `--native`), py-spy
`record --idle` (a separate process reading the program's memory), pyinstrument
(in-process; it samples the main thread only, so its cost does not depend on N).

    python benchmarks/idle_threads.py --python .bench/3.12/bin/python [--rounds 5]

`make bench-threads` runs it on every CPython found (the .bench venvs have
py-spy and pyinstrument) and prints a Markdown table for benchmarks/RESULTS.md.
"""
import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = '''
import sys, threading
n, work = int(sys.argv[1]), int(sys.argv[2])
ev = threading.Event()
ts = [threading.Thread(target=ev.wait) for _ in range(n)]
for t in ts:
    t.start()
x = 0
for _ in range(work):
    for i in range(10000):
        x += i
ev.set()
for t in ts:
    t.join()
'''


def cpu_of(cmd, cwd):
    """(CPU seconds of the command and everything it started, wall seconds)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:4]}... exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), wall


def commands(py, prog, n, work, rate, tmp):
    tools = os.path.dirname(py)
    args = [prog, str(n), str(work)]
    out = {"pyprof --wall": [py, "-m", "pyprof", "--sample", "--wall", "--rate", str(rate),
                             "-o", os.path.join(tmp, "p.cprof")] + args,
           "pyprof --wall --native": [py, "-m", "pyprof", "--sample", "--wall", "--native",
                                      "--rate", str(rate), "-o", os.path.join(tmp, "p.cprof")] + args}
    spy = os.path.join(tools, "py-spy")
    if os.path.exists(spy):
        out["py-spy --idle"] = [spy, "record", "--idle", "--rate", str(rate), "--format", "raw",
                                "-o", os.path.join(tmp, "spy.txt"), "--", py] + args
    if subprocess.run([py, "-c", "import pyinstrument"], capture_output=True).returncode == 0:
        out["pyinstrument"] = [py, "-m", "pyinstrument", "--interval", str(1 / rate),
                               "-r", "text", "-o", os.path.join(tmp, "pi.txt")] + args
    return out


def measure(py, threads, rates, rounds, work):
    tmp = tempfile.mkdtemp(prefix="pyprof-idle-")
    prog = os.path.join(tmp, "prog.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    rows = []
    try:
        for rate in rates:
            for n in threads:
                cmds = commands(py, prog, n, work, rate, tmp)
                ratios = {k: [] for k in cmds}
                walls = {k: [] for k in cmds}
                for _ in range(rounds):
                    for name, cmd in cmds.items():   # each paired with a plain run beside it
                        base, bwall = cpu_of([py, prog, str(n), str(work)], tmp)
                        got, wall = cpu_of(cmd, tmp)
                        ratios[name].append(got / base)
                        walls[name].append(wall / bwall)
                for name in cmds:
                    rows.append((rate, n, name, statistics.median(ratios[name]),
                                 min(ratios[name]), max(ratios[name]), statistics.median(walls[name])))
                    print(f"  {rate:>5} Hz {n:>5} idle  {name:<24} CPU x{rows[-1][3]:.3f} "
                          f"({rows[-1][4]:.3f}-{rows[-1][5]:.3f})  wall x{rows[-1][6]:.3f}",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def table(py, rows, rounds):
    v = subprocess.run([py, "-c", "import platform; print(platform.python_version())"],
                       capture_output=True, text=True).stdout.strip()
    out = [f"CPython {v}, {platform.machine()}, {os.cpu_count()} CPUs, {rounds} rounds; "
           "process CPU (the command and all it started) profiled / plain, median (min-max); "
           "wall ratio median.", "",
           "| rate | idle threads | sampler | CPU ratio | range | wall ratio |",
           "|---|---|---|---|---|---|"]
    for rate, n, name, med, lo, hi, wall in rows:
        out.append(f"| {rate} Hz | {n} | {name} | {med:.3f} | {lo:.3f}-{hi:.3f} | {wall:.3f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", required=True)
    ap.add_argument("--threads", default="1,10,100,1000")
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=int, default=2400, help="outer loops of the main thread's work")
    a = ap.parse_args()
    threads = [int(x) for x in a.threads.split(",")]
    rates = [int(x) for x in a.rates.split(",")]
    for py in a.python:
        py = os.path.abspath(py)        # the runs' cwd is a temporary directory
        rows = measure(py, threads, rates, a.rounds, a.work)
        print(table(py, rows, a.rounds))
        print()


if __name__ == "__main__":
    main()
