"""`pyprof attach` never harms its target (docs/attach.md): whatever happens —
a successful attach, a refused one (timeout, an unsupported version), a client
killed with SIGKILL at each step of the injection — the program sees nothing:
no error from an interrupted system call (EINTR, or ERESTART* leaking as
Errno 512-516), no signal, no exception, no thread left stopped or traced, no
change to which thread is its main one.

The targets (tests/programs/blocked_target.py, on the base interpreter of this test's
Python, which cannot import pyprof: the client hands its path over) block in
time.sleep, select, epoll, socket.accept, socket.recv, Lock.acquire,
Queue.get, subprocess.wait or os.waitpid, in the main thread or in a worker,
with another thread running Python or with every thread blocked. All nine
kinds run at once in each test (two cores: most of the time is waiting). The
ground truth is the program's own checks of each call's result, its exit
status and empty stderr, and the kernel's view (/proc: TracerPid, each
thread's state)."""
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from support import PROGRAMS, pyprof

HERE = PROGRAMS                         # tests/programs/: the programs run here
TARGET = os.path.join(HERE, "blocked_target.py")
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
KINDS = ("sleep", "select", "epoll", "accept", "recv", "lock", "queue", "subprocess",
         "waitpid")
FIFO_KINDS = ("select", "epoll", "lock", "queue", "subprocess", "waitpid")
STEPS = ("stopped", "queued", "swapped", "bootstrapped", "started")
SLEEP = 5.0             # the sleep kind: long enough to outlast a client (9 at once, 3.11 swaps)
PY311 = sys.version_info[:2] == (3, 11)


def _ptrace_forbidden():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except OSError:
        return None                     # no Yama: ptrace between one user's processes
    if scope >= 2 and os.geteuid() != 0:
        return f"kernel.yama.ptrace_scope = {scope}: ptrace needs CAP_SYS_PTRACE here"
    if scope == 3:
        return "kernel.yama.ptrace_scope = 3: ptrace is disabled on this kernel"
    if scope == 1 and os.geteuid() != 0:
        return ("kernel.yama.ptrace_scope = 1: only a process's ancestors may ptrace it, "
                "and pyprof attach is not the target's parent")
    return None


