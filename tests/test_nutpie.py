"""nutpie's numba.cfunc wrappers, stored and loaded (numba_cache.kernels.callbacks.cfunc, integration/nutpie).

In fresh processes (tests/nutpie_child.py): a warm process loads both wrappers
and compiles nothing with numba, and its logp, gradient, expansion and draws are
the cold process's bit for bit; both are within NUMBA_ULP_BOUND of PyTensor's
built-in ``NUMBA`` (numba_cache's kernels are not PyTensor's code, see
numba_cache/evaluation/compare.py). A store in any state gives those same bits:
a wrapper whose kernel was compiled again, whose entry is damaged or whose links
cannot be met is compiled again, never loaded.

In this process: the callbacks the recogniser must leave alone. The nutpie and
numba seams it relies on are checked by tests/test_compat.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import store_states
from helpers import wait_for_linked_builds

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance

TESTS = Path(__file__).parent
MODELS = ("hidden", "data")
VALUES = ("logp", "gradient", "expanded")


def run(model: str, mode: str, store: Path, log: Path | None = None, **spec) -> dict:
    env = dict(os.environ, NBCACHE_DIR=str(store),
               PYTHONPATH=os.pathsep.join([str(TESTS / "process_probe"), str(TESTS.parent)]))
    env.pop("NBCACHE_ACTIVATE", None)
    if log is not None:
        log.mkdir(parents=True)
        env["NBCACHE_TEST_COMPILE_LOG"] = str(log)
    process = subprocess.run(
        [sys.executable, str(TESTS / "nutpie_child.py"), json.dumps(spec | {"model": model, "mode": mode})],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    assert process.returncode == 0, process.stderr[-5000:]
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert result["status"] == [0, 0], result["status"]
    if log is not None:
        result["compiles"] = [line for path in log.glob("*.jsonl")
                              for line in path.read_text().splitlines() if "module" in line]
    return result


def floats(hex_bytes: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_bytes), dtype=np.float64)


def same_bits(result: dict, expected: dict) -> None:
    for name in VALUES:
        assert result[name] == expected[name], f"{name} differs in its bits"
    assert result["draws"] == expected["draws"], "draws differ"


@pytest.fixture(scope="module")
def cold(tmp_path_factory) -> dict:
    """Per model: the store a cold run filled, and that run's result."""
    runs = {}
    for model in MODELS:
        store = tmp_path_factory.mktemp(f"cold-{model}")
        runs[model] = (store, run(model, "numba_cache", store))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_a_warm_process_loads_both_wrappers_compiles_nothing_and_gives_the_same_bits(
        model, cold, tmp_path):
    store, first = cold[model]
    assert first["stats"].get("cfunc.miss") == 2, first["stats"]
    warm = run(model, "numba_cache", store_states.copy_store(store, tmp_path / "store"),
               log=tmp_path / "log")
    print(json.dumps({"cold": first["cfunc_seconds"], "warm": warm["cfunc_seconds"]}))
    assert warm["stats"].get("cfunc.hit") == 2, warm["stats"]
    assert not any(name.endswith(".miss") for name in warm["stats"]), warm["stats"]
    assert warm["compiles"] == [], "the warm process compiled with numba"
    same_bits(warm, first)

    reference = run(model, "NUMBA", tmp_path / "unused")
    for name in VALUES:
        distance = max_ulp_distance([floats(warm[name])], [floats(reference[name])])
        assert distance <= NUMBA_ULP_BOUND, (name, distance)


@pytest.mark.slow
def test_the_linked_build_serves_nutpie_through_callbacks_of_its_own(tmp_path, monkeypatch):
    """Under ``NBCACHE_LINK_BACKGROUND=1`` later processes run the linked build of the
    logp graph (numba_cache/kernels/helpers/linked_build.py), and nutpie's callbacks call it by
    its symbol: they are stored apart from the callbacks of the by-symbol build, so that processes
    of either tier load their own, with their own bits."""
    store = tmp_path / "store"
    monkeypatch.setenv("NBCACHE_LINK_BACKGROUND", "1")
    first = run("hidden", "numba_cache", store)
    assert first["stats"]["linking:requested"] == 2, first["stats"]
    assert [claim["state"] for claim in wait_for_linked_builds(store)] == []
    second = run("hidden", "numba_cache", store)
    assert second["stats"]["linking:served"] == 2 and second["stats"]["cfunc.miss"] == 2
    third = run("hidden", "numba_cache", store, log=tmp_path / "log")
    assert third["stats"]["linking:served"] == 2 and third["stats"]["cfunc.hit"] == 2
    assert third["compiles"] == [], "the process compiled with numba"
    same_bits(third, second)
    monkeypatch.delenv("NBCACHE_LINK_BACKGROUND")
    by_symbol = run("hidden", "numba_cache", store)
    assert by_symbol["stats"]["cfunc.hit"] == 2 and "linking:served" not in by_symbol["stats"]
    same_bits(by_symbol, first)
    reference = run("hidden", "NUMBA", tmp_path / "unused")
    for name in VALUES:
        distance = max_ulp_distance([floats(third[name])], [floats(reference[name])])
        assert distance <= NUMBA_ULP_BOUND, (name, distance)


