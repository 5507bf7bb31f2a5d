"""IPython/Jupyter magics (docs/notebook.md): ``%load_ext pyprof``, then

    %%cprof [options]          profile the cell
    %cprof [options] stmt      profile one statement

Options are the command line's (``-l``, ``--lines-of``, ``--sample``,
``--memory``, ``--timeline``, ``-o FILE``, ``--view``, ``--select``, ...), plus
``-r`` to return the result. The cell runs as a cell normally does (outputs,
its last value, top-level ``await``, its traceback when it raises); only the
cell's own code is recorded, not IPython's. The result is shown as rich HTML in
a notebook and as text in terminal IPython, and kept in ``_cprof``.
"""
from __future__ import annotations

import asyncio
import io
import os
import re
import shlex
import sys
import threading

from ..errors import PyprofError

USAGE = "%%cprof [options] (cell) | %cprof [options] statement   (options: %cprof --help)"
# Run options that make no sense for a cell.
_NOT_FOR_CELLS = ("module", "code", "signal", "dump_every", "version", "strict")


def _parser():
    from ..cli import args
    from ..options import run_parser
    p = run_parser(prog="%%cprof")
    p.usage = USAGE
    p.description = ("Profile a notebook cell (%%cprof) or one statement (%cprof) with "
                     "pyprof; the options are the command line's (docs/cli.md).")
    args.add_view_options(p)
    p.add_argument("-r", "--return", dest="return_result", action="store_true",
                   help="return the result (a CprofResult) as the magic's value")
    return p


def parse(line: str, cell: str | None):
    """(options, code to run): the parsed arguments, with the run options
    checked in ``options.run`` (a RunOptions). Raises PyprofError with the reason."""
    from ..options import RunOptions, split_argv
    parser = _parser()
    if cell is None:                            # %cprof [options] statement
        tokens = [m for m in re.finditer(r"\S+", line)]
        mine, _ = split_argv(parser, [m.group() for m in tokens])
        code = line[tokens[len(mine)].start():] if len(mine) < len(tokens) else ""
        args = mine
    else:
        try:
            args = shlex.split(line)
        except ValueError as e:
            raise PyprofError(f"cannot read the options: {e}") from None
        code = cell
    try:
        opts = parser.parse_args(args)
    except SystemExit:                          # --help printed its text
        return None, None
    given = [o for o in _NOT_FOR_CELLS if getattr(opts, o, None)]
    if given:
        raise PyprofError(f"--{given[0].replace('_', '-')} is not for %%cprof")
    opts.run = RunOptions.from_args(opts).check()
    return opts, code


class CprofResult:
    """What %%cprof recorded: ``session`` (a pyprof.Session), ``profile`` (the
    pyprof.Profile), ``text`` (the tables as printed), ``error`` (the
    exception the cell raised, or None). Shown as HTML in a notebook."""

    def __init__(self, profile, session, opts, error):
        self.profile = profile
        self.session = session
        self.opts = opts
        self.error = error
        self._text = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = _tables(self.session, self.profile, self.opts)
        return self._text

    def _repr_pretty_(self, p, cycle):
        p.text(self.text)

    def __repr__(self):
        return self.text

    def _repr_html_(self) -> str:
        from .notebook import html
        return html(self)


def _tables(session, prof, opts) -> str:
    from ..cli import args, run
    from ..render import viewtable
    if opts.view or args.view_filters_given(opts) or opts.view_format != "table":
        return viewtable.render(session, opts.view or "code", opts.view_format,
                                args.view_options(opts), color=False)
    buf = io.StringIO()
    run.write_tables(prof, opts.run, buf, session)
    return buf.getvalue()


def _line_targets(shell, patterns):
    """--lines-of NAME where NAME is a function of the notebook: its object;
    the other patterns stay patterns (module:function, file globs)."""
    objects, rest = [], []
    for pattern in patterns:
        obj = None
        if re.fullmatch(r"[A-Za-z_][\w.]*", pattern):
            head, *attrs = pattern.split(".")
            obj = shell.user_ns.get(head)
            for a in attrs:
                obj = getattr(obj, a, None)
        if obj is not None and callable(obj):
            objects.append(obj)
        else:
            rest.append(pattern)
    return objects, rest


