"""pyprof attach / top / dump on running processes started without pyprof
(docs/attach.md): real servers under load, pyprof's own way in, a real terminal
under tmux. Ground truth: the servers' own request log and output, the
client's count of requests, CPython's own APIs read in the target (hooks,
monitoring tools, allocators, threads), the kernel's view (/proc: caught
signals, tasks), the program's exit status."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from attach_work import expected
from conftest import start_tracer
from pyprof import _cprof
from pyprof.model.session import Session
from support import PROGRAMS, pyprof

HERE = PROGRAMS                         # tests/programs/: the programs run here
SERVERS = os.path.join(HERE, "attach_servers.py")
# the sampler's signals: SIGPROF (CPU mode) and the real-time ones (wall mode's)
SAMPLER_SIGNALS = 1 << (signal.SIGPROF - 1) | sum(1 << (n - 1) for n in range(signal.SIGRTMIN,
                                                                            signal.SIGRTMAX + 1))
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)




def _ptrace_forbidden():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return f.read().strip() == "3"
    except OSError:
        return False


pytestmark = pytest.mark.skipif(_ptrace_forbidden(),
                                reason="the kernel forbids ptrace (kernel.yama.ptrace_scope = 3)")


def caught_signals(pid) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(ln for ln in f if ln.startswith("SigCgt:")).split()[1], 16)


def tasks(pid) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def killed(p):
    """Kill a test's process; a listening one leaves its socket file (no exit
    hooks run): the test removes it."""
    if p.poll() is None:
        p.kill()
    p.wait()
    try:
        os.unlink(f"/tmp/pyprof-{os.geteuid()}/{p.pid}.sock")
    except OSError:
        pass


def wait_for(cond, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Server:
    """A server process of attach_servers.py, its output in files."""

    def __init__(self, kind, python, tmp_path):
        self.portfile = str(tmp_path / f"{kind}.port")
        self.out = open(tmp_path / f"{kind}.out", "w+")
        self.err = open(tmp_path / f"{kind}.err", "w+")
        self.proc = subprocess.Popen([python, SERVERS, kind, self.portfile],
                                     stdout=self.out, stderr=self.err,
                                     stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        wait_for(lambda: os.path.exists(self.portfile) or self.proc.poll() is not None,
                 30, "the server's port")
        assert self.proc.poll() is None, self.output()
        self.port = int(open(self.portfile).read())
        wait_for(self._answers, 30, "the server to answer")

    def _answers(self):
        try:
            self.state()
            return True
        except OSError:
            return False

    def get(self, path, timeout=30):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
            return r.read()

    def state(self):
        return json.loads(self.get("/state"))

    def output(self):
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read(), self.err.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(30)


class Load:
    """A client thread sending requests throughout; each request's times and result."""

    def __init__(self, server):
        self.server = server
        self.log = []               # (start, end, n, ok)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self.stopping.is_set() and len(self.log) < 200_000:
            n = 20000 + (i % 7) * 2000
            i += 1
            t0 = time.monotonic()
            try:
                ok = int(self.server.get(f"/work?n={n}")) == expected(n)
            except (OSError, ValueError):
                ok = False
            self.log.append((t0, time.monotonic(), n, ok))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(60)

    def within(self, a, b):
        """Requests that began after a and ended before b."""
        return [r for r in self.log if r[0] > a and r[1] < b]

    def touching(self, a, b):
        return [r for r in self.log if r[1] > a and r[0] < b]


