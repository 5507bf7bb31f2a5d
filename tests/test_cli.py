"""The command line, `python -m pyprof`, run as a subprocess and compared with
ground truth: the same program run directly by Python (environment, output,
exit status, traceback), `python -m cProfile` (call counts), and counts known
by construction (work() is called 7 times)."""
import json
import os
import pstats
import signal
import subprocess
import sys
import textwrap

import pytest

import pyprof as pyprof_pkg
from pyprof import PyprofError, Session
from support import TIMEOUT, run_pyprof as pyprof, run_python as run

PYPROF_DIR = os.path.dirname(os.path.abspath(pyprof_pkg.__file__))

HEADER = "ncalls  tottime  percall  cumtime  percall filename:lineno(function)"


def write(path, source):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def line_of(path, text):
    """1-based number of the first line of `path` that contains `text`."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def line_of_text(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def pstats_calls(path, key):
    """(cc, nc) of `key` in the pstats file `path`."""
    stats = pstats.Stats(str(path)).stats
    assert key in stats, sorted(stats)
    return stats[key][:2]


def capture_calls(path, filename, name):
    """(Session, calls of the function `name` defined in `filename`) from a .cprof."""
    s = Session.load(path)
    fids = [f for f, fn in s.functions.items() if fn.name == name and fn.filename == filename]
    assert len(fids) == 1, s.functions
    return s, s.function_totals()[fids[0]].calls


# ---------------------------------------------------------------- 1. environment
# The program reports what it sees as JSON.
ENV_BODY = '''
"""env probe"""
import json
import multiprocessing
import pickle
import sys


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)


def square(x):
    return x * x


def probe(method):
    p = Point(1, 2)
    q = pickle.loads(pickle.dumps(p))
    squares = None
    if method != "none":
        with multiprocessing.get_context(method).Pool(2) as pool:
            squares = pool.map(square, range(6))
    spec = globals().get("__spec__")
    print(json.dumps({
        "argv": sys.argv,
        "name": __name__,
        "path": sys.path,
        "file": globals().get("__file__", "<unset>"),
        "cached": globals().get("__cached__", "<unset>"),
        "package": globals().get("__package__", "<unset>"),
        "spec": None if spec is None else [spec.name, spec.origin, spec.parent],
        "doc": globals().get("__doc__", "<unset>"),
        "builtins": type(globals().get("__builtins__")).__name__,
        "loader": getattr(globals().get("__loader__"), "__name__",
                          type(globals().get("__loader__")).__name__),
        "main_is_this_module": sys.modules["__main__"].__dict__ is globals(),
        "pickled": [type(q).__module__, type(q).__qualname__, q == p],
        "pool": squares,
    }))


if __name__ == "__main__":
    probe(sys.argv[1])
'''


def _same_run(direct, profiled):
    assert direct.returncode == 0, direct.stderr
    assert profiled.returncode == 0, profiled.stderr
    assert profiled.stdout == direct.stdout
    assert profiled.stderr == direct.stderr == ""
    return json.loads(profiled.stdout)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_script_environment_as_direct_run(tmp_path, method):
    sub = tmp_path / "sub"
    script = write(sub / "envprog.py", ENV_BODY)
    # Run from tmp_path with a relative script path: sys.path[0] must be the
    # script's directory, not the current one, and argv[0] kept as typed.
    direct = run(["sub/envprog.py", method, "b c"], tmp_path)
    profiled = pyprof(["-o", "out.prof", "sub/envprog.py", method, "b c"], tmp_path)
    env = _same_run(direct, profiled)
    assert env["argv"] == ["sub/envprog.py", method, "b c"]
    assert env["path"][0] == str(sub) and env["file"] == str(script)
    assert env["name"] == "__main__" and env["builtins"] == "module"
    assert env["pickled"] == ["__main__", "Point", True]
    assert env["pool"] == [0, 1, 4, 9, 16, 25]
    key = (str(script), line_of(script, "def probe"), "probe")
    assert pstats_calls(tmp_path / "out.prof", key) == (1, 1)


@pytest.mark.parametrize("target,method", [("envmod", "spawn"), ("envmod", "fork"),
                                           ("envmod", "forkserver"),
                                           ("envpkg", "fork")])
def test_module_environment_as_python_m(tmp_path, target, method):
    write(tmp_path / "envmod.py", ENV_BODY)
    write(tmp_path / "envpkg" / "__init__.py", "")
    write(tmp_path / "envpkg" / "__main__.py",
          ENV_BODY.replace("import sys\n", "import sys\nfrom . import helper\n", 1))
    write(tmp_path / "envpkg" / "helper.py", "")
    direct = run(["-m", target, method, "x"], tmp_path)
    profiled = pyprof(["-o", "out.prof", "-m", target, method, "x"], tmp_path)
    env = _same_run(direct, profiled)
    assert env["path"][0] == str(tmp_path)
    assert env["name"] == "__main__" and env["builtins"] == "module"
    assert env["spec"][0] == ("envmod" if target == "envmod" else "envpkg.__main__")
    assert env["pool"] == [0, 1, 4, 9, 16, 25]
    assert env["argv"][1:] == [method, "x"]


def test_console_script_finds_module_in_cwd(tmp_path):
    # The `pyprof` console script starts with its bin directory as sys.path[0];
    # -m must still find modules in the current directory, as `python -m` does.
    exe = os.path.join(os.path.dirname(sys.executable), "pyprof")
    if not os.path.exists(exe):
        pytest.skip("no pyprof console script next to this interpreter")
    write(tmp_path / "envmod.py", ENV_BODY)
    direct = run(["-m", "envmod", "fork", "x"], tmp_path)
    profiled = subprocess.run([exe, "-o", "out.prof", "-m", "envmod", "fork", "x"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    env = _same_run(direct, profiled)
    assert env["path"][0] == str(tmp_path) and env["spec"][0] == "envmod"


def test_code_environment_as_python_c(tmp_path):
    code = ENV_BODY.replace('"""env probe"""', "")
    direct = run(["-c", code, "fork", "y"], tmp_path)
    profiled = pyprof(["-o", "out.prof", "-c", code, "fork", "y"], tmp_path)
    env = _same_run(direct, profiled)
    assert env["argv"] == ["-c", "fork", "y"] and env["path"][0] == ""
    assert env["file"] == "<unset>" and env["pickled"] == ["__main__", "Point", True]
    assert env["pool"] == [0, 1, 4, 9, 16, 25]
    assert ("<string>", line_of_text(code, "def probe"), "probe") in \
        pstats.Stats(str(tmp_path / "out.prof")).stats


# ---------------------------------------------------------------- 2. exit paths
EXIT_PROG = '''
import os
import signal
import sys
import threading
import time

MAIN_RETURNED = threading.Event()


def work(i):
    return i * i


def spin():
    return 0


def late_worker():
    MAIN_RETURNED.wait()          # the main program has finished by now
    for i in range(7):
        work(i)
    print("thread done", flush=True)


def main(mode):
    if mode == "thread":
        threading.Thread(target=late_worker).start()
        print("main done", flush=True)
        return
    for i in range(7):
        work(i)
    if mode == "exit3":
        sys.exit(3)
    elif mode == "exitmsg":
        sys.exit("stopped: bad input")
    elif mode == "raise":
        raise ValueError("boom from the program")
    elif mode == "selfint":
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)
    elif mode == "termblock":
        # SIGTERM arrives just before the thread blocks in read(): libc's kill
        # and os.read run in one C call, with no signal check between them
        import ctypes, itertools, operator
        r, w = os.pipe()
        kill = ctypes.CDLL(None).kill
        list(itertools.starmap(operator.call, [(kill, os.getpid(), signal.SIGTERM),
                                               (os.read, r, 1)]))
    elif mode == "wait":
        print("ready", flush=True)
        while True:
            spin()


main(sys.argv[1])
MAIN_RETURNED.set()
'''

# mode -> (argv mode, signal the test sends after "ready", expected exit status)
EXIT_CASES = {
    "normal": ("normal", None, 0),
    "exit3": ("exit3", None, 3),
    "exitmsg": ("exitmsg", None, 1),
    "raise": ("raise", None, 1),
    "selfint": ("selfint", None, -signal.SIGINT),
    "sigint": ("wait", signal.SIGINT, -signal.SIGINT),
    "sigterm": ("wait", signal.SIGTERM, -signal.SIGTERM),
    "termblock": ("termblock", None, -signal.SIGTERM),
    "thread": ("thread", None, 0),
}


def _run_exit_case(args, cwd, sig):
    cmd = [sys.executable, *args]
    if sig is None:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
        return r.returncode, r.stdout, r.stderr
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        p.send_signal(sig)
        out, err = p.communicate(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, "ready\n" + out, err


@pytest.mark.parametrize("fmt", ["cprof", "prof"])
@pytest.mark.parametrize("case", list(EXIT_CASES))
def test_exit_paths_write_results(tmp_path, case, fmt):
    mode, sig, status = EXIT_CASES[case]
    script = write(tmp_path / "exitprog.py", EXIT_PROG)
    out = tmp_path / f"out.{fmt}"
    d_status, d_out, d_err = _run_exit_case([str(script), mode], tmp_path, sig)
    p_status, p_out, p_err = _run_exit_case(
        ["-m", "pyprof", "-o", str(out), str(script), mode], tmp_path, sig)

    # Same exit status and output as the direct run (and as expected).
    assert d_status == status, d_err
    assert p_status == status, p_err
    assert p_out == d_out
    if case == "thread":
        assert p_out == "main done\nthread done\n"
    if case in ("normal", "exit3", "sigterm", "termblock", "thread"):
        assert p_err == d_err == ""
    elif case == "exitmsg":
        assert p_err == d_err == "stopped: bad input\n"
    elif case == "raise":
        # The program's own traceback, exactly as Python prints it: pyprof's frames hidden.
        assert p_err == d_err
        assert f'File "{script}"' in p_err and "in main" in p_err
        assert p_err.rstrip().endswith("ValueError: boom from the program")
    else:                       # KeyboardInterrupt: a traceback, and no pyprof frames
        assert p_err.startswith("Traceback (most recent call last):\n")
        assert p_err.rstrip().splitlines()[-1] == d_err.rstrip().splitlines()[-1] \
            == "KeyboardInterrupt"
        assert f'File "{script}"' in p_err
    assert "cli.py" not in p_err and PYPROF_DIR not in p_err

    # A complete file with work() called exactly 7 times.
    if fmt == "cprof":
        s, calls = capture_calls(out, str(script), "work")
        assert s.final
        assert calls == 7
    else:
        key = (str(script), line_of(script, "def work"), "work")
        assert pstats_calls(out, key) == (7, 7)


# ---------------------------------------------------------------- 3. bad input
MARKER_PROG = '''
import pathlib
pathlib.Path("ran.marker").write_text("the program ran")
'''


def assert_usage_error(r, *, match=None):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("pyprof: error:"), r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
    if match:
        assert match in lines[0]


@pytest.fixture
def marker_prog(tmp_path):
    write(tmp_path / "marker.py", MARKER_PROG)
    # The marker program itself works: a direct run creates the marker.
    assert run(["marker.py"], tmp_path).returncode == 0
    (tmp_path / "ran.marker").unlink()
    return tmp_path


@pytest.mark.parametrize("args,match", [
    (["missing_script.py"], "missing_script.py"),
    (["-o", "out.prof", "missing_script.py"], "missing_script.py"),
    (["-m", "no_such_module_xyz"], "no_such_module_xyz"),
    ([], "no script"),
    (["-o", "out.prof"], "no script"),
    (["-m"], "no module"),
    (["-m", "-c", "print(1)"], "-m and -c"),
    (["-s", "nosuchkey", "marker.py"], "nosuchkey"),
    (["-o", "no/such/dir/out.prof", "marker.py"], "cannot write"),
    (["-o", "no/such/dir/out.cprof", "marker.py"], "cannot write"),
    (["-o", "adir", "marker.py"], "directory"),
    (["-o", "adir.cprof", "marker.py"], "directory"),
    (["--no-such-option", "marker.py"], "--no-such-option"),
], ids=["missing-script", "missing-script-o", "missing-module", "no-target", "no-target-o",
        "no-module-name", "m-and-c", "bad-sort", "nodir-prof", "nodir-cprof", "dir-as-o",
        "dir-as-o-cprof", "unknown-option"])
def test_bad_input_one_line_status_2(marker_prog, args, match):
    tmp_path = marker_prog
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.cprof").mkdir()
    r = pyprof(args, tmp_path)
    assert_usage_error(r, match=match)
    assert not (tmp_path / "ran.marker").exists(), "the program ran"
    assert not (tmp_path / "out.prof").exists()


def test_output_path_under_a_file_refused_before_program(tmp_path):
    # An output path whose parent is a file cannot be written: reported before
    # the program starts, so the program's side effect (the marker) never happens.
    write(tmp_path / "marker.py", MARKER_PROG)
    r = pyprof(["-o", str(tmp_path / "marker.py" / "x.prof"), "marker.py"], tmp_path)
    assert_usage_error(r, match="cannot write")
    assert not (tmp_path / "ran.marker").exists()


@pytest.fixture
def good_capture(tmp_path):
    script = write(tmp_path / "exitprog.py", EXIT_PROG)
    r = pyprof(["-o", "good.cprof", str(script), "normal"], tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "good.cprof"


@pytest.mark.parametrize("kind", ["missing", "text", "truncated", "empty", "pstats"])
def test_convert_bad_input(tmp_path, good_capture, kind):
    src = tmp_path / f"in-{kind}.cprof"
    if kind == "text":
        src.write_text("this is not a capture file\n" * 5)
    elif kind == "truncated":
        data = good_capture.read_bytes()
        src.write_bytes(data[:len(data) // 2])
    elif kind == "empty":
        src.write_bytes(b"")
    elif kind == "pstats":
        r = pyprof(["-o", "p.prof", "exitprog.py", "normal"], tmp_path)
        assert r.returncode == 0
        src.write_bytes((tmp_path / "p.prof").read_bytes())
    # Ground truth: the library refuses it too (so this is bad input, not a CLI quirk).
    with pytest.raises(PyprofError):
        Session.load(src)
    r = pyprof(["convert", str(src), "-o", "conv.prof"], tmp_path)
    assert_usage_error(r, match=str(src) if kind != "missing" else "cannot read")
    assert not (tmp_path / "conv.prof").exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".pyprof-")]


def test_convert_usage_errors(tmp_path, good_capture):
    assert_usage_error(pyprof(["convert", str(good_capture)], tmp_path), match="-o")
    assert_usage_error(pyprof(["convert", str(good_capture), "-o", "x", "-f", "nope"],
                              tmp_path), match="nope")
    assert_usage_error(pyprof(["convert", str(good_capture), "-o",
                               str(tmp_path / "nodir" / "x.prof")], tmp_path),
                       match="cannot write")
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- 4. output formats
SORT_PROG = '''
def burn():
    total = 0
    for i in range(600_000):       # tens of ms of self time
        total += i
    return total


def trivial():
    return 1


def main():
    burn()
    for _ in range(100):
        trivial()
    print("program output")


main()
'''


def table_rows(stdout):
    """The printed table: (ncalls, location) per row, after the header line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if HEADER in line)
    rows = []
    for line in lines[start + 1:]:
        parts = line.split(None, 5)
        if len(parts) == 6:
            rows.append((parts[0], parts[5]))
    return lines[:start], rows


