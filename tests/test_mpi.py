"""MPI ranks (docs/mpi.md): one capture per rank named with its rank, the rank
in meta["mpi"], `pyprof merge` of the ranks, `pyprof stats --by rank`.

The launcher's environment is read without MPI, so naming and statistics are
tested first with the variables set by hand; then under a real `mpirun` (Open
MPI from Debian's openmpi-bin, mpi4py from PyPI: `make deps` and the `test`
extra install them) with 2, 3 and 4 ranks doing unbalanced work. Those tests skip,
saying why, only when mpirun or mpi4py is missing."""
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import textwrap

import pytest

from pyprof import Session
from pyprof.runtime.mpi import detect, rank_path
from support import TIMEOUT, run_pyprof as pyprof

# rank r calls work() 100 * (r + 1) times, then all ranks meet
WORKLOAD = """\
    import os

    def work(i):
        return sum(range(300))

    def rank_and_size():
        {rank_source}

    def main():
        rank, size = rank_and_size()
        for i in range(100 * (rank + 1)):
            work(i)
        {sync}

    main()
"""


def rank_csv(paths, cwd, extra=()):
    r = pyprof(["stats", "--by", "rank", "--csv", "-", *extra, *paths], cwd)
    assert r.returncode == 0, r.stderr
    return list(csv.DictReader(io.StringIO(r.stdout))), r.stderr


def row_of(rows, name, level="function"):
    found = [row for row in rows if row["name"] == name and row["level"] == level]
    assert len(found) == 1, rows
    return found[0]


def check_work_calls(row, size):
    counts = [100 * (r + 1) for r in range(size)]
    assert int(row["n"]) == size
    assert float(row["calls_mean"]) == pytest.approx(statistics.mean(counts))
    assert float(row["calls_min"]) == min(counts)
    assert float(row["calls_max"]) == max(counts)
    assert float(row["calls_std"]) == pytest.approx(statistics.stdev(counts))
    assert float(row["calls_cv"]) == pytest.approx(statistics.stdev(counts) /
                                                    statistics.mean(counts))
    assert row["calls_min_rank"] == "0"
    assert row["calls_max_rank"] == str(size - 1)


# ------------------------------------------------------------------ without MPI
@pytest.mark.parametrize("env, expected", [
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "PMIX_RANK": "2"},
     {"rank": 2, "size": 4, "launcher": "openmpi"}),
    ({"PMI_RANK": "1", "PMI_SIZE": "3"}, {"rank": 1, "size": 3, "launcher": "pmi"}),
    ({"PMIX_RANK": "0"}, {"rank": 0, "size": None, "launcher": "pmix"}),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"},
     {"rank": 5, "size": 8, "launcher": "slurm"}),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, None),         # the batch script itself
    ({"PMI_RANK": "x"}, None),
    ({}, None),
])
def test_detect(env, expected):
    assert detect(env) == expected


@pytest.mark.parametrize("path, expected", [
    ("out.cprof", "out.rank3.cprof"),
    (os.path.join("d", "run.1.cprof"), os.path.join("d", "run.1.rank3.cprof")),
    ("out.flame.html", "out.rank3.flame.html"),
    ("out.txt", "out.rank3.txt"),
    ("prof", "prof.rank3"),
    ("callgrind.out", "callgrind.out.rank3"),
])
def test_rank_path(path, expected):
    assert rank_path(path, 3) == expected


