"""Programs with known shapes, profiled by pyprof and by cProfile in the tests."""
import asyncio
import functools
import itertools
import json
import re


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


def recursion():
    fib(15)
    is_even(40)


def _count(n):
    for i in range(n):
        yield i


def _squares(it):
    for x in it:
        yield x * x


def generators():
    total = sum(_squares(_count(300)))
    total += sum(x for x in range(200) if x % 3)
    g = _count(10)
    next(g)
    g.close()
    first = any(a == 1 for a in (1, 2))
    return total, first


async def _leaf(i):
    await asyncio.sleep(0)
    return i


async def _fan_out():
    results = await asyncio.gather(*[_leaf(i) for i in range(20)])
    return sum(results)


def async_program():
    return asyncio.run(_fan_out())


class Shape:
    count = 0

    def __init__(self, side):
        self.side = side
        Shape.count += 1

    def area(self):
        return self.side * self.side

    @property
    def perimeter(self):
        return 4 * self.side

    @classmethod
    def unit(cls):
        return cls(1)

    @staticmethod
    def describe(x):
        return f"shape {x}"

    def __call__(self):
        return self.area()

    def __repr__(self):
        return f"Shape({self.side})"


def methods():
    shapes = [Shape(i) for i in range(50)] + [Shape.unit()]
    total = sum(s.area() + s.perimeter for s in shapes)
    total += sum(s() for s in shapes)
    names = [Shape.describe(s) for s in shapes[:5]]
    return total, names, repr(shapes[0])


def _fails(i):
    if i % 3 == 0:
        raise ValueError(i)
    return i


def exceptions():
    caught = 0
    for i in range(30):
        try:
            _fails(i)
        except ValueError:
            caught += 1
    try:
        int("not a number")
    except ValueError:
        caught += 1
    try:
        {}["missing"]
    except KeyError:
        caught += 1
    return caught


@functools.lru_cache(maxsize=None)
def _cached(n):
    return n * 2


def builtins_and_c():
    data = [(i * 7919) % 1000 for i in range(2000)]
    out = sorted(data, key=lambda x: -x)
    out = list(map(str, out[:100]))
    joined = ",".join(out)
    parts = joined.split(",")
    doc = json.dumps({"parts": parts[:20], "n": len(parts)})
    back = json.loads(doc)
    pat = re.compile(r"(\d)(\d)")
    hits = [m.group(1) for m in pat.finditer(joined)]
    d = {}
    for p in parts[:200]:
        d.setdefault(p, []).append(p)
    lst = []
    for i in range(100):
        lst.append(i)
        list.append(lst, i)
    chained = list(itertools.chain(range(5), range(5)))
    cached = [_cached(i % 10) for i in range(50)]
    return len(hits), back["n"], len(d), max(chained), sum(cached), min(data), len(lst)


def closures_and_decorators():
    def deco(f):
        @functools.wraps(f)
        def wrapper(*a, **k):
            return f(*a, **k)
        return wrapper

    @deco
    def inner(x):
        return x + 1

    adders = [lambda y, i=i: y + i for i in range(10)]
    total = sum(inner(i) for i in range(20))
    return total + sum(a(1) for a in adders)


class Resource:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def with_statements():
    n = 0
    for _ in range(20):
        with Resource():
            n += 1
    return n


ALL = [recursion, generators, async_program, methods, exceptions, builtins_and_c,
       closures_and_decorators, with_statements]
