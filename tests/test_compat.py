"""Every upstream seam (numba_cache/_compat): its check passes on the installed versions, which
are versions it was written for; the TensorConstant.data patch exists only while rewriting.

A check that fails here means numba, PyTensor or nutpie moved something numba_cache
relies on: numba_cache turns itself off (numba and PyTensor seams, see
tests/test_settings_in_use.py) or stops recognising nutpie's wrappers until the seam
is brought up to date. And where numba_cache cannot see (no memory map to tell an
address from a number), it fails closed.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from helpers import run_python
from pytensor.tensor.variable import TensorConstant

from numba_cache import _compat
from numba_cache.kernels import probes

SEAMS = _compat.all_seams(with_nutpie=True) + probes.PROBES


def test_every_upstream_is_a_version_its_seams_were_written_for():
    for seam in SEAMS:
        version = _compat.installed_version(seam.upstream)
        assert _compat.is_written_for(version, seam.written_for), (
            f"{seam.upstream} {version} is not a version {seam.name} was written for "
            f"({seam.written_for}): check the seam, then add the version")


@pytest.mark.parametrize("seam", SEAMS, ids=[f"{s.upstream}: {s.name}" for s in SEAMS])
def test_the_seam_is_where_numba_cache_looks(seam):
    assert _compat.problems([seam]) == []


def test_the_checks_a_vouch_leaves_to_run_compile_nothing():
    """A vouch (numba_cache/store/tier_notes.py) skips only the seams marked ``compiles``: in a
    fresh process, the others compile nothing and leave numba's runtime uninitialised."""
    result = run_python("""
        import json
        from numba_cache import _compat
        from numba_cache._compat import numba_internals
        from numba_cache.kernels import probes
        from numba_cache.evaluation.compile_events import count_numba_compiles
        with count_numba_compiles() as cheap:
            found = _compat.problems(_compat.all_seams())
        runtime = numba_internals.runtime_initialized()
        with count_numba_compiles() as costly:
            found += _compat.problems(probes.PROBES)
        print(json.dumps({"found": found, "cheap": cheap, "runtime": runtime, "costly": costly}))
    """)
    assert result["found"] == []
    assert result["cheap"] == [] and result["runtime"] is False
    assert "self_test.<locals>.probe" in result["costly"]


def test_a_seam_check_that_fails_is_reported_with_what_moved():
    moved = _compat.Seam("probe", "numba", ("0.68",), "tests",
                         lambda: _compat.require(False, "the probe is gone"))
    [problem] = _compat.problems([moved])
    assert problem.startswith("numba ") and "moved probe" in problem and "the probe is gone" in problem


def test_a_call_function_made_otherwise_fails_its_seam(monkeypatch):
    """call_reusing_slots repeats the steps of numba's call_function: another fails it."""
    from numba.core import callconv

    def call_function(self, builder, callee, resty, argtys, args, attrs=None):
        raise NotImplementedError

    [seam] = [seam for seam in SEAMS if seam.name.startswith("CPUCallConv.call_function")]
    assert _compat.problems([seam]) == []
    monkeypatch.setattr(callconv.CPUCallConv, "call_function", call_function)
    [problem] = _compat.problems([seam])
    assert "no longer makes a call as call_reusing_slots repeats it" in problem


def test_an_error_propagated_otherwise_fails_its_seam(monkeypatch):
    """propagate_unless_ok returns a failed call's error as numba's return_status_propagate
    does: a propagation that, say, returns inside try blocks too fails its seam."""
    from numba.core import callconv

    def return_status_propagate(self, builder, status):
        excptr = self._get_excinfo_argument(builder.function)
        builder.store(status.excinfoptr, excptr)
        self._return_errcode_raw(builder, status.code)

    [seam] = [seam for seam in SEAMS if seam.name.startswith("CPUCallConv.return_status_propagate")]
    assert _compat.problems([seam]) == []
    monkeypatch.setattr(callconv.CPUCallConv, "return_status_propagate", return_status_propagate)
    [problem] = _compat.problems([seam])
    assert "no longer returns a call's error as propagate_unless_ok does" in problem
    assert "builder.if_then(builder.not_(trystatus.in_try))" in problem


def test_the_data_property_is_installed_only_while_rewriting(tmp_path, monkeypatch):
    """numba_cache watches data reads through a property on TensorConstant.data while it
    rewrites; before and after, the class is PyTensor's own."""
    seen = []
    original = _compat.tensor_constant_data.reads_seen_by

    def recording(getter):
        seen.append(isinstance(TensorConstant.__dict__.get("data"), property))
        return original(getter)

    monkeypatch.setattr(_compat.tensor_constant_data, "reads_seen_by", recording)
    monkeypatch.setenv("NBCACHE_DIR", str(tmp_path))
    assert "data" not in TensorConstant.__dict__
    x = pt.dvector("x")
    data = np.linspace(1.0, 2.0, 40)  # large enough to be observed data
    function = pytensor.function([x], (x[:, None] * data).sum(), mode="NUMBA_CACHE")
    assert seen == [False], "a rewrite was not watched, or the property was already there"
    assert "data" not in TensorConstant.__dict__, "the property outlived the rewrite"
    assert function(np.ones(2)) == pytest.approx(2 * data.sum())


