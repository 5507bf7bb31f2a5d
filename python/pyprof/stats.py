"""The public path `pyprof.stats` (docs/api.md) of `pyprof.analysis.stats`: the same module."""
import sys

from .analysis import stats as _module

sys.modules[__name__] = _module
