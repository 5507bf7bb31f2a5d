"""CPU mode's timers (docs/sampling.md, "CPU timers"): a task-clock event per
thread reaches the rate asked, each sample still weighs its thread's CPU
since its previous one, new threads get their event as they start, a forked
child holds none, a program closing fds it did not open loses none of its
files; a kernel that refuses the events (here: a seccomp filter) gives
ITIMER_PROF and one note. A program's own SIGPROF and ITIMER_PROF under
them: tests/test_program_signals.py."""
import os
import platform
import signal
import threading
import time

import pytest

import pyprof
from pyprof import Session
from support import clean_env, run_pyprof, run_python, seconds_in


def _timer_here():
    p = pyprof.Profile(mode="sample")
    p.enable()
    p.disable()
    return p.sampling_timer


TIMER, WHY_NOT = _timer_here()
needs_task_clock = pytest.mark.skipif(
    TIMER != "task-clock", reason=f"the kernel refuses task-clock events here ({WHY_NOT})")


def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


@needs_task_clock
@pytest.mark.parametrize("rate", [1000, 4000])
def test_cpu_mode_reaches_the_rate_asked(rate):
    """ITIMER_PROF fires at the kernel's tick (about 250 Hz whatever is asked);
    the events fire at the thread's CPU-time period."""
    p = pyprof.Profile(mode="sample", rate=rate)
    p.enable()
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.6:
        spin(20_000)
    cpu = time.thread_time() - t0       # this thread's: pyprof's helper is not sampled
    p.disable()
    asked, got, measured = p.sampling_rates
    s = p.session()
    si = s.info["sampling"]
    assert si["timer"] == "task-clock" and s.info["hook"].endswith("(per-thread CPU-clock events)")
    assert asked == rate and got >= 0.8 * rate, si
    assert si["recorded"] >= 0.8 * rate * 0.6, si
    # the samples weigh the CPU they stand for: their sum is the thread's CPU
    weight = seconds_in(s, "test_cpu_mode_reaches_the_rate_asked")
    assert weight == pytest.approx(cpu, rel=0.05, abs=2 / rate), (weight, cpu)


A, B, C = (lambda: spin(5_000)), (lambda: spin(3_000)), (lambda: spin(2_000))


def split_a():
    A()


def split_b():
    B()


def split_c():
    C()


@needs_task_clock
def test_known_split_at_4khz_against_the_threads_own_clock():
    """A 50/30/20 split of calls of 50, 30 and 20 µs-scale: each function's
    share of the samples is its share of the thread's CPU clock, within 2
    points (thousands of samples; ITIMER_PROF would give a few hundred)."""
    spent = dict.fromkeys(("split_a", "split_b", "split_c"), 0.0)
    p = pyprof.Profile(mode="sample", rate=4000)
    p.enable()
    t_end = time.thread_time() + 1.2
    while time.thread_time() < t_end:
        for f in (split_a, split_b, split_c):
            t0 = time.thread_time()
            f()
            spent[f.__name__] += time.thread_time() - t0
    p.disable()
    s = p.session()
    got = {name: seconds_in(s, name) for name in spent}
    n = sum(c.count for c in s.samples.values())
    assert n >= 3000, s.info["sampling"]
    for name in spent:
        truth = 100 * spent[name] / sum(spent.values())
        share = 100 * got[name] / sum(got.values())
        assert abs(share - truth) < 2, (name, share, truth, got, spent)


@needs_task_clock
def test_short_threads_keep_their_cpu():
    """200 threads of about 2 ms of CPU each, one after the other, at 200 Hz
    (a 5 ms period): each opens its event as it starts (threading's start is
    wrapped), is sampled with a chance of its CPU over the period, and weighs
    one period when it is: together they keep their CPU (their own clocks)."""
    cpu = []
    lock = threading.Lock()

    def short():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.002:
            spin(200)
        with lock:
            cpu.append(time.thread_time())

    p = pyprof.Profile(mode="sample", rate=200)
    p.enable()
    for i in range(200):
        t = threading.Thread(target=short)
        t.start()
        t.join()
    p.disable()
    s = p.session()
    total = sum(cpu)
    got = seconds_in(s, "short")
    # 400 ms in 5 ms periods: ~80 samples; Poisson noise ~11 %
    assert got == pytest.approx(total, rel=0.35), (got, total, s.info["sampling"])
    threads = {t for (t, sid, _), c in s.samples.items()
               if any(s.functions[f].name == "short" for f, _ in s.stacks[sid].frames)}
    assert len(threads) >= 20, len(threads)


