"""Per-step and per-run statistics (docs/steps.md): for each function (and line,
where the captures have line data), the mean, coefficient of variation,
standard deviation, minimum and maximum of chosen columns over the steps of
the captures (``by="step"``), over the captures themselves (``by="run"``) or
over the ranks of an MPI run (``by="rank"``, docs/mpi.md: the ranks' captures,
or merged captures whose processes carry their rank; with the rank that had
the minimum and the maximum) or over the processes of merged captures
(``by="process"``, docs/children.md: --children, pools; with the pid that had
the minimum and the maximum) or over the workers of a Dask job (``by="worker"``,
docs/clusters.md: the processes whose meta carries a Dask worker; with the
worker that had the minimum and the maximum).

Entities are aligned by key, not by the ids of one capture: a function by
(kind, file, qualified name), a line by (file, line). A step or run in which an
entity did not run counts as zero for it, except by process: the processes
of a program play different parts (the main process, its workers), so an
entity's statistics are over the processes that ran it (``n``).
"""
from __future__ import annotations

import csv
import math
import os
import re
import statistics

from . import views
from ..errors import PyprofError

STAT_NAMES = ("mean", "cv", "std", "min", "max")
BY = ("step", "run", "rank", "process", "worker")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# --by rank and process: which unit had the minimum and the maximum
LABELLED = {"rank": "rank", "process": "pid", "worker": "worker"}


def stat_names(by) -> tuple:
    tag = LABELLED.get(by)
    return STAT_NAMES + ((f"min_{tag}", f"max_{tag}") if tag else ())


def _entities(session, select, level, threads=None):
    """key -> {column: value} for one step, run or rank (`threads`: its
    threads in a merged capture, None: all)."""
    builder = views.op_nodes if level == "function" else views.line_nodes
    out = {}
    for node in builder(session, threads).values():
        if level == "function":
            # names of some callables carry an address, which differs per run
            key = (node.kind, node.file, _ADDRESS.sub("", node.name))
        else:
            key = ("line", node.file, node.line)
        row = {}
        for col in select:
            v = views.node_value(node, col)
            if v is not None:
                row[col] = v
        if row:
            out[key] = (node, row)
    return out


def default_columns(session) -> list:
    cols = []
    if session.info.get("sampling"):
        cols += ["samples", "time", "self-time"]
    elif session.fstats:
        cols += ["calls", "time", "self-time"]
    if session.info.get("memory"):
        cols += ["bytes", "net-bytes"]
    return cols


def collect(sessions, by="step", select=None, lines=True):
    """[(level, key, label, file, line, column, values, unit labels)] and the
    labels of the steps, runs, ranks or processes (in order), and warnings
    (keys that do not align)."""
    if by not in BY:
        raise PyprofError(f"--by {by!r}: choose step, run, rank, process or worker")
    if not sessions:
        raise PyprofError("no capture files given")
    select = list(select or default_columns(sessions[0][1]))
    for col in select:
        if col not in views.COLUMNS or views.COLUMNS[col][1] == "":
            raise PyprofError(f"unknown column {col!r} (choose from "
                              f"{', '.join(c for c in views.COLUMNS if views.COLUMNS[c][1])})")
    units = []          # (label, Session, threads or None) per step, run or rank
    warnings = []
    if by == "rank":
        units, warnings = rank_units(sessions)
    elif by == "process":
        units = process_units(sessions)
    elif by == "worker":
        units = worker_units(sessions)
    for path, s in sessions if by in ("step", "run") else ():
        if by == "step":
            if not s.steps:
                raise PyprofError(f"{path} has no steps (mark them with pyprof.step(), or "
                                  f"use --by run)")
            units += [(f"{os.path.basename(path)}:{st.label}", st.data, None) for st in s.steps]
        else:
            units.append((path, s, None))
    levels = ["function"] + (["line"] if lines and any(
        s.info.get("lines") or s.info.get("sampling") for _, s in sessions) else [])
    rows = []
    for level in levels:
        cols = [c for c in select if c in views.available_columns(units[0][1],
                                                            "op" if level == "function"
                                                            else "lines")]
        if not cols:
            if level == "function":
                raise PyprofError(f"none of the columns {', '.join(select)} is in these "
                                  f"captures")
            continue
        per_unit = [_entities(s, cols, level, threads) for _, s, threads in units]
        keys = {}
        for ents in per_unit:
            for key, (node, _) in ents.items():
                keys.setdefault(key, node)
        if by in ("run", "rank") and len(per_unit) > 1:
            partial = [k for k in keys if sum(k in e for e in per_unit) < len(per_unit)]
            if partial and level == "function":
                names = ", ".join(f"{k[2]} ({os.path.basename(k[1])})" if k[1] else k[2]
                                  for k in partial[:8])
                more = f" and {len(partial) - 8} more" if len(partial) > 8 else ""
                warnings.append(f"{len(partial)} of {len(keys)} functions are not in every "
                                f"{by} (counted as 0 where absent): {names}{more}")
        labels = [u[0] for u in units]
        for key, node in keys.items():
            for col in cols:
                if by == "process":     # over the processes that ran it
                    ran = [i for i, e in enumerate(per_unit) if key in e]
                    values = [per_unit[i][key][1].get(col, 0) for i in ran]
                    rows.append((level, key, node.name, node.file, node.line, col, values,
                                 [labels[i] for i in ran]))
                    continue
                values = [e[key][1].get(col, 0) if key in e else 0 for e in per_unit]
                rows.append((level, key, node.name, node.file, node.line, col, values, labels))
    progs = {(s.meta.get("argv") or ["?"])[0] for _, s in sessions}
    if len(progs) > 1:
        warnings.insert(0, f"the captures come from different programs ({', '.join(sorted(progs))})")
    return rows, [u[0] for u in units], warnings


