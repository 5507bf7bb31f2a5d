"""Wall sampling's accuracy where a thread moves from one blocking call to another.

The main thread alternates two waits of D seconds each, N times: a queue get
that a Timer thread ends, then an event wait that times out, each call in a
function of its own (q_0, e_0, q_1, ...). The time each function was charged
is compared with the time it took (time.monotonic around the call):

- bias: the sum over the queue calls of charged - took, and over the event
  calls (a move charged early or late shows as + on one kind, - on the other);
- error: the mean over all calls of |charged - took|, in ms.

Each round is a fresh process; the medians over the rounds are printed.

    python benchmarks/wall_transitions.py --python .venv/3.12/bin/python [--rounds 5]
"""
import argparse
import json
import statistics
import subprocess
import sys

PROGRAM = r'''
import json, queue, sys, threading, time
import pyprof
n, d, rate = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
ns = {}
exec(compile("".join(f"def q_{i}(q):\n    return q.get(timeout=5)\n"
                     f"def e_{i}(ev):\n    return ev.wait({d})\n" for i in range(n)), "gen", "exec"), ns)
p = pyprof.Profile(mode="sample", wall=True, rate=rate)
p.enable()
took = {}
for i in range(n):
    q = queue.Queue()
    threading.Timer(d, q.put, (1,)).start()
    t0 = time.monotonic(); ns[f"q_{i}"](q); t1 = time.monotonic()
    ns[f"e_{i}"](threading.Event()); t2 = time.monotonic()
    took[f"q_{i}"], took[f"e_{i}"] = t1 - t0, t2 - t1
p.disable()
s = p.session()
charged = dict.fromkeys(took, 0.0)
for (t, sid, st), c in s.samples.items():
    for f, _ in s.stacks[sid].frames:
        if s.functions[f].name in took:
            charged[s.functions[f].name] += c.weight / 1e9
print(json.dumps({"took": took, "charged": charged}))
'''


def one_round(python, n, d, rate):
    r = subprocess.run([python, "-c", PROGRAM, str(n), str(d), str(rate)],
                       capture_output=True, text=True, timeout=60 + 4 * n * d)
    if r.returncode != 0:
        sys.exit(f"wall_transitions: the program failed: {r.stderr.strip().splitlines()[-1:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    took, charged = out["took"], out["charged"]
    bias = {k: sum(charged[f] - took[f] for f in took if f[0] == k) for k in "qe"}
    err = statistics.mean(abs(charged[f] - took[f]) for f in took)
    return bias["q"], bias["e"], err, sum(took.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=60, help="pairs of waits per round")
    ap.add_argument("--seconds", type=float, default=0.05, help="each wait's length")
    ap.add_argument("--rate", type=int, default=1000)
    a = ap.parse_args()
    rows = [one_round(a.python, a.calls, a.seconds, a.rate) for _ in range(a.rounds)]
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"{a.calls} x ({a.seconds * 1000:.0f} ms queue + {a.seconds * 1000:.0f} ms event), "
          f"{a.rate} Hz, {a.rounds} rounds (medians)")
    print(f"  queue calls: charged - took = {med[0]:+.3f} s of {med[3] / 2:.2f} s "
          f"({100 * med[0] / (med[3] / 2):+.1f} %)")
    print(f"  event calls: charged - took = {med[1]:+.3f} s ({100 * med[1] / (med[3] / 2):+.1f} %)")
    print(f"  mean |charged - took| per call: {med[2] * 1000:.2f} ms")


if __name__ == "__main__":
    main()
