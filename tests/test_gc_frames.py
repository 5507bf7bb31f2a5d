"""--gc: time in the cyclic garbage collector as a `<GC gen N>` frame, against
an independent gc.callbacks counter and clock of the test's own."""
import gc
import subprocess
import sys
import time

import pytest

import pyprof


class Node:
    def __init__(self):
        self.me = self                  # a reference cycle: only the collector frees it
        self.pad = list(range(50))


def build(n):
    for _ in range(n):
        Node()


class Truth:
    """The test's own gc.callbacks: collections per generation and time in them."""

    def __init__(self):
        self.count = [0, 0, 0]
        self.seconds = 0.0
        self._t = None

    def __call__(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.count[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._t
            self._t = None


def workload():
    for i in range(12):
        build(15000)
        gc.collect(2 if i % 3 == 0 else 0)     # 4 full collections, 8 of generation 0


def run(mode, **kw):
    truth = Truth()
    was = gc.isenabled()
    gc.disable()                               # only the forced collections
    gc.callbacks.append(truth)
    try:
        with pyprof.Profile(mode=mode, gc=True, **kw) as p:
            workload()
    finally:
        gc.callbacks.remove(truth)
        if was:
            gc.enable()
    return p.session(), truth


def gc_functions(s):
    return {f.name: fid for fid, f in s.functions.items() if f.name.startswith("<GC gen")}


def test_traced_gc_frames_count_each_collection():
    s, truth = run("trace")
    assert truth.count == [8, 0, 4]
    assert s.info["gc"]["collections"] == truth.count
    fids = gc_functions(s)
    totals = s.function_totals()
    assert totals[fids["<GC gen 0>"]].calls == 8
    assert totals[fids["<GC gen 2>"]].calls == 4
    assert "<GC gen 1>" not in fids
    # a callee of gc.collect, where it ran
    callers = {s.functions[c].name for (c, callee) in s.edge_totals() if callee in fids.values()}
    assert callers == {"<built-in method gc.collect>"}, callers
    # its time is the collections' time (the test's callback runs inside it too)
    gc_time = sum(s.seconds(totals[f].total) for f in fids.values())
    assert gc_time == pytest.approx(truth.seconds, rel=0.25)
    pause = sum(s.info["gc"]["pause_ns"]) / 1e9
    assert pause == pytest.approx(truth.seconds, rel=0.25)
    assert s.info["gc"]["max_pause_ns"] / 1e9 <= pause
    assert s.info["gc"]["collected"] >= 12 * 15000


def test_sampled_gc_frames_take_the_collections_share():
    t0 = time.perf_counter()
    s, truth = run("sample", rate=1000)
    elapsed = time.perf_counter() - t0
    fids = set(gc_functions(s).values())
    assert fids, "no sample landed in the collector"
    in_gc = total = 0
    for (thread, stack, state), c in s.samples.items():
        total += c.count
        if any(fid in fids for fid, _ in s.stacks[stack].frames):
            in_gc += c.count
    share, truth_share = in_gc / total, truth.seconds / elapsed
    assert truth_share > 0.2, truth_share      # the workload is mostly collection
    assert abs(share - truth_share) < 0.2, (share, truth_share)
    assert s.info["gc"]["collections"] == [8, 0, 4]


def test_cli_prints_the_collections(tmp_path):
    prog = tmp_path / "cycles.py"
    prog.write_text("import gc\ngc.disable()\n"
                    "class N:\n    def __init__(self): self.me = self\n"
                    "for i in range(5):\n    [N() for _ in range(1000)]\n    gc.collect()\n")
    r = subprocess.run([sys.executable, "-m", "pyprof", "--gc", str(prog)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("Garbage collector:"))
    assert "5 collections" in line and "gen 2: 5" in line
    assert "<GC gen 2>" in r.stdout                     # in the pstats table


def test_without_gc_option_nothing_changes():
    with pyprof.Profile() as p:
        gc.collect()
    s = p.session()
    assert "gc" not in s.info and not gc_functions(s)
    assert not any(getattr(cb, "__name__", "") == "_pyprof_gc_callback" for cb in gc.callbacks)


def test_sampling_watches_the_collector_by_default():
    """--sample has no cProfile table to keep: the collector's frame is on unless
    turned off (gc=False); the tracer keeps cProfile's functions unless asked."""
    with pyprof.Profile(mode="sample", wall=True, rate=1000) as p:
        gc.collect()
    assert p.session().info["gc"]["collections"][2] >= 1
    with pyprof.Profile(mode="sample", gc=False) as p:
        gc.collect()
    assert "gc" not in p.session().info
