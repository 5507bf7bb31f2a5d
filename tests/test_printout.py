"""One decision of what a capture prints (render.printout): the CLI's stdout,
`-o x.txt`, `pyprof view` and the %%cprof magic give the same text."""
import io

import pytest

from pyprof import cli
from pyprof.cli import run as cli_run
from pyprof.integrations import magic
from pyprof.model.session import Session
from pyprof.render.printout import print_capture

from conftest import run_python

PROG = """\
try:
    profile
except NameError:
    def profile(f):
        return f


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    blobs = [bytes(1000) for _ in range(200)]
    return total + len(blobs)


@profile
def main():
    s = 0
    for _ in range(30):
        s += work(20000)
    return s


main()
"""

MODES = {
    "sampled": ["--sample", "--rate", "2000"],
    "lines": ["-l"],
    "memory": ["--memory"],
}


@pytest.fixture(scope="module", params=sorted(MODES))
def capture(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    prog = tmp / "prog.py"
    prog.write_text(PROG)
    out = tmp / "run.cprof"
    r = run_python(["-m", "pyprof", *MODES[request.param], "-o", str(out), str(prog)], cwd=tmp)
    assert r.returncode == 0, r.stderr
    return request.param, tmp, out


def _opts():
    opts, _ = magic.parse("", "x = 1")      # the run options' defaults (sort, unit...)
    return opts


def test_stdout_file_view_and_magic_print_the_same(capture, capsys):
    mode, tmp, path = capture
    session = Session.load(path)
    expected = io.StringIO()
    print_capture(session, expected)
    expected = expected.getvalue()
    # the CLI's stdout at the end of a run
    buf = io.StringIO()
    cli_run.write_tables(None, _opts(), buf, session)
    assert buf.getvalue() == expected
    # -o x.txt (the text export of the same capture)
    txt = tmp / "run.txt"
    assert cli.main(["convert", str(path), "-o", str(txt)]) == 0
    assert txt.read_text() == expected
    # pyprof view (its default)
    capsys.readouterr()
    assert cli.main(["view", str(path)]) == 0
    assert capsys.readouterr().out == expected
    # the magic's text
    assert magic._tables(session, None, _opts()) == expected


def test_what_each_mode_prints(capture):
    mode, tmp, path = capture
    text = io.StringIO()
    print_capture(Session.load(path), text)
    text = text.getvalue()
    if mode == "sampled":           # functions, then lines (stdout printed functions only)
        assert text.index("Samples:") < text.index("Line #")
    elif mode == "lines":
        assert "Timer unit:" in text and "Line #" in text
    else:
        assert "Memory unit:" in text or "Line #" in text


def test_sampled_run_stdout_has_the_line_table(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    r = run_python(["-m", "pyprof", "--sample", "--rate", "2000", str(prog)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Samples:" in r.stdout and "Line #" in r.stdout
