"""Chrome Trace Event Format (chrome://tracing, Perfetto, speedscope): the
timeline of a capture (docs/timeline.md).

- one process (``pid``: the profiled process's), named by ``M`` process_name;
  a merged capture of several processes (--children, MPI ranks, pyprof
  merge) has one per process, each with its own threads, memory counter and
  name (its command line, its MPI rank), on the merged capture's time axis;
- one track per thread (``tid``: its kernel thread id), named by ``M`` thread_name;
- each kept call as an ``X`` complete event (``ts``/``dur`` in microseconds,
  written from integer nanoseconds with three decimals, so no precision is
  lost and no locale or float formatting is involved), sorted per thread by
  (start, longest first) so that every call comes after the one containing it;
- the memory curve as a ``C`` counter "memory" with series ``rss_bytes`` and
  ``heap_bytes`` (bytes; with --memory);
- pyprof.step() markers as process-wide ``i`` instant events;
- asyncio tasks (--async, docs/async.md): a process "asyncio tasks" with one
  track per task, named ``task NAME``: an ``X`` event for its lifetime (named
  by its coroutine) and, traced with a timeline, one per step inside it
  (at most MAX_TASK_TRACKS tracks and MAX_TASK_STEPS steps, docs/async.md).

No ``args`` on X events: speedscope keys frames by name and args, so per-call
args would split a function into many frames. Strings are escaped by
json.dumps after lone surrogates (undecodable file names) are turned into
``\\udcXX`` text, so the file is valid UTF-8; NaN cannot occur (integers only,
and allow_nan=False where floats could appear).
"""
from __future__ import annotations

import json
import os

from .._version import __version__
from ..errors import PyprofError
from ..analysis.timeline import thin
from ..base.files import atomic_write_parts
from ..render.units import format_ns


def has_content(session) -> bool:
    return bool(session.info.get("timeline") or session.memory_curve
                or session.meta.get("steps") or session.tasks)


TASKS_PID = 1 << 23                         # past Linux's largest pid and merged ones
# Task tracks (those that ran longest kept, ~210 bytes of JSON each) and steps
# (the longest kept, ~115 bytes each) written at most: thousands of short tasks
# make them by the hundred thousand.
MAX_TASK_STEPS, MAX_TASK_TRACKS = 20_000, 5_000


def _kept_tasks(session) -> set:
    n = len(session.tasks)
    if n <= MAX_TASK_TRACKS:
        return set(range(n))
    import heapq
    return set(heapq.nlargest(MAX_TASK_TRACKS, range(n), key=lambda i: (
        session.tasks[i].running, -i)))


def _kept_steps(session, tasks) -> list:
    steps = [s for s in session.task_steps if s[0] in tasks]
    if len(steps) <= MAX_TASK_STEPS:
        return steps
    import heapq
    return heapq.nlargest(MAX_TASK_STEPS, steps, key=lambda s: s[2])


def _task_events(session, end_ns, kept, tasks):
    """The tasks' tracks: metadata, then per task its lifetime and its steps."""
    if not session.tasks:
        return
    yield (f'{{"name":"process_name","ph":"M","pid":{TASKS_PID},"tid":0,'
           f'"args":{{"name":"asyncio tasks"}}}}')
    steps: dict = {}
    for task, start, dur in kept:
        steps.setdefault(task, []).append((start, dur))
    for i, t in enumerate(session.tasks):
        if i not in tasks:
            continue
        label = session.functions[t.fid].name
        name = label[1:-1] if label.startswith("<") else label
        coro = session.functions.get(t.coro_fid) if t.coro_fid is not None else None
        yield (f'{{"name":"thread_name","ph":"M","pid":{TASKS_PID},"tid":{i + 1},'
               f'"args":{{"name":{_str(name)}}}}}')
        end = t.end if t.end is not None else max(end_ns, t.start)
        yield (f'{{"name":{_str(function_name(coro) if coro else name)},"cat":"task",'
               f'"ph":"X","ts":{us(t.start)},"dur":{us(end - t.start)},"pid":{TASKS_PID},'
               f'"tid":{i + 1}}}')
        step_name = _str(f"step of {name}")
        for start, dur in sorted(steps.get(i, ())):
            yield (f'{{"name":{step_name},"cat":"task-step","ph":"X","ts":{us(start)},'
                   f'"dur":{us(dur)},"pid":{TASKS_PID},"tid":{i + 1}}}')


