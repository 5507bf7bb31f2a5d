"""The .cprof capture format (docs/capture-format.md, src/_cprof/capture.h): the
header, the zlib stream and its CRC, and one table of records.

:data:`TABLE_ROWS` gives each counter table (:data:`tables.TABLES`) its record
type and row struct: the key's fields, reserved zero fields, then the counters'
fields in their dataclass order; its parse and pack are made from that.
:data:`RECORDS` maps the other record types to their parsers; pack_blob writes
the records in the order the C core does. Reading, writing,
steps (a STEP record holds a record stream of its own) and merge all go
through here; nothing else knows a record id or a struct.

The codec fills a Session it is given (and makes the Sessions of steps with
``type(session)()``), so it needs the row types only, never the Session class.
"""
from __future__ import annotations

import dataclasses
import json
import os
import struct
import zlib
from dataclasses import dataclass

from ..errors import PyprofError
from .tables import (KINDS, NO_FUNCTION, TABLES, CallRow, Counters, Function,
                     LineCounters, MemCounters, MemPoint, PathNode, SampleCounters, Stack,
                     Step, Thread)

MAGIC = b"\x89CPROF\r\n"
FORMAT_MAJOR = 1            # refused above; any minor is read (unknown records skipped)
HEADER = struct.Struct("<8sHHIQI")
RECORD = struct.Struct("<HHI")

REC_INFO, REC_META, REC_STRINGS, REC_FUNCTIONS = 1, 2, 3, 4
REC_THREADS, REC_FSTATS, REC_EDGES, REC_LINES, REC_CALLROWS, REC_END = 5, 6, 7, 8, 9, 0xFFFF
REC_STACKS, REC_SAMPLES, REC_MEMORY, REC_FMEMORY, REC_MEMCURVE, REC_MEMSTACKS = (
    10, 11, 12, 13, 14, 15)
REC_PATHS, REC_STEP, REC_TIMELINE = 16, 17, 18

_FUNC = struct.Struct("<6I")
_THREAD = struct.Struct("<IIQQQ")
_MEMPOINT = struct.Struct("<qQQQII")
_STEP_HEADER = struct.Struct("<I")
_LINE_ENTRY, _LINE_MASK = 0x80000000, 0x7FFFFFFF


@dataclass(frozen=True)
class Rows:
    """How a counter table is laid out in its record: a row is ``nkey`` key
    fields, ``pad`` reserved zero fields, then the fields of ``value`` (a
    dataclass; None: the rest of the row as a tuple)."""

    rtype: int
    struct: struct.Struct
    nkey: int
    pad: int = 0
    value: type | None = None


# One entry per table of tables.TABLES, in the order they are written.
TABLE_ROWS = {
    "fstats": Rows(REC_FSTATS, struct.Struct("<IIQQqq"), 2, 0, Counters),
    "edges": Rows(REC_EDGES, struct.Struct("<IIIIQQqq"), 3, 1, Counters),
    "paths": Rows(REC_PATHS, struct.Struct("<IIIIQqq"), 2, 0, PathNode),
    "samples": Rows(REC_SAMPLES, struct.Struct("<IIIIQq"), 3, 1, SampleCounters),
    "fmemory": Rows(REC_FMEMORY, struct.Struct("<IIqq"), 2),
    "memory_rows": Rows(REC_MEMORY, struct.Struct("<IIIIQQQQQQ"), 4, 0, MemCounters),
    "lines": Rows(REC_LINES, struct.Struct("<IIIIQq"), 3, 1, LineCounters),
    "callrows": Rows(REC_CALLROWS, struct.Struct("<IIIIQq"), 4, 0, CallRow),
    "timeline": Rows(REC_TIMELINE, struct.Struct("<IIqq"), 4),
}
assert list(TABLE_ROWS) == [t.name for t in TABLES], "one record per counter table"
_TABLE_OF = {TABLE_ROWS[t.name].rtype: t for t in TABLES}


