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
import math
import os
import struct
import zlib
from dataclasses import dataclass

from ..errors import PyprofError
from .tables import (KINDS, MAX_NATIVE_FRAMES, MAX_STACK_FRAMES, NO_FUNCTION, TABLES, CallRow, Counters, Function,
                     InsnCounters, LineCounters, LineMemory, MemCounters, MemExtra, MemPoint, PathNode,
                     SampleCounters, Stack, Step, TASK_STATES, CoroCounters, TaskRow, Thread)
from .names import stable_name
from .validate import RECORD_NAMES, Corrupt, check

MAGIC = b"\x89CPROF\r\n"
FORMAT_MAJOR = 1            # refused above; any minor is read (unknown records skipped)
HEADER = struct.Struct("<8sHHIQI")
RECORD = struct.Struct("<HHI")

REC_INFO, REC_META, REC_STRINGS, REC_FUNCTIONS = 1, 2, 3, 4
REC_THREADS, REC_FSTATS, REC_EDGES, REC_LINES, REC_CALLROWS, REC_END = 5, 6, 7, 8, 9, 0xFFFF
REC_STACKS, REC_SAMPLES, REC_MEMORY, REC_FMEMORY, REC_MEMCURVE, REC_MEMSTACKS = (
    10, 11, 12, 13, 14, 15)
REC_PATHS, REC_STEP, REC_TIMELINE, REC_LINEMEM, REC_MEMEXTRA = 16, 17, 18, 19, 20
REC_TASKS, REC_COROS, REC_TASKSTEPS, REC_MEMNATIVE, REC_INSNS = 21, 22, 23, 24, 25

_FUNC = struct.Struct("<6I")
_TASK = struct.Struct("<6IqqqqQQ")
_TASKSTEP = struct.Struct("<IIqq")
_UNKNOWN = 2**64 - 1
_CORO = struct.Struct("<IIQQqq")
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
    "memory_extra": Rows(REC_MEMEXTRA, struct.Struct("<IIIIQQQQQQ"), 4, 0, MemExtra),
    "lines": Rows(REC_LINES, struct.Struct("<IIIIQq"), 3, 1, LineCounters),
    "callrows": Rows(REC_CALLROWS, struct.Struct("<IIIIQq"), 4, 0, CallRow),
    "line_memory": Rows(REC_LINEMEM, struct.Struct("<IIIIQQqq"), 3, 1, LineMemory),
    "timeline": Rows(REC_TIMELINE, struct.Struct("<IIqq"), 4),
    "instructions": Rows(REC_INSNS, struct.Struct("<8IQqQqQq"), 8, 0, InsnCounters),
}
assert list(TABLE_ROWS) == [t.name for t in TABLES], "one record per counter table"
_TABLE_OF = {TABLE_ROWS[t.name].rtype: t for t in TABLES}
_NAMES = {REC_INFO: "INFO", REC_META: "META", REC_STRINGS: "STRINGS",
          REC_FUNCTIONS: "FUNCTIONS", REC_THREADS: "THREADS", REC_STACKS: "STACKS",
          REC_MEMCURVE: "MEMCURVE", REC_MEMSTACKS: "MEMSTACKS", REC_MEMNATIVE: "MEMNATIVE",
          REC_STEP: "STEP", REC_TASKS: "TASKS", REC_COROS: "COROS", REC_TASKSTEPS: "TASKSTEPS",
          **{TABLE_ROWS[t.name].rtype: RECORD_NAMES[t.name] for t in TABLES}}
# What a STEP's record stream may hold: the counters of the tables steps have.
_STEP_RECORDS = {TABLE_ROWS[t.name].rtype for t in TABLES if t.step}


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
    parse_blob(blob, name, session, whole=True)
    session.final = bool(flags & 1)
    return session


