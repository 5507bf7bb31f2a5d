"""`pyprof tasks` (docs/clusters.md; the table: render/tasktable.py): the tasks of a Dask, Ray or Spark job by
task group (Dask: key prefix; Ray: function, or Class.method; Spark: the RDD
function or UDF), from the per-group figures each worker's capture keeps in
meta["dask" | "ray" | "spark"]["tasks"]: count, wall time (total, mean, coefficient
of variation, min, max), thread CPU time and, in exact memory mode, the most
traced bytes live above a task's start (its peak), largest and mean."""
from __future__ import annotations

import math

from ..errors import PyprofError

COLUMNS = ("group", "count", "total_s", "mean_s", "cv", "min_s", "max_s", "cpu_s",
           "peak_bytes", "mean_peak_bytes")
TIMES = 6           # COLUMNS[2:8] are seconds


def task_figures(session, source="capture") -> dict:
    """prefix -> summed figures over the capture's workers (each process's
    record; a single worker's capture: its meta)."""
    out: dict = {}
    found = False
    for record in session.processes:
        for cluster in ("dask", "ray", "spark"):
            tasks = (record.get(cluster) or {}).get("tasks")
            if isinstance(tasks, dict):
                found = True
                add_tasks(out, tasks)
    if not found:
        raise PyprofError(f"{source} has no Dask, Ray or Spark tasks (profile the job with "
                          f"pyprof.dask, pyprof.ray or pyprof.spark: docs/clusters.md)")
    return out


def add_tasks(into, tasks) -> dict:
    """Adds one worker's per-group figures (meta["dask" or "ray"]["tasks"]) into `into`."""
    for prefix, t in tasks.items():
        mine = into.get(prefix)
        if mine is None:
            into[prefix] = dict(t)
            continue
        for k in ("count", "erred", "total_ns", "cpu_ns", "sum_sq_ns2"):
            mine[k] = mine.get(k, 0) + t.get(k, 0)
        mine["min_ns"] = min(mine["min_ns"], t["min_ns"])
        mine["max_ns"] = max(mine["max_ns"], t["max_ns"])
        if "peak_bytes" in t:
            mine["peak_bytes"] = max(mine.get("peak_bytes", 0), t["peak_bytes"])
            mine["peak_sum_bytes"] = mine.get("peak_sum_bytes", 0) + t.get("peak_sum_bytes", 0)
    return into


def rows(figures) -> list:
    """One dict per task group (COLUMNS, plus erred), by total time, largest first;
    the peaks are None without exact memory mode."""
    out = []
    for prefix, t in figures.items():
        n, total = t["count"], t["total_ns"]
        if n > 1:       # sample variance from exact integer sums (ns, ns^2)
            var = max(0, n * t["sum_sq_ns2"] - total * total) / (n * (n - 1))
        else:
            var = 0
        mean = total / n if n else 0.0
        out.append({"group": prefix, "count": n, "total_s": total / 1e9,
                    "mean_s": mean / 1e9, "cv": math.sqrt(var) / mean if mean else 0.0,
                    "min_s": t["min_ns"] / 1e9, "max_s": t["max_ns"] / 1e9,
                    "cpu_s": t["cpu_ns"] / 1e9, "erred": t.get("erred", 0),
                    "peak_bytes": t.get("peak_bytes"),
                    "mean_peak_bytes": t["peak_sum_bytes"] / n if "peak_bytes" in t and n else None})
    out.sort(key=lambda r: (-r["total_s"], r["group"]))
    return out
