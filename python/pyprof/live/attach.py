"""Reaching a running process (docs/attach.md): the checks that turn every
reason it cannot be reached into one line, the injection of pyprof's bootstrap
(through remote.c: a pending call written into the interpreter's memory, run
by the interpreter itself at its next safe point; no debugger), and the client
side of the control channel (channel.py).

The target is stopped only while the call is written (well under a
millisecond), never has a register changed, and runs nothing but pyprof's own
fixed bootstrap: no code from the client. A call that has not run by the
deadline is withdrawn (its text emptied).
"""
from __future__ import annotations

import errno
import os
import re
import sys
import time

from .channel import private_dir, run_dir, socket_path, status_path
from ..errors import PyprofError

SUPPORTED = ((3, 11), (3, 13))          # the CPython versions pyprof attaches to
CONNECT_TIMEOUT = 10.0
CAP_SYS_PTRACE = 19
_SIGNALS_STOPPED = ("T", "t")


# ------------------------------------------------------------------ checks
def _status_fields(pid) -> dict:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except FileNotFoundError:
        raise PyprofError(f"no such process: {pid}") from None
    except OSError as e:
        raise PyprofError(f"cannot read /proc/{pid}/status: {e.strerror}") from None


def _user(uid) -> str:
    try:
        import pwd
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _threads_alive(pid) -> bool:
    """Whether a thread of the process still runs (its first thread may have
    ended alone, pthread_exit, and wait as a zombie for the others)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except (OSError, IndexError):
            pass
    return False


def check_process(pid) -> dict:
    """The target exists, is alive and belongs to us (or we are root)."""
    if pid <= 0:
        raise PyprofError(f"no such process: {pid}")
    if pid == os.getpid():
        raise PyprofError("pyprof cannot attach to itself")
    st = _status_fields(pid)
    if st.get("State", "").startswith("Z") and not _threads_alive(pid):
        raise PyprofError(f"process {pid} has exited (a zombie waiting for its parent)")
    uid = int(st.get("Uid", "0").split()[1])            # effective uid
    me = os.geteuid()
    if uid != me and me != 0:
        raise PyprofError(f"process {pid} belongs to {_user(uid)}, not to you: only its owner "
                          f"or root can attach")
    return {"uid": uid, "name": st.get("Name", "?"), "tracer": int(st.get("TracerPid", "0"))}


def _program_names(pid) -> list:
    """The file names of the process's executable and of the libpython it maps."""
    names = []
    try:
        names.append(os.path.basename(os.readlink(f"/proc/{pid}/exe")))
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/maps") as f:
            names.extend(line.rsplit("/", 1)[-1].strip() for line in f if "libpython" in line)
    except OSError:
        pass
    return names


def python_version_hint(pid):
    """(3, X) from the executable's or libpython's file name, or None."""
    for name in _program_names(pid):
        m = re.match(r"(?:lib)?python(\d)\.(\d+)", name)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def _free_threaded(pid) -> bool:
    """Whether the program or its libpython is a free-threaded build
    (python3.13t), whose structures differ from the default build's."""
    return any(re.match(r"(?:lib)?python3\.\d+t\b", n) for n in _program_names(pid))


def _version_text(v) -> str:
    return f"{v[0]}.{v[1]}"


class VersionRefused(PyprofError):
    """The target's CPython is one pyprof does not run in: no way in helps."""


def check_version(pid, version):
    lo, hi = SUPPORTED
    if version is not None and not lo <= version[:2] <= hi:
        raise VersionRefused(f"process {pid} runs CPython {_version_text(version)}, which "
                             f"pyprof does not support (it attaches to CPython "
                             f"{_version_text(lo)} to {_version_text(hi)})")


def _has_cap_ptrace() -> bool:
    try:
        caps = int(_status_fields(os.getpid()).get("CapEff", "0"), 16)
    except ValueError:
        return False
    return bool(caps >> CAP_SYS_PTRACE & 1)


def _ptrace_scope():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None                     # no Yama: classic ptrace permissions


def _is_descendant(pid) -> bool:
    me = os.getpid()
    while pid > 1:
        try:
            pid = int(_status_fields(pid).get("PPid", "0"))
        except PyprofError:
            return False
        if pid == me:
            return True
    return False