def run(shell, opts, code) -> CprofResult:
    from ..runtime.profiler import Profile
    run_opts = opts.run
    functions, patterns = _line_targets(shell, run_opts.lines_of)
    # the notebook's functions are given to the profiler itself
    run_opts = run_opts.copy(lines_of=patterns, lines=run_opts.lines or bool(functions))
    if run_opts.lines_all is True:              # the notebook's directory
        run_opts.lines_all = os.getcwd()
    opts.run = run_opts
    prof = Profile(options=run_opts, _warn=False)
    for fn in functions:
        prof.add_function(fn)
    original = shell.run_code

    # Only the cell's code is recorded: the thread is paused outside it.
    async def run_code(code_obj, result=None, *, async_=False):
        prof.thread_paused = False
        try:
            return await original(code_obj, result, async_=async_)
        finally:
            prof.thread_paused = True

    # Showing the cell's last value is IPython's work, not the cell's.
    shown = sys.displayhook

    def displayhook(value):
        prof.thread_paused = True
        try:
            shown(value)
        finally:
            prof.thread_paused = False

    if prof.sampling:
        prof.set_sample_root(run_code.__code__)
    # The kernel's own threads (I/O, heartbeat, control) are not the cell's.
    kernel_threads = {t.ident for t in threading.enumerate()} - {threading.get_ident()}
    shell.run_code = run_code
    sys.displayhook = displayhook
    prof.enable()
    prof.thread_paused = True
    try:
        outcome = _run_cell(shell, code)
    finally:
        prof.disable()
        sys.displayhook = shown
        del shell.run_code
    error = getattr(outcome, "error_in_exec", None) or getattr(outcome, "error_before_exec",
                                                               None)
    session = prof.session()
    session.drop_threads([i for i, t in session.threads.items() if t.ident in kernel_threads])
    if run_opts.outfile:
        prof.dump(run_opts.outfile)
    return CprofResult(prof, session, opts, error)


def _run_cell(shell, code):
    """The cell, run as IPython runs cells. A cell with top-level await runs
    in its own event loop on another thread when the kernel's loop is busy
    running this magic (the loop cannot be entered again from inside it)."""
    transformed = shell.transform_cell(code)
    if not shell.should_run_async(code, transformed_cell=transformed,
                                  preprocessing_exc_tuple=None):
        return shell.run_cell(code, store_history=False)
    box = {}

    def target():
        box["result"] = asyncio.run(shell.run_cell_async(
            code, store_history=False, transformed_cell=transformed,
            preprocessing_exc_tuple=None))

    t = threading.Thread(target=target, name="%%cprof cell")
    t.start()
    t.join()
    return box.get("result")


def cprof(shell, line, cell=None):
    """The magic: parse, run, show; bad options print the usage, no traceback."""
    try:
        opts, code = parse(line, cell)
    except PyprofError as e:
        print(f"%cprof: {e}\nusage: {USAGE}", file=sys.stderr)
        return None
    if opts is None:
        return None
    if not code.strip():
        print("%%cprof: the cell is empty: nothing to profile" if cell is not None
              else "%cprof: no statement given: nothing to profile", file=sys.stderr)
        return None
    try:
        result = run(shell, opts, code)
    except (PyprofError, ValueError, RuntimeError) as e:    # e.g. another profiler is on
        print(f"%cprof: {e}", file=sys.stderr)
        return None
    shell.user_ns["_cprof"] = result
    if opts.return_result:
        return result
    from IPython.display import display
    display(result)
    return None


def load_ipython_extension(ip):
    def cprof_magic(line, cell=None):
        return cprof(ip, line, cell)
    cprof_magic.__doc__ = __doc__
    ip.register_magic_function(cprof_magic, magic_kind="line_cell", magic_name="cprof")
