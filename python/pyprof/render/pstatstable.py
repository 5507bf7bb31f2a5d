"""The pstats function table (as cProfile's print_stats shows it)."""
from __future__ import annotations

from ..analysis.pstatsdict import to_dict


def print_table(session, sort, out):
    """The pstats table of `session` (as print_stats shows it) on `out`."""
    import pstats as _pstats

    class _Stats:
        def __init__(self, stats):
            self.stats = stats

        def create_stats(self):
            pass

    stats = to_dict(session)
    if not stats:
        out.write("No function was profiled.\n")
        return
    _pstats.Stats(_Stats(stats), stream=out).strip_dirs().sort_stats(sort).print_stats()
