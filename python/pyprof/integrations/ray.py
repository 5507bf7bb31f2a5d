"""Ray (docs/clusters.md): profile every Ray worker process that runs the
job's tasks and actor methods, on every node, merged on the driver into one
capture with a process per worker.

    import ray, pyprof.ray
    pyprof.ray.init(num_cpus=2)         # ray.init with pyprof's worker hook
    with pyprof.ray.profile(mode="sample", output="job.cprof", rate=1000):
        ray.get([f.remote(i) for i in range(100)])

Ray cannot run a function on a chosen worker process, so each worker is
reached through the job's ``worker_process_setup_hook`` (setup_hook, set by
pyprof.ray.init): when a worker process starts, it opens a Unix socket in the
Ray session directory (``<session>/pyprof/<ray job>/<pid>.sock``) served by a
daemon thread, and wraps the functions Ray hands its task loop so that each task
runs through a frame of its own (``ray task f``, ``ray actor C.m``) while a
profile is on. The driver's block starts a pyprof Profile in every worker
through its socket (and writes ``.../<ray job>/active.json`` so that a
worker starting inside the block starts one too); on exit it asks each one for
its capture (bytes, over the socket) and merges them. A worker that exits
inside the block writes its capture to ``.../<ray job>/<block id>/`` first.
The sockets are a node's own: on each other node of the cluster a task pinned
there (``_relay``, NodeAffinitySchedulingStrategy) does the same through that
node's session directory and returns its workers' captures as its result.

Nothing here may change what the job does: a worker where pyprof fails runs its
tasks unprofiled, and the failure is reported on the driver.
"""
from __future__ import annotations

import atexit
import glob
import inspect
import json
import os
import socket
import struct
import sys
import threading
import time
import uuid

from ..errors import PyprofError
from .clusters import TaskState, capture_bytes, check_options, merge_sessions, named, task_frame

NEEDS = "pyprof.ray needs the 'ray' package: pip install ray"
HOOK = "pyprof.ray.setup_hook"
FRAME_FILE = "<ray>"
_ACTIVE = "active.json"
_TIMEOUT = 300.0


def init(*args, **kwargs):
    """ray.init(...) with pyprof's worker hook in the job's runtime_env (a
    hook of your own: call pyprof.ray.setup_hook() from it instead)."""
    try:
        import ray
    except ImportError:
        raise PyprofError(NEEDS) from None
    env = dict(kwargs.pop("runtime_env", None) or {})
    if env.get("worker_process_setup_hook") not in (None, HOOK):
        raise PyprofError("runtime_env has a worker_process_setup_hook already: call "
                          "pyprof.ray.setup_hook() from it and use ray.init")
    env["worker_process_setup_hook"] = HOOK
    return ray.init(*args, runtime_env=env, **kwargs)


def profile(mode="sample", output=None, **options) -> "Job":
    """A context manager profiling every Ray worker process of the cluster while
    it is open (``mode``: function, sample, memory or lines; ``options``: the
    keywords of pyprof.Profile). On exit the workers' captures are merged into
    ``output`` (any format Profile.dump writes) and into ``job.session``."""
    try:
        import ray
    except ImportError:
        raise PyprofError(NEEDS) from None
    kwargs = check_options(mode, options, "pyprof.ray.profile")
    if not ray.is_initialized():
        raise PyprofError("pyprof.ray.profile: Ray is not initialised: call pyprof.ray.init() "
                          "first (or ray.init() with runtime_env={'worker_process_setup_hook': "
                          "'pyprof.ray.setup_hook'})")
    return Job(mode, output, kwargs)


def _session_dir():
    """<session>/pyprof/<Ray job id>: a session can hold several drivers' jobs,
    each with workers of its own."""
    import ray._private.worker as w
    node = getattr(w, "_global_node", None)
    path = node.get_session_dir_path() if node is not None else None
    if not path:
        raise PyprofError("pyprof.ray: no Ray session directory on this host "
                          "(a ray:// client cannot be profiled: run the driver on the head)")
    return os.path.join(path, "pyprof", w.global_worker.current_job_id.hex())


