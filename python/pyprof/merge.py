"""The public path `pyprof.merge` (docs/api.md) of `pyprof.analysis.merge`: the same module."""
import sys

from .analysis import merge as _module

sys.modules[__name__] = _module
