"""The Python daemon of a profiled Spark job (pyprof.spark, docs/clusters.md).

Spark starts it as ``python -m pyprof.integrations.spark_daemon pyspark.worker``
in place of ``pyspark.daemon`` (``spark.python.daemon.module``). It runs
pyspark's own daemon, whose forked children run the tasks; in each child the
first task starts a pyprof Profile (the job's options, from the environment
variable PYPROF_SPARK that the driver set through spark.executorEnv) and each
task runs with the function it applies (an RDD function, a UDF) named in a
frame of its own, ``spark rdd f`` / ``spark udf f``, and its wall and thread
CPU time counted per function. The child writes its capture to the job's
directory when it exits (its last task, the daemon's SIGHUP at shutdown) and
every ``flush`` seconds meanwhile, so that a child killed by Spark leaves its
last flush.

The daemon itself forks only: it is not profiled, and imports nothing that
starts a thread. A child where pyprof fails runs its tasks unprofiled and
leaves an ``.error.json`` naming why.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from .clusters import TaskState, named

ENV = "PYPROF_SPARK"
FRAME_FILE = "<spark>"
_SKIP_MODULES = ("pyspark", "py4j", "cloudpickle", "pandas", "pyarrow", "numpy", "builtins",
                 "pyprof")


def main():
    import pyspark.daemon as daemon
    config = _config()
    if config is not None:
        daemon.worker = _wrap_worker(daemon.worker, config)
    daemon.manager()


def _config():
    try:
        config = json.loads(os.environ[ENV])
        if isinstance(config, dict) and os.path.isdir(config["dir"]):
            return config
    except Exception:
        pass
    return None


def _base(config):
    return os.path.join(config["dir"], f"{socket.gethostname()}-{os.getpid()}")


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


class _SparkState(TaskState):
    def __init__(self, config, prof, info):
        super().__init__(config["job"], prof, info)
        self.config = config
        self.base = _base(config)
        self.current = None             # the running task's group
        self.reading = False            # in a reader (read_udfs calls read_command)
        self.started = None             # the running task's (wall, CPU) start
        self.window = None              # and its memory window (exact memory mode)
        self.done = False

    def frame(self, group, kind="rdd"):
        fn = self.frames.get((kind, group))
        if fn is None:
            fn = self.frames[(kind, group)] = named(_task_iter, f"spark {kind} {group}",
                                                     FRAME_FILE)
        return fn

    def finish(self):
        """The final capture (this process exits next): written once."""
        # the daemon's SIGHUP at shutdown must not end the process mid-write:
        # held until the capture is written, then it acts as it would have
        # (blocked first: its handler may run at any bytecode, and calls this)
        _hangup(signal.SIG_BLOCK)
        if self.done:
            return
        self.done = True
        try:
            if self.current is not None and self.started is not None:
                # a task the session's stop ends: its results are out (Spark stops
                # after its jobs), its end (the finish handshake) is cut short
                t0, c0 = self.started
                wall, used = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
                self.record(self.current, wall, used, False, self.end(self.window))
                self.window = None
                self.current = None
            self.prof.disable()
            self.prof.set_flush(None)
            with self.lock:
                tasks = {g: dict(t) for g, t in self.tasks.items()}
            self.prof.meta["spark"] = {**self.info, "tasks": tasks}
            tmp = self.base + ".tmp.cprof"       # dump picks the format by suffix
            self.prof.dump(tmp)
            os.replace(tmp, self.base + ".cprof")
            try:
                os.unlink(self.base + ".flush.cprof")
            except OSError:
                pass
        except Exception as e:
            _error(self.config, f"the capture was not written: {type(e).__name__}: {e}")
        finally:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            _hangup(signal.SIG_UNBLOCK)


def _hangup(how):
    try:
        signal.pthread_sigmask(how, {signal.SIGHUP})
    except (ValueError, OSError):
        pass


def _task_iter(func, split, iterator):
    # the function is called inside: an RDD's last step may be eager (sum, collect)
    yield from func(split, iterator)


def _error(config, why):
    try:
        _write_json(_base(config) + ".error.json",
                    {"host": socket.gethostname(), "pid": os.getpid(), "error": why})
    except Exception:
        pass


def _wrap_worker(original, config):
    """pyspark.daemon.worker, run by each forked child once per task."""
    state = None
    pid = None
    reuse = os.environ.get("SPARK_REUSE_WORKER")

    def worker(sock, authenticated):
        nonlocal state, pid
        if pid != os.getpid():          # the first task of this child
            pid = os.getpid()
            state = _start(config)
        if state is None:
            return original(sock, authenticated)
        # pyspark's worker() sets SIGHUP to its default before the task loop (which
        # sets pyprof's handler): a SIGHUP in between waits for the handler
        _hangup(signal.SIG_BLOCK)
        try:
            code = original(sock, authenticated)
        except BaseException:
            state.finish()
            raise
        if code or not reuse:           # the child exits after this task
            state.finish()
        return code

    return worker


def _start(config):
    try:
        want = config.get("python")
        have = "%d.%d" % sys.version_info[:2]
        if want and want != have:
            raise RuntimeError(f"the worker runs Python {have}, the driver {want}")
        from ..runtime.profiler import Profile
        import pyspark.worker as module
        info = {"worker": f"{socket.gethostname()}/{os.getpid()}", "host": socket.gethostname(),
                "pid": os.getpid(), "executor": os.environ.get("SPARK_EXECUTOR_ID")
                or os.environ.get("SPARK_EXECUTOR_POD_NAME")}
        info = {k: v for k, v in info.items() if v is not None}
        base = _base(config)
        prof = Profile(**config["kwargs"], flush_to=base + ".flush.cprof",
                       flush_interval=float(config.get("flush", 1.0)))
        state = _SparkState(config, prof, info)
        # the live figures: a flush writes them as they are
        prof.meta["spark"] = {**info, "tasks": state.tasks}
        prof.refresh_meta()
        _patch(module, state)
        _write_json(base + ".start.json", info)
        prof.enable()
        return state
    except Exception as e:
        _error(config, f"{type(e).__name__}: {e}")
        return None


def _patch(module, state):
    """pyspark.worker's main (one task: its figures, and the capture if the
    daemon's SIGHUP ends the child), and its readers of the command, whose
    function then runs its output through the task's frame."""
    perf, cpu = time.perf_counter_ns, time.thread_time_ns
    main = module.main

    def on_hangup(signum, frame):
        state.finish()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGHUP)     # ends the process, as SIG_DFL would have

    def task(infile, outfile):
        try:
            signal.signal(signal.SIGHUP, on_hangup)     # daemon.worker set SIG_DFL
        except (ValueError, OSError):
            pass
        _hangup(signal.SIG_UNBLOCK)
        state.current = None
        window = state.window = state.begin()
        t0, c0 = state.started = perf(), cpu()
        erred = True
        try:
            main(infile, outfile)
            erred = False
        except SystemExit as e:
            erred = e.code not in (0, None)
            raise
        finally:
            wall, used = perf() - t0, cpu() - c0
            peak = state.end(window)
            state.window = None
            if state.current is not None:       # a command was read: a task ran
                try:
                    state.record(state.current, wall, used, erred, peak)
                    state.prof.refresh_meta()       # what a flush writes
                except Exception:
                    pass
            state.current = None

    module.main = task
    for reader, kind in (("read_command", "rdd"), ("read_udfs", "udf"), ("read_udtf", "udtf")):
        original = getattr(module, reader, None)
        if callable(original):
            setattr(module, reader, _wrap_reader(original, kind, state))


