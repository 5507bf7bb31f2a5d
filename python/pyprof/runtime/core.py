"""The C profiler (_cprof.Profiler) with the members pyprof's own modules use
under public names: Profile (profiler.py) and the lean profiler of a child
process (children.py) are built on it. No other module touches the C core's
private members. Loaded without the pyprof package in a lean child: it imports
the C core only."""
import sys

from .._cprof import Profiler


class Core(Profiler):
    """Internal interface, not the public API: the C core's members for the
    runner, the live channel, steps, the integrations. Descriptors of the C
    type, not Python wrappers: setting `thread_paused` is no call event, so a
    pause leaves no frame of its own open to collect the paused time (module.c).
    Set and unset it in the same frame: that keeps the shadow stack balanced.

    thread_paused: this thread's events are not recorded while true.
    set_sample_root(root, program=None): sampled stacks start above `root`'s frames.
    add_line_target(code) -> function id: a code object becomes a line target.
    trace_running_frame(frame, on): a target's frame running since before enable().
    after_fork(): in a forked child, disabled: forget the parent's data and threads.
    set_background(flag): a background profiler gives way to one enabled later.
    start_mono_ns: the monotonic clock (ns) at the first enable.
    step_counters(): the counters a step mark reads.
    hook_threading(): threading has just been imported (watch_threading below).
    """
    thread_paused = Profiler._thread_paused
    set_sample_root = Profiler._set_sample_root
    add_line_target = Profiler._add_line_target
    trace_running_frame = Profiler._trace_running_frame
    after_fork = Profiler._after_fork
    set_background = Profiler._set_background
    start_mono_ns = Profiler._start_mono_ns
    step_counters = Profiler._step_counters
    hook_threading = Profiler._hook_threading


def watch_threading(core):
    """pyprof never imports threading: it would add ~5 ms to every start and
    move the program's own import of it. The engines that follow threading's
    new threads (3.11's hooks, the wall sampler's thread start) hook it when
    the program imports it: a meta path finder waits for that import, for
    every core enabled while threading is absent (call before enable())."""
    if "threading" in sys.modules:
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _ThreadingImport)), None)
    if finder is None:
        finder = _ThreadingImport()
        sys.meta_path.insert(0, finder)
    # the cores no longer enabled need nothing (the C core forgets a pending hook at disable)
    finder.cores[:] = [c for c in finder.cores if c.enabled and c is not core] + [core]


class _ThreadingImport:
    """Lets the normal finders find threading and its loader run it, then calls
    hook_threading() of the waiting cores; leaves sys.meta_path at that import."""

    def __init__(self):
        self.cores = []

    def find_spec(self, name, path=None, target=None):
        if name != "threading":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or isinstance(loader, type):
            return spec     # a loader shared by every module (frozen): left as it is
        cores, self.cores = self.cores, []

        def exec_then_hook(module):
            try:
                exec_module(module)
            finally:
                try:
                    del loader.exec_module      # the loader's own method again
                except AttributeError:
                    pass
            for c in cores:
                c.hook_threading()

        try:
            loader.exec_module = exec_then_hook     # this import's loader only
        except AttributeError:
            pass
        return spec