@needs_task_clock
def test_a_runs_samples_weigh_its_cpu_never_more():
    """A thread's samples in a run add up to the CPU it used under its event:
    its first weighs its CPU since the event opened, its last stack gets what
    it ran after its last sample. Each of 30 runs of 40 ms at 250 Hz (a 4 ms
    period, the default rate) stays within the CPU the thread used between
    enable() and the end of disable(), its own clock, and keeps nearly all of
    it (what one sample sees weighs the rest)."""
    for _ in range(30):
        p = pyprof.Profile(mode="sample", rate=250)
        c0 = time.thread_time()
        p.enable()
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.04:
            spin(200)
        p.disable()
        c1 = time.thread_time()
        s = p.session()
        weight = sum(c.weight for c in s.samples.values()) / 1e9
        assert 0.039 <= weight <= c1 - c0, (weight, c1 - c0, s.info["sampling"])


@needs_task_clock
def test_runs_shorter_than_an_interval_carry_their_cpu_to_the_next():
    """200 runs of one profiler, 3 ms of CPU each at 100 Hz (a 10 ms period),
    then one of 25 ms (surely sampled): a run without a sample passes its CPU
    to the thread's next sample, so the samples keep the calls' CPU, and weigh
    no more than the runs' CPU (the calls' and pyprof's start and stop around
    them)."""
    p = pyprof.Profile(mode="sample", rate=100)
    spent = 0.0

    def call(seconds):
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            spin(200)

    runs = 0.0                  # the thread's CPU from enable() to the end of disable()
    for k in range(201):
        c0 = time.thread_time()
        p.enable()
        t0 = time.thread_time()
        call(0.003 if k < 200 else 0.025)   # the last, long: its samples take the rest
        spent += time.thread_time() - t0
        p.disable()
        runs += time.thread_time() - c0
    s = p.session()
    got = sum(c.weight for c in s.samples.values()) / 1e9
    # all of it: the calls, and the few lines around them (a run's carried CPU
    # goes to its thread's next sample, wherever that falls)
    assert spent - 0.002 <= got <= runs, (got, spent, runs)
    assert seconds_in(s, "call") >= 0.8 * spent, (seconds_in(s, "call"), spent)


@needs_task_clock
def test_a_thread_threading_did_not_start_is_found_by_the_helper():
    """_thread.start_new_thread passes threading's wrapper by: the helper finds
    the thread in /proc/self/task within tens of ms and gives it its event;
    its CPU after that is sampled."""
    import _thread
    done = threading.Lock()
    done.acquire()
    spent = []

    def other():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.4:
            spin(2000)
        spent.append(time.thread_time())
        done.release()

    p = pyprof.Profile(mode="sample", rate=1000)
    p.enable()
    _thread.start_new_thread(other, ())
    done.acquire()
    p.disable()
    s = p.session()
    got = seconds_in(s, "other")
    # what it ran before the helper's next look (every 10 ms, 100 ms at most) is not sampled
    assert spent[0] - 0.15 <= got <= spent[0] * 1.05 + 0.002, (got, spent, s.info["sampling"])


def _queued():
    """Signals queued for this user (SigQ's first number)."""
    with open("/proc/self/status") as f:
        return int(next(ln for ln in f if ln.startswith("SigQ:")).split()[1].split("/")[0])


@needs_task_clock
def test_a_thread_that_blocks_the_signal_has_a_block_queued_at_most():
    """A real-time signal queues one entry per overflow (past RLIMIT_SIGPENDING
    the kernel would send SIGIO, which kills): a thread that blocks it for
    3,000 periods has at most a block of 8 queued; unblocked, its CPU
    meanwhile lands on its next sample."""
    rt = list(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))
    out = {}

    def blocked_worker():
        t0 = time.thread_time()
        signal.pthread_sigmask(signal.SIG_BLOCK, rt)
        while time.thread_time() - t0 < 0.3:
            spin(2000)
        out["queued"] = _queued()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, rt)
        while time.thread_time() - t0 < 0.35:
            spin(2000)
        out["cpu"] = time.thread_time()

    base = _queued()
    p = pyprof.Profile(mode="sample", rate=10000)
    p.enable()
    t = threading.Thread(target=blocked_worker)
    t.start()
    t.join()
    p.disable()
    assert out["queued"] - base <= 8 + 2, (out, base)
    got = seconds_in(p.session(), "blocked_worker")
    assert got == pytest.approx(out["cpu"], rel=0.1), (got, out)


def _perf_fds():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]":
                out.append(int(fd))
        except OSError:
            pass
    return out


