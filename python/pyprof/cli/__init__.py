"""pyprof's command line.

    python -m pyprof [run] [-o FILE] [-s SORT] [--mode M | --sample | -l | --lines-of P |
                     --lines-all]
                     [-m module | -c code | script] [args...]
    pyprof convert FILE.cprof -o OUT [-f FORMAT] [--min-duration DURATION]
    pyprof view FILE.cprof [--lines | --functions] [--unit U]
    pyprof view FILE.cprof --view code|op|scope|graph|lines|memory [filters] [--format F]
    pyprof stats FILE.cprof... [--by step|run|rank|process|worker] [--csv OUT]
    pyprof tasks FILE.cprof [--format table|csv|json] [-o OUT]
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
import sys

from ..errors import PyprofError
from .args import EXIT_USAGE

# pyprof's commands (module, function); anything else is a program to run
# (`pyprof script.py`). Each command's module is imported when it runs:
# `python -m pyprof -o x.cprof` loads only what its mode needs (docs/cli.md,
# "Start-up").
COMMANDS = {"convert": ("view", "cmd_convert"), "view": ("view", "cmd_view"),
            "stats": ("view", "cmd_stats"), "tasks": ("view", "cmd_tasks"), "merge": ("compare", "cmd_merge"),
            "diff": ("compare", "cmd_diff"), "check": ("compare", "cmd_check"),
            "attach": ("live", "cmd_attach"), "top": ("live", "cmd_top"),
            "dump": ("live", "cmd_dump"), "config": ("settings", "cmd_config"),
            "run": ("run", "cmd_run")}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    control = sys.modules.get("pyprof.live.control")
    if control is not None:
        control.uninstall()                     # this process's profiling is the CLI's
    try:
        entry = COMMANDS.get(argv[0]) if argv else None
        if entry is None:
            entry = COMMANDS["run"]
        else:
            argv = argv[1:]
        module, function = entry
        command = getattr(__import__(f"{__name__}.{module}", fromlist=[function]), function)
        return command(argv)
    except PyprofError as e:
        print(f"pyprof: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 1
