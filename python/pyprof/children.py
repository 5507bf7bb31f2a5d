"""The public path `pyprof.children` (docs/children.md) of `pyprof.runtime.children`: the same module."""
import sys

from .runtime import children as _module

sys.modules[__name__] = _module
