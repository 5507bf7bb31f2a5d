"""pyprof's command line.

    python -m pyprof [run] [-o FILE] [-s SORT] [--mode M | --sample | -l | --lines-of P |
                     --lines-all]
                     [-m module | -c code | script] [args...]
    pyprof convert FILE.cprof -o OUT [-f FORMAT] [--min-duration DURATION]
    pyprof view FILE.cprof [--lines | --functions] [--unit U]
    pyprof view FILE.cprof --view code|op|scope|graph|lines|memory [filters] [--format F]
    pyprof stats FILE.cprof... [--by step|run] [--csv OUT]
    pyprof merge A.cprof B.cprof ... -o ALL.cprof [--force]
    pyprof diff BEFORE.cprof AFTER.cprof [--by function|line] [--format table|csv|json] ...
                [--fail-above PCT [--memory]]
    pyprof check FILE.cprof [--max-time T] [--max-memory B] [--max-calls FUNC=N] [--format json]
    pyprof config [RUN OPTIONS] [--format table|json]
    pyprof attach PID [--duration S] [mode options] -o FILE
    pyprof top PID [--rate HZ] [--native] [--memory-sample [BYTES]]
    pyprof dump PID [--native]
    python -m pyprof --listen | --live script.py [args...]
    pyprof --version

`run` (the default) is a drop-in for ``python -m cProfile``: the program runs as
if started directly (sys.argv, __main__, sys.path[0], pickling of __main__
objects, multiprocessing) and pyprof exits with its status. Results are written
on every exit path: normal end, sys.exit, uncaught exception, Ctrl-C, SIGTERM.
Bad input gives one line on stderr and exit status 2.
"""
from __future__ import annotations

import _signal as signal            # signal.py imports enum: ~4 ms of start-up
import builtins
import importlib.machinery
import os
import sys

from . import _cprof
from ._version import __version__
from .amounts import parse_duration, parse_percent, parse_size
from .errors import REPLACED, PyprofError
from .export import ALIASES, FORMATS, export, format_for_path
from .options import (SORT_KEYS, byte_count, check_writable, given_fields, parse_run_args,
                      signal_number, split_argv)

# `python -m pyprof -o x.cprof` loads only what its mode needs (docs/cli.md,
# "Start-up"): the data model, the exporters, traceback are imported where
# they are used.
EXIT_USAGE = 2
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def _Parser(**kw):
    """argparse that reports a usage error as one line and exit status 2 (argparse
    is imported here: a run reads its options without it, options.py)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise PyprofError(f"{message} (see '{self.prog} --help')")

    return Parser(**kw)


def version_text() -> str:
    features = ", ".join(f for f in _cprof.FEATURES if f)
    clock = _cprof.clock_info()["name"]
    return (f"pyprof {__version__} (CPython {sys.version.split()[0]}, hook {_cprof.HOOK}, "
            f"clock {clock}; features: {features})")


# ------------------------------------------------------------------ run
class _Target:
    """What to run, prepared before profiling starts so errors come first."""

    def __init__(self, opts, rest):
        if not rest:
            what = "module name" if opts.module else "code" if opts.code else "script"
            raise PyprofError(f"no {what} given (see 'pyprof --help')")
        target, args = rest[0], rest[1:]
        # __builtins__ is the builtins module in __main__, as in a direct run
        # (a module's own __builtins__ is the module's dict, an implementation detail).
        self.globals = {"__name__": "__main__", "__builtins__": builtins,
                        "__doc__": None, "__package__": None, "__spec__": None}
        if opts.code:
            self.globals["__loader__"] = importlib.machinery.BuiltinImporter
            self.argv = ["-c"] + args
            self.path0 = ""
            self.code = self._compile(target, "<string>")
        elif opts.module:
            self._prepare_module(target, args)
        else:
            self._prepare_script(target, args)

    @staticmethod
    def _compile(source, filename):
        try:
            return compile(source, filename, "exec", dont_inherit=True)
        except SyntaxError as e:
            # The program's own error: shown as Python shows it, exit status 1.
            import traceback
            traceback.print_exception(type(e), e, None)
            raise SystemExit(1)

    def _prepare_script(self, script, args):
        path = os.path.abspath(script)
        if not os.path.exists(script):
            raise PyprofError(f"cannot find script '{script}': No such file or directory")
        if os.path.isdir(script):
            main = os.path.join(script, "__main__.py")
            if not os.path.isfile(main):
                raise PyprofError(f"cannot find '__main__' module in '{script}'")
            self.path0 = path
            path = os.path.abspath(main)
        else:
            self.path0 = os.path.dirname(path)
        try:
            with open(path, "rb") as f:
                source = f.read()
        except OSError as e:
            raise PyprofError(f"cannot read script '{script}': {e.strerror}") from None
        self.argv = [script] + args
        # What a direct run sets: a directory's __main__ is imported by spec.
        loader = importlib.machinery.SourceFileLoader("__main__", path)
        spec = None
        if os.path.isdir(script):
            from importlib.util import spec_from_file_location
            spec = spec_from_file_location("__main__", path, loader=loader)
        self.globals.update(__file__=path, __cached__=None, __loader__=loader, __spec__=spec)
        self.code = self._compile(source, path)

    def _prepare_module(self, name, args):
        import runpy
        # Find the module as `python -m` does, from the current directory (the
        # `pyprof` console script starts with its bin directory as sys.path[0]).
        self.path0 = os.getcwd()
        self._set_path0()
        try:
            mod_name, spec, code = runpy._get_module_details(name)
        except ImportError as e:
            raise PyprofError(f"{e}") from None
        except Exception as e:            # errors raised while importing packages
            raise PyprofError(f"cannot run module '{name}': {type(e).__name__}: {e}") from None
        self.argv = [spec.origin or name] + args
        self.globals.update(__file__=spec.origin, __cached__=spec.cached, __spec__=spec,
                            __loader__=spec.loader, __package__=spec.parent)
        self.code = code

    def install(self):
        """Make the program's world: its __main__ module, argv and path."""
        main = type(sys)("__main__")
        main.__dict__.update(self.globals)
        sys.modules["__main__"] = main
        sys.argv[:] = self.argv
        self._set_path0()
        return main.__dict__

    def _set_path0(self):
        if sys.path:
            sys.path[0] = self.path0
        else:
            sys.path.append(self.path0)


