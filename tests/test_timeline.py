"""Function-mode timeline and its Chrome/Perfetto trace (docs/timeline.md).

Checked against what cannot disagree with it: the function table of the same
run (every ended call is kept, dropped short or dropped full: nothing else),
cProfile's call counts, durations known by construction (time.sleep), the
rules of the Trace Event Format (formats.md section 4) and a real viewer
(speedscope's importer in headless Chromium) where one can run here."""
import base64
import cProfile
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

import pyprof
from pyprof import PyprofError, Session
from pyprof.export import chrome
from support import run_pyprof as pyprof_cli
import workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(path, source):
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def _no_constants(name):
    raise ValueError(f"{name} in JSON")


def load_trace(path):
    """Parse strictly: UTF-8, no NaN/Infinity, and the format's rules."""
    raw = path.read_bytes()
    text = raw.decode("utf-8")                       # strict: invalid UTF-8 raises
    doc = json.loads(text, parse_constant=_no_constants)
    assert text.rstrip().endswith("}"), "the document (and its array) must be closed"
    assert doc["displayTimeUnit"] == "ms"
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M", "C", "i"), e
        assert isinstance(e["pid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and not isinstance(e["ts"], bool), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert "args" not in e, "speedscope splits frames by args"
        if e["ph"] == "C":
            assert all(isinstance(v, int) for v in e["args"].values()), e
        if e["ph"] == "i":
            assert e["s"] == "p"
    return doc


def xs_by_tid(doc):
    out = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            out.setdefault(e["tid"], []).append(e)
    return out


def assert_nested_ns(events):
    """events: (start_ns, dur_ns) of one thread: every interval lies inside the
    one enclosing it (no partial overlap)."""
    stack = []
    for start, dur in sorted(events, key=lambda e: (e[0], -e[1])):
        end = start + dur
        while stack and stack[-1] <= start:
            stack.pop()
        if stack:
            assert end <= stack[-1], (start, end, stack[-1])
        stack.append(end)


def session_of(prof):
    return Session.from_blob(prof.snapshot(False))


def per_thread(session):
    out = {}
    for t, fid, start, dur in session.timeline:
        out.setdefault(t, []).append((start, dur))
    return out


def counts_by_fid(session):
    out = {}
    for _, fid, _, _ in session.timeline:
        out[fid] = out.get(fid, 0) + 1
    return out


def total_calls(session):
    return sum(c.calls for c in session.fstats.values())


# ------------------------------------------------------------------ capture
def test_every_ended_call_is_kept_or_counted_and_nests():
    prof = pyprof.Profile(timeline=True)
    prof.runcall(workloads.recursion)
    prof.runcall(workloads.methods)
    s = session_of(prof)
    info = s.info
    assert info["timeline"] and info["timeline_min_duration_ns"] == 0
    assert info["timeline_events"] == len(s.timeline) > 100
    assert info["timeline_dropped_short"] == info["timeline_dropped_full"] == 0
    # the timeline and the function table see the same calls
    assert counts_by_fid(s) == {fid: c.calls for (t, fid), c in s.fstats.items() if c.calls}
    for events in per_thread(s).values():
        assert_nested_ns(events)
    assert all(start >= 0 and dur >= 0 for _, _, start, dur in s.timeline)
    again = Session.from_blob(s.to_blob())
    assert again.timeline == s.timeline and again.info == s.info


@pytest.mark.parametrize("builtins", [True, False])
def test_counts_equal_cprofile(builtins):
    kw = {"builtins": builtins}
    if sys.version_info >= (3, 12) and builtins:
        kw["exact_builtins"] = True         # cProfile's rule for C calls
    prof = pyprof.Profile(timeline=True, **kw)
    prof.runcall(workloads.recursion)
    prof.runcall(workloads.generators)
    s = session_of(prof)
    cp = cProfile.Profile(builtins=builtins)
    cp.runcall(workloads.recursion)
    cp.runcall(workloads.generators)
    cp.create_stats()
    mine = {}
    for fid, n in counts_by_fid(s).items():
        key = s.functions[fid].pstats_key
        mine[key] = mine.get(key, 0) + n
    theirs = {k: v[1] for k, v in cp.stats.items()}
    wl = workloads.__file__
    python_keys = {k for k in theirs if k[0] == wl}
    assert python_keys and {k: mine.get(k) for k in python_keys} == \
        {k: theirs[k] for k in python_keys}
    if builtins:
        common = [k for k in theirs if k[0] == "~" and "disable" not in k[2]
                  and "runcall" not in k[2]]
        assert common
        assert {k: mine.get(k) for k in common} == {k: theirs[k] for k in common}
    else:
        assert all(k[0] != "~" for k in mine)


def sleeper_a():
    time.sleep(0.05)


def sleeper_b():
    sleeper_a()
    time.sleep(0.03)


def test_known_durations():
    prof = pyprof.Profile(timeline=True)
    prof.runcall(sleeper_b)
    s = session_of(prof)
    by_name = {}
    for t, fid, start, dur in s.timeline:
        by_name.setdefault(s.functions[fid].name, []).append((start, dur))
    (a_start, a_dur), = by_name["sleeper_a"]
    (b_start, b_dur), = by_name["sleeper_b"]
    assert 50e6 <= a_dur < 50e6 + 40e6, a_dur
    assert 80e6 <= b_dur < 80e6 + 60e6, b_dur
    assert b_start <= a_start and a_start + a_dur <= b_start + b_dur
    # starts count from the start of profiling, as the memory curve and steps do
    assert 0 <= b_start < 50e6


def _named_worker(n):
    for _ in range(n):
        sleeper_a()


def test_threads_each_their_own_track(tmp_path):
    prog = write(tmp_path / "threads.py", """
        import threading, time
        def job(n):
            for _ in range(n):
                time.sleep(0.002)
        ts = [threading.Thread(target=job, args=(3 + i,), name=f"worker-{i}") for i in range(3)]
        for t in ts: t.start()
        for t in ts: t.join()
        job(1)
    """)
    out = tmp_path / "t.trace.json"
    r = pyprof_cli(["--timeline", "-o", str(out), str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = load_trace(out)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == ["MainThread", "worker-0", "worker-1", "worker-2"]
    assert len(set(names)) == 4
    procs = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(procs) == 1 and "threads.py" in procs[0]["args"]["name"]
    xs = xs_by_tid(doc)
    for tid, name in names.items():
        jobs = [e for e in xs[tid] if e["name"].startswith("job (")]
        want = 1 if name == "MainThread" else 3 + int(name[-1])
        assert len(jobs) == 1, (name, jobs)
        sleeps = [e for e in xs[tid] if e["name"] == "<built-in method time.sleep>"]
        assert len(sleeps) == want
        for sl in sleeps:
            assert jobs[0]["ts"] <= sl["ts"] and sl["ts"] + sl["dur"] <= \
                jobs[0]["ts"] + jobs[0]["dur"] + 1e-3
    for tid, events in xs.items():
        assert_nested_ns([(round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in events])
        starts = [(e["ts"], -e["dur"]) for e in events]
        assert starts == sorted(starts), "each call comes after the one containing it"


def test_min_duration_drops_short_calls_and_counts_them():
    prof = pyprof.Profile(timeline=True, timeline_min_duration="20ms")

    def quick():
        return sum(range(10))

    def main():
        for _ in range(200):
            quick()
        sleeper_a()
        sleeper_a()

    prof.runcall(main)
    s = session_of(prof)
    kept = {s.functions[fid].name for _, fid, _, _ in s.timeline}
    assert kept == {"main", "sleeper_a", "<built-in method time.sleep>"}
    assert all(dur >= 20_000_000 for *_, dur in s.timeline)
    assert s.info["timeline_min_duration_ns"] == 20_000_000
    assert s.info["timeline_dropped_short"] == total_calls(s) - len(s.timeline) >= 400
    assert s.info["timeline_dropped_full"] == 0


def test_cap_keeps_the_first_calls_and_counts_the_rest():
    prof = pyprof.Profile(timeline=True, timeline_max_events=100, builtins=False)
    prof.runcall(workloads.recursion)
    s = session_of(prof)
    calls = total_calls(s)
    assert calls > 1000
    assert len(s.timeline) == s.info["timeline_events"] == 100
    assert s.info["timeline_dropped_full"] == calls - 100
    assert s.info["timeline_max_events"] == 100
    # the first 100 calls to end are kept: the deepest ones, not recursion() itself
    assert all(s.functions[fid].name != "recursion" for _, fid, _, _ in s.timeline)
    # the budget holds across enables, and clear() gives it back
    prof.runcall(workloads.recursion)
    assert len(session_of(prof).timeline) == 100
    prof.clear()
    prof.runcall(sleeper_a)
    assert session_of(prof).info["timeline_dropped_full"] == 0


def test_open_calls_are_clipped_to_the_snapshot():
    prof = pyprof.Profile(timeline=True, builtins=False)
    seen = {}

    def inner():
        seen["s"] = prof.session()          # while inner and outer run

    def outer():
        time.sleep(0.005)
        inner()

    prof.runcall(outer)
    s = seen["s"]
    names = [s.functions[fid].name for _, fid, _, _ in s.timeline]
    assert "outer" in names and "inner" in names
    assert s.info["timeline_open"] >= 2
    for events in per_thread(s).values():
        assert_nested_ns(events)
    final = session_of(prof)
    assert final.info["timeline_open"] == 0 and names.count("outer") == 1


def test_session_timeline_survives_the_file(tmp_path):
    prof = pyprof.Profile(timeline=True)
    prof.runcall(workloads.recursion)
    prof.dump(tmp_path / "r.cprof")
    s = Session.load(tmp_path / "r.cprof")
    live = session_of(prof).timeline
    # the same calls; ns may differ by rounding: each snapshot converts ticks with
    # the TSC calibration of its moment, which keeps refining (clock.c)
    assert [(t, f) for t, f, _, _ in s.timeline] == [(t, f) for t, f, _, _ in live]
    assert all(abs(a[2] - b[2]) <= 1000 and abs(a[3] - b[3]) <= 1000
               for a, b in zip(s.timeline, live))
    s.save(tmp_path / "copy.cprof")
    assert Session.load(tmp_path / "copy.cprof").timeline == s.timeline


def test_api_refuses_other_modes():
    with pytest.raises(PyprofError, match="function mode"):
        pyprof.Profile(timeline=True, mode="sample")
    with pytest.raises(PyprofError, match="function mode"):
        pyprof.Profile(timeline=True, lines=True)
    with pytest.raises(PyprofError, match="duration"):
        pyprof.Profile(timeline=True, timeline_min_duration="10 parsecs")
    assert pyprof.Profile(timeline=True, timeline_min_duration="1.5ms")  # accepted


# ------------------------------------------------------------------ the trace
def test_steps_are_instants_between_the_calls(tmp_path):
    prog = write(tmp_path / "steps.py", """
        import time, pyprof
        def work():
            time.sleep(0.01)
        for i in range(3):
            pyprof.step()
            work()
    """)
    out = tmp_path / "s.trace.json"
    r = pyprof_cli(["--timeline", "-o", str(out), str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = load_trace(out)
    steps = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    works = sorted((e for e in doc["traceEvents"]
                    if e["ph"] == "X" and e["name"].startswith("work (")), key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == ["step 0", "step 1", "step 2"]
    assert len(works) == 3
    # same origin: each marker falls after the previous work() and before the next
    for i, st in enumerate(steps):
        assert st["ts"] <= works[i]["ts"]
        if i:
            assert works[i - 1]["ts"] + works[i - 1]["dur"] <= st["ts"]


def test_memory_curve_as_counters(tmp_path):
    prog = write(tmp_path / "mem.py", """
        import time
        def grow():
            keep = []
            for i in range(40):
                keep.append(bytearray(200_000))
                time.sleep(0.002)
            return keep
        grow()
    """)
    out = tmp_path / "m.trace.json"
    r = pyprof_cli(["--memory", "--functions", "--timeline", "-o", str(out), str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = load_trace(out)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert len(counters) >= 2
    pids = {e["pid"] for e in doc["traceEvents"]}
    assert len(pids) == 1, "counters share their process's pid"
    assert all(set(e["args"]) == {"rss_bytes", "heap_bytes"} for e in counters)
    assert max(e["args"]["heap_bytes"] for e in counters) >= 4_000_000
    grow = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("grow (")]
    assert len(grow) == 1
    # the curve's time base is the timeline's
    assert any(grow[0]["ts"] <= e["ts"] <= grow[0]["ts"] + grow[0]["dur"] for e in counters)


def test_timestamps_are_exact_microseconds(tmp_path):
    prof = pyprof.Profile(timeline=True)
    prof.runcall(workloads.recursion)
    s = session_of(prof)
    out = tmp_path / "e.trace.json"
    chrome.write(s, out)
    text = out.read_text(encoding="utf-8")
    doc = load_trace(out)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(s.timeline)
    assert sorted(round(e["ts"] * 1000) for e in xs) == sorted(st for _, _, st, _ in s.timeline)
    assert '"ts":"' not in text and "NaN" not in text and "Infinity" not in text
    assert chrome.us(1234567) == "1234.567" and chrome.us(5) == "0.005" and chrome.us(0) == "0.000"
    assert chrome.us(-1500) == "-1.500"


def test_valid_utf8_with_odd_names(tmp_path):
    name = "na\u00efve_\u51fd\u6570"
    src = f"""
        def {name}():
            return 1
        for _ in range(3):
            {name}()
    """
    if os.name == "posix" and sys.getfilesystemencoding() == "utf-8":
        fname = os.fsdecode(b"prog_\xff.py")          # a lone surrogate in the name
    else:
        fname = "prog.py"
    prog = tmp_path / fname
    prog.write_text(textwrap.dedent(src), encoding="utf-8")
    out = tmp_path / "u.trace.json"
    r = pyprof_cli(["--timeline", "-o", str(out), fname], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = load_trace(out)
    hits = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith(name + " (")]
    assert len(hits) == 3
    # a Session built in Python may hold the surrogate itself: still valid UTF-8
    prof = pyprof.Profile(timeline=True)
    prof.runcall(sleeper_a)
    s = session_of(prof)
    fid = next(f for f, fn in s.functions.items() if fn.name == "sleeper_a")
    fn = s.functions[fid]
    s.functions[fid] = type(fn)(fn.fid, "dir_\udcff/x.py", fn.line, fn.name,
                                "odd_\ud800_\u00e9", fn.kind)
    out2 = tmp_path / "v.trace.json"
    chrome.write(Session.from_blob(s.to_blob()), out2)
    doc = load_trace(out2)
    (ev,) = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("odd_")]
    assert ev["name"] == "odd_\\ud800_\u00e9 (dir_\\udcff/x.py:%d)" % fn.line


# ------------------------------------------------------------------ CLI
def _usage_error(r, match):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyprof: error:"), r.stderr
    assert match in lines[0], lines[0]


@pytest.mark.parametrize("args, match", [
    (["--timeline", "--sample"], "--timeline records function calls"),
    (["--timeline", "-l"], "--timeline records function calls"),
    (["--timeline", "--memory"], "add --functions"),
    (["--min-duration", "1ms"], "go with --timeline"),
    (["--timeline", "--min-duration", "fast"], "like 10us or 1ms"),
    (["-o", "x.trace.json"], "add --timeline"),
])
def test_cli_refuses(tmp_path, args, match):
    prog = write(tmp_path / "p.py", "open('ran', 'w').close()\n")
    r = pyprof_cli([*args, str(prog)], tmp_path)
    _usage_error(r, match)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "x.trace.json").exists()


def test_convert_thins_and_refuses(tmp_path):
    prog = write(tmp_path / "p.py", """
        import time
        def short():
            pass
        def long():
            time.sleep(0.02)
        for _ in range(50):
            short()
        long()
    """)
    cap = tmp_path / "p.cprof"
    r = pyprof_cli(["--timeline", "-o", str(cap), str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    s = Session.load(cap)
    n_short = sum(1 for _, _, _, d in s.timeline if d < 10_000_000)
    out = tmp_path / "thin.json"
    r = pyprof_cli(["convert", str(cap), "--format", "perfetto", "-o", str(out),
                    "--min-duration", "10ms"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        f"pyprof: {n_short} calls shorter than 10ms left out of {out} "
        f"({len(s.timeline) - n_short} kept)"]
    doc = load_trace(out)
    assert doc["otherData"]["dropped_at_export"] == n_short >= 50
    assert doc["otherData"]["export_min_duration_ns"] == 10_000_000
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all(e["dur"] >= 10_000 for e in xs) and any(e["name"].startswith("long (") for e in xs)
    # a capture with nothing to show: one line, status 2, no file
    plain = tmp_path / "plain.cprof"
    assert pyprof_cli(["-o", str(plain), str(prog)], tmp_path).returncode == 0
    bad = tmp_path / "bad.json"
    r = pyprof_cli(["convert", str(plain), "-f", "chrome", "-o", str(bad)], tmp_path)
    _usage_error(r, "no timeline, memory curve, steps or tasks")
    assert not bad.exists()
    r = pyprof_cli(["convert", str(cap), "-f", "pstats", "-o", str(bad),
                    "--min-duration", "1ms"], tmp_path)
    _usage_error(r, "--min-duration goes with --format chrome")


# ------------------------------------------------------------------ a real viewer
def _speedscope_index():
    cands = [os.environ.get("PYPROF_SPEEDSCOPE", ""),
             os.path.join(ROOT, "build", "speedscope", "package", "dist", "release", "index.html")]
    for c in cands:
        if c and os.path.isfile(c):
            return c
    return None


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_loads_in_speedscope(tmp_path):
    index, browser = _speedscope_index(), _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    if index is None:
        pytest.skip("speedscope's built app not found: run 'make venv' (it runs 'npm pack "
                    "speedscope' into build/speedscope) or set PYPROF_SPEEDSCOPE to its "
                    "dist/release/index.html")
    prog = write(tmp_path / "v.py", """
        import threading, time
        def leaf():
            time.sleep(0.002)
        def mid():
            for _ in range(3):
                leaf()
        t = threading.Thread(target=mid, name="helper")
        t.start(); mid(); t.join()
    """)
    out = tmp_path / "v.trace.json"
    r = pyprof_cli(["--timeline", "-o", str(out), str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    b64 = base64.b64encode(out.read_bytes()).decode()
    loader = tmp_path / "load.js"
    loader.write_text(f'speedscope.loadFileFromBase64("v.trace.json", "{b64}")')
    profile_dir = tmp_path / "chromium-profile"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu",
           f"--user-data-dir={profile_dir}", "--allow-file-access-from-files",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000", "--dump-dom",
           f"file://{index}#localProfilePath={loader}"]
    # the browser is not ours to instrument: no sanitizer runtime (make asan preloads it)
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln]
    assert any("Importing as Trace Event Format profile" in ln for ln in console), \
        "\n".join(console) or r.stderr[-2000:]
    bad = [ln for ln in console if "rror" in ln and "WebGL" not in ln]
    assert not bad, bad
    # one profile per thread, named after it
    assert "MainThread (tid" in r.stdout and "(1/2)" in r.stdout, r.stdout[-3000:]
