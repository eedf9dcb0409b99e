"""End to end: a cold process compiles and persists, a fresh process compiles nothing."""

from __future__ import annotations

import os

import pytest
from helpers import run_python, without_op_loads

COMPILE_RADON = """
import json, os, time
import numpy as np
import pytensor
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.evaluation.models import radon_model
from numba_cache.store import index

index_writes = []
write_transaction = index._write_transaction
def counted(connection):
    index_writes.append(1)
    return write_transaction(connection)
index._write_transaction = counted

model = radon_model()
with count_numba_compiles() as compiles:
    function = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")
    logp, gradient = function(*model.point)
print(json.dumps({
    "compiles": len(compiles),
    "stats": dict(numba_cache.session_stats()),
    "index_writes": len(index_writes),
    "logp": float(logp),
    "gradient": gradient.tolist(),
}))
"""


def test_second_process_loads_everything_and_compiles_nothing(tmp_path, private_store):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {"TMPDIR": str(tmpdir)}
    cold = run_python(COMPILE_RADON, env)
    warm = run_python(COMPILE_RADON, env)

    assert cold["compiles"] > 0 and cold["stats"]["graph.miss"] == 1
    assert warm["compiles"] == 0
    assert without_op_loads(warm["stats"]) == {"rewrite.hit": 1, "graph.hit": 1}
    assert warm["logp"] == cold["logp"] and warm["gradient"] == cold["gradient"]
    # Each compile phase records the uses of what it loaded in one write.
    loads = sum(warm["stats"].values())
    assert loads > 10 and warm["index_writes"] <= 3, warm
    # Generated source never goes to the temp directory (PyTensor leaves one file per function).
    assert os.listdir(tmpdir) == []


def test_a_variant_graph_reuses_the_kernels_of_its_known_ops(private_store):
    """A dataset of other sizes: another graph key, yet op kernels are hits (level 2),
    the fused ones holding the constants the sizes changed included
    (tests/test_lifted_constants.py), and so is its graph function, found by its code
    (the sizes reach it in a pack): nothing is compiled."""
    run_python(COMPILE_RADON)
    variant = run_python(COMPILE_RADON.replace(
        "radon_model()", "radon_model(groups=12, observations=150)"))
    stats = variant["stats"]
    assert "graph.miss" not in stats and stats["graph_by_code.hit"] == 1
    assert stats.get("op.miss", 0) == 0 and stats["op.hit"] > 10
    assert variant["compiles"] == 0


BUILTIN_NUMBA = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
from numba_cache.evaluation.compile_events import count_numba_compiles

def builtin():
    x = pt.vector("x")
    with count_numba_compiles() as compiles:
        f = pytensor.function([x], pt.exp(x).sum() * 3, mode="NUMBA")
        value = float(f(np.arange(3.0)))
    return value, len(compiles)

before = builtin()
import numba_cache
x = pt.vector("x")
ours = float(pytensor.function([x], pt.exp(x).sum() * 3, mode="NUMBA_CACHE")(np.arange(3.0)))
after = builtin()
print(json.dumps({"before": before, "after": after, "ours": ours}))
"""


def test_builtin_numba_mode_keeps_working_and_hitting_its_own_cache(tmp_path):
    env = {"PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}"}
    first = run_python(BUILTIN_NUMBA, env)
    second = run_python(BUILTIN_NUMBA, env)
    expected = 3 * sum(2.718281828459045**i for i in range(3))
    for run in (first, second):
        assert abs(run["before"][0] - expected) < 1e-9
        assert run["after"][0] == run["before"][0] == run["ours"]
    assert first["before"][1] > 0
    # A fresh process compiles the built-in NUMBA graph from PyTensor's own cache.
    assert second["before"][1] == 0


LENGTHS = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache

vectors = [pt.vector(f"x{n}", shape=(n,)) for n in (3, 5, 8)]
output = pt.add(*[(pt.exp(x) * 2.0).sum() for x in vectors])
function = pytensor.function(vectors, output, mode="NUMBA_CACHE")
values = [np.linspace(-1, 1, n) for n in (3, 5, 8)]
print(json.dumps({
    "value": float(function(*values)),
    "expected": float(sum((np.exp(v) * 2.0).sum() for v in values)),
    "stats": dict(numba_cache.session_stats()),
}))
"""


