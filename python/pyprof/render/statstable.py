"""`pyprof stats` as text: the table of means and coefficients of variation,
or CSV (the statistics are analysis/stats.py's)."""
from __future__ import annotations

import io
import math
import os
import sys

from ..analysis.stats import LABELLED, collect, stat_names, table, write_csv
from ..analysis.views import COLUMNS
from ..base.files import atomic_write
from ..model.session import Session
from .units import format_bytes, format_time


def write_text(entries, columns, units, by, out, limit=30) -> None:
    tag = LABELLED.get(by)
    mark = {"rank": "r", "pid": "pid "}.get(tag, "")
    where = {"rank": "; min and max with their rank (rN)",
             "pid": "; over the processes that ran it (n), min and max with their pid",
             "worker": "; min and max with their worker"}
    plural = "processes" if by == "process" else f"{by}s"
    out.write(f"{len(units)} {plural}; "
              f"mean and coefficient of variation (std/mean) per function"
              f"{where.get(tag, '')}\n\n")
    heads = []
    for c in columns:
        heads += [f"{COLUMNS[c][0]} mean", "cv"] + (["min", "max"] if tag else [])
    if by == "process":
        heads.insert(0, "n")
    rows = []
    for e in [e for e in entries if e["level"] == "function"][:limit]:
        cells = []
        for c in columns:
            m = e.get(f"{c}_mean")
            cv = e.get(f"{c}_cv")
            cells.append("" if m is None else _fmt(c, m))
            cells.append("" if cv is None else ("inf" if math.isinf(cv) else f"{cv:.1%}"))
            if tag:
                for stat in ("min", "max"):
                    v = e.get(f"{c}_{stat}")
                    who = str(e.get(f'{c}_{stat}_{tag}'))
                    if tag == "worker":
                        who = who.split("://", 1)[-1]
                    cells.append("" if v is None else f"{_fmt(c, v)} ({mark}{who})")
        if by == "process":
            cells.insert(0, str(e["n"]))
        where = f" ({os.path.basename(e['file'])}:{e['line']})" if e["file"] else ""
        rows.append((cells, e["name"] + where))
    widths = [max([len(h)] + [len(r[0][i]) for r in rows]) for i, h in enumerate(heads)]
    out.write("  ".join(h.rjust(w) for h, w in zip(heads, widths)) + "  function\n")
    for cells, name in rows:
        out.write("  ".join(c.rjust(w) for c, w in zip(cells, widths)) + "  " + name + "\n")


def _fmt(col, v):
    unit = COLUMNS[col][1]
    if unit == "s":
        return format_time(v)
    if unit == "B":
        return format_bytes(v)
    return f"{v:,.2f}" if isinstance(v, float) and v != int(v) else f"{int(v):,}"


def run(paths, by="step", select=None, csv_path=None, lines=True, out=None) -> int:
    out = out or sys.stdout
    sessions = [(p, Session.load(p)) for p in paths]
    rows, units, warnings = collect(sessions, by, select, lines)
    for w in warnings:
        print(f"pyprof: warning: {w}", file=sys.stderr)
    columns = list(dict.fromkeys(r[5] for r in rows))
    order = "time" if "time" in columns or not columns else columns[0]
    entries = table(rows, units, order, by)
    if csv_path:
        buf = io.StringIO()
        write_csv(entries, columns, buf, stat_names(by))
        if csv_path == "-":
            out.write(buf.getvalue())
        else:
            atomic_write(csv_path, buf.getvalue())
    else:
        write_text(entries, columns, units, by, out)
    return 0
