"""NumPy array buffers in memory mode (docs/memory.md#numpy).

NumPy (>= 1.22) allocates array data through its default data handler, not
through Python's allocators. pyprof patches that handler (in C, until a detach
gives it back: docs/attach.md) as soon as NumPy's core module is loaded: now if
it is, else when the program imports it, through an import hook that removes
itself."""
import sys

from .. import _cprof

_MODULES = ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath")
_state = {"status": "numpy not loaded", "finder": None}


def status() -> str:
    """'patched', 'numpy not loaded', or why NumPy's buffers are not seen."""
    return _state["status"]


def _patch(module) -> None:
    api = getattr(module, "_ARRAY_API", None)
    if api is None:
        _state["status"] = "unsupported numpy (no C API table)"
        return
    try:
        done = _cprof._numpy_patch(api)
    except Exception as e:              # a NumPy this code does not know: count without it
        _state["status"] = f"not patched ({e})"
        return
    _state["status"] = "patched" if done else "unsupported numpy (before 1.22: no NEP 49 handler)"


def install() -> None:
    if _state["status"] == "patched":
        return
    for name in _MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _patch(module)
            return
    if _state["finder"] is None:
        _state["finder"] = _Finder()
        sys.meta_path.insert(0, _state["finder"])


def release() -> None:
    """A detach: no import hook left behind (the C side gives the handler back)."""
    _remove_finder()
    if _state["status"] == "patched":
        _state["status"] = "numpy not loaded"


def _remove_finder() -> None:
    finder = _state["finder"]
    _state["finder"] = None
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


class _Finder:
    """Finds nothing itself: wraps the loader of NumPy's core module."""

    def find_spec(self, name, path=None, target=None):
        if name not in _MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


class _Loader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _remove_finder()
        _patch(module)
