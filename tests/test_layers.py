"""The layers (docs/architecture.md). Python: imports point down only, no
module imports another's private names, no import cycles, read from the source
with `ast` (imports at module level and inside functions alike). C: includes
point down, version knowledge stays in frames and the tracer's back-ends."""
import ast
import os
import re
import shutil
import subprocess
import sys

import pytest

import pyprof

# the source tree when the tests run from the repository, else the installed package
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "pyprof")
ROOT = os.path.normpath(_SOURCE if os.path.isdir(_SOURCE) else os.path.dirname(pyprof.__file__))

# Bottom to top. A module may import its own layer's modules and lower ones.
BASE = {"pyprof.errors", "pyprof._version", "pyprof._cprof"}
# options.py and config.py are turning into one sub-package (pyprof/options/):
# read by the runtime, the live tools, the integrations and the command line
SETTINGS = {"pyprof.options", "pyprof.config"}
LAYERS = [("base", lambda m: m in BASE or m.startswith("pyprof.base")),
          ("model", lambda m: m.startswith("pyprof.model")),
          ("analysis", lambda m: m.startswith("pyprof.analysis")),
          ("render", lambda m: m.startswith("pyprof.render")),
          ("export", lambda m: m.startswith("pyprof.export")),
          ("settings", lambda m: m in SETTINGS or m.startswith("pyprof.options")),
          ("runtime", lambda m: m.startswith("pyprof.runtime")),
          ("live", lambda m: m.startswith("pyprof.live")),
          ("cli", lambda m: m.startswith("pyprof.cli")),
          ("integrations", lambda m: m.startswith("pyprof.integrations")),
          ("entry", lambda m: True)]    # the package root: the API, the public paths

# The package root is its public face (issue 30): these and the public paths.
# options.py and config.py are on their way out (pyprof/options/).
ROOT_MAX = 14
ROOT_LEAVING = {"options", "config"}


def layer(module):
    for i, (_, test) in enumerate(LAYERS):
        if test(module):
            return i
    raise AssertionError(module)


def modules():
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                name = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
                out[name] = path
    return out


MODULES = modules()


def imports(name, path):
    """(imported module, names taken from it, line) for each pyprof import."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("pyprof"):
                    yield a.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("pyprof"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in MODULES or sub == "pyprof._cprof":    # `from . import views`
                    yield sub, [], node.lineno
                else:
                    yield target, [a.name], node.lineno


def edges():
    out = {}
    for name, path in MODULES.items():
        for target, names, line in imports(name, path):
            out.setdefault(name, []).append((target, names, line))
    return out


EDGES = edges()


def test_the_layers_exist():
    for m in ("pyprof.model.session", "pyprof.model.codec", "pyprof.model.tables",
              "pyprof.model.names", "pyprof.model.sources", "pyprof.analysis.views",
              "pyprof.analysis.merge", "pyprof.render.units", "pyprof.render.printout",
              "pyprof.base.files", "pyprof.runtime.profiler", "pyprof.live.channel",
              "pyprof.cli", "pyprof.cli.run", "pyprof.integrations.pytest_plugin"):
        assert m in MODULES


def test_imports_point_down():
    bad = []
    for name, targets in EDGES.items():
        for target, _, line in targets:
            if target.startswith("pyprof._boot") or name.startswith("pyprof._boot"):
                continue
            if layer(target) > layer(name):
                bad.append(f"{name}:{line} imports {target} "
                           f"({LAYERS[layer(name)][0]} -> {LAYERS[layer(target)][0]})")
    assert not bad, "\n".join(bad)


def test_no_private_names_across_modules():
    bad = []
    for name, targets in EDGES.items():
        for target, names, line in targets:
            if target == name:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}:{line} imports {n} from {target}")
            leaf = target.rpartition(".")[2]
            # importing a private module is fine only inside its own package
            if leaf.startswith("_") and not leaf.startswith("__") and \
                    target not in ("pyprof._cprof", "pyprof._version") and \
                    target.rpartition(".")[0] != name.rpartition(".")[0]:
                bad.append(f"{name}:{line} imports the private module {target}")
    assert not bad, "\n".join(bad)


def test_no_private_attributes_of_other_modules():
    """`from . import cli` then `cli._run_parser()`: reaching in all the same."""
    bad = []
    for name, path in MODULES.items():
        bound = {}
        for target, names, _ in imports(name, path):
            if not names and target in MODULES:
                bound[target.rpartition(".")[2]] = target
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in bound and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and bound[node.value.id] != name:
                bad.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not bad, "\n".join(bad)



def find_cycles(graph):
    """Each loop of a directed graph ({node: its targets}) found by a depth-first
    walk, as the list of its nodes with the first one repeated at the end."""
    state, cycles = {}, []

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for t in sorted(graph.get(n, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    return cycles


def test_no_cycles():
    graph = {n: {t for t, _, _ in ts if t in MODULES and t != n} for n, ts in EDGES.items()}
    cycles = find_cycles(graph)
    assert not cycles, "\n".join(" -> ".join(loop) for loop in cycles)




def root_modules():
    """The modules in the package's directory itself (not its sub-packages)."""
    return {n.rpartition(".")[2] for n, path in MODULES.items()
            if os.path.dirname(path) == ROOT and not path.endswith("__init__.py")}


