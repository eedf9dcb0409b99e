"""One switch: after activate(), every way PyTensor resolves a numba mode compiles through
numba_cache with all of its levels; deactivate() gives PyTensor back exactly what it had.

The seam tests fail loudly when PyTensor moves a name activation replaces.
"""

from __future__ import annotations

import json

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from helpers import run_python, without_op_loads
from pytensor.compile import mode as mode_module
from pytensor.compile.maker import FunctionMaker
from pytensor.compile.mode import Mode, get_default_mode, get_mode
from pytensor.link.numba.linker import NumbaLinker

import numba_cache
from numba_cache.integration import activation
from numba_cache.integration.linker import NumbaCacheLinker
from numba_cache.rewritten.rewrite_cache import CachedRewriteFunctionMaker


def pytensor_seams() -> list:
    """Every object activation may replace, as PyTensor holds it now."""
    return [
        mode_module.predefined_linkers["numba"],
        mode_module.predefined_modes["NUMBA"],
        mode_module.fast_run_linkers_to_mode["numba"],
        mode_module.NUMBA,
    ]


@pytest.fixture
def activated():
    numba_cache.activate()
    yield
    numba_cache.deactivate()


def test_pytensor_still_has_the_seams_activation_replaces():
    """If PyTensor renames or moves any of these, activation would silently reach nothing."""
    linker, numba_mode, fast_run_mode, module_global = pytensor_seams()
    assert type(linker) is NumbaLinker
    assert numba_mode is module_global is fast_run_mode
    assert isinstance(mode_module._CACHED_RUNTIME_MODES, dict)
    assert [(namespace is vars(mode_module), name) for namespace, name in activation._SEAMS] == [
        (False, "numba"), (False, "NUMBA"), (False, "numba"), (True, "NUMBA")]
    assert isinstance(Mode.__dict__["function_maker"], property)
    # get_mode resolves FAST_RUN and the default mode through these names.
    pytensor.config.linker, before = "numba", pytensor.config.linker
    try:
        assert get_mode("FAST_RUN") is module_global
    finally:
        pytensor.config.linker = before


def every_numba_mode() -> dict:
    """Each way a user, PyMC or nutpie reaches a numba mode."""
    numba_mode = get_mode("NUMBA")
    return {
        "NUMBA": numba_mode,
        "FAST_RUN": get_mode("FAST_RUN"),
        "default": get_default_mode(),
        "Mode(linker='numba')": Mode(linker="numba", optimizer="fast_run"),
        "PyMC's rebuild": Mode(linker=numba_mode.linker, optimizer=numba_mode.provided_optimizer),
        "including": numba_mode.including("local_remove_all_assert"),
        "excluding": numba_mode.excluding("fusion"),
    }


def test_activation_reaches_every_numba_mode_and_deactivation_restores_pytensor(activated):
    for name, mode in every_numba_mode().items():
        assert isinstance(mode.linker, NumbaCacheLinker), name
        assert mode.function_maker is CachedRewriteFunctionMaker, name
    numba_cache.activate()  # idempotent: the originals are kept once
    numba_cache.deactivate()
    for name, mode in every_numba_mode().items():
        assert type(mode.linker) is NumbaLinker, name
        assert mode.function_maker is FunctionMaker, name
    numba_cache.deactivate()
    assert not numba_cache.is_active()


def test_deactivate_gives_back_the_very_objects_it_replaced():
    before = pytensor_seams()
    numba_cache.activate()
    assert all(now is not then for now, then in zip(pytensor_seams(), before, strict=True))
    numba_cache.deactivate()
    assert all(now is then for now, then in zip(pytensor_seams(), before, strict=True))


def test_modes_rebuilt_around_our_linker_keep_the_rewrite_level_without_activation():
    mode = numba_cache.numba_cache_mode()
    for rebuilt in (Mode(linker=mode.linker, optimizer="fast_run"), mode.clone(),
                    mode.including("fast_run"), mode.excluding("fusion")):
        assert rebuilt.function_maker is CachedRewriteFunctionMaker
    assert Mode(linker="py").function_maker is FunctionMaker
    assert get_mode("NUMBA").function_maker is FunctionMaker


def test_an_activated_default_mode_function_loads_from_the_store_in_a_fresh_process(tmp_path):
    code = """
    import json, numpy as np, pytensor, pytensor.tensor as pt
    import numba_cache
    from numba_cache.evaluation.compile_events import count_numba_compiles
    x = pt.dvector("x")
    with count_numba_compiles() as compiles:
        f = pytensor.function([x], [pt.exp(x).sum(), pt.grad(pt.exp(x).sum(), x)])
        values = f(np.linspace(0, 1, 5))
    print(json.dumps({"values": [np.asarray(v).tolist() for v in values],
                      "compiles": len(compiles), "stats": dict(numba_cache.session_stats())}))
    """
    env = {"NBCACHE_ACTIVATE": "1", "NBCACHE_DIR": str(tmp_path / "store")}
    cold, warm = run_python(code, env), run_python(code, env)
    assert cold["stats"].get("rewrite.miss") == 1 and cold["compiles"] > 0
    assert without_op_loads(warm["stats"]) == {"rewrite.hit": 1, "graph.hit": 1} and warm["compiles"] == 0
    assert warm["values"] == cold["values"]
    off = run_python(code, {"NBCACHE_DIR": str(tmp_path / "other")})
    assert off["stats"] == {}, "without the setting, the default mode is PyTensor's"