def _hook_configured():
    import ray
    try:
        env = ray.get_runtime_context().runtime_env or {}
        return env.get("worker_process_setup_hook") is not None
    except Exception:
        return True     # cannot tell: the block finds out from the workers


class Job:
    """One profiled block: ``session`` (the merged Session), ``path``,
    ``lost`` (workers that left without their capture) and ``errors``
    (worker -> why it was not profiled) once the block is closed."""

    def __init__(self, mode, output, kwargs):
        if output is not None:
            from ..options import check_writable
            output = os.fspath(output)
            check_writable(output)
        if not _hook_configured():
            raise PyprofError("pyprof.ray: Ray was initialised without pyprof's worker hook: "
                              "use pyprof.ray.init(), or ray.init(runtime_env="
                              "{'worker_process_setup_hook': 'pyprof.ray.setup_hook'})")
        self.mode, self.path, self.kwargs = mode, output, kwargs
        self.id = uuid.uuid4().hex
        self.dir = _session_dir()
        self.session = None
        self.lost, self.errors = [], {}
        self.started = {}               # this node's: socket path -> the worker's record
        self.remote = {}                # other nodes': node id -> their started records
        self.node, self.others = None, []
        self._open = False

    def __enter__(self):
        import ray
        self.node = ray.get_runtime_context().get_node_id()
        self.others = [n["NodeID"] for n in ray.nodes()
                       if n.get("Alive") and n.get("NodeID") != self.node]
        self.started = _node_start(self.dir, self.id, self.kwargs, self.errors)
        self._open = True
        try:
            for node, reply in self._relay("start", {"kwargs": self.kwargs}).items():
                self.remote[node] = reply.get("started", {})
                self.errors.update(reply.get("errors", {}))
        except BaseException:
            self._open = False
            self._finish(gather=False)
            raise
        return self

    def _relay(self, op, payload):
        """`op` run on every other node of the cluster, by a task pinned there
        (node -> its reply); a node not reached is named in ``errors``."""
        if not self.others:
            return {}
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        global _RELAY
        if _RELAY is None:
            _RELAY = ray.remote(num_cpus=0, max_retries=0)(_relay)
        me = [socket.gethostname(), os.path.realpath(self.dir)]
        refs = {}
        for node in self.others:
            body = dict(payload, started=self.remote.get(node, {})) if op == "stop" else payload
            strategy = NodeAffinitySchedulingStrategy(node, soft=False)
            refs[node] = _RELAY.options(scheduling_strategy=strategy).remote(
                op, self.id, body, me)
        out = {}
        for node, ref in refs.items():
            try:
                reply = ray.get(ref, timeout=_TIMEOUT)
            except Exception as e:
                self.errors[f"node {node[:12]}"] = f"not reached: {type(e).__name__}: {e}"
                continue
            if not reply.get("same"):
                out[node] = reply
        return out

    def __exit__(self, kind, value, tb):
        if not self._open:
            return False
        self._open = False
        try:
            self._finish(gather=True)
        except Exception as e:
            if kind is None:
                raise
            # the block's own exception is what the caller must see
            print(f"pyprof: warning: the Ray job's profile was not written: {e}",
                  file=sys.stderr)
        return False

    def _finish(self, gather):
        captures, lost = _node_stop(self.dir, self.id, self.started, gather, self.errors)
        for node, reply in self._relay("stop", {"gather": gather}).items():
            captures += [(info, data) for info, data in reply.get("captures", [])]
            lost += reply.get("lost", [])
            self.errors.update(reply.get("errors", {}))
        if not gather:
            return
        self.lost = lost
        for rec in self.lost:
            print(f"pyprof: warning: Ray worker {rec.get('worker')} (pid {rec.get('pid')}) "
                  f"left before its profile was gathered", file=sys.stderr)
        for who, why in sorted(self.errors.items()):
            print(f"pyprof: warning: Ray worker {who} was not profiled: {why}", file=sys.stderr)
        if not captures:
            raise PyprofError("no Ray worker returned a profile")
        captures.sort(key=lambda c: c[0].get("worker", ""))
        self.session = merge_sessions(
            [(info.get("worker"), data) for info, data in captures], "ray",
            {"workers": [info.get("worker") for info, _ in captures]}, self.lost, self.errors)
        if self.path is not None:
            from ..export import export, format_for_path
            export(self.session, format_for_path(self.path), self.path)


