"""A flame graph of memory by allocation stack (docs/memory.md#outputs): the same
self-contained page as the sampled flame graph, with three views: the bytes
allocated in all, those live when the traced total peaked, and those still live
at the end. Needs the allocation
stacks (recorded with --memory-sample, or --memory-stacks in exact mode)."""
from __future__ import annotations

from ..errors import PyprofError
from ..base.files import atomic_write
from .flamegraph import add_path, new_root, pack, page
from ..analysis.stacks import memory_stack_frames


def tree(session, lines=False) -> dict:
    views = {"bytes allocated": lambda c: c.alloc_bytes,
             "bytes live at the peak": lambda c: c.at_peak_bytes,
             "bytes live at the end": lambda c: c.net_bytes}
    out = {}
    for view, value in views.items():
        root = new_root()
        for sid, c in session.memory_by_stack.items():
            if value(c) > 0 and sid in session.memory_stacks:
                add_path(root, memory_stack_frames(session, sid, lines), value(c))
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
