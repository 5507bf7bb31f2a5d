"""Function tracing's cost on call-heavy code, for two builds of pyprof side by
side (docs/async.md: coroutines are followed from first start to end, and the
other calls must not pay for it): each --python runs a child that times a
workload bare and under Profile() in one process, round after round; the
children alternate, so load on the shared machine hits both alike. Reported:
the median over rounds of profiled / bare, and ns per call event.

    python benchmarks/tracer_hotpath.py --python A/bin/python --python B/bin/python
                                        [--rounds 9] [--workload calls|coroutines]
"""
import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time, asyncio
import pyprof

def calls():
    def leaf(x):
        return x + 1
    class C:
        def m(self, x):
            return leaf(x)
    c = C()
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)
    total = 0
    for i in range(200_000):
        total += c.m(i)
    return total + fib(22)

async def afib(n):
    if n <= 1:
        return n
    return await afib(n - 1) + await afib(n - 2)

def coroutines():
    coro = afib(21)
    try:
        while True:
            coro.send(None)
    except StopIteration:
        pass

work = {"calls": calls, "coroutines": coroutines}[sys.argv[1]]
work()
def timed(p):
    if p: p.enable()
    t = time.perf_counter(); work(); dt = time.perf_counter() - t
    if p: p.disable()
    return dt, p
bare, _ = timed(None)
prof, p = timed(pyprof.Profile())
events = sum(c.calls for c in p.session().fstats.values()) * 2
print(json.dumps({"ratio": prof / bare, "ns_per_event": (prof - bare) / events * 1e9,
                  "version": pyprof.__version__}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workload", default="calls", choices=("calls", "coroutines"))
    args = ap.parse_args()
    out = {py: [] for py in args.python}
    for r in range(args.rounds):
        order = args.python if r % 2 == 0 else list(reversed(args.python))
        for py in order:
            res = subprocess.run([py, "-c", CHILD, args.workload], capture_output=True, text=True,
                                 check=True)
            out[py].append(json.loads(res.stdout))
    print(f"workload {args.workload}, {args.rounds} rounds (median, min-max):")
    for py, rows in out.items():
        ratios = [x["ratio"] for x in rows]
        ns = [x["ns_per_event"] for x in rows]
        print(f"  {py}: {statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}), "
              f"{statistics.median(ns):.1f} ns per call event")


if __name__ == "__main__":
    sys.exit(main())
