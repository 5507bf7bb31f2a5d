"""Exporters: one module per format, each a function of a Session only.

``FORMATS`` maps a format name to (module, default file suffixes). ``export(session,
fmt, path)`` writes a file; ``format_for_path(path)`` picks a format by suffix.
"""
from __future__ import annotations

import importlib
import os

from ..errors import PyprofError

FORMATS = {
    "pstats": ("pstats", (".prof", ".pstats", ".pstat", ".out")),
    "cprof": (None, (".cprof",)),
}


def format_for_path(path, default="pstats") -> str:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    for name, (_, suffixes) in FORMATS.items():
        if suffix in suffixes:
            return name
    return default


def export(session, fmt: str, path) -> None:
    """Write `session` to `path` in format `fmt` (atomically where the format allows)."""
    if fmt not in FORMATS:
        raise PyprofError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    modname = FORMATS[fmt][0]
    if modname is None:
        session.save(path)
        return
    mod = importlib.import_module(f"{__name__}.{modname}")
    mod.write(session, path)
