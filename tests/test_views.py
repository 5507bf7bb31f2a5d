"""The tfprof-style views (code, op, scope, graph, lines, memory), their filters,
steps and per-step / per-run statistics, checked against independent ground
truth: a sys.setprofile call-path counter, cProfile's counts and callers,
known sleeps, and statistics computed here from known per-step work."""
import csv
import io
import json
import os
import statistics
import sys
import threading
import time

import pytest

import pyprof
from pyprof import views
from pyprof.errors import PyprofError
from test_cli import pyprof as pyprof_cli, write

# A program whose call tree is known: leaf is reached along three paths.
PROG = """
import time

class Parser:
    def parse(self, n):
        return helper(n)

def helper(n):
    return leaf(n) + leaf(n + 1)

def leaf(n):
    return n * 2

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def slow():
    time.sleep(0.06)

def fast():
    time.sleep(0.02)

def main():
    p = Parser()
    for i in range(7):
        p.parse(i)
    for i in range(3):
        leaf(i)
    helper(1)
    fib(6)
    slow()
    fast()
"""


def load_prog(tmp_path, name="prog"):
    write(tmp_path / f"{name}.py", PROG)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    return mod


def profile(fn, **kw):
    prof = pyprof.Profile(**kw)
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    return prof.session()


def true_paths(fn):
    """Calls per path of Python functions (root first), counted by an
    independent sys.setprofile hook."""
    counts, stack = {}, []

    def hook(frame, event, arg):
        if event == "call":
            stack.append(frame.f_code.co_qualname)
            key = tuple(stack)
            counts[key] = counts.get(key, 0) + 1
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


def flat(nodes, path=()):
    for n in nodes:
        p = (*path, n["name"])
        yield p, n
        yield from flat(n.get("children", ()), p)


def code_paths(session, **kw):
    data = views.view(session, "code", select=("calls", "time", "self-time"), **kw)
    return {p: n for p, n in flat(data["roots"])}


# ---------------------------------------------------------------- code view
@pytest.mark.parametrize("builtins", [True, False])
def test_code_view_calls_per_path_match_setprofile(tmp_path, builtins):
    mod = load_prog(tmp_path, f"prog_paths_{builtins}")
    truth = true_paths(mod.main)
    session = profile(mod.main, builtins=builtins)
    got = code_paths(session, start=("^main$",))
    # Python functions only: setprofile's "call" events do not include C calls
    ours = {p: n["calls"] for p, n in got.items() if not any(x.startswith("<") for x in p)}
    assert ours == truth
    # leaf is reached along three different paths, with different counts
    assert got[("main", "Parser.parse", "helper", "leaf")]["calls"] == 14
    assert got[("main", "leaf")]["calls"] == 3
    assert got[("main", "helper", "leaf")]["calls"] == 2
    # recursion: one node per depth
    assert got[("main", "fib", "fib")]["calls"] == 2


def test_code_view_times_known_split_and_add_up(tmp_path):
    mod = load_prog(tmp_path, "prog_times")
    session = profile(mod.main)
    got = code_paths(session, start=("^main$",))
    slow = got[("main", "slow")]["time"]
    fast = got[("main", "fast")]["time"]
    assert 0.06 <= slow < 0.06 + 0.05
    assert 0.02 <= fast < 0.02 + 0.05
    # a node's time is its own plus its children's (exactly, by construction)
    for path, n in got.items():
        kids = sum(c["time"] for c in n.get("children", ()))
        assert n["time"] == pytest.approx(n["self-time"] + kids, abs=2e-9 * (1 + len(
            n.get("children", ())))), path


def test_code_view_threads_are_separate_roots(tmp_path):
    def work():
        sum(range(1000))

    def main():
        t = threading.Thread(target=work, name="worker-1")
        t.start()
        t.join()

    session = profile(main)
    roots = views.view(session, "code", select=("calls", "thread"))["roots"]
    # the thread's own root (Thread._bootstrap; Thread.run on 3.11, whose hook
    # reaches a new thread from there) holds work, and only that thread ran it
    worker_roots = [r for r in roots if r["thread"] == "worker-1"]
    assert any(p[-1].endswith("<locals>.work") for p, _ in flat(worker_roots))
    assert all(r["thread"] == "MainThread" for r in roots if r["name"].endswith(".main"))
    only = views.view(session, "code", select=("calls",), thread=("worker-1",))["roots"]
    names = {p[-1] for p, _ in flat(only)}
    assert "test_code_view_threads_are_separate_roots.<locals>.work" in names
    assert "test_code_view_threads_are_separate_roots.<locals>.main" not in names


