"""Dask (docs/clusters.md): profile every worker process of a job, merged on
the client into one capture with a process per worker.

    import pyprof.dask
    with pyprof.dask.profile(client, mode="sample", output="job.cprof", rate=1000):
        client.gather(client.map(inc, range(100)))

A WorkerPlugin starts a pyprof Profile in each worker process (the ones that
join while the block is open too) and runs each task through a frame of its
own, ``dask task <prefix>`` (the task's key prefix, distributed's key_split),
so that the samples, calls and bytes of a task fall under it; per prefix the
worker also counts the tasks, their wall and thread CPU time. On exit the
client asks each worker for its capture (bytes: the worker's temporary file is
removed), merges them and unregisters the plugin, which undoes the patch.

Nothing here may change what the job does: a worker where pyprof fails runs its
tasks unprofiled, and the failure is reported on the client.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid

from ..errors import PyprofError
from .clusters import TaskState, capture_bytes, check_options, merge_sessions, task_frame  # noqa: F401

try:
    from distributed import WorkerPlugin as _PluginBase
except Exception:       # distributed missing (or broken): profile() says so
    _PluginBase = object

NEEDS = "pyprof.dask needs the 'distributed' package: pip install 'dask[distributed]'"
EVENT = "pyprof-dask"           # the scheduler's event topic: which workers started


def profile(client, mode="sample", output=None, *, scheduler=False, **options) -> "Job":
    """A context manager profiling every worker of `client`'s cluster while it
    is open (``mode``: function, sample, memory or lines; ``options``: the
    keywords of pyprof.Profile, such as rate, wall, memory_sample). On exit the
    workers' captures are merged into ``output`` (a .cprof file, or any format
    Profile.dump writes) and into ``job.session``. ``scheduler=True``: the
    scheduler's process too."""
    try:
        import distributed  # noqa: F401
        from dask.utils import key_split  # noqa: F401
    except ImportError:
        raise PyprofError(NEEDS) from None
    return Job(client, mode, output, scheduler, options)


class Job:
    """One profiled block: ``session`` (the merged Session), ``path``,
    ``lost`` (workers that left before their capture was gathered) and
    ``errors`` (worker -> why it was not profiled) once the block is closed."""

    def __init__(self, client, mode, output, scheduler, options):
        self.kwargs = check_options(mode, options)
        if output is not None:
            from ..options import check_writable
            output = os.fspath(output)
            check_writable(output)
        self.client, self.mode, self.path = client, mode, output
        self.scheduler = scheduler
        self.id = uuid.uuid4().hex
        self.name = f"pyprof-dask-{self.id[:12]}"
        self.session = None
        self.lost, self.errors = [], {}
        self._open = False

    def __enter__(self):
        plugin = ProfilePlugin(self.id, self.kwargs)
        if self.scheduler:
            error = self.client.run_on_scheduler(_start_scheduler, self.id, self.kwargs)
            if error:
                self.errors["scheduler"] = error
        try:
            self.client.register_plugin(plugin, name=self.name)
        except BaseException:
            if self.scheduler:
                self.client.run_on_scheduler(_collect_scheduler, self.id, False)
            raise
        self._open = True
        return self

    def __exit__(self, kind, value, tb):
        if not self._open:
            return False
        self._open = False
        try:
            self._finish()
        except Exception as e:
            if kind is None:
                raise
            # the block's own exception is what the caller must see
            print(f"pyprof: warning: the Dask job's profile was not written: {e}",
                  file=sys.stderr)
        return False

    def _finish(self):
        client = self.client
        sched = None
        try:
            results = client.run(_collect, self.id, True, on_error="return")
            if self.scheduler:
                sched = client.run_on_scheduler(_collect_scheduler, self.id, True) or {}
            started = {}
            try:
                for _, msg in client.get_events(EVENT):
                    if isinstance(msg, dict) and msg.get("job") == self.id:
                        started[msg["worker"]] = {k: v for k, v in msg.items() if k != "job"}
            except Exception:
                pass        # no list of starts: only what was gathered is known
        finally:
            try:
                client.unregister_worker_plugin(self.name)      # teardown stops the rest
            except Exception:
                pass        # every worker may be gone
            if self.scheduler and sched is None:
                try:
                    client.run_on_scheduler(_collect_scheduler, self.id, False)
                except Exception:
                    pass
        captures, shared = [], set()
        for address in sorted(results):
            r = results[address]
            if isinstance(r, BaseException):
                self.errors[address] = f"{type(r).__name__}: {r}"
            elif r.get("error"):
                self.errors[address] = r["error"]
            elif r.get("capture") is not None:
                captures.append((address, r["capture"]))
            else:
                shared.add(address)
        if isinstance(sched, dict):
            if sched.get("error"):
                self.errors["scheduler"] = sched["error"]
            elif sched.get("capture") is not None:
                captures.append(("scheduler " + sched.get("address", ""), sched["capture"]))
        gathered = {a for a, _ in captures} | set(self.errors) | shared
        self.lost = [started[a] for a in sorted(started) if a not in gathered]
        for rec in self.lost:
            print(f"pyprof: warning: Dask worker {rec['worker']} (name {rec.get('name')}, "
                  f"pid {rec.get('pid')}) left before its profile was gathered", file=sys.stderr)
        for who, why in sorted(self.errors.items()):
            print(f"pyprof: warning: Dask {'' if who == 'scheduler' else 'worker '}{who} "
                  f"was not profiled: {why}", file=sys.stderr)
        if not captures:
            raise PyprofError("no Dask worker returned a profile")
        summary = {"scheduler": getattr(client.scheduler, "address", None),
                   "workers": [w for w, _ in captures if not w.startswith("scheduler")]}
        self.session = merge_sessions(captures, "dask", summary, self.lost, self.errors)
        if self.path is not None:
            from ..export import export, format_for_path
            export(self.session, format_for_path(self.path), self.path)


