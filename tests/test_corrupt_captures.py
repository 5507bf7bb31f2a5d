"""Structurally corrupt captures (right checksum, records that disagree) end in
one clear PyprofError naming the file and the record, never a traceback or a
hang (docs/capture-format.md, "What a reader checks"): a case per rule, the
files the fuzzer found, a bounded fuzz run (tests/programs/fuzz_captures.py) and the CLI."""
import glob
import json
import os
import struct
import sys

import pytest

import pyprof
from pyprof import PyprofError

import fuzz_captures as fz

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_FILES = int(os.environ.get("PYPROF_FUZZ_FILES", "300"))


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    return fz.make_captures(str(tmp_path_factory.mktemp("caps")))


def records(path):
    head, blob = fz.read_blob(open(path, "rb").read())
    return head, fz.split(blob)


def payload(recs, rtype):
    return next(r for r in recs if r[0] == rtype)


def craft(tmp_path, src, change, name="bad.cprof"):
    """A copy of capture `src` with change(records) applied, checksum right."""
    head, recs = records(src)
    out = change(recs)
    blob = fz.join(recs if out is None else out)
    path = tmp_path / name
    path.write_bytes(fz.write_file(head, blob))
    return str(path)


def set_field(recs, rtype, row, offset, fmt, value, size=None):
    """Set one field of one row of a counted table."""
    rec = payload(recs, rtype)
    p = bytearray(rec[1])
    size = size or fz.ROW_SIZES[rtype]
    struct.pack_into(fmt, p, 4 + row * size + offset, value)
    rec[1] = bytes(p)


def corrupt(path):
    with pytest.raises(PyprofError) as e:
        pyprof.load(path)
    text = str(e.value)
    prefix = f"{path} is corrupt: "
    assert text.startswith(prefix), text
    assert "\n" not in text
    return text[len(prefix):]


def rows(recs, rtype, fmt):
    p = payload(recs, rtype)[1]
    st = struct.Struct(fmt)
    (n,) = struct.unpack_from("<I", p)
    return [st.unpack_from(p, 4 + i * st.size) for i in range(n)]


# ------------------------------------------------------------------ a case per rule
def test_ids_in_range(captures, tmp_path):
    f = captures["functions"]
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 6, 0, 0, "<I", 99))) == \
        "FSTATS row 0 has thread 99, which the capture does not have"
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 6, 0, 4, "<I", 9999))) == \
        "FSTATS row 0 has function 9999, which the capture does not have"
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 7, 1, 8, "<I", 7777))) == \
        "EDGES row 1 has function 7777, which the capture does not have"
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 16, 2, 12, "<I", 555))) == \
        "PATHS row 2 (thread 0, path 2) has function 555, which the capture does not have"
    s = captures["samples"]
    assert corrupt(craft(tmp_path, s, lambda r: set_field(r, 11, 0, 4, "<I", 10**6))) == \
        "SAMPLES row 0 has stack 1000000, which the capture does not have"
    assert corrupt(craft(tmp_path, s, lambda r: set_field(r, 11, 0, 8, "<I", 9))) == \
        "SAMPLES row 0 has state 9 (at most 4)"
    m = captures["memory-stacks"]
    assert corrupt(craft(tmp_path, m, lambda r: set_field(r, 12, 0, 8, "<I", 3))) == \
        "MEMORY row 0 has site 3 (at most 2)"
    assert corrupt(craft(tmp_path, m, lambda r: set_field(r, 12, 0, 12, "<I", 2**30))) == \
        "MEMORY row 0 has allocation stack 1073741824, which the capture does not have"
    ln = captures["lines"]
    assert corrupt(craft(tmp_path, ln, lambda r: set_field(r, 9, 0, 12, "<I", 4242))) == \
        "CALLROWS row 0 has function 4242, which the capture does not have"


def test_edges_need_their_callee(captures, tmp_path):
    f = captures["functions"]
    _, recs = records(f)
    fstats = rows(recs, 6, "<IIQQqq")
    edges = rows(recs, 7, "<IIIIQQqq")
    t, caller, callee = edges[-1][:3]
    row = next(i for i, e in enumerate(edges) if (e[0], e[2]) == (t, callee))

    def drop(r):                        # the callee's FSTATS row in that thread
        keep = [x for x in fstats if (x[0], x[1]) != (t, callee)]
        payload(r, 6)[1] = struct.pack("<I", len(keep)) + b"".join(
            struct.pack("<IIQQqq", *x) for x in keep)
    assert corrupt(craft(tmp_path, f, drop)) == (
        f"EDGES row {row} (thread {t}, {edges[row][1]} -> {callee}) has a callee without an "
        f"FSTATS row in its thread")


