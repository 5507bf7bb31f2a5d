"""Views as text: an aligned table (colours on a terminal), JSON or CSV
(docs/views.md). The data is analysis/views.py's."""
from __future__ import annotations

import csv
import io
import json
import os
import sys

from ..analysis.views import COLUMNS, TREE_VIEWS, flatten, view
from ..errors import PyprofError
from .units import format_bytes, format_time


def render(session, name: str, fmt: str = "table", options: Options | None = None,
           color: bool | None = None, **kw) -> str:
    """The view as text: an aligned table, JSON or CSV."""
    if fmt not in ("table", "json", "csv"):
        raise PyprofError(f"unknown format {fmt!r} (choose from table, json, csv)")
    data = view(session, name, options, **kw)
    key = "roots" if "roots" in data else "rows"
    if fmt == "json":
        return json.dumps(data, indent=1, allow_nan=False) + "\n"
    flat = list(flatten(data[key]))
    if fmt == "csv":
        return _csv(flat, data["columns"], key == "roots", "task" if name == "tasks" else "name")
    if not flat:
        return f"no entries match (filters: {data['filters'] or 'none'})\n"
    if color is None:
        color = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
    text = _table(session, name, flat, data["columns"], color)
    if name == "tasks" and "created" in data["columns"] and \
            not any(r.get("created") for _, _, r in flat):
        text += CREATED_NOTE + "\n"
    return text


# An empty column would read as "pyprof could not tell": say why.
CREATED_NOTE = ("created: needs PYTHONASYNCIODEBUG=1 (asyncio keeps where a task was made "
                "only in debug mode)")


def _cell(col, v) -> str:
    if v is None:
        return ""
    unit = COLUMNS[col][1]
    if unit == "s":
        return format_time(v)
    if unit == "B":
        return format_bytes(v)
    if unit == "n":
        return f"{v:,}" if isinstance(v, int) else str(v)
    return str(v)


def _label(r) -> str:
    if r["kind"] in ("callers", "callees"):
        return r["name"]
    where = ""
    if r["file"]:
        where = f" ({os.path.basename(r['file'])}:{r['line']})"
    if r.get("source") is not None and r["kind"] in ("line", "instruction"):
        return f"{r['name']}{where}  {r['source']}"
    return f"{r['name']}{where}"


def _table(session, name, flat, columns, color) -> str:
    cols = [c for c in columns if c not in ("file",)]
    heads = [COLUMNS[c][0] for c in cols]
    cells = [[_cell(c, r.get(c, "")) for c in cols] for _, _, r in flat]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(heads)]
    bold, dim, end = ("\x1b[1m", "\x1b[2m", "\x1b[0m") if color else ("", "", "")
    lines = [bold + "  ".join(h.rjust(w) for h, w in zip(heads, widths)) + "  " + name
             + end]
    for (depth, _, r), row in zip(flat, cells):
        indent = "  " * depth if name in TREE_VIEWS else ""
        label = _label(r)
        if "file" in columns and r["file"]:
            label += f"  {dim}{r['file']}:{r['line']}{end}"
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths)) + "  " + indent + label)
    return "\n".join(lines) + "\n"


def _csv(flat, columns, tree, first="name") -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    head = (["depth", "path"] if tree else []) + [first, "kind", "file", "line"] + \
        [c for c in columns if c != "file"]
    if any("source" in r for _, _, r in flat):
        head.append("source")
    w.writerow(head)
    for depth, path, r in flat:
        row = ([depth, " > ".join(path)] if tree else []) + [r["name"], r["kind"], r["file"],
                                                             r["line"]]
        for c in columns:
            if c == "file":
                continue
            v = r.get(c)
            row.append("" if v is None else repr(v) if isinstance(v, float) else v)
        if head[-1] == "source":
            row.append(r.get("source") or "")
        w.writerow(row)
    return buf.getvalue()
