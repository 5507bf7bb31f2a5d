"""Reading a running process from outside (docs/attach.md#read-only-how-it-works): its
threads' Python stacks through ``_cprof.RemoteProcess`` (remote_read.c:
process_vm_readv, all threads stopped for the read only), what each thread is
blocked in from /proc (its kernel state and system call), and ``pyprof dump``'s
text. Nothing runs in the target: no injection, no channel, no signal.
"""
from __future__ import annotations

import errno
import os
import platform
from operator import itemgetter

from ..errors import PyprofError
from ..base.files import program_frames

# System calls a blocked thread commonly sits in, per architecture (the
# numbers of the kernel's own tables; others are shown by number).
_SYSCALLS = {
    "x86_64": {0: "read", 1: "write", 7: "poll", 16: "ioctl", 17: "pread64", 19: "readv",
               23: "select", 34: "pause", 35: "nanosleep", 42: "connect", 43: "accept",
               44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 61: "wait4",
               74: "fsync", 128: "rt_sigtimedwait", 130: "rt_sigsuspend", 202: "futex",
               219: "restart_syscall", 230: "clock_nanosleep", 232: "epoll_wait",
               247: "waitid", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
               288: "accept4", 299: "recvmmsg", 441: "epoll_pwait2", 449: "futex_waitv"},
    "aarch64": {22: "epoll_pwait", 29: "ioctl", 63: "read", 64: "write", 65: "readv",
                67: "pread64", 72: "pselect6", 73: "ppoll", 82: "fsync", 95: "waitid",
                98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 128: "restart_syscall",
                133: "rt_sigsuspend", 137: "rt_sigtimedwait", 202: "accept", 203: "connect",
                206: "sendto", 207: "recvfrom", 211: "sendmsg", 212: "recvmsg",
                242: "accept4", 243: "recvmmsg", 260: "wait4", 441: "epoll_pwait2",
                449: "futex_waitv"},
}
_MEANING = {
    "futex": "waiting on a lock", "futex_waitv": "waiting on a lock",
    "nanosleep": "sleeping", "clock_nanosleep": "sleeping", "pause": "waiting for a signal",
    "rt_sigtimedwait": "waiting for a signal", "rt_sigsuspend": "waiting for a signal",
    "select": "waiting for I/O", "pselect6": "waiting for I/O", "poll": "waiting for I/O",
    "ppoll": "waiting for I/O", "epoll_wait": "waiting for I/O",
    "epoll_pwait": "waiting for I/O", "epoll_pwait2": "waiting for I/O",
    "accept": "waiting for a connection", "accept4": "waiting for a connection",
    "connect": "connecting", "recvfrom": "receiving", "recvmsg": "receiving",
    "recvmmsg": "receiving", "read": "reading", "readv": "reading", "pread64": "reading",
    "write": "writing", "sendto": "sending", "sendmsg": "sending",
    "wait4": "waiting for a child process", "waitid": "waiting for a child process",
    "fsync": "syncing a file", "restart_syscall": "resuming a system call",
}
STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped",
          "t": "stopped (traced)", "Z": "exited"}


def syscall_name(number, machine=None):
    """The name of system call `number` on this (or `machine`'s) architecture."""
    table = _SYSCALLS.get(machine or platform.machine(), {})
    return table.get(number, f"syscall {number}")


