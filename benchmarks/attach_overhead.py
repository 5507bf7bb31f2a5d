"""What attaching costs a running server (docs/attach.md, benchmarks/RESULTS.md).

A threaded HTTP server (tests/attach_servers.py, started without pyprof, on the
base interpreter) answers /work?n=N (a CPU-bound handler) to CLIENTS client
threads of this process. For each round and mode: the requests per second for
WINDOW s before attaching, while attached (`pyprof attach PID --duration ...`,
counted from its "attached" line for WINDOW s), and for WINDOW s after it
detached. Reported per mode: the median over rounds of attached/before (the
mode's cost) and after/before (what a detach leaves: should be 1.00).

    python benchmarks/attach_overhead.py [--rounds 3] [--window 2] [--modes sample,trace]
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = os.path.join(HERE, "..", "tests", "attach_servers.py")
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
MODES = {
    "sample": ["--sample"],
    "sample-wall": ["--sample", "--wall"],
    "sample-wall-native": ["--sample", "--wall", "--native"],
    "trace": [],
    "memory-sample": ["--memory-sample"],
    "memory": ["--memory"],
    "lines-of": ["--lines-of", "attach_work:handler_work"],
}
CLIENTS = 2
N = 20000


class Counter:
    def __init__(self, port):
        self.port = port
        self.done = 0
        self.failed = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def run(self):
        url = f"http://127.0.0.1:{self.port}/work?n={N}"
        while not self.stop.is_set():
            try:
                urllib.request.urlopen(url, timeout=30).read()
                self.done += 1
            except OSError:
                self.failed += 1

    def rate(self, seconds):
        d0, t0 = self.done, time.monotonic()
        time.sleep(seconds)
        return (self.done - d0) / (time.monotonic() - t0)


def attached_rate(counter, pid, args, window):
    proc = subprocess.Popen([sys.executable, "-m", "pyprof", "attach", str(pid),
                             "--duration", str(window + 1.0), *args, "-o",
                             "/tmp/pyprof-bench-attach.cprof"],
                            stderr=subprocess.PIPE, text=True)
    rate = None
    for line in proc.stderr:
        if rate is None and "attached to process" in line:
            time.sleep(0.25)                    # the mode settles (first calls, timers)
            rate = counter.rate(window)
    proc.wait()
    if proc.returncode != 0 or rate is None:
        raise SystemExit(f"attach failed ({proc.returncode})")
    return rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--modes", default=",".join(MODES))
    opts = ap.parse_args()
    modes = opts.modes.split(",")
    portfile = f"/tmp/pyprof-bench-{os.getpid()}.port"
    server = subprocess.Popen([BASE_PYTHON, SERVERS, "threaded", portfile],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(portfile):
            time.sleep(0.05)
        time.sleep(0.3)
        counter = Counter(int(open(portfile).read()))
        counter.rate(1.0)                       # warm up
        ratios = {m: ([], []) for m in modes}
        raw = {m: [] for m in modes}
        for r in range(opts.rounds):
            for m in modes:
                before = counter.rate(opts.window)
                during = attached_rate(counter, server.pid, MODES[m], opts.window)
                time.sleep(0.5)                 # the detach completes
                after = counter.rate(opts.window)
                ratios[m][0].append(during / before)
                ratios[m][1].append(after / before)
                raw[m].append((before, during, after))
                print(f"round {r + 1} {m:20} before {before:7.1f} req/s  attached "
                      f"{during:7.1f}  after {after:7.1f}", flush=True)
        counter.stop.set()
        print()
        print(f"{'mode':20} {'attached/before':>16} {'after/before':>13}   (median of "
              f"{opts.rounds}; {CLIENTS} clients, n={N}; failed requests: {counter.failed})")
        for m in modes:
            print(f"{m:20} {statistics.median(ratios[m][0]):16.3f} "
                  f"{statistics.median(ratios[m][1]):13.3f}")
    finally:
        server.terminate()
        server.wait()
        for path in (portfile, "/tmp/pyprof-bench-attach.cprof"):
            try:
                os.unlink(path)
            except OSError:
                pass


if __name__ == "__main__":
    main()
