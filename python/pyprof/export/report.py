"""The HTML report (docs/report.md): one self-contained file with its own small
CSS and JS (written for pyprof: no library, no CDN, no analytics, works
offline) that shows a capture's summary, a sortable function table, a heatmap
of the source per file and line, an interactive flame graph (the flame graph
page's code, flamegraph.FLAME_JS), the memory curve, the steps and the
asyncio tasks (--async). A section is there only when the capture has its data.

Everything the page shows comes from the Session through the views
(views.view "op" and "lines"), the flame graph trees (flamegraph.tree,
memflame.tree) and the memory curve (memcurve.render). The data is one JSON
blob in <script type="application/json"> with every "<" escaped, rendered with
textContent by the page's script; the rest (summary, SVG) is escaped with
html.escape. So no function name, path or source line can end the script or
inject markup.

Large captures stay usable: the function table keeps the MAX_FUNCTIONS largest
functions, the heatmap the MAX_FILES files with the most weight (a long file only
its lines with data and their neighbours), and the flame graph leaves out the
frames smaller than FLAME_MIN_FRACTION of their tree (half a pixel at 2,500
pixels) and keeps at most MAX_FLAME_NODES frames per tree; each cut is said on
the page."""
from __future__ import annotations

import datetime
import html

from ..analysis import views
from .._version import __version__
from ..errors import PyprofError
from .flamegraph import FLAME_CSS, FLAME_JS, add_path, json_for_html, new_root, pack
from ..analysis.stacks import has_stacks, memory_stack_frames, named_stacks
from ..base.files import atomic_write
from ..model.sources import read_source
from ..render.units import format_bytes, format_time

MAX_FUNCTIONS = 2000
MAX_FILES = 30
MAX_FILE_LINES = 3000           # longer files: the lines with data and CONTEXT around them
CONTEXT = 3
FLAME_MIN_FRACTION = 2e-4        # a frame under half a pixel at 2,500 pixels
MAX_FLAME_NODES = 30_000         # per tree: the largest frames beyond
MAX_STEPS = 1000
MAX_TASKS = 500                 # the task table: the tasks that ran longest
STEP_TOP_STEPS = 200            # steps that get their top functions
# The cost of one hook event of function/line tracing (a call or a return),
# half the median ns per call event measured in benchmarks/RESULTS.md (62 ns
# on CPython 3.12: a call is two events). docs/report.md#overhead.
NS_PER_EVENT = 31

TABLE_COLUMNS = ("calls", "time", "self-time", "per-call", "awaiting", "samples", "self-samples",
                 "cpu", "bytes", "self-bytes", "net-bytes", "peak-bytes", "allocs")
HEAT_COLUMNS = ("hits", "time", "samples", "self-samples", "bytes", "net-bytes", "allocs",
                "native-bytes", "temp-allocs")


# ---------------------------------------------------------------- summary
def _fmt_s(s: float) -> str:
    return format_time(s, digits=(3, 2, 1), sep=" ", grouping=True, zero=None)


def _fmt_b(b: float) -> str:
    return format_bytes(b, sep=" ", grouping=True)


def modes(session) -> list:
    """The modes the capture has data of (meta["modes"] says what was asked)."""
    out = []
    info = session.info
    for name, present in (("function", bool(session.fstats) and not info.get("sampling")),
                          ("lines", bool(info.get("lines"))),
                          ("sample", bool(info.get("sampling"))),
                          ("memory", bool(info.get("memory"))),
                          ("timeline", bool(info.get("timeline") or session.timeline)),
                          ("steps", bool(session.steps))):
        if present and name not in out:
            out.append(name)
    return out


def overhead(session) -> dict | None:
    """The estimated time the profiler's hooks took (docs/report.md#overhead):
    traced events x NS_PER_EVENT, and the clock reads alone (events x the
    clock's cost measured at start-up). None for a sampled capture (its cost
    does not scale with events)."""
    info = session.info
    events = info.get("events", 0)
    if info.get("sampling") or not events:
        return None
    duration = info.get("duration_ns", 0) / 1e9
    est = events * NS_PER_EVENT / 1e9
    clock = events * info.get("clock_read_ns", 0) / 1e9
    return {"events": events, "estimate_s": est, "clock_s": clock, "duration_s": duration,
            "share": est / duration if duration else None}


