"""Start-up cost: importing numba_cache, and its commands that only read the store, import
neither numba nor PyTensor; the mode is still registered as soon as PyTensor is imported.

Each case runs in a fresh interpreter, since imports accumulate in a process.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_python

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

COMPILER_MODULES = ("numba", "llvmlite", "pytensor")

COMPILE_ONE = """
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
x = pt.vector("x")
pytensor.function([x], pt.exp(x) * 2.0, mode="NUMBA_CACHE")(np.ones(2))
print("{}")
"""


def run_cli(*argv: str, env: dict | None = None) -> dict:
    """Run ``numba-cache ARGV`` through ``cli.main`` in a fresh process; what it imported."""
    return run_python(f"""
        import contextlib, io, json, sys
        from numba_cache.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                status = main({list(argv)!r})
            except SystemExit as exit:
                status = exit.code
        print(json.dumps({{"status": status, "stdout": out.getvalue(),
                          "imported": [m for m in {COMPILER_MODULES!r} if m in sys.modules]}}))
    """, env)


@pytest.fixture(scope="module")
def store_with_entries(tmp_path_factory, state_home):
    root = tmp_path_factory.mktemp("lazy") / "store"
    env = {"NBCACHE_DIR": str(root), "XDG_STATE_HOME": str(state_home)}
    run_python(COMPILE_ONE, env)
    return env


def test_the_first_stats_in_a_new_environment_computes_its_fingerprint_then_remembers_it(
        tmp_path, store_with_entries):
    env = store_with_entries | {"XDG_STATE_HOME": str(tmp_path / "fresh-state")}
    first, second = run_cli("stats", "--json", env=env), run_cli("stats", "--json", env=env)
    assert "numba" in first["imported"]  # nothing remembered yet: computed the long way
    assert second["imported"] == []
    assert (json.loads(first["stdout"])["current_fingerprint"]
            == json.loads(second["stdout"])["current_fingerprint"])


READ_ONLY_COMMANDS = [
    ["--help"], ["dir"], ["stats"], ["stats", "--json"], ["list", "--limit", "10"],
    ["list", "--json"], ["verify"], ["prune", "--max-size", "1G", "--dry-run"],
    ["clear", "--stale", "--yes"], ["startup", "status"],
]


@pytest.mark.parametrize("argv", READ_ONLY_COMMANDS, ids=" ".join)
def test_commands_that_read_the_store_import_neither_numba_nor_pytensor(argv, store_with_entries):
    run_cli("fingerprint", env=store_with_entries)  # remembers this environment's fingerprint
    result = run_cli(*argv, env=store_with_entries)
    assert result["status"] in (0, None), result
    assert result["imported"] == [], f"numba-cache {' '.join(argv)} imported {result['imported']}"


def test_show_export_and_import_import_neither_numba_nor_pytensor(tmp_path, store_with_entries):
    run_cli("fingerprint", env=store_with_entries)
    listed = json.loads(run_cli("list", "--json", env=store_with_entries)["stdout"])["entries"]
    assert listed
    show = run_cli("show", listed[0]["key"][:12], env=store_with_entries)
    archive = tmp_path / "cache.tar.gz"
    export = run_cli("export", str(archive), env=store_with_entries)
    target = store_with_entries | {"NBCACHE_DIR": str(tmp_path / "other")}
    imported = run_cli("import", str(archive), env=target)
    for name, result in (("show", show), ("export", export), ("import", imported)):
        assert result["status"] in (0, None), (name, result)
    assert show["imported"] == [] and export["imported"] == []
    # An import into a new store round-trips a tiny kernel first (numba), once per store.
    again = run_cli("import", str(archive), env=target)
    assert again["status"] in (0, None) and again["imported"] == [], again


@pytest.mark.parametrize("env", [
    {}, {"NUMBA_CPU_NAME": "generic"}, {"PYTENSOR_FLAGS": "floatX=float32"},
    {"NUMBA_OPT": "1"},
], ids=["default", "cpu-generic", "floatX", "numba-opt"])
def test_the_remembered_fingerprint_is_the_computed_one(env, tmp_path):
    result = run_python("""
        import json
        from numba_cache.keys.remembered import environment_token, this_environment
        first, again = this_environment(), this_environment()
        from numba_cache.keys.fingerprint import current_fingerprint
        print(json.dumps({"remembered": [first.digest, again.digest], "token": environment_token(),
                          "computed": current_fingerprint().digest}))
    """, env | {"XDG_STATE_HOME": str(tmp_path)})
    assert result["remembered"] == [result["computed"]] * 2


def test_every_setting_the_fingerprint_reads_changes_the_token(tmp_path):
    tokens = run_python("""
        import json, os
        from numba_cache.keys.remembered import environment_token
        tokens = [environment_token()]
        for name, value in [("NUMBA_CPU_NAME", "generic"), ("NUMBA_OPT", "1"),
                            ("PYTENSOR_FLAGS", "floatX=float32")]:
            os.environ[name] = value
            tokens.append(environment_token())
        print(json.dumps({"tokens": tokens}))
    """, {"XDG_STATE_HOME": str(tmp_path)})["tokens"]
    assert len(set(tokens)) == len(tokens)


def test_importing_numba_cache_imports_neither_numba_nor_pytensor():
    result = run_python(f"""
        import json, sys
        import numba_cache
        print(json.dumps({{"imported": [m for m in {COMPILER_MODULES!r} if m in sys.modules]}}))
    """)
    assert result["imported"] == []


@pytest.mark.parametrize("order", ["numba_cache first", "pytensor first"])
def test_the_mode_is_registered_whichever_is_imported_first(order):
    imports = ["numba_cache", "pytensor"] if order == "numba_cache first" else ["pytensor", "numba_cache"]
    result = run_python(f"""
        import json
        import {imports[0]}
        import {imports[1]}
        from pytensor.compile.mode import get_mode, predefined_linkers
        from numba_cache.integration.linker import NumbaCacheLinker
        print(json.dumps({{"mode": type(get_mode("NUMBA_CACHE").linker).__name__,
                          "linker": type(predefined_linkers["numba_cache"]).__name__,
                          "active": numba_cache.is_active()}}))
    """)
    assert result["mode"] == result["linker"] == "NumbaCacheLinker"
    assert result["active"] is False


def test_the_environment_switch_takes_effect_when_pytensor_is_imported_later():
    result = run_python("""
        import json, sys
        import numba_cache
        before = "pytensor" in sys.modules
        import pytensor
        from pytensor.compile.mode import get_mode
        print(json.dumps({"before": before, "active": numba_cache.is_active(),
                          "numba": type(get_mode("NUMBA").linker).__name__}))
    """, {"NBCACHE_ACTIVATE": "1"})
    assert result == result | {"before": False, "active": True, "numba": "NumbaCacheLinker"}


@pytest.mark.parametrize("first_import", [
    "from numba_cache.keys.graph import describe_graph",
    "from numba_cache.integration.linker import NumbaCacheLinker",
    "import numba_cache.kernels.protocol.cache",
])
def test_a_first_import_of_a_module_that_imports_pytensor_still_registers_and_activates(first_import):
    result = run_python(f"""
        import json, warnings
        warnings.simplefilter("error")
        {first_import}
        import numba_cache
        from pytensor.compile.mode import get_mode
        print(json.dumps({{"mode": type(get_mode("NUMBA_CACHE").linker).__name__,
                          "numba": type(get_mode("NUMBA").linker).__name__,
                          "active": numba_cache.is_active()}}))
    """, {"NBCACHE_ACTIVATE": "1"})
    assert result == result | {"mode": "NumbaCacheLinker", "numba": "NumbaCacheLinker", "active": True}
    assert "numba_cache:" not in result["stderr"]


def test_every_name_the_package_offers_loads():
    result = run_python("""
        import json
        import numba_cache
        loaded = {name: type(getattr(numba_cache, name)).__name__ for name in numba_cache.__all__}
        print(json.dumps({"loaded": loaded, "dir": sorted(set(numba_cache.__all__) - set(dir(numba_cache)))}))
    """)
    assert set(result["loaded"]) >= {"activate", "deactivate", "NumbaCacheLinker", "session_stats"}
    assert result["dir"] == []
