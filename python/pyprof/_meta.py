"""The process part of a capture's META record: who ran what, where, when.

Shared by Profile (profiler.py) and the lean profiler of a child process
(children.py), which loads this module without the pyprof package: built-in
modules only.
"""
import os
import sys
import time

from ._version import __version__


def hostname() -> str:
    try:
        return os.uname().nodename      # socket would cost `import pyprof` ~5 ms
    except AttributeError:              # not POSIX
        import socket
        return socket.gethostname()


def cwd() -> str:
    try:
        return os.getcwd()
    except OSError:                     # removed while running
        return ""


def process_meta(modes, thread_names) -> dict:
    """The fields every capture's meta has (docs/capture-format.md)."""
    return {
        "pyprof_version": __version__,
        "argv": list(sys.argv),
        "executable": sys.executable,
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "pid": os.getpid(),
        "host": hostname(),
        "cwd": cwd(),
        "modes": list(modes),
        "written_at": time.time(),
        "thread_names": dict(thread_names),
    }
