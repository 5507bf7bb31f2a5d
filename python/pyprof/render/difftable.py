"""`pyprof diff` as text: the table of changes (CSV and JSON are analysis/diff.py's)."""
from __future__ import annotations

import io
import json

from ..analysis.diff import COLUMNS, Diff, to_csv, to_json
from .units import format_bytes, format_time


def _fmt_time(v, signed=False):
    return format_time(v, digits=(2, 1, (0, 1)), signed=signed)


def _fmt_bytes(v, signed=False):
    return format_bytes(v, signed=signed, top="TiB")


def _fmt_count(v, signed=False):
    sign = "+" if signed and v > 0 else ""
    v = round(v)
    a = abs(v)
    if a < 100000:
        return f"{sign}{v}"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{sign}{v / div:.2f}{suffix}"
    return f"{sign}{v}"


_FORMATTERS = {"s": _fmt_time, "bytes": _fmt_bytes, "count": _fmt_count}


def _fmt_pct(row, column):
    if row.status:
        return row.status
    pct = row.change_pct(column)
    if pct is None:
        return "-"
    if abs(pct) >= 10000:               # as a factor, to fit the column
        return f"x{1 + pct / 100:.0f}"
    return f"{pct:+.1f}%"


def write_table(d: Diff, out) -> None:
    fmt = {c: _FORMATTERS[COLUMNS[c][0]] for c in d.columns}
    out.write(f"pyprof diff: {d.before} -> {d.after}, by {d.by}; sorted by the change of "
              f"'{d.primary}' ({COLUMNS[d.primary][1]})\n")
    for note in d.notes:
        out.write(f"note: {note}\n")
    head1 = "".join(f"{c:^38}|" for c in d.columns)
    head2 = "".join(f"{'before':>9}{'after':>9}{'change':>10}{'%':>9} |" for _ in d.columns)
    out.write(head1 + "\n" + head2 + " " + d.by + "\n")
    for r in d.rows:
        cells = []
        for c in d.columns:
            b, a = r.values[c]
            cells.append(f"{fmt[c](b):>9}{fmt[c](a):>9}{fmt[c](a - b, True):>10}"
                         f"{_fmt_pct(r, c):>9} |")
        where = f"{r.file}:{r.line}" if r.file != "~" else "built-in"
        out.write("".join(cells) + f" {r.function} ({where})\n")
    if not d.rows:
        out.write("(no change above the threshold)\n")
    if d.cut:
        out.write(f"{d.cut} more {'entry' if d.cut == 1 else 'entries'} not shown "
                  f"(--limit {d.limit})\n")
    floor = d.floors[COLUMNS[d.primary][0]]
    floor_text = _FORMATTERS[COLUMNS[d.primary][0]](floor)
    out.write(f"{d.hidden} {'entry' if d.hidden == 1 else 'entries'} within the noise threshold "
              f"(change of {d.primary} below {d.threshold:g}% or below {floor_text}) not shown\n")


def render(d: Diff, fmt: str) -> str:
    if fmt == "csv":
        return to_csv(d)
    if fmt == "json":
        return json.dumps(to_json(d), indent=1) + "\n"
    buf = io.StringIO()
    write_table(d, buf)
    return buf.getvalue()
