"""Source files of profiled code, read as they are now (the capture holds a
hash of each file as it was, to tell when the text shown may not match)."""
from __future__ import annotations

import hashlib
import linecache
import os
import stat


MAX_SOURCE_BYTES = 64 << 20
MAX_SPAN = 2000


def read_source(filename, expected_hash):
    """(lines of the file, note or None), read with the file's own encoding.
    Only a regular file is read (a capture may name /dev/zero or a FIFO)."""
    if "\0" in filename:
        return [], f"source not available: {filename!r} is not a file name"
    try:
        with open(filename, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
                return [], f"source not shown: {filename} is not a regular file of at most " \
                           f"{MAX_SOURCE_BYTES >> 20} MiB"
            data = f.read()
    except OSError as e:
        cached = linecache.getlines(filename)
        if cached:              # IPython's cells and other code without a file on disk
            return cached, None
        return [], f"source not available: cannot read {filename} ({e.strerror or e})"
    note = None
    if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
        note = (f"{filename} has changed since it was profiled: the text shown may not "
                f"match the numbers")
    linecache.checkcache(filename)
    return linecache.getlines(filename), note


def line_span(first, last, data_lines, nsource):
    """The line numbers a table of lines first..last shows: all of them when the
    span fits in the source file or is short; else the file's lines and those
    with data (a capture naming line 2**31 must not make 2**31 rows)."""
    if last - first < max(nsource, MAX_SPAN):
        return range(first, last + 1)
    return sorted({ln for ln in data_lines if first <= ln <= last}
                  | set(range(first, min(last, nsource) + 1)))
