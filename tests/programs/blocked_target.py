"""A program blocked in one system call, for tests/test_attach_harm.py: it must
see nothing of an attach, whether it succeeds, is refused or dies half-way.

    python blocked_target.py KIND WHERE DIR [--all-blocked] [--sleep S]

KIND   sleep | select | epoll | accept | recv | lock | queue | subprocess | waitpid
WHERE  main (the blocking call in the main thread) | worker (in another thread)
DIR    a directory of the test's: the target makes DIR/fifo (the test writes a
       byte to release it) and DIR/sock (accept, recv: the test connects)

By default another thread keeps running Python code (the main thread when the
call is in a worker; a helper thread when it is in the main thread), so that a
pending call has a thread to run on (3.11: the main thread, or a thread made
the main one for the time of the call). With --all-blocked every thread waits
in a system call: nothing can run a pending call until the release.

Runs on the base interpreter: imports only the standard library (never pyprof).
Prints `blocked TID` (the kernel id of the blocked thread) when about to
block, then one `ok KIND WHERE ...` line per check, then `threads N NAMES`,
`signals ok` and `done`; exit 0. Any failed check or exception: a traceback on
stderr, exit 1. No signal handler is installed: a signal the program sees
would kill it or show in /proc/self/status."""
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
import traceback

KIND, WHERE, DIR = sys.argv[1:4]
ALL_BLOCKED = "--all-blocked" in sys.argv
SLEEP = float(sys.argv[sys.argv.index("--sleep") + 1]) if "--sleep" in sys.argv else 4.0
FIFO = os.path.join(DIR, "fifo")
SOCK = os.path.join(DIR, "sock")
EXIT_CODE = 7


def say(*words):
    print(*words, flush=True)


def status_fields():
    with open("/proc/self/status") as f:
        return dict(ln.rstrip("\n").split(":\t", 1) for ln in f if ":\t" in ln)


def fifo_fd():
    # O_RDWR: the open never waits for a writer, and the test's writer never
    # waits for a reader
    return os.open(FIFO, os.O_RDWR)


def read_byte(fd):
    data = os.read(fd, 1)
    assert data == b"x", data
    return data


def block():
    """The blocking call of KIND; returns the line of its check."""
    me = threading.get_native_id()
    if KIND == "sleep":
        say("blocked", me)
        t0 = time.monotonic()
        time.sleep(SLEEP)
        took = time.monotonic() - t0
        assert took >= SLEEP, f"time.sleep({SLEEP}) returned after {took:.3f} s"
        return f"slept {took:.3f} >= {SLEEP}"
    if KIND == "select":
        fd = fifo_fd()
        say("blocked", me)
        r, w, x = select.select([fd], [], [])
        assert (r, w, x) == ([fd], [], []), (r, w, x)
        read_byte(fd)
        return "select returned the fifo"
    if KIND == "epoll":
        fd = fifo_fd()
        ep = select.epoll()
        ep.register(fd, select.EPOLLIN)
        say("blocked", me)
        events = ep.poll()
        assert events == [(fd, select.EPOLLIN)], events
        read_byte(fd)
        ep.close()
        return "epoll returned the fifo"
    if KIND == "accept":
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(SOCK)
        srv.listen(1)
        say("blocked", me)
        conn, _ = srv.accept()
        data = conn.recv(16)
        assert data == b"hello", data
        conn.close()
        srv.close()
        return "accept returned the connection"
    if KIND == "recv":
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(SOCK)
        srv.listen(1)
        say("listening")
        conn, _ = srv.accept()      # the test connects at once, sends later
        say("blocked", me)
        data = conn.recv(16)
        assert data == b"hello", data
        conn.close()
        srv.close()
        return "recv returned the bytes sent"
    if KIND in ("lock", "queue"):
        lock = threading.Lock()
        lock.acquire()
        q = queue.Queue()
        fd = fifo_fd()

        def releaser():             # blocked in read() until the test writes
            read_byte(fd)
            if KIND == "lock":
                lock.release()
            else:
                q.put("item")
        threading.Thread(target=releaser, name="releaser", daemon=True).start()
        say("blocked", me)
        if KIND == "lock":
            got = lock.acquire()
            assert got is True, got
            return "Lock.acquire returned True"
        got = q.get()
        assert got == "item", got
        return "Queue.get returned the item"
    if KIND in ("subprocess", "waitpid"):
        # the child waits for the test's byte on the fifo, then exits 7
        argv = ["/bin/sh", "-c", f'head -c1 <>"{FIFO}" >/dev/null; exit {EXIT_CODE}']
        if KIND == "subprocess":
            import subprocess
            child = subprocess.Popen(argv)
            say("blocked", me)
            rc = child.wait()
            assert rc == EXIT_CODE, rc
            return f"subprocess.wait returned {rc}"
        pid = os.posix_spawn(argv[0], argv, dict(os.environ))
        say("blocked", me)
        got_pid, status = os.waitpid(pid, 0)
        assert got_pid == pid, (got_pid, pid)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_CODE, status
        return f"os.waitpid returned status {status:#x}"
    raise SystemExit(f"unknown kind {KIND}")