def process_units(sessions):
    """[(pid, Session, threads)] for every process of the captures (a merged
    capture's processes; a plain capture is one process)."""
    units, seen = [], set()
    for path, s in sessions:
        for i, record in enumerate(s.processes):
            key = (record.get("host"), record.get("pid"), record.get("start_wall_ns"))
            if key in seen:
                raise PyprofError(f"process {record.get('pid')} is in {path} and in another "
                                  f"of the captures: it would count twice")
            seen.add(key)
            threads = s.process_threads(i) if "processes" in s.meta else None
            units.append((record.get("pid", i), s, threads))
    if len(units) < 2:
        raise PyprofError("--by process needs captures of several processes (run with "
                          "--children, or give several captures)")
    return units


def worker_units(sessions):
    """[(worker, Session, threads)] for every Dask or Ray worker process of
    the captures (meta["dask"]["worker"]: its address; meta["ray"]["worker"]:
    node id/pid), by name; the scheduler's process, and processes of no
    worker, are left out."""
    units, seen = [], {}
    for path, s in sessions:
        for i, record in enumerate(s.processes):
            address = ((record.get("dask") or {}).get("worker")
                       or (record.get("ray") or {}).get("worker")
                       or (record.get("spark") or {}).get("worker"))
            if not isinstance(address, str):
                continue
            if address in seen:
                raise PyprofError(f"worker {address} is in both {seen[address]} and {path} "
                                  f"(captures of two jobs?): give the captures of one job")
            seen[address] = path
            threads = s.process_threads(i) if "processes" in s.meta else None
            units.append((address, s, threads))
    if not units:
        raise PyprofError("--by worker needs a capture of Dask or Ray workers "
                          "(pyprof.dask.profile, pyprof.ray.profile: docs/clusters.md)")
    units.sort(key=lambda u: u[0])
    return units


def rank_units(sessions):
    """[(rank, Session, threads or None)] in rank order, and warnings: each
    process of the captures is put with its rank (meta["mpi"]); a rank's
    children (--children) count in it."""
    by_rank: dict = {}          # rank -> [(path, Session, process index)]
    sizes = set()
    for path, s in sessions:
        for i, record in enumerate(s.processes):
            mpi = record.get("mpi") or {}
            if not isinstance(mpi.get("rank"), int):
                raise PyprofError(
                    f"{path}: process {record.get('pid', i)} has no MPI rank (--by rank needs "
                    f"captures made under mpirun/mpiexec/srun: docs/mpi.md)")
            if mpi.get("size") is not None:
                sizes.add(mpi["size"])
            by_rank.setdefault(mpi["rank"], []).append((path, s, i))
    units = []
    for rank in sorted(by_rank):
        procs = by_rank[rank]
        files = sorted({path for path, _, _ in procs})
        if len(files) > 1:
            raise PyprofError(f"rank {rank} is in both {files[0]} and {files[1]} (captures of "
                              f"two runs?): give the files of one run")
        path, s, _ = procs[0]
        if len(s.processes) == len(procs):
            threads = None              # the whole capture is this rank
        else:
            threads = set().union(*(s.process_threads(i) for _, _, i in procs))
        units.append((rank, s, threads))
    warnings = []
    if len(sizes) > 1:
        warnings.append(f"the ranks come from runs of different sizes "
                        f"({', '.join(map(str, sorted(sizes)))})")
    elif sizes:
        missing = sorted(set(range(next(iter(sizes)))) - set(by_rank))
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            warnings.append(f"{len(missing)} of {next(iter(sizes))} ranks have no capture "
                            f"(ranks {shown}): the statistics are over the others")
    return units, warnings


def summarize(values, labels=None, tag="rank") -> dict:
    """mean, cv, std, min, max of `values`; with `labels` (one per value),
    also min_TAG and max_TAG: the label of the first minimum and maximum."""
    n = len(values)
    mean = sum(values) / n
    std = statistics.stdev(values) if n > 1 else 0.0
    out = {"mean": mean, "cv": std / mean if mean else (0.0 if not std else math.inf),
           "std": std, "min": min(values), "max": max(values)}
    if labels is not None:
        out[f"min_{tag}"] = labels[values.index(out["min"])]
        out[f"max_{tag}"] = labels[values.index(out["max"])]
    return out


def table(rows, units, order="time", by="step"):
    """One row per (level, entity) with the statistics of each column (by rank
    or process: also which unit had the minimum and the maximum)."""
    by_entity: dict = {}
    tag = LABELLED.get(by)
    for level, key, label, file, line, col, values, labels in rows:
        e = by_entity.setdefault((level, key), {"level": level, "name": label, "file": file,
                                                "line": line, "n": len(values)})
        for stat, v in summarize(values, labels if tag else None, tag or "rank").items():
            e[f"{col}_{stat}"] = v
    out = list(by_entity.values())
    sort_col = f"{order}_mean"
    out.sort(key=lambda e: (e["level"] != "function", -e.get(sort_col, 0), e["name"]))
    return out


def write_csv(entries, columns, out, stat_names=STAT_NAMES) -> None:
    w = csv.writer(out, lineterminator="\n")
    head = ["level", "name", "file", "line", "n"] + [f"{c}_{s}" for c in columns
                                                      for s in stat_names]
    w.writerow(head)
    for e in entries:
        w.writerow([e["level"], e["name"], e["file"], e["line"], e["n"]] +
                   [_csv_num(e.get(f"{c}_{s}")) for c in columns for s in stat_names])


def _csv_num(v):
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return repr(round(v, 12))
    return v
