"""Tables from samples: the function table (self and total samples and time;
call counts are not known to a sampler and are shown as "?") and the line table
(self and total samples per line). ``-s``'s pstats keys map to the sampled
columns where they mean something (``ORDERS``); the call counts' keys have no
meaning here: ``order_note`` says so and the total order is used."""
from __future__ import annotations

import os

from ..analysis.stacks import named_stacks, totals
from ..model.sources import read_source
from ..model.tables import STATES

AWAITING = STATES.index("awaiting")


def _awaiting(session) -> bool:
    """--async --wall: suspended tasks' pseudo-samples, tabled apart (they
    are not time a thread spent, and would bury the program's own code)."""
    return any(state == AWAITING for (_, _, state) in session.samples)


def _own_count(session) -> int:
    return sum(c.count for (_, _, s), c in session.samples.items() if s != AWAITING) or 1


def header(session) -> str:
    si = session.info.get("sampling", {})
    n = sum(c.count for c in session.samples.values())
    what = "CPU time" if si.get("mode") == "cpu" else "wall-clock time"
    timer = f"{si['timer']}, " if si.get("mode") == "cpu" and si.get("timer") else ""
    head = (f"Samples: {n} of {what} ({si.get('mode', '?')} mode, {timer}"
            f"{si.get('rate_requested', 0):g} Hz requested, "
            f"{si.get('rate_achieved', 0):.0f} Hz achieved, {si.get('dropped', 0)} dropped); ")
    if "weighting" not in si:       # captures before weighting: every sample weighed the interval
        return head + f"each sample stands for {si.get('interval_ns', 0) / 1e6:g} ms\n"
    weight = sum(c.weight for c in session.samples.values())
    mean = weight / n / 1e6 if n else 0.0
    clock = "CPU" if si.get("mode") == "cpu" else "wall-clock"
    first = "; a thread's first, one interval" if si.get("mode") == "cpu" else ""
    return head + (f"each sample stands for the {clock} time its thread used since its "
                   f"previous sample{first} (on average {mean:.3g} ms)\n")


# pstats' sort keys -> the sampled table's order, by (label, file, line) and
# (self count, total count)
ORDERS = {
    "tottime": lambda f, r: (-r[0], -r[1], f), "time": lambda f, r: (-r[0], -r[1], f),
    "cumulative": lambda f, r: (-r[1], -r[0], f), "cumtime": lambda f, r: (-r[1], -r[0], f),
    "name": lambda f, r: f, "nfl": lambda f, r: f,
    "filename": lambda f, r: (f[1], f[2], f[0]), "module": lambda f, r: (f[1], f[2], f[0]),
    "stdname": lambda f, r: (f[1], f[2], f[0]), "line": lambda f, r: (f[2], f[1], f[0]),
}
_NO_CALLS = ("calls", "ncalls", "pcalls")


def order_note(sort):
    """One line on why `sort` does not order samples, or None when it does."""
    if sort in _NO_CALLS:
        return (f"-s {sort}: samples count no calls; the sampled tables are ordered by "
                f"total samples (-s tottime: by self samples)")
    return None


def write_functions(session, out, limit=40, sort="cumulative"):
    split = _awaiting(session)
    rows = totals(session, skip=("awaiting",) if split else ())
    n = _own_count(session) if split else sum(c.count for c in session.samples.values()) or 1
    order = ORDERS.get(sort, ORDERS["cumulative"])
    out.write(header(session) + "\n")
    if split:
        secs = sum(r[2] for r in rows.values()) / 1e9
        out.write(f"Threads' own time (running or blocked; awaiting left out: {n} samples, "
                  f"{secs:.3f} s; % of these)\n")
    out.write(f"{'Self':>8} {'Self %':>7} {'Self s':>9} {'Total':>8} {'Total %':>7} "
              f"{'Total s':>9} {'Calls':>6}  Function\n")
    for f, (sc, tc, sw, tw) in sorted(rows.items(), key=lambda kv: order(*kv))[:limit]:
        label, file, line = f
        where = f" ({os.path.basename(file)}:{line})" if file else ""
        out.write(f"{sc:>8} {100 * sc / n:>6.1f}% {sw / 1e9:>9.3f} {tc:>8} {100 * tc / n:>6.1f}% "
                  f"{tw / 1e9:>9.3f} {'?':>6}  {label}{where}\n")
    if split:
        write_awaiting(session, out)


