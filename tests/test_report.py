"""The HTML report (docs/report.md): its sections per kind of capture, its
numbers against the Session and cProfile, escaping of hostile names and source
lines, bad input, and the page in a real browser (headless Chromium: no
console errors, rendered rows and flame graph boxes, a screenshot kept under
build/test-artifacts/), a 100,000-function synthetic capture included."""
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

import pyprof
from pyprof.export import format_for_path
from support import TIMEOUT, run_pyprof as pyprof_cli, run_python as run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(ROOT, "build", "test-artifacts")
PY = f"py{sys.version_info[0]}{sys.version_info[1]}"

PROG = """
import pyprof

def light(n):
    s = 0
    for i in range(n):
        s += i
    return s

def heavy(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def alloc(n):
    return [bytearray(1000) for _ in range(n)]

def main():
    keep = []
    for k in range(4):
        with pyprof.step(f"round {k}"):
            for _ in range(3):
                light(20_000)
            heavy(300_000)
            fib(15)
            keep.append(alloc(200))
    return keep

main()
"""

# A function whose name, qualified name and source try to end the script or
# inject markup: none of it may reach the page as markup.
EVIL = """
import sys

def f():
    s = "</script><script>alert(1)</script><!-- <img src=x onerror=alert(2)>"
    x = 0
    for i in range(30000):
        x += i
    return s, x

code = f.__code__.replace(co_name="</script><img src=x onerror=alert(3)>")
if sys.version_info >= (3, 11):
    code = code.replace(co_qualname="<!--</script><script>alert(4)</script>")
f.__code__ = code
f = profile(f)
for _ in range(3):
    f()
"""


def ok(r):
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def page_data(text):
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


def sections(text):
    return set(re.findall(r'<section id="sec-([a-z]+)"', text))


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    (d / "prog.py").write_text(textwrap.dedent(PROG))
    return d


def capture(d, name, args):
    """A capture of prog.py with `args`, converted to HTML: (Session, page text, data)."""
    ok(pyprof_cli([*args, "-o", f"{name}.cprof", "prog.py"], d))
    ok(pyprof_cli(["convert", f"{name}.cprof", "-o", f"{name}.html"], d))
    text = (d / f"{name}.html").read_text()
    return pyprof.Session.load(d / f"{name}.cprof"), text, page_data(text)


def rows_by_name(data):
    cols = data["functions"]["columns"]
    return {r[0]: dict(zip(["name", "file", "line", "kind", *cols], r))
            for r in data["functions"]["rows"]}


# ---------------------------------------------------------------- formats, CLI
def test_suffixes():
    assert format_for_path("r.html") == "html" and format_for_path("R.HTM") == "html"
    assert format_for_path("r.flame.html") == "flamegraph"
    assert format_for_path("r.memory.html") == "memory-flamegraph"


def test_traced_report_numbers(prog):
    """Function tracing: calls equal cProfile's, self times the Session's, the
    heaviest function first by self time; sections as the capture has them."""
    s, text, data = capture(prog, "traced", [])
    assert sections(text) == {"summary", "functions", "flame", "steps"}
    ok(run(["-m", "cProfile", "-o", "c.prof", "prog.py"], prog))
    st = pstats.Stats(str(prog / "c.prof")).stats
    rows = rows_by_name(data)
    mine = {n: r for n, r in rows.items() if r["file"].endswith("prog.py")}
    assert {"light", "heavy", "fib", "alloc", "main", "<module>"} <= set(mine)
    theirs = {(os.path.basename(k[0]), k[1]): v for k, v in st.items()}
    for name, r in mine.items():                # pstats: (primitive calls, all calls, ...)
        assert r["calls"] == theirs[("prog.py", r["line"])][1], (name, r["calls"])
    assert mine["fib"]["calls"] == 4 * 1973 and mine["light"]["calls"] == 12
    totals = s.function_totals()
    for fid, c in totals.items():
        fn = s.functions[fid]
        if fn.filename.endswith("prog.py"):
            assert rows[fn.qualname]["self-time"] == pytest.approx(s.seconds(c.own), abs=1e-9)
            assert rows[fn.qualname]["time"] == pytest.approx(s.seconds(c.total), abs=1e-9)
    top = max(mine.values(), key=lambda r: r["self-time"])
    assert top["name"] == "heavy"
    # the flame graph: the calling-context tree, by self time (ns)
    fl = data["flame"]
    assert fl["unit"] == "ns"
    root = fl["threads"]["all threads"]
    assert root[3] == sum(round(s.seconds(p.own) * 1e9) for p in s.paths.values() if p.own > 0)
    # summary: events and the overhead estimate from them
    assert f"{s.info['events']:,} (each call" in text
    assert "overhead estimate</th><td>about " in text
    # steps: four, with their top self-time function
    assert [r[1] for r in data["steps"]["rows"]] == [f"round {k}" for k in range(4)]
    assert all(r[5] and r[5][0][0] == "heavy" for r in data["steps"]["rows"])


