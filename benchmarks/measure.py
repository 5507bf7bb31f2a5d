"""The timing loop the in-process benchmarks share: every configuration timed
once per round, in a new (seeded) order each round, so a slow spell of a shared
machine hits all alike; a configuration's cost is the median over rounds of its
time over the reference's time in the same round (paired ratios).

    from measure import interleaved, paired_ratio, timed
"""
import random
import statistics
import time


def timed(fn, prof=None, clock=time.perf_counter) -> float:
    """Seconds `fn()` takes, under `prof` (enabled just around it) if given;
    `clock`: time.thread_time for the thread's own CPU time."""
    if prof is not None:
        prof.enable()
    t = clock()
    fn()
    dt = clock() - t
    if prof is not None:
        prof.disable()
    return dt


def interleaved(runs, rounds, shuffle=True, seed=0) -> dict:
    """{name: [seconds per round]} of `runs` ({name: callable returning seconds}),
    each round running all once, shuffled (seeded) unless shuffle=False."""
    rnd = random.Random(seed)
    times = {name: [] for name in runs}
    for _ in range(rounds):
        order = list(runs)
        if shuffle:
            rnd.shuffle(order)
        for name in order:
            times[name].append(runs[name]())
    return times


def paired_ratio(times, ref) -> float:
    """Median over rounds of times[i] / ref[i]."""
    return statistics.median(ratios(times, ref))


def ratios(times, ref) -> list:
    """The per-round ratios times[i] / ref[i]."""
    return [t / r for t, r in zip(times, ref)]
