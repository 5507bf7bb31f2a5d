"""Reaching a running process (docs/attach.md): the checks that turn every
reason it cannot be reached into one line, the injection of pyprof's bootstrap
through gdb, and the client side of the control channel (channel.py).

Injection, when the process has no channel open: gdb attaches (ptrace; every
thread stops), maps one page in the target (``mmap``: a system call, no lock),
writes the bootstrap's text into it and queues ``PyRun_SimpleString`` on it as
a pending call (``_PyEval_AddPendingCall`` for any thread on 3.12+,
``Py_AddPendingCall`` for the main thread on 3.11; neither needs the GIL), then
detaches: the target is stopped only for that. The interpreter runs the pending
call between two bytecodes with the GIL held, where a signal handler would
run: the
bootstrap imports ``pyprof.channel`` (with pyprof's path handed over if the
target cannot import it) and opens a one-client channel, reporting how it
went in a status file. Nothing else runs in the target: no code from the
client, only pyprof's own module and this fixed bootstrap.
"""
from __future__ import annotations

import os
import re
import sys
import time

from .channel import private_dir, run_dir, socket_path, status_path
from .errors import PyprofError

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


def check_process(pid) -> dict:
    """The target exists, is alive and belongs to us (or we are root)."""
    if pid <= 0:
        raise PyprofError(f"no such process: {pid}")
    if pid == os.getpid():
        raise PyprofError("pyprof cannot attach to itself")
    st = _status_fields(pid)
    if st.get("State", "").startswith("Z"):
        raise PyprofError(f"process {pid} has exited (a zombie waiting for its parent)")
    uid = int(st.get("Uid", "0").split()[1])            # effective uid
    me = os.geteuid()
    if uid != me and me != 0:
        raise PyprofError(f"process {pid} belongs to {_user(uid)}, not to you: only its owner "
                          f"or root can attach")
    return {"uid": uid, "name": st.get("Name", "?"), "tracer": int(st.get("TracerPid", "0"))}