def test_sampled_report(prog):
    s, text, data = capture(prog, "sampled", ["--sample", "--rate", "1000"])
    assert {"summary", "functions", "heatmap", "flame"} <= sections(text)
    assert "memory" not in sections(text)
    assert data["flame"]["unit"] == "samples"
    total = sum(c.count for c in s.samples.values())
    assert data["flame"]["threads"]["all threads"][3] == total
    h = data["heatmap"]
    assert h["default"] == "self-samples"
    f = next(f for f in h["files"] if f["file"].endswith("prog.py"))
    ci = h["columns"].index("self-samples")
    got = sum(r[2 + ci] or 0 for r in f["lines"] if len(r) > 2)
    want = sum(c.count for (t, sid, state), c in s.samples.items()
               if s.stacks[sid].frames
               and s.functions[s.stacks[sid].frames[-1][0]].filename.endswith("prog.py"))
    assert got == want
    assert "not estimated for sampling" in text


def test_memory_report(prog):
    s, text, data = capture(prog, "memory", ["--memory", "--functions"])
    assert {"summary", "functions", "heatmap", "memory"} <= sections(text)
    assert "<svg" in text and "traced live bytes" in text
    peak = s.info["memory"]["peak_bytes"]
    assert re.search(r"peak traced memory</th><td>[0-9.,]+ (B|KiB|MiB)", text)
    assert peak > 4 * 200 * 1000
    h = data["heatmap"]
    ci = h["columns"].index("bytes")
    f = next(f for f in h["files"] if f["file"].endswith("prog.py"))
    by_line = {r[0]: r[2 + ci] for r in f["lines"] if len(r) > 2}
    want: dict = {}                             # functions can share a line (3.11's listcomp)
    for (fid, line), c in s.memory_lines().items():
        if s.functions[fid].filename == f["file"] and line > 0:     # line 0: no line
            want[line] = want.get(line, 0) + c.alloc_bytes
    assert want and all(by_line[line] == b for line, b in want.items()), (want, by_line)
    line = next(r[0] for r in f["lines"] if "bytearray(1000)" in r[1])
    assert by_line[line] >= 4 * 200 * 1000


def test_line_report(prog):
    s, text, data = capture(prog, "lines", ["--lines-of", "prog:heavy"])
    assert "heatmap" in sections(text)
    h = data["heatmap"]
    assert h["columns"][:2] == ["hits", "time"]
    f = next(f for f in h["files"] if f["file"].endswith("prog.py"))
    hits = {r[0]: r[2] for r in f["lines"] if len(r) > 2}
    want: dict = {}
    for (fid, line), c in s.line_totals().items():
        if s.functions[fid].filename == f["file"]:
            want[line] = want.get(line, 0) + c.hits
    assert want and all(hits[line] == n for line, n in want.items()), (want, hits)
    loop = next(r[0] for r in f["lines"] if "s += i * i % 7" in r[1])
    assert hits[loop] == 4 * 300_000


def test_run_writes_the_report_and_api_dump(prog, tmp_path):
    ok(pyprof_cli(["-o", str(tmp_path / "direct.html"), "prog.py"], prog))
    data = page_data((tmp_path / "direct.html").read_text())
    assert rows_by_name(data)["heavy"]["calls"] == 4
    p = pyprof.Profile()
    p.enable()
    sum(range(1000))
    p.dump(str(tmp_path / "api.html"))
    assert "sec-functions" in (tmp_path / "api.html").read_text()


def test_unreadable_capture_gives_the_loader_error_and_no_file(tmp_path):
    (tmp_path / "bad.cprof").write_bytes(b"\x89CPROF\r\n" + b"\0" * 7)
    (tmp_path / "empty.cprof").write_bytes(b"")
    for name in ("bad.cprof", "empty.cprof", "missing.cprof"):
        r = pyprof_cli(["convert", name, "-o", "out.html"], tmp_path)
        assert r.returncode == 2 and r.stderr.startswith("pyprof: error:"), r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
        assert not (tmp_path / "out.html").exists()
        assert not [p for p in os.listdir(tmp_path) if p.startswith(".pyprof-")]


