"""`pyprof run` (the default command): the program runner, and --listen / --live."""
import _signal as signal            # signal.py imports enum: ~4 ms of start-up
import builtins
import importlib.machinery
import os
import sys

from .. import _cprof
from ..errors import REPLACED, PyprofError
from ..export import export, format_for_path
from ..options import given_fields, parse_run_args, signal_number, split_argv
from .args import EXIT_USAGE, require_terminal, version_text


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


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
            if (b"\0" if isinstance(source, bytes) else "\0") in source:
                # compile()'s own error for it (ValueError or SyntaxError by version)
                return compile(source, filename, "exec", dont_inherit=True)
            # compile() without its ast type set-up (~1.5 ms: module.c)
            return _cprof.compile_program(source, filename)
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
    from ..render.printout import print_capture
    session = session if session is not None else prof.session()
    print_capture(session, out, sort=opts.sort, unit=opts.unit,
                  call_rows=not opts.no_call_rows, columns=opts.opcodes)


class _Runner:
    """Runs the target under a Profile and writes the results exactly once."""

    def __init__(self, opts, target):
        from ..runtime.profiler import Profile
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
        self.prof.objects_at_steps = opts.objects
        from ..runtime import mpi
        rank = mpi.detect()
        if rank is not None:
            self.prof.meta["mpi"] = rank
        self.outfile = os.path.abspath(opts.outfile) if opts.outfile else None
        self.children = None
        if opts.children:
            from ..runtime import children
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
            from ..runtime import objects
            self.prof.meta["objects"] = objects.summary()
        # --children: this process's capture merged with the children's
        session, child_paths = None, []
        if self.children is not None:
            from ..runtime import children
            children.finish_children()
            session, child_paths = children.collect(self.prof.session(), self.children)
        if self.outfile and format_for_path(self.outfile) == "text":
            from ..export import text
            text.write(session or self.prof.session(), self.outfile, unit=opts.unit,
                       call_rows=not opts.no_call_rows, sort=opts.sort, columns=opts.opcodes)
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
        timer = self.prof.sampling_timer if opts.sample else None
        if timer and timer[1]:
            got = f", at {rates[1]:.0f} Hz" if rates and rates[1] and rates[2] >= 0.5 else ""
            print(f"pyprof: note: no per-thread CPU-clock events here ({timer[1]}): --cpu "
                  f"sampled on ITIMER_PROF instead{got}, at most the kernel's tick "
                  f"(docs/sampling.md, \"CPU timers\")", file=sys.stderr)
        # under half a second measured, too few ticks to tell the kernel's rate
        elif rates and rates[1] and rates[1] < 0.8 * rates[0] and rates[2] >= 0.5:
            print(f"pyprof: note: asked for {rates[0]:g} samples per "
                  f"{'' if opts.wall else 'CPU '}second, got {rates[1]:.0f} "
                  f"(the kernel delivers no more); times stay right, since each sample "
                  f"weighs the time it stands for, but the resolution is {rates[1]:.0f} Hz",
                  file=sys.stderr)
        if self.children is not None:
            from ..runtime import children
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
        # threading is not imported for the program: a plain run does not have
        # it, and it costs ~5 ms (runtime/core.py watch_threading)
        globs = self.target.install()
        if self.prof.sampling:
            # stacks start at the program; the runner's own work is not sampled
            self.prof.set_sample_root(_Runner._run.__code__, self.target.code)
        if self.line_mode:
            import builtins
            from ..runtime.decorator import profile
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
            from ..runtime.forkmask import guard_sigterm_across_fork
            guard_sigterm_across_fork(self._child_sigterm_default)
        if self.opts.signal:
            self._toggle_on(self.opts.signal)
        else:
            try:
                self.prof.enable()
            except RuntimeError as e:       # what the sampler cannot have here: one line
                if not str(e).startswith("pyprof: "):
                    raise
                raise PyprofError(str(e)[len("pyprof: "):]) from None
        try:
            try:
                try:
                    _cprof.run_program(self.target.code, globs)
                finally:
                    # The interpreter waits for non-daemon threads at exit, after
                    # results would be written: wait here, still profiling them,
                    # but not this thread's waiting (pyprof's calls, not the program's).
                    self.prof.thread_paused = True
                    threading = sys.modules.get("threading")  # no threads to wait for without it
                    for t in threading.enumerate() if threading is not None else ():
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
    from ..options import config
    config.apply(opts, given_fields(split_argv(None, argv)[0]))
    from ..runtime import mpi
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
    from ..live import channel
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
    from ..live import attach, top
    require_terminal("--live")
    fd, log = tempfile.mkstemp(prefix="pyprof-live-", suffix=".log")
    argv = [sys.executable, "-m", "pyprof", "--listen"]
    argv += ["-m"] if opts.module else ["-c"] if opts.code else []
    with os.fdopen(fd, "w") as out:
        child = subprocess.Popen(argv + rest, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT)
    try:
        import time
        from ..live.channel import socket_path
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
