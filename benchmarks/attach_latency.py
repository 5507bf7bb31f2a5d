"""How long reaching a running process takes, and how long the target stops
(docs/attach.md, benchmarks/RESULTS.md "Attach: the way in").

For each target (started without pyprof by the repository's .venv/3.X/bin/python of
each CPython 3.11-3.13 built there, where pyprof is installed but not imported):
  - `pyprof attach PID --duration 0.2 --sample -v -o ...`: from the command's
    start to its "attached" line (the profile runs in the target: its first
    sample is one interval later), and the pause it reports (threads stopped
    while the call was written);
  - `py-spy dump --pid PID` (if --py-spy names it): the command's wall time;
  - `gdb -p PID -batch -ex detach` (if gdb is installed): gdb's attach and
    detach alone, with the symbols it reads — the least any gdb injection
    stops the target (its calls come on top; they fail on x86 hosts with AMX).
Targets: `ticking` (the main thread runs Python between 10 ms sleeps), `busy`
(a CPU-bound loop), `join` (the main thread joins a worker that runs Python:
on 3.11 the GIL's holder stands in for the main thread).

    python benchmarks/attach_latency.py [--rounds 5] [--py-spy PATH]
"""
import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

TARGETS = {
    "ticking": "import time\nprint('up', flush=True)\nwhile True:\n    sum(range(2000)); time.sleep(0.01)\n",
    "busy": "print('up', flush=True)\nwhile True:\n    sum(range(2000))\n",
    "join": ("import threading\nprint('up', flush=True)\n"
             "def w():\n    while True: sum(range(2000))\n"
             "t = threading.Thread(target=w, daemon=True); t.start(); t.join()\n"),
}


def pythons():
    venvs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv")
    found = [(os.path.basename(os.path.dirname(os.path.dirname(path))), path)
             for path in sorted(glob.glob(os.path.join(venvs, "3.1[123]", "bin", "python")))]
    return found or [(f"{sys.version_info[0]}.{sys.version_info[1]}", sys.executable)]


def timed(cmd, until=None):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL)
    lines, mark = [], None
    for line in p.stdout:
        lines.append(line)
        if until and mark is None and until in line:
            mark = time.monotonic() - t0
    p.wait()
    return (mark if until else time.monotonic() - t0), "".join(lines), p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--py-spy", default=shutil.which("py-spy"))
    args = ap.parse_args()
    gdb = shutil.which("gdb")
    print(f"pyprof client: CPython {sys.version.split()[0]}; rounds {args.rounds}")
    print("| target | CPython | attach → attached (ms) | target paused (ms) | py-spy dump (ms) "
          "| gdb attach+detach only (ms) |")
    print("|---|---|---|---|---|---|")
    for version, python in pythons():
        for name, code in TARGETS.items():
            p = subprocess.Popen([python, "-c", code], stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline() == "up\n"
            time.sleep(0.2)
            att, paused, spy, gd = [], [], [], []
            try:
                for _ in range(args.rounds):
                    t, out, rc = timed([sys.executable, "-m", "pyprof", "attach", str(p.pid),
                                        "--duration", "0.2", "--sample", "-v", "-o",
                                        "/tmp/attach-latency.cprof"], until="attached to")
                    if rc != 0 or t is None:
                        raise SystemExit(f"attach failed ({version} {name}):\n{out}")
                    att.append(t * 1e3)
                    m = re.search(r"stopped ([\d.]+) ms", out)
                    paused.append(float(m.group(1)))
                    if args.py_spy:
                        spy.append(timed([args.py_spy, "dump", "--pid", str(p.pid)])[0] * 1e3)
                    if gdb:
                        gd.append(timed([gdb, "-q", "-nx", "-batch", "-p", str(p.pid),
                                         "-ex", "detach"])[0] * 1e3)
            finally:
                p.kill()
                p.wait()
            med = lambda xs: f"{statistics.median(xs):.1f}" if xs else "-"  # noqa: E731
            print(f"| {name} | {version} | {med(att)} | {med(paused)} | {med(spy)} | {med(gd)} |",
                  flush=True)


if __name__ == "__main__":
    main()
