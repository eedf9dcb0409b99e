"""Differential tests: whatever state the store is in, NUMBA_CACHE computes what NUMBA computes.

One session-wide child compiles every workload into a store; each test copies
that store, puts it into a state (a level missing, damaged, swapped with another
entry, pruned, repaired, imported in part) and compiles every workload again in
two fresh processes: the first recompiles what is missing, the second loads
what the first stored. Both must equal PyTensor's ``NUMBA`` mode, within a few
ULP, with no compile failing.
"""

from __future__ import annotations

import json
import time

import pytest

import store_states
from helpers import run_python
from reliability import numba_cache_cli
from store_states import FAMILIES, differences

WORKLOADS = ("radon", "ar1", "gp", *FAMILIES)


def compile_in_child(names, root, reference=False) -> dict:
    code = f"import json, store_states; print(json.dumps(store_states.child({list(names)!r}, {reference})))"
    return run_python(code, {"NBCACHE_DIR": str(root)})


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> dict:
    """NUMBA's and Python mode's values of every workload (numba_cache plays no part)."""
    return compile_in_child(WORKLOADS, tmp_path_factory.mktemp("unused"), reference=True)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory, reference) -> dict:
    """A store holding every level of every default workload, from a cold process."""
    root = tmp_path_factory.mktemp("compiled") / "store"
    report = compile_in_child(WORKLOADS, root)
    assert differences(report["values"], reference["numba"]) == []
    return {"root": root, "report": report}


def assert_like_numba(report: dict, reference: dict) -> None:
    assert differences(report["values"], reference["numba"]) == [], report["stats"]
    assert report["stats"].get("failed", 0) == 0


def test_numba_agrees_with_python_mode(reference):
    """The reference itself: NUMBA equals Python mode on every graph family (loosely: fastmath)."""
    numba = {name: reference["numba"][name] for name in reference["python"]}
    assert differences(numba, reference["python"], rtol=1e-7) == []


def test_radon_with_its_graph_entry_gone_gives_numbas_gradient(compiled, reference, tmp_path):
    """Issue 13's reproduction: a rewrite hit whose graph kernel is compiled from the restored
    graph. Its gradient was off by up to 430, stored, and loaded by every later process."""
    root = store_states.copy_store(compiled["root"], tmp_path / "store")
    assert store_states.remove(root, {"graph"}) > 0
    restored = compile_in_child(["radon"], root)
    assert restored["stats"].get("rewrite.hit") == 1 and restored["stats"].get("graph.miss") == 1
    assert restored["warnings"] == []
    loaded = compile_in_child(["radon"], root)
    assert loaded["stats"].get("rewrite.hit") == 1 and loaded["stats"].get("graph.hit") == 1
    for report in (restored, loaded):
        assert differences(report["values"], reference["numba"]) == []
    assert loaded["values"] == restored["values"]  # the kernel restored loads as it ran


STATES = {
    **{f"{kind} missing": (lambda root, kind=kind: store_states.remove(root, {kind}))
       for kind in store_states.KINDS},
    **{f"{kind} damaged": (lambda root, kind=kind: store_states.damage(root, {kind}))
       for kind in store_states.KINDS},
    "graph and op missing": lambda root: store_states.remove(root, {"graph", "op"}),
    "graph missing, op damaged": lambda root: (store_states.remove(root, {"graph"}),
                                               store_states.damage(root, {"op"}))[0],
    "two graph records swapped": lambda root: store_states.swap(root, "graph"),
    "pruned to a tenth": lambda root: prune(root, fraction=0.1),
    "graph damaged, then verify --repair": lambda root: repair(root, {"graph"}),
    "partial import (no graph entries)": lambda root: partial_import(root, {"graph"}),
}


def prune(root, fraction: float) -> int:
    size = sum(path.stat().st_size for path in root.rglob("*.nbk"))
    result = numba_cache_cli("prune", "--max-size", str(int(size * fraction)),
                             env={"NBCACHE_DIR": str(root)})
    assert result.returncode == 0, result.stderr
    return 1


def repair(root, kinds) -> int:
    damaged = store_states.damage(root, kinds)
    result = numba_cache_cli("verify", "--repair", env={"NBCACHE_DIR": str(root)})
    assert result.returncode == 1, result.stdout  # it found the damage
    return damaged


def partial_import(root, missing_kinds) -> int:
    """Export the store without entries of `missing_kinds`; import that into an empty store."""
    store_states.remove(root, missing_kinds)
    archive = root.parent / "partial.tar"
    for command, store in (("export", root), ("import", root.parent / "imported")):
        result = numba_cache_cli(command, str(archive), env={"NBCACHE_DIR": str(store)})
        assert result.returncode == 0, result.stderr
    root.rename(root.parent / "exported")
    (root.parent / "imported").rename(root)
    return 1


#: The state of the default run: the graph level lost (issue 13's bug). Every other
#: state runs in CI (slow): those that recompile every op kernel take over a minute
#: each on two cores, the rest 7-22 s.
DEFAULT_STATES = {"graph missing"}


@pytest.mark.parametrize("state", [
    pytest.param(state, marks=[] if state in DEFAULT_STATES else [pytest.mark.slow])
    for state in STATES
])
def test_every_store_state_gives_numbas_results(state, compiled, reference, tmp_path):
    root = store_states.copy_store(compiled["root"], tmp_path / "store")
    assert STATES[state](root) > 0, "the state changed nothing"
    started = time.perf_counter()
    first = compile_in_child(WORKLOADS, root)
    second = compile_in_child(WORKLOADS, root)
    print(json.dumps({"state": state, "seconds": round(time.perf_counter() - started, 1),
                      "first": first["stats"], "second": second["stats"]}))
    assert_like_numba(first, reference)
    assert_like_numba(second, reference)
    assert second["stats"].get("graph.miss", 0) == 0, "the first process stored every kernel"