def line_mode(opts) -> bool:
    return bool(opts.lines or opts.lines_of or opts.lines_all or opts.include)


def write_tables(prof, opts, out, session=None) -> None:
    """What a run prints at its end (render.printout: the one rule), of
    `session`, by default the profiler's."""
    from .render.printout import print_capture
    session = session if session is not None else prof.session()
    print_capture(session, out, sort=opts.sort, unit=opts.unit,
                  call_rows=not opts.no_call_rows)


class _Runner:
    """Runs the target under a Profile and writes the results exactly once."""

    def __init__(self, opts, target):
        from .profiler import Profile
        self.opts = opts
        self.target = target
        self.pid = os.getpid()
        self.out = sys.stdout
        self.written = False
        flush_to = None
        interval = opts.dump_every if opts.sample and opts.dump_every else opts.flush_interval
        if opts.outfile and format_for_path(opts.outfile) == "cprof" and interval > 0:
            flush_to = os.path.abspath(opts.outfile)
        self.line_mode = opts.line_mode
        if opts.lines_all is True:          # the program's own files
            opts.lines_all = target.path0 or os.getcwd()
        self.prof = Profile(options=opts, flush_to=flush_to, flush_interval=interval,
                            _warn=False)
        self.prof._objects_at_steps = opts.objects
        from . import mpi
        rank = mpi.detect()
        if rank is not None:
            self.prof.meta["mpi"] = rank
        self.outfile = os.path.abspath(opts.outfile) if opts.outfile else None
        self.children = None
        if opts.children:
            from . import children
            self.children = children.start(self.prof, self.outfile, opts.profile_kwargs(),
                                           interval)

    def finish(self):
        """Stop profiling and write or print the results (once, in this process)."""
        if self.written or os.getpid() != self.pid:
            return
        self.written = True
        self.prof.disable()
        opts = self.opts
        if opts.objects:
            from . import objects
            self.prof.meta["objects"] = objects.summary()
        # --children: this process's capture merged with the children's
        session, child_paths = None, []
        if self.children is not None:
            from . import children
            children.finish_children()
            session, child_paths = children.collect(self.prof.session(), self.children)
        if self.outfile and format_for_path(self.outfile) == "text":
            from .export import text
            text.write(session or self.prof.session(), self.outfile, unit=opts.unit,
                       call_rows=not opts.no_call_rows, sort=opts.sort)
        elif self.outfile and session is not None:
            export(session, format_for_path(self.outfile), self.outfile)
        elif self.outfile:
            self.prof.dump(self.outfile)
        else:
            out = self.out if not getattr(self.out, "closed", False) else sys.__stdout__
            saved = sys.stdout
            sys.stdout = out
            try:
                write_tables(self.prof, opts, out, session)
                out.flush()
            finally:
                sys.stdout = saved
        self.unmatched = self.prof.line_targets.unmatched() if self.line_mode else []
        for pattern in self.unmatched:
            print(f"pyprof: warning: --lines-of {pattern!r} matched no code that ran",
                  file=sys.stderr)
        if opts.sample and self.prof.sampling_replaced:
            print(f"pyprof: warning: {REPLACED}", file=sys.stderr)
        if opts.sample and self.prof.tasks_seen == 0:
            print("pyprof: note: --async saw no asyncio task (no event loop ran a task "
                  "while sampling): the samples are plain samples", file=sys.stderr)
        # a replaced handler explains a low rate already
        rates = self.prof.sampling_rates if opts.sample and not self.prof.sampling_replaced else None
        # under half a second measured, too few ticks to tell the kernel's rate
        if rates and rates[1] and rates[1] < 0.8 * rates[0] and rates[2] >= 0.5:
            print(f"pyprof: note: asked for {rates[0]:g} samples per "
                  f"{'' if opts.wall else 'CPU '}second, got {rates[1]:.0f} "
                  f"(the kernel delivers no more); times stay right, since each sample "
                  f"weighs the time it stands for, but the resolution is {rates[1]:.0f} Hz",
                  file=sys.stderr)
        if self.children is not None:
            from . import children
            children.cleanup(self.children, child_paths)
            if child_paths:
                n = len(child_paths)
                print(f"pyprof: merged {n} child process{'es' if n > 1 else ''}",
                      file=sys.stderr)

    def _toggle_on(self, name):
        """Sampling starts and stops each time the signal `name` arrives."""
        def toggle(signum, frame):
            if self.prof.enabled:
                self.prof.disable()
            else:
                self.prof.enable()
        signal.signal(signal_number(name), toggle)

    def _child_sigterm_default(self):
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:              # not the main thread: leave it
            pass

    def _on_sigterm(self, signum, frame):
        # Write, then die by the same signal so the exit status is unchanged.
        _cprof._term_guard_ack()
        self.prof.disable()
        try:
            self.finish()
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def run(self) -> int:
        status = self._run()
        if status == 0 and self.opts.strict and getattr(self, "unmatched", None):
            return EXIT_USAGE
        return status

    def _run(self) -> int:
        # threading, imported by pyprof before the program ran as it always was:
        # a program importing it would otherwise see the import in its profile
        # under an exec() of its own (tests/test_cli.py, waiting for threads)
        import threading  # noqa: F401
        globs = self.target.install()
        if self.prof.sampling:
            # stacks start at the program; the runner's own work is not sampled
            self.prof._set_sample_root(_Runner._run.__code__, self.target.code)
        if self.line_mode:
            import builtins
            from .decorator import profile
            builtins.profile = profile      # kernprof's convention: @profile needs no import
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_sigterm)
            # a Python handler: make sure it runs (src/_cprof/termguard.c)
            try:
                _cprof._term_guard(signal.SIGTERM)
            except OSError:
                pass
            # A forked child (a multiprocessing worker) must die by SIGTERM as it
            # would without pyprof: a Python-level handler runs only between
            # bytecodes, so a worker blocked in a lock would never see it.
            # Blocked across fork: a SIGTERM reaching the child before that hook
            # would be dropped with the Python handler (tests/test_children.py).
            from .children import guard_sigterm_across_fork
            guard_sigterm_across_fork(self._child_sigterm_default)
        try:
            if self.opts.signal:
                self._toggle_on(self.opts.signal)
            else:
                self.prof.enable()
            try:
                try:
                    exec(self.target.code, globs)
                finally:
                    # The interpreter waits for non-daemon threads at exit, after
                    # results would be written: wait here, still profiling them,
                    # but not this thread's waiting (pyprof's calls, not the program's).
                    self.prof._thread_paused = True
                    for t in threading.enumerate():
                        if t is not threading.main_thread() and not t.daemon and t.is_alive():
                            t.join()
            finally:
                self.prof.disable()
        except SystemExit:
            self.finish()
            raise
        except KeyboardInterrupt:
            self.finish()
            _print_program_exception()
            return _die_by_sigint()
        except BaseException:
            self.finish()
            _print_program_exception()
            return 1
        self.finish()
        return 0


