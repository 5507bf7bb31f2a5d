"""What the cluster integrations share (docs/clusters.md): the modes and
options a job takes, the per-process state of a job (task figures per group,
the trampoline frames that name a task in every stack), a capture as bytes,
and the merge of the workers' captures into one Session, a process each."""
from __future__ import annotations

import os
import threading

from ..errors import PyprofError

MODES = {"function": {"mode": "trace"}, "sample": {"mode": "sample"},
         "memory": {"mode": "memory"}, "lines": {"mode": "trace", "lines": True}}
# keywords the job sets itself (a worker's children and flushes are not gathered)
_NOT_OPTIONS = ("mode", "children", "flush_interval", "flush_to")


def check_options(mode, options, who="pyprof.dask.profile") -> dict:
    """Profile's keywords for `mode` and `options`, checked as Profile checks
    them (PyprofError, one message)."""
    from ..options import KEYWORDS, RunOptions
    if mode not in MODES:
        raise PyprofError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    bad = sorted(k for k in options if k not in KEYWORDS or k in _NOT_OPTIONS)
    if bad:
        known = ", ".join(k for k in KEYWORDS if k not in _NOT_OPTIONS)
        raise PyprofError(f"{who}: unknown option {bad[0]!r} (options: {known})")
    kwargs = {**options, **MODES[mode]}
    if mode == "lines" and not (kwargs.get("lines_of") or kwargs.get("lines_all")
                                or kwargs.get("include")):
        raise PyprofError("mode='lines' needs lines_of=[patterns] (or lines_all, include): "
                          "the functions to time line by line")
    RunOptions.from_profile(**{**KEYWORDS, **kwargs}).check()
    return kwargs


def merge_sessions(captures, engine="dask", summary=None, lost=(), errors=None):
    """One Session of the workers' captures [(name, .cprof bytes)], a process
    each; meta[engine] is `summary` with the task groups of all the workers,
    meta[engine + "_lost"] and [engine + "_errors"] what was not gathered."""
    import tempfile
    from ..analysis import taskgroups
    from ..analysis.merge import merge
    from ..model.session import Session
    sessions, sources = [], []
    with tempfile.TemporaryDirectory(prefix=f"pyprof-{engine}-") as tmp:
        for i, (who, data) in enumerate(captures):
            path = os.path.join(tmp, f"{i}.cprof")
            with open(path, "wb") as f:
                f.write(data)
            sessions.append(Session.load(path))
            sources.append(who)
    # the workers run the cluster's command, or a spawned interpreter: not one program
    session = merge(sessions, force=True, sources=sources)
    tasks = {}
    for rec in session.processes:
        taskgroups.add_tasks(tasks, ((rec.get(engine) or {}).get("tasks") or {}))
    session.meta[engine] = {**(summary or {}), "tasks": tasks}
    if lost:
        session.meta[engine + "_lost"] = list(lost)
    if errors:
        session.meta[engine + "_errors"] = dict(errors)
    return session


class TaskState:
    """One job's profile in this process."""

    def __init__(self, job, prof, info):
        self.job, self.prof, self.info = job, prof, info
        self.workers = [info.get("worker")]
        self.lock = threading.Lock()
        self.tasks = {}                 # prefix -> figures (add_tasks' shape)
        self.frames = {}                # prefix -> the trampoline function
        self.patched = None             # (module, name, original, wrapper)
        self.gathered = False
        self.windows = []               # open tasks' [live bytes at start, most live since]

    def begin(self):
        """A task starts: its memory window in exact memory mode (else None).
        Each call of _memory_window ends a segment of time with a known
        maximum; it is folded into every task open across it, so tasks that
        overlap (a Dask worker's threads) each get the peak of their own span."""
        from .. import _cprof
        with self.lock:
            now = _cprof._memory_window()
            if now is None:
                return None
            self._fold(now[1])
            window = [now[0], now[0]]
            self.windows.append(window)
            return window

    def end(self, window):
        """The task of `window` ends: the most bytes live above its start (bytes)."""
        if window is None:
            return None
        from .. import _cprof
        with self.lock:
            now = _cprof._memory_window()
            if now is not None:
                self._fold(now[1])
            try:
                self.windows.remove(window)
            except ValueError:
                pass
            return max(0, window[1] - window[0])

    def _fold(self, peak):
        for window in self.windows:
            if peak > window[1]:
                window[1] = peak

    def frame(self, prefix):
        fn = self.frames.get(prefix)
        if fn is None:
            fn = self.frames[prefix] = named(task_frame, f"dask task {prefix}", "<dask>")
        return fn

    def record(self, prefix, wall_ns, cpu_ns, erred, peak_bytes=None):
        with self.lock:
            t = self.tasks.get(prefix)
            if t is None:
                t = self.tasks[prefix] = {"count": 1, "erred": int(erred), "total_ns": wall_ns,
                                          "cpu_ns": cpu_ns, "min_ns": wall_ns, "max_ns": wall_ns,
                                          "sum_sq_ns2": wall_ns * wall_ns}
                if peak_bytes is not None:
                    t["peak_bytes"] = t["peak_sum_bytes"] = peak_bytes
                return
            if peak_bytes is not None:
                t["peak_bytes"] = max(t.get("peak_bytes", 0), peak_bytes)
                t["peak_sum_bytes"] = t.get("peak_sum_bytes", 0) + peak_bytes
            t["count"] += 1
            t["erred"] += int(erred)
            t["total_ns"] += wall_ns
            t["cpu_ns"] += cpu_ns
            t["sum_sq_ns2"] += wall_ns * wall_ns
            t["min_ns"] = min(t["min_ns"], wall_ns)
            t["max_ns"] = max(t["max_ns"], wall_ns)


def task_frame(run, args, kwargs):
    return run(*args, **kwargs)


def named(function, name, filename):
    """`function` under another code name: the frame every stack shows for a
    task of that group (its file is `filename`, line 1)."""
    code = function.__code__.replace(co_name=name, co_qualname=name,
                                     co_filename=filename, co_firstlineno=1)
    return type(function)(code, function.__globals__, name, function.__defaults__,
                          function.__closure__)


def capture_bytes(prof, prefix) -> bytes:
    """`prof`'s capture, written to a temporary file (removed) and read back."""
    import tempfile
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".cprof")
    os.close(fd)
    try:
        prof.dump(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)
