"""pstats export: the marshal'd dict cProfile writes, read by pstats, snakeviz,
gprof2dot, pyprof2calltree and tuna.

    {(file, line, name): (cc, nc, tt, ct, {caller_key: (nc, cc, tt, ct)})}

cc = primitive calls, nc = all calls, tt = self seconds, ct = inclusive seconds.
Caller tuples are in the order cProfile writes them: (nc, cc, tt, ct).
Functions that share a key (two lambdas on one line) are summed, where cProfile
keeps only the last one.
"""
from __future__ import annotations

import marshal

from ..analysis.pstatsdict import to_dict
from ..errors import PyprofError
from ..base.files import atomic_write


def write(session, path) -> None:
    stats = to_dict(session)
    if not stats:
        raise PyprofError("nothing was profiled: no function calls were recorded")
    write_dict(stats, path)


def write_dict(stats: dict, path) -> None:
    """marshal `stats` to `path`, whole or not at all."""
    atomic_write(path, marshal.dumps(stats))