def test_ranks_from_the_environment(tmp_path):
    """Launcher variables set by hand: each 'rank' writes out.rank<R>.cprof
    with its rank in meta; stats --by rank sees the imbalance, for functions
    and lines; merge keeps the ranks per process."""
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(WORKLOAD.format(
        rank_source="return int(os.environ['PMI_RANK']), int(os.environ['PMI_SIZE'])",
        sync="pass")))
    size = 3
    for rank in range(size):
        env = dict(os.environ, PMI_RANK=str(rank), PMI_SIZE=str(size))
        for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
            env.pop(var, None)
        r = pyprof(["--lines-of", "prog.py", "-o", "out.cprof", "prog.py"], tmp_path, env=env)
        assert r.returncode == 0, r.stderr
    assert not (tmp_path / "out.cprof").exists()
    paths = [f"out.rank{r}.cprof" for r in range(size)]
    for rank, path in enumerate(paths):
        assert Session.load(tmp_path / path).meta["mpi"] == {"rank": rank, "size": size,
                                                             "launcher": "pmi"}
    # ordered by rank, not by argument
    rows, err = rank_csv(paths[::-1], tmp_path, ["--select", "calls,hits"])
    assert err == ""
    check_work_calls(row_of(rows, "work"), size)
    # the body of work() (line 4): its hits per rank are the known counts
    line = row_of(rows, "work:4", level="line")
    check_work_calls({k.replace("hits_", "calls_"): v for k, v in line.items()}, size)
    r = pyprof(["merge", "-o", "merged.cprof", *paths], tmp_path)
    assert r.returncode == 0, r.stderr
    merged = Session.load(tmp_path / "merged.cprof")
    assert [p["mpi"]["rank"] for p in merged.processes] == [0, 1, 2]
    merged_rows, _ = rank_csv(["merged.cprof"], tmp_path)
    check_work_calls(row_of(merged_rows, "work"), size)
    # the text table names the ranks of the min and max
    r = pyprof(["stats", "--by", "rank", "--no-lines", *paths], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 ranks" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.endswith("work (prog.py:3)"))
    assert "100 (r0)" in line and "300 (r2)" in line
    # a missing rank is said
    rows, err = rank_csv(paths[:2], tmp_path)
    assert "1 of 3 ranks have no capture (ranks 2)" in err


def test_chrome_trace_of_merged_ranks(tmp_path):
    """Ranks' timelines merged: one trace process per rank, named by rank,
    with that rank's calls (rank r calls work 100*(r+1) times)."""
    import json
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(WORKLOAD.format(
        rank_source="return int(os.environ['PMI_RANK']), int(os.environ['PMI_SIZE'])",
        sync="pass")))
    for rank in range(2):
        env = dict(os.environ, PMI_RANK=str(rank), PMI_SIZE="2")
        for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
            env.pop(var, None)
        r = pyprof(["--timeline", "-o", "out.cprof", "prog.py"], tmp_path, env=env)
        assert r.returncode == 0, r.stderr
    r = pyprof(["merge", "-o", "merged.cprof", "out.rank0.cprof", "out.rank1.cprof"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = pyprof(["convert", "merged.cprof", "-o", "merged.trace.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    events = json.loads((tmp_path / "merged.trace.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(n.split(":")[0] for n in names.values()) == ["rank 0", "rank 1"]
    for pid, name in names.items():
        rank = int(name.split(":")[0].split()[1])
        work = [e for e in events if e["ph"] == "X" and e["pid"] == pid
                and e["name"].startswith("work ")]
        assert len(work) == 100 * (rank + 1)


def test_by_rank_refuses_captures_without_ranks(tmp_path):
    (tmp_path / "p.py").write_text("def f():\n    pass\nf()\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")}
    r = pyprof(["-o", "plain.cprof", "p.py"], tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    r = pyprof(["stats", "--by", "rank", "plain.cprof"], tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1
    assert "plain.cprof" in r.stderr and "has no MPI rank" in r.stderr


# ------------------------------------------------------------------ real MPI
def _mpirun():
    """The mpirun command line prefix, or a reason to skip."""
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        return None, ("no mpirun/mpiexec on PATH: install Open MPI (Debian: apt-get install "
                      "openmpi-bin libopenmpi-dev; `make deps` does)")
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        return None, (f"mpi4py cannot be imported in {sys.executable} ({e}): "
                      f"pip install mpi4py (`make test` installs it: the `mpi` extra)")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    cmd = [exe]
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe"]      # more ranks than CPUs on small machines
        if os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
    return cmd, None


MPIRUN, NO_MPI = _mpirun()
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason=NO_MPI or "")


@needs_mpi
@pytest.mark.parametrize("size", [2, 3, 4])
def test_mpirun_ranks(tmp_path, size):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(WORKLOAD.format(
        rank_source="from mpi4py import MPI; "
                    "return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()",
        sync="from mpi4py import MPI\n"
             "        MPI.COMM_WORLD.Barrier()\n"
             "        assert MPI.COMM_WORLD.allreduce(rank + 1) == size * (size + 1) // 2")))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               # containers often forbid the cross-process memory copy of the shared-
               # memory transport (ptrace): plain copies instead
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    r = subprocess.run([*MPIRUN, "-n", str(size), sys.executable, "-m", "pyprof",
                        "-o", "out.cprof", "prog.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    paths = sorted(p.name for p in tmp_path.glob("out*.cprof"))
    assert paths == [f"out.rank{r}.cprof" for r in range(size)]
    sessions = [Session.load(tmp_path / p) for p in paths]
    assert [s.meta["mpi"]["rank"] for s in sessions] == list(range(size))
    assert {s.meta["mpi"]["size"] for s in sessions} == {size}
    assert len({s.meta["pid"] for s in sessions}) == size
    rows, err = rank_csv(paths, tmp_path)
    check_work_calls(row_of(rows, "work"), size)
    r = pyprof(["merge", "-o", "merged.cprof", *paths], tmp_path)
    assert r.returncode == 0, r.stderr
    merged = Session.load(tmp_path / "merged.cprof")
    assert len(merged.processes) == size
    assert sorted(p["mpi"]["rank"] for p in merged.processes) == list(range(size))
    merged_rows, _ = rank_csv(["merged.cprof"], tmp_path)
    check_work_calls(row_of(merged_rows, "work"), size)
    # the combined profile: all the ranks' calls
    totals = merged.function_totals()
    assert sum(totals[f].calls for f, fn in merged.functions.items()
               if fn.name == "work" and f in totals) == sum(100 * (r + 1) for r in range(size))
