"""Keys: stable across processes, independent of names and order, sensitive to content."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from helpers import run_python
from pytensor.graph.fg import FunctionGraph

from numba_cache.keys.fingerprint import Fingerprint, current_fingerprint
from numba_cache.keys.graph import describe_graph
from numba_cache.keys.kernels import graph_kernel_key

KEY_OF_RADON = """
import json, pytensor
import numba_cache
from numba_cache.keys import current_fingerprint
from numba_cache.keys.kernels import graph_kernel_key
from numba_cache.evaluation.models import radon_model
model = radon_model()
function = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")
key = graph_kernel_key(function.maker.fgraph, current_fingerprint())
print(json.dumps({"key": key.digest}))
"""


def test_graph_key_is_identical_across_processes_with_different_hash_seeds(tmp_path):
    env = {"NBCACHE_DISABLE": "1"}
    keys = {run_python(KEY_OF_RADON, env | {"PYTHONHASHSEED": seed})["key"] for seed in ("0", "1", "4242")}
    assert len(keys) == 1


def graph_key(outputs, inputs):
    return describe_graph(FunctionGraph(inputs, outputs, clone=True)).digest


def test_graph_key_ignores_variable_names_and_creation_order():
    x, y = pt.vector("x"), pt.vector("y")
    first = pt.exp(x) + pt.log(y)
    a, b = pt.vector("other"), pt.vector("names")
    log_b = pt.log(b)  # created before exp(a): another creation order
    second = pt.exp(a) + log_b
    assert graph_key([first], [x, y]) == graph_key([second], [a, b])


def test_graph_key_changes_with_input_order():
    x, y = pt.vector("x"), pt.vector("y")
    assert graph_key([x - y], [x, y]) != graph_key([x - y], [y, x])


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda x: x * 2.0 + 1.0, id="constant-value"),
        pytest.param(lambda x: x * pt.constant(3, dtype="int64"), id="constant-dtype"),
        pytest.param(lambda x: x.astype("float32") * 3.0, id="dtype"),
        pytest.param(lambda x: x.sum(axis=1), id="op-property"),
    ],
)
def test_graph_key_changes_with_content(changed):
    x = pt.matrix("x")
    base = graph_key([x * 3.0], [x])
    assert graph_key([changed(x)], [x]) != base


def test_graph_key_changes_with_static_shape():
    x = pt.matrix("x")
    fixed = pt.matrix("x", shape=(2, 3))
    assert graph_key([x * 3.0], [x]) != graph_key([fixed * 3.0], [fixed])


def test_constant_arrays_are_keyed_by_content_not_identity():
    x = pt.vector("x")
    data = np.arange(5.0)
    same = graph_key([x + pt.as_tensor(data)], [x])
    assert graph_key([x + pt.as_tensor(data.copy())], [x]) == same
    changed = data.copy()
    changed[3] += 1e-12
    assert graph_key([x + pt.as_tensor(changed)], [x]) != same


def test_inner_graphs_are_part_of_the_key():
    from pytensor.compile.builders import OpFromGraph

    a = pt.vector("a")
    x = pt.vector("x")
    times_two = OpFromGraph([a], [a * 2])
    times_three = OpFromGraph([a], [a * 3])
    assert graph_key([times_two(x)], [x]) != graph_key([times_three(x)], [x])


def test_every_fingerprint_component_changes_the_key():
    x = pt.vector("x")
    fgraph = FunctionGraph([x], [pt.exp(x)], clone=True)
    fingerprint = current_fingerprint()
    base = graph_kernel_key(fgraph, fingerprint).digest
    for name, value in fingerprint.components.items():
        changed = Fingerprint.from_components(fingerprint.components | {name: f"{value}-other"})
        assert graph_kernel_key(fgraph, changed).digest != base, name


def test_fingerprint_names_the_environment():
    components = current_fingerprint().components
    for name in ("python", "numba", "llvmlite", "numpy", "scipy", "pytensor", "cpu_name",
                 "cpu_features", "pytensor_numba__fastmath", "numba_opt", "format_version"):
        assert name in components


def test_fastmath_flag_changes_the_fingerprint():
    from pytensor import config

    with config.change_flags(numba__fastmath=True):
        on = current_fingerprint().digest
    with config.change_flags(numba__fastmath=False):
        off = current_fingerprint().digest
    assert on != off


@pytest.mark.parametrize("name, value", [("BOUNDSCHECK", 1), ("OPT", 1), ("LOOP_VECTORIZE", 0),
                                         ("SLP_VECTORIZE", 1), ("DEBUGINFO_DEFAULT", 1),
                                         ("LLVM_REFPRUNE_PASS", 0)])
def test_a_numba_setting_changed_in_python_changes_the_fingerprint(name, value, monkeypatch):
    from numba.core import config as numba_config

    before = current_fingerprint().digest
    monkeypatch.setattr(numba_config, name, value)
    assert current_fingerprint().digest != before
    monkeypatch.undo()
    assert current_fingerprint().digest == before


BOUNDS_CHECKED_LATE = """
import json, sys
import numba, numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
y = pt.vector("y")
pytensor.function([y], pt.exp(y), mode="NUMBA_CACHE")(np.ones(2))  # the fingerprint is made
numba.config.BOUNDSCHECK = {late}
x, i = pt.vector("x"), pt.lvector("i")
function = pytensor.function([x, i], x[i], mode="NUMBA_CACHE")
try:
    function(np.arange(5.0), np.array([1, 7]))
    raised = None
