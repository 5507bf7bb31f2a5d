"""Fuzz the readers with structurally corrupt captures (docs/capture-format.md,
"What a reader checks").

Captures of every kind are made with the real profiler on small programs;
each mutated file changes the decompressed record stream (bytes and ints in
payloads, counts, lengths, ids out of range, path cycles, records duplicated,
dropped or reordered, JSON values of the wrong type), then gets a correct
checksum and zlib stream, so only the record checks can catch it. Each file
goes through pyprof.load, every export format and the CLI (`pyprof view` with
every --view, `pyprof convert`, `diff`, `merge`, `stats`); each must succeed or
end in a PyprofError / status 2 with one `pyprof: ` line, within a time bound.

    python tests/programs/fuzz_captures.py --n 5000 --seed 1 [--keep DIR]
    python tests/programs/fuzz_captures.py --atheris --seconds 600     # with atheris installed

Files run in a worker process (memory-limited, watched for hangs); a failing
file is copied to --keep (default tests/corrupt_cases/new/) with what failed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib

HEADER = struct.Struct("<8sHHIQI")
RECORD = struct.Struct("<HHI")
REC_END, REC_STEP, REC_INFO, REC_META, REC_PATHS = 0xFFFF, 17, 1, 2, 16
# record type -> its row size, for the counted tables (a u32 count, then rows)
ROW_SIZES = {4: 24, 5: 32, 6: 40, 7: 48, 8: 32, 9: 32, 11: 32, 12: 64, 13: 24, 14: 40,
             16: 40, 18: 24, 21: 72, 22: 40, 23: 24}
VIEWS = ("code", "op", "scope", "graph", "lines", "memory")
OP_SECONDS = 30                 # one reader on one file: a hang (a loaded machine once
                                # stretched a pprof export past 10 s)
HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAM = textwrap.dedent("""
    import sys, threading
    try:
        import pyprof
    except ImportError:
        pyprof = None

    def leaf(n):
        return sum(range(n))

    def rec(n):
        return leaf(50) if n == 0 else rec(n - 1) + 1

    class Shape:
        def __init__(self, n):
            self.data = [i * 1.5 for i in range(n)]
        @property
        def area(self):
            return sum(self.data)

    def gen(n):
        for i in range(n):
            yield leaf(i)

    def work(k):
        keep = []
        for i in range(k):
            keep.append(Shape(200 + i).area)
            rec(i % 12)
            list(gen(20))
            keep.append(bytearray(4096))
        return len(keep)

    def burn(seconds):
        import time
        end = time.process_time() + seconds
        while time.process_time() < end:
            work(5)

    def main():
        t = threading.Thread(target=work, args=(40,), name="helper")
        t.start()
        steps = pyprof is not None and "--steps" in sys.argv
        for i in range(3):
            if steps:
                with pyprof.step(f"s{i}"):
                    work(30)
            else:
                work(30)
        if "--burn" in sys.argv:
            burn(0.3)
        if "--sqlite" in sys.argv:          # C code's own allocations (malloc)
            import sqlite3
            con = sqlite3.connect(":memory:")
            con.execute("create table t(x)")
            con.executemany("insert into t values (?)", [(bytes(2000),)] * 300)
            con.close()
        if "--asyncio" in sys.argv:
            import asyncio

            async def task(i):
                for _ in range(3):
                    work(5)
                    await asyncio.sleep(0.01)
                return i

            async def amain():
                await asyncio.gather(*(asyncio.create_task(task(i), name=f"t{i}")
                                       for i in range(4)))
                await asyncio.to_thread(work, 5)
            asyncio.run(amain())
        t.join()

    main()
