"""Configuration: ``[tool.pyprof]`` in the nearest pyproject.toml and the
``PYPROF_*`` environment variables, under the command line (docs/cli.md,
"Configuration").

Precedence, for every setting: the command line (or a keyword given to the
pytest plugin or the middleware) > the environment > pyproject.toml > the
default. ``SETTINGS`` is the one table: each setting's section ("" for the
run options, "pytest", "web"), key, kind, environment variable and the mode
it belongs to. A run option's default from the environment or pyproject.toml
applies only to the mode it belongs to (a sampling rate when the run samples,
line targets when it traces lines): the command line's choice of mode is never
overridden by a default, and a default never turns an option error on.

An unknown key or a bad value is one ConfigError naming the file (or
variable) and the key. Built-in modules only at import; tomllib is imported
only when a pyproject.toml has a ``[tool.pyprof`` table.
"""
import os

from ..errors import PyprofError
from .run import RunOptions, set_mode
from .table import MAX_RATE, MIN_RATE, RUN_MODES, TABLE

MODES = RUN_MODES


class ConfigError(PyprofError):
    """A bad [tool.pyprof] key or value, or a bad PYPROF_* variable."""


class Setting:
    __slots__ = ("section", "key", "kind", "field", "group", "help", "choices")

    def __init__(self, section, key, kind, help, field=None, group=None, choices=None):
        # a run option's: table.py's declaration
        self.section, self.key, self.kind, self.help = section, key, kind, help
        self.field = field or key           # RunOptions' field (run options)
        self.group = group                  # the mode a run option belongs to
        self.choices = choices

    @property
    def env(self) -> str:
        return ("PYPROF_" + (self.section + "_" if self.section else "") + self.key).upper()

    @property
    def old_env(self):
        """The spelling of releases that left the section in lower case
        (PYPROF_web_DIR), still read; None where it is the same."""
        if not self.section:
            return None
        return "PYPROF_" + self.section + "_" + self.key.upper()

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}" if self.section else self.key


_S = Setting
# The order `pyprof config` and the unknown-key message list the run keys in
# (not --help's): the mode first, then by the mode they go with.
_RUN_KEYS_SHOWN = ("mode", "output", "sort", "rate", "cpu_timer", "wall", "native", "signal", "asyncio",
                   "dump_every", "memory_sample", "memory_stacks", "functions", "lines_of",
                   "lines_all", "include", "exclude", "strict", "unit", "call_rows", "opcodes",
                   "timeline",
                   "min_duration", "timeline_max_events", "builtins", "exact_builtins",
                   "flush_interval", "children", "objects")
SETTINGS = (
    # the run options (python -m pyprof, and the defaults of the plugin and
    # middleware): their [tool.pyprof] keys are declared in the option table
    *sorted((_S("", **{"key": o.field, "field": o.field, **o.setting})
             for o in TABLE if o.setting), key=lambda s: _RUN_KEYS_SHOWN.index(s.key)),
    # the pytest plugin (docs/pytest.md)
    _S("pytest", "mode", "choice", "mode of --pyprof without a value", choices=MODES),
    _S("pytest", "dir", "path", "where the captures go (--pyprof-dir)"),
    _S("pytest", "scope", "choice", "one capture per test or per session (--pyprof-scope)",
       choices=("test", "session")),
    _S("pytest", "top", "count", "tests listed in the summary (--pyprof-top)"),
    _S("pytest", "html", "bool", "an HTML report next to each capture (--pyprof-html)"),
    # the web middleware (docs/web.md)
    _S("web", "dir", "path", "where each request's capture goes"),
    _S("web", "mode", "choice", "how requests are profiled", choices=MODES),
    _S("web", "param", "str", "query parameter that asks for a profile (off unless set)"),
    _S("web", "header", "str", "request header that asks for a profile (off unless set)"),
    _S("web", "every", "count", "profile one request in N (0: off)"),
    _S("web", "slower_than", "seconds", "keep the captures of requests slower than this"),
    _S("web", "index", "str", "path of the index of captures (off unless set)"),
    _S("web", "html", "bool", "an HTML report next to each capture"),
)
SECTIONS = ("", "pytest", "web")
DEFAULTS = {("pytest", "mode"): "function", ("pytest", "dir"): ".pyprof",
            ("pytest", "scope"): "test", ("pytest", "top"): 5, ("pytest", "html"): False,
            ("web", "dir"): None, ("web", "mode"): "sample", ("web", "param"): None,
            ("web", "header"): None, ("web", "every"): 0, ("web", "slower_than"): None,
            ("web", "index"): None, ("web", "html"): True,
            ("", "mode"): "function"}
_BY_NAME = {(s.section, s.key): s for s in SETTINGS}
# Run options that choose the mode on the command line: given, they make the
# mode the command line's.
MODE_FIELDS = ("sample", "memory", "memory_sample", "memory_stacks", "functions", "lines",
               "lines_of", "lines_all", "include", "chosen_mode")


