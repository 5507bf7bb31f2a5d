"""Accuracy of the sampler: each function's share of the samples against its
share of the time measured without the profiler.

    python benchmarks/accuracy.py --python .bench/3.12/bin/python [--python ...]
                                  [--only c1-50-30-20,c2-50] [--seconds 6]
                                  [--results benchmarks/RESULTS.md]

Protocol (../shared/reference/measuring.md §5): every case is a program whose
parts are known functions. A truth run executes it unprofiled with a clock read
around each part (parts last milliseconds: the reads are coarse); a profiled run
executes the same code without those reads under the sampler. Truth and profiled
runs alternate (--pairs times) in one process pinned to one CPU; the truth share
is the median over the truth runs, the reported share counts the samples whose
stack holds the part's function, summed over the profiled runs. Error = |reported
- true| in percentage points; the target is max(2, 3 sigma + 1) per part, with
sigma = sqrt(p (1 - p) / n) the sampling noise of a share p over n samples.

Modes: "wall" (2 kHz wall-clock sampling, the most samples per second, truth
from perf_counter), "cpu" (the default CPU-time sampler at 250 Hz, truth from
thread_time), "native" (wall with --native); on the function-bias cases also
cProfile and pyprof's tracer (their cumulative time), for comparison. With
--modes cpu-1k,cpu-4k: CPU time at 1 and 4 kHz on task-clock events
(docs/sampling.md, "CPU timers"), run long enough for 10,000 samples or more.
Raw results: build/bench/accuracy-<python>.json; the GENERATED accuracy section
of RESULTS.md is rewritten from all of them.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import re
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
import types
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT_DIR = os.path.join(ROOT, "build", "bench")


# ----------------------------------------------------------------- the parts
# The same loop under several names (each its own code object, which is what
# a sampler tells apart), so a split by iteration counts is a split in time.
def _loop(n):
    s = 0
    for i in range(n):
        s += i % 7
    return s


def _named(name):
    fn = types.FunctionType(_loop.__code__.replace(co_name=name, co_qualname=name),
                            globals(), name)
    fn.__qualname__ = name
    return fn


part_a, part_b, part_c, flat, py_loop = map(_named, ["part_a", "part_b", "part_c", "flat",
                                                      "py_loop"])
g_work, c_work, coro_a_work, coro_b_work, burst = map(_named, ["g_work", "c_work", "coro_a_work",
                                                               "coro_b_work", "burst"])


def tiny(x):
    return x + 1


def fn_call_loop(n):            # measuring.md's function-bias template
    x = 0
    for _ in range(n):
        x = tiny(x)
    return x


def inline_loop(n):
    x = 0
    for _ in range(n):
        x = x + 1
    return x


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


_BLOB = random.Random(1).randbytes(1 << 20)
_NUMS = [random.Random(2).random() for _ in range(200_000)]
_TEXT = "the quick brown fox jumps over the lazy dog 1234 " * 20_000


def zlib_part(n):
    for _ in range(n):
        zlib.compress(_BLOB[:256 << 10], 6)


def hash_part(n):
    for _ in range(n):
        hashlib.sha256(_BLOB).digest()


def sort_part(n):
    for _ in range(n):
        sorted(_NUMS)


def regex_part(n):
    for _ in range(n):
        re.findall(r"\b\w+o\w*\b", _TEXT[:200_000])


def sleeper(seconds):
    time.sleep(seconds)


def selector(seconds):
    a, b = socket.socketpair()
    try:
        select.select([a], [], [], seconds)
    finally:
        a.close()
        b.close()


def spin_for(seconds):
    end = time.perf_counter() + seconds
    s = 0
    while time.perf_counter() < end:
        s += 1
    return s


def gen(items, n, timed):
    for _ in range(items):
        yield timed("g_work", g_work, n)


def comp_fn(n):
    return sum([i % 7 for i in range(n)])


def loop_fn(n):
    s = []
    for i in range(n):
        s.append(i % 7)
    return sum(s)


# ----------------------------------------------------------------- the cases
# A case: (parts, program(timed, scale)). `timed(name, fn, *args)` calls fn;
# in a truth run it also adds the call's time to `name`. `scale` multiplies the
# amount of work; the harness picks it for the requested duration.
UNIT = 20_000                       # loop iterations in one unit of work


def split_case(shares):
    names = ["part_a", "part_b", "part_c"][:len(shares)]
    fns = [part_a, part_b, part_c]

    def program(timed, scale):
        for _ in range(scale):
            for fn, name, share in zip(fns, names, shares):
                timed(name, fn, UNIT * share // 10)
    return names, program


def bias_case(pct_calls):
    # Iterations chosen from each loop's unprofiled cost per iteration so that
    # the call loop takes pct_calls % of the time (the truth run measures it).
    def program(timed, scale, _ratio=[]):
        if not _ratio:
            t0 = time.perf_counter(); fn_call_loop(200_000); t1 = time.perf_counter()
            inline_loop(200_000); t2 = time.perf_counter()
            _ratio.append((t1 - t0) / (t2 - t1))      # a call iteration costs this many inline ones
        per = 2 * UNIT
        n_call = max(1, int(per * pct_calls / 100 / _ratio[0]))
        n_inline = max(1, int(per * (100 - pct_calls) / 100))
        for _ in range(scale):
            timed("fn_call_loop", fn_call_loop, n_call)
            timed("inline_loop", inline_loop, n_inline)
    return ["fn_call_loop", "inline_loop"], program


def recursion_case():
    def program(timed, scale):
        for _ in range(scale):
            timed("fib", fib, 15)
            timed("flat", flat, UNIT)
    return ["fib", "flat"], program


def native_case():
    def program(timed, scale):
        for _ in range(scale):
            timed("py_loop", py_loop, UNIT * 3)
            timed("zlib_part", zlib_part, 1)
            timed("hash_part", hash_part, 2)
            timed("sort_part", sort_part, 1)
            timed("regex_part", regex_part, 1)
    return ["py_loop", "zlib_part", "hash_part", "sort_part", "regex_part"], program


def sleep_case():
    def program(timed, scale):
        for _ in range(scale):
            timed("spin_for", spin_for, 0.004)
            timed("sleeper", sleeper, 0.004)
            timed("selector", selector, 0.002)
    return ["spin_for", "sleeper", "selector"], program


def short_runs_case():
    # a poller: a ~0.1 ms burst between 1 ms sleeps (idle most of the time,
    # running at every wake-up; the sleeps' period may fall into step with the ticks)
    def program(timed, scale):
        for _ in range(scale * 20):
            timed("burst", burst, UNIT // 20)
            timed("sleeper", sleeper, 0.001)
    return ["burst", "sleeper"], program


def thread_case():
    # Two threads sharing the GIL and one CPU, 70/30 by work; main joins.
    def program(timed, scale):
        ts = [threading.Thread(target=timed, args=("part_a", part_a, UNIT * 7 * scale)),
              threading.Thread(target=timed, args=("part_b", part_b, UNIT * 3 * scale))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return ["part_a", "part_b"], program


def generator_case():
    def program(timed, scale):
        for _ in range(scale):
            for _ in gen(4, UNIT // 4 * 3, timed):     # g_work: 3 parts in 4
                timed("c_work", c_work, UNIT // 4)
    return ["g_work", "c_work"], program


def asyncio_case():
    def program(timed, scale):
        async def coro(name, fn, n, k):
            for _ in range(k):
                await asyncio.sleep(0)
                timed(name, fn, n)

        async def main():
            await asyncio.gather(coro("coro_a_work", coro_a_work, UNIT // 2, 6 * scale),
                                 coro("coro_b_work", coro_b_work, UNIT // 2, 4 * scale))
        asyncio.run(main())
    return ["coro_a_work", "coro_b_work"], program


def comprehension_case():
    def program(timed, scale):
        for _ in range(scale):
            timed("comp_fn", comp_fn, UNIT)
            timed("loop_fn", loop_fn, UNIT)
    return ["comp_fn", "loop_fn"], program


CASES = {
    "c1-50-30-20": (lambda: split_case([5, 3, 2]), "basic split"),
    "c1-05-15-80": (lambda: split_case([1, 3, 16]), "small shares"),
    "c1-01-01-98": (lambda: split_case([1, 1, 98]), "1% shares"),
    "c2-05": (lambda: bias_case(5), "function-call bias, 5% in the call loop"),
    "c2-25": (lambda: bias_case(25), "function-call bias, 25%"),
    "c2-50": (lambda: bias_case(50), "function-call bias, 50%"),
    "c2-75": (lambda: bias_case(75), "function-call bias, 75%"),
    "c2-95": (lambda: bias_case(95), "function-call bias, 95%"),
    "c3": (recursion_case, "recursion: fib(15) vs a flat loop"),
    "c4": (native_case, "time inside C calls: zlib, hashlib, sorted, re vs a Python loop"),
    "c5": (sleep_case, "sleep and select vs a CPU loop"),
    "c6": (short_runs_case, "short runs between 1 ms sleeps"),
    "c7": (thread_case, "two threads, 70/30 work, sharing the GIL"),
    "c8-gen": (generator_case, "generator body vs its consumer"),
    "c8-asyncio": (asyncio_case, "asyncio tasks with sleep(0), 60/40"),
    "c9": (comprehension_case, "list comprehension vs a for loop"),
}
# CPU-mode runs get fewer samples per second (the tick): keep them to the cases
# where CPU and wall differ or where the tick could alias with the program.
CPU_CASES = ["c1-50-30-20", "c2-50", "c4", "c5", "c7", "c8-gen"]
NATIVE_CASES = ["c4"]
TRACER_CASES = ["c2-05", "c2-25", "c2-50", "c2-75", "c2-95"]


# ----------------------------------------------------------------- the worker
def _calls_in_stacks(session, names):
    """Time per part (the samples' weights: what each stands for; a sample
    counts for every part on its stack) in samples of the mean weight, and the
    number of samples with any part."""
    got = dict.fromkeys(names, 0.0)
    total = weight = 0
    for (t, sid, state), c in session.samples.items():
        fnames = {session.functions[fid].name for fid, _ in session.stacks[sid].frames}
        hit = [n for n in names if n in fnames]
        for n in hit:
            got[n] += c.weight
        if hit:
            total += c.count
            weight += c.weight
    scale = total / weight if weight else 0.0
    return {n: v * scale for n, v in got.items()}, total


def worker(case, mode, seconds, pairs):
    import pyprof
    names, program = CASES[case][0]()
    clock = time.thread_time_ns if mode.startswith("cpu") else time.perf_counter_ns
    acc: dict = {}
    lock = threading.Lock()

    def timed(name, fn, *args):
        t0 = clock()
        r = fn(*args)
        dt = clock() - t0
        with lock:
            acc[name] = acc.get(name, 0) + dt
        return r

    def untimed(name, fn, *args):
        return fn(*args)

    # scale: the work for seconds / pairs of profiled time per run
    program(untimed, 1)
    t0 = time.perf_counter()
    program(untimed, 1)
    one = time.perf_counter() - t0
    scale = max(1, round(seconds / pairs / one))

    truths, reported, n_total, infos = [], dict.fromkeys(names, 0), 0, []
    for _ in range(pairs):
        acc.clear()
        program(timed, scale)
        tot = sum(acc.get(n, 0) for n in names) or 1
        truths.append({n: 100.0 * acc.get(n, 0) / tot for n in names})
        if mode in ("cprofile", "trace"):
            prof = (__import__("cProfile").Profile() if mode == "cprofile"
                    else pyprof.Profile())
            prof.enable()
            program(untimed, scale)
            prof.disable()
            prof.create_stats()
            cum = {n: 0.0 for n in names}
            for (f, ln, fname), (cc, nc, tt, ct, callers) in prof.stats.items():
                if fname in cum:
                    cum[fname] += ct
            for n in names:
                reported[n] += cum[n]
            n_total += 1
            continue
        kw = dict(mode="sample", wall=mode in ("wall", "native"), native=mode == "native",
                  rate={"wall": 2000, "native": 2000, "cpu-1k": 1000, "cpu-4k": 4000}.get(mode))
        if mode in ("cpu-1k", "cpu-4k"):
            kw["cpu_timer"] = "task-clock"
        prof = pyprof.Profile(**kw)
        prof.enable()
        program(untimed, scale)
        prof.disable()
        s = prof.session()
        got, total = _calls_in_stacks(s, names)
        for n in names:
            reported[n] += got[n]
        n_total += total
        infos.append(s.info.get("sampling", {}))
    if mode in ("cprofile", "trace"):
        tot = sum(reported.values()) or 1
        rep = {n: 100.0 * reported[n] / tot for n in names}
        n_samples = 0
    else:
        rep = {n: 100.0 * reported[n] / max(n_total, 1) for n in names}
        n_samples = n_total
    truth = {n: statistics.median(t[n] for t in truths) for n in names}
    return {"case": case, "mode": mode, "parts": names, "truth": truth, "reported": rep,
            "truth_runs": truths, "n": n_samples, "scale": scale,
            "rate_achieved": statistics.median(i.get("rate_achieved", 0) for i in infos)
            if infos else None,
            "dropped": sum(i.get("dropped", 0) for i in infos)}


# ----------------------------------------------------------------- the harness
def score(r):
    rows = []
    for n in r["parts"]:
        p = r["truth"][n] / 100.0
        sigma = 100.0 * math.sqrt(max(p * (1 - p), 0.0) / r["n"]) if r["n"] else 0.0
        err = r["reported"][n] - r["truth"][n]
        bound = max(2.0, 3 * sigma + 1.0) if r["n"] else None
        rows.append({"part": n, "truth": r["truth"][n], "reported": r["reported"][n],
                     "error": err, "sigma": sigma, "bound": bound,
                     "ok": None if bound is None else abs(err) <= bound})
    return rows


# Profiled seconds for at least 10,000 samples at the task-clock rates.
MIN_SECONDS = {"cpu-1k": 10.5, "cpu-4k": 3.0}


def run_all(python, cases, seconds, pairs, cpu, modes=None):
    results = []
    jobs = []
    for case in cases:
        jobs.append((case, "wall"))
        if case in CPU_CASES:
            jobs += [(case, "cpu"), (case, "cpu-1k"), (case, "cpu-4k")]
        if case in NATIVE_CASES:
            jobs.append((case, "native"))
        if case in TRACER_CASES:
            jobs += [(case, "cprofile"), (case, "trace")]
    default = ("cpu-1k", "cpu-4k")          # asked for by --modes only
    jobs = [j for j in jobs if (j[1] in modes if modes else j[1] not in default)]
    info = json.loads(subprocess.run(
        [python, "-c", "import json, sys, platform, pyprof; print(json.dumps({'minor': "
         "'%d.%d' % sys.version_info[:2], 'version': platform.python_version(), "
         "'pyprof': pyprof.__version__, 'features': list(pyprof._cprof.FEATURES)}))"],
        capture_output=True, text=True, check=True).stdout)
    if "libunwind" not in info["features"]:
        jobs = [j for j in jobs if j[1] != "native"]
    for case, mode in jobs:
        secs = seconds * (2 if mode == "cpu" else 1)      # the CPU timer ticks at ~250 Hz
        secs = max(secs, MIN_SECONDS.get(mode, 0))
        cmd = [python, os.path.abspath(__file__), "--worker", case, mode, str(secs), str(pairs)]
        if cpu is not None:
            cmd = ["taskset", "-c", str(cpu)] + cmd
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                           env={**os.environ, "PYTHONHASHSEED": "0"})
        if p.returncode != 0:
            print(f"[{info['minor']}] {case} {mode}: FAILED\n{p.stderr}", file=sys.stderr)
            results.append({"case": case, "mode": mode, "failed": p.stderr[-2000:]})
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r["score"] = score(r)
        worst = max(abs(x["error"]) for x in r["score"])
        print(f"[{info['minor']}] {case:12} {mode:8} n={r['n']:6} max error {worst:5.2f} pp "
              f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        results.append(r)
    return {"python": info, "seconds": seconds, "pairs": pairs, "results": results,
            "date": time.strftime("%Y-%m-%d")}


def render(all_runs) -> str:
    out = []
    for run in all_runs:
        py = run["python"]
        out += [f"### Sampler accuracy, CPython {py['version']} (pyprof {py['pyprof']})", "",
                "Share of each part in % of the time of all parts: truth (unprofiled) → "
                "reported, error in pp; n = samples; bound = max(2, 3σ+1). Modes: wall = "
                "2 kHz wall-clock; cpu = the default CPU sampler (250 Hz); native = wall with "
                "--native; cProfile / pyprof-trace = cumulative time (tracers, for "
                "comparison: no sampling noise, no bound).", "",
                "| case | mode | n | parts: truth → reported (error) | max error | bound | ok |",
                "|---|---|---|---|---|---|---|"]
        for r in run["results"]:
            if "failed" in r:
                out.append(f"| {r['case']} | {r['mode']} | | FAILED | | | ✗ |")
                continue
            parts = "; ".join(f"{x['part']} {x['truth']:.1f} → {x['reported']:.1f} "
                              f"({x['error']:+.1f})" for x in r["score"])
            worst = max(r["score"], key=lambda x: abs(x["error"]))
            mode = {"cprofile": "cProfile", "trace": "pyprof-trace"}.get(r["mode"], r["mode"])
            if worst["bound"] is None:
                out.append(f"| {r['case']} | {mode} | | {parts} | {abs(worst['error']):.1f} | | |")
            else:
                bad = [x for x in r["score"] if not x["ok"]]
                out.append(f"| {r['case']} | {mode} | {r['n']} | {parts} | "
                           f"{abs(worst['error']):.2f} | {worst['bound']:.2f} | "
                           f"{'✓' if not bad else '✗'} |")
        sampled = [r for r in run["results"] if "score" in r and r["n"]]
        bad = [(r["case"], r["mode"]) for r in sampled if not all(x["ok"] for x in r["score"])]
        c2 = [r for r in sampled if r["case"].startswith("c2") and r["mode"] == "wall"]
        out += ["", f"Sampled configurations within their bound: {len(sampled) - len(bad)} of "
                f"{len(sampled)}" + (f" (outside: {', '.join(f'{c} {m}' for c, m in bad)})"
                                     if bad else "") + "."]
        if c2:
            bias = [next(x["error"] for x in r["score"] if x["part"] == "fn_call_loop")
                    for r in c2]
            out.append(f"Function-call bias (C2, wall, signed error on the call loop over the "
                       f"5–95% splits): {', '.join(f'{b:+.2f}' for b in bias)} pp "
                       f"(mean {statistics.mean(bias):+.2f}).")
        out.append("")
    return "\n".join(out)


BEGIN = "<!-- BEGIN GENERATED: accuracy.py -->"
END = "<!-- END GENERATED: accuracy.py -->"


def write_results(path):
    runs = []
    for name in sorted(os.listdir(OUT_DIR)):
        if re.fullmatch(r"accuracy-\d+\.\d+\.json", name):      # full runs only
            with open(os.path.join(OUT_DIR, name)) as f:
                runs.append(json.load(f))
    body = "\n".join([BEGIN, "", render(runs), END])
    text = open(path).read() if os.path.exists(path) else ""
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        text = pre + body + rest.split(END, 1)[1]
    else:
        text = text + ("\n" if text else "") + body + "\n"
    with open(path, "w") as f:
        f.write(text)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        case, mode, secs, pairs = sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(worker(case, mode, secs, pairs)))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--only", help="comma-separated cases (default: all)")
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="profiled seconds per case and mode (cpu mode: twice that)")
    ap.add_argument("--pairs", type=int, default=3, help="truth/profiled run pairs")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1,
                    help="CPU to pin runs to (-1: no pinning)")
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--modes", help="comma-separated modes to run (default: wall, cpu, native, "
                                    "cprofile, trace; also cpu-1k, cpu-4k)")
    ap.add_argument("--render-only", action="store_true")
    a = ap.parse_args()
    os.makedirs(OUT_DIR, exist_ok=True)
    if not a.render_only:
        if not a.python:
            ap.error("give at least one --python")
        cases = a.only.split(",") if a.only else list(CASES)
        for c in cases:
            if c not in CASES:
                ap.error(f"unknown case {c!r} (choose from {', '.join(CASES)})")
        for py in a.python:
            modes = a.modes.split(",") if a.modes else None
            run = run_all(py, cases, a.seconds, a.pairs, None if a.cpu < 0 else a.cpu, modes)
            tag = ("" if not a.only else "-" + a.only.replace(",", "+")) + \
                  ("" if not a.modes else "-" + a.modes.replace(",", "+"))
            with open(os.path.join(OUT_DIR, f"accuracy-{run['python']['minor']}{tag}.json"),
                      "w") as f:
                json.dump(run, f, indent=1)
            print(render([run]))
    if a.results:
        write_results(a.results)


if __name__ == "__main__":
    main()
