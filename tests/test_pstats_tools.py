"""pyprof's pstats files opened with the tools people open them with.

Profiles are written three ways: ``pyprof.Profile().dump_stats``,
``python -m pyprof -o FILE script.py`` on a script with recursion, a generator,
methods, C functions and threads, and the same script captured to .cprof then
``pyprof convert``-ed to pstats; then each file is read by the stdlib pstats,
gprof2dot (and graphviz's dot), pyprof2calltree (and valgrind's
callgrind_annotate), snakeviz (its stats-to-JSON code and its web server) and
tuna. Every test checks numbers known by construction, not only that a tool
ran. Last, cProfile's and pyprof's files of the same programs are compared.
"""
import ast
import cProfile
import html
import io
import json
import marshal
import os
import pstats
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import pytest

import pyprof
import workloads

TOOL_TIMEOUT = 60

# The script profiled through the CLI. Counts by construction (with threads):
# fib: 1 x fib(15) = 1973 calls and 3 x fib(12) = 3 x 465 calls: nc 3368, cc 4;
# countdown is resumed 51 times (50 values, then the end); Accumulator.add 50;
# the sort key lambda 40 times, called by the C function sorted.
SCRIPT = '''\
import sys
import threading


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def countdown(n):
    while n:
        yield n
        n -= 1


class Accumulator:
    def __init__(self):
        self.items = []

    def add(self, x):
        self.items.append(x)

    def total(self):
        return sum(self.items)


def worker(out, i):
    out[i] = fib(12)


def run_threads():
    out = [None] * 3
    threads = [threading.Thread(target=worker, args=(out, i)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main(use_threads):
    acc = Accumulator()
    for x in countdown(50):
        acc.add(x)
    words = sorted([str(i) for i in range(40)], key=lambda w: w[::-1])
    out = run_threads() if use_threads else []
    return fib(15), acc.total(), len(words), len(out)


if __name__ == "__main__":
    main("--no-threads" not in sys.argv)
'''

SORTED = ("~", 0, "<built-in method builtins.sorted>")
APPEND = ("~", 0, "<method 'append' of 'list' objects>")
THREAD_RUN = (threading.__file__, threading.Thread.run.__code__.co_firstlineno, "run")


def api_program():
    workloads.recursion()
    workloads.generators()
    workloads.methods()
    workloads.builtins_and_c()


def _key(func):
    code = func.__code__
    return (code.co_filename, code.co_firstlineno, code.co_name)


