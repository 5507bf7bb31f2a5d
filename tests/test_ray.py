"""pyprof.ray (docs/clusters.md): the worker processes of a real local Ray
(ray.init, 2 CPUs) profiled and merged on the driver; the figures are checked
against what the tasks themselves report (their pid, their thread CPU time)
and the number of tasks and actor calls made."""
import csv
import json
import glob
import io
import os
import tempfile

import pytest

ray = pytest.importorskip("ray")

import pyprof  # noqa: E402
import pyprof.ray  # noqa: E402
from pyprof.analysis import views  # noqa: E402
from pyprof.model.session import Session  # noqa: E402
from support import clean_env, pyprof as run_cli, run_python  # noqa: E402
import cluster_tasks  # noqa: E402


# ------------------------------------------------------------------ tasks
@ray.remote
def inc(i):
    return i + 1, os.getpid()


@ray.remote
def double(i):
    return 2 * i, os.getpid()


def _spin(seconds):
    """(CPU measured, pid)."""
    return cluster_tasks.spin(seconds), os.getpid()


@ray.remote
def spin_a(i):
    return _spin(0.15)


@ray.remote
def spin_b(i):
    return _spin(0.075)


@ray.remote
def fails(i):
    raise ValueError(f"task {i}")


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def add(self, k):
        self.n += k
        return self.n, os.getpid()


@ray.remote
def profiler_state(job):
    """In a worker: (pid, no pyprof profiler running, the job's temporary files left)."""
    from pyprof import _cprof
    left = glob.glob(os.path.join(tempfile.gettempdir(), f"pyprof-ray-{job}-*"))
    return os.getpid(), _cprof.active() is None, left


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def cluster():
    # the tasks call this module's helpers: the workers import it
    here = os.path.dirname(os.path.abspath(__file__))
    pyprof.ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                    runtime_env={"env_vars": {"PYTHONPATH": here}})
    try:
        yield ray
    finally:
        ray.shutdown()


def functions(session, threads=None):
    """name -> op node (the capture's functions, summed over `threads`)."""
    return {n.name: n for n in views.op_nodes(session, threads).values()}


def value(node, col):
    return views.node_value(node, col) if node is not None else None


def pid_index(session):
    return {rec["pid"]: i for i, rec in enumerate(session.processes)}


def assert_clean(job):
    for pid, idle, left in ray.get([profiler_state.remote(job.id) for _ in range(8)]):
        assert idle, f"worker {pid} still has a pyprof profiler running"
        assert not left, f"worker {pid} left {left}"
    assert not os.path.exists(os.path.join(job.dir, "active.json"))
    assert not os.path.exists(os.path.join(job.dir, job.id))


# ------------------------------------------------------------------ tests
def test_function_mode_counts_tasks_and_actor_calls(cluster, tmp_path):
    out = tmp_path / "job.cprof"
    with pyprof.ray.profile(mode="function", output=out) as job:
        incs = ray.get([inc.remote(i) for i in range(40)])
        doubles = ray.get([double.remote(i) for i in range(20)])
        counter = Counter.remote()      # its worker starts inside the block
        adds = ray.get([counter.add.remote(1) for _ in range(15)])
    assert_clean(job)
    assert not job.lost and not job.errors
    session = Session.load(out)
    where = pid_index(session)
    ran = {"inc": [p for _, p in incs], "double": [p for _, p in doubles],
           "add": [p for _, p in adds]}
    assert {p for pids in ran.values() for p in pids} <= set(where), \
        "every worker that ran a task is a process of the capture"
    assert sorted(n for n, _ in adds) == list(range(1, 16))
    totals = functions(session)
    frames = {"inc": "ray task inc", "double": "ray task double", "add": "ray actor Counter.add"}
    for name, pids in ran.items():
        assert value(totals[frames[name]], "calls") == len(pids)
        # each worker's process holds the calls of the tasks it ran
        for pid in set(pids):
            mine = functions(session, session.process_threads(where[pid]))
            assert value(mine[frames[name]], "calls") == pids.count(pid)
    assert value(totals["inc"], "calls") == 40
    # per worker meta
    for pid, i in where.items():
        rec = session.processes[i]["ray"]
        assert rec["pid"] == pid and rec["worker"].endswith(f"/{pid}") and rec["node_id"]
        assert rec["tasks"].get("inc", {}).get("count", 0) == ran["inc"].count(pid)
    assert session.meta["ray"]["tasks"]["Counter.add"]["count"] == 15

    # pyprof tasks: the counts of the tasks run
    r = run_cli("tasks", out, "--format", "csv", env=clean_env())
    assert r.returncode == 0, r.stderr
    rows = {row["group"]: int(row["count"]) for row in csv.DictReader(io.StringIO(r.stdout))}
    assert rows == {"inc": 40, "double": 20, "Counter.__init__": 1, "Counter.add": 15}

    # pyprof stats --by worker: one unit per worker process
    r = run_cli("stats", "--by", "worker", "--no-lines", "--select", "calls", "--csv", "-", out,
                env=clean_env())
    assert r.returncode == 0, r.stderr
    row = next(row for row in csv.DictReader(io.StringIO(r.stdout))
               if row["name"] == "ray task inc")
    counts = {pid: ran["inc"].count(pid) for pid in where}
    assert int(row["n"]) == len(where)
    assert float(row["calls_max"]) == max(counts.values())
    assert counts[int(row["calls_max_worker"].rsplit("/", 1)[1])] == max(counts.values())


