"""pyprof.Profile: a drop-in for cProfile.Profile backed by pyprof's C core.

Same constructor, methods and ``.stats`` as cProfile.Profile; on top of them,
:meth:`Profile.session` gives the full data model and :meth:`Profile.dump`
writes a .cprof capture (or pstats, by file suffix).
"""
from __future__ import annotations

import functools
import json
import os
import threading
from collections import namedtuple

from . import _cprof
from . import lines as lines_mod
from ._meta import process_meta
from .errors import PyprofError
from .export import export, format_for_path
from .export import pstats as pstats_export
from .model.session import Session
from .steps import StepRecorder
from .analysis.timeline import DEFAULT_MAX_EVENTS, duration_ns

# The shapes cProfile's getstats() returns (_lsprof.profiler_entry/subentry).
profiler_entry = namedtuple(
    "profiler_entry", "code callcount reccallcount totaltime inlinetime calls")
profiler_subentry = namedtuple(
    "profiler_subentry", "code callcount reccallcount totaltime inlinetime")


class Profile(_cprof.Profiler):
    """Profile(timer=None, timeunit=0.0, subcalls=True, builtins=True, *,
    exact_builtins=False, flush_to=None, flush_interval=10.0,
    lines=False, lines_of=(), lines_all=None, include=(), exclude=(), paths=True,
    timeline=False, timeline_min_duration=0, timeline_max_events=1000000)

    Deterministic function profiler with cProfile's interface. ``timer`` and
    ``timeunit`` behave as cProfile's (a callable returning float seconds, or an
    integer scaled by ``timeunit``); by default pyprof's own clock is used.
    ``exact_builtins`` (3.12+): keep CALL events on at every call site, as
    cProfile does; by default a call site whose first 64 calls all went to
    Python functions stops reporting calls (see docs/columns.md, "Builtins").
    ``flush_to``: a .cprof path rewritten every ``flush_interval`` seconds while
    enabled, so a crash or ``os._exit`` leaves the last flush readable.

    ``paths``: record the calling-context tree (each function per chain of
    callers; the code view and the stack exports of traced runs use it); off
    saves one table lookup per call.

    Line mode (any of the following): every line of the line targets is timed as
    well, with the calls made from it (docs/lines.md). ``lines=True``: targets are
    the functions given to ``add_function`` or decorated with ``pyprof.profile``;
    ``lines_of``: patterns (``module``, ``module:function``, ``module:Class.method``,
    a file glob); ``lines_all``: a directory whose code is all traced (not
    site-packages nor the standard library), ``include``/``exclude``: file globs.

    Timeline (function mode, also with ``memory=True``; docs/timeline.md):
    ``timeline=True`` keeps every ended call lasting at least
    ``timeline_min_duration`` (integer nanoseconds, or a string such as
    ``"10us"``; default 0: all) as (thread, function, start, duration), at most
    ``timeline_max_events`` of them over all threads (24 bytes each); the calls
    left out are counted. ``dump("x.trace.json")`` writes a Chrome/Perfetto trace.
    """

    def __init__(self, timer=None, timeunit=0.0, subcalls=True, builtins=True, *,
                 exact_builtins=False, flush_to=None, flush_interval=10.0,
                 lines=False, lines_of=(), lines_all=None, include=(), exclude=(),
                 mode="trace", rate=None, wall=False, native=False, memory=False,
                 memory_sample=0, memory_stacks=None, paths=True, timeline=False,
                 timeline_min_duration=0, timeline_max_events=DEFAULT_MAX_EVENTS, children=False,
                 _warn=True):
        super().__init__(timer, timeunit, subcalls, builtins, exact_builtins=exact_builtins,
                         mode=mode, rate=float(rate or 0.0), wall=wall, native=native,
                         memory=memory, memory_sample=int(memory_sample or 0),
                         memory_stacks=-1 if memory_stacks is None else int(bool(memory_stacks)),
                         paths=paths)
        self._warn_replaced = _warn
        # children=True (or the main output's path): follow child processes
        # from the first enable (docs/children.md); they get these arguments.
        self._children_opt = children
        self._children = None
        self._child_kwargs = dict(
            builtins=builtins, exact_builtins=exact_builtins, lines=lines,
            lines_of=list(lines_of), lines_all=lines_all, include=list(include),
            exclude=list(exclude), mode=mode, rate=rate, wall=wall, native=native,
            memory=memory, memory_sample=memory_sample, memory_stacks=memory_stacks,
            paths=paths, timeline=timeline, timeline_min_duration=timeline_min_duration,
            timeline_max_events=timeline_max_events)
        self._child_flush = float(flush_interval or 0.0)
        self._step_recorder = StepRecorder(self)    # pyprof.step() (steps.py)
        self._objects_at_steps = False
        self._objects_steps = []
        self._thread_names = {}
        self.meta = {}
        self.stats = {}
        self.line_targets = None
        if lines or lines_of or lines_all or include:
            self.line_targets = lines_mod.Targets(lines_of, lines_all, include, exclude)
            self._set_lines(self.line_targets)
        if timeline:
            if self.line_targets is not None or mode != "trace":
                raise PyprofError("timeline=True records function calls: it goes with function "
                                  "mode (also with memory=True), not line mode, mode='sample' "
                                  "or mode='memory'")
            max_events = int(timeline_max_events)
            if not 0 <= max_events <= 0xFFFFFFFF:
                raise PyprofError(f"timeline_max_events must be in [0, 2**32), not {max_events}")
            self._set_timeline(duration_ns(timeline_min_duration), max_events)
        if flush_to is not None:
            self._refresh_meta()
            self.set_flush(os.fspath(flush_to), float(flush_interval or 0.0))

    def enable(self, *args, **kw):
        if self.memory:
            from . import _numpy
            _numpy.install()            # NumPy's array buffers, now or when it loads
        if self._children_opt and self._children is None:
            from . import children
            self._children = children.start(
                self, None if self._children_opt is True else os.fspath(self._children_opt),
                self._child_kwargs, self._child_flush)
        super().enable(*args, **kw)

    # -------------------------------------------------------- cProfile API
    def print_stats(self, sort=-1):
        import pstats
        if not isinstance(sort, tuple):
            sort = (sort,)
        pstats.Stats(self).strip_dirs().sort_stats(*sort).print_stats()

    def dump_stats(self, file):
        """Write pstats (marshal) to `file`, as cProfile does."""
        self.create_stats()
        pstats_export.write_dict(self.stats, file)

    def create_stats(self):
        self.disable()
        self.snapshot_stats()

    def snapshot_stats(self):
        self.stats = pstats_export.to_dict(self.session())

    def getstats(self):
        """Entries shaped like cProfile's: code is a code object, or a name for C functions."""
        session = self._session(include_open=False)
        objs = self._function_objects()
        sec = session.seconds
        with_subcalls = session.info.get("subcalls", True)
        subs = {}
        for (a, b), c in session.edge_totals().items():
            subs.setdefault(a, []).append(profiler_subentry(
                objs[b], c.calls, c.rec_calls, sec(c.total), sec(c.own)))
        return [profiler_entry(objs[fid], c.calls, c.rec_calls, sec(c.total), sec(c.own),
                               subs.get(fid, []) if with_subcalls else None)
                for fid, c in session.function_totals().items()]

    def run(self, cmd):
        import __main__
        dict_ = __main__.__dict__
        return self.runctx(cmd, dict_, dict_)

    def runctx(self, cmd, globals, locals):
        self.enable()
        try:
            exec(cmd, globals, locals)
        finally:
            self.disable()
        return self

    def runcall(self, func, /, *args, **kw):
        self.enable()
        try:
            return func(*args, **kw)
        finally:
            self.disable()

    def __call__(self, func):
        """As a decorator: every call of `func` runs profiled (calls made while
        the profiler is already enabled just run)."""
        @functools.wraps(func)
        def profiled(*args, **kw):
            if self.enabled:
                return func(*args, **kw)
            return self.runcall(func, *args, **kw)
        return profiled

    def clear(self):
        super().clear()
        self._step_recorder.clear()

    def __enter__(self):
        self.enable()
        return self

    def __exit__(self, *exc_info):
        self.disable()
        self._step_recorder.close()     # a step open when profiling stops ends there

    # -------------------------------------------------------- pyprof API
    def add_function(self, func):
        """Line mode: time every line of `func` (as ``@pyprof.profile``)."""
        if not self.lines:
            raise PyprofError("add_function needs line mode: Profile(lines=True)")
        codes = lines_mod.code_objects(func)
        if not codes:
            raise TypeError(f"cannot line-profile a {type(func).__name__} object")
        for code in codes:
            self._add_line_target(code)
        return func

    def session(self) -> Session:
        """Everything collected so far as a Session (calls still open count as ending now).
        With ``children``: merged with the captures the children have written."""
        session = self._session(include_open=True)
        if self._children is not None and os.getpid() == self._children["root_pid"]:
            from . import children
            session, _ = children.collect(session, self._children)
        return session

    def dump(self, path):
        """Disable, then write `path` in the format its name asks for: a .cprof
        capture, callgrind (``callgrind.out.*``, ``.callgrind``), line tables
        (``.txt``), else pstats."""
        self.disable()
        self._step_recorder.close()
        fmt = format_for_path(path)
        if self._children is not None and os.getpid() == self._children["root_pid"]:
            export(self.session(), fmt, path)       # merged with the children's
        elif fmt == "cprof" and self.sampling:
            self.session().save(path)           # with the native frames' names
        elif fmt == "cprof":
            self._refresh_meta()
            try:
                self.write_capture(os.fspath(path))
            except OSError as e:
                raise PyprofError(str(e)) from None
        elif fmt == "pstats":
            self.dump_stats(path)
        else:
            export(self.session(), fmt, path)

    # -------------------------------------------------------- internals
    def _session(self, include_open):
        self._refresh_meta()
        session = Session.from_blob(self.snapshot(include_open))
        running = self._step_recorder.running()     # the step running now, up to now
        if running is not None:
            running.data.adopt(session)
            session.steps.append(running)
        if session.stacks:
            _name_native_frames(session)
        return session

    def _refresh_meta(self):
        for t in threading.enumerate():
            if t.ident is not None:
                self._thread_names[str(t.ident)] = t.name
        modes = (["sample"] if self.sampling else
                 ["function", "lines"] if self.lines else
                 ["function", "timeline"] if self.timeline else ["function"])
        meta = process_meta(modes, self._thread_names)
        if self.memory:
            from . import _numpy
            meta["numpy_buffers"] = _numpy.status()
        if self._step_recorder.markers:
            meta["steps"] = list(self._step_recorder.markers)
        if self._step_recorder.dropped:
            meta["steps_dropped"] = self._step_recorder.dropped
        if self._objects_steps:
            meta["objects_steps"] = list(self._objects_steps)
        if self.lines:
            meta.update(_line_meta(self._function_objects(), self._line_targets()))
        meta.update(self.meta)
        self.set_meta(json.dumps(meta, default=str).encode())


