"""Names of native instruction pointers (sampling with --native).

The addresses are only meaningful in the process that recorded them, so this
runs there, when a capture is written. With elfutils' libdw (the build's
FEATURES has "libdw"), each address is named from the debug information of its
object: function, source file and line, and the functions inlined there as
frames of their own; without debug information, from the object's symbol
tables. C++ and Rust (legacy) names are demangled with the C++ runtime's
__cxa_demangle; Rust v0 names (``_R...``) are left mangled. Without libdw (a
build without its headers), the object's ELF symbol tables are read here
(.symtab and .dynsym, with sizes, so a static function is not mistaken for the
exported one before it): function names only. An address no symbol covers is
named by its object, ``[libz.so.1]``.
"""
from __future__ import annotations

import bisect
import os
import re
import struct

from .. import _cprof

_tables: dict = {}


def symbolize(ips, return_addresses=()) -> dict:
    """{ip: [function, object path, source file, line, outer]} for the given
    addresses: the innermost frame naming the address (an inlined function,
    or the function), its file and line ("" and 0 where unknown), and
    ``outer``: the frames that inlined it, innermost first, each [function,
    file, line]. An address in `return_addresses` is where a call returns to:
    it is looked up one byte back, inside the calling function."""
    ips = sorted(set(ips))
    ret = set(return_addresses)
    probe = [ip - 1 if ip in ret else ip for ip in ips]
    mods = _cprof.native_modules(probe)
    # Named once per process: a capture is named when its session is made and
    # again when it is written, and a listening program is dumped many times.
    # An entry holds while the same object is mapped at the same base.
    mod_of = dict(zip(probe, mods))
    fresh = [at for at, mod in mod_of.items()
             if mod is not None and (at not in _named or _named[at][0] != mod)]
    if fresh:
        if len(_named) + len(fresh) > _NAMED_MAX:
            _named.clear()
        frames = _cprof.native_frames(fresh) if "libdw" in _cprof.FEATURES else None
        for at in fresh:        # frames None: no libdw, the symbol tables name it
            _named[at] = (mod_of[at], frames.get(at) if frames is not None else None,
                          frames is None)
    out = {}
    for ip, at, mod in zip(ips, probe, mods):
        if mod is None:
            out[ip] = [f"0x{ip:x}", "", "", 0, []]
            continue
        path, base = mod
        _, found, no_libdw = _named[at]
        if found:
            named = [[demangle(name), file, line] for name, file, line in found]
            out[ip] = [named[0][0], path, named[0][1], named[0][2], named[1:]]
            continue
        # An unnamed (stripped, static) function: one frame per object, not
        # one per address.
        name = _lookup(path, at, base) if no_libdw else None
        out[ip] = [demangle(name) if name else f"[{os.path.basename(path)}]", path, "", 0, []]
    return out


def symbols_meta(ips, return_addresses) -> dict:
    """A capture's meta["native_symbols"]: {str(ip): symbolize's entry}."""
    return {str(ip): name for ip, name in symbolize(ips, return_addresses).items()}


_RECORD = struct.Struct("<HHI")         # model/codec.py's record header
_REC_STACKS, _REC_MEMNATIVE, _REC_END = 10, 24, 0xFFFF
_MEM_ENTRY = 1 << 63                    # MEMNATIVE: an entry frame's word, not an address


def capture_names(blob) -> dict:
    """symbols_meta of the native addresses in a snapshot's record stream (its
    STACKS and MEMNATIVE records; all but a stack's leaf are return
    addresses), read without building a Session: writing a --native capture
    imports no model (about 35 ms at exit). The blob is the C core's own."""
    ips, returns = set(), set()
    off, end = 0, len(blob)
    while off + _RECORD.size <= end:
        rtype, _, rlen = _RECORD.unpack_from(blob, off)
        off += _RECORD.size
        if rtype == _REC_END:
            break
        at = off + 4
        count = struct.unpack_from("<I", blob, off)[0] if rtype in (_REC_STACKS,
                                                                    _REC_MEMNATIVE) else 0
        for _ in range(count):
            if rtype == _REC_STACKS:
                nframes, nnative = struct.unpack_from("<II", blob, at)
                at += 8 + 8 * nframes
                native = struct.unpack_from(f"<{nnative}Q", blob, at)
                at += 8 * nnative
            else:
                nwords = struct.unpack_from("<I", blob, at)[0]
                native = tuple(w for w in struct.unpack_from(f"<{nwords}Q", blob, at + 4)
                               if not w & _MEM_ENTRY)
                at += 4 + 8 * nwords
            ips.update(native)
            returns.update(native[1:])
        off += rlen
    return symbols_meta(ips, returns) if ips else {}


