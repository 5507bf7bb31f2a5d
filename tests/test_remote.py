"""remote.c through _cprof.RemoteProcess (docs/attach.md, "How pyprof gets in"):
the per-version layouts against CPython's own structures, and a call queued in
real interpreters of every installed supported version — run by the target
itself, withdrawn when it has not run, the target unharmed. Ground truth: the
target's own output, its exit status and the kernel's view (/proc)."""
import errno
import glob
import os
import re
import subprocess
import sys
import time

import pytest

from pyprof import _cprof

ROOT = os.path.dirname(sys.base_prefix)
pytestmark = pytest.mark.skipif(
    open("/proc/sys/kernel/yama/ptrace_scope").read().strip() == "3"
    if os.path.exists("/proc/sys/kernel/yama/ptrace_scope") else False,
    reason="the kernel forbids ptrace (kernel.yama.ptrace_scope = 3)")


def pythons():
    """The newest installed patch release of each supported minor version."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "3.*", "bin", "python3.*"))):
        m = re.search(r"/3\.(\d+)\.(\d+)/bin/python3\.(\d+)$", path)
        if m and 11 <= int(m.group(3)) <= 13 and m.group(1) == m.group(3):
            found[int(m.group(3))] = path
    if not found:                               # not a pyenv layout: this interpreter only
        found[sys.version_info[1]] = getattr(sys, "_base_executable", sys.executable)
    return sorted(found.items())


TARGET = r"""
import sys, threading, time
mode = sys.argv[1]
print("up", flush=True)
if mode == "ticking":           # the main thread runs Python between short sleeps
    end = time.monotonic() + 20
    while time.monotonic() < end and not __import__("os").path.exists(sys.argv[2]):
        time.sleep(0.01)
elif mode == "blocked":         # every thread waits in C until stdin closes
    sys.stdin.read()
print("done", flush=True)
"""


def start(python, mode, *args):
    p = subprocess.Popen([python, "-c", TARGET, mode, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n"
    return p


def wait_blocked(pid):
    """Until the process's only thread sleeps in the kernel (it printed before it
    blocked: it may still run Python for a moment)."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "S":
                time.sleep(0.05)
                return
        time.sleep(0.005)
    raise AssertionError("the target never blocked")


def test_this_builds_layout_row_matches_its_structures():
    assert _cprof._remote_layout_check() is None


@pytest.mark.parametrize("minor,python", pythons())
def test_queued_call_runs_in_the_target(minor, python, tmp_path):
    stop = tmp_path / "stop"
    ran = tmp_path / "ran"
    p = start(python, "ticking", str(stop))
    try:
        r = _cprof.RemoteProcess(p.pid)
        assert r.version[:2] == (3, minor) and r.known
        main_ident, holder, _ = r.gil()
        assert main_ident != 0
        text = f"__import__('builtins').exec(\"open({str(ran)!r}, 'w').write('x')\", {{}})"
        slot, where, paused_ns = r.queue_call(text.encode())
        assert slot is not None, "the queue was busy"
        assert 0 < paused_ns < 1e9
        end = time.monotonic() + 10
        # (the file exists a moment before the target's write lands in it)
        while not (ran.exists() and ran.read_text() == "x") and time.monotonic() < end:
            time.sleep(0.005)
        assert ran.read_text() == "x"
        assert not r.call_queued(slot, where)
        assert not r.cancel_call(slot, where)       # it ran: nothing to withdraw
        r.clear(where, len(text) + 1)
        stop.write_text("")
        out, err = p.communicate(timeout=30)
        assert (p.returncode, out, err) == (0, "done\n", "")
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("minor,python", pythons())
def test_withdrawn_call_runs_nothing(minor, python, tmp_path):
    ran = tmp_path / "ran"
    p = start(python, "blocked")
    try:
        wait_blocked(p.pid)
        r = _cprof.RemoteProcess(p.pid)
        text = f"__import__('builtins').exec(\"open({str(ran)!r}, 'w').write('x')\", {{}})"
        slot, where, _ = r.queue_call(text.encode())
        time.sleep(0.2)
        assert r.call_queued(slot, where)           # no thread ran Python meanwhile
        assert r.cancel_call(slot, where)
        r.clear(where, len(text) + 1)
        out, err = p.communicate("", timeout=30)    # the main thread runs Python again
        assert (p.returncode, out, err) == (0, "done\n", "")
        assert not ran.exists()
        with open(f"/proc/{os.getpid()}/status") as f:
            assert "TracerPid:\t0" in f.read()
    finally:
        p.kill()
        p.wait()


def test_not_a_python_process():
    p = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(OSError) as e:
            _cprof.RemoteProcess(p.pid)
        assert e.value.errno == errno.ENOENT
        assert "Py_Version" in str(e.value)
        with open(f"/proc/{p.pid}/status") as f:
            assert "TracerPid:\t0" in f.read()
    finally:
        p.kill()
        p.wait()