def links_naming_a_missing_symbol(root: Path) -> int:
    """Make every wrapper's record say its code calls a symbol no process defines."""
    from numba_cache.kernels.callbacks import links
    from numba_cache.store import Store, record
    from numba_cache.store.entry_layout import CFUNC_LINKS_BLOB

    store = Store(store_states.settings_for(root))
    changed = 0
    for fingerprint, key in store_states.entries_of(root, {"cfunc"}):
        entry = store.read(fingerprint, key)
        recorded = links.Links.decode(entry.blobs[CFUNC_LINKS_BLOB])
        entry.blobs[CFUNC_LINKS_BLOB] = links.Links(
            recorded.kernels, recorded.hidden, [*recorded.process, "numba_cache_no_such_symbol"],
        ).encode()
        store_states.record_path(root, fingerprint, key).write_bytes(record.encode(entry))
        changed += 1
    return changed


STATES = {
    # The graph kernels compile again, under new symbols: the stored wrappers call the old ones.
    "graph entries gone": lambda root: store_states.remove(root, {"graph"}),
    "wrapper entries damaged": lambda root: store_states.damage(root, {"cfunc"}),
    "wrapper links unmet": links_naming_a_missing_symbol,
    # Compiled again, calling numba's implementations loaded from the store.
    "wrapper entries gone": lambda root: store_states.remove(root, {"cfunc"}),
    "wrapper entries gone, numba's implementations damaged": lambda root: (
        store_states.damage(root, {"overload"}), store_states.remove(root, {"cfunc"}))[0],
}


@pytest.mark.slow
@pytest.mark.parametrize("state", STATES)
def test_a_store_in_any_state_gives_the_cold_bits_and_compiles_the_wrappers_again(
        state, cold, tmp_path):
    store, first = cold["hidden"]
    root = store_states.copy_store(store, tmp_path / "store")
    assert STATES[state](root) > 0
    result = run("hidden", "numba_cache", root)
    assert result["stats"].get("cfunc.miss") == 2, result["stats"]
    if state == "wrapper entries gone":
        assert result["stats"].get("overload.hit", 0) > 0, result["stats"]
    same_bits(result, first)
    again = run("hidden", "numba_cache", root)  # the store repaired itself
    assert again["stats"].get("cfunc.hit") == 2, again["stats"]
    same_bits(again, first)


@pytest.mark.slow
def test_new_shared_data_compiles_the_wrapper_that_freezes_it(cold, tmp_path):
    """nutpie freezes pm.Data values into its logp wrapper: other values are another wrapper."""
    store, _ = cold["data"]
    root = store_states.copy_store(store, tmp_path / "store")
    other = run("data", "numba_cache", root, scale=2.0)
    reference = run("data", "NUMBA", tmp_path / "unused", scale=2.0)
    assert other["stats"].get("cfunc.miss", 0) >= 1, other["stats"]
    for name in VALUES:
        distance = max_ulp_distance([floats(other[name])], [floats(reference[name])])
        assert distance <= NUMBA_ULP_BOUND, (name, distance)


# In this process: what is left alone (the seams are checked in tests/test_compat.py)


def test_a_cfunc_nobody_recognises_compiles_as_numba_compiles_it():
    from numba.core.caching import NullCache

    @numba.cfunc(numba.types.float64(numba.types.float64))
    def plain(value):
        return value + 1.0

    assert type(plain._cache) is NullCache
    assert type(plain._library).__name__ == "JITCodeLibrary"
    assert plain.ctypes(1.0) == 2.0
