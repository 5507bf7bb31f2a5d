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
_LAZY = {"profile": "runtime.decorator", "Profile": "runtime.profiler", "run": "runtime.profiler",
         "runctx": "runtime.profiler", "step": "runtime.steps", "Session": "model.session",
         "Function": "model.session", "Counters": "model.session",
         "LineCounters": "model.session", "LineMemory": "model.session",
         "CallRow": "model.session", "Thread": "model.session", "load": "model.session"}


# Submodules `import pyprof` used to load, reachable as attributes (pyprof._cprof),
# some of them now in a sub-package.
_SUBMODULES = {"_cprof": "_cprof", "errors": "errors", "export": "export", "options": "options",
               "session": "session", "views": "views", "diff": "diff", "merge": "merge",
               "stats": "stats", "_meta": "runtime._meta", "control": "live.control",
               "lines": "runtime.lines", "profiler": "runtime.profiler", "steps": "runtime.steps"}


# The clusters' public paths (`import pyprof.dask`, .ray, .spark): modules of
# the _paths folder, on the package's path (docs/architecture.md).
__path__.append(_os.path.join(_os.path.dirname(__file__), "_paths"))


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None and name in _SUBMODULES:
        import importlib
        value = importlib.import_module("." + _SUBMODULES[name], __name__)
        globals()[name] = value
        return value
    if module is None:
        raise AttributeError(f"module 'pyprof' has no attribute {name!r}")
    import importlib
    import sys
    # First used by a program that pyprof profiles (pyprof.step under
    # `python -m pyprof`): the import is pyprof's work, not the program's.
    cprof = sys.modules.get(__name__ + "._cprof")
    prof = cprof.active() if cprof is not None else None
    # (a bare _cprof.Profiler, not pyprof's, has no thread_paused: left alone)
    paused = prof is not None and not getattr(prof, "thread_paused", True)
    if paused:
        prof.thread_paused = True
    try:
        value = getattr(importlib.import_module("." + module, __name__), name)
    finally:
        if paused:
            prof.thread_paused = False
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ip):
    """``%load_ext pyprof``: registers the %cprof / %%cprof magics."""
    from .integrations.magic import load_ipython_extension as load
    load(ip)


if _os.environ.get("PYPROF_SIGNAL"):       # sampling on a signal (live/control.py)
    from .live import control as _control
    _control.install_from_environment()
if _os.environ.get("PYPROF_LISTEN", "") not in ("", "0"):   # the control channel (live/channel.py)
    from .live import channel as _channel
    _channel.install_from_environment()
