"""The one grammar of amounts (pyprof/base/amounts.py, docs/cli.md "Amounts"):
every accepted form and the refusals, and the same grammar reached through
the command line, [tool.pyprof], the environment, Profile's keywords, the
gates and the timeline."""
import subprocess
import sys

import pytest

import pyprof
from pyprof.base import amounts
from pyprof.cli import args as cli, compare
from pyprof.analysis import gates
from pyprof.errors import PyprofError

TIMEOUT = 120
MIB = 1 << 20


@pytest.mark.parametrize("text, size", [
    ("4096", 4096), (4096, 4096), ("0.5k", 512), ("512k", 512 << 10), ("512K", 512 << 10),
    ("512kB", 512 << 10), ("512KiB", 512 << 10), ("5M", 5 * MIB), ("5MB", 5 * MIB),
    ("5mb", 5 * MIB), ("5 MiB", 5 * MIB), (" 5MiB ", 5 * MIB), ("1.5GiB", 3 << 29),
    ("2G", 2 << 30), ("1T", 1 << 40), ("1TB", 1 << 40), ("100B", 100), ("100b", 100)])
def test_sizes(text, size):
    assert amounts.parse_size(text, "--x") == size


@pytest.mark.parametrize("text", ["", "lots", "5XB", "-5", "5 M B", "0", "0k", "MB", True,
                                  "nan", "inf", float("inf")])
def test_sizes_refused_in_one_line_naming_the_option_and_the_forms(text):
    with pytest.raises(PyprofError) as e:
        amounts.parse_size(text, "--x")
    msg = str(e.value)
    assert msg.startswith("--x takes a positive number of bytes") and "\n" not in msg
    assert "5MB or 5 MiB; k, M, G, T are powers of 1024" in msg


def test_zero_size_only_where_allowed():
    assert amounts.parse_size("0", "--x", zero_ok=True) == 0
    with pytest.raises(PyprofError):
        amounts.parse_size("-1", "--x", zero_ok=True)


@pytest.mark.parametrize("text, seconds", [
    ("0.5", 0.5), (0.5, 0.5), (2, 2.0), ("2s", 2.0), ("50ms", 0.05), ("10us", 1e-5),
    ("10\u00b5s", 1e-5), ("250ns", 250e-9), ("1.5min", 90.0), ("1h", 3600.0),
    (" 50 ms ", 0.05), ("1e-3", 1e-3), (".5s", 0.5)])
def test_durations(text, seconds):
    assert amounts.parse_duration(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "10 parsecs", "-1", "5m", "1.2.3", False,
                                  "inf"])
def test_durations_refused(text):
    with pytest.raises(PyprofError) as e:
        amounts.parse_duration(text, "--x")
    assert str(e.value).startswith("--x takes a duration like 10us or 1ms")
    assert amounts.DURATION_FORMS in str(e.value)


def test_zero_duration_only_where_allowed():
    assert amounts.parse_duration("0", "--x", zero_ok=True) == 0.0
    with pytest.raises(PyprofError, match="must be a positive duration"):
        amounts.parse_duration("0", "--x")


@pytest.mark.parametrize("text, pct", [("25", 25.0), ("25%", 25.0), (" 2.5 % ", 2.5), (0, 0.0),
                                       ("0%", 0.0), (12.5, 12.5)])
def test_percentages(text, pct):
    assert amounts.parse_percent(text, "--x") == pct


@pytest.mark.parametrize("text", ["-5", "lots", "25%%", "25 percent", "inf", True])
def test_percentages_refused(text):
    with pytest.raises(PyprofError, match=r"--x takes a percentage \(a number >= 0\)"):
        amounts.parse_percent(text, "--x")


def test_the_old_names_are_the_grammar():
    assert gates.parse_seconds("0.5", "t") == 0.5           # was refused by the timeline
    assert amounts.duration_ns("0.5") == 500_000_000        # ...which now reads it
    assert amounts.duration_ns("50ms") == gates.parse_seconds("50ms", "t") * 1e9
    assert amounts.duration_ns(1500) == 1500                # an int stays nanoseconds
    assert gates.parse_bytes("5MB", "m") == 5 * MIB
    assert cli._seconds("0.5") == 0.5 and cli._seconds("50ms") == 0.05
    assert cli._bytes_arg("5MB") == gates.parse_bytes("5MB", "m")
    assert compare._percent("25%") == compare._percent("25") == 25.0


