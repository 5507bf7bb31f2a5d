"""The run options' amounts: the one grammar (pyprof/base/amounts.py, a base module
so that the analysis layer reads it too) and the byte counts of the options
(in (0, 2**40]). Never holds a unit of its own.
"""
from __future__ import annotations

from ..base.amounts import (DURATION_FORMS, PERCENT_FORMS, SIZE_FORMS, parse_count,  # noqa: F401
                       parse_duration, parse_percent, parse_size)
from .checks import byte_count  # noqa: F401
