"""Task code the cluster tests share (tests/test_dask.py, test_spark.py): the
workers import it by name."""
import inspect
import time


def spin(seconds):
    """Burns this thread's CPU for `seconds` of it; the CPU time it measured."""
    start = time.thread_time()
    x = 0
    while time.thread_time() - start < seconds:
        for i in range(2000):
            x += i * i
    return time.thread_time() - start


def make(n):
    keep = [None] * n
    for i in range(n):
        keep[i] = bytearray(10000)      # MAKE_LINE
    return keep


# the same code under another name: tracemalloc watches this one, pyprof the
# first (tracemalloc's own bookkeeping allocates on the line it watches)
make_traced = type(make)(make.__code__.replace(co_name="make_traced", co_qualname="make_traced"),
                         globals())


def make_line():
    source, first = inspect.getsourcelines(make)
    return next(first + i for i, text in enumerate(source) if "MAKE_LINE" in text)


def hold():
    """make(40) under pyprof alone, and make_traced(40) under tracemalloc:
    (the bytes tracemalloc counted on their line, the line)."""
    import tracemalloc
    kept = make(40)
    tracemalloc.start()
    again = make_traced(40)
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    line = make_line()
    size = sum(s.size for s in snapshot.statistics("lineno")
               if s.traceback[0].lineno == line and s.traceback[0].filename == __file__)
    assert len(kept) == len(again) == 40
    return size, line


def bytes_of_make(session):
    """The bytes pyprof's memory mode counted on make's allocating line."""
    line = make_line()
    return sum(c.alloc_bytes for (fid, ln), c in session.memory_lines().items()
               if ln == line and session.functions[fid].qualname == "make")


def rise_and_fall(n):
    """Holds n blocks of 10,000 bytes at once, then lets them go."""
    keep = make(n)
    del keep
    return n


def traced_peak(n):
    """tracemalloc's peak during rise_and_fall(n), above its start (bytes)."""
    import tracemalloc
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        rise_and_fall(n)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
