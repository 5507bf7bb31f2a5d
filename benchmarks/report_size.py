"""The HTML report of a large capture: file size, time to write it, and the time
headless Chromium takes to load and render it (docs/report.md#size-limits).

    python benchmarks/report_size.py [--functions 100000] [--stacks 100000] [--out DIR]

The capture is synthetic (``synthetic()``, also used by tests/test_report.py): a
sampled Session of N functions in N/100 files, S distinct stacks 4 to 24 frames
deep over 4 threads, 1 to 5 samples each. Chromium's time is the wall time of
``chromium --headless --dump-dom`` on the report less that on an empty page (the
browser's start-up), median of --rounds; the page's own time from navigation to
the end of its script (performance.now()) is printed too.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def synthetic(n_functions=100_000, n_stacks=100_000, seed=1, threads=4):
    """A sampled Session with n_functions functions and n_stacks distinct stacks."""
    from pyprof.session import Function, SampleCounters, Session, Stack, Thread
    rng = random.Random(seed)
    s = Session()
    interval = 4_000_000
    s.info = {"format": [1, 4], "clock": "monotonic", "time_unit": 1e-9, "clock_read_ns": 20.0,
              "duration_ns": 60_000_000_000, "events": 0, "python": "3.12.1",
              "hook": "SIGPROF (ITIMER_PROF, process CPU time)", "start_wall_ns": 1.7e18,
              "sampling": {"mode": "cpu", "native": False, "interval_ns": interval,
                           "rate_achieved": 250.0, "dropped": 0}}
    s.meta = {"argv": ["synthetic.py", f"--functions={n_functions}", f"--stacks={n_stacks}"],
              "modes": ["sample"], "python": "3.12.1"}
    n_files = max(1, n_functions // 100)
    for fid in range(n_functions):
        name = f"fn_{fid}"
        s.functions[fid] = Function(fid, f"/synthetic/pkg{fid % n_files // 50}/mod{fid % n_files}.py",
                                    10 + (fid // n_files) * 12, name, f"Cls{fid % 7}.{name}",
                                    "python")
    for t in range(threads):
        s.threads[t] = Thread(t, 1000 + t, 2000 + t, 0, "MainThread" if t == 0 else f"worker-{t}")
    # stacks share prefixes (a program's call tree), with a long tail of rare leaves
    roots = [rng.randrange(n_functions) for _ in range(20)]
    for sid in range(n_stacks):
        depth = rng.randint(4, 24)
        frames = [roots[rng.randrange(len(roots))]]
        frames += [rng.randrange(n_functions) if rng.random() < 0.3 else
                   (frames[-1] * 7 + i) % n_functions for i in range(depth - 1)]
        frames[-1] = sid % n_functions          # every function is a leaf somewhere
        s.stacks[sid] = Stack(tuple((f, s.functions[f].line + 1 + (sid % 5)) for f in frames))
        count = rng.randint(1, 5)
        s.samples[(rng.randrange(threads), sid, 0)] = SampleCounters(count, count * interval)
    return s


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def load_time(browser, page, tmp) -> tuple:
    """(seconds of a headless --dump-dom run, the DOM it printed)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}
    prof = tempfile.mkdtemp(dir=tmp)
    t0 = time.perf_counter()
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={prof}", "--dump-dom", "file://" + page],
                       capture_output=True, text=True, timeout=600, env=env)
    return time.perf_counter() - t0, r.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--functions", type=int, default=100_000)
    ap.add_argument("--stacks", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="keep the report in this directory")
    opts = ap.parse_args(argv)
    from pyprof.export import report
    t0 = time.perf_counter()
    s = synthetic(opts.functions, opts.stacks)
    t_build = time.perf_counter() - t0
    tmp = tempfile.mkdtemp(prefix="pyprof-report-size-")
    out = opts.out or tmp
    os.makedirs(out, exist_ok=True)
    page = os.path.abspath(os.path.join(out, "synthetic.html"))
    t0 = time.perf_counter()
    report.write(s, page)
    t_write = time.perf_counter() - t0
    size = os.path.getsize(page)
    print(f"Python {sys.version.split()[0]}: {opts.functions:,} functions, {opts.stacks:,} stacks "
          f"(synthetic capture built in {t_build:.1f} s)")
    print(f"report: {size / 1e6:.2f} MB, written in {t_write:.1f} s")
    browser = chromium()
    if browser is None:
        print("no Chromium: load time not measured")
        return 0
    empty = os.path.join(tmp, "empty.html")
    with open(empty, "w") as f:
        f.write("<!DOCTYPE html><html><body>empty</body></html>")
    base, full, rendered = [], [], None
    for _ in range(opts.rounds):
        base.append(load_time(browser, empty, tmp)[0])
        secs, dom = load_time(browser, page, tmp)
        full.append(secs)
        if 'data-rendered="yes"' not in dom:
            print("the report did not finish rendering", file=sys.stderr)
            return 1
        import re
        m = re.search(r'data-render-ms="([0-9.]+)"', dom)
        rendered = float(m.group(1)) if m else None
    print(f"Chromium headless --dump-dom: {statistics.median(full):.2f} s for the report, "
          f"{statistics.median(base):.2f} s for an empty page: load and render "
          f"{statistics.median(full) - statistics.median(base):.2f} s (median of {opts.rounds})"
          + (f"; the page's script finished {rendered / 1e3:.2f} s after navigation"
             if rendered is not None else ""))
    if not opts.out:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
