"""The user timer behaves as cProfile's: identical numbers from the same
deterministic timer, float seconds or integer ticks x timeunit; a broken timer
is reported as unraisable and never crashes the program."""
import cProfile

import pytest

import pyprof


class FakeClock:
    """Advances by a fixed step at every read: a deterministic timer."""

    def __init__(self, step):
        self.t = 0
        self.step = step

    def __call__(self):
        self.t += self.step
        return self.t


def _work():
    def leaf(n):
        return [i for i in range(n)]

    def mid(n):
        return sum(len(leaf(i)) for i in range(n))

    return mid(12) + len(sorted(range(50), key=lambda x: -x))


@pytest.mark.parametrize("step,unit", [(1, 0.001), (7, 1e-6)])
def test_integer_timer_numbers_identical_to_cprofile(step, unit):
    def stats(cls):
        p = cls(FakeClock(step), unit)
        p.runcall(_work)
        p.create_stats()
        return {k: v for k, v in p.stats.items()
                if "Profiler" not in k[2] and not k[0].endswith(("cProfile.py", "profiler.py"))}

    assert stats(pyprof.Profile) == stats(cProfile.Profile)


def test_float_timer_numbers_identical_to_cprofile():
    def stats(cls):
        clock = FakeClock(1)
        p = cls(lambda: clock() * 0.25)
        p.runcall(_work)
        p.create_stats()
        return {k: v[:4] for k, v in p.stats.items()
                if "Profiler" not in k[2] and not k[0].endswith(("cProfile.py", "profiler.py"))}

    assert stats(pyprof.Profile) == stats(cProfile.Profile)


def test_timer_that_raises_is_unraisable(capsys):
    from test import support

    def bad():
        raise ZeroDivisionError("tick")

    with support.catch_unraisable_exception() as cm:
        p = pyprof.Profile(bad)
        p.runcall(_work)
        assert cm.unraisable.exc_type is ZeroDivisionError
        p.create_stats()            # disable() reads the timer once more
    assert any(k[2] == "mid" for k in p.stats)


def test_timer_returning_garbage_is_unraisable():
    from test import support
    with support.catch_unraisable_exception() as cm:
        p = pyprof.Profile(lambda: "not a number")
        p.runcall(_work)
        assert cm.unraisable.exc_type is TypeError


def test_disable_inside_timer_is_refused_not_a_crash():
    # cProfile segfaults here on 3.11/3.12 (3.13 raises RuntimeError).
    from test import support
    holder = {}

    def evil():
        holder["p"].disable()
        return 0.0

    with support.catch_unraisable_exception() as cm:
        p = pyprof.Profile(evil)
        holder["p"] = p
        p.enable()
        _work()
        p.disable()
        assert cm.unraisable.exc_type is RuntimeError


def test_pending_exception_survives_the_timer():
    # gen.throw() delivers events with an exception set; a Python timer must not eat it.
    def gen():
        try:
            yield 1
        except KeyError:
            yield "caught"

    p = pyprof.Profile(FakeClock(1), 0.001)
    p.enable()
    g = gen()
    next(g)
    assert g.throw(KeyError) == "caught"
    p.disable()
