"""The public path `pyprof.session` (docs/api.md) of `pyprof.model.session`: the same module."""
import sys

from .model import session as _module

sys.modules[__name__] = _module
