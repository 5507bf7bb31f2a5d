"""pyprof's stats against cProfile's on the same programs: same functions, the
same call and primitive-call counts, the same callers with the same counts.
cProfile is the ground truth; the profilers' own methods are left out."""
import cProfile
import gc
import sys
import threading

import pytest

import pyprof
import workloads


def _own(key):
    filename, _, name = key
    return (filename.endswith(("cProfile.py", "profiler.py"))
            or "_lsprof.Profiler" in name or "pyprof._cprof.Profiler" in name)


def counts(profiler_class, func, **kw):
    prof = profiler_class(**kw)
    # A collection during one run but not the other calls finalizers (an old
    # event loop's futures) in only one of them: both runs start collected and
    # do not collect.
    gc.collect()
    gc.disable()
    try:
        prof.runcall(func)
    finally:
        gc.enable()
    prof.create_stats()
    out = {}
    for key, (cc, nc, tt, ct, callers) in prof.stats.items():
        if _own(key):
            continue
        assert tt >= 0 and ct >= 0
        out[key] = (cc, nc, {c: v[:2] for c, v in callers.items() if not _own(c)})
    return out


@pytest.mark.parametrize("builtins", [True, False], ids=["builtins", "no-builtins"])
@pytest.mark.parametrize("func", workloads.ALL, ids=lambda f: f.__name__)
def test_counts_equal_cprofile(func, builtins):
    """builtins=False on 3.11 runs pyprof's frame-evaluation engine, not the
    profile hook cProfile uses: the same counts are expected all the same."""
    func()                      # warm caches (re, imports) so both runs see the same work
    expected = counts(cProfile.Profile, func, builtins=builtins)
    got = counts(pyprof.Profile, func, builtins=builtins)
    assert set(got) == set(expected)
    for key in expected:
        assert got[key] == expected[key], key


def test_known_counts_by_construction():
    stats = counts(pyprof.Profile, workloads.recursion)
    fib = (workloads.__file__, workloads.fib.__code__.co_firstlineno, "fib")
    # fib(15) makes 1973 calls, one of them primitive (the outermost).
    assert stats[fib][:2] == (1, 1973)
    even = (workloads.__file__, workloads.is_even.__code__.co_firstlineno, "is_even")
    odd = (workloads.__file__, workloads.is_odd.__code__.co_firstlineno, "is_odd")
    assert stats[even][1] == 21 and stats[odd][1] == 20
    assert stats[even][0] == 1 and stats[odd][0] == 1


def test_builtins_named_as_cprofile():
    stats = counts(pyprof.Profile, workloads.builtins_and_c)
    names = {k[2] for k in stats if k[0] == "~"}
    for expected in ("<built-in method builtins.sorted>", "<method 'append' of 'list' objects>",
                     "<method 'join' of 'str' objects>", "<built-in method builtins.max>",
                     "<method 'finditer' of 're.Pattern' objects>"):
        assert expected in names
    append = stats[("~", 0, "<method 'append' of 'list' objects>")]
    # 100 x lst.append, 100 x list.append(lst, i), 100 x d.setdefault(...).append
    assert append[1] == 300


def test_subcalls_and_builtins_off():
    prof = pyprof.Profile(subcalls=False, builtins=False)
    prof.runcall(workloads.builtins_and_c)
    prof.create_stats()
    assert not [k for k in prof.stats if k[0] == "~"]
    assert all(not v[4] for v in prof.stats.values())
    entries = prof.getstats()
    assert entries and all(e.calls is None for e in entries)


def test_same_key_functions_are_summed():
    # Two lambdas on one line share a pstats key; cProfile keeps only the last,
    # pyprof sums them (documented in docs/columns.md).
    f, g = (lambda: 1), (lambda: 2)

    def run():
        for _ in range(3):
            f()
        g()

    prof = pyprof.Profile()
    prof.runcall(run)
    prof.create_stats()
    key = (__file__, f.__code__.co_firstlineno, "<lambda>")
    assert prof.stats[key][:2] == (4, 4)


def test_time_splits_add_up():
    prof = pyprof.Profile()
    prof.runcall(workloads.methods)
    session = prof.session()
    totals = session.function_totals()
    by_name = {session.functions[f].name: c for f, c in totals.items()}
    m = by_name["methods"]
    children = sum(c.total for (a, b), c in session.edge_totals().items()
                   if session.functions[a].name == "methods")
    # cumulative = self + time in callees (each callee counted once: no recursion here);
    # each figure is rounded to the nanosecond on its own, hence the tolerance.
    assert abs(m.total - (m.own + children)) <= 8
    assert m.own > 0


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="cProfile sees other threads only on 3.12+ (sys.monitoring is global)")
def test_thread_call_counts_equal_cprofile():
    def work():
        workloads.fib(12)

    def run():
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def ncalls(cls):
        prof = cls()
        prof.runcall(run)
        prof.create_stats()
        return {k: v[1] for k, v in prof.stats.items() if k[0] == workloads.__file__}

    assert ncalls(pyprof.Profile) == ncalls(cProfile.Profile)


def _call(f, x):
    return f(x)


def _py(x):
    return x


def _late_builtin_program():
    for i in range(100):
        _call(_py, i)          # this call site sees only Python functions...
    _call(len, [1])            # ...then, late, a C function


@pytest.mark.skipif(sys.version_info < (3, 12), reason="adaptive call sites exist on 3.12+ only")
def test_adaptive_call_sites_documented_limit():
    """Default mode stops CALL events at a site after 64 calls that all went to
    Python functions; exact_builtins keeps them (cProfile's behaviour)."""
    def len_calls(**kw):
        p = pyprof.Profile(**kw)
        p.runcall(_late_builtin_program)
        p.create_stats()
        return p.stats.get(("~", 0, "<built-in method builtins.len>"), (0, 0))[1]

    assert len_calls(exact_builtins=True) == 1
    assert len_calls() == 0
    # Re-armed when the profiler is disabled: the next profiler sees the site again.
    assert len_calls(exact_builtins=True) == 1


@pytest.mark.skipif(sys.version_info < (3, 12), reason="adaptive call sites exist on 3.12+ only")
def test_site_that_calls_c_early_is_never_disabled():
    def program():
        _call(len, [1])
        for i in range(200):
            _call(_py, i)
        _call(len, [1])

    p = pyprof.Profile()
    p.runcall(program)
    p.create_stats()
    assert p.stats[("~", 0, "<built-in method builtins.len>")][1] == 2
    assert p.stats[(__file__, _py.__code__.co_firstlineno, "_py")][1] == 200


def test_suspended_generators_and_coroutines_not_charged():
    import asyncio
    import time

    def gen():
        for i in range(3):
            yield i

    def consume():
        for _ in gen():
            time.sleep(0.03)             # the generator is suspended meanwhile

    async def sleeper():
        await asyncio.sleep(0.05)        # suspended: the event loop waits
        return 1

    def run():
        consume()
        asyncio.run(sleeper())

    p = pyprof.Profile()
    p.runcall(run)
    p.create_stats()
    by_name = {k[2]: v for k, v in p.stats.items()}
    assert by_name["gen"][1] == 4                     # 3 yields + the final resume, as cProfile
    assert by_name["gen"][3] < 0.01                   # not the 0.09 s spent sleeping outside
    assert by_name["consume"][3] >= 0.09
    assert by_name["sleeper"][1] == 2                 # started, then resumed once
    assert by_name["sleeper"][3] < 0.02               # not the 0.05 s awaited
