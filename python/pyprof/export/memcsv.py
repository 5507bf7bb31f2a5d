"""Memory per line as CSV (docs/memory.md): one row per (function, line), bytes
and blocks; sites not on a Python line get one row per reason."""
from __future__ import annotations

import csv
import io

from ..files import atomic_write

COLUMNS = ("file", "function", "line", "site", "allocated_bytes", "allocated_blocks",
           "freed_bytes", "freed_blocks", "net_bytes", "peak_bytes", "at_peak_bytes")


def render(session) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    rows = []
    for (fid, line, kind), c in session.memory.items():
        fn = session.functions.get(fid)
        rows.append((fn.filename if fn else "", fn.qualname if fn else "", line if fn else "",
                     kind, c.alloc_bytes, c.alloc_count, c.free_bytes, c.free_count,
                     c.net_bytes, c.peak_bytes, c.at_peak_bytes))
    rows.sort(key=lambda r: -r[4])
    w.writerows(rows)
    return buf.getvalue()


def write(session, path):
    atomic_write(path, render(session))