def _proc_name(pid) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def reach_anyway(pid) -> str:
    """What reaches a process that cannot be injected into: its own channel,
    opened at its start, or reading it from outside."""
    return (f"to reach it anyway, start the program with PYPROF_LISTEN=1 in its environment "
            f"(or as 'python -m pyprof --listen script.py'), or read its stacks with the "
            f"read-only 'pyprof dump {pid}'")


def with_reach_anyway(pid, error) -> PyprofError:
    """An injection's error, saying what reaches the process instead; as it
    is when nothing would (the process is gone, its version is not
    supported) or when it says so already."""
    text = str(error)
    if (isinstance(error, VersionRefused) or "PYPROF_LISTEN" in text
            or not os.path.exists(f"/proc/{pid}")):
        return error
    return PyprofError(f"{text}; {reach_anyway(pid)}")


def check_ptrace(pid, info, denied=False):
    """Why ptrace would be refused, as one line; None if nothing says it would.
    `denied`: ptrace was refused already (then a reason is always given)."""
    tracer = info["tracer"]
    if tracer:
        return (f"process {pid} is already being traced by process {tracer} "
                f"({_proc_name(tracer)}): a debugger or another profiler; detach it first "
                f"(only one tracer at a time)")
    scope, cap = _ptrace_scope(), _has_cap_ptrace()
    if scope == 3:
        why = ("ptrace is disabled on this system (kernel.yama.ptrace_scope = 3, until the "
               "next reboot)")
    elif scope == 2 and not cap:
        why = ("kernel.yama.ptrace_scope = 2 lets only processes with CAP_SYS_PTRACE attach: "
               "run pyprof as root (sudo)")
    elif scope == 1 and not cap and not _is_descendant(pid) and denied:
        why = ("kernel.yama.ptrace_scope = 1 lets a process attach only to its own "
               "descendants: run pyprof as root (sudo), or 'sudo sysctl "
               "kernel.yama.ptrace_scope=0'")
    elif denied:
        why = (f"ptrace of process {pid} was not permitted (no CAP_SYS_PTRACE"
               f"{'' if scope is None else f', kernel.yama.ptrace_scope = {scope}'}; in a "
               f"container, add --cap-add=SYS_PTRACE): run pyprof as root")
    else:
        return None
    return f"{why}; {reach_anyway(pid)}"


def bootstrap_code(status, deadline, client=0, main_thread=None) -> bytes:
    """The text the target runs (from a file: the queued call only reads and
    runs it): import pyprof (from the target's own path, else from the path of
    the pyprof running here) and open a one-client channel; or say why not in
    `status`. Does nothing once the deadline has passed or the client is gone.
    Binds no name in __main__ and never lets an exception reach the program
    (a Ctrl-C that lands meanwhile is handed back to the main thread).
    client: (pid, start time in /proc's clock ticks) of the client: it is gone
    when no process has that pid and start time, or that process has ended
    (a zombie its parent has not reaped yet).
    main_thread: (address, ident) of the interpreter's main thread's ident,
    put back first (3.11: the client made another thread the main one to run
    the call)."""
    # live/attach.py -> the directory that holds the pyprof package
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = (
        "import sys, os, time\n"
        "if M:\n"
        "  import ctypes\n"
        "  ctypes.c_ulong.from_address(M[0]).value = M[1]\n"
        "def w(t):\n"
        "  p = S + '.tmp'\n"
        "  with open(p, 'w') as f: f.write(t)\n"
        "  os.replace(p, S)\n"
        "def alive(pid, start):\n"
        "  try:\n"
        "    with open('/proc/%d/stat' % pid) as f: st = f.read().rsplit(')', 1)[1].split()\n"
        "  except (OSError, IndexError): return False\n"
        "  return st[0] not in 'ZX' and st[19] == start\n"
        "m = set(sys.modules)\n"
        "try:\n"
        "  if time.time() < D and (not C or alive(*C)):\n"
        "    try:\n"
        "      import pyprof.channel as c, pyprof._cprof\n"
        "    except ImportError:\n"
        "      for k in set(sys.modules) - m:\n"
        "        if k.startswith('pyprof'): del sys.modules[k]\n"
        "      sys.path.insert(0, P)\n"
        "      try:\n"
        "        import pyprof.channel as c, pyprof._cprof\n"
        "      finally:\n"
        "        sys.path.remove(P)\n"
        "    b = c.bootstrap\n"
        "    b(S, D, C) if b.__code__.co_argcount > 2 else b(S, D)\n"
        "except BaseException as e:\n"
        "  for k in set(sys.modules) - m:\n"
        "    if k.startswith('pyprof'): del sys.modules[k]\n"
        "  if isinstance(e, KeyboardInterrupt):\n"
        "    import _thread\n"
        "    _thread.interrupt_main()\n"
        "  else:\n"
        "    try: w('import: %s: %s\\n' % (type(e).__name__, e))\n"
        "    except BaseException: pass\n")
    env = {"S": status, "D": deadline, "P": pkg_parent, "C": client, "M": main_thread}
    return f"exec({src!r}, {env!r})\n".encode()


