"""pyprof merge and pyprof diff (docs/merge-diff.md), run as the user runs them
(subprocesses) and checked against ground truth: cProfile's call counts of the
same runs, the inputs' own tables (a merge adds them up), and work known by
construction (a loop count from argv makes one function do 3x the work)."""
import csv
import io
import json
import os
import pstats
import re
import textwrap

import pytest

from pyprof import Session
from pyprof.diff import csv_header
from pyprof.merge import merge
from support import run_pyprof as pyprof, run_python as run

PROGRAM = """
import sys, threading

def helper(i):
    return i + 1

def work(n):
    total = 0
    for i in range(n):
        total += helper(i)
    return total

def steady():
    total = 0
    for i in range(STEADY):
        total += i
    return total

def worker(n):
    for _ in range(n):
        helper(0)

def main():
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    if len(sys.argv) > 2 and sys.argv[2] == "threads":
        ts = [threading.Thread(target=worker, args=(100 * k * (j + 1),), name=f"w{j}")
              for j in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for _ in range(REPEAT):
        work(WORK * k)
    steady()
    blob = [str(i) for i in range(20000 * k)]
    return blob

main()
"""


def program(tmp_path, name="prog.py", work=20000, steady=400000, repeat=1):
    path = tmp_path / name
    path.write_text(textwrap.dedent(PROGRAM).replace("WORK", str(work))
                    .replace("STEADY", str(steady)).replace("REPEAT", str(repeat)))
    return path


def ok(r):
    assert r.returncode == 0, r.stderr
    return r


def capture(tmp_path, out, *args, script="prog.py", opts=()):
    ok(pyprof([*opts, "-o", out, script, *map(str, args)], tmp_path))
    return tmp_path / out


def total_seconds(session, name):
    """Inclusive seconds of the functions called `name`."""
    totals = session.function_totals()
    return sum(session.seconds(totals[f].total) for f, fn in session.functions.items()
               if fn.name == name and f in totals)


