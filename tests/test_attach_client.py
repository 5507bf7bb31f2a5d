"""pyprof attach / top / dump as a client (docs/attach.md): one client per
target, the client ended by a signal, forked targets, what dead processes
leave in the private directory, --async, and the errors of a process that
cannot be injected into. The targets open pyprof's channel at start
(PYPROF_LISTEN=1): no injection needed. Ground truth: the processes' own
pids and output, the files in /tmp/pyprof-UID, the captures written."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from pyprof.model.session import Session
from support import pyprof

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
RUN_DIR = f"/tmp/pyprof-{os.geteuid()}"
LISTEN_ENV = dict(os.environ, PYPROF_LISTEN="1")


def pyprof_in_background(*args):
    return subprocess.Popen([sys.executable, "-m", "pyprof", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def one_error_line(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyprof: error: "), r.stderr
    return lines[0]


def wait_for(cond, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def ended(p):
    """End a test's process; one killed leaves its socket file (no exit hooks
    run): removed here."""
    if p.poll() is None:
        p.kill()
    p.wait()
    try:
        os.unlink(f"{RUN_DIR}/{p.pid}.sock")
    except OSError:
        pass


def own_files(pid):
    """What pyprof keeps in the private directory for target `pid`."""
    return sorted(n for n in os.listdir(RUN_DIR)
                  if n.startswith(f"{pid}-") or n.startswith(f"{pid}."))


WORKER = """
import sys, time
import pyprof                           # PYPROF_LISTEN=1: the channel opens here
def busy_work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
print("up", flush=True)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    busy_work(20000)
    time.sleep(0.001)
