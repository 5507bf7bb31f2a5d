"""Following child processes (docs/children.md).

With ``python -m pyprof --children`` (or :func:`start` from the API) every
Python child of the program is profiled with the same modes and writes its own
capture, ``NAME.PID.cprof``, next to the main output; at its end the main
process merges them into its own capture, each process kept apart
(``meta["processes"]``, :meth:`Session.process_threads`).

How a child gets profiled:

- ``os.fork`` (multiprocessing's fork start method, pool workers, forkserver
  workers): an ``os.register_at_fork(after_in_child=...)`` hook disables the
  inherited profiler, drops what the parent recorded (its counts and its
  thread records: the other threads do not exist in the child) and enables it
  again, now writing the child's file.
- a fresh interpreter (spawn, forkserver's server, ``subprocess`` running
  Python): the parent sets ``PYPROF_CHILDREN`` (a JSON configuration) in its
  environment and puts pyprof's ``_boot`` directory first on ``PYTHONPATH``;
  ``_boot/sitecustomize.py`` starts a profiler at interpreter start-up (then
  runs the program's own sitecustomize, if any) and takes its directory off
  ``sys.path``.

A child writes its file at exit: atexit, SIGTERM (a handler installed when
the signal had the default action: it writes, then dies by SIGTERM) and, in
multiprocessing workers, which end through ``os._exit``, a multiprocessing
finalizer. It also rewrites the file every ``flush`` seconds, so a child
killed by SIGKILL or ending through a bare ``os._exit`` leaves its last flush.
A child that cannot write its file says why in the run's error directory; the
main process reports it.

Everything here runs in ordinary Python with the GIL held: the at-fork hook
runs in the child after CPython has re-initialised its own state, never in a
C-level atfork handler.
"""

# Only what a child needs at start-up is imported here (it runs before the
# program, in every child), and only modules built into the interpreter:
# json and signal would bring re and enum (~10 ms). The rest is imported
# where it is used.
import _signal as signal
import atexit
import marshal
import os
import sys

# `from .x import y`, never `from . import x`: in a lean child these modules are
# loaded without the package (_boot/sitecustomize.py), which `from .` would import
from ._meta import json_text, process_meta
from .forkmask import block_sigterm as _block_sigterm, restore_mask as _restore_mask

ENV = "PYPROF_CHILDREN"
BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_boot")

# config: the run's configuration (dict, as in ENV); prof: this process's
# profiler; pid: the process the state belongs to; path: its capture file.
_state = {"config": None, "prof": None, "pid": None, "path": None, "written": False,
          "root": False, "fork_hook": False}


class _Anchor:
    """multiprocessing's after-fork registry holds its objects weakly."""


_ANCHOR = _Anchor()


# The configuration travels in the environment as marshal data in hex (both
# built in). Version 4: read by every supported Python (a child may run
# another version than the parent).
def encode_config(config) -> str:
    return marshal.dumps(config, 4).hex()


def decode_config(text: str) -> dict:
    config = marshal.loads(bytes.fromhex(text))
    if not isinstance(config, dict):
        raise ValueError("not a configuration")
    return config


def output_name(outfile):
    """(directory, NAME) of the children's files for a main output `outfile`
    (None: a temporary directory, removed after the merge)."""
    import tempfile
    if outfile is None:
        return tempfile.mkdtemp(prefix="pyprof-children-"), "pyprof"
    path = os.path.abspath(outfile)
    base = os.path.basename(path)
    name = base.split(".", 1)[0] or base
    return os.path.dirname(path), name


def child_path(config, pid=None) -> str:
    return os.path.join(config["dir"], f"{config['name']}.{pid or os.getpid()}.cprof")