def one_line_error(r, *needles):
    """Status 2, one line `pyprof: error: ...` on stderr, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyprof: error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def c1_callers(stats, key):
    return {(os.path.basename(k[0]), k[1], k[2]): v for k, v in stats[key][4].items()}


def by_identity(session, table):
    """{(kind, file, first line, qualname): value} from a {fid: value} table."""
    out = {}
    for fid, value in table.items():
        fn = session.functions[fid]
        out[(fn.kind, fn.filename, fn.line, fn.qualname)] = value
    return out


# ------------------------------------------------------------------ merge
def test_merged_call_counts_are_the_sum_of_cprofiles(tmp_path):
    prog = program(tmp_path)
    a, b = capture(tmp_path, "a.cprof", 1), capture(tmp_path, "b.cprof", 2)
    ok(run(["-m", "cProfile", "-o", "c1.prof", "prog.py", "1"], tmp_path))
    ok(run(["-m", "cProfile", "-o", "c2.prof", "prog.py", "2"], tmp_path))
    ok(pyprof(["merge", "a.cprof", "b.cprof", "-o", "all.cprof"], tmp_path))
    ok(pyprof(["convert", "all.cprof", "-o", "all.prof"], tmp_path))
    # cProfile names the script as typed, pyprof by its absolute path: keyed by base name
    def stats(name):
        return {(os.path.basename(file), line, fn): v for (file, line, fn), v
                in pstats.Stats(str(tmp_path / name)).stats.items()}

    merged = stats("all.prof")                  # the export loads in pstats
    c1, c2 = stats("c1.prof"), stats("c2.prof")
    mine = [k for k in c1 if k[0] == prog.name]
    assert {k[2] for k in mine} >= {"helper", "work", "steady", "main", "<module>"}
    for key in mine:
        assert merged[key][:2] == (c1[key][0] + c2[key][0], c1[key][1] + c2[key][1]), key
    # and the calling edges too: work -> helper
    helper = next(k for k in mine if k[2] == "helper")
    work = next(k for k in mine if k[2] == "work")
    callers = {(os.path.basename(k[0]), k[1], k[2]): v for k, v in merged[helper][4].items()}
    assert callers[work][0] == c1_callers(c1, helper)[work][0] + c1_callers(c2, helper)[work][0]

    s = Session.load(tmp_path / "all.cprof")
    assert [p["file"] for p in s.processes] == ["a.cprof", "b.cprof"]
    assert [p["argv"] for p in s.processes] == [["prog.py", "1"], ["prog.py", "2"]]
    assert all(p["pid"] and p["start_wall_ns"] for p in s.processes)
    sa, sb = Session.load(a), Session.load(b)
    assert s.events == sa.events + sb.events
    # one function id per function: the two captures' functions met
    assert len(s.functions) == len({**by_identity(sa, sa.functions), **by_identity(sb, sb.functions)})


def test_threads_stay_apart_and_split_by_process(tmp_path):
    program(tmp_path)
    paths = [capture(tmp_path, f"t{k}.cprof", k, "threads") for k in (1, 3)]
    inputs = [Session.load(p) for p in paths]
    s = merge(inputs, sources=[p.name for p in paths])
    assert len(s.threads) == sum(len(i.threads) for i in inputs)
    assert sorted(t.name for t in s.threads.values()) == sorted(
        t.name for i in inputs for t in i.threads.values())
    for index, src in enumerate(inputs):
        threads = s.process_threads(index)
        assert len(threads) == len(src.threads)
        assert {s.threads[t].name for t in threads} == {t.name for t in src.threads.values()}
        # one process of the merge has exactly its input's numbers
        assert by_identity(s, s.function_totals(threads=threads)) == \
            by_identity(src, src.function_totals())
    # each worker thread keeps its own counts: w1 calls helper twice as often as w0
    helper = next(f for f, fn in s.functions.items() if fn.name == "helper")
    for index, k in enumerate((1, 3)):
        per_thread = {s.threads[t].name: s.fstats.get((t, helper))
                      for t in s.process_threads(index)}
        assert per_thread["w0"].calls == 100 * k and per_thread["w1"].calls == 200 * k


def merged_runs(tmp_path, prefix, opts):
    """Captures of the program run with k = 1 and 2, merged: (merged, inputs)."""
    paths = [capture(tmp_path, f"{prefix}{k}.cprof", k, opts=opts) for k in (1, 2)]
    ok(pyprof(["merge", *map(str, paths), "-o", "all.cprof"], tmp_path))
    return Session.load(tmp_path / "all.cprof"), [Session.load(p) for p in paths]


def test_samples_add_up(tmp_path):
    program(tmp_path, work=1000000)
    opts = ("--sample", "--rate", "1000")
    s, inputs = merged_runs(tmp_path, "s", opts)

    def stacks(session):
        out = {}
        for (t, sid, state), c in session.samples.items():
            frames = tuple((session.functions[f].qualname, line)
                           for f, line in session.stacks[sid].frames)
            out[frames, state] = out.get((frames, state), 0) + c.count
        return out

    expected = {}
    for i in inputs:
        for key, n in stacks(i).items():
            expected[key] = expected.get(key, 0) + n
    assert sum(expected.values()) > 20
    assert stacks(s) == expected
    assert len(s.stacks) == len({frames for frames, _ in expected})   # identical stacks merged
    assert s.info["sampling"]["drained"] == sum(i.info["sampling"]["drained"] for i in inputs)
    # the achieved rate of the whole: signals per CPU second of all the processes,
    # so between the processes' own rates (each differs: it was dropped once)
    sp = [i.info["sampling"] for i in inputs]
    signals, cpu = sum(x["signals"] for x in sp), sum(x["cpu_s"] for x in sp)
    assert s.info["sampling"]["rate_achieved"] == pytest.approx(signals / cpu, rel=1e-6)
    assert min(x["rate_achieved"] for x in sp) * 0.999 <= s.info["sampling"]["rate_achieved"] \
        <= max(x["rate_achieved"] for x in sp) * 1.001


@pytest.mark.parametrize("opts", [("--memory",), ("--memory-sample", "4096")])
def test_memory_rows_add_up(tmp_path, opts):
    program(tmp_path)
    s, inputs = merged_runs(tmp_path, "m", opts)

    def per_line(session):
        out = {}
        for (fid, line), c in session.memory_lines().items():
            fn = session.functions[fid]
            key = (fn.filename, fn.qualname, line)
            prev = out.get(key, (0, 0, 0))
            out[key] = (prev[0] + c.alloc_bytes, prev[1] + c.alloc_count, prev[2] + c.net_bytes)
        return out

    expected = {}
    for i in inputs:
        for key, v in per_line(i).items():
            prev = expected.get(key, (0, 0, 0))
            expected[key] = tuple(x + y for x, y in zip(prev, v))
    assert per_line(s) == expected
    assert sum(v[0] for v in expected.values()) > 100000
    assert s.info["memory"]["allocated_bytes"] == sum(
        i.info["memory"]["allocated_bytes"] for i in inputs)
    if s.memory_stacks:
        assert sum(c.alloc_bytes for c in s.memory_by_stack.values()) == sum(
            c.alloc_bytes for i in inputs for c in i.memory_by_stack.values())
    # each process keeps its memory curve; the Session's is the first's
    assert [len(s.process_memory_curve(i)) for i in range(2)] == \
        [len(i.memory_curve) for i in inputs]
    assert [p.rss for p in s.memory_curve] == [p.rss for p in inputs[0].memory_curve]


def test_merge_of_merges_flattens_processes(tmp_path):
    program(tmp_path)
    paths = [capture(tmp_path, f"r{k}.cprof", k) for k in (1, 2, 3)]
    ok(pyprof(["merge", str(paths[0]), str(paths[1]), "-o", "ab.cprof"], tmp_path))
    ok(pyprof(["merge", "ab.cprof", str(paths[2]), "-o", "abc.cprof"], tmp_path))
    abc = Session.load(tmp_path / "abc.cprof")
    assert [os.path.basename(p["file"]) for p in abc.processes] == ["r1.cprof", "r2.cprof",
                                                                    "r3.cprof"]
    assert [len(abc.process_threads(i)) for i in range(3)] == [1, 1, 1]
    # the first merge's processes are recognised: merging one of them again is refused
    r = pyprof(["merge", "abc.cprof", str(paths[1]), "-o", "x.cprof"], tmp_path)
    one_line_error(r, "same process", "--force")
    # a directory stands for its captures
    d = tmp_path / "dir"
    d.mkdir()
    for p in paths:
        os.link(p, d / p.name)
    ok(pyprof(["merge", "dir", "-o", "fromdir.cprof"], tmp_path))
    assert len(Session.load(tmp_path / "fromdir.cprof").processes) == 3


def test_merge_refuses_unrelated_programs_and_duplicates(tmp_path):
    program(tmp_path)
    program(tmp_path, name="other.py")
    capture(tmp_path, "a.cprof", 1)
    capture(tmp_path, "o.cprof", 1, script="other.py")
    r = pyprof(["merge", "a.cprof", "o.cprof", "-o", "all.cprof"], tmp_path)
    one_line_error(r, "a.cprof", "o.cprof", "prog.py", "other.py", "different programs",
                   "--force")
    assert not (tmp_path / "all.cprof").exists()
    ok(pyprof(["merge", "a.cprof", "o.cprof", "-o", "all.cprof", "--force"], tmp_path))
    assert len(Session.load(tmp_path / "all.cprof").processes) == 2

    r = pyprof(["merge", "a.cprof", "a.cprof", "-o", "twice.cprof"], tmp_path)
    one_line_error(r, "a.cprof is given twice", "--force")
    assert not (tmp_path / "twice.cprof").exists()
    ok(pyprof(["merge", "a.cprof", "a.cprof", "-o", "twice.cprof", "--force"], tmp_path))
    single, twice = Session.load(tmp_path / "a.cprof"), Session.load(tmp_path / "twice.cprof")
    assert {k: v.calls * 2 for k, v in by_identity(single, single.function_totals()).items()} \
        == {k: v.calls for k, v in by_identity(twice, twice.function_totals()).items()}


def test_merge_bad_inputs(tmp_path):
    program(tmp_path)
    capture(tmp_path, "a.cprof", 1)
    (tmp_path / "text.cprof").write_text("not a capture\n")
    cases = [
        (["a.cprof", "missing.cprof"], ("missing.cprof",)),
        (["a.cprof", "text.cprof"], ("text.cprof", "not a pyprof capture")),
        (["a.cprof", "empty_dir"], ("empty_dir", "without .cprof")),
        (["a.cprof", "a.cprof", "-o", "nodir/x.cprof"], ("cannot write",)),
        (["a.cprof", "-o", "x.prof"], ("x.prof", ".cprof")),
        (["a.cprof"], ("-o",)),
    ]
    (tmp_path / "empty_dir").mkdir()
    for args, needles in cases:
        if "-o" not in args and args != ["a.cprof"]:
            args = [*args, "-o", "out.cprof"]
        r = pyprof(["merge", *args], tmp_path)
        one_line_error(r, *needles)
        assert not (tmp_path / "out.cprof").exists()


def test_merge_refuses_different_time_units(tmp_path):
    program(tmp_path)
    a = Session.load(capture(tmp_path, "a.cprof", 1))
    b = Session.load(capture(tmp_path, "b.cprof", 2))
    b.info["time_unit"] = 1e-3
    from pyprof import PyprofError
    with pytest.raises(PyprofError, match="different units"):
        merge([a, b], force=True)


# ------------------------------------------------------------------ diff
@pytest.fixture(scope="module")
def before_after(tmp_path_factory):
    """The same program, its work() loop 3x longer in AFTER (traced)."""
    tmp = tmp_path_factory.mktemp("diff")
    program(tmp, work=300000, steady=2000000)
    # separate runs on a loaded machine: a pair whose own clock does not show
    # the 3x work as at least 1.5x is retaken, at most twice
    for _ in range(3):
        before = capture(tmp, "before.cprof", 1)
        after = capture(tmp, "after.cprof", 3)
        growth = (total_seconds(Session.load(after), "work")
                  / total_seconds(Session.load(before), "work"))
        if growth > 1.5:
            break
    return tmp, before, after


def test_diff_shows_the_3x_function(before_after):
    tmp, before, after = before_after
    r = ok(pyprof(["diff", "before.cprof", "after.cprof", "--format", "json",
                   "--threshold", "25"], tmp))
    d = json.loads(r.stdout)
    assert d["primary"] == "total" and list(d["columns"]) == ["total", "self", "calls"]
    rows = {row["function"]: row for row in d["rows"] if row["file"].endswith("prog.py")}
    assert rows["helper"]["values"]["calls"]["change_pct"] == pytest.approx(200.0)
    assert rows["helper"]["values"]["calls"]["change"] == 600000
    # the change is the captures' own (times of separate runs: a loaded machine
    # moves them, so 3x the work is only required to show as a clear growth)
    b, a = Session.load(before), Session.load(after)
    work_b, work_a = total_seconds(b, "work"), total_seconds(a, "work")
    pct = rows["work"]["values"]["total"]["change_pct"]
    assert pct == pytest.approx(100 * (work_a - work_b) / work_b, rel=1e-3)
    assert pct > 50, pct
    # steady() did the same work: shown only if the noise moved it past 25%
    steady_b, steady_a = total_seconds(b, "steady"), total_seconds(a, "steady")
    assert ("steady" in rows) == (abs(steady_a - steady_b) / steady_b * 100 >= 25)
    assert d["hidden"] >= 1
    # sorted by the absolute change of the primary column
    changes = [abs(row["values"]["total"]["change"]) for row in d["rows"]]
    assert changes == sorted(changes, reverse=True)
    # shown with a threshold of 0 and no floor: steady's change is small
    r = ok(pyprof(["diff", "before.cprof", "after.cprof", "--format", "json", "--threshold", "0",
                   "--min-time", "0", "--min-count", "0"], tmp))
    steady = next(row for row in json.loads(r.stdout)["rows"] if row["function"] == "steady")
    assert steady["values"]["total"]["change_pct"] == pytest.approx(
        100 * (steady_a - steady_b) / steady_b, rel=1e-3)
    assert steady["values"]["calls"]["change"] == 0


def test_diff_table(before_after):
    tmp, before, after = before_after
    r = ok(pyprof(["diff", "before.cprof", "after.cprof", "--select", "calls", "total"], tmp))
    lines = r.stdout.splitlines()
    assert "sorted by the change of 'calls'" in lines[0]
    row = next(line for line in lines if " helper (" in line)
    assert "+200.0%" in row and "+600.00k" in row
    assert re.search(r"\d+ entr(y|ies) within the noise threshold", lines[-1])
    # --limit
    r = ok(pyprof(["diff", "before.cprof", "after.cprof", "--limit", "1", "--threshold", "0"],
                  tmp))
    lines = r.stdout.splitlines()
    assert len(lines) == 3 + 1 + 2 and re.fullmatch(r"\d+ more entr(y|ies) not shown \(--limit 1\)",
                                                    lines[-2])


def test_diff_csv_has_the_documented_header(before_after):
    tmp, before, after = before_after
    ok(pyprof(["diff", "before.cprof", "after.cprof", "-o", "d.csv"], tmp))
    rows = list(csv.reader(io.StringIO((tmp / "d.csv").read_text())))
    header = ["function", "file", "line", "status",
              "total_before", "total_after", "total_change", "total_change_pct",
              "self_before", "self_after", "self_change", "self_change_pct",
              "calls_before", "calls_after", "calls_change", "calls_change_pct"]
    assert rows[0] == header == csv_header(["total", "self", "calls"])
    helper = next(r for r in rows[1:] if r[0] == "helper")
    values = dict(zip(header, helper))
    assert int(values["calls_after"]) == 3 * int(values["calls_before"])
    assert float(values["calls_change_pct"]) == pytest.approx(200.0)
    assert float(values["total_after"]) > float(values["total_before"]) > 0     # seconds


def test_diff_by_line(tmp_path):
    program(tmp_path, work=20000)
    for k in (1, 3):
        capture(tmp_path, f"l{k}.cprof", k, opts=("--lines-of", "prog.py"))
    r = ok(pyprof(["diff", "l1.cprof", "l3.cprof", "--by", "line", "--format", "json",
                   "--select", "hits"], tmp_path))
    rows = json.loads(r.stdout)["rows"]
    call = next(row for row in rows if row["function"] == "work"
                and row["values"]["hits"]["before"] == 20000)
    assert call["values"]["hits"]["after"] == 60000


def test_diff_new_and_gone_and_mixed_modes(tmp_path):
    program(tmp_path)
    capture(tmp_path, "t.cprof", 1)
    capture(tmp_path, "s.cprof", 1, opts=("--sample",))
    capture(tmp_path, "m.cprof", 1, opts=("--memory",))
    # traced vs sampled: the time columns are compared, with a note
    r = ok(pyprof(["diff", "t.cprof", "s.cprof", "--threshold", "0", "--min-time", "0"],
                  tmp_path))
    assert "note: total: t.cprof is traced, s.cprof is sampled" in r.stdout
    assert "calls" not in r.stdout.splitlines()[3]
    # the samplers do not see C functions: they are gone
    assert re.search(r"gone .*builtins", r.stdout)
    # traced vs memory only: nothing in common
    one_line_error(pyprof(["diff", "t.cprof", "m.cprof"], tmp_path),
                   "no column in common", "traced", "memory")


NEW_PROGRAM = """
class A:
    pass

