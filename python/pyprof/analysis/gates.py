"""Gates: whether a capture grew past a tolerance beyond its noise (``pyprof
diff --fail-above``), whether one capture stays within limits (``pyprof
check``), and the budgets' units (the pytest plugin's markers). docs/ci.md.

The noise rule. Each compared figure x gets a standard error from what its
capture recorded:

- sampled time: the samples are Poisson counts, so sigma(x) = x / sqrt(n) for
  x made of n samples;
- traced time: the clock cannot tell apart less than its read cost per event,
  sigma(x) = 2 * calls * clock_read_ns (a call is two events, each one clock
  read), at least one tick;
- with steps (pyprof.step()), the spread of the figure over the k steps adds
  sd_step * sqrt(k) (the total's run-to-run spread when steps are alike);
- sampled memory (--memory-sample R): sigma(x) = sqrt(x * R) (a Poisson count
  of x / R sampled allocations); exact memory has none.

A figure grew when its change is above PCT percent of BEFORE, above
``SIGMAS`` (3) standard errors of the difference, sqrt(sb^2 + sa^2), and above
the floor (--min-time; --min-bytes, MEMORY_FLOOR by default). What only one
capture has is listed, not judged: a renamed function is not a regression, and whatever it costs shows in
its callers and in the total.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..base.amounts import parse_count, parse_duration, parse_size
from ..errors import PyprofError
from .diff import function_key

SIGMAS = 3.0
# The memory gate's floor: the interpreter's own bookkeeping moves by kilobytes
# between runs of one program (the importer's cache of a directory's listing,
# which the first run's output files grow; interned strings; free lists).
MEMORY_FLOOR = 64 * 1024


# The grammar is amounts.py's (docs/cli.md, "Amounts"); these names are the
# gates' callers' (the CLI, the pytest plugin's markers).
def parse_seconds(value, what) -> float:
    """'50ms', '1.5s', '0.5', 0.25 (seconds) -> seconds (> 0)."""
    return parse_duration(value, what)


def parse_bytes(value, what) -> int:
    """'5MB', '512k', '1.5GiB', 4096 -> bytes (> 0; k, M, G are powers of 1024)."""
    return parse_size(value, what)


# ------------------------------------------------------------------ figures
@dataclass
class Figure:
    """One measured quantity of one capture: its value and standard error."""
    value: float
    sigma: float = 0.0


@dataclass
class Figures:
    """What a capture says about time or memory: the total, and per function
    (key: analysis.diff.function_key) the self figure; labels name them."""
    kind: str                           # "time" (seconds) or "memory" (bytes)
    method: str                         # "traced", "sampled", "memory exact", ...
    total: Figure
    functions: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)     # key -> (name, file, line)


def _label(m: Figures, fn):
    key = function_key(fn)
    m.labels.setdefault(key, (fn.qualname, fn.filename, fn.line))
    return key


def _step_sigmas(session, per_key) -> dict:
    """key -> sd over steps * sqrt(steps), from the capture's steps (k >= 2)."""
    steps = [st for st in session.steps if st.data is not None]
    if len(steps) < 2:
        return {}
    series = {}
    for i, st in enumerate(steps):
        for key, v in per_key(st.data).items():
            series.setdefault(key, [0.0] * len(steps))[i] = v
    out = {}
    k = len(steps)
    for key, xs in series.items():
        mean = sum(xs) / k
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (k - 1))
        out[key] = sd * math.sqrt(k)
    return out


