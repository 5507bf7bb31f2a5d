"""Differential tests: random programs from tests/programs/progen.py, each run under
pyprof and under independent reference tools (cProfile, the interpreter's line
events, tracemalloc, the profile hook), figure by figure; what is compared and
the documented differences followed are in tests/programs/difftest.py and
docs/testing.md.

Budget: seeds PYPROF_FUZZ_SEED (0), PYPROF_FUZZ_SEED + 1, ... : the first
FIXED of them always, then as many more as fit in PYPROF_FUZZ_SECONDS (60) for
all checks together, at most PYPROF_FUZZ_N. A failing program is shrunk and
written to build/difftest-cases/ (PYPROF_FUZZ_CASES): move it to
tests/difftest_cases/, where test_kept_case runs it as a regular test.
``make fuzz SEED=... N=...`` runs longer."""
import glob
import os
import time

import pytest

import difftest
import progen
from support import ROOT

FIXED = 4
SEED = int(os.environ.get("PYPROF_FUZZ_SEED", 0))
N = int(os.environ.get("PYPROF_FUZZ_N", 1000))
SECONDS = float(os.environ.get("PYPROF_FUZZ_SECONDS", 60))
CASES_OUT = os.environ.get("PYPROF_FUZZ_CASES") or os.path.join(
    ROOT, "build", "difftest-cases")
SHRINK_SECONDS = 60


@pytest.mark.parametrize("check", difftest.CHECKS)
def test_random_programs(check, tmp_path):
    start = time.monotonic()
    budget = SECONDS / len(difftest.CHECKS)
    ran, failures = 0, []
    for seed in range(SEED, SEED + N):
        if ran >= FIXED and time.monotonic() - start > budget:
            break
        prog = progen.generate(seed)
        path = difftest.write_program(prog, str(tmp_path))
        problems = difftest.run_check(check, path)
        ran += 1
        if problems:
            small = difftest.shrink(prog, check, str(tmp_path),
                                    time.monotonic() + SHRINK_SECONDS)
            kept = difftest.keep_case(small, check,
                                      difftest.fails(small, check, str(tmp_path)) or problems,
                                      CASES_OUT)
            failures.append("seed %d: %s\n  shrunk to %s\n  %s"
                            % (seed, problems[0], kept, "\n  ".join(problems[1:5])))
            break
    print("%s: %d programs (seeds %d..%d) in %.1f s" % (check, ran, SEED, SEED + ran - 1,
                                                      time.monotonic() - start))
    assert not failures, "\n".join(failures)
    assert ran >= FIXED


def _cases():
    return sorted(glob.glob(os.path.join(difftest.CASES_DIR, "*.py")))


def _case_param(path):
    check, xfail = difftest.case_header(path)
    marks = []
    reason = xfail.get(difftest.PY)
    if reason:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return pytest.param(path, check, marks=marks, id=os.path.basename(path)[:-3])


@pytest.mark.parametrize("path,check", [_case_param(p) for p in _cases()])
def test_kept_case(path, check):
    """A shrunk program that once disagreed, kept as a regression test (or as a
    strict xfail naming the pyprof bug it shows)."""
    problems = difftest.run_check(check, path, known=False)
    assert not problems, "\n".join(problems)


def test_generator_is_deterministic_and_programs_run(tmp_path):
    a, b = progen.generate(12345).source(), progen.generate(12345).source()
    assert a == b and a != progen.generate(12346).source()
    prog = progen.generate(7)
    compile(prog.source(), "prog.py", "exec")
    # The shrinker's unit: removing statements keeps a program that compiles.
    half = set(prog.statements()[::2])
    compile(prog.without(half).source(), "prog.py", "exec")


def test_shrinker_keeps_only_what_fails(tmp_path, monkeypatch):
    """Delta debugging over the statements: with a 'check' failing whenever
    the program keeps a while loop, the shrunk program still fails and is
    1-minimal (removing any one statement left loses the while loop, or the
    call chain that keeps its definition)."""
    def fake(check, path):
        with open(path) as f:
            return ["has a while loop"] if "while j <" in f.read() else []

    monkeypatch.setattr(difftest, "run_check", fake)
    for seed in range(50):
        prog = progen.generate(seed)
        if fake(None, difftest.write_program(prog, str(tmp_path))):
            break
    small = difftest.shrink(prog, "fake", str(tmp_path))
    assert fake(None, difftest.write_program(small, str(tmp_path)))
    assert small.size() < prog.size()
    for stmt in small.statements():
        assert not fake(None, difftest.write_program(small.without({stmt}), str(tmp_path)))
