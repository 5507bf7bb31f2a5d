"""callgrind format (valgrind's cl-format, version 1), for callgrind_annotate,
KCachegrind/QCachegrind, gprof2dot and speedscope.

Events ``ns`` (wall time, nanoseconds; first, so it is the sort key) and, when
the capture has line data, ``hits`` (line hits, line targets only). Positions are source lines:

- a line target has a self cost on each of its lines (its time minus the calls
  made from it) and one call record per (line, callee) from its call rows;
- every other function has its self time on its first line and one call record
  per callee (calls, inclusive time), at its first line.

Inclusive times follow the outermost-activation rule, so recursion never pushes
a function above 100%. Function names are ``qualname:firstline`` (unique in a
file); C functions are in the file ``<built-in>``.
"""
from __future__ import annotations

from .._version import __version__
from ._files import atomic_write


class _Names:
    """callgrind name compression: ``(id) name`` the first time, ``(id)`` after."""

    def __init__(self):
        self.ids = {}

    def ref(self, name):
        if name in self.ids:
            return f"({self.ids[name]})"
        self.ids[name] = len(self.ids) + 1
        return f"({self.ids[name]}) {name}"


def _file(fn):
    return fn.filename if fn.kind == "python" else "<built-in>"


def _name(fn):
    return f"{fn.qualname}:{fn.line}" if fn.kind == "python" else fn.name


def render(session) -> str:
    ns = session.time_unit * 1e9

    def to_ns(raw):
        return max(0, round(raw * ns))

    funcs = session.functions
    ftot = session.function_totals()
    edges: dict = {}
    for (a, b), c in session.edge_totals().items():
        edges.setdefault(a, []).append((b, c))
    lines: dict = {}
    for (fid, line), c in session.line_totals().items():
        lines.setdefault(fid, {})[line] = c
    callrows: dict = {}
    for (fid, line, callee), c in session.callrow_totals().items():
        callrows.setdefault(fid, {}).setdefault(line, []).append((callee, c))

    files, names = _Names(), _Names()
    body = []
    tot_ns = tot_hits = 0
    for fid in sorted(ftot, key=lambda f: (_file(funcs[f]), funcs[f].line, _name(funcs[f]))):
        fn = funcs[fid]
        here = _file(fn)
        body.append(f"fl={files.ref(here)}")
        body.append(f"fn={names.ref(_name(fn))}")
        self_total = to_ns(ftot[fid].own)
        if fid in lines:
            rows = callrows.get(fid, {})
            spent = 0
            for line in sorted(lines[fid]):
                c = lines[fid][line]
                own = to_ns(c.time - sum(r.time for _, r in rows.get(line, ())))
                spent += own
                body.append(f"{line} {own} {c.hits}")
                tot_ns += own
                tot_hits += c.hits
            rest = self_total - spent            # before the first line event, rounding
            if rest > 0:
                body.append(f"{fn.line} {rest}")
                tot_ns += rest
            calls = [(line, callee, r.calls, r.time)
                     for line, rs in sorted(rows.items()) for callee, r in rs]
        else:
            body.append(f"{fn.line} {self_total}")
            tot_ns += self_total
            calls = [(fn.line, callee, c.calls, c.total) for callee, c in sorted(edges.get(fid, ()))]
        for line, callee, ncalls, inclusive in calls:
            cf = funcs[callee]
            if _file(cf) != here:
                body.append(f"cfi={files.ref(_file(cf))}")     # repeated: it resets per call
            body.append(f"cfn={names.ref(_name(cf))}")
            body.append(f"calls={ncalls} {cf.line}")
            body.append(f"{line} {to_ns(inclusive)}")
        body.append("")
    meta = session.meta
    head = ["# callgrind format", "version: 1", f"creator: pyprof {__version__}",
            f"pid: {meta.get('pid', 0)}",
            "cmd: " + " ".join(str(a) for a in meta.get("argv", [])).replace("\n", " "),
            "positions: line", "event: ns : Wall time (nanoseconds)"]
    if lines:
        head += ["event: hits : Line hits", "events: ns hits", f"summary: {tot_ns} {tot_hits}", ""]
        tail = f"totals: {tot_ns} {tot_hits}"
    else:                                   # function level: no hits column at all
        head += ["events: ns", f"summary: {tot_ns}", ""]
        tail = f"totals: {tot_ns}"
    return "\n".join(head + body + [tail, ""])


def write(session, path):
    atomic_write(path, render(session))

