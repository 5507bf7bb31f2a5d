"""Comparing two captures: per function or per line, before and after, the
absolute and relative change of each column, largest change first, with a noise
threshold (docs/merge-diff.md).

    d = diff(Session.load("before.cprof"), Session.load("after.cprof"))
    write_table(d, sys.stdout)

Functions are matched by (kind, file, qualified name), not by first line: an
edit above a function moves it without making it another function. Lines are
matched by (file, qualified name, line number): an edit inside a function moves
the lines below it, which then compare with whatever line now has their number.

Columns come from what a capture recorded: traced calls give ``total``, ``self``
(seconds) and ``calls``; samples give ``total``, ``self`` (the time the samples
stand for) and ``samples``; memory gives ``alloc`` and ``net`` (bytes); traced
lines give ``total`` (seconds, callees included) and ``hits``. Two captures are
compared on the columns both have.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from ..errors import PyprofError

# column -> (unit, what it is). The order is the default order of the columns,
# and the first one both captures have is the primary column (sort, threshold).
COLUMNS = {
    "total": ("s", "inclusive time (callees included)"),
    "self": ("s", "self time (callees excluded)"),
    "calls": ("count", "calls that ended (traced)"),
    "samples": ("count", "samples in which it was on the stack (sampled)"),
    "hits": ("count", "times the line ran (traced lines)"),
    "alloc": ("bytes", "bytes allocated (memory)"),
    "net": ("bytes", "bytes allocated and not freed (memory)"),
}
BY = ("function", "line")
NEW, GONE = "new", "gone"


@dataclass
class Measures:
    """One capture's numbers: column -> {key: value}, where each column came
    from (traced, sampled, memory), and a label (name, file, line) per key."""

    columns: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)


@dataclass
class Row:
    function: str
    file: str
    line: int
    status: str                         # "", "new" (only AFTER) or "gone" (only BEFORE)
    values: dict                        # column -> (before, after)

    def change(self, column):
        before, after = self.values[column]
        return after - before

    def change_pct(self, column):
        """Relative change in percent; None when there was nothing before."""
        before, after = self.values[column]
        return 100.0 * (after - before) / before if before else None


@dataclass
class Diff:
    before: str
    after: str
    by: str
    columns: list
    rows: list                          # shown rows, largest change of the primary column first
    hidden: int                         # rows within the noise threshold
    threshold: float
    floors: dict                        # unit -> smallest absolute change shown
    notes: list = field(default_factory=list)
    limit: int | None = None
    cut: int = 0                        # rows above the threshold left out by the limit

    @property
    def primary(self):
        return self.columns[0]


# ------------------------------------------------------------------ measuring
def function_key(fn) -> tuple:
    return (fn.kind, fn.filename, fn.qualname)


def _add(table, key, value):
    table[key] = table.get(key, 0) + value


def _sampled(session, by, m: Measures):
    """total/self time and samples from the sampled stacks (Python frames)."""
    total, own, samples = {}, {}, {}
    for (t, sid, state), c in session.samples.items():
        keys = []
        for fid, line in session.stacks[sid].frames:
            fn = session.functions[fid]
            key = function_key(fn) if by == "function" else (fn.filename, fn.qualname, line)
            keys.append(key)
            m.labels.setdefault(key, (fn.qualname, fn.filename, fn.line if by == "function" else line))
        for key in set(keys):           # once per stack: recursion is not counted twice
            _add(total, key, c.weight * 1e-9)
            _add(samples, key, c.count)
        if keys and state == 0:         # self time only while running Python (not idle...)
            _add(own, keys[-1], c.weight * 1e-9)
    return total, own, samples


def measure(session, by="function") -> Measures:
    m = Measures()

    def put(column, source, table):
        m.columns[column] = table
        m.sources[column] = source

    def label(fid, line=None):
        fn = session.functions[fid]
        if by == "function":
            key = function_key(fn)
        else:
            key = (fn.filename, fn.qualname, line)
        m.labels.setdefault(key, (fn.qualname, fn.filename, fn.line if line is None else line))
        return key

    traced = bool(session.fstats) if by == "function" else bool(session.lines)
    if traced and by == "function":
        total, own, calls = {}, {}, {}
        for fid, c in session.function_totals().items():
            key = label(fid)
            _add(total, key, session.seconds(c.total))
            _add(own, key, session.seconds(c.own))
            _add(calls, key, c.calls)
        put("total", "traced", total)
        put("self", "traced", own)
        put("calls", "traced", calls)
    elif traced:
        total, hits = {}, {}
        for (fid, line), c in session.line_totals().items():
            key = label(fid, line)
            _add(total, key, session.seconds(c.time))
            _add(hits, key, c.hits)
        put("total", "traced", total)
        put("hits", "traced", hits)
    if session.samples:
        total, own, samples = _sampled(session, by, m)
        if not traced:                  # traced times are exact: they win
            put("total", "sampled", total)
            put("self", "sampled", own)
        put("samples", "sampled", samples)
    if session.info.get("memory"):
        rows = session.memory_functions() if by == "function" else session.memory_lines()
        alloc, net = {}, {}
        for k, c in rows.items():
            key = label(k) if by == "function" else label(*k)
            _add(alloc, key, c.alloc_bytes)
            _add(net, key, c.net_bytes)
        put("alloc", "memory", alloc)
        put("net", "memory", net)
    return m


def _kind(m: Measures) -> str:
    return "+".join(sorted(set(m.sources.values()))) or "empty"


# ------------------------------------------------------------------ comparing
def diff(before, after, by="function", columns=None, threshold=5.0, min_time=0.001,
         min_bytes=1024, min_count=1, limit=None, names=("BEFORE", "AFTER")) -> Diff:
    """Compare two Sessions. A row is shown when the change of the primary
    column (the first of ``columns``) is at least ``threshold`` percent AND at
    least the floor of its unit (``min_time`` seconds, ``min_bytes``,
    ``min_count``); the others are counted in ``Diff.hidden``. Entries of one
    capture only (new, gone) pass the percent test. ``limit``: at most that many
    rows."""
    if by not in BY:
        raise PyprofError(f"--by must be one of {', '.join(BY)}, not {by!r}")
    mb, ma = measure(before, by), measure(after, by)
    for m, name in ((mb, names[0]), (ma, names[1])):
        if not m.columns:
            what = ("line data (profile with -l, --lines-of or --lines-all, --sample or "
                    "--memory)" if by == "line" else "data to compare")
            raise PyprofError(f"{name} has no {what}")
    common = [c for c in COLUMNS if c in mb.columns and c in ma.columns]
    if not common:
        raise PyprofError(f"{names[0]} ({_kind(mb)}) and {names[1]} ({_kind(ma)}) have no "
                          f"column in common to compare (by {by})")
    if columns:
        for c in columns:
            if c not in COLUMNS:
                raise PyprofError(f"unknown column {c!r} (choose from {', '.join(COLUMNS)})")
            if c not in common:
                raise PyprofError(f"column {c!r} is not in both captures (they have in common: "
                                  f"{', '.join(common)})")
        common = list(dict.fromkeys(columns))
    notes = [f"{c}: {names[0]} is {mb.sources[c]}, {names[1]} is {ma.sources[c]}: the numbers "
             f"come from different methods" for c in common if mb.sources[c] != ma.sources[c]]

    keys = set()
    for m in (mb, ma):
        for c in common:
            keys.update(m.columns[c])
    rows = []
    for key in keys:
        in_before = any(key in mb.columns[c] for c in common)
        in_after = any(key in ma.columns[c] for c in common)
        name, file, line = ma.labels.get(key) or mb.labels[key]
        rows.append(Row(name, file, line, "" if in_before and in_after else NEW if in_after else GONE,
                        {c: (mb.columns[c].get(key, 0), ma.columns[c].get(key, 0)) for c in common}))

    floors = {"s": min_time, "bytes": min_bytes, "count": min_count}
    primary = common[0]
    floor = floors[COLUMNS[primary][0]]

    def shown(row):
        change, pct = row.change(primary), row.change_pct(primary)
        if change == 0:
            return False
        return abs(change) >= floor and (pct is None or abs(pct) >= threshold)

    visible = [r for r in rows if shown(r)]
    visible.sort(key=lambda r: (-abs(r.change(primary)), r.function, r.file, r.line))
    hidden = len(rows) - len(visible)
    cut = 0
    if limit is not None and limit >= 0:
        cut = max(0, len(visible) - limit)
        visible = visible[:limit]
    return Diff(names[0], names[1], by, common, visible, hidden, threshold, floors, notes,
                limit, cut)


def csv_header(columns) -> list:
    head = ["function", "file", "line", "status"]
    for c in columns:
        head += [f"{c}_before", f"{c}_after", f"{c}_change", f"{c}_change_pct"]
    return head


def to_csv(d: Diff) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_header(d.columns))
    for r in d.rows:
        row = [r.function, r.file, r.line, r.status]
        for c in d.columns:
            b, a = r.values[c]
            pct = r.change_pct(c)
            row += [_raw(b), _raw(a), _raw(a - b), "" if pct is None else f"{pct:.6g}"]
        w.writerow(row)
    return buf.getvalue()


def _raw(v):
    """Seconds with 12 significant digits (sums of nanoseconds: no float noise)."""
    return f"{v:.12g}" if isinstance(v, float) else v


def to_json(d: Diff) -> dict:
    return {
        "before": d.before, "after": d.after, "by": d.by, "primary": d.primary,
        "columns": {c: {"unit": COLUMNS[c][0], "meaning": COLUMNS[c][1]} for c in d.columns},
        "threshold_pct": d.threshold, "floors": d.floors, "hidden": d.hidden, "notes": d.notes,
        "cut_by_limit": d.cut,
        "rows": [{"function": r.function, "file": r.file, "line": r.line, "status": r.status,
                  "values": {c: {"before": r.values[c][0], "after": r.values[c][1],
                                 "change": r.change(c), "change_pct": r.change_pct(c)}
                             for c in d.columns}}
                 for r in d.rows],
    }
