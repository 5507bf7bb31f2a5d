"""NumPy arrays made and freed on known lines, measured by tracemalloc (which
NumPy reports its buffers to) and by pyprof (NumPy's data handler): prints
{line: net bytes} of this file. ``memprog_numpy.py tracemalloc|pyprof``."""
import json
import sys
import threading


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
    import numpy                                # loaded before measuring, as a program would
    result = {}
    if sys.argv[1] == "tracemalloc":
        import tracemalloc
        tracemalloc.start(1)
        keep = run()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        for st in snap.statistics("lineno"):
            frame = st.traceback[0]
            if frame.filename == __file__:
                result[frame.lineno] = result.get(frame.lineno, 0) + st.size
    else:
        import pyprof
        p = pyprof.Profile(mode="memory")
        p.enable()
        keep = run()
        p.disable()
        s = p.session()
        for (fid, line), c in s.memory_lines().items():
            if s.functions[fid].filename == __file__ and c.net_bytes:
                result[line] = c.net_bytes
        result["status"] = s.meta.get("numpy_buffers")
    del keep
    print(json.dumps(result))


if __name__ == "__main__":
    main()
