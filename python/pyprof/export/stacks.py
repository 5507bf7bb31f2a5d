"""Sampled stacks as named frames: what the stack formats (collapsed, speedscope,
pprof, flame graph) share.

A frame is ``(label, file, line)``. With ``lines=False`` (the default) a Python
frame is its function (``qualname``, file, first line), so a flame graph has one
box per function; with ``lines=True`` it is the line running in it. Native frames
(``--native``) come from the symbol table in the capture. With ``threads=True`` each
stack starts with its thread; samples of a thread that was not running Python
end with its state (``[idle]``, ``[native]``).
"""
from __future__ import annotations

from ..session import STATES


def frame_label(session, fid, line, lines=False):
    fn = session.functions[fid]
    if lines:
        return (f"{fn.qualname}:{line}", fn.filename, line)
    return (fn.qualname, fn.filename, fn.line)


def native_label(session, ip):
    sym = session.meta.get("native_symbols", {}).get(str(ip))
    if sym:
        return (sym[0], sym[1], 0)
    return (f"0x{ip:x}", "", 0)


def named_stacks(session, lines=False, threads=True, states=None, thread_ids=None):
    """Yield (thread index, state name, [frames root first], count, weight_ns)."""
    for (t, sid, state), c in session.samples.items():
        if states is not None and STATES[state] not in states:
            continue
        if thread_ids is not None and t not in thread_ids:
            continue
        st = session.stacks[sid]
        frames = [frame_label(session, fid, ln, lines) for fid, ln in st.frames]
        if st.native:
            frames += [native_label(session, ip) for ip in reversed(st.native)]
        if threads:
            th = session.threads.get(t)
            frames.insert(0, (th.name if th else f"thread {t}", "", 0))
        if state != 0:
            frames.append((f"[{STATES[state]}]", "", 0))
        yield t, STATES[state], frames, c.count, c.weight


def totals(session, lines=False):
    """{frame: [self samples, total samples, self ns, total ns]} over all samples."""
    out: dict = {}
    for t, state, frames, count, weight in named_stacks(session, lines=lines, threads=False):
        seen = set()
        for i, f in enumerate(frames):
            row = out.setdefault(f, [0, 0, 0, 0])
            if f not in seen:
                seen.add(f)
                row[1] += count
                row[3] += weight
            if i == len(frames) - 1:
                row[0] += count
                row[2] += weight
    return out
