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


_PYPROF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness(name, file) -> bool:
    """The summary's one rule for what is not the test's: pytest's, pluggy's
    and pyprof's own functions and lines, left out of every list."""
    if "pyprof._cprof" in (name or ""):
        return True
    if not file or file.startswith("<"):
        return False
    path = os.path.abspath(file)
    parts = path.split(os.sep)
    return "_pytest" in parts or "pluggy" in parts or \
        os.path.dirname(path).startswith(_PYPROF_DIR + os.sep) or \
        os.path.dirname(path) == _PYPROF_DIR


def time_basis(session) -> tuple:
    """(clock, threads) of a capture's self times: 'wall' or 'CPU', and how
    many threads recorded some (their figures are summed)."""
    if session.fstats:
        return "wall", len({t for t, _ in session.fstats})
    if session.samples:
        mode = (session.info.get("sampling") or {}).get("mode")
        # threads whose samples hold Python frames: a C thread caught running
        # (ASan's own, a library's) adds no self time to any function
        return ("wall" if mode == "wall" else "CPU"), len(
            {t for t, sid, _ in session.samples if session.stacks[sid].frames})
    return None, 0


def _basis(r) -> str:
    clock, n = r.get("clock"), r.get("threads") or 1
    what = f"{clock} self time" if clock else "self time"
    return f"{what}, 1 thread: " if n == 1 else f"{what} summed over {n} threads: "


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
        out.append("slowest tests (wall time of the call, as profiled; top functions by "
                   "self time, each test's labelled wall or CPU and summed over its threads):")
        for r in timed[:top]:
            tops = ", ".join(f"{_where(*f[:3])} {_t(f[3])}" for f in r.get("top", [])[:3])
            out.append(f"  {_t(r['wall']):>10}  {r['nodeid']}"
                       + (f"  [{_basis(r)}{tops}]" if tops else ""))
    mem = sorted((r for r in rows if r.get("peak") is not None), key=lambda r: -r["peak"])
    if mem:
        out.append("most allocating tests (peak traced bytes, all threads; the test's lines "
                   "live at the peak):")
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