def test_path_tree_without_cycles(captures, tmp_path):
    f = captures["functions"]
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 16, 5, 8, "<I", 5))) == \
        "PATHS row 5 (thread 0, path 5) has parent 5 (a cycle)"
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 16, 5, 8, "<I", 9))) == \
        "PATHS row 5 (thread 0, path 5) has parent 9 (a parent comes before its children)"
    # a parent the thread does not have
    _, recs = records(f)
    paths = rows(recs, 16, "<IIIIQqq")
    gone = next(i for i, p in enumerate(paths) if p[2] != 0xFFFFFFFE)     # a parent's row
    gone = next(i for i, p in enumerate(paths) if (p[0], p[1]) == (paths[gone][0], paths[gone][2]))
    t, missing = paths[gone][:2]
    keep = paths[:gone] + paths[gone + 1:]
    row = next(i for i, p in enumerate(keep) if (p[0], p[2]) == (t, missing))

    def drop(r):
        payload(r, 16)[1] = struct.pack("<I", len(keep)) + b"".join(
            struct.pack("<IIIIQqq", *p) for p in keep)
    assert corrupt(craft(tmp_path, f, drop)) == (
        f"PATHS row {row} (thread {t}, path {keep[row][1]}) has parent {missing} "
        f"(thread {t} has no path {missing})")


def test_sizes_and_counts(captures, tmp_path):
    f = captures["functions"]
    _, recs = records(f)
    n = len(rows(recs, 6, "<IIQQqq"))

    def count(value):
        def change(r):
            rec = payload(r, 6)
            rec[1] = struct.pack("<I", value) + rec[1][4:]
        return change
    assert corrupt(craft(tmp_path, f, count(n + 1))) == \
        f"FSTATS counts {n + 1} rows but has {4 + 40 * n} bytes"
    assert corrupt(craft(tmp_path, f, count(n - 1))) == \
        f"FSTATS counts {n - 1} rows of 40 bytes but has {40 * n} bytes of rows"
    assert corrupt(craft(tmp_path, f, count(0xFFFFFFFF))) == \
        f"FSTATS counts 4294967295 rows but has {4 + 40 * n} bytes"

    def short(r):
        payload(r, 6)[1] = b"\x01"
    assert corrupt(craft(tmp_path, f, short)) == "FSTATS has 1 bytes, too few for its count"

    def dup_row(r):
        rec = payload(r, 6)
        rec[1] = struct.pack("<I", n + 1) + rec[1][4:] + rec[1][4:44]
    assert corrupt(craft(tmp_path, f, dup_row)) == \
        f"FSTATS has {n + 1} rows but 1 of them repeat the key of an earlier row"

    def dup_record(r):
        r.insert(0, list(payload(r, 6)))
    assert corrupt(craft(tmp_path, f, dup_record)) == "FSTATS appears twice"

    def dup_thread(r):
        rec = payload(r, 5)
        rec[1] = struct.pack("<I", 2) + rec[1][4:36] * 2
    assert corrupt(craft(tmp_path, f, dup_thread)) == \
        "THREADS has 2 rows but 1 of them repeat the index of an earlier row"

    def long_record(r):
        return r
    head, recs2 = records(f)
    blob = bytearray(fz.join(recs2))
    struct.pack_into("<I", blob, 4, 10**6)         # INFO's length runs past the stream
    path = tmp_path / "len.cprof"
    path.write_bytes(fz.write_file(head, bytes(blob)))
    assert corrupt(str(path)).startswith("INFO runs past the end of the stream (1000000 bytes")

    s = captures["samples"]

    def deep_stack(r):
        rec = payload(r, 10)
        rec[1] = struct.pack("<III", 1, 300, 0) + struct.pack("<Q", 0) * 300
    assert corrupt(craft(tmp_path, s, deep_stack)) == \
        "STACKS stack 0 has 300 Python and 0 native frames (at most 256 and 128)"

    def huge_stack(r):
        rec = payload(r, 10)
        rec[1] = struct.pack("<III", 1, 0xFFFFFFFF, 0)
    assert corrupt(craft(tmp_path, s, huge_stack)) == \
        "STACKS stack 0 has 4294967295 + 0 frames, more than the record holds"


def test_strings_and_kinds(captures, tmp_path):
    f = captures["functions"]
    _, recs = records(f)
    nstrings = struct.unpack_from("<I", payload(recs, 3)[1])[0]
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 4, 0, 12, "<I", 10**6))) == \
        f"FUNCTIONS row 0 names string 1000000, but STRINGS has {nstrings}"
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 4, 0, 20, "<I", 7))) == \
        "FUNCTIONS row 0 has kind 7 (at most 1)"
    assert corrupt(craft(tmp_path, f, lambda r: set_field(r, 5, 0, 4, "<I", 10**6))) == \
        f"THREADS row 0 names string 1000000, but STRINGS has {nstrings}"


