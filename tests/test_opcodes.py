"""--opcodes (docs/opcodes.md): inside the line. Each figure against ground
truth: two calls of one line against their own CPU clocks, the adaptive
interpreter's specializations against what `dis` says of the same code, traced
hits against an independent sys.monitoring (3.12+) or sys.settrace (3.11)
counter, a call's traced time against the time it waits."""
import csv
import io
import json
import os
import sys

import pytest

import pyprof
from pyprof.analysis import opcodes
from support import pyprof as run_cli, run_python

# One line, two C calls: `sum` iterates in C, so the line's frame is the
# innermost Python frame, at the CALL of whichever sum runs.
TWO_CALLS = """
import json, sys, time
import pyprof

def line(a, b):
    return sum(range(a)) + sum(range(b))

def cpu(n, k):
    t = time.thread_time()
    for _ in range(k):
        sum(range(n))
    return time.thread_time() - t

N = 20_000
truth_a = truth_b = 0.0
for _ in range(3):                      # each call's own CPU, alone, interleaved
    truth_a += cpu(3 * N, 200)
    truth_b += cpu(N, 200)
# wall mode: its per-thread timers reach the rate on any host (CPU mode falls
# back to the kernel's tick where task-clock events are refused); one thread
# running its calls: their wall time is their CPU time
p = pyprof.Profile(mode="sample", wall=True, rate=2000, opcodes=True)
p.enable()
t = time.thread_time()
while time.thread_time() - t < 2.0:
    line(3 * N, N)
p.disable()
p.dump(sys.argv[1])
json.dump({"a": truth_a, "b": truth_b}, open(sys.argv[2], "w"))
"""


