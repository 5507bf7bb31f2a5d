"""A merge of captures of different modes holds, per process, exactly what
each input recorded and, over processes, their sum: checked table by table
against ground truth computed from the inputs alone (names, not ids), for a
merge of a traced (call paths, timeline, steps), a line-traced, a sampled
and a memory capture, and an input whose two C functions meet in the merge."""
import textwrap
from collections import Counter

import pytest

from pyprof import Session
from pyprof.merge import merge
from pyprof.model.tables import NO_FUNCTION, Counters, Function, Thread
from support import run_pyprof as pyprof

PROGRAM = """
import sys, threading
import pyprof

def leaf(i):
    return [i] * (i % 7)

def middle(n):
    total = 0
    for i in range(n):
        total += len(leaf(i))
    return total

def top(n):
    for _ in range(3):
        middle(n)

def worker():
    middle(2000)

n = int(sys.argv[1])
t = threading.Thread(target=worker, name="helper")
t.start()
t.join()
for k in range(3):
    pyprof.step()
    top(n * (k + 1))
"""


def name(session, fid):
    if fid == NO_FUNCTION:
        return None
    fn = session.functions[fid]
    return (fn.kind, fn.filename, fn.line, fn.qualname)


def thread_name(session, t):
    return session.threads[t].name


def figures(session, threads=None):
    """Every counter table of `session` by names (function identity, thread
    name, stack frames by name), summed over the chosen thread indices."""
    out = Counter()

    def keep(t):
        return threads is None or t in threads

    n = lambda f: name(session, f)          # noqa: E731
    for (t, f), c in session.fstats.items():
        if keep(t):
            for a in ("calls", "rec_calls", "total", "own"):
                out["fstats", thread_name(session, t), n(f), a] += getattr(c, a)
    for (t, a_, b), c in session.edges.items():
        if keep(t):
            out["edges", thread_name(session, t), n(a_), n(b)] += c.calls
            out["edges-total", thread_name(session, t), n(a_), n(b)] += c.total
    for (t, f, line), c in session.lines.items():
        if keep(t):
            out["lines", n(f), line] += c.hits
            out["lines-time", n(f), line] += c.time
    for (t, f, line, callee), c in session.callrows.items():
        if keep(t):
            out["callrows", n(f), line, n(callee)] += c.calls
    for (t, sid, state), c in session.samples.items():
        if keep(t):
            frames = tuple((n(f), line) for f, line in session.stacks[sid].frames)
            out["samples", frames, state] += c.count
            out["samples-weight", frames, state] += c.weight
    for (t, f, start, dur) in session.timeline:
        if keep(t):
            out["timeline", thread_name(session, t), n(f), dur] += 1
    tree = session.call_tree(threads=threads)

    def walk(node, chain):
        for fid, child in node.children.items():
            here = chain + (n(fid),)
            out["paths", here] += child.calls
            out["paths-own", here] += child.own
            walk(child, here)
    walk(tree, ())
    if threads is None:         # memory rows are not per thread
        for f, line, site, stack, c in session.memory_rows:
            frames = None if stack == NO_FUNCTION else tuple(
                (n(g), ln) for g, ln in session.memory_stacks[stack])
            out["memory", n(f), line, site, frames] += c.alloc_bytes
            out["memory-count", n(f), line, site, frames] += c.alloc_count
    return +out                 # zeros dropped: a merge keeps a row of zeros as the input has it


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("merge_sums")
    (d / "prog.py").write_text(textwrap.dedent(PROGRAM))
    runs = [("trace.cprof", ["--timeline"], 300),
            ("lines.cprof", ["--lines-of", "prog.py", "--strict"], 300),
            ("sample.cprof", ["--sample", "--wall", "--rate", "2000"], 3000),
            ("memory.cprof", ["--memory"], 200)]
    paths = []
    for out, opts, n in runs:
        r = pyprof([*opts, "-o", out, "prog.py", str(n)], d)
        assert r.returncode == 0, r.stderr
        paths.append(d / out)
    return paths


def test_three_modes_merged_are_each_input_and_their_sum(inputs, tmp_path):
    sessions = [Session.load(p) for p in inputs]
    truth = [figures(s) for s in sessions]
    assert truth[0]["fstats", "MainThread", name(sessions[0], next(
        f for f, fn in sessions[0].functions.items() if fn.name == "top")), "calls"] == 3
    assert any(k[0] == "lines" for k in truth[1]) and any(k[0] == "samples" for k in truth[2])
    assert any(k[0] == "memory" for k in truth[3]) and any(k[0] == "timeline" for k in truth[0])
    merged = merge(sessions, force=True, sources=[p.name for p in inputs])
    for i, expected in enumerate(truth):
        got = figures(merged, merged.process_threads(i))
        assert got == Counter({k: v for k, v in expected.items()
                               if not k[0].startswith("memory")}), i
    assert figures(merged) == sum(truth, Counter())
    # the steps: one per index, holding what every input's step of that index counted
    steps = {}
    for s in sessions:
        for st in s.steps:
            steps[st.index] = steps.get(st.index, Counter()) + figures(st.data)
    assert len(steps) == 3 and len(sessions[0].steps) == 3
    assert {st.index: figures(st.data) for st in merged.steps} == steps
    # and a save and load changes nothing
    merged.save(tmp_path / "all.cprof")
    again = Session.load(tmp_path / "all.cprof")
    assert figures(again) == figures(merged)
    assert [figures(st.data) for st in again.steps] == [figures(st.data) for st in merged.steps]
    # the inputs are left as they were
    assert [figures(Session.load(p)) for p in inputs] == [figures(s) for s in sessions]


def test_two_functions_of_one_input_that_meet_add_up():
    """Two C functions of one capture whose names differ only by an address
    are one function in a merge: their rows of one thread add up."""
    s = Session()
    s.info = {"time_unit": 1e-9, "events": 3}
    s.threads = {0: Thread(0, 1, 1, 0, "MainThread")}
    s.functions = {
        0: Function(0, "a.py", 1, "f", "f", "python"),
        1: Function(1, "~", 0, "<built-in method __new__ of type object at 0x1>", "x", "builtin"),
        2: Function(2, "~", 0, "<built-in method __new__ of type object at 0x2>", "x", "builtin"),
    }
    s.fstats = {(0, 0): Counters(1, 0, 10, 4), (0, 1): Counters(2, 0, 3, 3),
                (0, 2): Counters(5, 1, 3, 3)}
    s.edges = {(0, 0, 1): Counters(2, 0, 3, 3), (0, 0, 2): Counters(5, 1, 3, 3)}
    other = Session(info=dict(s.info), threads={0: Thread(0, 2, 2, 0, "MainThread")},
                    functions={7: Function(7, "~", 0,
                                           "<built-in method __new__ of type object at 0x9>",
                                           "x", "builtin")},
                    fstats={(0, 7): Counters(1, 0, 1, 1)})
    m = merge([s, other], force=True)
    (new,) = [f for f, fn in m.functions.items() if fn.kind == "builtin"]
    assert m.fstats[(0, new)] == Counters(7, 1, 6, 6)
    assert m.fstats[(1, new)] == Counters(1, 0, 1, 1)
    assert m.edges[(0, 0, new)] == Counters(7, 1, 6, 6)
    assert s.fstats[(0, 1)] == Counters(2, 0, 3, 3)         # the input is not changed
