"""Native frames named from debug information (libdw): function, source file
and line of a C extension built here with -g, an inlined function as a frame of
its own at its call site, a demangled C++ name; shown in sampled stacks, the
collapsed stacks and pprof (read back by `go tool pprof` when installed)."""
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from nativeext import build, run

import pyprof

if "libdw" not in pyprof._cprof.FEATURES or "libunwind" not in pyprof._cprof.FEATURES:
    pytest.skip("this build of pyprof lacks libdw or libunwind (libdw-dev, libunwind-dev)",
                allow_module_level=True)

C_SRC = r"""#define PY_SSIZE_T_CLEAN
#include <Python.h>

static volatile double acc;

static inline __attribute__((always_inline)) void inner_work(long n)
{
    for (long i = 0; i < n; i++)
        acc = acc * 0.5 + (double)i;    /* INNER_LINE */
}

__attribute__((noinline)) void outer_spin(long n)
{
    inner_work(n);                      /* CALL_LINE */
}

static PyObject *spin(PyObject *m, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    outer_spin(n);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"spin", spin, METH_O, NULL}, {NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "dwext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_dwext(void) { return PyModule_Create(&def); }
"""

CXX_SRC = r"""#include <Python.h>
namespace geo {
struct Grid {
    __attribute__((noinline)) static double relax(long n);
};
double Grid::relax(long n)
{
    volatile double a = 0;
    for (long i = 0; i < n; i++)
        a = a * 0.5 + (double)i;
    return a;
}
}
static PyObject *spin(PyObject *, PyObject *arg)
{
    geo::Grid::relax(PyLong_AsLong(arg));
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"spin", spin, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "cxxext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_cxxext(void) { return PyModule_Create(&def); }
"""


def line_of(src, marker):
    return next(i for i, text in enumerate(src.splitlines(), 1) if marker in text)


def sampled(tmp_path, module, n):
    """Profile module.spin(n) with --sample --native; the capture's path."""
    out = tmp_path / f"{module}.cprof"
    prog = tmp_path / f"run_{module}.py"
    prog.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport {module}\n"
                    f"{module}.spin({n})\n")
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", "--native", "--rate", "997",
                        "-o", str(out), str(prog)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def frames_named(session, name):
    from pyprof.analysis.stacks import named_stacks
    hits = []
    for _, _, frames, count, _ in named_stacks(session, lines=True, threads=False):
        for i, f in enumerate(frames):
            if f[0].rpartition(":")[0] == name:
                hits.append((frames, i, count))
    return hits


@pytest.fixture(scope="module")
def dwext(tmp_path_factory):
    d = tmp_path_factory.mktemp("dwext")
    so = build(d, "dwext", C_SRC, flags=("-g", "-O2"))
    return d, so


def test_function_file_and_line_of_a_known_address(dwext):
    d, so = dwext
    r = run(f"import ctypes, json, sys\nsys.path.insert(0, {str(d)!r})\nimport dwext\n"
            "from pyprof import _cprof\n"
            f"lib = ctypes.CDLL({str(so)!r})\n"
            "addr = ctypes.cast(lib.outer_spin, ctypes.c_void_p).value\n"
            "print(json.dumps(_cprof.native_frames([addr])[addr]))\n")
    assert r.returncode == 0, r.stderr
    frames = json.loads(r.stdout)
    # at -O2 the first instruction already belongs to the inlined body: the
    # function holding the address is the last frame, the inlined one first
    name, file, line = frames[-1]
    assert name == "outer_spin"
    assert os.path.basename(file) == "dwext.c"
    assert line_of(C_SRC, "void outer_spin") <= line <= line_of(C_SRC, "CALL_LINE")
    if len(frames) > 1:
        assert frames[0][0] == "inner_work" and line == line_of(C_SRC, "CALL_LINE")