# ------------------------------------------------------------------ the file
def find_pyproject(start=None):
    """The nearest pyproject.toml at or above `start` (default: the current
    directory), or None. $PYPROF_CONFIG names one instead ('' or 'none': none)."""
    given = os.environ.get("PYPROF_CONFIG")
    if given is not None:
        return None if given.strip().lower() in ("", "none") else os.path.abspath(given)
    try:
        here = os.path.abspath(start or os.getcwd())
    except OSError:                     # the current directory was removed
        return None
    while True:
        path = os.path.join(here, "pyproject.toml")
        if os.path.isfile(path):
            return path
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def read_pyproject(path) -> dict:
    """{section: {key: value}} of [tool.pyprof] in `path` ({} without it)."""
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    if b"[tool.pyprof" not in data and b"tool.pyprof" not in data:
        return {}                       # the common case: no parsing at all
    import tomllib
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    table = doc.get("tool", {}).get("pyprof")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.pyprof] must be a table")
    out = {"": {}}
    for key, value in table.items():
        norm = key.replace("-", "_")
        if norm in ("pytest", "web") and isinstance(value, dict):
            out[norm] = {k.replace("-", "_"): (k, v) for k, v in value.items()}
        else:
            out[""][norm] = (key, value)
    for section, values in out.items():
        for norm, (key, _) in values.items():
            if (section, norm) not in _BY_NAME:
                where = f"[tool.pyprof{'.' + section if section else ''}]"
                known = ", ".join(s.key for s in SETTINGS if s.section == section)
                raise ConfigError(f"{path}: {where} unknown key {key!r} (known: {known})")
    return out


# ------------------------------------------------------------------ values
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def convert(setting: Setting, value, from_env: bool, base_dir=None):
    """A setting's value from TOML (typed) or the environment (a string);
    PyprofError with the reason (the caller names the file and key)."""
    from ..base.amounts import parse_count, parse_duration
    kind = setting.kind
    if kind == "bool":
        if from_env:
            text = value.strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
        elif isinstance(value, bool):
            return value
        raise PyprofError(f"takes true or false, not {value!r}")
    if kind == "list":
        if from_env:
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise PyprofError(f"takes a list of strings, not {value!r}")
    if kind == "choice":
        text = value.strip() if isinstance(value, str) else value
        if text == "trace" and setting.key == "mode":
            text = "function"
        if text not in setting.choices:
            raise PyprofError(f"must be one of {', '.join(setting.choices)}, not {value!r}")
        return text
    if kind == "rate":
        try:
            rate = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            rate = None
        if rate is None or not MIN_RATE <= rate <= MAX_RATE:
            raise PyprofError(f"must be a rate in [{MIN_RATE}, {MAX_RATE}] Hz, not {value!r}")
        return rate
    if kind == "seconds":
        return parse_duration(value, "it", zero_ok=True)
    if kind == "duration":
        from ..base.amounts import duration_ns
        return duration_ns(value, "it")
    if kind == "bytes":
        from .units import byte_count
        return byte_count(value, "it")
    if kind == "count":
        return parse_count(value, "it")
    if kind in ("str", "path"):
        if not isinstance(value, str) or not value.strip():
            raise PyprofError(f"takes a non-empty string, not {value!r}")
        if kind == "path" and base_dir is not None:
            value = os.path.join(base_dir, os.path.expanduser(value))
        return value
    raise AssertionError(kind)


class Config:
    """The environment's and pyproject.toml's settings: (section, key) ->
    (value, origin), read once; ``get`` applies the precedence."""

    def __init__(self, path=None, environ=None, start=None):
        self.path = find_pyproject(start) if path is None else (path or None)
        environ = os.environ if environ is None else environ
        self.values = {}                # (section, key) -> (value, origin)
        base = os.path.dirname(self.path) if self.path else None
        for section, values in read_pyproject(self.path).items():
            where = f"[tool.pyprof{'.' + section if section else ''}]"
            for norm, (key, raw) in values.items():
                setting = _BY_NAME[(section, norm)]
                try:
                    value = convert(setting, raw, False, base)
                except PyprofError as e:
                    raise ConfigError(f"{self.path}: {where} {key}: {_reason(e)}") from None
                self.values[(section, norm)] = (value, self.path)
        for setting in SETTINGS:
            name = setting.env
            raw = environ.get(name)
            if raw is None and setting.old_env:
                name = setting.old_env
                raw = environ.get(name)
            if raw is None:
                continue
            try:
                value = convert(setting, raw, True)
            except PyprofError as e:
                raise ConfigError(f"{name}={raw!r}: {_reason(e)}") from None
            self.values[(setting.section, setting.key)] = (value, name)

    def get(self, section, key, given=None):
        """(value, origin): `given` (not None: the caller's) first, then the
        environment, pyproject.toml, the default."""
        if given is not None:
            return given, "given"
        if (section, key) in self.values:
            return self.values[(section, key)]
        return DEFAULTS.get((section, key)), "default"

    def value(self, section, key, given=None):
        return self.get(section, key, given)[0]