# The root modules that are the package itself rather than a public path to
# a module elsewhere.
ROOT_OWN = {"__main__", "errors", "_version"}


def test_the_root_is_the_public_face():
    root = root_modules() - ROOT_LEAVING
    assert len(root) <= ROOT_MAX, sorted(root)
    for sub in ("base", "model", "analysis", "render", "export", "runtime", "live", "cli",
                "integrations"):
        assert f"pyprof.{sub}" in MODULES, sub


def test_no_module_imports_a_public_path():
    """The root's shims are for users; pyprof imports the real modules."""
    shims = {f"pyprof.{m}" for m in root_modules() - ROOT_OWN - ROOT_LEAVING}
    bad = [f"{name}:{line} imports {target}"
           for name, targets in EDGES.items() for target, _, line in targets
           if target in shims and target != name]
    assert not bad, "\n".join(bad)


# Profile and the C profiler it is built on: their private members are used
# only where they are defined.
PROFILE_MODULES = {"pyprof.runtime.profiler", "pyprof.runtime.core"}


def profile_private_members():
    """The private attributes and methods of Profile (runtime/profiler.py) and
    of the C core's Profiler (runtime/core.py gives them public names)."""
    path = MODULES["pyprof.runtime.profiler"]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Profile")
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "self":
            names.add(node.attr)
    from pyprof import _cprof
    names.update(dir(_cprof.Profiler))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_profile_private_members_stay_in_profiler():
    """Other modules use Profile's named interface (thread_paused,
    set_sample_root(), refresh_meta()...: runtime/core.py), never its private
    members."""
    private = profile_private_members()
    assert private, "Profile has no private members? (the check reads runtime/profiler.py)"
    bad = []
    for name, path in MODULES.items():
        if name in PROFILE_MODULES:
            continue
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                bad.append(f"{name}:{node.lineno} uses .{node.attr}")
            # getattr(prof, "_x", None) reaches in all the same
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in private:
                bad.append(f"{name}:{node.lineno} uses {node.func.id}(..., {node.args[1].value!r})")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ the C core
# Bottom to top (docs/architecture.md). A file may include its own unit's
# headers and those of lower levels; engines (level 3) never include each other.
C_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "_cprof")
C_LEVELS = [
    {"clock": 0, "table": 0, "stack": 0, "frames": 0, "unwind": 0, "symbols": 0,
     "termguard": 0, "asyncio_task": 0},
    {"threads": 1, "remote": 1, "remote_read": 1},
    {"registry": 2},
    {"tracer": 3, "tracer_events": 3, "tracer_hot": 3, "tracer_monitoring": 3, "tracer_legacy": 3, "tracer_coro": 3,
     "sampler": 3, "sampler_int": 3, "sampler_ring": 3, "sampler_samples": 3, "sampler_drain": 3, "sampler_wall": 3, "sampler_signals": 3, "sampler_async": 3, "sampler_cpuclock": 3,
     "memory": 3, "memory_control": 3, "memory_hooks": 3, "memory_numpy": 3, "memory_curve": 3,
     "memory_native": 3, "memory_blocks": 3, "memory_runs": 3},
    {"capture": 4, "capture_int": 4, "capture_async": 4, "gcwatch": 4},
    {"profiler": 5},
    {"module": 6, "remote_py": 6},
]
C_UNIT = {"tracer_hot": "tracer", "tracer_events": "tracer", "memory_control": "memory", "tracer_monitoring": "tracer", "tracer_legacy": "tracer",
          "tracer_coro": "tracer", "capture_int": "capture", "capture_async": "capture",
          "memory_hooks": "memory", "memory_numpy": "memory", "memory_curve": "memory",
          "memory_native": "memory", "memory_blocks": "memory", "memory_runs": "memory",
          "sampler_int": "sampler", "sampler_ring": "sampler", "sampler_samples": "sampler",
          "sampler_drain": "sampler", "sampler_wall": "sampler", "sampler_signals": "sampler",
          "sampler_async": "sampler", "sampler_cpuclock": "sampler", "remote_py": "module",
          "remote_read": "remote"}
# An engine's private headers: included only inside its folder (src/_cprof/<unit>/).
C_PRIVATE = {"tracer_hot", "sampler_int", "sampler_ring", "memory_hooks", "capture_int"}
# CPython's per-version knowledge: only here (how-it-works.md, "Hooks per version").
C_VERSION_FILES = {"frames.h", "frames.c", "tracer_monitoring.c", "tracer_legacy.c"}