def _script_keys(path):
    """(path, line, name) of every def, class and lambda of SCRIPT, by name."""
    keys = {"<module>": (path, 1, "<module>")}
    for node in ast.walk(ast.parse(SCRIPT)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            keys[node.name] = (path, node.lineno, node.name)
        elif isinstance(node, ast.Lambda):
            keys["<lambda>"] = (path, node.lineno, "<lambda>")
    return keys


@dataclass
class Prof:
    """A pstats file and what is known about its contents by construction."""
    kind: str
    path: str
    root: tuple                                  # the program's outermost call
    fib: tuple                                   # the recursive function's key
    calls: dict                                  # key -> (cc, nc)
    edges: dict                                  # (caller, callee) -> (nc, cc)
    shown: list = field(default_factory=list)    # keys every tool must show
    # keys tuna cannot place: its tree stops at a function with several callers,
    # and these are reached only through one (Shape.area through sum(), a C
    # function called from many places)
    below_tuna_cut: set = field(default_factory=set)


def _run(args, **kw):
    kw.setdefault("timeout", TOOL_TIMEOUT)
    return subprocess.run(args, capture_output=True, text=True, **kw)


def _python(*args, **kw):
    return _run([sys.executable, *args], **kw)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("script") / "prog.py"
    path.write_text(SCRIPT)
    return str(path)


@pytest.fixture(scope="module")
def api_prof(tmp_path_factory):
    api_program()                       # warm caches (re, json) outside the profile
    path = str(tmp_path_factory.mktemp("api") / "api.prof")
    prof = pyprof.Profile()
    prof.runcall(api_program)
    prof.dump_stats(path)
    fib, even, odd = _key(workloads.fib), _key(workloads.is_even), _key(workloads.is_odd)
    recursion, bic = _key(workloads.recursion), _key(workloads.builtins_and_c)
    area = _key(workloads.Shape.area)
    return Prof(
        "api", path, root=_key(api_program), fib=fib,
        calls={_key(api_program): (1, 1), fib: (1, 1973), even: (1, 21), odd: (1, 20),
               # 51 shapes: s.area() in methods' sum, and again through s()
               area: (102, 102),
               # lst.append, list.append(lst, i), d.setdefault(...).append: 100 each
               APPEND: (300, 300)},
        edges={(recursion, fib): (1, 1), (fib, fib): (1972, 2),
               (recursion, even): (1, 1), (odd, even): (20, 1), (even, odd): (20, 1),
               (bic, APPEND): (300, 300), (_key(api_program), recursion): (1, 1)},
        shown=[_key(api_program), recursion, fib, even, odd, area, bic],
        below_tuna_cut={area})


@pytest.fixture(scope="module")
def cli_prof(tmp_path_factory, script):
    path = str(tmp_path_factory.mktemp("cli") / "cli.prof")
    r = _python("-m", "pyprof", "-o", path, script)
    assert r.returncode == 0, r.stderr
    return _script_prof("cli", path, script)


@pytest.fixture(scope="module")
def convert_prof(tmp_path_factory, script):
    """The CLI writing a .cprof capture, then 'pyprof convert' to pstats."""
    tmp = tmp_path_factory.mktemp("convert")
    capture, path = str(tmp / "cli.cprof"), str(tmp / "converted.prof")
    r = _python("-m", "pyprof", "-o", capture, script)
    assert r.returncode == 0, r.stderr
    r = _python("-m", "pyprof", "convert", capture, "-o", path)
    assert r.returncode == 0, r.stderr
    return _script_prof("convert", path, script)


def _script_prof(kind, path, script):
    k = _script_keys(script)
    return Prof(
        kind, path, root=k["<module>"], fib=k["fib"],
        calls={k["<module>"]: (1, 1), k["main"]: (1, 1), k["fib"]: (4, 3368),
               k["countdown"]: (51, 51), k["add"]: (50, 50), k["worker"]: (3, 3),
               k["<lambda>"]: (40, 40), k["total"]: (1, 1)},
        edges={(k["<module>"], k["main"]): (1, 1),
               (k["main"], k["fib"]): (1, 1), (k["worker"], k["fib"]): (3, 3),
               # each of the 4 outermost fib calls makes 2 calls with no fib->fib
               # call already open
               (k["fib"], k["fib"]): (3364, 8),
               (k["main"], k["countdown"]): (51, 51), (k["main"], k["add"]): (50, 50),
               (k["add"], APPEND): (50, 50), (SORTED, k["<lambda>"]): (40, 40),
               (THREAD_RUN, k["worker"]): (3, 3), (k["main"], SORTED): (1, 1)},
        shown=[k[n] for n in ("<module>", "main", "fib", "countdown", "add", "worker",
                              "run_threads", "Accumulator")])


@pytest.fixture(params=["api", "cli", "convert"])
def prof(request):
    return request.getfixturevalue(f"{request.param}_prof")


def _load(path):
    with open(path, "rb") as f:
        return marshal.load(f)


def _short(key):
    """How pstats prints a key: file:line(name), or {name} for C functions."""
    return f"{{{key[2]}}}" if key[0] == "~" else f"{os.path.basename(key[0])}:{key[1]}({key[2]})"


# ---------------------------------------------------------------- the file itself
def test_format_invariants(prof):
    stats = _load(prof.path)
    # (c) non-empty, with a root (no callers) that took measurable time: tuna
    # keeps only roots with cumtime > 1e-5 s
    assert stats
    roots = [k for k, v in stats.items() if not v[4]]
    assert prof.root in roots
    assert stats[prof.root][3] > 1e-5
    for key, value in stats.items():
        assert isinstance(key, tuple) and len(key) == 3
        assert type(key[0]) is str and type(key[1]) is int and type(key[2]) is str
        assert len(value) == 5
        cc, nc, tt, ct, callers = value
        assert type(cc) is int and type(nc) is int and type(tt) is float and type(ct) is float
        assert 0 <= cc <= nc and nc > 0 and tt >= 0 and ct >= 0
        assert type(callers) is dict
        for caller, edge in callers.items():
            # (a) every caller is a function of the file (snakeviz, pyprof2calltree
            # and tuna index the top level by caller keys)
            assert caller in stats, (key, caller)
            # (b) edges are (nc, cc, tt, ct): 4-tuples of int, int, float, float
            assert type(edge) is tuple and len(edge) == 4, (key, caller, edge)
            enc, ecc, ett, ect = edge
            assert type(enc) is int and type(ecc) is int, (key, caller, edge)
            assert type(ett) is float and type(ect) is float, (key, caller, edge)
            assert 0 <= ecc <= enc and ett >= 0 and ect >= 0
        # (d) the calls of a function that has callers are the sum of its callers' calls.
        # Holds when every call is seen with its caller, as in these programs; a
        # function also called from a frame entered before profiling started (so
        # with no known caller) breaks it, in cProfile's files too.
        if callers:
            assert nc == sum(e[0] for e in callers.values()), (key, nc, callers)


def test_known_counts(prof):
    stats = pstats.Stats(prof.path).stats
    for key, expected in prof.calls.items():
        assert stats[key][:2] == expected, key
    for (caller, callee), expected in prof.edges.items():
        assert stats[callee][4][caller][:2] == expected, (caller, callee)


def test_self_times_add_up_to_root(api_prof):
    # Profile.runcall: everything ran inside the root, so the self times of all
    # functions (but disable(), which runs after the root returned) add up to the
    # root's cumulative time, to a nanosecond of rounding per function.
    stats = _load(api_prof.path)
    own = sum(v[2] for k, v in stats.items() if "disable" not in k[2])
    assert abs(own - stats[api_prof.root][3]) <= 1e-9 * len(stats) + 1e-12


# ---------------------------------------------------------------- stdlib pstats
def test_pstats_reports(prof):
    buf = io.StringIO()
    st = pstats.Stats(prof.path, stream=buf)
    raw = _load(prof.path)
    assert st.total_calls == sum(v[1] for v in raw.values())
    assert st.prim_calls == sum(v[0] for v in raw.values())
    assert st.total_tt == pytest.approx(sum(v[2] for v in raw.values()))
    st.sort_stats("cumulative")
    assert st.fcn_list[0] == prof.root            # the root has the largest cumtime
    st.print_stats()
    st.print_callers()
    st.print_callees()
    out = buf.getvalue()
    assert f"{st.total_calls} function calls ({st.prim_calls} primitive calls)" in out
    stats_part, rest = re.split(r"^Function\s+was called by\.\.\.$", out, maxsplit=1, flags=re.M)
    callers_part, callees_part = re.split(r"^Function\s+called\.\.\.$", rest, maxsplit=1,
                                          flags=re.M)
    for key in prof.shown:
        for part in (stats_part, callers_part, callees_part):
            assert _short(key) in part, key
    # print_stats shows nc/cc; print_callers/print_callees show an edge's nc/cc,
    # so a file with the edge fields swapped would print 2/1972 here.
    fib = prof.fib
    cc, nc = prof.calls[fib]
    assert re.search(rf"^\s*{nc}/{cc}\s.*{re.escape(_short(fib))}$", stats_part, re.M)
    enc, ecc = prof.edges[(fib, fib)]
    assert f"{enc}/{ecc}" in callers_part and f"{enc}/{ecc}" in callees_part
    assert f"{ecc}/{enc}" not in callers_part


# ---------------------------------------------------------------- gprof2dot + dot
def test_gprof2dot_and_graphviz(prof):
    r = _python("-m", "gprof2dot", "-f", "pstats", "-n", "0", "-e", "0", prof.path)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
    dot_src = r.stdout
    assert dot_src.startswith("digraph")
    stats = _load(prof.path)
    labels = []
    for key in prof.shown:
        # gprof2dot names a node module:line:name; its label ends with the call count
        module = os.path.splitext(os.path.basename(key[0]))[0]
        labels.append(f"{module}:{key[1]}:{key[2]}")
        m = re.search(r'label="' + re.escape(labels[-1]) + r'\\n[^"]*\\n(\d+)\u00d7"', dot_src)
        assert m, labels[-1]
        assert int(m.group(1)) == stats[key][1], labels[-1]
    if shutil.which("dot") is None:
        pytest.skip("graphviz 'dot' is not installed: the dot source was checked, not rendered")
    svg = _run(["dot", "-Tsvg"], input=dot_src)
    assert svg.returncode == 0, svg.stderr
    assert "<svg" in svg.stdout and svg.stdout.rstrip().endswith("</svg>")
    for label in labels:
        assert f">{html.escape(label, quote=False)}</text>" in svg.stdout, label


# ---------------------------------------------------------------- pyprof2calltree
def _parse_callgrind(text):
    """summary and the self cost of each fn= block (the first cost line after fn=)."""
    summary, self_costs, expect_self = None, [], False
    for line in text.splitlines():
        if line.startswith("summary:"):
            summary = int(line.split()[1])
        elif line.startswith("fn="):
            expect_self = True
        elif expect_self and re.match(r"^\d+ \d+$", line):
            self_costs.append(int(line.split()[1]))
            expect_self = False
    return summary, self_costs


def test_pyprof2calltree_and_callgrind_annotate(prof, tmp_path):
    out = tmp_path / "out.callgrind"
    r = _python("-m", "pyprof2calltree", "-i", prof.path, "-o", str(out))
    assert r.returncode == 0, r.stderr
    stats = _load(prof.path)
    text = out.read_text()
    assert "events: ns" in text
    summary, self_costs = _parse_callgrind(text)
    # pyprof2calltree: one fn= block per function, self cost int(tt * 1e9);
    # summary is the largest cumulative time (the root's)
    assert len(self_costs) == len(stats)
    assert sum(self_costs) == sum(int(v[2] * 1e9) for v in stats.values())
    assert summary == max(int(v[3] * 1e9) for v in stats.values()) > 0
    assert summary == int(stats[prof.root][3] * 1e9)

    if shutil.which("callgrind_annotate") is None:
        pytest.skip("valgrind's callgrind_annotate is not installed")
    ann = _run(["callgrind_annotate", "--threshold=100", "--auto=no", "--inclusive=yes",
                str(out)], cwd="/")
    assert ann.returncode == 0, ann.stderr
    assert "WARNING" not in ann.stdout + ann.stderr, ann.stderr
    m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", ann.stdout, re.M)
    assert m and int(m.group(1).replace(",", "")) == summary
    inclusive = {}
    for cost, name in re.findall(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*)$", ann.stdout, re.M):
        inclusive[name] = int(cost.replace(",", ""))
    for key in prof.shown:
        names = [n for n in inclusive
                 if re.fullmatch(re.escape(f"{key[0]}:{key[2]}") + r"(:\d+)?", n)]
        assert names, key
        assert max(inclusive[n] for n in names) > 0, key
    # The root's inclusive cost (its self cost plus what its calls cost) is the
    # whole run: the summary, to a nanosecond of truncation per line.
    root = f"{prof.root[0]}:{prof.root[2]}"
    assert abs(inclusive[root] - summary) <= 2 + len(stats[prof.root][4]) + sum(
        1 for v in stats.values() if prof.root in v[4])


# ---------------------------------------------------------------- snakeviz
def _keyfmt(key):
    return "{}:{}({})".format(*key)


def test_snakeviz_json_stats(prof):
    from snakeviz.stats import json_stats, table_rows
    st = pstats.Stats(prof.path)
    data = json_stats(st)
    # what the page embeds must be JSON: string keys, lists (a tuple would not
    # survive the round trip unchanged)
    assert json.loads(json.dumps(data)) == data
    for key in prof.shown:
        assert _keyfmt(key) in data, key
    for key, (cc, nc) in prof.calls.items():
        node = data[_keyfmt(key)]
        assert node["stats"][:2] == [cc, nc], key
        assert node["stats"][3] > 0 or key[0] == "~"
    for (caller, callee), (nc, cc) in prof.edges.items():
        assert data[_keyfmt(callee)]["callers"][_keyfmt(caller)][:2] == [nc, cc]
        # children are built from the callers (pstats' calc_callees)
        assert data[_keyfmt(caller)]["children"][_keyfmt(callee)][:2] == [nc, cc]
    rows = {row[-1]: row for row in table_rows(st)}
    assert len(rows) == len(st.stats)
    for key, (cc, nc) in prof.calls.items():
        calls = str(nc) if nc == cc else f"{nc}/{cc}"
        assert rows[_keyfmt(key)][0] == [calls, nc], key


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_snakeviz_server_page(cli_prof):
    from snakeviz.stats import json_stats
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "snakeviz", "--server", "-H", "127.0.0.1",
         "-p", str(_free_port()), cli_prof.path],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout],
                         daemon=True).start()
        deadline, url, seen = time.monotonic() + 30, None, []
        while url is None and time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                if proc.poll() is not None:
                    break
                continue
            if seen[-1].startswith("http://"):
                url = seen[-1].strip()
        assert url, f"snakeviz did not start: {''.join(seen)}"
        assert url.endswith("/snakeviz/" + urllib.parse.quote(cli_prof.path, safe=""))
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with no_proxy.open(url, timeout=30) as resp:
            assert resp.status == 200
            page = resp.read().decode()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # The page embeds json_stats() of the file (as a Python literal) for its sunburst.
    m = re.search(r"var profile_data = (.*);\s*$", page, re.M)
    assert m, page[:500]
    assert ast.literal_eval(m.group(1)) == json_stats(pstats.Stats(cli_prof.path))
    assert _keyfmt(cli_prof.fib) in page


