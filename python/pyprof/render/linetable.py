"""Line tables: line_profiler's layout, with pprofile-style call rows.

    Timer unit: 1e-06 s

    Total time: 0.0123 s
    File: /abs/demo.py
    Function: work at line 9

    Line #      Hits         Time  Per Hit   % Time  Line Contents
    ==============================================================
        13         3       1993.5    664.5     11.9          total += fib(12)
    (call)      1431       1990.0      1.4     11.9              -> fib (demo.py:3)

With --columns (--opcodes captures), an ``(expr)`` row per expression of a line: its
columns and source, the hits of its instructions and their time.

Time and Per Hit are in the timer unit; % Time is the share of the function's
total, its cumulative time (under recursion each line's time and the total are
counted at the outermost call, so a recursive function's lines may add up to
more than 100%). A call row lists the calls made while its line
ran, to one callee, with their inclusive time. Every time, the total too, leaves
out pyprof's own line bookkeeping (measured, and said under the timer unit).
Columns: docs/lines.md.
"""
from __future__ import annotations

import os

from ..errors import PyprofError
from ..model.sources import line_span, read_source
from .units import TIME_UNITS

UNITS = dict(TIME_UNITS)
HEADER = f"{'Line #':>6} {'Hits':>9} {'Time':>12} {'Per Hit':>8} {'% Time':>8}  Line Contents"


def functions(session, threads=None) -> list:
    """One dict per line target that ran: the data a table shows.

    ``{"fid", "function", "first", "last", "total", "lines": {line: LineCounters},
    "calls": {line: [(callee Function, CallRow)]}}``, times in raw units."""
    lines, calls = session.line_totals(threads), session.callrow_totals(threads)
    cumulative = session.function_totals(threads)
    ranges = {int(k): v for k, v in session.meta.get("line_targets", {}).items()}
    per_fid: dict = {}
    for (fid, line), c in lines.items():
        per_fid.setdefault(fid, {})[line] = c
    rows: dict = {}
    for (fid, line, callee), c in calls.items():
        rows.setdefault(fid, {}).setdefault(line, []).append((session.functions[callee], c))
    out = []
    for fid, by_line in per_fid.items():
        if not any(c.hits for c in by_line.values()):
            continue
        fn = session.functions[fid]
        first, last = ranges.get(fid, (fn.line, max(by_line)))
        for callrows in rows.get(fid, {}).values():
            callrows.sort(key=lambda fc: -fc[1].time)
        # The function's cumulative time (recursion counted once), as line
        # times are; the sum of its lines if it has no function-level data.
        total = cumulative[fid].total if fid in cumulative else sum(
            c.time for c in by_line.values())
        out.append({"fid": fid, "function": fn, "first": min(first, min(by_line)),
                    "last": max(last, max(by_line)), "total": total,
                    "lines": by_line, "calls": rows.get(fid, {})})
    out.sort(key=lambda f: (f["function"].filename, f["first"]))
    return out


def bookkeeping_note(session) -> str | None:
    """The time pyprof spent on line events in this run, as measured (INFO
    line_bookkeeping_ns: the time between the two clock reads of each line
    event), which every time in the line and function tables leaves out; None
    for captures without it (older, or not line mode)."""
    ns = session.info.get("line_bookkeeping_ns")
    if ns is None or not session.info.get("lines"):
        return None
    events = sum(c.hits for c in session.line_totals().values())
    per = f"{ns / events:.0f} ns per line event, {events:,} events; " if events else ""
    return (f"Line bookkeeping: {ns / 1e9:.6f} s, pyprof's own ({per}measured, and left "
            f"out of every time below)")


def _fmt(value, width):
    text = f"{value:5.1f}"
    return text if len(text) <= width else f"{value:5.3g}"


def expression_label(e) -> str:
    """An expression of a line (--columns): its columns, its source and the
    opcodes its instructions ran as (most time first)."""
    where = f"[{e.col}:{e.end_col}]" if e.col is not None else "[?]"
    frag = e.fragment if e.fragment is not None else "?"
    frag = frag if len(frag) <= 60 else frag[:57] + "..."
    ops = []
    for i in sorted(e.insns, key=lambda i: (-i.seconds, -i.samples, -i.hits)):
        if i.opcode not in ops:
            ops.append(i.opcode)
    more = f" +{len(ops) - 3}" if len(ops) > 3 else ""
    return f"{where} {frag}  <- {', '.join(ops[:3])}{more}".replace("]  <-", "] <-")


def write_text(session, out, unit="us", call_rows=True, threads=None, expressions=None):
    """Write the line tables of `session` to the text stream `out`;
    ``expressions`` (analysis.opcodes.expressions: traced instructions) adds a
    row per expression under each line."""
    if unit not in UNITS:
        raise PyprofError(f"unknown unit {unit!r} (choose from {', '.join(UNITS)})")
    scale = session.time_unit / UNITS[unit]
    funcs = functions(session, threads)
    out.write(f"Timer unit: {UNITS[unit]:g} s\n")
    note = bookkeeping_note(session)
    if note:
        out.write(note + "\n")
    out.write("\n")
    if not funcs:
        out.write("No line was profiled: no line target ran (decorate functions with "
                  "@profile, or use --lines-of / --lines-all).\n")
        return
    hashes = session.meta.get("sources", {})
    for f in funcs:
        fn = f["function"]
        total = f["total"]
        src, note = read_source(fn.filename, hashes.get(fn.filename))
        out.write(f"Total time: {session.seconds(total):g} s\n")
        out.write(f"File: {fn.filename}\n")
        out.write(f"Function: {fn.qualname} at line {fn.line}\n")
        if note:
            out.write(f"Note: {note}\n")
        out.write("\n" + HEADER + "\n" + "=" * len(HEADER) + "\n")
        for line in line_span(f["first"], f["last"], {*f["lines"], *f["calls"]}, len(src)):
            text = src[line - 1].rstrip("\r\n") if 0 < line <= len(src) else ""
            c = f["lines"].get(line)
            if c is None or (c.hits == 0 and c.time == 0):
                out.write(f"{line:>6} {'':>9} {'':>12} {'':>8} {'':>8}  {text}\n")
            else:
                t = c.time * scale
                per = _fmt(t / c.hits, 8) if c.hits else ""
                pct = f"{100.0 * c.time / total:5.1f}" if total > 0 else ""
                out.write(f"{line:>6} {c.hits:>9} {_fmt(t, 12):>12} {per:>8} {pct:>8}  {text}\n")
            indent = text[:len(text) - len(text.lstrip())] + "    "
            for e in (expressions or {}).get((f["fid"], line), ()):
                t = e.seconds / UNITS[unit]
                per = _fmt(t / e.hits, 8) if e.hits else ""
                pct = f"{100.0 * e.seconds / session.seconds(total):5.1f}" if total > 0 else ""
                out.write(f"{'(expr)':>6} {e.hits:>9} {_fmt(t, 12):>12} {per:>8} {pct:>8}  "
                          f"{indent}{expression_label(e)}\n")
            if not call_rows:
                continue
            for callee, r in f["calls"].get(line, ()):
                t = r.time * scale
                per = _fmt(t / r.calls, 8) if r.calls else ""
                pct = f"{100.0 * r.time / total:5.1f}" if total > 0 else ""
                where = (f" ({os.path.basename(callee.filename)}:{callee.line})"
                         if callee.kind == "python" else "")
                out.write(f"{'(call)':>6} {r.calls:>9} {_fmt(t, 12):>12} {per:>8} {pct:>8}  "
                          f"{indent}-> {callee.qualname}{where}\n")
        out.write("\n\n")


