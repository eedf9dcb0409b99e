"""The linked build: a helper builds a served graph kernel with its op kernels linked in.

With ``NBCACHE_LINK_BACKGROUND=1`` a process that served a graph kernel calling its
op kernels by symbol (the by-symbol build) leaves a helper building the linked one (the linked build),
which later processes run. Each test runs fresh processes against one store and
waits for the helper through its claim in the store. The linked build must give the bits of
``NBCACHE_LINK_OPS=1``'s cold compile in a store of its own, the by-symbol build keeps its own
bits, and both stay within ``NUMBA_ULP_BOUND`` of PyTensor's ``NUMBA``.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
from helpers import run_cli, run_python, wait_for_linked_builds

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance
from numba_cache.store import side_files

BACKGROUND = {"NBCACHE_LINK_BACKGROUND": "1"}

RADON = """
import json
import numba
{prelude}
import numpy as np
import pytensor
import numba_cache
from numba_cache.evaluation import models
from numba_cache.evaluation.compile_events import count_numba_compiles

model = models.radon_model()
with count_numba_compiles() as compiles:
    function = pytensor.function(model.inputs, model.outputs, mode={mode!r})
    values = function(*model.point)
print(json.dumps({{"compiles": compiles, "stats": dict(numba_cache.session_stats()),
                  "values": [np.asarray(value).tolist() for value in values]}}))
"""


def compile_radon(env: dict | None = None, mode: str = "NUMBA_CACHE", prelude: str = "") -> dict:
    return run_python(RADON.format(mode=mode, prelude=prelude), env)


def store_counters(env: dict | None = None) -> dict:
    result = run_cli("stats", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["counters"]


def assert_within_bound(values, reference) -> None:
    distance = max_ulp_distance([np.asarray(value) for value in values],
                                [np.asarray(value) for value in reference])
    assert distance <= NUMBA_ULP_BOUND


def test_later_processes_run_the_linked_build_with_the_linked_bits(private_store, tmp_path):
    first = compile_radon(BACKGROUND)
    assert first["stats"]["graph.miss"] == 1 and first["stats"]["linking:requested"] == 1
    assert wait_for_linked_builds(private_store) == []  # built: the claim is released
    counters = store_counters()
    assert counters["linking:built"] == 1 and "linking:failed" not in counters
    # The helper's own lookups are not the user's: only the first process's are counted.
    assert counters["graph.miss"] == 1 and "graph.hit" not in counters

    later = compile_radon(BACKGROUND)
    assert later["compiles"] == []
    assert later["stats"]["graph.hit"] == 1 and later["stats"]["linking:served"] == 1
    assert "op.hit" not in later["stats"]  # a linked kernel calls no stored op kernel
    assert "linking:requested" not in later["stats"]
    linked = compile_radon({"NBCACHE_LINK_OPS": "1", "NBCACHE_DIR": str(tmp_path / "eager")})
    assert later["values"] == linked["values"]

    # Without the setting, the store serves the by-symbol build, with the first process's bits.
    by_symbol = compile_radon()
    assert by_symbol["compiles"] == [] and "linking:served" not in by_symbol["stats"]
    assert by_symbol["values"] == first["values"]
    numba = compile_radon(mode="NUMBA")
    assert_within_bound(later["values"], numba["values"])
    assert_within_bound(first["values"], numba["values"])

    listing = json.loads(run_cli("list", "--json", "--kind", "graph").stdout)["entries"]
    summaries = sorted(entry["summary"] for entry in listing)
    assert len(summaries) == 2 and summaries[1] == summaries[0] + ", op kernels linked in"
    assert "builds: 1 requested, 1 built, 0 failed; served: 1" in run_cli("stats").stdout


def test_a_build_that_fails_is_remembered_and_changes_no_result(private_store):
    """CPU features set in Python are not the helper's (numba's settings and PyTensor's
    flags are): its fingerprint differs, so it stores nothing, and its claim says why;
    no process asks again."""
    prelude = ("from numba.core.codegen import get_host_cpu_features\n"
               "numba.config.CPU_FEATURES = get_host_cpu_features() + ',-avx512vnni'")
    first = compile_radon(BACKGROUND, prelude=prelude)
    assert first["stats"]["linking:requested"] == 1
    (claim,) = wait_for_linked_builds(private_store)
    assert claim["state"] == "failed" and "fingerprint differs" in claim["reason"]
    assert store_counters()["linking:failed"] == 1
    again = compile_radon(BACKGROUND, prelude=prelude)
    assert again["compiles"] == [] and again["values"] == first["values"]
    assert "linking:requested" not in again["stats"] and "linking:served" not in again["stats"]


def test_the_helper_builds_under_the_numba_settings_its_process_set_in_python(private_store):
    prelude = "numba.config.LOOP_VECTORIZE = 0"
    first = compile_radon(BACKGROUND, prelude=prelude)
    assert first["stats"]["linking:requested"] == 1
    assert wait_for_linked_builds(private_store) == []  # built: the claim is released
    later = compile_radon(BACKGROUND, prelude=prelude)
    assert later["stats"]["linking:served"] == 1 and later["compiles"] == []
    assert_within_bound(later["values"], first["values"])


def test_a_build_is_claimed_once_until_released_or_stale(tmp_path):
    """Processes sharing a store build a linked kernel once: a running build's claim
    holds until `lock_timeout`, a failed one for a day, a finished one not at all."""
    from numba_cache.store.local import LocalBackend

    files = side_files.SideFiles(LocalBackend(tmp_path), tmp_path, lambda: True)
    fingerprint, key = "f" * 64, "a" * 64
    claim = tmp_path / fingerprint / side_files.LINKING_NAME / key
    assert files.claim_linking(fingerprint, key, stale_after=600)
    assert not files.claim_linking(fingerprint, key, stale_after=600)
    os.utime(claim, (time.time() - 601, time.time() - 601))  # its builder vanished
    assert files.claim_linking(fingerprint, key, stale_after=600)
    files.release_linking(fingerprint, key, failure="it raised")
    (failed,) = files.linking_claims()
    assert (failed["fingerprint"], failed["key"]) == (fingerprint, key)
    assert (failed["state"], failed["reason"]) == ("failed", "it raised")
    os.utime(claim, (time.time() - 3600, time.time() - 3600))
    assert not files.claim_linking(fingerprint, key, stale_after=600)
    day = side_files.FAILED_LINKING_HOLDS
    os.utime(claim, (time.time() - day - 1, time.time() - day - 1))
    assert files.claim_linking(fingerprint, key, stale_after=600)
    files.release_linking(fingerprint, key, failure=None)
    assert not claim.exists() and files.claim_linking(fingerprint, key, stale_after=600)
    claim.write_bytes(b"\xff damaged")  # unreadable: no claim stands
    assert files.claim_linking(fingerprint, key, stale_after=600)
    read_only = side_files.SideFiles(LocalBackend(tmp_path), tmp_path, lambda: False)
    assert not read_only.claim_linking(fingerprint, "b" * 64, stale_after=600)


def test_warm_waits_for_the_linked_builds_its_targets_asked_for(private_store):
    """A CI step warming a store under the setting keeps it whole: ``warm`` returns once
    the helpers stored every linked build."""
    result = run_cli("warm", "--json", "warm_targets:graphs", env=BACKGROUND)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["linked_builds_failed"] == []
    assert wait_for_linked_builds(private_store, timeout=0.0) == []
    listing = json.loads(run_cli("list", "--json", "--kind", "graph").stdout)["entries"]
    linked = [entry for entry in listing if entry["summary"].endswith("op kernels linked in")]
    assert len(listing) == 6 and len(linked) == 3
