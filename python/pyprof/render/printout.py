"""What a capture prints: the one rule behind the CLI's stdout, `-o x.txt`,
`pyprof view` (its default view) and the %%cprof magic.

- memory data: the timing table of the mode (the sampled functions, or the
  pstats table unless lines were traced), then the memory tables by function
  and by line (with line tracing, time and memory side by side);
- else line data from tracing (`-l`): the line tables (line_profiler's layout),
  under the time pyprof spent on line events (measured, left out of every time);
- else samples: the sampled function table, then the sampled line table;
- else the pstats function table;
- then the live objects by type, when the capture has them (--objects).

``only`` ("functions", "lines" or "memory") narrows it, as `pyprof view
--functions/--lines/--memory` ask; ``columns`` (`--opcodes` captures) splits each
line of the line tables into its expressions (`pyprof view --columns`).
"""
from __future__ import annotations

import io
import sys

from .objecttable import write_from_meta


def print_capture(session, out, sort="cumulative", unit="us", call_rows=True,
                  only=None, columns=False) -> None:
    """Write what `session` prints on the text stream `out`; ``columns``: the
    line tables split each line into its expressions (--opcodes captures)."""
    info = session.info
    exprs = None
    if columns:
        from ..analysis.opcodes import expressions
        exprs = expressions(session)
    if only == "memory" or (info.get("memory") and only is None):
        write_memory(session, out, sort)
    elif info.get("sampling"):
        from . import sampletable
        _say_order(sort)
        if only != "lines":
            sampletable.write_functions(session, out, sort=sort)
        if only != "functions":
            if only != "lines":
                out.write("\n")
            sampletable.write_lines(session, out, header_line=only == "lines", sort=sort,
                                    expressions=exprs)
    elif only == "lines" or (info.get("lines") and only != "functions"):
        from .linetable import write_text
        write_text(session, out, unit=unit, call_rows=call_rows, expressions=exprs)
    else:
        from .pstatstable import print_table
        print_table(session, sort, out)
    write_gc(session, out)
    write_from_meta(session.meta, out)


def write_gc(session, out) -> None:
    """With --gc: the collections per generation and their pauses."""
    gc = session.info.get("gc")
    if not gc:
        return
    n, pause = gc.get("collections", [0, 0, 0]), gc.get("pause_ns", [0, 0, 0])
    per = ", ".join(f"gen {g}: {n[g]:,} ({pause[g] / 1e6:,.3f} ms)" for g in range(3))
    out.write(f"\nGarbage collector: {sum(n):,} collections, {sum(pause) / 1e6:,.3f} ms in all, "
              f"longest pause {gc.get('max_pause_ns', 0) / 1e6:,.3f} ms; {per}; "
              f"{gc.get('collected', 0):,} objects collected\n")


def render(session, unit="us", call_rows=True, sort="cumulative", only=None,
           columns=False) -> str:
    """print_capture's text as a string."""
    buf = io.StringIO()
    print_capture(session, buf, sort=sort, unit=unit, call_rows=call_rows, only=only,
                  columns=columns)
    return buf.getvalue()


def write_memory(session, out, sort="cumulative"):
    """What a capture with memory shows: the timing table of its mode (function
    or sampled), then the memory tables (with line tracing, time and memory
    side by side)."""
    from . import memtable
    from .linetable import bookkeeping_note
    if session.info.get("sampling"):
        from .sampletable import write_functions
        _say_order(sort)
        write_functions(session, out, sort=sort)
        out.write("\n")
    elif session.fstats and not session.info.get("lines"):
        from .pstatstable import print_table
        print_table(session, sort, out)
        out.write("\n")
    memtable.write_functions(session, out)
    out.write("\n")
    note = bookkeeping_note(session)
    if note:
        out.write(note + "\n\n")
    memtable.write_lines(session, out)


def _say_order(sort) -> None:
    """On stderr (not in the table): a sort key samples cannot follow."""
    from .sampletable import order_note
    note = order_note(sort)
    if note:
        print(f"pyprof: note: {note}", file=sys.stderr)
