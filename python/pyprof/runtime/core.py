"""The C profiler (_cprof.Profiler) with the members pyprof's own modules use
under public names: Profile (profiler.py) and the lean profiler of a child
process (children.py) are built on it. No other module touches the C core's
private members. Loaded without the pyprof package in a lean child: it imports
the C core only."""
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
    after_fork(): in a forked child, disabled: forget the parent's data and threads.
    set_background(flag): a background profiler gives way to one enabled later.
    start_mono_ns: the monotonic clock (ns) at the first enable.
    step_counters(): the counters a step mark reads.
    lazy_threading, hook_threading(): 3.11, threading hooked at its first import.
    """
    thread_paused = Profiler._thread_paused
    set_sample_root = Profiler._set_sample_root
    add_line_target = Profiler._add_line_target
    after_fork = Profiler._after_fork
    set_background = Profiler._set_background
    start_mono_ns = Profiler._start_mono_ns
    step_counters = Profiler._step_counters
    lazy_threading = Profiler._lazy_threading
    hook_threading = Profiler._hook_threading
