"""Step markers (docs/memory.md#steps): where each step of a training loop or
a server loop starts and ends, in the capture's time, so the memory curve can
show them and ``--objects`` can summarise live objects at each.

    for batch in data:
        pyprof.step()                   # a new step starts here
        train(batch)

    with pyprof.step("epoch 3"):        # or a step with a start and an end
        ...

Outside profiling it does nothing.
"""
from __future__ import annotations

import time

from . import _cprof


def _profiler():
    return _cprof.active()


def _mark(event, name):
    p = _profiler()
    if p is None or not hasattr(p, "_steps"):
        return
    index = sum(1 for m in p._steps if m["event"] == "start") - (event == "end")
    t = (time.monotonic_ns() - p._start_mono_ns) / 1e9
    p._steps.append({"index": index, "name": name, "event": event, "t": t})
    if event == "start" and getattr(p, "_objects_at_steps", False):
        from .objects import summary
        p._objects_steps.append({"index": index, "name": name, "t": t,
                                 "objects": summary(limit=15)})


class step:
    """``pyprof.step(name=None)``: a new step starts; as a context manager, the
    step also ends when the block does."""

    def __init__(self, name: str | None = None):
        self.name = name
        _mark("start", name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _mark("end", self.name)
        return False