# ---------------------------------------------------------------- tuna
def _walk(node, depth=0):
    yield node, depth
    for child in node.get("children", []):
        yield from _walk(child, depth + 1)


def _subtree_value(node):
    return sum(n.get("value", 0) for n, _ in _walk(node))


def test_tuna(prof):
    from tuna.main import read, render
    tree = read(prof.path)
    page = render(tree, prof.path)
    assert "<html" in page.lower() and json.dumps(tree)[:40] in page
    # tuna's roots: functions without callers whose cumtime > 1e-5 s; more than
    # one gets an artificial "root" above them.
    tops = tree["children"] if tree["text"] == ["root"] else [tree]
    root_name = "{}::{}::{}".format(*prof.root)
    top = [n for n in tops if n["text"][0] == root_name]
    assert top, [n["text"] for n in tops]
    stats = _load(prof.path)
    # the root's subtree holds the whole run: self times of the nodes below it,
    # plus the cumulative time of each cut (functions with several callers)
    assert _subtree_value(top[0]) == pytest.approx(stats[prof.root][3], rel=0.05)
    names = {n["text"][0]: n for n, _ in _walk(tree)}
    for key in prof.shown:
        if key in prof.below_tuna_cut:
            continue
        name = "{}::{}::{}".format(*key)
        assert name in names or any(name in n["text"][1] for n, _ in _walk(tree)
                                    if n["text"][0] == "Possible calls of"), key
        if name in names:
            assert _subtree_value(names[name]) > 0, key