def _reason(e) -> str:
    text = str(e)
    return text[3:] if text.startswith("it ") else text


def load(start=None) -> Config:
    return Config(start=start)


# ------------------------------------------------------------------ run options
def _mode_of(opts) -> str:
    if opts.sample:
        return "sample"
    if opts.line_mode:
        return "lines"
    if opts.memory or opts.memory_sample is not None:
        return "memory"
    return "function"


def _applies(setting, mode, opts) -> bool:
    group = setting.group
    if group is None:
        return True
    if group == "function":
        return mode == "function" or (mode == "memory" and opts.functions)
    if group == "timeline":
        return bool(opts.timeline)
    if group == "memory":
        return bool(opts.memory or opts.memory_sample is not None)
    return group == mode


def apply(opts: RunOptions, given, cfg: Config | None = None) -> dict:
    """Fill the run options the command line did not give (field names in
    `given`) from the environment and pyproject.toml, each where its mode
    applies. Returns {setting name: (value, origin)} for every run setting."""
    cfg = cfg if cfg is not None else load()
    given = set(given)
    origins = {}
    if given & set(MODE_FIELDS):
        origins["mode"] = (_mode_of(opts), "command line")
    else:
        mode, origin = cfg.get("", "mode")
        set_mode(opts, mode)
        origins["mode"] = (mode, origin)
    mode = _mode_of(opts)
    # timeline first: its own keys depend on it
    ordered = sorted((s for s in SETTINGS if s.section == "" and s.key != "mode"),
                     key=lambda s: s.key != "timeline")
    for setting in ordered:
        field = setting.field
        current = getattr(opts, field)
        if field in given or (setting.key == "wall" and "cpu" in given):
            origins[setting.key] = (_shown(setting, current), "command line")
            continue
        value, origin = cfg.get("", setting.key)
        if origin == "default" or not _applies(setting, mode, opts):
            if origin != "default":
                origins[setting.key] = (value, f"{origin} (not used: goes with "
                                               f"{_group_text(setting.group)})")
            else:
                origins[setting.key] = (_shown(setting, current), "default")
            continue
        if setting.key == "call_rows":
            value = not value
        setattr(opts, field, value)
        origins[setting.key] = (_shown(setting, getattr(opts, field)), origin)
    return origins


def _shown(setting, value):
    return (not value) if setting.key == "call_rows" else value


def _group_text(group) -> str:
    return {"sample": "sample mode", "memory": "memory mode", "lines": "line mode",
            "function": "function mode", "timeline": "timeline"}[group]


def section(name, given=None, cfg: Config | None = None) -> dict:
    """{key: (value, origin)} of a plugin section ("pytest", "web"), keywords
    in `given` (None: not given) first."""
    cfg = cfg if cfg is not None else load()
    given = given or {}
    return {s.key: cfg.get(name, s.key, given.get(s.key))
            for s in SETTINGS if s.section == name}


def describe(origins, cfg: Config) -> dict:
    """What ``pyprof config`` prints: sections of (key, value, origin, env)."""
    out = {"pyproject": cfg.path, "run": [], "pytest": [], "web": []}
    for s in SETTINGS:
        if s.section == "":
            value, origin = origins.get(s.key, (None, "default"))
        else:
            value, origin = cfg.get(s.section, s.key)
        out[s.section or "run"].append({"key": s.key, "value": value, "from": origin,
                                        "env": s.env, "help": s.help})
    return out


def run_options(mode, cfg: Config, memory=False, line_dir=None, rate=None, wall=None):
    """The RunOptions of a profile the plugin or the middleware starts: `mode`
    (function, sample, lines or None: memory alone) given, the rest from the
    environment and pyproject.toml where it applies; checked."""
    opts = RunOptions(cli=True)
    # the mode is given; line targets may come from the configuration
    given = set(MODE_FIELDS) - {"lines_of", "include"}
    if mode == "sample":
        opts.sample = True
    elif mode == "lines":
        opts.lines = True
    if memory:
        opts.memory = True
        if mode == "function":
            opts.functions = True
    apply(opts, given, cfg)
    if mode == "lines" and not (opts.lines_of or opts.include) and line_dir:
        opts.lines_all = line_dir                   # the project's own files
    if mode == "sample":
        if rate is not None and ("", "rate") not in cfg.values:
            opts.rate = rate
        if wall is not None and ("", "wall") not in cfg.values:
            opts.wall = wall
    opts.outfile = None                 # the caller names the files
    opts.signal = None
    opts.dump_every = 0.0
    opts.children = False
    return opts.check()
