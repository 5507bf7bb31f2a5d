"""Overhead of pyprof against peers on pyperformance workloads.

    python benchmarks/run.py --python .bench/3.12/bin/python [--python ...]
                             [--suite function|lines] [--set core|stress|all]
                             [--rounds 5] [--seconds 1.5]
                             [--configs base,pyprof,...] [--only richards,go]
                             [--results benchmarks/RESULTS.md]

Protocol (../shared/reference/measuring.md §2): every workload runs in a fresh
process per configuration, pinned to one CPU, PYTHONHASHSEED=0; each round runs
all configurations of a workload in a new shuffled order, so load on the shared
machine hits them alike; the first round is discarded. Overhead = profiled /
unprofiled wall time of the same round; we report the median of those ratios
(with a bootstrap 95% interval), ns per call event = (T_config - T_base) / calls
(calls counted once by cProfile, builtins included), and the baseline's
coefficient of variation (flagged above 3%).

Suites: "function" (function mode against cProfile, yappi, pyinstrument and the
no-op-hook floors) and "lines" (line mode against line_profiler and pprofile,
ns per line event). Raw results go to build/bench/<python>[-lines].json; the
tables between the GENERATED markers of RESULTS.md are rewritten from all JSON
files present.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT_DIR = os.path.join(ROOT, "build", "bench")

# pyperformance benchmarks; shapes from measuring.md §4.
CORE = {
    "richards": "call-heavy", "deltablue": "call-heavy", "raytrace": "call-heavy",
    "go": "call-heavy", "chaos": "call-heavy",
    "nbody": "line-heavy", "fannkuch": "line-heavy", "spectral_norm": "line-heavy",
    "generators": "generators", "float": "allocation-heavy",
    "json_dumps": "C-heavy", "regex_v8": "C-heavy",
}
STRESS = {
    "unpack_sequence": "no calls", "coroutines": "coroutines", "deepcopy": "call-heavy",
    "logging": "call-heavy", "async_tree": "asyncio",
}
DEFAULT_CONFIGS = ["base", "pyprof", "pyprof-exact", "pyprof-nobuiltins", "cProfile", "yappi",
                   "pyinstrument", "floor", "floor-py", "floor-pep523"]
# Line mode: the same functions (every function of the benchmark's file) for
# pyprof and line_profiler's auto-profile mode; every line that runs for
# pyprof's whole-program mode and pprofile; the floor is a no-op line hook.
LINE_WORKLOADS = {b: CORE[b] for b in ("richards", "raytrace", "go", "chaos", "nbody",
                                       "fannkuch", "spectral_norm", "generators", "float",
                                       "json_dumps")}
LINE_CONFIGS = ["base", "pyprof-lines-file", "lineprof-file", "pyprof-lines-all", "pprofile",
                "floor-lines"]
# Sampling: pyprof at its defaults (CPU time, 250 Hz), with native frames, and
# in wall mode at 1 kHz, against pyinstrument (in-process, 1 ms), py-spy and
# austin (out of process, at 250 Hz like pyprof) and scalene --cpu-only.
SAMPLE_CONFIGS = ["base", "pyprof-sample", "pyprof-sample-native", "pyprof-wall-1k",
                  "pyinstrument", "py-spy", "austin", "scalene"]
# Memory: pyprof exact and sampled against tracemalloc (alone, and with the
# snapshot one needs to read it), memray's in-process tracker, memory_profiler's
# line mode on the benchmark file, and scalene's full (CPU + memory) profile.
MEMORY_WORKLOADS = {b: CORE[b] for b in ("richards", "raytrace", "go", "chaos", "nbody",
                                         "generators", "float", "json_dumps", "regex_v8")}
MEMORY_WORKLOADS.update(deepcopy="allocation-heavy", json_loads="allocation-heavy",
                        xml_etree="allocation-heavy")
# memory_profiler reads the process's RSS after every line: ~300x on float,
# so it is measured apart, on a few workloads (--configs base,memory_profiler).
# --native-allocs (C code's malloc and mmap too) against memray's tracker with
# native stacks, on the allocation-heavy workloads and a SQLite/zlib one of ours
# (benchmarks/bm_sqlite_zlib.py), whose allocations are mostly native:
#   run.py --suite memory --set native
NATIVE_WORKLOADS = {"float": "allocation-heavy", "deepcopy": "allocation-heavy",
                    "json_loads": "allocation-heavy", "xml_etree": "allocation-heavy",
                    "sqlite_zlib": "native (SQLite, zlib)"}
NATIVE_CONFIGS = ["base", "pyprof-memory", "pyprof-native", "memray", "memray-native"]
MEMORY_CONFIGS = ["base", "pyprof-memory", "pyprof-memory-sample", "tracemalloc",
                  "tracemalloc-snapshot", "memray", "scalene-full"]
MONITORING_ONLY = {"pyprof-exact", "floor-py"}
LEGACY_ONLY = {"floor-pep523"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def py_info(python):
    code = ("import sys, platform, json, importlib.metadata as m, pyperformance, os\n"
            "v = {}\n"
            "for d in ('pyprof', 'yappi', 'pyinstrument', 'pyperformance', 'pyperf',\n"
            "          'line_profiler', 'pprofile', 'py-spy', 'austin-dist', 'scalene',\n"
            "          'memray', 'memory_profiler'):\n"
            "    try: v[d] = m.version(d)\n"
            "    except Exception: v[d] = None\n"
            "print(json.dumps({'version': platform.python_version(), 'minor': '%d.%d' % "
            "sys.version_info[:2], 'bm_dir': os.path.join(pyperformance.DATA_DIR, 'benchmarks'),"
            " 'packages': v}))")
    return json.loads(subprocess.check_output([python, "-c", code], text=True))


def build_floorhook(python, minor):
    """Compile benchmarks/floorhook.c for `python` (cached by source mtime)."""
    dest = os.path.join(OUT_DIR, f"floorhook-{minor}")
    os.makedirs(dest, exist_ok=True)
    cfg = json.loads(subprocess.check_output([python, "-c", (
        "import sysconfig, json; print(json.dumps({'inc': sysconfig.get_paths()['include'],"
        " 'ext': sysconfig.get_config_var('EXT_SUFFIX')}))")], text=True))
    so = os.path.join(dest, "floorhook" + cfg["ext"])
    src = os.path.join(HERE, "floorhook.c")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        subprocess.check_call([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC",
                               "-Wall", "-I", cfg["inc"], src, "-o", so])
    return dest


class Runner:
    def __init__(self, python, info, cpu, floor_dir, timeout):
        self.python = os.path.abspath(python)
        self.info = info
        self.cpu = cpu
        self.env = dict(os.environ, PYTHONHASHSEED="0",
                        PYTHONPATH=floor_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.env.pop("PYPROF_CLOCK", None)
        self.timeout = timeout
        self.tmp = tempfile.mkdtemp(prefix="pyprof-bench-")

    def script(self, bench):
        own = os.path.join(HERE, f"bm_{bench}.py")      # a workload of ours (sqlite_zlib)
        if os.path.exists(own):
            return own
        path = os.path.join(self.info["bm_dir"], f"bm_{bench}", "run_benchmark.py")
        if not os.path.exists(path):
            raise SystemExit(f"run.py: no pyperformance benchmark {bench!r} at {path}")
        return path

    def run(self, config, bench, loops):
        out = os.path.join(self.tmp, "r.json")
        if os.path.exists(out):
            os.unlink(out)
        target = [os.path.join(HERE, "target.py"), config, out, self.script(bench),
                  "--worker", "-l", str(loops), "-w", "0", "-n", "1"]
        cmd = [self.python] + target
        tools = os.path.dirname(self.python)
        if config == "py-spy" or config.startswith("py-spy-"):
            # its default (blocking) mode, at pyprof's rate (py-spy-1k: 1000 Hz)
            rate = config[len("py-spy-"):].replace("k", "000") if config != "py-spy" else "250"
            cmd = [os.path.join(tools, "py-spy"), "record", "--rate", rate, "--format", "raw",
                   "-o", os.path.join(self.tmp, "py-spy.txt"), "--"] + cmd
        elif config == "austin":
            cmd = [os.path.join(tools, "austin"), "-i", "4000",
                   "-o", os.path.join(self.tmp, "austin.txt")] + cmd
        elif config == "scalene":
            cmd = [self.python, "-m", "scalene", "run", "--cpu-only",
                   "-o", os.path.join(self.tmp, "scalene.json"), target[0], "---"] + target[1:]
        elif config == "scalene-full":
            cmd = [self.python, "-m", "scalene", "run",
                   "-o", os.path.join(self.tmp, "scalene.json"), target[0], "---"] + target[1:]
        if self.cpu is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(self.cpu)] + cmd
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                           timeout=self.timeout, cwd=self.tmp)
        if p.returncode != 0 or not os.path.exists(out):
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
        with open(out) as f:
            return json.load(f)


def calibrate(runner, bench, seconds):
    """Loops so that one unprofiled run takes about `seconds`."""
    runner.run("base", bench, 1)                      # warm the page cache / pyc files
    loops = 1
    while True:
        r = runner.run("base", bench, loops)
        if "error" in r:
            raise SystemExit(f"run.py: {bench} fails without a profiler: {r['error']}")
        if r["wall"] >= seconds / 4 or loops >= 1 << 16:
            return max(1, round(loops * seconds / r["wall"]))
        loops *= 4


def bootstrap_ci(values, n=2000, seed=1):
    if len(values) < 2:
        return (values[0], values[0]) if values else (math.nan, math.nan)
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def measure(python, benches, configs, rounds, seconds, cpu, timeout, suite="function"):
    info = py_info(python)
    minor = info["minor"]
    configs = [c for c in configs
               if c not in (MONITORING_ONLY if minor < "3.12" else LEGACY_ONLY)]
    floor_dir = build_floorhook(python, minor)
    runner = Runner(python, info, cpu, floor_dir, timeout)
    result = {"suite": suite, "python": info["version"], "minor": minor,
              "packages": info["packages"],
              "rounds": rounds, "seconds": seconds, "cpu": cpu, "configs": configs,
              "started": datetime.datetime.now().isoformat(timespec="seconds"),
              "workloads": {}}
    for bench in benches:
        loops = calibrate(runner, bench, seconds)
        count = "count-lines" if suite == "lines" else "count"
        events = (None if suite in ("sample", "memory") else
                  runner.run(count, bench, loops).get("lines" if suite == "lines" else "calls"))
        result["workloads"][bench] = {"loops": loops, "calls": events,
                                      "runs": {c: [] for c in configs}}
        log(f"[{minor}] {bench}: {loops} loops" + ("" if events is None else
            f", {events} {'line' if suite == 'lines' else 'call'} events"))
    rng = random.Random(12345)
    for rnd in range(rounds + 1):
        for bench in benches:
            order = list(configs)
            rng.shuffle(order)
            row = {c: runner.run(c, bench, result["workloads"][bench]["loops"]) for c in order}
            if rnd == 0:
                continue                                # warm-up round, discarded
            for c in configs:
                result["workloads"][bench]["runs"][c].append(row[c])
        if rnd:
            log(f"[{minor}] round {rnd}/{rounds} done")
    result["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    shutil.rmtree(runner.tmp, ignore_errors=True)
    return result


# ------------------------------------------------------------------ analysis
def analyse(result):
    """Per workload and config: median wall ratio, CI, ns/call, CPU ratio."""
    out = {}
    for bench, w in result["workloads"].items():
        base = w["runs"]["base"]
        rows = {}
        bw = [r["wall"] for r in base if "wall" in r]
        for c, runs in w["runs"].items():
            pairs = [(r, b) for r, b in zip(runs, base) if "wall" in r and "wall" in b]
            errors = [r["error"] for r in runs if "error" in r]
            if not pairs:
                rows[c] = {"error": errors[0] if errors else "no data"}
                continue
            ratios = [r["wall"] / b["wall"] for r, b in pairs]
            cpu = [r["cpu"] / b["cpu"] for r, b in pairs if b["cpu"] > 0]
            row = {"ratio": statistics.median(ratios), "ci": bootstrap_ci(ratios),
                   "cpu_ratio": statistics.median(cpu) if cpu else math.nan,
                   "n": len(pairs), "errors": len(errors)}
            if w.get("calls"):
                row["ns_per_call"] = statistics.median(
                    (r["wall"] - b["wall"]) / w["calls"] * 1e9 for r, b in pairs)
            rows[c] = row
        rows["base"]["cv"] = (statistics.pstdev(bw) / statistics.mean(bw)) if len(bw) > 1 else 0
        rows["base"]["seconds"] = statistics.median(bw) if bw else math.nan
        out[bench] = rows
    return out


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and not math.isnan(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def summarise(result, rows):
    core = [b for b in rows if b in CORE]
    s = {}
    for c in result["configs"]:
        vals = [rows[b][c]["ratio"] for b in core if "ratio" in rows[b].get(c, {})]
        s[c] = {"geomean": geomean(vals), "median": statistics.median(vals) if vals else math.nan,
                "max": max(vals) if vals else math.nan, "n": len(vals)}
    return s


def fmt_ratio(row):
    if "ratio" not in row:
        return "failed"
    return f"{row['ratio']:.2f}"


def render(results) -> str:
    lines = []
    suite = None
    order = {"function": 0, "lines": 1, "sample": 2, "memory": 3}
    for res in sorted(results, key=lambda r: (order[r.get("suite", "function")], r["minor"])):
        if res.get("suite", "function") != suite:
            suite = res.get("suite", "function")
            lines += [f"## {dict(function='Function', lines='Line', sample='Sampling', memory='Memory')[suite]} "
                      f"mode", ""]
        if suite == "lines":
            lines += render_lines(res)
            continue
        if suite == "sample":
            lines += render_sample(res)
            continue
        if suite == "memory":
            lines += render_memory(res)
            continue
        rows = analyse(res)
        summ = summarise(res, rows)
        configs = [c for c in res["configs"] if c != "base"]
        pk = res["packages"]
        lines += [f"### CPython {res['python']}", "",
                  f"pyprof {pk.get('pyprof')}, yappi {pk.get('yappi')} (wall clock), "
                  f"pyinstrument {pk.get('pyinstrument')} (1 ms), pyperformance "
                  f"{pk.get('pyperformance')}; {res['rounds']} rounds after a discarded warm-up, "
                  f"~{res['seconds']} s unprofiled per run, pinned to CPU {res['cpu']}; "
                  f"{res['started']} – {res.get('finished', '?')}.", "",
                  "Overhead = profiled / unprofiled wall time, median of paired ratios "
                  "[bootstrap 95% interval]:", ""]
        head = ["workload", "shape", "calls/s (M)", "base CV"] + configs
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for bench, r in rows.items():
            base = r["base"]
            calls = res["workloads"][bench]["calls"] or 0
            rate = calls / base["seconds"] / 1e6 if base.get("seconds") else math.nan
            cv = base.get("cv", 0)
            cells = [bench, CORE.get(bench) or STRESS.get(bench, ""), f"{rate:.1f}",
                     f"{cv * 100:.1f}%" + (" ⚠" if cv > 0.03 else "")]
            for c in configs:
                row = r.get(c, {})
                if "ratio" in row:
                    lo, hi = row["ci"]
                    cells.append(f"{row['ratio']:.2f} [{lo:.2f}–{hi:.2f}]")
                else:
                    cells.append("failed")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Core set (12 workloads): geometric mean / median / max of the ratios:", ""]
        lines.append("| " + " | ".join(["", *configs]) + " |")
        lines.append("|" + "---|" * (len(configs) + 1))
        for k in ("geomean", "median", "max"):
            lines.append("| " + " | ".join([k] + [f"{summ[c][k]:.2f}" for c in configs]) + " |")
        lines += ["", "ns per call event, (T − T_base) / calls (calls: cProfile's count, "
                  "builtins included; median over rounds):", ""]
        nsc = [c for c in configs if c in ("pyprof", "pyprof-exact", "pyprof-nobuiltins",
                                             "cProfile", "yappi", "floor", "floor-py",
                                             "floor-pep523")]
        lines.append("| " + " | ".join(["workload", *nsc]) + " |")
        lines.append("|" + "---|" * (len(nsc) + 1))
        for bench, r in rows.items():
            calls = res["workloads"][bench]["calls"] or 0
            if calls / max(r["base"].get("seconds", 1), 1e-9) < 1e6:
                continue                    # too few events for a meaningful figure
            lines.append("| " + " | ".join(
                [bench] + [f"{r[c]['ns_per_call']:.0f}" if "ns_per_call" in r.get(c, {}) else "–"
                           for c in nsc]) + " |")
        lines += ["", *targets(res, rows, summ), ""]
    return "\n".join(lines)


def render_lines(res) -> list:
    rows = analyse(res)
    configs = [c for c in res["configs"] if c != "base"]
    pk = res["packages"]
    out = [f"### CPython {res['python']}: line mode", "",
           f"pyprof {pk.get('pyprof')}, line_profiler {pk.get('line_profiler')} (auto-profile "
           f"mode, kernprof -p, on the benchmark's file), pprofile {pk.get('pprofile')} "
           f"(deterministic); {res['rounds']} rounds after a discarded warm-up, "
           f"~{res['seconds']} s unprofiled per run, pinned to CPU {res['cpu']}; "
           f"{res['started']} – {res.get('finished', '?')}.", "",
           "Overhead = profiled / unprofiled wall time, median of paired ratios "
           "[bootstrap 95% interval]:", ""]
    head = ["workload", "line events/s (M)", "base CV"] + configs
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench, r in rows.items():
        base = r["base"]
        ev = res["workloads"][bench]["calls"] or 0
        rate = ev / base["seconds"] / 1e6 if base.get("seconds") else math.nan
        cv = base.get("cv", 0)
        cells = [bench, f"{rate:.1f}", f"{cv * 100:.1f}%" + (" ⚠" if cv > 0.03 else "")]
        for c in configs:
            row = r.get(c, {})
            cells.append(f"{row['ratio']:.2f} [{row['ci'][0]:.2f}–{row['ci'][1]:.2f}]"
                         if "ratio" in row else "failed")
        out.append("| " + " | ".join(cells) + " |")
    geo = {c: geomean([rows[b][c]["ratio"] for b in rows if "ratio" in rows[b].get(c, {})])
           for c in configs}
    out += ["", "Geometric mean of the ratios: " + ", ".join(f"{c} {geo[c]:.2f}" for c in configs),
            "", "ns per line event, (T − T_base) / line events (events counted with every line "
            "traced; median over rounds):", ""]
    nsc = [c for c in ("pyprof-lines-all", "pprofile", "floor-lines") if c in configs]
    out += ["| " + " | ".join(["workload", *nsc]) + " |", "|" + "---|" * (len(nsc) + 1)]
    for bench, r in rows.items():
        out.append("| " + " | ".join([bench] + [
            f"{r[c]['ns_per_call']:.0f}" if "ns_per_call" in r.get(c, {}) else "–" for c in nsc])
            + " |")
    out += ["", "Targets:"]
    if "pyprof-lines-file" in geo and "lineprof-file" in geo:
        a, b = geo["pyprof-lines-file"] - 1, geo["lineprof-file"] - 1
        out.append(f"- same functions: pyprof's extra time {a:.2f} vs line_profiler's {b:.2f} = "
                   f"{a / b:.2f}× (target ≤ 0.5): {'met' if a <= 0.5 * b else 'NOT met'}")
    if "pyprof-lines-all" in geo:
        g = geo["pyprof-lines-all"]
        floor = f" (the no-op line hook alone: {geo['floor-lines']:.2f})" if "floor-lines" in geo else ""
        out.append(f"- whole program: geomean {g:.2f} (target ≤ 3){floor}: "
                   f"{'met' if g <= 3 else 'NOT met'}")
        if "pprofile" in geo:
            a, b = g - 1, geo["pprofile"] - 1
            out.append(f"- whole program vs pprofile: extra time {a:.2f} vs {b:.2f} = {a / b:.3f}× "
                       f"(target ≤ 0.1): {'met' if a <= 0.1 * b else 'NOT met'}")
    return out + [""]


def ratio_table(rows, configs, digits) -> list:
    """Markdown rows: per workload, the base's CV and each configuration's ratio
    with its interval."""
    head = ["workload", "base CV"] + configs
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench, r in rows.items():
        cv = r["base"].get("cv", 0)
        cells = [bench, f"{cv * 100:.1f}%" + (" ⚠" if cv > 0.03 else "")]
        for c in configs:
            row = r.get(c, {})
            cells.append(f"{row['ratio']:.{digits}f} [{row['ci'][0]:.{digits}f}–"
                         f"{row['ci'][1]:.{digits}f}]" if "ratio" in row else "failed")
        out.append("| " + " | ".join(cells) + " |")
    return out


def render_sample(res) -> list:
    rows = analyse(res)
    configs = [c for c in res["configs"] if c != "base"]
    pk = res["packages"]
    out = [f"### CPython {res['python']}: sampling", "",
           f"pyprof {pk.get('pyprof')}, pyinstrument {pk.get('pyinstrument')} (1 ms, wall), "
           f"py-spy {pk.get('py-spy')} (`record --rate 250`, its default blocking mode), austin "
           f"{pk.get('austin-dist')} (`-i 4000`: 250 Hz), scalene {pk.get('scalene')} "
           f"(`run --cpu-only`); {res['rounds']} rounds after a discarded warm-up, "
           f"~{res['seconds']} s unprofiled per run, every process pinned to CPU {res['cpu']}; "
           f"{res['started']} – {res.get('finished', '?')}.", "",
           "Wall-time overhead = profiled / unprofiled time of the region, median of paired "
           "ratios [bootstrap 95% interval]:", ""]
    out += ratio_table(rows, configs, 3)
    summ = {c: [rows[b][c] for b in rows if "ratio" in rows[b].get(c, {})] for c in configs}
    out += ["", "CPU time of every process involved (the program, its threads, and for py-spy "
            "and austin their own process) during the region, profiled / unprofiled, median "
            "of paired ratios; then wall and CPU over the workloads:", ""]
    out += ["| " + " | ".join(["workload", *configs]) + " |", "|" + "---|" * (len(configs) + 1)]
    for bench, r in rows.items():
        out.append("| " + " | ".join([bench] + [
            f"{r[c]['cpu_ratio']:.3f}" if "cpu_ratio" in r.get(c, {}) else "failed"
            for c in configs]) + " |")
    for label, key, fn in (("wall geomean", "ratio", geomean), ("wall max", "ratio", max),
                           ("CPU geomean", "cpu_ratio", geomean), ("CPU max", "cpu_ratio", max)):
        out.append("| **" + label + "** | " + " | ".join(
            f"{fn([x[key] for x in summ[c]]):.3f}" if summ[c] else "–" for c in configs) + " |")
    growth = {}
    for c in ("pyprof-sample", "pyprof-sample-native", "pyprof-wall-1k"):
        rates = [r["capture_bytes"] / r["wall"] / 1e3 for w in res["workloads"].values()
                 for r in w["runs"].get(c, []) if "capture_bytes" in r]
        if rates:
            growth[c] = (statistics.median(rates), max(rates))
    if growth:
        out += ["", "Capture file size per second of profiled time (KB/s, median / max over "
                "runs): " + ", ".join(f"{c} {m:.1f} / {x:.1f}" for c, (m, x) in growth.items())]
    out += ["", "Targets:"]

    def g(c, key="ratio", fn=geomean):
        return fn([x[key] for x in summ.get(c, [])]) if summ.get(c) else math.nan
    if summ.get("pyprof-sample"):
        a, m = g("pyprof-sample"), g("pyprof-sample", fn=max)
        out.append(f"- default sampling (CPU, 250 Hz): geomean {a:.3f} (target ≤ 1.03), max "
                   f"{m:.3f} (target ≤ 1.05): {'met' if a <= 1.03 and m <= 1.05 else 'NOT met'}")
    if summ.get("pyprof-sample-native"):
        a, m = g("pyprof-sample-native"), g("pyprof-sample-native", fn=max)
        out.append(f"- with native frames: geomean {a:.3f}, max {m:.3f} (target ≤ 1.08): "
                   f"{'met' if m <= 1.08 else 'NOT met'}")
    if summ.get("pyprof-wall-1k"):
        out.append(f"- wall mode at 1 kHz (reported, no target): geomean "
                   f"{g('pyprof-wall-1k'):.3f}, max {g('pyprof-wall-1k', fn=max):.3f}")
    if "pyprof-sample" in growth:
        m, x = growth["pyprof-sample"]
        out.append(f"- capture growth at the default rate: median {m:.1f} KB/s, max {x:.1f} "
                   f"(target ≤ 100): {'met' if x <= 100 else 'NOT met'}")
    return out + [""]


def render_memory(res) -> list:
    rows = analyse(res)
    configs = [c for c in res["configs"] if c != "base"]
    pk = res["packages"]
    out = [f"### CPython {res['python']}: memory", "",
           f"pyprof {pk.get('pyprof')} (exact; sampled at 512 KiB), tracemalloc (1 frame; "
           f"-snapshot: plus a snapshot and its per-line statistics at the end), memray "
           f"{pk.get('memray')} (Tracker, in process), memory_profiler "
           f"{pk.get('memory_profiler')} (line by line on every function of the benchmark "
           f"file), scalene {pk.get('scalene')} (`run`, CPU and memory); {res['rounds']} rounds "
           f"after a discarded warm-up, ~{res['seconds']} s unprofiled per run, pinned to CPU "
           f"{res['cpu']}; {res['started']} – {res.get('finished', '?')}.", "",
           "Wall-time overhead = profiled / unprofiled time of the region, median of paired "
           "ratios [bootstrap 95% interval]:", ""]
    out += ratio_table(rows, configs, 2)
    summ = {c: [rows[b][c]["ratio"] for b in rows if "ratio" in rows[b].get(c, {})]
            for c in configs}
    for label, fn in (("geomean", geomean), ("max", max)):
        out.append(f"| **{label}** | | " + " | ".join(
            f"{fn(summ[c]):.2f}" if summ[c] else "–" for c in configs) + " |")
    out += ["", "Targets:"]
    if summ.get("pyprof-memory"):
        g = geomean(summ["pyprof-memory"])
        out.append(f"- exact mode: geomean {g:.2f} (target ≤ 2): {'met' if g <= 2 else 'NOT met'}")
    if summ.get("pyprof-memory-sample"):
        g = geomean(summ["pyprof-memory-sample"])
        out.append(f"- sampled mode: geomean {g:.2f} (target ≤ 1.15): "
                   f"{'met' if g <= 1.15 else 'NOT met'}")
    return out + [""]


def targets(res, rows, summ):
    """The issue's targets, checked."""
    if "pyprof" not in summ or "cProfile" not in summ:
        return []
    out = ["Targets:"]
    g_p, g_c = summ["pyprof"]["geomean"] - 1, summ["cProfile"]["geomean"] - 1
    worse = [b for b, r in rows.items() if b in CORE and "ratio" in r.get("pyprof", {})
             and "ratio" in r.get("cProfile", {}) and r["pyprof"]["ratio"] > r["cProfile"]["ratio"]]
    if res["minor"] >= "3.12":
        ok = g_p <= 0.6 * g_c
        out.append(f"- extra time on the geomean: pyprof {g_p:.2f} vs cProfile {g_c:.2f} "
                   f"= {g_p / g_c:.2f}× cProfile's (target ≤ 0.60): {'met' if ok else 'NOT met'}")
        nsv = [r["pyprof"]["ns_per_call"] for b, r in rows.items()
               if b in CORE and "ns_per_call" in r.get("pyprof", {})
               and res["workloads"][b]["calls"] / r["base"]["seconds"] >= 1e6]
        if nsv:
            out.append(f"- ns per call event (core workloads with ≥1M calls/s): median "
                       f"{statistics.median(nsv):.0f}, max {max(nsv):.0f} (target ≤ 70): "
                       f"{'met' if max(nsv) <= 70 else 'NOT met'}")
    else:
        ok = g_p <= g_c
        out.append(f"- extra time on the geomean: pyprof {g_p:.2f} vs cProfile {g_c:.2f} "
                   f"(target: at most cProfile's): {'met' if ok else 'NOT met'}")
    out.append(f"- workloads where pyprof costs more than cProfile: "
               f"{', '.join(worse) if worse else 'none'}")
    return out


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cs = "?"
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            cs = f.read().strip()
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"clocksource {cs}")


