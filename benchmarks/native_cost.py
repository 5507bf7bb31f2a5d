"""What native frames cost (``--native``), against wall sampling without them
and against ``py-spy record --native`` at the same rate (issue 32, item 15).

Times whole processes, since most of what --native costs is spent once, when
the capture is written (naming each distinct address from debug information):
plain ``python PROG``, ``python -m pyprof --sample --wall --rate R``, the same
with ``--native``, and ``py-spy record --native -r R -f raw`` when py-spy is
found beside this Python or on PATH. Programs: a CPU loop of about 1 s, the
same loop under 150 Python frames, and CPython's test_contextlib (many short
tests, many distinct native addresses). Rounds are interleaved (every
configuration once per round, shuffled) and each is compared with the plain
run of its own round; the report is the median of those ratios of wall time.
A run longer than --timeout seconds is reported as such.

    python benchmarks/native_cost.py [--rounds 5] [--rates 100,1000] [--timeout 60]
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

LOOP = """import sys
def f(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
def deep(d, n):
    if d == 0:
        return f(n)
    return deep(d - 1, n)
depth = int(sys.argv[1])
for _ in range(600):
    deep(depth, 20000)
"""


def programs(d):
    loop = os.path.join(d, "loop.py")
    with open(loop, "w") as f:
        f.write(LOOP)
    return {"1 s CPU loop": [loop, "0"],
            "loop under 150 frames": [loop, "150"],
            "test_contextlib": ["-m", "unittest", "test.test_contextlib"]}


def py_spy():
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy")


def configs(py, d, rate, spy):
    out = {"plain": [py],
           "wall": [py, "-m", "pyprof", "--sample", "--wall", "--rate", str(rate),
                    "-o", os.path.join(d, "w.cprof")],
           "wall --native": [py, "-m", "pyprof", "--sample", "--wall", "--native",
                             "--rate", str(rate), "-o", os.path.join(d, "n.cprof")]}
    if spy:
        out["py-spy --native"] = [spy, "record", "--native", "-r", str(rate), "-f", "raw",
                                  "-o", os.path.join(d, "s.txt"), "--", py]
    return out


def timed(cmd, timeout):
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    dt = time.perf_counter() - t
    return dt if r.returncode == 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--only", action="append", help="a program's name (repeatable)")
    args = ap.parse_args()
    spy = py_spy()
    rnd = random.Random(0)
    with tempfile.TemporaryDirectory() as d:
        progs = programs(d)
        print(f"Python {sys.version.split()[0]}, py-spy: {spy or 'not found'}, "
              f"{os.cpu_count()} CPUs, {args.rounds} rounds; wall time over plain, median of "
              f"paired ratios (plain: its median seconds)\n")
        names = list(configs(sys.executable, d, 1, spy))[1:]
        print("| program | rate | plain (s) | " + " | ".join(names) + " |")
        print("|---|---|---|" + "---|" * len(names))
        for prog, pargs in progs.items():
            if args.only and prog not in args.only:
                continue
            for rate in [int(r) for r in args.rates.split(",")]:
                cfg = configs(sys.executable, d, rate, spy)
                times = {k: [] for k in cfg}
                for _ in range(args.rounds):
                    order = list(cfg)
                    rnd.shuffle(order)
                    for k in order:
                        times[k].append(timed(cfg[k] + pargs, args.timeout))
                cells = []
                for k in names:
                    if any(t is None for t in times[k]):
                        cells.append(f"> {args.timeout:.0f} s a run")
                        continue
                    ratios = [t / b for t, b in zip(times[k], times["plain"]) if b]
                    cells.append(f"{statistics.median(ratios):.2f}")
                base = statistics.median(t for t in times["plain"] if t)
                print(f"| {prog} | {rate} Hz | {base:.2f} | " + " | ".join(cells) + " |",
                      flush=True)


if __name__ == "__main__":
    main()
