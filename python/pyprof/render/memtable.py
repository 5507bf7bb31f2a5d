"""Memory tables: bytes per function and per line (docs/memory.md).

The line table has memory_profiler's layout, with exact figures:

    Memory unit: KiB
    File: /abs/app.py
    Function: load at line 12    allocated 9,766.1 KiB in 2,001 blocks, net 4,883.0 KiB

    Line #    Mem usage    Increment    Allocated  Occurrences  Line Contents
    ===================================================================================
        13       4883.0       4883.0       4883.0        2,001      rows = [bytes(2500) ...

Increment is the line's net bytes (allocated there and still live at the end);
Mem usage the function's net bytes from its first line down to this one;
Allocated all bytes allocated on the line; Occurrences the blocks allocated.
With line tracing the combined layout is used instead:
``Line #  Hits  Time  % Time  Alloc  Net  Peak  Self alloc  Self net  Line Contents``:
Alloc, Net (memory_profiler's Increment) and Peak count what the thread
allocated and freed while the line ran, callees included, like Time; the self
columns what the line's own code allocated (a capture without those inclusive
figures, older than format 1.5, shows ``Alloc  Net  Peak`` of the line's own
blocks, as it was written).
"""
from __future__ import annotations

import bisect
import os

from ..model.session import MemCounters, MemExtra
from ..model.sources import line_span, read_source
from .units import byte_unit

def _num(value, size):
    return f"{value:,}" if size == 1 else f"{value / size:,.1f}"


_ZERO = MemExtra()


def _extras(session):
    """(native, temporary): whether --native-allocs and --temporary were recorded."""
    info = session.info.get("memory", {})
    return bool(info.get("native_allocs")), bool(info.get("temporary"))


def functions(session) -> list:
    """One dict per function that allocated, largest allocation first:
    ``{"fid", "function", "mem": MemCounters, "peak", "residual", "lines"}``
    (peak and residual: bytes, with function tracing, else None)."""
    lines = session.memory_lines()
    ext = session.memory_ext_lines()
    peaks = session.function_peaks()
    per: dict = {}
    for (fid, line), c in lines.items():
        per.setdefault(fid, {})[line] = c
    out = []
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for fid, by_line in per.items():
        if session.functions[fid].filename.startswith(own + os.sep):
            continue                    # the CLI runner's own frames
        total, extra = MemCounters(), MemExtra()
        for line, c in by_line.items():
            total.add(c)
            extra.add(ext.get((fid, line), _ZERO))
        peak, residual = peaks.get(fid, (None, None))
        out.append({"fid": fid, "function": session.functions[fid], "mem": total,
                    "peak": peak, "residual": residual, "lines": by_line, "extra": extra,
                    "line_extra": {line: ext[fid, line] for line in by_line if (fid, line) in ext}})
    out.sort(key=lambda f: (-f["mem"].alloc_bytes, f["function"].filename, f["function"].line))
    return out


def _inclusive(session, funcs) -> dict:
    """Line targets' memory with callees, {fid: {line: LineMemory}}; a target
    that allocated nothing itself joins `funcs` (empty own figures)."""
    out: dict = {}
    for (fid, line), c in session.line_memory_totals().items():
        out.setdefault(fid, {})[line] = c
    known = {f["fid"] for f in funcs}
    for fid in out.keys() - known:
        funcs.append({"fid": fid, "function": session.functions[fid], "mem": MemCounters(),
                      "peak": session.function_peaks().get(fid, (None, None))[0],
                      "residual": None, "lines": {}, "extra": MemExtra(),
                      "line_extra": {}})
    return out


def _line_targets(session):
    """With line tracing, the line targets that ran (the decorated functions,
    --lines-of, --lines-all), as the line tables for time pick them; else None."""
    if not session.info.get("lines"):
        return None
    return {fid for (fid, line), c in session.line_totals().items() if c.hits}


def _elsewhere(session):
    """Bytes allocated outside any Python line, by reason."""
    out = {}
    for (fid, line, kind), c in session.memory.items():
        if kind != "line":
            out.setdefault(kind, MemCounters()).add(c)
    return out