def test_two_calls_on_one_line_share_it_by_their_cost(tmp_path):
    (tmp_path / "two.py").write_text(TWO_CALLS)
    r = run_python(["two.py", "two.cprof", "truth.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.load(tmp_path / "two.cprof")
    truth = json.loads((tmp_path / "truth.json").read_text())
    fid = next(f for f, fn in s.functions.items() if fn.name == "line")
    line = s.functions[fid].line + 1
    exprs = {e.fragment: e for e in opcodes.expressions(s)[(fid, line)]}
    a, b = exprs["sum(range(a))"], exprs["sum(range(b))"]
    n = a.samples + b.samples
    assert n >= 1000, (n, exprs.keys())         # ~2 s of CPU at 2 kHz (or the kernel's tick)
    share, want = a.samples / n, truth["a"] / (truth["a"] + truth["b"])
    # sampling error at n >= 1000: 1.4 pp (one sigma)
    assert abs(share - want) < 0.06, (share, want, n)
    # the line's own samples are its instructions': the two calls are most of them
    line_self = sum(e.samples for e in exprs.values())
    assert n >= 0.8 * line_self, (n, line_self)
    # the columns are the source's: the fragment is the text at them
    text = open(tmp_path / "two.py").read().splitlines()[line - 1]
    assert text[a.col:a.end_col] == "sum(range(a))" and text[b.col:b.end_col] == "sum(range(b))"


SPECIALIZE = """
import sys
import pyprof

class Fixed:
    def __init__(self):
        self.x = 1

class Failed(Exception):                    # its instances' dict: not a layout it reads
    def __init__(self):
        self.x = 1

class Shifting:
    def __init__(self):
        self.x = 1

def fixed(objs):
    t = 0
    for o in objs:
        t += o.x + o.x + o.x + o.x          # FIXED
    return t

def failed(objs):
    t = 0
    for o in objs:
        t += o.x + o.x + o.x + o.x          # FAILED
    return t

def shifting(objs):
    t = 0
    for o in objs:
        Shifting.version = t                # the class changes at every step
        t += o.x + o.x + o.x + o.x          # SHIFTING
    return t

fs = [Fixed() for _ in range(1000)]
es = [Failed() for _ in range(1000)]
ss = [Shifting() for _ in range(1000)]
for _ in range(20):                         # warm up: the adaptive interpreter's turn
    fixed(fs), failed(es), shifting(ss)
p = pyprof.Profile(mode="sample", wall=True, rate=4000, opcodes=True)
p.enable()
for _ in range(1500):
    fixed(fs), failed(es), shifting(ss)
p.disable()
p.dump(sys.argv[1])
import dis
# what dis says of the same code now: the ground truth of the states
for f in (fixed, failed, shifting):
    print(sorted({i.opname for i in dis.get_instructions(f, adaptive=True)
                  if i.opname.startswith("LOAD_ATTR")}))
"""


@pytest.fixture(scope="module")
def specialized(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    (d / "spec.py").write_text(SPECIALIZE)
    r = run_python(["spec.py", "spec.cprof"], d)
    assert r.returncode == 0, r.stderr
    shown = dict(zip(("FIXED", "FAILED", "SHIFTING"), (eval(x) for x in r.stdout.split("\n")[:3])))
    return d, pyprof.load(d / "spec.cprof"), shown


def _attr_loads(s, marker):
    """The sampled LOAD_ATTR instructions of the line holding `marker`: state -> samples."""
    out, src = {}, opcodes._Sources()
    for i in opcodes.instructions(s):
        if i.base == "LOAD_ATTR" and i.fragment == "o.x" and \
                (src.text(s.functions[i.fid].filename, i.line) or "").endswith("# " + marker):
            out[i.state] = out.get(i.state, 0) + i.samples
    return out


def _generic(names) -> bool:
    return any(n == "LOAD_ATTR" or n.endswith("_ADAPTIVE") for n in names)


def test_load_attr_specialized_after_warm_up(specialized):
    _, s, shown = specialized
    got = _attr_loads(s, "FIXED")
    assert sum(got.values()) >= 40, got
    assert got.get("specialized", 0) >= 0.9 * sum(got.values()), got
    assert not _generic(shown["FIXED"]), shown
    names = {i.opcode for i in opcodes.instructions(s) if i.base == "LOAD_ATTR"
             and i.state == "specialized"}
    assert names & set(shown["FIXED"]), (names, shown)      # the form dis shows


@pytest.mark.parametrize("marker", ["FAILED", "SHIFTING"])
def test_load_attr_that_cannot_specialize_stays_generic(specialized, marker):
    """A LOAD_ATTR the specializer fails on: an Exception subclass's instances
    keep their attributes in a dict of their own, on every version, as dis
    shows of the same code. A class changed at every step runs generic where
    the interpreter stops specializing it (3.13: a class changed a thousand
    times gets no new version); 3.11 and 3.12 specialize it again after each
    change, and the samples see it specialized (3.11: part of the time)."""
    _, s, shown = specialized
    got = _attr_loads(s, marker)
    assert sum(got.values()) >= 40, got
    if marker == "FAILED" or sys.version_info >= (3, 13):
        assert _generic(shown[marker]), shown
        assert got.get("adaptive", 0) >= 0.8 * sum(got.values()), (got, shown)
    else:       # specialized again after each change: seen so, all or part of the time
        assert got.get("specialized", 0) > 0, (got, shown)


def test_specialization_report_names_the_generic_load(specialized):
    d, s, _ = specialized
    report = opcodes.specialization_report(s, top=10)
    failed = next(r for r in report if r.source and r.source.endswith("# FAILED"))
    assert any(i.base == "LOAD_ATTR" for i in failed.generic), failed
    fixed = next(r for r in report if r.source and r.source.endswith("# FIXED"))
    assert not any(i.base == "LOAD_ATTR" for i in fixed.generic), fixed
    r = run_cli("view", "spec.cprof", "--view", "specialization", cwd=d)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = next(k for k, ln in enumerate(lines) if ln.endswith("# FAILED"))
    assert "LOAD_ATTR" in lines[at + 1] and "adaptive" in lines[at + 1], r.stdout


def test_opcodes_view_csv_has_each_instructions_source(specialized):
    d, s, _ = specialized
    r = run_cli("view", "spec.cprof", "--view", "opcodes", "--format", "csv", cwd=d)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {"file", "line", "col-start", "col-end", "source", "opcode", "base-opcode",
            "specialization", "samples", "self-samples", "time"} <= set(rows[0]), rows[0]
    src = (d / "spec.py").read_text().splitlines()
    checked = 0
    for row in rows:
        if row["col-start"] and row["file"].endswith("spec.py") and int(row["line"]) > 0:
            text = src[int(row["line"]) - 1]
            assert text[int(row["col-start"]):int(row["col-end"])] == row["source"] or \
                row["source"].startswith(text[int(row["col-start"]):].strip()), row
            checked += 1
    assert checked >= 10
    # the samples of the opcodes view add up to the program's own samples
    assert sum(int(r["self-samples"]) for r in rows) <= sum(c.count for c in s.samples.values())


TRACED = """
import collections, sys
import pyprof

def g(n):
    t = 0
    for i in range(n):
        t += i * 2 if i % 3 else -i
        try:
            if i % 7 == 0:
                raise ValueError(i)
        except ValueError:
            t -= 1
    return t

def gen(n):
    for i in range(n):
        yield i * i

def h(n):
    return sum(gen(n)) + g(n)

counts = collections.Counter()
codes = {g.__code__, gen.__code__, h.__code__}
if sys.version_info >= (3, 12):
    M = sys.monitoring
    M.use_tool_id(4, "independent")
    M.register_callback(4, M.events.INSTRUCTION,
                        lambda code, off: counts.update([(code.co_name, off)]) if code in codes
                        else None)
    for c in codes:
        M.set_local_events(4, c, M.events.INSTRUCTION)
    h(500)
    for c in codes:
        M.set_local_events(4, c, 0)
    M.free_tool_id(4)
else:
    def tracer(frame, event, arg):
        if frame.f_code in codes:
            frame.f_trace_opcodes = True
            if event == "opcode":
                counts[(frame.f_code.co_name, frame.f_lasti)] += 1
            return tracer
    sys.settrace(tracer)
    h(500)
    sys.settrace(None)

p = pyprof.Profile(lines=True, opcodes=True)
for f in (g, gen, h):
    p.add_function(f)
p.enable()
h(500)
p.disable()
p.dump(sys.argv[1])
print(repr(sorted(counts.items())))
"""


def test_traced_hits_equal_an_independent_count(tmp_path):
    (tmp_path / "traced.py").write_text(TRACED)
    r = run_python(["traced.py", "traced.cprof"], tmp_path)
    assert r.returncode == 0, r.stderr
    truth = dict(eval(r.stdout.strip()))
    s = pyprof.load(tmp_path / "traced.cprof")
    got = {}
    for (_, fid, off, *_), c in s.instructions.items():
        key = (s.functions[fid].name, off * 2)
        got[key] = got.get(key, 0) + c.hits
    assert got == truth, sorted(set(got.items()) ^ set(truth.items()))
    assert sum(truth.values()) > 10_000


WAITS = """
import sys, time
import pyprof

def waits():
    x = 0
    for _ in range(10):
        time.sleep(0.02); x += 1
    return x

p = pyprof.Profile(lines=True, opcodes=True)
p.add_function(waits)
p.enable()
waits()
p.disable()
p.dump(sys.argv[1])
"""


def test_traced_time_of_a_call_holds_its_callee(tmp_path):
    """A traced instruction's time runs from it to its frame's next one: a
    call's holds the callee (time.sleep's 20 ms), the add next to it little."""
    (tmp_path / "waits.py").write_text(WAITS)
    r = run_python(["waits.py", "w.cprof"], tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.load(tmp_path / "w.cprof")
    insns = [i for i in opcodes.instructions(s) if s.functions[i.fid].name == "waits"]
    call = max((i for i in insns if i.fragment == "time.sleep(0.02)"), key=lambda i: i.time)
    assert call.hits == 10 and 0.2 <= call.time < 0.3, call
    rest = sum(i.time for i in insns if i is not call)
    assert rest < 0.01, [(i.opcode, i.time) for i in insns]
    # the line's time is its instructions' (the line event's own moment aside)
    line = s.line_totals()
    (fid, ln), lc = next(((k, c) for k, c in line.items() if k[1] == call.line))
    assert abs(s.seconds(lc.time) - sum(i.time for i in insns if i.line == ln)) < 0.005


def test_columns_expand_the_line_tables(tmp_path):
    (tmp_path / "waits.py").write_text(WAITS)
    assert run_python(["waits.py", "w.cprof"], tmp_path).returncode == 0
    r = run_cli("view", "w.cprof", "--columns", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("(expr)")]
    sleep = next(ln for ln in rows if "] time.sleep(0.02)  <-" in ln)
    assert sleep.split()[1] == "10" and "CALL" in sleep, sleep
    # sampled: under the line, its expressions' self samples
    (tmp_path / "two.py").write_text(TWO_CALLS)
    assert run_python(["two.py", "two.cprof", "t.json"], tmp_path).returncode == 0
    r = run_cli("view", "two.cprof", "--columns", "--lines", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    at = next(k for k, ln in enumerate(out) if ln.rstrip().endswith("return sum(range(a)) + sum(range(b))"))
    expr = [ln for ln in out[at + 1:at + 6] if ln.startswith("(expr)")]
    assert "sum(range(a))" in expr[0] and int(expr[0].split()[1]) > int(
        next(e for e in expr if "sum(range(b))" in e).split()[1]), expr


def test_capture_round_trips_and_merges(specialized, tmp_path):
    d, s, _ = specialized
    s.save(tmp_path / "again.cprof")
    again = pyprof.load(tmp_path / "again.cprof")
    assert again.instructions == s.instructions and again.opcode_names() == s.opcode_names()
    from pyprof.analysis.merge import merge
    both = merge([s, again], force=True)
    a = opcodes.instructions(s)
    m = {(i.fid, i.offset, i.opcode): i for i in opcodes.instructions(both)}
    for i in a[:20]:
        j = m[(i.fid, i.offset, i.opcode)]
        assert j.samples == 2 * i.samples and j.base == i.base and j.state == i.state


def test_report_heats_expressions_in_chromium(specialized, tmp_path):
    from test_report import check_in_browser
    d, s, _ = specialized
    r = run_cli("convert", "spec.cprof", "-o", str(tmp_path / "spec.html"), cwd=d)
    assert r.returncode == 0, r.stderr
    dom = check_in_browser(tmp_path / "spec.html", tmp_path, "opcodes", {"hl": 10, "expr": 5})
    assert "LOAD_ATTR" in dom and "adaptive" in dom      # the instructions, on hover


def test_opcode_names_are_dis_own():
    """META opcodes, made without importing dis (a run's start-up), names each
    byte as dis does; a specialized form's base is the family dis deopts it to."""
    import dis
    import opcode
    from pyprof.runtime.opcodes import all_opnames, table
    assert all_opnames(opcode)[:256] == list(dis._all_opname)[:256]
    t = table()
    for name, base in zip(t["names"], t["bases"]):
        if name in getattr(opcode, "_specializations", {}).get(base, ()):
            assert base in t["adaptive"] or base in ("LOAD_FAST", "STORE_FAST", "LOAD_CONST",
                                                     "EXTENDED_ARG", "JUMP_BACKWARD", "RESUME")
    assert "LOAD_ATTR" in t["adaptive"] and "LOAD_FAST" not in t["adaptive"]


# ---------------------------------------------------------------- bad input
def test_a_mode_without_instructions_is_one_line(tmp_path):
    (tmp_path / "p.py").write_text("print('ran')\n")
    for args in (["--opcodes"], ["--memory", "--opcodes"]):
        r = run_cli(*args, "p.py", cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "--opcodes needs a mode that sees instructions: --sample, or line tracing" \
            in r.stderr and "ran" not in r.stdout


def test_a_capture_without_instructions_names_the_flag(tmp_path):
    (tmp_path / "p.py").write_text("print(sum(range(10**5)))\n")
    assert run_cli("--sample", "-o", "p.cprof", "p.py", cwd=tmp_path).returncode == 0
    for args in (["--view", "opcodes"], ["--view", "specialization"], ["--columns"]):
        r = run_cli("view", "p.cprof", *args, cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "record it with --opcodes" in r.stderr and "Traceback" not in r.stderr


def test_the_report_of_a_traced_capture_is_refused_in_one_line(tmp_path):
    (tmp_path / "waits.py").write_text(WAITS)
    assert run_python(["waits.py", "w.cprof"], tmp_path).returncode == 0
    r = run_cli("view", "w.cprof", "--view", "specialization", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "needs a sampled capture (--sample --opcodes)" in r.stderr
