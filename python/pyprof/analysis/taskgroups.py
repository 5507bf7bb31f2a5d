"""`pyprof tasks` (docs/clusters.md): the tasks of a Dask or Ray job by task
group (Dask: key prefix; Ray: function, or Class.method), from the per-group
figures each worker's capture keeps in meta["dask"]["tasks"] (pyprof.dask) or
meta["ray"]["tasks"] (pyprof.ray): count, wall time (total, mean, coefficient
of variation, min, max) and thread CPU time."""
from __future__ import annotations

import csv
import io
import json
import math

from ..errors import PyprofError

COLUMNS = ("group", "count", "total_s", "mean_s", "cv", "min_s", "max_s", "cpu_s")
HEADS = ("task group", "count", "total (s)", "mean (s)", "cv", "min (s)", "max (s)", "cpu (s)")


def task_figures(session, source="capture") -> dict:
    """prefix -> summed figures over the capture's workers (each process's
    record; a single worker's capture: its meta)."""
    out: dict = {}
    found = False
    for record in session.processes:
        for cluster in ("dask", "ray"):
            tasks = (record.get(cluster) or {}).get("tasks")
            if isinstance(tasks, dict):
                found = True
                add_tasks(out, tasks)
    if not found:
        raise PyprofError(f"{source} has no Dask or Ray tasks (profile the job with "
                          f"pyprof.dask.profile or pyprof.ray.profile: docs/clusters.md)")
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
    return into


def rows(figures) -> list:
    """One dict per task group (COLUMNS, plus erred), by total time, largest first."""
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
                    "cpu_s": t["cpu_ns"] / 1e9, "erred": t.get("erred", 0)})
    out.sort(key=lambda r: (-r["total_s"], r["group"]))
    return out


def render(table, fmt) -> str:
    if fmt == "json":
        return json.dumps({"tasks": table}, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in table:
            w.writerow([r["group"], r["count"]] + [repr(round(r[c], 9)) for c in COLUMNS[2:]])
        return buf.getvalue()
    cells = [[r["group"], f"{r['count']:,}", f"{r['total_s']:.6f}", f"{r['mean_s']:.6f}",
              f"{r['cv']:.1%}", f"{r['min_s']:.6f}", f"{r['max_s']:.6f}", f"{r['cpu_s']:.6f}"]
             for r in table]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(HEADS)]

    def line(values):
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip() + "\n"
    return line(HEADS) + "".join(line(c) for c in cells)