_WHY = _ptrace_forbidden()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def wait_for(cond, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def proc_status(path):
    with open(path) as f:
        return dict(ln.rstrip("\n").split(":\t", 1) for ln in f if ":\t" in ln)


def thread_states(pid):
    """{tid: (state letter, TracerPid)} of every thread of `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            tracer = int(proc_status(f"/proc/{pid}/task/{tid}/status")["TracerPid"])
        except (OSError, KeyError):
            continue                    # ended meanwhile
        out[int(tid)] = (state, tracer)
    return out


def socket_file(pid):
    return f"/tmp/pyprof-{os.geteuid()}/{pid}.sock"


class Target:
    """One blocked_target.py process, its output in files."""

    def __init__(self, kind, where, tmp_path, python=BASE_PYTHON, all_blocked=False):
        self.kind, self.where = kind, where
        self.dir = tmp_path / f"{kind}-{where}"
        self.dir.mkdir()
        self.conn = None
        self.out_path = self.dir / "out"
        self.err_path = self.dir / "err"
        args = [python, TARGET, kind, where, str(self.dir), "--sleep", str(SLEEP)]
        if all_blocked:
            args.append("--all-blocked")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, cwd=str(self.dir))
        self.pid = self.proc.pid
        self.tid = None
        self.before = None
        self.blocked_at = None

    def __str__(self):
        return f"{self.kind} {self.where} (pid {self.pid})"

    def lines(self):
        # complete lines only: a line being written may be read half-way ("blocked"
        # without its thread id)
        return self.out_path.read_text().split("\n")[:-1]

    def stderr(self):
        return self.err_path.read_text()

    def _line(self, word):
        for ln in self.lines():
            if ln.split()[:1] == [word]:
                return ln
        assert self.proc.poll() is None, (
            f"{self}: exited {self.proc.returncode} before blocking: {self.stderr()}")
        return None

    def wait_blocked(self):
        """Until the blocking thread sleeps in its call; records every thread's state."""
        if self.kind == "recv":
            wait_for(lambda: self._line("listening"), 20, f"{self} to listen")
            self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.conn.connect(str(self.dir / "sock"))
        line = wait_for(lambda: self._line("blocked"), 20, f"{self} to block")
        self.tid = int(line.split()[1])
        wait_for(lambda: thread_states(self.pid).get(self.tid, ("?",))[0] == "S", 10,
                 f"{self}: its thread {self.tid} asleep in the call")
        time.sleep(0.05)                # well inside the call
        self.blocked_at = time.monotonic()
        self.before = thread_states(self.pid)
        assert self.before[self.tid][0] == "S", self.before

    def check_threads(self):
        """No thread traced, stopped, or gone; the blocked one still asleep."""
        problems = []
        if self.kind == "sleep" and time.monotonic() - self.blocked_at > SLEEP - 0.3:
            return problems             # its call may have returned: nothing to compare
        if self.proc.poll() is not None:
            return [f"exited {self.proc.returncode} before its release: {self.stderr()}"]
        now = thread_states(self.pid)
        tracer = int(proc_status(f"/proc/{self.pid}/status")["TracerPid"])
        if tracer:
            problems.append(f"TracerPid {tracer}")
        for tid, (state, tpid) in sorted(now.items()):
            if state in "tT" or tpid:
                problems.append(f"thread {tid} state {state} TracerPid {tpid}")
        gone = set(self.before) - set(now)
        if gone:
            problems.append(f"threads gone: {sorted(gone)}")
        if self.tid in now and now[self.tid][0] != "S":
            problems.append(f"blocked thread {self.tid} now {now[self.tid][0]} (was S)")
        return problems

    def channel_gone(self, within):
        """pyprof's channel (its socket file, its thread) gone within `within` s."""
        end = time.monotonic() + within
        while True:
            if self.proc.poll() is not None:
                return []               # exited: finish() checks its socket file
            sock = os.path.exists(socket_file(self.pid))
            try:
                extra = sorted(set(thread_states(self.pid)) - set(self.before))
            except OSError:
                return []
            if not sock and not extra:
                return []
            if time.monotonic() > end:
                return [f"pyprof's channel still there after {within:g} s: socket file "
                        f"{'present' if sock else 'gone'}, threads not the program's {extra}"]
            time.sleep(0.05)

    def nothing_of_pyprof(self):
        """At its end, the program has no pyprof module or thread: the
        bootstrap did nothing (or was never queued, or was withdrawn)."""
        ps = []
        if "pyprof" in self.threads_line():
            ps.append(f"a pyprof thread at its end: {self.threads_line()}")
        mods = next((ln for ln in self.lines() if ln.startswith("pyprof-modules ")), "")
        if mods != "pyprof-modules 0":
            ps.append(f"pyprof was imported: {mods!r}")
        return ps

    def no_pyprof_thread(self):
        if "pyprof" in self.threads_line():
            return [f"a pyprof thread at its end: {self.threads_line()}"]
        return []

    def release(self):
        if self.kind in FIFO_KINDS:
            fd = os.open(str(self.dir / "fifo"), os.O_WRONLY | os.O_NONBLOCK)
            try:
                assert os.write(fd, b"x") == 1
            finally:
                os.close(fd)
        elif self.kind == "accept":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(self.dir / "sock"))
            s.sendall(b"hello")
            self.conn = s
        elif self.kind == "recv":
            self.conn.sendall(b"hello")

    def finish(self, timeout=30):
        """The program's verdict: a list of problems (empty: unharmed)."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return [f"hung: still running {timeout} s after its release; "
                    f"stdout {self.lines()}"]
        finally:
            if self.conn is not None:
                self.conn.close()
        problems = []
        lines = self.lines()
        if rc != 0:
            problems.append(f"exit status {rc}")
        if self.stderr():
            problems.append(f"stderr: {self.stderr().strip()}")
        for want in (f"ok {self.kind} {self.where}", f"ok main-thread {self.where}",
                     "signals ok", "done"):
            if not any(ln.startswith(want) for ln in lines):
                problems.append(f"no '{want}' line")
        if problems:
            problems.append(f"stdout: {lines}")
        if os.path.exists(socket_file(self.pid)):
            problems.append(f"{socket_file(self.pid)} left after the program exited")
        return problems

    def threads_line(self):
        return next((ln for ln in self.lines() if ln.startswith("threads ")), "")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        try:
            os.unlink(socket_file(self.pid))
        except OSError:
            pass


def start_targets(tmp_path, where, kinds=KINDS, **kw):
    targets = [Target(kind, where, tmp_path, **kw) for kind in kinds]
    try:
        for t in targets:
            t.wait_blocked()
    except BaseException:
        for t in targets:
            t.kill()
        raise
    return targets


def run_all(fn, targets):
    """fn(target) for every target at once; {target: result or exception}."""
    with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
        futures = {t: pool.submit(fn, t) for t in targets}
    out = {}
    for t, fut in futures.items():
        try:
            out[t] = fut.result()
        except Exception as e:          # noqa: BLE001 - reported per target
            out[t] = e
    return out


def report(problems):
    return "\n".join(f"{t}: {p}" for t, ps in problems.items() for p in ps)


def release_and_check(targets, problems, post_release=None, channel_within=None):
    """Check every thread now (before the release) and, with channel_within,
    that pyprof's channel is gone within that many seconds; release all; read
    the verdicts."""
    if channel_within is not None:
        for t, ps in run_all(lambda t: t.channel_gone(channel_within), targets).items():
            problems.setdefault(t, []).extend([repr(ps)] if isinstance(ps, Exception) else ps)
    for t in targets:
        problems.setdefault(t, []).extend(t.check_threads())
    for t in targets:
        try:
            t.release()
        except OSError as e:
            problems[t].append(f"could not release it: {e}")
    for t in targets:
        problems[t].extend(t.finish())
        if post_release:
            problems[t].extend(post_release(t))
    return {t: ps for t, ps in problems.items() if ps}


# ---------------------------------------------------------------- attach works
@pytest.mark.parametrize("mode", [(), ("--sample", "--wall", "--rate", "500")],
                         ids=["tracing", "wall-sampling"])
@pytest.mark.parametrize("where", ["main", "worker"])
def test_successful_attach_leaves_blocked_calls_alone(where, mode, tmp_path):
    """A full attach (1 s) to each blocked program: the capture is its; the
    program's blocked call returns as it would have. Wall sampling sends
    its signal (a real-time one) to every thread, blocked ones too: their
    calls must resume."""
    from pyprof.model.session import Session
    targets = start_targets(tmp_path, where)
    problems = {}
    try:
        def attach(t):
            out = tmp_path / f"{t.kind}-{t.where}.cprof"
            r = pyprof("attach", t.pid, "--duration", "1", *mode, "-o", out, timeout=90)
            ps = []
            if r.returncode != 0:
                ps.append(f"attach exited {r.returncode}: {r.stderr.strip()}")
            else:
                session = Session.load(str(out))
                if session.meta.get("pid") != t.pid:
                    ps.append(f"capture's pid {session.meta.get('pid')}, not {t.pid}")
            return ps
        for t, ps in run_all(attach, targets).items():
            problems[t] = [f"client: {ps!r}"] if isinstance(ps, Exception) else ps
        # an injected channel serves one client, then closes: its thread ends
        bad = release_and_check(targets, problems, Target.no_pyprof_thread, channel_within=5)
    finally:
        for t in targets:
            t.kill()
    assert not bad, "\n" + report(bad)


def test_successful_attach_venv_python(tmp_path):
    """The venv's python as the target (pyprof importable there: the target's
    own copy is used)."""
    from pyprof.model.session import Session
    (t,) = start_targets(tmp_path, "main", kinds=("select",), python=sys.executable)
    try:
        out = tmp_path / "venv.cprof"
        r = pyprof("attach", t.pid, "--duration", "1", "-o", out)
        assert r.returncode == 0, r.stderr
        assert Session.load(str(out)).meta["pid"] == t.pid
        bad = release_and_check([t], {}, Target.no_pyprof_thread, channel_within=5)
    finally:
        t.kill()
    assert not bad, "\n" + report(bad)


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("where", ["main", "worker"])
def test_timeout_refusal_leaves_target_alone(where, tmp_path):
    """Every thread blocked: nothing runs the bootstrap within --timeout 0.5.
    One line naming the timeout, exit 2; released later, the program runs the
    queued call past its deadline: it does nothing (no channel, no thread)."""
    targets = start_targets(tmp_path, where, all_blocked=True)
    problems = {}
    try:
        def attach(t):
            r = pyprof("attach", t.pid, "--duration", "1", "--timeout", "0.5",
                       "-o", tmp_path / f"{t.kind}-{t.where}.cprof", timeout=60)
            ps = []
            lines = r.stderr.strip().splitlines()
            if r.returncode != 2:
                ps.append(f"attach exited {r.returncode}, not 2: {r.stderr.strip()}")
            if len(lines) != 1 or "within" not in lines[0] or "0.5" not in lines[0]:
                ps.append(f"stderr is not one line naming the timeout: {r.stderr!r}")
            return ps
        for t, ps in run_all(attach, targets).items():
            problems[t] = [f"client: {ps!r}"] if isinstance(ps, Exception) else ps
        # the call was withdrawn, or runs after its deadline: nothing opened
        bad = release_and_check(targets, problems, Target.nothing_of_pyprof)
    finally:
        for t in targets:
            t.kill()
    assert not bad, "\n" + report(bad)


def _python310():
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    for v in ("3.10.13", "3.10"):
        exe = os.path.join(root, "versions", v, "bin", "python3.10")
        if os.access(exe, os.X_OK):
            return exe
    return None


PY310 = _python310()


@pytest.mark.skipif(PY310 is None, reason="no CPython 3.10 under pyenv to be refused")
@pytest.mark.parametrize("where", ["main", "worker"])
def test_version_refusal_leaves_target_alone(where, tmp_path):
    """CPython 3.10: refused by its version, in one line, exit 2; the program
    runs on unharmed."""
    targets = start_targets(tmp_path, where, kinds=("sleep", "select", "lock"), python=PY310)
    problems = {}
    try:
        def attach(t):
            r = pyprof("attach", t.pid, "--duration", "1",
                       "-o", tmp_path / f"{t.kind}.cprof", timeout=60)
            lines = r.stderr.strip().splitlines()
            ps = []
            if r.returncode != 2:
                ps.append(f"attach exited {r.returncode}, not 2: {r.stderr.strip()}")
            if len(lines) != 1 or "3.10" not in lines[0]:
                ps.append(f"stderr is not one line naming 3.10: {r.stderr!r}")
            return ps
        for t, ps in run_all(attach, targets).items():
            problems[t] = [f"client: {ps!r}"] if isinstance(ps, Exception) else ps
        bad = release_and_check(targets, problems, Target.nothing_of_pyprof)
    finally:
        for t in targets:
            t.kill()
    assert not bad, "\n" + report(bad)


# ---------------------------------------------------------------- a client killed
# the main-thread swap is 3.11's only, when the main thread is blocked in C
KILL_CASES = [(step, where) for step in STEPS for where in ("main", "worker")
              if step != "swapped" or (PY311 and where == "main")]


@pytest.mark.parametrize("step,where", KILL_CASES)
def test_client_killed_at_each_step(step, where, tmp_path):
    """PYPROF_ATTACH_KILL_AT=step: the client SIGKILLs itself at that step.
    Its ptrace stop ends with it (no thread left stopped or traced); released,
    each program completes every check with exit 0 and nothing on stderr.
    What stays of pyprof (docs/attach.md; attach.bootstrap_code): killed before
    the bootstrap ran (stopped, queued, swapped), nothing — the bootstrap does
    nothing once its client is gone; after it opened the channel
    (bootstrapped), the channel sees its client gone and closes (checked
    for the worker case); killed while profiling
    (started), the channel sees its client gone and closes at once."""
    targets = start_targets(tmp_path, where)
    problems = {}
    env = dict(os.environ, PYPROF_ATTACH_KILL_AT=step)
    try:
        def attach(t):
            r = pyprof("attach", t.pid, "--duration", "3",
                       "-o", tmp_path / f"{t.kind}-{t.where}.cprof", env=env, timeout=60)
            if r.returncode != -signal.SIGKILL:
                return [f"client exited {r.returncode}, not killed at '{step}': "
                        f"{r.stderr.strip()}"]
            return []
        for t, ps in run_all(attach, targets).items():
            problems[t] = [f"client: {ps!r}"] if isinstance(ps, Exception) else ps
        time.sleep(0.1)                 # the kernel's detach of the dead tracer
        # the channel notices its client gone within half a second of waiting
        within = {"started": 10, "bootstrapped": 10}
        post = Target.no_pyprof_thread if step in within else Target.nothing_of_pyprof
        bad = release_and_check(targets, problems, post, channel_within=within.get(step))
    finally:
        for t in targets:
            t.kill()
    assert not bad, "\n" + report(bad)