def time_figures(session) -> Figures:
    """Total and per-function self time, with their noise (the module's rule)."""
    info = session.info
    if session.fstats:
        read_ns = float(info.get("clock_read_ns") or 0.0)
        tick = session.time_unit
        m = Figures("time", "traced", Figure(0.0))

        def self_times(s):
            out = {}
            for fid, c in s.function_totals().items():
                key = function_key(s.functions[fid])
                out[key] = out.get(key, 0.0) + s.seconds(c.own)
            return out

        calls_total = 0
        for fid, c in session.function_totals().items():
            key = _label(m, session.functions[fid])
            f = m.functions.setdefault(key, Figure(0.0))
            f.value += session.seconds(c.own)
            f.sigma += max(2 * c.calls * read_ns * 1e-9, tick)
            calls_total += c.calls
        for key, s in _step_sigmas(session, self_times).items():
            if key in m.functions:
                f = m.functions[key]
                f.sigma = math.hypot(f.sigma, s)
        # every instant is some function's self time: the total in the capture's clock
        m.total = Figure(sum(f.value for f in m.functions.values()),
                         max(2 * calls_total * read_ns * 1e-9, tick))
        return m
    if session.samples:
        m = Figures("time", "sampled", Figure(0.0))
        counts, weights = {}, {}
        n_all, w_all = 0, 0
        for (t, sid, state), c in session.samples.items():
            n_all += c.count
            w_all += c.weight
            frames = session.stacks[sid].frames
            if not frames or state != 0:
                continue
            fid = frames[-1][0]
            key = _label(m, session.functions[fid])
            counts[key] = counts.get(key, 0) + c.count
            weights[key] = weights.get(key, 0) + c.weight
        for key, w in weights.items():
            x = w * 1e-9
            m.functions[key] = Figure(x, x / math.sqrt(max(counts[key], 1)))
        x = w_all * 1e-9
        m.total = Figure(x, x / math.sqrt(max(n_all, 1)))
        return m
    raise PyprofError("it has no time to compare (a traced or sampled capture is needed)")


def memory_figures(session) -> Figures:
    """Peak traced bytes (the total) and bytes allocated per function."""
    mem = session.info.get("memory")
    if not mem:
        raise PyprofError("it has no memory data (profile with --memory)")
    rate = float(mem.get("sample_bytes") or 0)
    m = Figures("memory", "memory sampled" if rate else "memory exact", Figure(0.0))

    def sigma(x):
        return math.sqrt(max(x, 0) * rate) if rate else 0.0

    for fid, c in session.memory_functions().items():
        if fid not in session.functions:
            continue
        key = _label(m, session.functions[fid])
        f = m.functions.setdefault(key, Figure(0.0))
        f.value += c.alloc_bytes
    for f in m.functions.values():
        f.sigma = sigma(f.value)
    peak = float(mem.get("peak_bytes") or 0)
    m.total = Figure(peak, sigma(peak))
    return m


# ------------------------------------------------------------------ the diff gate
@dataclass
class Growth:
    what: str                           # "total" or the function's name
    file: str
    line: int
    before: float
    after: float
    noise: float                        # SIGMAS standard errors of the difference
    grew: bool                          # above PCT, the noise and the floor

    @property
    def change(self):
        return self.after - self.before

    @property
    def change_pct(self):
        return 100.0 * self.change / self.before if self.before else None


@dataclass
class Verdict:
    kind: str
    method_before: str
    method_after: str
    fail_above: float
    floor: float
    checked: list                       # Growth, the total first
    only_before: int = 0
    only_after: list = field(default_factory=list)    # (name, file, line, value)

    @property
    def failed(self) -> list:
        return [g for g in self.checked if g.grew]

    @property
    def within_noise(self) -> list:
        """Figures that grew past PCT and the floor but not past the noise:
        what a pass let through, and why."""
        return [g for g in self.checked if not g.grew and g.change > self.floor
                and g.change > self.fail_above / 100.0 * g.before]


