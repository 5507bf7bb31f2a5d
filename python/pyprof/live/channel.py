"""The control channel: a Unix domain socket through which another process of
the same user (``pyprof attach``, ``pyprof top``, ``pyprof dump``) starts and
stops profiling in this one, takes snapshots, reads its stacks and live stats
(protocol: docs/attach.md).

It exists only when asked: ``python -m pyprof --listen``, ``PYPROF_LISTEN=1``
in the environment of a program that imports pyprof, or the bootstrap that
``pyprof attach`` injects (:func:`bootstrap`). The socket is
``/tmp/pyprof-UID/PID.sock``, in a directory private to the user (0700, the
socket 0600), and a connection is served only if its peer (``SO_PEERCRED``) is
this process's user or root. Nothing listens on the network.

One server thread (``pyprof-control``, a daemon) serves one client at a time,
one JSON object a line each way. An injected channel serves one client, then
stops what that client started, gives back every hook (``_cprof._release``:
the sampler's signal dispositions, the allocators), removes its socket and ends: nothing is
left running. A listening one (``--listen``) stays for the next client.

Runs in the profiled process: imports only the standard library at import.
"""
from __future__ import annotations

import os
import sys

PROTOCOL = 1
ACCEPT_TIMEOUT = 30.0           # an injected channel waits this long for its client
RELEASE_WAIT = 2.0              # seconds a detach waits for a pending sampler signal to land

_servers: list = []             # the one server of this process, while it runs


def run_dir(uid=None) -> str:
    """The per-user directory of the sockets."""
    return os.path.join("/tmp", f"pyprof-{os.geteuid() if uid is None else uid}")


def socket_path(pid, uid=None) -> str:
    return os.path.join(run_dir(uid), f"{pid}.sock")


def status_path(pid, uid=None) -> str:
    """Where an injected bootstrap says how it went (one line)."""
    return os.path.join(run_dir(uid), f"{pid}.boot")


def private_dir(uid=None) -> str:
    """The per-user directory, made (0700) or checked: a real directory owned
    by `uid`, closed to everybody else. A different one is refused, never used."""
    import stat
    from ..errors import PyprofError
    uid = os.geteuid() if uid is None else uid
    d = run_dir(uid)
    try:
        os.mkdir(d, 0o700)
        if os.geteuid() != uid:
            os.chown(d, uid, -1)           # root preparing it for the target's user
    except FileExistsError:
        pass
    except OSError as e:
        raise PyprofError(f"cannot make {d}: {e.strerror or e}") from None
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise PyprofError(f"{d} is not a directory private to uid {uid} (owner {st.st_uid}, "
                          f"mode {stat.filemode(st.st_mode)}): remove it and try again")
    return d