def python_loop(stop):
    """Python code running all the time, a few bytecodes between short sleeps."""
    n = 0
    while not stop.is_set():
        n += sum(range(100))
        time.sleep(0.002)


def main():
    start_sigcgt = status_fields()["SigCgt"]
    handlers = {s: signal.getsignal(s) for s in signal.valid_signals()
                if s not in (signal.SIGKILL, signal.SIGSTOP)}
    main_thread = threading.main_thread()
    stop = threading.Event()
    results = []
    errors = []
    if KIND in ("select", "epoll", "lock", "queue", "subprocess", "waitpid"):
        os.mkfifo(FIFO)

    def in_worker():
        try:
            results.append(block())
            # the worker is not the main thread (a swap left in place would
            # let it set a signal disposition)
            assert threading.current_thread() is not threading.main_thread()
            try:
                signal.signal(signal.SIGUSR1, signal.getsignal(signal.SIGUSR1))
            except ValueError:
                pass
            else:
                raise AssertionError("a worker thread could set a signal disposition: "
                                     "the interpreter takes it for its main thread")
        except BaseException:
            errors.append(traceback.format_exc())
        finally:
            stop.set()

    helpers = []
    if WHERE == "worker":
        worker = threading.Thread(target=in_worker, name="blocked-worker")
        worker.start()
        if ALL_BLOCKED:
            worker.join()           # the main thread waits in C too
        else:
            python_loop(stop)
            worker.join()
    else:
        if ALL_BLOCKED:             # another thread, waiting in C
            idle = threading.Event()
            t = threading.Thread(target=idle.wait, name="idle", daemon=True)
            helpers.append((t, idle))
        else:
            t = threading.Thread(target=python_loop, args=(stop,), name="python-loop")
            helpers.append((t, stop))
        for t, _ in helpers:
            t.start()
        try:
            results.append(block())
        finally:
            stop.set()
            for t, ev in helpers:
                ev.set()
                t.join()
    if errors:
        sys.stderr.write("".join(errors))
        sys.exit(1)
    say("ok", KIND, WHERE, results[0])
    # the main thread is still the interpreter's main thread
    assert threading.current_thread() is main_thread
    signal.signal(signal.SIGUSR1, signal.getsignal(signal.SIGUSR1))   # ValueError otherwise
    say("ok main-thread", WHERE)
    names = sorted(t.name for t in threading.enumerate())
    say("threads", len(names), ",".join(names))
    say("pyprof-modules", len([m for m in sys.modules if m.split(".")[0] == "pyprof"]))
    now = {s: signal.getsignal(s) for s in handlers}
    changed = [signal.Signals(s).name for s in handlers if now[s] != handlers[s]]
    assert not changed, f"signal handlers changed: {changed}"
    st = status_fields()
    assert int(st["SigPnd"], 16) == 0, f"SigPnd {st['SigPnd']}"
    assert int(st["ShdPnd"], 16) == 0, f"ShdPnd {st['ShdPnd']}"
    # glibc's own signals 32 and 33 (thread cancellation, setxid) get their
    # handlers when threads are first made: not the program's, not compared
    glibc = 3 << 31
    assert int(st["SigCgt"], 16) & ~glibc == int(start_sigcgt, 16) & ~glibc, \
        f"SigCgt {start_sigcgt} -> {st['SigCgt']}"
    say("signals ok")
    say("done")


if __name__ == "__main__":
    main()