def test_a_bad_activation_setting_warns_and_leaves_pytensor_alone(tmp_path):
    code = """
    import json, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import numba_cache
        import pytensor  # the setting is read once PyTensor is in (numba_cache waits for it)
    print(json.dumps({"active": numba_cache.is_active(), "said": [str(w.message) for w in caught]}))
    """
    result = run_python(code, {"NBCACHE_ACTIVATE": "perhaps"})
    assert result["active"] is False
    assert any("NBCACHE_ACTIVATE" in said for said in result["said"]), result["said"]


# The jitted function handed out: numba code calls the graph by its inputs (nutpie does)


@pytest.fixture(scope="module")
def data_function():
    """A function with a data constant large enough to be a hidden argument of its kernel."""
    x = pt.dvector("x")
    data = np.linspace(-1.0, 1.0, 64)
    cost = (pt.exp(x[:, None] * data) * data).sum() + pt.log1p(x ** 2).sum()
    return pytensor.function([x], [cost, pt.grad(cost, x)], mode="NUMBA_CACHE")


def test_the_jitted_function_takes_the_graph_inputs_and_gives_the_kernels_bits(data_function):
    x = np.linspace(0.1, 0.7, 6)
    expected = data_function(x)
    jitted = data_function.vm.jit_fn

    @numba.njit
    def caller(values):
        return jitted(values)

    for got in (jitted(x), caller(x)):
        assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
                   for a, b in zip(got, expected, strict=True))


def test_a_cfunc_calls_the_stored_kernel_without_linking_it(data_function):
    """nutpie's shape of use: a cfunc around vm.jit_fn. Its module declares the kernel and
    never defines it, so the graph is not optimised again and runs the stored bits."""
    jitted = data_function.vm.jit_fn
    signature = numba.types.float64(numba.types.CPointer(numba.types.float64), numba.types.intp)

    def logp(pointer, size):
        return jitted(numba.carray(pointer, (size,)))[0][()]

    wrapper = numba.cfunc(signature)(logp)
    x = np.linspace(0.1, 0.7, 6)
    pointer = x.ctypes.data_as(wrapper.ctypes.argtypes[0])
    assert wrapper.ctypes(pointer, 6) == data_function(x)[0]
    kernels = {result.fndesc.mangled_name for result in jitted.kernel.overloads.values()}
    functions = wrapper._library._final_module.functions
    assert kernels & {f.name for f in functions if f.is_declaration}
    assert not kernels & {f.name for f in functions if not f.is_declaration}, "kernel linked in"


# The startup hook: NBCACHE_ACTIVATE=1 in processes that never import numba_cache


STARTUP_CHILD = """
import json, site, sys
site.addsitedir({directory!r})  # what Python does with site-packages at start
before = [name for name in ("pytensor", "numba") if name in sys.modules]
report = {{"imported_before_pytensor": before}}
if {use_pytensor}:
    import numpy as np, pytensor, pytensor.tensor as pt
    x = pt.dvector("x")
    f = pytensor.function([x], pt.exp(x).sum())
    report["value"] = float(f(np.ones(3)))
    report["active"] = "numba_cache" in sys.modules and sys.modules["numba_cache"].is_active()
    report["stats"] = dict(sys.modules["numba_cache"].session_stats()) if report["active"] else {{}}
print(json.dumps(report))
"""


def test_the_startup_hook_activates_processes_that_never_import_numba_cache(tmp_path):
    from numba_cache.cli import main

    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    assert main(["startup", "install", "--site-packages", str(site_dir)]) == 0

    def child(activate: str | None, use_pytensor: bool = True) -> dict:
        env = {"NBCACHE_DIR": str(tmp_path / "store")}
        env |= {"NBCACHE_ACTIVATE": activate} if activate is not None else {}
        code = STARTUP_CHILD.format(directory=str(site_dir), use_pytensor=use_pytensor)
        return run_python(code, env)

    cold, warm = child("1"), child("1")
    assert cold["active"] and cold["stats"].get("graph.miss") == 1
    assert warm["active"] and without_op_loads(warm["stats"]) == {"rewrite.hit": 1, "graph.hit": 1}
    assert warm["value"] == cold["value"] == pytest.approx(3 * np.e)
    assert child("0")["active"] is False and child(None)["active"] is False
    # Until PyTensor is imported, the hook imports neither PyTensor nor numba.
    assert child("1", use_pytensor=False) == {"imported_before_pytensor": [], "stderr": ""}

    assert main(["startup", "remove", "--site-packages", str(site_dir)]) == 0
    assert child("1")["active"] is False


def test_startup_status_and_bad_input(tmp_path, capsys):
    from numba_cache.cli import main

    assert main(["startup", "status", "--json", "--site-packages", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["installed"] is False
    assert main(["startup", "install", "--json", "--site-packages", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["installed"] is True
    assert main(["startup", "--site-packages", str(tmp_path)]) == 0
    assert "NBCACHE_ACTIVATE=1" in capsys.readouterr().out
    assert main(["startup", "install", "--site-packages", str(tmp_path / "missing")]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "missing is not a directory" in said


def test_the_startup_hook_reads_the_setting_as_settings_does():
    from numba_cache import settings
    from numba_cache.integration import startup

    assert set(startup.TRUE_WORDS) == settings._TRUE
