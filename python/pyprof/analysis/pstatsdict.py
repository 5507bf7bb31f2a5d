"""The stats dict cProfile keeps (and marshals into a pstats file), from a Session:

    {(file, line, name): (cc, nc, tt, ct, {caller_key: (nc, cc, tt, ct)})}

cc = primitive calls, nc = all calls, tt = self seconds, ct = inclusive seconds.
Caller tuples are in the order cProfile writes them: (nc, cc, tt, ct).
Functions that share a key (two lambdas on one line) are summed, where cProfile
keeps only the last one.
"""
from __future__ import annotations


def to_dict(session, threads=None) -> dict:
    if session.samples and not session.fstats:
        return _from_samples(session, threads)
    funcs = session.functions
    sec = session.seconds
    stats: dict = {}
    for fid, c in session.function_totals(threads).items():
        key = funcs[fid].pstats_key
        prev = stats.get(key)
        cc, nc, tt, ct = c.primitive_calls, c.calls, sec(c.own), sec(c.total)
        if prev:
            cc, nc, tt, ct = prev[0] + cc, prev[1] + nc, prev[2] + tt, prev[3] + ct
            stats[key] = (cc, nc, tt, ct, prev[4])
        else:
            stats[key] = (cc, nc, tt, ct, {})
    for (a, b), c in session.edge_totals(threads).items():
        callee = stats.get(funcs[b].pstats_key)
        if callee is None:          # not in the threads asked for (a corrupt capture)
            continue
        callers = callee[4]
        ckey = funcs[a].pstats_key
        nc, cc, tt, ct = c.calls, c.primitive_calls, sec(c.own), sec(c.total)
        prev = callers.get(ckey)
        if prev:
            nc, cc, tt, ct = prev[0] + nc, prev[1] + cc, prev[2] + tt, prev[3] + ct
        callers[ckey] = (nc, cc, tt, ct)
    return stats


def _charge(table, key, seen, secs, leaf) -> None:
    """A sample's time: total once per stack (recursion), self at the leaf."""
    row = table.setdefault(key, [0, 0, 0.0, 0.0])
    if key not in seen:
        seen.add(key)
        row[3] += secs
    if leaf:
        row[2] += secs


def _from_samples(session, threads=None) -> dict:
    """pstats from a sampling capture: tt/ct are the time the samples stand
    for (self / total); call counts are unknown to a sampler and written as 0
    (pstats prints 0, and divides by them only when they are not)."""
    funcs = session.functions
    stats: dict = {}
    edges: dict = {}
    for (t, sid, state), c in session.samples.items():
        if threads is not None and t not in threads:
            continue
        secs = c.weight / 1e9
        keys = [funcs[fid].pstats_key for fid, _ in session.stacks[sid].frames]
        seen: set = set()
        leaf = len(keys) - 1
        for i, key in enumerate(keys):
            _charge(stats, key, seen, secs, i == leaf)
            if i:
                _charge(edges, (keys[i - 1], key), seen, secs, i == leaf)
    out = {k: (v[0], v[1], v[2], v[3], {}) for k, v in stats.items()}
    for (caller, callee), e in edges.items():
        out[callee][4][caller] = tuple(e)
    return out
