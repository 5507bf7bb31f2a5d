"""pyprof.config, the documented path (docs/api.md) of pyprof.options.config:
[tool.pyprof] and the PYPROF_* variables. The package never imports this
module; it imports pyprof.options.config."""
from .options.config import *  # noqa: F401,F403
from .options.config import (DEFAULTS, MODE_FIELDS, MODES, SECTIONS, SETTINGS,  # noqa: F401
                             Config, ConfigError, Setting, apply, convert, describe,
                             find_pyproject, load, read_pyproject, run_options, section)
