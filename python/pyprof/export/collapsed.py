"""Collapsed ("folded") stacks: ``root;child;...;leaf count``, one line per
stack, sorted; read by flamegraph.pl, inferno, speedscope, gprof2dot. Frames are
``name (file:line)`` (so no name ends in a number, which flamegraph.pl would
read as a differential count); counts are samples, or for a traced capture
(the calling-context tree of function tracing) microseconds of self time."""
from __future__ import annotations

import os

from ..base.files import atomic_write
from ..analysis.stacks import named_stacks


def _name(frame):
    label, file, line = frame
    if not file:
        text = label
    elif line:
        text = f"{label} ({os.path.basename(file)}:{line})"
    else:                                   # a native frame: its object
        text = f"{label} ({os.path.basename(file)})"
    return text.replace(";", ":").replace("\n", " ")


def render(session, lines=False, threads=True) -> str:
    counts: dict = {}
    sampled = bool(session.info.get("sampling"))
    for t, state, frames, count, weight in named_stacks(session, lines=lines, threads=threads):
        key = ";".join(_name(f) for f in frames)
        counts[key] = counts.get(key, 0) + (count if sampled else round(weight / 1000))
    counts = {k: v for k, v in counts.items() if v > 0}
    return "".join(f"{k} {v}\n" for k, v in sorted(counts.items()))


def write(session, path):
    atomic_write(path, render(session))
