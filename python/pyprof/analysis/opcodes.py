"""Inside the line (--opcodes, docs/opcodes.md): a capture's instructions with
their source and their specialization state.

- :func:`instructions`: one row per instruction and opcode as it ran (a sampled
  instruction seen both generic and specialized is two rows), summed over the
  threads asked, with its columns, source fragment, base instruction and state;
- :func:`expressions`: per line, the column ranges its instructions cover
  (each expression's samples, time and hits), for ``--columns`` and the report;
- :func:`specialization_report`: for the hottest lines, the instructions that
  stayed generic and how often they ran.

Columns are co_positions': 0-based offsets in the line's UTF-8 bytes (the
compiler's), turned into text here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PyprofError
from ..model.sources import read_source
from ..model.tables import NO_POSITION

# What the opcode as it ran says of the instruction (docs/opcodes.md):
# specialized: a form the adaptive interpreter chose for the types it met;
# adaptive: the generic form of a family that specializes (warming up, or it
# failed to and backs off); instrumented: sys.monitoring's form (another tool
# watches the code); "": an instruction that never specializes.
SPECIALIZED, ADAPTIVE, INSTRUMENTED, PLAIN = "specialized", "adaptive", "instrumented", ""

NO_DATA = ("this capture has no instruction data: record it with --opcodes (with --sample, "
           "or with line tracing: -l, --lines-of, --lines-all)")


@dataclass
class Insn:
    """One instruction (and opcode as it ran) of a function."""

    fid: int
    offset: int                 # in bytes, as dis shows it
    opcode: str                 # as it ran
    base: str                   # the instruction it stands for
    state: str
    line: int | None
    end_line: int | None
    col: int | None             # 0-based, in characters of the line
    end_col: int | None
    fragment: str | None        # the source the columns cover
    samples: int = 0            # sampled: as the innermost frame's instruction (self)
    weight: float = 0.0         # seconds those samples stand for
    total_samples: int = 0      # sampled: on the stack at all (a call: its callees too)
    total_weight: float = 0.0
    hits: int = 0               # traced: times it ran
    time: float = 0.0           # traced: seconds, callees included

    @property
    def seconds(self) -> float:
        """Its own time: sampled self weight, or traced time."""
        return self.weight if self.total_samples or not self.hits else self.time

    @property
    def total_seconds(self) -> float:
        """With what it called: sampled total weight, or traced time."""
        return self.total_weight if self.total_samples or not self.hits else self.time


def has_instructions(session) -> bool:
    return bool(session.info.get("opcodes"))


def require(session) -> None:
    if not has_instructions(session):
        raise PyprofError(NO_DATA)


def state_of(name, base, adaptive) -> str:
    if name.startswith("INSTRUMENTED_"):
        return INSTRUMENTED
    if base not in adaptive:
        return PLAIN
    return ADAPTIVE if name == base or name.endswith("_ADAPTIVE") else SPECIALIZED


class _Sources:
    """Source lines, each file read once."""

    def __init__(self):
        self.files: dict = {}

    def lines(self, filename) -> list:
        got = self.files.get(filename)
        if got is None:
            got = self.files[filename] = read_source(filename, None)[0]
        return got

    def text(self, filename, line) -> str | None:
        lines = self.lines(filename)
        return lines[line - 1].rstrip("\r\n") if line and 0 < line <= len(lines) else None


def _char_col(text: str, byte_col: int) -> int:
    """A column in UTF-8 bytes (the compiler's) as a column in characters."""
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def locate(sources, filename, line, end_line, col, end_col):
    """(col, end_col, fragment) in characters of the line, or Nones."""
    if line is None or col is None or end_col is None:
        return None, None, None
    first = sources.text(filename, line)
    if first is None:
        return col, end_col, None
    c0 = _char_col(first, col)
    if end_line in (None, line):
        c1 = _char_col(first, end_col)
        return c0, c1, first[c0:c1]
    last = sources.text(filename, end_line)
    if last is None:
        return c0, None, first[c0:].strip()
    c1 = _char_col(last, end_col)
    middle = [sources.text(filename, ln) or "" for ln in range(line + 1, end_line)]
    parts = [first[c0:]] + middle + [last[:c1]]
    return c0, c1, " ".join(p.strip() for p in parts if p.strip())


def _position(v):
    return None if v == NO_POSITION else v


def instructions(session, threads=None) -> list:
    """The capture's instructions, most time first (PyprofError without them)."""
    require(session)
    names, bases, adaptive = session.opcode_names()
    unit = session.time_unit
    rows: dict = {}
    for (thread, fid, offset, op, line, end_line, col, end_col), c in \
            session.instructions.items():
        if threads is not None and thread not in threads:
            continue
        key = (fid, offset, op)
        r = rows.get(key)
        if r is None:
            name = names[op] if op < len(names) else f"<{op}>"
            base = bases[op] if op < len(bases) else name
            r = rows[key] = [(line, end_line, col, end_col), name, base, 0, 0, 0, 0, 0, 0]
        r[3] += c.samples
        r[4] += c.weight
        r[5] += c.total_samples
        r[6] += c.total_weight
        r[7] += c.hits
        r[8] += c.time
    sources = _Sources()
    out = []
    for (fid, offset, _), (pos, name, base, samples, weight, tsamples, tweight, hits, time) in \
            rows.items():
        f = session.functions[fid]
        line, end_line, col, end_col = map(_position, pos)
        c0, c1, frag = locate(sources, f.filename, line, end_line, col, end_col)
        # traced: the base opcode (the hook runs each instruction through its
        # instrumented form), no state of its own
        state = state_of(name, base, adaptive) if tsamples or not hits else PLAIN
        out.append(Insn(fid, offset * 2, name, base, state, line,
                        end_line, c0, c1, frag, samples, weight / 1e9, tsamples, tweight / 1e9,
                        hits, time * unit))
    out.sort(key=lambda i: (-i.total_seconds, -i.seconds, -i.total_samples, -i.hits, i.fid,
                            i.offset))
    return out


@dataclass
class Expression:
    """A column range of a line and what its instructions did: sampled, the
    samples whose innermost frame ran one of them (self) and those where one
    was on the stack (total: a call's callees); traced, the times it ran (its
    instructions' most) and their time (callees included)."""

    col: int | None
    end_col: int | None
    fragment: str | None
    samples: int = 0
    seconds: float = 0.0
    total_samples: int = 0
    total_seconds: float = 0.0
    hits: int = 0
    insns: list = field(default_factory=list)


def expressions(session, threads=None, insns=None) -> dict:
    """(fid, line) -> [Expression], the ranges of each line's instructions
    (one per distinct range, the instructions in it), most time first. An
    instruction whose range spans lines belongs to its first."""
    out: dict = {}
    for i in insns if insns is not None else instructions(session, threads):
        if i.line is None:
            continue
        exprs = out.setdefault((i.fid, i.line), {})
        e = exprs.get((i.col, i.end_col))
        if e is None:
            e = exprs[(i.col, i.end_col)] = Expression(i.col, i.end_col, i.fragment)
        e.samples += i.samples
        e.seconds += i.seconds
        e.total_samples += i.total_samples
        e.total_seconds += i.total_seconds
        e.hits = max(e.hits, i.hits)        # an expression runs as often as its instructions
        e.insns.append(i)
    # a sample counts once per instruction on its stack: only a recursive call
    # with two instructions of one range on one stack counts one sample twice
    return {k: sorted(v.values(), key=lambda e: (-e.total_seconds, -e.seconds, e.col or 0))
            for k, v in out.items()}


@dataclass
class ReportLine:
    """A hot line of the specialization report: its share, and its generic
    instructions (adaptive: specializable but not specialized when they ran)."""

    fid: int
    line: int
    source: str | None
    samples: int            # self: its instructions ran (innermost)
    seconds: float
    total_samples: int      # on the stack (its calls' callees too)
    total_seconds: float
    hits: int
    generic: list           # Insn, adaptive ones
    specialized: list       # Insn, specialized ones (what did specialize)


NOT_SAMPLED = ("the specialization report needs a sampled capture (--sample --opcodes): "
               "traced instructions run in their instrumented base form, so their opcodes "
               "say nothing of specialization")


def specialization_report(session, threads=None, top: int = 10) -> list:
    """The `top` lines with the most time of their own, each with the
    instructions that ran generic there (most time first). Sampled captures
    only (PyprofError otherwise)."""
    require(session)
    if not session.info.get("sampling"):
        raise PyprofError(NOT_SAMPLED)
    insns = instructions(session, threads)
    lines: dict = {}
    for i in insns:
        if i.line is not None:
            lines.setdefault((i.fid, i.line), []).append(i)
    sources = _Sources()
    ranked = sorted(lines.items(), key=lambda kv: (-sum(i.seconds for i in kv[1]),
                                                   -sum(i.samples for i in kv[1]),
                                                   -max(i.hits for i in kv[1])))
    out = []
    for (fid, line), rows in ranked[:top]:
        f = session.functions[fid]
        text = sources.text(f.filename, line)
        out.append(ReportLine(
            fid, line, text.strip() if text else None, sum(i.samples for i in rows),
            sum(i.seconds for i in rows), sum(i.total_samples for i in rows),
            sum(i.total_seconds for i in rows), max(i.hits for i in rows),
            [i for i in rows if i.state == ADAPTIVE],
            [i for i in rows if i.state == SPECIALIZED]))
    return out