def test_without_a_memory_map_any_integer_in_address_range_counts_as_baked(monkeypatch):
    """Where /proc/self/maps is missing, the baked-address scan fails closed."""
    from numba_cache.kernels.outcomes import uncacheable

    llvm_ir = "store i64 {value}, ptr %x"
    address = 0x7F00_0000_1000
    monkeypatch.setattr(uncacheable.sys, "platform", "darwin")
    assert uncacheable.baked_address(llvm_ir.format(value=address)) == address
    assert uncacheable.baked_address(llvm_ir.format(value=123_456_789)) is None


def _rebuilds(value, source) -> bool:
    """Whether the llvmlite `value` is `source` put back together member by member
    (an ``insertvalue`` chain over undef of ``extractvalue``s of it, nested alike)."""
    from llvmlite import ir

    if value is source:
        return True
    members = {}
    while isinstance(value, ir.InsertValue):
        aggregate, element = value.operands
        members.setdefault(tuple(value.indices), element)
        value = aggregate
    if not (isinstance(value, ir.Constant) and value.constant is ir.Undefined
            and set(members) == {(index,) for index in range(len(source.type.elements))}):
        return False
    for indices, element in members.items():
        origins = {id(origin): origin for origin in _extracts_of(element, source)}
        if len(origins) != 1:
            return False
        [origin] = origins.values()
        if tuple(origin.indices) != indices or not _rebuilds(element, origin):
            return False
    return True


def _extracts_of(value, source):
    """The ``extractvalue`` instructions of `source` that `value` is made of."""
    from llvmlite import ir

    if isinstance(value, ir.ExtractValue) and value.operands[0] is source:
        yield value
    elif isinstance(value, ir.Instruction):
        for operand in value.operands:
            yield from _extracts_of(operand, source)


@pytest.mark.parametrize("numba_type", ["float64[:]", "int64[:, :, ::1]", "UniTuple(intp, 3)",
                                        "float32", "boolean", "Optional(float64)", "shifted"])
def test_a_value_is_used_as_returned_only_where_numba_would_rebuild_it_unchanged(numba_type):
    """call_reusing_slots skips numba's conversion of a returned value where
    ``returned_as_held`` says it gives the value back unchanged (an array's members
    rebuilt one by one). Checked against what numba's conversion emits: it must
    rebuild the value exactly wherever the shortcut is taken; and the shortcut must
    still be taken for arrays, or large graph kernels grow by a quarter. "shifted" is
    an extension's model whose conversion changes the value without changing its type."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.datamodel import models
    from numba.core.registry import cpu_target

    from numba_cache._compat.numba_internals import returned_as_held

    class Shifted(models.IntegerModel):
        def from_return(self, builder, value):
            return builder.add(value, ir.Constant(value.type, 1))

    manager = cpu_target.target_context.data_model_manager
    if numba_type == "shifted":
        numba_type = types.int64
        model = Shifted(manager, numba_type)
    else:
        numba_type = eval(numba_type, vars(types))
        model = manager[numba_type]
    function = ir.Function(ir.Module(), ir.FunctionType(model.get_value_type(),
                                                        [model.get_return_type()]), "f")
    builder = ir.IRBuilder(function.append_basic_block())
    [returned] = function.args
    converted = model.from_return(builder, returned)
    shortcut = returned_as_held(model) and returned.type == model.get_value_type()
    if shortcut:
        assert _rebuilds(converted, returned)
    if isinstance(numba_type, types.Array | types.UniTuple):
        assert shortcut, "numba's data models moved: returned arrays are rebuilt again"


def test_every_fact_pytensor_caches_on_a_constant_is_known():
    """The facts PyTensor derives from a constant's values and keeps on it are set aside
    while a rewrite is watched (``_compat/tensor_constant_data.py``); one of a kind not
    known makes every rewrite over that constant data-bound. Ask PyTensor every question
    it caches the answer of, and check that what it left is known."""
    from pytensor.assumptions.core import CONSTANT_INFER_REGISTRY
    from pytensor.tensor.rewriting import subtensor

    from numba_cache._compat.tensor_constant_data import unknown_facts

    square = pt.as_tensor(np.eye(40))
    index = pt.as_tensor(np.arange(40))
    for constant in (square, index):
        constant.unique_value  # noqa: B018 - cached on first read
        for infer in CONSTANT_INFER_REGISTRY.values():
            infer(constant)
    subtensor._constant_is_arange(index)
    subtensor._constant_has_unique_indices(index)
    subtensor._constant_indices_jointly_unique([index, index])
    assert unknown_facts(square) == [] and unknown_facts(index) == []
