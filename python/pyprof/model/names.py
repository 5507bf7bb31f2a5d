"""How functions are named: cProfile's names of C functions and methods, taken
apart for the views (scope) and for tools that cannot show angle brackets."""
from __future__ import annotations

import re

BUILTIN_METHOD = re.compile(r"<method '([^']+)' of '([^']+)' objects>")
BUILTIN_FUNC = re.compile(r"<built-in method ([\w.]+)>")


def plain_builtin_name(name: str) -> str:
    """cProfile's name of a C function without its angle brackets, for tools
    that mangle them (go tool pprof demangles "<...>" to nothing):
    ``<built-in method time.sleep>`` -> ``time.sleep``,
    ``<method 'append' of 'list' objects>`` -> ``list.append``."""
    m = BUILTIN_FUNC.fullmatch(name)
    if m:
        return m.group(1)
    m = BUILTIN_METHOD.fullmatch(name)
    if m:
        return f"{m.group(2)}.{m.group(1)}"
    return name.strip("<>")
