"""[tool.pyprof] and PYPROF_* (docs/cli.md, "Configuration"): precedence
command line > environment > pyproject.toml, checked on what a run really
recorded (the capture's sampling rate and mode, the file it wrote), `pyprof
config`'s sources, and one clear line for a bad key or value."""
import subprocess
import sys
import textwrap

import pytest

import pyprof
from support import TIMEOUT, clean_env as env, run_pyprof


def pyprof_run(args, cwd, **extra):
    return run_pyprof(args, cwd, env=env(**extra))


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [project]
        name = "demo"

        [tool.pyprof]
        mode = "sample"
        rate = 500
        output = "out/prof.cprof"

        [tool.pyprof.pytest]
        dir = "profs"
    """))
    (tmp_path / "out").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "prog.py").write_text("def f():\n    return sum(range(10**6))\nf()\n")
    return tmp_path


def rate_of(path):
    s = pyprof.load(path)
    return s.meta["modes"], (s.info.get("sampling") or {}).get("rate_requested")


def test_pyproject_supplies_the_defaults(project):
    # from a subdirectory: the nearest pyproject.toml is the project's
    r = pyprof_run(["prog.py"], project / "sub")
    assert r.returncode == 0, r.stderr
    assert rate_of(project / "out" / "prof.cprof") == (["sample"], 500)


def test_environment_over_pyproject(project):
    r = pyprof_run(["prog.py"], project / "sub", PYPROF_RATE="200",
                   PYPROF_OUTPUT=str(project / "env.cprof"))
    assert r.returncode == 0, r.stderr
    assert rate_of(project / "env.cprof") == (["sample"], 200)


def test_command_line_over_both(project):
    r = pyprof_run(["--rate", "100", "-o", "cli.cprof", "prog.py"], project / "sub",
                   PYPROF_RATE="200")
    assert r.returncode == 0, r.stderr
    assert rate_of(project / "sub" / "cli.cprof") == (["sample"], 100)
    # a mode on the command line wins, and the sampling defaults do not apply to it
    r = pyprof_run(["-l", "-o", "lines.cprof", "prog.py"], project / "sub", PYPROF_WALL="1")
    assert r.returncode == 0, r.stderr
    assert rate_of(project / "sub" / "lines.cprof") == (["function", "lines"], None)


def test_pyprof_config_says_where_each_came_from(project):
    r = pyprof_run(["config", "--rate", "100"], project / "sub", PYPROF_WALL="1")
    assert r.returncode == 0, r.stderr
    rows = {}
    section = None
    for line in r.stdout.splitlines():
        if line.startswith("["):
            section = line
        elif line.startswith("  "):
            key, value, *origin = line.split(None, 2)
            rows[(section, key)] = (value, origin[0] if origin else "")
    run = "[tool.pyprof]"
    assert rows[(run, "rate")] == ("100.0", "command line")
    assert rows[(run, "wall")] == ("True", "PYPROF_WALL")
    assert rows[(run, "mode")] == ("sample", str(project / "pyproject.toml"))
    assert rows[(run, "output")][1] == str(project / "pyproject.toml")
    assert rows[(run, "sort")] == ("cumulative", "default")
    assert rows[("[tool.pyprof.pytest]", "dir")] == (str(project / "profs"),
                                                     str(project / "pyproject.toml"))
    assert f"pyproject.toml: {project / 'pyproject.toml'}" in r.stdout


@pytest.mark.parametrize("toml, says", [
    ('rat = 500', "[tool.pyprof] unknown key 'rat' (known: mode, output"),
    ('rate = "fast"', "[tool.pyprof] rate: must be a rate in [1, 10000] Hz, not 'fast'"),
    ('mode = "quick"', "[tool.pyprof] mode: must be one of function, sample, memory, lines"),
    ('[tool.pyprof.pytest]\nscope = "module"', "[tool.pyprof.pytest] scope: must be one of "
                                              "test, session, not 'module'"),
    ('lines_of = 3', "[tool.pyprof] lines_of: takes a list of strings, not 3")])
def test_a_bad_key_or_value_is_one_line_naming_file_and_key(tmp_path, toml, says):
    (tmp_path / "pyproject.toml").write_text("[tool.pyprof]\n" + toml + "\n")
    (tmp_path / "p.py").write_text("pass\n")
    r = pyprof_run(["p.py"], tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == f"pyprof: error: {tmp_path / 'pyproject.toml'}: {says}" + \
        r.stderr[len(f"pyprof: error: {tmp_path / 'pyproject.toml'}: {says}"):]
    assert r.stderr.count("\n") == 1 and says in r.stderr


def test_a_bad_environment_value(tmp_path):
    (tmp_path / "p.py").write_text("pass\n")
    r = pyprof_run(["--sample", "p.py"], tmp_path, PYPROF_RATE="fast")
    assert r.returncode == 2
    assert r.stderr == "pyprof: error: PYPROF_RATE='fast': must be a rate in [1, 10000] Hz, " \
                       "not 'fast'\n"


def test_pyprof_signal_keeps_its_meaning(tmp_path):
    """PYPROF_SIGNAL (control.py) is the --signal default of sampling runs only:
    a traced run under it prints its table as before."""
    (tmp_path / "p.py").write_text("def f():\n    pass\nf()\n")
    r = pyprof_run(["p.py"], tmp_path, PYPROF_SIGNAL="USR2")
    assert r.returncode == 0 and "p.py:1(f)" in r.stdout, r.stdout + r.stderr


def test_the_pytest_section(project):
    (project / "test_it.py").write_text("def test_it():\n    sum(range(10**5))\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--pyprof", "test_it.py"], cwd=project, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    path = project / "profs" / "test_it.py_test_it.cprof"
    assert pyprof.load(path).meta["modes"] == ["function"]   # the plugin's mode, not the run's


def test_signal_control_takes_its_defaults_from_pyproject(tmp_path):
    """PYPROF_SIGNAL's sampling (control.py): rate, wall and output from
    [tool.pyprof] when the variables do not give them; a variable wins."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pyprof]\nrate = 321\nwall = true\noutput = "cfg.cprof"\n')
    (tmp_path / "server.py").write_text(textwrap.dedent("""
        import os, signal, time
        import pyprof
        os.kill(os.getpid(), signal.SIGUSR1)
        t0 = time.process_time()
        while time.process_time() - t0 < 0.1:
            pass
        os.kill(os.getpid(), signal.SIGUSR1)
    """))
    for extra, out, rate in (({}, tmp_path / "cfg.cprof", 321),
                             ({"PYPROF_RATE": "123", "PYPROF_OUTPUT": str(tmp_path / "e.cprof")},
                              tmp_path / "e.cprof", 123)):
        r = subprocess.run([sys.executable, "server.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=TIMEOUT, env=env(PYPROF_SIGNAL="USR1", **extra))
        assert r.returncode == 0, r.stderr
        assert f"pyprof: wrote {out}" in r.stderr, r.stderr
        info = pyprof.load(out).info["sampling"]
        assert info["rate_requested"] == rate and info["mode"] == "wall"


def test_profile_decorator_output_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pyprof]\noutput = "lines.cprof"\n')
    (tmp_path / "p.py").write_text(textwrap.dedent("""
        import pyprof

        @pyprof.profile
        def work():
            total = 0
            for i in range(7):
                total += i
            return total

        print(work())
    """))
    r = subprocess.run([sys.executable, "p.py"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env())
    assert r.returncode == 0 and r.stdout == "21\n", r.stderr    # no table: written instead
    s = pyprof.load(tmp_path / "lines.cprof")
    hits = {ln: c.hits for (fid, ln), c in s.line_totals().items()
            if s.functions[fid].name == "work"}
    assert hits[8] == 7                   # `total += i`, known by construction


def test_section_variables_are_upper_case(project):
    """PYPROF_PYTEST_* and PYPROF_WEB_* as documented (the old lower-case
    section spelling still read)."""
    (project / "test_it.py").write_text("def test_it():\n    sum(range(10**5))\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--pyprof", "test_it.py"], cwd=project, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env(PYPROF_PYTEST_DIR="envprofs"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (project / "envprofs" / "test_it.py_test_it.cprof").exists()
    assert not (project / "profs").exists()
    r = pyprof_run(["config", "--format", "json"], project, PYPROF_WEB_DIR="/tmp/webprofs",
                   PYPROF_pytest_TOP="7")
    assert r.returncode == 0, r.stderr
    import json
    desc = json.loads(r.stdout)
    web = {row["key"]: row for row in desc["web"]}
    pytest_ = {row["key"]: row for row in desc["pytest"]}
    assert (web["dir"]["value"], web["dir"]["from"], web["dir"]["env"]) == \
        ("/tmp/webprofs", "PYPROF_WEB_DIR", "PYPROF_WEB_DIR")
    assert pytest_["top"]["value"] == 7 and pytest_["top"]["env"] == "PYPROF_PYTEST_TOP"
    assert all(row["env"] == row["env"].upper()
               for rows in (desc["run"], desc["pytest"], desc["web"]) for row in rows)
    r = pyprof_run(["config"], project, PYPROF_WEB_EVERY="often")
    assert r.returncode == 2 and r.stderr == \
        "pyprof: error: PYPROF_WEB_EVERY='often': takes a whole number of calls, not 'often'\n"


def test_mode_on_the_command_line_over_the_configured_mode(project):
    """[tool.pyprof] mode = "sample": --mode function traces calls (the call
    counts are the program's, by construction), --mode memory records memory."""
    r = pyprof_run(["--mode", "function", "-o", "f.cprof", "prog.py"], project / "sub",
                   PYPROF_MODE="sample")
    assert r.returncode == 0, r.stderr
    s = pyprof.load(project / "sub" / "f.cprof")
    assert s.meta["modes"] == ["function"] and not s.samples
    calls = {s.functions[fid].name: c.calls for fid, c in s.function_totals().items()}
    assert calls["f"] == 1
    r = pyprof_run(["--mode", "memory", "-o", "m.cprof", "prog.py"], project / "sub")
    assert r.returncode == 0, r.stderr
    assert pyprof.load(project / "sub" / "m.cprof").info.get("memory")
    r = pyprof_run(["config", "--mode", "lines"], project / "sub")
    assert r.returncode == 0, r.stderr
    assert [line.split(None, 2) for line in r.stdout.splitlines()
            if line.startswith("  mode ")][0] == ["mode", "lines", "command line"]


@pytest.mark.parametrize("args, says", [
    (["--mode", "function", "--sample"], "--mode function and --sample do not combine"),
    (["--mode", "function", "--lines-of", "x"], "--mode function and line tracing do not "
                                                "combine"),
    (["--mode", "function", "--memory-sample"], "--mode function and --memory-sample do not "
                                                "combine"),
    (["--mode", "quick"], "argument --mode: invalid choice: 'quick'")])
def test_a_bad_mode_flag_is_one_line(tmp_path, args, says):
    (tmp_path / "p.py").write_text("pass\n")
    r = pyprof_run([*args, "p.py"], tmp_path)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr
