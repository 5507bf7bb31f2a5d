"""Run options, declared once (docs/cli.md): what a profiled run asks for,
from the command line, [tool.pyprof], the PYPROF_* variables and Profile's
keywords alike.

- table.py: THE declaration of every run option (field, default, Profile's
  keyword, the command line's spelling and help);
- units.py: the amounts (sizes, durations, percentages: pyprof/base/amounts.py);
- argv.py: argparse built from the table, and the split of a command line;
- run.py: RunOptions, the values of one run;
- checks.py: the rules, one message each;
- config.py: [tool.pyprof] and the environment (imported where used).

Adding a run option: its entry in table.py, a rule in checks.py if it has
one. tests/test_options.py checks that every option reaches argparse,
[tool.pyprof], the environment, Profile and the C core.

This package re-exports what other modules import; imported by every
Profile: built-in modules only at import (not config.py).
"""
from .argv import (add_options, given_fields, parse_run_args, run_parser,  # noqa: F401
                   split_argv)
from .checks import byte_count, check_writable, signal_number, usable_signal  # noqa: F401
from .run import RunOptions, set_mode  # noqa: F401
from .table import (ASYNC_MAX_EVENTS, ASYNC_MIN_DURATION_NS, DEFAULT_MAX_EVENTS,  # noqa: F401
                    KEYWORDS, MAX_MEMORY_SAMPLE, MAX_RATE, MODES, OPTIONS, PROFILE_KEYS,
                    RUN_MODES, SORT_KEYS, TABLE, default_rate)