def _die_by_sigint():
    """Die by SIGINT, as Python does for an uncaught KeyboardInterrupt (130 if
    the signal is not fatal here)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    return 130


def _print_program_exception():
    """Show the program's traceback without pyprof's own frames."""
    etype, value, tb = sys.exc_info()
    while tb is not None and os.path.dirname(
            os.path.abspath(tb.tb_frame.f_code.co_filename)) == _PKG_DIR:
        tb = tb.tb_next
    if value is not None:
        value.__traceback__ = tb     # excepthook prints the exception's own traceback
    sys.excepthook(etype, value, tb)


def cmd_run(argv) -> int:
    opts, rest = parse_run_args(argv)
    if opts.version:
        print(version_text())
        return 0
    # the command line alone decides these (not [tool.pyprof]'s run defaults)
    if opts.listen or opts.live:
        opts.check()
        target = _Target(opts, rest)
        return _run_live(opts, rest) if opts.live else _run_listening(target)
    # [tool.pyprof] and PYPROF_* under the command line (config.py)
    from .options import config
    config.apply(opts, given_fields(split_argv(None, argv)[0]))
    from . import mpi
    rank = mpi.detect()
    if rank is not None and opts.outfile:
        # one file per rank (docs/mpi.md), not every rank writing the same one
        opts.outfile = mpi.rank_path(opts.outfile, rank["rank"])
    opts.check()
    target = _Target(opts, rest)
    return _Runner(opts, target).run()


def _run_listening(target) -> int:
    """--listen: the program runs as if started directly, with the control
    channel open (docs/attach.md); its exit status is pyprof's."""
    import threading  # noqa: F401 - before the program, as a plain run has it
    from . import channel
    globs = target.install()
    channel.listen(persistent=True)
    try:
        exec(target.code, globs)
    except SystemExit:
        channel.close()
        raise
    except KeyboardInterrupt:
        channel.close()             # before dying by SIGINT: no exit hook runs then
        _print_program_exception()
        return _die_by_sigint()
    except BaseException:
        _print_program_exception()
        return 1
    return 0


def _run_live(opts, rest) -> int:
    """--live: the program in a child listening (its output to a log file),
    and `pyprof top` on it here."""
    import subprocess
    import tempfile
    from . import attach, top
    _require_terminal("--live")
    fd, log = tempfile.mkstemp(prefix="pyprof-live-", suffix=".log")
    argv = [sys.executable, "-m", "pyprof", "--listen"]
    argv += ["-m"] if opts.module else ["-c"] if opts.code else []
    with os.fdopen(fd, "w") as out:
        child = subprocess.Popen(argv + rest, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT)
    try:
        import time
        from .channel import socket_path
        end = time.monotonic() + attach.CONNECT_TIMEOUT
        while not os.path.exists(socket_path(child.pid)):
            if child.poll() is not None or time.monotonic() > end:
                raise PyprofError(f"the program ended or did not listen (see {log})")
            time.sleep(0.02)
        top.run(attach.connect(child.pid))
    finally:
        if child.poll() is None:
            # Ctrl-C's signal: the program ends as it would by it (and closes its channel)
            child.send_signal(signal.SIGINT)
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.terminate()
        status = child.wait()
        print(f"pyprof: the program's output is in {log} (exit status {status})",
              file=sys.stderr)
    return 0


# ------------------------------------------------------------------ attach, top, dump
_ATTACH_MODES = ("--sample", "--rate", "--cpu", "--wall", "--native", "--async", "--memory",
                 "--memory-sample", "--memory-stacks", "--functions", "--lines-of",
                 "--include", "--exclude", "--timeline", "--min-duration",
                 "--timeline-max-events", "--no-builtins", "--exact-builtins")


def _pid_arg(text) -> int:
    try:
        pid = int(text)
    except ValueError:
        raise PyprofError(f"PID must be a process id (a positive integer), not {text!r}") from None
    if pid <= 0:
        raise PyprofError(f"no such process: {pid}")
    return pid


def _add_common(p) -> None:
    p.add_argument("pid", metavar="PID", help="the process id of a running CPython 3.11-3.13")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long the process may take to answer (default 10)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say how the process was reached")


def _say(text):
    try:
        print(f"pyprof: {text}", file=sys.stderr)
    except OSError:
        pass                    # a terminal gone (SIGHUP): the work goes on without it


def _require_terminal(what):
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise PyprofError(f"{what} is a live view: it needs a terminal")


