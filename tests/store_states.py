"""Workloads compiled through stores in every state, and the states themselves.

A child (``python tests/store_states.py NAME...``) compiles each named workload
with ``NUMBA_CACHE`` and reports its values with the session counters and the
numba_cache warnings; with ``--reference`` it reports PyTensor's ``NUMBA`` and
Python-mode values instead. The test process puts a compiled store into a state
(levels missing, damaged, swapped, pruned, repaired, partially imported) with
the functions below, then runs children against it.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np

#: Relative tolerance against ``NUMBA``: a few ULP (numba's fastmath, and the last
#: bits of a linked kernel differing between a cold and a warm process).
RTOL = 1e-12

MODELS = ("radon", "ar1", "gp", "large")
#: Graph families of tests/graph_families.py that the rewrite level changes most:
#: Join written in place, Blockwise, IfElse, Scan with pruned outputs, OpFromGraph, inplace.
FAMILIES = ("join_split_concat", "blockwise", "if_else", "scan_with_gradient", "op_from_graph",
            "inplace")
KINDS = ("rewrite", "graph", "op", "objmode", "runtime")


def evaluate(name: str, mode) -> list:
    """Compile workload `name` (a model of numba_cache.evaluation.models or a graph family) and call it."""
    import graph_families
    import pytensor

    from numba_cache.evaluation import models

    if name in graph_families.FAMILIES:
        return graph_families.evaluate(name, mode)
    model = getattr(models, f"{name}_model")()
    function = pytensor.function(model.inputs, model.outputs, mode=mode)
    return [np.asarray(value) for value in function(*model.point)]


def as_json(values: list) -> list:
    return [np.asarray(value).tolist() for value in values]


def child(names: list[str], reference: bool) -> dict:
    from pytensor.compile.mode import Mode

    import numba_cache

    if reference:
        python_mode = Mode(linker="py", optimizer="fast_run")
        # Python mode is too slow for the models (and limits fused Elemwise to 32 operands).
        return {
            "numba": {name: as_json(evaluate(name, "NUMBA")) for name in names},
            "python": {name: as_json(evaluate(name, python_mode)) for name in names
                       if name in FAMILIES},
        }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = {name: as_json(evaluate(name, "NUMBA_CACHE")) for name in names}
    return {
        "values": values,
        "stats": dict(numba_cache.session_stats()),
        "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)],
    }


def differences(values: dict, expected: dict, rtol: float = RTOL) -> list[str]:
    """The workloads (and output positions) whose values differ from `expected`."""
    found = []
    for name, outputs in values.items():
        for position, (value, wanted) in enumerate(zip(outputs, expected[name], strict=True)):
            value, wanted = np.asarray(value), np.asarray(wanted)
            same = value.shape == wanted.shape and (
                np.array_equal(value, wanted) if value.dtype.kind in "biu"
                else np.allclose(value, wanted, rtol=rtol, atol=1e-300, equal_nan=True))
            if not same:
                error = np.max(np.abs(value - wanted)) if value.shape == wanted.shape else "shape"
                found.append(f"{name}[{position}] off by {error}")
    return found


# In the test process: store states


def settings_for(root: Path):
    """The settings of a writable store at `root`."""
    from numba_cache import settings

    return settings.override(settings.current(), root=str(root), readonly=False, disabled=False)


def entries_of(root: Path, kinds) -> list:
    """The (fingerprint, key) of every entry of these kinds in the store at `root`."""
    from numba_cache.store import Store

    store = Store(settings_for(root))
    return [(entry.fingerprint, entry.key) for entry in store.entries()
            if entry.kind in kinds and entry.cacheable]


def record_path(root: Path, fingerprint: str, key: str) -> Path:
    return root / fingerprint / key[:2] / f"{key}.nbk"


def side_files(root: Path, name: str, directory: bool = True) -> list[Path]:
    """The side files of every fingerprint under the directory `name` (``by_code``,
    ``op_keys``...), or named `name` if not a `directory`."""
    return sorted(root.glob(f"*/{name}/*" if directory else f"*/{name}"))


def remove(root: Path, kinds) -> int:
    """Delete the records of these kinds only (what eviction or a lost file leaves)."""
    addresses = entries_of(root, kinds)
    for address in addresses:
        record_path(root, *address).unlink()
    return len(addresses)


def damage(root: Path, kinds) -> int:
    """Flip a byte in the middle of every record of these kinds."""
    addresses = entries_of(root, kinds)
    for address in addresses:
        path = record_path(root, *address)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    return len(addresses)


def swap(root: Path, kind: str) -> int:
    """Exchange the records of the two first entries of `kind` (a record under another's key)."""
    first, second = (record_path(root, *address) for address in entries_of(root, {kind})[:2])
    first_data = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(first_data)
    return 2


def repoint_rewrites(root: Path, target_kind: str) -> int:
    """Make every rewrite entry promise another entry's kernel, an entry of `target_kind`,
    consistently (component and graph key blob agree, checksums made anew): what a
    writer with a bug, or records mixed from two stores, would leave."""
    from numba_cache.store import Store, record
    from numba_cache.store.entry_layout import GRAPH_KERNEL_COMPONENT, GRAPH_KEY_BLOB

    store = Store(settings_for(root))
    rewrites = entries_of(root, {"rewrite"})
    targets = entries_of(root, {target_kind})
    changed = 0
    for fingerprint, key in rewrites:
        entry = store.read(fingerprint, key)
        own = entry.components[GRAPH_KERNEL_COMPONENT]
        other = next(target for fp, target in targets if fp == fingerprint and target != own)
        graph_key = json.loads(entry.blobs[GRAPH_KEY_BLOB])
        entry.components[GRAPH_KERNEL_COMPONENT] = graph_key["digest"] = other
        entry.blobs[GRAPH_KEY_BLOB] = json.dumps(graph_key).encode()
        record_path(root, fingerprint, key).write_bytes(record.encode(entry))
        changed += 1
    return changed


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.lock"))
    return target


if __name__ == "__main__":
    arguments = sys.argv[1:]
    is_reference = "--reference" in arguments
    print(json.dumps(child([a for a in arguments if a != "--reference"], is_reference)))
