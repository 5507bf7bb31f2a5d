"""pyprof: where do the time and the memory go?

Deterministic function profiling with cProfile's interface and a C core:

    import pyprof
    with pyprof.Profile() as p:
        work()
    p.print_stats("cumulative")
    p.dump("work.cprof")            # capture file; "work.prof" writes pstats

    session = pyprof.Session.load("work.cprof")

    @pyprof.profile                 # time every line of a function
    def hot(): ...

Command line: ``python -m pyprof [-o FILE] [-s SORT] [-m module | -c code | script] [args...]``.
IPython/Jupyter: ``%load_ext pyprof``, then ``%%cprof`` (docs/notebook.md).
"""
import os as _os

from ._version import __version__
from .errors import PyprofError

__all__ = ["Profile", "profile", "run", "runctx", "step", "Session", "Function", "Counters",
           "LineCounters", "LineMemory", "CallRow", "Thread", "load", "PyprofError", "__version__"]

# The public names load on first use (PEP 562): `import pyprof` stays cheap for
# @profile users and for `python -m pyprof`, which needs neither the data model
# nor the exporters to write a capture.
_LAZY = {"profile": "decorator", "Profile": "profiler", "run": "profiler", "runctx": "profiler",
         "step": "steps", "Session": "model.session", "Function": "model.session",
         "Counters": "model.session", "LineCounters": "model.session",
         "LineMemory": "model.session", "CallRow": "model.session",
         "Thread": "model.session", "load": "model.session"}


# Submodules `import pyprof` used to load, reachable as attributes (pyprof._cprof).
_SUBMODULES = ("_cprof", "_meta", "control", "errors", "export", "lines", "options",
               "profiler", "session", "steps", "views", "diff", "merge", "stats")


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None and name in _SUBMODULES:
        import importlib
        return importlib.import_module("." + name, __name__)   # sets the attribute too
    if module is None:
        raise AttributeError(f"module 'pyprof' has no attribute {name!r}")
    import importlib
    import sys
    # First used by a program that pyprof profiles (pyprof.step under
    # `python -m pyprof`): the import is pyprof's work, not the program's.
    cprof = sys.modules.get(__name__ + "._cprof")
    prof = cprof.active() if cprof is not None else None
    paused = prof is not None and not prof._thread_paused
    if paused:
        prof._thread_paused = True
    try:
        value = getattr(importlib.import_module("." + module, __name__), name)
    finally:
        if paused:
            prof._thread_paused = False
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ip):
    """``%load_ext pyprof``: registers the %cprof / %%cprof magics."""
    from .magic import load_ipython_extension as load
    load(ip)


if _os.environ.get("PYPROF_SIGNAL"):       # sampling on a signal (control.py)
    from . import control as _control
    _control.install_from_environment()
if _os.environ.get("PYPROF_LISTEN", "") not in ("", "0"):   # the control channel (channel.py)
    from . import channel as _channel
    _channel.install_from_environment()