def cmd_attach(argv) -> int:
    from .options import RunOptions, add_options
    p = _Parser(prog="pyprof attach",
                description="Profile a running CPython process for a while, then detach and "
                            "write the capture (docs/attach.md). Default mode: function "
                            "tracing.")
    _add_common(p)
    p.add_argument("-o", "--outfile", required=True, metavar="FILE",
                   help="where the capture goes; its suffix picks the format, as for a run")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="profile for SECONDS (default: until Ctrl-C)")
    add_options(p, _ATTACH_MODES)
    ns = p.parse_args(argv)
    pid = _pid_arg(ns.pid)
    if ns.duration is not None and ns.duration <= 0:
        raise PyprofError("--duration must be > 0")
    opts = RunOptions.from_args(ns)
    opts.check()
    from . import attach
    client = attach.connect(pid, ns.timeout, _say if ns.verbose else None)
    return _attach_run(client, opts, ns)


def _attach_run(client, opts, ns) -> int:
    import time
    from . import attach
    pid = client.pid
    uid = attach.check_process(pid)["uid"] if os.path.exists(f"/proc/{pid}") else os.geteuid()
    tmp, flush = attach.capture_paths(pid, uid)
    outfile = os.path.abspath(opts.outfile)
    started = None
    saved = {}
    try:
        r = client.request("start", options=opts.profile_kwargs(), output=tmp, flush=flush,
                           client_pid=os.getpid(), timeout=ns.timeout + 30)
        started = time.monotonic()
        attach.kill_at_step("started")
        how = f"for {ns.duration:g} s" if ns.duration else "until Ctrl-C"
        _say(f"attached to process {pid} (CPython {client.hello['python']}), {r['mode']} "
             f"mode, {how}")
        got = None
        ended_by = []
        saved = _end_wait_on_signals(ended_by)
        try:
            while got is None:
                left = None if ns.duration is None else started + ns.duration - time.monotonic()
                if left is not None and left <= 0:
                    break
                got = client.wait_event(1.0 if left is None else min(1.0, left))
        except KeyboardInterrupt:
            pass
        for signum in saved:        # stopping and writing -o: not cut short by another
            signal.signal(signum, lambda *_: None)
        if ended_by:
            _say(f"{ended_by[0]}: stopping")
        if got is None:
            r = client.request("stop", path=tmp, timeout=ns.timeout + 60)
            _report_release(r.get("released"))
            client.request("detach", timeout=ns.timeout)
            source = tmp
        elif got.get("event") == "exit" and got.get("path") and os.path.exists(got["path"]):
            _say(f"process {pid} exited after {time.monotonic() - started:.1f} s: writing what "
                 f"was collected")
            source = got["path"]
        elif os.path.exists(flush):
            _say(f"process {pid} ended without a word (killed?): writing its last periodic "
                 f"flush")
            source = flush
        else:
            raise PyprofError(f"process {pid} ended before anything was written")
        from .model.session import Session
        session = Session.load(source)
        attach.drop_own_threads(session)
        if opts.asyncio and not session.tasks:
            _say("note: --async saw no asyncio task (no event loop ran a task while "
                 "attached): the profile is a plain one")
        fmt = format_for_path(outfile)
        if fmt == "cprof":
            session.save(outfile)
        else:
            export(session, fmt, outfile)
        _say(f"wrote {outfile}; detached")
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        client.close()
        for path in (tmp, flush):
            try:
                os.unlink(path)
            except OSError:
                pass
    return 0


def _end_wait_on_signals(ended_by) -> dict:
    """SIGTERM and SIGHUP end attach's wait as Ctrl-C does (the profile is
    stopped and -o written); the signal's name goes to `ended_by`. Returns
    the handlers replaced."""
    names = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}

    def stop(signum, frame):
        ended_by.append(names[signum])
        raise KeyboardInterrupt
    return {signum: signal.signal(signum, stop) for signum in names}


def _report_release(released):
    if released and not released.get("signal"):
        _say("note: a SIGPROF was still pending in the process: pyprof's signal handler stays "
             "installed there, inert (docs/attach.md)")
    if released and not released.get("allocators"):
        _say("note: another allocator hook sits above pyprof's in the process "
             "(tracemalloc?): pyprof's stays below it, forwarding only (docs/attach.md)")


def cmd_top(argv) -> int:
    from .options import byte_count
    p = _Parser(prog="pyprof top",
                description="A live view of a running process: functions, threads and their "
                            "states, the GIL, memory (docs/attach.md#top).")
    _add_common(p)
    p.add_argument("--rate", type=float, default=100.0, metavar="HZ",
                   help="wall-clock samples per second and thread (default 100)")
    p.add_argument("--native", action="store_true",
                   help="native frames too: tells threads waiting for the GIL (state gil)")
    p.add_argument("--memory-sample", nargs="?", const="512k", metavar="BYTES",
                   help="also trace a sample of the allocations (one byte in BYTES, default "
                        "512k): the traced heap")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="refresh period (default 1)")
    p.add_argument("--remote", action="store_true",
                   help="sample from outside, nothing injected (py-spy's way): each sample "
                        "reads the threads' stacks with process_vm_readv (--rate up to 1000)")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="with --remote: sample this long, no live view, and write -o")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="with --remote --duration: the capture (.cprof) or an export, by suffix")
    ns = p.parse_args(argv)
    pid = _pid_arg(ns.pid)
    if not 0 < ns.rate <= 100000:
        raise PyprofError(f"--rate must be in (0, 100000] Hz, not {ns.rate:g}")
    if ns.interval < 0.1:
        raise PyprofError("--interval must be at least 0.1 s")
    if ns.remote:
        from . import remote_top
        if ns.rate > 1000:
            raise PyprofError(f"--remote samples at up to 1000 Hz, not {ns.rate:g}")
        if ns.native or ns.memory_sample:
            raise PyprofError("--native and --memory-sample need the channel: not with --remote")
        if (ns.duration is None) != (ns.output is None):
            raise PyprofError("--duration and -o go together (a capture of that long)")
        if ns.output:
            if ns.duration <= 0:
                raise PyprofError("--duration must be positive")
            return remote_top.record(pid, ns.rate, ns.duration, ns.output, _say)
        _require_terminal("pyprof top")
        return remote_top.run_live(pid, ns.rate, ns.interval)
    if ns.duration is not None or ns.output:
        raise PyprofError("--duration and -o go with --remote")
    sample = byte_count(ns.memory_sample, "--memory-sample") if ns.memory_sample else None
    _require_terminal("pyprof top")
    from . import attach, top
    client = attach.connect(pid, ns.timeout, _say if ns.verbose else None)
    return top.run(client, rate=ns.rate, native=ns.native, memory_sample=sample,
                   interval=ns.interval)


