"""The pieces the commands share: the argument parser, --version, the view options
(docs/views.md) that `view`, `stats` and the notebook magic take."""
import sys

from .. import _cprof
from .._version import __version__
from ..errors import PyprofError
from ..base.amounts import parse_duration, parse_size

EXIT_USAGE = 2


def arg_parser(**kw):
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


def add_view_options(p) -> None:
    """The options of the tfprof-style views (docs/views.md): the same names
    on the command line, in the API (views.Options) and in the notebook magic."""
    from ..analysis.views import COLUMNS, VIEWS
    g = p.add_argument_group("views (docs/views.md)")
    g.add_argument("--view", choices=VIEWS, metavar="NAME",
                   help="code (call tree by path), op (per function), scope (package > "
                        "module > class > function), graph (callers and callees), lines, "
                        "memory, tasks, opcodes (instructions), specialization (hot lines' "
                        "generic instructions)")
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
    from ..analysis.views import Options
    return Options(
        select=tuple(c.strip() for arg in opts.select for c in arg.split(",") if c.strip()),
        order_by=opts.order_by, min_time=opts.min_time, min_calls=opts.min_calls,
        min_bytes=opts.min_bytes, min_samples=opts.min_samples, max_depth=opts.max_depth,
        start=tuple(opts.start), trim=tuple(opts.trim), show=tuple(opts.show),
        hide=tuple(opts.hide), account_displayed_only=opts.account_displayed_only,
        thread=tuple(opts.thread), process=tuple(opts.process), step=opts.step,
        limit=opts.limit)


def amount_type(parse, flag, **kw):
    """argparse's `type` for an amount of base/amounts.py's grammar: its one
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
    return amount_type(parse_duration, "--min-time", zero_ok=True)(text)


def _bytes_arg(text) -> int:
    return amount_type(parse_size, "--min-bytes", zero_ok=True)(text)


def view_filters_given(opts) -> bool:
    return bool(opts.select or opts.order_by or opts.min_time or opts.min_calls
                or opts.min_bytes or opts.min_samples or opts.max_depth or opts.start
                or opts.trim or opts.show or opts.hide or opts.account_displayed_only
                or opts.thread or opts.process or opts.step or opts.limit)

def require_terminal(what):
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise PyprofError(f"{what} is a live view: it needs a terminal")
