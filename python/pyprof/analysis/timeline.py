"""Timeline events shared by the CLI and the Chrome trace exporter
(docs/timeline.md): thinning events by duration (durations are read by
base/amounts.py's duration_ns)."""


def thin(events, min_ns):
    """The events lasting at least min_ns, and how many were dropped."""
    if min_ns <= 0:
        return list(events), 0
    kept = [e for e in events if e[3] >= min_ns]
    return kept, len(events) - len(kept)
