"""RunOptions: the values of one profiled run, built from the parsed command
line (``from_args``) or Profile's keywords (``from_profile``), checked once
(checks.py), read as Profile's keywords (``profile_kwargs``, also a child's
configuration) and the C core's arguments (``core_arguments``). Never parses
a command line (argv.py) nor reads the configuration (config.py).
"""
from ..errors import OptionError
from .table import CORE, DEFAULT_MAX_EVENTS, FIELDS, FROM_ARGS, PROFILE_KEYS, RUN_MODES


def set_mode(opts, mode):
    """The flag that selects `mode` on opts (function tracing: none)."""
    if mode in RUN_MODES[1:]:
        setattr(opts, mode, True)

class RunOptions:
    """The options of one profiled run, in one place (see the module's doc).

    ``check()`` validates them once and settles what they imply (``mode``;
    ``memory`` with ``memory_sample`` or ``memory_stacks``; durations and byte
    counts as numbers); the other methods read the result."""

    __slots__ = (*FIELDS, "cli", "checked")

    def __init__(self, cli=False, **values):
        for name, default in FIELDS.items():
            setattr(self, name, default)
        self.cli = cli              # messages spell options as the command line does
        self.checked = False
        for name, value in values.items():
            setattr(self, name, value)

    # -------------------------------------------------------- building
    @classmethod
    def from_args(cls, ns) -> "RunOptions":
        """From a namespace (or its dict) of ``run_parser()``; other
        destinations, such as %%cprof's view options, are left to their owner."""
        opts = cls(cli=True)
        for dest, value in (ns if isinstance(ns, dict) else vars(ns)).items():
            if dest in FROM_ARGS:
                dest, convert = FROM_ARGS[dest]
                value = convert(value) if convert else value
            if dest in FIELDS:
                setattr(opts, dest, value)
        if opts.chosen_mode:
            opts._take_chosen_mode()
        return opts

    def _take_chosen_mode(self):
        """--mode MODE: the flag it stands for, set before the configuration
        is applied (config.py: a mode named on the command line wins)."""
        mode = self.chosen_mode
        others = [f for f, on in (
            ("--sample", self.sample), ("--memory", self.memory),
            ("--memory-sample", self.memory_sample is not None),
            ("--memory-stacks", self.memory_stacks), ("--native-allocs", self.native_allocs),
            ("--temporary", self.temporary is not None), ("line tracing", self.line_mode))
            if on]
        if mode == "function" and others:
            raise OptionError(f"--mode function and {', '.join(others)} do not combine "
                              f"(--mode function traces calls; with --memory: --memory "
                              f"--functions)")
        set_mode(self, mode)

    @classmethod
    def from_profile(cls, **kw) -> "RunOptions":
        """From Profile's keywords (docs/api.md)."""
        opts = cls()
        for name in PROFILE_KEYS:
            if name in kw:
                setattr(opts, name, kw[name])
        opts.rate = float(opts.rate) if opts.rate else None
        opts.sample = opts.mode == "sample"
        if "children" in kw:
            opts.children = kw["children"]
        if "flush_interval" in kw:
            opts.flush_interval = kw["flush_interval"]
        return opts

    def copy(self, **changes) -> "RunOptions":
        new = RunOptions.__new__(RunOptions)
        for name in self.__slots__:
            setattr(new, name, getattr(self, name))
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def __eq__(self, other):
        return isinstance(other, RunOptions) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __repr__(self):
        given = ", ".join(f"{n}={getattr(self, n)!r}" for n, d in FIELDS.items()
                          if getattr(self, n) != d)
        return f"RunOptions({given})"

    # -------------------------------------------------------- reading
    @property
    def line_mode(self) -> bool:
        return bool(self.lines or self.lines_of or self.lines_all or self.include)

    def profile_kwargs(self, program_dir=None) -> dict:
        """Profile's keywords (plain data: also a child's configuration).
        ``program_dir``: what a command line's --lines-all means."""
        kw = {name: getattr(self, name) for name in PROFILE_KEYS}
        kw["lines"] = self.line_mode
        kw["lines_of"] = list(self.lines_of)
        kw["include"] = list(self.include)
        kw["exclude"] = list(self.exclude)
        kw["lines_all"] = program_dir if self.lines_all is True else self.lines_all or None
        kw["memory_sample"] = self.memory_sample or 0
        if self.timeline_min_duration is None:
            kw["timeline_min_duration"] = 0
        if self.timeline_max_events is None:
            kw["timeline_max_events"] = DEFAULT_MAX_EVENTS
        return kw

    def core_arguments(self) -> dict:
        """The C core's keywords, every one given (module.c holds no default:
        the table's ``core`` of each option computes it)."""
        kw = self.profile_kwargs()
        return {name: core(kw) for name, core in CORE.items()}

    def name(self, field) -> str:
        """How the caller spells an option: --rate or rate."""
        if not self.cli:
            return field
        return {"timeline_min_duration": "--min-duration", "lines": "-l",
                "outfile": "-o", "asyncio": "--async"}.get(field, "--" + field.replace("_", "-"))

    def check(self) -> "RunOptions":
        """Refuse what does not combine, before anything runs (checks.py);
        settle what the options imply. Returns self."""
        from .checks import check
        return check(self)
