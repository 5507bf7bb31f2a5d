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


def write(rows, out) -> None:
    """The summary as a table."""
    if not rows:
        return
    out.write("Live objects by type (at the end; sizes of the objects themselves):\n\n")
    out.write(f"{'Count':>12} {'Total size':>14}  Type\n")
    for r in rows:
        out.write(f"{r['count']:>12,} {r['bytes']:>14,}  {r['type']}\n")
    out.write("\n")


def write_steps(steps, out) -> None:
    """The summaries taken at each pyprof.step(): the five types with most bytes."""
    if not steps:
        return
    out.write("Live objects by type at each step (the five with most bytes):\n\n")
    for st in steps:
        label = st["name"] or f"step {st['index']}"
        out.write(f"  {label} (at {st['t']:.3f} s): " + ", ".join(
            f"{r['type']} {r['count']:,} / {r['bytes']:,} B" for r in st["objects"][:5]) + "\n")
    out.write("\n")


def write_from_meta(meta, out) -> None:
    """What a capture's META holds of objects (at the end, at steps), if any."""
    if meta.get("objects"):
        out.write("\n")
        write(meta["objects"], out)
        write_steps(meta.get("objects_steps"), out)
