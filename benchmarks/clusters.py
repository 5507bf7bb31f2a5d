"""What profiling a cluster job costs (docs/clusters.md): Dask, Ray and Spark
jobs, unprofiled and under pyprof.<engine>.profile, side by side.

    python benchmarks/clusters.py [--engines dask,ray,spark] [--rounds 5]

Per engine, two jobs: "small" (many short tasks: scheduling-bound) and "large"
(few tasks of a pure-Python loop: CPU-bound). Each round runs, back to back and
in an order that alternates, the job unprofiled, with `cProfile` run inside
each task (the per-task profiling engines' own hooks offer: Spark's
spark.python.profile, Dask and Ray by hand), under the engine's own profiler
("own": Dask's statistical profiler, distributed.worker.profile at 10 ms, on a
second cluster; Ray: `py-spy record` attached to each worker process, what
Ray's dashboard runs, when py-spy is found next to this Python or on PATH;
Spark: spark.python.profile=true, cProfile in every worker), and under pyprof's
sample and function modes. Dask's profiler is off in the other variants' cluster.
Reported per variant: the median over rounds of the ratio of its wall time to
the unprofiled run of the same round ("job": the job's own calls; "block": the
whole `with` block, gathering and merging included; for Spark both include the
session's start and stop, which the block does).

Each engine runs in a subprocess of its own (one cluster or JVM each); the
machine is shared and noisy: read the ratios, not the seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ task code
def small(i):
    return i + 1


def large(i):
    x = 0
    for k in range(1_500_000):
        x += k * k
    return x


def with_cprofile(f):
    def run(*args):
        import cProfile
        p = cProfile.Profile()
        try:
            return p.runcall(f, *args)
        finally:
            p.create_stats()
    run.__name__ = f.__name__
    return run


def worker_pid():
    return os.getpid()


JOBS = {"small": (small, 2000), "large": (large, 16)}
VARIANTS = ("plain", "cprofile", "own", "sample", "function")


# ------------------------------------------------------------------ engines
def dask_rounds(rounds):
    import dask
    import distributed
    import pyprof.dask
    out = []

    def cluster(profiler):
        with dask.config.set({"distributed.worker.profile.enabled": profiler}):
            return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                            dashboard_address=None, host="127.0.0.1")

    with cluster(False) as quiet, distributed.Client(quiet) as client, \
            cluster(True) as profiled, distributed.Client(profiled) as own:
        client.wait_for_workers(2)
        own.wait_for_workers(2)

        def job(c, f, n):
            c.gather(c.map(f, range(n), pure=False))

        for r in range(rounds):
            for name, (f, n) in JOBS.items():
                job(client, f, min(n, 50))              # warm
                job(own, f, min(n, 50))
                order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                for v in order:
                    out.append(_timed(v, name, lambda g=f: job(client, g, n),
                                      lambda g=f: job(client, with_cprofile(g), n),
                                      lambda g=f: job(own, g, n),
                                      lambda mode: pyprof.dask.profile(client, mode=mode)))
    return out


def py_spy():
    """py-spy next to this Python, or on PATH (None: not installed)."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def ray_rounds(rounds):
    import ray
    import pyprof.ray
    pyprof.ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    remote = {name: ray.remote(f) for name, (f, _) in JOBS.items()}
    cremote = {name: ray.remote(with_cprofile(f)) for name, (f, _) in JOBS.items()}
    spy = py_spy()
    out = []
    try:
        def job(fn, n):
            ray.get([fn.remote(i) for i in range(n)])

        def spied(fn, n):
            """The job with `py-spy record` (its defaults: 100 Hz, pausing the
            process per sample) on every worker that runs the job's tasks."""
            pids = set(ray.get([getpid.remote() for _ in range(200)]))
            spies = [subprocess.Popen([spy, "record", "--pid", str(pid), "--output", os.devnull,
                                       "--format", "raw"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for pid in pids]
            time.sleep(0.5)                             # attached
            try:
                t0 = time.perf_counter()
                job(fn, n)
                return time.perf_counter() - t0
            finally:
                for s in spies:
                    s.send_signal(signal.SIGINT)
                for s in spies:
                    s.wait()

        getpid = ray.remote(worker_pid)
        variants = VARIANTS if spy else tuple(v for v in VARIANTS if v != "own")
        for r in range(rounds):
            for name, (f, n) in JOBS.items():
                n = min(n, 1000)                        # Ray's tasks cost ~ms each
                job(remote[name], min(n, 50))
                order = variants if r % 2 == 0 else variants[::-1]
                for v in order:
                    out.append(_timed(v, name, lambda nm=name: job(remote[nm], n),
                                      lambda nm=name: job(cremote[nm], n),
                                      lambda nm=name: spied(remote[nm], n),
                                      lambda mode: pyprof.ray.profile(mode=mode)))
    finally:
        ray.shutdown()
    return out


def spark_rounds(rounds):
    import pyprof.spark
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, HERE)
    from clusters import JOBS as jobs, with_cprofile as wrap   # pickled by reference

    def builder():
        return (SparkSession.builder.master("local[2]").appName("pyprof-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1"))

    def job(spark, f, n):
        parts = 200 if n > 100 else n                   # small: 200 tasks; large: one each
        spark.sparkContext.parallelize(range(n), parts).map(f).count()

    out = []
    for r in range(rounds):
        for name, (f, n) in jobs.items():
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for v in order:
                t0 = time.perf_counter()
                if v in ("plain", "cprofile", "own"):
                    b = builder()
                    if v == "own":
                        b = b.config("spark.python.profile", "true")
                    spark = b.getOrCreate()
                    job(spark, f, 8)                    # the workers' first imports
                    t1 = time.perf_counter()
                    job(spark, wrap(f) if v == "cprofile" else f, n)
                    t2 = time.perf_counter()
                    spark.stop()
                else:
                    with pyprof.spark.profile(builder(), mode=v) as spark:
                        job(spark, f, 8)
                        t1 = time.perf_counter()
                        job(spark, f, n)
                        t2 = time.perf_counter()
                t3 = time.perf_counter()
                out.append({"variant": v, "job": name, "job_s": t2 - t1, "block_s": t3 - t0})
    return out


def _timed(variant, name, plain, cprofiled, own, profile):
    """The job's wall time (inside the block) and the whole block's. py-spy's
    attaching is outside the job's time: only its sampling is in it."""
    t0 = time.perf_counter()
    if variant in ("plain", "cprofile", "own"):
        inside = {"plain": plain, "cprofile": cprofiled, "own": own}[variant]()
        t2 = time.perf_counter()
        return {"variant": variant, "job": name, "job_s": inside or t2 - t0,
                "block_s": t2 - t0}
    with profile(variant):
        t1 = time.perf_counter()
        plain()
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return {"variant": variant, "job": name, "job_s": t2 - t1, "block_s": t3 - t0}


ENGINES = {"dask": dask_rounds, "ray": ray_rounds, "spark": spark_rounds}


# ------------------------------------------------------------------ report
def ratios(records, rounds):
    """(job, variant) -> (median job ratio, median block ratio, plain median s)."""
    out = {}
    for name in JOBS:
        rows = [r for r in records if r["job"] == name]
        plain = [r for r in rows if r["variant"] == "plain"]
        for v in VARIANTS[1:]:
            mine = [r for r in rows if r["variant"] == v]
            if not mine:
                continue
            pairs = list(zip(plain, mine))
            out[name, v] = (statistics.median(m["job_s"] / p["job_s"] for p, m in pairs),
                            statistics.median(m["block_s"] / p["block_s"] for p, m in pairs),
                            statistics.median(p["block_s"] for p in plain))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", default="dask,ray,spark")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        result = json.dumps(ENGINES[a.child](a.rounds))
        print("RESULT " + result, flush=True)       # spark.python.profile prints at exit
        return
    for engine in a.engines.split(","):
        r = subprocess.run([sys.executable, __file__, "--child", engine, "--rounds",
                            str(a.rounds)], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{engine}: failed\n{r.stderr[-3000:]}", file=sys.stderr)
            continue
        records = json.loads(next(line for line in r.stdout.splitlines()
                                  if line.startswith("RESULT "))[len("RESULT "):])
        print(f"\n{engine} ({a.rounds} rounds; ratios to the unprofiled run, medians)")
        print(f"{'job':6} {'variant':9} {'job':>7} {'block':>7}   unprofiled")
        for (name, v), (job, block, base) in ratios(records, a.rounds).items():
            print(f"{name:6} {v:9} {job:7.3f} {block:7.3f}   {base:.2f} s")


if __name__ == "__main__":
    main()