def attach(pid, seconds, *args, out):
    """pyprof attach, -v: returns (result, when 'attached' was said, when it ended)."""
    proc = subprocess.Popen([sys.executable, "-m", "pyprof", "attach", str(pid), "-v",
                             "--duration", str(seconds), *args, "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    attached, lines = None, []
    for line in proc.stderr:
        lines.append(line)
        if attached is None and "attached to process" in line:
            attached = time.monotonic()
    proc.wait(60)
    return proc.returncode, "".join(lines), attached, time.monotonic()


def function_id(session, qualname):
    return next(fid for fid, f in session.functions.items() if f.qualname == qualname)


def sampled_weight(session, qualname):
    fid = function_id(session, qualname)
    return sum(c.count for (t, sid, state), c in session.samples.items()
               if any(f == fid for f, _ in session.stacks[sid].frames))


def check_trace(session, load, attached, ended):
    calls = session.function_totals()[function_id(session, "handler_work")].calls
    low = len(load.within(attached + 0.05, attached + 1.8))
    high = len(load.touching(attached - 1.0, ended))
    assert low <= calls <= high, (low, calls, high)
    assert low > 10


def check_sample(session, load, attached, ended):
    assert sampled_weight(session, "handler_work") >= 10


def check_native(session, load, attached, ended):
    assert session.info["sampling"]["mode"] == "wall"
    assert any(st.native and st.frames for st in session.stacks.values())
    # wall mode: the main thread's samples weigh the 2 s it was watched
    main = [t for t, th in session.threads.items() if th.name == "MainThread"]
    weight = sum(c.weight for (t, sid, state), c in session.samples.items() if t in main)
    assert 1.6e9 <= weight <= 2.4e9, weight
    # (the threaded server's handlers run in threads of a few ms each, which
    # wall mode sees late by design: docs/sampling.md; the asyncio one's in its loop)
    if session.meta["argv"][1] == "asyncio":
        assert sampled_weight(session, "handler_work") >= 10


def check_memory(session, load, attached, ended):
    fid = function_id(session, "make_blocks")
    got = sum(row.alloc_bytes for f, line, kind, stack, row in session.memory_rows if f == fid)
    # each request allocates n // 64 blocks of bytes(1000) in make_blocks (and a
    # list and ints for about 4% more)
    per = sys.getsizeof(bytes(1000))
    low = sum(n // 64 * per for *_, n, ok in load.within(attached + 0.05, attached + 1.8))
    high = sum(n // 64 * per for *_, n, ok in load.touching(attached - 1.0, ended))
    assert 0.5 * low <= got <= 1.5 * high, (low, got, high)


def check_lines(session, load, attached, ended):
    fid = function_id(session, "handler_work")
    first = session.functions[fid].line
    ret = first + 5                     # the return line of attach_work.handler_work
    hits = sum(c.hits for (t, f, line), c in session.lines.items() if f == fid and line == ret)
    low = len(load.within(attached + 0.05, attached + 1.8))
    high = len(load.touching(attached - 1.0, ended))
    assert low <= hits <= high, (low, hits, high)
    loop_hits = sum(c.hits for (t, f, line), c in session.lines.items()
                    if f == fid and line == first + 3)
    assert loop_hits >= 20000 * low


MODES = [("sample", ["--sample"], check_sample),
         ("trace", [], check_trace),
         ("memory-sample", ["--memory-sample", "16k"], check_memory),
         ("lines", ["--lines-of", "attach_work:handler_work"], check_lines)]
if "libunwind" in _cprof.FEATURES:
    MODES.insert(1, ("wall-native", ["--sample", "--wall", "--native"], check_native))


def settled_state(server, before, pid, tasks_before):
    """After a detach: the hooks, tools, allocators and threads as before attaching."""
    try:
        wait_for(lambda: server.state() == before, 10, "the state before attaching")
    except AssertionError:
        now = server.state()
        raise AssertionError({k: (before[k], now[k]) for k in before if before[k] != now[k]})
    wait_for(lambda: tasks(pid) == tasks_before, 10, "the threads before attaching")
    assert not caught_signals(pid) & SAMPLER_SIGNALS
    wait_for(lambda: not os.path.exists(f"/tmp/pyprof-{os.geteuid()}/{pid}.sock"), 10,
             "the injected channel's socket to go")


@pytest.mark.parametrize("kind", ["threaded", "asyncio"])
def test_attach_each_mode_twice_under_load(kind, tmp_path):
    # the threaded server runs the base interpreter, which cannot import pyprof
    # (its path is handed over); the asyncio one runs this venv's (pyprof importable)
    python = BASE_PYTHON if kind == "threaded" else sys.executable
    server = Server(kind, python, tmp_path)
    try:
        before = server.state()
        tasks_before = tasks(server.pid)
        assert not caught_signals(server.pid) & SAMPLER_SIGNALS
        with Load(server) as load:
            wait_for(lambda: len(load.log) > 20, 30, "the first requests")
            for name, args, check in MODES:
                for round_ in (1, 2):
                    out = tmp_path / f"{name}-{round_}.cprof"
                    rc, err, attached, ended = attach(server.pid, 2, *args, out=out)
                    assert rc == 0, err
                    assert attached is not None, err
                    assert server.proc.poll() is None, "the server died"
                    session = Session.load(str(out))
                    assert session.meta["pid"] == server.pid
                    check(session, load, attached, ended)
                    settled_state(server, before, server.pid, tasks_before)
        assert load.log and all(ok for *_, ok in load.log), \
            [r for r in load.log if not r[3]][:5]
    finally:
        status = server.stop()
    out, err = server.output()
    lines = out.splitlines()
    assert len(lines) == len(load.log)
    for line in lines:
        n, s = map(int, re.fullmatch(r"served n=(\d+) sum=(\d+)", line).groups())
        assert s == expected(n)
    assert err == "", err                   # no word from pyprof, no traceback, no sanitizer
    assert status in (0, -signal.SIGTERM)


# ------------------------------------------------------------------ the process ends meanwhile
EXITING = """
import sys, time
sys.path.insert(0, {here!r})
from attach_work import handler_work
print("start", flush=True)
end = time.monotonic() + 3.0
while time.monotonic() < end:
    handler_work(5000)
print("bye", flush=True)
sys.exit(3)
"""


def test_process_exiting_while_attached_writes_what_was_collected(tmp_path):
    script = tmp_path / "exiting.py"
    script.write_text(EXITING.format(here=HERE))
    proc = subprocess.Popen([BASE_PYTHON, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "start\n"
    out = tmp_path / "exit.cprof"
    r = pyprof("attach", proc.pid, "--duration", "30", "-o", out, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "exited" in r.stderr
    assert proc.wait(30) == 3                        # its own exit status
    assert proc.stdout.read() == "bye\n"
    assert proc.stderr.read() == ""
    session = Session.load(str(out))
    calls = session.function_totals()[function_id(session, "handler_work")].calls
    assert calls > 10


# ------------------------------------------------------------------ a loop running since before
SPINNER = """
import time
def spin():
    n = 0
    while True:
        n += 1                           # COUNT-LINE
        if n % 1000 == 0:
            time.sleep(0.001)            # SLEEP-LINE
print("up", flush=True)
spin()
"""


def started_loop(tmp_path, name, text):
    """A program (module `name`) running its loop once it printed "up"."""
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    p = subprocess.Popen([BASE_PYTHON, str(script)], stdout=subprocess.PIPE, text=True)
    if p.stdout.readline() != "up\n":
        killed(p)
        pytest.fail(f"{name}.py did not start its loop")
    return p


def test_lines_of_a_loop_running_since_before_attaching(tmp_path):
    p = started_loop(tmp_path, "spinner", SPINNER)
    try:
        out = tmp_path / "spin.cprof"
        r = pyprof("attach", p.pid, "--duration", "1", "--lines-of", "spinner:spin", "-o", out)
        assert r.returncode == 0, r.stderr
        session = Session.load(str(out))
        fid = function_id(session, "spin")
        hits = {line: c.hits for (t, f, line), c in session.lines.items() if f == fid}
        count, sleep = line_of(SPINNER, "COUNT-LINE"), line_of(SPINNER, "SLEEP-LINE")
        assert hits[count] > 10_000, hits
        # the program's own arithmetic: one sleep every 1000 increments
        assert abs(hits[sleep] - hits[count] / 1000) <= 1.01, hits
        assert p.poll() is None
    finally:
        killed(p)


OPCODE_SPINNER = """
import signal, sys, time
class Point:
    def __init__(self):
        self.x = 1
def said(signum, frame):
    # the frame the signal interrupted: is it left with opcode events on?
    print(frame.f_code.co_name, frame.f_trace_opcodes, flush=True)
signal.signal(signal.SIGUSR1, said)
def spin():
    n, p = 0, Point()
    while True:
        n += p.x                         # COUNT-LINE
        if n % 100_000 == 0:
            time.sleep(0.001)            # SLEEP-LINE
print("up", flush=True)
spin()
"""


def test_opcodes_of_a_loop_running_since_before_attaching(tmp_path):
    """attach -l --opcodes: the instructions of a frame that was running before
    pyprof came in are counted (3.11 switches a frame's opcode events on one
    frame at a time); every instruction of a straight line runs once per pass of
    it, so each has the line's hits; after detaching the frame is left as it
    was. attach --sample --opcodes reads the loop's instructions as specialized."""
    p = started_loop(tmp_path, "opspin", OPCODE_SPINNER)
    try:
        out = tmp_path / "traced.cprof"
        r = pyprof("attach", p.pid, "--duration", "1", "--lines-of", "opspin:spin", "--opcodes",
                   "-o", out)
        assert r.returncode == 0, r.stderr
        s = Session.load(str(out))
        fid = function_id(s, "spin")
        count = line_of(OPCODE_SPINNER, "COUNT-LINE")
        lines = {line: c.hits for (t, f, line), c in s.lines.items() if f == fid}
        insns = {}
        for (t, f, off, op, line, *_), c in s.instructions.items():
            if f == fid and line == count:
                insns[off] = insns.get(off, 0) + c.hits
        assert lines[count] > 10_000, lines
        assert len(insns) >= 4, insns                # loads, the add, the store
        # attached mid-line: its first pass may lack the instructions before that point
        assert all(lines[count] - 1 <= h <= lines[count] for h in insns.values()), (lines, insns)

        p.send_signal(signal.SIGUSR1)
        assert p.stdout.readline() == "spin False\n", "the frame kept its opcode events"

        out = tmp_path / "sampled.cprof"
        r = pyprof("attach", p.pid, "--duration", "1", "--sample", "--rate", "1000",
                   "--opcodes", "-o", out)
        assert r.returncode == 0, r.stderr
        from pyprof.analysis import opcodes
        loads = [i for i in opcodes.instructions(Session.load(str(out)))
                 if i.line == count and i.base == "LOAD_ATTR"]
        assert loads and sum(i.samples for i in loads) > 0, loads
        assert all(i.state == "specialized" for i in loads), loads
        assert p.poll() is None                      # the program runs on
    finally:
        killed(p)


# ------------------------------------------------------------------ errors, one line each
def one_error_line(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyprof: error: "), r.stderr
    return lines[0]


SLEEPER = "import time, sys\nprint('up', flush=True)\ntime.sleep({s})\nprint('done', flush=True)\n"
TICKER = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


@pytest.fixture
def sleeper(tmp_path):
    procs = []

    def start(seconds=30, python=BASE_PYTHON, ticking=False):
        code = TICKER if ticking else SLEEPER.format(s=seconds)
        p = subprocess.Popen([python, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "up\n"
        procs.append(p)
        return p
    yield start
    for p in procs:
        killed(p)


def test_no_such_process():
    p = subprocess.Popen(["true"])
    p.wait()
    line = one_error_line(pyprof("attach", p.pid, "-o", "x.cprof"))
    assert f"no such process: {p.pid}" in line
    assert "PID must be a process id" in one_error_line(pyprof("dump", "abc"))


def test_not_a_cpython():
    p = subprocess.Popen(["sleep", "30"])
    try:
        line = one_error_line(pyprof("dump", p.pid))
        assert "is not a CPython interpreter" in line
    finally:
        killed(p)


def other_python(minor_ok):
    """An installed CPython 3.X (X not this one's) that minor_ok accepts."""
    root = os.path.dirname(sys.base_prefix)
    for path in sorted(glob.glob(os.path.join(root, "3.*", "bin", "python3.*"))):
        m = re.search(r"python3\.(\d+)$", path)
        if m and int(m.group(1)) != sys.version_info[1] and minor_ok(int(m.group(1))):
            return path
    return None


def test_unsupported_version(sleeper):
    old = other_python(lambda minor: minor < 11)
    if old is None:
        pytest.skip("no CPython older than 3.11 installed beside this one")
    p = sleeper(python=old)
    line = one_error_line(pyprof("attach", p.pid, "-o", "x.cprof"))
    assert re.search(r"runs CPython 3\.\d+, which pyprof does not support", line), line


def test_pyprof_not_importable_by_the_target(sleeper):
    # another supported CPython: the pyprof handed over is built for this one
    other = other_python(lambda minor: 11 <= minor <= 13)
    if other is None:
        pytest.skip("no other CPython 3.11-3.13 installed beside this one")
    p = sleeper(python=other, ticking=True)
    line = one_error_line(pyprof("attach", p.pid, "-o", "x.cprof"))
    assert "pyprof is not importable by process" in line, line
    assert p.poll() is None


def test_already_traced(sleeper):
    p = sleeper()
    tracer = start_tracer(p.pid)
    try:
        line = one_error_line(pyprof("attach", p.pid, "--duration", "0.5", "-o", "x.cprof"))
        assert "is already being traced by process" in line and str(tracer.pid) in line, line
    finally:
        tracer.kill()
        tracer.wait()


def test_attach_needs_no_gdb(sleeper, tmp_path):
    p = sleeper(ticking=True, python=sys.executable)
    env = dict(os.environ, PATH=str(tmp_path))      # no gdb, no debugger of any kind
    out = tmp_path / "a.cprof"
    r = pyprof("attach", p.pid, "--duration", "0.3", "--sample", "-o", out, env=env)
    assert r.returncode == 0, r.stderr
    assert Session.load(str(out)).meta["pid"] == p.pid
    assert p.poll() is None


def test_target_not_answering(sleeper):
    # its main thread sleeps in C: the bootstrap waits for its next bytecode
    p = sleeper(seconds=5)
    t0 = time.monotonic()
    line = one_error_line(pyprof("attach", p.pid, "--timeout", "1.5", "-o", "x.cprof"))
    assert "did not run pyprof's bootstrap within 1.5 s" in line, line
    assert time.monotonic() - t0 < 10
    out, err = p.communicate(timeout=30)
    assert (p.returncode, out, err) == (0, "done\n", "")    # the late bootstrap did nothing
    assert not os.path.exists(f"/tmp/pyprof-{os.geteuid()}/{p.pid}.sock")
    assert not os.path.exists(f"/tmp/pyprof-{os.geteuid()}/{p.pid}.boot")
    assert not glob.glob(f"/tmp/pyprof-{os.geteuid()}/{p.pid}-*.boot.py")     # withdrawn


@pytest.mark.parametrize("scope,cap,says", [
    (3, True, "ptrace is disabled on this system (kernel.yama.ptrace_scope = 3"),
    (2, False, "kernel.yama.ptrace_scope = 2 lets only processes with CAP_SYS_PTRACE"),
    (1, False, "kernel.yama.ptrace_scope = 1 lets a process attach only to its own"),
    (None, False, "was not permitted (no CAP_SYS_PTRACE; in a container"),
])
def test_ptrace_refusals_say_why(monkeypatch, scope, cap, says):
    """Yama's ptrace_scope cannot be changed here: each refusal's line, from the
    values attach.py reads (/proc/sys/kernel/yama/ptrace_scope, CapEff)."""
    from pyprof.live import attach
    monkeypatch.setattr(attach, "_ptrace_scope", lambda: scope)
    monkeypatch.setattr(attach, "_has_cap_ptrace", lambda: cap)
    line = attach.check_ptrace(1, {"tracer": 0}, denied=True)
    assert says in line and "PYPROF_LISTEN=1" in line, line
    if scope in (2, 3):         # known before ptrace is tried
        assert attach.check_ptrace(1, {"tracer": 0}) == line


def _nobody():
    import pwd
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


# Debian's python3, which any user may run (this one may sit in root's home)
SYSTEM_PYTHON = "/usr/bin/python3"
SITE = os.path.dirname(os.path.dirname(os.path.abspath(_cprof.__file__)))


HOT_MAIN = """
import time
def hot_loop_function(end):
    s = 0
    while time.monotonic() < end:
        for i in range(20000):
            s += i * i
    return s
print("up", flush=True)
hot_loop_function(time.monotonic() + 60)
"""


def test_listen_dump_and_top_show_the_program_not_pyprofs_runner(tmp_path):
    """`python -m pyprof --listen`: dump (read from outside, and through the
    channel) and top's figures start at the program's <module>, as if it ran
    directly; the runner's frames (cli.py) and the channel's thread are not
    the program's."""
    from conftest import pyprof_own_functions
    from pyprof.live import attach
    pkg = os.path.dirname(os.path.abspath(_cprof.__file__))
    script = tmp_path / "hot.py"
    script.write_text(HOT_MAIN)
    p = subprocess.Popen([sys.executable, "-m", "pyprof", "--listen", str(script)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        wait_for(lambda: os.path.exists(f"/tmp/pyprof-{os.geteuid()}/{p.pid}.sock"), 10,
                 "the socket")
        for args in (("dump",), ("dump", "--channel")):
            r = pyprof(*args, p.pid)
            assert r.returncode == 0, r.stderr
            main = r.stdout.split(f"Thread {p.pid} (MainThread)")[1].split("\n\n")[0]
            frames = [ln.strip() for ln in main.splitlines()[1:] if ln.startswith("    ")]
            assert frames[-1].startswith(f"<module> ({script}:"), (args, r.stdout)
            assert any(f.startswith(f"hot_loop_function ({script}:") for f in frames), frames
            assert pkg not in r.stdout and "_run_listening" not in r.stdout, r.stdout
        client = attach.connect(p.pid)
        client.request("start", options={"mode": "sample", "wall": True})
        time.sleep(1.0)
        rows = client.request("stats")["functions"]             # what top shows
        assert {("hot_loop_function", str(script)), ("<module>", str(script))} <= {
            (r["name"], r["file"]) for r in rows}, rows
        assert [r for r in rows if r["file"].startswith(pkg)] == []
        snap = tmp_path / "snap.cprof"
        client.request("stop", path=str(snap))
        client.request("detach")
        client.close()
        s = Session.load(str(snap))
        assert pyprof_own_functions(s) == []
        roots = {(s.functions[st.frames[0][0]].name, s.functions[st.frames[0][0]].filename)
                 for st in s.stacks.values() if st.frames}
        assert roots == {("<module>", str(script))}, roots       # the channel's thread: none
        # top --remote, sampled from outside: the main thread's stacks start there too
        out = tmp_path / "remote.cprof"
        r = pyprof("top", "--remote", p.pid, "--duration", "1", "-o", out)
        assert r.returncode == 0, r.stderr
        s = Session.load(str(out))
        assert pyprof_own_functions(s) == []
        main = {t for t, th in s.threads.items() if th.name == "MainThread"}
        roots = {(s.functions[st.frames[0][0]].name, s.functions[st.frames[0][0]].filename)
                 for (t, sid, _), st in ((k, s.stacks[k[1]]) for k in s.samples)
                 if t in main and st.frames}
        assert roots == {("<module>", str(script))}, roots
    finally:
        killed(p)


@pytest.mark.skipif(os.geteuid() != 0 or _nobody() is None or not os.path.exists(SYSTEM_PYTHON),
                    reason="needs root and /usr/bin/python3, to run a client as another user")
def test_other_users_process(sleeper):
    p = sleeper()
    probe = (f"import sys\nsys.path.insert(0, {SITE!r})\nfrom pyprof.live import attach\n"
             f"from pyprof.errors import PyprofError\ntry:\n    attach.connect({p.pid})\n"
             f"except PyprofError as e:\n    print(e)\n")
    r = subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True, text=True,
                       user=_nobody(), cwd="/", timeout=60)
    assert r.stdout.strip() == (f"process {p.pid} belongs to root (uid 0), not to you: only "
                                f"its owner or root can attach"), (r.stdout, r.stderr)
    assert p.poll() is None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv, to run a client without CAP_SYS_PTRACE")
def test_ptrace_not_permitted(tmp_path):
    # a process that made itself non-dumpable can be traced only with CAP_SYS_PTRACE
    code = ("import ctypes, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
            "print('up', flush=True)\ntime.sleep(30)\n")
    p = subprocess.Popen([BASE_PYTHON, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        r = subprocess.run(["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace",
                            sys.executable, "-m", "pyprof", "dump", str(p.pid)],
                           capture_output=True, text=True, timeout=60)
        line = one_error_line(r)
        assert f"ptrace of process {p.pid} was not permitted (no CAP_SYS_PTRACE" in line, line
        assert "PYPROF_LISTEN=1" in line
        assert p.poll() is None
    finally:
        killed(p)


# ------------------------------------------------------------------ dump
DUMPED = """
import sys, threading, time
def sleeper():
    time.sleep(60)                       # SLEEP-LINE
def waiting_here(ev):
    ev.wait(60)                          # WAIT-LINE
threading.Thread(target=sleeper, name="napper", daemon=True).start()
print("up", flush=True)
waiting_here(threading.Event())
"""


def line_of(text, mark):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if mark in ln)


@pytest.mark.skipif("libunwind" not in _cprof.FEATURES,
                    reason="this build of pyprof lacks libunwind (apt-get install "
                           "libunwind-dev): dump --native has no native stacks")
def test_dump_prints_every_threads_stack(tmp_path):
    script = tmp_path / "dumped.py"
    script.write_text(DUMPED)
    # every thread waits in C: no bootstrap could run; with the channel open
    # from the start, none is needed
    p = subprocess.Popen([sys.executable, "-m", "pyprof", "--listen", str(script)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        time.sleep(0.3)
        # --channel: Python thread names and daemon flags (the read-only dump:
        # tests/test_remote_read.py)
        r = pyprof("dump", "--channel", p.pid, "--native")
        assert r.returncode == 0, r.stderr
        text = r.stdout
        assert f"Thread {p.pid} (MainThread): sleeping" in text, text
        assert f"waiting_here ({script}:{line_of(DUMPED, 'WAIT-LINE')})" in text, text
        assert f"sleeper ({script}:{line_of(DUMPED, 'SLEEP-LINE')})" in text, text
        assert re.search(r"Thread \d+ \(napper, daemon\): sleeping", text)
        assert "native:" in text and re.search(r"clock_nanosleep|nanosleep", text), text
        assert p.poll() is None
    finally:
        killed(p)


# ------------------------------------------------------------------ --listen, PYPROF_LISTEN
LISTENER = """
import os, sys, time
sys.path.insert(0, {here!r})
from attach_work import handler_work
print("up", flush=True)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    handler_work(2000)
    time.sleep(0.001)
print("bye", flush=True)
sys.exit(4)
"""


def test_listen_reaches_without_injection_and_stays(tmp_path):
    script = tmp_path / "listener.py"
    script.write_text(LISTENER.format(here=HERE, seconds=8))
    p = subprocess.Popen([sys.executable, "-m", "pyprof", "--listen", str(script)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        sock = f"/tmp/pyprof-{os.geteuid()}/{p.pid}.sock"
        wait_for(lambda: os.path.exists(sock), 10, "the socket")
        assert os.stat(os.path.dirname(sock)).st_mode & 0o777 == 0o700
        assert os.stat(sock).st_mode & 0o777 == 0o600
        for i in range(2):
            out = tmp_path / f"listen-{i}.cprof"
            r = pyprof("attach", p.pid, "--duration", "1", "--sample", "-v", "-o", out)
            assert r.returncode == 0, r.stderr
            assert "listens already: no injection" in r.stderr, r.stderr
            assert sampled_weight(Session.load(str(out)), "handler_work") > 0
            assert os.path.exists(sock)             # a listening channel stays
        out, err = p.communicate(timeout=30)
        assert (p.returncode, out, err) == (4, "bye\n", "")
        assert not os.path.exists(sock)
    finally:
        killed(p)


def test_protocol_snapshot_and_errors(tmp_path):
    """The channel's requests as docs/attach.md lists them, through attach.Client."""
    from pyprof.live import attach
    from pyprof.errors import PyprofError
    script = tmp_path / "listener.py"
    script.write_text(LISTENER.format(here=HERE, seconds=20))
    p = subprocess.Popen([sys.executable, "-m", "pyprof", "--listen", str(script)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        wait_for(lambda: os.path.exists(f"/tmp/pyprof-{os.geteuid()}/{p.pid}.sock"), 10,
                 "the socket")
        client = attach.connect(p.pid)
        assert client.hello["pid"] == p.pid and client.hello["persistent"] is True
        assert client.hello["argv"] == [str(script)]
        with pytest.raises(PyprofError, match="unknown command 'nope'"):
            client.request("nope")
        with pytest.raises(PyprofError, match="not profiling"):
            client.request("stop", path=str(tmp_path / "x.cprof"))
        client.request("start", options={"mode": "sample", "wall": True})
        with pytest.raises(PyprofError, match="profiling already"):
            client.request("start", options={"mode": "sample"})
        time.sleep(1.0)
        snap = tmp_path / "snap.cprof"
        client.request("snapshot", path=str(snap))
        first = sampled_weight(Session.load(str(snap)), "handler_work")
        assert first > 0
        time.sleep(1.0)
        stats = client.request("stats")
        assert {t["name"] for t in stats["threads"]} == {"MainThread"}
        assert 0.0 <= stats["gil_held"] <= 1.0
        assert any(r["name"] == "handler_work" for r in stats["functions"])
        end = tmp_path / "end.cprof"
        r = client.request("stop", path=str(end))
        assert r["released"] == {"signal": True, "allocators": True}
        assert sampled_weight(Session.load(str(end)), "handler_work") > first   # it went on
        assert client.request("detach")["ok"]
        client.close()
        assert p.poll() is None
    finally:
        killed(p)


@pytest.mark.skipif(os.geteuid() != 0 or _nobody() is None or not os.path.exists(SYSTEM_PYTHON),
                    reason="needs root and /usr/bin/python3, to connect as another user")
def test_channel_refuses_another_user(tmp_path):
    script = tmp_path / "listener.py"
    script.write_text(LISTENER.format(here=HERE, seconds=20))
    env = dict(os.environ, PYPROF_LISTEN="1")
    code = f"import pyprof, runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline() == "up\n"
        sock = f"/tmp/pyprof-{os.geteuid()}/{p.pid}.sock"
        wait_for(lambda: os.path.exists(sock), 10, "the socket")
        # open the file-system doors: SO_PEERCRED alone must still refuse
        os.chmod(os.path.dirname(sock), 0o711)
        os.chmod(sock, 0o666)
        probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(10)\n"
                 f"s.connect({sock!r})\n"
                 "try:\n"
                 "    s.sendall(b'{\"cmd\": \"hello\"}\\n')\n"
                 "    print(repr(s.recv(100)))\n"
                 "except (BrokenPipeError, ConnectionResetError):\n"
                 "    print(repr(b''))\n")
        r = subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True, text=True,
                           user=_nobody(), timeout=30, cwd="/")
        assert r.stdout.strip() == "b''", (r.stdout, r.stderr)   # closed, unanswered
        os.chmod(os.path.dirname(sock), 0o700)
        os.chmod(sock, 0o600)
        r = pyprof("dump", p.pid)
        assert r.returncode == 0 and "handler_work" in r.stdout or "<module>" in r.stdout
    finally:
        os.chmod(f"/tmp/pyprof-{os.geteuid()}", 0o700)
        killed(p)


# ------------------------------------------------------------------ top, in a real terminal
HOT = """
import threading, time
def hot_loop_function(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
def worker():
    while True:
        hot_loop_function(50000)
threading.Thread(target=worker, name="busy-worker", daemon=True).start()
print("up", flush=True)
while True:
    time.sleep(0.05)
"""

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (make deps installs it)")


class Tmux:
    def __init__(self, name, command):
        self.name = name
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "130", "-y", "40",
                        command], check=True)
        subprocess.run(["tmux", "resize-window", "-t", name, "-x", "130", "-y", "40"],
                       capture_output=True)

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait(self, pattern, timeout=20):
        return wait_for(lambda: re.search(pattern, self.screen(), re.M), timeout,
                        f"{pattern!r} on the screen:\n{self.screen()}")

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@needs_tmux
def test_top_in_a_terminal(tmp_path):
    script = tmp_path / "hot.py"
    script.write_text(HOT)
    p = subprocess.Popen([BASE_PYTHON, str(script)], stdout=subprocess.PIPE, text=True)
    term = None
    try:
        assert p.stdout.readline() == "up\n"
        tasks_before = tasks(p.pid)
        cmd = f"{sys.executable} -m pyprof top {p.pid}; echo TOP-EXIT=$?; sleep 60"
        term = Tmux(f"pyprof-top-{os.getpid()}", cmd)
        term.wait(r"hot_loop_function \(hot\.py:3\)")
        screen = term.screen()
        assert re.search(r"busy-worker \(\d+\)\s+\d+\.\d%", screen), screen
        assert "MainThread" in screen and "GIL held" in screen and "RSS" in screen
        # the hot function leads the own-time sort, holding the GIL most of the time
        rows = [ln for ln in screen.splitlines() if re.match(r"\s+\d+\.\d% ", ln)]
        assert "hot_loop_function" in rows[0], screen
        held = float(re.search(r"GIL held\s+([\d.]+)%", screen).group(1))
        assert held > 30, screen
        term.keys("T")
        term.wait(r"sort: TotalTime")
        term.keys("Tab")
        term.wait(r"^> (busy-worker|MainThread)")
        term.keys("a")
        term.wait(r"^> \(all threads\)")
        term.keys("p")
        term.wait(r"\[PAUSED\]")
        frozen = term.screen()
        time.sleep(1.5)
        assert term.screen() == frozen          # paused: nothing moves
        term.keys("p")
        term.wait(r"^pyprof top - pid")
        term.keys("q")
        term.wait(r"TOP-EXIT=0")
        wait_for(lambda: tasks(p.pid) == tasks_before, 10, "the threads before attaching")
        assert not caught_signals(p.pid) & SAMPLER_SIGNALS
        assert p.poll() is None
    finally:
        if term is not None:
            term.close()
        killed(p)


@needs_tmux
def test_live_runs_the_program_under_top(tmp_path):
    script = tmp_path / "hot.py"
    script.write_text(HOT)
    cmd = f"cd {tmp_path} && {sys.executable} -m pyprof --live hot.py; echo LIVE-EXIT=$?; sleep 60"
    term = Tmux(f"pyprof-live-{os.getpid()}", cmd)
    try:
        term.wait(r"hot_loop_function \(hot\.py:3\)", 30)
        assert "busy-worker" in term.screen()
        pid = int(re.search(r"pid (\d+)", term.screen()).group(1))
        term.keys("q")
        term.wait(r"LIVE-EXIT=0")
        # quitting stops the program as Ctrl-C would: its own output, then Python's
        # word on the KeyboardInterrupt; and its channel closed
        log = re.search(r"output is in (\S+)", term.screen()).group(1)
        text = open(log).read()
        os.unlink(log)
        assert text.startswith("up\nTraceback") and text.endswith("KeyboardInterrupt\n"), text
        assert re.search(r"exit status -2\)", term.screen()), term.screen()
        assert not os.path.exists(f"/tmp/pyprof-{os.geteuid()}/{pid}.sock")
    finally:
        term.close()


FIRST_THREAD_ENDS = """
import ctypes, threading, time
def worker():
    end = time.monotonic() + {seconds}
    while time.monotonic() < end:
        sum(range(1000))
    print("worker done", flush=True)
threading.Thread(target=worker).start()
print("up", flush=True)
ctypes.CDLL(None).pthread_exit(None)    # the first thread ends alone: a zombie leader
"""


def test_attach_when_the_first_thread_ended(tmp_path):
    """The process lives on in its other threads; its first thread's /proc
    entries (maps, memory) are gone: pyprof reaches it through a live thread
    (on 3.11 the worker stands in for the main thread that ended)."""
    p = subprocess.Popen([sys.executable, "-c", FIRST_THREAD_ENDS.format(seconds=6)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        wait_for(lambda: "Z" in open(f"/proc/{p.pid}/status").read().split("State:")[1][:4],
                 10, "the first thread to end")
        out = tmp_path / "z.cprof"
        r = pyprof("attach", p.pid, "--duration", "0.5", "--sample", "--wall", "-o", out)
        assert r.returncode == 0, r.stderr
        assert Session.load(str(out)).meta["pid"] == p.pid
        stdout, stderr = p.communicate(timeout=30)
        assert (p.returncode, stdout, stderr) == (0, "worker done\n", "")
    finally:
        killed(p)


MAIN_JOINS = """
import os, signal, threading, time
stop = threading.Event()
def worker():
    while not stop.is_set():
        sum(range(1000))
t = threading.Thread(target=worker)
t.start()
print("up", flush=True)
threading.Timer({seconds}, stop.set).start()
t.join()                            # the main thread waits in C all along
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(threading.current_thread().name))
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.05)
print("main thread still main:", got == ["MainThread"], flush=True)
"""


def test_attach_while_the_main_thread_joins(tmp_path):
    """Every version: a worker runs Python while the main thread joins it (on
    3.11 the worker stands in for the main thread, which alone runs pending
    calls there). Afterwards the main thread is the interpreter's main thread
    again: signal.signal works there and its handler runs there."""
    p = subprocess.Popen([sys.executable, "-c", MAIN_JOINS.format(seconds=5)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        out = tmp_path / "j.cprof"
        r = pyprof("attach", p.pid, "--duration", "0.5", "--sample", "-v", "-o", out)
        assert r.returncode == 0, r.stderr
        if sys.version_info < (3, 12):
            assert "runs the bootstrap in its place" in r.stderr, r.stderr
        assert sampled_weight(Session.load(str(out)), "worker") > 0
        stdout, stderr = p.communicate(timeout=30)
        assert (p.returncode, stdout, stderr) == (0, "main thread still main: True\n", "")
    finally:
        killed(p)


# ------------------------------------------------------------------ the interpreter's file mapped again
MAPS_OWN_LIBRARY = r"""
import ctypes, mmap, os, sys, time
# the interpreter's object (libpython, or the executable) mapped whole, read-only,
# below where the loader put it: as libelf does when a debugger-like library
# reads its debug information
first = {}
for line in open("/proc/self/maps"):
    parts = line.split()
    if len(parts) >= 6 and int(parts[2], 16) == 0:
        first.setdefault(parts[5], int(parts[0].split("-")[0], 16))
path = next((p for p in first if "libpython" in os.path.basename(p)),
            os.path.realpath(sys.executable))      # a static build: the program itself
base = first[path]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
hint = (base - size - (64 << 20)) & ~0xFFF
got = libc.mmap(hint, size, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
print("mapped", got == hint, flush=True)
while True:
    sum(range(1000)); time.sleep(0.001)
"""


def test_attach_past_a_whole_file_mapping_of_the_interpreter(tmp_path):
    """The program maps its own interpreter's file whole (one read-only mapping
    at offset 0, below the loaded one): attach still finds the loaded object."""
    proc = subprocess.Popen([sys.executable, "-c", MAPS_OWN_LIBRARY], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().split() == ["mapped", "True"]
        rc, err, attached, _ = attach(proc.pid, 0.5, "--sample", out=tmp_path / "a.cprof")
        assert rc == 0, err
        assert Session.load(str(tmp_path / "a.cprof")).meta["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()
