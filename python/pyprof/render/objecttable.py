"""The tables of live objects by type (pyprof.objects' summaries, kept in META)."""
from __future__ import annotations


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