def test_inlined_function_is_a_frame_of_its_own_at_its_call_site(dwext, tmp_path):
    d, _ = dwext
    s = pyprof.load(sampled(d, "dwext", 150_000_000))
    inner = line_of(C_SRC, "INNER_LINE")
    hits = frames_named(s, "inner_work")
    assert hits, "no sample named inner_work"
    total = sum(c for _, _, c in hits)
    at_body = 0
    for frames, i, count in hits:
        label, file, line = frames[i]
        assert os.path.basename(file) == "dwext.c"
        # the caller of the inlined frame is outer_spin, at the call's line
        assert frames[i - 1][0] == f"outer_spin:{line_of(C_SRC, 'CALL_LINE')}", frames[i - 1]
        if line_of(C_SRC, "inner_work(long n)") <= line <= inner:
            at_body += count
    assert at_body >= 0.9 * total
    # and below outer_spin, the Python line that called spin()
    frames = hits[0][0]
    assert any(f[0].startswith("<module>:4") for f in frames[:hits[0][1]]), frames


def test_pprof_keeps_native_file_and_line(dwext, tmp_path):
    d, _ = dwext
    s = pyprof.load(sampled(d, "dwext", 80_000_000))
    from pyprof.export import export
    out = tmp_path / "p.pb.gz"
    export(s, "pprof", out)
    raw = gzip.decompress(out.read_bytes())
    assert b"inner_work" in raw and b"dwext.c" in raw
    go = shutil.which("go")
    if go is None:
        return
    r = subprocess.run([go, "tool", "pprof", "-lines", "-top", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert re.search(r"inner_work\s+\S*dwext\.c:\d+", r.stdout), r.stdout[:2000]


def test_cxx_names_are_demangled(tmp_path):
    build(tmp_path, "cxxext", CXX_SRC, flags=("-g", "-O1"), cxx=True)
    s = pyprof.load(sampled(tmp_path, "cxxext", 120_000_000))
    hits = frames_named(s, "geo::Grid::relax(long)")
    assert hits, sorted({f[0] for _, _, fr, _, _ in []} or s.meta.get("native_symbols").values())
    assert os.path.basename(hits[0][0][hits[0][1]][1]) == "cxxext.cpp"


def test_demangle_rust_legacy_and_itanium():
    from pyprof.runtime.native import demangle
    assert demangle("_ZN3geo4Grid5relaxEl") == "geo::Grid::relax(long)"
    assert demangle("_ZN4core3fmt5write17h0123456789abcdefE") == "core::fmt::write"
    assert demangle("_ZN5alloc3vec12Vec$LT$T$GT$4push17h0123456789abcdefE") == \
        "alloc::vec::Vec<T>::push"
    assert demangle("plain_c") == "plain_c"
    assert demangle("_RNvCs1234_7mycrate3foo") == "_RNvCs1234_7mycrate3foo"    # v0: as is


def test_libdw_is_opened_at_the_first_naming_only():
    """libdw (and libelf, libbz2 behind it) is not loaded by `import pyprof._cprof`:
    it would cost every start ~1 ms; the first naming opens it."""
    code = ("import ctypes, pyprof._cprof as c\n"
            "def maps(): return open('/proc/self/maps').read()\n"
            "before = 'libdw' in maps()\n"
            "addr = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value\n"
            "frames = c.native_frames([addr])\n"
            "print(before, 'libdw' in maps(), bool(frames.get(addr)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True", "True"], r.stdout


NAMING_PROG = r"""
import collections, json, sqlite3, sys, zlib
import pyprof
from pyprof.runtime import native

def work():
    for i in range(2000):
        zlib.compress(bytes(range(256)) * 20)
        json.dumps({"a": [i, 2.5, "x"] * 40})
    c = sqlite3.connect(":memory:")
    c.execute("create table t(x)")
    c.executemany("insert into t values (?)", [(i,) for i in range(50000)])
    c.execute("select sum(x) from t").fetchall()

prof = pyprof.Profile(mode="sample", wall=True, native=True, rate=2000)
prof.enable(); work(); prof.disable()

asked = []
real = native._cprof
class Counting:                     # the C module, counting what libdw is asked
    def __getattr__(self, name):
        return getattr(real, name)
    def native_frames(self, ips):
        asked.extend(ips)
        return real.native_frames(ips)
native._cprof = Counting()
session = prof.session()
prof.dump(sys.argv[1])
ips = {ip for st in session.stacks.values() for ip in st.native}
print(json.dumps({"asked": len(asked), "distinct": len(set(asked)), "ips": len(ips),
                  "mods": [[ip, m] for ip, m in zip(sorted(set(asked)),
                                                    real.native_modules(sorted(set(asked))))],
                  "frames": {str(k): v for k, v in real.native_frames(sorted(set(asked))).items()}}))
"""


def test_a_capture_is_named_once_per_address(tmp_path):
    """session() and then writing the capture name each address once: libdw is
    not asked again for what it has named (it cost --native runs ~0.2 s)."""
    r = run(NAMING_PROG, str(tmp_path / "x.cprof"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["ips"] > 50
    assert got["asked"] == got["distinct"] >= got["ips"] * 0.9
    assert pyprof.load(tmp_path / "x.cprof").meta["native_symbols"]


@pytest.mark.skipif(shutil.which("addr2line") is None,
                    reason="binutils' addr2line (the reference) is not installed")
def test_libpython_addresses_are_named_as_addr2line_names_them(tmp_path):
    """Every sampled address in libpython: the same chain of inlined functions,
    files and lines as binutils' addr2line -f -i (an independent DWARF reader)."""
    r = run(NAMING_PROG, str(tmp_path / "x.cprof"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    by_object = {}
    for ip, mod in got["mods"]:
        if mod and "libpython" in os.path.basename(mod[0]):
            by_object.setdefault(tuple(mod), []).append(ip)
    if not by_object:
        pytest.skip("this interpreter is linked statically: no libpython to read")
    compared = 0
    for (path, base), ips in by_object.items():
        out = subprocess.run(["addr2line", "-a", "-f", "-i", "-e", path]
                             + [hex(ip - base) for ip in ips],
                             capture_output=True, text=True, timeout=300).stdout.splitlines()
        want, cur = {}, None
        for text in out:
            if re.fullmatch(r"0x[0-9a-f]+", text):
                cur = int(text, 16) + base
                want[cur] = []
            else:
                want[cur].append(text)
        for ip in ips:
            pairs = list(zip(want[ip][0::2], want[ip][1::2]))
            if pairs == [("??", "??:0")]:
                assert str(ip) not in got["frames"]
                continue
            expected = [(fn, os.path.basename(where.split(" (")[0])) for fn, where in pairs]
            named = [(fn, f"{os.path.basename(file)}:{line}")
                     for fn, file, line in got["frames"][str(ip)]]
            assert named == expected, hex(ip - base)
            compared += 1
    assert compared > 50


FORK_PROG = r"""
import json, os, sys, zlib
import pyprof

def work(n):
    for i in range(n):
        zlib.compress(bytes(range(256)) * 30)
        json.dumps([i, "x", 2.5] * 30)

prof = pyprof.Profile(mode="sample", wall=True, native=True, rate=2000)
prof.enable()
work(300)                               # the naming thread is busy with these
pids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:                        # the child: its own profile, named
        prof.disable()                  # (the parent's, inherited: not sampling here)
        child = pyprof.Profile(mode="sample", wall=True, native=True, rate=2000)
        child.enable(); work(300); child.disable()
        s = child.session()
        os._exit(0 if s.meta.get("native_symbols") else 3)
    pids.append(pid)
    work(100)
prof.disable()
codes = [os.waitpid(p, 0)[1] for p in pids]
print(json.dumps({"codes": codes, "named": len(prof.session().meta["native_symbols"])}))
"""


def test_forked_children_name_their_own_frames():
    """A fork while the naming thread works (it may hold its locks): each child
    names the frames of its own profile, and none hangs."""
    r = run(FORK_PROG, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["codes"] == [0, 0, 0, 0]
    assert got["named"] > 20


def test_no_thread_outlives_native_sampling():
    """Addresses are named on a thread of pyprof's while the program runs; it
    ends with the run: a program that forks afterwards is single-threaded (3.12
    warns about forking a multi-threaded process)."""
    code = ("import os, warnings, zlib, pyprof\n"
            "warnings.simplefilter('error')\n"
            "tasks = lambda: len(os.listdir('/proc/self/task'))\n"
            "before = tasks()\n"
            "prof = pyprof.Profile(mode='sample', wall=True, native=True, rate=2000)\n"
            "prof.enable()\n"
            "for i in range(3000): zlib.compress(bytes(range(256)) * 30)\n"
            "during = tasks()\n"
            "prof.disable()\n"
            "after = tasks()\n"
            "pid = os.fork()\n"
            "if pid == 0: os._exit(0)\n"
            "print(before, during > before, after, os.waitpid(pid, 0)[1])\n")
    r = run(code)
    assert r.returncode == 0, r.stderr
    before, grew, after, child = r.stdout.split()
    assert grew == "True" and after == before and child == "0"


def test_an_unloaded_library_is_not_named_from_memory(tmp_path):
    """Names are kept for the process, but not past an unload: a library
    unloaded and another loaded at the same address names its own function."""
    first = build(tmp_path, "first", "int first_function(int x) { return x + 1; }\n",
                  extension=False, flags=("-g",))
    second = build(tmp_path, "second", "int second_function(int x) { return x * 3; }\n",
                   extension=False, flags=("-g",))
    code = ("import ctypes, _ctypes, json\n"
            "from pyprof import _cprof\n"
            "def named(path, fn):\n"
            "    lib = ctypes.CDLL(path)\n"
            "    addr = ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value\n"
            "    name = _cprof.native_frames([addr])[addr][-1][0]\n"
            "    _ctypes.dlclose(lib._handle)\n"
            "    return addr, name\n"
            f"a = named({str(first)!r}, 'first_function')\n"
            f"b = named({str(second)!r}, 'second_function')\n"
            "print(json.dumps([a, b]))\n")
    r = run(code)
    assert r.returncode == 0, r.stderr
    (addr_a, name_a), (addr_b, name_b) = json.loads(r.stdout)
    assert name_a == "first_function" and name_b == "second_function"
    if addr_a != addr_b:
        pytest.skip("the loader put the second library elsewhere: nothing stale to name")


LINKED_SRC = r"""
static volatile double acc;
__attribute__((noinline)) void linked_spin(long n)
{
    for (long i = 0; i < n; i++)
        acc = acc * 0.5 + (double)i;    /* SPIN_LINE */
}
"""


def _binutil(name):
    tool = shutil.which(name)
    if tool is None:
        pytest.skip(f"no {name} on PATH (binutils) to split debug information")
    return tool


def _split_debug(so, debug, link=True):
    """`so` stripped of its debug information, kept in `debug` (and named by
    the .gnu_debuglink section when `link`)."""
    objcopy = _binutil("objcopy")
    subprocess.run([objcopy, "--only-keep-debug", str(so), str(debug)], check=True)
    args = [f"--add-gnu-debuglink={debug}"] if link else []
    subprocess.run([objcopy, "--strip-debug", *args, str(so)], check=True, cwd=debug.parent)


def _build_id(path):
    out = subprocess.run([_binutil("readelf"), "-n", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", out).group(1)


def _named_in_child(so, env=None):
    code = ("import ctypes, json\nfrom pyprof import _cprof\n"
            f"lib = ctypes.CDLL({str(so)!r})\n"
            "addr = ctypes.cast(lib.linked_spin, ctypes.c_void_p).value\n"
            "print(json.dumps(_cprof.native_frames([addr])[addr]))\n")
    r = run(code, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("where", ["beside", ".debug"])
def test_debug_information_found_by_debuglink(tmp_path, where):
    """A library whose debug information was split off (objcopy, as
    distributions do) is named with file and line from the file its
    .gnu_debuglink names, beside it or in its .debug directory; a file of that
    name from another build (another build id) is not used."""
    so = build(tmp_path, "linked", LINKED_SRC, extension=False, flags=("-g", "-Wl,--build-id"))
    home = tmp_path / ".debug" if where == ".debug" else tmp_path
    home.mkdir(exist_ok=True)
    _split_debug(so, tmp_path / "liblinked.so.debug")
    if where == ".debug":
        (tmp_path / "liblinked.so.debug").rename(home / "liblinked.so.debug")
    name, file, line = _named_in_child(so)[-1]
    assert name == "linked_spin"
    assert os.path.basename(file) == "linked.c"
    assert line_of(LINKED_SRC, "linked_spin") <= line <= line_of(LINKED_SRC, "SPIN_LINE") + 1
    # another build's debug file under the linked name: names without file or line
    other = tmp_path / "other"
    other.mkdir()
    so2 = build(other, "linked", "/* another build */\n" + LINKED_SRC, extension=False,
                flags=("-g", "-Wl,--build-id"))
    assert _build_id(so2) != _build_id(so)
    _split_debug(so2, other / "liblinked.so.debug", link=False)
    (other / "liblinked.so.debug").replace(home / "liblinked.so.debug")
    name, file, line = _named_in_child(so)[-1]
    assert name == "linked_spin" and not file and not line


class _DebuginfodServer:
    """A debuginfod server on 127.0.0.1 that has nothing: it notes each request."""

    def __init__(self):
        import http.server
        import threading
        self.paths = []
        paths = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                paths.append(self.path)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_debuginfod_servers_are_asked_only_when_allowed(tmp_path):
    """DEBUGINFOD_URLS (set by default on Fedora and Ubuntu) makes libdw ask
    the network for the debug information a library lacks: pyprof asks
    nothing unless PYPROF_DEBUGINFOD=1, and names from the symbol table."""
    so = build(tmp_path, "linked", LINKED_SRC, extension=False, flags=("-g", "-Wl,--build-id"))
    _split_debug(so, tmp_path / "kept.debug", link=False)
    (tmp_path / "kept.debug").unlink()                   # nowhere on this host
    build_id = _build_id(so)
    server = _DebuginfodServer()
    try:
        env = {"DEBUGINFOD_URLS": server.url, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache"),
               "PYPROF_DEBUGINFOD": ""}
        name, file, _ = _named_in_child(so, env)[-1]
        assert name == "linked_spin" and not file
        assert server.paths == []
        _named_in_child(so, {**env, "PYPROF_DEBUGINFOD": "1"})
        assert f"/buildid/{build_id}/debuginfo" in server.paths, server.paths
    finally:
        server.close()


WRITTEN_PROG = r"""
import json, sys, zlib
import pyprof
mode = sys.argv[2]
kw = ({"mode": "sample", "native": True, "rate": 997} if mode == "sample" else
      {"memory_sample": 1, "native": True})        # every block picked, its native stack
p = pyprof.Profile(**kw)
p.enable()
data = bytes(range(256)) * 4096
blobs = [zlib.compress(data, 9) for _ in range(40)]
p.disable()
s = p.session()
p.dump(sys.argv[1])
ips = {ip for st in s.stacks.values() for ip in st.native}
ips |= {ip for n, _ in s.memory_native.values() for ip in n}
print(json.dumps({"names": s.meta.get("native_symbols", {}), "ips": sorted(ips)}))
"""


@pytest.mark.parametrize("mode", ["sample", "memory"])
def test_the_written_capture_names_what_the_session_names(tmp_path, mode):
    """Writing a --native capture reads its addresses from the C core's record
    stream, without building a Session: the file names every address of its
    sampled stacks and allocation stacks, as session() names them."""
    out = tmp_path / "x.cprof"
    r = run(WRITTEN_PROG, str(out), mode)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["ips"] and set(got["names"]) == {str(ip) for ip in got["ips"]}
    assert any(name[0] in ("deflate", "zlib_compress_impl", "compress")
               for name in got["names"].values()), sorted(n[0] for n in got["names"].values())
    written = pyprof.load(out)
    assert written.meta["native_symbols"] == got["names"]
