"""`pyprof tasks`'s table (docs/clusters.md): the rows of analysis/taskgroups.py
as text, CSV or JSON."""
from __future__ import annotations

import csv
import io
import json

from ..analysis.taskgroups import COLUMNS, TIMES
from .units import format_bytes

HEADS = ("task group", "count", "total (s)", "mean (s)", "cv", "min (s)", "max (s)", "cpu (s)",
         "peak", "mean peak")


def render(table, fmt) -> str:
    if fmt == "json":
        return json.dumps({"tasks": table}, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in table:
            w.writerow([r["group"], r["count"]]
                       + [repr(round(r[c], 9)) for c in COLUMNS[2:2 + TIMES]]
                       + ["" if r[c] is None else round(r[c]) for c in COLUMNS[2 + TIMES:]])
        return buf.getvalue()
    memory = any(r["peak_bytes"] is not None for r in table)
    heads = HEADS if memory else HEADS[:2 + TIMES]
    cells = [[r["group"], f"{r['count']:,}", f"{r['total_s']:.6f}", f"{r['mean_s']:.6f}",
              f"{r['cv']:.1%}", f"{r['min_s']:.6f}", f"{r['max_s']:.6f}", f"{r['cpu_s']:.6f}"]
             + ([format_bytes(r[c]) if r[c] is not None else "-"
                 for c in COLUMNS[2 + TIMES:]] if memory else [])
             for r in table]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]

    def line(values):
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip() + "\n"
    return line(heads) + "".join(line(c) for c in cells)
