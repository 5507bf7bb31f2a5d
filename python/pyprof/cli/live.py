"""`pyprof attach`, `top` and `dump`: a running process, reached through its control
channel or read from outside (live/)."""
from __future__ import annotations

import _signal as signal            # signal.py imports enum: ~4 ms of start-up
import os
import sys

from ..errors import PyprofError
from ..export import export, format_for_path
from .args import arg_parser, require_terminal


_ATTACH_MODES = ("--sample", "--rate", "--cpu", "--wall", "--native", "--async", "--memory",
                 "--memory-sample", "--memory-stacks", "--functions", "--lines-of",
                 "--include", "--exclude", "--timeline", "--min-duration",
                 "--timeline-max-events", "--no-builtins", "--exact-builtins", "--opcodes")


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




def cmd_attach(argv) -> int:
    from ..options import RunOptions, add_options
    p = arg_parser(prog="pyprof attach",
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
    from ..live import attach
    client = attach.connect(pid, ns.timeout, _say if ns.verbose else None)
    return _attach_run(client, opts, ns)


def _attach_run(client, opts, ns) -> int:
    import time
    from ..live import attach
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
        from ..model.session import Session
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
        _say("note: a sampler signal was still pending in the process: pyprof's signal "
             "handler stays installed there, inert (docs/attach.md)")
    if released and not released.get("allocators"):
        _say("note: another allocator hook sits above pyprof's in the process "
             "(tracemalloc?): pyprof's stays below it, forwarding only (docs/attach.md)")


def cmd_top(argv) -> int:
    from ..options import byte_count
    p = arg_parser(prog="pyprof top",
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
        from ..live import remote_top
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
        require_terminal("pyprof top")
        return remote_top.run_live(pid, ns.rate, ns.interval)
    if ns.duration is not None or ns.output:
        raise PyprofError("--duration and -o go with --remote")
    sample = byte_count(ns.memory_sample, "--memory-sample") if ns.memory_sample else None
    require_terminal("pyprof top")
    from ..live import attach, top
    client = attach.connect(pid, ns.timeout, _say if ns.verbose else None)
    return top.run(client, rate=ns.rate, native=ns.native, memory_sample=sample,
                   interval=ns.interval)


def cmd_dump(argv) -> int:
    p = arg_parser(prog="pyprof dump",
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
        from ..live import remote_dump
        try:
            return remote_dump.dump(pid, ns.native)
        except PyprofError as e:
            # ptrace refused: a process that listens is still reachable by its socket
            from ..live import attach, channel
            if not ("ptrace" in str(e) and os.path.exists(channel.socket_path(
                    pid, attach.check_process(pid)["uid"]))):
                raise
            if ns.verbose:
                _say(f"{e}; process {pid} listens: asking it through its channel")
    return _dump_channel(pid, ns)


def _native_stacks(pid) -> dict:
    """{native thread id: native frames} read from outside (remote_dump), or
    {} with a note saying why not."""
    from ..live import remote_dump
    try:
        d = remote_dump.read(remote_dump.open_process(pid), stop=True, native=True)
    except PyprofError as e:
        _say(f"native stacks not read: {e}")
        return {}
    return {t["native_id"]: t["native"] or [] for t in d["threads"]}


def _dump_channel(pid, ns) -> int:
    from ..live import attach
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
