"""pyprof.Profile: a drop-in for cProfile.Profile backed by pyprof's C core.

Same constructor, methods and ``.stats`` as cProfile.Profile; on top of them,
:meth:`Profile.session` gives the full data model and :meth:`Profile.dump`
writes a .cprof capture (or pstats, by file suffix).
"""
import os
import sys

from ._meta import json_text, process_meta
from .core import Core, watch_threading
from ..errors import PyprofError
from ..options import KEYWORDS, RunOptions

# Imported where used, so that a run writing a .cprof capture loads neither the
# data model nor the exporters (start-up: docs/cli.md): lines, session, steps,
# export, threading, json.

_SHAPES = []


def _entry_shapes():
    """The shapes cProfile's getstats() returns (_lsprof.profiler_entry/subentry)."""
    if not _SHAPES:
        from collections import namedtuple
        _SHAPES.append(namedtuple(
            "profiler_entry", "code callcount reccallcount totaltime inlinetime calls"))
        _SHAPES.append(namedtuple(
            "profiler_subentry", "code callcount reccallcount totaltime inlinetime"))
    return _SHAPES


class Profile(Core):
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

    ``options``: a :class:`pyprof.options.RunOptions` instead of the keywords
    (the command line's and %%cprof's); ``run_options`` is the one in use.
    Options out of range or that do not combine raise OptionError (a
    PyprofError and a ValueError), with one message each (options.py).
    """

    def __init__(self, timer=None, timeunit=0.0, subcalls=True, builtins=True, *,
                 flush_to=None, options=None, _warn=True, **keywords):
        # the keywords and their defaults are the option table's (options/table.py);
        # one RunOptions, checked once: what the C core, the line targets, the
        # timeline and the children get comes from it. `options`: a RunOptions
        # given instead of the keywords (the command line, %%cprof).
        unknown = sorted(set(keywords) - set(KEYWORDS))
        if unknown:
            raise TypeError(f"Profile() got an unexpected keyword argument {unknown[0]!r}")
        given = {**KEYWORDS, **keywords, "builtins": builtins}
        flush_interval, children = given["flush_interval"], given["children"]
        opts = options if options is not None else RunOptions.from_profile(**given)
        opts.check()
        kw = opts.profile_kwargs()
        self.core_arguments = opts.core_arguments()
        super().__init__(timer, timeunit, subcalls, **self.core_arguments)
        self.run_options = opts
        self._warn_replaced = _warn
        # children=True (or the main output's path): follow child processes
        # from the first enable (docs/children.md); they get these arguments.
        self._children_opt = children
        self._children = None
        self._child_kwargs = kw
        self._child_flush = float(flush_interval or 0.0)
        self._steps = None              # pyprof.step()'s recorder, made at the first step
        # internal (the runner's --objects, steps.py): an objects summary at each step
        self.objects_at_steps = False
        self.objects_steps = []
        self._thread_names = {}
        self.meta = {}
        self.stats = {}
        self.line_targets = None
        if opts.line_mode:
            from . import lines as lines_mod
            self.line_targets = lines_mod.Targets(kw["lines_of"], kw["lines_all"],
                                                  kw["include"], kw["exclude"])
            self._set_lines(self.line_targets)
        if opts.timeline:
            self._set_timeline(opts.timeline_min_duration, opts.timeline_max_events)
        if flush_to is not None:
            self.refresh_meta()
            self.set_flush(os.fspath(flush_to), float(flush_interval or 0.0))

    @property
    def step_recorder(self):
        """Internal (steps.py, children.py): pyprof.step()'s recorder, made at first use."""
        if self._steps is None:
            from .steps import StepRecorder
            self._steps = StepRecorder(self)
        return self._steps

    def enable(self, *args, **kw):
        if self.memory:
            from . import _numpy
            _numpy.install()            # NumPy's array buffers, now or when it loads
        if self._children_opt and self._children is None:
            from . import children
            self._children = children.start(
                self, None if self._children_opt is True else os.fspath(self._children_opt),
                self._child_kwargs, self._child_flush)
        watch_threading(self)
        super().enable(*args, **kw)

    # -------------------------------------------------------- cProfile API
    def print_stats(self, sort=-1):
        import pstats
        if not isinstance(sort, tuple):
            sort = (sort,)
        pstats.Stats(self).strip_dirs().sort_stats(*sort).print_stats()

    def dump_stats(self, file):
        """Write pstats (marshal) to `file`, as cProfile does."""
        from ..export import pstats as pstats_export
        self.create_stats()
        pstats_export.write_dict(self.stats, file)

    def create_stats(self):
        self.disable()
        self.snapshot_stats()

    def snapshot_stats(self):
        from ..export import pstats as pstats_export
        self.stats = pstats_export.to_dict(self.session())

    def getstats(self):
        """Entries shaped like cProfile's: code is a code object, or a name for C functions."""
        profiler_entry, profiler_subentry = _entry_shapes()
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
        import functools

        @functools.wraps(func)
        def profiled(*args, **kw):
            if self.enabled:
                return func(*args, **kw)
            return self.runcall(func, *args, **kw)
        return profiled

    def clear(self):
        super().clear()
        if self._steps is not None:
            self._steps.clear()

    def __enter__(self):
        self.enable()
        return self

    def __exit__(self, *exc_info):
        self.disable()
        if self._steps is not None:
            self._steps.close()         # a step open when profiling stops ends there

    # -------------------------------------------------------- pyprof API
    def add_function(self, func):
        """Line mode: time every line of `func` (as ``@pyprof.profile``)."""
        if not self.lines:
            raise PyprofError("add_function needs line mode: Profile(lines=True)")
        from . import lines as lines_mod
        codes = lines_mod.code_objects(func)
        if not codes:
            raise TypeError(f"cannot line-profile a {type(func).__name__} object")
        for code in codes:
            self.add_line_target(code)
        return func

    def session(self):
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
        from ..export import export, format_for_path
        self.disable()
        if self._steps is not None:
            self._steps.close()
        fmt = format_for_path(path)
        if self._children is not None and os.getpid() == self._children["root_pid"]:
            export(self.session(), fmt, path)       # merged with the children's
        elif fmt == "cprof":
            names = None
            if self.run_options.native:         # named here: addresses mean nothing elsewhere
                from . import native
                names = native.capture_names(self.snapshot(False))
            self.refresh_meta(names)
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
        from ..model.session import Session
        self.refresh_meta()
        session = Session.from_blob(self.snapshot(include_open))
        # the step running now, up to now
        running = self._steps.running() if self._steps is not None else None
        if running is not None:
            running.data.adopt(session)
            session.steps.append(running)
        if session.stacks or session.memory_native:
            _name_native_frames(session)
        return session

    def refresh_meta(self, native_symbols=None):
        """Internal (the live channel, children.py): the capture's meta as of now,
        handed to the C writer (a periodic flush writes it); with the native
        addresses' names when given (native.capture_names)."""
        threading = sys.modules.get("threading")   # no threads of its making without it
        for t in threading.enumerate() if threading is not None else ():
            if t.ident is not None:
                self._thread_names[str(t.ident)] = t.name
        modes = (["sample"] if self.sampling else
                 ["function", "lines"] if self.lines else
                 ["function", "timeline"] if self.timeline else ["function"])
        meta = process_meta(modes, self._thread_names)
        if self.memory:
            from . import _numpy
            meta["numpy_buffers"] = _numpy.status()
        if self._steps is not None and self._steps.markers:
            meta["steps"] = list(self._steps.markers)
        if self._steps is not None and self._steps.dropped:
            meta["steps_dropped"] = self._steps.dropped
        if self.objects_steps:
            meta["objects_steps"] = list(self.objects_steps)
        if self.lines:
            meta.update(_line_meta(self._function_objects(), self._line_targets()))
        if self.run_options.opcodes:
            from .opcodes import table
            meta["opcodes"] = table()
        meta.update(self.meta)
        if native_symbols:
            meta["native_symbols"] = native_symbols
        self.set_meta(json_text(meta).encode())     # json.dumps(meta, default=str)