def loader_text(path) -> bytes:
    """The call queued in the target: read the bootstrap's file and run it in
    a namespace of its own; a missing file (the client gave up and removed
    it) or anything raised is silent, but a Ctrl-C, handed back to the main
    thread. At most 256 bytes with the path (remote.c's room for it)."""
    inner = (f"try:\n with open({path!r}) as f: s = f.read()\n exec(s, {{}})\n"
             "except KeyboardInterrupt:\n __import__('_thread').interrupt_main()\n"
             "except BaseException:\n pass\n")
    return f"__import__('builtins').exec({inner!r}, {{}})".encode()


def kill_at_step(step) -> None:
    """Fault injection for tests (PYPROF_ATTACH_KILL_AT=step): the client dies
    by SIGKILL at that step, as a user's `kill -9` would. In remote.c, with the
    target's threads stopped: stopped (nothing written), queued (the call
    written), swapped (3.11: another thread made to stand in for the main
    one); here: bootstrapped (the channel opened, not yet connected), started
    (the profile runs)."""
    if os.environ.get("PYPROF_ATTACH_KILL_AT") == step:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def _open_remote(pid, info):
    """The target's interpreter found from outside (remote.c), or one line."""
    from .. import _cprof
    try:
        remote = _cprof.RemoteProcess(pid)
    except OSError as e:
        if not os.path.exists(f"/proc/{pid}"):
            raise PyprofError(f"no such process: {pid} (it ended while pyprof attached)") from None
        if e.errno in (errno.EPERM, errno.EACCES):
            raise PyprofError(check_ptrace(pid, check_process(pid), denied=True)) from None
        if e.errno == errno.ENOENT:
            hint = python_version_hint(pid)
            if hint is not None:
                check_version(pid, hint)
            raise PyprofError(f"process {pid} ({info['name']}) is not a CPython interpreter "
                              f"pyprof can attach to: {e.strerror}") from None
        raise PyprofError(f"cannot read process {pid}: {e.strerror or e}") from None
    check_version(pid, remote.version[:2])
    if _free_threaded(pid):
        raise PyprofError(f"process {pid} runs the free-threaded build of CPython "
                          f"{_version_text(remote.version)}, which pyprof does not support")
    if not remote.known:
        raise PyprofError(f"process {pid} runs CPython "
                          f"{'.'.join(map(str, remote.version))}, whose interpreter layout "
                          f"does not match the one pyprof knows for {_version_text(remote.version)} "
                          f"(a build with other structures): nothing was written")
    return remote


def _write_private(path, data, uid) -> None:
    """A file the target (uid) can read, in its private directory, replaced
    whole (the target may read it at any moment)."""
    tmp = f"{path}.tmp"
    _unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        if os.geteuid() != uid:
            os.fchown(fd, uid, -1)
    finally:
        os.close(fd)
    os.replace(tmp, path)


QUEUE_TRIES = 200               # 1 ms apart: the queue's lock held, or the queue full
NUDGE_EVERY = 0.25              # seconds between requests to run the call again
MAIN_SWAP_AFTER = 0.2           # 3.11: seconds the main thread may take before another runs it
MAIN_SWAP_FOR = 0.1             # 3.11: seconds one swap is given


