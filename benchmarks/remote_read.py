"""Reaching a process from outside: pyprof dump (read-only) and pyprof top
--remote against py-spy (docs/attach.md#read-only-how-it-works; RESULTS.md, "Reaching a
process").

1. dump: the command's latency (start to exit, the client's start-up included)
   and the target's pause as the target sees it: its main thread spins and
   records every gap of more than 0.2 ms between two loop turns; a dump's pause
   is the largest gap inside the dump's window, beside the largest gap in an
   equal window with no dump (the machine's own noise).
2. top --remote: a CPU-bound target counts loop turns per 0.25 s; its rate
   while a sampler runs (pyprof top --remote --duration, py-spy record with and
   without --nonblocking) over its rate just before, same round, and the
   sampler's own CPU time.

    python benchmarks/remote_read.py --py-spy /tmp/bench-venv/bin/py-spy [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = r"""
import sys, threading, time
def deep(n, f):
    return f() if n == 0 else deep(n - 1, f)
def park():
    deep(20, lambda: time.sleep(3600))
for _ in range(int(sys.argv[2])):
    threading.Thread(target=park, daemon=True).start()
out = sys.argv[1]
gaps = []
mode = sys.argv[3]
def spin():
    pc = time.perf_counter_ns
    cpu = time.thread_time_ns
    last = pc()
    cpu0 = cpu()
    turns = 0
    slot_end = last + 250_000_000
    rates = []
    end = last + int(float(sys.argv[4]) * 1e9)
    while last < end:
        now = pc()
        if now - last > 200_000:
            gaps.append((last, now))
        last = now
        turns += 1
        if now >= slot_end:
            c = cpu()
            rates.append((now, turns, c - cpu0))
            cpu0 = c
            turns = 0
            slot_end = now + 250_000_000
    with open(out, "w") as f:
        import json
        json.dump({"gaps": gaps, "rates": rates}, f)