except Exception as error:
    raised = type(error).__name__
print(json.dumps({{"raised": raised, "stats": dict(numba_cache.session_stats())}}))
"""


@pytest.mark.slow
def test_kernels_compiled_after_a_numba_setting_changed_are_not_served_without_it(private_store):
    """numba compiles under numba.config as it is at each compile: a process that turns
    bounds checking on after its first compile stores checked kernels, which a process
    without it must not be served (it would raise where NUMBA does not)."""
    checked = run_python(BOUNDS_CHECKED_LATE.format(late=1))
    assert checked["raised"] == "IndexError"  # NUMBA raises too, under the setting
    plain = run_python(BOUNDS_CHECKED_LATE.format(late=None))
    assert plain["raised"] is None, plain
    # the first graph, compiled before the change, is served; the checked one is not
    assert plain["stats"].get("graph.hit") == 1 and plain["stats"].get("graph.miss") == 1, plain


@pytest.mark.filterwarnings("ignore:A Supervisor feature is missing")
@pytest.mark.parametrize("family", sorted(__import__("graph_families").FAMILIES))
def test_rewritten_family_graphs_are_described_without_pickle_fallbacks(family):
    """Pickles depend on process state (auto-names, memo order): no PyTensor op should need one."""
    import json

    from graph_families import FAMILIES
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import graph_inputs

    from numba_cache import numba_cache_mode
    from numba_cache.keys.graph import describe_op

    _, outputs, _, _ = FAMILIES[family]()
    inputs = [v for v in graph_inputs(outputs) if not isinstance(v, Constant)]
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    numba_cache_mode().optimizer.rewrite(fgraph)
    for node in fgraph.toposort():
        description = json.dumps(describe_op(node.op))
        assert '"pickle"' not in description, (str(node.op), description[:300])


def op_key(make_output, *input_types):
    from numba_cache.keys.kernels import op_kernel_key

    inputs = [input_type() for input_type in input_types]
    node = make_output(*inputs).owner
    return op_kernel_key(node, "pytensor-key", current_fingerprint()).digest


def test_op_key_ignores_static_lengths_other_than_one():
    """numba compiles per dtype and rank; PyTensor's key carries any length its code reads."""
    five, seven = pt.TensorType("float64", shape=(5,)), pt.TensorType("float64", shape=(7,))
    unknown = pt.TensorType("float64", shape=(None,))
    assert op_key(pt.exp, five) == op_key(pt.exp, seven) == op_key(pt.exp, unknown)


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(pt.TensorType("float64", shape=(1,)), id="known-to-be-one"),
        pytest.param(pt.TensorType("float32", shape=(5,)), id="dtype"),
        pytest.param(pt.TensorType("float64", shape=(5, 5)), id="rank"),
    ],
)
def test_op_key_changes_with_what_kernel_code_depends_on(other):
    five = pt.TensorType("float64", shape=(5,))
    assert op_key(pt.exp, five) != op_key(pt.exp, other)


