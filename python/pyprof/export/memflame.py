"""A flame graph of memory by allocation stack (docs/memory.md#outputs): the same
self-contained page as the sampled flame graph, with three views: the bytes
allocated in all, those live when the traced total peaked, and those still live
at the end. Needs the allocation
stacks (recorded with --memory-sample, or --memory-stacks in exact mode)."""
from __future__ import annotations

from ..errors import PyprofError
from ._files import atomic_write
from .flamegraph import page
from .stacks import frame_label


def tree(session, lines=False) -> dict:
    views = {"bytes allocated": lambda c: c.alloc_bytes,
             "bytes live at the peak": lambda c: c.at_peak_bytes,
             "bytes live at the end": lambda c: c.net_bytes}
    out = {}
    for view, value in views.items():
        root = ["all", "", 0, 0, {}]
        for sid, c in session.memory_by_stack.items():
            v = value(c)
            if v <= 0 or sid not in session.memory_stacks:
                continue
            node = root
            node[3] += v
            for fid, line in session.memory_stacks[sid]:
                f = frame_label(session, fid, line, lines)
                child = node[4].get(f)
                if child is None:
                    child = node[4][f] = [f[0], f[1], f[2], 0, {}]
                child[3] += v
                node = child

        def pack(n):
            return [n[0], n[1], n[2], n[3],
                    [pack(c) for c in sorted(n[4].values(), key=lambda c: -c[3])]]
        out[view] = pack(root)
    return out


def render(session, lines=False) -> str:
    if not session.memory_stacks:
        raise PyprofError("this capture has no allocation stacks: profile with "
                          "--memory-sample, or --memory --memory-stacks")
    data = {"unit": "bytes", "threads": tree(session, lines), "version": "memory"}
    return page(data, "pyprof memory flame graph: " + " ".join(session.meta.get("argv", [])),
                "view")


def write(session, path):
    atomic_write(path, render(session))
