"""Timeline options shared by the API, the CLI and the Chrome trace exporter
(docs/timeline.md): durations with units, and thinning events by duration."""
from __future__ import annotations

from ..errors import PyprofError

_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def duration_ns(value, option="timeline_min_duration") -> int:
    """A duration as integer nanoseconds: an int (ns) or a string with a unit
    ('250ns', '10us', '1.5ms', '2s'); '0' needs no unit."""
    if isinstance(value, bool):
        raise PyprofError(f"{option} takes a duration like 10us or 1ms, not {value!r}")
    if isinstance(value, int):
        ns = value
    else:
        import re                       # not at import: the run's start-up (options.py)
        text = str(value).strip()
        m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|\u00b5s|ms|s)?", text)
        if m is None or (m.group(2) is None and float(m.group(1)) != 0):
            raise PyprofError(f"{option} takes a duration like 10us or 1ms (units: ns, us, "
                              f"ms, s), not {text!r}")
        ns = round(float(m.group(1)) * _UNITS[m.group(2) or "ns"])
    if ns < 0:
        raise PyprofError(f"{option} must be >= 0, not {value!r}")
    return ns


def thin(events, min_ns):
    """The events lasting at least min_ns, and how many were dropped."""
    if min_ns <= 0:
        return list(events), 0
    kept = [e for e in events if e[3] >= min_ns]
    return kept, len(events) - len(kept)