def gate(before, after, fail_above: float, memory=False, min_time=0.001,
         min_bytes=MEMORY_FLOOR, names=("BEFORE", "AFTER")) -> Verdict:
    """Did AFTER grow past ``fail_above`` percent of BEFORE, beyond the noise?"""
    if fail_above < 0:
        raise PyprofError(f"--fail-above must be a percentage >= 0, not {fail_above:g}")
    figs = []
    for s, name in ((before, names[0]), (after, names[1])):
        try:
            figs.append(memory_figures(s) if memory else time_figures(s))
        except PyprofError as e:
            raise PyprofError(f"{name}: {e}") from None
    fb, fa = figs
    floor = min_bytes if memory else min_time
    v = Verdict(fb.kind, fb.method, fa.method, fail_above, floor, [])

    def judge(what, file, line, b: Figure, a: Figure):
        noise = SIGMAS * math.hypot(b.sigma, a.sigma)
        change = a.value - b.value
        grew = (change > floor and change > noise
                and change > fail_above / 100.0 * b.value)
        v.checked.append(Growth(what, file, line, b.value, a.value, noise, grew))

    judge("total", "", 0, fb.total, fa.total)
    for key, fig in fa.functions.items():
        if key in fb.functions:
            name, file, line = fa.labels[key]
            judge(name, file, line, fb.functions[key], fig)
        elif fig.value > floor:
            v.only_after.append((*fa.labels[key], fig.value))
    v.only_before = sum(1 for k in fb.functions if k not in fa.functions)
    v.checked[1:] = sorted(v.checked[1:], key=lambda g: (not g.grew, -g.change, g.what))
    v.only_after.sort(key=lambda r: -r[3])
    return v


def verdict_json(v: Verdict) -> dict:
    def row(g):
        return {"what": g.what, "file": g.file, "line": g.line, "before": g.before,
                "after": g.after, "change": g.change, "change_pct": g.change_pct,
                "noise": g.noise, "grew": g.grew}
    return {"kind": v.kind, "unit": "bytes" if v.kind == "memory" else "s",
            "methods": [v.method_before, v.method_after], "fail_above_pct": v.fail_above,
            "sigmas": SIGMAS, "floor": v.floor, "failed": bool(v.failed),
            "grew": [row(g) for g in v.failed], "total": row(v.checked[0]),
            "within_noise": [row(g) for g in v.within_noise],
            "checked": len(v.checked),
            "only_after": [{"what": n, "file": f, "line": ln, "value": x}
                           for n, f, ln, x in v.only_after],
            "only_before": v.only_before}


# ------------------------------------------------------------------ one capture
def match_functions(session, pattern) -> list:
    """Function ids whose qualified name, name, or 'file:qualname' (the file
    as a path suffix) is `pattern`."""
    import os
    file_part, _, name_part = pattern.rpartition(":")
    out = []
    for fid, fn in session.functions.items():
        if file_part:
            fname = os.path.normpath(fn.filename)
            want = os.path.normpath(file_part)
            if not (fname == want or fname.endswith(os.sep + want)):
                continue
            if name_part in (fn.qualname, fn.name):
                out.append(fid)
        elif pattern in (fn.qualname, fn.name):
            out.append(fid)
    return out


def closest_names(session, pattern, n=3) -> list:
    """The names of `session`'s functions closest to `pattern` (difflib,
    ignoring case), spelled as the pattern is: FILE:QUALNAME or a name."""
    import difflib
    import os
    file_part, colon, name_part = pattern.rpartition(":")
    names = set()
    for fn in session.functions.values():
        if _own_code(fn.qualname, fn.filename):
            continue
        if colon:
            names.add(f"{os.path.basename(fn.filename)}:{fn.qualname}")
        else:
            names.update((fn.qualname, fn.name))
    if colon:                           # FILE by its base name, as the names are
        pattern = f"{os.path.basename(file_part)}:{name_part}"
    by_lower = {}
    for name in sorted(names):
        by_lower.setdefault(name.lower(), name)
    found = difflib.get_close_matches(pattern.lower(), by_lower, n=n, cutoff=0.6)
    if not found:                       # nothing close: still the nearest few
        found = difflib.get_close_matches(pattern.lower(), by_lower, n=n, cutoff=0.0)
    return [by_lower[k] for k in found]