BEGIN, END = "<!-- BEGIN GENERATED: run.py -->", "<!-- END GENERATED -->"


def write_results(path, results):
    body = "\n".join([BEGIN, "", f"Machine: {machine()}.", "", render(results), END])
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        text = pre + body + post
    else:
        text = text + ("\n" if text else "") + body + "\n"
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[],
                    help="interpreter of a bench venv (pyprof, pyperformance and peers "
                         "installed); repeatable")
    ap.add_argument("--suite", choices=["function", "lines", "sample", "memory"],
                    default="function")
    ap.add_argument("--set", choices=["core", "stress", "all", "native"], default="core",
                    help="workloads (native: --suite memory's --native-allocs comparison)")
    ap.add_argument("--only", help="comma-separated workloads (overrides --set)")
    ap.add_argument("--configs", help="comma-separated configurations (default: the suite's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.5,
                    help="unprofiled run time to calibrate each workload to")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1,
                    help="CPU to pin runs to (-1: no pinning)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"),
                    help="markdown file whose GENERATED section is rewritten ('' to skip)")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite RESULTS.md from build/bench/*.json without measuring")
    a = ap.parse_args()
    os.makedirs(OUT_DIR, exist_ok=True)
    if not a.render_only:
        if not a.python:
            ap.error("give at least one --python")
        benches = (a.only.split(",") if a.only else
                   list(LINE_WORKLOADS) if a.suite == "lines" else
                   list(NATIVE_WORKLOADS) if a.suite == "memory" and a.set == "native" else
                   list(MEMORY_WORKLOADS) if a.suite == "memory" else
                   list(CORE) if a.set == "core" else list(STRESS) if a.set == "stress"
                   else list(CORE) + list(STRESS))
        configs = (a.configs.split(",") if a.configs else
                   LINE_CONFIGS if a.suite == "lines" else
                   SAMPLE_CONFIGS if a.suite == "sample" else
                   NATIVE_CONFIGS if a.suite == "memory" and a.set == "native" else
                   MEMORY_CONFIGS if a.suite == "memory" else DEFAULT_CONFIGS)
        if "base" not in configs:
            configs.insert(0, "base")
        for py in a.python:
            t0 = time.time()
            res = measure(py, benches, configs, a.rounds, a.seconds,
                          None if a.cpu < 0 else a.cpu, a.timeout, a.suite)
            tag = ("" if a.suite == "function" else "-" + a.suite) + (
                "" if not a.only and a.set == "core" else "-" + (a.only or a.set).replace(",", "+"))
            with open(os.path.join(OUT_DIR, f"{res['minor']}{tag}.json"), "w") as f:
                json.dump(res, f, indent=1)
            log(f"[{res['minor']}] done in {time.time() - t0:.0f} s")
            print(render([res]))
    if a.results:
        results = []
        for name in sorted(os.listdir(OUT_DIR)):
            if (name.endswith(".json") and not name.startswith("accuracy")
                    and name.removesuffix("-lines.json").removesuffix("-sample.json")
                    .removesuffix("-memory.json")
                    .count("-") == 0):
                with open(os.path.join(OUT_DIR, name)) as f:
                    results.append(json.load(f))
        if results:
            write_results(a.results, results)
            log(f"wrote {a.results}")


if __name__ == "__main__":
    main()
