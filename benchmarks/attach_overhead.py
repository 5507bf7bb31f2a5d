"""What attaching costs a running server (docs/attach.md, benchmarks/RESULTS.md).

A threaded HTTP server (tests/programs/attach_servers.py, started without pyprof, on the
base interpreter) answers /work?n=N (a CPU-bound handler) to CLIENTS client
threads of this process. For each round and mode: WINDOW s before attaching,
WINDOW s while attached (`pyprof attach PID --duration ...`, counted from its
"attached" line), WINDOW s after it detached; in each, the requests per second
and the server's CPU time per request (utime + stime of /proc/PID/stat: the
process's threads, pyprof's included, dead ones too). Reported per mode: the
median over rounds of attached/before (the mode's cost) and after/before (what
a detach leaves: should be 1.00). CPU per request is the steadier measure on a
shared machine (throughput also moves with the other programs' load).

    python benchmarks/attach_overhead.py [--rounds 3] [--window 2] [--modes sample,trace]
    python benchmarks/attach_overhead.py --from-start [...]

--from-start measures each mode's own cost for comparison: the same server
started under `python -m pyprof MODE -o ...` against it started plainly (both
on this interpreter), one after the other, WINDOW s each, per round.
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
SERVERS = os.path.join(HERE, "..", "tests", "programs", "attach_servers.py")
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

    def rate(self, seconds, pid):
        """(requests per second, server CPU ms per request) over `seconds`."""
        d0, t0, c0 = self.done, time.monotonic(), cpu_seconds(pid)
        time.sleep(seconds)
        n = max(self.done - d0, 1)
        return n / (time.monotonic() - t0), (cpu_seconds(pid) - c0) * 1000 / n


def cpu_seconds(pid) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def attached_rate(counter, pid, args, window):
    proc = subprocess.Popen([sys.executable, "-m", "pyprof", "attach", str(pid),
                             "--duration", str(window + 1.0), *args, "-o",
                             "/tmp/pyprof-bench-attach.cprof"],
                            stderr=subprocess.PIPE, text=True)
    rate = None
    for line in proc.stderr:
        if rate is None and "attached to process" in line:
            time.sleep(0.25)                    # the mode settles (first calls, timers)
            rate = counter.rate(window, pid)
    proc.wait()
    if proc.returncode != 0 or rate is None:
        raise SystemExit(f"attach failed ({proc.returncode})")
    return rate


def start_server(prefix, portfile):
    server = subprocess.Popen([*prefix, SERVERS, "threaded", portfile],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(portfile):
        if server.poll() is not None:
            raise SystemExit(f"the server did not start: {prefix}")
        time.sleep(0.05)
    time.sleep(0.3)
    return server, int(open(portfile).read())


def measure(prefix, window):
    portfile = f"/tmp/pyprof-bench-{os.getpid()}.port"
    server, port = start_server(prefix, portfile)
    counter = Counter(port)
    try:
        counter.rate(1.0, server.pid)           # warm up
        return counter.rate(window, server.pid)
    finally:
        counter.stop.set()
        for t in counter.threads:               # their requests end before the server
            t.join(30)
        server.terminate()
        server.wait()
        os.unlink(portfile)


def from_start(opts, modes):
    ratios = {m: [] for m in modes}
    out = "/tmp/pyprof-bench-run.cprof"
    for r in range(opts.rounds):
        for m in modes:
            plain = measure([sys.executable], opts.window)
            profiled = measure([sys.executable, "-m", "pyprof", *MODES[m], "-o", out],
                               opts.window)
            ratios[m].append(profiled[1] / plain[1])
            print(f"round {r + 1} {m:20} CPU ms/req plain {plain[1]:5.2f} under pyprof "
                  f"{profiled[1]:5.2f}", flush=True)
    print()
    print("| mode | CPU/request, run under pyprof from the start / plain |")
    print("|---|---|")
    for m in modes:
        print(f"| {m} | {statistics.median(ratios[m]):.2f} |")
    if os.path.exists(out):
        os.unlink(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--from-start", action="store_true")
    opts = ap.parse_args()
    modes = opts.modes.split(",")
    if opts.from_start:
        from_start(opts, modes)
        return
    portfile = f"/tmp/pyprof-bench-{os.getpid()}.port"
    server = subprocess.Popen([BASE_PYTHON, SERVERS, "threaded", portfile],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(portfile):
            time.sleep(0.05)
        time.sleep(0.3)
        counter = Counter(int(open(portfile).read()))
        counter.rate(1.0, server.pid)           # warm up
        ratios = {m: ([], [], [], []) for m in modes}
        for r in range(opts.rounds):
            for m in modes:
                before = counter.rate(opts.window, server.pid)
                during = attached_rate(counter, server.pid, MODES[m], opts.window)
                time.sleep(0.5)                 # the detach completes
                after = counter.rate(opts.window, server.pid)
                for i, (a, b) in enumerate(((during, before), (after, before))):
                    ratios[m][i].append(a[0] / b[0])        # throughput
                    ratios[m][2 + i].append(a[1] / b[1])    # CPU per request
                print(f"round {r + 1} {m:20} req/s {before[0]:6.1f} {during[0]:6.1f} "
                      f"{after[0]:6.1f}   CPU ms/req {before[1]:5.2f} {during[1]:5.2f} "
                      f"{after[1]:5.2f}   (before, attached, after)", flush=True)
        counter.stop.set()
        for t in counter.threads:               # their requests end before the server
            t.join(30)
        print()
        print(f"median of {opts.rounds} rounds; {CLIENTS} clients, n={N}, windows of "
              f"{opts.window:g} s; failed requests: {counter.failed}")
        print()
        print(f"| mode | CPU/request attached/before | after/before | throughput "
              f"attached/before | after/before |")
        print("|---|---|---|---|---|")
        med = statistics.median
        for m in modes:
            t_in, t_out, c_in, c_out = ratios[m]
            print(f"| {m} | {med(c_in):.2f} | {med(c_out):.2f} | {med(t_in):.2f} | "
                  f"{med(t_out):.2f} |")
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
