"""A self-contained interactive flame graph: one HTML file with its own small
JS and CSS (written for pyprof; no CDN, works offline). Hover for details,
click a box to zoom into it, search to highlight matching frames (with their
share of the samples), choose the thread. Data is embedded as JSON with every
``<`` escaped, so no name or path can break the page."""
from __future__ import annotations

import html
import json

from .._version import __version__
from ..base.files import atomic_write
from ..analysis.stacks import named_stacks


def new_root():
    return ["all", "", 0, 0, {}]


def add_path(root, frames, value, slot=3) -> None:
    """Add `value` to the root and to each (label, file, line) frame below it,
    in the node's slot 3 (its value), or another slot of nodes that carry more
    values than one (the differential flame graph's BEFORE value is slot 5)."""
    node = root
    node[slot] += value
    for f in frames:
        child = node[4].get(f)
        if child is None:
            child = node[4][f] = [f[0], f[1], f[2], 0, {}] + [0] * (len(root) - 5)
        child[slot] += value
        node = child


def pack(n):
    """A node as the page's JSON: [name, file, line, value, children largest
    first, any further values of the node]."""
    return [n[0], n[1], n[2], n[3], [pack(c) for c in sorted(n[4].values(), key=lambda c: -c[3])],
            *n[5:]]


def tree(session, lines=False, weight="count"):
    """{thread name: nested node} with node = [name, file, line, value, children]."""
    roots: dict = {}
    for t, state, frames, count, wt in named_stacks(session, lines=lines, threads=False):
        th = session.threads.get(t)
        name = th.name if th else f"thread {t}"
        v = count if weight == "count" else wt
        for key in (name, "all threads"):
            add_path(roots.setdefault(key, new_root()), frames, v)
    return {k: pack(v) for k, v in roots.items()}


# The flame graph's CSS and JS, shared by this page and the HTML report
# (report.py). FLAME_JS defines flameGraph(data, prefix, useHash): it draws
# into the elements with ids PREFIX + fg, tip, thread, search, reset, status,
# notes, and returns {render, pick}. Plain strings: no %-formatting.
FLAME_CSS = """
.fg{position:relative;margin:8px 12px}
.box{position:absolute;height:17px;line-height:17px;overflow:hidden;white-space:nowrap;font-size:11px;
 border-right:1px solid #fff;box-sizing:border-box;padding-left:3px;cursor:pointer;color:#000}
.box.hit{background:#e040fb!important;color:#fff}
.tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:6px 8px;border-radius:4px;
 font-size:12px;display:none;max-width:60ch;white-space:pre-wrap;z-index:9}
.fgstatus{color:#555}
.fgnotes{margin:8px 12px;color:#333;white-space:pre-wrap;font-size:12px}
"""

