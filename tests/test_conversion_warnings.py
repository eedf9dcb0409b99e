"""What a compile tells the user, numba_cache tells at the same moment as PyTensor's NUMBA.

The built-in converts every op inside ``pytensor.function()``: that is where it
warns that an op will run in object mode, and where an unconvertible op raises.
Each case runs in fresh processes, with ``NUMBA`` and then with ``NUMBA_CACHE``
cold and warm (the warm process replays the warnings stored with the graph's
entry); what is warned or raised while building, and while calling, must be the
same. PyTensor's own tests of this (tests/link/numba/test_blockwise.py) run
through numba_cache verbatim, under ``filterwarnings("error")`` as they do there.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_python

CASES = """
import warnings
import numba
import numpy as np, pytensor, pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_funcify, register_funcify_default_op_cache_key
from pytensor.scalar.basic import ScalarOp
from pytensor.tensor.basic import ARange
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.variable import TensorVariable


class PerformOnly(ScalarOp):
    \"\"\"A scalar op with only a perform method: numba runs it in object mode.\"\"\"

    nin = nout = 1

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        out = inputs[0] + 1
        if isinstance(node.outputs[0], TensorVariable):  # used as a Blockwise core op
            out = np.asarray(out)
        outputs[0][0] = out


class Unconvertible(Op):
    __props__ = ()

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] + 1


@numba_funcify.register(Unconvertible)
def _unconvertible(op, node, **kwargs):
    raise NotImplementedError("Unconvertible has no numba implementation")


class WarnsOnConversion(Op):  # a cacheable op whose conversion warns: a hit must say it again

    __props__ = ()

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] * 3


@register_funcify_default_op_cache_key(WarnsOnConversion)
def _warns_on_conversion(op, node, **kwargs):
    warnings.warn("WarnsOnConversion converts through a slow path", RuntimeWarning)

    @numba.njit
    def times_three(x):
        return x * 3

    return times_three


class Slope:  # a value whose repr is its address: another in every process
    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is Slope and other.value == self.value

    def __hash__(self):
        return hash(self.value)


class PerformHolding(Op):  # an object-mode op whose text holds an address
    __props__ = ("slope",)

    def __init__(self, slope):
        self.slope = slope

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] * self.slope.value


#: PyTensor flags a case is compiled under: without a compiler, fusion stops at 32 operands
#: and warns while rewriting.
FLAGS = {"over_the_operand_limit": {"cxx": ""}}


def case(name):
    \"\"\"(inputs, outputs, arguments) of a case.\"\"\"
    if name == "over_the_operand_limit":
        xs = [pt.dvector(f"x{i}") for i in range(40)]
        return xs, pt.exp(sum(pt.sin(x) for x in xs)), [np.full(2, 0.01 * i) for i in range(40)]
    if name == "blockwise_arange":
        x = pt.tensor(shape=(3,), dtype="int64")
        out = Blockwise(core_op=ARange(dtype="int64"), signature="(),(),()->(a)")(0, x, 1)
        return [x], out, [np.array([5, 5, 5])]
    x = pt.dvector("x")
    if name == "perform_only_elemwise":
        return [x], Elemwise(PerformOnly())(x) * 2, [np.zeros(3)]
    if name == "perform_only_blockwise":
        return [x], Blockwise(PerformOnly(), signature="()->()")(x), [np.zeros(3)]
    if name == "unconvertible":
        return [x], Unconvertible()(x) * 2, [np.ones(2)]
    if name == "warns_cacheable":
        return [x], WarnsOnConversion()(pt.exp(x)).sum(), [np.ones(2)]
    if name == "warns_cacheable_twice":  # two nodes alike: converted once, told twice
        return [x], WarnsOnConversion()(pt.exp(x)).sum() + WarnsOnConversion()(x).sum(), [np.ones(2)]
    if name == "plain":
        return [x], pt.exp(x).sum(), [np.ones(2)]
    if name == "perform_holding_an_object":
        return [x], PerformHolding(Slope(2.0))(x) * 2, [np.ones(2)]
    raise ValueError(name)
"""

CHILD = CASES + """
import json, re, sys
mode = sys.argv[1]
if mode == "NUMBA_CACHE":
    import numba_cache

def said(caught):  # an object's address differs from process to process
    return [[w.category.__name__, re.sub(" at 0x[0-9a-f]+", "", str(w.message))] for w in caught]

report = {}
for name in sys.argv[2:]:
    inputs, outputs, arguments = case(name)
    result = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with pytensor.config.change_flags(**FLAGS.get(name, {})):
                fn = pytensor.function(inputs, outputs, mode=mode)
        except Exception as error:
            result["build_error"] = [type(error).__name__, str(error)]
    result["build"] = said(caught)
    if "build_error" not in result:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result["value"] = np.asarray(fn(*arguments)).tolist()
        result["call"] = said(caught)
    report[name] = result
if mode == "NUMBA_CACHE":
    report["stats"] = dict(numba_cache.session_stats())
