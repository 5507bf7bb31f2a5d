"""A program's own signals under the sampler: wall mode ticks on a real-time
signal of its own, so a program's SIGPROF handler, ITIMER_PROF, SIGALRM and
signal.pause() behave as without pyprof (docs/sampling.md, "Wall mode's
signal"). CPython's own test_signal under every mode: test_cpython_suite.py."""
import signal
import textwrap

import pytest

import pyprof
from pyprof import Session
from support import clean_env, run_pyprof, run_python, seconds_in


def _run(tmp_path, code, *args, mode="--wall"):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(code))
    r = run_pyprof(["--sample", mode, "--rate", "1000", *args, "-o", "out.cprof",
                    str(script)], tmp_path, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert "replaced" not in r.stderr, r.stderr
    return r.stdout.split("\n"), Session.load(tmp_path / "out.cprof")


OWN_SIGPROF = """
    import os, signal, threading, time

    got = 0

    def on_prof(signum, frame):
        global got
        got += 1

    def work(n):
        s = 0
        for i in range(n):
            s += i * i
        return s

    stop = threading.Event()

    def sleep_until_stopped():
        while not stop.is_set():
            time.sleep(0.01)

    sleeper = threading.Thread(target=sleep_until_stopped)
    sleeper.start()
    signal.signal(signal.SIGPROF, on_prof)
    sent = 0
    main = threading.main_thread().ident
    for i in range(300):
        if i % 3 == 0:
            os.kill(os.getpid(), signal.SIGPROF)
        elif i % 3 == 1:
            signal.pthread_kill(main, signal.SIGPROF)
        else:
            signal.pthread_kill(sleeper.ident, signal.SIGPROF)
        sent += 1
        deadline = time.monotonic() + 30
        while got < sent and time.monotonic() < deadline:
            work(1000)                  # its handler runs between bytecodes
    work(300_000)                       # ticks meanwhile would show as more
    print("own", sent, got)

    # its own profiling timer: SIGPROF per 50 ms of the process's CPU time
    got = 0
    c0 = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, 0.05, 0.05)
    while time.process_time() - c0 < 0.5:
        work(20_000)
    interval = signal.getitimer(signal.ITIMER_PROF)[1]
    signal.setitimer(signal.ITIMER_PROF, 0)
    cpu = time.process_time() - c0
    print("itimer", got, cpu, interval)
    stop.set()
    sleeper.join()
"""


def _cpu_timer():
    p = pyprof.Profile(mode="sample")
    p.enable()
    p.disable()
    return p.sampling_timer


@pytest.mark.parametrize("mode", ["--wall", "--cpu"])
def test_own_sigprof_handler_and_profiling_timer_beside_the_sampler(tmp_path, mode):
    """The program's SIGPROF handler gets exactly the signals it sends itself
    (to the process, to its main thread, to another thread), and its own
    ITIMER_PROF no more than the CPU time gives; the capture has its work.
    Before, the wall ticks (SIGPROF) went to its handler. CPU mode on
    task-clock events ticks on the same real-time signal as wall mode
    (docs/sampling.md, "CPU timers")."""
    if mode == "--cpu" and _cpu_timer()[0] != "task-clock":
        pytest.skip(f"the kernel refuses task-clock events here ({_cpu_timer()[1]})")
    out, s = _run(tmp_path, OWN_SIGPROF, mode=mode)
    own = next(ln for ln in out if ln.startswith("own")).split()
    assert own[1] == own[2] == "300", out
    itimer = next(ln for ln in out if ln.startswith("itimer")).split()
    got, cpu, interval = int(itimer[1]), float(itimer[2]), float(itimer[3])
    assert interval == pytest.approx(0.05), out              # not touched by pyprof
    assert 1 <= got <= cpu / 0.05 + 2, out
    assert seconds_in(s, "work") > (0.3 if mode == "--cpu" else 0), s.info["sampling"]
    assert s.info["hook"].startswith("SIGRTMAX"), s.info["hook"]
    assert s.info["hook"].endswith("(per-thread CPU-clock events)" if mode == "--cpu"
                                   else "(per-thread wall-clock timers)"), s.info["hook"]
    assert s.info["sampling"]["timer"] == ("task-clock" if mode == "--cpu" else "wall-clock")
    assert s.info["sampling"]["handler_replaced"] is False


PAUSE = """
    import signal, time

    hit = []
    signal.signal(signal.SIGALRM, lambda *a: hit.append(time.monotonic()))

    def idle():
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        signal.pause()
        return time.monotonic() - t0

    def work(n):
        return sum(i * i for i in range(n))

    work(200_000)
    took = idle()
    print("pause", len(hit), took)

    def boom(*a):
        raise ValueError("from the handler")

    signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        signal.pause()
    except ValueError as e:
        print("raised", e)
"""


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_pause_is_ended_by_the_programs_signal_not_a_tick(tmp_path, native):
    """`setitimer(ITIMER_REAL, 0.3); signal.pause()` returns after the
    SIGALRM handler ran, not at the first tick; an exception raised by the
    handler comes out of pause(); the time waited is charged where it waited."""
    if native and "libunwind" not in pyprof._cprof.FEATURES:
        pytest.skip("this build of pyprof lacks libunwind (libunwind-dev)")
    out, s = _run(tmp_path, PAUSE, *(["--native"] if native else []))
    line = next(ln for ln in out if ln.startswith("pause")).split()
    assert line[1] == "1" and float(line[2]) >= 0.25, out
    assert "raised from the handler" in out, out
    assert seconds_in(s, "idle") >= 0.5 * float(line[2]), (out, s.info["sampling"])


def test_pause_replaced_only_while_wall_sampling():
    orig = signal.pause
    p = pyprof.Profile(mode="sample", wall=True, rate=100)
    p.enable()
    try:
        assert signal.pause is not orig and signal.pause.__name__ == "pause"
    finally:
        p.disable()
    assert signal.pause is orig
    q = pyprof.Profile(mode="sample", rate=100)
    q.enable()
    try:
        assert signal.pause is orig
    finally:
        q.disable()


SIGNALS_SEEN = """
    import signal, sys
    import pyprof

    def caught():
        with open("/proc/self/status") as f:
            return int(next(ln for ln in f if ln.startswith("SigCgt:")).split()[1], 16)

    def bit(sig):
        return 1 << (int(sig) - 1)

    prof_handler = signal.getsignal(signal.SIGPROF)
    if len(sys.argv) > 1:               # the program's own handler on SIGRTMAX
        signal.signal(signal.SIGRTMAX, lambda *a: None)
    signal.signal(signal.SIGPROF, lambda *a: None)      # a program's own: allowed in wall mode
    signal.setitimer(signal.ITIMER_PROF, 10)
    p = pyprof.Profile(mode="sample", wall=True, rate=200)
    p.enable()
    sum(i * i for i in range(200_000))
    theirs = signal.getsignal(signal.SIGPROF)
    during = caught()
    p.disable()
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.signal(signal.SIGPROF, prof_handler)
    print(p.session().info["hook"])
    print(bool(during & bit(signal.SIGRTMAX)), bool(during & bit(signal.SIGRTMAX - 1)))
    print(theirs.__name__, p.sampling_replaced)
    import time
    from pyprof import _cprof
    for _ in range(400):                # a tick still pending lands at once
        if _cprof._release()["signal"]:
            break
        time.sleep(0.005)
    now = caught()
    print(_cprof._release()["signal"], bool(now & bit(signal.SIGRTMAX)),
          bool(now & bit(signal.SIGRTMAX - 1)), bool(now & bit(signal.SIGPROF)))
"""


@pytest.mark.parametrize("taken", [False, True], ids=["free", "rtmax-taken"])
def test_wall_mode_takes_a_free_realtime_signal(tmp_path, taken):
    """Wall mode starts beside a program's own SIGPROF handler and
    ITIMER_PROF, takes the highest real-time signal the program leaves
    alone, names it in the capture, and gives it back on release."""
    script = tmp_path / "seen.py"
    script.write_text(textwrap.dedent(SIGNALS_SEEN))
    r = run_python([script, *(["taken"] if taken else [])], tmp_path, env=clean_env())
    assert r.returncode == 0, r.stderr
    hook, rt, theirs, released = r.stdout.splitlines()
    want = "SIGRTMAX-1" if taken else "SIGRTMAX"
    assert hook == f"{want} (per-thread wall-clock timers)", r.stdout
    assert rt == ("True True" if taken else "True False"), r.stdout
    assert theirs == "<lambda> False", r.stdout
    # given back: only the program's own SIGRTMAX handler is left
    assert released == f"True {taken} False False", r.stdout


RT_TAKERS = r"""
import signal, sys, threading, time
import pyprof

RT = signal.SIGRTMAX
how = sys.argv[1]
got = []
ready = threading.Event()
stop = threading.Event()

def sigwaiter():
    # blocks RT to take it with sigwait, and waits in it all along (the
    # kernel unblocks RT for the wait: /proc's SigBlk does not show it then)
    signal.pthread_sigmask(signal.SIG_BLOCK, {RT})
    ready.set()
    while not stop.is_set():
        got.append(signal.sigwait({RT}))

def poller():
    # keeps RT blocked while it works, and polls for it now and then
    signal.pthread_sigmask(signal.SIG_BLOCK, {RT})
    ready.set()
    while not stop.is_set():
        sum(i * i for i in range(2000))
        if signal.sigtimedwait({RT}, 0) is not None:
            got.append(RT)

t = threading.Thread(target=sigwaiter if how == "sigwait" else poller, name=how)
t.start()
ready.wait()
time.sleep(0.05)                        # the sigwaiter is in its wait
p = pyprof.Profile(mode="sample", wall=True, rate=1000)
p.enable()
end = time.perf_counter() + 0.4
while time.perf_counter() < end:
    sum(i * i for i in range(1000))
p.disable()
stop.set()
if how == "sigwait":
    signal.pthread_kill(t.ident, RT)    # the program's own signal, to end the wait
t.join()
s = p.session()
print(s.info["hook"])
print(len(got), any(s.threads[k].name == how for (k, _, _) in s.samples))
"""


@pytest.mark.parametrize("how", ["sigwait", "poll"])
def test_wall_mode_leaves_the_signals_threads_take_themselves(tmp_path, how):
    """A thread that blocks a real-time signal to take it itself (sigwait,
    sigtimedwait, a signalfd) gets no ticks on it: wall mode reads every
    thread's blocked set, and the set a thread waits for in sigwait (which the
    kernel unblocks for the wait, so /proc does not show it blocked), and takes
    the next free signal. The thread receives only what the program sends it
    (a poller took wall ticks as its own: 2 in 0.4 s), and it is sampled."""
    script = tmp_path / "takers.py"
    script.write_text(RT_TAKERS)
    r = run_python([script, how], tmp_path, env=clean_env())
    assert r.returncode == 0, r.stderr
    hook, got = r.stdout.splitlines()
    assert hook == "SIGRTMAX-1 (per-thread wall-clock timers)", r.stdout
    assert got == ("1 True" if how == "sigwait" else "0 True"), r.stdout


SHIELDED = r"""
import faulthandler, signal, sys, threading, time
import pyprof

ready, stop = threading.Event(), threading.Event()

def shielded():
    # as a C library's worker does: no signal ever reaches this thread
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    ready.set()
    while not stop.is_set():
        sum(i * i for i in range(2000))

faulthandler.dump_traceback_later(600)      # its watchdog thread blocks every signal too
t = threading.Thread(target=shielded, name="shielded")
t.start()
ready.wait()
p = pyprof.Profile(mode="sample", wall=True, rate=1000)
p.enable()
end = time.perf_counter() + 0.3
while time.perf_counter() < end:
    sum(i * i for i in range(1000))
p.disable()
stop.set()
t.join()
faulthandler.cancel_dump_traceback_later()
s = p.session()
print(s.info["hook"])
print(sorted({s.threads[k].name for (k, _, _) in s.samples}))
"""


def test_threads_that_block_every_signal_leave_wall_mode_its_signal(tmp_path):
    """A thread that blocks every signal (faulthandler's watchdog, which
    pytest's faulthandler_timeout starts for each test; a C library's worker)
    takes none in particular: wall mode takes SIGRTMAX beside it (it found no
    free signal before), and samples every thread by its own timer."""
    script = tmp_path / "shielded.py"
    script.write_text(SHIELDED)
    r = run_python([script], tmp_path, env=clean_env())
    assert r.returncode == 0, r.stderr
    hook, names = r.stdout.splitlines()
    assert hook == "SIGRTMAX (per-thread wall-clock timers)", r.stdout
    assert "'MainThread'" in names, r.stdout
