"""pyprof --children: profile this interpreter from its start (docs/children.md).

On PYTHONPATH only in the children of a program run under ``pyprof --children``.
Starts pyprof from PYPROF_CHILDREN, takes this directory off sys.path (the
program sees the path it would see without pyprof), then runs the program's
own sitecustomize if there is one.
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]


def _load_children():
    """pyprof.runtime.children, pyprof._cprof and the small modules children.py
    uses (_version, runtime._meta, runtime.forkmask, runtime.core) without importing the pyprof package
    (tens of milliseconds: its data model and exporters), which the child
    needs only if the program imports it. None without pyprof."""
    # importlib's frozen halves are loaded at start-up; the importlib package
    # (importlib.util, importlib.machinery) would cost ~1 ms more
    bootstrap = sys.modules.get("_frozen_importlib")
    external = sys.modules.get("_frozen_importlib_external")
    if bootstrap is not None and external is not None:
        PathFinder, module_from_spec = external.PathFinder, bootstrap.module_from_spec
    else:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec
    pkg = PathFinder.find_spec("pyprof")
    if pkg is None or not pkg.submodule_search_locations:
        return None
    where = {"pyprof": list(pkg.submodule_search_locations)}
    # runtime/__init__.py is a docstring: loading the sub-package costs nothing
    for full in ("pyprof._cprof", "pyprof._version", "pyprof.runtime", "pyprof.runtime._meta",
                 "pyprof.runtime.forkmask", "pyprof.runtime.core", "pyprof.runtime.children"):
        if full not in sys.modules:
            spec = PathFinder.find_spec(full, where[full.rpartition(".")[0]])
            if spec is None:
                return None
            module = module_from_spec(spec)
            sys.modules[full] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[full]
                raise
        module = sys.modules[full]
        if getattr(module, "__path__", None) is not None:
            where[full] = list(module.__path__)
        parent = sys.modules.get(full.rpartition(".")[0])
        if parent is not None:
            setattr(parent, full.rpartition(".")[2], module)
    return sys.modules["pyprof.runtime.children"]


def _full_profile(kwargs):
    """The modes a lean child profiler does not cover: the package's Profile."""
    from pyprof.runtime.profiler import Profile
    return Profile(_warn=False, **kwargs)


if os.environ.get("PYPROF_CHILDREN"):
    try:
        _children = _load_children()
    except ImportError:             # another interpreter, without pyprof: run unprofiled
        _children = None
    if _children is not None:
        _children.start_from_environment(_full_profile)

# The program's own sitecustomize, found further on the path. This module
# stays in sys.modules under the name if there is none (importlib expects it).
_me = sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401
except ImportError as _e:
    if _e.name != "sitecustomize":
        raise
finally:
    if "sitecustomize" not in sys.modules and _me is not None:
        sys.modules["sitecustomize"] = _me
