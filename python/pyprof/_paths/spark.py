"""The public path `pyprof.spark` (docs/clusters.md) of `pyprof.integrations.spark`: the same module."""
import sys

from pyprof.integrations import spark as _module

sys.modules[__name__] = _module