# ------------------------------------------------- on each node of the job
def _node_start(directory, job, kwargs, errors) -> dict:
    """This node's part of opening a block: active.json, then every worker's
    socket asked to start (socket path -> the worker's record)."""
    os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    active = os.path.join(directory, _ACTIVE)
    if os.path.exists(active):
        raise PyprofError(f"pyprof.ray: another profile of this Ray session is open ({active})")
    tmp = f"{active}.{job}"
    with open(tmp, "w") as f:
        json.dump({"job": job, "kwargs": kwargs}, f)
    os.replace(tmp, active)             # before listing: a worker starting now sees it
    started = {}
    for path in _sockets(directory):
        reply = _ask(path, {"op": "start", "job": job, "kwargs": kwargs})
        if reply is None:
            continue
        info = reply.get("info") or {}
        if reply.get("error"):
            errors[info.get("worker") or path] = reply["error"]
        elif info:
            started[path] = info
    return started


def _node_stop(directory, job, started, gather, errors):
    """This node's part of closing a block: every worker asked for its capture,
    and the captures of workers that exited inside it: ([(record, bytes)],
    [records of the workers lost])."""
    try:
        os.unlink(os.path.join(directory, _ACTIVE))
    except OSError:
        pass
    captures, lost = [], []
    for path in sorted(set(_sockets(directory)) | set(started)):
        reply = _ask(path, {"op": "stop", "job": job, "gather": gather}, data=True)
        if reply is None:
            if path in started:         # else a stale socket, of a worker not in this job
                lost.append(dict(started[path], socket=path))
            continue
        info = reply.get("info") or {}
        if reply.get("error"):
            errors[info.get("worker") or path] = reply["error"]
        if reply.get("capture") is not None:
            captures.append((info, reply["capture"]))
    exited = os.path.join(directory, job)
    for file in sorted(glob.glob(os.path.join(exited, "*.cprof"))):
        try:
            with open(file, "rb") as f:
                data = f.read()
            with open(file[:-len(".cprof")] + ".json") as f:
                info = json.load(f)
            sock = info.pop("socket", None)
            lost = [r for r in lost if r.get("socket") != sock
                    and r.get("worker") != info.get("worker")]
            if gather:
                captures.append((info, data))
        except (OSError, ValueError):
            pass
    _rmtree(exited)
    for rec in lost:
        rec.pop("socket", None)
    return captures, lost


_RELAY = None               # _relay as a Ray remote function (made once, on the driver)


def _relay(op, job, payload, driver):
    """A block's start or stop on this node, run by a task the driver pinned
    here: its workers are reached through this node's session directory. A
    node sharing the driver's directory (nodes of one machine) is the driver's
    to do."""
    directory = _session_dir()
    if [socket.gethostname(), os.path.realpath(directory)] == driver:
        return {"same": True}
    errors = {}
    try:
        if op == "start":
            return {"started": _node_start(directory, job, payload["kwargs"], errors),
                    "errors": errors}
        captures, lost = _node_stop(directory, job, payload.get("started") or {},
                                    payload.get("gather", True), errors)
        return {"captures": captures, "lost": lost, "errors": errors}
    except Exception as e:
        errors[f"node {socket.gethostname()}"] = f"{type(e).__name__}: {e}"
        return {"errors": errors}


def _rmtree(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def _sockets(directory):
    return sorted(glob.glob(os.path.join(directory, "*.sock")))


# ------------------------------------------------------- the socket protocol
# A message is a 4-byte length and JSON; a reply may carry a capture after it
# (an 8-byte length and the bytes). JSON, not pickle: anyone who can reach the
# socket must not be able to run code in the worker.
def _send(sock, obj, data=None):
    body = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(body)) + body)
    if data is not None:
        sock.sendall(struct.pack("!Q", len(data)))
        sock.sendall(data)