# ---------------------------------------------------------------- parity with cProfile
def _own(key):
    # The profilers' own entries differ by construction (cProfile records
    # _lsprof.Profiler.disable, pyprof its own disable, and in the CLI each
    # profiler's runner code), so they are left out of the comparison.
    filename, _, name = key
    return (filename.endswith(("cProfile.py", "profile.py"))
            or os.sep + "pyprof" + os.sep in filename
            or "_lsprof.Profiler" in name or "pyprof._cprof.Profiler" in name)


def _program_view(path, files):
    """The program's own functions: (cc, nc) and callers with (nc, cc)."""
    out = {}
    for key, (cc, nc, tt, ct, callers) in pstats.Stats(path).stats.items():
        if key[0] in files:
            out[key] = (cc, nc, {c: e[:2] for c, e in callers.items() if not _own(c)})
    return out


def _assert_same(got, expected):
    assert set(got) == set(expected)
    for key in expected:
        assert got[key][:2] == expected[key][:2], key
        assert got[key][2] == expected[key][2], key


def test_parity_dump_stats(tmp_path):
    api_program()                       # warm caches so both runs do the same work
    paths = {}
    for name, cls in (("cprofile", cProfile.Profile), ("pyprof", pyprof.Profile)):
        p = cls()
        p.runcall(api_program)
        paths[name] = str(tmp_path / f"{name}.prof")
        p.dump_stats(paths[name])
    files = {workloads.__file__, __file__}
    expected = _program_view(paths["cprofile"], files)
    got = _program_view(paths["pyprof"], files)
    assert _key(workloads.fib) in expected
    _assert_same(got, expected)