def start(prof, outfile=None, profile=None, flush_interval=1.0):
    """In the main process, before the program runs: follow its children.

    `prof` is the main process's Profile, `profile` the keyword arguments a
    child's Profile gets (JSON-able; default: function mode), `flush_interval`
    the children's periodic flush in seconds (0: none). Sets the environment
    children inherit (os.environ) and the at-fork hook. Returns the config."""
    import tempfile
    import uuid
    from . import mpi
    directory, name = output_name(outfile)
    rank = mpi.detect()
    if rank is not None and outfile is not None and not name.endswith(f".rank{rank['rank']}"):
        name = f"{name}.rank{rank['rank']}"     # NAME.rankR.PID.cprof: apart from other ranks'
    config = {"run": uuid.uuid4().hex, "dir": directory, "name": name, "mpi": rank,
              "temporary": outfile is None, "profile": dict(profile or {}),
              "flush": float(flush_interval or 0.0), "root_pid": os.getpid(),
              "errors": tempfile.mkdtemp(prefix="pyprof-children-errors-")}
    from .. import _cprof
    config["ns_per_tick"] = _cprof.clock_info()["ns_per_tick"]
    config["core"] = dict(getattr(prof, "core_arguments", None) or {})
    os.environ[ENV] = encode_config(config)
    path = os.environ.get("PYTHONPATH", "")
    if BOOT_DIR not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = BOOT_DIR + (os.pathsep + path if path else "")
    prof.meta["children_run"] = config["run"]
    _state.update(config=config, prof=prof, pid=os.getpid(), root=True, written=True)
    _install_fork_hook()
    return config


def stop_environment():
    """The main process is done: its later children are not followed."""
    os.environ.pop(ENV, None)
    path = os.environ.get("PYTHONPATH")
    if path is not None:
        parts = [p for p in path.split(os.pathsep) if p != BOOT_DIR]
        if parts:
            os.environ["PYTHONPATH"] = os.pathsep.join(parts)
        else:
            del os.environ["PYTHONPATH"]


# ------------------------------------------------------------------ in a child
def start_from_environment(full_profile):
    """A fresh interpreter started under --children (from _boot/sitecustomize.py):
    profile it with the run's modes. `full_profile(kwargs)` makes a Profile for
    the modes the lean profiler does not cover (the boot passes it: this module
    sits below Profile). Never raises: an error is reported and the program
    runs unprofiled."""
    text = os.environ.get(ENV)
    if not text or _state["prof"] is not None:
        return
    try:
        config = decode_config(text)
        cprof = sys.modules.get("pyprof._cprof")
        if cprof is None:
            from .. import _cprof as cprof
        if config.get("ns_per_tick"):   # the parent's TSC calibration: no wait at exit
            cprof._set_ns_per_tick(float(config["ns_per_tick"]))
        prof = _lean_profiler(config["profile"], config.get("core"))
        if prof is None:
            prof = full_profile(config["profile"])
    except Exception as e:          # a foreign or broken configuration
        _report(None, f"cannot start profiling: {type(e).__name__}: {e}")
        return
    helper = _multiprocessing_helper()
    if helper == "resource_tracker":
        return                          # multiprocessing's bookkeeping, not the program
    _state.update(config=config, prof=prof, root=False)
    _install_fork_hook()
    if helper == "forkserver":
        # The server only forks the workers: they are profiled (the at-fork
        # hook enables the profiler there), it is not.
        _state.update(root=True, enable_in_child=True)
        return
    _become_child(prof, config, enable=True)


class _LeanProfiler:
    """Function mode in a new interpreter without importing the pyprof
    package (its start-up cost): the C profiler, the capture's meta written
    here, the capture written by the C writer. Other modes use Profile."""

    def __init__(self, core):
        from .core import Core      # `from .x import y`: no package import (above)
        # the parent's C arguments (the option table's, options/table.py)
        self.c = Core(None, 0.0, True, **core)
        self.meta = {}

    @property
    def enabled(self):
        return self.c.enabled

    def enable(self):
        from .core import watch_threading
        watch_threading(self.c)
        self.c.enable()

    def disable(self):
        self.c.disable()

    def set_flush(self, path, interval=0.0):
        self.c.set_flush(path, interval)

    def after_fork(self):
        self.c.after_fork()

    def refresh_meta(self):
        names = {}
        threading = sys.modules.get("threading")
        if threading is not None:
            names = {str(t.ident): t.name for t in threading.enumerate() if t.ident}
        meta = process_meta(["function"], names)
        meta.update(self.meta)
        self.c.set_meta(json_text(meta).encode())

    def dump(self, path):
        self.disable()
        self.refresh_meta()
        try:
            self.c.write_capture(os.fspath(path))
        except OSError as e:
            raise RuntimeError(str(e)) from None