@needs_task_clock
def test_events_are_closed_at_stop_and_in_a_forked_child():
    """One event per thread while sampling; none after stop (a closed event
    sends nothing), none in a forked child (its fds would keep the parent's
    events alive, and signalling, past the parent's stop)."""
    before = _perf_fds()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    p = pyprof.Profile(mode="sample", rate=1000)
    p.enable()
    try:
        during = _perf_fds()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.write(w, repr(_perf_fds()).encode())
            os._exit(0)
        os.close(w)
        child = os.read(r, 4096).decode()
        os.close(r)
        os.waitpid(pid, 0)
        spin(200_000)                           # the parent's events go on after the fork
    finally:
        p.disable()
        stop.set()
        t.join()
    assert len(during) - len(before) >= 2, (before, during)     # main and the waiting thread
    assert child == "[]", child
    assert _perf_fds() == before
    assert p.session().info["sampling"]["recorded"] > 0


@needs_task_clock
def test_a_program_closing_the_events_loses_none_of_its_files(tmp_path):
    """A program may close every fd it did not open (a daemon does) and open
    files that get those numbers: pyprof never closes nor sends an ioctl to
    them, and gives the threads new events (the helper's next full look)."""
    p = pyprof.Profile(mode="sample", rate=1000)
    p.enable()
    try:
        ours = _perf_fds()
        for fd in ours:
            os.close(fd)
        files = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(len(ours))]
        assert set(files) & set(ours)                  # the numbers are the program's now
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.4:
            spin(2000)
        again = _perf_fds()
    finally:
        p.disable()
    for fd in files:
        os.write(fd, b"still mine")                    # open, and a file: not an event
        os.close(fd)
    assert again, "no event opened again"
    assert seconds_in(p.session(), "spin") > 0.15, p.session().info["sampling"]


# A seccomp filter that makes perf_event_open fail with EACCES, then the
# command line after it (filters survive exec): a kernel that refuses the
# events, as a container's default profile or perf_event_paranoid can.
SECCOMP = r"""
import ctypes, os, struct, sys
NR = {"x86_64": 298, "aarch64": 241}[os.uname().machine]
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
ALLOW, ERRNO = 0x7fff0000, 0x00050000
prog = [(BPF_LD_W_ABS, 0, 0, 0),                  # seccomp_data.nr
        (BPF_JEQ_K, 0, 1, NR),
        (BPF_RET_K, 0, 0, ERRNO | 13),             # EACCES
        (BPF_RET_K, 0, 0, ALLOW)]
buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
fp = Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
assert libc.prctl(38, 1, 0, 0, 0) == 0                   # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(fp), 0, 0) == 0, ctypes.get_errno()   # SECCOMP_MODE_FILTER
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""

BUSY = """
import time
def work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
t0 = time.process_time()
while time.process_time() - t0 < 0.6:
    work(20_000)
print("done")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="the test's seccomp filter knows x86_64's and aarch64's numbers")
def test_a_kernel_that_refuses_the_events_gives_itimer_and_one_note(tmp_path):
    (tmp_path / "refuse.py").write_text(SECCOMP)
    (tmp_path / "busy.py").write_text(BUSY)
    r = run_python(["refuse.py", "-m", "pyprof", "--sample", "--rate", "1000", "-o", "out.cprof",
                    "busy.py"], tmp_path, env=clean_env())
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("pyprof: note: no per-thread CPU-clock events here "
                               "(perf_event_open: Permission denied"), r.stderr
    assert "--cpu sampled on ITIMER_PROF instead, at " in lines[0], r.stderr
    s = Session.load(tmp_path / "out.cprof")
    si = s.info["sampling"]
    assert si["timer"] == "itimer" and si["timer_fallback"].startswith("perf_event_open:"), si
    assert s.info["hook"] == "SIGPROF (ITIMER_PROF, process CPU time)"
    assert seconds_in(s, "work") > 0.3, si

    # asked for by name: one line, exit 2
    r = run_python(["refuse.py", "-m", "pyprof", "--sample", "--cpu-timer", "task-clock",
                    "busy.py"], tmp_path, env=clean_env())
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "no per-thread CPU-clock events here" in r.stderr, \
        r.stderr


@pytest.mark.parametrize("rate", ["20000", "0.5"])
def test_a_rate_out_of_range_is_one_line(tmp_path, rate):
    (tmp_path / "busy.py").write_text(BUSY)
    r = run_pyprof(["--sample", "--rate", rate, "busy.py"], tmp_path, env=clean_env())
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr == f"pyprof: error: --rate must be in [1, 10000] Hz, not {float(rate):g}\n"


def test_itimer_is_there_when_asked_for():
    p = pyprof.Profile(mode="sample", rate=1000, cpu_timer="itimer")
    p.enable()
    spin(300_000)
    p.disable()
    s = p.session()
    assert p.sampling_timer == ("itimer", "")
    assert s.info["sampling"]["timer"] == "itimer"
    assert s.info["hook"] == "SIGPROF (ITIMER_PROF, process CPU time)"
    assert pyprof.Profile(mode="sample", wall=True).sampling_timer is None
