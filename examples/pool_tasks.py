"""A process pool with uneven tasks, for `--children` (docs/children.md):

    python -m pyprof --children -o pool.cprof examples/pool_tasks.py
    pyprof stats --by process --no-lines --select time,calls pool.cprof
"""
import multiprocessing as mp
import time


def task(x):
    """0 to 3 ms of busy work."""
    t = time.perf_counter()
    while time.perf_counter() - t < 0.001 * (x % 4):
        pass
    return x


if __name__ == "__main__":
    with mp.get_context("fork").Pool(4) as p:
        total = sum(p.map(task, range(200), chunksize=1))
    print("sum", total)
