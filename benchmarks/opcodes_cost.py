"""What --opcodes costs (docs/opcodes.md, "Cost"), on the interpreters given.

    python benchmarks/opcodes_cost.py [--python PY ...] [--rounds 11] [--only sampling,process,tracing]

- sampling: in one process, a workload alone, under the sampler, under the
  sampler with --opcodes, alone again, `rounds` times interleaved: the median
  ratio of the thread's CPU time (what other tenants of the machine take is not
  in it) for each, at 1 kHz and 4 kHz, on a flat loop and on a 60-deep stack
  (the drain reads each sample's frames' instructions).
- process: `python -m pyprof --sample --rate R [--opcodes] prog.py` against
  plain `python prog.py`, whole process, paired runs (A B A B ...), median
  of ratios.
- tracing: the instructions of one traced function (-l with --opcodes) against
  its line tracing alone and against no-op sys.monitoring callbacks for the
  same local events (benchmarks/floorhook.c: the hook's floor), each in a
  fresh process that times the function without anything first (3.12+; on
  3.11 the floor is not built: its OPCODE events need a Python-level switch).

Prints Markdown tables for benchmarks/RESULTS.md ("Opcodes").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORK = textwrap.dedent("""
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y

    def norm(p):
        return p.x * p.x + p.y * p.y

    def flat(n):
        pts = [Point(i, i + 1) for i in range(200)]
        t = 0
        for _ in range(n):
            for p in pts:
                t += norm(p) % 7 if p.x & 1 else len(str(p.y))
        return t

    def deep(depth, n):
        if depth:
            return deep(depth - 1, n)
        return flat(n)
""")

SAMPLING = WORK + textwrap.dedent("""
    import json, statistics, sys, time
    import pyprof
    rate, rounds, kind = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sys.path.insert(0, sys.argv[4])
    from measure import timed as timed_by
    run = (lambda: flat(600)) if kind == "flat" else (lambda: deep(60, 600))

    def timed(prof):
        return timed_by(run, prof, time.thread_time)

    run()
    plain, without, with_ = [], [], []
    for _ in range(rounds):
        a = timed(None)
        b = timed(pyprof.Profile(mode="sample", rate=rate))
        c = timed(pyprof.Profile(mode="sample", rate=rate, opcodes=True))
        d = timed(None)
        base = (a + d) / 2
        without.append(b / base)
        with_.append(c / base)
    print(json.dumps({"without": statistics.median(without), "with": statistics.median(with_),
                      "more": statistics.median(w / o for w, o in zip(with_, without))}))
""")

TRACING = WORK + textwrap.dedent("""
    import json, sys, time
    config = sys.argv[1]

    def best(k=5):
        out = []
        for _ in range(k):
            t = time.perf_counter()
            flat(150)
            out.append(time.perf_counter() - t)
        return min(out)

    flat(20)
    base = best()
    if config == "floor":
        import floorhook
        floorhook.install(0)
        floorhook.install_local(flat.__code__, int(sys.argv[2]))
    elif config != "base":
        import pyprof
        p = pyprof.Profile(lines=True, opcodes=config == "opcodes")
        p.add_function(flat)
        p.enable()
    flat(20)
    print(json.dumps({"ratio": best() / base}))
""")

LINE, INSTRUCTION = 1 << 5, 1 << 6


def sampling(python, rounds):
    print("| rate | stack | sampler | sampler --opcodes | --opcodes more |\n|---|---|---|---|---|")
    for rate in (1000, 4000):
        for kind in ("flat", "deep"):
            r = subprocess.run([python, "-c", SAMPLING, str(rate), str(rounds), kind, HERE],
                               capture_output=True, text=True, timeout=1800, check=True)
            got = json.loads(r.stdout)
            print(f"| {rate:,} Hz | {kind} | {got['without']:.3f} | {got['with']:.3f} | "
                  f"{100 * (got['more'] - 1):+.1f}% |", flush=True)


def process(python, rounds):
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "prog.py")
        with open(prog, "w") as f:
            f.write(WORK + "\nflat(15000)\n")
        print("| rate | --sample | --sample --opcodes | --opcodes more |\n|---|---|---|---|")
        for rate in (1000, 4000):
            runs = {"plain": [], "sample": [], "opcodes": []}
            cmds = {"plain": [python, prog],
                    "sample": [python, "-m", "pyprof", "--sample", "--rate", str(rate), "-o",
                               os.path.join(d, "o.cprof"), prog],
                    "opcodes": [python, "-m", "pyprof", "--sample", "--opcodes", "--rate",
                                str(rate), "-o", os.path.join(d, "o.cprof"), prog]}
            for _ in range(rounds):
                for k, cmd in cmds.items():
                    t = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
                    runs[k].append(time.perf_counter() - t)
            s = [a / b for a, b in zip(runs["sample"], runs["plain"])]
            o = [a / b for a, b in zip(runs["opcodes"], runs["plain"])]
            more = [a / b for a, b in zip(runs["opcodes"], runs["sample"])]
            print(f"| {rate:,} Hz | {statistics.median(s):.3f} | {statistics.median(o):.3f} | "
                  f"{100 * (statistics.median(more) - 1):+.1f}% |", flush=True)


def tracing(python, rounds):
    minor = subprocess.check_output([python, "-c", "import sys; print('%d.%d' % "
                                                   "sys.version_info[:2])"], text=True).strip()
    configs = ["lines", "opcodes"]
    env = dict(os.environ)
    if minor >= "3.12":
        from run import build_floorhook
        env["PYTHONPATH"] = build_floorhook(python, minor) + os.pathsep + env.get("PYTHONPATH", "")
        configs += ["floor-line", "floor-insn"]
    got = {c: [] for c in configs}
    for _ in range(rounds):
        for c in configs:
            args = {"floor-line": ["floor", str(LINE)],
                    "floor-insn": ["floor", str(LINE | INSTRUCTION)]}.get(c, [c])
            r = subprocess.run([python, "-c", TRACING, *args], capture_output=True, text=True,
                               timeout=600, env=env, check=True)
            got[c].append(json.loads(r.stdout)["ratio"])
    med = {c: statistics.median(v) for c, v in got.items()}
    print("| Python | -l | -l --opcodes | floor: LINE | floor: LINE + INSTRUCTION |\n"
          "|---|---|---|---|---|")
    print(f"| {minor} | {med['lines']:.2f}x | {med['opcodes']:.2f}x | "
          + (f"{med['floor-line']:.2f}x | {med['floor-insn']:.2f}x |" if "floor-line" in med
             else "- | - |"), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--only", default="sampling,process,tracing")
    a = ap.parse_args()
    parts = a.only.split(",")
    for python in a.python or [sys.executable]:
        v = subprocess.check_output([python, "-c", "import platform; print(platform.python_version())"],
                                    text=True).strip()
        print(f"\n### CPython {v}\n")
        if "sampling" in parts:
            sampling(python, a.rounds)
        if "process" in parts:
            print()
            process(python, max(3, a.rounds // 2))
        if "tracing" in parts:
            print()
            tracing(python, a.rounds)


if __name__ == "__main__":
    main()
