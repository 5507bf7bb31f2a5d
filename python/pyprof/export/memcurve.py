"""The memory curve as an SVG plot: resident set size and traced live bytes
over time, the traced peak marked with the line whose allocation reached it,
and pyprof.step() markers as dashed lines (docs/memory.md). Plain SVG, no script: any browser or image viewer shows it."""
from __future__ import annotations

import os
from html import escape

from ..errors import PyprofError
from ..base.files import atomic_write
from ..render.units import byte_unit

W, H = 900, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50


def render(session) -> str:
    if not session.info.get("memory"):
        raise PyprofError("this capture has no memory data: profile with --memory")
    pts = session.memory_curve
    if not pts:
        raise PyprofError("this capture has no memory curve")
    t_end = max(pts[-1].t, 1e-9)
    t0 = pts[0].t
    top = max(max(p.rss for p in pts), max(p.heap_max for p in pts), 1)
    unit, size = byte_unit(top)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t):
        return LEFT + pw * (t - t0) / max(t_end - t0, 1e-9)

    def y(v):
        return TOP + ph * (1 - v / top)

    def line(values, colour, name):
        path = " ".join(f"{x(p.t):.1f},{y(v):.1f}" for p, v in zip(pts, values))
        return (f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}">'
                f"<title>{name}</title></polyline>")

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14">Memory over time ({unit})</text>']
    for i in range(5):                                   # horizontal grid and labels
        v = top * i / 4
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
                   f'{v / size:,.1f}</text>')
    for i in range(5):
        t = t0 + (t_end - t0) * i / 4
        out.append(f'<text x="{x(t):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">'
                   f'{t:.2f} s</text>')
    steps = [m for m in session.meta.get("steps", []) if m.get("event") == "start"]
    for m in steps[:200]:                               # pyprof.step() markers
        sx = x(min(max(m["t"], t0), t_end))
        label = m["name"] or f"step {m['index']}"
        out.append(f'<line x1="{sx:.1f}" x2="{sx:.1f}" y1="{TOP}" y2="{H - BOTTOM}" '
                   f'stroke="#999" stroke-dasharray="3,3"><title>{escape(label)}</title></line>')
        if len(steps) <= 20:
            out.append(f'<text x="{sx + 2:.1f}" y="{TOP + 10}" font-size="10" fill="#666">'
                       f'{escape(label)}</text>')
    out.append(line([p.rss for p in pts], "#e07020", "resident set size (RSS)"))
    out.append(line([p.heap_max for p in pts], "#2060c0", "traced live bytes"))
    peak = max(pts, key=lambda p: p.heap_max)
    label = f"traced peak {peak.heap_max / size:,.1f} {unit}"
    if peak.site and peak.site[0] in session.functions:
        fn = session.functions[peak.site[0]]
        label += f" at {fn.qualname} ({os.path.basename(fn.filename)}:{peak.site[1]})"
    out.append(f'<circle cx="{x(peak.t):.1f}" cy="{y(peak.heap_max):.1f}" r="4" fill="#2060c0"/>')
    anchor = "end" if x(peak.t) > W / 2 else "start"
    dx = -8 if anchor == "end" else 8
    out.append(f'<text x="{x(peak.t) + dx:.1f}" y="{max(y(peak.heap_max) - 8, TOP + 12):.1f}" '
               f'text-anchor="{anchor}">{escape(label)}</text>')
    ly = H - 14
    out.append(f'<line x1="{LEFT}" x2="{LEFT + 24}" y1="{ly - 4}" y2="{ly - 4}" stroke="#e07020" '
               f'stroke-width="2"/><text x="{LEFT + 30}" y="{ly}">resident set size (RSS)</text>')
    out.append(f'<line x1="{LEFT + 220}" x2="{LEFT + 244}" y1="{ly - 4}" y2="{ly - 4}" '
               f'stroke="#2060c0" stroke-width="2"/><text x="{LEFT + 250}" y="{ly}">'
               f'traced live bytes (most in each interval)</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def write(session, path):
    atomic_write(path, render(session))
