"""The modes compared, the isolated environment each runs in, and what its cache weighs.

Every mode runs in a work directory of its own, new for each model and repeat,
so a cold run starts from an empty cache and nothing leaks between modes:

- ``base_compiledir`` (``PYTENSOR_FLAGS``) points into it for every mode, ours
  included. PyTensor's numba cache lives in its ``numba`` subdirectory, the C
  and CVM caches in its ``compiledir_*`` subdirectory.
- ``NBCACHE_DIR`` (numba_cache's store) points into it for ``NUMBA_CACHE``.
- ``TMPDIR`` points into it: PyTensor writes the generated source of numba
  kernels (Scan's inner functions, for one) to temporary files it never deletes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BASELINE = "NUMBA"
#: The checkout these benchmarks belong to: its numba_cache is the one measured.
REPOSITORY = Path(__file__).resolve().parents[1]


def with_this_checkout(environment: dict) -> dict:
    """`environment` with this checkout first on ``PYTHONPATH``: a child process imports
    the numba_cache beside the benchmarks, not another one an editable install names."""
    paths = [str(REPOSITORY), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(environment, PYTHONPATH=os.pathsep.join(paths))


@dataclass(frozen=True)
class Mode:
    """A benchmarked configuration: a PyTensor mode name and the flags it runs with."""

    name: str  # as shown in the results
    pytensor_mode: str
    flags: str = ""  # PyTensor flags besides base_compiledir
    description: str = ""

    @property
    def uses_numba(self) -> bool:
        return "NUMBA" in self.pytensor_mode

    def environment(self, workdir: Path) -> dict:
        """The child environment: this mode's caches and temporary files inside `workdir`."""
        flags = ",".join(filter(None, [self.flags, f"base_compiledir={workdir / 'compiledir'}"]))
        environment = with_this_checkout(
            dict(os.environ, PYTENSOR_FLAGS=flags, TMPDIR=str(workdir / "tmp")))
        environment.pop("NBCACHE_DISABLE", None)
        environment.pop("NBCACHE_READONLY", None)
        if self.pytensor_mode == "NUMBA_CACHE":
            environment["NBCACHE_DIR"] = str(workdir / "store")
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        return environment


MODES = {
    mode.name: mode
    for mode in (
        Mode("NUMBA_CACHE", "NUMBA_CACHE", description="numba_cache (this project)"),
        Mode(BASELINE, "NUMBA", description="PyTensor's numba backend, its cache on (the default)"),
        Mode(
            "NUMBA no cache", "NUMBA", flags="numba__cache=False",
            description="PyTensor's numba backend, its cache off (numba__cache=False)",
        ),
        Mode("C", "C", description="PyTensor's C backend, one C module per graph (CLinker)"),
        Mode("CVM", "CVM", description="PyTensor's default VM with C thunks per op"),
    )
}

#: The parts of a work directory counted as a mode's cache on disk.
DISK_LOCATIONS = {
    "store": "numba_cache's store (NBCACHE_DIR): records, source copies, index, generated sources",
    "compiledir": "PyTensor's base_compiledir: numba/ (its numba cache), compiledir_*/ (C, CVM)",
    "tmp": "files left in TMPDIR after the processes exited (generated sources PyTensor keeps)",
}


def disk_usage(workdir: Path) -> dict:
    """Bytes (apparent file sizes) and regular files under each of `DISK_LOCATIONS`."""
    usage = {}
    for location in DISK_LOCATIONS:
        files = [path for path in (workdir / location).rglob("*")
                 if path.is_file() and not path.is_symlink()]
        usage[location] = {"bytes": sum(path.stat().st_size for path in files), "files": len(files)}
    return usage
