"""The generated thunk: same outputs, storage and errors as PyTensor's own numba thunk."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.raise_op import Assert

from numba_cache.codegen.thunk import thunk_source


def test_thunk_source_names_every_cell_and_constant():
    source = thunk_source(inputs=2, hidden=1, outputs=2)
    assert "outputs = kernel(i0[0], i1[0], h0)" in source
    assert "o0[0], o1[0], = outputs" in source
    compile(source, "<test>", "exec")  # valid Python for every arity, none included
    compile(thunk_source(inputs=0, hidden=0, outputs=1), "<test>", "exec")


def _compile_both(inputs, outputs, **kwargs):
    return [pytensor.function(inputs, outputs, mode=mode, **kwargs) for mode in ("NUMBA_CACHE", "NUMBA")]


def test_outputs_with_hidden_constants_and_updates_match_numba_mode():
    x = pt.vector("x")
    data = np.linspace(0.0, 1.0, 64)  # large enough to be a hidden argument
    counter = pytensor.shared(np.float64(0.0), name="counter")
    outputs = [(x[:, None] * data).sum(), pt.exp(x), x.shape[0]]
    ours, builtin = _compile_both([x], outputs, updates={counter: counter + x.sum()})
    values = np.arange(3.0)
    for _ in range(2):  # the second call reuses the output storage
        for mine, theirs in zip(ours(values), builtin(values), strict=True):
            np.testing.assert_array_equal(mine, theirs)
    ours.trust_input = True
    np.testing.assert_array_equal(ours(values)[1], np.exp(values))
    assert counter.get_value() == 5 * values.sum()  # two calls each, and one trusted call


def test_a_failing_kernel_raises_like_numba_mode():
    x = pt.vector("x")
    checked = Assert("x must be positive")(x, pt.all(x > 0))
    errors = []
    for function in _compile_both([x], [pt.log(checked)]):
        assert function(np.ones(2))[0].tolist() == [0.0, 0.0]
        with pytest.raises(AssertionError) as raised:
            function(-np.ones(2))
        errors.append(raised.value)
    ours, builtin = errors
    assert str(ours) == str(builtin)
    assert "x must be positive" in str(ours)
    # PyTensor's raise_with_op names the node that failed in the notes it adds.
    assert getattr(ours, "__notes__", None) and ours.__notes__ == builtin.__notes__


def test_a_function_without_outputs_runs():
    counter = pytensor.shared(np.float64(1.0), name="counter")
    function = pytensor.function([], [], updates={counter: counter * 2}, mode="NUMBA_CACHE")
    function()
    assert counter.get_value() == 2.0


def test_scan_inner_graph_is_baked_as_in_numba_mode():
    """PyTensor picks inner-graph rewrites by linker class: ours must get numba's.

    As a plain ``JITLinker`` it got the C/VM Scan rewrite, whose inner graph lacks
    numba's inplace (the AR(1) step allocated four more arrays per iteration).
    """
    from pytensor.link.numba.linker import NumbaLinker
    from pytensor.scan.op import Scan

    from numba_cache.evaluation.models import ar1_model

    model = ar1_model(observations=10)

    def inner_destroy_maps(function):
        [scan] = [node.op for node in function.maker.fgraph.toposort() if isinstance(node.op, Scan)]
        return [(str(node.op), node.op.destroy_map) for node in scan.fgraph.toposort()]

    ours, builtin = _compile_both(model.inputs, model.outputs)
    assert isinstance(ours.maker.linker, NumbaLinker)
    assert inner_destroy_maps(ours) == inner_destroy_maps(builtin)
    assert any(destroy_map for _, destroy_map in inner_destroy_maps(ours))
    for mine, theirs in zip(ours(*model.point), builtin(*model.point), strict=True):
        # The outer toposorts differ, and fastmath reassociates: last-bit differences.
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