print("up", flush=True)
deep(30, spin)
"""


def start_target(tmp, threads, seconds):
    out = os.path.join(tmp, f"target-{time.monotonic_ns()}.json")
    script = os.path.join(tmp, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    p = subprocess.Popen([sys.executable, script, out, str(threads), "x", str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n"
    time.sleep(0.3)
    return p, out


def finish(p, out):
    p.wait()
    with open(out) as f:
        return json.load(f)


def run_timed(cmd):
    t0 = time.monotonic_ns()
    r = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(r.pid, 0)
    t1 = time.monotonic_ns()
    out = r.stdout.read()
    err = r.stderr.read()
    return t0, t1, usage.ru_utime + usage.ru_stime, out, err, os.waitstatus_to_exitcode(status)


def max_gap(gaps, lo, hi):
    return max((b - a for a, b in gaps if b > lo and a < hi), default=0)


def bench_dump(args, tmp):
    rows = []
    for threads in (0, 8):
        tools = {"pyprof dump": [sys.executable, "-m", "pyprof", "dump"],
                 "py-spy dump": [args.py_spy, "dump", "--pid"],
                 "pyprof dump --native": [sys.executable, "-m", "pyprof", "dump", "--native"],
                 "py-spy dump --native": [args.py_spy, "dump", "--native", "--pid"]}
        n = args.dumps
        p, out = start_target(tmp, threads, 6 + n * 1.5 * len(tools))
        windows = {k: [] for k in tools}
        printed = {}
        for i in range(n):
            for name, cmd in tools.items():
                t0, t1, _cpu, text, err, rc = run_timed(cmd + [str(p.pid)])
                assert rc == 0, (name, err)
                windows[name].append((t0, t1))
                if name.startswith("pyprof"):
                    printed.setdefault(name, []).append(
                        float(text.split("stopped ")[1].split(" ms")[0]))
                time.sleep(0.25)
        data = finish(p, out)
        gaps = data["gaps"]
        for name, ws in windows.items():
            lat = [(b - a) / 1e6 for a, b in ws]
            pause = [max_gap(gaps, a, b) / 1e6 for a, b in ws]
            # the same windows shifted into the quiet time after each dump
            quiet = [max_gap(gaps, b + 50_000_000, b + 50_000_000 + (b - a)) / 1e6
                     for a, b in ws]
            rows.append({"target": f"main spinning, depth 32, +{threads} parked threads "
                                   f"(depth 23)", "tool": name,
                         "latency_ms": statistics.median(lat),
                         "target_gap_ms": statistics.median(pause),
                         "quiet_gap_ms": statistics.median(quiet),
                         "printed_pause_ms": statistics.median(printed[name])
                         if name in printed else None})
    return rows


def bench_top(args, tmp):
    seconds = args.seconds
    configs = [("pyprof top --remote 100 Hz", lambda pid: [
                   sys.executable, "-m", "pyprof", "top", "--remote", str(pid), "--rate", "100",
                   "--duration", str(seconds), "-o", os.path.join(tmp, "r.cprof")]),
               ("pyprof top --remote 1 kHz", lambda pid: [
                   sys.executable, "-m", "pyprof", "top", "--remote", str(pid), "--rate", "1000",
                   "--duration", str(seconds), "-o", os.path.join(tmp, "r.cprof")]),
               ("py-spy record --nonblocking 100 Hz", lambda pid: [
                   args.py_spy, "record", "--nonblocking", "-r", "100", "-d", str(int(seconds)),
                   "-f", "raw", "-o", os.path.join(tmp, "s.txt"), "--pid", str(pid)]),
               ("py-spy record --nonblocking 1 kHz", lambda pid: [
                   args.py_spy, "record", "--nonblocking", "-r", "1000", "-d", str(int(seconds)),
                   "-f", "raw", "-o", os.path.join(tmp, "s.txt"), "--pid", str(pid)]),
               ("py-spy record (stops the process) 100 Hz", lambda pid: [
                   args.py_spy, "record", "-r", "100", "-d", str(int(seconds)),
                   "-f", "raw", "-o", os.path.join(tmp, "s.txt"), "--pid", str(pid)]),
               ("py-spy record (stops the process) 1 kHz", lambda pid: [
                   args.py_spy, "record", "-r", "1000", "-d", str(int(seconds)),
                   "-f", "raw", "-o", os.path.join(tmp, "s.txt"), "--pid", str(pid)])]
    results = {name: [] for name, _ in configs}
    cpu = {name: [] for name, _ in configs}
    per_cpu = {name: [] for name, _ in configs}
    for rnd in range(args.rounds):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for name, cmd in order:
            p, out = start_target(tmp, 2, seconds * 2 + 3)
            time.sleep(seconds)                         # the bare rate, just before
            t0, t1, used, _o, err, rc = run_timed(cmd(p.pid))
            assert rc == 0, (name, err)
            data = finish(p, out)
            rates = data["rates"]

            def rate(lo, hi, per_cpu):
                rows = [(n, c) for t, n, c in rates if lo <= t <= hi]
                turns = sum(n for n, c in rows)
                return turns / max(sum(c for n, c in rows) if per_cpu else len(rows), 1)
            lo, mid, hi = t0 - int(seconds * 1e9) + 500_000_000, t0, t1
            results[name].append(rate(mid + 500_000_000, hi, False) / rate(lo, mid, False))
            per_cpu[name].append(rate(mid + 500_000_000, hi, True) / rate(lo, mid, True))
            cpu[name].append(used / ((t1 - t0) / 1e9))
    return [{"tool": name, "work_rate": statistics.median(v), "all": v,
             "per_cpu": statistics.median(per_cpu[name]),
             "sampler_cpu": statistics.median(cpu[name])} for name, v in results.items()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--py-spy", required=True)
    ap.add_argument("--dumps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--only", choices=("dump", "top"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only != "top":
            print("| target | tool | latency (median) | target's largest gap in the dump's "
                  "window | in a quiet window | pause pyprof printed |")
            print("|---|---|---|---|---|---|")
            for r in bench_dump(args, tmp):
                pp = f"{r['printed_pause_ms']:.2f} ms" if r["printed_pause_ms"] is not None \
                    else "-"
                print(f"| {r['target']} | {r['tool']} | {r['latency_ms']:.0f} ms | "
                      f"{r['target_gap_ms']:.2f} ms | {r['quiet_gap_ms']:.2f} ms | {pp} |",
                      flush=True)
        if args.only != "dump":
            print()
            print("| sampler | target's work per wall second (during / before) | rounds | "
                  "target's work per CPU second of its own | sampler's CPU (of one core) |")
            print("|---|---|---|---|---|")
            for r in bench_top(args, tmp):
                print(f"| {r['tool']} | {r['work_rate']:.3f} | "
                      f"{', '.join(f'{x:.3f}' for x in r['all'])} | {r['per_cpu']:.3f} | "
                      f"{r['sampler_cpu'] * 100:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