@pytest.mark.parametrize("threads", [False, True], ids=["no-threads", "threads"])
def test_parity_cli(script, tmp_path, threads):
    if threads and sys.version_info < (3, 12):
        pytest.skip("cProfile sees other threads only on 3.12+ (sys.monitoring is global)")
    args = [] if threads else ["--no-threads"]
    paths = {}
    for tool in ("cProfile", "pyprof"):
        paths[tool] = str(tmp_path / f"{tool}.prof")
        # the same absolute script path for both: it is the filename in the keys
        r = _python("-m", tool, "-o", paths[tool], script, *args)
        assert r.returncode == 0, r.stderr
    expected = _program_view(paths["cProfile"], {script})
    got = _program_view(paths["pyprof"], {script})
    # the runner's own call of the program: cProfile's exec() from runctx; under
    # pyprof the <module> is the root (docs/cli.md: exec is also what the
    # program's imports call, which would leave it no root)
    module = _script_keys(script)["<module>"]
    assert expected[module][2] == {("~", 0, "<built-in method builtins.exec>"): (1, 1)}
    assert got[module][2] == {}
    expected[module] = (*expected[module][:2], {})
    fib = _script_keys(script)["fib"]
    assert expected[fib][:2] == ((4, 3368) if threads else (1, 1973))
    _assert_same(got, expected)
