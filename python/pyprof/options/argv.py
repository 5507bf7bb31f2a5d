"""The run options' command line: argparse's parser built from the table
(``run_parser``, ``add_options``), the split of a command line into pyprof's
options and the program's (``split_argv``), a plain command line read without
importing argparse (start-up), the fields a command line gives
(``given_fields``). Never checks a value (checks.py).
"""
from ..errors import OptionError
from .run import RunOptions
from .table import FROM_ARGS, NOT_ARGPARSE, OPTIONS


# ------------------------------------------------------------------ the parser
def _dest(flags, kw) -> str:
    """argparse's destination of an option."""
    if "dest" in kw:
        return kw["dest"]
    flag = next((f for f in flags if f.startswith("--")), flags[0])
    return flag.lstrip("-").replace("-", "_")


def run_parser(prog="pyprof"):
    """The run options' argparse parser, built from OPTIONS (the command
    line's; %%cprof adds its own options to it)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        """argparse that reports a usage error as one line and exit status 2."""

        def error(self, message):
            raise OptionError(f"{message} (see '{self.prog} --help')")

    class Formatter(argparse.HelpFormatter):
        """argparse's, with the width shutil.get_terminal_size() would give:
        argparse makes one per add_argument, and shutil costs ~3 ms to import."""

        def __init__(self, prog, *args, width=None, **kw):
            if width is None and not args:
                width = _columns() - 2          # as HelpFormatter does
            super().__init__(prog, *args, width=width, **kw)

    p = Parser(
        prog=prog, formatter_class=Formatter,
        usage="python -m pyprof [-o FILE] [-s SORT] [-m module | -c code | script] [args...]",
        description="Profile a Python program (a drop-in for python -m cProfile). "
                    "Other commands: 'pyprof convert FILE.cprof -o OUT', "
                    "'pyprof view FILE.cprof [--view code|op|scope|graph|lines|memory]', "
                    "'pyprof stats FILE...', 'pyprof merge A B -o ALL', "
                    "'pyprof diff BEFORE AFTER' (each with --help).")
    groups = {None: p}
    for group, flags, kw in OPTIONS:
        if group not in groups:
            groups[group] = p.add_argument_group(group)
        where = groups[group]
        if "exclusive" in kw:
            key = (group, kw["exclusive"])
            if key not in groups:
                groups[key] = where.add_mutually_exclusive_group()
            where = groups[key]
        action = where.add_argument(*flags, **{k: v for k, v in kw.items() if k not in NOT_ARGPARSE})
        if "value_looks_like" in kw:
            action.value_looks_like = kw["value_looks_like"]
    return p


def add_options(parser, names) -> None:
    """The OPTIONS entries whose long spelling is in `names`, added to another
    command's parser (``pyprof attach``, ``pyprof top``): the same flags, help
    and values as a run's."""
    groups = {None: parser}
    for group, flags, kw in OPTIONS:
        if max(flags, key=len) not in names:
            continue
        if group not in groups:
            groups[group] = parser.add_argument_group(group)
        groups[group].add_argument(*flags, **{k: v for k, v in kw.items() if k not in NOT_ARGPARSE})


def _columns() -> int:
    """shutil.get_terminal_size().columns, without shutil."""
    import os
    import sys
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Option:
    """What the split and the plain reader need of an option (OPTIONS' entry or
    an argparse action): its value arity, and for the reader, how to store it."""
    __slots__ = ("dest", "nargs", "kw")

    def __init__(self, dest, nargs, kw):
        self.dest, self.nargs, self.kw = dest, nargs, kw

    def takes_value(self):
        """True: the next argument is the option's value; False: a flag; None:
        an optional value (nargs='?')."""
        return False if self.nargs == 0 else None if self.nargs == "?" else True


_OPTIONS_TABLE = {}                     # OPTIONS' table, made once (a run reads it 4 times)


def _table(parser=None):
    """{option string: _Option}: from an argparse parser's actions (with the
    options %%cprof adds), else from OPTIONS (not to be changed: shared)."""
    if parser is None and _OPTIONS_TABLE:
        return _OPTIONS_TABLE
    table = {} if parser is not None else _OPTIONS_TABLE
    if parser is not None:
        for action in parser._actions:      # argparse's list of actions (stable since 2.7)
            opt = _Option(action.dest, action.nargs, {
                "value_looks_like": getattr(action, "value_looks_like", None)})
            for flag in action.option_strings:
                table[flag] = opt
        return table
    for _, flags, kw in OPTIONS:
        action = kw.get("action")
        opt = _Option(_dest(flags, kw), 0 if action == "store_true" else kw.get("nargs"), kw)
        for flag in flags:
            table[flag] = opt
    return table


