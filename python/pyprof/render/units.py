"""Units: the one time formatter and the one byte formatter every table, report
and message uses. Each caller keeps its look (digits, spacing) through the
arguments; the choice of unit is made here only."""
from __future__ import annotations

# (name, seconds), largest first
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
# (name, bytes), largest first
BYTE_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def format_time(seconds: float, digits=(3, 3, 2, 0), sep: str = "", grouping: bool = False,
                signed: bool = False, zero: str | None = "0", per_second: int = 1) -> str:
    """`seconds` in the largest of s, ms, us, ns in which it reads at least 1.
    ``digits``: decimals per unit, from s down; the units it lists are the
    ones used (the last takes what is smaller); a ``(d, below_10)`` pair uses
    more decimals for values under 10 of the unit; ``"g"``: the shortest form.
    ``sep`` goes between number and unit, ``grouping`` adds thousands commas,
    ``signed`` a "+" before positive values; ``zero`` is what 0 shows (None:
    formatted as any value). ``per_second``: `seconds` is in 1/per_second
    seconds (10**9: integer nanoseconds, scaled without float error)."""
    if seconds == 0 and zero is not None:
        return zero
    a = abs(seconds)
    units = TIME_UNITS[:len(digits)]
    for (name, size), d in zip(units, digits):
        scale = size if per_second == 1 else round(size * per_second) or size * per_second
        if a >= scale or name == units[-1][0]:
            break
    # as the tables always did: seconds * 1000 (not / 1e-3, which rounds differently)
    value = seconds * round(1 / size) if per_second == 1 else seconds / scale
    if isinstance(d, tuple):
        d = d[1] if abs(value) < 10 else d[0]
    text = f"{value:g}" if d == "g" else f"{value:{',' if grouping else ''}.{d}f}"
    return ("+" if signed and seconds > 0 else "") + text + sep + name


def format_ns(ns: int) -> str:
    """'10us', '1.5ms'... for messages."""
    return format_time(ns, digits=("g", "g", "g", "g"), zero=None, per_second=10**9)


def byte_unit(largest: float, top: str = "GiB"):
    """(name, size) of the largest unit up to `top` in which `largest` bytes
    reads at least 1 (B for less)."""
    units = BYTE_UNITS[[n for n, _ in BYTE_UNITS].index(top):]
    for name, size in units:
        if abs(largest) >= size:
            return name, size
    return "B", 1


def format_bytes(b: float, sep: str = "", grouping: bool = False, signed: bool = False,
                 top: str = "GiB", digits: int = 1) -> str:
    """`b` bytes in the largest unit up to `top` in which it reads at least 1:
    whole bytes, else ``digits`` decimals. ``sep``, ``grouping`` and
    ``signed`` as for format_time."""
    name, size = byte_unit(b, top)
    g = "," if grouping else ""
    text = f"{b:{g}.0f}" if size == 1 else f"{b / size:{g}.{digits}f}"
    return ("+" if signed and b > 0 else "") + text + sep + name