def _recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(sock):
    (n,) = struct.unpack("!I", _recv_exact(sock, 4))
    return json.loads(_recv_exact(sock, n))


def _ask(path, msg, data=False):
    """The worker's reply to `msg`, or None when no worker listens there
    (it exited; its socket file is removed)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(_TIMEOUT)      # a stopped or hung worker: named, not waited for
    try:
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        _send(s, msg)
        reply = _recv(s)
        if reply.get("has_capture"):
            (n,) = struct.unpack("!Q", _recv_exact(s, 8))
            reply["capture"] = _recv_exact(s, n)
        return reply
    except (OSError, EOFError, ValueError):
        return None
    finally:
        s.close()


# ------------------------------------------------------------- in a worker
_STATE = None               # the running job's _RayState in this process, or None
_LOCK = threading.Lock()
_DIR = None                 # this worker's <session>/pyprof, once the hook ran
_SOCK = None


class _RayState(TaskState):
    def frame(self, group, kind="task"):
        fn = self.frames.get((kind, group))
        if fn is None:
            fn = self.frames[(kind, group)] = named(task_frame, f"ray {kind} {group}", FRAME_FILE)
        return fn


def setup_hook():
    """The job's worker_process_setup_hook: never raises (Ray would end the
    worker), a worker pyprof cannot set up runs unprofiled."""
    try:
        _setup()
    except Exception as e:
        print(f"pyprof: warning: pyprof.ray not set up in this worker: "
              f"{type(e).__name__}: {e}", file=sys.stderr)


def _setup():
    global _DIR, _SOCK
    import ray._private.worker as w
    worker = w.global_worker
    if worker.mode != w.WORKER_MODE or _SOCK is not None:
        return          # spill/restore workers run no tasks
    _DIR = os.path.join(w._global_node.get_session_dir_path(), "pyprof",
                        worker.current_job_id.hex())
    os.makedirs(os.path.dirname(_DIR), mode=0o700, exist_ok=True)
    os.makedirs(_DIR, mode=0o700, exist_ok=True)
    _wrap_functions(worker.function_actor_manager)
    path = os.path.join(_DIR, f"{os.getpid()}.sock")
    try:
        os.unlink(path)             # a pid reused after a crash
    except OSError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    _SOCK = s
    threading.Thread(target=_serve, args=(s,), name="pyprof-ray", daemon=True).start()
    atexit.register(_at_exit, path)
    # after listening: a block opened before now is in active.json
    try:
        with open(os.path.join(_DIR, _ACTIVE)) as f:
            active = json.load(f)
    except (OSError, ValueError):
        return
    _handle({"op": "start", "job": active["job"], "kwargs": active["kwargs"]})


def _serve(s):
    while True:
        try:
            conn, _ = s.accept()
        except OSError:
            return
        try:
            with conn:
                reply, data = _handle(_recv(conn))
                if data is not None:
                    reply["has_capture"] = True
                _send(conn, reply, data)
        except Exception:
            pass        # the driver sees no reply: the worker is named, the job runs on


def _info():
    info = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import ray
        ctx = ray.get_runtime_context()
        info["node_id"], info["worker_id"] = ctx.get_node_id(), ctx.get_worker_id()
    except Exception:
        info["node_id"], info["worker_id"] = "", ""
    info["worker"] = f"{info['node_id'][:12]}/{os.getpid()}"
    return info


def _handle(msg):
    """(reply, capture bytes or None) for a driver's message."""
    global _STATE
    info = _info()
    op, job = msg.get("op"), msg.get("job")
    if op == "start":
        with _LOCK:
            if _STATE is not None:
                if _STATE.job == job:
                    return {"info": _STATE.info}, None
                return {"info": info, "error": "another pyprof.ray profile is running"}, None
            try:
                from .. import _cprof
                from ..runtime.profiler import Profile
                if _cprof.active() is not None:
                    raise PyprofError("another pyprof profile is running in this process")
                prof = Profile(**msg["kwargs"])
                state = _RayState(job, prof, info)
                prof.enable()
            except Exception as e:
                return {"info": info, "error": f"{type(e).__name__}: {e}"}, None
            _STATE = state
            return {"info": info}, None
    if op == "stop":
        state = _take(job)
        if state is None:
            return {"info": info}, None
        try:
            return {"info": state.info}, _stop(state, msg.get("gather", True))
        except Exception as e:
            return {"info": state.info, "error": f"{type(e).__name__}: {e}"}, None
    return {"info": info, "error": f"unknown request {op!r}"}, None


