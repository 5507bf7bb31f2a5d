"""Writing an output file whole or not at all."""
from __future__ import annotations

import os

from ..errors import PyprofError


def atomic_write(path, data) -> None:
    """Write `data` (str: UTF-8, or bytes) to `path` through a temporary file in
    the same directory and a rename, so a reader never sees half a file."""
    path = os.fspath(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = None
    try:
        import tempfile                 # here: `import pyprof` does not need it (~8 ms)
        fd, tmp = tempfile.mkstemp(prefix=".pyprof-", dir=os.path.dirname(os.path.abspath(path)))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # as open() would create it
        os.replace(tmp, path)
    except OSError as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise PyprofError(f"cannot write {path}: {e.strerror or e}") from None


def atomic_write_parts(path, parts) -> None:
    """As atomic_write, for a long text made of many str parts (written as they
    come, UTF-8, so it is never held whole in memory)."""
    path = os.fspath(path)
    tmp = None
    try:
        import tempfile
        fd, tmp = tempfile.mkstemp(prefix=".pyprof-", dir=os.path.dirname(os.path.abspath(path)))
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            for part in parts:
                f.write(part)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise PyprofError(f"cannot write {path}: {e.strerror or e}") from None
        raise


_PYPROF_DIRS: dict = {}


def _pyprof_dir(d) -> bool:
    """A pyprof package directory: named pyprof, holding pyprof's C core."""
    found = _PYPROF_DIRS.get(d)
    if found is None:
        try:
            names = os.listdir(d) if os.path.basename(d) == "pyprof" else ()
        except OSError:
            names = ()
        found = _PYPROF_DIRS[d] = any(n.startswith("_cprof.") and n.endswith(".so")
                                      for n in names)
    return found


def pyprof_file(path) -> bool:
    """A file of pyprof's own package (of any installation): its frames are
    left out of what a capture or a dump shows (docs/how-it-works.md)."""
    d = os.path.dirname(path)
    return _pyprof_dir(d) or _pyprof_dir(os.path.dirname(d))    # _boot/, analysis/...


def program_frames(frames, file_of) -> list:
    """The frames (root first) above pyprof's own innermost one: the stack of
    the program that pyprof runs or wraps (its runner, a middleware, the pytest
    plugin), as the C core trims sampled stacks."""
    for i in range(len(frames) - 1, -1, -1):
        if pyprof_file(file_of(frames[i])):
            return frames[i + 1:]
    return frames