""")

def _has_libunwind():
    try:
        from pyprof import _cprof
    except ImportError:
        return False
    return "libunwind" in _cprof.FEATURES


KINDS = {
    "functions": [],
    "lines": ["--lines-all"],
    "lines-memory": ["--lines-all", "--memory"],
    "samples": ["--sample", "--rate", "2000"],
    "memory": ["--memory"],
    "memory-stacks": ["--memory", "--memory-stacks"],
    "memory-functions": ["--memory", "--functions"],
    "timeline": ["--timeline"],
    "steps": [],
    "async-samples": ["--sample", "--wall", "--rate", "2000", "--async"],
    "async-traced": ["--async", "--timeline"],
    "memory-native": ["--memory", "--memory-stacks", "--native-allocs", "--temporary"]
                     + (["--native"] if _has_libunwind() else []),
}
KIND_ARGS = {"samples": ["--burn"], "steps": ["--steps"], "async-samples": ["--asyncio"],
             "async-traced": ["--asyncio"], "memory-native": ["--sqlite"]}


def make_captures(outdir, python=sys.executable) -> dict:
    """kind -> path of a capture made with the real profiler."""
    os.makedirs(outdir, exist_ok=True)
    prog = os.path.join(outdir, "prog.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    out = {}
    for kind, opts in KINDS.items():
        path = os.path.join(outdir, f"{kind}.cprof")
        subprocess.run([python, "-m", "pyprof", "-o", path, *opts, prog,
                        *KIND_ARGS.get(kind, [])], check=True, capture_output=True,
                       timeout=120, cwd=outdir)
        out[kind] = path
    merged = os.path.join(outdir, "merged.cprof")
    subprocess.run([python, "-m", "pyprof", "merge", "-o", merged, out["functions"],
                    out["timeline"]], check=True, capture_output=True, timeout=120)
    out["merged"] = merged
    return out


# ------------------------------------------------------------------ the stream
def read_blob(data: bytes):
    _, major, minor, flags, length, crc = HEADER.unpack_from(data)
    return (major, minor, flags), zlib.decompress(data[HEADER.size:])


def write_file(head, blob: bytes) -> bytes:
    major, minor, flags = head
    return (HEADER.pack(b"\x89CPROF\r\n", major, minor, flags, len(blob), zlib.crc32(blob))
            + zlib.compress(blob, 1))


def split(blob: bytes) -> list:
    """[(type, payload)] up to and without END."""
    out, off = [], 0
    while off < len(blob):
        t, _, n = RECORD.unpack_from(blob, off)
        off += RECORD.size
        if t == REC_END:
            break
        out.append([t, bytes(blob[off:off + n])])
        off += n
    return out


def join(records, end=True) -> bytes:
    parts = [RECORD.pack(t, 0, len(p)) + p for t, p in records]
    if end:
        parts.append(RECORD.pack(REC_END, 0, 0))
    return b"".join(parts)


def step_parts(payload):
    (hlen,) = struct.unpack_from("<I", payload)
    return payload[:4 + hlen], split(payload[4 + hlen:])


# ------------------------------------------------------------------ mutations
INTERESTING = (0, 1, 2, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE,
               0xFFFFFFFF, 1000, 2**20)


def _u32(rng, payload: bytearray, pos, value=None):
    if pos + 4 > len(payload):
        return
    old = struct.unpack_from("<I", payload, pos)[0]
    if value is None:
        value = rng.choice([*INTERESTING, old + 1, old - 1, old * 2, rng.getrandbits(32),
                            rng.randrange(64)]) & 0xFFFFFFFF
    struct.pack_into("<I", payload, pos, value)


def mutate_payload(rng, t, payload: bytes) -> bytes:
    p = bytearray(payload)
    if not p:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 9)))
    size = ROW_SIZES.get(t)
    how = rng.randrange(9)
    if how == 0:                                    # flip bits
        for _ in range(rng.randrange(1, 4)):
            p[rng.randrange(len(p))] ^= 1 << rng.randrange(8)
    elif how == 1:                                  # an int somewhere
        _u32(rng, p, rng.randrange(0, max(1, len(p) - 3)) & ~3)
    elif how == 2:                                  # the count
        _u32(rng, p, 0)
    elif how == 3 and size and len(p) >= 4 + size:          # a key field of a row
        row = rng.randrange((len(p) - 4) // size)
        field = rng.randrange(min(4, size // 4))
        _u32(rng, p, 4 + row * size + 4 * field)
    elif how == 5 and size and len(p) >= 4 + size:          # a counter field (u64/i64)
        row = rng.randrange((len(p) - 4) // size)
        pos = 4 + row * size + rng.randrange(size // 8) * 8
        struct.pack_into("<Q", p, pos, rng.choice(
            [0, 2**63, 2**64 - 1, 2**63 - 1, rng.getrandbits(64), 2**40]))
    elif how == 6:                                  # truncate or extend
        if rng.random() < 0.5:
            del p[rng.randrange(len(p)):]
        else:
            p += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 50)))
    elif how == 4 and size and len(p) >= 4 + 2 * size:      # a key from another row: ids
        n = (len(p) - 4) // size                             # stay valid, rows disagree
        field = 4 + 4 * rng.randrange(min(4, size // 4))
        src, dst = rng.randrange(n), rng.randrange(n)
        p[4 + dst * size + field - 4:4 + dst * size + field] = \
            p[4 + src * size + field - 4:4 + src * size + field]
    elif how == 7 and size and len(p) >= 4 + 2 * size:      # duplicate a row (count kept right)
        row = rng.randrange((len(p) - 4) // size)
        p += p[4 + row * size:4 + (row + 1) * size]
        struct.pack_into("<I", p, 0, struct.unpack_from("<I", p)[0] + 1)
    else:                                           # overwrite a run of bytes
        pos = rng.randrange(len(p))
        for i in range(pos, min(len(p), pos + rng.randrange(1, 16))):
            p[i] = rng.choice((0, 0xFF, rng.getrandbits(8)))
    return bytes(p)


def mutate_paths(rng, payload: bytes) -> bytes:
    """A path pointing at itself, at a later path, or at one that is missing."""
    p = bytearray(payload)
    n = (len(p) - 4) // 40
    if n < 1:
        return payload
    row = rng.randrange(n)
    t, pid, parent = struct.unpack_from("<III", p, 4 + row * 40)
    other = struct.unpack_from("<I", p, 4 + rng.randrange(n) * 40 + 4)[0]
    struct.pack_into("<I", p, 4 + row * 40 + 8, rng.choice([pid, pid + 1, other, 0x7FFFFFFF]))
    return bytes(p)


def _json_values(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*path, k), v
            yield from _json_values(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield (*path, i), v
            yield from _json_values(v, (*path, i))


def mutate_json(rng, payload: bytes) -> bytes:
    try:
        obj = json.loads(payload)
    except ValueError:
        return payload
    spots = list(_json_values(obj))
    if not spots:
        return json.dumps(rng.choice([[], 1, "x", None])).encode()
    path, _ = rng.choice(spots)
    target = obj
    for k in path[:-1]:
        target = target[k]
    new = rng.choice([None, -1, 0, 2**70, -1e300, 1.5, "x", "", [], {}, [1, 2], {"1": 2},
                      True, [-5, 10**9], {"0": "x"}])
    if rng.random() < 0.2 and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = new
    return json.dumps(obj).encode()


def mutate_records(rng, records: list, depth=0) -> list:
    recs = [list(r) for r in records]
    how = rng.randrange(12)
    if not recs:
        return recs
    i = rng.randrange(len(recs))
    t = recs[i][0]
    if how == 0:
        recs.insert(rng.randrange(len(recs) + 1), list(recs[i]))       # duplicate
    elif how == 1:
        del recs[i]                                                    # drop
    elif how == 2:
        j = rng.randrange(len(recs))
        recs[i], recs[j] = recs[j], recs[i]                            # reorder
    elif how == 3 and any(r[0] == REC_PATHS for r in recs):
        k = next(k for k, r in enumerate(recs) if r[0] == REC_PATHS)
        recs[k][1] = mutate_paths(rng, recs[k][1])
    elif how == 4 and t in (REC_INFO, REC_META):
        recs[i][1] = mutate_json(rng, recs[i][1])
    elif how == 5 and t == REC_STEP and depth == 0:
        head, inner = step_parts(recs[i][1])
        if rng.random() < 0.2:
            head = mutate_payload(rng, 0, head)
            recs[i][1] = head + join(inner)
        else:
            recs[i][1] = head + join(mutate_records(rng, inner, depth + 1))
    elif how == 6:
        recs[i][0] = rng.choice([t ^ 1, rng.randrange(1, 20), 0xFFFF])  # another type
    else:
        recs[i][1] = mutate_payload(rng, t, recs[i][1])
    return recs


def mutate(rng, data: bytes) -> bytes:
    head, blob = read_blob(data)
    records = split(blob)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        records = mutate_records(rng, records)
    out = join(records)
    if rng.random() < 0.05:                     # a record length off
        b = bytearray(out)
        pos = 0
        for _ in range(rng.randrange(len(records) + 1)):
            pos += RECORD.size + struct.unpack_from("<I", b, pos + 4)[0]
        if pos + 8 <= len(b):
            _u32(rng, b, pos + 4)
        out = bytes(b)
    return write_file(head, out)


# ------------------------------------------------------------------ the readers
class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout(f"still running after {OP_SECONDS} s")


def check_file(path, workdir) -> tuple:
    """Run every reader on `path`: (whether it loaded, the failures as
    (reader, what, traceback's end))."""
    import pyprof
    from pyprof import cli
    from pyprof.errors import PyprofError
    from pyprof.export import FORMATS, export
    failures = []

    def run(what, fn):
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, OP_SECONDS)
        try:
            fn()
        except PyprofError:
            pass
        except BaseException as e:          # noqa: BLE001 - any other end is the finding
            import traceback
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            failures.append((what, f"{type(e).__name__}: {e}"[:300], "".join(tb[-3:])[-1500:]))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    def cli_run(what, argv):
        out, err = io.StringIO(), io.StringIO()
        rc = None

        def go():
            nonlocal rc
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(argv)
        run(what, go)
        if rc is None:
            return
        lines = err.getvalue().splitlines()
        if rc == 2 and (len(lines) != 1 or not lines[0].startswith("pyprof: ")):
            failures.append((what, f"status 2 with stderr {lines[:5]!r}", ""))
        elif rc not in (0, 2):
            failures.append((what, f"status {rc} with stderr {lines[:5]!r}", ""))

    loaded = []
    run("load", lambda: loaded.append(pyprof.load(path)))
    if not loaded:
        return False, failures
    for fmt in FORMATS:
        out = os.path.join(workdir, f"out.{fmt}")
        run(f"export {fmt}", lambda: export(pyprof.load(path), fmt, out))
    cli_run("view", ["view", path])
    for v in VIEWS:
        cli_run(f"view --view {v}", ["view", path, "--view", v])
    cli_run("convert", ["convert", path, "-o", os.path.join(workdir, "out.txt")])
    cli_run("diff", ["diff", path, path, "--flamegraph", os.path.join(workdir, "d.html")])
    cli_run("merge", ["merge", "--force", "-o", os.path.join(workdir, "m.cprof"), path, path])
    cli_run("stats", ["stats", "--by", "run", path, path])
    return True, failures


def worker(paths):
    """Check files named on stdin-less argv; one JSON line per file."""
    import resource
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):   # ASan's shadow needs terabytes
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    signal.signal(signal.SIGALRM, _alarm)
    work = tempfile.mkdtemp(prefix="fuzzw")
    for p in paths:
        print(json.dumps({"start": p}), flush=True)
        loaded, failures = check_file(p, work)
        print(json.dumps({"file": p, "loaded": loaded, "failures": failures}), flush=True)
    shutil.rmtree(work, ignore_errors=True)


