"""--async (docs/async.md): asyncio tasks against the program's own clocks,
task frames in the exported files (read back: collapsed, speedscope, pprof
by go tool pprof), the tasks view, uvloop, and the bad inputs."""
import csv
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from pyprof import Session
from support import PROGRAMS, pyprof

HERE = PROGRAMS                         # tests/programs/: the programs run here
PROG = os.path.join(HERE, "asyncprog.py")


# Under ASan+UBSan (make asan) the program runs several times slower, and the
# helper's looks at the tasks (each one slower too) end up further apart than the
# program's short waits and tasks last: what needs a look within them is not checked.
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")
needs_timely_looks = pytest.mark.skipif(
    SANITIZED, reason="under ASan+UBSan the looks at the tasks are further apart than the "
                      "program's short tasks and waits last")


def task_name(session, row):
    return session.functions[row.fid].name[len("<task "):-1]


def close(measured, truth):
    """The issue's bound: within max(5 %, 20 ms)."""
    return abs(measured - truth) <= max(0.05 * truth, 0.020)


def _has_uvloop():
    try:
        import uvloop  # noqa: F401
        return True
    except ImportError:
        return False


LOOPS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    not _has_uvloop(), reason="uvloop has no wheel for this Python (test extra)"))]


def take_capture(d, loop):
    r = pyprof("--sample", "--wall", "--rate", "1000", "--async", "-o", d / "run.cprof",
               PROG, d / "truth.json", loop, cwd=d)
    assert r.returncode == 0, r.stderr
    assert "saw no asyncio task" not in r.stderr
    truth = json.loads((d / "truth.json").read_text())
    work = truth.pop("thread work")
    return d, Session.load(d / "run.cprof"), dict(truth, _work=work), loop


@pytest.fixture(scope="module", params=LOOPS)
def capture(request, tmp_path_factory):
    return take_capture(tmp_path_factory.mktemp(f"async-{request.param}"), request.param)


def test_tasks_against_their_own_clocks(capture):
    """Each task's running time (the weight of its samples) and awaiting time
    (its lifetime less that) against the clocks the task kept itself, 1 kHz:
    within max(5 %, 20 ms); a lifetime's start and end are known to half the
    time between two looks at the tasks (docs/async.md), which a loaded
    machine can stretch: awaiting is allowed that gap too."""
    d, s, truth, loop = capture
    truth = {k: v for k, v in truth.items() if k != "_work"}
    rows = {task_name(s, t): t for t in s.tasks}
    assert set(truth) <= set(rows), sorted(rows)
    gap = s.info["sampling"]["async"]["look_gap_s"]
    bad = []
    for name, want in truth.items():
        t = rows[name]
        assert t.state == "done"
        for what in ("running", "awaiting"):
            got = getattr(t, what) / 1e9
            # the bursts' time off a CPU (the program's own measure) may be on
            # either side of a burst's end; none on a quiet machine
            off_cpu = want["stolen"]
            if not close(got, want[what]) and not abs(got - want[what]) <= (
                    gap if what == "awaiting" else 0) + off_cpu + max(0.05 * want[what], 0.020):
                bad.append(f"{name} {what}: {got:.3f} s, its own clock {want[what]:.3f} s "
                           f"(look gap {gap:.3f} s)")
    assert not bad, bad


@needs_timely_looks
def test_task_states_threads_and_coroutines(capture):
    d, s, truth, loop = capture
    rows = {task_name(s, t): t for t in s.tasks}
    assert rows["cancelled"].state == "cancelled" and rows["timed-out"].state == "cancelled"
    threads = {i: th.name for i, th in s.threads.items()}
    assert threads[rows["thread-w"].thread] == "loop-thread"
    assert threads[rows["tg-a"].thread] == "MainThread"
    assert s.functions[rows["consumer"].coro_fid].name == "consumer"
    assert s.functions[rows["to-thread"].coro_fid].name == "to_thread"


