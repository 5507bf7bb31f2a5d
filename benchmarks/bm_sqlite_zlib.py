"""A SQLite- and zlib-heavy workload for the memory suite (--native-allocs):
most of its allocations are made by C libraries with malloc, not by Python.

Each loop: an in-memory SQLite database gets 2,000 rows with a 2 KiB blob
each, is indexed and queried; each blob is compressed and decompressed with
zlib. Run as pyperformance's scripts are (pyperf's worker protocol), by
benchmarks/target.py.
"""
import os
import sqlite3
import zlib

import pyperf


def workload():
    con = sqlite3.connect(":memory:")
    con.execute("create table t(id integer primary key, k text, b blob)")
    rnd = os.urandom(1024)
    rows = [(i, f"key{i % 97}", rnd + bytes(1024)) for i in range(2000)]
    con.executemany("insert into t values (?, ?, ?)", rows)
    con.execute("create index tk on t(k)")
    total = 0
    for (b,) in con.execute("select b from t where k = 'key7' or id % 4 = 0"):
        z = zlib.compress(b, 6)
        total += len(zlib.decompress(z))
    con.execute("delete from t where id % 2 = 0")
    con.close()
    return total


def bench(loops):
    t0 = pyperf.perf_counter()
    for _ in range(loops):
        workload()
    return pyperf.perf_counter() - t0


if __name__ == "__main__":
    runner = pyperf.Runner()
    runner.metadata["description"] = "SQLite and zlib (native allocations)"
    runner.bench_time_func("sqlite_zlib", bench)
