"""`pyprof convert`, `view`, `stats` and `tasks`: one capture (or a set of them) shown or
written in another format."""
from __future__ import annotations

import sys

from ..errors import PyprofError
from ..export import ALIASES, FORMATS, export, format_for_path
from ..options import SORT_KEYS, check_writable
from .args import add_view_options, arg_parser, view_filters_given, view_options


def cmd_convert(argv) -> int:
    p = arg_parser(prog="pyprof convert",
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
    from ..model.session import Session
    fmt = ALIASES.get(opts.format, opts.format) or format_for_path(opts.output)
    min_ns = 0
    if opts.min_duration is not None:
        if fmt != "chrome":
            raise PyprofError("--min-duration goes with --format chrome")
        from ..base.amounts import duration_ns
        min_ns = duration_ns(opts.min_duration, "--min-duration")
    session = Session.load(opts.input)
    check_writable(opts.output)
    if fmt == "chrome":
        from ..export import chrome
        chrome.write(session, opts.output, min_ns, report=sys.stderr)
        return 0
    export(session, fmt, opts.output)
    return 0


def cmd_view(argv) -> int:
    p = arg_parser(prog="pyprof view", description="Show a .cprof capture file: its tables, "
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
    p.add_argument("--columns", action="store_true",
                   help="line tables with a row per expression of a line: its columns, source "
                        "and instructions' figures (--opcodes captures; docs/opcodes.md)")
    opts = p.parse_args(argv)
    if opts.sort not in SORT_KEYS:
        raise PyprofError(f"unknown sort key '{opts.sort}' (choose from {', '.join(SORT_KEYS)})")
    from ..model.session import Session
    from ..analysis import views
    from ..render import viewtable
    vopts = view_options(opts)
    views.check_options(vopts)
    if opts.output:
        check_writable(opts.output)
    session = Session.load(opts.input)
    if opts.view or opts.view_format != "table" or view_filters_given(opts):
        text = viewtable.render(session, opts.view or "code", opts.view_format, vopts,
                            color=None if not opts.output else False)
        if opts.output:
            from ..base.files import atomic_write
            atomic_write(opts.output, text)
        else:
            sys.stdout.write(text)
        return 0
    if opts.output:
        raise PyprofError("-o goes with --view (or --format)")
    if opts.memory and not session.info.get("memory"):
        raise PyprofError(f"{opts.input} has no memory data (profile with --memory)")
    if opts.columns:
        from ..analysis.opcodes import require
        require(session)
    from ..render.printout import print_capture
    only = ("memory" if opts.memory else "lines" if opts.lines else
            "functions" if opts.functions else None)
    print_capture(session, sys.stdout, sort=opts.sort, unit=opts.unit,
                  call_rows=not opts.no_call_rows, only=only, columns=opts.columns)
    return 0


def cmd_stats(argv) -> int:
    p = arg_parser(prog="pyprof stats",
                   description="Per function (and line): the mean and coefficient of variation "
                               "(with std, min, max) of columns over the steps of the captures "
                               "(pyprof.step()), over the captures as repeated runs, over the "
                               "ranks of an MPI run, over the processes of a --children run, or "
                               "over the workers of a Dask or Ray job.")
    p.add_argument("inputs", nargs="+", metavar="FILE", help=".cprof capture files")
    p.add_argument("--by", choices=["step", "run", "rank", "process", "worker"],
                   default="step",
                   help="statistics over steps (default), over the files as runs, over "
                        "the ranks of an MPI run (docs/mpi.md), over the processes of "
                        "merged captures (docs/children.md), or over the workers of a Dask "
                        "or Ray job (docs/clusters.md)")
    p.add_argument("--select", action="append", default=[], metavar="COLUMNS",
                   help="columns, comma-separated (default: calls,time,self-time, or "
                        "samples,... for sampled captures, plus bytes,net-bytes with memory)")
    p.add_argument("--csv", metavar="OUT", help="write the statistics as CSV to OUT ('-': stdout)")
    p.add_argument("--no-lines", action="store_true", help="functions only")
    opts = p.parse_args(argv)
    if opts.csv and opts.csv != "-":
        check_writable(opts.csv)
    select = [c.strip() for arg in opts.select for c in arg.split(",") if c.strip()]
    from ..render import statstable
    return statstable.run(opts.inputs, opts.by, select or None, opts.csv, not opts.no_lines)


def cmd_tasks(argv) -> int:
    p = arg_parser(prog="pyprof tasks",
                   description="The tasks of a Dask or Ray job (a capture of "
                               "pyprof.dask.profile or pyprof.ray.profile) by "
                               "task group: count, wall time (total, mean, coefficient of "
                               "variation, min, max) and thread CPU time, in seconds.")
    p.add_argument("input", help="a .cprof capture of pyprof.dask.profile or pyprof.ray.profile")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output format (default: table)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    opts = p.parse_args(argv)
    if opts.output:
        check_writable(opts.output)
    from ..analysis import taskgroups
    from ..render import tasktable
    from ..model.session import Session
    session = Session.load(opts.input)
    text = tasktable.render(taskgroups.rows(taskgroups.task_figures(session, opts.input)),
                             opts.format)
    if opts.output:
        from ..base.files import atomic_write
        atomic_write(opts.output, text)
    else:
        sys.stdout.write(text)
    return 0
