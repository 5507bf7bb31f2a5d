"""NumPy arrays made and freed on known lines, measured by tracemalloc (which
NumPy reports its buffers to) and by pyprof (NumPy's data handler): prints
{line: net bytes} of this file. ``memprog_numpy.py tracemalloc|pyprof``."""
import threading

from memtruth import measure


def arrays():
    import numpy as np
    a = np.zeros(1_000_000)                     # 8 MB, kept
    b = np.empty((300, 300))                    # 720 kB, freed below
    c = a[:1000] + 1.0                          # a ufunc's result buffer
    d = np.concatenate([c, c])
    del b
    e = np.arange(50_000, dtype=np.int64)
    e.resize(100_000, refcheck=False)           # realloc: the block moves here
    return a, c, d, e


def in_thread(out):
    import numpy as np
    out.append(np.ones(200_000))                # 1.6 MB, made in another thread


def run():
    keep = list(arrays())
    out = []
    t = threading.Thread(target=in_thread, args=(out,))
    t.start()
    t.join()
    keep.append(out)
    return keep


def main():
    __import__("numpy")                         # loaded before measuring, as a program would
    measure(run, __file__)


if __name__ == "__main__":
    main()
