"""The public path `pyprof.ray` (docs/clusters.md) of `pyprof.integrations.ray`: the same module."""
import sys

from pyprof.integrations import ray as _module

sys.modules[__name__] = _module