# ---------------------------------------------------------------- escaping
@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    (d / "evil.py").write_text(textwrap.dedent(EVIL))
    ok(pyprof_cli(["-l", "-o", "evil.html", "evil.py"], d))
    return d / "evil.html"


def test_escaping(evil):
    text = evil.read_text()
    assert text.count("</script>") == 2             # the data's and the script's end
    assert "<!--" not in text and "<img" not in text and "alert(1)</script>" not in text
    data = page_data(text)
    names = {r[0] for r in data["functions"]["rows"]}
    assert any("</script><img src=x onerror=alert(3)>" in n or "<!--</script>" in n
               for n in names), names
    lines = [r[1] for f in data["heatmap"]["files"] for r in f["lines"]]
    assert any("</script><script>alert(1)</script><!--" in t for t in lines)


# ---------------------------------------------------------------- in a browser
def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium (/usr/bin/chromium: apt-get install chromium) to render the report")


def browse(page, tmp, *args, timeout=TIMEOUT):
    """Headless Chromium on `page`: (stdout, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items()       # not our sanitizers
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}
    prof = tmp / f"chromium-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    r = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={prof}", "--enable-logging=stderr", "--v=0",
                        "--hide-scrollbars", *args, page.as_uri()],
                       capture_output=True, text=True, timeout=timeout, env=env)
    return r.stdout, r.stderr, time.perf_counter() - t0


def console(stderr):
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def check_in_browser(page, tmp, name, expect):
    dom, err, _ = browse(page, tmp, "--dump-dom", "--virtual-time-budget=5000")
    assert not console(err), console(err)
    assert 'data-rendered="yes"' in dom, err[-2000:]
    for cls, least in expect.items():
        n = dom.count(f'class="{cls}"') + dom.count(f'class="{cls} ')
        assert n >= least, (cls, n)
    os.makedirs(ARTIFACTS, exist_ok=True)
    png = os.path.join(ARTIFACTS, f"report-{name}-{PY}.png")
    if os.path.exists(png):
        os.unlink(png)
    _, err, _ = browse(page, tmp, f"--screenshot={png}", "--window-size=1400,2400",
                       "--virtual-time-budget=5000")
    assert not console(err), console(err)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    return dom


@pytest.mark.parametrize("name,args,expect", [
    ("traced", [], {"frow": 6, "box": 6, "srow": 4}),
    ("sampled", ["--sample", "--rate", "1000"], {"frow": 3, "box": 3, "hl": 20}),
    ("memory", ["--memory", "--memory-stacks"], {"frow": 3, "box": 3, "hl": 20}),
])
def test_report_in_chromium(prog, tmp_path, name, args, expect):
    _, text, data = capture(prog, "b" + name, args)
    dom = check_in_browser(prog / f"b{name}.html", tmp_path, name, expect)
    assert dom.count('class="frow"') == len(data["functions"]["rows"])
    if name == "memory":
        assert data["memflame"] and 'id="memcurve"' in dom


def test_escaping_in_chromium(evil, tmp_path):
    dom = check_in_browser(evil, tmp_path, "escaping", {"frow": 1, "hl": 3})
    assert "<img" not in dom and "<script>alert" not in dom
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--" in dom


def test_100k_synthetic_in_chromium(tmp_path):
    """100,000 functions and 100,000 stacks: a report of bounded size that the
    browser loads and renders without error (numbers: benchmarks/RESULTS.md)."""
    chromium()
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        from report_size import synthetic
    finally:
        sys.path.pop(0)
    from pyprof.export import report
    s = synthetic(100_000, 100_000)
    page = tmp_path / "big.html"
    report.write(s, page)
    size = page.stat().st_size
    assert size < 8e6, size
    data = page_data(page.read_text())
    assert data["functions"]["total"] == 100_000
    assert len(data["functions"]["rows"]) == report.MAX_FUNCTIONS
    total = sum(c.count for c in s.samples.values())
    assert data["flame"]["threads"]["all threads"][3] == total
    dom, err, secs = browse(page, tmp_path, "--dump-dom", timeout=300)
    assert not console(err), console(err)
    assert 'data-rendered="yes"' in dom and dom.count('class="box"') > 50
    assert secs < 120, secs
