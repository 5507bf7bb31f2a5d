"""``pyprof top --remote PID``: sampling a process from outside, py-spy's way
(docs/attach.md#pyprof-top---remote). Each sample reads every thread's Python stack
with process_vm_readv without stopping the process (remote_read.c), and each
thread's kernel state from /proc; nothing is injected, no signal sent. The
samples feed top.py's live view, or, with --duration and -o, a Session (the
sampled tables of a wall-clock capture) that every view and export reads.
"""
from __future__ import annotations

import errno
import os
import threading
import time

from ..errors import PyprofError
from ..base.files import program_frames

# Session states (model/tables.py STATES): a thread waiting for the GIL is
# "idle" there, as the in-process sampler records it without --native.
_SESSION_STATE = {"python": 0, "native": 1, "idle": 2, "gil": 2}


class _TaskFiles:
    """Open /proc files of the target's threads, re-read with pread (no open
    per sample)."""

    def __init__(self, pid):
        self.pid = pid
        self.fds = {}

    def _read(self, tid, name):
        key = (tid, name)
        fd = self.fds.get(key)
        try:
            if fd is None:
                fd = self.fds[key] = os.open(f"/proc/{self.pid}/task/{tid}/{name}", os.O_RDONLY)
            return os.pread(fd, 512, 0)
        except OSError:
            if fd is not None:
                os.close(fd)
                self.fds.pop(key, None)
            return b""

    def state(self, tid, gil_span):
        """python/native/idle/gil for a thread that does not hold the GIL."""
        stat = self._read(tid, "stat")
        letter = stat.rpartition(b")")[2][1:2]
        if letter == b"R":
            return "native"
        if gil_span is not None:
            fields = self._read(tid, "syscall").split()
            if len(fields) > 1 and fields[0].isdigit():
                from .remote_dump import syscall_name
                try:
                    arg0 = int(fields[1], 16)
                except ValueError:
                    arg0 = -1
                if syscall_name(int(fields[0])) in ("futex", "futex_waitv") \
                        and gil_span[0] <= arg0 < gil_span[1]:
                    return "gil"
        return "idle"

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class RemoteSampler:
    """Samples of `target` (remote_dump.Target): per (native id, stack, state)
    how many and the wall time they stand for. `sample()` takes one."""

    def __init__(self, target, rate=100.0):
        self.target = target
        self.proc = target.proc
        self.period = 1.0 / rate
        self.rate = rate
        # (native_id, ((function index, line), ...) root first, state) -> [count, ns]
        self.counts = {}
        self.functions = []             # index -> (filename, qualname, name, first line)
        self._keys = {}                 # code id -> its function's key (filename first)
        self._by_code = {}              # the reader's code id -> function index
        self._by_key = {}               # (filename, qualname, name, first line) -> index
        self.threads = {}               # native_id -> (ident, name)
        self.files = _TaskFiles(target.pid)
        try:
            self.gil_span = self.proc.gil_span()
        except OSError:
            self.gil_span = None
        self.last = None
        self.start_mono = time.monotonic()
        self.start_wall_ns = time.time_ns()
        self.taken = 0
        self.incomplete = 0
        self.lock = threading.Lock()
        self.gil_ns = 0

    def sample(self):
        now = time.monotonic_ns()
        threads = self.proc.threads(stop=False, ids=True)
        # each sample stands for the wall time since the previous one (at most
        # a few periods: a stall of the sampler is not the process's time)
        weight = int(min(now - self.last, 4e9 * self.period)) if self.last else int(
            self.period * 1e9)
        self.last = now
        from .remote_dump import thread_name
        with self.lock:
            self.taken += 1
            for t in threads:
                nid = t["native_id"]
                if nid not in self.threads:
                    self.threads[nid] = (t["ident"], thread_name(self.target.pid, t))
                if not t["complete"]:
                    self.incomplete += 1
                state = "python" if t["holds_gil"] else self.files.state(nid, self.gil_span)
                if state == "python":
                    self.gil_ns += weight
                frames = program_frames(t["frames"][::-1], self._file)
                key = (nid, tuple((self._function(cid), line) for cid, line in frames), state)
                c = self.counts.get(key)
                if c is None:
                    self.counts[key] = [1, weight]
                else:
                    c[0] += 1
                    c[1] += weight

    def _file(self, frame):
        key = self._keys.get(frame[0])
        if key is None:
            key = self._keys[frame[0]] = self.proc.code(frame[0])
        return key[0]

    def _function(self, cid):
        """A function index for a code id: code objects made again and again
        (exec, compile) with the same names count as one function."""
        f = self._by_code.get(cid)
        if f is None:
            key = self._keys.get(cid) or self.proc.code(cid)
            f = self._by_key.get(key)
            if f is None:
                f = self._by_key[key] = len(self.functions)
                self.functions.append(key)
            self._by_code[cid] = f
        return f

    def run(self, until, stop_event=None):
        """Sample at the rate until time.monotonic() >= until (or the event is
        set, or the process ends: the reason is returned, else None)."""
        next_at = time.monotonic()
        while time.monotonic() < until and not (stop_event and stop_event.is_set()):
            try:
                self.sample()
            except OSError as e:
                if e.errno == errno.ESRCH or not os.path.exists(f"/proc/{self.target.pid}"):
                    return f"process {self.target.pid} exited"
                return f"cannot read process {self.target.pid}: {e.strerror or e}"
            next_at += self.period
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()      # behind: no burst to catch up
        return None

    # ---------------------------------------------------------- the live view
    def stats(self, previous=None):
        """top.py's stats (channel.live_stats's shape) over the time since
        `previous` (the totals returned last time) and in all."""
        from .channel import function_rows, tally_sample
        now = time.monotonic()
        with self.lock:
            items = list(self.counts.items())
            names = dict(self.threads)
            gil_ns = self.gil_ns
            functions = list(self.functions)
        totals = {"own": {}, "total": {}, "states": {}, "t": now, "gil": gil_ns}
        for (nid, frames, state), (_count, weight) in items:
            funcs = [(functions[f][1], functions[f][0], functions[f][3]) for f, _line in frames]
            tally_sample(totals, nid, state, funcs, weight)
        states = totals["states"]
        prev = previous or {"own": {}, "total": {}, "states": {}, "t": self.start_mono, "gil": 0}
        elapsed = max(now - prev["t"], 1e-9)

        def delta(name, k):
            return totals[name].get(k, 0) - prev[name].get(k, 0)

        threads = []
        for nid in sorted(names):
            st = {s: delta("states", (n, s)) for (n, s) in states if n == nid}
            threads.append({"index": nid, "name": names[nid][1], "ident": names[nid][0],
                            "native_id": nid, "states": st})
        rss = 0
        try:
            with open(f"/proc/{self.target.pid}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
        stats = {"elapsed": elapsed, "since_start": now - self.start_mono,
                 "functions": function_rows(totals, prev),
                 "threads": threads,
                 "gil_held": min(1.0, (gil_ns - prev["gil"]) / (elapsed * 1e9)),
                 "rss": rss, "traced": None, "wall": True}
        return stats, totals

    # ---------------------------------------------------------- the capture
    def session(self):
        """The samples as a wall-clock sampling Session."""
        from .._version import __version__
        from ..model.session import Function, SampleCounters, Session, Stack, Thread
        s = Session()
        stacks = {}
        with self.lock:
            items = list(self.counts.items())
            names = dict(self.threads)
        index = {nid: i for i, nid in enumerate(sorted(names))}
        for nid, i in index.items():
            ident, name = names[nid]
            s.threads[i] = Thread(i, ident, nid, 0, name)
        with self.lock:
            functions = list(self.functions)
        for fid, (filename, qualname, name, first) in enumerate(functions):
            s.functions[fid] = Function(fid, filename, first, name, qualname, "python")
        for (nid, frames, state), (count, weight) in items:
            st = tuple((fid, max(line, 0)) for fid, line in frames[-256:])
            stack = Stack(st)
            sid = stacks.setdefault(stack, len(stacks))
            t = index[nid]
            s.threads[t].events += count
            key = (t, sid, _SESSION_STATE[state])
            c = s.samples.setdefault(key, SampleCounters())
            c.add(SampleCounters(count, weight))
        s.stacks = {sid: st for st, sid in stacks.items()}
        elapsed = time.monotonic() - self.start_mono
        weighted = sum(c.weight for c in s.samples.values())
        s.info = {"builtins": False, "clock": "monotonic", "duration_ns": int(elapsed * 1e9),
                  "enabled": False, "events": sum(c.count for c in s.samples.values()),
                  "format": [1, 8], "hook": "process_vm_readv from outside (top --remote)",
                  "lines": False, "python": ".".join(map(str, self.proc.version)),
                  "sampling": {"mode": "wall", "native": False, "interval_ns": int(
                      self.period * 1e9), "rate_requested": self.rate,
                      "rate_achieved": self.taken / max(elapsed, 1e-9),
                      "recorded": self.taken, "elapsed_s": elapsed,
                      "weighted_s": weighted / 1e9, "weighting": "wall_clock_between_reads",
                      "truncated": 0, "dropped": 0, "incomplete": self.incomplete,
                      "remote": True},
                  "start_wall_ns": self.start_wall_ns, "snapshot_wall_ns": time.time_ns(),
                  "subcalls": False, "time_unit": 1e-9, "timeunit": 0}
        from .remote_dump import cmdline
        s.meta = {"argv": cmdline(self.target.pid).split(), "pid": self.target.pid,
                  "python": s.info["python"], "implementation": "cpython",
                  "modes": ["sample"], "pyprof_version": __version__,
                  "remote": True, "written_at": time.time(),
                  "thread_names": {str(names[n][0]): names[n][1] for n in names}}
        s.reindex()
        return s


def record(pid, rate, duration, output, say=None) -> int:
    """Sample `pid` for `duration` seconds (or until it exits or Ctrl-C) and
    write the capture or export to `output`."""
    from . import remote_dump
    from ..export import export, format_for_path
    from ..options import check_writable
    target = remote_dump.open_process(pid)
    sampler = RemoteSampler(target, rate)
    try:
        ended = sampler.run(time.monotonic() + duration)
    except KeyboardInterrupt:
        ended = None
    finally:
        sampler.files.close()
    if ended and say:
        say(ended)
    if not sampler.counts:
        raise PyprofError(f"no sample of process {pid} was taken")
    session = sampler.session()
    check_writable(output)
    fmt = format_for_path(output, default="cprof")
    if fmt == "cprof":
        session.save(output)
    else:
        export(session, fmt, output)
    if say:
        sp = session.info["sampling"]
        say(f"{sp['recorded']} samples at {sp['rate_achieved']:.0f} Hz over "
            f"{sp['elapsed_s']:.1f}s written to {output}")
    return 0


def run_live(pid, rate, interval) -> int:
    """The curses view of top.py, fed by a sampler thread in this process."""
    import curses
    from . import remote_dump, top
    target = remote_dump.open_process(pid)
    sampler = RemoteSampler(target, rate)
    hello = {"pid": pid, "python": ".".join(map(str, target.proc.version)),
             "argv": remote_dump.cmdline(pid).split(), "remote": True}
    view = top.View(hello)
    stop = threading.Event()
    ended = []

    def sample_loop():
        reason = sampler.run(float("inf"), stop)
        if reason:
            ended.append(reason)

    worker = threading.Thread(target=sample_loop, name="pyprof-remote-sampler", daemon=True)
    worker.start()
    previous = [None]

    def loop(scr):
        curses.curs_set(0)
        scr.timeout(100)
        next_at = time.monotonic() + min(interval, 0.5)
        while not ended:
            if not view.paused and time.monotonic() >= next_at:
                next_at = time.monotonic() + interval
                view.stats, previous[0] = sampler.stats(previous[0])
            top.draw(scr, view)
            try:
                ch = scr.get_wch()
            except curses.error:
                continue
            if isinstance(ch, int):
                ch = curses.keyname(ch).decode()
            if not view.key(ch):
                return

    try:
        curses.wrapper(loop)
    finally:
        stop.set()
        worker.join(2)
        sampler.files.close()
    if ended:
        print(f"pyprof top: {ended[0]}")
    return 0
