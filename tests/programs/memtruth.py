"""What tests/programs/memprog*.py share: run a function under tracemalloc (the ground
truth) or under pyprof's memory mode and print {line: live bytes} of one file
as JSON (pyprof's run adds "status": what it says of NumPy's buffers)."""
import json
import sys


def measure(run, filename, tool=None):
    tool = tool or sys.argv[1]
    result = {}
    if tool == "tracemalloc":
        import tracemalloc
        tracemalloc.start(1)
        keep = run()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        for st in snap.statistics("lineno"):
            frame = st.traceback[0]
            if frame.filename == filename:
                result[frame.lineno] = result.get(frame.lineno, 0) + st.size
    else:
        import pyprof
        p = pyprof.Profile(mode="memory")
        p.enable()
        keep = run()
        p.disable()
        s = p.session()
        for (fid, line), c in s.memory_lines().items():
            if s.functions[fid].filename == filename and c.net_bytes:
                result[line] = c.net_bytes
        result["status"] = s.meta.get("numpy_buffers")
    del keep
    print(json.dumps(result))
