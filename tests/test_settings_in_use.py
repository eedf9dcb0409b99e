"""Settings and the self-test, end to end: the cache never makes a compile fail.

The read-only setting and directory are tested end to end in
tests/test_reliability_environment.py; single flight across processes in
tests/test_reliability_concurrency.py.
"""

from __future__ import annotations

import pytest
from helpers import MOVED_FUNCTION_IDS, run_python

TINY_COMPILE = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
{setup}
x = pt.vector("x")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    value = pytensor.function([x], {expression}, mode="NUMBA_CACHE")(np.arange(3.0))
print(json.dumps({{"value": value.tolist(), "stats": dict(numba_cache.session_stats()),
                  "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)]}}))
"""


def compile_tiny(expression="pt.exp(x) * 2", setup="", env=None):
    return run_python(TINY_COMPILE.format(expression=expression, setup=setup), env)


def test_disabled_cache_compiles_and_writes_nothing(private_store):
    result = compile_tiny(env={"NBCACHE_DISABLE": "1"})
    assert result["value"] == (2 * __import__("numpy").exp([0.0, 1.0, 2.0])).tolist()
    assert not private_store.exists()


def test_disabled_from_python(private_store):
    result = compile_tiny(setup="numba_cache.settings.configure(disabled=True)")
    assert result["value"] and not private_store.exists()


#: Upstream moving under a seam (numba_cache/_compat), as a child's set-up simulates it.
MOVED_SEAMS = {
    "compile results no longer round-trip": (
        "import numba_cache.kernels.protocol.serialize as serialize\n"
        "def broken():\n"
        "    raise RuntimeError('numba API changed')\n"
        "serialize.self_test = broken\n"
    ),
    "function ids no longer drawn from _unique_ids": MOVED_FUNCTION_IDS,
}


@pytest.mark.parametrize("moved", MOVED_SEAMS)
def test_an_upstream_seam_that_moved_turns_the_cache_off_with_one_warning(moved, private_store):
    result = compile_tiny(setup=MOVED_SEAMS[moved])
    assert result["value"] == compile_tiny(env={"NBCACHE_DISABLE": "1"})["value"]
    assert len([w for w in result["warnings"] if "turned off" in w]) == 1, result["warnings"]
    assert not list(private_store.rglob("*.nbk"))


UNDER_WARNINGS_AS_ERRORS = """
import json
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
x = pt.vector("x")
value = pytensor.function([x], pt.exp(x) * 2.0 + x.sum(), mode="NUMBA_CACHE")(np.arange(3.0))
print(json.dumps({"value": value.tolist(), "stats": dict(numba_cache.session_stats())}))
"""


@pytest.mark.parametrize("trouble", ["damaged entries", "a store that cannot be written",
                                     "a size cap below the process's kernels"])
def test_the_caches_own_warnings_fail_no_compile_under_warnings_as_errors(
        trouble, private_store, tmp_path):
    """With warnings made errors (``-W error``, pytest's ``filterwarnings = error``), what
    numba_cache warns about is logged on stderr instead: the compile goes on as without
    the cache. Raised, a damaged entry failed every compile that met it and, warned
    before it was removed, stayed in the store to fail the next one too."""
    import numpy as np

    expected = (np.exp(np.arange(3.0)) * 2.0 + 3.0).tolist()
    env = {"PYTHONWARNINGS": "error"}
    if trouble == "damaged entries":
        run_python(UNDER_WARNINGS_AS_ERRORS)
        for path in private_store.rglob("*.nbk"):
            path.write_bytes(path.read_bytes()[:100])
        expected_message = "ignoring the unreadable cache entry"
    elif trouble == "a store that cannot be written":
        (tmp_path / "a file").write_text("")
        env["NBCACHE_DIR"] = str(tmp_path / "a file" / "store")
        expected_message = "is read-only"
    else:
        env["NBCACHE_MAX_SIZE"] = "1K"
        expected_message = "Raise NBCACHE_MAX_SIZE"
    result = run_python(UNDER_WARNINGS_AS_ERRORS, env)
    assert np.allclose(result["value"], expected, rtol=1e-15, atol=0)
    assert expected_message in result["stderr"]
    if trouble == "damaged entries":  # removed by the process that met them
        again = run_python(UNDER_WARNINGS_AS_ERRORS, env)
        assert "unreadable" not in again["stderr"] and again["value"] == result["value"]


@pytest.mark.parametrize("variable, value", [
    ("NBCACHE_MAX_SIZE", "abc"),
    ("NBCACHE_TARGET", "bogus"),
    ("NBCACHE_REMOTE_TTL", "abc"),
])
def test_a_setting_that_cannot_be_read_turns_the_cache_off_with_one_warning(
        variable, value, private_store):
    """A typo in a variable does not fail the compile (``NUMBA`` compiles the graph): the
    warning names the variable and what it needs, and nothing is cached meanwhile. The
    command line refuses it with one line (tests/test_cli_input.py)."""
    result = compile_tiny(env={variable: value})
    assert result["value"] == (2 * __import__("numpy").exp([0.0, 1.0, 2.0])).tolist()
    [warning] = result["warnings"]
    assert warning.startswith(f"numba_cache: {variable}") and "without the cache" in warning
    assert result["stats"] == {} and not private_store.exists()