# ---------------------------------------------------------------- op view
def test_op_view_counts_equal_an_independent_counter(tmp_path):
    # sys.setprofile hears this thread only; cProfile on 3.12+ (sys.monitoring
    # is process-wide) hears every thread, and another thread's returns upset
    # its stack (it counted main twice with a thread of an earlier test running)
    mod = load_prog(tmp_path, "prog_op")
    truth = {}
    for path, n in true_paths(mod.main).items():
        key = (mod.__file__, path[-1].rsplit(".", 1)[-1])
        truth[key] = truth.get(key, 0) + n
    session = profile(mod.main)
    rows = views.view(session, "op", select=("calls", "time"))["rows"]
    ours = {(r["file"], r["name"].rsplit(".", 1)[-1]): r["calls"] for r in rows
            if r["file"].endswith("prog_op.py")}
    assert ours == truth
    # occurrence: the number of distinct call paths
    leaf = next(r for r in views.view(session, "op", select=("occurrence",))["rows"]
                if r["name"] == "leaf")
    assert leaf["occurrence"] == 3


# ---------------------------------------------------------------- scope view
def test_scope_view_groups_module_class_function(tmp_path):
    mod = load_prog(tmp_path, "prog_scope")
    session = profile(mod.main)
    # this thread's: a thread an earlier test left running may call time.sleep too
    mine = ("^MainThread$",)
    data = views.view(session, "scope", select=("calls", "time", "self-time"), thread=mine)
    got = dict(flat(data["roots"]))
    module = next(p for p in got if p[-1] == "prog_scope")
    assert got[(*module, "Parser", "parse")]["calls"] == 7
    assert got[(*module, "Parser")]["kind"] == "class"
    # a scope's time is the self time of the functions in it
    ops = {r["name"]: r for r in views.view(session, "op", select=("self-time",),
                                            thread=mine)["rows"]
           if r["file"].endswith("prog_scope.py")}
    assert got[module]["time"] == pytest.approx(sum(r["self-time"] for r in ops.values()),
                                                abs=1e-8)
    # builtins land in their module: time.sleep under time
    assert got[("time", "sleep")]["calls"] == 2


# ---------------------------------------------------------------- graph view
def test_graph_view_callers_equal_an_independent_counter(tmp_path):
    mod = load_prog(tmp_path, "prog_graph")
    truth = {}
    for path, n in true_paths(mod.main).items():
        if path[-1] == "leaf":
            caller = path[-2].rsplit(".", 1)[-1]
            truth[caller] = truth.get(caller, 0) + n
    session = profile(mod.main)
    data = views.view(session, "graph", show=("^leaf$",), select=("calls", "time"))
    (node,) = data["roots"]
    assert node["name"] == "leaf"
    groups = {g["name"]: g for g in node["children"]}
    callers = {c["name"]: c["calls"] for c in groups["[callers]"]["children"]}
    assert {k.rsplit(".", 1)[-1]: v for k, v in callers.items()} == truth


# ---------------------------------------------------------------- filters
def test_filters_follow_tfprof_semantics(tmp_path):
    mod = load_prog(tmp_path, "prog_filters")
    session = profile(mod.main)
    base = code_paths(session, start=("^main$",))
    main_time = base[("main",)]["time"]
    # hide: the node goes, its children move up to the nearest shown ancestor
    hidden = code_paths(session, start=("^main$",), hide=("^helper$",))
    assert ("main", "Parser.parse", "leaf") in hidden
    assert hidden[("main",)]["time"] == main_time          # still accounted
    # trim: the node and all below it go
    trimmed = code_paths(session, start=("^main$",), trim=("^Parser.parse$",))
    assert not any("Parser.parse" in p for p in trimmed)
    assert trimmed[("main",)]["time"] == main_time
    # account_displayed_only: the trimmed subtree no longer counts
    acc = code_paths(session, start=("^main$",), trim=("^slow$",),
                     account_displayed_only=True)
    assert acc[("main",)]["time"] == pytest.approx(main_time - base[("main", "slow")]["time"],
                                                    abs=1e-8)
    # show: only matching nodes, flattened under their nearest shown ancestor
    shown = code_paths(session, start=("^main$",), show=("^main$", "^leaf$"))
    assert set(shown) == {("main",), ("main", "leaf")}
    # max depth, min calls, min time
    assert max(len(p) for p in code_paths(session, start=("^main$",), max_depth=2)) == 2
    assert all(n["calls"] >= 7 for n in code_paths(session, min_calls=7).values())
    slow_only = code_paths(session, start=("^main$",), min_time=0.05)
    assert ("main", "slow") in slow_only and ("main", "fast") not in slow_only


