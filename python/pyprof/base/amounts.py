"""The one grammar of amounts: sizes, durations, percentages and counts, as the
command line, [tool.pyprof], the PYPROF_* variables, Profile's keywords, the
gates and the pytest markers write them (docs/cli.md, "Amounts").

- size: a number of bytes, with an optional unit after it (a space allowed):
  B; k, K, kB, KB, KiB; M, MB, MiB; G, GB, GiB; T, TB, TiB, any case. Every
  unit is a power of 1024 (5MB = 5 MiB = 5,242,880 bytes): pyprof reports
  memory in MiB, and --max-memory has always read 5MB so.
- duration: seconds, with an optional unit: ns, us (or µs), ms, s, min, h
  ("0.5" and 0.5 are half a second).
- percentage: a number, with an optional %: 25 and 25% are the same.
- count: a whole number.

Each parser takes the value (a string, or a Python number in the unit named
above) and ``what`` (the option as its caller spells it) and raises one
PyprofError line naming ``what`` and the accepted forms. This module owns the
grammar; it never knows an option's range (the option table does). Built-in
modules only, re not at import.
"""

from ..errors import PyprofError

SIZE_UNITS = {"": 1, "b": 1}
for _i, _letter in enumerate("kmgt", 1):
    for _suffix in ("", "b", "ib"):
        SIZE_UNITS[_letter + _suffix] = 1 << (10 * _i)
del _i, _letter, _suffix
DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "ns": 1e-9,
                  "min": 60.0, "h": 3600.0}

SIZE_FORMS = "4096, 512k, 5MB or 5 MiB; k, M, G, T are powers of 1024"
DURATION_FORMS = "0.5 (seconds), 250ns, 10us, 50ms, 2s, 1.5min or 1h"
PERCENT_FORMS = "25 or 25%"

_NUMBER = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
_AMOUNT = r"\s*" + _NUMBER + r"\s*([^\d\s.][^\s]*)?\s*"


def _split(value):
    """(number, unit in lower case) of a string, or None."""
    import re                           # not at import: a run's start-up (docs/cli.md)
    m = re.fullmatch(_AMOUNT, str(value))
    if m is None:
        return None
    return float(m.group(1)), (m.group(2) or "").lower()


def parse_size(value, what, zero_ok=False) -> int:
    """A size in bytes (> 0, or >= 0 with zero_ok)."""
    least = "a number of bytes >= 0" if zero_ok else "a positive number of bytes"
    refused = PyprofError(f"{what} takes {least} (like 4096, 512k or 4M), not {value!r} "
                          f"(accepted: {SIZE_FORMS})")
    if isinstance(value, bool):
        raise refused
    if isinstance(value, (int, float)):
        n = float(value)
    else:
        parts = _split(value)
        if parts is None or parts[1] not in SIZE_UNITS:
            raise refused
        n = parts[0] * SIZE_UNITS[parts[1]]
    if not _finite_non_negative(n) or (n == 0 and not zero_ok):
        raise refused
    return int(n)


def _finite_non_negative(x: float) -> bool:
    return 0 <= x < _INF            # NaN compares false (no math import at start-up)


_INF = float("inf")


def parse_duration(value, what, zero_ok=False) -> float:
    """A duration in seconds (> 0, or >= 0 with zero_ok)."""
    refused = PyprofError(f"{what} takes a duration like 10us or 1ms, not {value!r} "
                          f"(accepted: {DURATION_FORMS})")
    if isinstance(value, bool):
        raise refused
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip()
        parts = _split(text.replace("\u03bc", "\u00b5"))     # Greek mu, as µ
        if parts is None or parts[1] not in DURATION_UNITS:
            raise refused
        seconds = parts[0] * DURATION_UNITS[parts[1]]
    if not _finite_non_negative(seconds):
        raise refused
    if seconds == 0 and not zero_ok:
        raise PyprofError(f"{what} must be a positive duration, not {value!r}")
    return seconds


def duration_ns(value, option="timeline_min_duration") -> int:
    """A duration as integer nanoseconds: an int is nanoseconds (Profile's
    keyword), anything else the grammar above ('250ns', '10us', '1.5ms', '0.5'
    seconds)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise PyprofError(f"{option} must be >= 0, not {value!r}")
        return value
    return round(parse_duration(value, option, zero_ok=True) * 1e9)


def parse_percent(value, what) -> float:
    """A percentage (>= 0): 25 or '25%'."""
    refused = PyprofError(f"{what} takes a percentage (a number >= 0), not {value!r} "
                          f"(accepted: {PERCENT_FORMS})")
    if isinstance(value, bool):
        raise refused
    if isinstance(value, (int, float)):
        pct = float(value)
    else:
        parts = _split(value)
        if parts is None or parts[1] not in ("", "%"):
            raise refused
        pct = parts[0]
    if not _finite_non_negative(pct):
        raise refused
    return pct


def parse_count(value, what, noun="calls") -> int:
    """A whole number (>= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PyprofError(f"{what} takes a whole number of {noun}, not {value!r}")
    try:
        n = int(value)
    except ValueError:
        raise PyprofError(f"{what} takes a whole number of {noun}, not {value!r}") from None
    if n < 0:
        raise PyprofError(f"{what} must be >= 0, not {value!r}")
    return n
