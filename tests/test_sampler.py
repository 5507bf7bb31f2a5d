"""The statistical sampler: attribution against known splits, thread states,
a program's blocking calls unchanged under 1 kHz signals, threads, fork, code
objects freed while sampling, conflicts, and every output read back."""
import gzip
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pyprof
from pyprof import Session
from pyprof.session import STATES


def spin(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def a():
    return spin(500_000)


def b():
    return spin(300_000)


def c():
    return spin(200_000)


def shares(session, names, by="count"):
    """Samples (or, by="weight", the time they stand for) whose stack contains
    each named function, as % of all; and the number of samples."""
    total = sum(getattr(x, by) for x in session.samples.values())
    out = dict.fromkeys(names, 0)
    for (t, sid, state), x in session.samples.items():
        fnames = {session.functions[fid].name for fid, _ in session.stacks[sid].frames}
        for n in names:
            if n in fnames:
                out[n] += getattr(x, by)
    n = sum(x.count for x in session.samples.values())
    return {k: 100.0 * v / max(total, 1) for k, v in out.items()}, n


def sample(run, **kw):
    p = pyprof.Profile(mode="sample", **kw)
    p.enable()
    try:
        run()
    finally:
        p.disable()
    return p.session()


def test_known_split_cpu_mode():
    def run():
        t0 = time.process_time()
        while time.process_time() - t0 < 2.0:
            a(); b(); c()
    s = sample(run, rate=1000)
    got, n = shares(s, ["a", "b", "c"])
    assert n > 300, s.info["sampling"]
    # 50/30/20 by construction; sampling noise at this n is ~2-3 points.
    assert abs(got["a"] - 50) < 10 and abs(got["b"] - 30) < 10 and abs(got["c"] - 20) < 10, got
    si = s.info["sampling"]
    assert si["mode"] == "cpu" and si["dropped"] == 0
    # task-clock events where the kernel gives them (docs/sampling.md, "CPU timers")
    assert s.info["hook"] == ("SIGPROF (ITIMER_PROF, process CPU time)" if si["timer"] == "itimer"
                              else "SIGRTMAX (per-thread CPU-clock events)"), s.info["hook"]
    assert (si["timer"] == "itimer") == bool(si["timer_fallback"]), si


def _phase_functions(n):
    """n functions, each spinning until the thread's CPU clock reaches its argument."""
    out = []
    for i in range(n):
        ns = {"thread_time": time.thread_time}
        exec(f"def phase{i}(end):\n    while thread_time() < end:\n        pass\n", ns)
        out.append(ns[f"phase{i}"])
    return out


def test_cpu_mode_does_not_fall_into_step_with_a_periodic_program():
    """A program whose CPU-time period is a multiple of the interval (40 ms
    of 10 phases of 4 ms, sampled at 50 Hz: every 20 ms): samples in step with
    it would see 2 of the 10 phases. CPU timers fire at the kernel's ticks,
    whose moments move against the program's own CPU clock (other threads'
    CPU, the handler's), so every phase gets its share (docs/sampling.md,
    "Ticks and aliasing")."""
    phases, width = _phase_functions(10), 0.004

    def run():
        t = time.thread_time()
        stop = t + 4.0
        while t < stop:
            k = int(t / width)
            phases[k % len(phases)]((k + 1) * width)
            t = time.thread_time()
    s = sample(run, rate=50)
    got = dict.fromkeys(range(len(phases)), 0)
    for (t, sid, state), c in s.samples.items():
        for fid, _ in s.stacks[sid].frames:
            name = s.functions[fid].name
            if name.startswith("phase"):
                got[int(name[5:])] += c.count
    n = sum(got.values())
    assert n >= 150, s.info["sampling"]
    # ~20 a phase; in step, 8 of the 10 would have none (Poisson(15): P(<4) ~ 2e-4)
    assert min(got.values()) >= 4, got


def test_wall_mode_labels_thread_states():
    import hashlib

    def sleeper():
        time.sleep(0.6)

    def hasher():
        data = b"x" * (64 << 20)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.6:
            hashlib.sha256(data).digest()          # releases the GIL, uses CPU

    def run():
        ts = [threading.Thread(target=sleeper, name="sleepy"),
              threading.Thread(target=hasher, name="hashy")]
        for t in ts:
            t.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.6:
            spin(10_000)
        for t in ts:
            t.join()

    s = sample(run, wall=True, rate=200)
    by = {}
    for (t, sid, state), x in s.samples.items():
        name = s.threads[t].name
        by.setdefault(name, {}).setdefault(STATES[state], 0)
        by[name][STATES[state]] += x.count
    sleepy, hashy, main = by["sleepy"], by["hashy"], by["MainThread"]
    assert sleepy.get("idle", 0) >= 0.8 * sum(sleepy.values()) and sum(sleepy.values()) > 60
    assert hashy.get("native", 0) >= 0.5 * sum(hashy.values())
    assert main.get("python", 0) >= 0.5 * sum(main.values())


def test_cpu_mode_does_not_see_sleep():
    def run():
        time.sleep(0.4)
        t0 = time.process_time()
        while time.process_time() - t0 < 0.4:
            spin(10_000)
    s = sample(run, rate=500)
    got, n = shares(s, ["spin"])
    assert got["spin"] > 90, (got, n)


BLOCKING = textwrap.dedent("""
    import os, queue, select, socket, subprocess, sys, threading, time
    import pyprof

    def check(name, seconds, fn, after=None):
        t0 = time.monotonic()
        if after is not None:       # the wake-up, timed from t0
            threading.Timer(seconds, after).start()
        fn()
        took = time.monotonic() - t0
        assert took >= seconds * 0.98, (name, took)
        print(name, "ok", round(took, 3))

    p = pyprof.Profile(mode="sample", wall=True, rate=1000)
    p.enable()

    check("sleep", 0.3, lambda: time.sleep(0.3))

    a, b = socket.socketpair()
    check("recv", 0.3, lambda: a.recv(2), after=lambda: b.send(b"hi"))

    a2, b2 = socket.socketpair()
    check("select", 0.3, lambda: select.select([a2], [], [], 5), after=lambda: b2.send(b"x"))

    check("subprocess", 0.3, lambda: subprocess.run(["sleep", "0.3"], check=True))

    q = queue.Queue()
    check("queue", 0.3, lambda: q.get(timeout=5), after=lambda: q.put(1))

    ev = threading.Event()
    check("event-timeout", 0.3, lambda: ev.wait(0.3))

    def io():
        with open(sys.argv[1], "wb") as f:
            for _ in range(64):
                f.write(os.urandom(1 << 20))
        with open(sys.argv[1], "rb") as f:
            while f.read(1 << 20):
                pass
    check("file-io", 0.0, io)

    p.disable()
    s = p.session()
    si = s.info["sampling"]
    print("parked", si["parked"], "woken", si["woken"], "signals", si["signals"])
    # the time charged to each call: its lambda's line names it
    src = open(__file__).read().splitlines()
    charged = {}
    for (t, sid, state), c in s.samples.items():
        for fid, _ in s.stacks[sid].frames:
            fn = s.functions[fid]
            if fn.name == "<lambda>" and fn.filename == __file__ and 'check("' in src[fn.line - 1]:
                name = src[fn.line - 1].split('"')[1]
                charged[name] = charged.get(name, 0) + c.weight / 1e9
                break
    import json
    print("charged", json.dumps(charged))
""")


def test_blocking_calls_behave_as_without_pyprof(tmp_path):
    script = tmp_path / "blocking.py"
    script.write_text(BLOCKING)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "big.bin")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for name in ("sleep", "recv", "select", "subprocess", "queue", "event-timeout", "file-io"):
        assert f"{name} ok" in r.stdout, r.stdout
    words = r.stdout.split()
    parked, woken, signals = (int(words[words.index(k) + 1]) for k in ("parked", "woken", "signals"))
    # each blocking call was interrupted (the thread's first idle ticks) and did
    # not notice; then the idle thread parked, and was seen to leave the call when
    # it returned (woken, or its stack read again by the helper): each call is
    # charged its own time
    assert signals > 50, r.stdout
    assert parked >= 6, r.stdout
    charged = json.loads(r.stdout.split("charged", 1)[1])
    # against each call's own duration: a loaded machine wakes the Timer late
    for name in ("sleep", "recv", "select", "subprocess", "queue", "event-timeout"):
        took = float(words[words.index(name) + 2])
        assert 0.9 * took <= charged.get(name, 0) <= 1.33 * took, (name, took, charged)