# ------------------------------------------------------------------ the file
def read_file(path, session):
    """Read a .cprof file into `session` (empty). PyprofError on any problem."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PyprofError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_file(data, path, session)


def parse_file(data: bytes, name, session):
    """The bytes of a .cprof file (header, zlib stream) into `session`."""
    if len(data) < HEADER.size or not data.startswith(MAGIC):
        hint = ""
        if data[:1] in (b"\xfb", b"{"):
            hint = " (it looks like a pstats file: read it with pstats.Stats)"
        elif not data:
            hint = " (the file is empty)"
        raise PyprofError(f"{name} is not a pyprof capture file{hint}")
    _, major, minor, flags, length, crc = HEADER.unpack_from(data)
    if major > FORMAT_MAJOR:
        raise PyprofError(
            f"{name} was written by a newer pyprof (capture format {major}.{minor}); "
            f"this pyprof reads format {FORMAT_MAJOR}.x: upgrade pyprof")
    try:
        d = zlib.decompressobj()
        blob = d.decompress(data[HEADER.size:], length + 1)
        if not d.eof:
            raise zlib.error("compressed stream ends early")
    except zlib.error as e:
        raise PyprofError(f"{name} is truncated or corrupt ({e})") from None
    if len(blob) != length or zlib.crc32(blob) != crc:
        raise PyprofError(f"{name} is truncated or corrupt (checksum mismatch)")
    parse_blob(blob, name, session)
    session.final = bool(flags & 1)
    return session


def write_file(path, session) -> None:
    """Write `session` as a .cprof file, atomically (the C core's writer)."""
    from .. import _cprof
    try:
        _cprof.write_blob(os.fspath(path), pack_blob(session), session.final)
    except OSError as e:
        raise PyprofError(str(e)) from None


# ------------------------------------------------------------------ the record stream
class _Reading:
    """What parsing one record stream shares between records."""

    def __init__(self, session, name):
        self.session = session
        self.name = name
        self.strings: list = []


def parse_blob(blob: bytes, name, session):
    """Parse the record stream the C core produces (Profiler.snapshot()) into
    `session`, then rebuild its derived tables (Session.reindex)."""
    ctx = _Reading(session, name)
    mv = memoryview(blob)
    off, end_seen = 0, False
    try:
        while off < len(blob):
            rtype, _, rlen = RECORD.unpack_from(blob, off)
            off += RECORD.size
            payload = mv[off:off + rlen]
            if len(payload) != rlen:
                raise ValueError("record runs past the end")
            off += rlen
            if rtype == REC_END:
                end_seen = True
                break
            table = _TABLE_OF.get(rtype)
            if table is not None:
                _parse_table(table, payload, session)
            elif rtype in RECORDS:
                RECORDS[rtype](ctx, payload)
            # Unknown record types come from newer minor versions: skip them.
    except (struct.error, ValueError, IndexError, KeyError, UnicodeDecodeError) as e:
        raise PyprofError(f"{name} is truncated or corrupt ({e})") from None
    if not end_seen:
        raise PyprofError(f"{name} is truncated or corrupt (no end record)")
    session.reindex()
    return session


def pack_blob(session) -> bytes:
    """The record stream of `session` (the inverse of parse_blob)."""
    strings: dict = {"": 0, "~": 1}
    # FUNCTIONS and THREADS intern their strings before STRINGS is packed
    functions = _pack_functions(session, strings)
    threads = _pack_threads(session, strings)
    info = session.info
    out = [record(REC_INFO, json.dumps(info).encode())]
    if session.meta:
        out.append(record(REC_META, json.dumps(session.meta).encode()))
    out.append(record(REC_STRINGS, _pack_strings(strings)))
    out.append(record(REC_FUNCTIONS, functions))
    out.append(record(REC_THREADS, threads))
    if info.get("sampling"):
        out.append(record(REC_STACKS, _pack_stacks(session.stacks)))
    if info.get("memory"):
        out.append(record(REC_MEMCURVE, _pack_memcurve(session.memory_curve)))
        out.append(record(REC_MEMSTACKS, _pack_memstacks(session.memory_stacks)))
    out.extend(table_records(session, info, step=False))
    for st in session.steps:
        out.append(step_record(st.index, st.name, st.start, st.end,
                               b"".join(table_records(st.data, st.data.info, step=True))
                               + record(REC_END, b"")))
    out.append(record(REC_END, b""))
    return b"".join(out)


def table_records(session, info, step=False) -> list:
    """The counter tables of `session` as records: those `info`'s modes have
    (and fmemory when not empty); a step's tables only with ``step``."""
    out = []
    for table in TABLES:
        if step and not table.step:
            continue
        rows = getattr(session, table.name)
        if table.mode is not None and not info.get(table.mode) or not (rows or table.always):
            continue
        out.append(record(TABLE_ROWS[table.name].rtype, _pack_table(table, rows)))
    return out


def record(rtype: int, payload: bytes) -> bytes:
    return RECORD.pack(rtype, 0, len(payload)) + payload


def step_record(index, name, start, end, counters: bytes) -> bytes:
    """A STEP record: its JSON header, then `counters` (a record stream ending
    with END, as table_records and the C core's step counters give)."""
    header = json.dumps({"index": index, "name": name, "start": start, "end": end}).encode()
    return record(REC_STEP, _STEP_HEADER.pack(len(header)) + header + counters)


# ------------------------------------------------------------------ counter tables
def _rows(st: struct.Struct, payload):
    (n,) = struct.unpack_from("<I", payload)
    body = payload[4:4 + n * st.size]
    if len(body) != n * st.size:
        raise ValueError("table shorter than its count")
    return st.iter_unpack(body)


def _parse_table(table, payload, session) -> None:
    _code(table)[0](_rows(TABLE_ROWS[table.name].struct, payload), getattr(session, table.name))


def _pack_table(table, rows) -> bytes:
    return struct.pack("<I", len(rows)) + _code(table)[1](rows)


_CODE: dict = {}            # table name -> (parse, pack), made on first use


def _code(table):
    code = _CODE.get(table.name)
    if code is None:
        code = _CODE[table.name] = _table_code(table, TABLE_ROWS[table.name])
    return code


def _table_code(table, spec):
    """(parse, pack) of one table, written out from its spec: a loop with the
    row's fields unpacked by name runs as fast as the hand-written ones did."""
    n = len(spec.struct.unpack(bytes(spec.struct.size)))
    key = [f"k{i}" for i in range(spec.nkey)]
    pad = [f"_{i}" for i in range(spec.pad)]
    rest = [f"v{i}" for i in range(n - spec.nkey - spec.pad)]
    names = [f.name for f in dataclasses.fields(spec.value)] if spec.value else []
    row = ", ".join(key + pad + rest)
    made = f"V({', '.join(rest)})" if spec.value else f"({', '.join(rest)},)"
    attrs = [f"v.{a}" for a in names] if spec.value else [f"v[{i}]" for i in range(len(rest))]
    packed = f"P({', '.join(key + ['0'] * spec.pad + attrs)})"
    if table.listed and spec.value is None:
        parse = "def parse(rows, out):\n    out.extend(rows)\n"
        pack = "def pack(rows):\n    return b''.join([P(*r) for r in rows])\n"
    elif table.listed:
        parse = (f"def parse(rows, out):\n    out.extend([({', '.join(key)}, {made}) "
                 f"for {row} in rows])\n")
        pack = (f"def pack(rows):\n    return b''.join([{packed} "
                f"for {', '.join(key)}, v in rows])\n")
    else:
        parse = (f"def parse(rows, out):\n    for {row} in rows:\n"
                 f"        out[({', '.join(key)},)] = {made}\n")
        pack = (f"def pack(rows):\n    return b''.join([{packed} "
                f"for ({', '.join(key)},), v in rows.items()])\n")
    scope = {"V": spec.value, "P": spec.struct.pack}
    exec(parse + pack, scope)
    return scope["parse"], scope["pack"]


# ------------------------------------------------------------------ other records
def _parse_info(ctx, payload):
    ctx.session.info = json.loads(bytes(payload))


def _parse_meta(ctx, payload):
    ctx.session.meta = json.loads(bytes(payload))


def _parse_strings(ctx, payload):
    (n,) = struct.unpack_from("<I", payload)
    out, off = [], 4
    raw = bytes(payload)
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", raw, off)
        off += 4
        if off + ln > len(raw):
            raise ValueError("string runs past its record")
        out.append(raw[off:off + ln].decode("utf-8", "surrogatepass"))
        off += ln
    ctx.strings = out


def _pack_strings(strings) -> bytes:
    return struct.pack("<I", len(strings)) + b"".join(
        struct.pack("<I", len(b)) + b for b in
        (t.encode("utf-8", "surrogatepass") for t in strings))


def _parse_functions(ctx, payload):
    s = ctx.strings
    ctx.session.functions = {
        fid: Function(fid, s[fl], line, s[nm], s[qn], KINDS[kind])
        for fid, fl, line, nm, qn, kind in _rows(_FUNC, payload)}


def _pack_functions(session, strings) -> bytes:
    def sid(text):
        return strings.setdefault(text, len(strings))
    return struct.pack("<I", len(session.functions)) + b"".join(
        _FUNC.pack(f.fid, sid(f.filename), f.line, sid(f.name), sid(f.qualname),
                   KINDS.index(f.kind))
        for f in session.functions.values())


def _parse_threads(ctx, payload):
    s = ctx.strings
    ctx.session.threads = {i: Thread(i, ident, nid, ev, s[name])
                           for i, name, ident, nid, ev in _rows(_THREAD, payload)}


def _pack_threads(session, strings) -> bytes:
    return struct.pack("<I", len(session.threads)) + b"".join(
        _THREAD.pack(t.index, strings.setdefault(t.name, len(strings)), t.ident, t.native_id,
                     t.events)
        for t in session.threads.values())


def _parse_stacks(ctx, payload):
    raw = bytes(payload)
    (n,) = struct.unpack_from("<I", raw)
    off, out = 4, {}
    for sid in range(n):
        nf, nn = struct.unpack_from("<II", raw, off)
        off += 8
        words = struct.unpack_from(f"<{nf}Q", raw, off)
        off += 8 * nf
        native = struct.unpack_from(f"<{nn}Q", raw, off)
        off += 8 * nn
        out[sid] = Stack(tuple((w >> 32, w & _LINE_MASK) for w in words), tuple(native),
                         tuple(i for i, w in enumerate(words) if w & _LINE_ENTRY))
    ctx.session.stacks = out


def _pack_stacks(stacks) -> bytes:
    parts = [struct.pack("<I", len(stacks))]
    for sid in range(len(stacks)):
        st = stacks[sid]
        entries = set(st.entries)
        parts.append(struct.pack(f"<II{len(st.frames)}Q{len(st.native)}Q", len(st.frames),
                                 len(st.native),
                                 *(f << 32 | ln | (_LINE_ENTRY if i in entries else 0)
                                   for i, (f, ln) in enumerate(st.frames)), *st.native))
    return b"".join(parts)


def _parse_memstacks(ctx, payload):
    n = struct.unpack_from("<I", payload, 0)[0]
    off, out = 4, {}
    for sid in range(n):
        depth = struct.unpack_from("<I", payload, off)[0]
        off += 4
        words = struct.unpack_from(f"<{depth}Q", payload, off)
        off += 8 * depth
        out[sid] = tuple((w >> 32, w & 0xFFFFFFFF) for w in words)
    ctx.session.memory_stacks = out


def _pack_memstacks(memory_stacks) -> bytes:
    return struct.pack("<I", len(memory_stacks)) + b"".join(
        struct.pack("<I", len(frames)) + b"".join(
            struct.pack("<Q", fid << 32 | line) for fid, line in frames)
        for _, frames in sorted(memory_stacks.items()))


def _parse_memcurve(ctx, payload):
    ctx.session.memory_curve = [
        MemPoint(t / 1e9, rss, heap, hmax, None if fid == NO_FUNCTION else (fid, line))
        for t, rss, heap, hmax, fid, line in _rows(_MEMPOINT, payload)]


def _pack_memcurve(curve) -> bytes:
    return struct.pack("<I", len(curve)) + b"".join(
        _MEMPOINT.pack(round(pt.t * 1e9), pt.rss, pt.heap, pt.heap_max,
                       *(pt.site if pt.site else (NO_FUNCTION, 0)))
        for pt in curve)


def _parse_step(ctx, payload):
    raw = bytes(payload)
    (hlen,) = _STEP_HEADER.unpack_from(raw)
    header = json.loads(raw[4:4 + hlen])
    data = parse_blob(raw[4 + hlen:], ctx.name, type(ctx.session)())
    ctx.session.steps.append(Step(int(header["index"]), header.get("name"),
                                  float(header["start"]), float(header["end"]), data))


# record type -> its parser (into the Session being read); the counter tables
# are TABLE_ROWS'; END ends the stream.
RECORDS = {
    REC_INFO: _parse_info,
    REC_META: _parse_meta,
    REC_STRINGS: _parse_strings,
    REC_FUNCTIONS: _parse_functions,
    REC_THREADS: _parse_threads,
    REC_STACKS: _parse_stacks,
    REC_MEMCURVE: _parse_memcurve,
    REC_MEMSTACKS: _parse_memstacks,
    REC_STEP: _parse_step,
}