def _text(s) -> str:
    """Valid UTF-8 text whatever the string holds (lone surrogates become \\udcXX)."""
    return str(s).encode("utf-8", "backslashreplace").decode("utf-8")


def _str(s) -> str:
    return json.dumps(_text(s), ensure_ascii=False)


def us(ns: int) -> str:
    """Integer nanoseconds as a JSON number of microseconds: '1234.567'."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def function_name(fn) -> str:
    if fn is None:
        return "?"
    if fn.kind == "python":
        return f"{fn.qualname or fn.name} ({fn.filename}:{fn.line})"
    return fn.name


def thread_ids(session) -> dict:
    """thread index -> tid: its kernel id, unless another thread of the capture had
    the same (ids are reused) or none is known; then a number past any kernel id."""
    out, seen = {}, set()
    for index in sorted(session.threads):
        nid = session.threads[index].native_id
        if not nid or nid in seen:
            nid = (1 << 31) + index
        seen.add(nid)
        out[index] = nid
    return out


def processes(session) -> list:
    """One entry per process of the capture: its trace id (its pid; another
    number when two processes of a merge share one), its name, its memory
    curve and the shift of that curve's times onto the capture's time axis."""
    meta = session.meta
    records = meta.get("processes") or [None]
    origin = int(session.info.get("start_wall_ns", 0) or 0)
    out, seen = [], set()
    for k, record in enumerate(records):
        record = record if record is not None else meta
        pid = int(record.get("pid") or 0)
        if not pid or pid in seen:
            pid = (1 << 22) + k             # past Linux's largest pid
        seen.add(pid)
        command = " ".join(map(str, record.get("argv") or []))
        name = f"python {command}" if command else "python"
        mpi = record.get("mpi")
        rank = mpi.get("rank") if isinstance(mpi, dict) else None
        if rank is not None:
            name = f"rank {rank}: {name}"
        start = int(record.get("start_wall_ns") or origin) if "processes" in meta else origin
        out.append({"id": pid, "name": name, "shift_ns": start - origin if origin else 0,
                    "curve": session.process_memory_curve(k)})
    return out


def build(session, min_duration_ns: int = 0):
    """(parts, summary): the JSON text in pieces, and what was kept and dropped."""
    if not has_content(session):
        raise PyprofError("this capture has no timeline, memory curve, steps or tasks to put "
                          "in a Chrome trace: profile with --timeline (function calls), "
                          "--memory or --async")
    info, meta = session.info, session.meta
    procs = processes(session)
    pid = procs[0]["id"]
    events, dropped_export = thin(session.timeline, min_duration_ns)
    tids = thread_ids(session)
    thread_pid = {t: procs[session.thread_process(t)]["id"]
                  if session.thread_process(t) < len(procs) else pid
                  for t in set(session.threads) | {t for t, *_ in events}}
    for t, *_ in events:                    # a row of a thread the capture does not name
        tids.setdefault(t, (1 << 31) + t)
    summary = {
        "timeline_events": len(events),
        "dropped_short": int(info.get("timeline_dropped_short", 0)),
        "dropped_full": int(info.get("timeline_dropped_full", 0)),
        "dropped_at_export": dropped_export,
        "min_duration_ns": int(info.get("timeline_min_duration_ns", 0)),
        "export_min_duration_ns": int(min_duration_ns),
        "open_calls_clipped": int(info.get("timeline_open", 0)),
    }
    kept_tasks = _kept_tasks(session)
    kept_steps = _kept_steps(session, kept_tasks)
    if session.tasks:
        summary["tasks"] = len(kept_tasks)
        summary["tasks_dropped"] = len(session.tasks) - len(kept_tasks)
    if session.task_steps:
        summary["task_steps"] = len(kept_steps)
        summary["task_steps_dropped"] = len(session.task_steps) - len(kept_steps)

    def parts():
        yield '{"traceEvents":[\n'
        command = " ".join(map(str, meta.get("argv") or []))
        first = []
        for k, proc in enumerate(procs):
            first.append(f'{{"name":"process_name","ph":"M","pid":{proc["id"]},"tid":0,'
                         f'"args":{{"name":{_str(proc["name"])}}}}}')
            first.append(f'{{"name":"process_sort_index","ph":"M","pid":{proc["id"]},"tid":0,'
                         f'"args":{{"sort_index":{k}}}}}')
        used = {t for t, *_ in events} | set(session.threads)
        for t in sorted(used):
            th = session.threads.get(t)
            name = th.name if th and th.name else f"thread {t}"
            first.append(f'{{"name":"thread_name","ph":"M","pid":{thread_pid[t]},'
                         f'"tid":{tids[t]},"args":{{"name":{_str(name)}}}}}')
            first.append(f'{{"name":"thread_sort_index","ph":"M","pid":{thread_pid[t]},'
                         f'"tid":{tids[t]},"args":{{"sort_index":{int(t)}}}}}')
        yield ",\n".join(first)
        names, cats = {}, {}
        # per thread, by start then longest first; equal intervals: the later
        # recorded (the caller: it returned last) first
        order = sorted(range(len(events)),
                       key=lambda i: (events[i][0], events[i][2], -events[i][3], -i))
        for k in range(0, len(order), 4096):
            chunk = []
            for i in order[k:k + 4096]:
                t, fid, start, dur = events[i]
                name = names.get(fid)
                if name is None:
                    fn = session.functions.get(fid)
                    name = names[fid] = _str(function_name(fn))
                    cats[fid] = "python" if fn is None or fn.kind == "python" else "builtin"
                chunk.append(f'{{"name":{name},"cat":"{cats[fid]}","ph":"X","ts":{us(start)},'
                             f'"dur":{us(dur)},"pid":{thread_pid[t]},"tid":{tids[t]}}}')
            yield ",\n" + ",\n".join(chunk)
        for proc in procs:
            for pt in proc["curve"]:
                ts = us(round(pt.t * 1e9) + proc["shift_ns"])
                yield (f',\n{{"name":"memory","ph":"C","ts":{ts},"pid":{proc["id"]},"tid":0,'
                       f'"args":{{"rss_bytes":{int(pt.rss)},"heap_bytes":{int(pt.heap)}}}}}')
        tasks = list(_task_events(session, int(info.get("duration_ns", 0) or 0), kept_steps,
                                  kept_tasks))
        if tasks:
            yield ",\n" + ",\n".join(tasks)
        for m in meta.get("steps", []):
            try:
                t_ns = round(float(m["t"]) * 1e9)
            except (KeyError, TypeError, ValueError, OverflowError):
                continue                    # not a marker pyprof wrote
            label = m.get("name") or f"step {m.get('index', '?')}"
            if m.get("event") == "end":
                label = f"end of {label}"
            yield (f',\n{{"name":{_str(label)},"cat":"step","ph":"i","s":"p","ts":{us(t_ns)},'
                   f'"pid":{pid},"tid":0}}')
        other = {"pyprof_version": __version__,
                 "command": _text(command),
                 "python": _text(meta.get("python") or info.get("python") or ""),
                 "clock": _text(info.get("clock", "")),
                 **summary}
        yield ('\n],"displayTimeUnit":"ms","otherData":'
               + json.dumps(other, ensure_ascii=False, allow_nan=False) + "}\n")

    return parts(), summary


def write(session, path, min_duration_ns: int = 0, report=None):
    """Write the trace atomically. `report` (a file, e.g. sys.stderr) gets one line
    when --min-duration dropped calls at export."""
    parts, summary = build(session, min_duration_ns)
    atomic_write_parts(path, parts)
    if report is not None and summary["dropped_at_export"]:
        print(f"pyprof: {summary['dropped_at_export']} calls shorter than "
              f"{format_ns(min_duration_ns)} left out of {os.fspath(path)} "
              f"({summary['timeline_events']} kept)", file=report)
    if report is not None and summary.get("tasks_dropped"):
        print(f"pyprof: {summary['tasks_dropped']} asyncio tasks left out of "
              f"{os.fspath(path)} (the {summary['tasks']} that ran longest kept)", file=report)
    if report is not None and summary.get("task_steps_dropped"):
        print(f"pyprof: {summary['task_steps_dropped']} asyncio task steps left out of "
              f"{os.fspath(path)} (the {summary['task_steps']} longest kept)", file=report)
    return summary