def test_threads_started_while_sampling_are_sampled():
    """Threads started after enable() get samples and keep their names, even a
    thread that ends long before its samples are drained (every 250 ms): it is
    named as it starts, not looked up in threading._active at the drain."""
    def busy(seconds):
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            spin(5_000)

    def run():
        time.sleep(0.05)
        for name, seconds in (("late", 0.3), ("brief", 0.1), ("blip", 0.012)):
            t = threading.Thread(target=busy, args=(seconds,), name=name)
            t.start()
            t.join()
    s = sample(run, wall=True, rate=200)
    # their wall time (a loaded machine gives a spinning thread fewer samples
    # of more weight: 12 of 60 were seen)
    per_name, count = {}, {}
    for (t, sid, st), x in s.samples.items():
        per_name[s.threads[t].name] = per_name.get(s.threads[t].name, 0) + x.weight / 1e9
        count[s.threads[t].name] = count.get(s.threads[t].name, 0) + x.count
    assert per_name.get("late", 0) == pytest.approx(0.3, rel=0.25), (per_name, count)
    assert per_name.get("brief", 0) == pytest.approx(0.1, rel=0.25), (per_name, count)
    assert count["late"] >= 3 and count["brief"] >= 1, count
    assert count.get("blip", 0) >= 1, count