_named: dict = {}   # probe address -> ((path, base), libdw's frames, named without libdw?)
_NAMED_MAX = 1 << 18


_RUST_HASH = re.compile(r"17h[0-9a-f]{16}E$")
_RUST_ESCAPES = {"$LT$": "<", "$GT$": ">", "$RF$": "&", "$BP$": "*", "$C$": ",",
                 "$SP$": "@", "$u20$": " ", "$u27$": "'", "$u5b$": "[", "$u5d$": "]",
                 "$u7b$": "{", "$u7d$": "}", "$u7e$": "~", "$LP$": "(", "$RP$": ")"}
_demangler: list = []


def demangle(name: str) -> str:
    """A C++ (Itanium ABI) or legacy Rust linkage name made readable; others
    (C names, Rust v0 ``_R`` names) unchanged."""
    if not name.startswith("_Z"):
        return name
    if not _demangler:
        _demangler.append(_find_demangler())
    fn, free = _demangler[0]
    if fn is None:
        return name
    import ctypes
    status = ctypes.c_int(0)
    p = fn(name.encode(), None, None, ctypes.byref(status))
    if not p or status.value != 0:
        return name
    text = ctypes.string_at(p).decode("utf-8", "replace")
    free(p)
    if _RUST_HASH.search(name):             # _ZN...17h<hash>E: a legacy Rust path
        text = re.sub(r"::h[0-9a-f]{16}$", "", text)
        for esc, ch in _RUST_ESCAPES.items():
            text = text.replace(esc, ch)
        text = text.replace("..", "::")
    return text


def _find_demangler():
    """__cxa_demangle of the C++ runtime already loaded (or libstdc++), and free."""
    import ctypes
    for lib in (None, "libstdc++.so.6"):
        try:
            dll = ctypes.CDLL(lib)
            fn = dll.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        return fn, libc.free
    return None, None


def _lookup(path, ip, base):
    table = _tables.get(path)
    if table is None:
        table = _tables[path] = _read_symbols(path)
    absolute, starts, entries = table
    offset = ip if absolute else ip - base
    i = bisect.bisect_right(starts, offset) - 1
    if i >= 0:
        start, size, name = entries[i]
        if start <= offset < start + max(size, 1):
            return name
    return None


def _read_symbols(path):
    """Function symbols of an ELF64 little-endian object: (absolute addresses?,
    sorted starts, entries). A non-PIE executable's symbols are absolute."""
    syms = {}
    absolute = False
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return False, [], []
        absolute = struct.unpack_from("<H", data, 0x10)[0] == 2        # ET_EXEC
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                    for i in range(shnum)]
        for (name, stype, flags, addr, off, size, link, info, align, entsize) in sections:
            if stype not in (2, 11) or entsize == 0:           # SHT_SYMTAB, SHT_DYNSYM
                continue
            stroff = sections[link][4]
            for k in range(size // entsize):
                st_name, st_info, _, _, st_value, st_size = struct.unpack_from(
                    "<IBBHQQ", data, off + k * entsize)
                if st_info & 0xF != 2 or st_value == 0:          # STT_FUNC, defined
                    continue
                end = data.index(b"\0", stroff + st_name)
                syms.setdefault(st_value, (st_value, st_size,
                                           data[stroff + st_name:end].decode("utf-8", "replace")))
    except (OSError, ValueError, struct.error, IndexError):
        return False, [], []
    entries = sorted(syms.values())
    return absolute, [e[0] for e in entries], entries