def inject(pid, info, timeout, verbose=None):
    """Queue the bootstrap in `pid` and wait for it to open its channel
    (docs/attach.md, "How pyprof gets in"). Whatever fails, the call is
    withdrawn if it has not run, and the target is left as it was."""
    reason = check_ptrace(pid, info)
    if reason:
        raise PyprofError(reason)
    remote = _open_remote(pid, info)
    uid = info["uid"]
    private_dir(uid)
    status = status_path(pid, uid)
    boot = os.path.join(run_dir(uid), f"{pid}-{os.getpid()}.boot.py")
    for stale in (status, status + ".tmp", boot):
        try:
            os.unlink(stale)
        except OSError:
            pass
    deadline = time.time() + timeout
    minor = remote.version[1]
    main_ident = remote.gil()[0]

    def write_boot(swapped=False):
        # 3.11: once another thread stands in for the main one, the bootstrap
        # puts the main thread back first thing (should this client die meanwhile)
        main = (remote.main_thread_at, main_ident) if swapped else None
        _write_private(boot, bootstrap_code(status, deadline, _self_identity(), main), uid)
    write_boot()
    text = loader_text(boot)
    t0 = time.monotonic()
    slot = where = None
    paused = 0
    try:
        try:
            for _ in range(QUEUE_TRIES):
                slot, where, paused = remote.queue_call(text)
                if slot is not None:
                    break
                time.sleep(0.001)
            else:
                raise PyprofError(f"process {pid}'s queue of pending calls stayed busy or full "
                                  f"for {QUEUE_TRIES} ms: try again")
        except OSError as e:
            if e.errno in (errno.EPERM, errno.EACCES):
                raise PyprofError(check_ptrace(pid, check_process(pid), denied=True)) from None
            if not os.path.exists(f"/proc/{pid}"):
                raise PyprofError(f"no such process: {pid} (it ended while pyprof attached)") \
                    from None
            raise PyprofError(f"could not queue pyprof's bootstrap in process {pid}: "
                              f"{e.strerror or e}") from None
        if verbose:
            verbose(f"queued the bootstrap as a pending call (CPython "
                    f"{_version_text(remote.version)}); the process was stopped "
                    f"{paused / 1e6:.2f} ms")
        ran = _wait_for_bootstrap(remote, slot, where, status, deadline, main_ident, write_boot,
                                  verbose)
    except BaseException:
        if slot is not None and _withdraw(remote, slot, where, len(text)):
            _unlink(boot)
        raise
    if not ran:
        withdrawn = _withdraw(remote, slot, where, len(text))
        if withdrawn:
            _unlink(boot)
        who = ("its main thread ran no Python code meanwhile, nor did another thread to "
               "stand in for it" if minor < 12 else "none of its threads ran Python code "
               "meanwhile")
        raise PyprofError(f"process {pid} did not run pyprof's bootstrap within {timeout:g} s: "
                          f"{who} (blocked in a system call or in C code); try again with a "
                          f"longer --timeout")
    remote.clear(where, len(text) + 1)
    _unlink(boot)
    if verbose:
        verbose(f"the bootstrap ran {time.monotonic() - t0:.3f} s after it was queued")
    with open(status) as f:
        result = f.read().strip()
    os.unlink(status)
    if result.startswith("import: "):
        raise PyprofError(f"pyprof is not importable by process {pid} (CPython "
                          f"{minor and _version_text(remote.version)}): {result[8:]}; install "
                          f"pyprof for that interpreter (this one is CPython "
                          f"{sys.version_info[0]}.{sys.version_info[1]})")
    if result != "ok":
        raise PyprofError(f"pyprof's channel did not open in process {pid}: "
                          f"{result.removeprefix('error: ')}")
    kill_at_step("bootstrapped")


def _self_identity():
    """This process as the bootstrap recognises it: (pid, start time), the
    start time as /proc/PID/stat's 22nd field gives it (a reused pid differs)."""
    with open("/proc/self/stat") as f:
        return os.getpid(), f.read().rsplit(")", 1)[1].split()[19]


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _withdraw(remote, slot, where, length) -> bool:
    """Empty the call if it has not run (it then runs nothing): whether it was
    withdrawn. Taken already: the bootstrap sees its deadline or its client
    gone and does nothing."""
    try:
        if remote.cancel_call(slot, where):
            remote.clear(where, length + 1)
            return True
    except OSError:
        pass
    return False


