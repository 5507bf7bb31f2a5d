"""What tests share to run pyprof or Python in a subprocess (docs/testing.md).

Tests import it as `from support import ...`: pytest puts tests/ on sys.path
(tests/ has conftest.py and no __init__.py)."""
import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
PROGRAMS = os.path.join(TESTS, "programs")   # the helper programs tests run or import

# Seconds one subprocess may take before the test fails: generous, as a run that
# takes 2 s alone takes many times that on a loaded machine (make test, xdist).
TIMEOUT = 180


def program(name) -> str:
    """The path of a helper program in tests/programs/."""
    return os.path.join(PROGRAMS, name)


def clean_env(drop=(), **extra) -> dict:
    """os.environ without PYPROF_* (the environment that runs the tests may set
    them) and the names in `drop`, with `extra` added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYPROF_") and k not in drop}
    env.update(extra)
    return env


def run_python(args, cwd=None, *, timeout=TIMEOUT, check=False, env=None, **kw):
    """`python ARGS` (this interpreter) in `cwd`, output captured as text, stdin
    empty unless `input` is given: a subprocess.CompletedProcess."""
    if "input" not in kw:
        kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=check, env=env, **kw)


def run_pyprof(args, cwd=None, **kw):
    """`python -m pyprof ARGS`, as run_python."""
    return run_python(["-m", "pyprof", *args], cwd, **kw)


def pyprof(*args, **kw):
    """run_pyprof with the arguments spread: pyprof("view", path, cwd=d)."""
    return run_pyprof(args, **kw)


def seconds_in(session, name) -> float:
    """Seconds the samples whose stack has function `name` weigh."""
    total = 0
    for (_, sid, _), c in session.samples.items():
        if any(session.functions[f].name == name for f, _ in session.stacks[sid].frames):
            total += c.weight
    return total / 1e9
