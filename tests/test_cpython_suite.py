"""CPython's own cProfile test suite, run against pyprof.Profile.

test_cprofile compares pstats output byte for byte with a deterministic fake
timer (test/profilee.py): the strongest ground truth for cProfile semantics.
Tests that inspect cProfile's internals (_lsprof, the tool name "cProfile")
are replaced by pyprof equivalents below.
"""
import sys
import unittest

import pytest

import pyprof

try:
    from test import test_cprofile as _cpython_tests
except ImportError:                       # Debian splits Lib/test out of python3.X
    _cpython_tests = None

pytestmark = pytest.mark.skipif(
    _cpython_tests is None,
    reason="this interpreter ships without CPython's test package (Lib/test)")

_Base = _cpython_tests.CProfileTest if _cpython_tests else unittest.TestCase


def _squeeze(text):
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


class TestPyprofUnderCPythonSuite(_Base):
    profilerclass = pyprof.Profile
    profilermodule = pyprof

    def test_cprofile(self):
        # Same numbers, line for line; only the padding may differ, because
        # pstats pads to the longest name and that includes the profiler's own
        # "{method 'disable' of 'pyprof._cprof.Profiler' objects}".
        results = self.do_profiling()
        expected = self.get_expected_output()
        self.assertEqual(results[0], 1000)
        for i, method in enumerate(self.methodnames):
            self.assertEqual(_squeeze(results[i + 1]), _squeeze(expected[method]), method)

    def test_bad_counter_during_dealloc(self):
        # cProfile's version drives _lsprof directly; the same abuse through pyprof.
        import gc
        from test import support
        with support.catch_unraisable_exception() as cm:
            obj = pyprof.Profile(lambda: int)
            obj.enable()
            obj.disable()
            obj.clear()
            self.assertIsNotNone(cm.unraisable)
            del obj
            gc.collect()

    def test_evil_external_timer(self):
        from test import support

        class EvilTimer:
            def __init__(self, disable_count):
                self.count = 0
                self.disable_count = disable_count

            def __call__(self):
                self.count += 1
                if self.count == self.disable_count:
                    profiler.disable()
                return 0

        for when in (1, 2):
            with support.catch_unraisable_exception() as cm:
                profiler = pyprof.Profile(EvilTimer(when))
                profiler.enable()
                (lambda: None)()
                profiler.disable()
                profiler.clear()
                self.assertEqual(cm.unraisable.exc_type, RuntimeError)

    def test_profile_enable_disable(self):
        prof = self.profilerclass()
        self.addCleanup(prof.disable)
        prof.enable()
        if sys.version_info >= (3, 12):
            self.assertEqual(sys.monitoring.get_tool(prof.tool_id), "pyprof")
        else:
            self.assertIs(sys.getprofile(), prof)
        prof.disable()
        if sys.version_info >= (3, 12):
            self.assertIsNone(sys.monitoring.get_tool(sys.monitoring.PROFILER_ID))
        else:
            self.assertIsNone(sys.getprofile())

    def test_profile_as_context_manager(self):
        prof = self.profilerclass()
        self.addCleanup(prof.disable)
        with prof as ret:
            self.assertIs(prof, ret)
            self.assertTrue(prof.enabled)
        self.assertFalse(prof.enabled)

    def test_second_profiler(self):
        pr, pr2 = self.profilerclass(), self.profilerclass()
        pr.enable()
        self.assertRaises(ValueError, pr2.enable)
        pr.disable()
        pr2.enable()          # free again once the first is disabled
        pr2.disable()


# --- other tools see what they would see without pyprof -------------------