def process_alive(pid, start) -> bool:
    """Whether process `pid`, started at `start` (/proc/PID/stat's 22nd field,
    as text), still runs: not ended, not a zombie, not a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X") and fields[19] == start


def peer_uid(conn) -> int:
    import socket
    import struct
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def listening():
    """The server of this process, or None."""
    return _servers[0] if _servers else None


def listen(persistent=True):
    """Open the channel (idempotent). Returns the server."""
    if _servers:
        return _servers[0]
    _watch_forks()
    server = _Server(persistent)
    _servers.append(server)
    server.start()
    return server


_fork_watched: list = []


def _watch_forks():
    if not _fork_watched:
        _fork_watched.append(True)
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _after_fork_in_child():
    """A forked child (a gunicorn worker) has its parent's server but not its
    thread: forget it (its socket is the parent's: left in place), and open
    the child's own if the parent's was a listening one."""
    if not _servers:
        return
    import atexit
    parent = _servers.pop()
    atexit.unregister(parent._close)
    atexit.unregister(parent._at_exit)
    try:
        parent.sock.close()
    except OSError:
        pass
    if parent.persistent:
        try:
            listen(persistent=True)
        except Exception as e:          # never break the program that forks
            print(f"pyprof: cannot listen in the forked process: {e}", file=sys.stderr)


def close():
    """Close this process's channel, if open (its socket file goes too)."""
    if _servers:
        _servers[0]._close()


def install_from_environment():
    """At import: PYPROF_LISTEN=1 opens a listening channel."""
    if os.environ.get("PYPROF_LISTEN", "") not in ("", "0") and not _servers:
        try:
            listen(persistent=True)
        except Exception as e:         # never break the program that imports pyprof
            print(f"pyprof: PYPROF_LISTEN: cannot listen: {e}", file=sys.stderr)


def bootstrap(status, deadline, client=None):
    """Run by the code ``pyprof attach`` injects (between bytecodes, GIL held):
    open a one-client channel and say so in `status`. client: (pid, start
    time) of the client, whose end ends the channel's wait for it. Never
    raises: an exception here would reach the program."""
    import time
    if time.time() > deadline:
        return                          # the client gave up: leave nothing
    try:
        if not _servers:
            _watch_forks()
            server = _Server(persistent=False, client=client)
            _servers.append(server)
            server.start()
        text = "ok\n"
    except BaseException as e:          # noqa: BLE001 - the program must never see it
        del _servers[:]
        text = f"error: {type(e).__name__}: {e}\n"
    try:
        tmp = f"{status}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, status)
    except OSError:
        pass


class _Server:
    def __init__(self, persistent, client=None):
        import socket
        import threading
        from ..errors import PyprofError
        self.persistent = persistent
        self.client = client            # (pid, start time): an injected channel's client
        private_dir()
        self.path = socket_path(os.getpid())
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.path)
                raise PyprofError(f"{self.path}: this process listens already")
            except OSError:
                os.unlink(self.path)    # left by an earlier process with this pid
            finally:
                probe.close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self.sock.listen(4)
        self.lock = threading.RLock()   # the request being served, or the exit hook
        self.send_lock = threading.Lock()
        self.conn = None
        self.prof = None
        self.output = None              # where the running profile goes at exit
        self.running_frames = set()     # frames started mid-run, by id (line mode)
        self.previous = None            # stats: the totals at the last call
        self.ident = None
        self.thread = threading.Thread(target=self._run, name="pyprof-control", daemon=True)

    def start(self):
        import atexit
        atexit.register(self._close)    # the process ends: no socket left behind
        self.thread.start()

    # ------------------------------------------------------------ serving
    def _run(self):
        import socket
        import threading
        from .. import _cprof
        self.ident = threading.get_ident()
        _cprof._own_thread(True)        # its samples are pyprof's work
        try:
            while True:
                try:            # closed meanwhile (the process is exiting): done
                    conn = self._accept()
                except OSError:
                    break
                if conn is None:
                    break
                conn.settimeout(None)
                try:
                    uid = peer_uid(conn)
                    if uid not in (os.geteuid(), 0):
                        continue        # another user: not served
                    detached = self._serve(conn)
                except OSError:
                    detached = False
                finally:
                    with self.lock:
                        self.conn = None
                        self._stop_running(write=True)
                    conn.close()
                if not self.persistent or detached == "close":
                    break
        finally:
            _cprof._own_thread(False)
            self._close()

    def _accept(self):
        """The next connection; None once an injected channel's client has
        ended or ACCEPT_TIMEOUT passed without it."""
        import socket
        import time
        if self.persistent:
            self.sock.settimeout(None)
            return self.sock.accept()[0]
        end = time.monotonic() + ACCEPT_TIMEOUT
        while time.monotonic() < end:
            self.sock.settimeout(min(0.5, max(0.0, end - time.monotonic())))
            try:
                return self.sock.accept()[0]
            except socket.timeout:
                if self.client and not process_alive(*self.client):
                    return None
        return None

    def _serve(self, conn):
        import json
        self.conn = conn
        reader = conn.makefile("rb")
        for line in reader:
            req = {}
            try:
                req = json.loads(line)
                cmd = req.get("cmd")
                handler = getattr(self, "cmd_" + str(cmd), None)
                if handler is None:
                    resp = {"ok": False, "error": f"unknown command {cmd!r}"}
                else:
                    with self.lock:
                        resp = handler(req)
            except Exception as e:      # noqa: BLE001 - one bad request, one error reply
                resp = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            self.send(resp)
            if req.get("cmd") == "detach" and resp.get("ok"):
                return "close" if req.get("close") else True
        return False

    def send(self, obj):
        import json
        data = (json.dumps(obj, default=str) + "\n").encode()
        with self.send_lock:
            conn = self.conn
            if conn is not None:
                try:
                    conn.sendall(data)
                except OSError:
                    pass

    def _close(self):
        import atexit
        atexit.unregister(self._close)
        try:
            self.sock.close()
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            if _servers and _servers[0] is self:
                del _servers[:]

    # ------------------------------------------------------------ profiling
    def _stop_running(self, write):
        """Stop what this channel started; write it to its output (a client
        gone, the process exiting) or not; give back the hooks."""
        prof, self.prof = self.prof, None
        if prof is None:
            return None
        import atexit
        atexit.unregister(self._at_exit)
        prof.disable()
        if self.running_frames:
            _untrace_running_frames(prof, self.running_frames)
            self.running_frames = set()
        if write and self.output:
            try:
                prof.dump(self.output)
            except Exception as e:          # noqa: BLE001 - reported, never raised here
                print(f"pyprof: cannot write {self.output}: {e}", file=sys.stderr)
        return release()

    def _at_exit(self):
        """The process ends while attached: write what was collected, tell the client."""
        with self.lock:
            output = self.output
            released = self._stop_running(write=True)
        self.send({"event": "exit", "path": output, "released": released})

    def cmd_hello(self, req):
        from .. import _cprof
        from .._version import __version__
        active = _cprof.active()
        return {"ok": True, "protocol": PROTOCOL, "pid": os.getpid(), "pyprof": __version__,
                "python": sys.version.split()[0], "argv": list(sys.argv),
                "persistent": self.persistent, "profiling": self.prof is not None,
                "other_profiler": active is not None and active is not self.prof}

    def cmd_start(self, req):
        from .. import _cprof
        from ..runtime.profiler import Profile
        if self.prof is not None:
            return {"ok": False, "error": "this channel is profiling already"}
        if _cprof.active() is not None:
            return {"ok": False, "error": "a pyprof profiler is already enabled in this process"}
        kw = dict(req.get("options") or {})
        flush = req.get("flush")
        prof = Profile(**kw, flush_to=flush, flush_interval=float(req.get("flush_interval", 5.0)),
                       _warn=False)
        prof.meta["attached"] = {"client_pid": req.get("client_pid"), "mode": kw.get("mode")}
        self.output = req.get("output")
        self.previous = None
        prof.enable()
        prof.thread_paused = True      # this thread's requests are not the program's work
        self.prof = prof
        import atexit
        atexit.register(self._at_exit)
        added, self.running_frames = (_target_running_code(prof) if prof.line_targets is not None
                                      else (0, set()))
        return {"ok": True, "mode": kw.get("mode"), "running_targets": added,
                "tool_id": getattr(prof, "tool_id", None)}

    def cmd_stop(self, req):
        if self.prof is None:
            return {"ok": False, "error": "not profiling"}
        self.output = req.get("path") or self.output
        released = self._stop_running(write=True)
        return {"ok": True, "path": self.output, "released": released}

    def cmd_snapshot(self, req):
        prof = self.prof
        if prof is None:
            return {"ok": False, "error": "not profiling"}
        path = req["path"]
        if prof.run_options.native:
            prof.session().save(path)           # native frames named while they mean something
        else:
            prof.refresh_meta()
            prof.write_capture(path, final=False)
        return {"ok": True, "path": path}

    def cmd_detach(self, req):
        released = self._stop_running(write=False)
        if released is None:
            released = release()
        return {"ok": True, "released": released}

    def cmd_stacks(self, req):
        return {"ok": True, "threads": thread_stacks(skip=self.ident)}

    def cmd_stats(self, req):
        prof = self.prof
        if prof is None or not prof.sampling:
            return {"ok": False, "error": "stats need a sampling profile started here"}
        stats, self.previous = live_stats(prof, self.previous, skip=self.ident)
        return {"ok": True, **stats}


