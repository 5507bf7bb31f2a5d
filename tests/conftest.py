import os
import signal
import subprocess
import sys

import pytest

from support import PROGRAMS, run_python

# A suite started in the background by a shell without job control inherits
# SIGINT ignored, and so would every program the tests start (Ctrl-C and
# KeyboardInterrupt tests): they get Python's own handler, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# the helper programs import each other as top-level modules, as when run as scripts
sys.path.insert(0, PROGRAMS)

HERE = os.path.dirname(os.path.abspath(__file__))


def pyprof_own_functions(session, package=None) -> list:
    """pyprof's own functions in a capture: those of a file of its package
    (this one's, or the directory `package`) and its C core's methods (the
    profiler's disable). pyprof gives them no function id, so none may be
    named (docs/how-it-works.md)."""
    import pyprof
    pkg = os.path.abspath(package or os.path.dirname(pyprof.__file__)) + os.sep
    return sorted(f"{fn.qualname} ({fn.filename})" for fn in session.functions.values()
                  if os.path.abspath(fn.filename).startswith(pkg)
                  or "pyprof._cprof" in fn.name)


_TRACER = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE = 0x4206
if libc.ptrace(PTRACE_SEIZE, int(sys.argv[1]), None, None) != 0:
    sys.exit(ctypes.get_errno())
print("tracing", flush=True)
time.sleep(30)
"""


def start_tracer(pid):
    """Another tracer of `pid` (PTRACE_SEIZE, which stops nothing), as a
    debugger or another profiler would be: a process to kill afterwards."""
    tracer = subprocess.Popen([sys.executable, "-c", _TRACER, str(pid)], stdout=subprocess.PIPE,
                              text=True)
    assert tracer.stdout.readline() == "tracing\n"
    return tracer


@pytest.fixture
def python_run():
    return run_python


monitoring_only = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="sys.monitoring exists on 3.12+ only")


# Python threads a test leaves running. On 3.12+ cProfile hears every thread
# (sys.monitoring is process-wide), so a test comparing against cProfile in
# this process is upset by another test's forgotten thread: named at the end.
_left_threads = {}


@pytest.fixture(autouse=True)
def _threads_left_behind(request):
    import threading
    before = {t.ident for t in threading.enumerate()}
    yield
    for t in threading.enumerate():
        if t.ident not in before and t.is_alive():
            _left_threads.setdefault(t, request.node.nodeid)


def pytest_terminal_summary(terminalreporter):
    left = [(test, t.name) for t, test in _left_threads.items() if t.is_alive()]
    if left:
        terminalreporter.section("Python threads left running by tests")
        for test, name in sorted(left):
            terminalreporter.write_line(f"{test}: {name}")