print(json.dumps(report))
"""

NAMES = ("blockwise_arange", "perform_only_elemwise", "perform_only_blockwise", "unconvertible",
         "warns_cacheable", "warns_cacheable_twice", "plain", "perform_holding_an_object",
         "over_the_operand_limit")


def run(mode: str, store) -> dict:
    code = f"import sys; sys.argv = ['child', {mode!r}, *{list(NAMES)!r}]\n" + CHILD
    return run_python(code, {"NBCACHE_DIR": str(store)})


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    store = tmp_path_factory.mktemp("warnings") / "store"
    return {"NUMBA": run("NUMBA", store), "cold": run("NUMBA_CACHE", store),
            "warm": run("NUMBA_CACHE", store), "store": store}


@pytest.mark.parametrize("name", NAMES)
def test_numba_cache_warns_and_raises_where_numba_does(name, reports):
    expected = reports["NUMBA"][name]
    for run_name in ("cold", "warm"):
        got = reports[run_name][name]
        assert got == expected, (run_name, got, expected)


def test_the_reference_says_something_for_each_case_but_the_plain_one(reports):
    """The comparison above is only worth something if NUMBA speaks at build time."""
    numba = reports["NUMBA"]
    assert all("object mode" in message for name in NAMES[:3] for _, message in numba[name]["build"])
    assert all(numba[name]["build"] for name in NAMES[:3])
    assert numba["unconvertible"]["build_error"][0] == "NotImplementedError"
    assert numba["warns_cacheable"]["build"] == [
        ["RuntimeWarning", "WarnsOnConversion converts through a slow path"]]
    assert numba["warns_cacheable_twice"]["build"] == 2 * numba["warns_cacheable"]["build"]
    assert numba["plain"] == {"build": [], "value": numba["plain"]["value"], "call": []}
    assert "object mode" in numba["perform_holding_an_object"]["build"][0][1]
    assert numba["over_the_operand_limit"]["build"] == [["UserWarning", "Loop fusion failed "
                                                         "because the resulting node would "
                                                         "exceed the kernel argument limit."]]


def test_the_warm_process_replays_from_the_store(reports):
    """The cacheable graphs (warns_cacheable, warns_cacheable_twice, plain,
    over_the_operand_limit) hit in the warm process, so their warnings came from the store,
    the fusion's from the rewritten graph's entry; the graphs with object-mode ops are
    compiled fresh, as before. Every graph's rewrite is restored: an op whose text holds
    an address (perform_holding_an_object) included."""
    warm, cold = reports["warm"]["stats"], reports["cold"]["stats"]
    assert warm.get("graph.hit") == 4 and warm.get("graph.miss", 0) == 0, warm
    assert warm.get("uncacheable:contains-uncacheable") == 4, warm  # their stored markers
    assert warm.get("rewrite.hit") == len(NAMES) and "rewrite.miss" not in warm, warm
    assert "corrupt" not in warm, warm
    # Cold: eight graphs compiled (the unconvertible one raised before), four of them uncacheable.
    assert cold.get("graph.miss") == 8 and cold.get("uncacheable:contains-uncacheable") == 4, cold


def test_object_mode_ops_show_where_users_look(reports):
    """'Why is my warm model slow?': list and stats name the ops that run in object mode."""
    from helpers import run_cli as numba_cache_cli

    env = {"NBCACHE_DIR": str(reports["store"])}
    listed = json.loads(numba_cache_cli("list", "--json", env=env).stdout)
    object_mode = [e for e in listed["entries"] if e["reason"] == "object-mode-op"]
    summaries = [e["summary"] for e in object_mode]
    assert any("ARange" in s for s in summaries) and any("PerformOnly" in s for s in summaries), \
        [e["summary"] for e in listed["entries"]]
    graphs = [e for e in listed["entries"] if e["kind"] == "graph" and not e["cacheable"]]
    assert len(graphs) == 4 and all(e["reason"] == "contains-uncacheable" for e in graphs)
    stats = json.loads(numba_cache_cli("stats", "--json", env=env).stdout)
    assert stats["counters"]["uncacheable:object-mode-op"] >= 3


PYTENSOR_TESTS = """
import warnings
import numpy as np, pytest, pytensor
from pytensor import function
import numba_cache
""" + CASES + """
from pytensor.tensor import vector
from pytensor.tensor import tensor

warnings.simplefilter("error")  # pytestmark = pytest.mark.filterwarnings("error")

# test_non_square_blockwise, with mode="NUMBA_CACHE"
x = tensor(shape=(3,), dtype="int64")
out = Blockwise(core_op=ARange(dtype="int64"), signature="(),(),()->(a)")(0, x, 1)
with pytest.warns(UserWarning, match="Numba will use object mode"):
    fn = function([x], out, mode="NUMBA_CACHE")
np.testing.assert_allclose(fn([5, 5, 5]), np.broadcast_to(np.arange(5), (3, 5)))
with pytest.raises(ValueError):
    fn([3, 4, 5])

# test_blockwise_vs_elemwise_scalar_op, with mode="NUMBA_CACHE" (its op, PerformOnly here)
x = vector("x")
y = Elemwise(PerformOnly())(x)
with pytest.warns(UserWarning, match="Numba will use object mode to run PerformOnly's perform"):
    fn = function([x], y, mode="NUMBA_CACHE")
np.testing.assert_allclose(fn(np.zeros((3,))), [1, 1, 1])
z = Blockwise(PerformOnly(), signature="()->()")(x)
with pytest.warns(UserWarning, match="Numba will use object mode to run PerformOnly's perform"):
    fn = function([x], z, mode="NUMBA_CACHE")
np.testing.assert_allclose(fn(np.zeros((3,))), [1, 1, 1])
print('{"passed": true}')
"""


def test_pytensors_own_tests_pass_through_numba_cache_cold_and_warm(tmp_path):
    env = {"NBCACHE_DIR": str(tmp_path / "store")}
    for _ in ("cold", "warm"):
        assert run_python(PYTENSOR_TESTS, env)["passed"]