print("bye", flush=True)
"""


@pytest.fixture
def listener():
    procs = []

    def start(seconds=60, code=WORKER):
        p = subprocess.Popen([sys.executable, "-c",
                              code.format(seconds=seconds)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=LISTEN_ENV)
        assert p.stdout.readline() == "up\n", p.stderr.read()
        wait_for(lambda: os.path.exists(f"{RUN_DIR}/{p.pid}.sock"), 10, "the socket")
        procs.append(p)
        return p
    yield start
    for p in procs:
        ended(p)


def attached(client):
    """Wait for a background `attach` to say it is attached; its line."""
    line = client.stderr.readline()
    assert "attached to process" in line, (line, client.stderr.read())
    return line


def sampled_weight(session, qualname):
    fids = {fid for fid, f in session.functions.items() if f.qualname == qualname}
    return sum(c.count for (t, sid, state), c in session.samples.items()
               if any(f in fids for f, _ in session.stacks[sid].frames))


# ------------------------------------------------------------------ one client at a time
def test_second_client_is_refused_at_once(listener, tmp_path):
    p = listener()
    first = pyprof_in_background("attach", p.pid, "--sample", "--duration", "6",
                                 "-o", tmp_path / "first.cprof")
    try:
        attached(first)
        # the read-only dump enters nothing: it reads beside an attached client
        r = pyprof("dump", p.pid)
        assert r.returncode == 0 and f"Thread {p.pid} (MainThread)" in r.stdout, (r.stdout,
                                                                                r.stderr)
        for args in (("dump", "--channel", p.pid),
                     ("attach", p.pid, "-o", tmp_path / "second.cprof"),
                     ("attach", p.pid, "-v", "-o", tmp_path / "second.cprof")):
            t0 = time.monotonic()
            line = one_error_line(pyprof(*args, "--timeout", "20"))
            assert line == (f"pyprof: error: another pyprof client is attached to process "
                            f"{p.pid} (pyprof process {first.pid}): wait for it to detach"), line
            assert time.monotonic() - t0 < 5            # not after --timeout
        assert not (tmp_path / "second.cprof").exists()
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert sampled_weight(Session.load(str(tmp_path / "first.cprof")), "busy_work") > 0
    finally:
        ended(first)
    # the first one gone, the next is served
    r = pyprof("dump", "--channel", p.pid)
    assert r.returncode == 0 and "busy_work" in r.stdout or "<module>" in r.stdout, r.stderr


def test_a_killed_client_does_not_block_the_next(listener, tmp_path):
    p = listener()
    first = pyprof_in_background("attach", p.pid, "--sample", "-o", tmp_path / "first.cprof")
    try:
        attached(first)
        first.kill()
        first.wait()
    finally:
        ended(first)
    r = pyprof("attach", p.pid, "--sample", "--duration", "1", "-o", tmp_path / "next.cprof")
    assert r.returncode == 0, r.stderr
    assert sampled_weight(Session.load(str(tmp_path / "next.cprof")), "busy_work") > 0
    assert p.poll() is None


# ------------------------------------------------------------------ ended by a signal
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_attach_ended_by_a_signal_writes_its_output(listener, tmp_path, signum):
    p = listener()
    out = tmp_path / "out.cprof"
    client = pyprof_in_background("attach", p.pid, "--sample", "-o", out)
    try:
        attached(client)
        time.sleep(1.5)
        client.send_signal(signum)
        _, err = client.communicate(timeout=60)
    finally:
        ended(client)
    name = signal.Signals(signum).name
    assert client.returncode == 0, err
    assert f"pyprof: {name}: stopping" in err and f"pyprof: wrote {out}; detached" in err, err
    assert sampled_weight(Session.load(str(out)), "busy_work") > 0
    # the process's own capture was converted and removed, not left behind
    assert own_files(p.pid) == [f"{p.pid}.lock", f"{p.pid}.sock"], own_files(p.pid)
    assert p.poll() is None


def test_timeout_command_ends_attach_with_its_output(listener, tmp_path):
    """What a user types: timeout(1) sends SIGTERM."""
    p = listener()
    out = tmp_path / "out.txt"
    r = subprocess.run(["timeout", "3", sys.executable, "-m", "pyprof", "attach", str(p.pid),
                        "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 124, r.stderr            # timeout's status: it had to signal
    assert "SIGTERM: stopping" in r.stderr and f"wrote {out}" in r.stderr, r.stderr
    assert "busy_work" in out.read_text()


# ------------------------------------------------------------------ forked children
FORKING = """
import os, sys, time
import pyprof                           # PYPROF_LISTEN=1: the channel opens here
def child_work():
    s = 0
    end = time.monotonic() + 60
    while time.monotonic() < end:
        for i in range(10000):
            s += i
        time.sleep(0.001)
pid = os.fork()
if pid == 0:
    print(os.getpid(), flush=True)
    child_work()
    os._exit(0)
