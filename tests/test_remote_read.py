"""The read-only path (docs/attach.md#read-only-how-it-works): pyprof dump and pyprof top
--remote read a process from outside with process_vm_readv (remote_read.c),
nothing run in it. Targets run on every installed base CPython 3.11-3.13, so
a client of one version reads a target of another. Ground truth: the lines
the targets' own source says they wait at, the kernel's view (/proc), the
time split a target is written to have, the targets' own output and exit."""
import errno
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import start_tracer

from pyprof import _cprof
from pyprof.model.session import Session
from support import pyprof

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def base_pythons():
    root = os.path.dirname(sys.base_prefix)
    found = {}
    for path in sorted(glob.glob(os.path.join(root, "3.1[123].*", "bin", "python3.1[123]"))):
        found.setdefault(os.path.basename(path), path)
    return sorted(found.values()) or [BASE_PYTHON]


PYTHONS = base_pythons()


def _kernel_forbids():
    p = subprocess.Popen([BASE_PYTHON, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        r = _cprof.RemoteProcess(p.pid)
        r.threads(stop=True)
        return None
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            return f"the kernel forbids ptrace/process_vm_readv here: {e}"
        return None
    finally:
        p.kill()
        p.wait()


_WHY = _kernel_forbids()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def line_of(text, mark):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if mark in ln)


def wait_for(cond, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def blocks(text):
    """dump's output: {thread header: [Python frame lines]} (native ones left out)."""
    out, cur = {}, None
    for ln in text.splitlines():
        if ln.startswith("Thread "):
            cur = ln
            out[cur] = []
        elif ln.startswith("  native:"):
            cur = None
        elif cur is not None and ln.startswith("    "):
            out[cur].append(ln.strip())
    return out


def header(bl, pattern):
    hits = [h for h in bl if re.search(pattern, h)]
    assert len(hits) == 1, (pattern, list(bl))
    return hits[0]


def start(python, script, *args):
    p = subprocess.Popen([python, str(script), *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n", p.stderr.read() if p.poll() is not None else ""
    return p


def finish(p, stdin=""):
    """The target ends as it would have: its own output, nothing on stderr."""
    out, err = p.communicate(stdin, timeout=60)
    return p.returncode, out, err


def settle(pid, blocked):
    """Until at least `blocked` threads of pid sleep in a system call (a
    loaded machine may take a while to get them there)."""
    def count():
        n = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    n += f.read().rpartition(")")[2].split()[0] == "S"
            except OSError:
                pass
        return n >= blocked
    wait_for(count, 20, f"{blocked} threads of {pid} blocked")
    time.sleep(0.2)


def kill(p):
    if p.poll() is None:
        p.kill()
    p.communicate()


# ------------------------------------------------------------------ known lines
THREADS = """
import sys, threading, time
def napping():
    time.sleep(60)                                  # NAP-LINE
def reading(ev):
    line = sys.stdin.readline()                     # READ-LINE
    ev.set()
def waiting_here(ev):
    ev.wait(60)                                     # WAIT-LINE
def spinning(stop):
    n = 0
    while not stop:                                 # SPIN-LINE
        n += 1                                      # SPIN-LINE2
stop = []
ev = threading.Event()
threading.Thread(target=napping, daemon=True).start()
threading.Thread(target=reading, args=(ev,), daemon=True).start()
threading.Thread(target=spinning, args=(stop,), daemon=True).start()
print("up", flush=True)
waiting_here(ev)
stop.append(1)
print("done", flush=True)
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_dump_reads_every_thread_at_its_line(python, tmp_path):
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    p = start(python, script)
    try:
        settle(p.pid, 3)
        r = pyprof("dump", p.pid, "--native")
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""
        text = r.stdout
        assert re.search(r"read from outside, nothing run in the process; all threads stopped "
                         r"[\d.]+ ms", text), text
        bl = blocks(text)
        assert len(bl) == 4, text
        main = header(bl, rf"^Thread {p.pid} \(MainThread\): ")
        assert "blocked in futex (waiting on a lock)" in main, main
        # Event.wait's Python frames, then the test's own
        assert f"waiting_here ({script}:{line_of(THREADS, 'WAIT-LINE')})" in bl[main], text
        assert bl[main][0].startswith("Condition.wait (") and "threading.py:" in bl[main][0]
        assert bl[main][-1].startswith("<module> (")
        nap = header(bl, r"napping|: sleeping, blocked in clock_nanosleep|nanosleep")
        assert any(f"napping ({script}:{line_of(THREADS, 'NAP-LINE')})" == f
                   for f in bl[nap]), text
        assert "blocked in clock_nanosleep (sleeping)" in nap or "nanosleep" in nap, nap
        rd = [h for h in bl if any(f.startswith("reading (") for f in bl[h])]
        assert len(rd) == 1 and "blocked in read (reading)" in rd[0], text
        assert bl[rd[0]][0] == f"reading ({script}:{line_of(THREADS, 'READ-LINE')})"
        sp = [h for h in bl if any(f.startswith("spinning (") for f in bl[h])]
        assert len(sp) == 1, text
        lines = {line_of(THREADS, "SPIN-LINE"), line_of(THREADS, "SPIN-LINE2")}
        assert bl[sp[0]][0] in {f"spinning ({script}:{n})" for n in lines}, bl[sp[0]]
        # the GIL: at most one holder, and only a thread running Python or nothing
        holders = [h for h in bl if "holds the GIL" in h]
        assert len(holders) <= 1 and not any(h in (main, nap, rd[0]) for h in holders), text
        if _cprof.RemoteProcess(p.pid).native_available:
            assert re.search(r"^    (clock_)?nanosleep\+0x", text, re.M), text
        else:
            assert "native stacks: not available" in text
        assert p.poll() is None
        assert finish(p, "go\n") == (0, "done\n", "")
    finally:
        kill(p)


def test_threads_api_and_the_pause(tmp_path):
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    p = start(BASE_PYTHON, script)
    try:
        settle(p.pid, 3)
        rp = _cprof.RemoteProcess(p.pid)
        live = rp.threads(stop=False)
        pauses = []
        for _ in range(20):
            threads = rp.threads(stop=True)
            pauses.append(rp.last_pause_ns)
        assert len(threads) == len(live) == 4
        main = [t for t in threads if t["is_main"]]
        assert len(main) == 1 and main[0]["native_id"] == p.pid
        assert all(t["complete"] for t in threads)
        assert (str(script), "waiting_here", line_of(THREADS, "WAIT-LINE")) in main[0]["frames"]
        # stopped for milliseconds at most (the median: the machine is shared)
        pauses.sort()
        assert 0 < pauses[len(pauses) // 2] < 20e6, pauses
        # the state of the threads afterwards: none left stopped or traced
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            with open(f"/proc/{p.pid}/task/{tid}/status") as f:
                st = f.read()
            assert "TracerPid:\t0" in st and not re.search(r"State:\s+[tT]", st), st
        assert finish(p, "go\n") == (0, "done\n", "")
    finally:
        kill(p)


# ------------------------------------------------------------------ a deadlock
DEADLOCK = """
import threading, time
a, b = threading.Lock(), threading.Lock()
ready = threading.Barrier(2)
def first():
    with a:
        ready.wait()
        with b:                                     # FIRST-LINE
            pass
def second():
    with b:
        ready.wait()
        with a:                                     # SECOND-LINE
            pass
t1 = threading.Thread(target=first)
t2 = threading.Thread(target=second)
t1.start(); t2.start()
print("up", flush=True)
t1.join()                                           # JOIN-LINE
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_dump_of_a_deadlock(python, tmp_path):
    script = tmp_path / "deadlock.py"
    script.write_text(DEADLOCK)
    p = start(python, script)
    try:
        settle(p.pid, 3)
        r = pyprof("dump", p.pid)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        bl = blocks(r.stdout)
        for func, mark in (("first", "FIRST-LINE"), ("second", "SECOND-LINE")):
            h = [h for h in bl if bl[h] and bl[h][0].startswith(f"{func} (")]
            assert len(h) == 1, r.stdout
            assert bl[h[0]][0] == f"{func} ({script}:{line_of(DEADLOCK, mark)})"
            assert "blocked in futex (waiting on a lock)" in h[0] and "GIL" not in h[0], h[0]
        main = header(bl, rf"^Thread {p.pid} \(MainThread\)")
        assert any(f"<module> ({script}:{line_of(DEADLOCK, 'JOIN-LINE')})" == f
                   for f in bl[main]), r.stdout
        assert "holds the GIL" not in r.stdout
        assert p.poll() is None                     # still deadlocked, unharmed
    finally:
        kill(p)
    assert p.stderr is None or True


# ------------------------------------------------------------------ the GIL held in C
GIL_IN_C = """
import ctypes, threading, time
def wants_the_gil():
    n = 0
    while True:
        n += 1                                      # WANT-LINE
def holds_it_in_c():
    ctypes.PyDLL(None).sleep(120)                   # C-LINE
threading.Thread(target=wants_the_gil, daemon=True).start()
time.sleep(0.2)
print("up", flush=True)
holds_it_in_c()
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_dump_while_the_gil_is_held_in_c(python, tmp_path):
    script = tmp_path / "gil.py"
    script.write_text(GIL_IN_C)
    # the waiter wakes every switch interval (5 ms) to ask for the GIL: a dump
    # may catch it on a CPU for that moment; then a new process is read, at
    # most 4 times (a read stops the threads, and the kernel resumes the main
    # thread's interrupted nanosleep as restart_syscall: not read again)
    for attempt in range(5):
        p = start(python, script)
        try:
            settle(p.pid, 2)
            t0 = time.monotonic()
            r = pyprof("dump", p.pid, timeout=30)
            assert time.monotonic() - t0 < 20
            assert r.returncode == 0 and r.stderr == "", r.stderr
            bl = blocks(r.stdout)
        except BaseException:
            kill(p)
            raise
        if not any(": running" in h for h in bl if not h.startswith(f"Thread {p.pid} ")):
            break
        kill(p)
    try:
        main = header(bl, rf"^Thread {p.pid} \(MainThread\)")
        assert "holds the GIL" in main and "nanosleep (sleeping)" in main, main
        assert bl[main][0] == f"holds_it_in_c ({script}:{line_of(GIL_IN_C, 'C-LINE')})"
        other = [h for h in bl if h != main]
        assert len(other) == 1, r.stdout
        assert "blocked in futex (waiting for the GIL)" in other[0], other[0]
        assert bl[other[0]][0].startswith("wants_the_gil (")
        assert p.poll() is None
    finally:
        kill(p)
    assert p.returncode == -signal.SIGKILL


# ------------------------------------------------------------------ a forked child
FORKS = """
import os, sys, threading, time
def child_waits():
    time.sleep(60)                                  # CHILD-LINE
def forker():
    pid = os.fork()
    if pid == 0:
        os.write(1, b"%d\\n" % os.getpid())   # one write each: no buffer shared across the fork
        child_waits()
        os._exit(0)
    os.write(1, b"%d\\n" % pid)
    os.waitpid(pid, 0)
print("up", flush=True)
t = threading.Thread(target=forker)                 # forks from a thread, not the main one
t.start()
time.sleep(60)
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_dump_of_a_forked_child_names_its_own_main_thread(python, tmp_path):
    script = tmp_path / "forks.py"
    script.write_text(FORKS)
    p = start(python, script)
    child = None
    try:
        pids = {int(p.stdout.readline()), int(p.stdout.readline())}
        assert len(pids) == 1
        child = pids.pop()
        want = f"child_waits ({script}:{line_of(FORKS, 'CHILD-LINE')})"

        def dumped(pid, text):
            r = pyprof("dump", pid)
            assert r.returncode == 0 and r.stderr == "", r.stderr
            return r if text in r.stdout else None
        # (on a loaded machine the child may take a while to reach its sleep)
        r = wait_for(lambda: dumped(child, want), 20, "the child in child_waits")
        bl = blocks(r.stdout)
        assert len(bl) == 1, r.stdout
        main = header(bl, rf"^Thread {child} \(MainThread\): ")
        assert bl[main][0] == f"child_waits ({script}:{line_of(FORKS, 'CHILD-LINE')})"
        assert "forker (" in bl[main][1]
        # the parent: its own main thread, and the forking thread waiting for the child
        r = wait_for(lambda: dumped(p.pid, "wait4"), 20, "the parent in wait4")
        bl = blocks(r.stdout)
        header(bl, rf"^Thread {p.pid} \(MainThread\): ")
        assert "blocked in wait4" in header(bl, r"wait4"), r.stdout
        assert p.poll() is None
    finally:
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        kill(p)


# ------------------------------------------------------------------ bad input
def one_error_line(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyprof: error: "), r.stderr
    return lines[0]


def test_bad_targets_say_why_in_one_line(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    for args in (("dump",), ("top", "--remote", "--duration", "1", "-o", tmp_path / "x.cprof")):
        assert f"no such process: {gone.pid}" in one_error_line(pyprof(*args[:1], gone.pid,
                                                                       *args[1:]))
    s = subprocess.Popen(["sleep", "30"])
    try:
        line = one_error_line(pyprof("dump", s.pid))
        assert "is not a CPython interpreter" in line, line
        line = one_error_line(pyprof("top", "--remote", s.pid, "--duration", "1", "-o", "x.cprof"))
        assert "is not a CPython interpreter" in line, line
    finally:
        s.kill()
        s.wait()
    old = sorted(glob.glob(os.path.join(os.path.dirname(sys.base_prefix), "3.1[0]*", "bin",
                                        "python3.10")))
    if old:
        o = subprocess.Popen([old[0], "-c", "import time; print('up', flush=True); "
                              "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
        try:
            assert o.stdout.readline() == "up\n"
            line = one_error_line(pyprof("dump", o.pid))
            assert "runs CPython 3.10, which pyprof does not support" in line, line
        finally:
            o.kill()
            o.wait()
    line = one_error_line(pyprof("top", "--remote", os.getpid(), "--rate", "5000"))
    assert "up to 1000 Hz" in line


# ------------------------------------------------------------------ top --remote
SPLIT = """
import time
def busy(sec):
    t = time.perf_counter()
    while time.perf_counter() - t < sec:
        pass
def two_thirds():
    busy(0.02)
def one_third():
    busy(0.01)
print("up", flush=True)
end = time.monotonic() + float(__import__("sys").argv[1])
while time.monotonic() < end:
    two_thirds()
    one_third()
print("done", flush=True)
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_top_remote_capture_has_the_targets_time_split(python, tmp_path):
    script = tmp_path / "split.py"
    script.write_text(SPLIT)
    p = start(python, script, "8")
    try:
        out = tmp_path / "remote.cprof"
        r = pyprof("top", "--remote", p.pid, "--rate", "1000", "--duration", "3", "-o", out)
        assert r.returncode == 0, r.stderr
        s = Session.load(out)
        assert s.info["sampling"]["mode"] == "wall" and s.info["sampling"]["remote"]
        by = {f.qualname: f.fid for f in s.functions.values()}
        total = {}
        for (t, sid, state), c in s.samples.items():
            for fid in {fid for fid, _ in s.stacks[sid].frames}:
                total[fid] = total.get(fid, 0) + c.weight
        allw = sum(c.weight for c in s.samples.values())
        two, one = total[by["two_thirds"]] / allw, total[by["one_third"]] / allw
        assert abs(two - 2 / 3) < 0.1 and abs(one - 1 / 3) < 0.1, (two, one)
        # the weights: the wall time sampled (less when this client was not
        # scheduled for a while: a stall counts for a few periods at most)
        assert 1.0 < allw / 1e9 < 4.0, allw
        assert s.info["sampling"]["recorded"] > 200, s.info["sampling"]
        # every export reads it
        for name in ("remote.speedscope.json", "remote.flame.html", "remote.collapsed"):
            r = pyprof("convert", out, "-o", tmp_path / name)
            assert r.returncode == 0 and (tmp_path / name).stat().st_size > 100, r.stderr
        assert "two_thirds" in (tmp_path / "remote.collapsed").read_text()
        assert finish(p) == (0, "done\n", "")
    finally:
        kill(p)


HOT = """
import threading, time
def hot_loop_function():
    s = 0
    while True:
        s += 1
def napper():
    time.sleep(600)
threading.Thread(target=napper, daemon=True).start()
print("up", flush=True)
hot_loop_function()
"""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_remote_in_a_terminal(tmp_path):
    script = tmp_path / "hot.py"
    script.write_text(HOT)
    p = start(BASE_PYTHON, script)
    name = f"pyprof-rtop-{os.getpid()}"

    def screen():
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", name],
                              capture_output=True, text=True).stdout

    def see(pattern, timeout=20):
        return wait_for(lambda: re.search(pattern, screen(), re.M), timeout,
                        f"{pattern!r} on the screen:\n{screen()}")
    try:
        cmd = f"{sys.executable} -m pyprof top --remote {p.pid}; echo TOP-EXIT=$?; sleep 60"
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "130", "-y", "40", cmd],
                       check=True)
        see(r"hot_loop_function \(hot\.py:3\)")
        see(r"wall \(from outside\) sampling")
        s = screen()
        assert "MainThread" in s and "GIL held" in s, s
        rows = [ln for ln in s.splitlines() if re.match(r"\s+\d+\.\d% ", ln)]
        assert "hot_loop_function" in rows[0], s
        assert float(re.search(r"GIL held\s+([\d.]+)%", s).group(1)) > 50, s
        # the napper: idle all the time
        assert re.search(r"Thread-\d+ \(\d+\)\s+0\.0%\s+0\.0%\s+100\.0%", s), s
        subprocess.run(["tmux", "send-keys", "-t", name, "q"], check=True)
        see(r"TOP-EXIT=0")
        assert p.poll() is None
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            with open(f"/proc/{p.pid}/task/{tid}/status") as f:
                assert "TracerPid:\t0" in f.read()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        kill(p)


# ------------------------------------------------------------------ location tables
def test_location_table_decoder_matches_cpython():
    """Every instruction of every code object of a few modules (all the
    location-table forms): the remote decoder against CPython's co_lines."""
    import argparse
    import email.parser
    import json
    import threading
    seen, todo = 0, [m.__spec__.loader.get_code(m.__name__)
                     for m in (argparse, json.decoder, threading, email.parser)]
    while todo:
        co = todo.pop()
        todo.extend(c for c in co.co_consts if hasattr(c, "co_linetable"))
        for start, end, line in co.co_lines():
            for off in range(start, end, 2):
                got = _cprof.RemoteProcess.addr2line(co.co_linetable, co.co_firstlineno, off)
                assert got == (-1 if line is None else line), (co, off, got, line)
                seen += 1
    assert seen > 10000


def test_location_table_torn_below_line_0_is_no_line():
    """A live read may meet a location table freed and made again (CI: line
    -130616 in a churning process): a line below 0 is no line CPython gives."""
    # one entry, no columns (code 13), 4 code units, signed delta -10 (varint 21)
    table = bytes([0x80 | 13 << 3 | 3, 21])
    assert _cprof.RemoteProcess.addr2line(table, 50, 0) == 40
    assert _cprof.RemoteProcess.addr2line(table, 5, 0) == -1
    assert _cprof.RemoteProcess.addr2line(table, -7, -2) == -1


def test_a_traced_process_is_read_without_stopping(tmp_path):
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    p = start(BASE_PYTHON, script)
    g = start_tracer(p.pid)
    try:
        r = pyprof("dump", p.pid)
        assert r.returncode == 0, r.stderr
        assert f"not stopped: process {g.pid} traces it" in r.stdout, r.stdout
        assert f"waiting_here ({script}:{line_of(THREADS, 'WAIT-LINE')})" in r.stdout
    finally:
        g.kill()
        g.wait()
        kill(p)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv, to run a client without CAP_SYS_PTRACE")
def test_ptrace_not_permitted_says_why():
    # a process that made itself non-dumpable can be read only with CAP_SYS_PTRACE
    code = ("import ctypes, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
            "print('up', flush=True)\ntime.sleep(30)\n")
    p = subprocess.Popen([BASE_PYTHON, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        for args in (("dump",), ("top", "--remote", "--duration", "1", "-o", "/tmp/x.cprof")):
            r = subprocess.run(["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace",
                                sys.executable, "-m", "pyprof", args[0], str(p.pid), *args[1:]],
                               capture_output=True, text=True, timeout=60)
            line = one_error_line(r)
            assert f"ptrace of process {p.pid} was not permitted (no CAP_SYS_PTRACE" in line, line
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------ strings, live reads
UNICODE = """
import time
class Größe:
    def 数据(self):
        time.sleep(60)                              # SLEEP-LINE
print("up", flush=True)
Größe().数据()
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_names_and_files_of_every_string_kind(python, tmp_path):
    # ASCII, Latin-1 (kind 1, not ASCII), CJK (kind 2), an emoji in the path (kind 4)
    script = tmp_path / "t\U0001f600.py"
    script.write_text(UNICODE, encoding="utf-8")
    p = start(python, script)
    try:
        want = [(str(script), "Größe.数据", line_of(UNICODE, "SLEEP-LINE")),
                (str(script), "<module>", line_of(UNICODE, "Größe().数据()"))]
        proc = _cprof.RemoteProcess(p.pid)
        # (after its "up" the program takes a moment to reach its sleep)
        frames = wait_for(lambda: (f := proc.threads()[0]["frames"])[:2] == want and f, 20,
                          "the program in its sleep")
        assert frames[:2] == want
    finally:
        kill(p)


CHURN = """
import threading, sys
def down(n):
    return n if n == 0 else down(n - 1) + 1
def churn():
    while True:
        down(40)
        exec(compile("def fresh():\\n    return down(5)\\n", "<fresh>", "exec"), globals())
        fresh()
for _ in range(2):
    threading.Thread(target=churn, daemon=True).start()
print("up", flush=True)
churn()
"""


@pytest.mark.parametrize("python", PYTHONS, ids=os.path.basename)
def test_live_reads_of_changing_stacks_stay_sane(python, tmp_path):
    """Stacks that change under the read, code objects made and freed all the
    time: every frame read without stopping is one the program has, and the
    process is none the worse."""
    script = tmp_path / "churn.py"
    script.write_text(CHURN)
    p = start(python, script)
    try:
        rp = _cprof.RemoteProcess(p.pid)
        known = {"down", "churn", "fresh", "<module>", "Thread.run", "Thread._bootstrap",
                 "Thread._bootstrap_inner"}
        reads = complete = frames = no_line = 0
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for t in rp.threads(stop=False):
                reads += 1
                complete += t["complete"]
                assert len(t["frames"]) <= 512
                for filename, qualname, line in t["frames"]:
                    assert qualname in known, (filename, qualname, line)
                    assert filename in (str(script), "<fresh>") or "threading" in filename
                    # 0: a module's RESUME (CPython's own line for it); -1: an
                    # instruction without a location (CPython's f_lineno is None)
                    assert line >= -1
                    frames += 1
                    no_line += line == -1
        assert reads > 300 and complete > 0.9 * reads, (reads, complete)
        assert no_line < 0.01 * frames, (no_line, frames)
        assert p.poll() is None
    finally:
        kill(p)
    assert p.stderr is None or p.returncode == -signal.SIGKILL


def test_top_remote_writes_what_it_sampled_when_the_target_ends(tmp_path):
    code = ("import time\nprint('up', flush=True)\ndef f():\n    t = time.monotonic()\n"
            "    while time.monotonic() - t < 1:\n        pass\nf()\n")
    p = subprocess.Popen([BASE_PYTHON, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        out = tmp_path / "ended.collapsed"
        r = pyprof("top", "--remote", p.pid, "--duration", "30", "-o", out)
        assert r.returncode == 0, r.stderr
        assert f"process {p.pid} exited" in r.stderr
        lines = out.read_text().splitlines()
        hits = sum(int(ln.rsplit(" ", 1)[1]) for ln in lines if ";f (<string>:3)" in ln)
        assert hits > 50, lines
    finally:
        kill(p)


@pytest.mark.skipif("libunwind" not in _cprof.FEATURES, reason="built without libunwind")
def test_libunwind_ptrace_is_opened_at_the_first_native_read():
    """The remote unwinder (libunwind-ptrace and libunwind's generic library) is
    not loaded by `import pyprof._cprof` (it would cost every start): asking for
    native stacks of another process opens it, and it works."""
    code = ("import sys, pyprof._cprof as c\n"
            "def maps(): return open('/proc/self/maps').read()\n"
            "before = 'libunwind-ptrace' in maps()\n"
            "avail = c.RemoteProcess(int(sys.argv[1])).native_available\n"
            "print(before, avail, 'libunwind-ptrace' in maps())\n")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        r = subprocess.run([sys.executable, "-c", code, str(target.pid)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["False", "True", "True"], r.stdout
    finally:
        target.kill()
        target.wait()
