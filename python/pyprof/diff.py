"""The public path `pyprof.diff` (docs/merge-diff.md): the comparison
(analysis/diff.py) and its text (render/difftable.py)."""
from .analysis.diff import BY, COLUMNS, Diff, csv_header, diff, to_csv, to_json  # noqa: F401
from .render.difftable import render, write_table  # noqa: F401
