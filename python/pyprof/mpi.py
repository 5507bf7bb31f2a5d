"""The public path `pyprof.mpi` (docs/mpi.md) of `pyprof.runtime.mpi`: the same module."""
import sys

from .runtime import mpi as _module

sys.modules[__name__] = _module
