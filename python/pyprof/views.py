"""The public path `pyprof.views` (docs/api.md, docs/views.md): views as plain
data (analysis/views.py) and as text (render/viewtable.py)."""
from .analysis.views import (COLUMNS, TREE_VIEWS, VIEWS, Node, Options,  # noqa: F401
                             check_options, view)
from .render.viewtable import render  # noqa: F401