def _wait_for_bootstrap(remote, slot, where, status, deadline, main_ident, write_boot,
                        verbose) -> bool:
    """Until the bootstrap reported (True) or the deadline (False). While the
    call waits, ask for it again now and then (a thread that recomputed its
    eval breaker may have dropped the request); on 3.11, where only the main
    thread runs pending calls, a main thread that does not take it (waiting in
    C: join, a serve loop) has the GIL's holder stand in for it, for as long as
    it takes that thread to reach the call."""
    pid = remote.pid
    queued_at = last_nudge = time.monotonic()
    swapped_at = None
    stood_in = False
    try:
        while time.time() < deadline:
            if os.path.exists(status):
                return True
            if not os.path.exists(f"/proc/{pid}"):
                raise PyprofError(f"no such process: {pid} (it ended while pyprof attached)")
            now = time.monotonic()
            queued = remote.call_queued(slot, where)
            if swapped_at is not None and (not queued or now - swapped_at > MAIN_SWAP_FOR):
                remote.swap_main_thread(main_ident)
                swapped_at = None
            if queued and remote.version[1] == 11 and swapped_at is None \
                    and now - queued_at > MAIN_SWAP_AFTER:
                # the thread that held the GIL last runs Python again soonest
                holder = remote.gil_last_holder()
                if holder and holder != main_ident:
                    write_boot(swapped=True)
                    remote.swap_main_thread(holder)
                    swapped_at = now
                    if verbose and not stood_in:
                        verbose(f"the main thread waits: thread {holder:#x} (which held the GIL "
                                f"last) runs the bootstrap in its place")
                    stood_in = True
            if queued and swapped_at is None and now - last_nudge > NUDGE_EVERY:
                remote.nudge()
                last_nudge = now
            time.sleep(0.001 if swapped_at is not None else 0.005)
        return os.path.exists(status)
    finally:
        if swapped_at is not None:
            try:
                remote.swap_main_thread(main_ident)
            except OSError:
                pass