def c_files():
    """Paths under src/_cprof: the engines' folders and the shared parts on top."""
    if not os.path.isdir(C_SRC):
        pytest.skip("the C sources are not beside the tests (an installed package)")
    return sorted(os.path.relpath(os.path.join(d, f), C_SRC)
                  for d, _, files in os.walk(C_SRC) for f in files if f.endswith((".c", ".h")))


def c_stem(path):
    return os.path.basename(path).rsplit(".", 1)[0]


def c_level(stem):
    for level in C_LEVELS:
        if stem in level:
            return level[stem]
    raise AssertionError(f"src/_cprof/{stem}: not in any layer of tests/test_layers.py "
                         f"(add it to C_LEVELS and docs/architecture.md)")


def test_c_includes_point_down():
    bad = []
    for f in c_files():
        stem = c_stem(f)
        unit = C_UNIT.get(stem, stem)
        text = open(os.path.join(C_SRC, f), encoding="utf-8").read()
        for inc in re.findall(r'^#include "([^"]+)\.h"', text, re.M):
            if inc.startswith("internal/"):
                continue
            inc = c_stem(inc)
            if inc in C_PRIVATE and os.path.dirname(f) != C_UNIT[inc]:
                bad.append(f"{f} includes {inc}.h, private to {C_UNIT[inc]}/")
            if C_UNIT.get(inc, inc) == unit:
                continue
            if c_level(inc) >= c_level(stem):
                bad.append(f"{f} includes {inc}.h (level {c_level(inc)} >= {c_level(stem)})")
    assert not bad, "\n".join(bad)


def test_c_version_knowledge_stays_in_frames_and_the_back_ends():
    bad = [f for f in c_files() if os.path.basename(f) not in C_VERSION_FILES and re.search(
        r"PY_VERSION_HEX|PP_USE_MONITORING|Py_BUILD_CORE|internal/pycore",
        open(os.path.join(C_SRC, f), encoding="utf-8").read())]
    assert not bad, bad


def test_c_files_stay_small():
    big = [(f, n) for f in c_files()
           if (n := sum(1 for _ in open(os.path.join(C_SRC, f), encoding="utf-8"))) > 1200]
    assert not big, big


def c_objects():
    """The build's object files for this interpreter, by path under src/_cprof."""
    # make test builds in cpXY-werror, make asan in cpXY-asan, a plain build in cpXY:
    # the newest of them is the one installed
    base = os.path.join(os.path.dirname(C_SRC), "..", "build", "setuptools")
    tag = "cp%d%d" % sys.version_info[:2]
    builds = []
    for name in (os.listdir(base) if os.path.isdir(base) else ()):
        if name != tag and not name.startswith(tag + "-"):
            continue
        out = {}
        for d, _, files in os.walk(os.path.join(base, name)):
            for f in files:
                path = os.path.join(d, f)
                parts = path.replace(os.sep, "/").split("/src/_cprof/")
                # an object whose source moved or went is left over from an older build
                if f.endswith(".o") and len(parts) == 2 and \
                        os.path.exists(os.path.join(C_SRC, parts[1][:-2] + ".c")):
                    out[parts[1][:-2] + ".c"] = path
        if out:
            builds.append((max(os.path.getmtime(p) for p in out.values()), out))
    return max(builds, key=lambda b: b[0])[1] if builds else {}


def c_call_graph():
    """{file: {file it calls: [functions]}}: file A calls a function defined in
    file B when A's object leaves the symbol undefined and B's defines it."""
    c_files()
    objects = c_objects()
    if not objects:
        pytest.skip("no object files of this Python's build under build/setuptools/cpXY* "
                    "(the tests run against an install built elsewhere: make test builds them)")
    if shutil.which("nm") is None:
        pytest.skip("no `nm` to read the object files with")
    defined, undefined = {}, {}
    for src, obj in objects.items():
        undefined[src] = set()
        for line in subprocess.run(["nm", obj], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] == "T":
                defined[fields[2]] = src
            elif len(fields) == 2 and fields[0] == "U":
                undefined[src].add(fields[1])
    graph = {}
    for src, names in undefined.items():
        graph[src] = {}
        for name in sorted(names):
            if defined.get(name, src) != src:
                graph[src].setdefault(defined[name], []).append(name)
    return graph


def test_c_files_call_one_way():
    """No group of C files calls each other in a loop: control flows from the
    profiler layer down, and a lower file reaches up only through a callback
    registered from above."""
    graph = c_call_graph()

    def edge(a, b):
        names = graph[a][b]
        return f"{a} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"

    cycles = [" -> ".join(edge(a, b) for a, b in zip(loop, loop[1:])) + f" -> {loop[-1]}"
              for loop in find_cycles(graph)]
    assert not cycles, "the C files call each other in a loop:\n" + "\n".join(cycles)
