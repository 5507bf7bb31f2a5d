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

from ..model.session import MAX_DEPTH, ROOT_PATH, STATES
from ..model.tables import Stack


def frame_label(session, fid, line, lines=False):
    fn = session.functions[fid]
    if lines:
        return (f"{fn.qualname}:{line}", fn.filename, line)
    return (fn.qualname, fn.filename, fn.line)


def native_frames(session, ip, lines=False) -> list:
    """The frames naming a native address, innermost first: the function (or
    the inlined functions, then the function that holds them) with its source
    file and line where the capture knows them (libdw, debug information),
    else with its object's path. With ``lines`` a label carries its line."""
    sym = session.meta.get("native_symbols", {}).get(str(ip))
    if not sym:
        return [(f"0x{ip:x}", "", 0)]
    if len(sym) >= 4 and sym[2]:
        inner = [(sym[0], sym[2], sym[3])] + [tuple(f) for f in (sym[4] if len(sym) > 4 else ())]
        return [(f"{name}:{line}" if lines else name, file, line if lines else 0)
                for name, file, line in inner]
    return [(sym[0], sym[1], 0)]


def frame_name(label) -> str:
    """A frame's function without its line (labels made with ``lines``)."""
    head, sep, tail = label.rpartition(":")
    return head if sep and tail.isdigit() else label


def has_stacks(session) -> bool:
    """Sampled stacks, or the calling-context tree of function tracing."""
    return bool(session.info.get("sampling") or session.paths)


def traced_stacks(session, threads=True, thread_ids=None):
    """Function tracing: each path of the calling-context tree that has self
    time, as (thread, "python", frames, calls along the path, self ns)."""
    frames_of: dict = {}
    for (t, pid), p in sorted(session.paths.items()):     # parents before children
        if thread_ids is not None and t not in thread_ids:
            continue
        parent = () if p.parent == ROOT_PATH else frames_of.get((t, p.parent), ())
        if len(parent) >= MAX_DEPTH:        # deeper: the self time of the deepest shown
            frames = frames_of[(t, pid)] = parent
        else:
            frames = frames_of[(t, pid)] = parent + (frame_label(session, p.fid, 0),)
        if p.own <= 0:
            continue
        out = list(frames)
        if threads:
            th = session.threads.get(t)
            out.insert(0, (th.name if th else f"thread {t}", "", 0))
        yield t, "python", out, p.calls, round(session.seconds(p.own) * 1e9)


def named_stacks(session, lines=False, threads=True, states=None, thread_ids=None):
    """Yield (thread index, state name, [frames root first], count, weight_ns).
    A traced capture gives its calling-context tree (traced_stacks: count is
    calls, weight self time; no lines).

    With native frames, a detached thread whose native stack passes through
    CPython's take_gil is waiting for the GIL: its state is reported as "gil"."""
    if not session.info.get("sampling"):
        yield from traced_stacks(session, threads, thread_ids)
        return
    for (t, sid, state), c in session.samples.items():
        if thread_ids is not None and t not in thread_ids:
            continue
        st = session.stacks[sid]
        frames = [frame_label(session, fid, ln, lines) for fid, ln in st.frames]
        name = STATES[state]
        if st.native:
            frames = merge_native(session, frames, st, lines)
            if state != 0 and any(frame_name(f[0]) == "take_gil" for f in frames):
                name = "gil"
        if states is not None and name not in states:
            continue
        if threads:
            th = session.threads.get(t)
            frames.insert(0, (th.name if th else f"thread {t}", "", 0))
        if name != "python":
            frames.append((f"[{name}]", "", 0))
        yield t, name, frames, c.count, c.weight


EVAL = "_PyEval_EvalFrameDefault"


def merge_native(session, py_frames, st, lines=False):
    """One stack from the Python frames (root first) and the native ones (leaf
    first): from the leaf up, each call of the interpreter's evaluation loop is
    replaced by the run of Python frames it executed (they start at the entry
    frames). Native frames below the outermost matched call (the interpreter's
    start-up) are left out; Python frames the native walk did not reach stay
    at the root."""
    native = []                                                             # leaf first
    for ip in st.native:
        for label in native_frames(session, ip, lines):
            if not (native and label == native[-1] and label[0].startswith("[")):
                native.append(label)    # one frame for a run of unnamed code of one object
    bounds = sorted(set(st.entries) | {0})
    segments = [py_frames[a:b] for a, b in zip(bounds, bounds[1:] + [len(py_frames)])]
    segments = [seg for seg in segments if seg]
    out = []                                                                # leaf first
    last_eval = None
    for label in native:
        if frame_name(label[0]) == EVAL and segments:
            out.extend(reversed(segments.pop()))
            last_eval = len(out)
        else:
            out.append(label)
    if last_eval is None:               # no evaluation frame found: C code under Python
        return py_frames + list(reversed(out))
    out = out[:last_eval]
    for seg in reversed(segments):      # not reached by the native walk
        out.extend(reversed(seg))
    return list(reversed(out))


def memory_stack_frames(session, sid, lines=False) -> list:
    """An allocation stack as named frames, root first; with --native its
    native frames merged in as in sampled stacks (merge_native)."""
    py = [frame_label(session, fid, line, lines) for fid, line in session.memory_stacks[sid]]
    native = session.memory_native.get(sid)
    if not native:
        return py
    return merge_native(session, py, Stack(session.memory_stacks[sid], *native), lines)


def totals(session, lines=False, skip=()):
    """{frame: [self samples, total samples, self ns, total ns]} over all samples
    but those of the states in `skip`."""
    out: dict = {}
    for t, state, frames, count, weight in named_stacks(session, lines=lines, threads=False):
        if state in skip:
            continue
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