def cmd_dump(argv) -> int:
    p = _Parser(prog="pyprof dump",
                description="Print every thread's current Python stack (and native with "
                            "--native) of a running process, like py-spy dump: read from "
                            "outside, nothing run in the process (docs/attach.md#pyprof-dump).")
    _add_common(p)
    p.add_argument("--native", action="store_true",
                   help="each thread's native (C) stack too, read from outside while the "
                        "threads are stopped (libunwind-ptrace)")
    p.add_argument("--channel", action="store_true",
                   help="ask the process through pyprof's control channel instead (injected "
                        "if it does not listen): Python thread names and daemon flags, but a "
                        "thread must be able to run Python")
    ns = p.parse_args(argv)
    pid = _pid_arg(ns.pid)
    if not ns.channel:
        from . import remote_dump
        try:
            return remote_dump.dump(pid, ns.native)
        except PyprofError as e:
            # ptrace refused: a process that listens is still reachable by its socket
            from . import attach, channel
            if not ("ptrace" in str(e) and os.path.exists(channel.socket_path(
                    pid, attach.check_process(pid)["uid"]))):
                raise
            if ns.verbose:
                _say(f"{e}; process {pid} listens: asking it through its channel")
    return _dump_channel(pid, ns)


def _native_stacks(pid) -> dict:
    """{native thread id: native frames} read from outside (remote_dump), or
    {} with a note saying why not."""
    from . import remote_dump
    try:
        d = remote_dump.read(remote_dump.open_process(pid), stop=True, native=True)
    except PyprofError as e:
        _say(f"native stacks not read: {e}")
        return {}
    return {t["native_id"]: t["native"] or [] for t in d["threads"]}


def _dump_channel(pid, ns) -> int:
    from . import attach
    client = attach.connect(pid, ns.timeout, _say if ns.verbose else None)
    try:
        threads = client.request("stacks", timeout=ns.timeout)["threads"]
        client.request("detach", timeout=ns.timeout)
    finally:
        client.close()
    native = _native_stacks(pid) if ns.native else {}
    hello = client.hello
    print(f"Process {pid}: {' '.join(hello.get('argv') or [])}")
    print(f"Python v{hello['python']}")
    states = {"R": "running", "S": "sleeping", "D": "in I/O", "T": "stopped", "t": "stopped"}
    for t in threads:
        state = states.get(t["state"], t["state"])
        daemon = ", daemon" if t.get("daemon") else ""
        print()
        print(f"Thread {t['native_id']} ({t['name']}{daemon}): {state}")
        for filename, line, func in reversed(t["frames"]):
            print(f"    {func} ({filename}:{line})")
        if ns.native:
            frames = native.get(t["native_id"], [])
            print("  native:" if frames else "  native: (not read)")
            for text in frames:
                print(f"    {text}")
    return 0


# ------------------------------------------------------------------ convert
def cmd_convert(argv) -> int:
    p = _Parser(prog="pyprof convert",
                description="Convert a .cprof capture file to another format.")
    p.add_argument("input", help="a .cprof capture file")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write")
    p.add_argument("-f", "--format", choices=sorted([*FORMATS, *ALIASES]),
                   help="output format (default: from the output suffix, else pstats); "
                        "chrome (alias perfetto): Chrome Trace Event JSON")
    p.add_argument("--min-duration", metavar="DURATION",
                   help="with --format chrome: leave out calls shorter than DURATION (like "
                        "100us or 1ms); how many is reported")
    opts = p.parse_args(argv)
    from .model.session import Session
    fmt = ALIASES.get(opts.format, opts.format) or format_for_path(opts.output)
    min_ns = 0
    if opts.min_duration is not None:
        if fmt != "chrome":
            raise PyprofError("--min-duration goes with --format chrome")
        from .analysis.timeline import duration_ns
        min_ns = duration_ns(opts.min_duration, "--min-duration")
    session = Session.load(opts.input)
    check_writable(opts.output)
    if fmt == "chrome":
        from .export import chrome
        chrome.write(session, opts.output, min_ns, report=sys.stderr)
        return 0
    export(session, fmt, opts.output)
    return 0


# ------------------------------------------------------------------ view
def add_view_options(p) -> None:
    """The options of the tfprof-style views (docs/views.md): the same names
    on the command line, in the API (views.Options) and in the notebook magic."""
    from .analysis.views import COLUMNS, VIEWS
    g = p.add_argument_group("views (docs/views.md)")
    g.add_argument("--view", choices=VIEWS, metavar="NAME",
                   help="code (call tree by path), op (per function), scope (package > "
                        "module > class > function), graph (callers and callees), lines, "
                        "memory")
    g.add_argument("--select", action="append", default=[], metavar="COLUMNS",
                   help="columns to show, comma-separated: " + ", ".join(COLUMNS))
    g.add_argument("--order-by", metavar="COLUMN", help="sort by this column (or name)")
    g.add_argument("--min-time", type=_seconds, default=0.0, metavar="TIME",
                   help="hide nodes with less inclusive time (e.g. 1ms, 250us, 0.5)")
    g.add_argument("--min-calls", type=int, default=0, metavar="N")
    g.add_argument("--min-bytes", type=_bytes_arg, default=0, metavar="BYTES",
                   help="hide nodes that allocated fewer bytes (e.g. 1M)")
    g.add_argument("--min-samples", type=int, default=0, metavar="N")
    g.add_argument("--max-depth", type=int, metavar="N", help="show N levels at most")
    for name, what in (("start", "show the subtrees starting at the nodes matching REGEX"),
                       ("trim", "hide the nodes matching REGEX and everything below them"),
                       ("show", "show only the nodes matching REGEX"),
                       ("hide", "hide the nodes matching REGEX (not what is below them)")):
        g.add_argument(f"--{name}", action="append", default=[], metavar="REGEX",
                       help=what + " (searched in the name and the file; repeatable)")
    g.add_argument("--account-displayed-only", action="store_true",
                   help="totals count only the nodes displayed (by default hidden nodes "
                        "still count in their ancestors' totals)")
    g.add_argument("--thread", action="append", default=[], metavar="NAME",
                   help="only the threads with this name (or matching this regex)")
    g.add_argument("--process", action="append", default=[], metavar="PID|rR",
                   help="a merged capture (--children, MPI, merge): only this process, by "
                        "pid or MPI rank (r2); repeatable")
    g.add_argument("--step", metavar="N|A..B|NAME", help="only what steps counted "
                   "(pyprof.step(): an index, an inclusive range, or a name)")
    g.add_argument("--limit", type=int, metavar="N", help="show the first N top-level rows")
    g.add_argument("--format", dest="view_format", choices=["table", "json", "csv"],
                   default="table", help="output of --view (default: table)")