def write_summary(session, out):
    info = session.info.get("memory", {})
    unit, size = byte_unit(max(info.get("peak_bytes", 0), info.get("allocated_bytes", 0)))
    sampled = info.get("mode") == "sampled"
    blocks = (f"from {info.get('live_blocks', 0):,} sampled blocks" if sampled
              else f"in {info.get('live_blocks', 0):,} blocks")
    out.write(f"Traced memory ({unit}): peak {_num(info.get('peak_bytes', 0), size)}, "
              f"allocated {_num(info.get('allocated_bytes', 0), size)}, "
              f"still live at the end {_num(info.get('current_bytes', 0), size)} {blocks}\n")
    if sampled:
        r = info.get("sample_bytes", 0)
        out.write(f"  sampled: each byte picked with probability 1/R, R = {r:,}; every figure "
                  f"is an estimate (standard error about sqrt(R/B) for B bytes)\n")
    rss_peak, rss_end = info.get("rss_peak_bytes", 0), info.get("rss_end_bytes", 0)
    if rss_end:
        gap = rss_end - info.get("current_bytes", 0)
        out.write(f"Process ({unit}): peak RSS {_num(rss_peak, size)} (the high-water mark); "
                  f"RSS at the end {_num(rss_end, size)}, of which traced live "
                  f"{_num(info.get('current_bytes', 0), size)}: {_num(gap, size)} held by the "
                  f"interpreter and libraries beyond what Python still uses (docs/memory.md)\n")
    native, temporary = _extras(session)
    e = MemExtra()
    for x in session.memory_ext.values() if native or temporary else ():
        e.add(x)
    if native:
        out.write(f"  of which allocated by C code (malloc, mmap: --native-allocs): "
                  f"{_num(e.native_alloc_bytes, size)} {unit} in {e.native_alloc_count:,} "
                  f"blocks, still live {_num(e.native_net_bytes, size)} {unit}\n")
    if temporary:
        out.write(f"  temporary allocations (freed by their thread within "
                  f"{info['temporary']:,} of its allocations): {e.temp_count:,} blocks, "
                  f"{_num(e.temp_bytes, size)} {unit}\n")
    for kind, c in sorted(_elsewhere(session).items()):
        what = {"gil-released": "by threads that had released the GIL or run no Python",
                "no-frame": "with no Python frame running"}.get(kind, kind)
        out.write(f"  not on a Python line: {_num(c.alloc_bytes, size)} {unit} allocated "
                  f"{what}, net {_num(c.net_bytes, size)}\n")
    if info.get("dropped_blocks"):
        out.write(f"  warning: pyprof ran out of memory for its tables: {info['dropped_blocks']:,} "
                  f"blocks were not recorded (or their frees not charged); figures are partial\n")
    if not info.get("hooks_linked", True):
        out.write("  warning: allocations stopped reaching pyprof's hooks during the run "
                  "(another allocator hook was removed under them): figures are partial\n")


def write_functions(session, out, limit=30):
    """The function table: allocated, freed, net, and with tracing peak and
    residual per function, largest allocation first (with line tracing, the
    line targets' rows only)."""
    funcs = functions(session)
    write_summary(session, out)
    targets = _line_targets(session)
    if targets is not None:
        funcs = [f for f in funcs if f["fid"] in targets]
        if not targets:
            out.write("\nNo line was profiled: no line target ran (decorate functions with "
                      "@profile, or use --lines-of / --lines-all).\n")
            return
        if not funcs:
            out.write("\nNo line target allocated on its own lines.\n")
            return
    if not funcs:
        out.write("\nNo allocation on a Python line was recorded.\n")
        return
    with_peaks = any(f["peak"] is not None for f in funcs)
    largest = max(max(f["mem"].alloc_bytes, f["peak"] or 0) for f in funcs)
    unit, size = byte_unit(largest)
    native, temporary = _extras(session)
    head = f"{'Allocated':>12} {'Blocks':>10} {'Freed':>12} {'Net':>12}"
    if native:
        head += f" {'Native':>12}"
    if temporary:
        head += f" {'Temporary':>10}"
    if with_peaks:
        head += f" {'Peak':>12} {'Residual':>12}"
    out.write(f"\nMemory per function ({unit}), largest allocation first:\n\n"
              f"{head}  Function\n")
    for f in funcs[:limit]:
        m, fn = f["mem"], f["function"]
        row = (f"{_num(m.alloc_bytes, size):>12} {m.alloc_count:>10,} "
               f"{_num(m.free_bytes, size):>12} {_num(m.net_bytes, size):>12}")
        if native:
            row += f" {_num(f['extra'].native_alloc_bytes, size):>12}"
        if temporary:
            row += f" {f['extra'].temp_count:>10,}"
        if with_peaks:
            row += (f" {_num(f['peak'], size) if f['peak'] is not None else '':>12}"
                    f" {_num(f['residual'], size) if f['residual'] is not None else '':>12}")
        out.write(f"{row}  {fn.qualname} ({os.path.basename(fn.filename)}:{fn.line})\n")
    if len(funcs) > limit:
        out.write(f"... and {len(funcs) - limit} more functions\n")


