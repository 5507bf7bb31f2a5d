"""MPI ranks (docs/mpi.md): which rank of which launcher this process is, read
from the launcher's environment, and the name of a rank's capture file.

No MPI library is imported: the launchers (Open MPI's mpirun, MPICH's Hydra
mpiexec and other PMI launchers, PMIx, Slurm's srun) put the rank and the
world size in every process's environment before Python starts.
"""
import os

# (launcher, rank variable, size variables), first match wins. Open MPI also
# sets PMIX_RANK; its own variables come first so "openmpi" is named.
_LAUNCHERS = (
    ("openmpi", "OMPI_COMM_WORLD_RANK", ("OMPI_COMM_WORLD_SIZE",)),
    ("pmi", "PMI_RANK", ("PMI_SIZE",)),
    ("pmix", "PMIX_RANK", ("PMIX_SIZE", "PMI_SIZE")),
    ("slurm", "SLURM_PROCID", ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")),
)


def detect(environ=None):
    """{"rank": int, "size": int or None, "launcher": str} when this process
    is a rank started by an MPI launcher, else None.

    Slurm counts only inside a job step (srun sets SLURM_STEP_ID): the batch
    script itself has SLURM_PROCID=0 too, and is not a rank."""
    env = os.environ if environ is None else environ
    for launcher, rank_var, size_vars in _LAUNCHERS:
        rank = _int(env.get(rank_var))
        if rank is None or rank < 0:
            continue
        if launcher == "slurm" and env.get("SLURM_STEP_ID", env.get("SLURM_STEPID")) is None:
            continue
        size = next((n for n in (_int(env.get(v)) for v in size_vars) if n is not None), None)
        return {"rank": rank, "size": size, "launcher": launcher}
    return None


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def rank_path(path, rank) -> str:
    """The output of one rank: ``.rank<R>`` before the file's format suffix,
    the longest one pyprof knows (``out.cprof`` -> ``out.rank2.cprof``,
    ``out.flame.html`` -> ``out.rank2.flame.html``), else before the last
    suffix, else at the end (``prof`` -> ``prof.rank2``,
    ``callgrind.out`` -> ``callgrind.out.rank2``)."""
    from ..export import FORMATS
    head, base = os.path.split(os.fspath(path))
    lower = base.lower()
    known = [s for _, suffixes in FORMATS.values() for s in suffixes
             if lower.endswith(s.lower()) and len(s) < len(base)]
    if lower.startswith("callgrind.out"):       # the format is in the prefix
        cut = len(base)
    elif known:
        cut = len(base) - len(max(known, key=len))
    elif "." in base.lstrip("."):
        cut = base.rindex(".")
    else:
        cut = len(base)
    return os.path.join(head, f"{base[:cut]}.rank{rank}{base[cut:]}")