def test_profile_keyword_takes_the_grammar():
    prof = pyprof.Profile(timeline=True, timeline_min_duration="0.5")
    assert prof.run_options.timeline_min_duration == 500_000_000
    prof = pyprof.Profile(mode="memory", memory_sample="5 MiB")
    assert prof.run_options.memory_sample == 5 * MIB


def test_config_and_environment_take_the_grammar(tmp_path):
    from pyprof import config
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pyprof]\nmemory_sample = "5MB"\nmin_duration = "0.5"\n'
        'flush_interval = "1.5min"\n')
    cfg = config.Config(path=str(tmp_path / "pyproject.toml"), environ={})
    assert cfg.value("", "memory_sample") == 5 * MIB
    assert cfg.value("", "min_duration") == 500_000_000
    assert cfg.value("", "flush_interval") == 90.0
    cfg = config.Config(path="", environ={"PYPROF_MEMORY_SAMPLE": "5 MiB",
                                          "PYPROF_WEB_SLOWER_THAN": "50ms"})
    assert cfg.value("", "memory_sample") == 5 * MIB
    assert cfg.value("web", "slower_than") == pytest.approx(0.05)
    with pytest.raises(config.ConfigError) as e:
        config.Config(path="", environ={"PYPROF_MEMORY_SAMPLE": "lots"})
    assert "PYPROF_MEMORY_SAMPLE='lots'" in str(e.value) and "powers of 1024" in str(e.value)


def test_pytest_marker_budgets_take_the_grammar():
    from pyprof.integrations.pytest_plugin import parse_budget

    class Mark:
        args = ()
        kwargs = {"time": "0.5", "memory": "5 MiB"}
    budget = parse_budget(Mark())
    assert budget.time == 0.5 and budget.memory == 5 * MIB


# ---------------------------------------------------------------- the command line
def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "pyprof", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    d = tmp_path_factory.mktemp("amounts")
    (d / "prog.py").write_text("def f():\n    return [0] * 1000\n\nfor _ in range(50):\n"
                               "    f()\n")
    r = run(["--memory", "--functions", "-o", "m.cprof", "prog.py"], d)
    assert r.returncode == 0, r.stderr
    return d


def test_min_bytes_takes_the_sizes_max_memory_takes(capture):
    r = run(["view", "m.cprof", "--view", "op", "--min-bytes", "5MB"], capture)
    assert r.returncode == 0, r.stderr
    r = run(["diff", "m.cprof", "m.cprof", "--min-bytes", "5MB", "--min-time", "50ms",
             "--threshold", "5%"], capture)
    assert r.returncode == 0, r.stderr
    r = run(["check", "m.cprof", "--max-memory", "5MB"], capture)
    assert r.returncode == 0, r.stderr          # the same 5,242,880 bytes, under the limit


@pytest.mark.parametrize("fail_above", ["25", "25%"])
def test_fail_above_takes_a_percent_sign(capture, fail_above):
    r = run(["diff", "m.cprof", "m.cprof", "--fail-above", fail_above, "--memory"], capture)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("args, says", [
    (["view", "m.cprof", "--min-bytes", "lots"], "--min-bytes: takes a number of bytes >= 0"),
    (["view", "m.cprof", "--min-time", "soon"], "--min-time: takes a duration like 10us"),
    (["diff", "m.cprof", "m.cprof", "--fail-above", "lots%"], "takes a percentage"),
    (["check", "m.cprof", "--max-memory", "5 parsecs"], "--max-memory takes a positive "
                                                         "number of bytes"),
    (["--timeline", "--min-duration", "fast", "prog.py"], "--min-duration takes a duration")])
def test_bad_amounts_are_one_line_status_2(capture, args, says):
    r = run(args, capture)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and says in r.stderr and "Traceback" not in r.stderr, \
        r.stderr


@pytest.mark.parametrize("value", ["5MB", "5MiB", "512k", "4096"])
def test_memory_sample_takes_any_size_as_its_optional_value(value):
    from pyprof.options import parse_run_args
    opts, rest = parse_run_args(["--memory-sample", value, "prog.py"])
    assert rest == ["prog.py"]
    assert opts.check().memory_sample == amounts.parse_size(value, "x")