def test_values_are_described_through_their_class_mro_abc_registrations_named():
    """The description dispatch walks a class's MRO (no ABC subclass walks): a mapping is
    described alike whatever its class, a subclass takes its base's handler, and a handler
    registered later is used from then on."""
    import types
    from collections import OrderedDict

    from numba_cache.keys.canonical import ByClass, canonical

    plain = {"b": 1, "a": (2.0, None)}
    assert canonical(types.MappingProxyType(plain)) == canonical(plain)
    assert canonical(OrderedDict(reversed(list(plain.items())))) == canonical(plain)
    assert canonical(np.float64(1.5))[0] == "scalar"  # np.generic before float in its MRO

    class Base:
        pass

    class Derived(Base):
        pass

    describe = ByClass(lambda value: "default")
    assert describe(Derived()) == "default"
    describe.register(Base)(lambda value: "base")
    assert describe(Derived()) == "base" and describe(3) == "default"


USER_OP = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import register_funcify_default_op_cache_key
import numba_cache

class MyOp(Op):
    __props__ = ("k",)
    def __init__(self, k):
        self.k = k
    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])
    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] * {factor} + self.k

@register_funcify_default_op_cache_key(MyOp)
def numba_funcify_my_op(op, node=None, **kwargs):
    k = op.k
    @numba_basic.numba_njit
    def kernel(x):
        return x * {factor} + k
    return kernel

x = pt.dvector("x")
function = pytensor.function([x], pt.exp(MyOp(1.0)(x)) + 1, mode="{mode}")
print(json.dumps({{"values": function(np.arange(3.0)).tolist(),
                  "stats": dict(numba_cache.session_stats())}}))
"""


@pytest.mark.slow
def test_a_users_op_converted_by_other_code_is_not_served_the_first_kernel(private_store,
                                                                           tmp_path):
    """PyTensor keys an op registered with register_funcify_default_op_cache_key by its
    class name and props: the same MyOp with its kernel fixed (x * 2 to x * 3) had the
    same keys. Its conversion's code is part of the op's description now."""
    def run(factor: float, mode: str = "NUMBA_CACHE") -> dict:
        flags = {"PYTENSOR_FLAGS": f"base_compiledir={tmp_path / f'{mode}-{factor}'}"}
        return run_python(USER_OP.format(factor=factor, mode=mode), flags)

    first = run(2.0)
    fixed = run(3.0)
    assert fixed["stats"].get("graph.miss") == 1, fixed["stats"]
    assert fixed["values"] == run(3.0, "NUMBA")["values"] != first["values"]
    assert run(3.0)["stats"].get("graph.hit") == 1  # and the fixed one is served


def test_pytensors_own_ops_are_described_without_conversion_code():
    """Their conversions are PyTensor's, pinned by its version: keys stay as they were,
    whether or not the dispatch is imported."""
    import pytensor
    import pytensor.link.numba.dispatch  # noqa: F401 - its registries, filled

    from numba_cache.evaluation.models import gp_model, radon_model
    from numba_cache.keys.foreign_code import conversion_code_digest

    ops = []
    for model in (radon_model(), gp_model()):
        function = pytensor.function(model.inputs, model.outputs, mode="NUMBA")
        ops += [node.op for node in function.maker.fgraph.apply_nodes]
    assert len(ops) > 50 and [op for op in ops if conversion_code_digest(op)] == []


def test_pytensors_conversion_registries_are_where_foreign_code_reads_them():
    """If PyTensor moves or renames one, a user's conversion would go unkeyed again."""
    import importlib
    from functools import singledispatch

    from numba_cache.keys.foreign_code import CONVERSION_REGISTRIES

    for module, name in CONVERSION_REGISTRIES:
        registry = getattr(importlib.import_module(module), name)
        assert hasattr(registry, "dispatch") and hasattr(registry, "register"), name
        assert type(registry) is type(singledispatch(lambda value: None)), name