FLAME_JS = r"""
function flameGraph(DATA, prefix, useHash) {
"use strict";
const $ = id => document.getElementById(prefix + id);
const fg = $("fg"), tip = $("tip"), sel = $("thread"), search = $("search");
const status = $("status"), ROW = 18;
let root = null, zoom = null, unit = DATA.unit;
for (const name of Object.keys(DATA.threads)) {
  const o = document.createElement("option"); o.textContent = name; sel.appendChild(o);
}
sel.value = DATA.threads["all threads"] ? "all threads" : Object.keys(DATA.threads)[0];
// flame.html#thread=NAME&search=REGEX opens with that thread and search
if (useHash) {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("thread") && DATA.threads[params.get("thread")]) sel.value = params.get("thread");
  if (params.has("search")) search.value = params.get("search");
}
// Differential data (DATA.diff): node = [name, file, line, AFTER, children, BEFORE];
// red where a frame grew, blue where it shrank, deeper with the size of the change.
function diffColor(n) {
  const d = n[3] - n[5], r = Math.min(1, Math.abs(d) / (DATA.max_delta || 1));
  const c = Math.round(245 - 190 * r);
  return d > 0 ? "rgb(255," + c + "," + c + ")" : d < 0 ? "rgb(" + c + "," + c + ",255)" : "rgb(245,245,245)";
}
function diffText(n) {
  const d = n[3] - n[5];
  const gone = n[4].filter(c => c[3] === 0).reduce((s, c) => s + c[5], 0);
  return "\nbefore " + fmt(n[5]) + ", after " + fmt(n[3]) + ", change " + (d > 0 ? "+" : "") +
    fmt(d) + (n[5] ? " (" + (d > 0 ? "+" : "") + (100 * d / n[5]).toFixed(1) + "%)" : " (new)") +
    (gone ? "\n" + fmt(gone) + " in callees only in BEFORE" : "");
}
function color(node) {
  if (DATA.diff) return diffColor(node);
  const name = node[0];
  let h = 0; for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  if (name.startsWith("[")) return "#bbb";
  return "hsl(" + (20 + h % 40) + "," + (60 + h % 30) + "%," + (55 + h % 15) + "%)";
}
function fmt(v) {
  if (v < 0) return "-" + fmt(-v);
  if (unit === "bytes") {
    const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
    while (v >= 1024 && i < 3) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : v) + " " + u[i];
  }
  return unit === "ns" ? (v / 1e9).toFixed(3) + " s" : v + " samples";
}
function render() {
  fg.textContent = "";
  const top = zoom || root, width = fg.clientWidth || 1000, total = top[3] || 1;
  let depth = 0;
  const re = search.value ? safeRe(search.value) : null;
  let matched = 0;
  function walk(n, x, d, inHit) {
    const w = n[3] / total * width;
    if (w < 0.5) return;
    depth = Math.max(depth, d);
    const b = document.createElement("div");
    b.className = "box"; b.style.left = x + "px"; b.style.width = w + "px";
    b.style.top = d * ROW + "px"; b.style.background = color(n);
    b.textContent = w > 30 ? n[0] : "";
    const hit = re && re.test(n[0]);
    if (hit) { b.classList.add("hit"); if (!inHit) matched += n[3]; }
    b.onmousemove = e => {
      tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px";
      tip.style.top = (e.clientY + 12) + "px";
      tip.textContent = n[0] + (n[1] ? "\n" + n[1] + ":" + n[2] : "") + "\n" + fmt(n[3]) +
        " (" + (100 * n[3] / (root[3] || 1)).toFixed(1) + "% of all)" + (DATA.diff ? diffText(n) : "");
    };
    b.onmouseleave = () => { tip.style.display = "none"; };
    b.onclick = () => { zoom = n; render(); };
    fg.appendChild(b);
    let cx = x;
    for (const c of n[4]) { walk(c, cx, d + 1, inHit || hit); cx += c[3] / total * width; }
  }
  walk(top, 0, 0, false);
  fg.style.height = (depth + 1) * ROW + "px";
  status.textContent = fmt(root[3]) + (re ? "; matched " + (100 * matched / (root[3] || 1)).toFixed(1) + "%" : "");
}
function notes() {
  const el = $("notes");
  if (!DATA.diff || !el) return;
  el.textContent = "Widths: AFTER. Red: grew since BEFORE; blue: shrank (hover for the numbers).\n" +
    (DATA.gone.length ? "Only in BEFORE (not drawn):\n" +
      DATA.gone.map(g => "  " + g[0] + "  " + fmt(g[1])).join("\n") : "");
}
function safeRe(s) { try { return new RegExp(s); } catch (e) { return null; } }
function pick() { root = DATA.threads[sel.value]; zoom = null; render(); }
sel.onchange = pick; search.oninput = render;
$("reset").onclick = () => { zoom = null; render(); };
window.addEventListener("resize", render);
notes();
pick();
return {render: render, pick: pick};
}
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%(title)s</title>
<style>
body{font:13px system-ui,sans-serif;margin:0;background:#fff;color:#222}
header{padding:8px 12px;border-bottom:1px solid #ddd;display:flex;gap:12px;align-items:center;flex-wrap:wrap}
header h1{font-size:15px;margin:0}
%(css)s</style></head><body>
<header><h1>%(title)s</h1>
<label>%(select)s <select id="thread"></select></label>
<input id="search" placeholder="search (regex)" size="24">
<button id="reset">reset zoom</button><span class="fgstatus" id="status"></span></header>
<div id="fg" class="fg"></div><div id="tip" class="tip"></div><div id="notes" class="fgnotes"></div>
<script type="application/json" id="data">%(data)s</script>
<script>
%(js)s
flameGraph(JSON.parse(document.getElementById("data").textContent), "", true);
</script></body></html>
"""


def render(session, lines=False) -> str:
    if session.info.get("sampling"):
        data = {"unit": "samples", "threads": tree(session, lines=lines)}
    else:                               # traced: the calling-context tree, by self time
        data = {"unit": "ns", "threads": tree(session, weight="ns")}
    data["version"] = __version__
    return page(data, "pyprof flame graph: " + " ".join(session.meta.get("argv", [])), "thread")


def json_for_html(data) -> str:
    """`data` as JSON to embed in <script type="application/json">: every "<"
    escaped, so no "</script>" or "<!--" in a name or path can end the data."""
    return json.dumps(data, ensure_ascii=True, allow_nan=False).replace("<", "\\u003c")


def page(data, title, select) -> str:
    text = json_for_html(data)
    return PAGE % {"title": html.escape(title), "data": text, "select": html.escape(select),
                   "css": FLAME_CSS, "js": FLAME_JS}


def write(session, path):
    atomic_write(path, render(session))