def make(n):
    for i in range(n):
        object.__new__(A)
        int.__new__(int, i)

make(37)
"""
ADDRESSED = re.compile(r"<built-in method __new__ of type object at 0x[0-9a-f]+>")


def test_builtins_named_with_an_address_match_across_runs(tmp_path):
    """cProfile names type.__new__ with the address of `type` (it moves from
    run to run): pyprof matches it by the name without the address, and
    pstats still gets cProfile's spelling."""
    (tmp_path / "newprog.py").write_text(NEW_PROGRAM)
    ok(run(["-m", "cProfile", "-o", "c.prof", "newprog.py"], tmp_path))
    theirs = pstats.Stats(str(tmp_path / "c.prof")).stats
    (key,) = [k for k in theirs if k[0] == "~" and ADDRESSED.fullmatch(k[2])]
    calls = theirs[key][1]
    assert calls == 2 * 37
    for run_name in ("r1", "r2"):
        capture(tmp_path, f"{run_name}.cprof", script="newprog.py")
        ok(pyprof(["convert", f"{run_name}.cprof", "-o", f"{run_name}.prof"], tmp_path))
        ours = pstats.Stats(str(tmp_path / f"{run_name}.prof")).stats
        (key,) = [k for k in ours if k[0] == "~" and ADDRESSED.fullmatch(k[2])]
        assert ours[key][1] == calls
    r = ok(pyprof(["diff", "r1.cprof", "r2.cprof", "--format", "json", "--threshold", "0",
                   "--min-time", "0", "--min-count", "0"], tmp_path))
    rows = [row for row in json.loads(r.stdout)["rows"] if "__new__" in row["function"]]
    assert [row["function"] for row in rows] == ["<built-in method __new__ of type object>"]
    assert rows[0]["values"]["calls"]["before"] == rows[0]["values"]["calls"]["after"] == calls
    assert rows[0]["status"] not in ("new", "gone"), rows[0]
    ok(pyprof(["merge", "r1.cprof", "r2.cprof", "-o", "both.cprof"], tmp_path))
    both = Session.load(tmp_path / "both.cprof")
    merged = [c.calls for fid, c in both.function_totals().items()
              if ADDRESSED.fullmatch(both.functions[fid].name)]
    assert merged == [2 * calls]