def summary(session) -> list:
    """[(label, text)] of the capture."""
    info, meta = session.info, session.meta
    rows = [("command", " ".join(meta.get("argv", [])) or "(not recorded)")]
    wall = info.get("start_wall_ns")
    if wall:
        when = datetime.datetime.fromtimestamp(wall / 1e9, datetime.timezone.utc)
        rows.append(("date", when.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if info.get("duration_ns") is not None:
        rows.append(("duration", _fmt_s(info["duration_ns"] / 1e9)))
    python = info.get("python") or meta.get("python")
    if python:
        rows.append(("Python", f"{meta.get('implementation', 'cpython')} {python}"))
    if info.get("hook"):
        rows.append(("hook", info["hook"]))
    if info.get("clock"):
        rows.append(("clock", f"{info['clock']} ({info.get('clock_read_ns', 0):.1f} ns a read)"))
    rows.append(("modes", ", ".join(modes(session)) or "none"))
    sampling = info.get("sampling")
    if sampling:
        total = sum(c.count for c in session.samples.values())
        rows.append(("samples", f"{total:,} ({sampling.get('mode', '')} clock, "
                                f"{sampling.get('rate_requested', 0):,.0f} Hz requested, "
                                f"{sampling.get('rate_achieved', 0):,.0f} Hz achieved, "
                                f"{sampling.get('dropped', 0):,} dropped)"))
    else:
        what = ("each call, each return and each line event" if info.get("lines")
                else "each call and each return")
        rows.append(("events", f"{info.get('events', 0):,} ({what} is one)"))
    o = overhead(session)
    if o:
        share = f", {100 * o['share']:.0f}% of the duration" if o["share"] is not None else ""
        rows.append(("overhead estimate", f"about {_fmt_s(o['estimate_s'])}{share} "
                     f"({o['events']:,} events x {NS_PER_EVENT} ns; the clock reads alone "
                     f"{_fmt_s(o['clock_s'])}; see docs/report.md)"))
    lb = info.get("line_bookkeeping_ns")
    if lb is not None and info.get("lines"):
        share = (f", {100 * lb / info['duration_ns']:.0f}% of the duration"
                 if info.get("duration_ns") else "")
        rows.append(("line bookkeeping", f"{_fmt_s(lb / 1e9)} measured{share} (pyprof's own "
                     f"work on line events, left out of every time in this report)"))
    if sampling and not o:
        rows.append(("overhead estimate", "not estimated for sampling (it costs per sample, "
                     "not per event: see benchmarks/RESULTS.md)"))
    mem = info.get("memory")
    if mem:
        rows.append(("peak traced memory", _fmt_b(mem.get("peak_bytes", 0))
                     + ("" if mem.get("mode") == "exact" else f" ({mem.get('mode')})")))
        if mem.get("rss_peak_bytes"):
            rows.append(("RSS peak", _fmt_b(mem["rss_peak_bytes"])))
        if mem.get("native_allocs") or mem.get("temporary"):
            ext = list(session.memory_ext.values())
            if mem.get("native_allocs"):
                rows.append(("allocated by C code", _fmt_b(sum(e.native_alloc_bytes for e in ext))
                             + " (malloc, mmap: --native-allocs)"))
            if mem.get("temporary"):
                rows.append(("temporary allocations",
                             f"{sum(e.temp_count for e in ext):,} blocks, "
                             + _fmt_b(sum(e.temp_bytes for e in ext))
                             + f" (freed within {mem['temporary']} allocation(s))"))
    gc = info.get("gc")
    if gc:
        n = gc.get("collections", [0, 0, 0])
        rows.append(("garbage collector",
                     f"{sum(n):,} collections (gen 0/1/2: {n[0]:,}/{n[1]:,}/{n[2]:,}), "
                     f"{_fmt_s(sum(gc.get('pause_ns', [0])) / 1e9)} in all, longest pause "
                     f"{_fmt_s(gc.get('max_pause_ns', 0) / 1e9)}"))
    rows.append(("functions", f"{len(session.functions):,} in {len(session.threads):,} "
                              f"thread(s)"))
    if session.steps:
        rows.append(("steps", f"{len(session.steps):,}"))
    return rows


# ---------------------------------------------------------------- tables
def function_table(session) -> dict | None:
    """The op view's columns as rows [name, file, line, kind, values...],
    largest first, at most MAX_FUNCTIONS."""
    available = views.available_columns(session, "op")
    cols = [c for c in TABLE_COLUMNS if c in available]
    if not cols:
        return None
    data = views.view(session, "op", select=cols)
    rows = data["rows"]
    out = [[r["name"], r["file"], r["line"], r["kind"], *(r.get(c) for c in cols)]
           for r in rows[:MAX_FUNCTIONS]]
    return {"columns": cols, "units": [views.COLUMNS[c][1] for c in cols],
            "headers": [views.COLUMNS[c][0] for c in cols],
            "meanings": [views.COLUMNS[c][2] for c in cols],
            "rows": out, "total": len(rows), "order": _order(cols)}


def _order(cols) -> str:
    return next((c for c in ("time", "samples", "bytes", "calls") if c in cols), cols[0])


def _weight_column(cols) -> str | None:
    """The column that ranks files and colours lines by default."""
    return next((c for c in ("self-samples", "time", "hits", "bytes") if c in cols), None)


def _running_by_file(session) -> dict:
    """--wall --async: file -> on-CPU samples of its own lines. The wall
    samples of such a run are mostly the loop's idle wait (selectors.py) and
    tasks' awaiting: ranked by them, the heatmap would open on asyncio's code."""
    si = session.info.get("sampling") or {}
    if not session.tasks or si.get("mode") != "wall":
        return {}
    cpu = {views.STATES.index("python"), views.STATES.index("native")}
    out: dict = {}
    for (_, sid, state), c in session.samples.items():
        frames = session.stacks[sid].frames
        if state in cpu and frames:
            f = session.functions.get(frames[-1][0])
            if f is not None and f.filename:
                out[f.filename] = out.get(f.filename, 0) + c.count
    return out


def _insn_lines(session) -> dict:
    """--opcodes: file -> line -> {"segs": [[start, end, seconds], ...] the
    line's characters by the time of the smallest expression covering them
    (no overlap, in order), "ops": [[opcode, base, state, samples, hits,
    seconds, col, end col, fragment], ...] its instructions, most time
    first}."""
    from ..analysis.opcodes import expressions, has_instructions
    if not has_instructions(session):
        return {}
    out: dict = {}
    for (fid, line), exprs in expressions(session).items():
        fn = session.functions[fid]
        slot = out.setdefault(fn.filename, {}).setdefault(line, {"exprs": [], "ops": []})
        slot["exprs"] += [e for e in exprs if e.col is not None and e.end_col is not None]
        for e in exprs:
            slot["ops"] += [[i.opcode, i.base, i.state, i.samples, i.hits, round(i.seconds, 9),
                             i.col, i.end_col, (i.fragment or "")[:80]] for i in e.insns]
    for lines in out.values():
        for slot in lines.values():
            slot["ops"].sort(key=lambda o: (-o[5], -o[3], -o[4]))
            slot["segs"] = _segments(slot.pop("exprs"))
    return out


def _segments(exprs) -> list:
    """Non-overlapping [start, end, seconds] runs of a line's characters, each
    the time of the smallest expression covering them (the innermost: a call's
    arguments are their own, not the call's)."""
    if not exprs:
        return []
    end = max(e.end_col for e in exprs if e.end_col is not None)
    per_char = []
    for c in range(end):
        cover = [e for e in exprs if e.col <= c < e.end_col]
        best = min(cover, key=lambda e: (e.end_col - e.col, -e.seconds), default=None)
        per_char.append(round(best.seconds, 9) if best is not None else None)
    segs = []
    for c, v in enumerate(per_char):
        if v is None or v <= 0:
            continue
        if segs and segs[-1][1] == c and segs[-1][2] == v:
            segs[-1][1] = c + 1
        else:
            segs.append([c, c + 1, v])
    return segs


def heatmap(session) -> dict | None:
    """Per file: its source lines with the figures of the lines view (and,
    --opcodes, each line's expressions and instructions)."""
    available = views.available_columns(session, "lines")
    cols = [c for c in HEAT_COLUMNS if c in available]
    if not cols or not (session.lines or session.samples or session.memory):
        return None
    rows = views.view(session, "lines", select=cols)["rows"]
    by_file: dict = {}
    for r in rows:          # several functions can share a line (a lambda, 3.11's listcomp)
        if r["file"] and r["line"] > 0:
            line = by_file.setdefault(r["file"], {}).get(r["line"])
            if line is None:
                by_file[r["file"]][r["line"]] = {c: r.get(c) for c in cols} | {
                    "source": r.get("source")}
            else:
                for c in cols:
                    if r.get(c) is not None:
                        line[c] = (line[c] or 0) + r[c]
    if not by_file:
        return None
    totals = {c: sum(v.get(c) or 0 for f in by_file.values() for v in f.values()) or 1
              for c in cols}

    def weight(lines):     # a file's largest share of any column
        return max(sum(v.get(c) or 0 for v in lines.values()) / totals[c] for c in cols)

    # the files with the most weight are kept; among them, those that ran first
    kept = sorted(by_file.items(), key=lambda kv: (-weight(kv[1]), kv[0]))[:MAX_FILES]
    running = _running_by_file(session)
    ranked = sorted(kept, key=lambda kv: (-running.get(kv[0], 0), -weight(kv[1]), kv[0]))
    hashes = session.meta.get("sources", {})
    insns = _insn_lines(session)
    files = []
    for filename, lines in ranked:
        src, note = read_source(filename, hashes.get(filename))
        last = max(len(src), max(lines))
        if last <= MAX_FILE_LINES:
            keep = range(1, last + 1)
        else:
            wanted = set()
            for ln in lines:
                wanted.update(range(max(1, ln - CONTEXT), ln + CONTEXT + 1))
            keep = sorted(n for n in wanted if n <= last)
            note = ((note + "; ") if note else "") + (
                f"a long file ({last:,} lines): only the lines with data and {CONTEXT} "
                f"around them")
        out = []
        for n in keep:
            r = lines.get(n)
            text = src[n - 1].rstrip("\r\n") if n <= len(src) else (
                (r or {}).get("source") or "")
            out.append([n, text] + ([round(v, 9) if isinstance(v, float) else v
                                     for v in (r.get(c) for c in cols)] if r else []))
        entry = {"file": filename, "note": note, "lines": out, "weight": round(weight(lines), 6)}
        if filename in insns:
            kept = set(keep)
            entry["insns"] = {str(n): v for n, v in insns[filename].items() if n in kept}
        files.append(entry)
    return {"columns": cols, "units": [views.COLUMNS[c][1] for c in cols],
            "headers": [views.COLUMNS[c][0] for c in cols], "files": files,
            "default": _weight_column(cols), "total_files": len(by_file)}


# ---------------------------------------------------------------- flame graphs
def prune(root, fraction=None, budget=None) -> int:
    """Drop, in place, the frames of an unpacked tree (flamegraph.add_path
    nodes: [name, file, line, value, {frame: child}]) smaller than `fraction`
    of the root, and the smallest ones beyond `budget` frames (a frame is never
    larger than its parent, so what stays is still a tree). Returns how many
    frames were dropped, their descendants included. Iterative: stacks can be
    deep."""
    fraction = FLAME_MIN_FRACTION if fraction is None else fraction
    budget = MAX_FLAME_NODES if budget is None else budget
    minimum = root[3] * fraction
    values, todo = [], [root]
    while todo:
        n = todo.pop()
        values.append(n[3])
        todo.extend(n[4].values())
    keep = lambda v: v >= minimum   # noqa: E731
    if sum(1 for v in values if v >= minimum) > budget:
        cutoff = sorted(values, reverse=True)[budget]
        keep = lambda v: v > cutoff and v >= minimum   # noqa: E731
    kept, todo = 1, [root]
    while todo:
        n = todo.pop()
        n[4] = {k: c for k, c in n[4].items() if keep(c[3])}
        kept += len(n[4])
        todo.extend(n[4].values())
    return len(values) - kept


def _flame_trees(session, frames_of) -> tuple:
    """({tree name: packed root}, frames dropped) from (tree names, frames,
    value) rows; the trees are pruned before they are packed."""
    roots: dict = {}
    for names, frames, value in frames_of:
        for name in names:
            add_path(roots.setdefault(name, new_root()), frames, value)
    dropped = sum(prune(r) for r in roots.values())
    return {k: pack(v) for k, v in roots.items()}, dropped


def flame(session) -> dict | None:
    """The flame graph: sampled stacks (samples), or the calling-context tree
    of traced calls (self time in ns); "all threads" and, with more than one
    thread, one tree per thread."""
    if not has_stacks(session):
        return None
    sampled = bool(session.info.get("sampling"))
    stacks = list(named_stacks(session, threads=False))
    several = len({t for t, *_ in stacks}) > 1

    def rows():
        for t, state, frames, count, weight in stacks:
            th = session.threads.get(t)
            names = ("all threads", th.name if th else f"thread {t}") if several else (
                "all threads",)
            yield names, frames, count if sampled else weight

    threads, dropped = _flame_trees(session, rows())
    if not threads:
        return None
    return {"unit": "samples" if sampled else "ns", "threads": threads, "pruned": dropped}


def memory_flame(session) -> dict | None:
    """The memory flame graph: bytes allocated, live at the peak, live at the
    end, by allocation stack (as memflame.py)."""
    if not session.memory_stacks:
        return None
    views_ = {"bytes allocated": lambda c: c.alloc_bytes,
              "bytes live at the peak": lambda c: c.at_peak_bytes,
              "bytes live at the end": lambda c: c.net_bytes}

    def rows():
        for sid, c in session.memory_by_stack.items():
            if sid not in session.memory_stacks:
                continue
            frames = memory_stack_frames(session, sid)
            for name, value in views_.items():
                if value(c) > 0:
                    yield (name,), frames, value(c)

    threads, dropped = _flame_trees(session, rows())
    if not threads:
        return None
    return {"unit": "bytes", "threads": {k: threads[k] for k in views_ if k in threads},
            "pruned": dropped}


# ---------------------------------------------------------------- memory, steps
def memory_svg(session) -> str | None:
    from .memcurve import render
    if not (session.info.get("memory") and session.memory_curve):
        return None
    return render(session)


def steps(session) -> dict | None:
    if not session.steps:
        return None
    rows = []
    for i, st in enumerate(session.steps[:MAX_STEPS]):
        top = []
        if i < STEP_TOP_STEPS:
            top = _step_top(st)
        rows.append([st.index, st.label, round(st.start, 9), round(st.end, 9),
                     round(st.end - st.start, 9), top])
    return {"rows": rows, "total": len(session.steps), "top_of": STEP_TOP_STEPS}


def _step_top(st) -> list:
    """The three functions with the most self time (samples, bytes) in a step."""
    available = views.available_columns(st.data, "op")
    order = next((c for c in ("self-time", "self-samples", "self-bytes") if c in available),
                 None)
    if order is None:
        return []
    try:
        rows = views.view(st.data, "op", select=[order], order_by=order, limit=3)["rows"]
    except PyprofError:
        return []
    return [[r["name"], r[order], views.COLUMNS[order][1]] for r in rows if r.get(order)]


def tasks_section(session) -> str | None:
    """The tasks view as a static table (escaped), longest running first."""
    available = views.available_columns(session, "tasks")
    if not available:
        return None
    cols = [c for c in ("coroutine", "state", "running", "awaiting", "samples", "steps",
                        "created", "thread") if c in available]
    rows = views.view(session, "tasks", select=cols, order_by="running")["rows"]
    head = "".join(f'<th title="{html.escape(views.COLUMNS[c][2])}">'
                   f'{html.escape(views.COLUMNS[c][0])}</th>' for c in cols)

    def cell(c, v):
        if v is None:
            return "<td></td>"
        if views.COLUMNS[c][1] == "s":
            return f'<td class="num">{html.escape(format_time(v))}</td>'
        return f'<td class="num">{v}</td>' if views.COLUMNS[c][1] else \
            f"<td>{html.escape(str(v))}</td>"
    body = "".join(f"<tr><td>{html.escape(r['name'])}</td>"
                   + "".join(cell(c, r.get(c)) for c in cols) + "</tr>"
                   for r in rows[:MAX_TASKS])
    note = (f'<div class="note">the {MAX_TASKS} tasks that ran longest of {len(rows)}</div>'
            if len(rows) > MAX_TASKS else "")
    return (f'<section id="sec-tasks"><h2>Tasks</h2>{note}<div class="scroll">'
            f'<table id="tasks"><thead><tr><th>task</th>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div></section>\n')


CLUSTERS = ("dask", "ray", "spark")


def cluster_section(session) -> str | None:
    """A Dask, Ray or Spark job's workers (a process each) and its task groups
    (pyprof tasks' figures), as static tables (escaped)."""
    from ..analysis import taskgroups
    workers = []
    for i, rec in enumerate(session.processes):
        for engine in CLUSTERS:
            info = rec.get(engine)
            if isinstance(info, dict):
                tasks = info.get("tasks") or {}
                workers.append((engine, info.get("worker") or info.get("scheduler") or "",
                                str(info.get("host", rec.get("host", ""))),
                                str(info.get("pid", rec.get("pid", ""))),
                                sum(t.get("count", 0) for t in tasks.values()),
                                sum(t.get("total_ns", 0) for t in tasks.values()) / 1e9,
                                sum(t.get("cpu_ns", 0) for t in tasks.values()) / 1e9))
    if not workers:
        return None
    esc = html.escape

    def num(text):
        return f'<td class="num">{esc(text)}</td>'
    body = "".join(f"<tr><td>{esc(e)}</td><td>{esc(str(w))}</td><td>{esc(h)}</td>{num(p)}"
                   f"{num(f'{n:,}')}{num(format_time(t))}{num(format_time(c))}</tr>"
                   for e, w, h, p, n, t, c in workers)
    parts = ['<section id="sec-workers"><h2>Workers</h2><div class="scroll">'
             '<table id="workers"><thead><tr><th>engine</th><th>worker</th><th>host</th>'
             '<th title="process id">pid</th><th title="tasks run">tasks</th>'
             '<th title="wall time of its tasks">task time</th>'
             '<th title="thread CPU time of its tasks">task CPU</th></tr></thead>'
             f'<tbody>{body}</tbody></table></div>']
    try:
        rows = taskgroups.rows(taskgroups.task_figures(session))
    except PyprofError:
        rows = []
    if rows:
        memory = any(r["peak_bytes"] is not None for r in rows)
        from ..render.tasktable import HEADS
        shown = HEADS if memory else HEADS[:2 + taskgroups.TIMES]
        heads = "".join(f"<th>{esc(h)}</th>" for h in shown)

        def peaks(r):
            return "".join(num(_fmt_b(r[c]) if r[c] is not None else "-")
                           for c in ("peak_bytes", "mean_peak_bytes")) if memory else ""
        body = "".join(
            f"<tr><td>{esc(r['group'])}</td>{num(format(r['count'], ','))}"
            f"{num(format_time(r['total_s']))}{num(format_time(r['mean_s']))}"
            f"{num(format(r['cv'], '.1%'))}{num(format_time(r['min_s']))}"
            f"{num(format_time(r['max_s']))}{num(format_time(r['cpu_s']))}{peaks(r)}</tr>"
            for r in rows[:MAX_TASKS])
        parts.append(f'<h3>Task groups</h3><div class="scroll"><table id="taskgroups"><thead>'
                     f'<tr>{heads}</tr></thead><tbody>{body}</tbody></table></div>')
    parts.append("</section>\n")
    return "".join(parts)


# ---------------------------------------------------------------- the page
def data(session) -> dict:
    """What the page's script renders (the JSON blob)."""
    return {"version": __version__, "functions": function_table(session),
            "heatmap": heatmap(session), "flame": flame(session),
            "memflame": memory_flame(session), "steps": steps(session),
            "limits": {"functions": MAX_FUNCTIONS, "files": MAX_FILES,
                       "flame_min_fraction": FLAME_MIN_FRACTION, "flame_nodes": MAX_FLAME_NODES,
                       "steps": MAX_STEPS}}


def render(session) -> str:
    d = data(session)
    title = "pyprof report: " + (" ".join(session.meta.get("argv", [])) or "capture")
    summ = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in summary(session))
    svg = memory_svg(session)
    nav = [("summary", "Summary")]
    for key, label in (("functions", "Functions"), ("heatmap", "Code heatmap"),
                       ("flame", "Flame graph")):
        if d[key]:
            nav.append((key, label))
    if d["memflame"] and not d["flame"]:
        nav.append(("flame", "Flame graph"))
    if svg:
        nav.append(("memory", "Memory"))
    if d["steps"]:
        nav.append(("steps", "Steps"))
    tasks = tasks_section(session)
    if tasks:
        nav.append(("tasks", "Tasks"))
    cluster = cluster_section(session)
    if cluster:
        nav.append(("workers", "Workers"))
    links = " ".join(f'<a href="#sec-{k}">{v}</a>' for k, v in nav)
    parts = [HEAD.replace("%TITLE%", html.escape(title)).replace("%CSS%", CSS + FLAME_CSS),
             f'<header><h1>{html.escape(title)}</h1><nav>{links}</nav></header>\n',
             f'<section id="sec-summary"><h2>Summary</h2><table id="summary">{summ}</table>'
             f'</section>\n']
    if d["functions"]:
        parts.append(SEC_FUNCTIONS)
    if d["heatmap"]:
        parts.append(SEC_HEATMAP)
    if d["flame"] or d["memflame"]:
        parts.append(SEC_FLAME)
    if svg:
        parts.append(f'<section id="sec-memory"><h2>Memory curve</h2>'
                     f'<div id="memcurve">{svg}</div></section>\n')
    if d["steps"]:
        parts.append(SEC_STEPS)
    if tasks:
        parts.append(tasks)
    if cluster:
        parts.append(cluster)
    parts.append(f'<footer>pyprof {html.escape(__version__)}: a self-contained report '
                 f'(no network). Columns: docs/columns.md; this page: docs/report.md.</footer>\n')
    parts.append(f'<script type="application/json" id="data">{json_for_html(d)}</script>\n')
    parts.append("<script>\n" + FLAME_JS + JS + "</script>\n</body></html>\n")
    return "".join(parts)


def write(session, path):
    text = render(session)          # whole before anything is written
    atomic_write(path, text)


HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%CSS%</style></head><body>
"""

CSS = """
body{font:13px system-ui,sans-serif;margin:0;background:#fff;color:#222}
header{padding:8px 12px;border-bottom:1px solid #ddd;position:sticky;top:0;background:#fafafa;z-index:5}
header h1{font-size:15px;margin:0 0 4px 0;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
nav a{margin-right:12px;color:#1a56b0;text-decoration:none}
section{padding:4px 12px 12px 12px;border-bottom:1px solid #eee}
h2{font-size:14px;margin:10px 0 6px 0}
table{border-collapse:collapse}
#summary th{text-align:left;padding:2px 16px 2px 0;color:#555;font-weight:normal;vertical-align:top}
#summary td{padding:2px 0}
.ctl{display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin:4px 0}
.note{color:#666;font-size:12px;margin:4px 0}
#ftable th{cursor:pointer;user-select:none;background:#f2f2f2;position:sticky;top:0}
#ftable th,#ftable td{padding:2px 8px;border-bottom:1px solid #eee;white-space:nowrap}
#ftable td.num,#heat td.num{text-align:right;font-variant-numeric:tabular-nums}
#ftable th.sorted{background:#dde7f7}
.scroll{max-height:520px;overflow:auto;border:1px solid #ddd}
td.fname{max-width:50ch;overflow:hidden;text-overflow:ellipsis}
td.loc{color:#666}
#heat{font:12px ui-monospace,monospace;width:100%}
#heat td{padding:0 6px;white-space:pre}
#heat td.ln{color:#888;text-align:right}
#heat tr.gap td{color:#aaa}
#heat td.src{width:100%}
#heat span.expr{border-radius:2px}
#heat span.generic{color:#8a2be2;font-size:10px;margin-left:8px}
#steps td,#steps th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
#steps td.num,#tasks td.num{text-align:right}
#tasks td,#tasks th{padding:1px 8px}
.tabs button{border:1px solid #bbb;background:#f4f4f4;padding:3px 10px;cursor:pointer}
.tabs button.on{background:#dde7f7;border-color:#6b8fd6}
footer{padding:8px 12px;color:#888;font-size:11px}
"""

SEC_FUNCTIONS = """<section id="sec-functions"><h2>Functions</h2>
<div class="ctl"><input id="ffilter" placeholder="filter (name or file)" size="32">
<span id="fcount" class="note"></span></div>
<div class="note">Click a column header to sort. Columns are defined in docs/columns.md.</div>
<div class="scroll"><table id="ftable"><thead><tr id="fhead"></tr></thead>
<tbody id="fbody"></tbody></table></div></section>
"""

SEC_HEATMAP = """<section id="sec-heatmap"><h2>Code heatmap</h2>
<div class="ctl"><label>file <select id="hfile"></select></label>
<label>colour by <select id="hcol"></select></label><span id="hnote" class="note"></span></div>
<div class="scroll"><table id="heat"><thead><tr id="hhead"></tr></thead><tbody id="hbody">
</tbody></table></div></section>
"""

SEC_FLAME = """<section id="sec-flame"><h2>Flame graph</h2>
<div class="ctl tabs" id="ftabs"></div>
<div id="fl-pane"><div class="ctl"><label>thread <select id="fl-thread"></select></label>
<input id="fl-search" placeholder="search (regex)" size="24"><button id="fl-reset">reset zoom</button>
<span id="fl-status" class="fgstatus"></span></div>
<div id="fl-note" class="note"></div><div id="fl-fg" class="fg"></div></div>
<div id="mf-pane"><div class="ctl"><label>view <select id="mf-thread"></select></label>
<input id="mf-search" placeholder="search (regex)" size="24"><button id="mf-reset">reset zoom</button>
<span id="mf-status" class="fgstatus"></span></div>
<div id="mf-note" class="note"></div><div id="mf-fg" class="fg"></div></div>
<div id="fl-tip" class="tip"></div><div id="mf-tip" class="tip"></div></section>
"""

SEC_STEPS = """<section id="sec-steps"><h2>Steps</h2><div id="snote" class="note"></div>
<div class="scroll"><table id="steps"><thead><tr><th>step</th><th>name</th><th>start</th>
<th>end</th><th>duration</th><th>top functions (self)</th></tr></thead><tbody id="sbody">
</tbody></table></div></section>
"""

JS = r"""
(function () {
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = id => document.getElementById(id);
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}
function fmtS(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1) return v.toFixed(3) + " s";
  if (a >= 1e-3) return (v * 1e3).toFixed(2) + " ms";
  return (v * 1e6).toFixed(1) + " us";
}
function fmtB(v) {
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0, a = Math.abs(v);
  while (a >= 1024 && i < 3) { a /= 1024; v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + " " + u[i];
}
function fmt(v, unit) {
  if (v === null || v === undefined) return "";
  if (unit === "s") return fmtS(v);
  if (unit === "B") return fmtB(v);
  return v.toLocaleString("en");
}
function loc(file, line) {
  return file ? file.split("/").slice(-1)[0] + ":" + line : "";
}

// ---- function table: sortable, filtered
function functions() {
  const T = D.functions; if (!T) return;
  const head = $("fhead"), body = $("fbody");
  let key = T.columns.indexOf(T.order) + 4, desc = true;
  const names = ["function", "file:line"].concat(T.headers);
  const index = [0, 1].concat(T.columns.map((c, i) => i + 4));
  names.forEach((n, i) => {
    const th = el("th", n); th.dataset.col = index[i];
    if (i >= 2) th.title = T.meanings[i - 2];
    th.onclick = () => {
      const c = index[i];
      if (c === key) desc = !desc; else { key = c; desc = c >= 4; }
      draw();
    };
    head.appendChild(th);
  });
  function value(r, c) { return c === 1 ? (r[1] || "~") + ":" + r[2] : r[c]; }
  function draw() {
    const q = $("ffilter").value.toLowerCase();
    const rows = T.rows.filter(r => !q || r[0].toLowerCase().includes(q) ||
                                     (r[1] || "").toLowerCase().includes(q));
    rows.sort((a, b) => {
      let x = value(a, key), y = value(b, key);
      if (x === null || x === undefined) x = -Infinity;
      if (y === null || y === undefined) y = -Infinity;
      const o = x < y ? -1 : x > y ? 1 : 0;
      return desc ? -o : o;
    });
    for (const th of head.children) th.classList.toggle("sorted", +th.dataset.col === key);
    const frag = document.createDocumentFragment();
    for (const r of rows) {
      const tr = el("tr", null, "frow");
      const n = el("td", r[0], "fname"); n.title = r[0]; tr.appendChild(n);
      const l = el("td", loc(r[1], r[2]), "loc"); l.title = r[1] ? r[1] + ":" + r[2] : r[3];
      tr.appendChild(l);
      T.columns.forEach((c, i) => tr.appendChild(el("td", fmt(r[i + 4], T.units[i]), "num")));
      frag.appendChild(tr);
    }
    body.textContent = ""; body.appendChild(frag);
    $("fcount").textContent = rows.length + " shown" + (T.total > T.rows.length ?
      "; the report keeps the " + T.rows.length + " largest of " + T.total + " functions" : "");
  }
  $("ffilter").oninput = draw;
  draw();
}

// ---- --opcodes: a line's expressions heated inside it, its instructions on hover
function srcCell(text, ins) {
  const td = el("td", null, "src"), segs = ins.segs || [];
  let max = 0, at = 0;
  for (const s of segs) if (s[2] > max) max = s[2];
  for (const s of segs) {
    if (s[0] > at) td.appendChild(document.createTextNode(text.slice(at, s[0])));
    const sp = el("span", text.slice(s[0], s[1]), "expr");
    sp.style.background = "rgba(150,40,200," + (0.12 + 0.6 * s[2] / (max || 1)).toFixed(3) + ")";
    td.appendChild(sp); at = Math.max(at, s[1]);
  }
  if (at < text.length) td.appendChild(document.createTextNode(text.slice(at)));
  const generic = ins.ops.filter(o => o[2] === "adaptive").length;
  if (generic) td.appendChild(el("span", " " + generic + " generic", "generic"));
  td.title = ins.ops.slice(0, 12).map(o => o[0] + (o[2] ? " (" + o[2] + ")" : "") +
      "  " + (o[3] ? o[3] + " samples" : o[4] + " hits") + "  " + fmt(o[5], "s") +
      "  [" + o[6] + ":" + o[7] + "] " + o[8]).join("\n");
  return td;
}

// ---- code heatmap: one file at a time, lines coloured by a column
function heatmap() {
  const H = D.heatmap; if (!H) return;
  const fsel = $("hfile"), csel = $("hcol");
  H.files.forEach((f, i) => {
    const o = el("option", f.file + "  (" + (100 * f.weight).toFixed(1) + "%)"); o.value = i;
    fsel.appendChild(o);
  });
  H.columns.forEach((c, i) => { const o = el("option", H.headers[i]); o.value = i; csel.appendChild(o); });
  csel.value = Math.max(0, H.columns.indexOf(H.default));
  const head = $("hhead");
  ["line"].concat(H.headers, ["source"]).forEach(n => head.appendChild(el("th", n)));
  function draw() {
    const f = H.files[+fsel.value], ci = +csel.value, body = $("hbody");
    let max = 0;
    for (const r of f.lines) if (r.length > 2 && r[2 + ci] > max) max = r[2 + ci];
    const frag = document.createDocumentFragment();
    let prev = 0;
    for (const r of f.lines) {
      if (prev && r[0] !== prev + 1) {
        const g = el("tr", null, "gap"); g.appendChild(el("td", "...", "ln"));
        frag.appendChild(g);
      }
      prev = r[0];
      const tr = el("tr", null, "hl");
      tr.appendChild(el("td", String(r[0]), "ln"));
      H.columns.forEach((c, i) => tr.appendChild(el("td", r.length > 2 ? fmt(r[2 + i], H.units[i]) : "", "num")));
      const ins = f.insns && f.insns[String(r[0])];
      tr.appendChild(ins ? srcCell(r[1], ins) : el("td", r[1], "src"));
      const v = r.length > 2 ? r[2 + ci] || 0 : 0;
      if (v > 0 && max > 0) {
        const a = 0.08 + 0.72 * v / max;
        tr.style.background = H.units[ci] === "B" ? "rgba(40,110,220," + a.toFixed(3) + ")"
                                                   : "rgba(235,80,30," + a.toFixed(3) + ")";
      }
      frag.appendChild(tr);
    }
    body.textContent = ""; body.appendChild(frag);
    // open at the line with the most of the column
    let best = null, bv = 0;
    const rows = body.querySelectorAll("tr.hl");
    f.lines.forEach((r, i) => { const v = r.length > 2 ? r[2 + ci] || 0 : 0; if (v > bv) { bv = v; best = rows[i]; } });
    const box = body.closest(".scroll");
    if (best && box) box.scrollTop = Math.max(0, best.offsetTop - box.clientHeight / 3);
    $("hnote").textContent = (f.note ? f.note + ". " : "") + (H.total_files > H.files.length ?
      "The report keeps the " + H.files.length + " of " + H.total_files + " files with the most weight." : "");
  }
  fsel.onchange = draw; csel.onchange = draw;
  draw();
}

// ---- flame graphs: the flame graph page's code, once per tab
function flames() {
  const tabs = $("ftabs"); if (!tabs) return;
  const made = {}, panes = [];
  const note = (d, id) => { $(id).textContent = d.pruned ?
      d.pruned + " small frames are left out: those under " + (100 * D.limits.flame_min_fraction) +
      "% of their tree, and beyond the " + D.limits.flame_nodes + " largest of a tree." : ""; };
  if (D.flame) panes.push(["fl-", D.flame, D.flame.unit === "ns" ? "time (self time of traced calls)" : "samples"]);
  if (D.memflame) panes.push(["mf-", D.memflame, "memory (bytes by allocation stack)"]);
  for (const p of ["fl-", "mf-"]) if (!panes.some(x => x[0] === p)) $(p + "pane").style.display = "none";
  function show(i) {
    panes.forEach((p, j) => {
      $(p[0] + "pane").style.display = i === j ? "" : "none";
      tabs.children[j].classList.toggle("on", i === j);
    });
    const p = panes[i];
    if (!made[p[0]]) { made[p[0]] = flameGraph(p[1], p[0], false); note(p[1], p[0] + "note"); }
    else made[p[0]].render();
  }
  panes.forEach((p, i) => { const b = el("button", p[2]); b.onclick = () => show(i); tabs.appendChild(b); });
  show(0);
}

// ---- steps
function steps() {
  const S = D.steps; if (!S) return;
  const frag = document.createDocumentFragment();
  for (const r of S.rows) {
    const tr = el("tr", null, "srow");
    tr.appendChild(el("td", String(r[0]), "num"));
    tr.appendChild(el("td", r[1]));
    tr.appendChild(el("td", fmtS(r[2]), "num"));
    tr.appendChild(el("td", fmtS(r[3]), "num"));
    tr.appendChild(el("td", fmtS(r[4]), "num"));
    tr.appendChild(el("td", r[5].map(t => t[0] + " " + fmt(t[1], t[2])).join(", ")));
    frag.appendChild(tr);
  }
  $("sbody").appendChild(frag);
  $("snote").textContent = (S.total > S.rows.length ? "The first " + S.rows.length + " of " + S.total + " steps. " : "") +
    (S.total > S.top_of ? "Top functions for the first " + S.top_of + " steps. " : "") +
    "Times in seconds since profiling started; the memory curve marks each step's start.";
}

functions(); heatmap(); flames(); steps();
document.body.dataset.renderMs = performance.now().toFixed(0);
document.body.dataset.rendered = "yes";
})();
"""
