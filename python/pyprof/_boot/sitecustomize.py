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

if os.environ.get("PYPROF_CHILDREN"):
    try:
        from pyprof import children as _children
    except ImportError:             # another interpreter, without pyprof: run unprofiled
        pass
    else:
        _children.start_from_environment()

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
