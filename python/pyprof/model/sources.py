"""Source files of profiled code, read as they are now (the capture holds a
hash of each file as it was, to tell when the text shown may not match)."""
from __future__ import annotations

import hashlib
import linecache


def read_source(filename, expected_hash):
    """(lines of the file, note or None), read with the file's own encoding."""
    try:
        with open(filename, "rb") as f:
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