def _own_code(name, file) -> bool:
    """pyprof's own functions (the profiler's disable seen by the tracer)."""
    import os
    return "pyprof._cprof" in name or (
        file and os.path.dirname(os.path.abspath(file)) == os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))


def top_functions(session, n=3, share=0.01, skip=None) -> list:
    """The n functions that took the most time: (name, file, line, seconds),
    by self time (traced) or by samples at the leaf (sampled); those under
    `share` of the total, pyprof's own and those `skip(name, file)` names
    left out."""
    try:
        m = time_figures(session)
    except PyprofError:
        return []
    total = sum(f.value for f in m.functions.values())
    rows = sorted(((k, f) for k, f in m.functions.items()
                   if f.value > share * total and not _own_code(*m.labels[k][:2])
                   and not (skip and skip(*m.labels[k][:2]))),
                  key=lambda kv: -kv[1].value)[:n]
    return [(*m.labels[k], f.value) for k, f in rows]


def calls_below(session, filename, firstline):
    """Calls made inside the function at (filename, firstline), itself
    included, from the calling-context tree: (calls in all, {fid: calls});
    None without a traced tree."""
    if not session.paths:
        return None
    targets = {fid for fid, fn in session.functions.items()
               if fn.filename == filename and fn.line == firstline}
    per_fid = {}

    def add(node):
        stack = [node]
        while stack:
            nd = stack.pop()
            per_fid[nd.fid] = per_fid.get(nd.fid, 0) + nd.calls
            stack.extend(nd.children.values())

    stack = [session.call_tree()]
    while stack:
        nd = stack.pop()
        if nd.fid in targets:
            add(nd)
        else:
            stack.extend(nd.children.values())
    return sum(per_fid.values()), per_fid


def top_memory(session, n=3, share=0.01, skip=None) -> list:
    """The n lines that held the most bytes when the traced total peaked:
    (function name, file, line, bytes); they add up to the peak unless
    `skip(name, file)` leaves some out."""
    rows = {}
    for (fid, line, kind), c in session.memory.items():
        if kind != "line" or fid not in session.functions:
            continue
        rows[(fid, line)] = rows.get((fid, line), 0) + c.at_peak_bytes
    peak = sum(rows.values())
    out = []
    for (fid, line), b in sorted(rows.items(), key=lambda kv: -kv[1]):
        fn = session.functions[fid]
        if len(out) == n or b <= 0 or b < share * peak:
            break
        if not (skip and skip(fn.qualname, fn.filename)):
            out.append((fn.qualname, fn.filename, line, b))
    return out


def check(session, max_time=None, max_memory=None, max_calls=()) -> list:
    """The limits `session` is over: (what, measured, limit, culprits) each,
    culprits as top_functions/top_memory rows; max_calls: (pattern, n) pairs."""
    over = []
    if max_time is not None:
        duration = session.info.get("duration_ns")
        if not duration:
            raise PyprofError("it has no duration (an empty or foreign capture)")
        t = duration * 1e-9
        if t > max_time:
            over.append(("time", t, max_time, top_functions(session)))
    if max_memory is not None:
        mem = session.info.get("memory")
        if not mem:
            raise PyprofError("it has no memory data for --max-memory (profile with --memory)")
        peak = mem.get("peak_bytes") or 0
        if peak > max_memory:
            over.append(("memory", peak, max_memory, top_memory(session)))
    if max_calls:
        if not session.fstats:
            raise PyprofError("it has no call counts for --max-calls (a traced capture is "
                              "needed: function mode, the default)")
        totals = session.function_totals()
        for pattern, limit in max_calls:
            fids = match_functions(session, pattern)
            if not fids:
                raise PyprofError(f"--max-calls {pattern}: no function of that name in it "
                                  f"(closest: {', '.join(closest_names(session, pattern))})")
            calls = sum(totals[f].calls for f in fids if f in totals)
            if calls > limit:
                over.append((f"calls of {pattern}", calls, limit, []))
    return over