class _Signature:
    """Profile's signature as `help()` and editors should show it: the option
    table's keywords (one source), not ``**keywords``. Built when asked for:
    writing a capture imports no inspect (tests/test_options.py)."""

    def __get__(self, obj, cls):
        import inspect
        P = inspect.Parameter
        params = [P("timer", P.POSITIONAL_OR_KEYWORD, default=None),
                  P("timeunit", P.POSITIONAL_OR_KEYWORD, default=0.0),
                  P("subcalls", P.POSITIONAL_OR_KEYWORD, default=True),
                  P("builtins", P.POSITIONAL_OR_KEYWORD, default=True),
                  P("flush_to", P.KEYWORD_ONLY, default=None),
                  P("options", P.KEYWORD_ONLY, default=None)]
        params += [P(k, P.KEYWORD_ONLY, default=v) for k, v in KEYWORDS.items()
                   if k != "builtins"]
        return inspect.Signature(params)


Profile.__signature__ = _Signature()


def _name_native_frames(session):
    """Native addresses mean something only in this process: name them now."""
    ips, returns = set(), set()
    for native in [st.native for st in session.stacks.values()] + [
            n for n, _ in session.memory_native.values()]:
        ips.update(native)
        returns.update(native[1:])              # all but the leaf are return addresses
    if ips:
        from . import native
        session.meta["native_symbols"] = native.symbols_meta(ips, returns)


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
    try:
        from _sha2 import sha256        # 3.12+; hashlib loads OpenSSL: ~5 ms
    except ImportError:
        try:
            from _sha256 import sha256  # 3.11
        except ImportError:
            from hashlib import sha256
    try:
        with open(path, "rb") as f:
            return sha256(f.read()).hexdigest()
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
