"""The public path `pyprof.objects` (docs/memory.md) of `pyprof.runtime.objects`: the same module."""
import sys

from .runtime import objects as _module

sys.modules[__name__] = _module
