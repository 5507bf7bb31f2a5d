"""`pyprof merge`, `diff` and `check`: captures combined, compared, or held to limits
(docs/merge-diff.md, docs/ci.md)."""
from __future__ import annotations

import os
import sys

from ..errors import PyprofError
from ..export import format_for_path
from ..options import check_writable
from ..base.amounts import parse_duration, parse_percent, parse_size
from .args import amount_type, arg_parser


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
    p = arg_parser(prog="pyprof merge",
                   description="Merge captures of one program (runs, threads, processes) into one "
                               "capture; each process stays apart in it (docs/merge-diff.md).")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="a .cprof capture, a directory (its *.cprof files) or a quoted glob")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the merged capture to write (.cprof)")
    p.add_argument("--force", action="store_true",
                   help="merge captures of different programs, or of the same process twice")
    opts = p.parse_args(argv)
    from ..analysis.merge import merge_files
    paths = _capture_paths(opts.inputs)
    if format_for_path(opts.output) != "cprof":
        raise PyprofError(f"{opts.output}: the output of merge is a capture: name it *.cprof "
                          f"(then 'pyprof convert' it to other formats)")
    check_writable(opts.output)
    merge_files(paths, force=opts.force).save(opts.output)
    return 0


def cmd_diff(argv) -> int:
    from ..analysis import diff
    from ..render import difftable
    p = arg_parser(prog="pyprof diff",
                   description="Compare two captures per function or line: before, after, "
                               "absolute and relative change, largest change first "
                               "(docs/merge-diff.md).")
    p.add_argument("before", help="the capture before the change (.cprof)")
    p.add_argument("after", help="the capture after the change (.cprof)")
    p.add_argument("--by", choices=diff.BY, default="function",
                   help="compare functions (default) or lines")
    p.add_argument("--select", nargs="+", metavar="COLUMN",
                   help="the columns to show, the first one sorting and filtering: "
                        + ", ".join(diff.COLUMNS) + " (default: all both captures have)")
    p.add_argument("--threshold", type=amount_type(parse_percent, "--threshold"), default=5.0,
                   metavar="PCT",
                   help="hide changes smaller than PCT percent (default 5)")
    p.add_argument("--min-time", type=amount_type(parse_duration, "--min-time", zero_ok=True),
                   default=0.001, metavar="SECONDS",
                   help="hide time changes smaller than SECONDS (default 0.001)")
    p.add_argument("--min-bytes", type=amount_type(parse_size, "--min-bytes", zero_ok=True),
                   metavar="BYTES",
                   help="hide byte changes smaller than BYTES (default 1024; the --memory "
                        "gate's floor, default 64k)")
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
    if opts.threshold < 0 or opts.min_time < 0 or (opts.min_bytes or 0) < 0 or opts.min_count < 0:
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
    from ..model.session import Session
    before, after = Session.load(opts.before), Session.load(opts.after)
    result = diff.diff(before, after, by=opts.by, columns=opts.select,
                       threshold=opts.threshold, min_time=opts.min_time,
                       min_bytes=1024 if opts.min_bytes is None else opts.min_bytes,
                       min_count=opts.min_count, limit=opts.limit,
                       names=(opts.before, opts.after))
    verdict = None
    if opts.fail_above is not None:
        from ..analysis import gates
        from ..render import gatetext
        verdict = gates.gate(before, after, opts.fail_above, memory=opts.memory,
                             min_time=opts.min_time,
                             min_bytes=gates.MEMORY_FLOOR if opts.min_bytes is None
                             else opts.min_bytes,
                             names=(opts.before, opts.after))
    if verdict is not None and fmt == "json":
        import json
        data = diff.to_json(result)
        data["gate"] = gates.verdict_json(verdict)
        text = json.dumps(data, indent=1) + "\n"
    else:
        text = difftable.render(result, fmt)
    flame = None
    if opts.flamegraph:                 # everything is computed before anything is written
        from ..export import diffflame
        flame = diffflame.render(before, after, names=(opts.before, opts.after))
    from ..base.files import atomic_write
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
    return amount_type(parse_percent, "--fail-above")(text)


def cmd_check(argv) -> int:
    p = arg_parser(prog="pyprof check",
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
    from ..analysis import gates
    from ..render import gatetext
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
    from ..model.session import Session
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