def test_nodes_differing_only_in_static_lengths_share_one_op_kernel(private_store):
    """Three terms over vectors of 3, 5 and 8 elements: one op kernel, right values."""
    result = run_python(LENGTHS)
    assert result["value"] == pytest.approx(result["expected"], rel=1e-12)
    print(result["stats"])
    assert result["stats"]["op.reused"] >= 2
    again = run_python(LENGTHS)
    assert again["value"] == result["value"]
    assert without_op_loads(again["stats"]) == {"rewrite.hit": 1, "graph.hit": 1}


READS_CONSTANT = """
import json
import numba, numpy as np, pytensor, pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
import numba_cache

conversions = []


class ScaleBy(Op):
    # x * k, its numba code baking in k, a constant input, and keying on its value.

    __props__ = ()

    def make_node(self, x, k):
        return Apply(self, [x, pt.as_tensor(k)], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] * inputs[1]


@register_funcify_and_cache_key(ScaleBy)
def _scale_by(op, node, **kwargs):
    k = float(node.inputs[1].data)
    conversions.append(k)

    @numba.njit
    def scale_by(x, _):
        return x * k

    return scale_by, f"ScaleBy times {k!r}"


x, y = pt.dvector("x"), pt.dvector("y")
output = ScaleBy()(x, 2.0) + ScaleBy()(y, 2.0) + ScaleBy()(x, 3.0)
function = pytensor.function([x, y], output, mode="NUMBA_CACHE")
print(json.dumps({
    "value": function(np.ones(2), np.full(2, 10.0)).tolist(),
    "conversions": conversions,
    "stats": dict(numba_cache.session_stats()),
}))
"""


def test_a_conversion_reading_a_constant_is_done_once_per_value(private_store):
    """A graph converts a node like one before it (same op, types and constant values)
    only once; a node differing in a constant's value, which the conversion may read,
    is converted on its own: 1*2 + 10*2 + 1*3, not 1*2 + 10*2 + 1*2."""
    result = run_python(READS_CONSTANT)
    assert result["value"] == [25.0, 25.0]
    assert sorted(result["conversions"]) == [2.0, 3.0]  # in the order NUMBA runs the nodes
    assert result["stats"]["op.reused"] == 1, result["stats"]  # ScaleBy(y, 2.0) served by ScaleBy(x, 2.0)


BUILT_UNDER_OTHER_FLAGS = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache

values = np.tile(np.array([1e16, 1.0, -1e16, 1.0]), 256)  # fastmath reassociates this sum
with pytensor.config.change_flags(numba__fastmath=False):
    x = pt.dvector("x")
    function = pytensor.function([x], [pt.sum(x * 1.0000001), pt.cumsum(x)], mode="{mode}")
total = float(function(values)[0])  # called after the block
print(json.dumps({{"total": total, "stats": dict(numba_cache.session_stats())}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("second", [{"NBCACHE_VERIFY_HITS": "1"}, {"NBCACHE_MAX_SIZE": "40K"}],
                         ids=["a hit verified", "op kernels evicted"])
def test_a_function_built_under_other_flags_compiles_at_its_first_call_under_them(
        second, private_store, tmp_path):
    """What a first call compiles (a verified hit, an op kernel no longer stored) is
    compiled under the flags the function was built and keyed under, not those of the
    call: else fastmath code is stored under the fastmath-off key."""
    env = {"NBCACHE_COMPILE_AHEAD": "0"} | (
        {"NBCACHE_MAX_SIZE": "40K"} if "NBCACHE_MAX_SIZE" in second else {})
    numba = run_python(BUILT_UNDER_OTHER_FLAGS.format(mode="NUMBA"),
                       {"PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'numba'}"})
    first = run_python(BUILT_UNDER_OTHER_FLAGS.format(mode="NUMBA_CACHE"), env)
    lazily = run_python(BUILT_UNDER_OTHER_FLAGS.format(mode="NUMBA_CACHE"), env | second)
    later = run_python(BUILT_UNDER_OTHER_FLAGS.format(mode="NUMBA_CACHE"), env)
    assert numba["total"] == first["total"] == lazily["total"] == later["total"], (
        numba, first, lazily, later)
    compiled_lazily = ("verify.same", "links:unmet")
    assert any(counter in lazily["stats"] for counter in compiled_lazily), lazily["stats"]
    assert "verify.differs" not in lazily["stats"]