def test_sampled_cpu_of_each_task_group(cluster, tmp_path):
    # CPU timers tick at CONFIG_HZ (250 here): 1000 samples take 4 s of CPU or more
    with pyprof.ray.profile(mode="sample", output=tmp_path / "s.cprof", rate=1000) as job:
        a = ray.get([spin_a.remote(i) for i in range(24)])
        b = ray.get([spin_b.remote(i) for i in range(24)])
    assert_clean(job)
    session = job.session
    totals = functions(session)
    samples = sum(value(totals[f"ray task {g}"], "samples") for g in ("spin_a", "spin_b"))
    assert samples >= 1000
    for group, results in (("spin_a", a), ("spin_b", b)):
        measured = sum(cpu for cpu, _ in results)
        assert value(totals[f"ray task {group}"], "time") == pytest.approx(measured, rel=0.15)
        figures = session.meta["ray"]["tasks"][group]
        assert figures["count"] == len(results)
        assert figures["cpu_ns"] / 1e9 == pytest.approx(measured, rel=0.15)


def test_a_failing_task_is_counted_as_erred(cluster):
    with pyprof.ray.profile(mode="sample") as job:
        with pytest.raises(ray.exceptions.RayTaskError):
            ray.get(fails.remote(1))
        ray.get([inc.remote(i) for i in range(3)])
    figures = job.session.meta["ray"]["tasks"]
    assert figures["fails"]["count"] == figures["fails"]["erred"] == 1
    assert figures["inc"] == {**figures["inc"], "count": 3, "erred": 0}


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_exception_in_the_block_stops_the_workers(cluster, tmp_path, error):
    out = tmp_path / "e.cprof"
    with pytest.raises(error):
        with pyprof.ray.profile(mode="function", output=out) as job:
            ray.get([inc.remote(i) for i in range(10)])
            raise error("in the block")
    assert_clean(job)
    # what ran is written all the same
    assert value(functions(Session.load(out))["ray task inc"], "calls") == 10


def test_bad_options_are_refused(cluster):
    for kwargs, words in ((dict(mode="sample", rate=-5), "rate"),
                          (dict(mode="sampling"), "mode"),
                          (dict(mode="sample", bogus=1), "bogus"),
                          (dict(mode="lines"), "lines_of")):
        with pytest.raises(pyprof.PyprofError, match=words) as e:
            pyprof.ray.profile(**kwargs)
        assert "\n" not in str(e.value)


