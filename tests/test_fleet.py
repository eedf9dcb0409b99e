"""Machines of several CPU models on one store: under the portable target they share every
entry and get the same bits; without it they share none; a CPU that lacks the baseline
compiles for itself, told why, and never loads the baseline's code.

"Another machine" is a fresh process that sees another host CPU (tests/other_cpu: LLVM's
answer to which CPU this is, patched before numba is imported), so the real key and the
real code generator are exercised; each pretended CPU is older than the real one, so its
code runs here.
"""

from __future__ import annotations

import os
import struct

import pytest
from helpers import TESTS, run_python

from numba_cache import cpu_target

LOGP_AND_GRADIENT = """
import json, warnings
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.kernels.context import current_context

mu, log_sigma = pt.vector("mu"), pt.scalar("log_sigma")
data = np.linspace(-2.0, 3.0, 200)
sigma = pt.exp(log_sigma)
logp = (-0.5 * ((data[:, None] - mu[None, :]) / sigma) ** 2 - log_sigma).sum() - (mu ** 2).sum()
with warnings.catch_warnings(record=True) as caught, count_numba_compiles() as compiles:
    warnings.simplefilter("always")
    f = pytensor.function([mu, log_sigma], [logp, *pt.grad(logp, [mu, log_sigma])],
                          mode="NUMBA_CACHE")
    values = f(np.array([0.1, -0.4, 0.7]), 0.3)
context = current_context()
print(json.dumps({
    "values": [np.asarray(value, dtype=np.float64).ravel().tolist() for value in values],
    "cpu_name": context.fingerprint.components["cpu_name"],
    "fingerprint": context.fingerprint.digest,
    "compiles": len(compiles),
    "stats": dict(numba_cache.session_stats()),
    "warnings": [str(w.message) for w in caught if "NBCACHE_TARGET" in str(w.message)],
}))
"""


def machine(cpu: str | None, target: str = "host", **env) -> dict:
    """The compile of one machine: `cpu` pretended (None: this machine's), on the test's
    store unless `env` names another."""
    paths = [str(TESTS / "other_cpu"), str(TESTS), str(TESTS.parent)]
    # The machine's CPU is the one it sees, whatever numba was told outside the test.
    env = {"PYTHONPATH": os.pathsep.join(paths), "NBCACHE_TARGET": target,
           "NBCACHE_TEST_HOST_CPU": cpu or "", "NUMBA_CPU_NAME": None, "NUMBA_CPU_FEATURES": None,
           **env}
    return run_python(LOGP_AND_GRADIENT, env=env)


def bits(result: dict) -> list[bytes]:
    return [struct.pack("<d", value) for values in result["values"] for value in values]


def supports_the_portable_baseline() -> bool:
    from numba_cache._compat import numba_internals

    name = cpu_target.PORTABLE_BASELINES.get(numba_internals.host_architecture())
    return name is not None and cpu_target.BASELINES[name].requires <= (
        numba_internals.host_cpu_features())


def test_machines_of_two_cpu_models_share_nothing_compiling_for_their_host():
    first, second = machine(None), machine("haswell")
    assert second["cpu_name"] == "haswell" and first["cpu_name"] != "haswell"
    assert first["fingerprint"] != second["fingerprint"]
    assert "graph.hit" not in second["stats"] and second["stats"].get("graph.miss"), second["stats"]
    assert second["compiles"] > 0


def test_under_the_portable_target_another_cpu_model_loads_every_entry_bit_for_bit():
    if not supports_the_portable_baseline():
        pytest.fail("this machine's CPU lacks the portable baseline: the tests need one that has it")
    first, second = machine(None, "portable"), machine("haswell", "portable")
    assert first["cpu_name"] == second["cpu_name"] == "x86-64-v3"
    assert first["fingerprint"] == second["fingerprint"]
    assert second["compiles"] == 0, second
    assert set(second["stats"]) - {"op.hit"} == {"rewrite.hit", "graph.hit"}, second["stats"]
    assert bits(second) == bits(first)
    # And the first machine again, warm: the same bits as its cold compile.
    assert bits(machine(None, "portable")) == bits(first)


def test_a_cpu_without_the_baseline_compiles_for_itself_and_says_why():
    if not supports_the_portable_baseline():
        pytest.fail("this machine's CPU lacks the portable baseline: the tests need one that has it")
    portable = machine(None, "portable")
    old = machine("nehalem", "portable")
    assert old["cpu_name"] == "nehalem" and old["fingerprint"] != portable["fingerprint"]
    assert "graph.hit" not in old["stats"], old["stats"]  # never the baseline's code
    [warning] = old["warnings"]
    assert "lacks avx" in warning and "x86-64-v3" in warning, warning
    for mine, theirs in zip(old["values"], portable["values"], strict=True):
        assert mine == pytest.approx(theirs, rel=1e-12)


def test_the_target_setting_rejects_what_it_does_not_know():
    from helpers import cli_here

    result = cli_here("stats", env={"NBCACHE_TARGET": "skylake"})
    assert result.returncode == 2, result
    assert "NBCACHE_TARGET" in result.stderr and "x86-64-v3" in result.stderr, result.stderr


def test_a_fleet_of_two_cpu_models_shares_one_bucket_under_the_portable_target(tmp_path):
    """Machine A fills a bucket; machine B, of another CPU model and with an empty local
    store, compiles nothing from it, not even the self-test's probes: the same bits."""
    from object_server import ServerUnavailable, moto_server
    from remote_machines import PATIENT, SECRET, unavailable

    if not supports_the_portable_baseline():
        pytest.fail("this machine's CPU lacks the portable baseline: the tests need one that has it")
    try:
        with moto_server() as moto:
            moto.client().create_bucket(Bucket="nbcache-fleet")
            tier = {**moto.environment(), "NBCACHE_REMOTE": "s3://nbcache-fleet/fleet",
                    "NBCACHE_REMOTE_SECRET": SECRET, **PATIENT}
            first = machine(None, "portable", NBCACHE_DIR=str(tmp_path / "a"), **tier)
            second = machine("haswell", "portable", NBCACHE_DIR=str(tmp_path / "b"), **tier)
    except ServerUnavailable as problem:
        unavailable("moto's S3 server", problem)
    assert second["compiles"] == 0, second
    assert set(second["stats"]) - {"op.hit"} == {"rewrite.hit", "graph.hit"}, second["stats"]
    assert bits(second) == bits(first)