print("parent", flush=True)
os.waitpid(pid, 0)
time.sleep(60)
"""


def test_dump_of_a_forked_child_names_its_own_main_thread(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", FORKING], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=LISTEN_ENV)
    child = None
    try:
        lines = {p.stdout.readline().strip() for _ in range(2)}
        lines.discard("parent")
        child = int(lines.pop())
        # each listens on its own socket
        wait_for(lambda: os.path.exists(f"{RUN_DIR}/{child}.sock"), 10, "the child's socket")
        assert os.path.exists(f"{RUN_DIR}/{p.pid}.sock")
        r = pyprof("dump", "--channel", child)         # through the child's own channel
        assert r.returncode == 0, r.stderr
        assert f"Process {child}:" in r.stdout
        head = next(ln for ln in r.stdout.splitlines() if ln.startswith("Thread "))
        assert head.startswith(f"Thread {child} (MainThread): "), r.stdout
        assert head.split(": ", 1)[1] in ("running", "sleeping"), r.stdout
        assert "child_work (<string>:" in r.stdout, r.stdout
        # the child ending (no exit hooks: os._exit, then killed) leaves the parent's socket
        os.kill(child, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{child}/stat")
                 or open(f"/proc/{child}/stat").read().rpartition(")")[2].split()[0] == "Z",
                 10, "the child to end")
        r = pyprof("dump", "--channel", p.pid)
        assert r.returncode == 0, r.stderr
        assert f"Thread {p.pid} (MainThread): sleeping" in r.stdout, r.stdout
    finally:
        ended(p)
        if child is not None:
            try:
                os.unlink(f"{RUN_DIR}/{child}.sock")
            except OSError:
                pass


# ------------------------------------------------------------------ stale files
def test_next_client_removes_what_dead_processes_left(listener, tmp_path):
    import fcntl
    p = listener()
    gone, gone_client, me = dead_pid(), dead_pid(), os.getpid()
    stale = [f"{gone}.sock", f"{gone}.boot", f"{gone}.lock",
             f"{gone}-{gone_client}.cprof", f"{gone}-{gone_client}.flush.cprof",
             f"{p.pid}-{gone_client}.cprof", f"{p.pid}-{gone_client}.flush.cprof.tmp.{gone}",
             f"{gone}-{me}.cprof"]                  # its client lives but holds no lock
    kept = [f"{p.pid}-{me}.cprof",                  # both alive
            f"{p.pid}-{gone_client}.cprof.tmp.{p.pid}",     # its writer is writing it
            "notes.txt", f"{gone}.sockx", f"x{gone}.sock"]   # not names pyprof gives
    held = f"{dead_pid()}"                           # a client holds this one's lock
    kept += [f"{held}.lock", f"{held}-{me}.flush.cprof"]
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(f"{RUN_DIR}/{gone}.sock")              # a socket whose process is dead
    sock.close()
    for name in stale + kept:
        if not os.path.exists(f"{RUN_DIR}/{name}"):
            open(f"{RUN_DIR}/{name}", "w").close()
    lock = os.open(f"{RUN_DIR}/{held}.lock", os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        # the directory is the user's: a client of a test beside this one may
        # remove the stale files first (then this one says nothing): made again
        for attempt in range(3):
            for name in stale:
                if not os.path.exists(f"{RUN_DIR}/{name}"):
                    open(f"{RUN_DIR}/{name}", "w").close()
            r = pyprof("dump", "--channel", p.pid, "-v")
            assert r.returncode == 0, r.stderr
            left = set(os.listdir(RUN_DIR))
            assert not left & set(stale), sorted(left & set(stale))
            assert set(kept) <= left, sorted(set(kept) - left)
            if "removed what ended processes left" in r.stderr:
                break
        assert "removed what ended processes left" in r.stderr, r.stderr
    finally:
        os.close(lock)
        for name in kept:
            try:
                os.unlink(f"{RUN_DIR}/{name}")
            except OSError:
                pass


# ------------------------------------------------------------------ --async
ASYNC_SERVER = """
import asyncio, sys
import pyprof                           # PYPROF_LISTEN=1: the channel opens here
def crunch(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
async def handle(reader, writer):
    n = int((await reader.readline()) or 0)
    await asyncio.sleep(0.03)           # alive across the sampler's looks at the tasks
    writer.write(b"%d\\n" % crunch(n))
    await writer.drain()
    writer.close()
async def ticker_loop():
    while True:
        crunch(20000)
        await asyncio.sleep(0.002)
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    asyncio.create_task(ticker_loop(), name="ticker")
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


@pytest.mark.parametrize("mode", [("--sample", "--wall"), ()])
def test_attach_async_names_the_tasks_of_a_running_loop(tmp_path, mode):
    p = subprocess.Popen([sys.executable, "-c", ASYNC_SERVER], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=LISTEN_ENV)
    try:
        port = int(p.stdout.readline())
        out = tmp_path / "async.cprof"
        client = pyprof_in_background("attach", p.pid, *mode, "--async", "--duration", "120",
                                      "-o", out)
        attached(client)
        for _ in range(20):                         # requests: a task each
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(b"30000\n")
                assert c.makefile().readline().strip().isdigit()
            time.sleep(0.02)
        client.send_signal(signal.SIGINT)           # Ctrl-C once all were answered, however
        _, err = client.communicate(timeout=60)     # long a loaded machine took
        assert client.returncode == 0, err
        session = Session.load(str(out))
        tasks = {(session.functions[t.fid].name,
                  session.functions[t.coro_fid].qualname if t.coro_fid is not None else None)
                 for t in session.tasks}
        assert ("<task ticker>", "ticker_loop") in tasks, tasks
        assert sum(coro == "handle" for _, coro in tasks) >= 10, tasks   # of 20 requests
        assert p.poll() is None
    finally:
        ended(p)


def test_attach_async_to_a_process_without_tasks_says_so(listener, tmp_path):
    p = listener()
    out = tmp_path / "plain.cprof"
    r = pyprof("attach", p.pid, "--sample", "--async", "--duration", "1", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "note: --async saw no asyncio task" in r.stderr, r.stderr
    assert sampled_weight(Session.load(str(out)), "busy_work") > 0


# ------------------------------------------------------------------ cannot inject
def reach_anyway(pid):
    return (f"to reach it anyway, start the program with PYPROF_LISTEN=1 in its environment "
            f"(or as 'python -m pyprof --listen script.py'), or read its stacks with the "
            f"read-only 'pyprof dump {pid}'")


def test_not_a_cpython_says_how_to_reach_it():
    p = subprocess.Popen(["sleep", "30"])
    try:
        line = one_error_line(pyprof("attach", p.pid, "-o", "x.cprof"))
        assert "is not a CPython interpreter" in line and line.endswith(
            "; " + reach_anyway(p.pid)), line
        # the read-only dump is the advice itself: it says what it found, no more
        line = one_error_line(pyprof("dump", p.pid))
        assert "is not a CPython interpreter" in line, line
    finally:
        ended(p)


def test_unsupported_version_offers_nothing_that_cannot_work():
    """pyprof cannot run in a CPython 3.10 at all: no PYPROF_LISTEN=1 advice."""
    root = os.path.dirname(sys.base_prefix)
    old = next((os.path.join(root, d, "bin", "python3.10") for d in sorted(os.listdir(root))
                if d.startswith("3.10")), None)
    if old is None or not os.path.exists(old):
        pytest.skip("no CPython 3.10 installed beside this one")
    p = subprocess.Popen([old, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        line = one_error_line(pyprof("dump", p.pid))
        assert "runs CPython 3.10, which pyprof does not support" in line, line
        assert "PYPROF_LISTEN" not in line
    finally:
        ended(p)


def _nobody():
    import pwd
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


@pytest.mark.skipif(os.geteuid() != 0 or _nobody() is None
                    or not os.path.exists("/usr/bin/python3"),
                    reason="needs root and /usr/bin/python3, to run a target as another user")
def test_another_users_process_without_a_channel_says_how_to_reach_it(tmp_path):
    # whatever stops the injection on this host (gdb unable to call, pyprof not
    # importable there, a main thread asleep in C), the line ends in the same advice
    p = subprocess.Popen(["/usr/bin/python3", "-c",
                          "import time; print('up', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True, user=_nobody(), cwd="/")
    try:
        assert p.stdout.readline() == "up\n"
        line = one_error_line(pyprof("attach", p.pid, "--timeout", "2",
                                     "-o", tmp_path / "x.cprof"))
        assert line.endswith("; " + reach_anyway(p.pid)), line
    finally:
        ended(p)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"),
                    reason="needs root and setpriv, to run a client without CAP_SYS_PTRACE")
def test_ptrace_not_permitted_says_how_to_reach_it():
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
        assert f"ptrace of process {p.pid} was not permitted" in line, line
        assert line.endswith("; " + reach_anyway(p.pid)), line
    finally:
        ended(p)