def test_order_by_and_limit(tmp_path):
    mod = load_prog(tmp_path, "prog_order")
    session = profile(mod.main)
    rows = views.view(session, "op", select=("calls",), order_by="calls", limit=3)["rows"]
    assert len(rows) == 3
    assert [r["calls"] for r in rows] == sorted((r["calls"] for r in rows), reverse=True)
    byname = views.view(session, "op", select=("calls",), order_by="name")["rows"]
    assert [r["name"] for r in byname] == sorted(r["name"] for r in byname)


def test_formats_json_csv_table(tmp_path):
    mod = load_prog(tmp_path, "prog_fmt")
    session = profile(mod.main)
    doc = json.loads(views.render(session, "code", "json", start=("^main$",)))
    assert doc["roots"][0]["name"] == "main"
    rows = list(csv.DictReader(io.StringIO(views.render(session, "code", "csv",
                                                        start=("^main$",)))))
    assert rows[0]["path"] == "main" and rows[0]["depth"] == "0"
    assert float(rows[0]["time"]) == pytest.approx(doc["roots"][0]["time"])
    table = views.render(session, "op", "table", color=False, show=("^slow$",))
    assert "slow (prog_fmt.py:" in table and "\x1b[" not in table
    assert "no entries match (filters: --show nothing-like-this)" in views.render(
        session, "op", show=("nothing-like-this",))


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, message", [
    (dict(name="nope"), "unknown view 'nope' (choose from code, op, scope, graph, lines, memory, "
                        "tasks, opcodes, specialization)"),
    (dict(select=("bogus",)), "unknown column 'bogus'"),
    (dict(order_by="bogus"), "unknown sort key 'bogus'"),
    (dict(show=("(unclosed",)), "--show '(unclosed' is not a valid regular expression"),
    (dict(select=("bytes",)), "column 'bytes' is not in this capture's code view"),
    (dict(step="3"), "this capture has no steps"),
])
def test_bad_options_give_clear_errors(kw, message):
    session = profile(lambda: sum(range(10)))
    name = kw.pop("name", "code")
    with pytest.raises(PyprofError, match=message.replace("(", r"\(").replace(")", r"\)")):
        views.view(session, name, **kw)


