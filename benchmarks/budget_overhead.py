"""What the pytest plugin's time budget costs the time it measures
(docs/pytest.md): a CPU-bound test body timed bare and under the budget's
profile (wall-clock sampling at 1 kHz, pytest_plugin.BUDGET_RATE), and under
function tracing for comparison; interleaved, paired, median of the ratios.

    python benchmarks/budget_overhead.py [--rounds 15]
"""
import argparse
import statistics
import sys
import time

import pyprof
from pyprof.integrations.pytest_plugin import BUDGET_RATE


def body():
    # a test body: calls, a loop, some allocation
    def f(i):
        return [i] * 3
    out = 0
    for i in range(300_000):
        out += len(f(i))
    return out


def timed(prof):
    if prof is not None:
        prof.enable()
    t = time.perf_counter()
    body()
    dt = time.perf_counter() - t
    if prof is not None:
        prof.disable()
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    ratios = {"sample wall 1 kHz": [], "function tracing": []}
    for _ in range(args.rounds):
        bare = timed(None)
        ratios["sample wall 1 kHz"].append(
            timed(pyprof.Profile(mode="sample", wall=True, rate=BUDGET_RATE)) / bare)
        ratios["function tracing"].append(timed(pyprof.Profile()) / bare)
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds, median of paired ratios:")
    for name, rs in ratios.items():
        print(f"  {name:20s} {statistics.median(rs):.3f}x  (min {min(rs):.3f}, max {max(rs):.3f})")


if __name__ == "__main__":
    main()
