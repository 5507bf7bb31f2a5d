"""speedscope's file format (https://www.speedscope.app/file-format-schema.json):
one sampled profile per thread, weights in nanoseconds (each sample weighs one
sampling interval; for a traced capture, each path of its calling-context tree
is one sample weighing its self time), frames shared."""
from __future__ import annotations

import json

from .._version import __version__
from ..base.files import atomic_write
from ..analysis.stacks import named_stacks


# Samples written one entry each, at most: beyond, a stack's samples are one
# entry of their summed weight (a capture counting 2**40 samples stays small).
MAX_EXPANDED = 2_000_000


def render(session, lines=False) -> str:
    expanded = 0
    frames, index = [], {}
    profiles: dict = {}
    sampled = bool(session.info.get("sampling"))
    for t, state, fr, count, weight in named_stacks(session, lines=lines, threads=False):
        ids = []
        for f in fr:
            if f not in index:
                index[f] = len(frames)
                entry = {"name": f[0]}
                if f[1]:
                    entry["file"] = f[1]
                    entry["line"] = f[2]
                frames.append(entry)
            ids.append(index[f])
        prof = profiles.setdefault(t, {"samples": [], "weights": []})
        n = count if sampled else 1
        if expanded + n > MAX_EXPANDED:     # one entry for them all: the weight is kept
            n = 1
        expanded += n
        for _ in range(n):                  # a sample per sample: speedscope sums weights
            prof["samples"].append(ids)
            prof["weights"].append(weight // n)
    out = []
    for t in sorted(profiles):
        p = profiles[t]
        th = session.threads.get(t)
        total = sum(p["weights"])
        out.append({"type": "sampled", "name": th.name if th else f"thread {t}",
                    "unit": "nanoseconds", "startValue": 0, "endValue": total,
                    "samples": p["samples"], "weights": p["weights"]})
    doc = {"$schema": "https://www.speedscope.app/file-format-schema.json",
           "shared": {"frames": frames}, "profiles": out,
           "name": " ".join(session.meta.get("argv", [])) or "pyprof",
           "exporter": f"pyprof@{__version__}"}
    return json.dumps(doc, ensure_ascii=True, allow_nan=False)


def write(session, path):
    atomic_write(path, render(session))
