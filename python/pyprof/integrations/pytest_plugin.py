"""The pytest plugin (docs/pytest.md): ``pytest --pyprof[=MODE]`` and the
``@pytest.mark.pyprof_limit(time=..., memory=..., calls=...)`` budgets.

Registered through the ``pytest11`` entry point (``-p pyprof`` names it), so
it is imported by every pytest run where pyprof is installed: at import it
loads pytest and nothing of pyprof's but errors. The C core, the profiler,
the configuration and the model load only when --pyprof is given or a
collected test carries a pyprof_limit marker; until then a run pays for the
option registration and one look at each collected item's markers.

Per test, the profile covers the test's call (not its fixtures), so the
figures and the budgets are the test's own; the capture's snapshot, file and
verdict are made after the call, outside the time pytest's --durations
reports. Budgets: time is the call's wall time (time.perf_counter), with a
wall-clock sampler at 1 kHz naming where it went; memory is the peak of the
traced bytes during the call, exact mode; calls are traced calls.
"""
from __future__ import annotations

import os
import time

import pytest

MARKER = "pyprof_limit"
_MODES = ("function", "sample", "memory", "lines")
_BUDGET_KEYS = ("time", "memory", "calls")
BUDGET_RATE = 1000.0            # Hz: wall-clock samples naming a time budget's users


class pyprof_limit(Exception):
    """A budget that does not parse, or a test over its budget: shown by
    pytest as ``pyprof_limit: ...`` (the marker's name)."""


pyprof_limit.__module__ = "builtins"        # traceback prints the bare class name


# ------------------------------------------------------------------ options
def pytest_addoption(parser):
    g = parser.getgroup("pyprof", "profiling with pyprof (docs/pytest.md)")
    g.addoption("--pyprof", nargs="?", const="", default=None, metavar="MODE",
                help="profile each test's call: function (default), sample, memory or "
                     "lines; one capture per test in --pyprof-dir, a summary at the end")
    g.addoption("--pyprof-dir", default=None, metavar="DIR",
                help="where the captures go (default: .pyprof)")
    g.addoption("--pyprof-scope", default=None, metavar="SCOPE",
                help="test (a capture per test, the default) or session (one capture, "
                     "a step per test)")
    g.addoption("--pyprof-top", type=int, default=None, metavar="N",
                help="tests listed in each part of the summary (default 5)")
    g.addoption("--pyprof-html", action="store_true", default=None,
                help="an HTML report next to each capture")


def pytest_load_initial_conftests(early_config, parser, args):
    """``pytest --pyprof tests/``: a bare --pyprof takes no path as its mode."""
    for i, a in enumerate(args):
        if a == "--":
            break
        if a == "--pyprof" and i + 1 < len(args) and args[i + 1] not in _MODES \
                and args[i + 1] != "function":
            args[i] = "--pyprof="


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{MARKER}(time=None, memory=None, calls=None): fail the test when its "
                   f"call takes longer (time='50ms'), peaks higher in traced bytes "
                   f"(memory='5MB') or makes more calls (calls=N or {{'func': N}}) "
                   f"(pyprof, docs/pytest.md)")
    asked = config.getoption("pyprof", None)
    if asked is not None:
        runtime = Runtime(config, asked)
        config.pluginmanager.register(runtime, "pyprof-runtime")


# ------------------------------------------------------------------ budgets
class Budget:
    __slots__ = ("time", "memory", "calls", "text")

    def __init__(self, time=None, memory=None, calls=None, text=""):
        self.time, self.memory, self.calls, self.text = time, memory, calls, text


def parse_budget(mark) -> Budget:
    """A marker's budget; pyprof_limit (the exception) when it does not parse."""
    from ..analysis.gates import parse_bytes, parse_count, parse_seconds
    from ..errors import PyprofError
    if mark.args:
        raise pyprof_limit(f"takes keywords only (time=, memory=, calls=), not {mark.args!r}")
    unknown = [k for k in mark.kwargs if k not in _BUDGET_KEYS]
    if unknown:
        raise pyprof_limit(f"unknown budget {unknown[0]!r} (time=, memory=, calls=)")
    kw = mark.kwargs
    try:
        t = None if kw.get("time") is None else parse_seconds(kw["time"], f"time={kw['time']!r}")
        m = (None if kw.get("memory") is None
             else parse_bytes(kw["memory"], f"memory={kw['memory']!r}"))
        calls = kw.get("calls")
        if isinstance(calls, dict):
            calls = {str(f): parse_count(n, f"calls[{f!r}]") for f, n in calls.items()}
        elif calls is not None:
            calls = parse_count(calls, f"calls={calls!r}")
    except PyprofError as e:
        raise pyprof_limit(str(e)) from None
    if t is None and m is None and calls is None:
        raise pyprof_limit("gives no budget (time=, memory=, calls=)")
    text = ", ".join(f"{k}={kw[k]!r}" for k in _BUDGET_KEYS if kw.get(k) is not None)
    return Budget(t, m, calls, text)


