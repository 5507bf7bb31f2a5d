"""Names of native instruction pointers (sampling with --native).

The addresses are only meaningful in the process that recorded them, so this
runs there, when a capture is written: each address's loaded object comes
from dladdr; its function from that object's ELF symbol tables (.symtab and
.dynsym, with sizes, so a static function is not mistaken for the exported one
before it). An address no symbol covers is named by its object, ``[libz.so.1]``.
"""
from __future__ import annotations

import bisect
import os
import struct

from . import _cprof

_tables: dict = {}


def symbolize(ips, return_addresses=()) -> dict:
    """{ip: [function, object path]} for the given addresses. An address in
    `return_addresses` is where a call returns to: it is looked up one byte
    back, inside the calling function."""
    ips = sorted(set(ips))
    ret = set(return_addresses)
    probe = [ip - 1 if ip in ret else ip for ip in ips]
    out = {}
    for ip, at, mod in zip(ips, probe, _cprof.native_modules(probe)):
        if mod is None:
            out[ip] = [f"0x{ip:x}", ""]
            continue
        path, base = mod
        # An unnamed (stripped, static) function: one frame per object, not
        # one per address.
        out[ip] = [_lookup(path, at, base) or f"[{os.path.basename(path)}]", path]
    return out


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