def split_argv(parser, argv):
    """(the options, the target and its arguments): the options end at the
    first argument that is neither an option nor an option's value, or at
    "--". Which options take a value is the parser's (None: OPTIONS')."""
    table = _table(parser)
    longs = [f for f in table if f.startswith("--")]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1:]
        if not a.startswith("-") or a == "-":
            break
        i += 1
        if a.startswith("--"):
            if "=" in a:                # --rate=100: the value is in the token
                continue
            opt = table.get(a)
            if opt is None:             # argparse's unique prefixes: --rat 100
                found = {id(table[f]): table[f] for f in longs if f.startswith(a)}
                opt = next(iter(found.values())) if len(found) == 1 else None
        else:
            # -o FILE, -oFILE, and flags run together: -lo FILE
            opt = None
            for k in range(1, len(a)):
                o = table.get("-" + a[k])
                if o is None or o.takes_value() is not False:
                    opt = o if k == len(a) - 1 else None
                    break
        if opt is None:
            continue
        takes = opt.takes_value()
        looks_like = opt.kw.get("value_looks_like")
        if takes is True or (takes is None and i < len(argv) and looks_like is not None
                             and looks_like(argv[i])):
            i += 1                      # an optional value only when it looks like one
    return argv[:i], argv[i:]


def _read_plain(argv):
    """argparse's namespace (as a dict) for a plain command line, read with
    OPTIONS alone; None for anything else (argparse then reads it, with its
    messages): --help, unknown options, prefixes, flags run together, values
    that start with '-' or do not convert, -oFILE."""
    table = _table()
    values = {}
    for _, flags, kw in OPTIONS:
        default = kw.get("default", False if kw.get("action") == "store_true" else None)
        values[_dest(flags, kw)] = list(default) if isinstance(default, list) else default
    given = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        flag, value = a.split("=", 1) if a.startswith("--") and "=" in a else (a, None)
        opt = table.get(flag)
        if opt is None:
            return None
        kw = opt.kw
        if "exclusive" in kw:
            if kw["exclusive"] in given:
                return None
            given.add(kw["exclusive"])
        if opt.nargs == 0:
            if value is not None:
                return None
            values[opt.dest] = True
            continue
        if value is None:
            if opt.nargs == "?":
                nxt = argv[i] if i < len(argv) else None
                if nxt is not None and not nxt.startswith("-") and kw["value_looks_like"](nxt):
                    value, i = nxt, i + 1
                else:
                    value = kw["const"]
            elif i < len(argv) and not argv[i].startswith("-"):
                value, i = argv[i], i + 1
            else:
                return None
        try:
            value = kw.get("type", str)(value)
        except ValueError:
            return None
        if "choices" in kw and value not in kw["choices"]:
            return None
        if kw.get("action") == "append":
            values[opt.dest].append(value)
        else:
            values[opt.dest] = value
    return values


def given_fields(argv, parser=None) -> set:
    """The RunOptions fields the options in `argv` (the options part of a
    command line, split_argv's first half) set: what configuration must not
    override (config.py). ``--cpu`` counts as giving ``wall``."""
    table = _table(parser)
    longs = [f for f in table if f.startswith("--")]
    found = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--" or not a.startswith("-") or a == "-":
            continue
        opts = []
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            opt = table.get(flag)
            if opt is None:
                cands = {id(table[f]): table[f] for f in longs if f.startswith(flag)}
                opt = next(iter(cands.values())) if len(cands) == 1 else None
            opts = [opt] if opt is not None else []
            if opt is not None and "=" not in a and opt.takes_value() is True:
                i += 1
        else:
            for k in range(1, len(a)):
                o = table.get("-" + a[k])
                if o is None:
                    break
                opts.append(o)
                if o.takes_value() is not False:
                    if k == len(a) - 1 and o.takes_value() is True:
                        i += 1
                    break
        for o in opts:
            dest = o.dest
            if dest in FROM_ARGS:
                dest = FROM_ARGS[dest][0]
            found.add("wall" if dest == "cpu" else dest)
    return found


def parse_run_args(argv, parser=None):
    """(RunOptions, the target and its arguments) from a command line."""
    mine, rest = split_argv(parser, argv)
    values = _read_plain(mine) if parser is None else None
    if values is None:
        parser = parser or run_parser()
        values = vars(parser.parse_args(mine))
    return RunOptions.from_args(values), rest