def view_options(opts):
    from .analysis.views import Options
    return Options(
        select=tuple(c.strip() for arg in opts.select for c in arg.split(",") if c.strip()),
        order_by=opts.order_by, min_time=opts.min_time, min_calls=opts.min_calls,
        min_bytes=opts.min_bytes, min_samples=opts.min_samples, max_depth=opts.max_depth,
        start=tuple(opts.start), trim=tuple(opts.trim), show=tuple(opts.show),
        hide=tuple(opts.hide), account_displayed_only=opts.account_displayed_only,
        thread=tuple(opts.thread), process=tuple(opts.process), step=opts.step,
        limit=opts.limit)


def _amount_type(parse, flag, **kw):
    """argparse's `type` for an amount of amounts.py's grammar: its one
    message, argparse's usage error (one line, status 2)."""
    def convert(text):
        try:
            return parse(text, flag, **kw)
        except PyprofError as e:
            import argparse
            raise argparse.ArgumentTypeError(str(e).removeprefix(flag + " ")) from None
    convert.__name__ = parse.__name__.removeprefix("parse_")    # argparse's "invalid NAME value"
    return convert


def _seconds(text) -> float:
    """'1.5' (seconds), '250ms', '10us', '100ns' -> seconds."""
    return _amount_type(parse_duration, "--min-time", zero_ok=True)(text)


def _bytes_arg(text) -> int:
    return _amount_type(parse_size, "--min-bytes", zero_ok=True)(text)


def cmd_view(argv) -> int:
    p = _Parser(prog="pyprof view", description="Show a .cprof capture file: its tables, "
                "or one of the views (--view) through filters.")
    p.add_argument("input", help="a .cprof capture file")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    add_view_options(p)
    p.add_argument("--lines", action="store_true",
                   help="the line tables (the default when the capture has line data)")
    p.add_argument("--functions", action="store_true", help="the function table")
    p.add_argument("--memory", action="store_true",
                   help="the memory tables (the default when the capture has memory data)")
    p.add_argument("-s", "--sort", default="cumulative", metavar="SORT",
                   help="sort key of the function table (default: cumulative)")
    p.add_argument("--unit", default="us", choices=["s", "ms", "us", "ns"],
                   help="time unit of the line tables (default: us)")
    p.add_argument("--no-call-rows", action="store_true", help="line tables without call rows")
    opts = p.parse_args(argv)
    if opts.sort not in SORT_KEYS:
        raise PyprofError(f"unknown sort key '{opts.sort}' (choose from {', '.join(SORT_KEYS)})")
    from .model.session import Session
    from . import views
    vopts = view_options(opts)
    views.check_options(vopts)
    if opts.output:
        check_writable(opts.output)
    session = Session.load(opts.input)
    if opts.view or opts.view_format != "table" or view_filters_given(opts):
        text = views.render(session, opts.view or "code", opts.view_format, vopts,
                            color=None if not opts.output else False)
        if opts.output:
            from .files import atomic_write
            atomic_write(opts.output, text)
        else:
            sys.stdout.write(text)
        return 0
    if opts.output:
        raise PyprofError("-o goes with --view (or --format)")
    if opts.memory and not session.info.get("memory"):
        raise PyprofError(f"{opts.input} has no memory data (profile with --memory)")
    from .render.printout import print_capture
    only = ("memory" if opts.memory else "lines" if opts.lines else
            "functions" if opts.functions else None)
    print_capture(session, sys.stdout, sort=opts.sort, unit=opts.unit,
                  call_rows=not opts.no_call_rows, only=only)
    return 0


# ------------------------------------------------------------------ stats
def cmd_stats(argv) -> int:
    p = _Parser(prog="pyprof stats",
                description="Per function (and line): the mean and coefficient of variation "
                            "(with std, min, max) of columns over the steps of the captures "
                            "(pyprof.step()), over the captures as repeated runs, over the "
                            "ranks of an MPI run, or over the processes of a --children run.")
    p.add_argument("inputs", nargs="+", metavar="FILE", help=".cprof capture files")
    p.add_argument("--by", choices=["step", "run", "rank", "process"], default="step",
                   help="statistics over steps (default), over the files as runs, over "
                        "the ranks of an MPI run (docs/mpi.md), or over the processes of "
                        "merged captures (docs/children.md)")
    p.add_argument("--select", action="append", default=[], metavar="COLUMNS",
                   help="columns, comma-separated (default: calls,time,self-time, or "
                        "samples,... for sampled captures, plus bytes,net-bytes with memory)")
    p.add_argument("--csv", metavar="OUT", help="write the statistics as CSV to OUT ('-': stdout)")
    p.add_argument("--no-lines", action="store_true", help="functions only")
    opts = p.parse_args(argv)
    if opts.csv and opts.csv != "-":
        check_writable(opts.csv)
    select = [c.strip() for arg in opts.select for c in arg.split(",") if c.strip()]
    from .render import statstable
    return statstable.run(opts.inputs, opts.by, select or None, opts.csv, not opts.no_lines)


