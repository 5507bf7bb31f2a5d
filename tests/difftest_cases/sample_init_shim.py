# difftest case: check=sample seed=141 found on Python 3.13 (13 of seeds 100..149; shrunk further by hand)
# difference: sampled __init__:0:__init__, which never ran
# fixed: the sampler recorded CPython 3.13's _Py_InitCleanup shim frame (code named __init__, file "__init__", line 0, pushed by the specialized CALL_ALLOC_AND_ENTER_INIT between a caller and a Python __init__); sys._getframe() and tracebacks skip it, and so do pyprof's stacks now
"""Creating instances of a class whose Python __init__ runs long enough to be sampled."""


class Point:
    def __init__(self, n):
        self.n = 0
        for i in range(n):
            self.n += i


def main():
    acc = 0
    for _ in range(50):
        acc += Point(2000).n
    return acc, []
