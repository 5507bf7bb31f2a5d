"""%%cprof and %cprof in a real Jupyter kernel: a notebook built here is run by
nbclient on ipykernel (the interpreter under test), and its outputs are
checked against known work: call counts, line hits, bytes allocated, and what
happens when a cell raises, awaits at top level, is empty or has a bad option."""
import json
import re

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat "
                               "(pip install -e .[test], which make test does)")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbclient")
pytest.importorskip("ipykernel", reason="the notebook tests need ipykernel")

WORK = """
def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total

def helper():
    return [work(100) for _ in range(7)]
"""

CELLS = {
    "load": "%load_ext pyprof",
    "define": WORK,
    "function": "%%cprof\nwork(20000)\nhelper()",
    "calls": "print(json.dumps({r['name']: r['calls'] for r in "
             "__import__('pyprof').views.view(_cprof.session, 'op', "
             "select=('calls',))['rows']}))",
    "lines": "%%cprof --lines-of work\nwork(1000)",
    "memory": "%%cprof --memory\nblob = bytearray(8_000_000)",
    "memory_check": "print(json.dumps(sum(c.alloc_bytes for c in _cprof.session.memory.values())))",
    "raises": "%%cprof\nwork(10)\n1 / 0",
    "await": "%%cprof\nimport asyncio\nawait asyncio.sleep(0.05)\nwork(30)",
    "await_check": "print(json.dumps({r['name']: r['calls'] for r in "
                   "__import__('pyprof').views.view(_cprof.session, 'op', "
                   "select=('calls',))['rows']}))",
    "empty": "%%cprof\n",
    "blank": "%%cprof\n   \n",
    "bad": "%%cprof --bogus\nwork(1)",
    "line_magic": "res = %cprof -r work(50)\nprint(type(res).__name__)",
    "view": "%%cprof --view code --start ^helper$ --select calls\nhelper()",
}


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import json")]
    names = list(CELLS)
    nb.cells += [nbformat.v4.new_code_cell(CELLS[n]) for n in names]
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     allow_errors=True)
    client.execute()
    return {n: nb.cells[i + 1].outputs for i, n in enumerate(names)}


def texts(outputs, kind=None):
    out = []
    for o in outputs:
        if o["output_type"] == "stream" and (kind is None or o["name"] == kind):
            out.append(o["text"])
        elif o["output_type"] in ("display_data", "execute_result") and kind in (None, "plain"):
            out.append(o["data"].get("text/plain", ""))
        elif o["output_type"] == "error" and kind in (None, "error"):
            out.append(o["ename"] + ": " + o["evalue"])
    return "".join(out)


def html_of(outputs):
    return "".join(o["data"].get("text/html", "") for o in outputs
                   if o["output_type"] in ("display_data", "execute_result"))


def report_in(html):
    """The report page inside the output's sandboxed iframe, and its data."""
    import html as _html
    m = re.search(r'<iframe sandbox="allow-scripts"[^>]* srcdoc="([^"]*)"', html)
    assert m, html[:300]
    page = _html.unescape(m.group(1))
    blob = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    return page, json.loads(blob.group(1))


def test_cell_profile_counts_and_html(executed):
    out = executed["function"]
    html = html_of(out)
    assert "<script" not in html.split("srcdoc=")[0]      # the report's script stays in its frame
    page, data = report_in(html)
    cols = data["functions"]["columns"]
    rows = {r[0]: dict(zip(cols, r[4:])) for r in data["functions"]["rows"]}
    assert rows["work"]["calls"] == 8 and rows["helper"]["calls"] == 1
    assert data["flame"] is not None and "http" not in page.split("<body")[0]
    calls = json.loads(texts(executed["calls"], "stdout"))
    assert calls["work"] == 1 + 7 and calls["helper"] == 1
    # the cell's code only: not the kernel's threads, not the display of its value
    assert all(k in ("work", "helper", "<module>", "<listcomp>", "helper.<locals>.<listcomp>",
                     "<built-in method builtins.exec>", "InteractiveShell.run_code",
                     "InteractiveShell.user_ns", "InteractiveShell.user_global_ns",
                     "run.<locals>.displayhook")
               or k.startswith("<") for k in calls), json.dumps(calls)
    assert "work" in texts(out, "plain")


def test_function_from_earlier_cell_line_by_line(executed):
    text = texts(executed["lines"], "plain")
    assert "Function: work at line 1" in text          # the cell's own numbering
    rows = {int(m.group(1)): int(m.group(2)) for m in
            re.finditer(r"^\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+\S+\s{2}", text, re.M)}
    assert rows[3] == 1001 and rows[4] == 1000          # for / total += ...
    assert "total += i * i" in text                      # the cell's source is shown


def test_memory_of_a_cell(executed):
    total = json.loads(texts(executed["memory_check"], "stdout"))
    assert total >= 8_000_000
    page, data = report_in(html_of(executed["memory"]))
    assert 'id="sec-memory"' in page and "<svg" in page     # the memory curve, inline
    assert "blob = bytearray(8_000_000)" in texts(executed["memory"], "plain")


def test_cell_that_raises_shows_its_error_and_the_profile(executed):
    out = executed["raises"]
    assert "ZeroDivisionError" in texts(out)
    assert "work" in texts(out, "plain")                 # what ran is still profiled
    assert "raised ZeroDivisionError" in html_of(out)


def test_top_level_await(executed):
    calls = json.loads(texts(executed["await_check"], "stdout"))
    assert calls["work"] == 1
    assert "Error" not in texts(executed["await"], "error")


def test_bad_input(executed):
    # IPython itself refuses an empty body; a blank one reaches the magic
    assert "cell body is empty" in texts(executed["empty"], "stderr")
    assert "%%cprof: the cell is empty: nothing to profile" in texts(executed["blank"], "stderr")
    bad = texts(executed["bad"])
    assert "unrecognized arguments: --bogus" in bad and "usage: %%cprof" in bad
    assert "Traceback" not in bad


def test_line_magic_and_views(executed):
    assert "CprofResult" in texts(executed["line_magic"], "stdout")
    text = texts(executed["view"], "plain")
    assert re.search(r"^\s+1\s+helper", text, re.M) and re.search(r"^\s+7\s+work", text, re.M)


def test_example_notebook_runs():
    """examples/notebook.ipynb, as a user would open it: every cell runs, no error."""
    import os
    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "notebook.ipynb")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("make" in texts([o], "plain") for o in outputs)
