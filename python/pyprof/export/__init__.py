"""Exporters: one module per format, each a function of a Session only.

``FORMATS`` maps a format name to (module, default file suffixes). ``export(session,
fmt, path)`` writes a file; ``format_for_path(path)`` picks a format by suffix.
"""
import importlib
import os

from ..errors import PyprofError

FORMATS = {
    "pstats": ("pstats", (".prof", ".pstats", ".pstat", ".out")),
    "cprof": (None, (".cprof",)),
    "callgrind": ("callgrind", (".callgrind", ".cg")),
    "text": ("text", (".txt",)),
    "collapsed": ("collapsed", (".collapsed", ".folded")),
    "speedscope": ("speedscope", (".speedscope.json",)),
    "pprof": ("pprof", (".pb.gz", ".pprof")),
    "html": ("report", (".html", ".htm")),
    "flamegraph": ("flamegraph", (".flame.html",)),
    "memory-svg": ("memcurve", (".svg",)),
    "memory-flamegraph": ("memflame", (".memory.html",)),
    "memory-csv": ("memcsv", (".memory.csv",)),
    "chrome": ("chrome", (".trace.json",)),
}
ALIASES = {"lines": "text", "perfetto": "chrome"}
STACK_FORMATS = ("collapsed", "speedscope", "pprof", "flamegraph")
MEMORY_FORMATS = ("memory-svg", "memory-csv", "memory-flamegraph")


def format_for_path(path, default="pstats") -> str:
    base = os.path.basename(os.fspath(path)).lower()
    if base.startswith("callgrind.out"):
        return "callgrind"
    best, length = default, 0
    for name, (_, suffixes) in FORMATS.items():      # the longest suffix wins (.flame.html)
        for suffix in suffixes:
            if base.endswith(suffix) and len(suffix) > length:
                best, length = name, len(suffix)
    return best


def export(session, fmt: str, path) -> None:
    """Write `session` to `path` in format `fmt` (atomically where the format allows)."""
    fmt = ALIASES.get(fmt, fmt)
    if fmt not in FORMATS:
        raise PyprofError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if fmt in STACK_FORMATS and not (session.info.get("sampling") or session.paths):
        raise PyprofError(f"{fmt} is made of stacks, which this capture does not have: "
                          f"profile with function tracing (the default) or --sample")
    if fmt in MEMORY_FORMATS and not session.info.get("memory"):
        raise PyprofError(f"{fmt} shows memory, which this capture does not have: profile "
                          f"with --memory (or mode='memory')")
    modname = FORMATS[fmt][0]
    if modname is None:
        session.save(path)
        return
    mod = importlib.import_module(f"{__name__}.{modname}")
    mod.write(session, path)
