"""Spark (docs/clusters.md): profile the Python workers of a PySpark job,
merged on the driver into one capture with a process per worker.

    import pyprof.spark
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master("local[4]")
    with pyprof.spark.profile(builder, mode="sample", output="job.cprof") as spark:
        spark.range(10**6).select(my_udf("id")).collect()

The block configures the builder to start the Python workers through pyprof's
daemon (spark.python.daemon.module = pyprof.integrations.spark_daemon; the job's
options travel in spark.executorEnv.PYPROF_SPARK), starts the session, and on
exit stops it: every worker writes its capture into the job's directory as it
exits, and the driver merges them. Each task runs under a frame naming the
function it applies (``spark rdd f``, ``spark udf f``); per function the workers
count the tasks, their wall and thread CPU time.

The directory is a temporary one on the driver's host (local mode, or a
cluster whose executors run there); executors on other hosts need
``directory=`` on a file system they share with the driver.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from ..errors import PyprofError
from .clusters import check_options, merge_sessions

NEEDS = "pyprof.spark needs the 'pyspark' package (and a Java runtime): pip install pyspark"
DAEMON = "pyprof.integrations.spark_daemon"
ENV = "PYPROF_SPARK"
_WAIT = 30.0            # seconds the driver waits for the workers' last captures


def profile(builder, mode="sample", output=None, *, directory=None, flush=1.0,
            **options) -> "Job":
    """A context manager: starts ``builder``'s SparkSession (the block's value)
    with every Python worker profiled, and on exit stops it and merges the
    workers' captures into ``output`` (any format Profile.dump writes) and
    ``job.session``. ``mode``: function, sample, memory or lines; ``options``:
    the keywords of pyprof.Profile. ``directory``: where the workers write
    their captures (default: a temporary directory of this host); ``flush``:
    seconds between a worker's flushes (what is left of a worker Spark kills)."""
    try:
        import pyspark  # noqa: F401
        from pyspark.sql import SparkSession  # noqa: F401
    except ImportError:
        raise PyprofError(NEEDS) from None
    kwargs = check_options(mode, options, "pyprof.spark.profile")
    if not hasattr(builder, "getOrCreate") or not hasattr(builder, "config"):
        raise PyprofError(f"pyprof.spark.profile: builder must be a SparkSession.builder, "
                          f"not {type(builder).__name__}")
    try:
        flush = float(flush)
        if not flush > 0:
            raise ValueError
    except (TypeError, ValueError):
        raise PyprofError(f"pyprof.spark.profile: flush must be seconds > 0, not {flush!r}") \
            from None
    return Job(builder, mode, output, directory, flush, kwargs)


def _worker_python(builder) -> str:
    options = getattr(builder, "_options", {}) or {}
    return (os.environ.get("PYSPARK_PYTHON") or options.get("spark.pyspark.python")
            or sys.executable)


def check_worker_python(python) -> str | None:
    """Why `python` cannot run pyprof's daemon (None: it can)."""
    want = "%d.%d" % sys.version_info[:2]
    code = ("import sys, pyprof._cprof, pyprof.integrations.spark_daemon; "
            "print('%d.%d' % sys.version_info[:2])")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python} cannot be run: {e}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        return f"{python} cannot import pyprof ({last})"
    have = r.stdout.strip()
    if have != want:
        return f"{python} is Python {have}, the driver Python {want}"
    return None