def task_state(pid, tid):
    """(kernel state letter, system call name or None, its first argument or
    None) of thread `tid`: the call it is blocked in, if it is blocked in one."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "?", None, None
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return state, None, None
    if not fields or fields[0] == "running" or fields[0].startswith("-"):
        return state, None, None
    try:
        number = int(fields[0])
        arg0 = int(fields[1], 16) if len(fields) > 1 else None
    except ValueError:
        return state, None, None
    return state, syscall_name(number), arg0


def blocked_text(call, arg0, gil_span, holds_gil) -> str:
    """'blocked in futex (waiting for the GIL)' and the like."""
    meaning = _MEANING.get(call, "")
    if call in ("futex", "futex_waitv") and gil_span and arg0 is not None \
            and gil_span[0] <= arg0 < gil_span[1] and not holds_gil:
        meaning = "waiting for the GIL"
    return f"blocked in {call}" + (f" ({meaning})" if meaning else "")


def _comm(pid, tid=None) -> str:
    path = f"/proc/{pid}/comm" if tid is None else f"/proc/{pid}/task/{tid}/comm"
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def thread_name(pid, t) -> str:
    """MainThread; else the kernel's name of the thread if it was given one
    (it differs from the process's), else Thread-<native id>. Python-level
    names live in the target's objects: the channel gives them."""
    if t["is_main"]:
        return "MainThread"
    comm = _comm(pid, t["native_id"])
    if comm and comm != _comm(pid):
        return comm
    return f"Thread-{t['native_id']}"


def cmdline(pid) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(a.decode(errors="replace") for a in f.read().split(b"\0") if a)
    except OSError:
        return ""


def open_process(pid):
    """A RemoteProcess for `pid`, or one PyprofError line saying why not."""
    from .. import _cprof
    from . import attach
    info = attach.check_process(pid)
    attach.check_version(pid, attach.python_version_hint(pid))
    try:
        proc = _cprof.RemoteProcess(pid)
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise PyprofError(attach.check_ptrace(pid, info, denied=True)) from None
        if e.errno == errno.ESRCH:
            raise PyprofError(f"no such process: {pid}") from None
        if e.errno == errno.ENOENT:
            raise PyprofError(f"process {pid} ({_comm(pid) or '?'}) is not a CPython interpreter "
                              f"3.11 or later: {e.strerror.split(' (')[0]}") from None
        raise PyprofError(f"process {pid}: {e.strerror}") from None
    if not proc.known:
        attach.check_version(pid, proc.version)
        raise PyprofError(f"process {pid} runs CPython {'.'.join(map(str, proc.version))}, "
                          f"whose layout pyprof does not know")
    return Target(proc, info)


class Target:
    """A RemoteProcess and what check_process said of it."""

    def __init__(self, proc, info):
        self.proc, self.info, self.pid = proc, info, proc.pid


def read(target, stop=True, native=False) -> dict:
    """Every thread of `target` now, with its name, state and what it is blocked
    in. The kernel's view is read just before the stop (a thread stopped in a
    call would show the call's restart afterwards)."""
    from . import attach
    proc, pid = target.proc, target.pid
    kernel = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        raise PyprofError(f"process {pid} has exited") from None
    for tid in tids:
        kernel[tid] = task_state(pid, tid)
    try:
        gil_span = proc.gil_span()
    except OSError:
        gil_span = None
    note = ""
    if stop and target.info.get("tracer"):
        # ptrace is taken: read without stopping (consistent enough to show)
        stop, note = False, f"not stopped: process {target.info['tracer']} traces it"
    try:
        if stop:
            # a live read first fills the code cache: the stop then only re-checks it
            proc.threads(stop=False)
        threads = proc.threads(stop=stop, native=native and stop)
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise PyprofError(attach.check_ptrace(pid, target.info, denied=True)) from None
        if e.errno == errno.ESRCH:
            raise PyprofError(f"process {pid} has exited") from None
        raise PyprofError(f"cannot read process {pid}: {e.strerror or e}") from None
    for t in threads:
        # innermost first; the program's frames, not pyprof's runner's below them
        t["frames"] = program_frames(t["frames"][::-1], itemgetter(0))[::-1]
        state, call, arg0 = kernel.get(t["native_id"], ("?", None, None))
        t["name"] = thread_name(pid, t)
        t["state"] = state
        t["syscall"] = call
        t["blocked"] = blocked_text(call, arg0, gil_span, t["holds_gil"]) if call else ""
    threads.sort(key=lambda t: (not t["is_main"], t["native_id"]))
    return {"pid": pid, "argv": cmdline(pid), "python": ".".join(map(str, proc.version)),
            "threads": threads, "paused_ns": proc.last_pause_ns if stop else 0,
            "stopped": stop, "note": note, "other_tasks": len(set(tids) - {
                t["native_id"] for t in threads})}


def print_dump(d, native=False, out=None) -> None:
    import sys
    out = out or sys.stdout
    how = (f"all threads stopped {d['paused_ns'] / 1e6:.2f} ms" if d["stopped"]
           else d["note"] or "read without stopping")
    print(f"Process {d['pid']}: {d['argv']}", file=out)
    print(f"Python v{d['python']} (read from outside, nothing run in the process; {how})",
          file=out)
    if native and not d.get("native_available"):
        print("native stacks: not available (this pyprof was built without libunwind-ptrace: "
              "install libunwind-dev and reinstall pyprof)", file=out)
        native = False
    for t in d["threads"]:
        parts = [STATES.get(t["state"], t["state"])]
        if t["holds_gil"]:
            parts.append("holds the GIL")
        if t["blocked"]:
            parts.append(t["blocked"])
        print(file=out)
        print(f"Thread {t['native_id']} ({t['name']}): {', '.join(parts)}", file=out)
        for filename, qualname, line in t["frames"]:
            print(f"    {qualname} ({filename}:{line if line >= 0 else '?'})", file=out)
        if not t["frames"]:
            print("    (no Python frame)", file=out)
        if not t["complete"]:
            print("    (the stack changed while it was read: shown as far as it read)", file=out)
        if native:
            if t["native"] is None:
                print("  native: (not read: the threads were not stopped)", file=out)
            else:
                print("  native:", file=out)
                for text in t["native"]:
                    print(f"    {text}", file=out)
    if d["other_tasks"]:
        print(f"\n({d['other_tasks']} more thread(s) of the process run no Python)", file=out)


def dump(pid, native=False, out=None) -> int:
    target = open_process(pid)
    d = read(target, stop=True, native=native)
    d["native_available"] = target.proc.native_available
    print_dump(d, native, out)
    return 0
