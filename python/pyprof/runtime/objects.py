"""Live objects by type (pympler's summary, docs/memory.md#objects).

The objects the garbage collector tracks (containers, instances of classes),
plus the objects they refer to directly (strings, numbers, bytes...), each
once; sizes are ``sys.getsizeof`` (the object itself, not what it refers to).
"""
from __future__ import annotations

import gc
import sys


def _type_name(t) -> str:
    module = getattr(t, "__module__", "builtins")
    name = getattr(t, "__qualname__", t.__name__)
    return name if module == "builtins" else f"{module}.{name}"


def summary(limit: int | None = 30) -> list:
    """[{"type", "count", "bytes"}], most bytes first (at most `limit` rows)."""
    gc.collect()
    tracked = gc.get_objects()
    seen = {id(tracked)}
    counts: dict = {}
    sizes: dict = {}

    def add(o):
        t = type(o)
        counts[t] = counts.get(t, 0) + 1
        try:
            sizes[t] = sizes.get(t, 0) + sys.getsizeof(o)
        except Exception:           # a broken __sizeof__: counted, not sized
            pass

    for o in tracked:
        seen.add(id(o))
    for o in tracked:
        add(o)
        for r in gc.get_referents(o):
            if id(r) not in seen and not gc.is_tracked(r):
                seen.add(id(r))
                add(r)
    rows = [{"type": _type_name(t), "count": counts[t], "bytes": sizes.get(t, 0)}
            for t in counts]
    rows.sort(key=lambda r: (-r["bytes"], r["type"]))
    return rows[:limit] if limit else rows