# ---------------------------------------------------------------- in a worker
class ProfilePlugin(_PluginBase):
    """Starts this job's profile in each worker process (setup) and undoes the
    task patch (teardown, when unregistered or when the worker closes)."""

    idempotent = False

    def __init__(self, job, kwargs):
        self.job, self.kwargs = job, kwargs

    def setup(self, worker):
        info = {"job": self.job, "worker": worker.address, "name": _plain(worker.name),
                "host": socket.gethostname(), "pid": os.getpid()}
        try:
            _start(self.job, self.kwargs, info)
        except Exception as e:          # the worker runs on, unprofiled
            _FAILED[(self.job, worker.address)] = f"{type(e).__name__}: {e}"
            return
        try:
            worker.log_event(EVENT, info)
        except Exception:
            pass

    def teardown(self, worker):
        _stop(self.job)


_JOBS: dict = {}            # job id -> TaskState: this process's profile of each job
_FAILED: dict = {}          # (job id, worker address) -> why it was not profiled
_LOCK = threading.Lock()


def _plain(value):
    return value if isinstance(value, (str, int, float)) or value is None else str(value)


def _start(job, kwargs, info, patch=True):
    from .. import _cprof
    from ..runtime.profiler import Profile
    with _LOCK:
        state = _JOBS.get(job)
        if state is not None:           # a second worker of this process (processes=False)
            state.workers.append(info.get("worker"))
            return state
        if _cprof.active() is not None:
            raise PyprofError("another pyprof profile is running in this process")
        prof = Profile(**kwargs)
        state = _JOBS[job] = TaskState(job, prof, info)
        try:
            if patch:
                _patch(state)
            prof.enable()
        except BaseException:
            _unpatch(state)
            del _JOBS[job]
            raise
        return state


def _patch(state):
    """Runs each task of the worker's thread pool through its prefix's frame."""
    import distributed.worker as module
    from dask.utils import key_split
    import inspect
    original = getattr(module, "_run_task", None)
    try:
        at = list(inspect.signature(original).parameters).index("key")
    except (TypeError, ValueError):     # not this version's runner: tasks not attributed
        state.info["attribution"] = "unavailable in this version of distributed"
        return
    perf, cpu = time.perf_counter_ns, time.thread_time_ns

    def _run_task(*args, **kwargs):
        try:
            key = args[at] if len(args) > at else kwargs["key"]
            prefix = key_split(key)
            frame = state.frame(prefix)
        except Exception:
            return original(*args, **kwargs)
        window = state.begin()
        t0, c0 = perf(), cpu()
        msg = None
        try:
            msg = frame(original, args, kwargs)
            return msg
        finally:
            try:
                erred = not isinstance(msg, dict) or msg.get("op") != "task-finished"
                wall, used = perf() - t0, cpu() - c0
                state.record(prefix, wall, used, erred, state.end(window))
            except Exception:
                pass

    _run_task.__wrapped__ = original
    module._run_task = _run_task
    state.patched = (module, "_run_task", original, _run_task)


def _unpatch(state):
    if state.patched is None:
        return
    module, name, original, wrapper = state.patched
    if getattr(module, name, None) is wrapper:
        setattr(module, name, original)
    state.patched = None


def _stop(job, gather=False):
    """Stop this process's profile of `job`: with `gather`, its capture as
    bytes (written to a temporary file, read, removed)."""
    with _LOCK:
        state = _JOBS.pop(job, None)
    if state is None:
        return None
    try:
        state.prof.disable()
    finally:
        _unpatch(state)
    if not gather:
        return None
    with state.lock:
        tasks = {p: dict(t) for p, t in state.tasks.items()}
    dask = {k: v for k, v in state.info.items() if k != "job"}
    if len(state.workers) > 1:
        dask["workers"] = list(state.workers)
    dask["tasks"] = tasks
    state.prof.meta["dask"] = dask
    return capture_bytes(state.prof, f"pyprof-dask-{job}-")


def _collect(job, gather, dask_worker=None):
    """client.run's function: this worker's capture, or why there is none."""
    address = getattr(dask_worker, "address", None)
    failed = _FAILED.pop((job, address), None)
    if failed is not None:
        return {"error": failed}
    state = _JOBS.get(job)
    if state is not None and state.workers[0] != address:
        return {"shared": state.workers[0]}     # its process's capture is that worker's
    try:
        capture = _stop(job, gather)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    if capture is None:
        return {"error": "no profile was running (the worker joined as the job ended?)"}
    return {"capture": capture}


def _start_scheduler(job, kwargs, dask_scheduler=None):
    info = {"job": job, "scheduler": dask_scheduler.address, "host": socket.gethostname(),
            "pid": os.getpid()}
    try:
        _start(job, kwargs, info, patch=False)     # the scheduler runs no tasks
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def _collect_scheduler(job, gather, dask_scheduler=None):
    try:
        capture = _stop(job, gather)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"capture": capture, "address": dask_scheduler.address} if capture else None