def view_filters_given(opts) -> bool:
    return bool(opts.select or opts.order_by or opts.min_time or opts.min_calls
                or opts.min_bytes or opts.min_samples or opts.max_depth or opts.start
                or opts.trim or opts.show or opts.hide or opts.account_displayed_only
                or opts.thread or opts.process or opts.step or opts.limit)


# ------------------------------------------------------------------ merge
def _capture_paths(args) -> list:
    """The inputs of merge: files as given; a directory stands for its *.cprof
    files; a glob pattern the shell did not expand (quoted) is expanded here."""
    import glob
    paths = []
    for arg in args:
        if os.path.isdir(arg):
            found = sorted(glob.glob(os.path.join(glob.escape(arg), "*.cprof")))
            if not found:
                raise PyprofError(f"{arg} is a directory without .cprof files")
            paths.extend(found)
        elif not os.path.exists(arg) and glob.has_magic(arg):
            found = sorted(glob.glob(arg))
            if not found:
                raise PyprofError(f"no file matches {arg!r}")
            paths.extend(found)
        else:
            paths.append(arg)
    return paths


def cmd_merge(argv) -> int:
    p = _Parser(prog="pyprof merge",
                description="Merge captures of one program (runs, threads, processes) into one "
                            "capture; each process stays apart in it (docs/merge-diff.md).")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="a .cprof capture, a directory (its *.cprof files) or a quoted glob")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the merged capture to write (.cprof)")
    p.add_argument("--force", action="store_true",
                   help="merge captures of different programs, or of the same process twice")
    opts = p.parse_args(argv)
    from .analysis.merge import merge_files
    paths = _capture_paths(opts.inputs)
    if format_for_path(opts.output) != "cprof":
        raise PyprofError(f"{opts.output}: the output of merge is a capture: name it *.cprof "
                          f"(then 'pyprof convert' it to other formats)")
    check_writable(opts.output)
    merge_files(paths, force=opts.force).save(opts.output)
    return 0


# ------------------------------------------------------------------ diff
def cmd_diff(argv) -> int:
    from . import diff
    p = _Parser(prog="pyprof diff",
                description="Compare two captures per function or line: before, after, absolute "
                            "and relative change, largest change first (docs/merge-diff.md).")
    p.add_argument("before", help="the capture before the change (.cprof)")
    p.add_argument("after", help="the capture after the change (.cprof)")
    p.add_argument("--by", choices=diff.BY, default="function",
                   help="compare functions (default) or lines")
    p.add_argument("--select", nargs="+", metavar="COLUMN",
                   help="the columns to show, the first one sorting and filtering: "
                        + ", ".join(diff.COLUMNS) + " (default: all both captures have)")
    p.add_argument("--threshold", type=_amount_type(parse_percent, "--threshold"), default=5.0,
                   metavar="PCT",
                   help="hide changes smaller than PCT percent (default 5)")
    p.add_argument("--min-time", type=_seconds, default=0.001, metavar="SECONDS",
                   help="hide time changes smaller than SECONDS (default 0.001)")
    p.add_argument("--min-bytes", type=_bytes_arg, default=1024, metavar="BYTES",
                   help="hide byte changes smaller than BYTES (default 1024)")
    p.add_argument("--min-count", type=int, default=1, metavar="N",
                   help="hide count changes (calls, samples, hits) smaller than N (default 1)")
    p.add_argument("--limit", type=int, metavar="N", help="show at most N rows")
    p.add_argument("--format", choices=("table", "csv", "json"),
                   help="output format (default: from -o's suffix .csv/.json, else table)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--flamegraph", metavar="OUT.html",
                   help="also write a differential flame graph: widths from AFTER, red where "
                        "a frame grew, blue where it shrank (needs stacks: --sample or memory "
                        "stacks)")
    p.add_argument("--fail-above", type=_percent, metavar="PCT",
                   help="a CI gate: exit 1 when the total or a function's self time (bytes "
                        "with --memory) grew by more than PCT percent and beyond the noise "
                        "the captures allow (docs/ci.md), naming what grew")
    p.add_argument("--memory", action="store_true",
                   help="the gate judges memory: the peak and each function's allocated "
                        "bytes (default: time)")
    opts = p.parse_args(argv)
    if opts.threshold < 0 or opts.min_time < 0 or opts.min_bytes < 0 or opts.min_count < 0:
        raise PyprofError("--threshold, --min-time, --min-bytes and --min-count must be >= 0")
    if opts.memory and opts.fail_above is None:
        raise PyprofError("--memory goes with --fail-above")
    fmt = opts.format
    if fmt is None:
        suffix = os.path.splitext(opts.output or "")[1].lower()
        fmt = {".csv": "csv", ".json": "json"}.get(suffix, "table")
    for path in (opts.output, opts.flamegraph):
        if path:
            check_writable(path)
    from .model.session import Session
    before, after = Session.load(opts.before), Session.load(opts.after)
    result = diff.diff(before, after, by=opts.by, columns=opts.select,
                       threshold=opts.threshold, min_time=opts.min_time,
                       min_bytes=opts.min_bytes, min_count=opts.min_count, limit=opts.limit,
                       names=(opts.before, opts.after))
    verdict = None
    if opts.fail_above is not None:
        from .analysis import gates
        from .render import gatetext
        verdict = gates.gate(before, after, opts.fail_above, memory=opts.memory,
                             min_time=opts.min_time, min_bytes=opts.min_bytes,
                             names=(opts.before, opts.after))
    if verdict is not None and fmt == "json":
        import json
        data = diff.to_json(result)
        data["gate"] = gates.verdict_json(verdict)
        text = json.dumps(data, indent=1) + "\n"
    else:
        text = diff.render(result, fmt)
    flame = None
    if opts.flamegraph:                 # everything is computed before anything is written
        from .export import diffflame
        flame = diffflame.render(before, after, names=(opts.before, opts.after))
    from .files import atomic_write
    if flame is not None:
        atomic_write(opts.flamegraph, flame)
    if opts.output:
        atomic_write(opts.output, text)
    else:
        sys.stdout.write(text)
    if verdict is None:
        return 0
    if fmt != "json":
        out = sys.stdout if fmt == "table" and not opts.output else sys.stderr
        out.write("\n".join(gatetext.verdict_lines(verdict)) + "\n")
    return 1 if verdict.failed else 0