def test_diff_bad_inputs(tmp_path):
    program(tmp_path)
    capture(tmp_path, "a.cprof", 1)
    capture(tmp_path, "m.cprof", 1, opts=("--memory",))      # exact memory: no stacks
    (tmp_path / "text.cprof").write_text("not a capture\n")
    cases = [
        (["a.cprof", "missing.cprof"], ("missing.cprof",)),
        (["text.cprof", "a.cprof"], ("text.cprof", "not a pyprof capture")),
        (["a.cprof", "a.cprof", "--by", "line"], ("no line data",)),
        (["a.cprof", "a.cprof", "--select", "bytes"], ("unknown column",)),
        (["a.cprof", "a.cprof", "--select", "samples"], ("not in both",)),
        (["a.cprof", "a.cprof", "--threshold", "-1"], (">= 0",)),
        (["m.cprof", "m.cprof", "--flamegraph", "f.html", "-o", "out.csv"],
         ("needs stacks in both captures",)),
    ]
    for args, needles in cases:
        one_line_error(pyprof(["diff", *args], tmp_path), *needles)
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "f.html").exists()


# ------------------------------------------------------------------ flame graph
EVIL = "</script><script>alert(1)</script>"


def _data(html):
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_differential_flamegraph(tmp_path):
    program(tmp_path, work=1000000)
    opts = ("--sample", "--rate", "1000")

    def work_weight(path):              # inclusive: the samples with work in their stack
        s = Session.load(path)
        fids = {f for f, fn in s.functions.items() if fn.name == "work"}
        return sum(c.weight for (t, sid, st), c in s.samples.items()
                   if fids & {fr[0] for fr in s.stacks[sid].frames})
    # a loaded machine can slow one run's CPU: the pair is retaken (at most
    # twice) when its own samples do not show the 3x work as 1.5x
    for attempt in range(3):
        paths = {k: capture(tmp_path, f"s{k}.cprof", k, opts=opts) for k in (1, 3)}
        if work_weight(paths[3]) > 1.5 * work_weight(paths[1]):
            break
    weights = {k: work_weight(p) for k, p in paths.items()}
    for path in paths.values():         # a function whose name would end the page's script
        s = Session.load(path)
        fid = next(f for f, fn in s.functions.items() if fn.name == "work")
        from dataclasses import replace
        s.functions[fid] = replace(s.functions[fid], qualname=EVIL)
        s.save(path)
    ok(pyprof(["diff", "s1.cprof", "s3.cprof", "--flamegraph", "d.html", "-o", "d.txt"],
              tmp_path))
    html = (tmp_path / "d.html").read_text()
    assert html.count("</script>") == 2             # the page's own two scripts, nothing else
    assert "<script>alert" not in html
    data = _data(html)
    assert data["diff"] is True and data["unit"] == "ns"
    (root,) = data["threads"].values()

    def find(node, name):
        if node[0] == name:
            return node
        for child in node[4]:
            found = find(child, name)
            if found:
                return found

    work = find(root, EVIL)
    assert work is not None
    before, after = Session.load(paths[1]), Session.load(paths[3])
    assert root[3] == sum(c.weight for c in after.samples.values())      # widths: AFTER
    assert root[5] == sum(c.weight for c in before.samples.values())     # and BEFORE kept
    assert (work[3], work[5]) == (weights[3], weights[1])
    assert work[3] > 1.5 * work[5] > 0          # 3x the work: it grew (drawn red)
    assert data["max_delta"] >= work[3] - work[5]