def release() -> dict:
    """Give back what the engines keep between runs (no profiler enabled):
    the sampler's signals' dispositions (SIGPROF, wall mode's real-time signal)
    once none is pending, the allocators, NumPy's
    handler and its import hook. What could not be given back is reported."""
    import time
    from .. import _cprof
    if _cprof.active() is not None:
        return {"signal": False, "allocators": False, "reason": "a profiler is enabled"}
    numpy_mod = sys.modules.get("pyprof.runtime._numpy")
    if numpy_mod is not None:
        numpy_mod.release()
    end = time.monotonic() + RELEASE_WAIT
    while True:
        done = _cprof._release()
        if done["signal"] and done["allocators"] or time.monotonic() > end:
            return done
        time.sleep(0.005)


def _target_running_code(prof) -> tuple:
    """Line mode started mid-run: code objects of the targets that are running
    now (a loop that never returns) are traced from their next line too, and
    their running frames get what their code's events do not give them (3.11's
    opcode events). Returns the number of codes and the frames' ids."""
    targets = {}                                # id(code) -> a line target
    frames = set()
    for frame in sys._current_frames().values():
        while frame is not None:
            code = frame.f_code
            target = targets.get(id(code))
            if target is None:
                target = targets[id(code)] = bool(prof.line_targets(code))
                if target:
                    try:
                        prof.add_line_target(code)
                    except ValueError:          # pyprof's own code: never profiled
                        target = targets[id(code)] = False
            if target:
                prof.trace_running_frame(frame, True)
                frames.add(id(frame))
            frame = frame.f_back
    return sum(targets.values()), frames


def _untrace_running_frames(prof, frames) -> None:
    """At stop: the frames started on at start that still run lose it again."""
    for frame in sys._current_frames().values():
        while frame is not None:
            if id(frame) in frames:
                prof.trace_running_frame(frame, False)
            frame = frame.f_back