def write_lines(session, out, limit=10, share=0.01):
    """Line tables of the functions that allocated most, at most `limit`, each
    with at least `share` of all bytes allocated or still live (memory_profiler's
    layout); with line tracing, of every line target that ran, time and memory
    side by side, as the line tables for time. Runs of more than three lines
    without data are shown as one "..." line."""
    funcs = functions(session)
    total_alloc = sum(f["mem"].alloc_bytes for f in funcs)
    total_net = sum(abs(f["mem"].net_bytes) for f in funcs)
    timed = bool(session.info.get("lines"))
    native, temporary = _extras(session) if not timed else (False, False)
    inclusive = _inclusive(session, funcs) if timed else {}
    for f in funcs:
        f["incl"] = inclusive.get(f["fid"], {})

    def size_of(f):         # a line target by its lines with callees, others by their own
        own = (f["mem"].alloc_bytes, abs(f["mem"].net_bytes))
        if not f["incl"]:
            return own
        return (max(own[0], max(c.alloc_bytes for c in f["incl"].values())),
                max(own[1], max(abs(c.net_bytes) for c in f["incl"].values())))

    targets = _line_targets(session)
    if targets is not None:
        known = {f["fid"] for f in funcs}
        peaks = session.function_peaks()
        funcs += [{"fid": fid, "function": session.functions[fid], "mem": MemCounters(),
                   "peak": peaks.get(fid, (None, None))[0], "residual": None, "lines": {},
                   "incl": {}, "extra": MemExtra(), "line_extra": {}}
                  for fid in targets - known]
        funcs = [f for f in funcs if f["fid"] in targets]
        funcs.sort(key=lambda f: (f["function"].filename, f["function"].line))
    else:
        funcs = [f for f in funcs if size_of(f)[0] >= share * total_alloc
                 or size_of(f)[1] >= share * max(total_net, 1)]
        funcs.sort(key=lambda f: -size_of(f)[0])
        funcs = funcs[:limit]
    if not funcs:
        return
    hits = session.line_totals() if timed else {}
    cumulative = session.function_totals() if timed else {}
    scale = session.time_unit / 1e-6
    largest = max([max(abs(c.net_bytes), c.alloc_bytes) for f in funcs
                   for c in f["lines"].values()]
                  + [max(abs(c.net_bytes), c.alloc_bytes, c.peak_bytes) for f in funcs
                     for c in f["incl"].values()], default=0)
    unit, size = byte_unit(largest)
    blank = f"{'':>11}"
    out.write(f"Memory unit: {unit}" + ("; time unit: 1e-06 s\n\n" if timed else "\n\n"))
    hashes = session.meta.get("sources", {})
    for f in funcs:
        fn, m = f["function"], f["mem"]
        src, note = read_source(fn.filename, hashes.get(fn.filename))
        first = min(fn.line, min(f["lines"] or f["incl"] or [fn.line]))
        last = max(f["lines"] or f["incl"] or [fn.line])
        timed_lines = {line: c for (fid, line), c in hits.items() if fid == f["fid"]}
        if timed_lines:
            last = max(last, max(timed_lines))
        summary = (f"allocated {_num(m.alloc_bytes, size)} {unit} in {m.alloc_count:,} blocks, "
                   f"net {_num(m.net_bytes, size)} {unit}")
        if f["peak"] is not None:
            summary += f", peak {_num(f['peak'], size)} {unit}"
        out.write(f"File: {fn.filename}\nFunction: {fn.qualname} at line {fn.line}    "
                  f"{summary}\n")
        if note:
            out.write(f"Note: {note}\n")
        if timed and inclusive:
            head = (f"{'Line #':>6} {'Hits':>9} {'Time':>12} {'% Time':>7} {'Alloc':>11} "
                    f"{'Net':>11} {'Peak':>11} {'Self alloc':>11} {'Self net':>11}  "
                    f"Line Contents")
        elif timed:
            head = (f"{'Line #':>6} {'Hits':>9} {'Time':>12} {'% Time':>7} {'Alloc':>11} "
                    f"{'Net':>11} {'Peak':>11}  Line Contents")
        else:
            head = (f"{'Line #':>6} {'Mem usage':>12} {'Increment':>12} {'Allocated':>12} "
                    f"{'Occurrences':>12}" + (f" {'Native':>12}" if native else "")
                    + (f" {'Temporary':>10}" if temporary else "") + "  Line Contents")
        out.write("\n" + head + "\n" + "=" * len(head) + "\n")
        total_time = cumulative[f["fid"]].total if f["fid"] in cumulative else 0
        running = 0
        shown = set(f["lines"]) | set(timed_lines) | set(f["incl"]) | {first}
        gap = 0
        order = sorted(shown)
        for line in line_span(first, last, shown, len(src)):
            if line not in shown:
                gap += 1
                k = bisect.bisect_left(order, line)
                nxt = order[k] if k < len(order) else last + 1
                if (nxt - line) + gap - 1 > 3:          # a long run: one marker for it
                    if gap == 1:
                        out.write(f"{'...':>6}\n")
                    continue
            else:
                gap = 0
            text = src[line - 1].rstrip("\r\n") if 0 < line <= len(src) else ""
            c = f["lines"].get(line)
            if timed:
                h = timed_lines.get(line)
                hit = f"{h.hits:>9} {h.time * scale:>12.1f} " if h and h.hits else f"{'':>9} {'':>12} "
                pct = (f"{100.0 * h.time / total_time:>7.1f}" if h and h.hits and total_time > 0
                       else f"{'':>7}")
                if inclusive:
                    i = f["incl"].get(line)
                    mem = (f"{_num(i.alloc_bytes, size):>11} {_num(i.net_bytes, size):>11} "
                           f"{_num(i.peak_bytes, size):>11}" if i else f"{blank} {blank} {blank}")
                    own = c if c else MemCounters() if i else None    # ran, made nothing itself
                    mem += (f" {_num(own.alloc_bytes, size):>11} {_num(own.net_bytes, size):>11}"
                            if own else f" {blank} {blank}")
                else:
                    mem = (f"{_num(c.alloc_bytes, size):>11} {_num(c.net_bytes, size):>11} "
                           f"{_num(c.peak_bytes, size):>11}" if c else f"{blank} {blank} {blank}")
                out.write(f"{line:>6} {hit}{pct} {mem}  {text}\n")
            elif c is None:
                pad = (f" {'':>12}" if native else "") + (f" {'':>10}" if temporary else "")
                out.write(f"{line:>6} {'':>12} {'':>12} {'':>12} {'':>12}{pad}  {text}\n")
            else:
                running += c.net_bytes
                e = f["line_extra"].get(line, _ZERO)
                more = (f" {_num(e.native_alloc_bytes, size):>12}" if native else "") + (
                    f" {e.temp_count:>10,}" if temporary else "")
                out.write(f"{line:>6} {_num(running, size):>12} {_num(c.net_bytes, size):>12} "
                          f"{_num(c.alloc_bytes, size):>12} {c.alloc_count:>12,}{more}  {text}\n")
        out.write("\n\n")