def _lean_profiler(kw, core):
    """A _LeanProfiler when the modes are plain function tracing, else None."""
    plain = (kw.get("mode", "trace") == "trace" and not kw.get("memory")
             and not kw.get("timeline") and not kw.get("lines") and not kw.get("lines_of")
             and not kw.get("lines_all") and not kw.get("include"))
    if not plain or not core or "pyprof.runtime.profiler" in sys.modules:
        return None
    return _LeanProfiler(core)


def _multiprocessing_helper():
    """'forkserver' or 'resource_tracker' when this interpreter is one of
    multiprocessing's helper processes (started with -c 'from
    multiprocessing.X import main; ...')."""
    argv = getattr(sys, "orig_argv", [])
    for i, arg in enumerate(argv[:-1]):
        if arg == "-c":
            code = argv[i + 1]
            for name in ("forkserver", "resource_tracker"):
                if code.startswith(f"from multiprocessing.{name} import main"):
                    return name
            break
    return None


def _install_fork_hook():
    if not _state["fork_hook"]:
        os.register_at_fork(before=_block_sigterm, after_in_parent=_restore_mask,
                            after_in_child=_after_fork_child)
        _state["fork_hook"] = True


def _after_fork_child():
    """os.fork's child (GIL held, the only thread): restart the inherited
    profiler clean, now writing this process's file."""
    try:
        _restart_in_child()
    finally:
        _restore_mask()


def _restart_in_child():
    prof, config = _state["prof"], _state["config"]
    if prof is None or config is None:
        return
    enabled = prof.enabled or _state.pop("enable_in_child", False)
    try:
        prof.disable()
        prof.after_fork()
        if hasattr(prof, "step_recorder"):
            prof.step_recorder.clear()
    except Exception as e:
        _report(config, f"cannot restart profiling after fork: {type(e).__name__}: {e}")
        return
    _state["root"] = False
    _become_child(prof, config, enable=enabled)


def _become_child(prof, config, enable):
    path = child_path(config)
    _state.update(pid=os.getpid(), path=path, written=False)
    prof.meta.update(children_run=config["run"], parent_pid=os.getppid())
    if config.get("mpi"):
        prof.meta["mpi"] = config["mpi"]    # an MPI rank's children count in its rank
    prof.refresh_meta()                # what a periodic flush writes: this process's
    if config.get("flush"):
        prof.set_flush(path, config["flush"])
    else:
        prof.set_flush(None)
    atexit.register(write_child)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        # A multiprocessing child ends through os._exit after running the
        # finalizers; its bootstrap clears them after the fork and then runs
        # the after-fork registry, where this one registers a last finalizer.
        mp_util.register_after_fork(_ANCHOR, _register_mp_finalizer)
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None) \
                or getattr(signal.getsignal(signal.SIGTERM), "__name__", "") == "_on_sigterm":
            signal.signal(signal.SIGTERM, _on_sigterm)
            _guard_sigterm()
    except ValueError:                  # not the main thread
        pass
    if enable:
        try:
            prof.enable()
        except (ValueError, RuntimeError) as e:
            _report(config, f"cannot start profiling: {e}")


def _register_mp_finalizer(_anchor):
    import multiprocessing.util as mp_util
    if os.getpid() == _state["pid"]:
        mp_util.Finalize(None, write_child, exitpriority=-100)


