"""The text tables a capture has: line tables (line mode), the sampled function
and line tables (sampling), else the function table."""
from __future__ import annotations

import io

from ._files import atomic_write


def render(session, unit="us", call_rows=True, sort="cumulative") -> str:
    buf = io.StringIO()
    if session.info.get("lines"):
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
    return buf.getvalue()


def write(session, path, **kw):
    atomic_write(path, render(session, **kw))