def run_files(paths, python=sys.executable, per_file=4 * OP_SECONDS + 30) -> dict:
    """path -> (loaded, failures), checking the files in worker processes (a worker that
    hangs or dies is replaced; its file is a failure)."""
    results, todo = {}, list(paths)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    while todo:
        proc = subprocess.Popen([python, os.path.abspath(__file__), "--worker", *todo],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                text=True)
        current, deadline = None, None
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not sel.select(timeout):
                proc.kill()
                results[current] = (None, [("worker", f"no answer after {per_file} s (a hang)",
                                             "")])
                break
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                current = todo[0] if current is None else current   # died before its first file
                if current not in results:
                    err = proc.stderr.read()[-1500:]
                    results[current] = (None, [("worker", f"died with status {proc.returncode}",
                                                err)])
                break
            msg = json.loads(line)
            if "start" in msg:
                current, deadline = msg["start"], time.monotonic() + per_file
            else:
                results[msg["file"]] = (msg["loaded"], msg["failures"])
                current, deadline = None, None
        proc.stdout.close()
        proc.stderr.close()
        done = set(results)
        todo = [p for p in todo if p not in done]
    return results


def fuzz(n, seed, keep, workdir, python=sys.executable, batch=50, log=print) -> tuple:
    """Make captures, write `n` mutated files, check them: (files, files that
    loaded, {failing file: failures})."""
    seeds = make_captures(os.path.join(workdir, "captures"), python)
    originals = {k: open(p, "rb").read() for k, p in seeds.items()}
    rng = random.Random(seed)
    kinds = sorted(originals)
    files = []
    mdir = os.path.join(workdir, "mutated")
    os.makedirs(mdir, exist_ok=True)
    for i in range(n):
        kind = kinds[i % len(kinds)]
        path = os.path.join(mdir, f"{kind}-{seed}-{i}.cprof")
        with open(path, "wb") as f:
            f.write(mutate(rng, originals[kind]))
        files.append(path)
    # the unmutated captures must pass every reader too
    files[:0] = list(seeds.values())
    failing, nloaded, done = {}, 0, 0
    t0 = time.monotonic()
    # batches in worker processes, as many at once as there are CPUs (two here)
    from concurrent.futures import ThreadPoolExecutor
    batches = [files[b:b + batch] for b in range(0, len(files), batch)]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for got in pool.map(lambda chunk: run_files(chunk, python), batches):
            for p, (loaded, fails) in got.items():
                nloaded += bool(loaded)
                if fails:
                    failing[p] = fails
            done += len(got)
            log(f"  {done}/{len(files)} files, {nloaded} loaded, "
                f"{len(failing)} failing, {time.monotonic() - t0:.0f} s")
    if failing and keep:
        os.makedirs(keep, exist_ok=True)
        for p, fails in failing.items():
            shutil.copy(p, os.path.join(keep, os.path.basename(p)))
            with open(os.path.join(keep, os.path.basename(p) + ".txt"), "w") as f:
                json.dump(fails, f, indent=1)
    return len(files), nloaded, failing