def _name_native_frames(session):
    """Native addresses mean something only in this process: name them now."""
    ips, returns = set(), set()
    for st in session.stacks.values():
        ips.update(st.native)
        returns.update(st.native[1:])           # all but the leaf are return addresses
    if ips:
        from . import native
        session.meta["native_symbols"] = {str(ip): name for ip, name
                                          in native.symbolize(ips, returns).items()}


def _line_meta(objs, fids) -> dict:
    """Where each line target's text is, and a hash of each source file, so that
    a later view can tell when the source has changed."""
    targets, sources = {}, {}
    for fid in fids:
        code = objs[fid]
        last = max((ln for _, _, ln in code.co_lines() if ln), default=code.co_firstlineno)
        targets[str(fid)] = [code.co_firstlineno, last]
        sources.setdefault(code.co_filename, _file_hash(code.co_filename))
    return {"line_targets": targets, "sources": sources}


def _file_hash(path):
    import hashlib
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def run(statement, filename=None, sort=-1):
    """Profile `statement` in __main__'s namespace, as cProfile.run."""
    prof = Profile()
    try:
        prof.run(statement)
    except SystemExit:
        pass
    finally:
        _show(prof, filename, sort)


def runctx(statement, globals, locals, filename=None, sort=-1):
    """Profile `statement` in the given namespaces, as cProfile.runctx."""
    prof = Profile()
    try:
        prof.runctx(statement, globals, locals)
    except SystemExit:
        pass
    finally:
        _show(prof, filename, sort)


def _show(prof, filename, sort):
    if filename is not None:
        prof.dump(filename)
    else:
        prof.print_stats(sort)