def read_meta(path, limit=1 << 22) -> dict:
    """The META record of a .cprof file ({} if it has none), decompressing only
    the stream's start (INFO and META come first): a listing of many captures
    reads each one's META without the rest. PyprofError on any problem."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
            if len(head) < HEADER.size or not head.startswith(MAGIC):
                raise PyprofError(f"{path} is not a pyprof capture file")
            if HEADER.unpack(head)[1] > FORMAT_MAJOR:
                raise PyprofError(f"{path} was written by a newer pyprof")
            d, blob = zlib.decompressobj(), b""
            while len(blob) < limit:
                off = 0
                while off + RECORD.size <= len(blob):
                    rtype, _, rlen = RECORD.unpack_from(blob, off)
                    if rtype not in (REC_INFO, REC_META):
                        return {}
                    if off + RECORD.size + rlen > len(blob):
                        break
                    if rtype == REC_META:
                        payload = blob[off + RECORD.size:off + RECORD.size + rlen]
                        meta = json.loads(payload)
                        if not isinstance(meta, dict):
                            raise ValueError("META is not a JSON object")
                        return meta
                    off += RECORD.size + rlen
                chunk = f.read(1 << 16)
                if not chunk or d.eof:
                    break
                blob += d.decompress(chunk)
    except OSError as e:
        raise PyprofError(f"cannot read {path}: {e.strerror or e}") from None
    except (zlib.error, ValueError, RecursionError) as e:
        raise PyprofError(f"{path} is corrupt ({e})") from None
    raise PyprofError(f"{path} is truncated or corrupt (no META within its first records)")


def write_file(path, session) -> None:
    """Write `session` as a .cprof file, atomically (the C core's writer)."""
    from .. import _cprof
    try:
        blob = pack_blob(session)
    except (struct.error, OverflowError) as e:  # counters summed past 64 bits (merge)
        raise PyprofError(f"cannot write {os.fspath(path)}: a value does not fit the capture "
                          f"format ({e})") from None
    try:
        _cprof.write_blob(os.fspath(path), blob, session.final)
    except OSError as e:
        raise PyprofError(str(e)) from None


# ------------------------------------------------------------------ the record stream
class _Reading:
    """What parsing one record stream shares between records."""

    def __init__(self, session, name):
        self.session = session
        self.name = name
        self.strings: list = []
        self.rname = ""             # the record being read, for messages


def parse_blob(blob: bytes, name, session, whole=False):
    """Parse the record stream the C core produces (Profiler.snapshot()) into
    `session`, check that its records agree (model/validate.py), then rebuild
    its derived tables (Session.reindex). PyprofError naming `name` and the
    record on any problem. A stream of counters only (a live step's, without
    FUNCTIONS) has its ids checked where it is added to its capture; a
    ``whole`` capture (a file) must have its FUNCTIONS."""
    try:
        seen = _parse_stream(blob, _Reading(session, name), step=False)
        if REC_FUNCTIONS not in seen:
            if whole:
                raise Corrupt("it has no FUNCTIONS record")
            session.reindex()
            return session
        check(session)
        for st in session.steps:
            try:
                check(st.data, whole=session)
            except Corrupt as e:
                raise Corrupt(f"STEP {st.index}: {e}") from None
    except Corrupt as e:
        raise PyprofError(f"{name} is corrupt: {e}") from None
    session.reindex()
    return session


def _parse_stream(blob, ctx, step):
    session = ctx.session
    mv = memoryview(blob)
    off, end_seen, seen = 0, False, set()
    try:
        while off < len(blob):
            rtype, _, rlen = RECORD.unpack_from(blob, off)
            off += RECORD.size
            payload = mv[off:off + rlen]
            ctx.rname = _NAMES.get(rtype, f"record type {rtype}")
            if len(payload) != rlen:
                raise Corrupt(f"{ctx.rname} runs past the end of the stream "
                              f"({rlen} bytes, {len(payload)} left)")
            off += rlen
            if rtype == REC_END:
                end_seen = True
                break
            if rtype in seen and rtype != REC_STEP:
                raise Corrupt(f"{ctx.rname} appears twice")
            seen.add(rtype)
            if step and rtype in _NAMES and rtype not in _STEP_RECORDS:
                raise Corrupt(f"{ctx.rname} inside a step's counters")
            table = _TABLE_OF.get(rtype)
            if table is not None:
                _parse_table(table, payload, session, ctx.rname)
            elif rtype in RECORDS:
                RECORDS[rtype](ctx, payload)
            # Unknown record types come from newer minor versions: skip them.
    except (struct.error, ValueError, IndexError, KeyError, UnicodeDecodeError,
            RecursionError) as e:
        raise Corrupt(f"{ctx.rname} cannot be read ({type(e).__name__}: {e})") from None
    if not end_seen:
        if step:
            raise Corrupt("the counters end without their END record")
        raise PyprofError(f"{ctx.name} is truncated or corrupt (no end record)")
    if off != len(blob) and step:
        raise Corrupt(f"{len(blob) - off} bytes follow the counters' END record")
    return seen


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
        if session.memory_native:
            out.append(record(REC_MEMNATIVE, _pack_memnative(session)))
    out.extend(table_records(session, info, step=False))
    if session.tasks or (info.get("sampling") or {}).get("async") or info.get("asyncio"):
        out.append(record(REC_TASKS, _pack_tasks(session.tasks)))
    if session.task_steps:
        out.append(record(REC_TASKSTEPS, struct.pack("<I", len(session.task_steps)) + b"".join(
            _TASKSTEP.pack(task, 0, start, dur) for task, start, dur in session.task_steps)))
    if session.coroutines:
        out.append(record(REC_COROS, struct.pack("<I", len(session.coroutines)) + b"".join(
            _CORO.pack(fid, 0, c.instances, c.ended, c.wall, c.open_wall)
            for fid, c in session.coroutines.items())))
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
def _count(payload, rname, least: int) -> int:
    """The u32 count opening a record, when each item takes at least `least` bytes."""
    if len(payload) < 4:
        raise Corrupt(f"{rname} has {len(payload)} bytes, too few for its count")
    (n,) = struct.unpack_from("<I", payload)
    if n * least > len(payload) - 4:
        raise Corrupt(f"{rname} counts {n} rows but has {len(payload)} bytes")
    return n


def _rows(st: struct.Struct, payload, rname):
    n = _count(payload, rname, st.size)
    if len(payload) != 4 + n * st.size:
        raise Corrupt(f"{rname} counts {n} rows of {st.size} bytes but has "
                      f"{len(payload) - 4} bytes of rows")
    return n, st.iter_unpack(payload[4:])


def _parse_table(table, payload, session, rname) -> None:
    n, rows = _rows(TABLE_ROWS[table.name].struct, payload, rname)
    out = getattr(session, table.name)
    _code(table)[0](rows, out)
    if len(out) != n:
        raise Corrupt(f"{rname} has {n} rows but {n - len(out)} of them repeat the key of "
                      f"an earlier row")


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
def _json_object(ctx, payload) -> dict:
    try:
        obj = json.loads(bytes(payload))
    except (ValueError, RecursionError) as e:
        raise Corrupt(f"{ctx.rname} is not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise Corrupt(f"{ctx.rname} is not a JSON object")
    return obj


def _parse_info(ctx, payload):
    ctx.session.info = _json_object(ctx, payload)


def _parse_meta(ctx, payload):
    ctx.session.meta = _json_object(ctx, payload)


def _parse_strings(ctx, payload):
    n = _count(payload, "STRINGS", 4)
    out, off = [], 4
    raw = bytes(payload)
    for i in range(n):
        (ln,) = struct.unpack_from("<I", raw, off)
        off += 4
        if off + ln > len(raw):
            raise Corrupt(f"STRINGS string {i} runs past the record")
        out.append(raw[off:off + ln].decode("utf-8", "surrogatepass"))
        off += ln
    if off != len(raw):
        raise Corrupt(f"STRINGS has {len(raw) - off} bytes after its {n} strings")
    ctx.strings = out


def _string(ctx, rname, row, index):
    if index >= len(ctx.strings):
        raise Corrupt(f"{rname} row {row} names string {index}, but STRINGS has "
                      f"{len(ctx.strings)}" + ("" if ctx.strings else " (or comes later)"))
    return ctx.strings[index]


def _pack_strings(strings) -> bytes:
    return struct.pack("<I", len(strings)) + b"".join(
        struct.pack("<I", len(b)) + b for b in
        (t.encode("utf-8", "surrogatepass") for t in strings))


def _parse_functions(ctx, payload):
    s = ctx.strings
    n, rows = _rows(_FUNC, payload, "FUNCTIONS")
    rows = list(rows)
    ns, nk = len(s), len(KINDS)
    if rows and (max(max(r[1], r[3], r[4]) for r in rows) >= ns
                 or max(r[5] for r in rows) >= nk):
        for i, (fid, fl, line, nm, qn, kind) in enumerate(rows):
            for index in (fl, nm, qn):
                _string(ctx, "FUNCTIONS", i, index)
            if kind >= nk:
                raise Corrupt(f"FUNCTIONS row {i} has kind {kind} (at most {nk - 1})")
    # a C function's qualname is its stable name (the name stays cProfile's)
    out = ctx.session.functions = {
        fid: Function(fid, s[fl], line, s[nm], stable_name(s[qn]) if kind else s[qn],
                      KINDS[kind])
        for fid, fl, line, nm, qn, kind in rows}
    if len(out) != n:
        raise Corrupt(f"FUNCTIONS has {n} rows but {n - len(out)} of them repeat the id of "
                      f"an earlier row")
    if NO_FUNCTION in out:
        raise Corrupt(f"FUNCTIONS has function id {NO_FUNCTION} (it means no function)")


def _pack_functions(session, strings) -> bytes:
    def sid(text):
        return strings.setdefault(text, len(strings))
    return struct.pack("<I", len(session.functions)) + b"".join(
        _FUNC.pack(f.fid, sid(f.filename), f.line, sid(f.name), sid(f.qualname),
                   KINDS.index(f.kind))
        for f in session.functions.values())


def _parse_threads(ctx, payload):
    n, rows = _rows(_THREAD, payload, "THREADS")
    rows = list(rows)
    out = ctx.session.threads = {i: Thread(i, ident, nid, ev, _string(ctx, "THREADS", row, name))
                                 for row, (i, name, ident, nid, ev) in enumerate(rows)}
    if len(out) != n:
        raise Corrupt(f"THREADS has {n} rows but {n - len(out)} of them repeat the index of "
                      f"an earlier row")


def _pack_threads(session, strings) -> bytes:
    return struct.pack("<I", len(session.threads)) + b"".join(
        _THREAD.pack(t.index, strings.setdefault(t.name, len(strings)), t.ident, t.native_id,
                     t.events)
        for t in session.threads.values())


class _Frames(dict):
    """A STACKS record's frame words -> (fid, line). Stacks share most of
    their frames: each distinct word is decoded once, and a stack's frames are
    looked up with no Python code per frame (a sampled capture holds hundreds
    of thousands of frames)."""

    def __init__(self):
        super().__init__()
        self.marked = set()         # the words with the entry bit (--native)

    def __missing__(self, w):
        if w & _LINE_ENTRY:
            self.marked.add(w)
        f = self[w] = (w >> 32, w & _LINE_MASK)
        return f


def _parse_stacks(ctx, payload):
    raw = bytes(payload)
    n = _count(raw, "STACKS", 8)
    off, out = 4, {}
    frames = _Frames()
    frame, marked = frames.__getitem__, frames.marked
    for sid in range(n):
        nf, nn = struct.unpack_from("<II", raw, off)
        off += 8
        if off + 8 * (nf + nn) > len(raw):
            raise Corrupt(f"STACKS stack {sid} has {nf} + {nn} frames, more than the "
                          f"record holds")
        if nf > MAX_STACK_FRAMES or nn > MAX_NATIVE_FRAMES:
            raise Corrupt(f"STACKS stack {sid} has {nf} Python and {nn} native frames (at "
                          f"most {MAX_STACK_FRAMES} and {MAX_NATIVE_FRAMES})")
        words = struct.unpack_from(f"<{nf}Q", raw, off)
        off += 8 * nf
        native = struct.unpack_from(f"<{nn}Q", raw, off)
        off += 8 * nn
        decoded = tuple(map(frame, words))      # first: it fills `marked`
        entries = ()
        if marked and not marked.isdisjoint(words):
            entries = tuple(i for i, w in enumerate(words) if w & _LINE_ENTRY)
        out[sid] = Stack(decoded, native, entries)
    if off != len(raw):
        raise Corrupt(f"STACKS has {len(raw) - off} bytes after its {n} stacks")
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
    n = _count(payload, "MEMSTACKS", 4)
    off, out = 4, {}
    for sid in range(n):
        depth = struct.unpack_from("<I", payload, off)[0]
        off += 4
        if off + 8 * depth > len(payload):
            raise Corrupt(f"MEMSTACKS stack {sid} has {depth} frames, more than the record "
                          f"holds")
        if depth > MAX_STACK_FRAMES:
            raise Corrupt(f"MEMSTACKS stack {sid} has {depth} frames (at most "
                          f"{MAX_STACK_FRAMES})")
        words = struct.unpack_from(f"<{depth}Q", payload, off)
        off += 8 * depth
        out[sid] = tuple((w >> 32, w & 0xFFFFFFFF) for w in words)
    if off != len(payload):
        raise Corrupt(f"MEMSTACKS has {len(payload) - off} bytes after its {n} stacks")
    ctx.session.memory_stacks = out


def _pack_memstacks(memory_stacks) -> bytes:
    return struct.pack("<I", len(memory_stacks)) + b"".join(
        struct.pack("<I", len(frames)) + b"".join(
            struct.pack("<Q", fid << 32 | line) for fid, line in frames)
        for _, frames in sorted(memory_stacks.items()))


_MEM_ENTRY = 1 << 63


def _parse_memnative(ctx, payload):
    # after MEMSTACKS (the writers' order): per stack, its native frames (leaf
    # first) and its entry frames (1<<63 | index, root first)
    raw = bytes(payload)
    n = _count(raw, "MEMNATIVE", 4)
    off, out = 4, {}
    for sid in range(n):
        count = struct.unpack_from("<I", raw, off)[0]
        off += 4
        if off + 8 * count > len(raw):
            raise Corrupt(f"MEMNATIVE stack {sid} has {count} words, more than the record holds")
        if count > MAX_NATIVE_FRAMES + MAX_STACK_FRAMES:
            raise Corrupt(f"MEMNATIVE stack {sid} has {count} words (at most "
                          f"{MAX_NATIVE_FRAMES + MAX_STACK_FRAMES})")
        words = struct.unpack_from(f"<{count}Q", raw, off)
        off += 8 * count
        ips = tuple(w for w in words if not w & _MEM_ENTRY)
        if ips:
            out[sid] = (ips, tuple(w & ~_MEM_ENTRY for w in words if w & _MEM_ENTRY))
    if off != len(raw):
        raise Corrupt(f"MEMNATIVE has {len(raw) - off} bytes after its {n} stacks")
    ctx.session.memory_native = out


def _pack_memnative(session) -> bytes:
    parts = [struct.pack("<I", len(session.memory_stacks))]
    for sid in sorted(session.memory_stacks):
        ips, entries = session.memory_native.get(sid, ((), ()))
        words = (*ips, *(_MEM_ENTRY | i for i in entries))
        parts.append(struct.pack(f"<I{len(words)}Q", len(words), *words))
    return b"".join(parts)


def _parse_memcurve(ctx, payload):
    ctx.session.memory_curve = [
        MemPoint(t / 1e9, rss, heap, hmax, None if fid == NO_FUNCTION else (fid, line))
        for t, rss, heap, hmax, fid, line in _rows(_MEMPOINT, payload, "MEMCURVE")[1]]


def _pack_memcurve(curve) -> bytes:
    return struct.pack("<I", len(curve)) + b"".join(
        _MEMPOINT.pack(round(pt.t * 1e9), pt.rss, pt.heap, pt.heap_max,
                       *(pt.site if pt.site else (NO_FUNCTION, 0)))
        for pt in curve)


def _parse_step(ctx, payload):
    raw = bytes(payload)
    nth = len(ctx.session.steps)
    if len(raw) < 4:
        raise Corrupt(f"STEP {nth} is too short for its header")
    (hlen,) = _STEP_HEADER.unpack_from(raw)
    if 4 + hlen > len(raw):
        raise Corrupt(f"STEP {nth} has a header of {hlen} bytes, more than the record holds")
    try:
        header = json.loads(raw[4:4 + hlen])
        index, name = header["index"], header.get("name")
        start, end = float(header["start"]), float(header["end"])
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        raise Corrupt(f"STEP {nth} has a bad header ({type(e).__name__}: {e})") from None
    if not (isinstance(index, int) and not isinstance(index, bool) and abs(index) < 2**53
            and (name is None or isinstance(name, str))
            and math.isfinite(start) and math.isfinite(end)):
        raise Corrupt(f"STEP {nth} has a bad header ({header})")
    data = type(ctx.session)()
    try:
        _parse_stream(raw[4 + hlen:], _Reading(data, ctx.name), step=True)
    except Corrupt as e:
        raise Corrupt(f"STEP {index}: {e}") from None
    ctx.session.steps.append(Step(index, name, start, end, data))


def _parse_tasks(ctx, payload):
    n, rows = _rows(_TASK, payload, "TASKS")
    out = ctx.session.tasks
    for i, (fid, coro, cfid, cline, thread, state, start, end, run, wait, samples, steps) in \
            enumerate(rows):
        if state >= len(TASK_STATES):
            raise Corrupt(f"TASKS row {i} has state {state} (at most {len(TASK_STATES) - 1})")
        out.append(TaskRow(fid, None if coro == NO_FUNCTION else coro,
                           None if cfid == NO_FUNCTION else (cfid, cline),
                           None if thread == NO_FUNCTION else thread, TASK_STATES[state],
                           start, None if end < 0 else end, run, wait, samples,
                           None if steps == _UNKNOWN else steps))


def _parse_tasksteps(ctx, payload):
    n, rows = _rows(_TASKSTEP, payload, "TASKSTEPS")
    ctx.session.task_steps.extend((task, start, dur) for task, _, start, dur in rows)


def _parse_coros(ctx, payload):
    n, rows = _rows(_CORO, payload, "COROS")
    out = ctx.session.coroutines
    for fid, _, instances, ended, wall, open_wall in rows:
        if fid in out:
            raise Corrupt(f"COROS has function {fid} twice")
        out[fid] = CoroCounters(instances, ended, wall, open_wall)


def _pack_tasks(tasks) -> bytes:
    def none(v):
        return NO_FUNCTION if v is None else v
    return struct.pack("<I", len(tasks)) + b"".join(
        _TASK.pack(t.fid, none(t.coro_fid), none(t.created and t.created[0]),
                   t.created[1] if t.created else 0, none(t.thread),
                   TASK_STATES.index(t.state), t.start, -1 if t.end is None else t.end,
                   t.running, t.awaiting, t.samples, _UNKNOWN if t.steps is None else t.steps)
        for t in tasks)


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
    REC_MEMNATIVE: _parse_memnative,
    REC_STEP: _parse_step,
    REC_TASKS: _parse_tasks,
    REC_COROS: _parse_coros,
    REC_TASKSTEPS: _parse_tasksteps,
}
