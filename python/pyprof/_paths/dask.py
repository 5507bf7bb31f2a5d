"""The public path `pyprof.dask` (docs/clusters.md) of `pyprof.integrations.dask`: the same module."""
import sys

from pyprof.integrations import dask as _module

sys.modules[__name__] = _module
