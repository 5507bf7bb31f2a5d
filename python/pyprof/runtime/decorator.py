"""``@pyprof.profile``: time every line of a function (docs/lines.md).

Under ``python -m pyprof`` the decorated code joins the running profiler's line
targets; in a plain ``python script.py`` run the first decoration starts a
background line profiler whose tables are printed (or written) at exit.
"""

import atexit
import os
import sys

from ..errors import PyprofError
from .lines import DECORATED, code_objects


def profile(func=None):
    """Time every line of `func` (a function, method, classmethod, staticmethod,
    property, generator, coroutine or async generator); returns `func` unchanged.

    Under ``python -m pyprof -l`` the results go with the run's. In a plain
    ``python script.py`` run, the first decorated function starts pyprof, and the
    line tables are printed at exit (or written to the file named by the
    ``PYPROF_OUTPUT`` environment variable, else by ``output`` in [tool.pyprof]:
    ``.cprof``, ``.prof``, ``.txt``, ``.callgrind``). Decorating twice, or stacking with functools.wraps or
    functools.lru_cache, works.
    """
    if func is None:
        return profile
    codes = code_objects(func)
    if not codes:
        raise TypeError(f"pyprof.profile: cannot line-profile a {type(func).__name__!s} "
                        f"object ({func!r:.60}); decorate a function or method")
    from .. import _cprof
    running = _cprof.active()
    for code in codes:
        DECORATED.add(code)
        for prof in {running, _auto} - {None}:
            if prof.lines:
                prof.add_line_target(code)     # it may have met this code already
    if running is None:
        _start_at_exit_reporting()
    return func


# ------------------------------------------------------------------ plain runs
_auto = None
_auto_tried = False


def _start_at_exit_reporting():
    """A plain ``python script.py`` run: start a line profiler at the first
    decoration and report at exit. (Under ``python -m pyprof`` the CLI's profiler
    is already running; with -l it takes the decorated code.)"""
    global _auto, _auto_tried
    if _auto_tried:
        return
    _auto_tried = True
    from .profiler import Profile
    _auto = Profile(lines=True)
    _auto.set_background(True)         # explicit profilers take precedence
    try:
        _auto.enable()
    except (ValueError, RuntimeError) as e:   # another tool holds the hooks
        print(f"pyprof: @profile cannot start: {e}", file=sys.stderr)
        _auto = None
        return
    atexit.register(_report_at_exit)


def _report_at_exit():
    global _auto
    prof, _auto = _auto, None
    if prof is None:
        return
    prof.disable()
    out = os.environ.get("PYPROF_OUTPUT")
    if out is None:                     # else [tool.pyprof] output (config.py)
        from ..options import config
        try:
            out = config.load().value("", "output")
        except PyprofError as e:
            print(f"pyprof: {e}; ignored", file=sys.stderr)
    try:
        if out:
            prof.dump(out)
        else:
            from ..render.printout import print_capture
            print_capture(prof.session(), sys.stdout)
    except PyprofError as e:
        print(f"pyprof: error: {e}", file=sys.stderr)

