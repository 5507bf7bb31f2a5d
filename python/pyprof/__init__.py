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
from ._version import __version__
from .errors import PyprofError
from .lines import profile
from .profiler import Profile, run, runctx
from .model.session import CallRow, Counters, Function, LineCounters, Session, Thread, load
from .steps import step

__all__ = ["Profile", "profile", "run", "runctx", "step", "Session", "Function", "Counters",
           "LineCounters", "CallRow", "Thread", "load", "PyprofError", "__version__"]



def load_ipython_extension(ip):
    """``%load_ext pyprof``: registers the %cprof / %%cprof magics."""
    from .magic import load_ipython_extension as load
    load(ip)


from . import control as _control   # noqa: E402

_control.install_from_environment()         # PYPROF_SIGNAL: sampling on a signal
