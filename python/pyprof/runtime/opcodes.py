"""--opcodes: the running interpreter's opcode names, for a capture's meta
(docs/opcodes.md). A sample records the opcode byte as the interpreter ran
it; these name each byte, the instruction it stands for (its base: the
family a specialized or adaptive form belongs to, an instrumented form's own
instruction) and the families that specialize at run time (those with an
inline cache: the adaptive interpreter's counters live there).
"""

_TABLE = {}


def table() -> dict:
    """{"names", "bases": one entry per opcode byte (0-255), "adaptive": the
    families that specialize}."""
    if not _TABLE:
        _TABLE.update(_make())
    return _TABLE


def all_opnames(opcode) -> list:
    """Every opcode byte's name, specialized forms included, as dis's
    _all_opname has them, from the opcode module alone (dis and what it
    imports would cost a run ~5 ms more): 3.13 numbers them itself
    (_specialized_opmap); 3.11 and 3.12 give them the free slots in order."""
    names = list(opcode.opname)
    numbered = getattr(opcode, "_specialized_opmap", None)
    if numbered is not None:
        for name, op in numbered.items():
            if op < len(names):
                names[op] = name
        return names
    free = [op for op, name in enumerate(names) if name.startswith("<")]
    for op, name in zip(free, getattr(opcode, "_specialized_instructions", ())):
        names[op] = name
    return names


def _make() -> dict:
    import opcode
    names = all_opnames(opcode)[:256]
    names += [f"<{i}>" for i in range(len(names), 256)]
    families = getattr(opcode, "_specializations", {})
    base = {form: family for family, forms in families.items() for form in forms}
    known = set(names)
    bases = [name[13:] if name.startswith("INSTRUMENTED_") and name[13:] in known
             else base.get(name, name) for name in names]
    caches = getattr(opcode, "_inline_cache_entries", {})
    if isinstance(caches, dict):                        # 3.13: by name
        cached = {n for n, k in caches.items() if k}
    else:                                               # 3.11, 3.12: by number
        cached = {opcode.opname[i] for i, k in enumerate(caches) if k}
    return {"names": names, "bases": bases,
            "adaptive": sorted(f for f in families if f in cached)}
