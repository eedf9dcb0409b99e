"""Property: random small graphs, compiled through random store states in fresh processes,
give NUMBA's values (and Python mode's, loosely)."""

from __future__ import annotations

import json

import store_states
from helpers import run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_states import differences

UNARY = ("exp", "tanh", "square", "cumsum", "centre", "flip")
BINARY = ("add", "mul", "sub", "maximum", "switch", "set_slice", "concat_head")

#: Builds the graph of RECIPE (a list of [op, argument positions] steps over x and y),
#: its outputs the last value and the gradient of its sum with respect to x.
CHILD = """
import json, numpy as np, pytensor, pytensor.tensor as pt
from pytensor.compile.mode import Mode
import numba_cache

UNARY = {
    "exp": lambda a: pt.exp(a * 0.1), "tanh": pt.tanh, "square": lambda a: a ** 2,
    "cumsum": pt.cumsum, "centre": lambda a: a - a.sum(), "flip": lambda a: a[::-1],
}
BINARY = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
    "maximum": pt.maximum, "switch": lambda a, b: pt.switch(a > 0, a, b),
    "set_slice": lambda a, b: pt.set_subtensor(a[1:3], b[:2]),
    "concat_head": lambda a, b: pt.concatenate([a, b])[2:8],
}

def build():
    x, y = pt.vector("x", shape=(6,)), pt.vector("y", shape=(6,))
    values = [x, y]
    for op, arguments in RECIPE:
        table = UNARY if op in UNARY else BINARY
        values.append(table[op](*[values[i % len(values)] for i in arguments]))
    last = values[-1]
    gradient = pt.grad(last.sum(), x, disconnected_inputs="ignore")
    return [x, y], [last, gradient]

def evaluate(mode):
    inputs, outputs = build()
    function = pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")
    point = [np.linspace(-1, 1, 6), np.linspace(0.5, -0.7, 6)]
    return {"graph": [np.asarray(v).tolist() for v in function(*point)]}

result = {"values": evaluate("NUMBA_CACHE"), "stats": dict(numba_cache.session_stats())}
if REFERENCE:
    result["numba"] = evaluate("NUMBA")
    result["python"] = evaluate(Mode(linker="py", optimizer="fast_run"))
print(json.dumps(result))
"""

step = st.one_of(
    st.tuples(st.sampled_from(UNARY), st.lists(st.integers(0, 20), min_size=1, max_size=1)),
    st.tuples(st.sampled_from(BINARY), st.lists(st.integers(0, 20), min_size=2, max_size=2)),
)
level_state = st.sampled_from(("present", "missing", "damaged"))
store_state = st.fixed_dictionaries({kind: level_state for kind in ("rewrite", "graph", "op")})


def compile_in_child(recipe, root, reference: bool) -> dict:
    code = f"RECIPE = {json.dumps(recipe)}\nREFERENCE = {reference}\n" + CHILD
    return run_python(code, {"NBCACHE_DIR": str(root)})


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recipe=st.lists(step, min_size=2, max_size=7), state=store_state)
def test_random_graphs_through_random_store_states(recipe, state, tmp_path_factory):
    root = tmp_path_factory.mktemp("random") / "store"
    cold = compile_in_child(recipe, root, reference=True)
    for kind, level in state.items():
        {"present": lambda *_: 0, "missing": store_states.remove,
         "damaged": store_states.damage}[level](root, {kind})
    again = compile_in_child(recipe, root, reference=False)
    for report in (cold, again):
        assert differences(report["values"], cold["numba"]) == [], (recipe, state)
    assert differences(cold["numba"], cold["python"], rtol=1e-7) == [], recipe
