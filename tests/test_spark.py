"""pyprof.spark (docs/clusters.md): the Python workers of a real local Spark
(PySpark from PyPI, Debian's OpenJDK, 127.0.0.1) profiled and merged on the
driver; the figures are checked against what the tasks report themselves
(accumulators of their calls, their pids, their thread CPU time, tracemalloc's
bytes). Each test starts its own session: pyprof.spark.profile starts one."""
import csv
import io
import os
import shutil
import signal
import sys

import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime for Spark (the Makefile installs Debian's OpenJDK when root)",
                allow_module_level=True)

import pyprof  # noqa: E402
import pyprof.spark  # noqa: E402
from pyprof.analysis import taskgroups, views  # noqa: E402
from pyprof.model.session import Session  # noqa: E402
from support import clean_env, pyprof as run_cli, run_python  # noqa: E402
import cluster_tasks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def worker_path():
    """The workers import this module's functions (cloudpickle pickles them by
    reference) and bind to 127.0.0.1 only."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SPARK_LOCAL_IP")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, saved["PYTHONPATH"]) if p)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def builder(master="local[2]"):
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master(master).appName("pyprof-test")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2"))


# ------------------------------------------------------------------ tasks
def square(x, calls):
    calls.add(1)        # an accumulator: the calls made, counted by Spark
    return x * x


def pid_of(_):
    return os.getpid()


def plus_one(x):
    return x + 1


def spin_a(it):
    yield cluster_tasks.spin(0.3), os.getpid()


def spin_b(it):
    yield cluster_tasks.spin(0.15), os.getpid()


def hold(it):
    yield cluster_tasks.hold()


def fragile(it):
    """The first attempt of partition 0 dies (SIGKILL) after 0.8 s of work:
    the worker's last flush is all that is left of it."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
        with open(os.environ["PYPROF_TEST_KILLED"], "w") as f:
            f.write(str(os.getpid()))
        cluster_tasks.spin(0.8)
        os.kill(os.getpid(), signal.SIGKILL)
    yield sum(it), os.getpid()


# ------------------------------------------------------------------ helpers
def functions(session, threads=None):
    return {n.name: n for n in views.op_nodes(session, threads).values()}


def value(node, col):
    return views.node_value(node, col) if node is not None else None


def pids(session):
    return {rec["spark"]["pid"]: i for i, rec in enumerate(session.processes)}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ------------------------------------------------------------------ tests
def test_function_mode_counts_rdd_functions_and_udfs(tmp_path):
    from functools import partial
    from pyspark.sql.functions import udf
    out = tmp_path / "job.cprof"
    job = pyprof.spark.profile(builder(), mode="function", output=out)
    with job as spark:
        sc = spark.sparkContext
        calls = sc.accumulator(0)
        total = sc.parallelize(range(1000), 8).map(partial(square, calls=calls)).sum()
        ran = sc.parallelize(range(40), 4).map(pid_of).collect()
        plus = udf(plus_one, "long")
        got = spark.range(300, numPartitions=3).select(plus("id").alias("y")).collect()
        calls = calls.value
        udf_tasks = 3
    assert total == sum(x * x for x in range(1000)) and calls == 1000
    assert sorted(r.y for r in got) == list(range(1, 301))
    assert not job.lost and not job.errors, (job.lost, job.errors)
    session = Session.load(out)
    totals = functions(session)
    # every call of the task functions, whatever worker ran it
    assert value(totals["square"], "calls") == calls
    assert value(totals["pid_of"], "calls") == 40
    assert value(totals["plus_one"], "calls") == 300
    # each task runs under its function's frame: 8 + 4 RDD tasks, 3 UDF tasks
    figures = session.meta["spark"]["tasks"]
    assert {g: t["count"] for g, t in figures.items()} == {"square": 8, "pid_of": 4,
                                                         "plus_one": udf_tasks}
    assert "spark rdd square" in totals and "spark udf plus_one" in totals
    # every worker that ran a task is a process of the capture, by its pid
    where = pids(session)
    assert set(ran) <= set(where)
    for pid in set(ran):
        mine = functions(session, session.process_threads(where[pid]))
        assert value(mine["pid_of"], "calls") == ran.count(pid)
    assert session.meta["spark"]["master"] == "local[2]"

    # pyprof tasks reads it; CSV parses; stats --by worker has one unit per worker
    r = run_cli("tasks", out, "--format", "csv", env=clean_env())
    assert r.returncode == 0, r.stderr
    rows = {row["group"]: row for row in csv.DictReader(io.StringIO(r.stdout))}
    assert {g: int(row["count"]) for g, row in rows.items()} == \
        {"square": 8, "pid_of": 4, "plus_one": udf_tasks}
    r = run_cli("stats", "--by", "worker", "--no-lines", "--select", "calls", "--csv", "-", out,
                env=clean_env())
    assert r.returncode == 0, r.stderr
    row = next(row for row in csv.DictReader(io.StringIO(r.stdout)) if row["name"] == "pid_of")
    assert int(row["n"]) == len(session.processes)      # the units: every worker
    assert float(row["calls_max"]) == max(ran.count(p) for p in set(ran))
    # and the HTML report and a diff of the job with itself work
    r = run_cli("convert", out, "-o", tmp_path / "job.html", env=clean_env())
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "job.html").read_text()
    assert "spark rdd square" in page
    # its Workers section: a row per worker (its pid), and the task groups' counts
    workers = page[page.index('<table id="workers">'):page.index('<table id="taskgroups">')]
    assert all(f'<td class="num">{pid}</td>' in workers for pid in set(ran))
    groups = page[page.index('<table id="taskgroups">'):]
    assert "<tr><td>square</td><td class=\"num\">8</td>" in groups
    r = run_cli("diff", out, out, env=clean_env())
    assert r.returncode == 0, r.stderr


