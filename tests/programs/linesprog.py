"""Functions whose every line is profiled in the tests, one per construct the
line engine must get right. Each is deterministic."""
import asyncio
import threading


def helper(x):
    return x + 1


def multi_line_statement():
    total = helper(
        1
    ) + helper(
        2)
    table = {
        "a": helper(3),
        "b": [helper(i)
              for i in range(3)],
    }
    text = ("x"
            "y").upper(
    ).lower()
    return total, table, text


def comprehensions():
    squares = [i * i for i in range(20)]
    evens = {i for i in range(20) if i % 2 == 0}
    index = {i: helper(i) for i in range(10)}
    total = sum(i for i in range(30) if i % 3)
    nested = [[j for j in range(i)] for i in range(5)]
    return len(squares), len(evens), len(index), total, len(nested)


def try_finally():
    out = []
    for i in range(6):
        try:
            if i % 2:
                raise ValueError(i)
            out.append(i)
        except ValueError:
            out.append(-i)
        finally:
            out.append(0)
    try:
        return len(out)
    finally:
        out.clear()


class Ctx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True                 # swallows


def with_statement():
    n = 0
    for _ in range(5):
        with Ctx() as c:
            n += 1
            if n == 3:
                raise RuntimeError("swallowed by Ctx")
            n += c is not None
    return n


def loops():
    total = 0
    for i in range(10):
        if i == 2:
            continue
        if i == 7:
            break
        total += i
    else:
        total = -1
    j = 0
    while True:
        j += 1
        if j > 4:
            break
    while j:
        j -= 1
    else:
        total += 100
    return total


def counter(n):
    i = 0
    while i < n:
        received = yield i
        if received:
            i += received
        i += 1


def generator_resumes():
    total = sum(counter(6))
    g = counter(20)
    next(g)
    total += g.send(3)
    total += g.send(2)
    g.close()
    return total


def _raises(i):
    if i % 2:
        raise KeyError(i)
    return i


def exceptions():
    caught = 0
    for i in range(6):
        try: _raises(i)                     # noqa: E701  (raised and caught on one line)
        except KeyError: caught += 1        # noqa: E701
    try:
        int("x")
    except ValueError:
        caught += 1
    return caught


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


def recursion():
    return fib(12), is_even(11)


def threads():
    results = [0] * 4

    def work(k):
        s = 0
        for i in range(200):
            s += helper(i)
        results[k] = s

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(results)


async def _leaf(i):
    await asyncio.sleep(0)
    return i * 2


async def _agen(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i


async def _main():
    total = 0
    for i in range(3):
        total += await _leaf(i)
    async for v in _agen(4):
        total += v
    results = await asyncio.gather(*(_leaf(i) for i in range(3)))
    return total + sum(results)


def coroutines():
    return asyncio.run(_main())


square = lambda x: (x       # noqa: E731
                    * x)


def lambdas():
    return sum(square(i) for i in range(5))


class Shape:
    def __init__(self, side):
        self.side = side

    @property
    def area(self):
        a = self.side
        return a * a

    @classmethod
    def unit(cls):
        shape = cls(1)
        return shape

    @staticmethod
    def describe(x):
        text = f"shape {x}"
        return text

    def grow(self):
        self.side += 1
        return self.side


def methods():
    s = Shape.unit()
    total = s.area + s.grow()
    return total, Shape.describe(total)


def nested():
    def inner(x):
        y = x * 2
        return y
    return [inner(i) for i in range(4)]


# name -> (function to run, the functions whose lines are traced)
CASES = {
    "multi_line_statement": (multi_line_statement, [multi_line_statement]),
    "comprehensions": (comprehensions, [comprehensions]),
    "try_finally": (try_finally, [try_finally]),
    "with_statement": (with_statement, [with_statement]),
    "loops": (loops, [loops]),
    "generator_resumes": (generator_resumes, [generator_resumes, counter]),
    "exceptions": (exceptions, [exceptions, _raises]),
    "recursion": (recursion, [fib, is_even, is_odd]),
    "threads": (threads, [threads, helper]),
    "coroutines": (coroutines, [_main, _leaf, _agen]),
    "lambdas": (lambdas, [lambdas, square]),
    "methods": (methods, [Shape.__dict__["area"], Shape.__dict__["unit"],
                          Shape.__dict__["describe"], Shape.grow]),
    "nested": (nested, [nested]),
}
