"""CPU mode's two timers side by side (docs/sampling.md, "CPU timers"):
task-clock events per thread against ITIMER_PROF, on what a timer decides.

    python benchmarks/cpu_timers.py [--rounds 3] [--only overhead,rates,threads,runs]

- overhead: a pure-Python loop alone, under the sampler, alone again, 11 times
  in one process: the median ratio of the wall time and of the thread's CPU
  time (what other tenants of the machine take is not in it), and the extra CPU
  per signal.
- rates: samples per CPU second for a pure-Python loop at 100 Hz to 10 kHz
  (the requested rate is the target); the samples' weight over the process's CPU.
- threads: N threads one after the other (or 8 at a time), each spinning W of
  its own CPU; the weight of the samples in them over the sum of their own
  clocks at their end.
- runs: a profiler enabled around each of 200 calls of W of CPU (what
  @profile does); the weight in the calls over their CPU.

Each figure is the median over --rounds runs, each in a fresh process. The
per-signal cost of the kernel's delivery alone is benchmarks/taskclock_floor.c's.
"""
import argparse
import json
import statistics
import subprocess
import sys
import textwrap

WORKER = textwrap.dedent("""
    import json, statistics, sys, threading, time
    import pyprof
    what, timer, rate, a, b = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]

    def spin(w):
        t0 = time.thread_time()
        x = 0
        while time.thread_time() - t0 < w:
            for i in range(200):
                x += i

    def weight_in(s, name):
        return sum(c.weight for (_, sid, _), c in s.samples.items()
                   if any(s.functions[f].name == name for f, _ in s.stacks[sid].frames)) / 1e9

    out = {}
    if what == "rates":
        p = pyprof.Profile(mode="sample", rate=rate, cpu_timer=timer)
        c0 = time.process_time()
        p.enable()
        t0 = time.process_time()
        while time.process_time() - t0 < float(a):
            x = 0
            for i in range(20000):
                x += i
        p.disable()
        cpu = time.process_time() - c0
        s = p.session()
        out = {"achieved": p.sampling_rates[1],
               "weight_over_cpu": sum(c.weight for c in s.samples.values()) / 1e9 / cpu}
    elif what == "overhead":
        # paired in-process: the loop alone, under the sampler, alone again
        def loop():
            x = 0
            for i in range(2_000_000):
                x += i
        ratios = {"wall": [], "cpu": []}
        per = []
        for _ in range(int(a)):
            for name, clock in (("wall", time.perf_counter), ("cpu", time.thread_time)):
                t = clock(); loop(); base = clock() - t
                p = pyprof.Profile(mode="sample", rate=rate, cpu_timer=timer)
                p.enable()
                t = clock(); loop(); prof = clock() - t
                p.disable()
                t = clock(); loop(); base = (base + clock() - t) / 2
                ratios[name].append(prof / base)
                if name == "cpu":
                    per.append((prof - base) / max(p.session().info["sampling"]["signals"], 1))
        out = {"wall": statistics.median(ratios["wall"]), "cpu": statistics.median(ratios["cpu"]),
               "us_per_sample": statistics.median(per) * 1e6}
    elif what == "threads":
        n, w = int(a.split("x")[0]), float(a.split("x")[1])
        at_once = int(b)
        spent, lock = [], threading.Lock()

        def worker():
            spin(w)
            with lock:
                spent.append(time.thread_time())
        p = pyprof.Profile(mode="sample", rate=rate, cpu_timer=timer)
        p.enable()
        for i in range(0, n, at_once):
            ts = [threading.Thread(target=worker) for _ in range(min(at_once, n - i))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        p.disable()
        out = {"ratio": weight_in(p.session(), "worker") / sum(spent)}
    elif what == "runs":
        w = float(a)
        p = pyprof.Profile(mode="sample", rate=rate, cpu_timer=timer)
        total = 0.0

        def call():
            spin(w)
        for _ in range(200):
            p.enable()
            t0 = time.thread_time()
            call()
            total += time.thread_time() - t0
            p.disable()
        out = {"ratio": weight_in(p.session(), "call") / total}
    print(json.dumps(out))
""")


def run(python, *args):
    r = subprocess.run([python, "-c", WORKER, *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"cpu_timers.py: {' '.join(map(str, args))}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def median_of(python, rounds, key, *args):
    return statistics.median(run(python, *args)[key] for _ in range(rounds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="overhead,rates,threads,runs")
    a = ap.parse_args()
    parts = a.only.split(",")
    timers = ("task-clock", "itimer")
    if "overhead" in parts:
        print("| rate | timer | wall ratio | CPU ratio | µs per sample |\n|---|---|---|---|---|")
        for rate in (250, 1000, 4000, 10000):
            for timer in timers if rate == 1000 else timers[:1]:
                r = run(a.python, "overhead", timer, rate, 11, 0)
                print(f"| {rate:,} Hz | {timer} | {r['wall']:.3f} | {r['cpu']:.3f} | "
                      f"{r['us_per_sample']:.1f} |", flush=True)
    if "rates" in parts:
        print("| rate asked | task-clock: achieved | weight / CPU | itimer: achieved | "
              "weight / CPU |\n|---|---|---|---|---|")
        for rate in (100, 250, 1000, 4000, 10000):
            cells = []
            for timer in timers:
                got = [run(a.python, "rates", timer, rate, 1.0, 0) for _ in range(a.rounds)]
                cells += [f"{statistics.median(g['achieved'] for g in got):,.0f}",
                          f"{statistics.median(g['weight_over_cpu'] for g in got):.3f}"]
            print(f"| {rate:,} Hz | " + " | ".join(cells) + " |", flush=True)
    if "threads" in parts:
        print("\n| threads × CPU each | at once | rate | task-clock | itimer |\n|---|---|---|---|---|")
        for shape in ("200x0.002", "40x0.02"):
            for at_once in (1, 8):
                for rate in (100, 1000):
                    cells = [f"{median_of(a.python, a.rounds, 'ratio', 'threads', t, rate, shape, at_once):.3f}"
                             for t in timers]
                    n, w = shape.split("x")
                    print(f"| {n} × {float(w) * 1e3:g} ms | {at_once} | {rate:,} Hz | "
                          + " | ".join(cells) + " |", flush=True)
    if "runs" in parts:
        print("\n| 200 runs of | rate | task-clock | itimer |\n|---|---|---|---|")
        for w in (0.003, 0.02):
            for rate in (100, 1000):
                cells = [f"{median_of(a.python, a.rounds, 'ratio', 'runs', t, rate, w, 0):.3f}"
                         for t in timers]
                print(f"| {w * 1e3:g} ms | {rate:,} Hz | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
