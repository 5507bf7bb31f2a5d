"""A program with known allocations, profiled two ways by tests/test_memory.py:
under tracemalloc (the ground truth) and under pyprof's memory mode. Run as
``memprog.py tracemalloc|pyprof``; prints {line: net bytes} of this file as JSON.

Only objects that do not come from CPython's free lists (bytes, str,
bytearray, large lists and dicts): tracemalloc charges a reused free-list
object to the line that reuses it, which allocator hooks cannot see."""
import queue
import threading

from memtruth import measure


def make_bytes(n):
    return [bytes(1000 + i) for i in range(n)]


def make_strings(n):
    out = []
    for i in range(n):
        out.append("s" * (2000 + i))
    return out


def grow():
    buf = bytearray(1000)
    for _ in range(50):
        buf.extend(b"z" * 4000)       # realloc: the block moves to this line
    return buf


def temporary():
    t = bytes(500_000)                # freed before returning: net 0
    return len(t)


def held_across_yields():
    for i in range(5):
        chunk = bytes(10_000 * (i + 1))
        yield len(chunk)


def raises(n):
    data = bytes(30_000)
    if n % 2:
        raise ValueError(data[:10])
    return data


def recurse(n):
    block = "r" * (3000 + n)
    if n == 0:
        return [block]
    return recurse(n - 1) + [block]


def producer(q):
    for i in range(100):
        q.put(bytes(7000 + i))        # freed by the consumer, in another thread


def thread_work(k, out):
    out.append([b"t" * (5000 + k * 10 + i) for i in range(50)])


def run():
    keep = [make_bytes(200), make_strings(300), grow(), temporary()]
    keep.append({i: str(i) * 40 for i in range(2000)})
    keep.append(list(held_across_yields()))
    for n in range(4):
        try:
            keep.append(raises(n))
        except ValueError:
            pass
    keep.append(recurse(50))
    q = queue.Queue()
    t = threading.Thread(target=producer, args=(q,))
    t.start()
    t.join()
    while not q.empty():
        q.get()
    out = []
    threads = [threading.Thread(target=thread_work, args=(k, out)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keep.append(out)
    return keep


def main():
    measure(run, __file__)


if __name__ == "__main__":
    main()
