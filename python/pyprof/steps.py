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

from . import _cprof
from .session import REC_STEP, Session, Step, _pack_step, _record, counters_delta


def _profiler():
    return _cprof.active()


def _now(p) -> float:
    return (time.monotonic_ns() - p._start_mono_ns) / 1e9


class StepRecorder:
    """The steps of one Profile: the markers, the step open now and the
    counters read at its start, and the records of the steps that ended
    (shared with the C core, which writes them with every capture)."""

    def __init__(self, prof):
        self.prof = prof
        self.markers = []               # {"index", "name", "event", "t"} (meta["steps"])
        self.records = []               # STEP records of ended steps
        # the step running: (index, name, start, counters at its start as the
        # C core's bytes; parsed only when it ends, so that between marks
        # pyprof keeps no objects of its own in the program's heap)
        self.open = None
        self.ns_per_tick = None         # ticks -> ns, the same for every snapshot of the steps
        prof.set_records(self.records)

    def prof_seconds(self) -> float:
        return _now(self.prof)

    def _counters(self) -> bytes:
        # The clock's calibration keeps refining; snapshots compared with each
        # other must convert ticks alike, or a function that did not run in a
        # step would show a few ns there.
        if self.ns_per_tick is None:
            self.ns_per_tick = _cprof.clock_info()["ns_per_tick"]
        return self.prof.snapshot(True, True, self.ns_per_tick)

    def start(self, name) -> None:
        was = self._pause()
        try:
            self._start(name)
        finally:
            self._resume(was)

    def end(self, name) -> None:
        was = self._pause()
        try:
            self._end_marked(name)
        finally:
            self._resume(was)

    # pyprof's own work at a mark is not the program's: the thread's events
    # are not recorded meanwhile (only the call of pyprof.step itself is)
    def _pause(self) -> bool:
        was = self.prof._thread_paused
        self.prof._thread_paused = True
        return was

    def _resume(self, was) -> None:
        if not was:
            self.prof._thread_paused = False

    def _start(self, name) -> None:
        now_counters = self._counters()
        t = _now(self.prof)
        if self.open is not None:
            self._end(now_counters, t)
        index = sum(1 for m in self.markers if m["event"] == "start")
        self.markers.append({"index": index, "name": name, "event": "start", "t": t})
        self.open = (index, name, t, now_counters)

    def _end_marked(self, name) -> None:
        if self.open is None:
            return
        t = _now(self.prof)
        self.markers.append({"index": self.open[0], "name": name, "event": "end", "t": t})
        self._end(self._counters(), t)

    def close(self) -> None:
        """Profiling stopped: the open step ends here."""
        if self.open is not None:
            self._end(self._counters(), _now(self.prof))

    def _end(self, counters, t) -> None:
        self.records.append(_record(REC_STEP, _pack_step(self.ending(counters, t))))
        self.open = None

    def ending(self, counters, t) -> Step:
        """The open step as if it ended at `t` with `counters` (the C core's bytes)."""
        index, name, start, before = self.open
        after = Session.from_blob(counters)
        data = counters_delta(after, Session.from_blob(before))
        data.adopt(after)
        return Step(index, name, start, t, data)

    def clear(self) -> None:
        self.markers.clear()
        self.records.clear()
        self.open = None
        self.ns_per_tick = None


def _mark(event, name):
    p = _profiler()
    rec = getattr(p, "_step_recorder", None) if p is not None else None
    if rec is None:
        return
    if event == "start":
        rec.start(name)
        if getattr(p, "_objects_at_steps", False):
            from .objects import summary
            m = rec.markers[-1]
            p._objects_steps.append({"index": m["index"], "name": name, "t": m["t"],
                                     "objects": summary(limit=15)})
    else:
        rec.end(name)


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
