"""``pyprof top PID``: a live view of a running process, in the terminal
(curses, from the standard library). It samples the process's wall time
through the control channel (attach.py, channel.py) and redraws about once a
second: the share of time the GIL was held, RSS and the traced heap, each
thread with its time by state (python, native, idle, gil), and the functions
by own and total share. Keys: docs/attach.md#top. Quitting detaches: the
process keeps running as if nothing happened.
"""
from __future__ import annotations

import os
import time

from ..errors import PyprofError
from ..render.units import format_bytes, format_time

SORTS = {"o": ("own", 0, "%Own"), "t": ("total", 0, "%Total"),
         "O": ("own", 2, "OwnTime"), "T": ("total", 2, "TotalTime")}
STATES = ("python", "native", "idle", "gil")
HELP = ("o/t: sort by %Own/%Total  O/T: by own/total time  tab/\u2192 \u2190: thread  "
        "a: all threads  i: idle  space/p: pause  q: quit")


def _bytes(n) -> str:
    return "-" if n is None else format_bytes(n, sep=" ")


def _secs(ns) -> str:
    s = ns / 1e9
    return format_time(s, digits=(2 if s < 100 else 0,), zero=None)


class View:
    """What is shown, and the state the keys change (no curses here: testable)."""

    def __init__(self, hello):
        self.hello = hello
        self.sort = "o"
        self.thread = None              # index of the thread shown, None: all
        self.idle = False               # count idle (and gil) samples in the shares
        self.paused = False
        self.stats = None
        self.message = ""

    def key(self, ch) -> bool:
        """Apply one key; False to quit."""
        if ch in ("q", "Q", "\x1b"):
            return False
        if ch in SORTS:
            self.sort = ch
        elif ch in (" ", "p", "P"):
            self.paused = not self.paused
        elif ch in ("i", "I"):
            self.idle = not self.idle
        elif ch in ("a", "A"):
            self.thread = None
        elif ch in ("\t", "KEY_RIGHT", "n", "KEY_BTAB", "KEY_LEFT", "N"):
            self._step_thread(-1 if ch in ("KEY_BTAB", "KEY_LEFT", "N") else 1)
        return True

    def _step_thread(self, step):
        order = [None] + [t["index"] for t in (self.stats or {}).get("threads", [])]
        i = order.index(self.thread) if self.thread in order else 0
        self.thread = order[(i + step) % len(order)]

    def lines(self, width, height) -> list:
        """The screen as text lines (each at most `width` long)."""
        h = self.hello
        st = self.stats
        out = []
        argv = " ".join(h.get("argv") or [])
        mode = "wall" if st is None or st.get("wall") else "cpu"
        if h.get("remote"):
            mode += " (from outside)"
        out.append(f"pyprof top{' [PAUSED]' if self.paused else ''} - pid {h['pid']}  "
                   f"CPython {h['python']}  {mode} sampling"
                   + (f"  {st['since_start']:.0f}s" if st else "") + f"  {argv}")
        if st is None:
            out.append(self.message or "waiting for the first samples...")
            return [ln[:width] for ln in out]
        traced = _bytes(st["traced"]) if st.get("traced") is not None else "- (--memory-sample)"
        out.append(f"GIL held {st['gil_held'] * 100:5.1f}%   RSS {_bytes(st['rss'])}   "
                   f"traced heap {traced}   interval {st['elapsed']:.1f}s")
        out.append("")
        out.append(f"  {'THREAD':<32} {'python':>7} {'native':>7} {'idle':>7} {'gil':>7}")
        sel = "> " if self.thread is None else "  "
        out.append(f"{sel}{'(all threads)':<32}")
        span = max(st["elapsed"], 1e-9) * 1e9
        for t in st["threads"]:
            sel = "> " if self.thread == t["index"] else "  "
            name = f"{t['name']} ({t['native_id']})"
            # of the thread's own sampled time in the interval (a parked
            # thread's idle time is written in batches: not of the interval)
            seen = max(sum(max(v, 0) for v in t["states"].values()), 1)
            cells = " ".join(f"{max(t['states'].get(s, 0), 0) / seen * 100:6.1f}%"
                             for s in STATES)
            out.append(f"{sel}{name[:32]:<32} {cells}")
        out.append("")
        which, col, label = SORTS[self.sort]
        thread_name = "all threads" if self.thread is None else next(
            (t["name"] for t in st["threads"] if t["index"] == self.thread), "?")
        out.append(f"  {'%Own':>6} {'%Total':>7} {'OwnTime':>8} {'TotalTime':>9}  FUNCTION"
                   f"   [sort: {label}; {thread_name}; "
                   f"{'with' if self.idle else 'without'} idle]")
        k = 1 if self.idle else 0
        rows = [r for r in st["functions"] if r["thread"] == self.thread]
        rows.sort(key=lambda r: (-r[which][col + k], r["name"]))
        room = max(0, height - len(out) - 2)
        for r in rows[:room]:
            if r["total"][k] <= 0 and r["total"][2 + k] <= 0:
                continue
            where = f"{os.path.basename(r['file'])}:{r['line']}"
            out.append(f"  {r['own'][k] / span * 100:5.1f}% {r['total'][k] / span * 100:6.1f}% "
                       f"{_secs(r['own'][2 + k]):>8} {_secs(r['total'][2 + k]):>9}  "
                       f"{r['name']} ({where})")
        while len(out) < height - 1:
            out.append("")
        out.append(self.message or HELP)
        return [ln[:width] for ln in out[:height]]


def draw(scr, view) -> None:
    """One screen of `view` on the curses window `scr`."""
    import curses
    height, width = scr.getmaxyx()
    scr.erase()
    for y, line in enumerate(view.lines(width - 1, height)):
        try:
            scr.addstr(y, 0, line, curses.A_REVERSE if y == 0 else curses.A_NORMAL)
        except curses.error:
            pass
    scr.refresh()


def run(client, rate=100.0, native=False, memory_sample=None, interval=1.0) -> int:
    """Start wall sampling in the process behind `client` and show it until
    the user quits (or the process ends); then detach."""
    import curses
    from ..options import RunOptions
    opts = RunOptions.from_profile(mode="sample", wall=True, rate=rate, native=native,
                                   memory=memory_sample is not None,
                                   memory_sample=memory_sample or 0).check()
    client.request("start", options=opts.profile_kwargs(), client_pid=os.getpid())
    view = View(client.hello)
    ended = []

    def loop(scr):
        curses.curs_set(0)
        scr.timeout(100)
        next_at = time.monotonic() + min(interval, 0.5)
        while True:
            if not view.paused and time.monotonic() >= next_at:
                next_at = time.monotonic() + interval
                try:
                    view.stats = client.request("stats")
                except PyprofError as e:
                    ended.append(str(e))
                    return
                if client.events:
                    ended.append(f"process {client.pid} exited")
                    return
            draw(scr, view)
            try:
                ch = scr.get_wch()
            except curses.error:
                continue
            if isinstance(ch, int):
                ch = curses.keyname(ch).decode()
            if not view.key(ch):
                return

    try:
        curses.wrapper(loop)
    finally:
        if not client.closed and not ended:
            try:
                client.request("detach")
            except PyprofError:
                pass
        client.close()
    if ended:
        print(f"pyprof top: {ended[0]}")
    return 0