def test_differential_flamegraph_marks_frames_only_in_before(tmp_path):
    program(tmp_path, work=1000000)
    opts = ("--sample", "--rate", "1000")
    a = capture(tmp_path, "a.cprof", 1, opts=opts)
    capture(tmp_path, "b.cprof", 1, opts=opts)
    s = Session.load(a)
    fid = next(f for f, fn in s.functions.items() if fn.name == "work")
    from dataclasses import replace
    s.functions[fid] = replace(s.functions[fid], qualname="old_work")
    s.save(a)
    ok(pyprof(["diff", "a.cprof", "b.cprof", "--flamegraph", "d.html"], tmp_path))
    data = _data((tmp_path / "d.html").read_text())
    assert any(path.endswith("old_work") and value > 0 for path, value in data["gone"])


def test_differential_flamegraph_of_traced_captures(tmp_path):
    """Function tracing records the calling-context tree: its self times are
    the stacks of the differential flame graph."""
    program(tmp_path, work=200000)
    paths = {k: capture(tmp_path, f"t{k}.cprof", k) for k in (1, 3)}
    ok(pyprof(["diff", "t1.cprof", "t3.cprof", "--flamegraph", "d.html", "-o", "d.txt"],
              tmp_path))
    data = _data((tmp_path / "d.html").read_text())
    assert data["unit"] == "ns" and list(data["threads"]) == ["traced time"]
    (root,) = data["threads"].values()
    before, after = Session.load(paths[1]), Session.load(paths[3])
    own = sum(round(after.seconds(p.own) * 1e9) for p in after.paths.values() if p.own > 0)
    assert root[3] == own
    assert root[5] == sum(round(before.seconds(p.own) * 1e9)             # BEFORE kept
                          for p in before.paths.values() if p.own > 0)

    def find(node, name):
        if node[0] == name:
            return node
        for child in node[4]:
            found = find(child, name)
            if found:
                return found

    work = find(root, "work")
    assert work[3] > work[5] > 0                # 3x the calls of work: it grew