def test_without_ray_or_before_init():
    code = ("import sys\n"
            "import pyprof, pyprof.ray\n"
            "try:\n    pyprof.ray.profile()\n"
            "except pyprof.PyprofError as e:\n    print(e)\n")
    r = run_python(["-c", "import sys; sys.modules['ray'] = None\n" + code], env=clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == "pyprof.ray needs the 'ray' package: pip install ray\n"
    r = run_python(["-c", code], env=clean_env())
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1 and "ray.init()" in r.stdout, r.stdout


def test_a_worker_that_exits_in_the_block_leaves_its_capture(cluster):
    """An actor ended inside the block: its process writes its capture to the
    session directory as it exits, and the driver merges it."""
    import select
    with pyprof.ray.profile(mode="function") as job:
        counter = Counter.remote()
        adds = ray.get([counter.add.remote(1) for _ in range(6)])
        pid = adds[0][1]
        fd = os.pidfd_open(pid)
        try:
            counter.__ray_terminate__.remote()
            select.select([fd], [], [])         # readable once the process is gone
        finally:
            os.close(fd)
    assert not job.lost and not job.errors
    where = pid_index(job.session)
    rec = job.session.processes[where[pid]]["ray"]
    assert rec["tasks"]["Counter.add"]["count"] == 6
    assert not os.path.exists(os.path.join(job.dir, job.id))


@ray.remote
class OwnProfile:
    """An actor whose process pyprof already profiles (its own Profile)."""

    def start(self):
        import pyprof
        self.prof = pyprof.Profile()
        self.prof.enable()
        return os.getpid()

    def add(self, k):
        return k + 1

    def stop(self):
        self.prof.disable()
        return self.prof.session().function_totals() != {}


def test_a_worker_pyprof_cannot_profile_runs_its_tasks(cluster, capsys):
    busy = OwnProfile.remote()
    pid = ray.get(busy.start.remote())
    try:
        with pyprof.ray.profile(mode="function") as job:
            added = ray.get([busy.add.remote(i) for i in range(5)])
            ran = ray.get([inc.remote(i) for i in range(10)])
    finally:
        assert ray.get(busy.stop.remote())
    assert added == [1, 2, 3, 4, 5] and sorted(v for v, _ in ran) == list(range(1, 11))
    [(who, why)] = job.errors.items()
    assert who.endswith(f"/{pid}") and "another pyprof profile" in why
    assert f"Ray worker {who} was not profiled" in capsys.readouterr().err
    assert job.session.meta["ray_errors"] == job.errors
    assert pid not in pid_index(job.session)
    assert value(functions(job.session)["ray task inc"], "calls") == 10
    ray.kill(busy)


TWO_NODES = r"""
import json, os, shutil, sys, tempfile
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
import pyprof.ray


def where(i):
    import ray._private.worker as w
    return (ray.get_runtime_context().get_node_id(), os.getpid(),
            w._global_node.get_session_dir_path())


if __name__ == "__main__":
    # the second node keeps its Ray files apart, as a node of another host does
    # (a short path: Unix socket paths are at most 107 bytes)
    other = tempfile.mkdtemp(prefix="pp-rb", dir="/tmp")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                           "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, temp_dir=other)
        ray.init(address=cluster.address, log_to_driver=False,
                 runtime_env={"worker_process_setup_hook": "pyprof.ray.setup_hook"})
        f = ray.remote(where)
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        with pyprof.ray.profile(mode="function", output=sys.argv[1]) as job:
            ran = []
            for k, node in enumerate(nodes):
                on = f.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                ran += ray.get([on.remote(i) for i in range(5 + 7 * k)])
        counts = {}
        for node, pid, _ in ran:
            key = f"{node[:12]}/{pid}"
            counts[key] = counts.get(key, 0) + 1
        print(json.dumps({"nodes": nodes, "session_dirs": sorted({d for _, _, d in ran}),
                          "counts": counts, "lost": job.lost, "errors": job.errors,
                          "driver_node": ray.get_runtime_context().get_node_id()}))
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(other, ignore_errors=True)
"""


def test_workers_of_another_node_are_profiled(tmp_path):
    """A node whose Ray files are its own (another host's are): its workers are
    reached by a task pinned there, and their captures come back with the
    driver's node's, each task counted by the worker that ran it."""
    script = tmp_path / "two_nodes.py"
    script.write_text(TWO_NODES)
    out = tmp_path / "job.cprof"
    r = run_python([script, out], cwd=tmp_path, env=clean_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(got["nodes"]) == 2 and len(got["session_dirs"]) == 2, got
    assert not got["lost"] and not got["errors"], got
    session = Session.load(str(out))
    by_worker = {rec["ray"]["worker"]: rec["ray"]["tasks"].get("where", {}).get("count", 0)
                 for rec in session.processes if rec.get("ray")}
    assert {w: n for w, n in by_worker.items() if n} == got["counts"]
    other = [n for n in got["nodes"] if n != got["driver_node"]]
    assert any(w.startswith(other[0][:12]) for w in got["counts"]), got
    assert sum(got["counts"].values()) == 5 + 12
    # no task of pyprof's own relays among the job's, nor their code
    assert all(set(rec["ray"]["tasks"]) <= {"where"} for rec in session.processes
               if rec.get("ray"))
    from conftest import pyprof_own_functions
    assert pyprof_own_functions(session) == []