def test_table_on_stdout_without_o(tmp_path):
    script = write(tmp_path / "sortprog.py", SORT_PROG)
    r = pyprof(["sortprog.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("program output\n")    # the program's output comes first
    before, rows = table_rows(r.stdout)
    assert before[0] == "program output"
    where = {loc: n for n, loc in rows}
    assert where[f"sortprog.py:{line_of(script, 'def trivial')}(trivial)"] == "100"
    assert where[f"sortprog.py:{line_of(script, 'def burn')}(burn)"] == "1"
    assert where[f"sortprog.py:{line_of(script, 'def main')}(main)"] == "1"
    assert not list(tmp_path.glob("*.prof")) and not list(tmp_path.glob("*.cprof"))


@pytest.mark.parametrize("sort,first", [("tottime", "burn"), ("ncalls", "trivial"),
                                        ("calls", "trivial"), ("time", "burn")])
def test_sort_key_orders_table(tmp_path, sort, first):
    write(tmp_path / "sortprog.py", SORT_PROG)
    r = pyprof(["-s", sort, "sortprog.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"Ordered by: {'internal time' if 'time' in sort else 'call count'}" in r.stdout
    _, rows = table_rows(r.stdout)
    order = [loc for _, loc in rows if loc.endswith(("(burn)", "(trivial)"))]
    assert len(order) == 2
    assert order[0].endswith(f"({first})"), order
    if sort in ("tottime", "time"):
        assert rows[0][1].endswith("(burn)")       # the biggest self time of all


SAMPLED_SORT_PROG = '''
import time


def heavy():
    end = time.process_time() + 0.3     # its own loop: self time
    while time.process_time() < end:
        pass


def light():
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass


def wrapper():                          # no time of its own, all of it in callees
    heavy()
    light()


wrapper()
'''


def sampled_rows(stdout):
    """The sampled function table's function names, in the order printed."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Self "))
    names = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        names.append(line.split("?", 1)[1].split()[0])
    return names


@pytest.mark.parametrize("sort, order", [
    ("tottime", ["heavy", "light", "<module>", "wrapper"]),
    ("time", ["heavy", "light", "<module>", "wrapper"]),
    ("cumtime", ["<module>", "wrapper", "heavy", "light"]),
    ("name", ["<module>", "heavy", "light", "wrapper"]),
    ("line", ["<module>", "heavy", "light", "wrapper"])])
def test_sampled_table_sorts_as_asked(tmp_path, sort, order):
    """heavy and light burn 0.3 s and 0.1 s of CPU in their own loops, wrapper
    none (all in them): self order heavy, light; total order <module>, wrapper."""
    write(tmp_path / "sp.py", SAMPLED_SORT_PROG)
    r = pyprof(["--sample", "-s", sort, "sp.py"], tmp_path)
    assert r.returncode == 0 and "-s " not in r.stderr, r.stderr     # no note: it applies
    names = sampled_rows(r.stdout)
    assert [n for n in names if n in order] == order, r.stdout


def test_sampled_capture_viewed_by_calls_says_why_not(tmp_path):
    write(tmp_path / "sp.py", SAMPLED_SORT_PROG)
    r = pyprof(["--sample", "-o", "sp.cprof", "sp.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = pyprof(["view", "sp.cprof", "-s", "calls"], tmp_path)
    assert r.returncode == 0
    assert r.stderr == ("pyprof: note: -s calls: samples count no calls; the sampled tables "
                        "are ordered by total samples (-s tottime: by self samples)\n")
    names = sampled_rows(r.stdout)
    assert names[:2] == ["<module>", "wrapper"], r.stdout
    r = pyprof(["view", "sp.cprof", "-s", "tottime"], tmp_path)
    assert r.returncode == 0 and r.stderr == ""
    assert sampled_rows(r.stdout)[:2] == ["heavy", "light"], r.stdout
    # the line table follows: heavy's lines first
    assert r.stdout.index("Function: heavy at line") < r.stdout.index("Function: wrapper")


def test_convert_capture_to_pstats(tmp_path):
    script = write(tmp_path / "sortprog.py", SORT_PROG)
    r = pyprof(["-o", "run.cprof", "sortprog.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "program output\n"
    c = pyprof(["convert", "run.cprof", "-o", "run.prof"], tmp_path)
    assert c.returncode == 0 and c.stdout == "" and c.stderr == "", c.stderr
    s = Session.load(tmp_path / "run.cprof")
    expected = {}
    for fid, counters in s.function_totals().items():
        key = s.functions[fid].pstats_key
        expected[key] = expected.get(key, 0) + counters.calls
    stats = pstats.Stats(str(tmp_path / "run.prof")).stats
    assert {k: v[1] for k, v in stats.items()} == expected
    assert stats[(str(script), line_of(script, "def trivial"), "trivial")][:2] == (100, 100)
    # The console script does the same.
    pyprof_exe = os.path.join(os.path.dirname(sys.executable), "pyprof")
    if os.path.exists(pyprof_exe):
        subprocess.run([pyprof_exe, "convert", "run.cprof", "-o", "run2.prof"], cwd=tmp_path,
                       check=True, timeout=TIMEOUT)
        assert pstats.Stats(str(tmp_path / "run2.prof")).stats.keys() == stats.keys()


def test_version_is_one_line(tmp_path):
    r = pyprof(["--version"], tmp_path)
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith("pyprof ") and "features:" in lines[0]
    assert sys.version.split()[0] in lines[0]


# ---------------------------------------------------------------- 5. parity with cProfile
PARITY_PROG = '''
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


class Acc:
    def __init__(self):
        self.items = []

    def add(self, x):
        self.items.append(x)

    def total(self):
        return sum(self.items)


def gen(n):
    for i in range(n):
        yield i


def main():
    fib(12)
    is_even(30)
    acc = Acc()
    for i in gen(50):
        acc.add(i)
    words = sorted(["pear", "fig", "apple"] * 10, key=len)
    parts = ",".join(words).split(",")
    n = len(parts) + max(len(w) for w in words) + min(abs(-3), abs(4))
    d = {}
    for w in words:
        d.setdefault(w, []).append(len(w))
    return acc.total() + n + len(d) + isinstance(acc, Acc)


if __name__ == "__main__":
    print(main())
'''


def test_counts_equal_cprofile_cli(tmp_path):
    script = str(write(tmp_path / "parityprog.py", PARITY_PROG))
    a = run(["-m", "cProfile", "-o", "a.prof", script], tmp_path)
    b = pyprof(["-o", "b.prof", script], tmp_path)
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout
    sa = pstats.Stats(str(tmp_path / "a.prof")).stats
    sb = pstats.Stats(str(tmp_path / "b.prof")).stats

    def program_view(stats):
        # The script's own functions: (cc, nc) and their callers within the script.
        # Everything else is compared only through calls made *by* the script's
        # functions (the callers entries whose caller is in the script). That leaves
        # out what the runners do themselves and which differs by runner:
        # {built-in method builtins.exec} (called by cProfile.py's runctx vs by
        # pyprof/cli/run.py, it is the <module>'s only caller), the profilers' own
        # {method 'disable' ...}/enable calls.
        own = {k for k in stats if k[0] == script}
        view = {}
        for key, (cc, nc, _, _, callers) in stats.items():
            from_script = {c: v[:2] for c, v in callers.items() if c in own}
            if key in own:
                view[key] = ((cc, nc), from_script)
            elif from_script:
                view[key] = (None, from_script)
        return view

    va, vb = program_view(sa), program_view(sb)
    assert set(vb) == set(va)
    for key in va:
        assert vb[key] == va[key], key
    # Known by construction: fib(12) makes 465 calls, one primitive.
    fib = (script, line_of(tmp_path / "parityprog.py", "def fib"), "fib")
    assert va[fib][0] == (1, 465)
    assert va[("~", 0, "<method 'append' of 'list' objects>")][1] == {
        (script, line_of(tmp_path / "parityprog.py", "def add"), "add"): (50, 50),
        (script, line_of(tmp_path / "parityprog.py", "def main"), "main"): (30, 30)}


def test_waiting_for_threads_is_not_in_the_profile(tmp_path):
    """After the program, pyprof waits for its non-daemon threads while still
    profiling them; its own waiting (threading.enumerate, join...) must not
    appear, even with a daemon thread still running."""
    script = write(tmp_path / "waitprog.py", """
        import time
        t0 = time.perf_counter()
        import threading

        def spin():
            while True:
                time.sleep(0.001)

        def work(n):
            return sum(range(n))

        def late():
            time.sleep(0.2)             # still running when the program returns
            for _ in range(5):
                work(100)

        threading.Thread(target=spin, daemon=True).start()
        threading.Thread(target=late).start()
        work(10)
        open("own.txt", "w").write(repr(time.perf_counter() - t0))
    """)
    r = pyprof(["-o", "w.prof", str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    stats = pstats.Stats(str(tmp_path / "w.prof")).stats
    names = {k[2] for k in stats}
    assert "enumerate" not in names and "main_thread" not in names and "join" not in names
    assert not any("pyprof" in n for n in names), names
    # The 200 ms the runner waited for `late` is not charged to any function
    # of the main thread: the module's time is what its own clock says it took
    # (a loaded machine can stretch its threading import past 40 ms).
    own = float((tmp_path / "own.txt").read_text())
    module = next(v for k, v in stats.items() if k[2] == "<module>" and k[0] == str(script))
    assert module[3] < min(own + 0.01, 0.15), (module, own)
    assert pstats_calls(tmp_path / "w.prof", (str(script), line_of(script, "def work"),
                                              "work")) == (6, 6)
    # Every function that has callers is entered only through them (no stray
    # roots from the runner), so its calls equal the sum over its callers.
    for key, (cc, nc, tt, ct, callers) in stats.items():
        if callers:
            assert nc == sum(v[0] for v in callers.values()), key


def test_no_builtins_option(tmp_path):
    """--no-builtins: Python functions with cProfile's counts, no C functions
    (on 3.11 this is the frame-evaluation engine)."""
    script = write(tmp_path / "nb.py", """
        def leaf(x):
            return len(str(x))

        def main():
            return sum(leaf(i) for i in range(50))

        main()
    """)
    r = pyprof(["--no-builtins", "-o", "nb.prof", str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    stats = pstats.Stats(str(tmp_path / "nb.prof")).stats
    assert not [k for k in stats if k[0] == "~"]
    assert pstats_calls(tmp_path / "nb.prof", (str(script), line_of(script, "def leaf"),
                                               "leaf")) == (50, 50)


def test_forked_child_dies_by_sigterm_as_without_pyprof(tmp_path):
    """The runner's SIGTERM handler (write results, then die) is the parent's
    only: a forked child (a pool worker) gets the default action back, since a
    Python-level handler would wait for the next bytecode and a worker blocked
    in a lock would never die (Pool.terminate hung)."""
    prog = write(tmp_path / "forker.py", """
        import os, signal, sys, time
        pid = os.fork()
        if pid == 0:
            ok = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
            sys.stdout.write(f"child default: {ok}\\n")
            sys.stdout.flush()
            time.sleep(30)
            os._exit(0)
        time.sleep(0.5)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print("child killed by SIGTERM:", os.WIFSIGNALED(status)
              and os.WTERMSIG(status) == signal.SIGTERM)
    """)
    r = pyprof(["-o", "out.prof", str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child default: True" in r.stdout
    assert "child killed by SIGTERM: True" in r.stdout
