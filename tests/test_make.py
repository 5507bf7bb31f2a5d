"""`make demo` sets up what the demo needs and no more (README's first command):
run for real in a copy of the tree, with its own venv directory, on a machine
where dpkg reports nothing installed (a fake dpkg, apt-get and id on PATH
record what would be installed as root). Ground truth: the packages apt-get
was asked for, the distributions in the demo's venv, the demo's output."""
import os
import shutil
import stat
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREE = ("Makefile", "pyproject.toml", "setup.py", "README.md", "src", "python", "examples")

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or not os.path.exists(os.path.join(ROOT, "Makefile")),
    reason="needs make and the source tree")


def fake(bindir, name, body):
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def make(tmp_path, target, *args, timeout=900):
    """`make TARGET ARGS` in a copy of the tree, as root on a Debian machine
    with nothing installed: (the run, the packages apt-get was asked for)."""
    tree = tmp_path / "tree"
    if not tree.exists():
        tree.mkdir()
        for name in TREE:
            src = os.path.join(ROOT, name)
            if os.path.isdir(src):
                shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(src, tree / name)
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    log.write_text("")
    fake(bindir, "dpkg", "exit 1\n")                            # nothing installed
    fake(bindir, "apt-get", f'echo "$*" >> {log}\n')
    fake(bindir, "id", 'if [ "$1" = -u ]; then echo 0; else exec /usr/bin/id "$@"; fi\n')
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    env.pop("MAKEFLAGS", None)
    r = subprocess.run(["make", target, *args], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    installs = [w for w in (line.split() for line in log.read_text().splitlines())
                if "install" in w]
    return r, {w for line in installs for w in line if not w.startswith("-") and w != "install"}


def test_deps_installs_the_tests_tools(tmp_path):
    """`make test` (through `make deps`) still installs every tool the tests use."""
    _, asked = make(tmp_path, "deps", timeout=60)
    assert asked == {"zlib1g-dev", "libunwind-dev", "libdw-dev", "graphviz", "valgrind",
                     "golang-go", "chromium", "openmpi-bin", "libopenmpi-dev", "tmux",
                     "openjdk-17-jre-headless"}, asked


def test_demo_installs_only_what_it_needs(tmp_path):
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    r, asked = make(tmp_path, "demo", f"PYTHONS={base}", f"VENV_DIR={tmp_path / 'venv'}")
    tree = tmp_path / "tree"
    assert asked == {"zlib1g-dev"}, asked                       # the build's, no test tool
    minor = "%d.%d" % sys.version_info[:2]
    venv = tmp_path / "venv" / f"demo-{minor}"
    site = subprocess.run([venv / "bin" / "python", "-c",
                           "import sys; print([p for p in sys.path if p.endswith('site-packages')][0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    have = {d.metadata["Name"].lower() for d in metadata.distributions(path=[site])}
    assert "pyprof" in have
    assert not have & {"pytest", "flask", "django", "fastapi", "ipython", "numpy"}, have
    assert have <= {"pyprof", "pip", "setuptools", "wheel", "packaging"}, have
    out = r.stdout
    for step in ("python -m pyprof -s cumulative examples/demo.py", "pstats: top 15 by tottime",
                 "pyprof view build/demo/demo.cprof --view code", "files: "):
        assert step in out, out[-3000:]
    assert "cumulative" in out and "ncalls" in out         # the table was printed
    for name in ("demo.cprof", "demo.prof", "report.html", "sampled.flame.html", "memory.svg"):
        assert (tree / "build" / "demo" / name).stat().st_size > 0