def test_fork_while_sampling(tmp_path):
    prog = textwrap.dedent("""
        import os, sys, time, pyprof
        def spin(n):
            return sum(i * i for i in range(n))
        p = pyprof.Profile(mode="sample", rate=1000)
        p.enable()
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                spin(300_000)           # no timer here: no SIGPROF, no sampler thread
                os._exit(7)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 7, status
        t0 = time.process_time()
        while time.process_time() - t0 < 0.4:      # CPU timers tick at most ~250 Hz
            spin(10_000)
        p.disable()
        n = sum(x.count for x in p.session().samples.values())
        print("samples", n)
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[1]) > 40


def test_code_objects_freed_between_sample_and_drain():
    """Functions compiled, run and dropped at a high rate while sampling: each
    code object may die with samples naming it still in the ring."""
    def churn():
        t0 = time.process_time()        # CPU time: the sampler's clock, whatever the load
        k = 0
        while time.process_time() - t0 < 1.0:
            ns = {}
            exec(compile(f"def f{k}(n):\n    return sum(i * i for i in range(n))\n",
                         f"<gen{k}>", "exec"), ns)
            ns[f"f{k}"](20_000)
            k += 1
        return k
    s = sample(churn, rate=2000)
    names = {s.functions[fid].name for st in s.stacks.values() for fid, _ in st.frames}
    generated = [n for n in names if n.startswith("f") and n[1:].isdigit()]
    assert generated                       # named, whether alive or already gone
    assert sum(x.count for x in s.samples.values()) > 100


def test_mixed_stacks_at_a_high_rate_across_threads():
    """Records of every size from several threads through the shared ring while
    it is drained (and drained early for dying code objects): a stale length
    inside an old record must never be taken for a published sample."""
    prog = textwrap.dedent("""
        import sys, threading, zlib, pyprof
        sys.setrecursionlimit(5000)
        def deep(n):
            return 0 if n == 0 else 1 + deep(n - 1)
        def churn(i):
            ns = {}
            exec(f"def f{i}(x):\\n    return [y * {i} for y in range(x)]\\n", ns)
            return ns[f"f{i}"](200)
        def gen(n):
            for i in range(n):
                yield zlib.crc32(b"x" * (i % 64))
        def worker(k):
            for i in range(300):
                churn(i * 10 + k)
                deep(100 + (i * 37 + k) % 200)
                sum(gen(50))
                sorted(range(200), key=lambda v: -v)
        native = "libunwind" in pyprof._cprof.FEATURES
        p = pyprof.Profile(mode="sample", wall=True, rate=10000, native=native)
        p.enable()
        for _ in range(2):
            ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
            for t in ts:
                t.start()
            worker(9)
            for t in ts:
                t.join()
        p.disable()
        s = p.session()
        names = {s.functions[fid].name for st in s.stacks.values() for fid, _ in st.frames}
        print(sum(x.count for x in s.samples.values()), "deep" in names, "worker" in names)
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    n, deep, worker = r.stdout.split()
    assert int(n) > 500 and deep == "True" and worker == "True", r.stdout


def test_a_freed_code_object_is_told_from_a_live_one():
    """A frame pointer read while a frame is being linked can name a code object
    freed long ago; its memory still has the code type. The sampler's check
    must reject it, or the drain would take a reference to freed memory."""
    from pyprof import _cprof
    code = compile("def g():\n    return 42\n", "<freed>", "exec").co_consts[0]
    address = id(code)
    assert _cprof._code_alive(address)
    assert not _cprof._code_alive(id(object()))     # alive, but not code
    assert not _cprof._code_alive(8)                # unmapped
    del code                                         # freed: type word still there
    assert not _cprof._code_alive(address)


def test_conflicts_and_bad_rates():
    with pytest.raises(ValueError, match="rate"):
        pyprof.Profile(mode="sample", rate=-5)
    with pytest.raises(ValueError, match="rate"):
        pyprof.Profile(mode="sample", rate=1e9)
    p = pyprof.Profile(mode="sample")
    p.enable()
    try:
        q = pyprof.Profile(mode="sample")
        with pytest.raises((RuntimeError, ValueError), match="already"):
            q.enable()
    finally:
        p.disable()
    old = signal.signal(signal.SIGPROF, lambda *a: None)
    try:
        with pytest.raises(RuntimeError, match="already handles SIGPROF"):
            pyprof.Profile(mode="sample", cpu_timer="itimer").enable()
    finally:
        signal.signal(signal.SIGPROF, old)
    signal.setitimer(signal.ITIMER_PROF, 10)
    try:
        with pytest.raises(RuntimeError, match="ITIMER_PROF"):
            pyprof.Profile(mode="sample", cpu_timer="itimer").enable()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def test_program_taking_sigprof_back_is_reported(tmp_path):
    """A program that installs its own SIGPROF handler (or stops the profiling
    timer) while sampled cannot be stopped from doing so: pyprof says so."""
    script = tmp_path / "take.py"
    script.write_text(textwrap.dedent("""
        import signal
        def work(n):
            return sum(i * i for i in range(n))
        work(300_000)
        signal.signal(signal.SIGPROF, lambda *a: None)
        work(300_000)
        print("done")
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--cpu-timer", "itimer",
                        "-o", "t.cprof", str(script)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    assert r.stderr.startswith("pyprof: warning: the program replaced") and \
        r.stderr.count("\n") == 1, r.stderr
    assert Session.load(tmp_path / "t.cprof").info["sampling"]["handler_replaced"] is True

    p = pyprof.Profile(mode="sample", cpu_timer="itimer")
    p.enable()
    signal.setitimer(signal.ITIMER_PROF, 0)
    with pytest.warns(RuntimeWarning, match="replaced"):
        p.disable()
    q = pyprof.Profile(mode="sample")             # nothing carried over
    q.enable()
    q.disable()
    assert q.session().info["sampling"]["handler_replaced"] is False


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    d = tmp_path_factory.mktemp("smp")
    script = d / "prog.py"
    script.write_text(textwrap.dedent("""
        import time

        def work(n):
            s = 0
            for i in range(n):
                s += i % 7
            return s

        def idle():
            time.sleep(0.3)

        def main():
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.8:
                work(20_000)
            idle()

        main()
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--wall", "--rate", "500",
                        "-o", "run.cprof", str(script)], cwd=d, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return d, script, Session.load(d / "run.cprof")


def test_cli_capture_starts_at_the_program(capture):
    d, script, s = capture
    assert s.meta["modes"] == ["sample"]
    roots = {s.functions[st.frames[0][0]].name for st in s.stacks.values() if st.frames}
    assert roots == {"<module>"}, roots             # no runpy, no pyprof frames
    # by the time the samples stand for: a loaded machine delays timer signals (fewer
    # samples than 1.1 s x 500 Hz), each of which then weighs the time it stood for
    got, n = shares(s, ["work", "idle"], by="weight")
    assert n > 150 and abs(got["work"] - 73) < 12 and abs(got["idle"] - 27) < 12, (got, n)
    weighted = sum(x.weight for x in s.samples.values()) / 1e9
    assert 0.9 < weighted < 1.6, weighted


def convert(d, name):
    r = subprocess.run([sys.executable, "-m", "pyprof", "convert", "run.cprof", "-o", name],
                       cwd=d, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return d / name


def test_collapsed_output(capture):
    d, script, s = capture
    lines = convert(d, "run.collapsed").read_text().splitlines()
    assert lines == sorted(lines)
    total = 0
    for ln in lines:
        stack, count = ln.rsplit(" ", 1)
        total += int(count)
        assert stack.startswith("MainThread;<module> (prog.py:")
    assert total == sum(x.count for x in s.samples.values())
    assert any(ln.endswith(";[idle] " + ln.rsplit(" ", 1)[1]) and ";idle (prog.py:" in ln
               for ln in lines)


def test_speedscope_output(capture):
    d, script, s = capture
    doc = json.loads(convert(d, "run.speedscope.json").read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    (prof,) = doc["profiles"]
    assert prof["type"] == "sampled" and prof["unit"] == "nanoseconds"
    assert len(prof["samples"]) == len(prof["weights"]) == sum(x.count for x in s.samples.values())
    assert all(0 <= i < len(frames) for smp in prof["samples"] for i in smp)
    assert all(w > 0 for w in prof["weights"])
    assert prof["endValue"] == sum(prof["weights"])
    assert {"work", "idle", "main"} <= {f["name"] for f in frames}


def test_pstats_from_samples(capture):
    d, script, s = capture
    st = pstats.Stats(str(convert(d, "run.prof"))).stats
    work = next(v for k, v in st.items() if k[2] == "work")
    main = next(v for k, v in st.items() if k[2] == "main")
    assert work[0] == work[1] == 0                  # call counts: unknown, not invented
    assert 0.4 < work[3] <= main[3] <= 1.3
    assert set(main[4]) == {next(k for k in st if k[2] == "<module>")}


def test_flamegraph_html(capture):
    d, script, s = capture
    page = convert(d, "run.flame.html").read_text()
    assert "<script src" not in page and "http" not in page.split("<script")[1][:200]
    data = page.split('<script type="application/json" id="data">')[1].split("</script>")[0]
    doc = json.loads(data)
    assert doc["threads"]["all threads"][3] == sum(x.count for x in s.samples.values())


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium to render the page (make test installs Debian's chromium as root)")


def test_flamegraph_renders_in_chromium(capture, tmp_path):
    """The page, rendered by a real browser: boxes drawn, and a search (given
    in the URL) matches the share of the samples that the capture gives."""
    d, script, s = capture
    page = convert(d, "run.flame.html")
    total = sum(x.count for x in s.samples.values())
    got, _ = shares(s, ["work"])
    r = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom",
                        page.as_uri() + "#search=%5Ework%24"],
                       capture_output=True, text=True, timeout=180,
                       env={k: v for k, v in os.environ.items()       # not our sanitizers
                            if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")})
    dom = r.stdout
    assert dom.count('class="box') > 3, (r.returncode, r.stderr[-2000:])
    status = re.search(r'id="status">([^<]*)<', dom).group(1)
    assert status.startswith(f"{total} samples; matched "), status
    matched = float(status.split("matched ")[1].rstrip("%"))
    assert abs(matched - got["work"]) < 0.1, (matched, got)


def test_flamegraph_escapes_names(tmp_path):
    s = Session()
    from pyprof.session import Function, SampleCounters, Stack, Thread
    s.info = {"sampling": {"mode": "cpu", "interval_ns": 1000000}}
    s.functions = {0: Function(0, "</script><script>alert(1)</script>", 1, "<!--x", "<!--x",
                               "python")}
    s.threads = {0: Thread(0, 1, 1, 0, "main")}
    s.stacks = {0: Stack(((0, 1),))}
    s.samples = {(0, 0, 0): SampleCounters(3, 3000000)}
    from pyprof.export import flamegraph
    page = flamegraph.render(s)
    assert page.count("</script>") == 2 and "<!--x" not in page
    data = page.split('<script type="application/json" id="data">')[1].split("</script>")[0]
    assert json.loads(data)["threads"]["main"][4][0][0] == "<!--x"


def test_function_and_line_tables(capture):
    d, script, s = capture
    text = convert(d, "run.txt").read_text()
    assert text.startswith("Samples: ")
    row = next(ln for ln in text.splitlines() if ln.endswith("work (prog.py:4)"))
    assert row.split()[6] == "?"                      # calls: unknown
    section = text.split("Function: work at line 4")[1].split("File:")[0]
    loop = next(ln for ln in section.splitlines() if ln.rstrip().endswith("s += i % 7"))
    assert int(loop.split()[1]) > 0


def test_view_a_sampling_capture(capture):
    d, script, s = capture
    n = sum(x.count for x in s.samples.values())

    def view(*args):
        r = subprocess.run([sys.executable, "-m", "pyprof", "view", "run.cprof", *args], cwd=d,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("Samples: ") == 1 and f"Samples: {n} of wall-clock" in r.stdout
        return r.stdout

    both, lines, funcs = view(), view("--lines"), view("--functions")
    assert "Total %" in funcs and "Line #" not in funcs
    assert "Line #" in lines and "Calls" not in lines and "No line was profiled" not in lines
    assert "Calls" in both and "Function: work at line 4" in both
    assert lines.split("\n", 1)[1] in both            # the same line tables


def _go():
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/lib/go/bin"]:
        if os.path.exists(os.path.join(d, "go")):
            return os.path.join(d, "go")
    return None


@pytest.mark.skipif(_go() is None, reason="go tool pprof needs Debian's golang-go")
def test_pprof_read_by_go_tool_pprof(capture):
    d, script, s = capture
    path = convert(d, "run.pb.gz")
    assert gzip.decompress(path.read_bytes())
    env = dict(os.environ, HOME=str(d), GOCACHE=str(d / "gocache"), PPROF_TMPDIR=str(d))
    top = subprocess.run([_go(), "tool", "pprof", "-top", "-sample_index=wall", str(path)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert top.returncode == 0, top.stderr
    assert "work" in top.stdout and "idle" in top.stdout
    for flag in ("-traces", "-list=work"):
        r = subprocess.run([_go(), "tool", "pprof", flag, str(path)], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0 and "work" in r.stdout, r.stderr


def test_dump_every_survives_os_exit(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""
        import os, time
        def busy():                 # CPU seconds: a loaded machine gives fewer per second
            t0 = time.process_time()
            while time.process_time() - t0 < 1.2:
                sum(i for i in range(1000))
        busy()
        os._exit(5)
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--dump-every", "0.3",
                        "-o", "c.cprof", str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 5
    s = Session.load(tmp_path / "c.cprof")
    assert not s.final and sum(x.count for x in s.samples.values()) > 50


def test_signal_starts_and_stops_sampling(tmp_path):
    script = tmp_path / "sig.py"
    script.write_text(textwrap.dedent("""
        import os, signal, time
        def before():
            t0 = time.process_time()
            while time.process_time() - t0 < 0.3: pass
        def during():
            t0 = time.process_time()
            while time.process_time() - t0 < 0.5: pass
        before()
        os.kill(os.getpid(), signal.SIGUSR2)
        during()
        os.kill(os.getpid(), signal.SIGUSR2)
        before()
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--signal", "USR2",
                        "-o", "s.cprof", str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = Session.load(tmp_path / "s.cprof")
    got, n = shares(s, ["before", "during"])
    assert n > 50 and got["during"] > 90, (got, n)


@pytest.mark.parametrize("args,message", [
    (["--sample", "--rate", "0"], "--rate must be in"),
    (["--rate", "100"], "go with --sample"),
    (["--sample", "--signal", "KILL"], "not a signal pyprof can use"),
    (["--sample", "-l"], "do not combine"),
    (["--memory", "-o", "x.flame.html"], "memory profiling alone does not record"),
    (["--memory", "-o", "x.speedscope.json"], "memory profiling alone does not record"),
])
def test_cli_bad_sampling_options(tmp_path, args, message):
    script = tmp_path / "x.py"
    script.write_text("print('ran')\n")
    r = subprocess.run([sys.executable, "-m", "pyprof", *args, str(script)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "ran" not in r.stdout
    assert r.stderr.startswith("pyprof: error:") and message in r.stderr, r.stderr


def test_stopping_does_not_wait_for_the_helper():
    """disable() wakes the helper thread instead of waiting out its sleep
    (a quarter of a second in CPU mode): a short profiled region stays short."""
    worst = 0.0
    for _ in range(3):
        p = pyprof.Profile(mode="sample")
        p.enable()
        spin(10_000)
        t0 = time.perf_counter()
        p.disable()
        worst = max(worst, time.perf_counter() - t0)
    assert worst < 0.1, worst


def test_stack_formats_refuse_a_capture_without_stacks(tmp_path):
    """A traced capture without its calling-context tree (paths=False) has no
    stacks: converting it to a flame graph is an error that says why, not an
    empty graph."""
    p = pyprof.Profile(paths=False)
    p.enable()
    spin(1000)
    p.disable()
    p.dump(str(tmp_path / "t.cprof"))
    for out in ("f.flame.html", "f.collapsed", "f.speedscope.json", "f.pb.gz"):
        r = subprocess.run([sys.executable, "-m", "pyprof", "convert", "t.cprof", "-o", out],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "made of stacks" in r.stderr and not (tmp_path / out).exists()


@pytest.mark.skipif("libunwind" not in pyprof._cprof.FEATURES, reason="built without libunwind")
def test_native_frames_under_python_lines(tmp_path):
    script = tmp_path / "nat.py"
    script.write_text(textwrap.dedent("""
        import os, zlib
        data = os.urandom(1 << 20) * 4
        def compress():
            for _ in range(8):
                zlib.compress(data, 6)
        compress()
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--native", "-o",
                        "n.collapsed", str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "n.collapsed").read_text().splitlines()
    total = sum(int(ln.rsplit(" ", 1)[1]) for ln in lines)
    deflate = sum(int(ln.rsplit(" ", 1)[1]) for ln in lines
                  if ";compress (nat.py:4);" in ln and "deflate (libz" in ln)
    assert deflate > 0.5 * total, lines[:5]


@pytest.mark.skipif("libunwind" not in pyprof._cprof.FEATURES, reason="built without libunwind")
def test_native_frames_between_python_frames(tmp_path):
    """C calling back into Python: sorted() calling a Python key function shows
    the caller, the C sort under it, and the key function under the C frames."""
    script = tmp_path / "cb.py"
    script.write_text(textwrap.dedent("""
        import random
        def slow_key(x):
            s = 0
            for i in range(200):
                s += i
            return x
        def caller():
            data = [random.random() for _ in range(20000)]
            for _ in range(5):
                sorted(data, key=slow_key)
        caller()
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--native", "-o",
                        "cb.collapsed", str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [ln.rsplit(" ", 1) for ln in (tmp_path / "cb.collapsed").read_text().splitlines()]
    total = sum(int(c) for _, c in rows)
    nested = 0
    for stack, c in rows:
        frames = stack.split(";")
        names = [f.split(" (")[0] for f in frames]
        if "slow_key" in names:
            i, k = names.index("caller"), names.index("slow_key")
            between = names[i + 1:k]
            assert between and all(f.endswith(")") and ".py:" not in f
                                   for f in frames[i + 1:k]), frames   # native only
            nested += int(c) * any("sort" in n for n in between)
    assert nested > 0.5 * total, rows[:3]


def test_pyprof_signal_environment(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent("""
        import os, signal, time
        import pyprof                               # honours PYPROF_SIGNAL
        def handle():
            t0 = time.process_time()
            while time.process_time() - t0 < 0.4: pass
        def idle_work():
            t0 = time.process_time()
            while time.process_time() - t0 < 0.2: pass
        idle_work()
        os.kill(os.getpid(), signal.SIGUSR1)        # an operator starts sampling...
        handle()
        os.kill(os.getpid(), signal.SIGUSR1)        # ...and stops it: a capture is written
        idle_work()
    """))
    env = dict(os.environ, PYPROF_SIGNAL="USR1", PYPROF_OUTPUT=str(tmp_path / "live.cprof"))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"pyprof: wrote {tmp_path / 'live.cprof'}" in r.stderr
    got, n = shares(Session.load(tmp_path / "live.cprof"), ["handle", "idle_work"])
    assert n > 30 and got["handle"] > 90, got


def test_profile_as_decorator():
    prof = pyprof.Profile(mode="sample", rate=1000)

    @prof
    def busy():
        t0 = time.process_time()
        while time.process_time() - t0 < 0.2:
            spin(5_000)
        return 42

    assert busy() == 42 and not prof.enabled
    got, n = shares(prof.session(), ["busy"])
    assert n > 20 and got["busy"] > 95


BURN = textwrap.dedent("""
    import json, sys, threading, time

    def burn(sec, out, name):
        t0 = time.thread_time()
        x = 0
        while time.thread_time() - t0 < sec:
            for i in range(1000):
                x += i
        out[str(threading.get_native_id())] = time.thread_time() - t0

    out = {}
    n = int(sys.argv[1])
    if n == 1:
        burn(0.6, out, "MainThread")
    else:
        ts = [threading.Thread(target=burn, args=(0.6, out, f"burn-{i}"), name=f"burn-{i}")
              for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    with open("truth.json", "w") as f:
        json.dump(out, f)
""")


@pytest.mark.parametrize("nthreads", [1, 3])
@pytest.mark.parametrize("rate", [100, 250, 1000, 4000])
def test_cpu_samples_weigh_the_cpu_time_they_stand_for(tmp_path, rate, nthreads):
    """CPU timers fire at most once per kernel tick (CONFIG_HZ, often 250)
    whatever the rate asked: each sample weighs its thread's CPU clock since
    the thread's previous sample (its first, one interval), so the CPU
    seconds read right at any rate, overall and per thread. The bound: 10 %
    (with three threads on two CPUs the process's timer may pass a thread
    over for several intervals at its end: 62 and 74 ms of 600 were seen at
    100 Hz, so 8 intervals more are allowed per thread)."""
    (tmp_path / "burn.py").write_text(BURN)
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--rate", str(rate),
                        "-o", "b.cprof", "burn.py", str(nthreads)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    s = Session.load(tmp_path / "b.cprof")
    si = s.info["sampling"]
    assert si["weighting"] == "thread_cpu_clock" and si["rate_requested"] == rate
    per = dict.fromkeys(truth, 0)
    names = {t.index: str(t.native_id) for t in s.threads.values()}   # names can be late
    for (t, _, _), c in s.samples.items():
        if names.get(t) in per:
            per[names[t]] += c.weight / 1e9
    tail = 0 if nthreads == 1 else 8 / rate
    for name, true in truth.items():
        assert abs(per[name] - true) < 0.1 * true + tail, (rate, name, per, truth)
    total = sum(c.weight for c in s.samples.values()) / 1e9
    assert abs(total - sum(truth.values())) < 0.1 * sum(truth.values()), (rate, total, truth)
    # the kernel's rate shows, and asking above it says so once, at the end
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("pyprof: note:")]
    if si["rate_achieved"] < 0.8 * rate:
        assert len(notes) == 1 and f"asked for {rate} samples" in notes[0], r.stderr
    else:
        assert notes == [], r.stderr
    # the achieved rate is the signals the kernel delivered per CPU second the
    # program used (its own clock), whatever the kernel manages on this machine
    # (a loaded VM loses ticks: 48 Hz of 100 was seen)
    cpu = sum(truth.values())
    assert si["rate_achieved"] == pytest.approx(si["signals"] / cpu, rel=0.15), (si, cpu)
    head = sampletable_header(s)
    assert f"{rate} Hz requested" in head and "each sample stands for the CPU time" in head


SHORT_THREADS = textwrap.dedent("""
    import json, sys, threading, time

    n, work, together = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    clock = getattr(time, sys.argv[4])      # thread_time (CPU) or perf_counter (wall)
    took = []

    def spin(sec):
        t0 = clock()
        while clock() - t0 < sec:
            pass

    def worker():
        t0 = clock()
        spin(work)
        took.append(clock() - t0)

    spin(0.2)
    for i in range(0, n, together):
        ts = [threading.Thread(target=worker) for _ in range(together)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    with open("truth.json", "w") as f:
        json.dump(sum(took), f)
""")


def short_threads(tmp_path, wall, n, work, together, rate):
    """(seconds the samples in `worker` weigh, the workers' own sum, sampling info)."""
    (tmp_path / "short.py").write_text(SHORT_THREADS)
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", *(["--wall"] if wall else []),
                        "--rate", str(rate), "-o", "s.cprof", "short.py", str(n), str(work),
                        str(together), "perf_counter" if wall else "thread_time"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = Session.load(tmp_path / "s.cprof")
    got = sum(c.weight for (_, sid, _), c in s.samples.items()
              if any(s.functions[fid].name == "worker" for fid, _ in s.stacks[sid].frames)) / 1e9
    return got, json.loads((tmp_path / "truth.json").read_text()), s.info["sampling"]


@pytest.mark.parametrize("n,work,together,rate", [
    (200, 0.002, 1, 1000),      # a thread per request, each shorter than an interval
    (200, 0.002, 8, 1000),      # eight at a time
    (40, 0.02, 1, 100),         # a few intervals each
])
def test_short_lived_threads_keep_their_cpu(tmp_path, n, work, together, rate):
    """CPU mode: a thread's first sample weighs one interval of the process's
    signals, not its CPU since it started (docs/sampling.md): the CPU after a
    thread's last sample, which no sample sees, cost a thread a few intervals
    long about a fifth of its time, and threads shorter than one interval about
    three quarters at 1 kHz (0.26x the truth) and nine tenths at 100 Hz."""
    # A loaded machine delivers a fraction of ITIMER_PROF's signals (3 busy
    # processes beside it on two CPUs: 17-102 of ~650): each then weighs much,
    # and the estimate's spread grows as 1/sqrt(signals) (0.81-1.73x seen; the
    # run's weights then miss its CPU clock too, 2.3x once). The run is
    # retaken, at most twice, when fewer than half came or its weights miss
    # its CPU by a fifth; the bounds widen to 3 standard errors of what came.
    for attempt in range(3):
        got, truth, si = short_threads(tmp_path, False, n, work, together, rate)
        if si["signals"] >= 0.5 * si["cpu_s"] * rate and \
                abs(si["weighted_s"] - si["cpu_s"]) <= 0.2 * si["cpu_s"]:
            break
    spread = 3 / max(si["signals"], 1) ** 0.5
    # a statistical estimate: 0.95-1.04x in runs here, 0.76-1.19x with other
    # test runs beside it on two CPUs (195fbc1, before first-sample weighting:
    # 0.27x, 0.27x and 0.75-0.83x: the 20 ms case tells them apart only on a
    # quiet machine)
    assert (1 - max(0.3, spread)) * truth < got < (1 + max(0.25, spread)) * truth, \
        (got, truth, si)
    assert si["weighted_s"] == pytest.approx(si["cpu_s"], rel=max(0.2, spread)), si


@pytest.mark.parametrize("n,work,together,rate", [
    (1000, 0.002, 1, 200),      # a thread per request, each shorter than an interval
    (200, 0.002, 8, 1000),      # eight at a time
    (40, 0.02, 1, 100),         # a few intervals each
])
def test_short_lived_threads_keep_their_wall_time(tmp_path, n, work, together, rate):
    """Wall mode: a thread threading starts makes its slot as it starts, its
    first tick at a random point of its first interval weighing one interval
    (docs/sampling.md). Before, a thread that ended before the helper's next
    look (every 10 ms, once it has the GIL) got no sample at all: 0.0x the
    truth for 2 ms threads, 0.70-0.84x for 20 ms ones at 100 Hz."""
    got, truth, _ = short_threads(tmp_path, True, n, work, together, rate)
    # 0.91-1.07x in runs here (a short thread gets a sample with a chance of
    # its time / the interval: 2 s of them at 200 Hz, 5 % spread)
    assert 0.8 * truth < got < 1.25 * truth, (got, truth)


def test_wall_sampling_wraps_thread_start_only_while_it_runs():
    """The wrapper of threading's start function is there while wall sampling
    runs and put back after; one the program set meanwhile is left alone."""
    name = "_start_joinable_thread" if sys.version_info >= (3, 13) else "_start_new_thread"
    orig = getattr(threading, name)
    p = pyprof.Profile(mode="sample", wall=True)
    p.enable()
    try:
        wrapped = getattr(threading, name)
        assert wrapped is not orig
        out = []
        t = threading.Thread(target=out.append, args=(threading.get_native_id,))
        t.start()
        t.join()
        assert out == [threading.get_native_id]            # arguments passed through
    finally:
        p.disable()
    assert getattr(threading, name) is orig
    theirs = lambda *a, **k: orig(*a, **k)                  # noqa: E731
    p = pyprof.Profile(mode="sample", wall=True)
    p.enable()
    setattr(threading, name, theirs)
    try:
        p.disable()
        assert getattr(threading, name) is theirs
    finally:
        setattr(threading, name, orig)
    p = pyprof.Profile(mode="sample", cpu_timer="itimer")  # the process timer: not wrapped
    p.enable()
    try:
        assert getattr(threading, name) is orig
    finally:
        p.disable()


def sampletable_header(session):
    from pyprof.render.sampletable import header
    return header(session)


# Wall mode with many idle threads (docs/sampling.md, "Idle threads"): a thread
# blocked without the GIL parks after two idle ticks and is charged, without
# being interrupted, for the time it stays blocked, on the stack it blocked in.
IDLE_THREADS = textwrap.dedent("""
    import json, sys, threading, time
    import pyprof

    n, rate, quiet = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "quiet"
    ev = threading.Event()
    begun, ended = {}, {}

    def blocked_here():
        ev.wait()

    def idle_worker():
        begun[threading.current_thread().name] = time.monotonic()
        blocked_here()
        ended[threading.current_thread().name] = time.monotonic()

    def spin(k):
        x = 0
        for i in range(k):
            x += i
        return x

    p = pyprof.Profile(mode="sample", wall=True, rate=rate)
    p.enable()
    ts = [threading.Thread(target=idle_worker, name=f"idle-{i}") for i in range(n)]
    started = {}
    for t in ts:
        started[t.name] = time.monotonic()
        t.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:
        spin(20_000)
    if quiet:                       # stopped while they wait: their blocked time ends here
        off = time.monotonic()
        p.disable()
    ev.set()
    for t in ts:
        t.join()
    if not quiet:                   # stopped after all woke at once and ended
        p.disable()
    s = p.session()
    per = {}
    for (t, sid, state), c in s.samples.items():
        name = s.threads[t].name
        if not name or not name.startswith("idle-"):
            continue
        fnames = {s.functions[fid].name for fid, _ in s.stacks[sid].frames}
        key = "blocked" if "blocked_here" in fnames and state == 2 else "other"
        per.setdefault(name, {"blocked": 0, "other": 0})[key] += c.weight
    si = s.info["sampling"]
    spans = {k: ((off if quiet else ended[k]) - b, b - started[k]) for k, b in begun.items()}
    print(json.dumps({"spans": spans, "per": per, "signals": si["signals"],
                      "parked": si["parked"], "elapsed": si["elapsed_s"]}))
""")


@pytest.mark.parametrize("ending", ["quiet", "convoy"])
@pytest.mark.parametrize("n,rate", [(100, 100), (100, 1000), (1000, 100), (1000, 1000)])
def test_idle_threads_are_charged_without_being_interrupted(tmp_path, n, rate, ending):
    """quiet: sampling stops while the threads wait; convoy: they are all woken
    at once and end under sampling, which only the sum is held to (a thread
    that leaves its wait with little CPU, in a crowd queueing for the GIL, may
    keep its blocked stack until it is seen to move or end: in ~1 run of 10,
    tens to hundreds of the 1,000 threads read 5-40% off; docs/sampling.md)."""
    script = tmp_path / "idle.py"
    script.write_text(IDLE_THREADS)
    r = subprocess.run([sys.executable, str(script), str(n), str(rate), ending],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["per"]) == n and out["parked"] >= n     # every thread named
    interval = 1e9 / rate
    # in all, the idle threads' blocked time is on their blocking stack, idle,
    # within 2% (6% when they all wake at once and end: the convoy's edges)
    # and two ticks each (a first sample also weighs its thread's start, from
    # Thread.start(): allowed for); per thread (quiet), within 5% but for 1 in
    # 100, within 25% all
    spans = {k: v for k, v in out["spans"].items() if k in out["per"]}
    assert len(spans) == n
    total_span = sum(span for span, _ in spans.values()) * 1e9
    total_start = sum(startup for _, startup in spans.values()) * 1e9
    total_got = sum(out["per"][k]["blocked"] for k in spans)
    slack = 2 * interval * len(spans)
    tol = 0.02 if ending == "quiet" else 0.06
    assert total_span * (1 - tol) - slack <= total_got \
        <= total_span * (1 + tol) + slack + total_start + 1e7 * len(spans), \
        (total_got, total_span, total_start)
    # the idle threads were interrupted for their first ticks only, not all along
    assert out["signals"] < 0.1 * n * rate * out["elapsed"], out["signals"]
    if ending != "quiet":
        return
    off = []
    for name, (span, startup) in spans.items():
        err = abs(out["per"][name]["blocked"] - span * 1e9) - startup * 1e9 - 2 * interval
        off.append((err / (span * 1e9), name))
    off.sort(reverse=True)
    # a thread that leaves its wait with less CPU than the wake-up threshold
    # (10-40 us) and then queues for the GIL is seen late (docs/sampling.md,
    # "What this trades"): seen once in ~40 suite runs, 2 of 1,000 threads
    # 12% and 21% off at 100 Hz; the rest stay within 5%
    assert off[0][0] <= 0.25, off[:5]
    assert sum(1 for e, _ in off if e > 0.05) <= len(off) // 100, off[:15]


# Threads started under wall sampling and blocked at once are parked after
# one signal each: their first tick, at a random point of their first
# interval (so that a thread shorter than an interval is sampled in
# proportion to its time, docs/sampling.md), finds them blocked.
QUIET_START = textwrap.dedent("""
    import json, sys, threading, time
    import pyprof

    n, native = int(sys.argv[1]), sys.argv[2] == "1"
    ev = threading.Event()

    late = {}

    def blocked_here():
        # how long the thread took to get here from its start (it waits for
        # the GIL meanwhile: on a loaded machine, tens of ms)
        late[threading.current_thread().name] = time.monotonic() - born[threading.current_thread().name]
        ev.wait()

    p = pyprof.Profile(mode="sample", wall=True, rate=1000, native=native)
    p.enable()
    t0 = time.monotonic()
    ts = [threading.Thread(target=blocked_here, name=f"w-{i}") for i in range(n)]
    born = {}
    for t in ts:
        born[t.name] = time.monotonic()
        t.start()
    starting = time.monotonic() - t0
    time.sleep(1.0)
    p.disable()
    ev.set()
    for t in ts:
        t.join()
    s = p.session()
    per = {}
    for (t, sid, state), c in s.samples.items():
        name = s.threads[t].name
        if name and name.startswith("w-"):
            fnames = {s.functions[fid].name for fid, _ in s.stacks[sid].frames}
            key = "blocked" if "blocked_here" in fnames and state == 2 else "other"
            per.setdefault(name, {"blocked": 0, "other": 0})[key] += c.weight
    print(json.dumps({"per": per, "signals": s.info["sampling"]["signals"],
                      "starting": starting, "late": late}))
""")


@pytest.mark.parametrize("native", [False, True])
def test_new_threads_start_parked_without_signals(tmp_path, native):
    if native and "libunwind" not in pyprof._cprof.FEATURES:
        pytest.skip("built without libunwind")
    script = tmp_path / "quiet.py"
    script.write_text(QUIET_START)
    n = 300
    r = subprocess.run([sys.executable, str(script), str(n), "1" if native else "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["per"]) == n
    # every thread's second after the last start is on the stack it blocks in;
    # before it got there, on others
    for name, c in out["per"].items():
        late = out["late"][name] * 1e9
        assert c["blocked"] >= 0.95e9 and c["other"] <= late + 0.02e9, (name, c, late)
    # the main thread's ticks while it starts them (1 kHz) and until it parks in
    # sleep(); one signal per thread (its first tick)
    main = out["starting"] * 1000 + 100
    assert out["signals"] <= n + main, out


SUBINTERPRETERS = textwrap.dedent('''
    import sys
    code = """
    import threading, time
    def spin():
        t0 = time.process_time()
        x = 0
        while time.process_time() - t0 < 0.2:
            x += 1
    t = threading.Thread(target=spin)
    t.start()
    spin()
    t.join()
    """
    if sys.version_info >= (3, 13):
        import _interpreters as interpreters
    else:
        import _xxsubinterpreters as interpreters
    for _ in range(3):
        iid = interpreters.create()
        interpreters.run_string(iid, code)
        interpreters.destroy(iid)
    print("ok")
''')


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's subinterpreters cannot start threads")
@pytest.mark.parametrize("mode", [["--sample"], ["--sample", "--wall"], ["--memory"]])
def test_subinterpreter_threads_are_not_sampled_and_do_not_crash(tmp_path, mode):
    # A subinterpreter's code objects live in its own memory (3.13: its own
    # allocator) and die with it: pyprof once kept references to them and
    # crashed at exit ("free(): invalid pointer", test_threading under pyprof).
    script = tmp_path / "subi.py"
    script.write_text(SUBINTERPRETERS)
    r = subprocess.run([sys.executable, "-m", "pyprof", *mode, "-o", str(tmp_path / "s.cprof"),
                        str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr[-2000:]
    s = Session.load(tmp_path / "s.cprof")
    funcs = s.functions.values() if isinstance(s.functions, dict) else s.functions
    assert "spin" not in {f.name for f in funcs}, "a subinterpreter's function was recorded"


# The drain needs the GIL; a program can keep it for seconds (one long C call,
# or a crowd of threads woken at once) while other threads are sampled. Their
# records then go to a spill buffer (the ticker, without the GIL) instead of
# being dropped when the ring is full.
GIL_HELD_LONG = textwrap.dedent("""
    import json, os, sys, threading, time, zlib
    import pyprof

    data = os.urandom(1 << 20) * 8
    spent = {}

    def deep(n):                    # deep stacks: big records, the ring fills fast
        if n:
            return deep(n - 1)
        t0 = time.monotonic()
        zlib.compress(data, 9)      # releases the GIL
        spent[threading.current_thread().name] = time.monotonic() - t0

    p = pyprof.Profile(mode="sample", wall=True, rate=1000)
    p.enable()
    ts = [threading.Thread(target=deep, args=(230,), name=f"w{i}") for i in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    h0 = time.monotonic()
    sum(range(60_000_000))          # one C call that keeps the GIL
    held = time.monotonic() - h0
    for t in ts:
        t.join()
    p.disable()
    s = p.session()
    leaf, native = {}, {}
    for (t, sid, state), c in s.samples.items():
        frames = s.stacks[sid].frames
        if frames and s.functions[frames[-1][0]].name == "deep":
            name = s.threads[t].name
            leaf[name] = leaf.get(name, 0) + c.weight
            if state == 1:
                native[name] = native.get(name, 0) + c.weight
    print(json.dumps({"held": held, "dropped": s.info["sampling"]["dropped"],
                      "spent": spent, "leaf": leaf, "native": native}))
""")


def test_samples_are_kept_while_the_program_holds_the_gil_for_seconds(tmp_path):
    script = tmp_path / "held.py"
    script.write_text(GIL_HELD_LONG)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["held"] > 0.5, out          # long enough to fill the ring (8 MiB at ~4 KiB a record)
    assert out["dropped"] == 0, out
    # each worker's time in zlib.compress (computing, then waiting for the GIL to
    # return), on the stack that called it, against its own clock
    for name, spent in out["spent"].items():
        assert abs(out["leaf"][name] / 1e9 - spent) <= 0.05 * spent + 0.01, (name, out)
        assert out["native"][name] > 0.1e9, (name, out)


# Threads that run a short burst between 1 ms sleeps, as a poller or a request
# loop does: the burst's share of each thread's wall time, by its own clock.
SHORT_RUNS = textwrap.dedent("""
    import json, sys, threading, time
    import pyprof

    rate, seconds, nthreads = int(sys.argv[1]), float(sys.argv[2]), 4

    def burst():
        total = 0
        for i in range(1500):
            total += i * i
        return total

    spent, lived, cpu_out = {}, {}, {}

    def loop():
        name, busy, busy_cpu = threading.current_thread().name, 0.0, 0.0
        start, cpu0 = time.perf_counter(), time.thread_time()
        while time.perf_counter() - start < seconds:
            a, c = time.perf_counter(), time.thread_time()
            burst()
            busy += time.perf_counter() - a
            busy_cpu += time.thread_time() - c
            time.sleep(0.001)
        spent[name], lived[name] = busy, time.perf_counter() - start
        cpu_out[name] = time.thread_time() - cpu0 - busy_cpu

    p = pyprof.Profile(mode="sample", wall=True, rate=rate)
    p.enable()
    ts = [threading.Thread(target=loop, name=f"poll-{i}") for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    p.disable()
    s = p.session()
    got, states = {}, {}
    for (t, sid, state), c in s.samples.items():
        name = s.threads[t].name
        if name in spent:
            inside = any(s.functions[fid].name == "burst" for fid, _ in s.stacks[sid].frames)
            got.setdefault(name, [0, 0])[inside] += c.weight
            if not inside:
                states[state] = states.get(state, 0) + c.weight
    print(json.dumps({"spent": spent, "lived": lived, "cpu_out": cpu_out, "got": got,
                      "states": states,
                      "parked": s.info["sampling"]["parked"]}))
""")


@pytest.mark.parametrize("rate", [100, 1000])
def test_short_runs_between_sleeps_keep_their_wall_share(tmp_path, rate):
    """A thread that is idle most of the time but runs at every wake-up is not
    parked on its sleep (its runs would all be charged there: 0-1 % for 6.5 %
    at 100 Hz), the ticks do not fall into step with its 1 ms sleeps (a fixed
    period gave 1.5-4 % for 6.6 % at 1 kHz), and its sleeps are idle, not
    native, though it uses ~10 % of a CPU (a CPU share since the last sample
    called 80 % of them native on 3.12)."""
    script = tmp_path / "short_runs.py"
    script.write_text(SHORT_RUNS)
    r = subprocess.run([sys.executable, str(script), str(rate), "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    truth = sum(out["spent"].values()) / sum(out["lived"].values())
    outside = sum(o for o, _ in out["got"].values())
    inside = sum(i for _, i in out["got"].values())
    share = inside / (inside + outside)
    # 4 threads x 3 s: ~100 (100 Hz) to ~1,000 samples in the bursts; +-35 %
    # is over 3 standard deviations at 100 Hz
    assert 0.65 * truth <= share <= 1.35 * truth, (share, truth, out)
    assert 0.03 <= truth <= 0.3, truth                  # what the case is about
    # outside the bursts: the sleeps (idle), waits for the GIL among the four
    # (idle), and the loop's own code and the GIL's hand-overs (python, native),
    # which use the CPU the threads' clocks show there (a few %; more where the
    # build is slower, under a sanitizer): never most of it (80 % was charged
    # as native when a CPU share since the last sample decided)
    busy_out = sum(out["cpu_out"].values()) / sum(
        out["lived"][n] - out["spent"][n] for n in out["lived"])
    idle = out["states"].get(str(STATES.index("idle")), 0)
    not_idle = 1 - idle / sum(out["states"].values())
    assert not_idle <= max(0.2, 1.5 * busy_out + 0.05), (not_idle, busy_out, out["states"])


def test_pyprofs_own_code_dying_between_samples_is_never_named(tmp_path):
    """A module body of pyprof's own runs once and is freed (a lazy import, the
    channel's first `stats`): its samples drain as the code dies, and pyprof's
    own code gets no function id then either (docs/how-it-works.md)."""
    from conftest import pyprof_own_functions
    own_file = os.path.join(os.path.dirname(os.path.abspath(pyprof.__file__)), "lazy_part.py")
    p = pyprof.Profile(mode="sample", wall=True, rate=1000)
    with p:
        for _ in range(100):
            code = compile("t = __import__('time').perf_counter() + 0.003\n"
                           "while __import__('time').perf_counter() < t: pass\n",
                           own_file, "exec")
            exec(code, {})
            del code                        # freed here: the watcher drains its samples
    s = p.session()
    assert pyprof_own_functions(s) == []
    # the program's own frame (this test) still carries the samples
    assert any(fn.name == "test_pyprofs_own_code_dying_between_samples_is_never_named"
               for fn in s.functions.values())


def test_stack_entry_marks_survive_save_and_load(tmp_path):
    """--native's marks (the Python frames that start a C-level call of the
    interpreter) are kept through the capture file, the first stack's too."""
    s = Session()
    from pyprof.session import Function, SampleCounters, Stack, Thread
    s.info = {"sampling": {"mode": "cpu", "interval_ns": 1000000}}
    s.functions = {i: Function(i, f"f{i}", 10 * i + 1, "m.py", "m.py", "python")
                   for i in range(3)}
    s.threads = {0: Thread(0, 1, 1, 0, "main")}
    s.stacks = {0: Stack(((0, 1), (1, 11), (2, 21)), (0x1000, 0x2000), (0, 2)),
                1: Stack(((0, 1), (2, 22)), (0x1000,), (1,)),
                2: Stack(((0, 1), (1, 12)))}
    s.samples = {(0, sid, 0): SampleCounters(1, 1000000) for sid in s.stacks}
    path = tmp_path / "marks.cprof"
    s.save(path)
    back = Session.load(path)
    assert back.stacks == s.stacks