def _guard_sigterm():
    """The handler below is Python code: it runs when the main thread next
    checks for signals, which a thread that went to sleep in a blocking call
    just after the signal arrived (an idle pool worker being terminated)
    never does. The C guard re-sends SIGTERM until the handler runs
    (src/_cprof/termguard.c)."""
    cprof = sys.modules.get("pyprof._cprof")
    if cprof is not None:
        try:
            cprof._term_guard(signal.SIGTERM)
        except OSError as e:
            _report(_state["config"], f"SIGTERM may not write this child's capture: {e}")


def _on_sigterm(signum, frame):
    # Write, then die by the same signal: the exit status is unchanged. A
    # signal arriving while the capture is being written (at exit) waits for it.
    cprof = sys.modules.get("pyprof._cprof")
    if cprof is not None:
        cprof._term_guard_ack()
    if _state.get("writing"):
        _state["pending_signal"] = signum
        return
    try:
        write_child()
    finally:
        _die(signum)


def _die(signum):
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def write_child():
    """Write this child's capture (once; nothing in the main process)."""
    if _state["written"] or _state["root"] or os.getpid() != _state["pid"]:
        return
    _state["written"] = True
    _state["writing"] = True
    prof, config, path = _state["prof"], _state["config"], _state["path"]
    try:
        prof.disable()
        prof.set_flush(None)
        prof.dump(path)
    except Exception as e:
        _report(config, f"cannot write {path}: {e}")
    finally:
        _state["writing"] = False
        pending = _state.pop("pending_signal", None)
        if pending is not None:
            _die(pending)


def _report(config, message):
    """A child's error: on its stderr, and in the run's error directory for
    the main process to report."""
    line = f"pyprof: child process {os.getpid()}: {message}"
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:
        pass
    errors = (config or {}).get("errors")
    if errors:
        try:
            with open(os.path.join(errors, f"{os.getpid()}.txt"), "a") as f:
                f.write(line + "\n")
        except OSError:
            pass


# ------------------------------------------------------------------ in the main process
def finish_children():
    """Before the merge: multiprocessing's own exit work (finalizers: pools
    terminated, daemonic children terminated and joined), which would
    otherwise run only after the main process wrote its results."""
    stop_environment()
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and hasattr(mp_util, "_exit_function"):
        try:
            mp_util._exit_function()
        except Exception:
            pass


def collect(main_session, config=None, report=None):
    """The main Session merged with the captures its children wrote for this
    run; returns (session, paths merged). Children's errors are reported."""
    import glob
    from ..errors import PyprofError
    from ..analysis.merge import merge
    from ..model.session import Session
    config = config or _state["config"]
    report = report or sys.stderr
    errors = config.get("errors")
    if errors and os.path.isdir(errors):
        for name in sorted(os.listdir(errors)):
            try:
                with open(os.path.join(errors, name)) as f:
                    text = f.read()
                os.unlink(os.path.join(errors, name))
            except OSError:
                continue
            for line in text.splitlines():
                print(line.replace("pyprof: ", "pyprof: error: ", 1), file=report)
    pattern = os.path.join(glob.escape(config["dir"]), glob.escape(config["name"]) + ".*.cprof")
    sessions, paths = [], []
    for path in sorted(glob.glob(pattern)):
        try:
            s = Session.load(path)
        except (PyprofError, OSError) as e:
            print(f"pyprof: error: cannot read a child's capture: {e}", file=report)
            continue
        if s.meta.get("children_run") != config["run"] or s.meta.get("pid") == os.getpid():
            continue                    # another run's file
        sessions.append(s)
        paths.append(path)
    if not sessions:
        return main_session, []
    merged = merge([main_session] + sessions, force=True, sources=["main"] + paths)
    return merged, paths


def cleanup(config, paths):
    """After the merged output is written: the children's files go."""
    import shutil
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
    if config.get("temporary"):
        shutil.rmtree(config["dir"], ignore_errors=True)
    if config.get("errors"):
        shutil.rmtree(config["errors"], ignore_errors=True)