def python_version_hint(pid):
    """(3, X) from the executable's or libpython's file name, or None."""
    names = []
    try:
        names.append(os.path.basename(os.readlink(f"/proc/{pid}/exe")))
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/maps") as f:
            names.extend(line.rsplit("/", 1)[-1] for line in f if "libpython" in line)
    except OSError:
        pass
    for name in names:
        m = re.match(r"(?:lib)?python(\d)\.(\d+)", name)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


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
    `denied`: gdb was refused already (then a reason is always given)."""
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


def find_gdb() -> str:
    import shutil
    gdb = shutil.which("gdb")
    if gdb is None:
        raise PyprofError("gdb is needed to attach to a process started without pyprof, and it "
                          "is not installed: install Debian's 'gdb' package (apt-get install "
                          "gdb), or start the program with PYPROF_LISTEN=1")
    return gdb


# ------------------------------------------------------------------ injection
def bootstrap_code(status, deadline) -> bytes:
    """The text the target runs: import pyprof's channel (from the target's
    own path, else from the path of the pyprof running here) and open a
    one-client channel; or say why not in `status`. Binds no name in
    __main__ and never lets an exception reach the program."""
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = (
        "import sys, os, time\n"
        "def w(t):\n"
        "  p = S + '.tmp'\n"
        "  with open(p, 'w') as f: f.write(t)\n"
        "  os.replace(p, S)\n"
        "m = set(sys.modules)\n"
        "try:\n"
        "  if time.time() < D:\n"
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
        "    c.bootstrap(S, D)\n"
        "except BaseException as e:\n"
        "  for k in set(sys.modules) - m:\n"
        "    if k.startswith('pyprof'): del sys.modules[k]\n"
        "  try: w('import: %s: %s\\n' % (type(e).__name__, e))\n"
        "  except BaseException: pass\n")
    env = {"S": status, "D": deadline, "P": pkg_parent}
    return f"exec({src!r}, {env!r})".encode()


_GDB_SCRIPT = r'''
import gdb, time
def out(*a):
    print("PYPROF", *a, flush=True)
def run():
    try:
        v = int(gdb.parse_and_eval("*(unsigned long *)&Py_Version"))
    except gdb.error as e:
        out("NOPY", str(e).replace("\n", " "))
        return
    out("VERSION", v >> 24 & 0xff, v >> 16 & 0xff)
    if not LO <= (v >> 24 & 0xff, v >> 16 & 0xff) <= HI:
        return
    # the thread gdb calls on must not be inside CPython's pending-call queue:
    # the call would wait for a lock that thread holds
    names, f = [], gdb.newest_frame()
    while f is not None and len(names) < 16:
        names.append(f.name() or "")
        f = f.older()
    busy = [n for n in names if n in BUSY]
    if busy:
        out("BUSY", ",".join(busy))
        return
    code = open(CODE, "rb").read() + b"\0"
    size = (len(code) + 4095) // 4096 * 4096
    t0 = time.monotonic()
    addr = int(gdb.parse_and_eval("(long)mmap((void *)0, %d, 3, 34, -1, (long)0)" % size))
    if addr in (0, -1):
        out("ERR", "mmap failed in the target")
        return
    gdb.selected_inferior().write_memory(addr, code)
    if (v >> 24 & 0xff, v >> 16 & 0xff) >= (3, 12):
        # any thread running Python runs it, not only the main thread
        interp = int(gdb.parse_and_eval("(long)PyInterpreterState_Main()"))
        rc = int(gdb.parse_and_eval(
            "(int)_PyEval_AddPendingCall((void *)%d, (void *)&PyRun_SimpleString, (void *)%d, 0)"
            % (interp, addr)))
    else:
        rc = int(gdb.parse_and_eval(
            "(int)Py_AddPendingCall((void *)&PyRun_SimpleString, (void *)%d)" % addr))
    out("QUEUED", rc, "%.6f" % (time.monotonic() - t0))
try:
    run()
except gdb.error as e:
    out("ERR", str(e).replace("\n", " "))
'''


# CPython's functions that hold its pending-call lock (or may, inlined).
_BUSY = ("Py_AddPendingCall", "_PyEval_AddPendingCall", "_push_pending_call",
         "_pop_pending_call", "make_pending_calls", "_PyEval_MakePendingCalls",
         "Py_MakePendingCalls", "_Py_HandlePending", "handle_eval_breaker")


def _gdb_env():
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "LD_PRELOAD"):
        env.pop(k, None)                # for pyprof's Python (a sanitizer's runtime), not gdb
    env["DEBUGINFOD_URLS"] = ""
    return env


def gdb_command(gdb, pid, *commands) -> list:
    """gdb attached to `pid`, reading only the symbols it needs (the program,
    libc, libpython), no debuginfod, no init files."""
    cmd = [gdb, "-q", "-nx", "-batch",
           "-iex", "set debuginfod enabled off", "-iex", "set auto-solib-add off",
           "-iex", "set pagination off", "-iex", "set confirm off",
           "-p", str(pid),
           "-ex", r"sharedlibrary libc\.so", "-ex", r"sharedlibrary libpython"]
    for c in commands:
        cmd += ["-ex", c]
    return cmd


def _ptrace_denied(text) -> bool:
    return "ptrace: Operation not permitted" in text or "Could not attach" in text


def inject(pid, info, timeout, verbose=None):
    """Queue the bootstrap in `pid` and wait for it to open its channel."""
    import subprocess
    import tempfile
    reason = check_ptrace(pid, info)
    if reason:
        raise PyprofError(reason)
    gdb = find_gdb()
    uid = info["uid"]
    private_dir(uid)
    status = status_path(pid, uid)
    for stale in (status, status + ".tmp"):
        try:
            os.unlink(stale)
        except OSError:
            pass
    deadline = time.time() + timeout
    lo, hi = SUPPORTED
    with tempfile.TemporaryDirectory(prefix="pyprof-gdb-") as tmp:
        code_path = os.path.join(tmp, "boot.py")
        with open(code_path, "wb") as f:
            f.write(bootstrap_code(status, deadline))
        script = os.path.join(tmp, "inject.py")
        with open(script, "w") as f:
            f.write(f"LO, HI, CODE, BUSY = {lo!r}, {hi!r}, {code_path!r}, {_BUSY!r}\n"
                    + _GDB_SCRIPT)
        for attempt in range(5):
            t0 = time.monotonic()
            try:
                proc = subprocess.run(gdb_command(gdb, pid, f"source {script}", "detach"),
                                      stdin=subprocess.DEVNULL, capture_output=True,
                                      text=True, env=_gdb_env(),
                                      timeout=max(timeout, 5.0) + 20.0)
            except subprocess.TimeoutExpired:
                raise PyprofError(f"gdb did not finish attaching to process {pid} within "
                                  f"{max(timeout, 5.0) + 20.0:.0f} s") from None
            gdb_s = time.monotonic() - t0
            text = proc.stdout + proc.stderr
            marks = {}
            for line in text.splitlines():
                if line.startswith("PYPROF "):
                    key, _, rest = line[7:].partition(" ")
                    marks[key] = rest
            if "BUSY" not in marks:
                break
            time.sleep(0.05)            # stopped in the pending-call queue: again, later
        else:
            raise PyprofError(f"process {pid} was in CPython's pending-call queue at each of "
                              f"5 attempts ({marks['BUSY']}): try again")
    if "VERSION" not in marks:
        if _ptrace_denied(text):
            raise PyprofError(check_ptrace(pid, check_process(pid), denied=True))
        if "No such process" in text or not os.path.exists(f"/proc/{pid}"):
            raise PyprofError(f"no such process: {pid} (it ended while pyprof attached)")
        if "NOPY" in marks:
            hint = python_version_hint(pid)
            if hint is not None:
                check_version(pid, hint)
            raise PyprofError(f"process {pid} ({info['name']}) is not a CPython interpreter "
                              f"pyprof can attach to: it has no Py_Version symbol (CPython "
                              f"3.11 or later)")
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        raise PyprofError(f"gdb could not attach to process {pid}: {last}")
    major, minor = (int(x) for x in marks["VERSION"].split())
    check_version(pid, (major, minor))
    if "QUEUED" not in marks:
        raise PyprofError(f"could not inject pyprof's bootstrap into process {pid}: "
                          f"{marks.get('ERR', 'gdb stopped early')}")
    rc = int(marks["QUEUED"].split()[0])
    if rc != 0:
        raise PyprofError(f"process {pid} refused the bootstrap (Py_AddPendingCall: {rc}; "
                          f"its queue of pending calls is full): try again")
    if verbose:
        verbose(f"gdb attached, queued the bootstrap and detached in {gdb_s:.2f} s")
    while time.time() < deadline:
        if os.path.exists(status):
            break
        if not os.path.exists(f"/proc/{pid}"):
            raise PyprofError(f"no such process: {pid} (it ended while pyprof attached)")
        time.sleep(0.01)
    else:
        who = ("its main thread ran" if (major, minor) < (3, 12) else "none of its threads "
               "ran") + " Python code meanwhile"
        raise PyprofError(f"process {pid} did not run pyprof's bootstrap within {timeout:g} s: "
                          f"{who} (blocked in a system call or in C code); try again with a "
                          f"longer --timeout, or start it with PYPROF_LISTEN=1")
    with open(status) as f:
        result = f.read().strip()
    os.unlink(status)
    if result.startswith("import: "):
        raise PyprofError(f"pyprof is not importable by process {pid} (CPython "
                          f"{major}.{minor}): {result[8:]}; install pyprof for that "
                          f"interpreter (this one is CPython {sys.version_info[0]}."
                          f"{sys.version_info[1]})")
    if result != "ok":
        raise PyprofError(f"pyprof's channel did not open in process {pid}: "
                          f"{result.removeprefix('error: ')}")


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


def remove_stale(uid) -> list:
    """Remove what dead processes left in the private directory: sockets and
    bootstrap status files of ended targets, captures of ended clients (or
    of ended targets whose client no longer holds their lock; not while their
    writer writes them), locks of ended targets that nobody holds. Only the
    names pyprof gives, only there.
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


# ------------------------------------------------------------------ native stacks
def native_stacks(pid) -> dict:
    """Every thread's native stack through gdb (the target stops meanwhile):
    {kernel thread id: [frame text, ...] leaf first}."""
    import subprocess
    gdb = find_gdb()
    info = check_process(pid)
    reason = check_ptrace(pid, info)
    if reason:
        raise PyprofError(reason)
    proc = subprocess.run(gdb_command(gdb, pid, "set auto-solib-add on", "sharedlibrary",
                                      "set print frame-arguments none",
                                      "thread apply all bt", "detach"),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=_gdb_env(), timeout=120)
    if _ptrace_denied(proc.stdout + proc.stderr):
        raise PyprofError(check_ptrace(pid, info, denied=True))
    out, lwp = {}, None
    for line in proc.stdout.splitlines():
        m = re.match(r"Thread \d+ \(.*LWP (\d+)", line)
        if m:
            lwp = int(m.group(1))
            out[lwp] = []
            continue
        m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(.*)", line)
        if m and lwp is not None:
            out[lwp].append(m.group(1).replace(" (...)", "").strip())
    return out
