"""Steps (docs/steps.md): where each step of a training loop or a server loop
starts and ends, and what was counted during each one.

    for batch in data:
        pyprof.step()                   # a new step starts here (and the last one ends)
        train(batch)

    with pyprof.step("epoch 3"):        # or a step with a start and an end
        ...

At each mark the profiler's counters are read (calls still open count up to
the mark), and a step's counters are the difference between its end and its
start: a function that runs across steps has its time split between them.
The steps are written into the capture (record STEP) and the memory curve shows
them. Outside profiling it does nothing.
"""
from __future__ import annotations

import time

from .. import _cprof

# The data model (session) is imported at the first mark, not here: pyprof.step
# resolves at the program's first use (pyprof/__init__.py), inside its run.


# The counters of every step are held in memory until the capture is written:
# about 40 bytes per function, caller/callee pair and call path that changed
# during the step. Past this many bytes, later steps keep their markers only.
MAX_BYTES = 256 << 20


def _profiler():
    return _cprof.active()


def _now(p) -> float:
    return (time.monotonic_ns() - p.start_mono_ns) / 1e9


class StepRecorder:
    """The steps of one Profile: the markers, the step open now, and the
    records of the steps that ended (shared with the C core, which writes them
    with every capture). The C core keeps the counters of the last mark and
    gives what changed since (Profiler._step_counters), so a mark costs time
    in proportion to the rows that changed, and pyprof keeps no Python objects
    of its own in the program's heap between marks."""

    def __init__(self, prof):
        self.prof = prof
        self.markers = []               # {"index", "name", "event", "t"} (meta["steps"])
        self.records = []               # STEP records of ended steps
        self.open = None                # the step running: (index, name, start)
        self.started = 0
        self.kept_bytes = 0
        self.dropped = 0                # steps whose counters did not fit in MAX_BYTES
        prof.set_records(self.records)

    def start(self, name) -> None:
        counters = self.prof.step_counters()       # since the last mark
        t = _now(self.prof)
        if self.open is not None:
            self._record(counters, t)
        index = self.started
        self.started += 1
        self.markers.append({"index": index, "name": name, "event": "start", "t": t})
        self.open = (index, name, t)

    def end(self, name) -> None:
        if self.open is None:
            return
        counters = self.prof.step_counters()
        t = _now(self.prof)
        self.markers.append({"index": self.open[0], "name": name, "event": "end", "t": t})
        self._record(counters, t)

    def close(self) -> None:
        """Profiling stopped: the open step ends here."""
        if self.open is not None:
            self._record(self.prof.step_counters(), _now(self.prof))

    def _record(self, counters: bytes, t) -> None:
        from ..model import codec
        index, name, start = self.open
        self.open = None
        rec = codec.step_record(index, name, start, t, counters)
        if self.kept_bytes + len(rec) > MAX_BYTES:
            self.dropped += 1           # its marker stays (meta["steps"]), its counters not
            return
        self.kept_bytes += len(rec)
        self.records.append(rec)

    def running(self):
        """The open step as a Step up to now (for a live Session), or None."""
        if self.open is None:
            return None
        from ..model.session import Session, Step
        index, name, start = self.open
        data = Session.from_blob(self.prof.step_counters(peek=True))
        return Step(index, name, start, _now(self.prof), data)

    def clear(self) -> None:
        self.markers.clear()
        self.records.clear()
        self.open = None
        self.started = 0
        self.kept_bytes = 0
        self.dropped = 0


def _mark(event, name):
    p = _profiler()
    rec = getattr(p, "step_recorder", None) if p is not None else None
    if rec is None:
        return
    # pyprof's own work at a mark is not the program's: the thread's events are
    # not recorded meanwhile, so only the call of pyprof.step shows (its time
    # is what a mark costs). Set here, in the frame that unsets it, so the
    # profiler's shadow stack stays balanced.
    was_paused = p.thread_paused
    p.thread_paused = True
    try:
        if event == "start":
            rec.start(name)
            if getattr(p, "objects_at_steps", False):
                from .objects import summary
                m = rec.markers[-1]
                p.objects_steps.append({"index": m["index"], "name": name, "t": m["t"],
                                         "objects": summary(limit=15)})
        else:
            rec.end(name)
    finally:
        if not was_paused:
            p.thread_paused = False


class step:
    """``pyprof.step(name=None)``: a new step starts (the previous one ends);
    as a context manager, the step also ends when the block does."""

    def __init__(self, name: str | None = None):
        self.name = name
        _mark("start", name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _mark("end", self.name)
        return False