def stacks_of(s, task):
    """Function names of the stacks under <task NAME>, with their state."""
    out = []
    for (t, sid, state), c in s.samples.items():
        names = [s.functions[f].name for f, _ in s.stacks[sid].frames]
        if names and names[0] == f"<task {task}>":
            out.append((state, names))
    return out


def missing_waits(s):
    """The awaiting chains the capture should hold and does not."""
    awaiting = 4

    def waits(task):
        return [names for state, names in stacks_of(s, task) if state == awaiting]

    missing = []
    if not any(n[1:] == ["consumer", "get", "<await Future>"] for n in waits("consumer")):
        missing.append("consumer: consumer > get > <await Future>")
    if not any(n[1:2] == ["locker"] and n[-2:] == ["acquire", "<await Future>"]
               for n in waits("lock-1")):
        missing.append("lock-1: locker ... acquire > <await Future>")
    if not any(n[1:3] == ["worker", "sleep"] for n in waits("g-1")):
        missing.append("g-1: worker > sleep")
    if not any(n[1:3] == ["sleeper", "sleep"] for n in waits("cancelled")):
        missing.append("cancelled: sleeper > sleep")
    return missing


@needs_timely_looks
def test_where_tasks_wait(capture, tmp_path):
    """Suspended tasks are charged to the chain they wait in, down to the
    awaited object; running samples hold the task's coroutines only. The
    chains of the shortest waits are missed by some captures (a look at the
    tasks falls outside them: about one capture in four on a loaded 2-CPU
    machine, 2026-11-27), so up to two more captures are taken; one must
    hold every chain."""
    d, s, truth, loop = capture
    awaiting = 4
    misses = [missing_waits(s)]
    for attempt in range(2):
        if not misses[-1]:
            break
        (tmp_path / str(attempt)).mkdir()
        d, s, truth, loop = take_capture(tmp_path / str(attempt), loop)
        misses.append(missing_waits(s))
    assert not misses[-1], misses
    running = [names for state, names in stacks_of(s, "tg-b") if state != awaiting]
    assert running and all(n[1] == "worker" for n in running)
    assert any(n[1:] == ["worker", "burst", "burn"] for n in running)
    loop_frames = {"_run_once", "run_forever", "_run", "run"}
    assert not any(loop_frames & set(n) for n in running)


@needs_timely_looks
def test_to_thread_work_under_its_task(capture):
    """The executor thread's samples while it does a task's to_thread work
    are under the task (from _WorkItem.run up), against the work's own clock:
    from the first look (or drain) that sees the thread at work, so within
    max(5 %, 20 ms, the longest time between two looks)."""
    d, s, truth, loop = capture
    gap = s.info["sampling"]["async"]["look_gap_s"]
    threads = {i: th.name for i, th in s.threads.items()}
    work = 0.0
    for (t, sid, state), c in s.samples.items():
        names = [s.functions[f].name for f, _ in s.stacks[sid].frames]
        if names[:1] == ["<task to-thread>"] and threads[t] != "MainThread":
            assert names[1] == "run"
            if "burn" in names:
                work += c.weight / 1e9
    want = truth["_work"]["to-thread"]
    assert close(work, want) or abs(work - want) <= gap, (work, want, gap)
    row = {task_name(s, t): t for t in s.tasks}["to-thread"]
    # it awaits the thread meanwhile: the work is not its running time (its own
    # steps are: submitting starts the executor's thread, 20-60 ms on a loaded
    # machine)
    assert row.running / 1e9 < max(0.02, want / 2), (row.running, want)