def write_awaiting(session, out, limit=40):
    """The awaiting pseudo-samples per task and the chain it waits in."""
    rows: dict = {}
    for _, state, frames, count, weight in named_stacks(session, lines=True, threads=False,
                                                        states=("awaiting",)):
        # with lines, a frame is "name:line": shown as name (file:line)
        names = [lb.rsplit(":", 1)[0] for lb, _, _ in frames]
        task = names[0] if names else "?"
        chain = " > ".join(f"{nm} ({os.path.basename(fl)}:{ln})" if fl else nm
                           for nm, (_, fl, ln) in zip(names[1:-1], frames[1:-1]))
        r = rows.setdefault((task, chain), [0, 0])
        r[0] += count
        r[1] += weight
    n = sum(r[0] for r in rows.values()) or 1
    total = sum(r[1] for r in rows.values())
    out.write(f"\nAwaiting (by task and where it waits: {n} samples, {total / 1e9:.3f} s "
              f"summed over the tasks, which wait at once, so it can exceed the wall time; "
              f"% of these)\n")
    out.write(f"{'Samples':>8} {'%':>7} {'Seconds':>9}  Task: where it waits\n")
    for (task, chain), (c, w) in sorted(rows.items(), key=lambda kv: (-kv[1][1], kv[0]))[:limit]:
        out.write(f"{c:>8} {100 * c / n:>6.1f}% {w / 1e9:>9.3f}  {task}: {chain}\n")
    if len(rows) > limit:
        out.write(f"... {len(rows) - limit} more\n")


def write_lines(session, out, limit=20, header_line=True, sort="cumulative", expressions=None):
    """The functions with the most samples (self samples when sorted by self
    time), line by line: the lines with samples, a line of context around
    them, ``...`` for the rest. ``expressions`` (analysis.opcodes.expressions:
    sampled instructions) adds a row per expression under a line: the self
    samples whose innermost instruction is in it."""
    from .linetable import expression_label
    by_place = {}
    for (fid, line), exprs in (expressions or {}).items():
        fn = session.functions[fid]
        by_place[(fn.qualname, fn.filename, line)] = exprs
    split = _awaiting(session)
    n = _own_count(session) if split else sum(c.count for c in session.samples.values()) or 1
    per_line = totals(session, lines=True, skip=("awaiting",) if split else ())
    by_func: dict = {}
    for (label, file, line), row in per_line.items():
        if not file:
            continue
        by_func.setdefault((label.rsplit(":", 1)[0], file), {})[line] = row
    column = 0 if sort in ("tottime", "time") else 1
    funcs = sorted(by_func.items(),
                   key=lambda kv: -max(r[column] for r in kv[1].values()))[:limit]
    if header_line:
        out.write(header(session) + "\n")
    for (name, file), lines in funcs:
        fn = next((f for f in session.functions.values()
                   if f.qualname == name and f.filename == file), None)
        first = fn.line if fn is not None else min(lines)
        src, note = read_source(file, session.meta.get("sources", {}).get(file))
        out.write(f"File: {file}\nFunction: {name} at line {first}\n")
        if note:
            out.write(f"Note: {note}\n")
        out.write(f"\n{'Line #':>6} {'Self':>8} {'Self %':>7} {'Total':>8} {'Total %':>7}  "
                  f"Line Contents\n" + "=" * 60 + "\n")
        shown = sorted(x for x in {x for ln in lines for x in (ln - 1, ln, ln + 1)} | {first}
                       if x >= first and (x in lines or not src or x <= len(src)))
        prev = None
        for line in shown:
            if prev is not None and line > prev + 1:
                out.write(f"{'...':>6}\n")
            prev = line
            text = src[line - 1].rstrip("\r\n") if 0 < line <= len(src) else ""
            row = lines.get(line)
            if row is None:
                out.write(f"{line:>6} {'':>8} {'':>7} {'':>8} {'':>7}  {text}\n")
            else:
                out.write(f"{line:>6} {row[0]:>8} {100 * row[0] / n:>6.1f}% {row[1]:>8} "
                          f"{100 * row[1] / n:>6.1f}%  {text}\n")
            indent = text[:len(text) - len(text.lstrip())] + "    "
            for e in by_place.get((name, file, line), ()):
                if e.samples:
                    out.write(f"{'(expr)':>6} {e.samples:>8} {100 * e.samples / n:>6.1f}% "
                              f"{'':>8} {'':>7}  {indent}{expression_label(e)}\n")
        out.write("\n\n")