def test_name_tables(captures, tmp_path):
    s = captures["samples"]

    # the root frame of the first stack that has Python frames (a sampled
    # capture's stack 0 may be native-only or empty)
    raw = payload(records(s)[1], 10)[1]
    off, sid = 4, 0
    while True:
        nf, nn = struct.unpack_from("<II", raw, off)
        if nf:
            break
        off, sid = off + 8 + 8 * nn, sid + 1

    def bad_frame(r):
        rec = payload(r, 10)
        p = bytearray(rec[1])
        struct.pack_into("<Q", p, off + 8, 4444 << 32 | 1)
        rec[1] = bytes(p)
    assert corrupt(craft(tmp_path, s, bad_frame)) == \
        f"STACKS stack {sid} has a frame of function 4444, which the capture does not have"
    m = captures["memory"]
    assert corrupt(craft(tmp_path, m, lambda r: set_field(r, 14, 0, 32, "<I", 4444))) == \
        "MEMCURVE row 0 names function 4444, which the capture does not have"
    # MEMNATIVE (24): per MEMSTACKS stack, native addresses and 1<<63 | entry frame
    ms = captures["memory-stacks"]
    nstacks = struct.unpack_from("<I", payload(records(ms)[1], 15)[1])[0]
    assert nstacks > 0

    def memnative(words_of_last):
        def change(r):
            words = [b"\0\0\0\0"] * (nstacks - 1) + [
                struct.pack(f"<I{len(words_of_last)}Q", len(words_of_last), *words_of_last)]
            r.append([24, struct.pack("<I", nstacks) + b"".join(words)])
        return change
    ok = pyprof.load(craft(tmp_path, ms, memnative([0x401000, 0x402000]), "ok.cprof"))
    assert ok.memory_native == {nstacks - 1: ((0x401000, 0x402000), ())}
    assert corrupt(craft(tmp_path, ms, memnative([0x401000, 1 << 63 | 300]))) == \
        f"MEMNATIVE stack {nstacks - 1} has entry frames beyond its Python frames"
    assert corrupt(craft(tmp_path, ms, memnative([0x401000] * 400))) == \
        f"MEMNATIVE stack {nstacks - 1} has 400 words (at most 384)"
    t = captures["timeline"]
    assert corrupt(craft(tmp_path, t, lambda r: set_field(r, 18, 3, 16, "<q", -5))) == \
        "TIMELINE row 3 has a negative duration"
    assert corrupt(craft(tmp_path, t, lambda r: set_field(r, 18, 0, 4, "<I", 31337))) == \
        "TIMELINE row 0 has function 31337, which the capture does not have"


def test_json_records(captures, tmp_path):
    f = captures["functions"]

    def json_edit(rtype, fn):
        def change(r):
            rec = payload(r, rtype)
            obj = json.loads(rec[1])
            obj = fn(obj)
            rec[1] = json.dumps(obj).encode()
        return change
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: [o]))) == \
        "INFO is not a JSON object"
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: {**o, "time_unit": -1}))) == \
        "INFO.time_unit is -1, not a positive number"
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: {**o, "events": "many"}))) == \
        "INFO.events is 'many', not a number"
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: {**o, "sampling": [1]}))) == \
        "INFO.sampling is [1], not an object or false or null"
    assert corrupt(craft(tmp_path, f, json_edit(2, lambda o: {**o, "thread_names": []}))) == \
        "META.thread_names is [], not an object"
    # found by the fuzzer: the report's date of a start in the year 39381
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: {**o, "start_wall_ns": 2**70}))) \
        == f"INFO.start_wall_ns is {2**70}, not a time since the epoch"
    # found by the fuzzer: the pprof export took the basename of a null executable
    assert corrupt(craft(tmp_path, f, json_edit(2, lambda o: {**o, "executable": None}))) == \
        "META.executable is None, not a string"
    assert corrupt(craft(tmp_path, f, json_edit(2, lambda o: {**o, "steps": [{"t": "x"}]}))) \
        == "META.steps[0].t is 'x', not a number"
    # found by the fuzzer: the collector's summary read a list as an object
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: {**o, "gc": [1]}))) == \
        "INFO.gc is [1], not an object or null"
    gc = {"collections": [1, 0], "pause_ns": [5, 0, 0], "max_pause_ns": 5, "collected": 0,
          "uncollectable": 0}
    assert corrupt(craft(tmp_path, f, json_edit(1, lambda o: {**o, "gc": gc}))) == \
        "INFO.gc.collections is [1, 0], not one number per generation"

    def bad_json(r):
        payload(r, 2)[1] = b"{not json"
    assert corrupt(craft(tmp_path, f, bad_json)).startswith("META is not valid JSON (")
    ln = captures["lines"]
    _, recs = records(ln)
    fid = next(iter(json.loads(payload(recs, 2)[1])["line_targets"]))
    assert corrupt(craft(tmp_path, ln, json_edit(2, lambda o: {
        **o, "line_targets": {fid: [1, 2**40]}}))) == \
        f"META.line_targets.{fid} is [1, {2**40}], not [first line, last line]"
    assert corrupt(craft(tmp_path, ln, json_edit(2, lambda o: {
        **o, "line_targets": {"9999": [1, 2]}}))) == \
        "META.line_targets names function 9999, which the capture does not have"


