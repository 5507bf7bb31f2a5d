"""The process part of a capture's META record: who ran what, where, when.

Shared by Profile (profiler.py) and the lean profiler of a child process
(children.py), which loads this module without the pyprof package: built-in
modules only (json would import re: ~7 ms at start-up).
"""
import os
import sys
import time

from .._version import __version__


def hostname() -> str:
    try:
        return os.uname().nodename      # socket would cost `import pyprof` ~5 ms
    except AttributeError:              # not POSIX
        import socket
        return socket.gethostname()


def cwd() -> str:
    try:
        return os.getcwd()
    except OSError:                     # removed while running
        return ""


def process_meta(modes, thread_names) -> dict:
    """The fields every capture's meta has (docs/capture-format.md)."""
    return {
        "pyprof_version": __version__,
        "argv": list(sys.argv),
        "executable": sys.executable,
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "pid": os.getpid(),
        "host": hostname(),
        "cwd": cwd(),
        "modes": list(modes),
        "written_at": time.time(),
        "thread_names": dict(thread_names),
    }


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_string(text: str) -> str:
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return '"' + text + '"'
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[ch])
        elif 0x20 <= code < 0x7f:
            out.append(ch)
        elif code > 0xFFFF:             # as json.dumps: a surrogate pair
            code -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 | (code >> 10), 0xDC00 | (code & 0x3FF)))
        else:
            out.append("\\u%04x" % code)
    return '"' + "".join(out) + '"'


def json_text(value) -> str:
    """json.dumps(value, default=str) for a capture's meta (dicts, lists,
    strings, numbers), without importing json."""
    if value is None or value is True or value is False:
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else "null"
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, dict):
        return "{" + ", ".join(_json_string(str(k) if not isinstance(k, bool) else
                                            str(k).lower()) + ": " + json_text(v)
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    return _json_string(str(value))