def _wrap_reader(read, kind, state):
    def reader(*args, **kwargs):
        if state.reading:
            return read(*args, **kwargs)
        state.reading = True
        try:
            result = read(*args, **kwargs)
        finally:
            state.reading = False
        try:
            func = result[0]
            group = group_name(func, kind)
            state.current = group
            frame = state.frame(group, kind)

            def framed(split, iterator):
                return frame(func, split, iterator)
            return (framed,) + tuple(result[1:])
        except Exception:
            return result
    return reader


def group_name(func, kind, limit=3) -> str:
    """The user's functions inside pyspark's wrappers of `func` (closures,
    partials, lists of UDFs), by qualified name joined with '+', or `kind`."""
    import functools
    names, seen, todo = [], set(), [func]
    while todo and len(seen) < 500 and len(names) < limit:
        f = todo.pop(0)
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, (list, tuple)):
            todo.extend(f)
            continue
        if isinstance(f, dict):
            todo.extend(f.values())
            continue
        if isinstance(f, functools.partial):
            todo.append(f.func)
            continue
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None)
        if code is None:
            continue
        module = getattr(f, "__module__", None) or ""
        if not module.split(".")[0] in _SKIP_MODULES:
            name = getattr(f, "__qualname__", code.co_name).replace("<locals>.", "")
            if name not in names:
                names.append(name)
            continue
        for cell in getattr(f, "__closure__", None) or ():
            try:
                todo.append(cell.cell_contents)
            except ValueError:
                pass
        todo.extend(getattr(f, "__defaults__", None) or ())
    return "+".join(names) if names else kind


if __name__ == "__main__":
    # run as the package's module, not as __main__: its functions are then
    # pyprof's by their module, and left out of the tasks' names
    from pyprof.integrations import spark_daemon
    spark_daemon.main()
