"""Memory per line as CSV (docs/memory.md): one row per (function, line), bytes
and blocks; sites not on a Python line get one row per reason. The first
columns are the line's own blocks; the ``inclusive_*`` columns (line targets,
line mode with memory) what its thread allocated and freed while the line ran,
callees included, and are empty elsewhere; the ``native_*`` columns (of the
line's own blocks, those C code allocated: --native-allocs) and ``temporary_*``
(--temporary) are empty when not recorded."""
from __future__ import annotations

import csv
import io

from ..base.files import atomic_write
from ..model.tables import MemExtra

COLUMNS = ("file", "function", "line", "site", "allocated_bytes", "allocated_blocks",
           "freed_bytes", "freed_blocks", "net_bytes", "peak_bytes", "at_peak_bytes",
           "inclusive_allocated_bytes", "inclusive_allocated_blocks", "inclusive_net_bytes",
           "inclusive_peak_bytes", "native_allocated_bytes", "native_allocated_blocks",
           "native_net_bytes", "temporary_bytes", "temporary_blocks")


def render(session) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    inclusive = session.line_memory_totals()
    mem = session.info.get("memory") or {}
    native, temporary = mem.get("native_allocs"), mem.get("temporary")
    zero = MemExtra()

    def extra(key):
        e = session.memory_ext.get(key, zero)
        return ((e.native_alloc_bytes, e.native_alloc_count, e.native_net_bytes) if native
                else ("", "", "")) + ((e.temp_bytes, e.temp_count) if temporary else ("", ""))

    rows = []
    for (fid, line, kind), c in session.memory.items():
        fn = session.functions.get(fid)
        i = inclusive.pop((fid, line), None) if kind == "line" else None
        rows.append((fn.filename if fn else "", fn.qualname if fn else "", line if fn else "",
                     kind, c.alloc_bytes, c.alloc_count, c.free_bytes, c.free_count,
                     c.net_bytes, c.peak_bytes, c.at_peak_bytes,
                     *((i.alloc_bytes, i.alloc_count, i.net_bytes, i.peak_bytes) if i
                       else ("", "", "", "")), *extra((fid, line, kind))))
    for (fid, line), i in inclusive.items():      # lines that allocated nothing themselves
        fn = session.functions[fid]
        rows.append((fn.filename, fn.qualname, line, "line", 0, 0, 0, 0, 0, 0, 0,
                     i.alloc_bytes, i.alloc_count, i.net_bytes, i.peak_bytes,
                     *extra((fid, line, "line"))))
    rows.sort(key=lambda r: (-max(r[4], r[11] or 0), r[0], r[2]))
    w.writerows(rows)
    return buf.getvalue()


def write(session, path):
    atomic_write(path, render(session))
