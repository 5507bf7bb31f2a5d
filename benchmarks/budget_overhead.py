"""What the pytest plugin's time budget costs the time it measures
(docs/pytest.md): a CPU-bound test body timed bare and under the budget's
profile (wall-clock sampling at 1 kHz, pytest_plugin.BUDGET_RATE), and under
function tracing for comparison; interleaved, paired, median of the ratios.

    python benchmarks/budget_overhead.py [--rounds 15]
"""
import argparse
import statistics
import sys

import pyprof
from measure import interleaved, ratios, timed
from pyprof.integrations.pytest_plugin import BUDGET_RATE


def body():
    # a test body: calls, a loop, some allocation
    def f(i):
        return [i] * 3
    out = 0
    for i in range(300_000):
        out += len(f(i))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    times = interleaved({
        "bare": lambda: timed(body),
        "sample wall 1 kHz": lambda: timed(
            body, pyprof.Profile(mode="sample", wall=True, rate=BUDGET_RATE)),
        "function tracing": lambda: timed(body, pyprof.Profile()),
    }, args.rounds, shuffle=False)
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds, median of paired ratios:")
    for name in ("sample wall 1 kHz", "function tracing"):
        rs = ratios(times[name], times["bare"])
        print(f"  {name:20s} {statistics.median(rs):.3f}x  (min {min(rs):.3f}, max {max(rs):.3f})")


if __name__ == "__main__":
    main()
