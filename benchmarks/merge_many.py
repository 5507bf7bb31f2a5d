"""Merging many worker captures, as the cluster integrations do (pyprof.dask,
pyprof.ray, pyprof.spark: integrations/clusters.py merge_sessions): time to
load N .cprof files, to merge them (one process per worker) and to save the
merged Session.

    python benchmarks/merge_many.py [-n 64] [--rounds 5] [--bases 4] [--keep DIR]

The captures are real ones: --bases subprocesses each run a small Dask job
(distributed's scheduler and worker in-process, dask.bag tasks) under
pyprof.Profile, the first half with function tracing, the others sampling
(wall clock, 2 kHz); their sizes differ (more rounds per base). Each of the
N inputs is one of those bases re-saved as another worker (its own pid, host
and start time, its function ids shuffled as two workers number them
differently): the merge sees N distinct processes running the same code, as
on a cluster. Prints the median of --rounds of each phase (the machine is noisy).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

WORKER = textwrap.dedent("""
    import sys
    import pyprof
    import dask.bag as db
    from distributed import Client, LocalCluster

    mode, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def work(x):
        return sum(i * x for i in range(200))

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        kw = {"mode": mode}
        if mode == "sample":
            kw.update(rate=2000, wall=True)
        with pyprof.Profile(**kw) as p:
            for r in range(2 + seed * (8 if mode == "sample" else 1)):
                db.from_sequence(range(200 + 50 * seed), npartitions=8).map(work) \\
                    .filter(lambda v: v % 3).sum().compute()
                client.submit(work, r).result()
        p.dump(out)
""")


def make_captures(directory, n, bases):
    """N capture files in `directory`: `bases` real ones, each re-saved as
    several workers."""
    from pyprof.model.session import Session
    script = os.path.join(directory, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    base_paths = []
    for b in range(bases):
        mode = "sample" if b >= (bases + 1) // 2 else "trace"
        path = os.path.join(directory, f"base{b}.cprof")
        subprocess.run([sys.executable, script, mode, path, str(b)], check=True)
        base_paths.append(path)
    paths = []
    rng = random.Random(1)
    for i in range(n):
        s = renumbered(Session.load(base_paths[i % bases]), rng)
        s.meta["pid"] = 10_000 + i
        s.meta["host"] = f"worker-{i // 8}"
        s.info["start_wall_ns"] = int(s.info["start_wall_ns"]) + i * 1_000_000
        path = os.path.join(directory, f"worker{i}.cprof")
        s.save(path)
        paths.append(path)
    return paths


def renumbered(session, rng):
    """`session` with its function ids shuffled: each worker numbers the
    functions in the order it first calls them, so two workers' ids differ
    (merged alone, a Session's functions get new ids in its dict's order)."""
    from pyprof.analysis.merge import merge
    order = list(session.functions.items())
    rng.shuffle(order)
    session.functions = dict(order)
    out = merge([session])
    for key in ("processes", "thread_process"):
        out.meta.pop(key, None)
    return out


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=64, help="worker captures (64)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bases", type=int, default=4, help="distinct captures made (4)")
    ap.add_argument("--keep", help="make (or reuse) the captures in this directory")
    ap.add_argument("--profile", choices=("load", "merge", "save"),
                    help="run cProfile over one phase instead and print its top entries")
    args = ap.parse_args(argv)

    from pyprof.analysis.merge import merge
    from pyprof.model.session import Session

    directory = args.keep or tempfile.mkdtemp(prefix="pyprof-merge-many-")
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"worker{i}.cprof") for i in range(args.n)]
    if not all(os.path.exists(p) for p in paths):
        paths = make_captures(directory, args.n, args.bases)
    sizes = [os.path.getsize(p) for p in paths]
    first = Session.load(paths[0])
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.n} captures, "
          f"{min(sizes) / 1e3:.0f}-{max(sizes) / 1e3:.0f} KB each "
          f"(mean {statistics.mean(sizes) / 1e3:.0f} KB); the first has "
          f"{len(first.functions)} functions, {len(first.edges)} edges, {len(first.paths)} paths")

    def load():
        return [Session.load(p) for p in paths]

    def merged(sessions):
        return merge(sessions, force=True, sources=paths)

    out_path = os.path.join(directory, "merged.cprof")
    if args.profile:
        import cProfile
        import pstats
        sessions = load()
        m = merged(sessions)
        f = {"load": load, "merge": lambda: merged(sessions),
             "save": lambda: m.save(out_path)}[args.profile]
        prof = cProfile.Profile()
        prof.runcall(f)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return

    loads, merges, saves = [], [], []
    for _ in range(args.rounds):
        t_load, sessions = timed(load)
        t_merge, m = timed(lambda: merged(sessions))
        t_save, _ = timed(lambda: m.save(out_path))
        loads.append(t_load)
        merges.append(t_merge)
        saves.append(t_save)
        del sessions, m
    med = statistics.median
    print(f"load  {med(loads):6.3f} s  (min {min(loads):.3f}, max {max(loads):.3f})")
    print(f"merge {med(merges):6.3f} s  (min {min(merges):.3f}, max {max(merges):.3f})")
    print(f"load+merge {med([a + b for a, b in zip(loads, merges)]):6.3f} s")
    print(f"save  {med(saves):6.3f} s  (min {min(saves):.3f}, max {max(saves):.3f}); "
          f"merged file {os.path.getsize(out_path) / 1e6:.1f} MB")
    if not args.keep:
        import shutil
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