def test_cli_view_errors_and_outputs(tmp_path):
    prog = write(tmp_path / "p.py", PROG + "\nmain()\n")
    r = pyprof_cli(["-o", "p.cprof", str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    r = pyprof_cli(["view", "p.cprof", "--view", "nope"], tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "invalid choice" in r.stderr
    r = pyprof_cli(["view", "p.cprof", "--view", "op", "--select", "calls,bogus"], tmp_path)
    assert r.returncode == 2 and "unknown column 'bogus'" in r.stderr
    assert "Traceback" not in r.stderr
    r = pyprof_cli(["view", "p.cprof", "--view", "code", "--hide", "[x"], tmp_path)
    assert r.returncode == 2 and "--hide '[x' is not a valid regular expression" in r.stderr
    r = pyprof_cli(["view", "p.cprof", "--view", "op", "--show", "zzz"], tmp_path)
    assert r.returncode == 0 and "no entries match (filters: --show zzz)" in r.stdout
    r = pyprof_cli(["view", "p.cprof", "--view", "op", "--min-time", "50ms", "--format",
                    "csv", "-o", "op.csv"], tmp_path)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(tmp_path / "op.csv")))
    assert rows and all(float(x["time"]) >= 0.05 for x in rows)
    assert any(x["name"] == "slow" for x in rows)
    r = pyprof_cli(["view", "p.cprof", "--view", "graph", "--show", "^leaf$"], tmp_path)
    assert r.returncode == 0 and "[callers]" in r.stdout and "Parser.parse" not in r.stdout \
        or "helper" in r.stdout


# ---------------------------------------------------------------- steps
STEPS = """
import pyprof, sys, time

def work(k):
    return sum(i * i for i in range(2000))

def sleepy(k):
    time.sleep(0.01 * (k + 1))

for k in range(5):
    pyprof.step()
    for _ in range(k + 1):
        work(k)
    sleepy(k)
with pyprof.step("tail"):
    work(0)
"""


def test_steps_counters_per_step(tmp_path):
    prog = write(tmp_path / "steps_prog.py", STEPS)
    r = pyprof_cli(["-o", "s.cprof", str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.Session.load(tmp_path / "s.cprof")
    assert [st.label for st in s.steps] == ["step 0", "step 1", "step 2", "step 3", "step 4",
                                            "tail"]
    for st in s.steps[:5]:
        ft = {s.functions[f].name: c for f, c in st.data.function_totals().items()}
        assert ft["work"].calls == st.index + 1
        assert ft["sleepy"].calls == 1
        assert 0.01 * (st.index + 1) <= s.seconds(ft["sleepy"].total) < 0.01 * (st.index + 1) + 0.03
        assert st.end - st.start >= 0.01 * (st.index + 1)
    tail = {s.functions[f].name: c for f, c in s.steps[5].data.function_totals().items()}
    assert tail["work"].calls == 1 and "sleepy" not in tail
    # the steps add up to what the run counted in them
    total = sum(c.calls for f, c in s.function_totals().items() if s.functions[f].name == "work")
    assert total == sum(range(1, 6)) + 1
    # --step filters every view
    rows = views.view(s, "op", select=("calls",), step="2", show=("^work$",))["rows"]
    assert rows[0]["calls"] == 3
    rows = views.view(s, "op", select=("calls",), step="1..3", show=("^work$",))["rows"]
    assert rows[0]["calls"] == 2 + 3 + 4
    rows = views.view(s, "op", select=("calls",), step="tail", show=("^work$",))["rows"]
    assert rows[0]["calls"] == 1
    with pytest.raises(PyprofError, match="no such step"):
        views.view(s, "op", step="9")
    # code view of one step: paths per step
    got = code_paths(s, step="4", start=("^sleepy$",))
    assert got[("sleepy",)]["calls"] == 1


def test_stats_by_step_mean_and_cv(tmp_path):
    prog = write(tmp_path / "steps_prog.py", STEPS)
    assert pyprof_cli(["-o", "s.cprof", str(prog)], tmp_path).returncode == 0
    r = pyprof_cli(["stats", "s.cprof", "--csv", "out.csv", "--select", "calls,time"], tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {(x["level"], x["name"]): x for x in csv.DictReader(open(tmp_path / "out.csv"))}
    work = rows[("function", "work")]
    calls = [1, 2, 3, 4, 5, 1]          # per step, the "tail" step included
    assert int(work["n"]) == 6
    assert float(work["calls_mean"]) == pytest.approx(statistics.mean(calls))
    assert float(work["calls_cv"]) == pytest.approx(statistics.stdev(calls) /
                                                    statistics.mean(calls))
    assert float(work["calls_min"]) == 1 and float(work["calls_max"]) == 5
    sleepy = rows[("function", "sleepy")]
    expect = [0.01 * (k + 1) for k in range(5)] + [0.0]
    assert float(sleepy["time_mean"]) == pytest.approx(statistics.mean(expect), abs=0.01)
    r = pyprof_cli(["stats", "s.cprof"], tmp_path)
    assert r.returncode == 0 and "6 steps" in r.stdout and "work" in r.stdout


def test_stats_by_run_aligns_files_and_warns(tmp_path):
    prog = write(tmp_path / "runs.py", """
        import sys
        def f(n):
            return sum(range(n))
        for _ in range(int(sys.argv[1])):
            f(1000)
    """)
    for i, n in enumerate((3, 5, 7)):
        assert pyprof_cli(["-o", f"r{i}.cprof", str(prog), str(n)], tmp_path).returncode == 0
    r = pyprof_cli(["stats", "--by", "run", "r0.cprof", "r1.cprof", "r2.cprof", "--csv", "-",
                    "--select", "calls"], tmp_path)
    assert r.returncode == 0, r.stderr
    f = next(x for x in csv.DictReader(io.StringIO(r.stdout)) if x["name"] == "f")
    assert float(f["calls_mean"]) == 5 and float(f["calls_min"]) == 3
    assert float(f["calls_cv"]) == pytest.approx(statistics.stdev([3, 5, 7]) / 5)
    other = write(tmp_path / "other.py", "def g():\n    pass\ng()\n")
    assert pyprof_cli(["-o", "o.cprof", str(other)], tmp_path).returncode == 0
    r = pyprof_cli(["stats", "--by", "run", "r0.cprof", "o.cprof"], tmp_path)
    assert r.returncode == 0
    assert "warning: the captures come from different programs" in r.stderr
    assert "not in every run" in r.stderr and "g (other.py)" in r.stderr
    r = pyprof_cli(["stats", "r0.cprof"], tmp_path)
    assert r.returncode == 2 and "has no steps" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- other captures
def test_sampled_capture_views(tmp_path):
    prog = write(tmp_path / "busy.py", """
        import time
        def spin(s):
            end = time.process_time() + s
            while time.process_time() < end:
                pass
        def heavy():
            spin(0.45)
        def light():
            spin(0.15)
        heavy(); light()
    """)
    r = pyprof_cli(["--sample", "-o", "b.cprof", str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.Session.load(tmp_path / "b.cprof")
    total = sum(c.count for c in s.samples.values())
    roots = views.view(s, "code", select=("samples",))["roots"]
    assert sum(r["samples"] for r in roots) == total
    ops = {r["name"]: r for r in views.view(s, "op", select=("samples", "cpu"))["rows"]}
    assert ops["heavy"]["samples"] > 2 * ops["light"]["samples"]
    lines = views.view(s, "lines", select=("samples",), show=("spin",))["rows"]
    assert lines and all(r["name"].startswith("spin:") for r in lines)


def test_memory_capture_views(tmp_path):
    prog = write(tmp_path / "alloc.py", """
        def big():
            return bytearray(8 * 1024 * 1024)
        def small():
            return [0] * 1000
        keep = big()
        small()
    """)
    r = pyprof_cli(["--memory", "-o", "m.cprof", str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    s = pyprof.Session.load(tmp_path / "m.cprof")
    rows = views.view(s, "memory", select=("bytes", "net-bytes"))["rows"]
    assert rows[0]["name"] == "big:3" and rows[0]["bytes"] >= 8 * 1024 * 1024
    assert rows[0]["net-bytes"] >= 8 * 1024 * 1024          # still referenced by `keep`
    ops = {r["name"]: r for r in views.view(s, "op", select=("bytes",))["rows"]}
    assert ops["big"]["bytes"] >= 8 * 1024 * 1024 > ops["small"]["bytes"] >= 8000


def test_merge_keeps_paths_steps_and_timeline(tmp_path):
    """pyprof merge of two runs: each step holds both runs' counters, the code
    view the sum of both trees, the timeline both runs' events."""
    prog = write(tmp_path / "steps_prog.py", STEPS)
    for name in ("a", "b"):
        r = pyprof_cli(["--timeline", "-o", f"{name}.cprof", str(prog)], tmp_path)
        assert r.returncode == 0, r.stderr
    r = pyprof_cli(["merge", "a.cprof", "b.cprof", "-o", "m.cprof"], tmp_path)
    assert r.returncode == 0, r.stderr
    a, b, m = (pyprof.Session.load(tmp_path / f"{n}.cprof") for n in ("a", "b", "m"))
    assert len(m.steps) == 6
    for k in range(5):
        rows = views.view(m, "op", select=("calls",), step=str(k), show=("^work$",))["rows"]
        assert rows[0]["calls"] == 2 * (k + 1)
    merged = code_paths(m, start=("^sleepy$",))
    assert merged[("sleepy",)]["calls"] == 10
    assert len(m.timeline) == len(a.timeline) + len(b.timeline)
    works = [e for e in m.timeline if m.functions[e[1]].name == "work"]
    assert len(works) == 2 * 16


def test_stack_exports_of_a_traced_capture(tmp_path):
    """Function tracing's calling-context tree feeds the stack formats: the
    collapsed stacks carry each path's self time (µs), the flame graph and
    speedscope the same in ns, pprof is read by go tool pprof."""
    import re as _re
    import shutil
    import subprocess
    mod = load_prog(tmp_path, "prog_stacks")
    session = profile(mod.main)
    session.save(tmp_path / "t.cprof")
    s = pyprof.Session.load(tmp_path / "t.cprof")
    for out in ("f.collapsed", "f.flame.html", "f.speedscope.json", "f.pb.gz"):
        r = pyprof_cli(["convert", "t.cprof", "-o", out], tmp_path)
        assert r.returncode == 0, r.stderr
    collapsed = dict(line.rsplit(" ", 1) for line in
                     (tmp_path / "f.collapsed").read_text().splitlines())
    slow = next(k for k in collapsed if k.endswith(";slow (prog_stacks.py:17)"))
    assert slow.startswith("MainThread;main (prog_stacks.py:23);")
    truth = code_paths(s, start=("^main$",))[("main", "slow")]["self-time"]
    assert int(collapsed[slow]) == pytest.approx(truth * 1e6, abs=1)
    doc = json.loads((tmp_path / "f.speedscope.json").read_text())
    total = sum(sum(p["weights"]) for p in doc["profiles"])
    assert total == sum(round(s.seconds(p.own) * 1e9) for p in s.paths.values() if p.own > 0)
    html = (tmp_path / "f.flame.html").read_text()
    data = json.loads(_re.search(r'id="data">(.*?)</script>', html, _re.S).group(1))
    assert data["unit"] == "ns" and data["threads"]["all threads"][3] == total
    go = shutil.which("go") or ("/usr/lib/go/bin/go" if os.path.exists("/usr/lib/go/bin/go")
                                else None)
    if go is None:
        pytest.skip("go tool pprof needs Debian's golang-go (checked the other formats)")
    top = subprocess.run([go, "tool", "pprof", "-top", "-sample_index=wall",
                          str(tmp_path / "f.pb.gz")], capture_output=True, text=True,
                         timeout=120)
    assert top.returncode == 0, top.stderr
    assert "time.sleep" in top.stdout


def test_memory_steps_across_disable_and_enable():
    """Bytes per step equal what each step allocated (known sizes), also for a
    step that ends after disable() and across a new recording (enable again)."""
    keep = []

    def alloc(k):
        keep.append(bytearray(100_000 * (k + 1)))

    p = pyprof.Profile(memory=True)
    p.enable()
    for k in range(3):
        pyprof.step()
        alloc(k)
    p.disable()
    p.enable()
    for k in range(3, 5):
        pyprof.step()
        alloc(k)
    p.disable()
    s = p.session()                     # the last step is still open: up to now
    got = [sum(c.alloc_bytes for (fid, _, _), c in st.data.memory.items()
               if fid in s.functions and s.functions[fid].name == "alloc") for st in s.steps]
    assert [st.index for st in s.steps] == [0, 1, 2, 3, 4]
    for k, b in enumerate(got):
        assert 100_000 * (k + 1) <= b < 100_000 * (k + 1) + 4096, got


def test_steps_with_line_tracing_and_sampling():
    """Per-step counters of the other tables: line hits per step equal the
    known iterations; sampled steps hold the samples taken during them."""
    def work(k):
        total = 0
        for i in range(1000 * (k + 1)):
            total += i
        return total

    p = pyprof.Profile(lines=True)
    p.add_function(work)
    p.enable()
    for k in range(3):
        with pyprof.step():
            work(k)
    p.disable()
    s = p.session()
    line = work.__code__.co_firstlineno + 3          # total += i
    for st in s.steps:
        hits = sum(c.hits for (t, fid, ln), c in st.data.lines.items() if ln == line)
        assert hits == 1000 * (st.index + 1)

    def spin(secs):
        end = time.process_time() + secs
        while time.process_time() < end:
            pass

    p = pyprof.Profile(mode="sample", rate=1000)
    p.enable()
    for k in range(3):
        with pyprof.step():
            spin(0.1 * (k + 1))
    p.disable()
    s = p.session()
    per_step = [sum(c.count for c in st.data.samples.values()) for st in s.steps]
    assert sum(per_step) <= sum(c.count for c in s.samples.values())
    assert per_step[2] > per_step[0] > 0, per_step