def _unittest_start(tmp_path, module, pyprof_args=None):
    """Start CPython's test module, alone (pyprof_args None) or under
    `python -m pyprof ARGS`; _unittest_end reads what it says."""
    import subprocess
    cmd = [sys.executable]
    if pyprof_args is not None:
        cmd += ["-m", "pyprof", *pyprof_args, "-o", str(tmp_path / "o.cprof")]
    return subprocess.Popen(cmd + ["-m", "unittest", f"test.{module}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)


def _unittest_end(proc, dropped=("pyprof: note:",)):
    """What unittest said: (status, tests run, the failing ones, the last line
    but pyprof's lines starting with one of `dropped`)."""
    import re
    import subprocess
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    ran = re.search(r"^Ran (\d+) tests?", err, re.M)
    bad = sorted(re.findall(r"^(?:FAIL|ERROR): (.*)$", err, re.M))
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(dropped)]
    last = lines[-1] if lines else ""
    return proc.returncode, ran and ran.group(1), bad, last


def _unittest_outcome(tmp_path, module, pyprof_args=None, dropped=("pyprof: note:",)):
    return _unittest_end(_unittest_start(tmp_path, module, pyprof_args), dropped)


_MODES = {"functions": [], "sample": ["--sample"], "memory": ["--memory"],
          "lines": ["--lines-all"]}


@pytest.mark.parametrize("module", ["test_sys_setprofile", "test_sys_settrace"])
@pytest.mark.parametrize("mode", list(_MODES))
def test_cpython_hook_suites_unchanged_under_pyprof(module, mode, tmp_path):
    """A program's own sys.setprofile / sys.settrace hooks receive the events
    they receive without pyprof (3.13's test_method_with_c_function caught an
    extra 'c_return' on 3.12+: docs/how-it-works.md, coexistence)."""
    if mode == "lines" and sys.version_info < (3, 12):
        pytest.skip("3.11: line mode uses the interpreter's one trace hook, which "
                    "sys.settrace replaces (docs/lines.md)")
    plain = _unittest_outcome(tmp_path, module)
    under = _unittest_outcome(tmp_path, module, _MODES[mode])
    assert under == plain, (plain, under)


_SIGNAL_MODES = {"cpu": ["--sample"], "wall": ["--sample", "--wall"],
                 "wall-native-1k": ["--sample", "--wall", "--native", "--rate", "1000"]}


def _cpu_timer():
    """The timer CPU mode gets here: task-clock, or itimer where refused."""
    p = pyprof.Profile(mode="sample")
    p.enable()
    p.disable()
    return p.sampling_timer[0]


@pytest.fixture(scope="module")
def signal_suites(tmp_path_factory):
    """test_signal alone and under each mode, the runs side by side (each
    mostly waits: a minute each, one after the other): what each said, by
    mode (None: alone)."""
    import importlib.util
    if importlib.util.find_spec("test.test_signal") is None:
        pytest.skip("this interpreter ships without CPython's test.test_signal")
    runs = {None: _unittest_start(tmp_path_factory.mktemp("plain"), "test_signal")}
    for mode, args in _SIGNAL_MODES.items():
        if "--native" not in args or "libunwind" in pyprof._cprof.FEATURES:
            runs[mode] = _unittest_start(tmp_path_factory.mktemp(mode), "test_signal", args)
    outcomes = {}

    def outcome(mode, dropped=("pyprof: note:",)):
        if mode not in outcomes:
            outcomes[mode] = _unittest_end(runs[mode], dropped)
        return outcomes[mode]
    yield outcome
    for proc in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("mode", list(_SIGNAL_MODES))
def test_cpython_signal_suite_unchanged_under_sampling(mode, signal_suites):
    """A program's own signals, interval timers and signal.pause() behave as
    without pyprof: wall mode ticks on a real-time signal of its own
    (docs/sampling.md; --wall's SIGPROF failed test_itimer_real, and at 1 kHz
    test_stress_delivery_dependent). In CPU mode the suite takes SIGPROF and
    ITIMER_PROF for its own tests: on task-clock events (docs/sampling.md, "CPU
    timers") those are the program's own as in wall mode, which must not even
    warn; on the ITIMER_PROF fallback pyprof reports them with its one warning
    (left out of the last line here)."""
    if "--native" in _SIGNAL_MODES[mode] and "libunwind" not in pyprof._cprof.FEATURES:
        pytest.skip("this build of pyprof lacks libunwind (libunwind-dev)")
    dropped = ("pyprof: note:",)
    if mode == "cpu" and _cpu_timer() == "itimer":
        dropped += ("pyprof: warning: the program replaced",)
    plain, under = signal_suites(None), signal_suites(mode, dropped)
    assert under == plain, (plain, under)