def item_budget(item):
    """The budget of a test: its closest pyprof_limit marker's, else None."""
    mark = item.get_closest_marker(MARKER)
    return parse_budget(mark) if mark is not None else None


def _repr(exc):
    """pytest's own representation of `exc` (serializable by pytest-xdist), its
    first line shown in the short summary: 'pyprof_limit: ...'."""
    try:
        raise exc
    except pyprof_limit:
        info = pytest.ExceptionInfo.from_current()
    return info.getrepr(style="value")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A budget that does not parse is a collection error naming the test."""
    outcome = yield
    rep = outcome.get_result()
    if rep.outcome != "passed" or not rep.result:
        return
    errors, budgets = [], False
    for node in rep.result:
        if not isinstance(node, pytest.Item) or node.get_closest_marker(MARKER) is None:
            continue
        budgets = True
        try:
            item_budget(node)
        except pyprof_limit as e:
            errors.append(f"{node.nodeid}: @pytest.mark.{MARKER}: {e}")
    if errors:
        rep.outcome = "failed"
        rep.longrepr = _repr(pyprof_limit("; ".join(errors)))
        rep.result = []
    elif budgets:
        config = collector.config
        if not config.pluginmanager.has_plugin("pyprof-runtime"):
            try:
                runtime = Runtime(config, None)
            except pytest.UsageError as e:
                rep.outcome = "failed"
                rep.longrepr = _repr(pyprof_limit(str(e)))
                rep.result = []
                return
            config.pluginmanager.register(runtime, "pyprof-runtime")


# ------------------------------------------------------------------ the runtime
def _safe_name(nodeid) -> str:
    import hashlib
    import re
    name = re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", nodeid).strip("_") or "test"
    if len(name) > 150:
        name = name[:130] + "-" + hashlib.sha1(nodeid.encode()).hexdigest()[:12]
    return name


class _Plan:
    __slots__ = ("profile", "mode", "budget")

    def __init__(self, profile, mode, budget):
        self.profile, self.mode, self.budget = profile, mode, budget


class Runtime:
    """What runs once --pyprof is asked for or a budget was collected."""

    def __init__(self, config, asked):
        from ..options import config as cfgmod
        from ..errors import PyprofError
        self.config = config
        try:
            self.cfg = cfgmod.load(start=str(config.rootpath))
        except PyprofError as e:                # a bad [tool.pyprof] or PYPROF_* value
            raise pytest.UsageError(f"pyprof: {e}") from None
        given = {"mode": asked or None, "dir": config.getoption("pyprof_dir", None),
                 "scope": config.getoption("pyprof_scope", None),
                 "top": config.getoption("pyprof_top", None),
                 "html": config.getoption("pyprof_html", None)}
        if given["scope"] is not None and given["scope"] not in ("test", "session"):
            raise pytest.UsageError(f"--pyprof-scope takes test or session, not "
                                    f"{given['scope']!r}")
        if given["mode"] is not None and given["mode"] not in _MODES:
            raise pytest.UsageError(f"--pyprof takes one of {', '.join(_MODES)}, not "
                                    f"{given['mode']!r}")
        settings = cfgmod.section("pytest", given, self.cfg)
        self.active = asked is not None             # --pyprof (else: budgets only)
        self.mode = settings["mode"][0] if self.active else None
        self.directory = os.path.abspath(settings["dir"][0])
        self.scope = settings["scope"][0]
        self.top = settings["top"][0]
        self.html = settings["html"][0]
        self.rows = []                  # the summary's rows (every worker's)
        self.session_prof = None
        self.worker = getattr(config, "workerinput", {}).get("workerid")
        self.warned = set()
        from ..runtime import profiler  # noqa: F401  (loaded here, not inside the first test's call)
        if self.active:
            os.makedirs(self.directory, exist_ok=True)

    # ---------------------------------------------------------- profiles
    def _options(self, base, memory, rate=None, wall=None):
        from ..options import config as cfgmod
        opts = cfgmod.run_options(base, self.cfg, memory, str(self.config.rootpath), rate, wall)
        if memory:
            opts.memory_sample = None           # exact
        return opts

    def plan(self, item):
        budget = item_budget(item)
        mode = self.mode if self.scope == "test" or budget is not None else None
        if budget is None and mode is None:
            return None
        memory = mode == "memory" or (budget is not None and budget.memory is not None)
        base = mode if mode != "memory" else None
        if budget is not None and budget.calls is not None:
            base = "function"
        elif budget is not None and budget.time is not None:
            base = "sample"
        timed = base == "sample" and budget is not None and budget.time is not None
        opts = self._options(base, memory)
        if timed:                               # the budget's sampler, whatever the defaults
            opts.rate, opts.wall = BUDGET_RATE, True
        from ..runtime.profiler import Profile
        prof = Profile(options=opts, _warn=False)
        if self.session_prof is None:
            prof.set_background(True)          # a test's own profiler takes precedence
        return _Plan(prof, base or "memory", budget)

    # ---------------------------------------------------------- hooks
    def pytest_sessionstart(self, session):
        # pytest-xdist's controller runs no test: its workers profile theirs
        self.controller = self.config.pluginmanager.has_plugin("dsession")
        if self.active and self.scope == "session" and not self.controller:
            from ..runtime.profiler import Profile
            self.session_prof = Profile(options=self._options(
                self.mode if self.mode != "memory" else None, self.mode == "memory"),
                _warn=False)
            self.session_prof.set_background(True)
            try:
                self.session_prof.enable()
            except (ValueError, RuntimeError) as e:
                self._warn("session", f"cannot profile the session: {e}")
                self.session_prof = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.session_prof is None:
            yield
            return
        from ..runtime.steps import step
        with step(item.nodeid):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        try:
            plan = self.plan(item)
        except pyprof_limit:
            plan = None                         # reported at collection
        if plan is None:
            t0 = time.perf_counter()
            yield
            if self.active:
                item.stash[_KEY] = (None, time.perf_counter() - t0)
            return
        prof = plan.profile
        try:
            prof.enable()
        except (ValueError, RuntimeError) as e:
            item.stash[_KEY] = (None, None, str(e))
            yield
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            wall = time.perf_counter() - t0
            prof.disable()
            item.stash[_KEY] = (plan, wall)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when != "call":
            return
        got = item.stash.get(_KEY, None)
        if got is None:
            return
        del item.stash[_KEY]
        rep = outcome.get_result()
        if len(got) == 3:                       # the profiler could not start
            budget = item_budget(item)
            self._warn(item.nodeid, f"cannot profile {item.nodeid}: {got[2]}")
            if budget is not None and rep.passed:
                rep.outcome = "failed"
                rep.longrepr = _repr(pyprof_limit(f"cannot measure the budget: {got[2]}"))
            return
        plan, wall = got
        row = {"nodeid": item.nodeid, "wall": wall, "mode": None}
        if plan is not None:
            bg = self.session_prof              # pyprof's work is not the session's
            if bg is not None:
                bg.thread_paused = True
            try:
                self._record(item, plan, wall, row, rep)
            except Exception as e:              # never lose the test's own outcome
                self._warn(item.nodeid, f"could not record {item.nodeid}: "
                                        f"{type(e).__name__}: {e}")
            finally:
                if bg is not None:
                    bg.thread_paused = False
        rep.user_properties.append(("pyprof", row))

    def _record(self, item, plan, wall, row, rep):
        from ..analysis import gates
        from ..render.testsummary import harness, time_basis
        session = plan.profile.session()
        row["mode"] = plan.mode
        # the profiler's window (it holds the call): what the self times are within
        row["wall"] = max(wall, (session.info.get("duration_ns") or 0) * 1e-9)
        row["clock"], row["threads"] = time_basis(session)
        row["top"] = [list(r) for r in gates.top_functions(session, skip=harness)]
        mem = session.info.get("memory")
        if mem:
            row["peak"] = mem.get("peak_bytes", 0)
            row["top_memory"] = [list(r) for r in gates.top_memory(session, skip=harness)]
        if plan.budget is not None and plan.budget.calls is not None:
            # the calls made inside the test function (not pytest's own, around it)
            code = getattr(getattr(item, "function", None), "__code__", None)
            below = (gates.calls_below(session, code.co_filename, code.co_firstlineno)
                     if code is not None else None)
            if below is None:
                totals = session.function_totals()
                per_fid = {fid: c.calls for fid, c in totals.items()}
            else:
                per_fid = below[1]
            calls = plan.budget.calls
            if isinstance(calls, dict):
                matched = {f: gates.match_functions(session, f) for f in calls}
                row["calls"] = {f: sum(per_fid.get(x, 0) for x in fids)
                                for f, fids in matched.items()}
                # a name the capture does not know counts nothing: a misspelt
                # budget would pass for ever (the gates' rule: docs/gates.md)
                row["unknown_calls"] = {f: gates.closest_names(session, f)
                                        for f, fids in matched.items() if not fids}
            else:
                row["calls"] = sum(per_fid.values())
            most = sorted(per_fid.items(), key=lambda kv: -kv[1])[:3]
            row["top_calls"] = [[session.functions[f].qualname, session.functions[f].filename,
                                 session.functions[f].line, n] for f, n in most]
        if self.active:
            path = os.path.join(self.directory, _safe_name(item.nodeid) + ".cprof")
            session.save(path)
            row["capture"] = path
            if self.html:
                from ..export import export
                export(session, "html", path[:-len(".cprof")] + ".html")
        if plan.budget is not None:
            row["budget"] = plan.budget.text
            over = self._over(plan.budget, wall, session, row)
            row["over"] = over
            if over and rep.passed:
                rep.outcome = "failed"
                rep.longrepr = _repr(pyprof_limit("; ".join(over)))

    @staticmethod
    def _over(budget, wall, session, row) -> list:
        from ..render import gatetext
        out = []
        if budget.time is not None and wall > budget.time:
            out.append(gatetext.limit_text("time", wall, budget.time,
                                        [tuple(r) for r in row["top"]]))
        if budget.memory is not None and row.get("peak", 0) > budget.memory:
            out.append(gatetext.limit_text("memory", row["peak"], budget.memory,
                                        [tuple(r) for r in row["top_memory"]]))
        calls = budget.calls
        for func, closest in row.get("unknown_calls", {}).items():
            out.append(f"calls={{{func!r}: ...}}: no function of that name ran or was "
                       f"defined in this test's profile (closest: {', '.join(closest)})")
        if isinstance(calls, dict):
            for func, limit in calls.items():
                if row["calls"][func] > limit:
                    out.append(gatetext.limit_text(f"calls of {func}", row["calls"][func],
                                                limit, []))
        elif calls is not None and row["calls"] > calls:
            out.append(gatetext.limit_text("calls", row["calls"], calls,
                                        [tuple(r) for r in row["top_calls"]]))
        return out

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == "pyprof" and isinstance(value, dict):
                self.rows.append(value)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.session_prof is not None:
            prof, self.session_prof = self.session_prof, None
            prof.disable()
            name = f"session-{self.worker}.cprof" if self.worker else "session.cprof"
            path = os.path.join(self.directory, name)
            prof.dump(path)
            self.session_capture = path
        elif self.active and self.scope == "session" and self.worker is None:
            # pytest-xdist: a capture per worker, each with its tests as steps
            # (merging them would add step i of one worker to step i of another)
            self.session_capture = os.path.join(self.directory, "session-gw*.cprof")

    def _warn(self, key, text):
        if key in self.warned:
            return
        self.warned.add(key)
        import warnings
        warnings.warn(pytest.PytestWarning(f"pyprof: {text}"))

    # ---------------------------------------------------------- the summary
    def pytest_terminal_summary(self, terminalreporter):
        if not self.active or self.worker is not None:
            return
        from ..render.testsummary import summary_lines
        tr = terminalreporter
        title, lines = summary_lines(self.rows, self.mode, self.scope, self.top,
                                     self.directory, getattr(self, "session_capture", None))
        tr.write_sep("=", title)
        for line in lines:
            tr.write_line(line)


_KEY = pytest.StashKey()
