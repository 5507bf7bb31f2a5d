"""Timeline options shared by the API, the CLI and the Chrome trace exporter
(docs/timeline.md): durations with units, and thinning events by duration."""
from __future__ import annotations

from ..base.amounts import parse_duration
from ..errors import PyprofError


def duration_ns(value, option="timeline_min_duration") -> int:
    """A duration as integer nanoseconds: an int is nanoseconds (Profile's
    keyword), anything else the one grammar of amounts ('250ns', '10us',
    '1.5ms', '0.5' seconds)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise PyprofError(f"{option} must be >= 0, not {value!r}")
        return value
    return round(parse_duration(value, option, zero_ok=True) * 1e9)


def thin(events, min_ns):
    """The events lasting at least min_ns, and how many were dropped."""
    if min_ns <= 0:
        return list(events), 0
    kept = [e for e in events if e[3] >= min_ns]
    return kept, len(events) - len(kept)
