"""The differential flame graph of two captures (docs/merge-diff.md): the page of
flamegraph.py in its differential colour mode. Frame widths are the AFTER
profile; a frame is red where it grew since BEFORE and blue where it shrank
(Brendan Gregg's convention), deeper with the size of the change; the tooltip
shows before, after and the change. Frames found only in BEFORE have no width
in AFTER: they are listed under the graph and counted in their parent's tooltip.

The stacks come from :func:`weighted_stacks`, which yields (frames, value) for
a Session from whatever stacks it has: the calling-context tree of traced calls
(self time in ns), sampled stacks (time in ns) or allocation stacks (bytes).
"""
from __future__ import annotations

from .._version import __version__
from ..errors import PyprofError
from .flamegraph import add_path, pack, page
from ..analysis.stacks import frame_label, memory_stack_frames, named_stacks


def _sampled(session, lines=False):
    for t, state, frames, count, weight in named_stacks(session, lines=lines, threads=False):
        yield frames, weight


def _traced(session, lines=False):
    """Each path of the calling-context tree with its self time (lines: not
    recorded by function tracing, so frames are functions)."""
    todo = [((), session.call_tree())]
    while todo:
        frames, node = todo.pop()
        for fid, child in node.children.items():
            f = frames + (frame_label(session, fid, 0),)
            if child.own > 0:
                yield list(f), round(session.seconds(child.own) * 1e9)
            todo.append((f, child))


def _allocations(session, lines=False):
    for sid, c in session.memory_by_stack.items():
        if c.alloc_bytes > 0 and sid in session.memory_stacks:
            yield memory_stack_frames(session, sid, lines), c.alloc_bytes


# name -> (does the Session have these stacks?, its (frames, value) iterator, unit)
STACK_SOURCES = {
    "traced time": (lambda s: bool(s.paths), _traced, "ns"),
    "sampled time": (lambda s: bool(s.samples), _sampled, "ns"),
    "bytes allocated": (lambda s: bool(s.memory_stacks), _allocations, "bytes"),
}


def stack_sources(session) -> list:
    return [name for name, (has, _, _) in STACK_SOURCES.items() if has(session)]


def weighted_stacks(session, source, lines=False):
    """Yield (frames root first, value) of one of STACK_SOURCES."""
    return STACK_SOURCES[source][1](session, lines)


def tree(before, after, source, lines=False):
    """The AFTER tree with each node's BEFORE value in slot 5: [name, file,
    line, after, children, before]."""
    root = ["all", "", 0, 0, {}, 0]
    # Frames match by name and file, not first line (an edit above a function
    # moves it): each is drawn with the first line AFTER gives it.
    first_line: dict = {}

    def matched(frames):
        return [(name, file, first_line.setdefault((name, file), line))
                for name, file, line in frames]

    for frames, value in weighted_stacks(after, source, lines):
        add_path(root, matched(frames), value, slot=3)
    for frames, value in weighted_stacks(before, source, lines):
        add_path(root, matched(frames), value, slot=5)
    return root


def _walk(node, path=(), parent=None):
    """Yield (frame names from the root, node, parent node)."""
    yield path, node, parent
    for child in node[4].values():
        yield from _walk(child, path + (child[0],), node)


def render(before, after, names=("BEFORE", "AFTER"), lines=False, gone_limit=50) -> str:
    common = [s for s in stack_sources(before) if s in stack_sources(after)]
    if not common:
        def what(s):
            return ", ".join(stack_sources(s)) or "no stacks"
        raise PyprofError(
            f"a differential flame graph needs stacks in both captures ({names[0]}: "
            f"{what(before)}; {names[1]}: {what(after)}): profile with function tracing "
            f"(the default), --sample, or --memory-sample / --memory --memory-stacks")
    source = common[0]
    root = tree(before, after, source, lines)
    nodes = list(_walk(root))
    max_delta = max((abs(n[3] - n[5]) for path, n, _ in nodes if path), default=0)
    # The tops of the subtrees only BEFORE has (their parent is in AFTER).
    gone = sorted(((" > ".join(path), n[5]) for path, n, parent in nodes
                   if path and n[3] == 0 and n[5] > 0 and parent[3] > 0),
                  key=lambda g: -g[1])
    data = {"unit": STACK_SOURCES[source][2], "threads": {source: pack(root)},
            "version": __version__, "diff": True, "max_delta": max_delta,
            "gone": [list(g) for g in gone[:gone_limit]],
            "before": names[0], "after": names[1]}
    return page(data, f"pyprof differential flame graph: {names[0]} -> {names[1]}", "view")