class Job:
    """One profiled block: ``session`` (the merged Session), ``path``,
    ``lost`` (workers that left without a capture) and ``errors`` (worker ->
    why it was not profiled) once the block is closed."""

    def __init__(self, builder, mode, output, directory, flush, kwargs):
        if output is not None:
            from ..options import check_writable
            output = os.fspath(output)
            check_writable(output)
        if directory is not None:
            directory = os.fspath(directory)
            if not os.path.isdir(directory):
                raise PyprofError(f"pyprof.spark.profile: directory {directory} does not exist")
        self.builder, self.mode, self.path, self.kwargs = builder, mode, output, kwargs
        self.flush = flush
        self.id = uuid.uuid4().hex
        self.parent = directory
        self.dir = None
        self.spark = None
        self.session = None
        self.lost, self.errors = [], {}
        self.unable = None          # why the workers' Python cannot run pyprof
        self._env = None

    def __enter__(self):
        from pyspark import SparkContext
        if SparkContext._active_spark_context is not None:
            raise PyprofError("pyprof.spark.profile starts its own SparkSession: stop the "
                              "running one first (spark.stop())")
        python = _worker_python(self.builder)
        self.unable = check_worker_python(python)
        if self.unable:
            # the job runs as it would without pyprof; the block's exit says why no profile
            print(f"pyprof: warning: the Spark job runs unprofiled: {self.unable}",
                  file=sys.stderr)
            self.spark = self.builder.getOrCreate()
            return self.spark
        if self.parent is None:
            self.dir = tempfile.mkdtemp(prefix="pyprof-spark-")
        else:
            self.dir = os.path.join(self.parent, f"pyprof-spark-{self.id[:12]}")
            os.mkdir(self.dir)
        config = {"job": self.id, "dir": self.dir, "kwargs": self.kwargs, "flush": self.flush,
                  "python": "%d.%d" % sys.version_info[:2]}
        if "PYSPARK_PYTHON" not in os.environ:
            # pyspark's default is 'python3' from PATH: the workers would not be this Python
            self._env = True
            os.environ["PYSPARK_PYTHON"] = python
        settings = {"spark.python.use.daemon": "true", "spark.python.daemon.module": DAEMON,
                    f"spark.executorEnv.{ENV}": json.dumps(config)}
        saved = _Saved(self.builder, settings)
        try:
            for key, value in settings.items():
                self.builder.config(key, value)
            self.spark = self.builder.getOrCreate()
        except BaseException:
            self._cleanup()
            raise
        finally:
            saved.restore()     # later sessions of this process are not profiled
        self.master = self.spark.sparkContext.master
        self.app = self.spark.sparkContext.applicationId
        return self.spark

    def __exit__(self, kind, value, tb):
        if self.spark is None:
            return False
        spark, self.spark = self.spark, None
        try:
            spark.stop()
            if self.unable:
                raise PyprofError(f"pyprof.spark: no profile: {self.unable} (set PYSPARK_PYTHON "
                                  f"to a Python with pyprof installed)")
            self._finish()
        except Exception as e:
            if kind is None:
                raise
            print(f"pyprof: warning: the Spark job's profile was not written: {e}",
                  file=sys.stderr)
        finally:
            self._cleanup()
        return False

    def _cleanup(self):
        if self._env:
            os.environ.pop("PYSPARK_PYTHON", None)
            self._env = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _finish(self):
        started = self._wait()
        captures = []
        for base, info in sorted(started.items()):
            who = info.get("worker") or os.path.basename(base)
            error = _read_json(base + ".error.json")
            if error is not None:
                self.errors[who] = error.get("error", "?")
            for suffix, partial in ((".cprof", False), (".flush.cprof", True)):
                try:
                    with open(base + suffix, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                captures.append((who, data))
                if partial:
                    self.lost.append({**info, "lost": "after its last flush"})
                break
            else:
                if error is None:
                    self.lost.append({**info, "lost": "no capture"})
        for path in glob.glob(os.path.join(self.dir, "*.error.json")):
            base = path[:-len(".error.json")]
            if base not in started:        # failed before it started
                error = _read_json(path) or {}
                self.errors[f"{error.get('host')}/{error.get('pid')}"] = error.get("error", "?")
        for rec in self.lost:
            what = ("its last flush is merged" if rec["lost"] != "no capture"
                    else "it left no capture")
            print(f"pyprof: warning: Spark worker {rec.get('worker')} ended before writing "
                  f"its profile: {what}", file=sys.stderr)
        for who, why in sorted(self.errors.items()):
            print(f"pyprof: warning: Spark worker {who} was not profiled: {why}", file=sys.stderr)
        if not captures:
            raise PyprofError("no Spark Python worker returned a profile (did the job run "
                              "Python code: an RDD function or a Python UDF?)")
        summary = {"master": self.master, "application": self.app,
                   "workers": [w for w, _ in captures]}
        self.session = merge_sessions(captures, "spark", summary, self.lost, self.errors)
        if self.path is not None:
            from ..export import export, format_for_path
            export(self.session, format_for_path(self.path), self.path)

    def _wait(self) -> dict:
        """base path -> start record of every worker; waits (at most _WAIT s)
        for the workers of this host to exit, and for every started worker's
        final capture or error."""
        import socket
        here = socket.gethostname()
        deadline = time.monotonic() + _WAIT
        while True:
            started = {}
            for path in glob.glob(os.path.join(self.dir, "*.start.json")):
                info = _read_json(path)
                if info is not None:
                    started[path[:-len(".start.json")]] = info
            # this host's workers: until they exit (their files are then complete);
            # others: until their capture or error is there
            waiting = [b for b, info in started.items()
                       if (_alive(info.get("pid")) if info.get("host") == here else
                           not os.path.exists(b + ".cprof")
                           and not os.path.exists(b + ".error.json"))]
            if not waiting or time.monotonic() > deadline:
                return started
            time.sleep(0.05)


class _Saved:
    """The builder's options and the JVM's system properties (Spark copies a
    session's options there) of `settings`' keys, as they were."""

    def __init__(self, builder, settings):
        from pyspark import SparkContext
        self.builder, self.keys = builder, list(settings)
        options = getattr(builder, "_options", None)
        self.options = {k: options.get(k) for k in self.keys} if isinstance(options, dict) \
            else None
        jvm = SparkContext._jvm
        self.properties = ({k: jvm.java.lang.System.getProperty(k) for k in self.keys}
                           if jvm is not None else {})

    def restore(self):
        from pyspark import SparkContext
        options = getattr(self.builder, "_options", None)
        if self.options is not None and isinstance(options, dict):
            for k, v in self.options.items():
                if v is None:
                    options.pop(k, None)
                else:
                    options[k] = v
        jvm = SparkContext._jvm
        if jvm is None:
            return
        try:
            system = jvm.java.lang.System
            for k in self.keys:
                v = self.properties.get(k)
                if v is None:
                    system.clearProperty(k)
                else:
                    system.setProperty(k, v)
        except Exception:
            pass        # the JVM is gone: nothing of it remains


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, TypeError, ValueError):
        return True
    return True


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