def test_task_frames_in_exported_files(capture):
    d, s, truth, loop = capture
    for out in ("run.collapsed", "run.speedscope.json"):
        r = pyprof("convert", "run.cprof", "-o", out, cwd=d)
        assert r.returncode == 0, r.stderr
    roots = set()
    for line in (d / "run.collapsed").read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        if len(frames) > 1 and frames[1].startswith("<task "):
            roots.add(frames[1])
            assert int(count) > 0
    assert {"<task tg-a>", "<task consumer>", "<task thread-w>"} <= roots
    doc = json.loads((d / "run.speedscope.json").read_text())
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert "<task tg-b>" in names
    idx = names.index("<task tg-b>")
    assert any(p["samples"] and any(st[0] == idx for st in p["samples"] if st)
               for p in doc["profiles"])


def _go():
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/lib/go/bin"]:
        if os.path.exists(os.path.join(d, "go")):
            return os.path.join(d, "go")
    return None


@pytest.mark.skipif(_go() is None, reason="go tool pprof needs Debian's golang-go")
def test_task_frames_in_pprof(capture):
    d, s, truth, loop = capture
    r = pyprof("convert", "run.cprof", "-o", "run.pb.gz", cwd=d)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, HOME=str(d), GOCACHE=str(d / "gocache"), PPROF_TMPDIR=str(d))
    top = subprocess.run([_go(), "tool", "pprof", "-traces", str(d / "run.pb.gz")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert top.returncode == 0, top.stderr
    # pprof drops <...> from names (C++ templates): its task frames are [task NAME]
    assert "[task tg-a]" in top.stdout and "[task consumer]" in top.stdout


def test_tasks_view(capture):
    d, s, truth, loop = capture
    r = pyprof("view", "run.cprof", "--view", "tasks", "--format", "csv",
               "--order-by", "awaiting", cwd=d)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert r.stdout.startswith("task,"), r.stdout[:80]      # the documented column name
    by = {row["task"]: row for row in rows}
    assert {"tg-a", "consumer", "cancelled"} <= set(by)
    assert [float(x["awaiting"]) for x in rows] == sorted((float(x["awaiting"]) for x in rows),
                                                          reverse=True)
    t = {task_name(s, x): x for x in s.tasks}["consumer"]
    assert float(by["consumer"]["running"]) == pytest.approx(t.running / 1e9, abs=1e-6)
    assert by["consumer"]["coroutine"].startswith("consumer (") and "asyncprog.py:" in \
        by["consumer"]["coroutine"]
    assert by["cancelled"]["state"] == "cancelled"
    r = pyprof("view", "run.cprof", "--view", "tasks", "--show", "^tg-", cwd=d)
    assert r.returncode == 0, r.stderr
    assert "tg-a" in r.stdout and "consumer" not in r.stdout
    r = pyprof("view", "run.cprof", "--view", "tasks", "--thread", "loop-thread",
               "--format", "csv", cwd=d)
    assert [x["task"] for x in csv.DictReader(io.StringIO(r.stdout))] == ["thread-w", "Task-2"] \
        or {x["task"] for x in csv.DictReader(io.StringIO(r.stdout))} >= {"thread-w"}


def test_created_says_why_it_is_empty(capture):
    """Outside asyncio's debug mode no task has a creation place: the table
    says so rather than leave a silent empty column."""
    d, s, truth, loop = capture
    assert not any(t.created for t in s.tasks)
    r = pyprof("view", "run.cprof", "--view", "tasks", cwd=d)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().splitlines()[-1] == (
        "created: needs PYTHONASYNCIODEBUG=1 (asyncio keeps where a task was made only in "
        "debug mode)")


def test_capture_round_trip(capture, tmp_path):
    d, s, truth, loop = capture
    s.save(tmp_path / "again.cprof")
    again = Session.load(tmp_path / "again.cprof")
    assert again.tasks == s.tasks
    assert again.samples == s.samples


def test_created_in_debug_mode(tmp_path):
    prog = tmp_path / "dbg.py"
    prog.write_text("import asyncio, time\n"
                    "async def job():\n"
                    "    t = time.perf_counter()\n"
                    "    while time.perf_counter() - t < 0.1: pass\n"
                    "    await asyncio.sleep(0.1)\n"
                    "async def main():\n"
                    "    t = asyncio.create_task(job(), name='made-here')\n"
                    "    await t\n"
                    "asyncio.run(main(), debug=True)\n")
    r = pyprof("--sample", "--wall", "--async", "-o", "d.cprof", prog, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = pyprof("view", "d.cprof", "--view", "tasks", "--format", "csv", cwd=tmp_path)
    row = {x["task"]: x for x in csv.DictReader(io.StringIO(r.stdout))}["made-here"]
    assert row["created"].endswith("dbg.py:7"), row
    r = pyprof("view", "d.cprof", "--view", "tasks", cwd=tmp_path)
    assert "made-here" in r.stdout and "PYTHONASYNCIODEBUG" not in r.stdout


def test_no_event_loop_is_plain_sampling(tmp_path):
    r = pyprof("--sample", "--async", "-o", "p.cprof", "-c",
               "sum(i * i for i in range(3 * 10**6))", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("saw no asyncio task") == 1
    s = Session.load(tmp_path / "p.cprof")
    assert s.samples and not s.tasks
    assert s.info["sampling"]["async"]["tasks"] == 0


@pytest.mark.parametrize("args", [["-l"], ["--memory"]])
def test_async_where_it_cannot_be_honoured(tmp_path, args):
    prog = tmp_path / "p.py"
    prog.write_text("print('ran')\n")
    r = pyprof("--async", *args, prog, cwd=tmp_path)
    assert r.returncode == 2
    assert "ran" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--async goes with --sample or function tracing" in lines[0]
    assert "Traceback" not in r.stderr


def test_api_keyword(tmp_path):
    import asyncio
    import time
    import pyprof as pp

    async def job():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.08:
            pass
        await asyncio.sleep(0.05)

    async def main():
        await asyncio.create_task(job(), name="api-task")

    with pp.Profile(mode="sample", wall=True, rate=1000, asyncio=True) as p:
        asyncio.run(main())
    s = p.session()
    row = {task_name(s, t): t for t in s.tasks}["api-task"]
    assert close(row.running / 1e9, 0.08)
    gap = s.info["sampling"]["async"]["look_gap_s"]     # its end is known to half of it
    assert close(row.awaiting / 1e9, 0.05) or abs(row.awaiting / 1e9 - 0.05) <= gap
    with pytest.raises(ValueError, match="asyncio goes with"):
        pp.Profile(lines=True, asyncio=True)
    assert shutil.which  # keep the import used


# ------------------------------------------------------------------ function tracing
@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    d = tmp_path_factory.mktemp("async-traced")
    r = pyprof("--async", "--timeline", "-o", d / "run.cprof", PROG, d / "truth.json", cwd=d)
    assert r.returncode == 0, r.stderr
    truth = json.loads((d / "truth.json").read_text())
    truth.pop("thread work")
    return d, Session.load(d / "run.cprof"), truth


def test_traced_tasks_against_their_own_clocks(traced):
    """Traced: each task's steps (the program's own count of its suspensions
    + 1), running (its steps' time) and awaiting (from its coroutine's first
    start to its end, less its running time: the tracer does not see the
    task made)."""
    d, s, truth = traced
    rows = {task_name(s, t): t for t in s.tasks}
    bad = []
    for name, want in truth.items():
        t = rows[name]
        assert t.state == "done" and t.samples == 0
        if "steps" in want:
            assert t.steps == want["steps"], (name, t.steps, want["steps"])
        for what, key in (("running", "running"), ("awaiting", "awaiting_since_start")):
            got = getattr(t, what) / 1e9
            # a loaded machine's preemptions (the bursts' time off a CPU measures
            # them) may fall in a step outside its burst: allowed for
            if not close(got, want[key]) and not abs(got - want[key]) <= (
                    want["stolen"] + max(0.05 * want[key], 0.020)):
                bad.append(f"{name} {what}: {got:.3f} s, its own clock {want[key]:.3f} s")
    assert not bad, bad


def test_traced_coroutine_functions(traced):
    """The op view: a coroutine function is called once per coroutine, however
    often it resumed; its awaiting time is its coroutines' wall time less the
    time they ran, against the workers' own clocks summed."""
    d, s, truth = traced
    from pyprof.analysis import views
    rows = {r["name"]: r for r in views.view(s, "op", select=["calls", "time", "awaiting"])["rows"]}
    workers = [k for k, v in truth.items() if "steps" in v]
    w = rows["worker"]
    assert w["calls"] == len(workers)
    # the resumes are calls in pstats (cProfile counts them so)
    fid = next(f for f, fn in s.functions.items() if fn.name == "worker")
    assert s.function_totals()[fid].calls == sum(truth[k]["steps"] for k in workers)
    assert close(w["time"], sum(truth[k]["running"] for k in workers))
    waited = sum(truth[k]["awaiting_since_start"] for k in workers)
    assert abs(w["awaiting"] - waited) <= max(0.05 * waited, 0.020 * len(workers))
    assert rows["consumer"]["calls"] == 1
    r = pyprof("view", "run.cprof", "--view", "op", "--format", "csv", "--show", "^worker$",
               cwd=d)
    row = next(csv.DictReader(io.StringIO(r.stdout)))
    assert int(row["calls"]) == len(workers) and float(row["awaiting"]) > 0


def test_traced_tasks_in_chrome_trace(traced):
    """--timeline: one track per task in the Chrome trace, its steps inside its lifetime."""
    d, s, truth = traced
    r = pyprof("convert", "run.cprof", "-o", "run.trace.json", cwd=d)
    assert r.returncode == 0, r.stderr
    doc = json.loads((d / "run.trace.json").read_text())
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 1 << 23}
    tid = {v: k for k, v in names.items()}
    assert {"task tg-a", "task consumer", "task thread-w"} <= set(tid)
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1 << 23
          and e["tid"] == tid["task tg-a"]]
    life = [e for e in ev if e["cat"] == "task"]
    steps = [e for e in ev if e["cat"] == "task-step"]
    assert len(life) == 1 and len(steps) == truth["tg-a"]["steps"]
    for e in steps:
        assert life[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= life[0]["ts"] + life[0]["dur"] + 1e-3
    assert sum(e["dur"] for e in steps) / 1e6 == pytest.approx(truth["tg-a"]["running"], abs=0.02)


# ------------------------------------------------------------------ address reuse
@pytest.mark.parametrize("mode", [["--wall", "--rate", "1000"], []], ids=["wall", "cpu"])
def test_reused_coroutine_addresses(tmp_path, mode):
    """Tasks made one after another, each freed before the next: the program
    reports that their coroutines reuse addresses. A sample maps to a task
    only while that task lives (docs/async.md, "Address reuse"): every
    sample under <task relay-N> is in the burn function of N's parity (the
    program's own structure), none of another task's."""
    r = pyprof("--sample", *mode, "--async", "-o", "r.cprof", os.path.join(HERE, "asyncrelay.py"),
               "addresses.json", "sleep" if mode else "burn", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    addresses = json.loads((tmp_path / "addresses.json").read_text())
    assert len(set(addresses)) < len(addresses)     # the test means something
    s = Session.load(tmp_path / "r.cprof")
    named, wrong = 0, []
    for (t, sid, state), c in s.samples.items():
        names = [s.functions[f].name for f, _ in s.stacks[sid].frames]
        if not names or not names[0].startswith("<task relay-"):
            continue
        i = int(names[0][len("<task relay-"):-1])
        burns = {"burn_even", "burn_odd"} & set(names)
        if burns:
            named += c.count
            if burns != {("burn_even", "burn_odd")[i % 2]}:
                wrong.append((names, c.count))
    assert not wrong, wrong
    assert named > 0                        # the check checked something
    if mode:                                # wall: each task waits at a look first
        rows = {task_name(s, t): t for t in s.tasks}
        assert sum(f"relay-{i}" in rows for i in range(40)) >= 20, sorted(rows)


@needs_timely_looks
def test_short_tasks_named_between_far_looks(tmp_path):
    """Thousands of idle tasks make each look cost more, so the looks are far
    apart (400 x their cost, up to a second); a sample in the coroutine of a
    task no look has seen asks for one at once, so short tasks (50 ms: two
    20 ms bursts) are named, their running time against their own clocks.
    Before that, 3 or 4 of the 20 were named (2026-11-27): the rest were
    <task ?>, freed before a look or a drain met them."""
    r = pyprof("--sample", "--wall", "--rate", "1000", "--async", "-o", tmp_path / "run.cprof",
               os.path.join(HERE, "asyncshort.py"), tmp_path / "truth.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    s = Session.load(tmp_path / "run.cprof")
    rows = {task_name(s, t): t for t in s.tasks}
    named = [n for n in truth if n in rows]
    # a loaded machine may keep the helper off a CPU for a whole task's life
    assert len(named) >= 0.8 * len(truth), (sorted(named), s.info["sampling"]["async"])
    for n in named:
        got, want = rows[n].running / 1e9, truth[n]["running"]
        assert close(got, want) or abs(got - want) <= max(0.05 * want, 0.020) + truth[n]["stolen"], \
            (n, got, truth[n])


COROS_PROG = """
import asyncio

async def step(i):
    for _ in range(3):
        await asyncio.sleep(0)      # each resume a call, as cProfile counts

async def main():
    await asyncio.gather(*(step(i) for i in range(50)))

asyncio.run(main())
"""


def test_function_mode_follows_coroutines_only_when_asked(tmp_path):
    """Without --async, function tracing counts a coroutine's resumes as its
    calls, as cProfile does (the program does not pay for following each
    coroutine from its first start to its end: issue 32, item 13); with
    --async, the op view counts one call per coroutine and has its awaiting."""
    import pstats
    (tmp_path / "prog.py").write_text(COROS_PROG)
    r = subprocess.run([sys.executable, "-m", "cProfile", "-o", "c.pstats", "prog.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cprofile = {fn: st[1] for (f, _, fn), st in pstats.Stats(str(tmp_path / "c.pstats")).stats.items()
                if f.endswith("prog.py")}
    from pyprof.analysis import views
    for args, follows in (([], False), (["--async"], True)):
        r = pyprof(*args, "-o", "run.cprof", "prog.py", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        s = Session.load(tmp_path / "run.cprof")
        fid = next(f for f, fn in s.functions.items() if fn.name == "step")
        assert s.function_totals()[fid].calls == cprofile["step"] == 50 * 4
        rows = {x["name"]: x for x in views.view(s, "op")["rows"]}
        assert bool(s.coroutines) is follows
        assert ("awaiting" in rows["step"]) is follows, rows["step"]
        assert rows["step"]["calls"] == (50 if follows else 200)


# A task that runs (its own clock) and one that only waits: the exit table and
# the report against them.
BUSY_IDLE = '''import asyncio, json, sys, time
def burn(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass
truth = {}
async def busy():
    t = time.perf_counter()
    for _ in range(6):
        burn(0.05)
        await asyncio.sleep(0.01)
    truth["busy"] = time.perf_counter() - t
async def sleeper():
    t = time.perf_counter()
    await asyncio.sleep(0.8)
    truth["sleeper"] = time.perf_counter() - t
async def main():
    await asyncio.gather(asyncio.create_task(busy(), name="busy"),
                         asyncio.create_task(sleeper(), name="sleeper"))
t = time.perf_counter()
asyncio.run(main())
truth["burn"] = 6 * 0.05
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
'''


@needs_timely_looks
def test_exit_table_puts_running_first(tmp_path):
    """The awaiting pseudo-samples get their own table: the function table is
    the threads' own time, and the sleeper's wait is in the awaiting one."""
    (tmp_path / "bi.py").write_text(BUSY_IDLE)
    r = pyprof("--sample", "--wall", "--rate", "1000", "--async", "bi.py", "truth.json",
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    out = r.stdout
    run_at, aw_at = out.find("Threads' own time (running or blocked; awaiting left out"), \
        out.find("Awaiting (by task and where it waits")
    assert 0 <= run_at < aw_at, out[:3000]
    running = out[run_at:aw_at]
    assert "[awaiting]" not in running
    burn = next(ln for ln in running.splitlines() if ln.rstrip().endswith(
        tuple(f"burn (bi.py:{n})" for n in range(1, 9))))
    total_s = float(burn.split()[5])
    # a loaded machine's time off a CPU in a burn can go to what runs after it
    assert abs(total_s - truth["burn"]) <= max(0.15 * truth["burn"], 0.05), burn
    awaiting = out[aw_at:].split("\n\n")[0].splitlines()[2:]
    slept = sum(float(ln.split()[2]) for ln in awaiting if "<task sleeper>:" in ln)
    # the sleeper runs for microseconds: its awaiting time is its lifetime
    assert abs(slept - truth["sleeper"]) <= max(0.1 * truth["sleeper"], 0.05), awaiting
    assert any("<task sleeper>: sleeper (bi.py:15) > sleep (tasks.py:" in ln and
               ln.endswith("> <await Future>") for ln in awaiting)


def test_report_opens_on_the_programs_code(tmp_path):
    """The wall samples of an asyncio run are mostly the loop's selector wait:
    the heatmap's first file (the one it opens on) is the program's."""
    import re
    (tmp_path / "bi.py").write_text(BUSY_IDLE)
    r = pyprof("--sample", "--wall", "--rate", "1000", "--async", "-o", "bi.cprof", "bi.py",
               "truth.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = pyprof("convert", "bi.cprof", "-o", "bi.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "bi.html").read_text()
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    files = [f["file"] for f in json.loads(m.group(1))["heatmap"]["files"]]
    assert files[0].endswith("bi.py"), files
    assert any(f.endswith("selectors.py") for f in files), files   # still there, later


@needs_timely_looks
def test_async_timeline_size_is_bounded(tmp_path):
    """--async --timeline of thousands of short tasks for 2 s: the trace stays
    under 5 MB (it was 130 MB: a million calls of the loop's), loads as JSON,
    and holds the named task that ran longest with each of its steps."""
    r = pyprof("--async", "--timeline", "-o", "many.trace.json",
               os.path.join(HERE, "asyncmany.py"), "truth.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["tasks"] > 5000, truth           # what makes the trace big
    size = (tmp_path / "many.trace.json").stat().st_size
    assert size < 5 * 2**20, size
    trace = json.loads((tmp_path / "many.trace.json").read_text())
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e.get("name") == "thread_name" and e["pid"] == 1 << 23}
    tid = next(t for t, name in tracks.items() if name == "task ticker")
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "task-step"
             and e["tid"] == tid and e["pid"] == 1 << 23]
    assert len(steps) == truth["ticker_steps"]
    ran = sum(e["dur"] for e in steps) / 1e6
    # each step is its burn plus a few µs of the loop's and the sleep's
    assert truth["ticker_running"] <= ran <= truth["ticker_running"] + 0.01 + \
        0.05 * truth["ticker_running"], (ran, truth)
    other = trace["otherData"]
    assert other["tasks_dropped"] > 0 and len(tracks) == other["tasks"] == 5000
    assert other["tasks"] + other["tasks_dropped"] >= truth["tasks"]