def test_steps(captures, tmp_path):
    st = captures["steps"]

    def inner(change):
        def go(r):
            rec = payload(r, 17)
            head, recs = fz.step_parts(rec[1])
            change(recs)
            rec[1] = head + fz.join(recs)
        return go
    assert corrupt(craft(tmp_path, st, inner(lambda r: set_field(r, 6, 0, 4, "<I", 9999)))) == \
        "STEP 0: FSTATS row 0 has function 9999, which the capture does not have"
    assert corrupt(craft(tmp_path, st, inner(lambda r: r.append([17, b"\0" * 8])))) == \
        "STEP 0: STEP inside a step's counters"

    def bad_header(r):
        rec = payload(r, 17)
        head, recs = fz.step_parts(rec[1])
        h = b'{"index": "x", "start": 0, "end": 1}'
        rec[1] = struct.pack("<I", len(h)) + h + fz.join(recs)
    assert corrupt(craft(tmp_path, st, bad_header)).startswith("STEP 0 has a bad header (")


def test_the_cli_gives_one_line_and_status_2(captures, tmp_path, python_run):
    bad = craft(tmp_path, captures["functions"], lambda r: set_field(r, 16, 5, 8, "<I", 5))
    for argv in (["view", bad], ["view", bad, "--view", "code"],
                 ["convert", bad, "-o", str(tmp_path / "x.html")]):
        r = python_run(["-m", "pyprof", *argv], timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.splitlines() == [
            f"pyprof: error: {bad} is corrupt: PATHS row 5 (thread 0, path 5) has parent 5 "
            f"(a cycle)"]
        assert r.stdout == ""
    assert not (tmp_path / "x.html").exists()


def test_valid_captures_pass_every_reader(captures, tmp_path):
    for kind, path in captures.items():
        loaded, failures = fz.check_file(path, str(tmp_path))
        assert loaded and failures == [], (kind, failures)


def test_deep_call_tree_is_bounded(tmp_path, python_run):
    """A real capture of recursion 3000 deep: every reader ends, without
    RecursionError, the tree cut at MAX_DEPTH levels."""
    prog = tmp_path / "deep.py"
    prog.write_text("import sys\nsys.setrecursionlimit(10000)\n"
                    "def down(n):\n    return 0 if n == 0 else down(n - 1) + 1\n"
                    "down(3000)\n")
    out = tmp_path / "deep.cprof"
    r = python_run(["-m", "pyprof", "-o", str(out), str(prog)], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    loaded, failures = fz.check_file(str(out), str(tmp_path))
    assert loaded and failures == []
    from pyprof.model.tables import MAX_DEPTH
    s = pyprof.load(out)
    depth, todo = 0, [(s.call_tree(), 0)]
    while todo:
        n, d = todo.pop()
        depth = max(depth, d)
        todo.extend((c, d + 1) for c in n.children.values())
    assert depth == MAX_DEPTH
    total = sum(p.own for p in s.paths.values())
    assert sum(n.own for n in _nodes(s.call_tree())) == total


def test_stats_of_captures_without_rows(tmp_path, python_run):
    """Found by the fuzzer: `pyprof stats` of captures with no row to compare
    (here sampled ones without a sample) ended in an IndexError."""
    prog = tmp_path / "e.py"
    prog.write_text("x = 1\n")
    out = tmp_path / "e.cprof"
    assert python_run(["-m", "pyprof", "--sample", "-o", str(out), str(prog)],
                      cwd=str(tmp_path)).returncode == 0
    r = python_run(["-m", "pyprof", "stats", "--by", "run", str(out), str(out)])
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def _nodes(root):
    todo = [root]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(n.children.values())


# ------------------------------------------------------------------ found by the fuzzer
@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HERE, "corrupt_cases", "*.cprof"))),
                         ids=os.path.basename)
def test_fuzzer_findings(path, tmp_path):
    _, failures = fz.check_file(path, str(tmp_path))
    assert failures == []


def test_fuzz(tmp_path):
    """A few hundred mutated files of every kind through every reader."""
    n, nloaded, failing = fz.fuzz(FUZZ_FILES, seed=sys.version_info[1], keep=None,
                                  workdir=str(tmp_path), log=lambda *a: None)
    assert n == FUZZ_FILES + len(fz.KINDS) + 1
    assert nloaded > len(fz.KINDS)
    assert not failing, {os.path.basename(p): f for p, f in failing.items()}
