"""Helpers for tests that need C code of their own: build a CPython extension
(or a plain shared library) from C source with the system compiler, against the
running interpreter's headers, in a temporary directory. Skips the calling
test with the reason when no C compiler is installed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig

import pytest

from support import TIMEOUT, run_python


def compiler():
    for cc in (os.environ.get("CC"), "gcc", "cc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def build(tmp_path, name, source, *, extension=True, flags=(), cxx=False):
    """Compile `source` into tmp_path: an extension module `name` (importable
    with tmp_path on sys.path) or, with extension=False, lib<name>.so. Returns
    the path of the shared object."""
    cc = shutil.which("g++") if cxx else compiler()
    if cc is None:
        pytest.skip("no C compiler (gcc, cc or clang) on PATH to build the test's C code"
                    if not cxx else "no g++ on PATH to build the test's C++ code")
    src = tmp_path / (name + (".cpp" if cxx else ".c"))
    src.write_text(source)
    if extension:
        out = tmp_path / (name + sysconfig.get_config_var("EXT_SUFFIX"))
        inc = ["-I" + sysconfig.get_paths()["include"]]
    else:
        out = tmp_path / f"lib{name}.so"
        inc = []
    cmd = [cc, "-shared", "-fPIC", "-O0", *inc, *flags, str(src), "-o", str(out), "-lpthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr}"
    return out


def run(script, *args, env=None, cwd=None, timeout=TIMEOUT):
    """Run a Python script (text) in a fresh interpreter; its CompletedProcess."""
    e = dict(os.environ)
    e.update(env or {})
    return run_python(["-c", script, *args], cwd, env=e, timeout=timeout)
