"""Start-up cost of a child under `pyprof --children` (docs/children.md).

A parent run under `python -m pyprof --children` starts `python -c pass`
children with subprocess.run, timing each, alternately with the environment
the child inherits under --children (pyprof starts in it from sitecustomize
and writes its capture at exit) and without it (the same child, unprofiled).
A second series times os.fork children that exit at once through sys.exit
(the at-fork restart, the child's capture written at exit). Medians.

    python benchmarks/children_startup.py [N]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

PARENT = textwrap.dedent('''
    import json, os, subprocess, sys, time
    n = int(sys.argv[1])
    profiled = dict(os.environ)
    plain = {k: v for k, v in os.environ.items() if k != "PYPROF_CHILDREN"}
    plain["PYTHONPATH"] = os.pathsep.join(
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if "_boot" not in p)
    res = {"spawn_with": [], "spawn_without": [], "fork_with": [], "fork_without": []}
    for i in range(n):
        for key, env in (("spawn_with", profiled), ("spawn_without", plain)):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            res[key].append(time.perf_counter() - t)
    def fork_once():
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        return time.perf_counter() - t
    for i in range(n):
        res["fork_with"].append(fork_once())
    print(json.dumps(res))
''')

PLAIN_FORK = textwrap.dedent('''
    import json, os, sys, time
    res = []
    for i in range(int(sys.argv[1])):
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0) if False else sys.exit(0)
        os.waitpid(pid, 0)
        res.append(time.perf_counter() - t)
    print(json.dumps(res))
''')


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "parent.py")
        with open(prog, "w") as f:
            f.write(PARENT)
        out = subprocess.run([sys.executable, "-m", "pyprof", "--children", "-o",
                              os.path.join(d, "out.cprof"), prog, str(n)],
                             capture_output=True, text=True, check=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        plain = os.path.join(d, "plainfork.py")
        with open(plain, "w") as f:
            f.write(PLAIN_FORK)
        # the fork baseline: the same loop, under pyprof without --children
        out = subprocess.run([sys.executable, "-m", "pyprof", "-o", os.path.join(d, "p.cprof"),
                              plain, str(n)], capture_output=True, text=True, check=True).stdout
        res["fork_without"] = json.loads(out.strip().splitlines()[-1])
    med = {k: statistics.median(v) * 1e3 for k, v in res.items()}
    print(f"Python {sys.version.split()[0]}, {n} children each (median ms)")
    print(f"  subprocess python -c pass: {med['spawn_without']:.1f} ms unprofiled, "
          f"{med['spawn_with']:.1f} ms under --children "
          f"(+{med['spawn_with'] - med['spawn_without']:.1f} ms)")
    print(f"  os.fork + sys.exit:        {med['fork_without']:.2f} ms under pyprof, "
          f"{med['fork_with']:.2f} ms with --children "
          f"(+{med['fork_with'] - med['fork_without']:.2f} ms)")


if __name__ == "__main__":
    main()
