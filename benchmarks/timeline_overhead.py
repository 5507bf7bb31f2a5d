"""Overhead of --timeline over plain function mode (benchmarks/RESULTS.md, "Timeline").

    python benchmarks/timeline_overhead.py [--rounds N]

In-process and interleaved: each round runs every workload under every
configuration in a shuffled order, so a slow spell of this noisy machine hits
all of them alike; a fresh Profile per run. Reported: per workload, the median
over rounds of the ratio of each configuration's time to plain function mode's
in the same round (and function mode's own ratio to no profiler), plus the
calls per run. Configurations:

- pyprof: function mode (the default);
- timeline: --timeline keeping every call (no cap reached: every call appends 24 bytes);
- timeline-cap: --timeline at its defaults (1M events held, the rest counted);
- timeline-1ms: --timeline --min-duration 1ms (nearly every call counted, not kept).
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

import pyprof
from measure import interleaved, paired_ratio


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def calls():                        # pure Python calls: the worst case
    fib(29)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y

    def add(self, o):
        return Vec(self.x + o.x, self.y + o.y)

    def norm2(self):
        return self.x * self.x + self.y * self.y


def objects():                      # methods, allocation, a few builtins
    acc = Vec(0, 0)
    total = 0
    for i in range(300000):
        acc = acc.add(Vec(i & 7, 1))
        total += acc.norm2() % 7
    return total


def mixed():                        # C-heavy: json, sorting, str methods
    data = [{"id": i, "name": f"item{i}", "tags": ["a", "b", str(i % 13)]} for i in range(3000)]
    for _ in range(30):
        text = json.dumps(data)
        back = json.loads(text)
        back.sort(key=lambda d: (d["tags"][2], -d["id"]))
        " ".join(d["name"].upper() for d in back)


WORKLOADS = {"calls (fib 29)": calls, "objects": objects, "mixed (json/sort)": mixed}
CONFIGS = {
    "base": None,
    "pyprof": {},
    "timeline": {"timeline": True, "timeline_max_events": 2**32 - 1},
    "timeline-cap": {"timeline": True},
    "timeline-1ms": {"timeline": True, "timeline_min_duration": "1ms"},
}


def run_once(fn, kw):
    gc.collect()
    if kw is None:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0, 0
    p = pyprof.Profile(**kw)
    t0 = time.perf_counter()
    p.enable()
    fn()
    p.disable()
    dt = time.perf_counter() - t0
    s = p.session()
    ncalls = sum(c.calls for c in s.fstats.values())
    del p, s
    return dt, ncalls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    opts = ap.parse_args()
    ncalls = {}

    def job(w, c):
        dt, n = run_once(WORKLOADS[w], CONFIGS[c])
        if n:
            ncalls[w] = n
        return dt

    for fn in WORKLOADS.values():
        fn()                                    # warm up
    times = interleaved({(w, c): (lambda w=w, c=c: job(w, c)) for w in WORKLOADS for c in CONFIGS},
                        opts.rounds)
    print(f"CPython {sys.version.split()[0]}, {opts.rounds} interleaved rounds; "
          f"median of per-round ratios")
    print(f"| workload | calls | base (s) | pyprof / base | timeline / pyprof | "
          f"timeline-cap / pyprof | timeline-1ms / pyprof |")
    print("|---|---|---|---|---|---|---|")
    for w in WORKLOADS:
        def ratio(a, b):
            return paired_ratio(times[(w, a)], times[(w, b)])
        print(f"| {w} | {ncalls.get(w, 0):,} | {statistics.median(times[(w, 'base')]):.3f} | "
              f"{ratio('pyprof', 'base'):.2f} | {ratio('timeline', 'pyprof'):.2f} | "
              f"{ratio('timeline-cap', 'pyprof'):.2f} | {ratio('timeline-1ms', 'pyprof'):.2f} |")


if __name__ == "__main__":
    main()