def atheris_main(seed_files, seconds):
    """Coverage-guided fuzzing with atheris (libFuzzer): its inputs are record
    streams (the corpus: the captures' decompressed streams), each given a
    header and checksum, then run through every reader."""
    import atheris
    with atheris.instrument_imports(include=["pyprof"]):
        import pyprof                       # noqa: F401
        from pyprof import cli, export    # noqa: F401
    work = tempfile.mkdtemp(prefix="fuzza")
    corpus = os.path.join(work, "corpus")
    os.makedirs(corpus)
    for i, p in enumerate(seed_files):
        head, blob = read_blob(open(p, "rb").read())
        with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
            f.write(blob)
    path = os.path.join(work, "f.cprof")

    def one(data):
        with open(path, "wb") as f:
            f.write(write_file(head, data))
        _, fails = check_file(path, work)
        if fails:
            raise AssertionError(fails)
    atheris.Setup([sys.argv[0], corpus, f"-max_total_time={seconds}", "-rss_limit_mb=3072",
                   f"-timeout={4 * OP_SECONDS}"], one)
    atheris.Fuzz()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="mutated files (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", default=os.path.join(os.path.dirname(HERE), "corrupt_cases", "new"),
                    help="where failing files are copied")
    ap.add_argument("--atheris", action="store_true",
                    help="coverage-guided mutation of the record streams with atheris "
                         "(pip install atheris), for --seconds")
    ap.add_argument("--seconds", type=int, default=600, help="with --atheris (default 600)")
    ap.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        worker(args.worker)
        return 0
    with tempfile.TemporaryDirectory(prefix="pyprof-fuzz") as work:
        if args.atheris:
            seeds = make_captures(os.path.join(work, "captures"))
            atheris_main(list(seeds.values()), args.seconds)
            return 0
        t0 = time.monotonic()
        n, nloaded, failing = fuzz(args.n, args.seed, args.keep, work)
        print(f"{n} files (seed {args.seed}) in {time.monotonic() - t0:.0f} s: {nloaded} "
              f"loaded, {len(failing)} failing")
        for p, fails in list(failing.items())[:20]:
            print(f"  {os.path.basename(p)}: {fails[0][0]}: {fails[0][1]}")
            if fails[0][2]:
                print(textwrap.indent(fails[0][2].rstrip(), "      "))
        if failing:
            print(f"failing files copied to {args.keep}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
