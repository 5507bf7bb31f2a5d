"""The public path `pyprof.channel` (docs/api.md) of `pyprof.live.channel`: the same module."""
import sys

from .live import channel as _module

sys.modules[__name__] = _module