def _percent(text) -> float:
    return _amount_type(parse_percent, "--fail-above")(text)


# ------------------------------------------------------------------ check
def cmd_check(argv) -> int:
    p = _Parser(prog="pyprof check",
                description="A CI gate on one capture: exit 1 when it is over a limit, "
                            "naming what used it most; 0 otherwise (docs/ci.md).")
    p.add_argument("input", help="a .cprof capture file")
    p.add_argument("--max-time", metavar="DURATION",
                   help="the time profiled (INFO duration), at most DURATION (50ms, 1.5s)")
    p.add_argument("--max-memory", metavar="BYTES",
                   help="the peak traced bytes, at most BYTES (5MB, 512k; needs --memory)")
    p.add_argument("--max-calls", action="append", default=[], metavar="FUNC=N",
                   help="calls of FUNC (a name, a qualified name or FILE:QUALNAME) at most "
                        "N (a traced capture); repeatable")
    p.add_argument("--format", choices=("text", "json"), default="text")
    opts = p.parse_args(argv)
    from .analysis import gates
    from .render import gatetext
    max_time = gates.parse_seconds(opts.max_time, "--max-time") if opts.max_time else None
    max_memory = gates.parse_bytes(opts.max_memory, "--max-memory") if opts.max_memory else None
    calls = []
    for spec in opts.max_calls:
        func, eq, n = spec.rpartition("=")
        if not eq or not func:
            raise PyprofError(f"--max-calls takes FUNC=N, not {spec!r}")
        calls.append((func, gates.parse_count(n, f"--max-calls {func}")))
    if max_time is None and max_memory is None and not calls:
        raise PyprofError("give at least one of --max-time, --max-memory, --max-calls")
    from .model.session import Session
    session = Session.load(opts.input)
    try:
        over = gates.check(session, max_time, max_memory, calls)
    except PyprofError as e:
        raise PyprofError(f"{opts.input}: {e}") from None
    lines = [gatetext.limit_text(what, measured, limit, culprits)
             for what, measured, limit, culprits in over]
    if opts.format == "json":
        import json
        print(json.dumps({"input": opts.input, "failed": bool(over), "over": [
            {"what": what, "measured": measured, "limit": limit,
             "top": [{"what": n, "file": f, "line": ln, "value": v}
                     for n, f, ln, v in culprits], "message": text}
            for (what, measured, limit, culprits), text in zip(over, lines)]}, indent=1))
    elif over:
        print(f"pyprof: check failed: {opts.input}")
        for text in lines:
            print("  " + text)
    else:
        print(f"pyprof: check passed: {opts.input}")
    return 1 if over else 0


# ------------------------------------------------------------------ config
def cmd_config(argv) -> int:
    """The effective settings and where each came from (config.py)."""
    fmt = "table"
    argv = list(argv)
    if "--format" in argv:
        i = argv.index("--format")
        if i + 1 >= len(argv) or argv[i + 1] not in ("table", "json"):
            raise PyprofError("--format takes table or json (see 'pyprof config --help')")
        fmt = argv[i + 1]
        del argv[i:i + 2]
    if argv in (["-h"], ["--help"]):
        print("usage: pyprof config [RUN OPTIONS] [--format table|json]\n\n"
              "The settings a run would use (run options given here, then PYPROF_* "
              "variables, then [tool.pyprof] of the nearest pyproject.toml, then the "
              "defaults) and where each came from; also the pytest plugin's and the web "
              "middleware's (docs/cli.md, 'Configuration').")
        return 0
    from .options import config
    opts, rest = parse_run_args(argv)
    if rest:
        raise PyprofError(f"pyprof config takes run options only, not {rest[0]!r}")
    cfg = config.load()
    origins = config.apply(opts, given_fields(argv), cfg)
    opts.check()
    desc = config.describe(origins, cfg)
    if fmt == "json":
        import json
        print(json.dumps(desc, indent=1, default=str))
        return 0
    print(f"pyproject.toml: {desc['pyproject'] or '(none found)'}")
    print("precedence: command line > environment (PYPROF_*) > pyproject.toml > default")
    for name, title in (("run", "[tool.pyprof]"), ("pytest", "[tool.pyprof.pytest]"),
                        ("web", "[tool.pyprof.web]")):
        print(f"\n{title}")
        width = max(len(r["key"]) for r in desc[name])
        for r in desc[name]:
            value = r["value"]
            shown = "-" if value is None or value == () or value == [] else (
                ",".join(value) if isinstance(value, (list, tuple)) else value)
            print(f"  {r['key']:<{width}}  {str(shown):<24} {r['from']}")
    return 0


# pyprof's commands; anything else is a program to run (`pyprof script.py`).
COMMANDS = {"convert": cmd_convert, "view": cmd_view, "stats": cmd_stats, "merge": cmd_merge,
            "diff": cmd_diff, "attach": cmd_attach, "top": cmd_top, "dump": cmd_dump,
            "check": cmd_check, "config": cmd_config, "run": cmd_run}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    control = sys.modules.get("pyprof.control")
    if control is not None:
        control.uninstall()                     # this process's profiling is the CLI's
    try:
        command = COMMANDS.get(argv[0]) if argv else None
        if command is not None:
            return command(argv[1:])
        return cmd_run(argv)
    except PyprofError as e:
        print(f"pyprof: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 1
