"""The text tables a capture has: line tables (line mode), the sampled function
and line tables (sampling), else the function table."""
from __future__ import annotations

import io

from ._files import atomic_write


def render(session, unit="us", call_rows=True, sort="cumulative") -> str:
    buf = io.StringIO()
    if session.info.get("memory"):
        write_memory(session, buf, sort)
    elif session.info.get("lines"):
        from .linetable import write_text
        write_text(session, buf, unit=unit, call_rows=call_rows)
    elif session.info.get("sampling"):
        from .sampletable import write_functions, write_lines
        write_functions(session, buf)
        buf.write("\n")
        write_lines(session, buf, header_line=False)
    else:
        from .pstats import print_table
        print_table(session, sort, buf)
    from ..objects import write_from_meta
    write_from_meta(session.meta, buf)
    return buf.getvalue()


def write_memory(session, out, sort="cumulative"):
    """What a capture with memory shows: the timing table of its mode (function
    or sampled), then the memory tables (with line tracing, time and memory
    side by side)."""
    from . import memtable
    if session.info.get("sampling"):
        from .sampletable import write_functions
        write_functions(session, out)
        out.write("\n")
    elif session.fstats and not session.info.get("lines"):
        from .pstats import print_table
        print_table(session, sort, out)
        out.write("\n")
    memtable.write_functions(session, out)
    out.write("\n")
    memtable.write_lines(session, out)


def write(session, path, **kw):
    atomic_write(path, render(session, **kw))
