"""The pytest plugin's summary (docs/pytest.md): the slowest tests and the
most allocating ones, each with what used its time or memory most. Rows are
the plugin's per-test records (plain data: they travel from pytest-xdist's
workers in the reports' user_properties)."""
from __future__ import annotations

import os

from .units import byte_unit, format_time


def _t(seconds) -> str:
    return format_time(seconds, digits=(3, 1, 0, 0), sep=" ")


def _b(n) -> str:
    name, size = byte_unit(n, "GiB")
    return f"{n / size:.1f} {name}" if size > 1 else f"{n} B"


def _where(name, file, line) -> str:
    return f"{name} {os.path.basename(file)}:{line}" if file and file != "~" else name


def summary_lines(rows, mode, scope, top, directory, session_capture=None):
    """(title, lines) of the summary."""
    n = len(rows)
    title = f"pyprof: {n} test{'s' if n != 1 else ''} profiled ({mode or 'budgets'}"
    title += ", one capture for the session)" if scope == "session" else ")"
    out = []
    timed = sorted((r for r in rows if r.get("wall") is not None), key=lambda r: -r["wall"])
    if timed:
        out.append("slowest tests (wall time of the call; top functions by self time):")
        for r in timed[:top]:
            tops = ", ".join(f"{_where(*f[:3])} {_t(f[3])}" for f in r.get("top", [])[:3])
            out.append(f"  {_t(r['wall']):>10}  {r['nodeid']}" + (f"  [{tops}]" if tops else ""))
    mem = sorted((r for r in rows if r.get("peak") is not None), key=lambda r: -r["peak"])
    if mem:
        out.append("most allocating tests (peak traced bytes; lines live at the peak):")
        for r in mem[:top]:
            tops = ", ".join(f"{_where(*f[:3])} {_b(f[3])}" for f in r.get("top_memory", [])[:3])
            out.append(f"  {_b(r['peak']):>10}  {r['nodeid']}" + (f"  [{tops}]" if tops else ""))
    over = [r for r in rows if r.get("over")]
    if over:
        out.append(f"over budget: {len(over)} test{'s' if len(over) != 1 else ''}")
    if session_capture:
        out.append(f"capture: {session_capture} (a step per test: pyprof stats "
                   f"{session_capture})")
    elif any(r.get("capture") for r in rows):
        out.append(f"captures: {directory}{os.sep} (pyprof view FILE.cprof, pyprof convert "
                   f"FILE.cprof -o FILE.html)")
    return title, out
