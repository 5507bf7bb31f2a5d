"""callgrind format (valgrind's cl-format, version 1), for callgrind_annotate,
KCachegrind/QCachegrind, gprof2dot and speedscope.

Events ``ns`` (wall time, nanoseconds; first, so it is the sort key), when
the capture has line data ``hits`` (line hits, line targets only), and when it
has memory data ``alloc`` and ``net`` (bytes allocated on the line, and still
live at the end: self costs of the line; calls carry time only). Positions are
source lines:

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
from ..base.files import atomic_write


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
    memory: dict = {}
    for (fid, line), c in session.memory_lines().items():
        memory.setdefault(fid, {})[line] = c
    has_hits, has_mem = bool(lines), bool(session.info.get("memory"))

    files, names = _Names(), _Names()
    body = []
    totals = [0, 0, 0, 0]                       # ns, hits, alloc, net

    def cost(line, ns_=0, hits=0, alloc=0, net=0):
        vec = [ns_] + ([hits] if has_hits else []) + ([alloc, net] if has_mem else [])
        totals[0] += ns_
        totals[1] += hits
        totals[2] += alloc
        totals[3] += net
        return f"{line} " + " ".join(str(v) for v in vec)

    fids = set(ftot) | set(memory)
    for fid in sorted(fids, key=lambda f: (_file(funcs[f]), funcs[f].line, _name(funcs[f]))):
        fn = funcs[fid]
        here = _file(fn)
        body.append(f"fl={files.ref(here)}")
        body.append(f"fn={names.ref(_name(fn))}")
        self_total = to_ns(ftot[fid].own) if fid in ftot else 0
        mem = memory.get(fid, {})
        own_time: dict = {}
        hits: dict = {}
        calls = []
        if fid in lines:
            rows = callrows.get(fid, {})
            spent = 0
            for line in sorted(lines[fid]):
                c = lines[fid][line]
                own = to_ns(c.time - sum(r.time for _, r in rows.get(line, ())))
                spent += own
                own_time[line] = own
                hits[line] = c.hits
            rest = self_total - spent            # before the first line event, rounding
            if rest > 0:
                own_time[fn.line] = own_time.get(fn.line, 0) + rest
            calls = [(line, callee, r.calls, r.time)
                     for line, rs in sorted(rows.items()) for callee, r in rs]
        elif fid in ftot:
            own_time[fn.line] = self_total
            calls = [(fn.line, callee, c.calls, c.total) for callee, c in sorted(edges.get(fid, ()))]
        for line in sorted(set(own_time) | set(mem)):
            m = mem.get(line)
            body.append(cost(line, own_time.get(line, 0), hits.get(line, 0),
                             m.alloc_bytes if m else 0, m.net_bytes if m else 0))
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
    events = ["ns"]
    if has_hits:
        head.append("event: hits : Line hits")
        events.append("hits")
    if has_mem:
        head += ["event: alloc : Bytes allocated (by the line itself)",
                 "event: net : Bytes allocated and still live at the end"]
        events += ["alloc", "net"]
    sums = [totals[0]] + ([totals[1]] if has_hits else []) + (totals[2:] if has_mem else [])
    text = " ".join(str(v) for v in sums)
    head += ["events: " + " ".join(events), f"summary: {text}", ""]
    return "\n".join(head + body + [f"totals: {text}", ""])


def write(session, path):
    atomic_write(path, render(session))