# ------------------------------------------------------------------ client
class Client:
    """One connection to a process's channel: requests and their answers, one
    JSON line each; an "exit" event (the process ending) may come between."""

    def __init__(self, pid, sock, hello):
        self.pid = pid
        self.sock = sock
        self.hello = hello
        self.buf = b""
        self.events = []
        self.closed = False
        self.lock = None                # the target's lock (hold_target), while connected

    def _read_line(self, timeout=None):
        import select
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            wait = None if end is None else max(0.0, end - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                return None
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return b""
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def request(self, cmd, timeout=60.0, **args):
        import json
        try:
            self.sock.sendall((json.dumps({"cmd": cmd, **args}) + "\n").encode())
        except OSError:
            self.closed = True
            raise PyprofError(f"process {self.pid} closed the channel") from None
        while True:
            line = self._read_line(timeout)
            if line is None:
                raise PyprofError(f"process {self.pid} did not answer '{cmd}' within "
                                  f"{timeout:g} s")
            if line == b"":
                raise PyprofError(f"process {self.pid} closed the channel (it ended?)")
            msg = json.loads(line)
            if "event" in msg:
                self.events.append(msg)
                continue
            if not msg.get("ok"):
                raise PyprofError(f"process {self.pid}: {msg.get('error', 'failed')}")
            return msg

    def wait_event(self, timeout):
        """An event (or {"event": "closed"}) within `timeout` s, else None."""
        import json
        if self.events:
            return self.events.pop(0)
        if self.closed:
            return {"event": "closed"}
        line = self._read_line(timeout)
        if line is None:
            return None
        if line == b"":
            return {"event": "closed"}
        msg = json.loads(line)
        return msg if "event" in msg else None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def _connect(pid, uid, timeout):
    import socket
    path = socket_path(pid, uid)
    if not os.path.exists(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    from .channel import peer_uid
    if peer_uid(sock) not in (uid, 0):  # whoever listens there must be the target's user
        sock.close()
        raise PyprofError(f"{path} is served by another user's process: refused")
    sock.settimeout(None)
    client = Client(pid, sock, None)
    try:
        client.hello = client.request("hello", timeout=timeout)
    except PyprofError:
        client.close()
        return None
    if client.hello.get("pid") != pid:
        client.close()
        raise PyprofError(f"{path} answers for process {client.hello.get('pid')}, not {pid}")
    return client


def _pid_alive(pid) -> bool:
    """A process with this id runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def lock_path(pid, uid) -> str:
    return os.path.join(run_dir(uid), f"{pid}.lock")


def _try_lock(path):
    """An fd holding an exclusive flock on `path` (made if missing), or None
    if another process holds it. The file must still be the one at `path`
    once locked: a cleanup may have removed it meanwhile."""
    import fcntl
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def hold_target(pid, uid) -> int:
    """The client's lock on `pid` (one client per target), an fd held while
    attached: the kernel drops it when the client ends, however it ends."""
    path = lock_path(pid, uid)
    fd = _try_lock(path)
    if fd is None:
        try:
            with open(path) as f:
                holder = f" (pyprof process {int(f.read().strip())})"
        except (OSError, ValueError):
            holder = ""
        raise PyprofError(f"another pyprof client is attached to process {pid}{holder}: "
                          f"wait for it to detach")
    if os.geteuid() != uid:
        os.fchown(fd, uid, -1)          # root's client: the target's user may lock it later
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


_CAPTURE_NAME = re.compile(r"(\d+)-(\d+)(?:\.flush)?\.cprof(?:\.tmp\.(\d+))?")
_TARGET_FILE = re.compile(r"(\d+)\.(?:sock|boot|boot\.tmp|boot\.\d+\.tmp)")
_BOOT_FILE = re.compile(r"(\d+)-(\d+)\.boot\.py(?:\.tmp)?")      # the bootstrap's text (inject)


def remove_stale(uid) -> list:
    """Remove what dead processes left in the private directory: sockets and
    bootstrap status files of ended targets, bootstrap texts and captures of
    ended clients (captures also of ended targets whose client no longer holds
    their lock; not while their writer writes them), locks of ended targets
    that nobody holds. Only the names pyprof gives, only there.
    Returns the names removed."""
    d = run_dir(uid)
    try:
        names = os.listdir(d)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        path = os.path.join(d, name)
        target_file, capture = _TARGET_FILE.fullmatch(name), _CAPTURE_NAME.fullmatch(name)
        if target_file:
            stale = not _pid_alive(int(target_file.group(1)))
        elif capture:
            target, client, writer = capture.groups()
            target, client = int(target), int(client)
            if writer and _pid_alive(int(writer)):
                continue                # being written: its writer renames it
            stale = not _pid_alive(client) or (not _pid_alive(target)
                                               and _lock_free(lock_path(target, uid)))
        elif _BOOT_FILE.fullmatch(name):
            # a queued call that runs later finds no file and runs nothing
            stale = not _pid_alive(int(_BOOT_FILE.fullmatch(name).group(2)))
        elif name.endswith(".lock") and name[:-5].isdigit():
            if _pid_alive(int(name[:-5])):
                continue
            fd = _try_lock(path)
            if fd is None:
                continue
            try:                        # removed while held: no client locks it meanwhile
                os.unlink(path)
                removed.append(name)
            finally:
                os.close(fd)
            continue
        else:
            continue
        if stale:
            try:
                os.unlink(path)
                removed.append(name)
            except OSError:
                pass
    return removed


def _lock_free(path) -> bool:
    if not os.path.exists(path):
        return True
    fd = _try_lock(path)
    if fd is None:
        return False
    os.close(fd)
    return True


def connect(pid, timeout=CONNECT_TIMEOUT, verbose=None) -> Client:
    """A channel to `pid`: its own if it listens (no injection), else one
    opened by injecting the bootstrap. One clear PyprofError otherwise. The
    client holds the target's lock until it closes: a second client is
    refused at once."""
    info = check_process(pid)
    uid = info["uid"]
    private_dir(uid)
    removed = remove_stale(uid)
    if removed and verbose:
        verbose(f"removed what ended processes left in {run_dir(uid)}: {', '.join(removed)}")
    lock = hold_target(pid, uid)
    try:
        client = _attach(pid, info, timeout, verbose)
    except BaseException:
        os.close(lock)
        raise
    client.lock = lock
    return client


def _attach(pid, info, timeout, verbose) -> Client:
    client = _connect(pid, info["uid"], timeout)
    if client is not None:
        if verbose:
            verbose(f"process {pid} listens already: no injection")
        return client
    check_version(pid, python_version_hint(pid))
    try:
        inject(pid, info, timeout, verbose)
    except PyprofError as e:
        raise with_reach_anyway(pid, e) from None
    client = _connect(pid, info["uid"], timeout)
    if client is None:
        raise PyprofError(f"process {pid} opened no channel at {socket_path(pid, info['uid'])}")
    return client


def capture_paths(pid, uid) -> tuple:
    """Where the target writes the capture and its periodic flushes (the
    private directory; the client copies or converts them to -o)."""
    base = os.path.join(run_dir(uid), f"{pid}-{os.getpid()}")
    return base + ".cprof", base + ".flush.cprof"


def drop_own_threads(session) -> None:
    """The channel's own thread is pyprof's, not the program's."""
    own = [t for t, th in session.threads.items() if th.name == "pyprof-control"]
    if own:
        session.drop_threads(own)