def _task_state(native_id) -> str:
    """The kernel's state of a thread: R running, S sleeping, D disk, ..."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "?"


def thread_stacks(skip=None) -> list:
    """Every thread's Python stack now, root first, with its name and state."""
    import threading
    from operator import itemgetter
    from ..base.files import program_frames
    by_ident = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread()
    try:
        tasks = {int(n) for n in os.listdir("/proc/self/task")}
    except OSError:
        tasks = None
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        frames = []
        while frame is not None:
            code = frame.f_code
            frames.append([code.co_filename, frame.f_lineno or 0,
                           getattr(code, "co_qualname", code.co_name)])
            frame = frame.f_back
        frames.reverse()
        frames = program_frames(frames, itemgetter(0))     # not pyprof's runner
        t = by_ident.get(ident)
        native_id = getattr(t, "native_id", None)
        if ident == main.ident and (native_id is None or tasks is not None
                                    and native_id not in tasks):
            # a forked child's main thread (the one that forked) keeps the
            # parent's native_id in threading (3.11-3.13): it leads this process
            native_id = os.getpid()
        out.append({"ident": ident, "native_id": native_id,
                    "name": t.name if t is not None else f"thread {ident}",
                    "daemon": bool(t.daemon) if t is not None else None,
                    "state": _task_state(native_id) if native_id else "?",
                    "frames": frames})
    return out


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tally_sample(totals, thread, state, frames, weight) -> None:
    """Add one sampled stack (frames: (qualified name, file, first line), root
    first) of a thread in a state to the totals live_stats keeps: own (the
    innermost frame) and total (anywhere on the stack) per function, for the
    thread and for all (None), running (python, native) or not; the time by
    thread and state."""
    running = state in ("python", "native")
    states = totals["states"]
    states[(thread, state)] = states.get((thread, state), 0) + weight
    for key, table in ((frames[-1:], totals["own"]), (set(frames), totals["total"])):
        for f in key:
            for scope in (thread, None):
                k = (scope, f, running)
                table[k] = table.get(k, 0) + weight


def function_rows(totals, prev) -> list:
    """top's function rows from the totals now and at the previous refresh:
    own and total as [running since prev, all since prev, running in all,
    all in all] (ns), the 400 largest by total time."""
    rows = {}
    for name in ("own", "total"):
        for k, c in totals[name].items():
            scope, f, running = k
            row = rows.setdefault((scope, f), {"thread": scope, "name": f[0], "file": f[1],
                                               "line": f[2], "own": [0, 0, 0, 0],
                                               "total": [0, 0, 0, 0]})
            v, d = row[name], c - prev[name].get(k, 0)
            if running:
                v[0] += d
                v[2] += c
            v[1] += d
            v[3] += c
    return sorted(rows.values(), key=lambda r: -r["total"][3])[:400]


def live_stats(prof, previous, skip=None):
    """What ``pyprof top`` shows, over the time since the previous call (its
    totals in `previous`; None: since the start) and in all: per function
    (qualified name, file, first line) the sampled own and total time, of
    running samples (python, native) and of all; per thread its time by
    state; the share of the wall time some thread held the GIL; RSS and the
    traced heap. Returns (stats, totals for the next call)."""
    import time
    from ..analysis.stacks import named_stacks
    session = prof.session()
    skip_t = {t for t, th in session.threads.items() if th.ident == skip}
    totals = {"own": {}, "total": {}, "states": {}, "t": time.monotonic()}
    for t, state, frames, _count, weight in named_stacks(session, threads=False):
        if t not in skip_t:
            tally_sample(totals, t, state, [f for f in frames if not f[0].startswith("[")],
                         weight)
    now = totals["t"]
    prev = previous or {"own": {}, "total": {}, "states": {}, "t": prof_start(prof)}
    elapsed = max(now - prev["t"], 1e-9)

    def delta(name, k):
        return totals[name].get(k, 0) - prev[name].get(k, 0)

    states = totals["states"]
    funcs = function_rows(totals, prev)
    threads = []
    gil_ns = 0
    for t, th in sorted(session.threads.items()):
        if t in skip_t:
            continue
        st = {s: delta("states", (t, s)) for (tt, s) in states if tt == t}
        gil_ns += st.get("python", 0)
        threads.append({"index": t, "name": th.name, "ident": th.ident,
                        "native_id": th.native_id, "states": st})
    heap = None
    if session.memory_curve:
        heap = session.memory_curve[-1].heap
    stats = {"elapsed": elapsed, "since_start": now - prof_start(prof),
             "functions": funcs,
             "threads": threads, "gil_held": min(1.0, gil_ns / (elapsed * 1e9)),
             "rss": _rss_bytes(), "traced": heap, "wall": bool(prof.run_options.wall)}
    return stats, totals


def prof_start(prof) -> float:
    """When `prof` was first enabled, in time.monotonic()'s clock."""
    return prof.start_mono_ns / 1e9