def _take(job):
    global _STATE
    with _LOCK:
        state = _STATE
        if state is None or state.job != job:
            return None
        _STATE = None
        return state


def _stop(state, gather):
    """Stop `state`'s profile: with `gather`, its capture as bytes."""
    state.prof.disable()
    if not gather:
        return None
    with state.lock:
        tasks = {g: dict(t) for g, t in state.tasks.items()}
    state.prof.meta["ray"] = {**state.info, "tasks": tasks}
    return capture_bytes(state.prof, f"pyprof-ray-{state.job}-")


def _at_exit(path):
    """A worker leaving inside a block leaves its capture for the driver."""
    try:
        os.unlink(path)
    except OSError:
        pass
    state = _STATE
    if state is None or _take(state.job) is None:
        return
    try:
        data = _stop(state, True)
        where = os.path.join(_DIR, state.job)
        os.makedirs(where, mode=0o700, exist_ok=True)
        base = os.path.join(where, str(os.getpid()))
        with open(base + ".json", "w") as f:
            json.dump({**state.info, "socket": path}, f)
        with open(base + ".cprof", "wb") as f:     # last: the driver reads it with its .json
            f.write(data)
    except Exception:
        pass


def _wrap_functions(manager):
    """Ray's task loop asks the manager once per function for what to run
    (and caches it): hand it a wrapper that runs each call through the
    function's frame while a profile is on."""
    original = manager.get_execution_info

    def get_execution_info(job_id, descriptor):
        info = original(job_id, descriptor)
        try:
            wrapped = _wrapper(info, descriptor)
        except Exception:
            return info
        return info if wrapped is None else info._replace(function=wrapped)

    manager.get_execution_info = get_execution_info


def _wrapper(info, descriptor):
    fn = info.function
    target = getattr(fn, "method", fn)      # an actor method's executor keeps its method
    name = getattr(fn, "name", None) or getattr(descriptor, "function_name", "")
    if (name.startswith("__ray") or not callable(target)
            or str(getattr(descriptor, "module_name", "")).startswith("pyprof.")):
        return None         # Ray's own, or pyprof's (the relays of other nodes)
    if (inspect.iscoroutinefunction(target) or inspect.isgeneratorfunction(target)
            or inspect.isasyncgenfunction(target)):
        return None         # its work runs after the call returns: not attributed
    cls = getattr(descriptor, "class_name", "")
    if cls:
        kind, group = "actor", f"{cls.rsplit('.', 1)[-1]}.{name}"
    else:
        kind, group = "task", getattr(descriptor, "function_name", "") or name
    perf, cpu = time.perf_counter_ns, time.thread_time_ns

    def run(*args, **kwargs):
        state = _STATE
        if state is None:
            return fn(*args, **kwargs)
        try:
            frame = state.frame(group, kind)
        except Exception:
            return fn(*args, **kwargs)
        window = state.begin()
        t0, c0 = perf(), cpu()
        erred = True
        try:
            result = frame(fn, args, kwargs)
            erred = False
            return result
        finally:
            try:
                wall, used = perf() - t0, cpu() - c0
                state.record(group, wall, used, erred, state.end(window))
            except Exception:
                pass

    for attr in ("name", "method"):         # Ray's task loop reads them
        if hasattr(fn, attr):
            setattr(run, attr, getattr(fn, attr))
    run.__wrapped__ = fn
    return run
