"""How functions are named: cProfile's names of C functions and methods, taken
apart for the views (scope) and for tools that cannot show angle brackets."""
from __future__ import annotations

import re

BUILTIN_METHOD = re.compile(r"<method '([^']+)' of '([^']+)' objects>")
BUILTIN_FUNC = re.compile(r"<built-in method ([\w.]+)>")
# cProfile's name of a method bound to a C object carries the object's
# address: "<built-in method __new__ of type object at 0x7eff3b1615a0>"
_ADDRESS = re.compile(r"^(<built-in method \S+ of .+ object) at 0x[0-9a-fA-F]+>$")


def stable_name(name: str) -> str:
    """A C function's name without the address that changes with every run
    (``<built-in method __new__ of type object>``): what pyprof matches
    functions by across captures (diff, merge, views, gates); pstats and the
    other cProfile-compatible outputs keep cProfile's own spelling."""
    if " at 0x" not in name:         # most names: no regular expression to run
        return name
    return _ADDRESS.sub(r"\1>", name)


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
