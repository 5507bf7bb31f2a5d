"""The public path `pyprof.middleware` (docs/web.md) of `pyprof.integrations.middleware`: the same module."""
import sys

from .integrations import middleware as _module

sys.modules[__name__] = _module