def test_sampled_cpu_of_each_function(tmp_path):
    # CPU timers tick at CONFIG_HZ (often 250): 1000 samples need 4 s of CPU
    job = pyprof.spark.profile(builder(), mode="sample", rate=1000)
    with job as spark:
        sc = spark.sparkContext
        sc.parallelize(range(8), 8).map(pid_of).collect()     # the workers' first imports
        a = sc.parallelize(range(16), 16).mapPartitions(spin_a).collect()
        b = sc.parallelize(range(16), 16).mapPartitions(spin_b).collect()
    session = job.session
    assert not job.lost and not job.errors
    totals = functions(session)
    samples = sum(value(totals[f"spark rdd {g}"], "samples") for g in ("spin_a", "spin_b"))
    assert samples >= 1000
    for group, results in (("spin_a", a), ("spin_b", b)):
        measured = sum(cpu for cpu, _ in results)
        sampled = value(totals[f"spark rdd {group}"], "time")
        assert sampled == pytest.approx(measured, rel=0.15), group
        # the worker's own per-task figures: the whole task (reading the function and
        # its data, writing the results) around the function's CPU
        figures = session.meta["spark"]["tasks"][group]
        assert figures["count"] == 16
        assert measured * 0.97 <= figures["cpu_ns"] / 1e9 <= measured * 1.15 + 0.01 * 16
    assert {pid for _, pid in a + b} <= set(pids(session))


def test_exact_memory_equals_tracemalloc_in_the_task(tmp_path):
    job = pyprof.spark.profile(builder(), mode="memory")
    with job as spark:
        got = spark.sparkContext.parallelize(range(4), 4).mapPartitions(hold).collect()
    assert not job.lost and not job.errors
    truth = sum(size for size, _ in got)
    assert truth >= 4 * 40 * 10000
    assert cluster_tasks.bytes_of_make(job.session) == truth
    # each task held make's blocks and make_traced's at once: its peak is above both
    peaks = {r["group"]: r["peak_bytes"] for r in taskgroups.rows(taskgroups.task_figures(job.session))}
    assert peaks["hold"] >= 2 * 40 * 10000, peaks


def test_a_killed_worker_leaves_its_last_flush(tmp_path, capsys):
    killed = tmp_path / "killed"
    b = builder("local[2,4]").config("spark.executorEnv.PYPROF_TEST_KILLED", str(killed))
    job = pyprof.spark.profile(b, mode="sample", flush=0.2)
    with job as spark:
        got = spark.sparkContext.parallelize(range(100), 2).mapPartitions(fragile).collect()
    assert sorted(s for s, _ in got) == [sum(range(50)), sum(range(50, 100))]
    pid = int(killed.read_text())
    assert [rec["pid"] for rec in job.lost] == [pid]
    assert job.session.meta["spark_lost"] == job.lost
    # its flush is merged: the process is there, with samples of its work
    where = pids(job.session)
    assert pid in where
    mine = functions(job.session, job.session.process_threads(where[pid]))
    assert value(mine.get("spin"), "samples") > 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if f"/{pid} " in ln]
    assert len(lines) == 1 and "its last flush is merged" in lines[0]


def test_an_exception_in_the_block_stops_the_workers(tmp_path):
    out = tmp_path / "e.cprof"
    job = pyprof.spark.profile(builder(), mode="function", output=out)
    with pytest.raises(ValueError):
        with job as spark:
            ran = spark.sparkContext.parallelize(range(8), 2).map(pid_of).collect()
            directory = job.dir
            raise ValueError("in the block")
    assert not os.path.exists(directory)
    assert not any(alive(p) for p in set(ran))
    # what ran is written all the same
    assert value(functions(Session.load(out))["pid_of"], "calls") == 8


def test_workers_without_pyprof_run_the_job_unprofiled(tmp_path, monkeypatch, capsys):
    """PYSPARK_PYTHON without pyprof (site-packages off): the job runs, one
    line names the Python, and no capture is made."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(python))
    job = pyprof.spark.profile(builder(), mode="function", output=tmp_path / "no.cprof")
    with pytest.raises(pyprof.PyprofError) as e:
        with job as spark:
            # (a lambda: pickled by value, as the workers cannot import this module)
            total = spark.sparkContext.parallelize(range(10), 2).map(lambda x: x + 1).sum()
    assert total == sum(range(1, 11))
    assert str(python) in str(e.value) and "pyprof" in str(e.value) and "\n" not in str(e.value)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("pyprof:")]
    assert len(err) == 1 and str(python) in err[0]
    assert not (tmp_path / "no.cprof").exists()


def test_bad_input_is_refused_in_one_line():
    for args, kwargs, words in (((builder(),), dict(mode="sampling"), "mode"),
                                ((builder(),), dict(rate=-5), "rate"),
                                ((builder(),), dict(bogus=1), "bogus"),
                                ((builder(),), dict(flush=0), "flush"),
                                ((object(),), {}, "SparkSession.builder"),
                                ((builder(),), dict(directory="/nonexistent/x"), "directory")):
        with pytest.raises(pyprof.PyprofError, match=words) as e:
            pyprof.spark.profile(*args, **kwargs)
        assert "\n" not in str(e.value)


def test_without_pyspark():
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "import pyprof, pyprof.spark\n"
            "try:\n    pyprof.spark.profile(object())\n"
            "except pyprof.PyprofError as e:\n    print(e)\n")
    r = run_python(["-c", code], env=clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("pyprof.spark needs the 'pyspark' package (and a Java runtime): "
                        "pip install pyspark\n")
