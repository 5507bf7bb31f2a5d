"""Sampling switched on and off in a running program by a signal.

With ``PYPROF_SIGNAL=USR2`` (any catchable signal but PROF) in the environment of a
program that imports pyprof (itself, or from sitecustomize), each time the
process receives that signal sampling starts, and the next time it stops and
the capture is written: to ``PYPROF_OUTPUT`` if set (a stop overwrites it), else
``pyprof-PID-N.cprof`` in the current directory. ``PYPROF_WALL=1`` samples wall
time, ``PYPROF_RATE`` sets the rate; each falls back to ``output``, ``wall`` and
``rate`` of [tool.pyprof] in the nearest pyproject.toml (config.py). Python
runs signal handlers in the main thread between bytecodes, so the switch itself
is safe at any time.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

_state = {"prof": None, "n": 0, "signum": None, "previous": None}


def _toggle(signum, frame):
    from ..errors import PyprofError
    from ..runtime.profiler import Profile
    prof = _state["prof"]
    if prof is None:
        settings = _settings()
        prof = Profile(mode="sample", wall=bool(settings.get("wall")), rate=settings.get("rate"))
        try:
            prof.enable()
        except (ValueError, RuntimeError) as e:
            print(f"pyprof: cannot start sampling: {e}", file=sys.stderr)
            return
        _state["prof"] = prof
        return
    _state["prof"] = None
    prof.disable()
    path = _settings().get("output") or f"pyprof-{os.getpid()}-{_state['n']}.cprof"
    _state["n"] += 1
    try:
        prof.dump(path)
        print(f"pyprof: wrote {path}", file=sys.stderr)
    except PyprofError as e:
        print(f"pyprof: error: {e}", file=sys.stderr)


def _settings() -> dict:
    """rate, wall and output: PYPROF_* > [tool.pyprof] (config.py); a bad
    configuration is said once and the environment alone is used."""
    from ..options import config
    from ..errors import PyprofError
    try:
        cfg = config.load()
    except PyprofError as e:
        if not _state.get("warned"):
            _state["warned"] = True
            print(f"pyprof: {e}; ignored", file=sys.stderr)
        try:
            cfg = config.Config(path="")                    # the environment alone
        except PyprofError:
            cfg = config.Config(path="", environ={})
    return {key: cfg.value("", key) for key in ("rate", "wall", "output")}


def install_from_environment():
    """At import: honour PYPROF_SIGNAL (main thread only, where Python lets
    signal handlers be set)."""
    name = os.environ.get("PYPROF_SIGNAL")
    if not name or _state["signum"] is not None:
        return
    from ..options import usable_signal
    num = usable_signal(name)
    if num is None:
        print(f"pyprof: PYPROF_SIGNAL={name!r} is not a signal pyprof can use "
              "(e.g. USR1, USR2); ignored", file=sys.stderr)
        return
    if threading.current_thread() is not threading.main_thread():
        return
    _state["previous"] = signal.signal(num, _toggle)
    _state["signum"] = num


def uninstall():
    """The command line runs its own profiler: give the signal back."""
    if _state["signum"] is not None:
        signal.signal(_state["signum"], _state["previous"] or signal.SIG_DFL)
        _state["signum"] = None
