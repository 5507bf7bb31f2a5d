"""What a pyprof.step() mark costs: a loop of steps of fixed work, profiled with
and without a mark per step, interleaved (paired), median of ratios; and the
time per mark, for programs whose tables hold few or many functions.

    python benchmarks/steps_cost.py [--rounds 7] [--steps 300]
"""
import argparse
import statistics
import sys
import time

import pyprof
from measure import interleaved, ratios


def make_functions(n):
    """n distinct functions (each one row in the profiler's tables)."""
    ns = {}
    src = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(n))
    exec(compile(src, f"<generated {n}>", "exec"), ns)
    return [ns[f"f{i}"] for i in range(n)]


def run(funcs, steps, mark, work):
    prof = pyprof.Profile()
    prof.enable()
    t0 = time.perf_counter()
    for k in range(steps):
        if mark:
            pyprof.step()
        for f in funcs:
            f(k)
        for _ in range(work):
            funcs[0](k)
    t1 = time.perf_counter()
    prof.disable()
    return t1 - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    print(f"Python {sys.version.split()[0]}; {a.steps} steps per run, {a.rounds} rounds, "
          f"interleaved; ratio = with a mark per step / without (median of rounds)")
    print(f"{'functions':>9} {'work/step':>9} {'ratio':>6} {'us/mark':>8}")
    for n in (10, 300, 3000):
        funcs = make_functions(n)
        for work in (2000, 20000):
            t = interleaved({"base": lambda: run(funcs, a.steps, False, work),
                             "marked": lambda: run(funcs, a.steps, True, work)},
                            a.rounds, shuffle=False)
            per_mark = [(m - b) / a.steps * 1e6 for m, b in zip(t["marked"], t["base"])]
            print(f"{n:>9} {work:>9} {statistics.median(ratios(t['marked'], t['base'])):>6.3f} "
                  f"{statistics.median(per_mark):>8.1f}")


if __name__ == "__main__":
    main()
