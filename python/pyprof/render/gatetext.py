"""The text of the CI gates and budgets (docs/ci.md, docs/pytest.md): what
``pyprof diff --fail-above`` and ``pyprof check`` print, and the budget line of
the pytest plugin: 'memory 19.6 MiB > 5 MiB (hog_memory test_x.py:4 19.5 MiB)'."""
from __future__ import annotations

import os


def _short(path):
    return os.path.basename(path) if path else path


def _fmt(kind, x):
    """3 significant digits at most, in the unit of render.units: 19.6 MiB, 50 ms."""
    from .units import byte_unit, format_time
    if kind == "memory":
        name, size = byte_unit(x, "TiB")
        return f"{_sig3(x / size)} {name}"
    text = format_time(x, digits=("g", "g", "g", "g"), sep=" ", zero=None)
    number, unit = text.split(" ")
    return f"{_sig3(float(number))} {unit}"


def _sig3(v) -> str:
    text = f"{v:.3g}"
    if "e" in text:                     # 1000 and more in the unit: whole numbers
        text = f"{v:.0f}"
    return text


def verdict_lines(v: Verdict, limit=10) -> list:
    """What ``pyprof diff --fail-above`` says: one line per figure that grew."""
    out = []
    failed = v.failed
    if not failed:
        total = v.checked[0]
        pct = total.change_pct
        out.append(f"pyprof: gate passed: {v.kind} did not grow by more than {v.fail_above:g}% "
                   f"beyond the noise (total {_fmt(v.kind, total.before)} -> "
                   f"{_fmt(v.kind, total.after)}"
                   + (f", {pct:+.1f}%" if pct is not None else "") + ")")
        within = v.within_noise
        for g in within[:limit]:
            out.append(f"  within the noise: {_growth_text(v.kind, g)}")
        if len(within) > limit:
            out.append(f"  ... and {len(within) - limit} more within the noise")
        return out
    out.append(f"pyprof: gate failed: {len(failed)} {v.kind} figure"
               f"{'s' if len(failed) > 1 else ''} grew by more than {v.fail_above:g}% beyond "
               f"the noise")
    for g in failed[:limit]:
        out.append(f"  {_growth_text(v.kind, g)}")
    if len(failed) > limit:
        out.append(f"  ... and {len(failed) - limit} more")
    return out


def _growth_text(kind, g) -> str:
    """'changed prog.py:13: 233 ms -> 385 ms (+65.1%; noise 149 ms)'."""
    where = f" {_short(g.file)}:{g.line}" if g.file else ""
    pct = g.change_pct
    return (f"{g.what}{where}: {_fmt(kind, g.before)} -> {_fmt(kind, g.after)} "
            f"({'+%.1f%%' % pct if pct is not None else 'from 0'}; noise {_fmt(kind, g.noise)})")


def culprit_text(kind, culprits) -> str:
    """'hog_memory test_x.py:4 19.5 MiB, ...' (what used a budget most)."""
    return ", ".join(f"{name}{'' if file == '~' else f' {_short(file)}:{line}'} "
                     f"{f'{value:,}' if kind == 'count' else _fmt(kind, value)}"
                     for name, file, line, value in culprits)


def limit_text(what, measured, limit, culprits) -> str:
    """'memory 19.6 MiB > 5 MiB (hog_memory test_x.py:4 19.5 MiB)'."""
    kind = "memory" if what == "memory" else "time" if what == "time" else "count"
    if kind == "count":
        text = f"{what} {measured:,} > {limit:,}"
    else:
        text = f"{what} {_fmt(kind, measured)} > {_fmt(kind, limit)}"
    if culprits:
        text += f" ({culprit_text(kind, culprits)})"
    return text
