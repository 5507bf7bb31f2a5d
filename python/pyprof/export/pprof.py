"""pprof's profile.proto (gzip-compressed), for ``go tool pprof`` and the
viewers that read it. Sample types: samples/count (calls/count for a traced
capture: its calling-context tree, self time per path), then wall or cpu time in
nanoseconds (the default). One Location per (function, line), one Function per
function; a single Mapping marks the profile as symbolised.

The encoder is the handful of protobuf wire rules the format needs: varints
(int64 as two's complement, not zigzag), length-delimited fields, packed
repeated scalars (profile.proto field numbers in formats.md)."""
from __future__ import annotations

import gzip
import os

from ..base.files import atomic_write
from ..analysis.stacks import frame_name, named_stacks
from ..model.names import plain_builtin_name


def _varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _int(field, v):
    return _varint(field << 3) + _varint(v) if v else b""


def _bytes(field, data):
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _packed(field, values):
    return _bytes(field, b"".join(_varint(v) for v in values)) if values else b""


def render(session, lines=True) -> bytes:
    strings, sidx = [""], {"": 0}

    def s(text):
        if text not in sidx:
            sidx[text] = len(strings)
            strings.append(text)
        return sidx[text]

    sampled = bool(session.info.get("sampling"))
    kind = "wall" if session.info.get("sampling", {}).get("mode", "wall") == "wall" else "cpu"
    count_type = "samples" if sampled else "calls"
    functions, locations, samples = {}, {}, []
    for t, state, frames, count, weight in named_stacks(session, lines=True, threads=False):
        loc_ids = []
        for label, file, line in reversed(frames):                  # leaf first
            if file:
                name = frame_name(label)
            elif label.startswith("<") and label.rsplit(":", 1)[0].endswith(">"):
                # --async's <task NAME>, <await NAME>: pprof drops <...> from names
                # (C++ templates), so they are [task NAME]
                name = f"[{label.rsplit(':', 1)[0][1:-1]}]"
            else:
                name = label
            if file == "~":                 # a C function (traced captures)
                name, file = plain_builtin_name(name), ""
            fkey = (name, file)
            if fkey not in functions:
                functions[fkey] = len(functions) + 1
            lkey = (fkey, line)
            if lkey not in locations:
                locations[lkey] = len(locations) + 1
            loc_ids.append(locations[lkey])
        labels = _bytes(3, _int(1, s("thread")) + _int(2, s(session.threads[t].name
                                                            if t in session.threads else str(t))))
        labels += _bytes(3, _int(1, s("state")) + _int(2, s(state)))
        samples.append(_packed(1, loc_ids) + _packed(2, [count, weight]) + labels)
    first_lines = {}
    for fid, fn in session.functions.items():
        first_lines[(fn.qualname, fn.filename)] = fn.line
    out = bytearray()
    out += _bytes(1, _int(1, s(count_type)) + _int(2, s("count")))
    out += _bytes(1, _int(1, s(kind)) + _int(2, s("nanoseconds")))
    for smp in samples:
        out += _bytes(2, smp)
    exe = os.path.basename(session.meta.get("executable", "python")) or "python"
    out += _bytes(3, _int(1, 1) + _int(5, s(exe)) + _int(7, 1) + _int(8, 1) + _int(9, 1))
    for ((fkey, line), lid) in locations.items():
        out += _bytes(4, _int(1, lid) + _int(2, 1) + _bytes(4, _int(1, functions[fkey])
                                                          + _int(2, line)))
    for (name, file), fid in functions.items():
        out += _bytes(5, _int(1, fid) + _int(2, s(name)) + _int(3, s(name)) + _int(4, s(file))
                      + _int(5, first_lines.get((name, file), 0)))
    info = session.info
    out += _int(9, info.get("start_wall_ns", 0))
    out += _int(10, info.get("duration_ns", 0))
    out += _bytes(11, _int(1, s(kind)) + _int(2, s("nanoseconds")))
    out += _int(12, int(info.get("sampling", {}).get("interval_ns", 0)))
    out += _int(14, s(kind))
    for text in strings:
        out += _bytes(6, text.encode("utf-8", "surrogatepass"))
    return gzip.compress(bytes(out), mtime=0)


def write(session, path):
    atomic_write(path, render(session))
